"""Names checked whole, one way (zonesync.sql_names), and secrets kept out of reprs."""

from __future__ import annotations

import pytest

from zonesync import config
from zonesync.apply.batch.statements import q
from zonesync.apply.errors import ApplyError
from zonesync.capture.source import SourceDB
from zonesync.check.request import CheckRefused, CheckRequest, check_shape
from zonesync.dal.transaction import TableContractError, _q
from zonesync.meta.db import MetaConfig
from zonesync.sql_names import is_ident, is_zone_name, quote

TRAILING = ["orders\n", "a\n", "orders\r", " orders", "orders "]


@pytest.mark.parametrize("name", ["orders", "_zs_origin", "T1", "a" * 64])
def test_plain_names_pass(name):
    assert is_ident(name)
    assert quote(name) == f"`{name}`"


@pytest.mark.parametrize("name", [*TRAILING, "", "1st", "a" * 65, "or`ders", "ordérs", "ord\u0661rs", None, 5])
def test_anything_else_is_refused(name):
    assert not is_ident(name)
    with pytest.raises(ValueError):
        quote(name)


def test_each_layer_refuses_with_its_own_error():
    with pytest.raises(ApplyError, match="not a plain SQL name"):
        q("orders\n")
    # the guard's quoting took any Unicode letter or digit (str.isalnum) before
    with pytest.raises(TableContractError, match="not a plain SQL name"):
        _q("ordérs")


@pytest.mark.parametrize("name", ["a", "zone_2", "a" * 16])
def test_zone_names(name):
    assert is_zone_name(name)


@pytest.mark.parametrize("name", ["a\n", "A", "2a", "a" * 17, "a-b", ""])
def test_bad_zone_names_are_refused_everywhere(name):
    assert not is_zone_name(name)
    if name.strip() == name:  # the environment's list is split and stripped first
        with pytest.raises(config.ConfigError, match="ZONESYNC_ZONES"):
            config.parse_zone_names(name or ",")
    with pytest.raises(CheckRefused):
        check_shape(CheckRequest(zones=(name,), tables=("orders",), reason="t"))


def test_passwords_stay_out_of_reprs():
    assert "s3cret" not in repr(MetaConfig("h", 1, "u", "s3cret", "d"))
    assert "s3cret" not in repr(SourceDB("h", 1, "u", "s3cret"))
