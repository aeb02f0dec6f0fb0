"""A guarded transaction: structured writes, checked twice, committed under the lock.

The guard learns a write's ZSID from the row itself: inserts carry it; updates
and deletes name the primary key, and the guard reads the row FOR UPDATE (which
also locks it) to find its ZSID and entity. An update that moves a row to another
ZSID is checked for both. There is no raw-SQL write path: a write whose ZSID the
guard cannot determine is refused, never let through.

"No such row" (0) is answered only when it is sure. Where the key alone decides the
ZSID (and entity), the key is checked before the row is looked for, so only the ACTIVE
owner can answer 0; elsewhere a missing row may simply not have replicated here yet
from the zone that owns it, and the write is refused (RowNotFoundHere) instead.

Each write is checked when issued (fail fast) and every touched row again at
commit, under the guard's shared lock, against whatever version is current
then, together with the lease and the deadline of the version the transaction
started under. A commit therefore never lands after its guard acked a version
that forbids it.

The bookkeeping columns `_zs_origin` and `_zs_version` are the guard's: the
application never passes them; the guard sets origin = this zone and a version
that strictly increases per row (see hlc.py).
"""

from __future__ import annotations

import time

from zonesync.dal.errors import RowNotFoundHere, TableContractError, TransactionDeadlineExceeded
from zonesync.runtime.endpoints import primary_key
from zonesync.sql_names import quote

BOOKKEEPING = ("_zs_origin", "_zs_version")


def tombstone_key(row: dict, pk: list[str]) -> str:
    """The primary key as appliers key tombstones and locks (events.pk_text)."""
    from zonesync.events import encode_row, pk_text

    return pk_text(encode_row({c: row[c] for c in pk}))


def _q(name: str) -> str:
    return quote(name, TableContractError)


def load_table_meta(conn, table: str) -> tuple[list[str], list[str]]:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, COLUMN_KEY FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (table,),
        )
        rows = cur.fetchall()
    pk = primary_key(conn, table)
    conn.rollback()  # end the snapshot information_schema reads opened
    columns = [r[0] for r in rows]
    if not columns:
        raise TableContractError(f"table {table!r} does not exist in the zone database")
    if not pk:
        raise TableContractError(f"table {table} has no primary key: replicated tables need one")
    missing = [c for c in BOOKKEEPING if c not in columns]
    if missing:
        raise TableContractError(
            f"table {table} lacks {', '.join(missing)}: add `_zs_origin SMALLINT NOT NULL DEFAULT 0, "
            "_zs_version BIGINT NOT NULL DEFAULT 0` (docs/table-contract.md)"
        )
    return pk, columns


