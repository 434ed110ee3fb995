"""CostModel's value types and variants, checked against values worked out by hand."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace

import pytest

from quiclab.errors import DataError
from quiclab.models.costmodel import CostModel, Param
from quiclab.models.testing import synthetic_model


def test_a_param_holds_its_value_inside_a_finite_interval():
    assert Param(2.0, 2.0, 2.0, "ns", "x").value == 2.0  # a point is its own interval
    for bad in ((3.0, 1.0, 2.0), (0.5, 1.0, 2.0), (math.nan, 0.0, 1.0), (1.0, 0.0, math.inf)):
        with pytest.raises(ValueError):
            Param(*bad, "ns", "assumed: test")


def test_point_and_scaled_keep_lo_below_hi():
    p = Param.point(100.0, "ns", "x", rel=0.2)
    assert (p.lo, p.value, p.hi) == pytest.approx((80.0, 100.0, 120.0))
    neg = Param.point(-10.0, "ns", "x", rel=0.5)  # a negative value: lo is the more negative
    assert (neg.lo, neg.hi) == pytest.approx((-15.0, -5.0))
    flipped = p.scaled(-2.0)
    assert (flipped.lo, flipped.value, flipped.hi) == pytest.approx((-240.0, -200.0, -160.0))
    assert p.scaled(0.5).to_json() == {"value": 50.0, "lo": 40.0, "hi": 60.0, "unit": "ns",
                                       "source": "x"}


def test_a_param_from_json():
    assert Param.from_json(3, "f") == Param(3.0, 3.0, 3.0, "", "assumed: bare number")
    full = {"value": 2, "lo": 1, "hi": 4, "unit": "ns", "source": "fit: rows"}
    assert Param.from_json(full, "f") == Param(2.0, 1.0, 4.0, "ns", "fit: rows")
    assert Param.from_json({k: v for k, v in full.items() if k != "unit"}, "f").unit == ""
    for bad in ({"value": 1}, {"value": "x", "lo": 0, "hi": 2, "source": "s"}, None):
        with pytest.raises(DataError, match="malformed parameter"):
            Param.from_json(bad, "model.json: sender.ns_per_packet")


def test_roles():
    m = synthetic_model("a", sender_ns=1000.0, receiver_ns=2000.0)
    assert m.role("sender") is m.sender and m.role("receiver") is m.receiver
    with pytest.raises(ValueError, match=re.escape("role='client': allowed sender | receiver")):
        m.role("client")
    names = [n for n, _ in m.params()]
    assert "sender.ns_per_packet" in names and "receiver.ns_per_ack" in names
    assert "crypto.aes-ni.ns_per_packet" in names and "crypto.chacha20.ns_per_byte" in names


def _with_variants(**variants) -> CostModel:
    return replace(synthetic_model("v", sender_ns=1000.0, receiver_ns=2000.0,
                                   crypto_ns=300.0), variants=variants)


def test_a_variants_cost_factor_scales_its_roles_and_shared_crypto_only_with_both():
    m = _with_variants(fast={"cost_factor": 0.5},
                       client={"cost_factor": {"value": 2.0}, "cost_roles": ["receiver"]})
    fast = m.with_variant("fast")
    assert fast.implementation == "v@fast"
    assert (fast.sender.ns_per_packet.value, fast.receiver.ns_per_packet.value) == (500.0, 1000.0)
    assert fast.crypto["aes-ni"].ns_per_packet.value == 150.0
    client = m.with_variant("client")
    assert (client.sender.ns_per_packet.value, client.receiver.ns_per_packet.value) == (
        1000.0, 4000.0)
    assert client.crypto["aes-ni"].ns_per_packet.value == 300.0  # shared: unscaled
    assert m.with_variant("") is m


def test_a_variant_overrides_behaviour_and_single_parameters():
    m = _with_variants(big={"behaviour": {"udp_payload_bytes": 1452},
                            "sender.ns_per_packet": {"value": 700, "lo": 600, "hi": 800,
                                                     "source": "published: x"},
                            "receiver.app_ns_per_byte.h3": 0.3})
    big = m.with_variant("big")
    assert big.behaviour.udp_payload_bytes == 1452
    assert big.sender.ns_per_packet == Param(700.0, 600.0, 800.0, "", "published: x")
    assert big.receiver.app_ns_per_byte["h3"].value == 0.3
    assert big.receiver.ns_per_packet == m.receiver.ns_per_packet
    with pytest.raises(KeyError, match="v@slow: unknown variant \\(known: big\\)"):
        m.with_variant("slow")
    with pytest.raises(KeyError, match="known: none"):
        _with_variants().with_variant("slow")


def test_json_round_trip_and_refusals(tmp_path):
    m = _with_variants(fast={"cost_factor": 0.5})
    path = tmp_path / "v.json"
    path.write_text(m.dumps())
    back = CostModel.load(path)
    assert back.dumps() == m.dumps() and back.with_variant("fast").sender == \
        m.with_variant("fast").sender
    data = json.loads(m.dumps())
    schema = re.escape("schema='other', expected 'quiclab.costmodel/1'")
    with pytest.raises(DataError, match=schema):
        CostModel.from_json({**data, "schema": "other"}, "v.json")
    with pytest.raises(DataError, match="missing key 'reference_cpu'"):
        CostModel.from_json({k: v for k, v in data.items() if k != "reference_cpu"}, "v.json")
    path.write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        CostModel.load(path)
