"""Pipelines, core placement and runtime threads (sim/cores.py): the stage arithmetic, the
analytic slowest-stage rate, the DES's per-core servers, placement near/far from the
NIC, threads that add CPU and no goodput, and presets on every packaged model."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from quiclab.errors import ScenarioError
from quiclab.models.costmodel import Param
from quiclab.models.pipelines import HostParams, PipelineCatalog, RuntimeThreads
from quiclab.models.registry import Interop, Registry
from quiclab.models.testing import synthetic_model, synthetic_registry
from quiclab.sim.analytic import AnalyticEngine
from quiclab.sim.analytic import pipeline as pipe
from quiclab.sim.engine import get_engine
from quiclab.sim.resolve import resolve
from quiclab.sim.scenario import Scenario


def _registry(host: HostParams | None = None, **kw: float) -> Registry:
    model = synthetic_model("x", sender_ns=kw.get("sender_ns", 3000.0),
                            receiver_ns=kw.get("receiver_ns", 1500.0),
                            crypto_ns=kw.get("crypto_ns", 0.0),
                            syscall_ns=kw.get("syscall_ns", 0.0))
    reg = synthetic_registry(model)
    if host is None:
        return reg
    return Registry(reg.models, reg.cpus, reg.interop, source="synthetic",
                    track_versions=False, host=host)


def _host(**fields: float) -> HostParams:
    base = HostParams.assumed()
    return replace(base, **{k: Param.point(v, "", "test") for k, v in fields.items()})


def test_hand_offs_are_charged_to_the_dequeuing_core() -> None:
    catalog = PipelineCatalog.packaged()
    costs = {"io": 100.0, "udpip": 200.0, "crypto": 300.0, "protocol": 400.0, "app": 0.0}
    # mvfst's best: io+crypto | udpip+protocol+app. The receiver's path io → udpip →
    # crypto → protocol crosses cores three times: into core 1, back to 0, into 1.
    layout = catalog.get("mukherjee-best-mvfst").layout("receiver")
    loads = pipe.core_loads(costs, layout, "receiver", handoff_ns=10.0)
    assert [c.ns for c in loads] == [100 + 300 + 10, 200 + 400 + 20]
    assert pipe.slowest(loads) == 1
    assert pipe.effective_cores(loads) == pytest.approx((410 + 620) / 620)
    # The sender's path app → protocol → crypto → udpip → io crosses the same three times,
    # dequeued on core 0 twice (crypto, io) and on core 1 once (udpip).
    loads = pipe.core_loads(costs, catalog.get("mukherjee-best-mvfst").layout("sender"),
                            "sender", handoff_ns=10.0)
    assert [c.ns for c in loads] == [100 + 300 + 20, 200 + 400 + 10]
    # One core: no hand-off at all.
    one = pipe.core_loads(costs, catalog.get("dpdk").layout("sender"), "sender", 10.0)
    assert [c.ns for c in one] == [1000.0]


def test_a_profile_moves_work_between_stages_and_adds_none() -> None:
    from quiclab.models.pipelines import StageProfile

    stages = {"kernel": 1000.0, "crypto": 500.0, "protocol": 500.0, "app": 50.0}
    p = StageProfile(Param.point(2.0, "", "t"), Param.point(1.0, "", "t"),
                     Param.point(0.5, "", "t"), "t")
    out = pipe.resplit(stages, p)
    assert sum(out[k] for k in ("kernel", "crypto", "protocol")) == pytest.approx(2000.0)
    assert out["kernel"] / out["crypto"] == pytest.approx(4.0)
    assert out["crypto"] / out["protocol"] == pytest.approx(2.0)
    assert out["app"] == 50.0
    assert pipe.resplit(stages, None) == stages


def test_an_acks_system_call_and_datagram_are_kernel_work() -> None:
    """An ACK crosses the kernel path alone (one datagram, one system call); the rest
    of its cost is protocol. Seed 001 Table 1: a client that ACKs every datagram
    shows on its sender as IO."""
    registry = synthetic_registry(synthetic_model("k", syscall_ns=500.0, ack_ns=2000.0),
                                  synthetic_model("small", syscall_ns=500.0, ack_ns=300.0))
    r = resolve(Scenario(server="k", client="k", gso=False, gro=False), registry)
    ep, acks = r.sender, r.acks_per_packet
    assert pipe.ack_kernel_ns(ep) == pytest.approx(500.0)
    stages = pipe.model_stages(ep, acks)
    assert stages["kernel"] == pytest.approx(500.0 + acks * 500.0)
    assert stages["protocol"] == pytest.approx(ep.ns_protocol + acks * 1500.0)
    assert sum(stages.values()) == pytest.approx(ep.ns_per_packet_amortised(acks))
    # An ACK cheaper than the kernel path is all kernel work.
    small = resolve(Scenario(server="small", client="small", gso=False, gro=False), registry)
    assert pipe.ack_kernel_ns(small.sender) == pytest.approx(300.0)


def test_analytic_rate_is_the_slowest_core() -> None:
    """Sender-limited synthetic stack: the pipelined goodput is P·8 / max core load."""
    host = _host(handoff_ns=50.0, bypass_io_ns=100.0, bypass_udpip_ns=40.0)
    # A kernel path worth moving: a costly system call per (GSO) batch.
    reg = _registry(host, sender_ns=3000.0, receiver_ns=1000.0, crypto_ns=1200.0,
                    syscall_ns=20000.0)
    base = Scenario(server="x", client="x", link_gbps=100.0, transfer_bytes=10**9,
                    rcvbuf_bytes=6815744, sndbuf_bytes=6815744)
    engine = AnalyticEngine(reg)
    plain = engine.predict(base)
    simple = engine.predict(base.with_(pipeline="mukherjee-simple"))
    best = engine.predict(base.with_(pipeline="mukherjee-best"))
    assert plain.limit == simple.limit == "sender_cpu"
    r0, r1 = resolve(base, reg), resolve(base.with_(pipeline="mukherjee-simple"), reg)
    w0 = sum(pipe.model_stages(r0.sender, r0.acks_per_packet).values())
    ep = r1.sender
    work = (ep.ns_segment + ep.ns_per_call / ep.segments_per_call + ep.ns_crypto
            + ep.ns_protocol + r1.acks_per_packet * ep.ns_per_ack + ep.ns_app + ep.ns_handoff)
    slowest_ns = max(share for _label, share, _busy, _q in ep.pipeline) * work
    assert simple.goodput_mbps / plain.goodput_mbps == pytest.approx(w0 / slowest_ns, rel=0.01)
    # The best of the paper's configurations is at least as fast as simple.
    assert plain.goodput_mbps < simple.goodput_mbps <= best.goodput_mbps * (1 + 1e-9)
    # The limiting core is fully busy and the busy-polling I/O core reports 100 % too.
    assert simple.server_cpu_util == pytest.approx(2.0, rel=1e-4)


def test_des_runs_the_cores_as_servers_and_agrees_with_the_analytic_rate() -> None:
    reg = _registry(_host(handoff_ns=50.0), sender_ns=3000.0, receiver_ns=1000.0,
                    crypto_ns=1200.0)
    s = Scenario(server="x", client="x", link_gbps=100.0, transfer_bytes=200_000_000,
                 rcvbuf_bytes=6815744, sndbuf_bytes=6815744, pipeline="mukherjee-simple")
    analytic = AnalyticEngine(reg).predict(s)
    des = get_engine("des", reg).predict(s)
    assert des.goodput_mbps == pytest.approx(analytic.goodput_mbps, rel=0.05)
    assert any("pipeline mukherjee-simple" in n for n in des.notes)


def test_the_des_time_series_counts_every_core_of_a_pipeline() -> None:
    """A pipelined sender's CPU model has one event-loop server (``n`` = 1) and
    more cores behind it: its busy series is clipped at those cores, not at 1."""
    from quiclab.sim.des.host import CpuServers
    from quiclab.sim.des.pipeline import PipelineCpu
    from quiclab.sim.des.timeseries import cores

    two = PipelineCpu((("io", 0.4, False, 64), ("udpip+crypto+protocol+app", 0.6, False, 64)))
    assert two.n == 1 and cores(two) == 2.0
    assert cores(CpuServers(2.5)) == 3.0
    reg = _registry(_host(handoff_ns=50.0), sender_ns=3000.0, receiver_ns=1000.0,
                    crypto_ns=1200.0)
    s = Scenario(server="x", client="x", link_gbps=100.0, transfer_bytes=50_000_000,
                 rcvbuf_bytes=6815744, sndbuf_bytes=6815744, pipeline="mukherjee-simple")
    des = get_engine("des", reg, timeseries=True, timeseries_interval_s=0.005).predict(s)
    assert des.timeseries is not None
    busy = des.timeseries["sender_cpu_busy"][1:-1]  # whole intervals of the transfer
    # The two cores do 1.02 cores of work together (the busy-polling I/O core's
    # spinning is added to server_cpu_util only).
    assert all(1.0 < b <= 2.0 for b in busy)


def test_a_pipeline_cannot_apply_to_kernel_tcp() -> None:
    reg = synthetic_registry(synthetic_model("tcp+tls"), synthetic_model("x"))
    with pytest.raises(ScenarioError, match=r"^pipeline='mukherjee-best' is impossible: "
                                            r"allowed none with server=tcp\+tls"):
        resolve(Scenario(server="tcp+tls", client="x", pipeline="mukherjee-best"), reg)
    # Without a pipeline the TCP reference still resolves.
    assert resolve(Scenario(server="tcp+tls", client="x"), reg).sender is not None


def test_busy_polling_on_both_ends_removes_the_pairs_interplay_idleness() -> None:
    """Interop.busy is time a side sleeps until the other's packets wake it: a
    busy-polling I/O core never sleeps, so with both ends polling the pair runs at
    its slowest core (poll_interplay = 1); kernel I/O keeps the idleness."""
    model = synthetic_model("x", sender_ns=3000.0, receiver_ns=1500.0)
    interop = Interop.for_testbed("qir10g", server_effect={"x": math.log(0.5)})
    reg = synthetic_registry(model, interop=interop)
    reg = Registry(reg.models, reg.cpus, reg.interop, source="synthetic",
                   track_versions=False, host=_host(handoff_ns=0.0))
    base = Scenario(server="x", client="x", link_gbps=100.0, rcvbuf_bytes=6815744,
                    sndbuf_bytes=6815744, testbed="qir10g")
    assert resolve(base, reg).interop_busy == pytest.approx(0.5)
    polled = resolve(base.with_(pipeline="mukherjee-simple"), reg)
    assert polled.interop_busy == 1.0 and "busy polling on both ends" in polled.interop_source
    kernel = resolve(base.with_(pipeline="msquic"), reg)  # two threads, kernel sockets
    assert kernel.interop_busy == pytest.approx(0.5)
    half = Registry(reg.models, reg.cpus, reg.interop, source="synthetic", track_versions=False,
                    host=replace(reg.host, poll_interplay=Param.point(0.5, "", "t")))
    assert resolve(base.with_(pipeline="dpdk"), half).interop_busy == pytest.approx(0.75)
    engine = AnalyticEngine(reg)
    assert engine.predict(base.with_(pipeline="dpdk")).limit == "sender_cpu"
    assert engine.predict(base).limit == "interop"


def test_perf_profile_counts_busy_polling_as_io() -> None:
    """Seed 001 Table 1 profiles on-CPU cycles: a polling core's idle time is I/O."""
    reg = _registry(_host(handoff_ns=0.0, bypass_io_ns=100.0, bypass_udpip_ns=0.0),
                    sender_ns=3000.0, receiver_ns=1000.0, crypto_ns=1000.0)
    s = Scenario(server="x", client="x", link_gbps=100.0, rcvbuf_bytes=6815744,
                 sndbuf_bytes=6815744, pipeline="dpdk")
    r = resolve(s, reg)
    ep = r.sender
    work_ns = (ep.ns_segment + ep.ns_crypto + ep.ns_protocol + r.acks_per_packet * ep.ns_per_ack
               + ep.ns_app)
    full = 8.0 * ep.stream_bytes / (work_ns * 1e-9)  # the rate one saturated core gives
    busy = pipe.perf_profile(ep, r.acks_per_packet, full)
    assert busy["io"] == pytest.approx(100.0 * 100.0 / work_ns, rel=1e-6)
    assert sum(busy.values()) == pytest.approx(100.0)
    # At half that rate the core spins half of the time, in its I/O loop.
    half = pipe.perf_profile(ep, r.acks_per_packet, full / 2)
    assert half["io"] == pytest.approx(50.0 + busy["io"] / 2, rel=1e-6)
    assert half["crypto"] == pytest.approx(busy["crypto"] / 2, rel=1e-6)
    # A kernel-I/O stack is off the CPU when idle, unless it polls its socket.
    plain = resolve(s.with_(pipeline="none"), reg).sender
    quiet = pipe.perf_profile(plain, r.acks_per_packet, full / 4)
    polling = pipe.perf_profile(plain, r.acks_per_packet, full / 4, polls_idle=True)
    assert sum(quiet.values()) == pytest.approx(100.0)
    assert polling["io"] > quiet["io"] and polling["crypto"] < quiet["crypto"]


