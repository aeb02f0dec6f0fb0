"""The `zonesync` command: the parser, and the one place errors become exit codes.

One module per command group (dev, meta, rules, tags, entity, guards, workers, replication, binlog,
locks, switch, resident), each with a `register(sub)`; what they share is in common.py, and none
imports another. `python -m zonesync.cli` (__main__.py) is how workers are spawned.

Every failure the user can fix is one line on stderr naming what is wrong and
what to do, with exit code 2; tracebacks are for bugs only.
"""

from __future__ import annotations

import argparse

from zonesync import config
from zonesync.cli import (
    binlog,
    check,
    copy,
    dev,
    entity,
    guards,
    kv,
    locks,
    meta,
    migrate,
    replication,
    resident,
    rules,
    runs,
    schema,
    switch,
    tags,
    workers,
    zones,
)
from zonesync.cli.common import fail

# in the order `zonesync --help` lists them
GROUPS = (dev, meta, rules, tags, entity, kv, guards, workers, replication, binlog, locks, switch, copy, check, migrate,
          resident, schema, zones, runs)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zonesync", description="Multi-zone MySQL replication and migration.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except config.ConfigError as exc:
        return fail(str(exc))
    except ValueError as exc:  # RuleSetError, RuleCheckError, UserFileError: already one line naming the field
        from zonesync.rules import RuleCheckError, RuleSetError
        from zonesync.tagging.rules import TagRulesError
        from zonesync.user_files import UserFileError

        if isinstance(exc, (RuleSetError, RuleCheckError, TagRulesError, UserFileError)):
            return fail(str(exc))
        raise
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - user-fixable errors are printed as one line
        from zonesync.airflow_api import AirflowApiError
        from zonesync.dev import broker, env, mariadb, procs
        from zonesync.meta.db import MetaError
        from zonesync.runtime.transport import TransportError

        known = (
            env.EnvError,
            mariadb.MariaDBError,
            procs.PortInUse,
            broker.BrokerError,
            AirflowApiError,
            MetaError,
            TransportError,
        )
        if isinstance(exc, known):
            return fail(str(exc))
        unreachable = _unreachable(exc)
        if unreachable:
            return fail(unreachable)
        raise


def _unreachable(exc: BaseException) -> str | None:
    """One line for a database that is down or refuses the account (a pymysql error
    whose message names the server), instead of a traceback."""
    import pymysql

    if type(exc).__module__.startswith("redis.") and type(exc).__name__ in ("ConnectionError", "TimeoutError"):
        return f"a KV store is unreachable: {exc} (is it up? `zonesync dev status`)"
    if isinstance(exc, pymysql.err.OperationalError) and exc.args and exc.args[0] in (1045, 2002, 2003, 2006, 2013):
        return f"a database is unreachable: {exc.args[1] if len(exc.args) > 1 else exc} (is it up? `zonesync zones`)"
    return None
