"""The analytic engine: a closed-form, vectorised bottleneck model.

``AnalyticEngine(registry).predict(scenario)`` answers in microseconds;
``predict_batch`` evaluates a whole sweep in one numpy call (scenarios that
share implementations, CPU, cipher, app and packet size share one resolve
step). ``bounds(resolved)`` gives every resource's rate, which the packet-level
engines report beside their own result.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from quiclab.models.costmodel import RENO_FRIENDLY_MODES
from quiclab.models.registry import Registry
from quiclab.sim.analytic.core import (
    CC_CODES,
    LIMIT_NAMES,
    RESOURCES,
    Inputs,
    Outputs,
    evaluate,
    rcvbuf_charge_bytes,
)
from quiclab.sim.analytic.pipeline import annotate
from quiclab.sim.bands import band_columns, with_band
from quiclab.sim.engine import unmodelled_notes, versioned
from quiclab.sim.prediction import Prediction
from quiclab.sim.resolve import Resolved, check_rcvbuf, path_for, resolve
from quiclab.sim.scenario import Scenario

ENGINE_VERSION = versioned("analytic-1.0")

__all__ = ["ENGINE_VERSION", "AnalyticEngine", "bounds", "inputs_from_resolved"]


def _host_key(s: Scenario) -> tuple[object, ...]:
    # connections: the request cores an endpoint uses depend on them (sim/request_costs.py).
    # Kernel TCP's counts also follow its offloads, buffers, records and, where the
    # sender's skbs or a NIC's GRO aggregates depend on the rate, the path (sim/tcp.py):
    # those fields are in the key (at their defaults they change nothing for QUIC).
    return (s.server, s.client, s.cpu, s.cpu_ghz, s.cipher, s.app, s.mtu_bytes, s.gso, s.gro,
            s.udp_payload_bytes, s.cc, s.connections, *_layout_key(s), s.tso, s.lro,
            s.csum_offload, s.tls_record_bytes, s.tcp_rmem_bytes, s.tcp_wmem_bytes)


def _layout_key(s: Scenario) -> tuple[object, ...]:
    # Pipeline, placement and runtime threads (sim/cores.py); the link
    # rate picks the NIC (and its NUMA node) only when a side is pinned.
    pinned = s.pin or s.server_core >= 0 or s.client_core >= 0
    return (s.pipeline, s.pin, s.server_core, s.client_core, s.streams,
            s.link_gbps if pinned else None)


def inputs_from_resolved(items: Sequence[Resolved]) -> Inputs:
    """Stack resolved scenarios into the engine's array inputs."""

    def col(fn: object) -> np.ndarray:
        return np.fromiter((fn(r) for r in items), dtype=np.float64, count=len(items))  # type: ignore[operator]

    return Inputs(
        payload_bytes=col(lambda r: r.sender.stream_bytes),
        skb_truesize_bytes=col(lambda r: rcvbuf_charge_bytes(r.sender.udp_payload_bytes,
                                                              r.sender.segments_per_call,
                                                              r.receiver.segments_per_call)),
        wire_bytes=col(lambda r: r.path.wire_bytes(r.sender.udp_payload_bytes)),
        s_ns_packet=col(lambda r: r.sender.ns_per_data_packet),
        s_ns_call=col(lambda r: r.sender.ns_per_call),
        s_segments=col(lambda r: r.sender.segments_per_call),
        s_ns_ack=col(lambda r: r.sender.ns_per_ack),
        s_cores=col(lambda r: r.sender.cores),
        r_ns_packet=col(lambda r: r.receiver.ns_per_data_packet),
        r_ns_call=col(lambda r: r.receiver.ns_per_call),
        r_segments=col(lambda r: r.receiver.segments_per_call),
        r_ns_ack=col(lambda r: r.receiver.ns_per_ack),
        r_cores=col(lambda r: r.receiver.cores),
        ack_every=col(lambda r: r.receiver.ack_every_packets),
        immediate_ack=col(lambda r: float(r.receiver.immediate_ack_on_gap)),
        stall_rate_hz=col(lambda r: r.receiver.rx_stall_rate_hz),
        stall_min_s=col(lambda r: r.receiver.rx_stall_min_s),
        stall_alpha=col(lambda r: r.receiver.rx_stall_alpha),
        # The receiver's own wait (Behaviour.ack_timer_ms, else its max_ack_delay).
        max_ack_delay_s=col(lambda r: r.receiver.ack_timer_s),
        fc_window_bytes=col(lambda r: r.receiver.fc_window_bytes),
        busy=col(lambda r: r.interop_busy),
        link_bps=col(lambda r: r.path.link_bps),
        rtt_s=col(lambda r: r.path.rtt_s),
        loss_prob=col(lambda r: r.path.loss_prob),
        queue_bytes=col(lambda r: r.path.queue_bytes),
        rcvbuf_bytes=col(lambda r: r.path.rcvbuf_bytes),
        cc=col(lambda r: CC_CODES[r.cc]),
        transfer_bytes=col(lambda r: r.scenario.transfer_bytes),
        pacing=col(lambda r: float(r.sender.pacing)),
        ack_fixed=col(lambda r: float(r.receiver.ack_threshold_fixed)),
        ack_floor=col(lambda r: r.receiver.ack_floor_packets),
        time_friendly=col(lambda r: float(
            RENO_FRIENDLY_MODES.index(r.sender.cubic_reno_friendly))),
        reno_beta=col(lambda r: r.sender.reno_beta),
    )


