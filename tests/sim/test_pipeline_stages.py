"""Pipelined endpoints' stage arithmetic, worked out by hand on round-number endpoints.

The endpoint is a resolved synthetic stack with its per-packet costs set to round
numbers (ns), so every split, ratio and percentage below is computed in its comment.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from quiclab.models.costmodel import Param
from quiclab.models.pipelines import PipelineCatalog, StageProfile
from quiclab.models.testing import synthetic_model, synthetic_registry
from quiclab.sim.analytic import AnalyticEngine
from quiclab.sim.analytic import pipeline as pipe
from quiclab.sim.resolve import Endpoint, resolve
from quiclab.sim.scenario import Scenario

CATALOG = PipelineCatalog.packaged()


def _endpoint(**costs: float) -> Endpoint:
    reg = synthetic_registry(synthetic_model("x"))
    ep = resolve(Scenario(server="x", client="x", gso=False, gro=False), reg).sender
    # Kernel path 1000 + 4000/4 per packet; an ACK 6000 of which 5000 = 1000 + 4000 is
    # its datagram and system call (ack_kernel_ns) and 1000 protocol work.
    base = {"ns_segment": 1000.0, "ns_per_call": 4000.0, "segments_per_call": 4,
            "ns_per_ack": 6000.0, "ns_protocol": 2000.0, "ns_crypto": 500.0, "ns_app": 100.0,
            "cores": 1.0}
    return replace(ep, **{**base, **costs})


def test_the_model_split_amortises_the_call_and_splits_the_ack() -> None:
    ep = _endpoint()
    assert pipe.ack_kernel_ns(ep) == 5000.0
    stages = pipe.model_stages(ep, acks_per_packet=0.5)
    assert stages == {"kernel": 1000.0 + 4000.0 / 4 + 0.5 * 5000.0,   # 4500
                      "crypto": 500.0,
                      "protocol": 2000.0 + 0.5 * 1000.0,              # 2500
                      "app": 100.0}


def test_a_profile_resplits_small_costs_too() -> None:
    # Kernel 0.3, crypto 0.3, protocol 0.2 (0.8 in all) weighted 2:1:1 → 0.6, 0.3, 0.2
    # (1.1), scaled back to 0.8: kernel 0.6·0.8/1.1 = 0.43636.
    profile = StageProfile(Param.point(2.0, "", "t"), Param.point(1.0, "", "t"),
                           Param.point(1.0, "", "t"), "t")
    out = pipe.resplit({"kernel": 0.3, "crypto": 0.3, "protocol": 0.2, "app": 9.0}, profile)
    assert out["kernel"] == pytest.approx(0.6 * 0.8 / 1.1)
    assert out["protocol"] == pytest.approx(0.2 * 0.8 / 1.1)
    assert out["app"] == 9.0
    nothing = {"kernel": 0.0, "crypto": 0.0, "protocol": 0.0, "app": 1.0}
    assert pipe.resplit(nothing, profile) == nothing  # no work to move
    # A profile that weighs every stage 0 says nothing: the split stays as it is.
    blank = StageProfile(Param.point(0.0, "", "t"), Param.point(0.0, "", "t"),
                         Param.point(0.0, "", "t"), "t")
    stages = {"kernel": 0.3, "crypto": 0.3, "protocol": 0.2, "app": 9.0}
    assert pipe.resplit(stages, blank) == stages


def test_stage_costs_put_the_kernel_path_on_udpip_unless_bypassed() -> None:
    split = {"kernel": 4500.0, "crypto": 500.0, "protocol": 2500.0, "app": 100.0}
    assert pipe.stage_costs(split, "kernel", 70.0, 30.0) == {
        "io": 0.0, "udpip": 4500.0, "crypto": 500.0, "protocol": 2500.0, "app": 100.0}
    assert pipe.stage_costs(split, "bypass", 70.0, 30.0)["io"] == 70.0
    assert pipe.stage_costs(split, "bypass", 70.0, 30.0)["udpip"] == 30.0


def _pipelined(preset: str, ep: Endpoint, acks: float, split: dict[str, float],
               handoff_ns: float = 0.0) -> Endpoint:
    placement = pipe.choose([CATALOG.get(preset)], "sender", split, handoff_ns, 70.0, 30.0)
    return pipe.pipelined_endpoint(ep, acks, placement, split)


def test_kernel_io_pipeline_keeps_every_cost_without_a_profile() -> None:
    ep = _endpoint()
    split = pipe.model_stages(ep, 0.5)
    p = _pipelined("msquic", ep, 0.5, split)
    assert (p.ns_segment, p.ns_per_call) == (1000.0, 4000.0)
    assert p.ns_per_ack == pytest.approx(6000.0)  # 5000 kernel + 1000 protocol
    # Cores io+udpip 4500 | crypto+protocol+app 3100: W = 7600 on 7600/4500 cores.
    assert p.cores == pytest.approx(7600.0 / 4500.0)
    assert [share for _l, share, _b, _q in p.pipeline] == pytest.approx([4500 / 7600,
                                                                        3100 / 7600])
    assert p.ns_handoff == 0.0


def test_kernel_io_pipeline_scales_the_kernel_path_to_its_resplit_share() -> None:
    ep = _endpoint()
    split = dict(pipe.model_stages(ep, 0.5))
    split["kernel"] *= 2.0  # a profile that finds twice the kernel work
    p = _pipelined("msquic", ep, 0.5, split)
    assert (p.ns_segment, p.ns_per_call) == (2000.0, 8000.0)
    assert p.ns_per_ack == pytest.approx(2.0 * 5000.0 + 1000.0)


def test_an_acks_protocol_part_stays_when_no_ack_is_charged_per_packet() -> None:
    # No ACKs per packet and no protocol cost: the model's protocol stage is 0, so
    # there is no ratio to scale by and the ACK keeps its 1000 ns protocol part.
    ep = _endpoint(ns_protocol=0.0)
    split = pipe.model_stages(ep, 0.0)
    assert split["protocol"] == 0.0
    p = _pipelined("msquic", ep, 0.0, split)
    assert p.ns_per_ack == pytest.approx(6000.0)


def test_bypass_io_replaces_the_kernel_path_and_its_stalls() -> None:
    ep = _endpoint(rx_stall_rate_hz=50.0)
    split = pipe.model_stages(ep, 0.5)
    p = _pipelined("dpdk", ep, 0.5, split, handoff_ns=10.0)
    assert p.ns_segment == 70.0 + 30.0  # the user-space driver and UDP/IP stack
    assert p.ns_per_call == 0.0
    assert p.ns_per_ack == pytest.approx(1000.0)  # only the ACK's protocol part
    assert p.rx_stall_rate_hz == 0.0  # a busy-polling driver has no socket to overflow
    assert p.cores == 1.0 and p.ns_handoff == 0.0  # one core: no hand-off


def test_perf_profile_of_a_kernel_pipeline_adds_up_its_io_stage() -> None:
    ep = _endpoint()
    p = _pipelined("msquic", ep, 0.5, pipe.model_stages(ep, 0.5), handoff_ns=100.0)
    # IO 1000 + 4000/4 + 100 hand-off + 0.5·5000 = 4600; crypto 500;
    # protocol 2000 + 0.5·1000 + 100 app = 2600; total 7700. No core busy-polls, so
    # at any rate the shares are the stages' shares of the work.
    prof = pipe.perf_profile(p, 0.5, 1e9)
    assert prof["io"] == pytest.approx(100.0 * 4600.0 / 7700.0)
    assert prof["crypto"] == pytest.approx(100.0 * 500.0 / 7700.0)
    assert prof["protocol"] == pytest.approx(100.0 * 2600.0 / 7700.0)


def test_a_polling_stack_on_two_cores_spends_its_idle_time_in_io() -> None:
    ep = _endpoint(cores=2.0)
    total = 4500.0 + 500.0 + 2500.0 + 100.0  # model_stages at 0.5 ACKs per packet
    # A rate at which the packet work is 0.5 cores: 2 cores on the CPU, 1.5 spinning.
    rate = 0.5 / (total * 1e-9) * 8.0 * ep.stream_bytes
    prof = pipe.perf_profile(ep, 0.5, rate, polls_idle=True)
    assert prof["io"] == pytest.approx(100.0 * (0.5 * 4500.0 / total + 1.5) / 2.0)
    assert prof["crypto"] == pytest.approx(100.0 * 0.5 * 500.0 / total / 2.0)
    assert sum(prof.values()) == pytest.approx(100.0)


def test_describe_shows_busy_polling_cores_full_and_caps_the_others() -> None:
    ep = replace(_endpoint(), pipeline=(("io", 0.25, True, 256), ("app", 0.75, False, 256)),
                 pipeline_label="t: io* | app")
    assert pipe.describe(ep, 2.0).endswith("per core io 100 %, app 150 %")
    assert pipe.describe(ep, 20.0).endswith("per core io 100 %, app 999 %")  # capped
    # Busy-polling adds what the core does not work: 1 − 0.25·2 = 0.5 core.
    assert pipe.busy_poll_cores(ep, 2.0) == pytest.approx(0.5)


def test_annotate_leaves_a_plain_prediction_alone() -> None:
    reg = synthetic_registry(synthetic_model("x"))
    s = Scenario(server="x", client="x")
    pred = AnalyticEngine(reg).predict(s)
    assert math.isfinite(pred.server_cpu_util)
    assert pipe.annotate(pred, resolve(s, reg)) is pred  # no pipeline, threads or placement


def test_perf_profile_with_no_traffic_or_no_cost() -> None:
    ep = _endpoint()
    # No goodput: no time on the CPU, the shares are the model's split at 0.5 ACKs
    # per packet (4500, 500, 2500 + 100 of 7600 ns).
    idle = pipe.perf_profile(ep, 0.5, 0.0)
    assert idle["io"] == pytest.approx(100.0 * 4500.0 / 7600.0)
    assert idle["protocol"] == pytest.approx(100.0 * 2600.0 / 7600.0)
    free = _endpoint(ns_segment=0.0, ns_per_call=0.0, ns_per_ack=0.0, ns_protocol=0.0,
                     ns_crypto=0.0, ns_app=0.0)
    assert pipe.perf_profile(free, 0.5, 0.0) == {"io": 0.0, "crypto": 0.0, "protocol": 0.0}


def test_the_slowest_of_equal_cores_is_the_first() -> None:
    loads = [pipe.CoreLoad(("io",), 500.0, False), pipe.CoreLoad(("app",), 500.0, False),
             pipe.CoreLoad(("crypto",), 100.0, False)]
    assert pipe.slowest(loads) == 0
    assert pipe.slowest(loads[::-1]) == 1
