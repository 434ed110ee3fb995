"""Where an endpoint's work runs: pipelines, core placement and runtime threads.

:func:`apply` is the last step of :func:`quiclab.sim.resolve.resolve`. It
leaves a Scenario without a pipeline, pinning or a multi-threaded runtime
untouched (the calibrated models are for unpinned, as-shipped stacks) and
otherwise changes the two :class:`~quiclab.sim.resolve.Endpoint` s, so that
every engine sees the same numbers:

- **Pipelines** (``Scenario.pipeline``, presets in ``models/pipelines.json``):
  stage costs, per-core loads and effective cores from
  :mod:`quiclab.sim.analytic.pipeline`; the implementation's own ``cores`` is
  replaced by the pipeline's. A build that is itself a kernel-bypass stack
  (``picoquic@dpdk``, the catalog's ``implementations``) runs its preset under
  ``pipeline = none``, with its crypto engine's fitted cost. With busy-polling
  I/O on both ends the pair's interplay idleness (``Interop.busy``: time a side
  sleeps until the other's packets wake it) goes, by ``poll_interplay``.
- **Placement** (``Scenario.pin``, ``server_core``, ``client_core``; seed 002
  §4.7, Figs. 10–11). The calibrated models are unpinned runs in the BIOS
  default of one NUMA node per socket (the QIR-10G data: the NIC's quarter of
  the cores brings nothing there — LSQUIC's server medians are 3218–3275 Mbit/s
  on each quarter of the EPYC 7543, node 2 holding the NIC among the lowest;
  quiche's faster runs with its server on cores 0–7 are another effect, see
  experiments/README.md).
  Kempf et al. pin with four nodes per socket, where memory is node-local: a
  process on the NIC's node pays ``n`` (per role) times the calibrated cost,
  on any other node ``n·(1 + δ)`` (the NIC's packet buffers are remote). A
  pinned Scenario on a multi-node CPU is that four-node set-up; unpinned is
  the calibrated cost, whatever the CPU's node count. One NUMA node: no effect.
- **Interrupts** (``Scenario.irq_core``): a stack pinned to the core that also
  handles the NIC queue's interrupts runs at (1 − ``irq_core_share``) of it.
- **Runtime threads** (seed 000 Fig. 7): a runtime such as Go's spreads
  goroutines over cores — CPU time grows with the streams, the connection's
  packet path does not get faster. ``overhead_cores`` is that extra CPU; the
  engines add it to the utilisation they report and nothing else.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from quiclab.errors import ScenarioError
from quiclab.models.pipelines import NONE, HostParams, PipelineCatalog
from quiclab.sim.analytic import pipeline as pipe

if TYPE_CHECKING:
    from quiclab.models.cpus import Cpu
    from quiclab.models.registry import Registry
    from quiclab.sim.resolve import Endpoint, Resolved
    from quiclab.sim.scenario import Scenario

#: Endpoint cost fields a placement factor scales (the bulk path).
COST_FIELDS = ("ns_protocol", "ns_crypto", "ns_app", "ns_segment", "ns_per_call", "ns_per_ack",
               "ns_handoff")


def host_params(registry: Registry) -> HostParams:
    """The registry's calibrated pipeline/placement parameters, or the assumed ones."""
    params = getattr(registry, "host", None)
    return params if isinstance(params, HostParams) else HostParams.assumed()


def is_pinned(scenario: Scenario, role: str) -> bool:
    core = scenario.server_core if role == "sender" else scenario.client_core
    return scenario.pin or core >= 0


def placement(scenario: Scenario, cpu: Cpu, role: str, params: HostParams
              ) -> tuple[float, str]:
    """(cost multiplier relative to the calibrated unpinned cost, note) for one endpoint.

    Raises ScenarioError if the core does not exist on ``cpu``.
    """
    field = "server_core" if role == "sender" else "client_core"
    core = getattr(scenario, field)
    if cpu.cores and core >= cpu.cores:
        raise ScenarioError(field, core, f"-1 … {cpu.cores - 1} ({cpu.name} has "
                                         f"{cpu.cores} cores)")
    nodes = max(1, cpu.numa_nodes)
    nic = cpu.nic_node(scenario.link_gbps)
    near = (params.sender_near_cost if role == "sender" else params.receiver_near_cost).value
    delta = params.far_penalty.value
    if not is_pinned(scenario, role):
        if nodes <= 1 or (near == 1.0 and delta <= 0):
            return 1.0, ""
        lo, hi = 1.0 / ((1.0 + delta) * near), 1.0 / near
        return 1.0, (f"unpinned: the calibrated cost (one NUMA node per socket, where the NIC's "
                     f"node brings nothing); with {nodes} nodes per socket this side's CPU rate "
                     f"would be {lo * 100 - 100:+.0f} % (another node than the NIC's) to "
                     f"{hi * 100 - 100:+.0f} % (the NIC's) (seed 002 Fig. 11)")
    node = cpu.numa_node_of(core) if core >= 0 else nic
    where = f"core {core}" if core >= 0 else "the NIC's node"
    irq, irq_note = 1.0, ""
    if core >= 0 and core == scenario.irq_core:
        # The core also runs the NIC queue's interrupt work: the stack gets the rest.
        share = params.irq_core_share
        irq = 1.0 / (1.0 - share.value)
        irq_note = (f"; it also handles the NIC's interrupts: the stack gets "
                    f"{100 * (1 - share.value):.0f} % of it (cost × {irq:.2f}, "
                    f"{share.source})")
    if nodes <= 1:
        return irq, f"pinned to {where} (one NUMA node: no placement effect){irq_note}"
    is_near = node == nic
    factor = (near if is_near else near * (1.0 + delta)) * irq
    return factor, (f"pinned to {where} (NUMA node {node}, NIC on node {nic}: "
                    f"{'near' if is_near else 'far'}) — CPU cost × {factor:.3f} vs unpinned"
                    f"{irq_note}")


