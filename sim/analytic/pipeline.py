"""Pipelined endpoints in closed form: stage costs, per-core loads, the slowest stage.

A pipeline places the stages of packet processing (Mukherjee et al. 2025 §3:
I/O, UDP/IP, crypto, QUIC protocol, application) on cores of one endpoint.
Per data packet (ns, amortised over system calls and the ACKs of a packet):

- the cost model's own split (:func:`model_stages`): the kernel network path
  ``ns_segment + ns_per_call / segments`` (Table 1's "IO": driver to socket
  API) plus the kernel part of the packet's ACKs (:func:`ack_kernel_ns`),
  crypto, protocol (with the rest of the ACKs) and the application;
- re-weighted by the implementation's measured profile, if it has one
  (:func:`resplit`: seed 001 Table 1, the catalog's perf categories), keeping
  the total — a profile moves work between stages, it adds none;
- with kernel-bypass I/O the kernel path is replaced by a user-space driver on
  the I/O core and a user-space UDP/IP stack (``bypass_io_ns``,
  ``bypass_udpip_ns``); with kernel I/O the path is one cost on the core that
  runs ``io`` and ``udpip`` (the kernel decides where its parts run);
- every time a packet moves to a stage on another core it is handed over
  through a shared-memory queue (seed 001 §3: lock-free FIFO messaging):
  ``handoff_ns`` on the core that dequeues it, which pulls the descriptor and
  the packet's cache lines from the other core (the producer's writes retire
  through its store buffer; the consumer takes the coherence misses).

Core ``c`` carries ``L_c`` = its stages plus its hand-offs. A pipeline is as
fast as its slowest core: ``rate = P·8 / max_c L_c``. The engines see this as
an endpoint whose total work is ``W = Σ L_c`` on ``W / max_c L_c`` effective
cores (so the analytic core's ``cores · P·8 / T`` is exactly the slowest
stage's rate, and the CPU it reports is the work done); the DES runs each core
as its own server (:mod:`quiclab.sim.des.pipeline`). A busy-polling core is
reported 100 % busy whatever its load (seed 001 Table 1, picoquic-dpdk).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from quiclab.models.pipelines import Layout, Preset, StageProfile

if TYPE_CHECKING:
    from quiclab.sim.prediction import Prediction
    from quiclab.sim.resolve import Endpoint, Resolved

#: Order a data packet visits the stages on each side.
PATH = {"sender": ("app", "protocol", "crypto", "udpip", "io"),
        "receiver": ("io", "udpip", "crypto", "protocol", "app")}


@dataclass(frozen=True)
class CoreLoad:
    """One core of a pipelined endpoint: its stages, ns per data packet, busy polling."""

    stages: tuple[str, ...]
    ns: float
    busy_poll: bool

    @property
    def label(self) -> str:
        return "+".join(self.stages) + ("*" if self.busy_poll else "")


def ack_kernel_ns(ep: Endpoint) -> float:
    """The kernel path's part of one ACK (ns): an ACK crosses it alone, one datagram
    and one system call (``ns_segment + ns_per_call``), at most the ACK's cost; the
    rest (frames, loss detection, congestion control, its small AEAD) is protocol.
    Seed 001 Table 1: when quicly's client ACKs every datagram (no GRO) its sender's
    extra work shows as IO (60.7 % against 21.3 %), not as protocol or crypto."""
    return min(ep.ns_per_ack, ep.ns_segment + ep.ns_per_call)


def model_stages(ep: Endpoint, acks_per_packet: float) -> dict[str, float]:
    """The cost model's split of one data packet (ns): kernel path, crypto, protocol, app."""
    ack_kernel = ack_kernel_ns(ep)
    return {"kernel": (ep.ns_segment + ep.ns_per_call / ep.segments_per_call
                       + acks_per_packet * ack_kernel),
            "crypto": ep.ns_crypto,
            "protocol": ep.ns_protocol + acks_per_packet * (ep.ns_per_ack - ack_kernel),
            "app": ep.ns_app}


def resplit(stages: Mapping[str, float], profile: StageProfile | None) -> dict[str, float]:
    """Re-weight kernel/crypto/protocol by ``profile`` and scale back to their sum."""
    out = dict(stages)
    if profile is None:
        return out
    keys = ("kernel", "crypto", "protocol")
    weights = {"kernel": profile.kernel.value, "crypto": profile.crypto.value,
               "protocol": profile.protocol.value}
    before = sum(stages[k] for k in keys)
    weighted = {k: stages[k] * weights[k] for k in keys}
    after = sum(weighted.values())
    if before <= 0 or after <= 0:
        return out
    for k in keys:
        out[k] = weighted[k] * before / after
    return out


