"""The Scenario value object: validation, coercion, identity."""

from __future__ import annotations

import pytest

from quiclab.errors import ScenarioError
from quiclab.sim.scenario import Scenario, coerce, parse_assignments


def test_defaults_are_the_qir_10g_baseline():
    s = Scenario()
    assert (s.link_gbps, s.mtu_bytes, s.rtt_ms) == (10.0, 1500, 0.0)
    assert (s.cpu, s.app) == ("EPYC 7543", "h3")
    assert s.transfer_bytes == 8 * 2**30
    assert s.rcvbuf_bytes == 212992  # 208 KiB, seed 002 §2.3


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("mtu_bytes", 100, "mtu_bytes=100 is impossible: allowed 1228"),
    ("loss_pct", -1.0, "loss_pct=-1.0 is impossible"),
    ("link_gbps", float("nan"), "link_gbps=nan"),
    ("cipher", "rot13", "aes-ni | aes-sw | chacha20"),
    ("app", "h2", "perf | hq | h3"),
    ("streams", 0, "streams=0"),
    ("gso", "yes", "true or false"),
    # a bottleneck queue smaller than one packet would never pass anything
    ("queue_bytes", 1, "queue_bytes=1 is impossible: allowed 0 (queue_bdp × BDP) or ≥ mtu_bytes"),
    # … a full packet as the packet engines queue it: the MTU plus Ethernet framing
    ("queue_bytes", 1500, "allowed 0 (queue_bdp × BDP) or ≥ mtu_bytes + 38 (1538, one full "
                          "packet on the wire)"),
])
def test_impossible_values_are_refused_with_field_value_and_range(field, value, needle):
    with pytest.raises(ScenarioError) as err:
        Scenario(**{field: value})
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_udp_payload_must_fit_the_mtu_and_quic_minimum():
    with pytest.raises(ScenarioError, match="udp_payload_bytes=1480"):
        Scenario(udp_payload_bytes=1480)
    with pytest.raises(ScenarioError, match="≥ 1200"):
        Scenario(udp_payload_bytes=1000)
    assert Scenario(mtu_bytes=9000, udp_payload_bytes=8972).udp_payload_bytes == 8972


def test_from_dict_coerces_strings_and_names_unknown_keys():
    s = Scenario.from_dict({"mtu_bytes": "9000", "gso": "false", "rtt_ms": "10"})
    assert (s.mtu_bytes, s.gso, s.rtt_ms) == (9000, False, 10.0)
    with pytest.raises(ScenarioError, match=r"mtu=9000.*a Scenario field"):
        Scenario.from_dict({"mtu": 9000})
    with pytest.raises(ScenarioError, match=r"spec\.yaml: mtu_bytes"):
        Scenario.from_dict({"mtu_bytes": 1}, source="spec.yaml")


def test_parse_assignments_accepts_several_per_flag():
    out = parse_assignments(["mtu_bytes=9000 gso=false", "rtt_ms=10"])
    assert out == {"mtu_bytes": 9000, "gso": False, "rtt_ms": 10.0}
    with pytest.raises(ScenarioError, match="mtu_bytes: no value given: write mtu_bytes=VALUE"):
        parse_assignments(["mtu_bytes"])
    with pytest.raises(ScenarioError, match="a whole number"):
        coerce("mtu_bytes", "9000.5")


def test_parse_assignments_keeps_spaces_inside_a_value():
    out = parse_assignments(["cpu=Intel Xeon E5-2640 v4 link_gbps=25", "app=perf"])
    assert out == {"cpu": "Intel Xeon E5-2640 v4", "link_gbps": 25.0, "app": "perf"}


def test_key_is_stable_and_distinguishes_scenarios():
    assert Scenario().key() == Scenario().key()
    assert Scenario().key() != Scenario(rtt_ms=1).key()
    assert len(Scenario().key()) == 16
    assert Scenario(rtt_ms=5).describe() == "lsquic→lsquic [rtt_ms=5.0]"


def test_with_refuses_unknown_fields():
    assert Scenario().with_(mtu_bytes=9000).mtu_bytes == 9000
    with pytest.raises(ScenarioError, match="a Scenario field"):
        Scenario().with_(bogus=1)


def test_a_whole_number_in_a_float_field_is_the_same_scenario():
    """rtt_ms=5 and rtt_ms=5.0 compare equal, so they share a key (results are
    stored under it) and a description."""
    a, b = Scenario(rtt_ms=5, link_gbps=1, cpu_ghz=3), Scenario(rtt_ms=5.0, link_gbps=1.0,
                                                                cpu_ghz=3.0)
    assert a == b and hash(a) == hash(b)
    assert a.key() == b.key() == Scenario.from_dict({"rtt_ms": "5", "link_gbps": "1",
                                                    "cpu_ghz": "3"}).key()
    assert type(a.rtt_ms) is type(a.link_gbps) is type(a.cpu_ghz) is float
    assert a.describe() == b.describe()
    assert a.with_(loss_pct=1).loss_pct == 1.0 and type(a.with_(loss_pct=1).loss_pct) is float
    assert type(Scenario(queue_bytes=65536).queue_bytes) is int  # whole-number fields stay


def test_the_queue_must_hold_one_full_packet_on_the_wire():
    assert Scenario(queue_bytes=1538).queue_bytes == 1538
    assert Scenario(mtu_bytes=9000, queue_bytes=9038).queue_bytes == 9038
    with pytest.raises(ScenarioError, match=r"^queue_bytes=9037 is impossible: .*9038"):
        Scenario(mtu_bytes=9000, queue_bytes=9037)


def test_the_default_queue_holds_two_full_packets_at_any_mtu():
    from quiclab.sim.resolve import path_for

    assert path_for(Scenario()).queue_bytes == 65536  # 64 KiB at 50 µs, 10 Gbit/s
    assert path_for(Scenario(mtu_bytes=65535)).queue_bytes == 2 * (65535 + 38)
    assert path_for(Scenario(mtu_bytes=9000, rtt_ms=10)).queue_bytes == int(10e9 / 8 * 10.05e-3)


def test_predict_runs_help_names_the_runs_it_simulates():
    """--runs N simulates run … run+N−1 (the scenario's run on), not 0 … N−1."""
    import argparse

    from quiclab.sim.cli import add_parser

    sub = argparse.ArgumentParser().add_subparsers()
    add_parser(sub)
    runs = next(a for a in sub.choices["predict"]._actions if "--runs" in a.option_strings)
    assert "run … run+N−1" in (runs.help or "")
    assert "0 … N−1" not in (runs.help or "")
