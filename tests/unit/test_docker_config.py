"""The compose zones' server settings (docker/mysql/zonesync.cnf): what capture and its
retention rely on, checked where no server runs."""

from __future__ import annotations

import configparser
from pathlib import Path

CNF = Path(__file__).resolve().parents[2] / "docker" / "mysql" / "zonesync.cnf"


def _settings() -> dict[str, str]:
    parser = configparser.ConfigParser(allow_no_value=True, inline_comment_prefixes=("#",))
    parser.read(CNF)
    return {k.replace("-", "_"): (v or "").strip() for k, v in parser["mysqld"].items()}


def test_compose_zones_capture_whole_rows_and_never_purge_by_themselves():
    """S003-28: ROW events, FULL images and metadata. S001-08: the server's own expiry is
    off (safe-purge decides), with the longest period behind it. S002-04: durable commits."""
    s = _settings()
    assert (s["binlog_format"], s["binlog_row_image"], s["binlog_row_metadata"]) == ("ROW", "FULL", "FULL")
    assert s["binlog_expire_logs_auto_purge"] == "OFF"
    assert int(s["binlog_expire_logs_seconds"]) == 2**32 - 1
    assert (s["sync_binlog"], s["innodb_flush_log_at_trx_commit"]) == ("1", "1")


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
