"""A check's Great Expectations Data Docs from the console: its run links them, the API
serves the run's validation page and the site's files (a real site, built by the check's
own checkpoint code), nothing outside the site, and one line when there are none."""

from __future__ import annotations

import datetime as dt
import json
from urllib.parse import quote

import pytest

from tests.integration.console.conftest import PREFIX

pytestmark = pytest.mark.integration

T0 = dt.datetime(2037, 1, 3, 12, 0, 0)  # newer than any other test's runs


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A Data Docs site with two runs' validation pages (the check's checkpoint, on a
    chunk row that matches and one whose count differs)."""
    from spark_jobs import check_expectations

    project = tmp_path_factory.mktemp("gx")
    good = check_expectations.validate([("tenants", 0, "a", "match", 10, 10, 1, 0, True)], project,
                                       f"{PREFIX}docs-good")  # fmt: skip
    bad = check_expectations.validate([("tenants", 0, "b", "differ", 9, 10, 1, 0, False)], project,
                                      f"{PREFIX}docs-bad")  # fmt: skip
    assert good["success"] and not bad["success"] and good["data_docs"] == bad["data_docs"]
    return good["data_docs"]


def _check(meta, run_id: str, summary: dict | None, at: dt.datetime) -> None:
    meta.run("INSERT INTO checks (run_id, zones_json, tables_json, chunk_rows, actor, status, created_at, "
             "summary_json) VALUES (%s, '[]', '[\"tenants\"]', 1000, 'tester', 'succeeded', %s, %s)",
             (run_id, at, None if summary is None else json.dumps(summary)))  # fmt: skip


def test_a_checks_run_links_its_validation_page_served_from_the_site(api, meta, runs_cleanup, site):
    for k, name in enumerate(("docs-good", "docs-bad")):
        _check(meta, PREFIX + name, {"_expectations": {"success": name == "docs-good", "data_docs": site}},
               T0 + dt.timedelta(seconds=k))  # fmt: skip
    _check(meta, PREFIX + "docs-none", None, T0 + dt.timedelta(seconds=2))
    runs = {r["run_id"]: r for r in api.get("/api/v1/runs", params={"kind": "check", "limit": 3}).json()["runs"]}
    assert runs[PREFIX + "docs-none"]["data_docs_url"] is None
    assert runs[PREFIX + "docs-none"]["report_url"] == f"/zonesync/api/v1/checks/{PREFIX}docs-none?format=html"
    for name, verdict in (("docs-good", "Succeeded"), ("docs-bad", "Failed")):
        url = runs[PREFIX + name]["data_docs_url"]
        assert url == f"/zonesync/api/v1/checks/{quote(PREFIX + name, safe='')}/datadocs"
        page = api.get(url.removeprefix("/zonesync"))  # the run's own validation page, by its redirect
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html"), page.text[:300]
        assert f"validations/zonesync_consistency_check/{PREFIX}{name}/" in str(page.url)
        assert verdict in page.text and PREFIX + name in page.text
    index = api.get(f"/api/v1/checks/{PREFIX}docs-good/datadocs/index.html")
    assert index.status_code == 200 and "docs-bad" in index.text  # the site lists every run
    css = [p for p in ("static/styles/data_docs_default_styles.css",) if api.get(
        f"/api/v1/checks/{PREFIX}docs-good/datadocs/{p}").status_code == 200]  # fmt: skip
    assert css, "the site's own assets are served beside its pages"


def test_no_file_outside_the_site_and_one_line_without_docs(api, meta, runs_cleanup, site, tmp_path):
    _check(meta, PREFIX + "docs-good", {"_expectations": {"data_docs": site}}, T0)
    # gx/great_expectations.yml is a real file, three levels above the site
    for path in ("..%2F..%2F..%2Fgreat_expectations.yml", "%2Fetc%2Fpasswd", "nothing.html"):
        got = api.get(f"/api/v1/checks/{PREFIX}docs-good/datadocs/{path}")
        assert got.status_code == 404 and "in the Data Docs site" in got.json()["detail"], (path, got.text)
    _check(meta, PREFIX + "docs-none", {}, T0)
    got = api.get(f"/api/v1/checks/{PREFIX}docs-none/datadocs")
    assert got.status_code == 404 and got.json()["detail"] == (
        f"check {PREFIX}docs-none: no Data Docs: the check did not reach its Great Expectations step"
    )
    gone = (tmp_path / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html").as_uri()
    _check(meta, PREFIX + "docs-elsewhere", {"_expectations": {"data_docs": gone}}, T0)
    got = api.get(f"/api/v1/checks/{PREFIX}docs-elsewhere/datadocs")
    assert got.status_code == 404 and "not on this host (the site is on the worker" in got.json()["detail"]
    assert api.get("/api/v1/checks/no-such-check/datadocs").status_code == 404


def test_the_suite_name_is_the_checks_own():
    from spark_jobs import check_expectations
    from zonesync.check import data_docs

    assert data_docs.SUITE == check_expectations.SUITE
