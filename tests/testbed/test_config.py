"""Knob resolution, refusals, run ids, timeouts and sweep expansion (no root needed)."""

from __future__ import annotations

import pytest

from quiclab.errors import ScenarioError, SpecError
from quiclab.testbed import record
from quiclab.testbed.config import RunConfig, parse_set, resolve, timeout_seconds
from quiclab.testbed.errors import TestbedError
from quiclab.testbed.session import expand, load_spec
from quiclab.testbed.stacks import STACKS, coverage_table


def config(server: str, client: str, *items: str, nbytes: int | None = None) -> RunConfig:
    changes, knobs = parse_set(list(items))
    return RunConfig.build(server, client, changes, knobs, transfer_bytes=nbytes)


def test_parse_set_splits_scenario_fields_from_testbed_knobs():
    changes, knobs = parse_set(["mtu_bytes=9000 gso=false", "veth_segmentation=off",
                                "stream_window_bytes=1048576"])
    assert changes == {"mtu_bytes": 9000, "gso": False}
    assert knobs == {"veth_segmentation": False, "stream_window_bytes": 1048576}


def test_parse_set_names_a_bad_field():
    with pytest.raises(ScenarioError, match="mtu_byte"):
        parse_set(["mtu_byte=9000"])
    with pytest.raises(ScenarioError, match="veth_segmentation"):
        parse_set(["veth_segmentation=maybe"])


def test_fields_the_testbed_cannot_set_are_refused_in_one_line():
    with pytest.raises(TestbedError, match=r"^cpu='EPYC 7543' cannot be set on the testbed"):
        RunConfig.build("quic-go", "quic-go", {"cpu": "EPYC 7543"})


@pytest.mark.parametrize(("server", "client", "items", "message"), [
    ("quinn", "quinn", ["mtu_bytes=9000"], "GSO batches exceed 64 KiB"),
    ("quic-go", "quic-go", ["cc=cubic"], "cc=cubic cannot be honoured by quic-go"),
    ("quic-go", "quinn", ["udp_payload_bytes=8000", "mtu_bytes=9000", "gso=false"],
     "capped at 1452 B"),
    ("aioquic", "aioquic", ["gso=true"], "gso=true cannot be honoured by aioquic"),
    ("quinn", "quinn", ["gro=false"], "gro=false cannot be honoured by quinn"),
    ("s2n-quic", "s2n-quic", ["cipher=chacha20"], "cipher=chacha20 cannot be honoured"),
])
def test_a_knob_a_stack_cannot_honour_is_refused(server, client, items, message):
    with pytest.raises(TestbedError, match=message):
        resolve(config(server, client, *items), STACKS[server], STACKS[client])


def test_defaults_take_the_stacks_own_behaviour_and_record_it():
    resolved = resolve(config("aioquic", "aioquic"), STACKS["aioquic"], STACKS["aioquic"])
    assert resolved.effective["gso"] is False and resolved.effective["cc"] == "reno"
    assert resolved.effective["udp_payload_bytes"] == 1200
    resolved = resolve(config("quic-go", "quic-go", "mtu_bytes=9000"), STACKS["quic-go"],
                       STACKS["quic-go"])
    assert resolved.effective["udp_payload_bytes"] == 1452  # quic-go's cap, not 8972
    assert "--max-udp-payload=1452" in resolved.server_args


def test_jumbo_payload_and_switches_reach_the_peer_flags():
    resolved = resolve(config("quinn", "s2n-quic", "mtu_bytes=9000", "gso=false", "cc=bbr"),
                       STACKS["quinn"], STACKS["s2n-quic"])
    assert "--max-udp-payload=8972" in resolved.server_args
    assert "--gso=false" in resolved.server_args and "--cc=bbr" in resolved.client_args


def test_loss_turns_segmentation_off_for_per_packet_drops():
    resolved = resolve(config("quic-go", "quic-go", "loss_pct=1"), STACKS["quic-go"],
                       STACKS["quic-go"])
    assert resolved.effective["veth_segmentation"] is False
    with pytest.raises(TestbedError, match="whole GSO batches"):
        resolve(config("quic-go", "quic-go", "loss_pct=1", "veth_segmentation=true"),
                STACKS["quic-go"], STACKS["quic-go"])


def test_run_id_is_stable_and_unique():
    a = config("quic-go", "quinn", "mtu_bytes=9000", "gso=false")
    b = config("quic-go", "quinn", "gso=false", "mtu_bytes=9000")
    c = config("quic-go", "quinn", "mtu_bytes=9000")
    assert a.key() == b.key() != c.key()
    assert record.run_id("e", a.key(), 0) == record.run_id("e", b.key(), 0)
    assert record.run_id("e", a.key(), 0) != record.run_id("e", a.key(), 1)


def test_timeout_grows_with_the_expected_transfer_time():
    small = config("quic-go", "quic-go", nbytes=10_000_000)
    big = config("quic-go", "quic-go", nbytes=1_000_000_000)
    slow = config("quic-go", "quic-go", "link_gbps=0.01", nbytes=10_000_000)
    go = STACKS["quic-go"]
    assert timeout_seconds(small, go, go) < timeout_seconds(big, go, go)
    assert timeout_seconds(slow, go, go) > 4 * 10_000_000 * 8 / 1e7
    assert timeout_seconds(config("quic-go", "quic-go", "timeout_s=3"), go, go) == 3


def test_sweep_spec_expands_like_a_simulated_sweep():
    spec = {"name": "t", "base": {"mtu_bytes": 1500, "cpu": "EPYC 7543"},
            "axes": {"implementation": ["quic-go", "quinn"], "gso": [True, False],
                     "veth_segmentation": [True]},
            "testbed": {"repeat": 2}}
    points = list(expand(spec))
    assert len(points) == 4
    assert {(p.server, p.client) for p in points} == {("quic-go", "quic-go"), ("quinn", "quinn")}
    assert all("cpu" not in p.changes and p.knobs == {"veth_segmentation": True}
               for p in points)
    with pytest.raises(SpecError, match=r"axes\.gso"):
        list(expand({"axes": {"gso": "yes"}, "base": {"server": "a", "client": "b"}}))


@pytest.mark.parametrize(("text", "message"), [
    ("name: t\nbase: {}\nbase: {mtu_bytes: 9000}\n",
     "not valid YAML: line 3, column 1: duplicate key 'base'"),
    ("name: [t\n", "not valid YAML: line 2, column 1: "),
])
def test_a_testbed_sweep_spec_with_a_repeated_key_or_bad_yaml_is_refused(
        tmp_path, text: str, message: str):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert str(err.value).startswith(f"{path}: {message}")


def test_coverage_table_lists_every_stack():
    rows = coverage_table()
    assert {r["stack"] for r in rows} == set(STACKS)
    assert next(r for r in rows if r["stack"] == "quic-go")["max_udp_payload"] == 1452


def test_a_stack_without_a_payload_setting_gets_no_payload_flag():
    resolved = resolve(config("xnet-quic", "xnet-quic", "mtu_bytes=9000"), STACKS["xnet-quic"],
                       STACKS["xnet-quic"])
    assert not any(a.startswith("--max-udp-payload") for a in resolved.server_args)
    assert resolved.effective["udp_payload_bytes"] == 1200
    with pytest.raises(TestbedError, match="capped at 1200 B"):
        resolve(config("xnet-quic", "xnet-quic", "udp_payload_bytes=1250"), STACKS["xnet-quic"],
                STACKS["xnet-quic"])
