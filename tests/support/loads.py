"""Steady loads a test runs in a thread while it breaks something (a Background)."""

from __future__ import annotations

import itertools
import random
import time

from tests.support.background import Background


class TenantLoad(Background):
    """Zone a's tenants 1..`tenants` written from one thread with ever higher versions (so a
    row's versions only grow), until stopped: transactions of 1 to `max_rows` rows (each
    committed when `commit`, else the connection autocommits every row), each row an upsert
    or, for tenants above `kept` and with probability `deletes`, a delete; `pause` seconds
    after each transaction. `writes` counts rows, `transactions` transactions."""

    name = "load-a"

    def __init__(
        self,
        conn,
        seed: int,
        tenants: int = 300,
        max_rows: int = 1,
        deletes: float = 0.15,
        kept: int = 0,
        pause: float = 0.002,
        commit: bool = False,
    ):
        super().__init__()
        self.conn = conn
        self.seed, self.tenants, self.max_rows, self.deletes, self.kept = seed, tenants, max_rows, deletes, kept
        self.pause, self.commit = pause, commit
        self.versions = itertools.count(1)
        self.writes = 0
        self.transactions = 0

    def _run(self) -> None:
        rnd = random.Random(self.seed)
        with self.conn.cursor() as cur:
            while not self._stop.is_set():
                for _ in range(rnd.randint(1, self.max_rows) if self.max_rows > 1 else 1):
                    tenant, version = rnd.randint(1, self.tenants), next(self.versions)
                    if tenant > self.kept and rnd.random() < self.deletes:
                        cur.execute("DELETE FROM zonesync_app.tenants WHERE tenant_id = %s", (tenant,))
                    else:
                        cur.execute(
                            "INSERT INTO zonesync_app.tenants (tenant_id, name, _zs_origin, _zs_version) "
                            "VALUES (%s, %s, 1, %s) ON DUPLICATE KEY UPDATE name = VALUES(name), "
                            "_zs_version = VALUES(_zs_version)",
                            (tenant, f"v{version}", version),
                        )
                    self.writes += 1
                if self.commit:
                    self.conn.commit()
                self.transactions += 1
                time.sleep(self.pause)
