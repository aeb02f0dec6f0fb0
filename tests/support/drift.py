"""A table whose definition the schema-change tests change (tests/integration/apply/
test_schema_drift.py, tests/dags/test_schema_change_dag.py): made the same in each zone,
statements run as root with or without the binlog, and a zone writing it on a thread."""

from __future__ import annotations

import contextlib
import threading

from tests.support.background import wait_until

TABLE = "drift"
CREATE = (
    f"CREATE TABLE zonesync_app.{TABLE} (id BIGINT NOT NULL PRIMARY KEY, tenant INT NOT NULL DEFAULT 0, "
    "note VARCHAR(40) NULL, qty INT NOT NULL DEFAULT 0, "
    "_zs_origin SMALLINT NOT NULL DEFAULT 0, _zs_version BIGINT NOT NULL DEFAULT 0)"
)


def run_sql(conn, *statements, logged=True):
    """Statements on a root connection; `logged=False`: none reaches the binlog."""
    with conn.cursor() as cur:
        cur.execute(f"SET SESSION sql_log_bin = {int(logged)}")
        for sql in statements:
            cur.execute(sql)
        cur.execute("SET SESSION sql_log_bin = 1")


def fresh_tables(conns) -> None:
    """The table, new and the same, in each zone (not logged); each connection in zonesync_app."""
    for conn in conns:
        conn.autocommit(True)
        run_sql(conn, f"DROP TABLE IF EXISTS zonesync_app.{TABLE}", CREATE, "USE zonesync_app", logged=False)


def drop_tables(conns) -> None:
    for conn in conns:
        run_sql(conn, f"DROP TABLE IF EXISTS zonesync_app.{TABLE}", logged=False)
        conn.close()


@contextlib.contextmanager
def writing(zone, at_least: int = 20):
    """Zone `zone` inserting rows one after another on a connection of its own, naming
    neither the column the tests rename nor its new name (the row images carry it all the
    same); yields the ids written so far, once `at_least` of them are."""
    stop, written = threading.Event(), []

    def write() -> None:
        conn = zone.connect()
        conn.autocommit(True)
        try:
            while not stop.is_set():
                n = len(written) + 1
                with conn.cursor() as cur:
                    cur.execute(f"INSERT INTO zonesync_app.{TABLE} (id, qty, _zs_origin, _zs_version) "
                                "VALUES (%s, %s, 1, 1)", (n, n))  # fmt: skip
                written.append(n)
                stop.wait(0.01)
        finally:
            conn.close()

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(written) >= at_least, 10, f"zone {zone.name} writes")
        yield written
    finally:
        stop.set()
        thread.join(10)
