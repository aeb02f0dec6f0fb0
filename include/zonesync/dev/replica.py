"""A zone's replica in the dev environment: what a zone primary fails over to (docs/failover.md).

`start(cfg, zone)` starts one more mariadbd beside the zone's, as production runs one:
MariaDB replication with GTID (MASTER_USE_GTID=slave_pos) from the zone's primary,
log_slave_updates on (the transactions it replicates are in its own binlog, under the
same GTIDs, so capture can go on there), the zone's GTID domain and AUTO_INCREMENT
offset (after a promotion it hands out the zone's values), its own server_id. Its binlog
files are rotated twice before replication starts, so its positions differ from the
primary's as they do in the field: only GTIDs say where a checkpoint is there.

It replicates from the primary's first binlog file (the dev zones never purge before a
replica exists); a primary that purged it is refused with the way out.
"""

from __future__ import annotations

from zonesync.config import EnvConfig
from zonesync.dev import mariadb

REPLICA_SERVER_ID_BASE = 100  # server_id = 100 + zone id (zones use their id)
PORT_STEP = 30  # default port: ZONESYNC_BASE_PORT (the meta store's) + 30 + zone id


class ReplicaError(RuntimeError):
    pass


def name_of(zone: str) -> str:
    return f"zone-{zone}-replica"


def instance(cfg: EnvConfig, zone: str, port: int | None = None) -> mariadb.Instance:
    z = cfg.zone(zone)
    return mariadb.Instance(
        name_of(zone),
        port or cfg.meta_port + PORT_STEP + z.id,
        REPLICA_SERVER_ID_BASE + z.id,
        cfg.data_dir / name_of(zone),
        gtid_domain_id=z.id,
        extra_args=("--log-slave-updates=ON", "--slave-parallel-threads=0"),
    )


def primary_instance(cfg: EnvConfig, zone: str) -> mariadb.Instance:
    z = cfg.zone(zone)
    return mariadb.Instance(z.instance, z.port, z.id, cfg.data_dir / z.instance, gtid_domain_id=z.id)


def start(cfg: EnvConfig, zone: str, port: int | None = None, timeout: float = 60.0) -> mariadb.Instance:
    """Start zone `zone`'s replica (idempotent) and return once it has caught up."""
    inst = instance(cfg, zone, port)
    primary = primary_instance(cfg, zone)
    fresh = not (inst.datadir / "mysql").is_dir()
    mariadb.start(inst, cfg.run_dir, cfg.log_dir, cfg.data_dir)
    conn = inst.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW SLAVE STATUS")
            configured = cur.fetchone() is not None
            if fresh or not configured:
                _check_primary_binlog(primary, zone)
                cur.execute("FLUSH BINARY LOGS")
                cur.execute("FLUSH BINARY LOGS")
                cur.execute("SET GLOBAL gtid_slave_pos = ''")
                cur.execute(
                    "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = %s, MASTER_USER = %s, "
                    "MASTER_PASSWORD = '', MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1",
                    (primary.port, primary.user),
                )
            cur.execute("START SLAVE")
    finally:
        conn.close()
    wait_caught_up(inst, primary, timeout)
    return inst


def _check_primary_binlog(primary: mariadb.Instance, zone: str) -> None:
    conn = primary.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            files = [r[0] for r in cur.fetchall()]
    finally:
        conn.close()
    if not files or not files[0].endswith(".000001"):
        raise ReplicaError(
            f"zone {zone}'s primary no longer holds its first binlog file ({files[0] if files else 'none'}): the dev "
            "replica replicates from the beginning; start it before purging, or seed one from mariadb-dump --gtid"
        )


def gtid_pos(inst: mariadb.Instance, variable: str = "gtid_binlog_pos") -> str:
    conn = inst.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT @@GLOBAL.{variable}")
            return cur.fetchone()[0] or ""
    finally:
        conn.close()


def wait_caught_up(replica: mariadb.Instance, primary: mariadb.Instance, timeout: float) -> None:
    """Until the replica applied everything the primary's binlog holds now."""
    target = gtid_pos(primary)
    conn = replica.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT MASTER_GTID_WAIT(%s, %s)", (target, float(timeout)))
            if cur.fetchone()[0] != 0:
                cur.execute("SHOW SLAVE STATUS")
                names = [d[0] for d in cur.description]
                row = dict(zip(names, cur.fetchone() or [], strict=False))
                raise ReplicaError(
                    f"{replica.name} did not reach {target} within {timeout:g} s: IO {row.get('Slave_IO_Running')}, "
                    f"SQL {row.get('Slave_SQL_Running')}, {row.get('Last_Error') or row.get('Last_IO_Error') or ''}"
                )
    finally:
        conn.close()


def promote(replica: mariadb.Instance, timeout: float = 60.0) -> None:
    """What an operator (or orchestrator) does to the replica before `zonesync zones
    set-primary`: no more reading from the old primary, everything it received applied
    (its relay log), replication forgotten, writes allowed."""
    conn = replica.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("STOP SLAVE IO_THREAD")
            cur.execute("SHOW SLAVE STATUS")
            names = [d[0] for d in cur.description]
            received = dict(zip(names, cur.fetchone(), strict=True)).get("Gtid_IO_Pos") or ""
            cur.execute("SELECT MASTER_GTID_WAIT(%s, %s)", (received, float(timeout)))
            if cur.fetchone()[0] != 0:
                raise ReplicaError(f"{replica.name} did not apply its relay log up to {received} in {timeout:g} s")
            cur.execute("STOP SLAVE")
            cur.execute("RESET SLAVE ALL")
            cur.execute("SET GLOBAL read_only = OFF")
    finally:
        conn.close()
