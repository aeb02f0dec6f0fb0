"""`python -m zonesync.deploy_check`: refuse to start a deployment on placeholder secrets.

The compose file's `secrets-check` service runs this once with every secret of
docker/.env, and every other service waits for it to succeed: a deployment started
from docker/.env.example unchanged (its `change-me-*` values), with a password too short
to resist guessing, or with a Fernet key that is not one, stops here with one line
naming each variable to set (never its value), before any server is initialised with it.
"""

from __future__ import annotations

import os
import sys

PLACEHOLDER = "change-me"
MIN_LENGTH = 16
# docker/.env's secrets (docker/docker-compose.yml passes each to the check)
SECRETS = (
    "MYSQL_ROOT_PASSWORD",
    "ZONESYNC_REPLICATOR_PASSWORD",
    "ZONESYNC_APPLIER_PASSWORD",
    "ZONESYNC_APP_PASSWORD",
    "ZONESYNC_BATCH_PASSWORD",
    "ZONESYNC_SCHEMA_PASSWORD",
    "ZONESYNC_META_PASSWORD",
    "ZONESYNC_ADMIN_PASSWORD",
    "KAFKA_ADMIN_PASSWORD",
    "KAFKA_REPLICATOR_A_PASSWORD",
    "KAFKA_REPLICATOR_B_PASSWORD",
    "KAFKA_REPLICATOR_C_PASSWORD",
    "KAFKA_APPLIER_A_PASSWORD",
    "KAFKA_APPLIER_B_PASSWORD",
    "KAFKA_APPLIER_C_PASSWORD",
    "KAFKA_BATCH_PASSWORD",
    "KAFKA_TAGGER_A_PASSWORD",
    "KAFKA_TAGGER_B_PASSWORD",
    "KAFKA_TAGGER_C_PASSWORD",
    "POSTGRES_PASSWORD",
    "AIRFLOW_FERNET_KEY",
    "AIRFLOW_JWT_SECRET",
    "AIRFLOW_API_SECRET_KEY",
    "AIRFLOW_ADMIN_PASSWORD",
)


def problems(environ) -> list[str]:
    """What is wrong with the secrets in `environ`: one phrase per variable."""
    out = []
    for name in SECRETS:
        value = environ.get(name, "")
        if not value:
            out.append(f"{name} is not set")
        elif PLACEHOLDER in value.lower():
            out.append(f"{name} is still the .env.example placeholder")
        elif len(value) < MIN_LENGTH:
            out.append(f"{name} is shorter than {MIN_LENGTH} characters")
        elif name == "AIRFLOW_FERNET_KEY" and not _is_fernet_key(value):
            out.append(f"{name} is not a Fernet key")
    return out


def _is_fernet_key(value: str) -> bool:
    from cryptography.fernet import Fernet

    try:
        Fernet(value.encode())
        return True
    except ValueError:
        return False


def main(environ=None) -> int:
    found = problems(os.environ if environ is None else environ)
    if found:
        print(f"refusing to start: {'; '.join(found)}: set them in docker/.env (its header shows how to "
              "generate each)", file=sys.stderr)  # fmt: skip
        return 2
    print("secrets: every one set, none a placeholder")
    return 0


if __name__ == "__main__":
    sys.exit(main())
