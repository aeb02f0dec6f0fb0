"""Settings: defaults, derived addresses, and one clear error per bad value."""

from __future__ import annotations

import pytest

from zonesync import config

pytestmark = pytest.mark.unit


def test_defaults_three_zones_away_from_3306(tmp_path):
    cfg = config.load({"ZONESYNC_STATE_DIR": str(tmp_path)})
    assert [(z.id, z.name) for z in cfg.zones] == [(1, "a"), (2, "b"), (3, "c")]
    ports = [cfg.meta_port, *(z.port for z in cfg.zones)]
    assert 3306 not in ports and len(set(ports)) == 4
    assert cfg.zone("b").port == cfg.meta_port + 2
    assert cfg.state_dir == tmp_path.resolve()


@pytest.mark.parametrize(
    "env, field, words",
    [
        ({"ZONESYNC_ZONES": "a,A"}, "ZONESYNC_ZONES", "lower-case"),
        ({"ZONESYNC_ZONES": "a,a"}, "ZONESYNC_ZONES", "repeat"),
        ({"ZONESYNC_ZONES": " , "}, "ZONESYNC_ZONES", "empty"),
        ({"ZONESYNC_BASE_PORT": "x"}, "ZONESYNC_BASE_PORT", "whole number"),
        ({"ZONESYNC_BASE_PORT": "80"}, "ZONESYNC_BASE_PORT", "between"),
        ({"ZONESYNC_BASE_PORT": "3304"}, "ZONESYNC_BASE_PORT", "3306"),
        ({"ZONESYNC_KAFKA_PARTITIONS": "0"}, "ZONESYNC_KAFKA_PARTITIONS", "between"),
    ],
)
def test_bad_settings_name_the_field_and_the_fix(env, field, words):
    with pytest.raises(config.ConfigError) as err:
        config.load(env)
    assert field in str(err.value) and words in str(err.value)


def test_unknown_zone_lists_the_known_ones():
    cfg = config.load({})
    with pytest.raises(config.ConfigError, match="known zones are a, b, c"):
        cfg.zone("z")


# -- the dev environment is selected, never fallen back to silently ---------------------


def _env(tmp_path, **extra) -> dict:
    return {"ZONESYNC_STATE_DIR": str(tmp_path / "state"), **extra}


def test_dev_is_selected_by_the_flag_or_a_dev_state_dir(tmp_path):
    assert not config.dev_selected(_env(tmp_path))
    assert config.dev_selected(_env(tmp_path, ZONESYNC_DEV="1"))
    (tmp_path / "state" / "run").mkdir(parents=True)  # `zonesync dev up` ran here
    assert config.dev_selected(_env(tmp_path))
    assert not config.dev_selected(_env(tmp_path, ZONESYNC_DEV="0"))
    with pytest.raises(config.ConfigError, match="ZONESYNC_DEV='maybe'"):
        config.dev_selected(_env(tmp_path, ZONESYNC_DEV="maybe"))


def test_a_missing_zone_url_is_one_line_naming_the_variable(tmp_path):
    from zonesync.runtime.endpoints import zone_endpoint

    with pytest.raises(config.ConfigError) as err:
        zone_endpoint("b", _env(tmp_path))
    text = str(err.value)
    assert text.startswith("ZONESYNC_ZONE_B_URL is not set") and "ZONESYNC_DEV=1" in text and "\n" not in text


def test_the_zone_url_gives_the_endpoint_and_the_zone_id(tmp_path):
    from zonesync.runtime.endpoints import zone_endpoint

    ep = zone_endpoint("c", _env(tmp_path, ZONESYNC_ZONE_C_URL="mysql://app%40x:p%2Fw@db.c:3310/shop"))
    assert (ep.name, ep.zone_id, ep.host, ep.port, ep.user, ep.password, ep.database) == (
        "c", 3, "db.c", 3310, "app@x", "p/w", "shop"
    )  # fmt: skip
    with pytest.raises(config.ConfigError, match="ZONESYNC_ZONE_C_URL must look like mysql://"):
        zone_endpoint("c", _env(tmp_path, ZONESYNC_ZONE_C_URL="postgres://db.c/shop"))
    # no user: an error, never root (each role has its own account)
    with pytest.raises(config.ConfigError, match="ZONESYNC_ZONE_C_URL names no user"):
        zone_endpoint("c", _env(tmp_path, ZONESYNC_ZONE_C_URL="mysql://db.c:3310/shop"))


def test_the_dev_zone_is_the_local_instance_only_when_selected(tmp_path):
    from zonesync.runtime.endpoints import zone_endpoint

    env = _env(tmp_path, ZONESYNC_DEV="1", ZONESYNC_BASE_PORT="24000")
    ep = zone_endpoint("b", env)
    assert (ep.host, ep.port, ep.user, ep.database, ep.zone_id) == ("127.0.0.1", 24002, "root", "zonesync_app", 2)


def test_a_missing_meta_url_is_one_line_naming_the_variable(tmp_path):
    from zonesync.meta.db import MetaConfig

    with pytest.raises(config.ConfigError, match="^ZONESYNC_META_URL is not set"):
        MetaConfig.from_env(_env(tmp_path))
    meta = MetaConfig.from_env(_env(tmp_path, ZONESYNC_DEV="1", ZONESYNC_BASE_PORT="24000"))
    assert (meta.host, meta.port, meta.database) == ("127.0.0.1", 24000, "zonesync_meta")


def test_a_meta_url_without_a_user_is_refused_never_root(tmp_path):
    from zonesync.meta.db import MetaConfig

    with pytest.raises(config.ConfigError, match="ZONESYNC_META_URL names no user"):
        MetaConfig.from_env(_env(tmp_path, ZONESYNC_META_URL="mysql://meta.db:3306/zonesync_meta"))
    meta = MetaConfig.from_env(_env(tmp_path, ZONESYNC_META_URL="mysql://zs_meta:pw@meta.db:3306/zonesync_meta"))
    assert (meta.user, meta.password) == ("zs_meta", "pw")
