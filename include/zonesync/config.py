"""Where the local environment lives and how it is addressed.

Everything the dev environment needs is derived from a handful of environment
variables so that a test, a second checkout or a CI run can stand up its own
private copy beside another without touching it (and never the machine's own
MariaDB on 3306). Defaults are the embedded local setup `make demo` uses.

| variable                  | default        | meaning                                   |
|---------------------------|----------------|-------------------------------------------|
| ZONESYNC_STATE_DIR        | ./.zonesync    | datadirs, pids, logs, broker bootstrap     |
| ZONESYNC_ZONES            | a,b,c          | zone names; ids are 1..N in this order     |
| ZONESYNC_BASE_PORT        | 23306          | meta = base, zone i = base + i             |
| ZONESYNC_KV_BASE_PORT     | base + 60      | zone i's Redis (its KV repos) = kv base + i|
| ZONESYNC_AIRFLOW_PORT     | 28080          | Airflow API server / UI on 127.0.0.1       |
| ZONESYNC_KAFKA_PARTITIONS | 32             | partitions of topics the dev broker creates|
| ZONESYNC_WITH_AIRFLOW     | 1              | 0: no Airflow                              |
| ZONESYNC_WITH_WORKERS     | 1              | 0: no replicators / appliers               |
| ZONESYNC_DEV              | (unset)        | 1: zones and meta default to this env's    |
| ZONESYNC_TOPIC_PREFIX     | (empty)        | before every topic name, e.g. `staging.`   |

This describes the dev environment only. Production code never falls back to it
silently: a zone's database is ZONESYNC_ZONE_<NAME>_URL and the meta store
ZONESYNC_META_URL, and a missing one is an error naming the variable unless the dev
environment is selected (`dev_selected`): ZONESYNC_DEV=1 (`zonesync dev up` sets it for
the workers it starts, the test session for its own), or the state dir is one a dev
environment runs in (its `run/` dir exists), as after `zonesync dev up`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from zonesync.sql_names import is_zone_name

REPO_ROOT = Path(__file__).resolve().parents[2]


class ConfigError(ValueError):
    """A setting is wrong; the message names the variable and the fix."""


@dataclass(frozen=True)
class Zone:
    id: int
    name: str
    port: int
    kv_port: int = 0  # the zone's private redis-server in the dev env (its KV repos)

    @property
    def instance(self) -> str:
        return f"zone-{self.name}"

    @property
    def kv_instance(self) -> str:
        return f"kv-{self.name}"


@dataclass(frozen=True)
class EnvConfig:
    state_dir: Path
    zones: tuple[Zone, ...]
    meta_port: int
    airflow_port: int
    kafka_partitions: int
    with_airflow: bool = True
    with_workers: bool = True

    @property
    def kv_base_port(self) -> int:
        """ZONESYNC_KV_BASE_PORT: zone i's Redis listens on this + i."""
        return self.zones[0].kv_port - self.zones[0].id

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def data_dir(self) -> Path:
        return self.state_dir / "data"

    @property
    def airflow_home(self) -> Path:
        return self.state_dir / "airflow"

    @property
    def broker_file(self) -> Path:
        return self.state_dir / "broker.json"

    def zone(self, name: str) -> Zone:
        for zone in self.zones:
            if zone.name == name:
                return zone
        known = ", ".join(z.name for z in self.zones)
        raise ConfigError(f"unknown zone {name!r}: known zones are {known}")


def _int_env(env: dict, name: str, default: int, lo: int, hi: int) -> int:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a whole number: set it to one between {lo} and {hi}") from None
    if not lo <= value <= hi:
        raise ConfigError(f"{name}={value} is out of range: set it between {lo} and {hi}")
    return value


def parse_zone_names(raw: str, field: str = "ZONESYNC_ZONES") -> list[str]:
    names = [n.strip() for n in raw.split(",") if n.strip()]
    if not names:
        raise ConfigError(f"{field} is empty: give comma-separated zone names, e.g. a,b,c")
    for name in names:
        if not is_zone_name(name):
            raise ConfigError(
                f"{field}: zone name {name!r} is invalid: use lower-case letters, digits and _ "
                "(start with a letter, at most 16 characters)"
            )
    if len(set(names)) != len(names):
        raise ConfigError(f"{field}: zone names repeat in {raw!r}: each zone needs its own name")
    return names


def load(env: dict | None = None) -> EnvConfig:
    env = dict(os.environ if env is None else env)
    state = Path(env.get("ZONESYNC_STATE_DIR") or REPO_ROOT / ".zonesync").resolve()
    names = parse_zone_names(env.get("ZONESYNC_ZONES") or "a,b,c")
    base = _int_env(env, "ZONESYNC_BASE_PORT", 23306, 1024, 65000)
    if base <= 3306 < base + len(names) + 1:
        raise ConfigError(
            f"ZONESYNC_BASE_PORT={base} would put a zone on 3306, the machine's own MariaDB: "
            "pick a base port away from it"
        )
    kv_base = _int_env(env, "ZONESYNC_KV_BASE_PORT", base + 60, 1024, 65000)
    if kv_base <= 6379 < kv_base + len(names) + 1:
        raise ConfigError(f"ZONESYNC_KV_BASE_PORT={kv_base} would put a zone's Redis on 6379, the machine's own "
                          "Redis: pick a base port away from it")  # fmt: skip
    zones = tuple(Zone(i, n, base + i, kv_base + i) for i, n in enumerate(names, start=1))
    return EnvConfig(
        state_dir=state,
        zones=zones,
        meta_port=base,
        airflow_port=_int_env(env, "ZONESYNC_AIRFLOW_PORT", 28080, 1024, 65535),
        kafka_partitions=_int_env(env, "ZONESYNC_KAFKA_PARTITIONS", 32, 1, 256),
        with_airflow=env.get("ZONESYNC_WITH_AIRFLOW", "1") not in ("0", "false", "no"),
        with_workers=env.get("ZONESYNC_WITH_WORKERS", "1") not in ("0", "false", "no"),
    )


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def dev_selected(env: dict | None = None) -> bool:
    """Whether addresses may default to the local dev environment's instances: ZONESYNC_DEV=1,
    or (ZONESYNC_DEV unset) the state dir is one a dev environment was started in."""
    env = os.environ if env is None else env
    flag = (env.get("ZONESYNC_DEV") or "").strip().lower()
    if flag in _TRUE:
        return True
    if flag in _FALSE:
        return False
    if flag:
        raise ConfigError(f"ZONESYNC_DEV={flag!r}: give 1 (use the local dev environment) or 0")
    return load(env).run_dir.is_dir()


def require_dev(variable: str, what: str, env: dict | None = None,
                form: str = "mysql://user:password@host:port/db") -> None:  # fmt: skip
    """Raise the one-line error for a missing production setting unless the dev environment is selected."""
    if not dev_selected(env):
        raise ConfigError(
            f"{variable} is not set: give {what} as {form} "
            "(or ZONESYNC_DEV=1 for the local environment of `zonesync dev up`)"
        )
