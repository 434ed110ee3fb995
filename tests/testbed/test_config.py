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
    spec = {"name": "t", "base": {"mtu_bytes": 1500},
            "axes": {"implementation": ["quic-go", "quinn"], "gso": [True, False],
                     "veth_segmentation": [True]},
            "testbed": {"repeat": 2}}
    points = list(expand(spec))
    assert len(points) == 4
    assert {(p.server, p.client) for p in points} == {("quic-go", "quic-go"), ("quinn", "quinn")}
    assert all(p.changes.keys() == {"mtu_bytes", "gso"}
               and p.knobs == {"veth_segmentation": True} for p in points)
    with pytest.raises(SpecError, match=r"axes\.gso"):
        list(expand({"axes": {"gso": "yes"}, "base": {"server": "a", "client": "b"}}))


@pytest.mark.parametrize(("part", "path"), [
    ({"axes": {"implementation": ["quic-go"], "cpu": [7543, "W-2145"]}}, "axes.cpu"),
    ({"base": {"server": "quic-go", "client": "quic-go", "chunks": 4}}, "base.chunks"),
    ({"axes": {"implementation": ["quic-go"]}, "zip": {"cpu_ghz": [None, 2.0]}}, "zip.cpu_ghz"),
])
def test_a_testbed_spec_refuses_a_field_the_testbed_cannot_set(part, path):
    """`cpu: [7543, W-2145]` ran two identical points; `testbed run --set cpu=…` refuses
    the field, and so does a spec, in one line naming the key path."""
    with pytest.raises(SpecError, match=rf"^spec: {path}=.*: cannot be set on the testbed: "):
        list(expand({"name": "t", **part}))
    # A zip column of nulls only leaves the field alone: nothing to refuse.
    list(expand({"name": "t", "axes": {"implementation": ["quic-go"]},
                 "zip": {"cpu": [None, None], "gso": [True, False]}}))


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


# -- knob values (issue: nan/inf/out-of-range knobs reached the timer or the peers) ----
@pytest.mark.parametrize(("item", "shown"), [
    ("timeout_s=nan", "timeout_s='nan'"),
    ("timeout_s=inf", "timeout_s='inf'"),
    ("timeout_s=-1", "timeout_s='-1'"),
    ("timeout_s=86401", "timeout_s='86401'"),
    ("relay_queue_bytes=inf", "relay_queue_bytes='inf'"),
    ("relay_queue_bytes=1e20", "relay_queue_bytes='1e20'"),
    ("stream_window_bytes=1e30", "stream_window_bytes='1e30'"),
    ("conn_window_bytes=4294967296", "conn_window_bytes='4294967296'"),
    ("stream_window_bytes=1.5", "stream_window_bytes='1.5'"),
    ("conn_window_bytes=-inf", "conn_window_bytes='-inf'"),
])
def test_a_non_finite_or_out_of_range_knob_is_refused_in_one_line(item, shown):
    with pytest.raises(ScenarioError) as err:
        parse_set([item])
    message = str(err.value)
    assert len(message.splitlines()) == 1
    assert message.startswith(f"--set: {shown} is impossible: allowed ")


def test_knob_bounds_take_the_largest_values_the_peers_hold():
    _, knobs = parse_set(["timeout_s=86400", "stream_window_bytes=4294967295",
                          "conn_window_bytes=1e6", "relay_queue_bytes=17179869184"])
    assert knobs == {"timeout_s": 86400.0, "stream_window_bytes": 4294967295,
                     "conn_window_bytes": 1_000_000, "relay_queue_bytes": 2**34}
    # Every numeric knob has bounds (a new knob without them would fail here).
    from quiclab.testbed.config import KNOB_RANGES
    from quiclab.testbed.stacks import TESTBED_KNOBS

    assert set(KNOB_RANGES) == {k for k, v in TESTBED_KNOBS.items() if not isinstance(v, bool)}


def test_queue_bdp_is_refused_unless_it_is_the_default():
    with pytest.raises(TestbedError, match=r"^queue_bdp=8\.0 cannot be set on the testbed: "
                                           r"the testbed's tbf queue is always 1 × BDP"):
        config("quic-go", "quic-go", "queue_bdp=8", "link_gbps=1")
    assert config("quic-go", "quic-go", "queue_bdp=1", "link_gbps=1").scenario.queue_bdp == 1.0


def test_the_quic_go_notes_say_reno():
    go = STACKS["quic-go"]
    assert go.ccs == ("reno",) and "Reno only" in go.notes and "cubic only" not in go.notes


# -- run ids (issue: a cut or punctuated experiment name shared ids with another) ----
def test_run_ids_of_clean_short_names_are_unchanged():
    # Existing catalogs resume with these ids: the name itself, unhashed.
    assert record.run_id("fresh-calibration", "0123456789abcdef", 2) == (
        "fresh-fresh-calibration-0123456789abcdef-r2")
    forty = "x" * 40
    assert record.run_id(forty, "k", 0) == f"fresh-{forty}-k-r0"


@pytest.mark.parametrize(("a", "b"), [
    ("fresh-validation-controlled-session-eighteen-A",
     "fresh-validation-controlled-session-eighteen-B"),
    ("buffers 64k", "buffers/64k"),
    ("buffers 64k", "buffers_64k"),
])
def test_names_that_slug_alike_get_different_run_ids(a, b):
    assert record.run_id(a, "k", 0) != record.run_id(b, "k", 0)
    # Stable, and the hash is of the whole name.
    assert record.run_id(a, "k", 0) == record.run_id(a, "k", 0)
    slug = record.experiment_slug(a)
    assert slug != a and len(slug) <= 40 + 9 and slug[-9] == "-"