def test_pinning_near_the_nic_gains_far_loses_only_with_numa() -> None:
    reg = _registry(_host(sender_near_cost=0.8, receiver_near_cost=0.8, far_penalty=0.4),
                    sender_ns=3000.0, receiver_ns=1000.0)
    engine = AnalyticEngine(reg)
    base = Scenario(server="x", client="x", rcvbuf_bytes=6815744, sndbuf_bytes=6815744)
    unpinned = engine.predict(base)
    near = engine.predict(base.with_(server_core=16))   # EPYC 7543: 10G NIC on node 2
    far = engine.predict(base.with_(server_core=0))
    assert far.goodput_mbps < unpinned.goodput_mbps < near.goodput_mbps
    # Near: cost × 0.8 (rate / 0.8); far: × 0.8 × 1.4 = 1.12 (rate / 1.12).
    assert near.goodput_mbps == pytest.approx(unpinned.goodput_mbps / 0.8, rel=1e-3)
    assert far.goodput_mbps == pytest.approx(unpinned.goodput_mbps / 1.12, rel=1e-3)
    assert near.goodput_mbps == engine.predict(base.with_(pin=True)).goodput_mbps
    # With the 100G NIC (node 1) core 8 is the near one.
    assert engine.predict(base.with_(server_core=8, link_gbps=100.0)).goodput_mbps > \
        engine.predict(base.with_(server_core=16, link_gbps=100.0)).goodput_mbps
    # The client is not the limit: its core changes nothing.
    assert engine.predict(base.with_(client_core=0)).goodput_mbps == \
        pytest.approx(unpinned.goodput_mbps)
    assert any("unpinned: the calibrated cost" in n for n in unpinned.notes)
    # One NUMA node (Xeon W-2145): pinning is noted and changes nothing.
    one = base.with_(cpu="W-2145")
    assert engine.predict(one.with_(server_core=3)).goodput_mbps == \
        pytest.approx(engine.predict(one).goodput_mbps)
    with pytest.raises(ScenarioError, match=r"server_core=40 is impossible: allowed -1 … 31"):
        engine.predict(base.with_(server_core=40))