def stage_costs(split: Mapping[str, float], io: str, bypass_io_ns: float,
                bypass_udpip_ns: float) -> dict[str, float]:
    """ns per data packet of each of the five stages (see the module docstring)."""
    if io == "bypass":
        io_ns, udpip_ns = bypass_io_ns, bypass_udpip_ns
    else:
        io_ns, udpip_ns = 0.0, split["kernel"]
    return {"io": io_ns, "udpip": udpip_ns, "crypto": split["crypto"],
            "protocol": split["protocol"], "app": split["app"]}


def core_loads(costs: Mapping[str, float], layout: Layout, role: str,
               handoff_ns: float) -> tuple[CoreLoad, ...]:
    """Per-core ns per data packet, hand-offs included (on the dequeuing core)."""
    ns = [sum(costs[s] for s in core) for core in layout.cores]
    path = PATH[role]
    for a, b in pairwise(path):
        ca, cb = layout.core_of(a), layout.core_of(b)
        if ca != cb:
            ns[cb] += handoff_ns
    return tuple(CoreLoad(core, n, bp)
                 for core, n, bp in zip(layout.cores, ns, layout.busy_poll, strict=True))


def slowest(loads: Sequence[CoreLoad]) -> int:
    """Index of the core with the largest load (the first of equals)."""
    return max(range(len(loads)), key=lambda i: (loads[i].ns, -i))


def effective_cores(loads: Sequence[CoreLoad]) -> float:
    """``Σ L_c / max L_c``: the capacity the engines give the endpoint."""
    return sum(c.ns for c in loads) / max(c.ns for c in loads)


@dataclass(frozen=True)
class Placement:
    """The layout chosen for one endpoint and what it costs."""

    preset: Preset
    layout: Layout
    costs: dict[str, float]
    loads: tuple[CoreLoad, ...]


def choose(presets: Sequence[Preset], role: str, split: Mapping[str, float],
           handoff_ns: float, bypass_io_ns: float, bypass_udpip_ns: float) -> Placement:
    """The fastest of ``presets`` for this endpoint (smallest slowest-core load)."""
    best: Placement | None = None
    for preset in presets:
        layout = preset.layout(role)
        costs = stage_costs(split, preset.io, bypass_io_ns, bypass_udpip_ns)
        loads = core_loads(costs, layout, role, handoff_ns)
        if best is None or max(c.ns for c in loads) < max(c.ns for c in best.loads) - 1e-9:
            best = Placement(preset, layout, costs, loads)
    assert best is not None
    return best


def pipelined_endpoint(ep: Endpoint, acks_per_packet: float, placement: Placement,
                       split: Mapping[str, float]) -> Endpoint:
    """``ep`` with its components set so that they sum to ``W`` and ``cores = W / max L``.

    Crypto and protocol (with an ACK's protocol part) take their re-split values;
    the kernel path (with an ACK's kernel part, :func:`ack_kernel_ns`) is scaled to
    its re-split value (kernel I/O) or replaced by the bypass costs
    (``ns_per_call`` = 0: no system calls); the hand-offs are
    ``ns_handoff``. The per-core shares go to the DES in ``pipeline``.
    """
    model = model_stages(ep, acks_per_packet)
    costs, loads = placement.costs, placement.loads

    def ratio(new: float, old: float) -> float:
        return new / old if old > 0 else 1.0

    r_protocol = ratio(split["protocol"], model["protocol"])
    ack_kernel = ack_kernel_ns(ep)
    ack_protocol = (ep.ns_per_ack - ack_kernel) * r_protocol
    fields: dict[str, Any] = {
        "ns_crypto": split["crypto"],
        "ns_protocol": ep.ns_protocol * r_protocol,
    }
    if placement.preset.io == "bypass":
        # The user-space path replaces the kernel's, an ACK's part too (as the stage
        # costs, which count the bypass driver per data packet).
        fields.update(ns_segment=costs["io"] + costs["udpip"], ns_per_call=0.0,
                      ns_per_ack=ack_protocol)
    else:
        r_kernel = ratio(split["kernel"], model["kernel"])
        fields.update(ns_segment=ep.ns_segment * r_kernel, ns_per_call=ep.ns_per_call * r_kernel,
                      ns_per_ack=ack_kernel * r_kernel + ack_protocol)
    if placement.preset.io == "bypass" and any(
            lay_busy and "io" in core
            for core, lay_busy in zip(placement.layout.cores, placement.layout.busy_poll,
                                      strict=True)):
        # A busy-polling user-space driver owns its core and the NIC's ring: no socket
        # buffer, no wake-up, no scheduler stall to overflow it (receive-buffer drops).
        fields["rx_stall_rate_hz"] = 0.0
    work = sum(c.ns for c in loads)
    fields["ns_handoff"] = max(0.0, work - sum(costs.values()))
    fields["cores"] = effective_cores(loads)
    fields["pipeline"] = tuple((c.label, c.ns / work, c.busy_poll,
                                placement.preset.queue_messages) for c in loads)
    fields["pipeline_label"] = f"{placement.preset.name}: {placement.layout.label()}"
    return replace(ep, **fields)