class Transaction:
    def __init__(self, guard, conn):
        self.guard = guard
        self.conn = conn
        # Not synced is checked at each write and at commit, not here: reads go on while
        # meta is unreachable (seed S000-13); only writes fail closed after the lease.
        state = guard.state
        self.started = time.monotonic()
        self.start_version = state.version
        self.deadline_ms = state.deadline_ms
        self.touched: list[tuple[str, dict]] = []
        self.done = False

    # -- writes --------------------------------------------------------------
    def _check(self, table: str, row: dict) -> None:
        self.guard.require_synced()
        self.guard.state.decide(table, row)
        self.touched.append((table, row))

    def _meta(self, table: str, row_or_key: dict, what: str):
        self.guard.state.table_spec(table)  # a table without a ZSID rule is refused first
        pk, columns = self.guard.table_meta(table)
        unknown = [c for c in row_or_key if c not in columns]
        if unknown:
            raise TableContractError(f"{what} {table}: no column {', '.join(unknown)}")
        managed = [c for c in row_or_key if c in BOOKKEEPING]
        if managed:
            raise TableContractError(
                f"{what} {table}: {', '.join(managed)} are maintained by the guard, not the caller"
            )
        return pk, columns

    @staticmethod
    def _require_pk(table: str, key: dict, pk: list[str]) -> None:
        if sorted(key) != sorted(pk):
            raise TableContractError(f"table {table}: rows are addressed by the primary key ({', '.join(pk)})")

    def _deciding(self, table: str) -> set[str]:
        """The columns a row's ZSID and locating entity come from."""
        spec = self.guard.state.table_spec(table)
        return {spec.column, *([spec.entity.column] if spec.entity else [])}

    def _absent(self, what: str, table: str, key: dict) -> RowNotFoundHere:
        """No row, and the key does not decide the ZSID: 0 would be a guess, so refuse."""
        state = self.guard.state
        spec = state.table_spec(table)
        missing = sorted(self._deciding(table) - set(key), key=lambda c: (c != spec.column, c))
        return RowNotFoundHere(what, table, key, self.guard.zone, missing, spec.column, state.version)

    def _locked_row(self, table: str, key: dict, pk: list[str]) -> dict | None:
        self._require_pk(table, key, pk)
        where = " AND ".join(f"{_q(c)} = %s" for c in pk)
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT * FROM {_q(table)} WHERE {where} FOR UPDATE", [key[c] for c in pk])
            row = cur.fetchone()
            if row is None:
                return None
            return dict(zip([d[0] for d in cur.description], row, strict=True))

    def insert(self, table: str, row: dict) -> None:
        pk, _ = self._meta(table, row, "insert into")
        self._check(table, row)
        missing = [c for c in pk if c not in row]
        if missing:
            raise TableContractError(f"insert into {table}: the row lacks primary-key column(s) {', '.join(missing)}")
        cols = [*row, *BOOKKEEPING]
        # A row deleted earlier left a tombstone: the new row's version must outrank it,
        # or appliers elsewhere would take the insert for a late replay and drop it.
        values = [*row.values(), self.guard.zone_id, self.guard.clock.tick(), table, tombstone_key(row, pk)]
        marks = ", ".join(["%s"] * len(row))
        with self.conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO {_q(table)} ({', '.join(map(_q, cols))}) VALUES ({marks}, %s, GREATEST(%s, "
                "COALESCE((SELECT version + 1 FROM zonesync.tombstones WHERE table_name = %s AND pk = %s), 0)))",
                values,
            )

    def update(self, table: str, key: dict, changes: dict) -> int:
        pk, _ = self._meta(table, {**key, **changes}, "update")
        if not changes:
            return 0
        self._require_pk(table, key, pk)
        deciding = self._deciding(table)
        key_decides = deciding <= set(key)
        if key_decides:
            # The key alone decides the ZSID (and entity): only their ACTIVE owner may
            # go on, and so only it can answer "no such row".
            self._check(table, key)
        if key_decides and not deciding & set(changes):
            # The update keeps them: no need to read the row first. The UPDATE locks it;
            # no row, no change.
            old_version = None
        else:
            old = self._locked_row(table, key, pk)
            if old is None:
                if key_decides:
                    return 0
                raise self._absent("update", table, key)
            self._check(table, old)
            self._check(table, {**old, **changes})  # a row moved to another ZSID must be writable there too
            old_version = int(old["_zs_version"])
            self.guard.clock.observe(old_version)
        sets = ", ".join(f"{_q(c)} = %s" for c in changes)
        where = " AND ".join(f"{_q(c)} = %s" for c in pk)
        with self.conn.cursor() as cur:
            # GREATEST(version + 1, now): the version always moves, so a matched row always
            # counts as changed, and versions of a row never go backwards
            changed = cur.execute(
                f"UPDATE {_q(table)} SET {sets}, `_zs_origin` = %s, `_zs_version` = GREATEST(`_zs_version` + 1, %s) "
                f"WHERE {where}",
                [*changes.values(), self.guard.zone_id, self.guard.clock.tick(), *[key[c] for c in pk]],
            )
        return 1 if changed else 0

    def delete(self, table: str, key: dict) -> int:
        pk, _ = self._meta(table, key, "delete from")
        self._require_pk(table, key, pk)
        key_decides = self._deciding(table) <= set(key)
        if key_decides:
            self._check(table, key)  # only the ACTIVE owner of the key's ZSID can answer 0
        old = self._locked_row(table, key, pk)
        if old is None:
            if key_decides:
                return 0
            raise self._absent("delete from", table, key)
        self._check(table, old)
        where = " AND ".join(f"{_q(c)} = %s" for c in pk)
        with self.conn.cursor() as cur:
            cur.execute(f"DELETE FROM {_q(table)} WHERE {where}", [key[c] for c in pk])
            # The same tombstone appliers leave elsewhere: no replay of an older image revives it here.
            cur.execute(
                "INSERT INTO zonesync.tombstones (table_name, pk, version) VALUES (%s, %s, %s) "
                "ON DUPLICATE KEY UPDATE version = GREATEST(version, VALUES(version)), deleted_at = NOW(6)",
                (table, tombstone_key(old, pk), int(old["_zs_version"]) + 1),
            )
        return 1

    def query(self, sql: str, params=None) -> list[tuple]:
        """Reads only: anything but SELECT goes through insert/update/delete."""
        if not sql.lstrip().lower().startswith("select"):
            raise TableContractError("query() runs SELECT only: write with insert(), update() or delete()")
        with self.conn.cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall())

    # -- end -----------------------------------------------------------------
    def commit(self) -> None:
        """Recheck everything under the shared lock, then COMMIT before releasing it."""
        with self.guard.lock.shared():
            if self.touched:
                self.guard.require_synced()
            elapsed_ms = (time.monotonic() - self.started) * 1000
            if self.touched and self.deadline_ms and elapsed_ms > self.deadline_ms:
                raise TransactionDeadlineExceeded(elapsed_ms, self.deadline_ms, self.start_version)
            state = self.guard.state
            for table, row in self.touched:
                state.decide(table, row)
            self.conn.commit()
            self.done = True

    def rollback(self) -> None:
        if not self.done:
            try:
                self.conn.rollback()
            except Exception:  # noqa: BLE001 - the connection may be gone; nothing to undo then
                pass
            self.done = True