def test_fitted_placement_gives_lsquic_rows() -> None:
    """Seed 002 Fig. 11: LSQUIC's server limits, so its core decides (rows), and the
    mean over the 16 pinnings is the one-node-per-socket goodput (kempf24-069)."""
    reg = Registry.load(MODELS)
    engine = AnalyticEngine(reg)
    base = Scenario(server="lsquic", client="lsquic", rcvbuf_bytes=6815744,
                    sndbuf_bytes=6815744)
    cores = (0, 8, 16, 24)
    grid = [[engine.predict(base.with_(server_core=a, client_core=b)).goodput_mbps
             for b in cores] for a in cores]
    rows = [sum(r) / 4 for r in grid]
    cols = [sum(grid[a][b] for a in range(4)) / 4 for b in range(4)]
    assert max(rows) - min(rows) >= 2 * (max(cols) - min(cols)) > 0
    mean = sum(map(sum, grid)) / 16
    assert mean == pytest.approx(engine.predict(base).goodput_mbps, rel=0.01)


def test_runtime_threads_add_cpu_not_goodput() -> None:
    one = Param.point(0.5, "cores", "t")
    sat = Param.point(2.5, "cores", "t")
    threads = RuntimeThreads(one, sat, 32)
    assert threads.overhead_cores(1) == 0.5
    assert threads.overhead_cores(32) == threads.overhead_cores(100) == 2.5
    assert threads.overhead_cores(4) == pytest.approx(0.5 + 2.0 * 2 / 5)
    host = replace(HostParams.assumed(), threads={"x": {"receiver": threads}})
    plain = AnalyticEngine(_registry(None)).predict(Scenario(server="x", client="x",
                                                             streams=32))
    threaded = AnalyticEngine(_registry(host)).predict(Scenario(server="x", client="x",
                                                                streams=32))
    assert threaded.goodput_mbps == plain.goodput_mbps
    assert threaded.client_cpu_util == pytest.approx(plain.client_cpu_util + 2.5)
    assert threaded.server_cpu_util == plain.server_cpu_util


