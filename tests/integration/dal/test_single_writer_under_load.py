"""Single writer under load: 8 writer threads while ZSIDs move from zone a to zone b.

Statuses flip ACTIVE(a) -> BLOCK -> RESHARDING(b) -> ACTIVE(b) through
push-and-wait, as the zone switch will do. Four threads write through zone a's
guard and four through zone b's, to moved and unmoved ZSIDs. Afterwards:

- every write zone a accepted for a moved ZSID committed before the BLOCK
  version was acked, by the writers' clocks and by the rows' _zs_version;
- every write zone b accepted for a moved ZSID started after ACTIVE(b) was
  published (the audit log's time), by both measures again;
- the rows' _zs_origin is the zone that wrote them, and writes to unmoved ZSIDs
  were never refused.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from tests.support.rules import rules_doc
from zonesync.dal import WriteRefused
from zonesync.meta import guards

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MOVED = range(0, 16)  # owned by a, moving to b
STAY_A = range(16, 32)
STAY_B = range(400, 416)
TAIL = [{"zsids": "800-1023", "zone": "c"}]


def _wall_us() -> int:
    return time.time_ns() // 1000


def _writer(guard, zsids, stop, log, seed):
    rnd = random.Random(seed)
    while not stop.is_set():
        tenant = rnd.choice(zsids)
        started = _wall_us()
        try:
            with guard.transaction() as tx:
                if tx.update("tenants", {"tenant_id": tenant}, {"name": f"{guard.zone}-{started}"}) == 0:
                    tx.insert("tenants", {"tenant_id": tenant, "name": f"{guard.zone}-{started}"})
            log.append((guard.zone, tenant, started, _wall_us(), "ok"))
        except WriteRefused as exc:
            log.append((guard.zone, tenant, started, _wall_us(), type(exc).__name__))
        except Exception as exc:  # noqa: BLE001 - a duplicate-key race between two inserts is not a guard matter
            log.append((guard.zone, tenant, started, _wall_us(), f"db:{type(exc).__name__}"))
        time.sleep(0.001)


def _push(meta, rules, reason, writable=False):
    published = _wall_us()
    version = guards.push_and_wait(
        meta, rules_doc(rules + TAIL), reason, zones={"a", "b"}, require_writable=writable, timeout=5
    )
    return version, published, _wall_us()


def test_no_write_accepted_outside_the_active_owner(guard_env, meta, zones):
    ga, gb = guard_env("a", period=0.5, poll=0.02), guard_env("b", period=0.5, poll=0.02)
    stop, log = threading.Event(), []
    threads = [
        threading.Thread(target=_writer, args=(g, list(z), stop, log, i))
        for i, (g, z) in enumerate(
            [(ga, MOVED), (ga, MOVED), (ga, STAY_A), (ga, MOVED), (gb, MOVED), (gb, MOVED), (gb, STAY_B), (gb, MOVED)]
        )
    ]
    for t in threads:
        t.start()
    try:
        time.sleep(0.8)
        _, _, block_acked = _push(
            meta,
            [
                {"zsids": "0-15", "zone": "a", "status": "BLOCK"},
                {"zsids": "16-399", "zone": "a"},
                {"zsids": "400-799", "zone": "b"},
            ],
            "block",
        )
        time.sleep(0.4)
        _push(
            meta,
            [
                {"zsids": "0-15", "zone": "b", "status": "RESHARDING"},
                {"zsids": "16-399", "zone": "a"},
                {"zsids": "400-799", "zone": "b"},
            ],
            "reshard",
        )
        time.sleep(0.4)
        _, active_published, _ = _push(
            meta,
            [{"zsids": "0-15", "zone": "b"}, {"zsids": "16-399", "zone": "a"}, {"zsids": "400-799", "zone": "b"}],
            "activate",
            writable=True,
        )
        time.sleep(0.8)
    finally:
        stop.set()
        for t in threads:
            t.join(10)

    moved = set(MOVED)
    accepted_a = [e for e in log if e[0] == "a" and e[1] in moved and e[4] == "ok"]
    accepted_b = [e for e in log if e[0] == "b" and e[1] in moved and e[4] == "ok"]
    assert len(accepted_a) > 20 and len(accepted_b) > 20, "the load must span the switch"
    assert max(e[3] for e in accepted_a) <= block_acked, "zone a accepted a moved write after BLOCK was acked"
    assert min(e[2] for e in accepted_b) >= active_published, "zone b accepted a moved write before ACTIVE(b)"
    refused_unmoved = [e for e in log if e[1] not in moved and e[4] != "ok" and not e[4].startswith("db:")]
    assert refused_unmoved == [], f"unmoved ZSIDs were refused: {refused_unmoved[:3]}"
    assert any(e[4] == "ZoneReshardingBlocked" for e in log), "writers must have hit the BLOCK window"

    # The rows agree: versions are the writers' HLC microseconds, origins the writing zone.
    with zones["a"].connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT MAX(_zs_version), MIN(_zs_origin), MAX(_zs_origin) FROM tenants WHERE tenant_id < 16")
        max_a, lo_a, hi_a = cur.fetchone()
    with zones["b"].connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT MIN(_zs_version), MIN(_zs_origin), MAX(_zs_origin) FROM tenants WHERE tenant_id < 16")
        min_b, lo_b, hi_b = cur.fetchone()
    assert (lo_a, hi_a, lo_b, hi_b) == (1, 1, 2, 2)
    assert max_a <= block_acked and min_b >= active_published

    # And the audit log has the whole story in order.
    with meta.connect().cursor() as cur:
        cur.execute(
            "SELECT JSON_VALUE(detail, '$.reason') FROM audit_log WHERE action = 'rules.publish' "
            "ORDER BY id DESC LIMIT 3"
        )
        assert [r[0] for r in cur.fetchall()] == ["activate", "reshard", "block"]
