"""`make demo` / `zonesync demo`: the whole stack, once, on its embedded defaults.

Brings the environment up (idempotent), loads the sample schema and a few
sample rows into every zone, the sample tag rules and a few KV keys per tenant
(through each zone's KV guard), triggers the main job (the zone_inventory DAG,
which reads every zone with Spark) through Airflow's REST API exactly as a user
or a script would, follows it, and prints the result and where to look.
"""

from __future__ import annotations

import os

from zonesync.airflow_api import AirflowApi
from zonesync.config import EnvConfig
from zonesync.dev import airflow_env, env

# Rows per zone in the sample: different counts so the inventory shows each zone.
SAMPLE_ORDERS = 300


def owned_tenants(rules, zone: str, count: int = 10) -> list[int]:
    """The first `count` tenant ids whose ZSID `zone` owns, ACTIVE, by `rules`: a zone
    writes only its own rows (its appliers' neighbours refuse any other zone's)."""
    from zonesync.rules.extract import RuleIndex, ZsidUnknown

    index, found = RuleIndex(rules), []
    for tenant in range(1, 100_000):
        try:
            rule = index.rule_for(index.zsid_of("tenants", {"tenant_id": tenant}))
        except ZsidUnknown:
            continue
        if rule.writable_in(zone):
            found.append(tenant)
            if len(found) == count:
                return found
    raise env.EnvError(f"the rules in force leave zone {zone} fewer than {count} tenants: `zonesync rules show`")


def load_sample_rows(cfg: EnvConfig, rules) -> dict[str, int]:
    """Upsert a deterministic set of tenants and orders into each zone, each zone's own by `rules`."""
    counts = {}
    for n, inst in enumerate(env.instances(cfg)[1:], start=1):
        zone = cfg.zones[n - 1]
        orders = SAMPLE_ORDERS * n
        tenants = owned_tenants(rules, zone.name)
        conn = inst.connect("zonesync_app")
        try:
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO tenants (tenant_id, name, _zs_origin, _zs_version) VALUES (%s, %s, %s, 1) "
                    "ON DUPLICATE KEY UPDATE name = VALUES(name)",
                    [(t, f"tenant {t} of zone {zone.name}", zone.id) for t in tenants],
                )
                cur.executemany(
                    "INSERT INTO orders (order_id, tenant_id, amount, _zs_origin, _zs_version) "
                    "VALUES (%s, %s, %s, %s, 1) ON DUPLICATE KEY UPDATE amount = VALUES(amount)",
                    [
                        (zone.id * 1_000_000 + i, tenants[i % len(tenants)], round(i * 1.25, 2), zone.id)
                        for i in range(1, orders + 1)
                    ],
                )
        finally:
            conn.close()
        counts[zone.name] = orders
    return counts


def publish_example_rules(cfg: EnvConfig) -> tuple[str, object]:
    """Publish examples/rules.yaml as the first rules version (once): (what was done, the
    rules in force)."""
    from zonesync.config import REPO_ROOT
    from zonesync.meta import guards
    from zonesync.meta.store import MetaStore
    from zonesync.rules import load_file

    meta = env.meta_config(cfg)
    current = MetaStore(meta).rules_at()
    if current is not None:
        return f"zone-sharding rules: version {current[0]} in force (zonesync rules show)", current[1]
    rules = load_file(REPO_ROOT / "examples" / "rules.yaml")
    version = guards.push_and_wait(meta, rules, "make demo: initial split")
    return f"zone-sharding rules: examples/rules.yaml published as version {version} (zonesync rules show)", rules


def publish_example_tags(cfg: EnvConfig) -> str:
    """Publish examples/tags.yaml as the tag rules (once): what was done."""
    from zonesync.config import REPO_ROOT
    from zonesync.meta.store import MetaStore
    from zonesync.tagging.rules import load_file

    store = MetaStore(env.meta_config(cfg))
    current = store.tags_at()
    if current is not None:
        return f"tag rules: version {current[0]} in force (zonesync tags show)"
    version = store.publish_tags(load_file(REPO_ROOT / "examples" / "tags.yaml"), "make demo: sample tag rules")
    return f"tag rules: examples/tags.yaml published as version {version} (zonesync tags show)"


