"""The ns-3 engine end to end: build, cache, small transfers, errors.

The simulator is built once per source hash into the engine's default cache
(``~/.local/share/quiclab/cache/ns3``, shared with the CLI and the contract
suite), so only the first run after a C++ change pays the ~1 min build; every
scenario below simulates in about a second.
Expected values come from the synthetic models (``quiclab.models.testing``),
whose rates can be computed by hand, and from the analytic engine where its
answer is exact (pure CPU- or link-bound).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from quiclab.errors import EngineError, ScenarioError
from quiclab.models.registry import Interop, Registry
from quiclab.models.testing import ack_rule_models, synthetic_model, synthetic_registry
from quiclab.sim.analytic import AnalyticEngine
from quiclab.sim.engine import Engine, get_engine
from quiclab.sim.ns3 import DEFAULT_CACHE_DIR, Ns3Engine
from quiclab.sim.ns3 import build as ns3_build
from quiclab.sim.scenario import Scenario

MB = 1_000_000


@pytest.fixture(scope="module")
def cache_dir() -> Path:
    # Where the CLI and the contract suite cache it too: a fresh clone builds once.
    return DEFAULT_CACHE_DIR.expanduser()


@pytest.fixture(scope="module")
def registry() -> Registry:
    return synthetic_registry(
        synthetic_model("fast", sender_ns=2000, receiver_ns=1500),
        synthetic_model("slow", sender_ns=8000, receiver_ns=6000),
        # 1 MiB of flow-control credit: 20 ms RTT caps goodput at 419 Mbit/s.
        synthetic_model("fcwin", sender_ns=2000, receiver_ns=1500, fc_window_bytes=1 << 20),
        # A receiver that is not scheduled for a while now and then (Pareto stalls).
        synthetic_model("stall", sender_ns=2000, receiver_ns=2500, rx_stall_rate_hz=200.0,
                        rx_stall_min_us=200.0, rx_stall_alpha=1.5),
        synthetic_model("gso", sender_ns=1000, receiver_ns=1000, syscall_ns=4000,
                        supports_gso=True, supports_gro=True, gso_max_segments=16),
        # A receiver that ACKs only every 300 packets (more than its window).
        synthetic_model("sparse", sender_ns=2000, receiver_ns=1500, ack_every_packets=300),
        # The same without the ACK-frequency extension: the threshold stays at 300.
        synthetic_model("sparse-fixed", sender_ns=2000, receiver_ns=1500, ack_every_packets=300,
                        ack_threshold_fixed=True),
        *ack_rule_models(),
        # A server whose pairs interlock at exp(−0.3) = 74 % busy (seed 002 §4.3).
        synthetic_model("pair", sender_ns=3000, receiver_ns=3000),
        # Pacers with a bucket (quinn's: 1.6 ms of the rate, 10-256 datagrams, a
        # 1 ms timer) and packet by packet, into a 64 KiB receive buffer at 10 ms;
        # the receiver is the faster side, so only a burst can fill its buffer.
        synthetic_model("burst", sender_ns=1000, receiver_ns=700, pacing_burst_ms=1.6,
                        pacing_burst_min_packets=10, pacing_burst_max_packets=256,
                        pacing_min_delay_ms=1.0),
        synthetic_model("smooth", sender_ns=1000, receiver_ns=700),
        # GSO batches of 44 into a slower GRO receiver (TRANSPORT.md "Receive buffer").
        synthetic_model("gro", sender_ns=1000, receiver_ns=1500, supports_gso=True,
                        supports_gro=True, gso_max_segments=44),
        interop=Interop.for_testbed("qir10g", server_effect={"pair": -0.3}),
    )


@pytest.fixture(scope="module")
def engine(registry: Registry, cache_dir: Path) -> Ns3Engine:
    eng = Ns3Engine(registry, cache_dir=cache_dir)
    eng.binary()  # build (or reuse) once for the module
    return eng


def test_engine_protocol_and_factory(registry: Registry, cache_dir: Path) -> None:
    eng = get_engine("ns3", registry, cache_dir=cache_dir)
    assert isinstance(eng, Engine)
    assert eng.name == "ns3" and eng.version.startswith("ns3-")


def test_build_is_cached_by_source_hash(engine: Ns3Engine, cache_dir: Path) -> None:
    lines: list[str] = []
    binary, record = ns3_build.ensure_binary(cache_dir, progress=lines.append)
    assert binary == engine.binary()
    assert lines == []  # nothing rebuilt
    assert record["ns3_version"] == "3.44" and float(str(record["build_s"])) > 0
    assert "-DNS3_BUILD_PROFILE_RELEASE" in str(record["cxxflags"])


def test_missing_compiler_is_one_line(registry: Registry, tmp_path: Path) -> None:
    eng = Ns3Engine(registry, cache_dir=tmp_path, compiler="no-such-g++-quiclab")
    with pytest.raises(EngineError) as err:
        eng.predict(Scenario(server="fast", client="fast", transfer_bytes=MB))
    assert "no C++ compiler" in str(err.value) and "\n" not in str(err.value)


def test_failed_build_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sources = ns3_build.read_sources()
    # A missing include stops every translation unit at once (GCC: fatal error).
    sources["transport.h"] = b'#include "deliberately-missing.h"\n' + sources["transport.h"]
    monkeypatch.setattr(ns3_build, "read_sources", lambda: sources)
    with pytest.raises(EngineError) as err:
        ns3_build.ensure_binary(tmp_path)
    message = str(err.value)
    assert "build failed" in message and "deliberately-missing.h" in message
    assert "\n" not in message and (tmp_path / "build.log").is_file()


def test_python_ns_module_is_never_imported() -> None:
    code = ("import sys, quiclab.sim.ns3, quiclab.sim.ns3.bench; "
            "assert 'ns' not in sys.modules and 'cppyy' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    ("server", "client", "changes", "limit"),
    [
        ("fast", "fast", {"link_gbps": 1.0}, "link"),
        ("slow", "fast", {}, "sender_cpu"),
        ("fast", "slow", {}, "receiver_cpu"),
        ("gso", "gso", {"link_gbps": 40.0}, "sender_cpu"),
        ("pair", "fast", {"testbed": "qir10g"}, "interop"),
    ],
)
def test_exact_regimes_match_the_analytic_engine(engine: Ns3Engine, registry: Registry,
                                                 server: str, client: str,
                                                 changes: dict[str, float], limit: str) -> None:
    scenario = Scenario(server=server, client=client, transfer_bytes=15 * MB, **changes)
    ns3 = engine.predict(scenario)
    analytic = AnalyticEngine(registry).predict(scenario)
    assert ns3.limit == limit == analytic.limit
    # Pure CPU- or link-bound: the closed form is exact up to slow start.
    assert ns3.goodput_mbps == pytest.approx(analytic.goodput_mbps, rel=0.03)
    assert ns3.goodput_lo_mbps <= ns3.goodput_mbps <= ns3.goodput_hi_mbps
    assert ns3.server_packets_sent >= 15 * MB / 1360
    assert ns3.acks > 0 and ns3.engine == "ns3"


def test_gso_batches_cut_system_calls(engine: Ns3Engine) -> None:
    pred = engine.predict(Scenario(server="gso", client="gso", link_gbps=40.0,
                                   transfer_bytes=15 * MB))
    # 16 segments per send call when the sender's CPU is the limit.
    assert pred.server_syscalls - pred.server_packets_received < pred.server_packets_sent / 8


def test_flow_control_window_bounds_goodput(engine: Ns3Engine) -> None:
    pred = engine.predict(Scenario(server="fast", client="fcwin", rtt_ms=20.0,
                                   transfer_bytes=20 * MB))
    assert pred.limit == "flow_control"
    # By hand, in round trips of 20.05 ms: 20 MB is 14717 packets of 1359 stream bytes;
    # the handshake and the request take 1.5 RTT; slow start sends 10, 20, … 640
    # packets (1270 in 7 rounds) before the 1 MiB window (771.6 packets) binds; the
    # other 13447 packets take 17.43 rounds, and the last arrives half an RTT after
    # it is sent: 1.5 + 7 + 17.43 + 0.5 = 26.4 RTT, 302 Mbit/s (1 MiB per RTT alone
    # would be 418). The count is exact to within one partial round and the credit
    # updates' own delay (MAX_DATA rides on the receiver's ACKs): ±1.5 RTT, 6 %.
    rtts = 1.5 + 7 + (20 * MB / 1359 - 1270) / ((1 << 20) / 1359) + 0.5
    assert pred.goodput_mbps == pytest.approx(20 * MB * 8 / (rtts * 20.05e-3) / 1e6, rel=0.06)


def test_random_loss_is_recovered(engine: Ns3Engine) -> None:
    pred = engine.predict(Scenario(server="fast", client="fast", loss_pct=0.5, rtt_ms=5.0,
                                   transfer_bytes=10 * MB))
    assert pred.limit == "cwnd"
    assert pred.losses > 0 and pred.retransmissions >= pred.losses * 0.9
    assert pred.rcvbuf_drops == 0
    assert 20 < pred.goodput_mbps < 150  # window-limited by loss at 5 ms


def test_receiver_stalls_overflow_the_socket_buffer(engine: Ns3Engine) -> None:
    pred = engine.predict(Scenario(server="fast", client="stall", rcvbuf_bytes=65536,
                                   transfer_bytes=30 * MB))
    assert pred.rcvbuf_drops > 0 and pred.losses >= pred.rcvbuf_drops
    assert pred.limit == "rcvbuf"


def test_gro_batches_are_admitted_whole_as_in_the_des(engine: Ns3Engine,
                                                     registry: Registry) -> None:
    """With GSO and GRO a batch is one skb (TRANSPORT.md "Receive buffer"): a 64 KiB
    buffer holds one 44 × 1400 B batch (62 432 B) and admits the next only once it
    is read. The receiver is the slower side, so batches overflow it and CUBIC
    backs off; ns-3 keeps the buffer itself and agrees with the DES (measured:
    7040 against 7060 Mbit/s, 176 against 172 datagrams dropped)."""
    from quiclab.sim.des import DesEngine

    s = Scenario(server="gro", client="gro", rcvbuf_bytes=65536, link_gbps=40, rtt_ms=0.1,
                 transfer_bytes=30 * MB)
    ns3, des = engine.predict(s), DesEngine(registry).predict(s)
    assert ns3.rcvbuf_drops > 0 and des.rcvbuf_drops > 0
    assert ns3.limit == des.limit == "receiver_cpu"
    assert ns3.goodput_mbps == pytest.approx(des.goodput_mbps, rel=0.03)
    assert ns3.rcvbuf_drops == pytest.approx(des.rcvbuf_drops, rel=0.3)


def test_reordering_causes_spurious_retransmissions(engine: Ns3Engine) -> None:
    pred = engine.predict(Scenario(server="fast", client="fast", reorder_pct=1.0, rtt_ms=1.0,
                                   transfer_bytes=10 * MB))
    assert pred.losses == 0 and pred.retransmissions > 0


def test_same_seed_same_prediction_other_seed_differs(engine: Ns3Engine) -> None:
    base = Scenario(server="fast", client="fast", loss_pct=1.0, rtt_ms=2.0, transfer_bytes=5 * MB)
    first, again = engine.predict_batch([base, base])
    other = engine.predict(base.with_(seed=7))
    assert first.to_dict() == again.to_dict()
    assert other.goodput_mbps != first.goodput_mbps


def test_every_seed_draws_its_own_numbers(engine: Ns3Engine) -> None:
    """ns-3's seed has 32 bits: the Scenario's 63 go to its seed and its run
    (main.cc), so seeds alike in their low 32 or 31 bits still differ (4294967295
    was folded onto 0)."""
    base = Scenario(server="fast", client="fast", loss_pct=1.0, rtt_ms=2.0, transfer_bytes=5 * MB)
    seeds = [0, 2**32 - 1, 2**31, 2**63 - 1]
    preds = engine.predict_batch([base.with_(seed=seed) for seed in seeds])
    assert len({p.goodput_mbps for p in preds}) == len(seeds)


def test_the_largest_mtu_runs(engine: Ns3Engine) -> None:
    """65535-byte packets fit the default queue (two of them) and are delivered."""
    pred = engine.predict(Scenario(server="fast", client="fast", mtu_bytes=65535,
                                   transfer_bytes=200 * MB))
    # 2 µs per (jumbo) packet on the sender: the link carries 65469 of 65573 bytes.
    assert pred.limit == "link"
    assert pred.goodput_mbps == pytest.approx(10_000 * 65469 / 65573, rel=0.05)
    assert any("sndbuf_bytes=6815744: the send buffer is not modelled by the ns3 engine" in n
               for n in engine.predict(Scenario(server="fast", client="fast",
                                                sndbuf_bytes=6815744,
                                                transfer_bytes=MB)).notes)


def test_long_transfers_are_extrapolated_from_a_prefix(registry: Registry,
                                                        cache_dir: Path) -> None:
    scenario = Scenario(server="slow", client="fast", transfer_bytes=40 * MB)
    short = Ns3Engine(registry, cache_dir=cache_dir, prefix_packets=5000).predict(scenario)
    assert any("extrapolated" in note for note in short.notes)
    full = AnalyticEngine(registry).predict(scenario)
    assert short.goodput_mbps == pytest.approx(full.goodput_mbps, rel=0.02)
    assert short.server_packets_sent == pytest.approx(40 * MB / 1360, rel=0.02)


def test_batch_runs_in_parallel_and_keeps_order(registry: Registry, cache_dir: Path) -> None:
    eng = Ns3Engine(registry, cache_dir=cache_dir, jobs=2)
    rates = [0.5, 1.0, 2.0]
    preds = eng.predict_batch([Scenario(server="fast", client="fast", link_gbps=g,
                                        transfer_bytes=5 * MB) for g in rates])
    assert [p.scenario.link_gbps for p in preds] == rates
    assert preds[0].goodput_mbps < preds[1].goodput_mbps < preds[2].goodput_mbps


def test_ack_threshold_is_capped_at_a_quarter_window(registry: Registry,
                                                    cache_dir: Path) -> None:
    scenario = Scenario(server="fast", client="sparse", rtt_ms=1.0, transfer_bytes=10 * MB)
    plain = Ns3Engine(registry, cache_dir=cache_dir, ack_window_fraction=0.0).predict(scenario)
    capped = Ns3Engine(registry, cache_dir=cache_dir).predict(scenario)
    # Only the 25 ms ACK timer clocks a window smaller than 300 packets; capped,
    # the window opens quickly and the sender's CPU becomes the limit.
    assert plain.limit == "cwnd" and capped.limit == "sender_cpu"
    assert capped.acks > plain.acks and capped.goodput_mbps > 3 * plain.goodput_mbps
    assert any("not TRANSPORT.md" in note for note in plain.notes)
    assert not any("not TRANSPORT.md" in note for note in capped.notes)
    with pytest.raises(ValueError, match="ack_window_fraction"):
        Ns3Engine(registry, ack_window_fraction=2.0)


def test_a_fixed_ack_threshold_is_not_capped(engine: Ns3Engine) -> None:
    """Behaviour.ack_threshold_fixed: the engine's cap does not apply to that receiver,
    so only the ACK timer clocks its sender, as with the cap switched off."""
    scenario = Scenario(server="fast", client="sparse-fixed", rtt_ms=1.0,
                        transfer_bytes=10 * MB)
    fixed = engine.predict(scenario)
    capped = engine.predict(Scenario(server="fast", client="sparse", rtt_ms=1.0,
                                     transfer_bytes=10 * MB))
    assert fixed.limit == "cwnd" and capped.limit == "sender_cpu"
    assert capped.goodput_mbps > 3 * fixed.goodput_mbps


def test_a_receiver_floor_its_timer_and_a_time_driven_cubic(engine: Ns3Engine) -> None:
    """As in the DES: a 6-packet window behind a floor of 10 waits for the 25 ms timer
    each round; a 2 ms ACK timer clocks it every 2 ms; and at 1 % loss a floor of 10
    stalls a per-ACK CUBIC far more than a time-driven one (whose waits lift cwnd)."""
    s = Scenario(server="floor6", client="floor6", rtt_ms=1.0, transfer_bytes=2 * MB)
    assert engine.predict(s).goodput_mbps == pytest.approx(6 * 1360 * 8 / 26e-3 / 1e6,
                                                           rel=0.15)
    timer = engine.predict(replace(s, server="timer6", client="timer6"))
    assert timer.goodput_mbps == pytest.approx(6 * 1360 * 8 / 3e-3 / 1e6, rel=0.15)
    lossy = Scenario(server="f10", client="f10", loss_pct=1.0, base_rtt_us=73.0,
                     transfer_bytes=20 * MB)
    per_ack = engine.predict(lossy).goodput_mbps
    timed = engine.predict(replace(lossy, server="f10t", client="f10t")).goodput_mbps
    assert timed > 4 * per_ack


def test_cpu_bound_sender_grows_cwnd_past_its_flight(registry: Registry,
                                                     cache_dir: Path) -> None:
    # TRANSPORT.md's §7.8 (default): a sender only its CPU holds back is not
    # app-limited, its cwnd outgrows the flight and receiver stalls overflow the
    # buffer; the opt-in "inflight" rule keeps cwnd near the flight (fewer drops).
    scenario = Scenario(server="slow", client="stall", rcvbuf_bytes=65536,
                        transfer_bytes=20 * MB)
    app = Ns3Engine(registry, cache_dir=cache_dir).predict(scenario)
    inflight = Ns3Engine(registry, cache_dir=cache_dir,
                         cwnd_validation="inflight").predict(scenario)
    assert app.rcvbuf_drops > inflight.rcvbuf_drops
    assert any(note.startswith("not TRANSPORT.md: cwnd_validation") for note in inflight.notes)
    assert not any("cwnd_validation" in note for note in app.notes)
    with pytest.raises(ValueError, match="cwnd_validation"):
        Ns3Engine(registry, cache_dir=cache_dir, cwnd_validation="sometimes")


def test_unsupported_workloads_are_refused(engine: Ns3Engine) -> None:
    with pytest.raises(ScenarioError, match="workload"):
        engine.predict(Scenario(server="fast", client="fast", workload="requests",
                                request_bytes=1000, requests=10))


def test_bench_reports_packets_per_cpu_second(cache_dir: Path) -> None:
    from quiclab.sim.ns3.bench import bench

    lines: list[str] = []
    result = bench(cache_dir=cache_dir, packets=3000, out=lines.append)
    assert result["packets_per_cpu_s"] > 0 and result["build_s"] > 0
    assert len(result["runs"]) == 2 and len(lines) == 3


def test_a_pacer_bucket_bursts_into_a_small_buffer(engine: Ns3Engine, registry: Registry) -> None:
    """The pacer's bucket lets a burst of datagrams leave back to back; a receive
    buffer smaller than the burst overflows where packet-by-packet pacing does not,
    in ns-3 and the DES alike (TRANSPORT.md "Hosts": the pacer)."""
    from quiclab.sim.des import DesEngine

    des = DesEngine(registry)
    out = {}
    for name in ("burst", "smooth"):
        s = Scenario(server=name, client=name, rtt_ms=10, rcvbuf_bytes=65536, link_gbps=40,
                     transfer_bytes=30 * MB)
        out[name] = (engine.predict(s), des.predict(s))
    smooth_ns3, smooth_des = out["smooth"]
    burst_ns3, burst_des = out["burst"]
    assert smooth_ns3.rcvbuf_drops == 0 and smooth_des.rcvbuf_drops == 0
    assert burst_ns3.rcvbuf_drops > 0 and burst_des.rcvbuf_drops > 0
    # Measured: 236 (ns-3) and 233 (DES) against 1666 and 1686 Mbit/s paced smoothly.
    assert burst_ns3.goodput_mbps < 0.5 * smooth_ns3.goodput_mbps
    assert burst_des.goodput_mbps < 0.5 * smooth_des.goodput_mbps
    assert abs(burst_ns3.goodput_mbps / burst_des.goodput_mbps - 1) < 0.1
