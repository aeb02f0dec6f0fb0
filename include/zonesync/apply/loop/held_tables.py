"""The applier's side of held tables (apply/batch/table_holds.py has the protocol): a
SchemaMismatch holds the tables it names, the zone's holds are read once a second and
handed to every writer, and draining holds are drained.

Everything here runs on the applier's loop thread, between rounds (the writer it uses is
that thread's own); the lanes only park, through their writers' gate.
"""

from __future__ import annotations

import logging
import time

from zonesync.apply.batch import table_holds
from zonesync.apply.errors import PartitionsStopped, SchemaMismatch
from zonesync.meta import schema_changes
from zonesync.meta.db import MetaConfig
from zonesync.meta.outage import MetaOutage

log = logging.getLogger("zonesync.applier")

# drain time per tick (once a second, on the loop's thread): the rounds of every other
# table wait meanwhile, so a drain adds up to this much to their lag
DRAIN_BUDGET_S = 0.25


class HeldTables:
    """Given the zone, the loop thread's writer (`writer()`), meta and its outage, the alert
    function, what to do with a drained batch's result (`record`), how to hand a new set of
    held tables to every writer (`hand(tables, resumed)`, which also has them forget what
    they knew of the resumed tables' definitions), and the parked events per drain step."""

    def __init__(self, zone: str, writer, meta: MetaConfig, meta_outage: MetaOutage, alert, record, hand,
                 batch: int = table_holds.DRAIN_BATCH):  # fmt: skip
        self.zone = zone
        self.batch = batch
        self.writer = writer
        self.meta = meta
        self.meta_outage = meta_outage
        self.alert = alert
        self.record = record
        self.hand = hand
        self.tables: frozenset[str] = frozenset()  # held or draining, as last read
        self.status: dict[str, str] = {}

    def hold(self, exc: SchemaMismatch) -> None:
        """Step 1: each table the mismatch names held, with what differs, the newest DDL on
        it (meta: the replicators record them), and the cure; one alert per table."""
        if not exc.tables:
            log.warning("applier %s: %s: restarting from apply_state", self.zone, exc)
            time.sleep(0.5)
            return
        conn = self.writer().connect()
        for table, why in sorted(exc.tables.items()):
            # (call says True for "none recorded", None for "meta unreachable")
            change = self.meta_outage.call(schema_changes.latest, self.meta, table, default=None)
            ddl = f" Newest DDL on it: {schema_changes.describe(change)}." if change not in (None, True) else ""
            detail = (
                f"{why}.{ddl} Its events are parked and every other table goes on. Make the definitions agree "
                f"(`zonesync schema diff`, the schema_change DAG), then `zonesync schema resume --zone {self.zone} "
                f"--table {table}`"
            )
            park = table_holds.MISFITS if table in exc.misfits else table_holds.ALL
            table_holds.hold(conn, table, detail, park)
            log.error("applier %s: table %s held: %s", self.zone, table, detail)
            self.alert("table_held", {"table": table, "detail": detail})
        self.read()

    def read(self) -> None:
        """The zone's holds, handed to the writers when the set changed; a hold newly
        draining makes them forget the table's definition (it was changed)."""
        found = table_holds.holds(self.writer().connect(), count=False)  # (once a second: no counting)
        status = {table: row[0] for table, row in found.items()}
        resumed = [t for t, s in status.items() if s == table_holds.DRAINING and self.status.get(t) != s]
        tables = frozenset(status)
        if tables != self.tables or resumed:
            if tables != self.tables:
                log.info("applier %s: held tables: %s", self.zone, sorted(tables) or "none")
            self.tables = tables
            self.hand(tables, resumed)
        self.status = status

    def drain(self) -> None:
        """Step 4, for up to DRAIN_BUDGET_S: each draining table's parked events applied,
        oldest first, then settled; a hold whose events still do not fit is held again."""
        deadline = time.monotonic() + DRAIN_BUDGET_S
        for table, status in sorted(self.status.items()):
            while status == table_holds.DRAINING and time.monotonic() < deadline:
                status = self._drain_some(table)
        if any(s == table_holds.DRAINING for s in self.status.values()):
            self.read()

    def _drain_some(self, table: str) -> str | None:
        """One batch of a table's parked events; the table's status after it."""
        writer = self.writer()
        taken = table_holds.parked(writer.connect(), table, self.batch)
        if taken is None:
            return None
        through = taken[-1][0] if taken else 0
        if taken:
            try:
                self.record(writer.apply_many(table_holds.by_source(taken), [], park=False))
            except SchemaMismatch as exc:
                writer.close()
                self.hold(exc)
                return table_holds.HELD
            except PartitionsStopped as exc:
                self.record(exc.result)  # the rest committed: settle what came before the first stop
                stopped = {(s.source, s.partition, s.lsn) for s in exc.blocked}
                first = min((i for i, source, e in taken if (source, e.partition, e.lsn) in stopped), default=None)
                if first is not None:
                    table_holds.settle(writer.connect(), table, first - 1)
                log.warning("applier %s: draining %s stopped at %s: trying again", self.zone, table, exc)
                return None
        if table_holds.settle(writer.connect(), table, through):
            log.info("applier %s: table %s drained: its events are applied again", self.zone, table)
            self.alert("table_resumed", {"table": table})
            self.status.pop(table, None)
            return None
        return table_holds.DRAINING if taken else None
