"""What a model file may leave out, what it may not, and how its numbers are written.

The expectations are the documented defaults (the field docstrings of
models/costmodel.py and the RFC sections they cite) and numbers rounded by hand.
"""

from __future__ import annotations

import math

import pytest

from quiclab.errors import DataError
from quiclab.models.costmodel import (
    REQUEST_COSTS,
    ROLE_COSTS,
    Behaviour,
    Param,
    RoleCosts,
    variant_cost_factor,
)

BULK_ROLE = {name: {"value": 100.0 + i, "lo": 90.0, "hi": 120.0, "unit": "ns", "source": "s"}
             for i, name in enumerate(ROLE_COSTS)}


def test_a_param_is_written_to_six_significant_digits() -> None:
    # 1/3 → 0.333333; 123456789 → 1.23457e8; 0 and ±inf stay as they are.
    p = Param(1.0 / 3.0, 0.0, 123456789.0, "ns", "s")
    assert p.to_json()["value"] == 0.333333
    assert p.to_json()["lo"] == 0.0
    assert p.to_json()["hi"] == 123457000.0
    assert Param(-2.0 / 3.0, -1.0, 0.0, "ns", "s").to_json()["value"] == -0.666667


def test_a_bulk_only_role_takes_one_core_and_no_request_costs() -> None:
    role = RoleCosts.from_json(BULK_ROLE, "m.json: sender")
    # "cores: 1 = single thread" when the file names none.
    assert (role.cores.lo, role.cores.value, role.cores.hi) == (1.0, 1.0, 1.0)
    for name in REQUEST_COSTS:
        p = getattr(role, name)
        # An uncalibrated default is a point, not an interval: lo = value = hi.
        assert p.lo == p.value == p.hi, name
    assert role.request_cores.value == 1.0  # one event loop
    assert role.request_cores_half.value == 0.0  # all extra cores at once
    assert role.ns_per_connection.value == role.connection_wait_us.value == 0.0
    assert role.request_cores_at(50.0) == 1.0


def test_a_role_missing_a_cost_names_it() -> None:
    data = {k: v for k, v in BULK_ROLE.items() if k != "ns_per_ack"}
    with pytest.raises(DataError, match=r"m\.json: receiver.*missing cost 'ns_per_ack'"):
        RoleCosts.from_json(data, "m.json: receiver")


def test_a_bare_behaviour_has_the_documented_defaults() -> None:
    b = Behaviour.from_json({}, "m.json: behaviour")
    assert b.immediate_ack_on_gap is True           # RFC 9000 §13.2.1
    assert b.ack_threshold_floor_packets == 2.0     # RFC 9000 §13.2.2: every second packet
    assert b.ack_every_packets == 2.0
    assert b.max_ack_delay_ms == 25.0               # RFC 9000 §18.2 default max_ack_delay
    assert b.reno_beta == 0.5                       # RFC 9002 kLossReductionFactor
    # No receiver stalls unless a model states them (rate 0, minimum 0); the shape
    # α = 2 makes drops fall as 1/B (Kempf et al. 2024 Fig. 3).
    assert (b.rx_stall_rate_hz, b.rx_stall_min_us, b.rx_stall_alpha) == (0.0, 0.0, 2.0)
    # "The defaults pace packet by packet": one datagram per burst at least and at most.
    assert (b.pacing_burst_ms, b.pacing_burst_min_packets, b.pacing_burst_max_packets) \
        == (0.0, 1, 1)
    assert b.fc_window_bytes == 16 * 1024 * 1024    # 16 MiB connection window
    assert b.udp_payload_bytes - b.overhead_bytes == 1310  # stream bytes of a 1350-byte packet


@pytest.mark.parametrize(("key", "value", "ok"), [
    ("ack_threshold_floor_packets", 1.0, True),   # ACK every packet is allowed …
    ("ack_threshold_floor_packets", 0.9, False),  # … fewer than one is not
    ("ack_timer_ms", 0.0, True),                  # 0 = the advertised max_ack_delay
    ("ack_timer_ms", 0.5, True),
    ("ack_timer_ms", -0.1, False),
    ("reno_beta", 0.7, True),                     # quic-go's Reno
    ("reno_beta", 1.0, False),                    # no decrease at all is no Reno
    ("reno_beta", 0.0, False),
])
def test_behaviour_bounds(key: str, value: float, ok: bool) -> None:
    if ok:
        assert getattr(Behaviour.from_json({key: value}, "m.json"), key) == value
    else:
        with pytest.raises(DataError, match=key):
            Behaviour.from_json({key: value}, "m.json")


def test_a_variants_cost_factor() -> None:
    assert variant_cost_factor({}) == 1.0
    assert variant_cost_factor({"cost_factor": 1.3}) == 1.3
    assert variant_cost_factor({"cost_factor": {"value": 0.8, "lo": 0.7, "hi": 0.9}}) == 0.8
    assert variant_cost_factor({"cost_factor": {"source": "no value"}}) == 1.0
    assert math.isfinite(variant_cost_factor({"cost_factor": 2}))


def test_a_tcp_models_costs_are_listed_with_the_rest() -> None:
    from dataclasses import replace

    from quiclab.models.tcpcost import KERNEL_TERMS, USER_TERMS, TcpCosts
    from quiclab.models.testing import synthetic_model

    def point(v: float) -> Param:
        return Param(v, v, v, "ns", "assumed: test")

    tcp = TcpCosts(kernel={k: point(10.0) for k in KERNEL_TERMS},
                   user={k: point(20.0) for k in USER_TERMS},
                   encrypt={"aes-ni": point(1.0)}, decrypt={"aes-ni": point(2.0)},
                   kernel_scaling=point(1.0))
    plain = dict(synthetic_model("t").params())
    names = dict(replace(synthetic_model("t"), tcp=tcp).params())
    added = {n for n in names if n not in plain}
    # 16 kernel terms, 2 user terms, one cipher each way, the kernel scaling: 21.
    assert len(added) == len(KERNEL_TERMS) + len(USER_TERMS) + 3 == 21
    assert names["tcp.kernel.tx_skb"].value == 10.0
    assert names["tcp.decrypt.aes-ni"].value == 2.0