# ------------------------------------------------------------------ outputs
def perf_profile(ep: Endpoint, acks_per_packet: float, goodput_bps: float,
                 profile: StageProfile | None = None, polls_idle: bool = False
                 ) -> dict[str, float]:
    """What ``perf`` would attribute to I/O, crypto and protocol on this endpoint (%).

    Seed 001 Table 1 profiles a sender's *on-CPU* cycles, which are not its cost
    split: a core that busy-polls (kernel-bypass I/O; a stack that polls its socket
    when idle, ``polls_idle``) is on the CPU all the time, and the time it does no
    work is spent in the I/O path. Work per second is the goodput's packets times
    each stage's ns (the stack's measured ``profile`` re-splits a plain endpoint;
    a pipelined one carries it already); hand-offs count as I/O (queue polling).
    The idle time of a busy-polling core (1 − its work) and, with ``polls_idle``,
    of an unpipelined one (cores − work) is added to I/O.
    """
    if ep.pipeline:
        ack_kernel = ack_kernel_ns(ep)
        stages = {"io": (ep.ns_segment + ep.ns_per_call / ep.segments_per_call + ep.ns_handoff
                         + acks_per_packet * ack_kernel),
                  "crypto": ep.ns_crypto,
                  "protocol": (ep.ns_protocol + acks_per_packet * (ep.ns_per_ack - ack_kernel)
                               + ep.ns_app)}
    else:
        split = resplit(model_stages(ep, acks_per_packet), profile)
        stages = {"io": split["kernel"], "crypto": split["crypto"],
                  "protocol": split["protocol"] + split["app"]}
    total_ns = sum(stages.values())
    pkts = goodput_bps / (8.0 * max(ep.stream_bytes, 1))
    work = pkts * total_ns * 1e-9  # cores busy with packet work
    if ep.pipeline:
        spin = sum(max(0.0, 1.0 - share * work)
                   for _label, share, busy, _queue in ep.pipeline if busy)
    else:
        spin = max(0.0, ep.cores - work) if polls_idle else 0.0
    on_cpu = work + spin
    if on_cpu <= 0 or total_ns <= 0:
        return {k: 100.0 * v / total_ns if total_ns > 0 else 0.0 for k, v in stages.items()}
    out = {k: 100.0 * work * v / total_ns / on_cpu for k, v in stages.items()}
    out["io"] += 100.0 * spin / on_cpu
    return out


def busy_poll_cores(ep: Endpoint, util_cores: float) -> float:
    """Extra cores a busy-polling pipeline shows as busy beyond the work it does.

    Core ``c`` does ``share_c × util`` cores of work; a busy-polling core is
    reported fully busy (it spins when idle), so it adds ``1 − share_c × util``.
    """
    extra = 0.0
    for _label, share, busy, _queue in ep.pipeline:
        if busy:
            extra += max(0.0, 1.0 - share * util_cores)
    return extra


def describe(ep: Endpoint, util_cores: float) -> str:
    """``pipeline …: io* 35 % | udpip+crypto+protocol+app 100 %`` (per-core busy)."""
    parts = []
    for label, share, busy, _queue in ep.pipeline:
        u = 1.0 if busy else share * util_cores
        parts.append(f"{label} {min(u, 9.99) * 100:.0f} %")
    return f"{ep.role} pipeline {ep.pipeline_label} — per core " + ", ".join(parts)


def annotate(pred: Prediction, resolved: Resolved) -> Prediction:
    """Add busy polling, runtime threads and placement to a Prediction's CPU and notes.

    Engines call this on their Prediction (the goodput is theirs; only what the
    cores report changes): a busy-polling core counts as fully busy, a
    runtime's extra threads add their cores (:mod:`quiclab.sim.cores`), and the
    notes say where each side ran.
    """
    import math

    notes = list(pred.notes)
    utils = {}
    for side, ep, util in (("server", resolved.sender, pred.server_cpu_util),
                           ("client", resolved.receiver, pred.client_cpu_util)):
        new = util
        if ep.pipeline and math.isfinite(util):
            notes.append(describe(ep, util))
            new += busy_poll_cores(ep, util)
        if ep.overhead_cores and math.isfinite(util):
            new += ep.overhead_cores
            notes.append(f"{side} runtime threads: +{ep.overhead_cores * 100:.0f} % CPU "
                         "that adds no packet rate (seed 000 Fig. 7)")
        if ep.placement_note:
            notes.append(f"{side} {ep.placement_note}")
        utils[side] = new
    if utils["server"] == pred.server_cpu_util and utils["client"] == pred.client_cpu_util \
            and len(notes) == len(pred.notes):
        return pred
    duration = pred.duration_s
    return replace(pred, server_cpu_util=utils["server"], client_cpu_util=utils["client"],
                   server_cpu_s=utils["server"] * duration if math.isfinite(duration)
                   else pred.server_cpu_s,
                   client_cpu_s=utils["client"] * duration if math.isfinite(duration)
                   else pred.client_cpu_s,
                   notes=tuple(notes))
