"""Closed form for request and handshake workloads (seeds 003/004), vectorised over scenarios.

A request workload is a closed loop: ``N`` requests are in flight (connections
× streams, or one per connection for ``handshakes``); each one, when answered,
is replaced by the next. Every request passes through the same resources —
server CPU, client CPU, the link in each direction, a connection's window —
and waits a fixed time besides (round trips, handshake timers). With the
per-request work of :mod:`quiclab.sim.request_costs`:

- capacity of each resource in requests/s: a CPU with ``p`` request cores
  and ``c`` ns per request serves ``p / c``; the link ``rate / (8 × wire bytes
  per request)``; connections' windows ``C × window rate / (8 × response)``;
- the bottleneck (smallest capacity) is a queueing station with service
  demand ``D = 1 / capacity``; everything else is a delay ``Z`` (round trips,
  serialisation, the other resources' own service of one request,
  ``connection_wait``);
- throughput from Schweitzer's approximate mean-value analysis of that closed
  network (Schweitzer 1979; Lazowska et al., *Quantitative System
  Performance*, 1984, §6.4.2), which has a closed form for one station:
  utilisation ``u`` is the smaller root of ``a·z·u² − (1 + z + a·N)·u + N = 0``
  with ``z = Z/D`` and ``a = (N − 1)/N``; ``X = u / D``. Few requests in
  flight make the round trips bind (``X → N / (D + Z)``), many make the
  bottleneck bind (``X → 1 / D``);
- latency: mean ``N / X`` (Little's law) less the time a connection is held
  without CPU after its request (``connection_wait``); a request waits at the bottleneck
  with probability ``u·a`` (arrival theorem), and then for the requests ahead
  of it, each an exponential service of mean ``D``: an Erlang (Gamma) wait of
  shape = the mean number ahead. Percentiles come from that mixture. CPU
  service of a request is in fact nearly constant, so the tails are
  conservative when few requests queue.

Completion time = connection set-up (the connections' handshakes, served by
the slower end, plus 1.5 RTT) + requests / X. CPU utilisation of each end is
``X × c`` cores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import gammaincinv

from quiclab.sim.analytic.core import RESOURCES
from quiclab.sim.engine import unmodelled_notes
from quiclab.sim.prediction import Prediction
from quiclab.sim.request_costs import RequestCosts, request_costs
from quiclab.sim.resolve import Resolved

#: Resources a request run can be limited by, in the order of ``rates_rps`` columns.
REQUEST_RESOURCES = ("sender_cpu", "receiver_cpu", "link", "flow_control", "concurrency")
#: Utilisation of the bottleneck above which it is named the limit (else the
#: closed loop's round trips — ``concurrency`` or ``handshake`` — are).
SATURATED = 0.9


@dataclass
class RequestOutputs:
    """Per-scenario results (arrays): requests/s, latency (s), utilisations, limit index."""

    requests_per_s: np.ndarray
    capacities_rps: np.ndarray  # (n, len(REQUEST_RESOURCES)); concurrency = N / R0
    limit: list[str]
    utilisation: np.ndarray  # of the bottleneck
    latency_mean_s: np.ndarray
    latency_p50_s: np.ndarray
    latency_p99_s: np.ndarray
    startup_s: np.ndarray
    completion_s: np.ndarray
    server_util: np.ndarray  # cores busy
    client_util: np.ndarray


def schweitzer_utilisation(n: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Bottleneck utilisation of a closed network of one station and one delay.

    ``n`` customers, ``z`` = delay / service demand. Smaller root of
    ``a·z·u² − (1 + z + a·n)·u + n = 0``, ``a = (n − 1)/n`` (see module docstring);
    ``u = 1 / (1 + z)`` for one customer, ``u → 1`` for many.
    """
    n = np.asarray(n, dtype=float)
    z = np.maximum(np.asarray(z, dtype=float), 0.0)
    a = (n - 1.0) / n
    b = 1.0 + z + a * n
    quad = a * z
    disc = np.sqrt(np.maximum(b * b - 4.0 * quad * n, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        root = np.where(quad > 1e-12, (b - disc) / (2.0 * np.maximum(quad, 1e-300)), n / b)
    # Numerically stable form of the smaller root for small a·z: 2n / (b + disc).
    stable = 2.0 * n / (b + disc)
    return np.clip(np.where(quad > 1e-6, root, stable), 0.0, 1.0)


def wait_quantile(q: float, mean_wait: np.ndarray, p_wait: np.ndarray,
                  demand: np.ndarray) -> np.ndarray:
    """Quantile ``q`` of the waiting time: 0 with probability 1 − p_wait, else
    Gamma(shape = mean number ahead, scale = demand) (module docstring)."""
    p = np.clip(p_wait, 1e-12, 1.0)
    cond_mean = mean_wait / p
    shape = np.maximum(cond_mean / np.maximum(demand, 1e-15), 1.0)
    scale = cond_mean / shape
    level = (q - (1.0 - p)) / p
    out = gammaincinv(shape, np.clip(level, 1e-12, 1 - 1e-12)) * scale
    return np.where(level <= 0, 0.0, out)


def evaluate_requests(costs: Sequence[RequestCosts], window_bps: np.ndarray) -> RequestOutputs:
    """Solve the closed loop for every scenario (see the module docstring).

    ``window_bps`` is each scenario's per-connection window bound (goodput
    bit/s: congestion window and flow control over the RTT, from the bulk
    model), so that a few large responses on few connections are window-bound.
    """
    def col(name: str) -> np.ndarray:
        return np.array([getattr(c, name) for c in costs], dtype=float)

    n = np.maximum(col("concurrency"), 1.0)
    s_ns, c_ns = col("server_ns"), col("client_ns")
    s_cores, c_cores = col("server_cores"), col("client_cores")
    rtt, link = col("rtt_s"), col("link_bps")
    down, up = col("wire_down_bytes"), col("wire_up_bytes")
    resp_bytes = col("response_stream_bytes")
    conns = col("connections")
    cap_s = s_cores / (s_ns * 1e-9)
    cap_c = c_cores / (c_ns * 1e-9)
    cap_link = link / (8.0 * np.maximum(down, up))
    cap_window = conns * window_bps / (8.0 * resp_bytes)
    # Zero-load time of one request: its own CPU at both ends (on one core each),
    # its bytes on the wire, the round trips and the connections' timers.
    handshake = np.array([c.handshake_rtts for c in costs])
    per_conn = col("requests_per_connection")
    wait = col("connection_wait_s") / per_conn
    wire = (down + up) * 8.0 / link
    window_time = resp_bytes * 8.0 / np.maximum(window_bps, 1.0)
    r0 = (s_ns + c_ns) * 1e-9 + wire + (1.0 + handshake) * rtt + wait + np.where(
        np.isfinite(window_time), window_time, 0.0)
    caps = np.stack([cap_s, cap_c, cap_link, cap_window], axis=1)
    which = np.argmin(caps, axis=1)
    demand = 1.0 / caps[np.arange(len(costs)), which]
    own = np.choose(which, [s_ns * 1e-9, c_ns * 1e-9, down * 8.0 / link,
                            np.where(np.isfinite(window_time), window_time, 0.0)])
    z = np.maximum(r0 - own, 0.0)
    u = schweitzer_utilisation(n, z / demand)
    x = u / demand
    # A request's latency excludes the time its connection is held afterwards
    # without CPU (connection_wait): that occupies the slot, not the request.
    latency = n / x - wait
    fixed = z + own - wait
    mean_wait = np.maximum(latency - fixed, 0.0)
    p_wait = np.clip(u * (n - 1.0) / n, 0.0, 1.0)
    p50 = fixed + wait_quantile(0.5, mean_wait, p_wait, demand)
    p99 = fixed + wait_quantile(0.99, mean_wait, p_wait, demand)
    capacities = np.column_stack([caps, n / r0])
    limits = []
    for i in range(len(costs)):
        if u[i] >= SATURATED:
            limits.append(REQUEST_RESOURCES[int(which[i])])
        elif wait[i] > 0.5 * z[i]:
            limits.append("handshake")  # timers at the ends hold connections
        else:
            limits.append("concurrency")
    total = col("requests")
    setup = np.where(per_conn > 1.0, 1.5 * rtt + conns * np.maximum(
        col("server_conn_ns") / s_cores, col("client_conn_ns") / c_cores) * 1e-9, 0.0)
    startup = setup + fixed
    completion = startup + total / x
    return RequestOutputs(
        requests_per_s=x, capacities_rps=capacities, limit=limits, utilisation=u,
        latency_mean_s=latency, latency_p50_s=p50, latency_p99_s=np.maximum(p99, p50),
        startup_s=startup, completion_s=completion,
        server_util=np.minimum(x * s_ns * 1e-9, s_cores),
        client_util=np.minimum(x * c_ns * 1e-9, c_cores))


def predict_requests(resolved: Sequence[Resolved], rates_bps: np.ndarray, engine: str,
                     version: str) -> list[Prediction]:
    """Predictions for resolved request scenarios; ``rates_bps`` are the bulk model's
    resource rates for the same scenarios (``core.RESOURCES`` columns: the cwnd and
    flow-control rates bound each connection)."""
    costs = [request_costs(r) for r in resolved]
    cc, fc = RESOURCES.index("cwnd"), RESOURCES.index("flow_control")
    window = np.minimum(rates_bps[:, cc], rates_bps[:, fc])
    out = evaluate_requests(costs, window)
    preds = []
    for i, (r, c) in enumerate(zip(resolved, costs, strict=True)):
        s = r.scenario
        x = float(out.requests_per_s[i])
        bits = s.request_bytes * 8.0
        goodput = x * bits / 1e6
        limit = out.limit[i]
        lo, hi = goodput, goodput
        if limit in ("sender_cpu", "receiver_cpu"):
            side = 0 if limit == "sender_cpu" else 1
            lo, hi = goodput / c.cost_hi[side], goodput / c.cost_lo[side]
        total = float(c.requests)
        duration = float(out.completion_s[i])
        rates = {name: float(out.capacities_rps[i, k]) * bits / 1e6
                 for k, name in enumerate(REQUEST_RESOURCES)}
        notes = [f"{s.workload}: {c.concurrency} in flight ({c.connections} connections), "
                 f"server {c.server_ns / 1e3:.1f} µs and client {c.client_ns / 1e3:.1f} µs "
                 "CPU per request",
                 f"closed loop: bottleneck utilisation {out.utilisation[i]:.2f}; "
                 f"start-up {out.startup_s[i] * 1e3:.2f} ms",
                 "pair interplay (busy fraction) not applied to request workloads",
                 *c.notes]
        if s.loss_pct > 0:
            notes.append("path loss is not modelled for request workloads (no retransmissions)")
        notes += unmodelled_notes(s, engine, reordering=False)
        preds.append(Prediction(
            scenario=s, engine=engine, engine_version=version, goodput_mbps=goodput,
            goodput_lo_mbps=min(lo, goodput), goodput_hi_mbps=max(hi, goodput), limit=limit,
            duration_s=duration, rates_mbps=rates,
            server_cpu_util=float(out.server_util[i]),
            client_cpu_util=float(out.client_util[i]),
            server_cpu_s=float(out.server_util[i]) * duration,
            client_cpu_s=float(out.client_util[i]) * duration,
            server_packets_sent=total * c.server_packets_sent,
            server_packets_received=total * c.client_packets_sent,
            client_packets_sent=total * c.client_packets_sent,
            client_packets_received=total * c.server_packets_sent,
            acks=total * c.acks, losses=0.0, retransmissions=0.0, rcvbuf_drops=0.0,
            server_syscalls=total * c.server_calls, client_syscalls=total * c.client_calls,
            requests_per_s=x, completion_s=duration,
            latency_p50_ms=float(out.latency_p50_s[i]) * 1e3,
            latency_p99_ms=float(out.latency_p99_s[i]) * 1e3,
            model_versions=r.model_versions, cpu_rule=r.describe_cpu(), notes=tuple(notes)))
    return preds