def _scaled(ep: Endpoint, factor: float) -> Endpoint:
    if factor == 1.0:
        return ep
    return replace(ep, **{f: getattr(ep, f) * factor for f in COST_FIELDS})


#: Implementations whose packet path is not QUIC's stages (seed 001 §3): the kernel
#: runs TCP, segmentation and ACKs, so there is no user-space UDP/IP or protocol stage
#: to put on a core of its own.
NOT_STAGED = {name: "the kernel runs TCP (no user-space UDP/IP, crypto-per-packet or "
                    "QUIC protocol stage to place)" for name in ("tcp+tls", "tcp")}


def preset_for(scenario: Scenario, impl: str, catalog: PipelineCatalog) -> str:
    """The preset an endpoint runs: the Scenario's, else its build's own (``picoquic@dpdk``)."""
    if scenario.pipeline != NONE:
        return scenario.pipeline
    builtin = catalog.builtin_for(impl)
    return builtin.preset if builtin else NONE


def _pipelined(ep: Endpoint, role: str, impl: str, preset: str, resolved: Resolved,
               params: HostParams, scale: float) -> Endpoint:
    base = impl.split("@")[0]
    if base in NOT_STAGED:
        field = "server" if role == "sender" else "client"
        raise ScenarioError("pipeline", resolved.scenario.pipeline,
                            f"none with {field}={impl}: {NOT_STAGED[base]}")
    catalog = PipelineCatalog.packaged()
    presets = catalog.choices(preset, impl)
    acks = resolved.acks_per_packet
    split = pipe.resplit(pipe.model_stages(ep, acks), params.profile(impl, role))
    builtin = catalog.builtin_for(impl)
    if builtin and builtin.crypto:
        # The build's crypto engine replaces the profiled one (OpenSSL-class).
        engine = params.crypto_engines.get(builtin.crypto)
        if engine is not None:
            split["crypto"] *= engine.value
    chosen = pipe.choose(presets, role, split, params.handoff_ns.value * scale,
                         params.bypass_io_ns.value * scale, params.bypass_udpip_ns.value * scale)
    return pipe.pipelined_endpoint(ep, acks, chosen, split)


def polls(ep: Endpoint) -> bool:
    """Whether the endpoint's I/O runs on a busy-polling core (it never sleeps for packets)."""
    return any(busy and "io" in label.rstrip("*").split("+")
               for label, _share, busy, _queue in ep.pipeline)


def _interplay(resolved: Resolved, params: HostParams) -> Resolved:
    """Busy polling on both ends removes ``poll_interplay`` of the pair's interplay idleness.

    ``Interop.busy`` is the share of time a pair keeps its CPUs busy when neither
    saturates (seed 002 §4.3); the rest is time a side sleeps until the other's
    packets wake it. A busy-polling I/O loop never sleeps, so with both ends polling
    that idleness goes, by ``poll_interplay`` (seed 001 Table 1: picoquic-dpdk's
    busy polling, 2.5× the kernel stack's throughput).
    """
    if not (polls(resolved.sender) and polls(resolved.receiver)):
        return resolved
    phi = params.poll_interplay.value
    if phi <= 0 or resolved.interop_busy >= 1.0:
        return resolved

    def lift(b: float) -> float:
        return min(1.0, b + (1.0 - b) * phi)

    return replace(resolved, interop_busy=lift(resolved.interop_busy),
                   interop_lo=lift(resolved.interop_lo), interop_hi=lift(resolved.interop_hi),
                   interop_source=f"{resolved.interop_source}; busy polling on both ends "
                                  f"removes {phi:.0%} of the idleness "
                                  f"(was {resolved.interop_busy:.2f})")


def apply(resolved: Resolved, registry: Registry) -> Resolved:
    """Pipelines, placement and runtime threads for ``resolved`` (see the module docstring)."""
    s = resolved.scenario
    params = host_params(registry)
    catalog = PipelineCatalog.packaged()
    presets = {"sender": preset_for(s, s.server, catalog),
               "receiver": preset_for(s, s.client, catalog)}
    threads = {"sender": params.runtime(s.server, "sender"),
               "receiver": params.runtime(s.client, "receiver")}
    cpu = registry.cpus.find(s.cpu)
    multi_node = cpu.numa_nodes > 1
    if all(p == NONE for p in presets.values()) and not any(threads.values()) \
            and not multi_node and not (s.pin or s.server_core >= 0 or s.client_core >= 0):
        return resolved
    out: dict[str, Endpoint] = {}
    for role, ep, impl in (("sender", resolved.sender, s.server),
                           ("receiver", resolved.receiver, s.client)):
        model = registry.model(impl, field="server" if role == "sender" else "client")
        scale = registry.cpus.scaling(model.reference_cpu, cpu.name, s.cpu_ghz).factor
        if presets[role] != NONE:
            ep = _pipelined(ep, role, impl, presets[role], resolved, params, scale)
        factor, note = placement(s, cpu, role, params)
        ep = _scaled(ep, factor)
        runtime = threads[role]
        overhead = runtime.overhead_cores(s.streams) if runtime else 0.0
        if note or overhead:
            # Keep what resolve wrote there (kernel TCP's breakdown, sim/tcp.py).
            joined = "; ".join(n for n in (ep.placement_note, note) if n)
            ep = replace(ep, placement_note=joined, overhead_cores=overhead)
        out[role] = ep
    if out["sender"] is resolved.sender and out["receiver"] is resolved.receiver:
        return resolved
    return _interplay(replace(resolved, sender=out["sender"], receiver=out["receiver"]), params)
