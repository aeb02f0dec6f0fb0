"""A migration's stage and whole-run ETA (console/migration_progress.py), pure: read off
what the run recorded, never ahead of the work; unknown parts make the ETA unknown."""

from __future__ import annotations

import datetime as dt

import pytest

from zonesync.console.migration_progress import estimate, stage, text
from zonesync.migrate.store import Migration

NOW = dt.datetime(2026, 11, 28, 12, 0, 0)
USUAL = {"verify": 20.0, "cutover": 2.0, "release": 5.0}


def _run(mode: str = "plan1", phase: str = "preflight", position: str | None = None, **moments) -> Migration:
    return Migration(id=1, run_id="r", be_type="tenant", be_id="7", source_zone="a", target_zone="b", mode=mode,
                     les_json='[["tenant", "7"]]', reason="r", actor="t", status="running", phase=phase,
                     stop_version=None, stop_published_at=moments.get("stop"), stopped_at=None, position_json=position,
                     flip_version=None, flipped_at=None, lift_version=None, lifted_at=moments.get("lift"), detail=None,
                     created_at=NOW, updated_at=NOW, finished_at=None)  # fmt: skip


HALF = {"done": 2, "total": 4, "rows": 2000, "rate_rows_s": 500.0, "eta_s": 4.0}
ALL = {"done": 4, "total": 4, "rows": 4000, "rate_rows_s": 500.0, "eta_s": None}


@pytest.mark.parametrize(
    ("run", "stock", "verify", "expected"),
    [(_run(), None, False, "stock"), (_run(), HALF, False, "stock"), (_run(), ALL, True, "verify"),
     (_run(phase="checked"), ALL, True, "gate"), (_run(phase="stopped"), ALL, True, "cutover"),
     (_run(phase="synced"), ALL, True, "cutover"), (_run(phase="flipping"), ALL, True, "cutover"),
     (_run(phase="lifted"), ALL, True, "release"), (_run(phase="rolling_back"), HALF, False, "rollback"),
     (_run("plan2"), None, False, "preflight"), (_run("plan2", "stopped"), HALF, False, "stock"),
     (_run("plan2", "stopped"), ALL, False, "cutover"),
     (_run("plan2", "stopped", position='["b.1", 4]'), None, False, "cutover")],
)  # fmt: skip
def test_the_stage_is_what_the_run_recorded(run, stock, verify, expected):
    assert stage(run, stock, verify) == expected


def test_the_eta_adds_the_stages_chunks_to_the_usual_later_stages():
    eta, note = estimate(_run(), NOW, "stock", HALF, USUAL)
    assert eta == pytest.approx(4.0 + 20.0 + 2.0 + 5.0)
    assert note == (
        "median of the last 20 succeeded plan1 migrations for the later stages (not counting the gate's wait)"
    )
    stopped = _run(phase="stopped", stop=NOW - dt.timedelta(seconds=0.5))
    assert estimate(stopped, NOW, "cutover", None, USUAL)[0] == pytest.approx(1.5 + 5.0)
    late = _run(phase="stopped", stop=NOW - dt.timedelta(seconds=9))  # longer than usual: never negative
    assert estimate(late, NOW, "cutover", None, USUAL)[0] == pytest.approx(5.0)
    eta, note = estimate(_run("plan2", "stopped"), NOW, "stock", HALF, {**USUAL, "verify": None})
    assert eta == pytest.approx(4.0 + 2.0 + 5.0) and "gate" not in note  # plan2 has no verify check or gate


def test_an_unknown_part_leaves_the_eta_unknown_and_says_which():
    assert estimate(_run(), NOW, "stock", {**HALF, "eta_s": None}, USUAL) == (None, "ETA unknown: no stock rate yet")
    no_cutovers = {**USUAL, "cutover": None}
    assert estimate(_run(), NOW, "stock", HALF, no_cutovers) == (None, "ETA unknown: no past cutovers yet")
    assert estimate(_run("plan2"), NOW, "preflight", None, USUAL) == (None, "ETA unknown: no stock rate yet")
    assert estimate(_run(phase="rolling_back"), NOW, "rollback", None, USUAL) == (None, "no ETA while rollback")


def test_the_status_line():
    p = {"stage": "stock", "stage_no": 2, "stages": ["preflight", "stock", "verify", "gate", "cutover", "release"],
         "done": 2, "total": 4, "rows": 2000, "rate_rows_s": 500.0, "eta_s": 31.0, "eta_note": "median"}  # fmt: skip
    assert text(p) == "stage 2/6 stock: 2/4 chunks, 2,000 rows, 500 rows/s; about 31 s left (median)"
    assert text({**p, "stage": "rollback", "stage_no": None, "total": None, "eta_s": None,
                 "eta_note": "no ETA while rollback"}) == "rollback; no ETA while rollback"  # fmt: skip
