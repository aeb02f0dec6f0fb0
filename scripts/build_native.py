"""Build zonesync's C modules (include/zonesync/_native.c, _tagging.c) next to their sources.

`make setup` runs this with the venv's Python after installing the packages: the
module is built for that interpreter, and rebuilt whenever the source is newer than
the built file. Without it zonesync runs its pure-Python paths (slower at bulk rates,
same results); the tests require it (tests/unit/test_native_rows.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [ROOT / "include" / "zonesync" / name for name in ("_native.c", "_tagging.c")]


def target(source: Path) -> Path:
    return source.with_name(source.stem + sysconfig.get_config_var("EXT_SUFFIX"))


def main() -> int:
    return max(build(source) for source in SOURCES)


def build(source: Path) -> int:
    out = target(source)
    if out.exists() and out.stat().st_mtime >= source.stat().st_mtime:
        return 0
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC").split()[0] or "cc"
    cmd = [
        cc,
        "-O2",
        "-fPIC",
        "-shared",
        "-Wall",
        "-Werror",
        "-std=c11",
        f"-I{sysconfig.get_paths()['include']}",
        str(source),
        "-o",
        str(out) + ".tmp",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode:
        sys.stderr.write(f"setup: building {source.name} failed:\n{' '.join(cmd)}\n{result.stderr}")
        return result.returncode
    os.replace(str(out) + ".tmp", out)
    print(f"setup: built {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
