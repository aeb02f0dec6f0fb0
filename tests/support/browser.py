"""Headless Chromium from Debian (`chromium`, installed by `make setup`), driven by
Playwright with the system browser: no browser download. Screenshots go to
build/test-artifacts/ (kept after the run; CI prints where)."""

from __future__ import annotations

import shutil
from contextlib import contextmanager
from pathlib import Path

ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "test-artifacts"
# as root and on a closed network: no sandbox, no GPU, nothing that calls home
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]  # fmt: skip


def chromium_path() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "no chromium on PATH: run `make setup` (it installs Debian's chromium)"
    return found


@contextmanager
def page(width: int = 1400, height: int = 1100):
    """A new page in a fresh headless Chromium; closed afterwards."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), headless=True, args=ARGS)
        try:
            yield browser.new_page(viewport={"width": width, "height": height})
        finally:
            browser.close()


def sign_in(pg, base_url: str, path: str, user: str, password: str) -> None:
    """Open `path`; Airflow sends a browser without its session to its login form: sign in
    there as a person does, and land back on `path`."""
    pg.goto(base_url + path)
    pg.get_by_label("Username").fill(user)
    pg.get_by_label("Password").fill(password)
    pg.get_by_role("button", name="Sign in").click()
    pg.wait_for_url(f"**{path}", timeout=60_000)


def screenshot(pg, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    out = ARTIFACTS / f"{name}.png"
    pg.screenshot(path=str(out), full_page=True)
    return out
