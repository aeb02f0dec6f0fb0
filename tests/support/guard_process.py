"""A guard in its own process, for kill -9 and SIGSTOP tests.

    python -m tests.support.guard_process ZONE PERIOD  (meta from ZONESYNC_META_URL)
Prints its instance id once synced, then idles.
"""

from __future__ import annotations

import sys
import time

from zonesync.dal import Guard, ZoneDB
from zonesync.meta.db import MetaConfig

if __name__ == "__main__":
    zone, period, db_port = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    guard = Guard(
        MetaConfig.from_env(),
        zone,
        ZoneDB("127.0.0.1", db_port, "root", "", "zonesync_app"),
        period=period,
        poll=min(0.05, period),
    ).start()
    print(guard.instance_id, flush=True)
    while True:
        time.sleep(1)
