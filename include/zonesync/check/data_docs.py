"""A check's Great Expectations Data Docs, as the console links and serves them.

The check's job updates one Data Docs site per GX project (spark_jobs/check_expectations.py:
`<project>/gx/uncommitted/data_docs/local_site/`), and its result names the site's index
as a file:// URL, kept in the check's summary (`_expectations.data_docs`). Each run's
validation page is `validations/<suite>/<run id>/<run time>/<batch>.html` under the site.
The API serves the site's files from there (behind Airflow's authentication), so a person
opens a run's page from the console: only files inside the site, only from a site the
check recorded, and none when the api-server does not see the workers' disk (then the
answer names the address on the worker).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse

SUITE = "zonesync_consistency_check"  # check_expectations.SUITE (the Spark job's package is not imported here)
SITE_DIR = "local_site"


class DataDocsMissing(LookupError):
    """The check has no Data Docs, or they are not on this host: one line saying which."""


def site_root(url: str | None) -> Path:
    """The site's directory from the index URL a check recorded."""
    if not url:
        raise DataDocsMissing("no Data Docs: the check did not reach its Great Expectations step")
    parsed = urlparse(url)
    if parsed.scheme != "file" or not parsed.path.endswith(f"/{SITE_DIR}/index.html"):
        raise DataDocsMissing(f"Data Docs at {url}: not a local site this API can serve")
    root = Path(unquote(parsed.path)).parent
    if not (root / "index.html").is_file():
        raise DataDocsMissing(f"Data Docs at {url}: not on this host (the site is on the worker that ran the check)")
    return root


def run_page(root: Path, run_id: str) -> str:
    """The run's validation page, relative to the site (the newest, when the run's job ran
    more than once); the site's index when the run has none."""
    found = sorted((root / "validations" / SUITE / run_id).glob("*/*.html"))
    return found[-1].relative_to(root).as_posix() if found else "index.html"


def file_in_site(root: Path, rel: str) -> Path:
    """A file of the site by its relative path; never one outside it (.., links)."""
    target = (root / rel).resolve()
    if not target.is_relative_to(root.resolve()) or not target.is_file():
        raise DataDocsMissing(f"no file {rel!r} in the Data Docs site")
    return target