def bounds(resolved: Resolved) -> dict[str, float]:
    """Every resource's goodput bound (Mbit/s) for one resolved scenario."""
    out = evaluate(inputs_from_resolved([resolved]))
    return {name: float(out.rates_bps[0, i]) / 1e6 for i, name in enumerate(RESOURCES)}


#: RFC 9002 §6.1.2's kGranularity (s) and kTimeThreshold, as the DES runs them.
GRANULARITY_S = 0.001
TIME_THRESHOLD = 9.0 / 8.0
#: Loss-limited windows (packets) below which recovery, not the window's
#: response, sets the pace: fewer than three packets after a loss cannot reach
#: the packet threshold, and at LAN round trips a few more only reach it slower
#: than the 1 ms time threshold would (measured against the DES, 2026-11-27:
#: lsquic at base RTT, 5 % loss 940 vs 435 Mbit/s, 10 % 603 vs 71; at +10 ms
#: within 16 % up to 10 % loss).
SMALL_WINDOW_PACKETS = 3.0
SMALL_WINDOW_LAN_PACKETS = 8.0


def recovery_notes(limit: str, cwnd_bps: float, rtt_s: float, payload: float) -> list[str]:
    """A note when the loss-limited window is so small that RFC 9002's recovery
    waits (the time threshold's 1 ms floor, the PTO), which this closed form
    leaves out, would decide the goodput."""
    if limit not in ("cwnd", "rcvbuf") or not 0 < cwnd_bps < float("inf") or rtt_s <= 0:
        return []
    window = cwnd_bps * rtt_s / (payload * 8.0)
    lan = TIME_THRESHOLD * rtt_s < GRANULARITY_S
    if window >= SMALL_WINDOW_PACKETS and not (lan and window < SMALL_WINDOW_LAN_PACKETS):
        return []
    return [f"loss recovery: a loss-limited window of {window:.1f} packets at "
            f"{rtt_s * 1e6:.0f} µs RTT, where RFC 9002's time threshold (at least 1 ms) and "
            "PTO decide how long each loss costs; this engine's loss response leaves them "
            "out and can be far above the DES, which simulates them"]