MODELS = Path(__file__).resolve().parents[2] / "models" / "fitted"


def _app_for(reg: Registry, name: str) -> str:
    """The first application protocol the model serves as both ends."""
    apps = reg.model(name).behaviour.apps
    return next(a for a in ("h3", "hq", "perf") if a in apps)


@pytest.mark.skipif(not (MODELS / "pipeline.json").is_file(), reason="no fitted models")
def test_every_calibrated_stack_takes_every_preset() -> None:
    """``--set pipeline=…`` works for any calibrated QUIC stack (TCP says why not)."""
    reg = Registry.load(MODELS)
    engine = AnalyticEngine(reg)
    presets = PipelineCatalog.packaged().names()
    for name in reg.names():
        scenario = Scenario(server=name, client=name, app=_app_for(reg, name))
        plain = engine.predict(scenario)
        for preset in presets:
            if reg.models[name].tcp is not None:  # tcp+tls, tcp: kernel TCP
                with pytest.raises(ScenarioError, match="pipeline="):
                    engine.predict(scenario.with_(pipeline=preset))
                continue
            p = engine.predict(scenario.with_(pipeline=preset))
            assert p.goodput_mbps > 0, (name, preset)
            assert any(f"pipeline {preset}" in n or "pipeline mukherjee" in n
                       for n in p.notes), (name, preset, p.notes)
        assert plain.goodput_mbps > 0


