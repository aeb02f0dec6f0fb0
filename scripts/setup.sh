#!/usr/bin/env bash
# make setup: install what is missing, quietly, and do nothing when all is there.
#   1. Debian packages: MariaDB server binaries (zones are private mariadbd
#      processes, never the system service), the MariaDB client library and its
#      headers (mysqlclient builds against them), the MariaDB JDBC jar (Spark),
#      a Java 17 JDK (Spark, and javac for zonesync's JVM code), a C toolchain.
#   2. .venv with the exact versions of requirements.lock and zonesync itself
#      (editable: packages zonesync and zonesync_airflow).
#   3. zonesync's C module (scripts/build_native.py) and JVM jar (scripts/build_jar.py),
#      each rebuilt when its source changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
# percona-toolkit: `make bench`'s baseline for the consistency check (pt-table-checksum)
# redis-server: each zone's KV repos are a private redis-server (never the system service)
# chromium: the console page's browser test (headless, driven by Playwright with this browser)
APT_PACKAGES=(mariadb-server-core mariadb-client-core libmariadb-dev libmariadb-java
              openjdk-17-jdk-headless build-essential pkg-config percona-toolkit redis-server chromium)
# the C module builds against the interpreter's headers: Debian's for Debian's python3
if ! "$PYTHON" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null; then
  APT_PACKAGES+=(python3-dev)
fi

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if ((${#missing[@]})); then
  if ! command -v apt-get >/dev/null; then
    echo "setup: missing ${missing[*]} and no apt-get: install them with your package manager" >&2; exit 2
  fi
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "setup: installing ${missing[*]} needs root: run as root or install sudo" >&2; exit 2; }
    SUDO=sudo
  fi
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  # No service start: installing must not launch a system mariadbd.
  DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "setup: $PYTHON is not Python 3.11 or newer: set PYTHON=/path/to/python3.11" >&2; exit 2
fi

stamp="$VENV/.zonesync-setup"
want=$(cat requirements.lock pyproject.toml | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$VENV/bin/zonesync" ]; then
  "$VENV/bin/python" scripts/build_native.py
  exec "$VENV/bin/python" scripts/build_jar.py
fi
[ -x "$VENV/bin/python" ] || { echo "setup: creating $VENV"; "$PYTHON" -m venv "$VENV"; }
echo "setup: installing pinned Python packages into $VENV (first time: a few minutes)"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -r requirements.lock
"$VENV/bin/python" -m pip install -q --no-deps -e . 2>/dev/null
"$VENV/bin/python" scripts/build_native.py
"$VENV/bin/python" scripts/build_jar.py
echo "$want" > "$stamp"
echo "setup: done"