class AnalyticEngine:
    """Closed-form bottleneck engine (see :mod:`quiclab.sim.analytic.core`)."""

    name = "analytic"
    version = ENGINE_VERSION

    def __init__(self, registry: Registry, backend: str = "auto"):
        """``backend``: the core's backend, "auto", "numpy" or "compiled"
        (:func:`quiclab.sim.analytic.core.backend_for`)."""
        if backend not in ("auto", "numpy", "compiled"):
            raise ValueError(f"backend={backend!r}: one of auto, numpy, compiled")
        self.registry = registry
        self.backend = backend
        self._tcp_names: dict[str, bool] = {}

    def _tcp(self, s: Scenario) -> bool:
        """Whether ``s``'s server is a kernel TCP model (its resolution follows the path)."""
        name = s.server.split("@")[0]
        if name not in self._tcp_names:
            try:
                self._tcp_names[name] = self.registry.model(name).tcp is not None
            except Exception:  # an unknown name: resolve() refuses it with its own line
                self._tcp_names[name] = False
        return self._tcp_names[name]

    def resolve_many(self, scenarios: Sequence[Scenario]) -> list[Resolved]:
        """Resolve scenarios, sharing the host part among those that agree on it."""
        cache: dict[tuple[object, ...], Resolved] = {}
        out = []
        for s in scenarios:
            key = _host_key(s)
            if self._tcp(s):
                key += (s.link_gbps, s.rtt_ms, s.base_rtt_us, s.loss_pct, s.queue_bytes,
                        s.queue_bdp)
            base = cache.get(key)
            if base is None:
                base = cache[key] = resolve(s, self.registry)
                out.append(base)
                continue
            # Same hosts: only the path and the scenario itself differ.
            check_rcvbuf(s, base.sender.udp_payload_bytes)
            out.append(replace(base, scenario=s, path=path_for(s)))
        return out

    def evaluate(self, scenarios: Sequence[Scenario]) -> tuple[list[Resolved], Outputs]:
        resolved = self.resolve_many(scenarios)
        return resolved, evaluate(inputs_from_resolved(resolved), self.backend)

    def predict(self, scenario: Scenario) -> Prediction:
        return self.predict_batch([scenario])[0]

    def predict_batch(self, scenarios: Sequence[Scenario]) -> list[Prediction]:
        if not scenarios:
            return []
        resolved, out = self.evaluate(scenarios)
        bulk = [i for i, r in enumerate(resolved) if r.scenario.workload == "bulk"]
        preds: list[Prediction | None] = [None] * len(resolved)
        if bulk:
            idx = np.asarray(bulk)
            limits = [LIMIT_NAMES[int(k)] for k in out.limit[idx]]
            params = np.array([self._param_interval(resolved[i], out, i, limits[k])
                               for k, i in enumerate(bulk)]).reshape(len(bulk), 2)
            goodput = out.goodput_bps[idx] / 1e6
            cols = band_columns(self.registry, [resolved[i].scenario for i in bulk], limits,
                                self.name, goodput, params[:, 0], params[:, 1],
                                np.array([resolved[i].scenario.link_gbps * 1e3 for i in bulk]))
            lo, hi = cols.lo_mbps.tolist(), cols.hi_mbps.tolist()
            for k, i in enumerate(bulk):
                preds[i] = self._prediction(resolved[i], out, i, limits[k], (
                    lo[k], hi[k], cols.level, float(params[k, 0]), float(params[k, 1]),
                    cols.extrapolated[k], cols.source[k]))
        requests = [i for i, r in enumerate(resolved) if r.scenario.workload != "bulk"]
        if requests:
            # Request and handshake workloads: the closed form of sim/analytic/requests.py,
            # with the bulk model's window rates bounding each connection.
            from quiclab.sim.analytic.requests import predict_requests

            answered = predict_requests([resolved[i] for i in requests],
                                        out.rates_bps[requests], self.name, self.version)
            for i, pred in zip(requests, answered, strict=True):
                preds[i] = with_band(pred, self.registry)
        return [p for p in preds if p is not None]

    @staticmethod
    def _param_interval(r: Resolved, out: Outputs, i: int, limit: str) -> tuple[float, float]:
        """The interval of the fitted parameters alone (Mbit/s): the cost parameters'
        interval on the CPU-bound side, the pair-interplay interval where that binds;
        other limits are exact bounds."""
        goodput = float(out.goodput_bps[i])
        lo, hi = goodput, goodput
        if limit in ("sender_cpu", "receiver_cpu", "interop"):
            ep = r.sender if limit == "sender_cpu" else r.receiver
            if limit == "interop":
                ep = r.sender if out.rates_bps[i, 0] <= out.rates_bps[i, 1] else r.receiver
            lo = goodput / ep.cost_hi
            hi = goodput / ep.cost_lo
            if limit == "interop" and r.interop_busy > 0:
                lo *= r.interop_lo / r.interop_busy
                hi *= r.interop_hi / r.interop_busy
        hi = min(hi, float(out.rates_bps[i, 3]))
        return min(lo, goodput) / 1e6, max(hi, goodput) / 1e6

    def _prediction(self, r: Resolved, out: Outputs, i: int, limit: str,
                    band: tuple[float, float, float, float, float, str, str]) -> Prediction:
        s = r.scenario
        goodput = float(out.goodput_bps[i])
        lo, hi, level, p_lo, p_hi, extrapolated, source = band
        payload = r.sender.stream_bytes
        # Whole packets: one byte still takes one packet (not 0.00076 of one).
        goodput_packets = float(math.ceil(s.transfer_bytes / payload))
        loss = float(out.loss_prob[i])
        sent = goodput_packets / max(1.0 - loss, 1e-9)
        acks = goodput_packets * float(out.acks_per_packet[i])
        drops = sent * float(out.rcvbuf_drop_prob[i])
        duration = float(out.duration_s[i])
        rates = {name: float(out.rates_bps[i, k]) / 1e6 for k, name in enumerate(RESOURCES)}
        notes = [f"pair interplay: busy {r.interop_busy:.2f} ({r.interop_source})"]
        if s.cc == "bbr":
            notes.append("bbr: modelled as loss-insensitive below 20 % loss")
        notes += unmodelled_notes(s, self.name, reordering=False)
        notes += recovery_notes(limit, float(out.rates_bps[i, 4]), float(out.rtt_eff_s[i]),
                                payload)
        if r.sender.recovery == "tcp" and s.loss_pct > 0:
            notes.append("kernel TCP under loss: CUBIC's average window (RFC 9438 §5.1, its "
                         "Reno-friendly region) over the loss rate; SACK, RACK-TLP and the "
                         "retransmission timeout are the DES's, not this closed form's")
        cycle = few_loss_cycles(r, sent, duration) if limit in ("rcvbuf", "cwnd") else None
        return annotate(Prediction(
            scenario=s,
            engine=self.name,
            engine_version=self.version,
            goodput_mbps=goodput / 1e6,
            goodput_lo_mbps=lo,
            goodput_hi_mbps=hi,
            interval_level=level,
            param_lo_mbps=p_lo,
            param_hi_mbps=p_hi,
            extrapolated=extrapolated,
            interval_source=source,
            limit=limit,
            duration_s=duration,
            rates_mbps=rates,
            server_cpu_util=float(out.sender_util[i]),
            client_cpu_util=float(out.receiver_util[i]),
            server_cpu_s=float(out.sender_util[i]) * duration,
            client_cpu_s=float(out.receiver_util[i]) * duration,
            server_packets_sent=sent,
            server_packets_received=acks,
            client_packets_sent=acks,
            client_packets_received=sent - drops,
            acks=acks,
            losses=sent * loss,
            retransmissions=sent - goodput_packets,
            rcvbuf_drops=drops,
            server_syscalls=sent / r.sender.segments_per_call + acks,
            client_syscalls=(sent - drops) / r.receiver.segments_per_call + acks,
            model_versions=r.model_versions,
            cpu_rule=r.describe_cpu(),
            notes=tuple(notes),
            engine_specific=(cycle,) if cycle else (),
        ), r)


