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
