"""Run every benchmark and print the table of ratios (see bench/__init__.py)."""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path

from bench import consistency, console, foundation, full_copy, guard, kv, migration, replication, switch, tagging
from bench.harness import BenchEnv, print_table

SUITES = {
    "foundation": foundation.run,
    "guard": guard.run,
    "replication": replication.run,
    "switch": switch.run,
    "migration": migration.run,
    "copy": full_copy.run,
    "check": consistency.run,
    "tag": tagging.run,
    "kv": kv.run,
    "console": console.run,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make bench")
    parser.add_argument("suites", nargs="*", default=list(SUITES), help=f"any of: {', '.join(SUITES)}")
    parser.add_argument(
        "--keep", action="store_true", help="keep the state dir (logs of zones, workers, Airflow tasks) and print it"
    )
    args = parser.parse_args(argv)
    unknown = [s for s in args.suites if s not in SUITES]
    if unknown:
        parser.error(f"unknown suite {', '.join(unknown)}: choose from {', '.join(SUITES)}")
    rows = []
    keep = tempfile.mkdtemp(prefix="zonesync-bench-") if args.keep else None
    if keep:
        print(f"bench state kept in {keep}")
    with (
        contextlib.nullcontext(keep) if keep else tempfile.TemporaryDirectory(prefix="zonesync-bench-") as tmp,
        BenchEnv(Path(tmp)) as env,
    ):
        for name in args.suites:
            rows += SUITES[name](env)
    print_table(rows)
    return 0 if all(r.met for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
