"""One table's consistency check (spark_jobs/consistency_check.py tells the protocol):
plan -> checksums -> settle -> rows, each phase re-reading what meta holds, so a
re-run of the same run id goes on where the last one stopped."""

from __future__ import annotations

import collections
import time
from concurrent.futures import ThreadPoolExecutor

from spark_jobs import check_rows
from spark_jobs.check_zones import compare, connect_zone, pair_summary, zone_numbers, zone_rows
from spark_jobs.copy_waves import Planner
from zonesync.check import diff as check_diff
from zonesync.check import narrow
from zonesync.check import report as check_report
from zonesync.check import sql as check_sql
from zonesync.check.store import DONE
from zonesync.copy import chunks as chunk_plan
from zonesync.copy.throttle import wait_for_lag
from zonesync.copy.verify import recently_deleted
from zonesync.events import pk_text


class TableCheck:
    """`start()` does what needs no Spark (the columns compared, the key, the planner's
    thread started: the job starts the first table's before its Spark session, so the
    plan is under way while the session comes up); `run(spark, endpoints)` the rest."""

    def __init__(self, args, zones: dict, store, check, table: str, log=print):
        self.args, self.zones, self.store, self.check, self.table, self.log = args, zones, store, check, table, log
        self.spark = self.endpoints = None  # set by run
        self.names = list(zones)
        self.nullable: set[str] | None = None  # set by _columns
        self.rechecked = 0  # chunks whose checksums differed and were looked at again once settled
        self.narrowed: dict | None = None  # the row look's sub-ranges (set by _narrow)
        self.zone_ids: dict[str, int] = {}  # every zone's id (set by start)
        self.conns: dict = {}
        self.columns: list[tuple[str, str]] | str = []  # a str: why the zones' tables cannot be compared
        self.key: list[str] = []
        self.planner: Planner | None = None
        # a restricted check (the switch's verify): the rows of some ZSIDs (both phases),
        # without those one zone wrote (the checksums; the row diff skips their keys)
        self.row_where: str | None = None  # the rows compared (a restricted check's)
        self.where: str | None = None
        self.plan_where: str | None = None  # the rows the chunks are planned over (all: None)

    def start(self) -> TableCheck:
        from zonesync.meta.store import MetaStore

        self.zone_ids = MetaStore(self.store.meta).zones()
        try:
            self.conns = {z: connect_zone(self.zones, z) for z in self.names}
            self.columns = self._columns(self.conns)
            if isinstance(self.columns, str):
                return self
            self.key = self._key(self.conns[self.names[0]])
            self._restrict()
            stored = self.store.chunks(self.check.run_id, self.table)
            self.planner = Planner(self.table, stored, chunk_plan.complete(stored), self._extend(self.key),
                                   lambda c: c["status"] == "pending", self.log)  # fmt: skip
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        if self.planner is not None:
            self.planner.close()
        for c in self.conns.values():
            c.close()
        self.conns = {}

    def run(self, spark, endpoints) -> dict:
        self.spark, self.endpoints = spark, endpoints
        try:
            if isinstance(self.columns, str):
                return self._finish([], schema=self.columns)
            columns, key = self.columns, self.key
            try:
                self._checksums(self.planner, columns, key)
            finally:
                self.planner.close()
            differ = [c for c in self.store.chunks(self.check.run_id, self.table) if c["status"] == "differ"]
            self.rechecked = len(differ)
            if differ:
                self._settle(self.conns)
                for i in range(0, len(differ), self.args.parallel):
                    self._wave(differ[i : i + self.args.parallel], columns, key)
                still = [c for c in self.store.chunks(self.check.run_id, self.table) if c["status"] == "differ"]
                if still:
                    self._rows(self.conns, still, columns, key)
            return self._finish(self.store.chunks(self.check.run_id, self.table))
        finally:
            self.close()

    # -- what is compared ------------------------------------------------------
    def _restrict(self) -> None:
        """The SQL of a restricted check's rows (None: every row): some ZSIDs' (a switch's
        verify), some entities' (a migration's), without a zone's writes."""
        rows = []
        if self.check.zsids or self.check.entities:
            from zonesync.meta.store import MetaStore

            found = MetaStore(self.store.meta).rules_at(self.check.rules_version)
            if found is None or self.table not in found[1].tables:
                raise SystemExit(f"--table {self.table}: no ZSID rule in rules v{self.check.rules_version}")
            rules = found[1]
            if self.check.zsids:
                rows.append(check_sql.zsid_predicate(rules.tables[self.table], rules.zsid_min, self.check.zsids))
            if self.check.entities:
                rows.append(check_sql.entity_predicate(rules.tables[self.table], self.check.entities))
        self.row_where = " AND ".join(rows) or None
        # a migration's verify plans its chunks over the entities' rows (their column's
        # index): its cost follows the entities, not the table
        self.plan_where = rows[-1] if self.check.entities and not self.check.zsids else None
        parts = list(rows)
        if self.check.exclude_origin is not None:
            parts.append(f"`_zs_origin` <> {int(self.check.exclude_origin)}")
        self.where = " AND ".join(parts) or None

    def _columns(self, conns) -> list[tuple[str, str]] | str:
        """The table's (column, type) pairs, the same in every zone (names, types and
        nullability: the row hash marks NULLs of the nullable columns only); else what
        differs. Sets self.nullable."""
        seen = {}
        for z, conn in conns.items():
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE FROM information_schema.COLUMNS "
                    "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s ORDER BY COLUMN_NAME",
                    (self.table,),
                )
                seen[z] = [(c, t.lower(), n) for c, t, n in cur.fetchall()]
            conn.commit()
        first = self.names[0]
        absent = [z for z, cols in seen.items() if not cols]
        if absent:
            return f"{self.table} is missing in zone {', '.join(absent)}"
        for z, cols in seen.items():
            if cols != seen[first]:
                only = sorted(set(cols) ^ set(seen[first]))
                return f"{self.table}'s columns differ between {first} and {z}: {only[:6]}"
        self.nullable = {c for c, _, n in seen[first] if n == "YES"}
        return [(c, t.split("(")[0].split(" ")[0]) for c, t, _ in seen[first]]

    def _key(self, conn) -> list[str]:
        with conn.cursor() as cur:
            cur.execute("SELECT DATABASE()")
            (db,) = cur.fetchone()
        key = chunk_plan.key_columns(conn, db, self.table)
        odd = [c for c, t in key if t not in chunk_plan.INTEGER_TYPES]
        if not key or odd:
            raise SystemExit(f"--table {self.table}: the check needs an integer primary key (has {key or 'none'})")
        return [c for c, _ in key]

    # -- 1. plan ---------------------------------------------------------------
    def _extend(self, key: list[str]):
        """The planner's work (copy_waves.Planner runs it on a thread while the first waves
        are checked): chunk bounds over the first zone's keys after the stored plan, each
        stored in meta as found. A chunk stored already (a job killed while its retry runs)
        keeps its bounds, and planning goes on from its upper one."""

        def extend(stored: list[dict], found) -> None:
            conn = connect_zone(self.zones, self.names[0])
            write = lambda n, lo, hi: self.store.add_chunk(self.check.run_id, self.table, n, lo, hi)  # noqa: E731
            try:
                for n, lo, hi in chunk_plan.plan_after(conn, self.table, key, self.check.chunk_rows, stored, write,
                                                       self.plan_where):  # fmt: skip
                    found({"table": self.table, "chunk": n, "lo": lo, "hi": hi, "status": "pending",
                           "rows_read": 0, "zones": {}, "done_at": None})  # fmt: skip
            finally:
                conn.close()

        return extend

    # -- 2. checksums ------------------------------------------------------------
    def _checksums(self, planner: Planner, columns, key) -> None:
        """Waves of chunks, two in flight: while one wave's last queries finish (leaving
        cores idle), the next one's start (measured: 13 waves of a 10M-row table, 1.4 s
        less). Each wave's numbers are stored as it ends; --stop-after runs one at a time."""
        depth = 1 if self.args.stop_after else 2
        done, running = 0, collections.deque()
        with ThreadPoolExecutor(max_workers=depth, thread_name_prefix="wave") as pool:
            while True:
                wave = planner.next_wave(self.args.parallel)
                if wave:
                    if self.args.max_lag_s:
                        wait_for_lag(self.store.meta, "", self.args.max_lag_s, self.log)
                    running.append(pool.submit(self._wave, wave, columns, key))
                if running and (len(running) >= depth or not wave):
                    running.popleft().result()
                    done += 1
                    self._progress(planning=not planner.finished)
                    if self.args.stop_after and done >= self.args.stop_after:
                        raise SystemExit(f"stopped after {done} waves (--stop-after)")
                if not wave and not running:
                    return

    def _wave(self, wave: list[dict], columns, key) -> None:
        """Every zone's numbers for the wave's chunks, compared and stored together."""
        ids = list(self.zone_ids.values())
        queries = [
            (f"{c['chunk']}:{z}", zi,
             check_sql.chunk_checksum(self.table, columns, key, c["lo"], c["hi"], ids, self.nullable, self.where))
            for c in wave
            for zi, z in enumerate(self.names)
        ]  # fmt: skip
        got = zone_numbers(self.spark, self.endpoints, queries)
        results = {}
        for c in wave:
            numbers = {z: _numbers(got[f"{c['chunk']}:{z}"]) for z in self.names}
            results[c["chunk"]] = (compare(numbers), numbers)
        self.store.record_chunks(self.check.run_id, self.table, results)

    def _progress(self, planning: bool) -> None:
        text = check_report.progress(self.table, self.store.chunks(self.check.run_id, self.table))
        self.log(f"{self.table}: {text}{', still planning' if planning else ''}")

    # -- 3. settle ---------------------------------------------------------------
    def _settle(self, conns) -> None:
        """Wait until every zone applied every other zone up to the check's start."""
        from zonesync.apply.tools.progress import is_applied

        start = self.check.start
        deadline = time.monotonic() + self.args.settle_timeout_s
        pending = [(s, t) for s in self.names for t in self.names if s != t and s in start]
        while pending:
            pending = [(s, t) for s, t in pending if not is_applied(self.store.meta, conns[t], s, tuple(start[s]))]
            if not pending or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        if pending:
            self.log(f"{self.table}: not settled within {self.args.settle_timeout_s:g} s: {pending} (their "
                     "differences are reported as found)")  # fmt: skip

    # -- 4. rows -----------------------------------------------------------------
    def _rows(self, conns, chunks: list[dict], columns, key) -> None:
        if not self.args.rows:
            self.store.record_chunks(self.check.run_id, self.table,
                                     {c["chunk"]: ("mismatch", c["zones"]) for c in chunks})  # fmt: skip
            return
        ranges = self._narrow(chunks, columns, key) if narrow.splittable(key) else chunks
        found = []
        if ranges:
            df = check_rows.extract(self.spark, self.zones, self.table, columns, key, ranges, self.nullable,
                                    self.row_where)  # fmt: skip
            found = check_rows.differing_keys(df, key, len(self.names)).collect()
        deleted = self._deleted_after_cut(conns)
        owners = _Owners(self.store.meta, self.check.rules_version, self.table)
        diffs, by_chunk = [], {}
        for record in found:
            pk, rows = check_rows.as_rows(record, key)
            text = pk_text(pk)
            gone = {z for z, keys in deleted.items() if text in keys}
            if check_diff.in_flight(rows, self.names, self.check.cut_us, gone, self.check.exclude_origin):
                continue
            zsid, owner = owners.of(next(iter(rows.values()))["cols"])
            d = check_diff.describe(text, rows, self.names, owner, zsid)
            if d is not None:
                diffs.append(d)
                by_chunk.setdefault(_chunk_of(chunks, key, pk), []).append(d)
        self.store.add_diffs(self.check.run_id, self.table, diffs)
        self.store.record_chunks(self.check.run_id, self.table,
                                 {c["chunk"]: ("mismatch" if by_chunk.get(c["chunk"]) else "settled", c["zones"])
                                  for c in chunks})  # fmt: skip
        self.log(f"{self.table}: {len(found)} keys differ in {len(chunks)} chunks, {len(diffs)} persist")

    def _narrow(self, chunks: list[dict], columns, key) -> list[dict]:
        """The differing chunks' sub-ranges whose numbers differ between zones
        (zonesync.check.narrow): each zone's checksums per 1/SPLIT of each chunk, one
        GROUP BY query per chunk and zone, then only those sub-ranges' rows are read."""
        spans = {c["chunk"]: narrow.known_span(key, c["lo"], c["hi"]) for c in chunks}
        open_ended = [c for c in chunks if spans[c["chunk"]] is None]
        if open_ended:
            got = zone_rows(self.spark, self.endpoints, [
                (f"{c['chunk']}:{z}", zi, narrow.span_query(self.table, key, c["lo"], c["hi"], self.where))
                for c in open_ended for zi, z in enumerate(self.names)])  # fmt: skip
            for c in open_ended:
                spans[c["chunk"]] = narrow.merged_span([tuple(got[f"{c['chunk']}:{z}"][0]) for z in self.names])
        # each chunk with a row somewhere: its span and the step of its sub-ranges
        cuts = {n: (*span, narrow.step_of(*span)) for n, span in spans.items() if span is not None}
        live = [c for c in chunks if c["chunk"] in cuts]  # (none: no zone has a row there any more)
        got = zone_rows(self.spark, self.endpoints, [
            (f"{c['chunk']}:{z}", zi, narrow.bucket_query(self.table, columns, key, c["lo"], c["hi"],
                                                          cuts[c["chunk"]][0], cuts[c["chunk"]][2],
                                                          self.nullable, self.where))
            for c in live for zi, z in enumerate(self.names)]) if live else {}  # fmt: skip
        ranges = []
        for c in live:
            which = narrow.differing({z: got[f"{c['chunk']}:{z}"] for z in self.names})
            ranges += narrow.sub_chunks(c, key, *cuts[c["chunk"]], which)
        keys = sum(int(r["hi"][0]) - int(r["lo"][0]) for r in ranges)
        self.narrowed = {"chunks": len(chunks), "ranges": len(ranges), "keys": keys}
        self.log(f"{self.table}: {len(chunks)} differing chunks narrowed to {len(ranges)} key ranges "
                 f"({keys:,} keys to read)")  # fmt: skip
        return ranges

    def _deleted_after_cut(self, conns) -> dict[str, set[str]]:
        return {z: recently_deleted(conn, self.table, self.check.cut_us) for z, conn in conns.items()}

    # -- the table's outcome -----------------------------------------------------
    def _finish(self, chunks: list[dict], schema: str | None = None) -> dict:
        by_status = {}
        for c in chunks:
            by_status[c["status"]] = by_status.get(c["status"], 0) + 1
        rows = {z: sum(c["zones"][z][0] for c in chunks if c["zones"].get(z)) for z in self.names}
        bookkeeping = {
            z: {
                "min_version": min(
                    (c["zones"][z][2] for c in chunks if c["zones"].get(z) and c["zones"][z][2] is not None),
                    default=None,
                ),  # fmt: skip
                "unknown_origin": sum(c["zones"][z][3] for c in chunks if c["zones"].get(z)),
            }
            for z in self.names
        }
        done = all(c["status"] in DONE for c in chunks)
        outcome = {"chunks": len(chunks), "by_status": by_status, "complete": done and schema is None,
                   "rechecked": self.rechecked}  # fmt: skip
        if schema:
            outcome["schema"] = schema
        if self.narrowed:
            outcome["narrowed"] = self.narrowed
        return {"rows": rows, "pairs": pair_summary(self.names, chunks), "bookkeeping": bookkeeping,
                "outcome": outcome}  # fmt: skip


def _numbers(cols: list[str]) -> list:
    """A chunk's numbers in one zone: [rows, checksum, min version, rows of an unknown origin]."""
    out = []
    for v in cols:
        out.append(None if v == "\\N" else int(v))
    return out


def _chunk_of(chunks: list[dict], key: list[str], pk: dict) -> int:
    value = [int(pk[c]) for c in key]
    for c in chunks:
        if (c["lo"] is None or value > c["lo"]) and (c["hi"] is None or value <= c["hi"]):
            return c["chunk"]
    return -1


class _Owners:
    """The zone that owns a row's ZSID by the check's rules version (None: no rule)."""

    def __init__(self, meta, version: int | None, table: str):
        from zonesync.meta.store import MetaStore
        from zonesync.rules.extract import RuleIndex

        found = MetaStore(meta).rules_at(version)
        self.index = RuleIndex(found[1]) if found else None
        self.table = table

    def of(self, cols: dict) -> tuple[int | None, str | None]:
        from zonesync.rules.extract import ZsidUnknown

        if self.index is None:
            return None, None
        try:
            zsid = self.index.zsid_of(self.table, cols)
            return zsid, self.index.rule_for(zsid).zone
        except ZsidUnknown:
            return None, None
