"""The deployment's database accounts (docker/mariadb/roles.sql) on the test servers, for
the tests that run each worker under its own role (issue 24: least privilege)."""

from __future__ import annotations

import re
from pathlib import Path

import pymysql

from zonesync.meta.db import MetaConfig

ROLES_SQL = Path(__file__).resolve().parents[2] / "docker" / "mariadb" / "roles.sql"
ZONE_SQL = ROLES_SQL.with_name("roles-zone.sql")
ROLES = ("zs_replicator", "zs_applier", "zs_app", "zs_batch", "zs_schema", "zs_meta", "zs_admin")


def password(role: str) -> str:
    return f"pw-{role}-test"


def statements(text: str) -> list[str]:
    """roles.sql's statements: comments dropped, split at the semicolons ending a line."""
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    return [s.strip() for s in re.split(r";\s*$", body, flags=re.M) if s.strip()]


def install(insts) -> None:
    """Every account of roles.sql on each of `insts` (as root), each with its test password
    and unlocked, as the deployment's init script does; roles-zone.sql on the zones."""
    for inst in insts:
        conn = inst.connect()
        zone = inst.name != "meta"
        try:
            with conn.cursor() as cur:
                cur.execute("SET SESSION sql_log_bin = 0")
                for role in ROLES:  # exactly the file's grants, none left from an earlier run
                    cur.execute(f"DROP USER IF EXISTS '{role}'@'%'")
                for s in statements(ROLES_SQL.read_text() + (ZONE_SQL.read_text() if zone else "")):
                    cur.execute(s)
                for role in ROLES:
                    cur.execute(f"ALTER USER '{role}'@'%%' IDENTIFIED BY %s ACCOUNT UNLOCK", (password(role),))
        finally:
            conn.close()


def connect(inst, role: str, database: str | None = None) -> pymysql.connections.Connection:
    return pymysql.connect(
        host="127.0.0.1", port=inst.port, user=role, password=password(role), database=database, autocommit=True
    )


def meta_as(meta: MetaConfig, role: str = "zs_meta") -> MetaConfig:
    return MetaConfig(meta.host, meta.port, role, password(role), meta.database)
