"""The compose deployment (docker/): the zones' server settings (mariadb/zonesync.cnf)
that capture and its retention rely on, the secrets check, and one database account per
role; checked where no Docker engine runs."""

from __future__ import annotations

import configparser
from pathlib import Path

CNF = Path(__file__).resolve().parents[2] / "docker" / "mariadb" / "zonesync.cnf"


def _settings() -> dict[str, str]:
    parser = configparser.ConfigParser(allow_no_value=True, inline_comment_prefixes=("#",))
    parser.read(CNF)
    return {k.replace("-", "_"): (v or "").strip() for k, v in parser["mariadbd"].items()}


def test_compose_zones_capture_whole_rows_and_never_purge_by_themselves():
    """S003-28: ROW events, FULL images and metadata, uncompressed. S001-08: the server
    never expires a binlog (safe-purge decides). S002-04: durable commits. S002-14: a
    zone's AUTO_INCREMENT values are its own (the step here, the offset per service)."""
    s = _settings()
    assert (s["binlog_format"], s["binlog_row_image"], s["binlog_row_metadata"]) == ("ROW", "FULL", "FULL")
    assert s["log_bin_compress"] == "OFF"
    assert int(s["binlog_expire_logs_seconds"]) == 0
    assert (s["sync_binlog"], s["innodb_flush_log_at_trx_commit"]) == ("1", "1")
    assert s["auto_increment_increment"] == "16"


COMPOSE = CNF.parents[1] / "docker-compose.yml"
ENV_EXAMPLE = CNF.parents[1] / ".env.example"


def _example_env() -> dict[str, str]:
    out = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def test_a_deployment_from_the_example_env_is_refused_naming_each_secret(capsys):
    """Issue 24, item 6: the compose must not start on the change-me placeholders."""
    from zonesync import deploy_check

    example = _example_env()
    assert set(deploy_check.SECRETS) <= set(example), "every secret the check knows is in .env.example"
    assert deploy_check.main(example) == 2
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and line.startswith("refusing to start:")
    for name in deploy_check.SECRETS:
        assert f"{name} is still the .env.example placeholder" in line
    assert "change-me" not in line.split(":", 1)[1].replace(".env.example placeholder", ""), "values stay out"


def test_real_secrets_pass_and_weak_ones_are_named():
    import secrets

    from cryptography.fernet import Fernet

    from zonesync import deploy_check

    good = {name: secrets.token_urlsafe(24) for name in deploy_check.SECRETS}
    good["AIRFLOW_FERNET_KEY"] = Fernet.generate_key().decode()
    assert deploy_check.problems(good) == []
    weak = {**good, "POSTGRES_PASSWORD": "short", "AIRFLOW_FERNET_KEY": "x" * 44, "AIRFLOW_JWT_SECRET": ""}
    assert deploy_check.problems(weak) == [
        "POSTGRES_PASSWORD is shorter than 16 characters",
        "AIRFLOW_FERNET_KEY is not a Fernet key",
        "AIRFLOW_JWT_SECRET is not set",
    ]


def test_every_compose_service_waits_for_the_secrets_check():
    import yaml

    from zonesync import deploy_check

    services = yaml.safe_load(COMPOSE.read_text())["services"]
    check = services["secrets-check"]
    assert check["command"] == ["python", "-m", "zonesync.deploy_check"]
    assert set(deploy_check.SECRETS) <= set(check["environment"])

    def waits(name: str, seen=()) -> bool:
        deps = services[name].get("depends_on") or {}
        if "secrets-check" in deps:
            assert deps["secrets-check"]["condition"] == "service_completed_successfully"
            return True
        return any(waits(d, (*seen, name)) for d in deps if d not in seen)

    late = [name for name in services if name != "secrets-check" and not waits(name)]
    assert late == [], f"these start without the secrets check: {late}"


def _services() -> dict:
    import yaml

    return yaml.safe_load(COMPOSE.read_text())["services"]