def load_sample_keys(cfg: EnvConfig, rules) -> dict[str, int]:
    """Each zone's tenants' session and last-order keys in its `sessions` repo, written
    through the zone's KV guard (so tagged by its KV tagger): keys per zone."""
    from zonesync.dal import Guard, ZoneDB
    from zonesync.dal.kv import KvGuard
    from zonesync.runtime.kv_endpoint import KvEndpoint, parse_repos

    counts = {}
    for zone, inst in zip(cfg.zones, env.instances(cfg)[1:], strict=True):
        guard = Guard(env.meta_config(cfg), zone.name, ZoneDB("127.0.0.1", inst.port, "root", "", "zonesync_app"))
        kv = KvGuard(guard.start(), KvEndpoint(zone.name, "127.0.0.1", zone.kv_port, parse_repos("sessions=0")))
        try:
            tenants = owned_tenants(rules, zone.name)
            for t in tenants:
                kv.set("sessions", f"demo:session:{t}:tok{t}", f"session of tenant {t}")
                kv.set("sessions", f"last_order:{t}", str(t))
            counts[zone.name] = 2 * len(tenants)
        finally:
            kv.close()
            guard.close()
    return counts


def wait_replicated(cfg: EnvConfig, total: int, timeout: float = 60.0) -> str:
    """Every zone holds every zone's sample orders: replication at work."""
    import time

    started = time.monotonic()
    while True:
        counts = {}
        for zone, inst in zip(cfg.zones, env.instances(cfg)[1:], strict=True):
            with inst.connect("zonesync_app").cursor() as cur:
                cur.execute("SELECT COUNT(*) FROM orders")
                counts[zone.name] = cur.fetchone()[0]
        if all(c >= total for c in counts.values()):
            took = time.monotonic() - started
            return f"replicated: every zone holds all {total} orders ({took:.1f} s); see `zonesync lag`"
        if time.monotonic() - started > timeout:
            return (
                f"replication still catching up after {timeout:.0f} s: {counts} (see `zonesync lag`, `zonesync alerts`)"
            )
        time.sleep(0.2)


def api_client(cfg: EnvConfig) -> AirflowApi:
    user = os.environ.get("ZONESYNC_AIRFLOW_USER", airflow_env.ADMIN_USER)
    password = os.environ.get("ZONESYNC_AIRFLOW_PASSWORD") or airflow_env.admin_password(cfg) or ""
    url = os.environ.get("ZONESYNC_AIRFLOW_URL") or f"http://127.0.0.1:{cfg.airflow_port}"
    return AirflowApi(url, user, password)


def run(cfg: EnvConfig) -> int:
    if not cfg.with_airflow:
        raise env.EnvError("the demo runs its main job through Airflow: unset ZONESYNC_WITH_AIRFLOW=0")
    env.up(cfg)
    env.load_sample_schema(cfg)
    published, rules = publish_example_rules(cfg)
    print(published)
    counts = load_sample_rows(cfg, rules)
    print(f"sample rows written: {', '.join(f'zone {z}: {c} orders' for z, c in counts.items())}")
    print(publish_example_tags(cfg))
    keys = load_sample_keys(cfg, rules)
    first = owned_tenants(rules, cfg.zones[0].name, 1)[0]
    print(
        f"sample KV keys written through the KV guards: {', '.join(f'zone {z}: {c}' for z, c in keys.items())} "
        f"(zonesync entity rows tenant {first} --zone {cfg.zones[0].name} --keys)"
    )
    if cfg.with_workers:
        print(wait_replicated(cfg, sum(counts.values())))

    api = api_client(cfg)
    api.wait_for_dag("zone_inventory")
    conf = {"zones": [z.name for z in cfg.zones], "table": "orders", "key": "order_id", "partitions": 4}
    run_doc = api.trigger("zone_inventory", conf)
    run_id = run_doc["dag_run_id"]
    print(f"main job: zone_inventory triggered through the REST API, run {run_id}")
    state = api.follow("zone_inventory", run_id, on_change=lambda t, s: print(f"  {t}: {s}"))
    if state != "success":
        print(f"main job ended {state}: see the task logs in the UI (Dags > zone_inventory > {run_id})")
        return 1
    result = api.xcom("zone_inventory", run_id, "report") or {}
    print("\nzone inventory of zonesync_app.orders (read by Spark over JDBC):")
    print(f"  {'zone':<6} {'rows':>8} {'key range':>24}  checksum")
    for zone, row in result.items():
        keys = f"{row['key_min']}..{row['key_max']}"
        print(f"  {zone:<6} {row['rows']:>8} {keys:>24}  {row['checksum']}")
    print()
    print(env.format_status(env.status(cfg)))
    password = airflow_env.admin_password(cfg)
    print(
        f"\nWhere to look:\n"
        f"  Airflow UI   http://127.0.0.1:{cfg.airflow_port}  login {airflow_env.ADMIN_USER} / {password}\n"
        f"               (password file: {cfg.airflow_home / 'passwords.json'})\n"
        f"  this run     Dags > zone_inventory > {run_id}\n"
        f"  zones        mariadb -h 127.0.0.1 -P {cfg.zones[0].port} -u root zonesync_app   (one port per zone)\n"
        f"  logs         {cfg.log_dir}\n"
        f"  stop         make dev-down   (or: .venv/bin/zonesync dev down)"
    )
    return 0
