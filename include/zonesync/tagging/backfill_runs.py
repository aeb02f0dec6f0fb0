"""A tag backfill's run in meta (table `backfills`): what the job planned and has done,
written by its driver after every wave, so the console and `zonesync runs` show its
progress with rate and ETA. The chunk marks that make it resumable stay in the zone
(zonesync.tag_backfill), committed with the tags; this row only reports.

A resumed run (the same run id) starts a new attempt in the same row: its rate counts
the rows since the attempt began, not the time the job was down.
"""

from __future__ import annotations

import json

from zonesync.meta.db import MetaConfig


class BackfillRuns:
    def __init__(self, meta: MetaConfig):
        self.meta = meta

    def start(self, run_id: str, zone: str, tables: list[str], chunks: int, done: int, rows_done: int,
              airflow_run_id: str | None = None) -> None:  # fmt: skip
        """The attempt begins: the plan (chunks of every table) and what earlier attempts did."""
        self.meta.run(
            "INSERT INTO backfills (run_id, airflow_run_id, zone, tables_json, chunks, chunks_done, rows_tagged, "
            "attempt_at, attempt_chunks, attempt_rows) VALUES (%s, %s, %s, %s, %s, %s, %s, NOW(6), %s, %s) "
            "ON DUPLICATE KEY UPDATE airflow_run_id = COALESCE(VALUES(airflow_run_id), airflow_run_id), "
            "tables_json = VALUES(tables_json), status = 'running', phase = 'tagging', chunks = VALUES(chunks), "
            "chunks_done = VALUES(chunks_done), rows_tagged = VALUES(rows_tagged), attempt_at = NOW(6), "
            "attempt_chunks = VALUES(chunks_done), attempt_rows = VALUES(rows_tagged), detail = NULL, "
            "finished_at = NULL",
            (run_id, airflow_run_id, zone, json.dumps(tables), chunks, done, rows_done, done, rows_done),
        )

    def wave(self, run_id: str, chunks: int, rows: int) -> None:
        """A wave committed: `chunks` more chunks done, `rows` more rows tagged."""
        self.meta.run(
            "UPDATE backfills SET chunks_done = chunks_done + %s, rows_tagged = rows_tagged + %s WHERE run_id = %s",
            (chunks, rows, run_id),
        )

    def finish(self, run_id: str, status: str, detail: str = "") -> None:
        self.meta.run(
            "UPDATE backfills SET status = %s, phase = 'done', detail = %s, finished_at = NOW(6) WHERE run_id = %s",
            (status, detail[:2000], run_id),
        )

    def get(self, run_id: str) -> dict | None:
        rows, _ = self.meta.run(
            "SELECT status, chunks, chunks_done, rows_tagged, attempt_chunks, attempt_rows, "
            "TIMESTAMPDIFF(MICROSECOND, attempt_at, updated_at) / 1e6 FROM backfills WHERE run_id = %s",
            (run_id,),
        )
        if not rows:
            return None
        status, chunks, done, rows_tagged, a_chunks, a_rows, seconds = rows[0]
        return {"status": status, **progress(chunks, done, rows_tagged, a_chunks, a_rows, seconds)}


def progress(chunks: int, done: int, rows: int, attempt_chunks: int, attempt_rows: int, seconds) -> dict:
    """done/total, rows, the latest attempt's rate (rows/s) and the ETA if the chunks left
    hold as many rows each as those done (pure)."""
    seconds = float(seconds or 0.0)
    moved = int(rows) - int(attempt_rows)
    rate = moved / seconds if seconds > 0 and moved > 0 else None
    per_chunk = int(rows) / int(done) if done else None
    left = int(chunks) - int(done)
    eta = left * per_chunk / rate if left > 0 and rate and per_chunk is not None else None
    return {"unit": "chunks", "done": int(done), "total": int(chunks), "rows": int(rows), "rate_rows_s": rate,
            "eta_s": eta, "attempt_chunks": int(attempt_chunks)}  # fmt: skip