def test_each_worker_reaches_its_zone_under_its_roles_account_and_nothing_more():
    """Issue 24, item 3: a replicator connects as zs_replicator, an applier as zs_applier,
    meta as zs_meta; a worker gets no Airflow connection and no other zone's URL; Airflow
    reaches the zones as zs_batch; only the meta-migrate one-shot is zs_admin."""
    services = _services()
    for zone in "abc":
        for kind, role in (("replicator", "zs_replicator"), ("applier", "zs_applier"), ("tagger", "zs_applier")):
            env = services[f"{kind}-{zone}"]["environment"]
            urls = {k: v for k, v in env.items() if k.endswith("_URL")}
            assert set(urls) == {f"ZONESYNC_ZONE_{zone.upper()}_URL", "ZONESYNC_META_URL"}, (kind, zone, urls)
            assert urls[f"ZONESYNC_ZONE_{zone.upper()}_URL"].startswith(f"mysql://{role}:")
            assert urls["ZONESYNC_META_URL"].startswith("mysql://zs_meta:")
            assert not [k for k in env if k.startswith("AIRFLOW")], (kind, zone)
    scheduler = services["airflow-scheduler"]["environment"]
    assert all(scheduler[f"ZONESYNC_ZONE_{z}_URL"].startswith("mysql://zs_batch:") for z in "ABC")
    assert '"login": "zs_batch"' in scheduler["AIRFLOW_CONN_ZONESYNC_ZONE_A"]
    admins = [n for n, svc in services.items() if "zs_admin:" in str(svc.get("environment", ""))]
    assert admins == ["meta-migrate"]


def test_every_server_gets_the_role_accounts_and_their_passwords():
    from tests.support.roles import ROLES, statements
    from zonesync import deploy_check

    services = _services()
    servers = [n for n, svc in services.items() if str(svc.get("image", "")).startswith("mariadb")]
    assert sorted(servers) == ["meta", "zone-a", "zone-b", "zone-c"]
    for name in servers:
        mounts = services[name]["volumes"]
        assert "./mariadb/roles.sql:/docker-entrypoint-initdb.d/roles.sql.in:ro" in mounts
        assert any(m.startswith("./mariadb/initdb/20-zonesync-roles.sh:") for m in mounts)
        zone_grants = "./mariadb/roles-zone.sql:/docker-entrypoint-initdb.d/21-zonesync-zone-grants.sql:ro"
        assert (zone_grants in mounts) == name.startswith("zone-"), name
    script = (CNF.parent / "initdb" / "20-zonesync-roles.sh").read_text()
    created = {s.split("'")[1] for s in statements((CNF.parent / "roles.sql").read_text()) if "CREATE USER" in s}
    assert created == set(ROLES)
    for role in ROLES:
        assert f"ALTER USER '{role}'@'%' IDENTIFIED BY" in script
    passwords = {n for n in deploy_check.SECRETS if n.startswith("ZONESYNC_")}
    assert passwords == {f"ZONESYNC_{r.removeprefix('zs_').upper()}_PASSWORD" for r in ROLES}


def test_kafka_authenticates_every_client_and_each_worker_is_its_own_principal():
    """Issue 24, item 1: SASL on every listener a client reaches, ACLs with no default
    allow, and each worker producing or consuming as itself with only its grants."""
    services = _services()
    kafka = services["kafka"]["environment"]
    listeners = dict(p.split(":") for p in kafka["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert listeners == {"CLIENT": "SASL_PLAINTEXT", "CONTROLLER": "PLAINTEXT", "EXTERNAL": "SASL_PLAINTEXT"}
    assert "9093" not in str(services["kafka"].get("ports")), "the controller listener stays inside"
    assert kafka["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] == "false"
    assert kafka["KAFKA_AUTHORIZER_CLASS_NAME"].endswith("StandardAuthorizer")
    init = services["kafka-init"]["command"][0]
    for zone in "abc":
        for kind in ("replicator", "applier", "tagger"):
            env = services[f"{kind}-{zone}"]["environment"]
            assert env["ZONESYNC_KAFKA_SECURITY_PROTOCOL"] == "SASL_PLAINTEXT"
            assert env["ZONESYNC_KAFKA_USERNAME"] == f"{kind}-{zone}"
            assert env["ZONESYNC_KAFKA_PASSWORD"] == f"${{KAFKA_{kind.upper()}_{zone.upper()}_PASSWORD:?set in .env}}"
    # the replicator writes its own topic only; the applier reads the others' in its group
    assert 'allow "replicator-$${zone}" --operation Write --operation Read --operation Describe \\\n' in init
    assert '--topic "zonesync.$${zone}.changes"' in init
    assert '[ "$$other" = "$$zone" ] && continue' in init
    assert 'allow "applier-$${zone}" --operation Read --group "zonesync-apply-$${zone}"' in init
    assert services["airflow-scheduler"]["environment"]["ZONESYNC_KAFKA_USERNAME"] == "batch"