@pytest.mark.skipif(not (MODELS / "pipeline.json").is_file(), reason="no fitted models")
def test_kernel_bypass_builds_run_their_preset_as_shipped() -> None:
    """picoquic@dpdk is a kernel-bypass stack (seed 001 §2.1): under pipeline none it
    runs the dpdk preset; an explicit pipeline replaces it; the Fusion build's crypto
    costs the fitted share of OpenSSL's."""
    reg = Registry.load(MODELS)
    s = Scenario(server="picoquic@dpdk", client="picoquic@dpdk", cpu="E5-2640 v4",
                 link_gbps=25.0, app="perf", gso=True, gro=True)
    dpdk = resolve(s, reg)
    assert dpdk.sender.pipeline_label.startswith("dpdk: ") and dpdk.receiver.pipeline
    assert dpdk.sender.ns_per_call == 0.0  # no system calls
    assert dpdk.interop_busy == 1.0
    # A polling user-space receiver owns its core: no scheduler stalls, no buffer drops.
    assert dpdk.receiver.rx_stall_rate_hz == 0.0
    kernel = resolve(s.with_(server="picoquic", client="picoquic"), reg)
    assert resolve(s.with_(pipeline="msquic"), reg).receiver.rx_stall_rate_hz == \
        kernel.receiver.rx_stall_rate_hz
    simple = resolve(s.with_(pipeline="mukherjee-simple"), reg)
    assert simple.sender.pipeline_label.startswith("mukherjee-simple")
    fusion = resolve(s.with_(server="picoquic@dpdk-fusion", client="picoquic@dpdk-fusion"), reg)
    factor = reg.host.crypto_engines["fusion"].value
    assert 0.0 < factor < 1.0
    assert fusion.sender.ns_crypto == pytest.approx(dpdk.sender.ns_crypto * factor)
    # The kernel build stays as shipped; the bypass build is faster: no system calls and
    # no kernel UDP path (on a testbed that measured no pair interplay for either).
    engine = AnalyticEngine(reg)
    plain = engine.predict(s.with_(server="picoquic", client="picoquic"))
    bypass = engine.predict(s)
    assert bypass.goodput_mbps > 1.2 * plain.goodput_mbps
    assert bypass.limit != "interop" and plain.limit != "interop"
    assert not resolve(s.with_(server="picoquic", client="picoquic"), reg).sender.pipeline


def test_a_stack_on_the_interrupt_core_gets_the_rest_of_it() -> None:
    """Pinned to the core that handles the NIC's interrupts, a CPU-bound sender runs
    at (1 − irq_core_share) of its rate on another core; unpinned, or pinned
    elsewhere, nothing changes (the synthetic sender: 3000 ns a packet)."""
    reg = _registry(_host(irq_core_share=0.25))
    engine = AnalyticEngine(reg)
    base = Scenario(server="x", client="x", link_gbps=100.0, rcvbuf_bytes=6815744,
                    sndbuf_bytes=6815744, irq_core=2, cpu="Intel Xeon W-2145")
    free = engine.predict(base)
    other = engine.predict(base.with_(server_core=4, client_core=4))
    shared = engine.predict(base.with_(server_core=2, client_core=2))
    assert free.limit == other.limit == shared.limit == "sender_cpu"
    assert other.goodput_mbps == pytest.approx(free.goodput_mbps, rel=1e-9)  # one NUMA node
    # (the analytic solver stops within 1e-5 of the fixed point)
    assert shared.goodput_mbps == pytest.approx(0.75 * free.goodput_mbps, rel=1e-5)
    assert "interrupts" in resolve(base.with_(server_core=2), reg).sender.placement_note