#: Fewer loss events than this over a transfer are not a steady state (the packet
#: engines' prefix asks for as many in its measurement window).
FEW_LOSS_EVENTS = 20


def few_loss_cycles(r: Resolved, sent: float, duration_s: float) -> str | None:
    """The ``average-loss-cycle`` mechanism (experiments/agreement.py), or None: this
    engine's window is the mean of a loss cycle (Mathis; CUBIC's cycle, RFC 9438), which
    a transfer with only a handful of loss events never reaches — the packet engines
    simulate those few events (and the loss-free rate between them) instead."""
    from quiclab.sim.analytic.core import rcvbuf_charge_bytes, stall_event_rate

    snd, rcv = r.sender, r.receiver
    charge = rcvbuf_charge_bytes(snd.udp_payload_bytes, snd.segments_per_call,
                                 rcv.segments_per_call)
    arrival = sent / max(duration_s, 1e-9) * charge
    stalls = float(stall_event_rate(np.asarray([arrival]), np.asarray([r.path.rcvbuf_bytes]),
                                    np.asarray([rcv.rx_stall_rate_hz]),
                                    np.asarray([rcv.rx_stall_min_s]),
                                    np.asarray([rcv.rx_stall_alpha]))[0]) * duration_s
    expected = r.path.loss_prob * sent + stalls
    if expected <= 0 or expected >= FEW_LOSS_EVENTS:
        return None
    return (f"average-loss-cycle: the rate is the mean of a loss cycle, but this transfer "
            f"expects {expected:.3g} loss events in {duration_s:.3g} s (< {FEW_LOSS_EVENTS}: "
            f"{stalls:.3g} receive-buffer overflows, {r.path.loss_prob * sent:.3g} path "
            "losses); the DES and ns-3 simulate those few events instead")