# -- sweep specs checked whole, before anything runs ---------------------------------
BAD_SPECS = [
    ({"axes": {"implementation": ["quic-go"]}, "zip": {"gso": [True, False], "mtu_bytes": [1500]}},
     "zip.mtu_bytes=[1500]: 1 values where zip.gso has 2"),
    ({"axes": {"implementation": ["quic-go"], "rtt_ms": {"range": [1, 2, 0]}}},
     "axes.rtt_ms.range=[1, 2, 0]: allowed [lo, hi, step] with a step ≠ 0"),
    ({"axes": {"implementation": ["quic-go"], "rtt_ms": {"range": [1, 2]}}},
     "axes.rtt_ms.range=[1, 2]: allowed three finite numbers"),
    ({"axes": {"implementation": ["quic-go"], "rtt_ms": {"range": [5, 1, 1]}}},
     "axes.rtt_ms.range=[5, 1, 1]: allowed [lo, hi, step]"),
    ({"axes": {"implementation": ["quic-go"], "rtt_ms": {"logrange": [0, 10, 3]}}},
     "axes.rtt_ms.logrange=[0, 10, 3]: allowed [lo, hi, n]"),
    ({"axes": {"implementation": ["quic-go"]}, "testbed": {"repeat": "many"}},
     "testbed.repeat='many': allowed a whole number"),
    ({"axes": {"implementation": ["quic-go"]}, "repetitions": 0},
     "repetitions=0: allowed a whole number"),
    ({"axes": {"implementation": ["quic-go"]}, "testbed": {"bytes": "lots"}},
     "testbed.bytes='lots': allowed a whole number"),
    ({"base": [1, 2], "axes": {"implementation": ["quic-go"]}},
     "base=[1, 2]: allowed a mapping"),
    ({"axes": {"implementation": ["quic-go"]}, "zip": {"mtu_bytes": 1500}},
     "zip.mtu_bytes=1500: allowed a list of at least one value"),
    ({"base": {"mtu_bytes": [1500, 9000]}, "axes": {"implementation": ["quic-go"]}},
     "base.mtu_bytes=[1500, 9000]: allowed one value"),
    ({"base": {"los_pct": 1}, "axes": {"implementation": ["quic-go"]}},
     "base.los_pct=1: unknown field: allowed a Scenario field ("),
    ({"axes": {"implementation": ["quic-go"]}, "testbed": {"knobs": {"time_out": 3}}},
     "testbed.knobs.time_out=3: unknown knob"),
    ({"axes": {"implementation": ["quic-goo"]}},
     "axes.implementation='quic-goo': unknown stack: allowed aioquic, "),
    ({"base": {"mtu_bytes": 1500}, "testbed": {"servers": ["quic-go"], "clients": ["nope"]}},
     "testbed.clients[0]='nope': unknown stack"),
    ({"axes": {"implementation": ["quic-go"]}, "zip": {"mtu_bytes": [1500, 100]}},
     "zip.mtu_bytes[1]=100: allowed 1228 … 65535"),
    ({"axes": {"implementation": ["quic-go"]}, "testbed": {"knobs": {"timeout_s": float("inf")}}},
     "testbed.knobs.timeout_s=inf: allowed 0 (derived"),
    ({"base": {"queue_bdp": 8, "link_gbps": 1}, "axes": {"implementation": ["quic-go"]}},
     "base.queue_bdp=8: queue_bdp=8.0 cannot be set on the testbed"),
    ({"axes": {"implementation": ["quic-go"]}, "testbed": {"pairs": [["quic-go", "quinn"]]}},
     "unknown key testbed.'pairs'"),
]


@pytest.mark.parametrize(("spec", "message"), BAD_SPECS)
def test_a_bad_sweep_spec_is_one_line_naming_the_file_key_and_value(tmp_path, spec, message):
    import yaml

    from quiclab.testbed.session import sweep_plan

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError) as err:
        sweep_plan(path)
    text = str(err.value)
    assert len(text.splitlines()) == 1
    assert text.startswith(f"{path}: {message}"), text


def test_a_sweep_builds_every_point_before_the_first_run(tmp_path, paths, builder):
    """The second zip row is bad: nothing runs, not even the first (good) point."""
    import yaml

    from quiclab.testbed.runner import Testbed
    from quiclab.testbed.session import Session, sweep

    spec = {"name": "t", "axes": {"implementation": ["quic-go"]},
            "zip": {"loss_pct": [0, 60]}, "testbed": {"bytes": 1000}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec))

    class NoRuns(Testbed):
        def run(self, *args, **kwargs):
            raise AssertionError("a run started before the spec was checked")

    session = Session(NoRuns(paths, builder=builder), None, log=lambda line: None,
                      cpu_name="host: test")
    with pytest.raises(SpecError, match=r"zip\.loss_pct\[1\]=60: allowed 0 … 50"):
        sweep(session, path)


def test_shipped_specs_still_plan_and_keep_their_run_ids():
    from pathlib import Path

    from quiclab.testbed.session import sweep_plan

    specs = sorted((Path(record.__file__).parent / "specs").glob("*.yaml"))
    assert specs
    for spec in specs:
        reps, points = sweep_plan(spec)
        assert reps >= 1 and points
    # Pinned from a recorded catalog (fresh-runs-18, 2026-11-27: fresh-calibration,
    # quic-go, the first zip row): the run ids of existing catalogs must not move.
    _, points = sweep_plan(Path(record.__file__).parent / "specs" / "fresh-calibration.yaml")
    point, config = points[0]
    assert (point.server, point.client) == ("quic-go", "quic-go")
    assert record.run_id(config.experiment, config.key(), 0) == (
        "fresh-fresh-calibration-417ca4d94e2dc523-r0")
