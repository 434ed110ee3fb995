"""Request and handshake workloads in the DES (seeds 003/004): many connections and streams.

The bulk DES follows every packet of one connection; a request workload is
thousands of short exchanges over many connections, so this model follows
every *request* instead, with the same per-request work as the analytic
engine (:mod:`quiclab.sim.request_costs`) and its own dynamics:

- stations: the server CPU and the client CPU (``request_cores`` cores each,
  a fractional count as ``⌈c⌉`` cores at ``c/⌈c⌉`` speed; a job takes the core
  that frees first), and the link in each direction (serialisation at the link
  rate, FIFO, then one-way propagation ``rtt/2``). A station is its cores'
  ``free_at`` times (busy-until servers, as in the bulk DES), so a job costs
  one SimPy timeout;
- ``workload = requests``: each connection opens with a handshake (client
  CPU, its flight up, server CPU, the server's flight down, the client's
  Finished), then runs ``streams`` stream processes; each issues requests
  back to back until the run has issued ``requests``. A request: client CPU
  (send), the request's bytes up, server CPU, the response down, client CPU
  (receive). Responses above ``CHUNK_BYTES`` are served in chunks, so the
  server CPU, the link and the client overlap as in a packet pipeline, and
  streams interleave on the server;
- ``workload = handshakes``: each of ``connections`` processes opens a new
  connection per request (handshake, the request, ``connection_wait`` without
  CPU, then the next connection).

Service times are constant (the CPU work of a request hardly varies); start
times are spread over the first round trip from the run's RNG (``seed``,
``run``). Not modelled here: loss, congestion and flow-control windows (the
analytic engine bounds each connection by them), ACK timing (ACK work is in
the per-request CPU), pair interplay.

A run of at most ``max_requests`` requests is simulated whole: requests/s is
requests / completion time (start-up included), CPU follows from it, latency
percentiles come from the second half of the requests. A longer run is
simulated as a prefix of ``max_requests`` requests: requests/s, CPU and latency
percentiles come from the second half of the prefix, and the completion time
of the rest is extrapolated at that rate (the Prediction says so).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from quiclab.sim.analytic.requests import REQUEST_RESOURCES, evaluate_requests
from quiclab.sim.engine import unmodelled_notes
from quiclab.sim.prediction import Prediction
from quiclab.sim.request_costs import (
    HANDSHAKE_CLIENT_TX,
    HANDSHAKE_SERVER_TX,
    WIRE_OVERHEAD_BYTES,
    RequestCosts,
    request_costs,
)
from quiclab.sim.resolve import Resolved

#: Responses larger than this are served in chunks of it (pipelined CPU and link).
CHUNK_BYTES = 262_144
#: At most this many chunks a response: larger responses get larger chunks (their
#: pipelining is still resolved to 1/64 of a response), so that one event per
#: chunk stays affordable (a 1 TiB response would be 4 M chunks of 256 KiB).
MAX_CHUNKS = 64
#: Requests simulated at most before extrapolating (see the module docstring).
DEFAULT_MAX_REQUESTS = 20_000
#: A resource busy at least this share of the time is the limit (TRANSPORT.md "Outputs").
BUSY_LIMIT = 0.95


class Station:
    """``⌈cores⌉`` busy-until servers at ``cores/⌈cores⌉`` speed (times in s)."""

    __slots__ = ("busy_s", "free_at", "slowdown")

    def __init__(self, cores: float):
        if not cores > 0:
            raise ValueError(f'"cores" must be > 0, got {cores!r}')
        n = max(1, math.ceil(cores - 1e-9))
        self.slowdown = n / cores
        self.free_at = [0.0] * n
        self.busy_s = 0.0  # work done, in seconds of one full-speed core

    def finish(self, t_s: float, work_s: float) -> float:
        """End time of a job of ``work_s`` that arrives at ``t_s`` (the core free first)."""
        i = min(range(len(self.free_at)), key=self.free_at.__getitem__)
        start = max(t_s, self.free_at[i])
        end = start + work_s * self.slowdown
        self.free_at[i] = end
        self.busy_s += work_s
        return end


class Link:
    """One direction of the path: FIFO serialisation at ``bps``, then ``delay_s``."""

    __slots__ = ("bps", "busy_s", "delay_s", "free_at")

    def __init__(self, bps: float, delay_s: float):
        self.bps, self.delay_s = bps, delay_s
        self.free_at = 0.0
        self.busy_s = 0.0

    def arrival(self, t_s: float, wire_bytes: float) -> float:
        start = max(t_s, self.free_at)
        service = wire_bytes * 8.0 / self.bps
        self.free_at = start + service
        self.busy_s += service
        return self.free_at + self.delay_s


class RequestRun:
    """One simulated request or handshake run (see the module docstring)."""

    def __init__(self, resolved: Resolved, max_requests: int = DEFAULT_MAX_REQUESTS):
        self.r = resolved
        self.c: RequestCosts = request_costs(resolved)
        s = resolved.scenario
        self.handshakes = s.workload == "handshakes"
        self.total = self.c.requests
        #: Requests simulated: all of them, or a prefix of max_requests.
        self.target = max(1, min(self.total, max_requests))
        self.chunks = max(1, min(MAX_CHUNKS, math.ceil(self.c.response_stream_bytes
                                                       / CHUNK_BYTES)))
        seed = np.random.SeedSequence([s.seed, s.run, 10])
        self.rng = np.random.default_rng(seed)

    # ------------------------------------------------------------------ processes
    def _wait(self, end_s: float) -> Any:
        return self.env.timeout(max(end_s - self.env.now, 0.0))

    def _handshake(self) -> Generator[Any, Any, None]:
        c = self.c
        yield self._wait(self.client.finish(self.env.now, 0.5 * c.client_conn_ns * 1e-9))
        up = sum(b + WIRE_OVERHEAD_BYTES for b in HANDSHAKE_CLIENT_TX[:1])
        yield self._wait(self.up.arrival(self.env.now, up))
        yield self._wait(self.server.finish(self.env.now, c.server_conn_ns * 1e-9))
        down = sum(b + WIRE_OVERHEAD_BYTES for b in HANDSHAKE_SERVER_TX)
        yield self._wait(self.down.arrival(self.env.now, down))
        yield self._wait(self.client.finish(self.env.now, 0.5 * c.client_conn_ns * 1e-9))
        rest = sum(b + WIRE_OVERHEAD_BYTES for b in HANDSHAKE_CLIENT_TX[1:])
        self.up.arrival(self.env.now, rest)  # Finished and, at the end, CONNECTION_CLOSE

    def _request(self, started: float | None = None) -> Generator[Any, Any, None]:
        """One request; its latency counts from ``started`` (default: now)."""
        c, env = self.c, self.env
        started = env.now if started is None else started
        yield self._wait(self.client.finish(env.now, c.client_send_ns * 1e-9))
        yield self._wait(self.up.arrival(env.now, c.wire_up_bytes))
        chunks = self.chunks
        server_s = c.server_request_ns * 1e-9 / chunks
        client_s = (c.client_request_ns - c.client_send_ns) * 1e-9 / chunks
        wire = c.wire_down_bytes / chunks
        last = env.now
        for _ in range(chunks):
            yield self._wait(self.server.finish(env.now, server_s))
            # The chunk goes down and is received while the server prepares the next.
            last = self.client.finish(self.down.arrival(env.now, wire), client_s)
        yield self._wait(last)
        self._done(started)

    def _done(self, started: float) -> None:
        self.completed += 1
        if self.completed == self.target // 2:
            self.mark = (self.env.now, self.server.busy_s, self.client.busy_s,
                         self.down.busy_s, self.up.busy_s)
        if self.completed > self.target // 2:
            self.latencies.append(self.env.now - started)
        if self.completed == min(self.total, self.target):
            self.total_done_at = self.env.now
        if self.completed >= self.target and not self.finished.triggered:
            self.finished.succeed()

    def _take(self) -> bool:
        """Claim the next request of the run (False when all are issued)."""
        if self.issued >= self.target:
            return False
        self.issued += 1
        return True

    def _stream(self) -> Generator[Any, Any, None]:
        while self._take():
            yield from self._request()

    def _connection(self, offset_s: float) -> Generator[Any, Any, None]:
        yield self.env.timeout(offset_s)
        if self.handshakes:
            while self._take():
                # A new connection per request: its latency includes the handshake.
                started = self.env.now
                yield from self._handshake()
                yield from self._request(started)
                if self.c.connection_wait_s > 0:
                    yield self.env.timeout(self.c.connection_wait_s)
            return
        yield from self._handshake()
        if self.c.connection_wait_s > 0:
            yield self.env.timeout(self.c.connection_wait_s)
        streams = self.c.concurrency // self.c.connections
        for _ in range(streams):
            self.env.process(self._stream())

    # ------------------------------------------------------------------ run
    def run(self) -> dict[str, Any]:
        c = self.c
        self.env = env = simpy.Environment()
        self.server = Station(c.server_cores)
        self.client = Station(c.client_cores)
        self.down = Link(c.link_bps, c.rtt_s / 2)
        self.up = Link(c.link_bps, c.rtt_s / 2)
        self.completed = self.issued = 0
        self.latencies: list[float] = []
        self.mark = (0.0, 0.0, 0.0, 0.0, 0.0)
        self.total_done_at = math.nan
        self.finished = env.event()
        for offset in self.rng.uniform(0.0, max(c.rtt_s, 1e-6), size=c.connections):
            env.process(self._connection(float(offset)))
        env.run(until=self.finished)
        t0, s0, c0, d0, u0 = self.mark
        if self.total <= self.target:
            # The whole run: its own rate, start-up included.
            completion = self.total_done_at
            rate = self.total / max(completion, 1e-12)
        else:
            rate = (self.completed - self.target // 2) / max(env.now - t0, 1e-12)
            completion = env.now + (self.total - self.completed) / rate
        lat = np.array(self.latencies) if self.latencies else np.array([math.nan])
        # Busy shares in steady state: work per request × completion rate (the
        # stations count a job's work when it is queued, so differences of their
        # counters over a window would include work still waiting).
        del s0, c0, d0, u0
        return {
            "requests_per_s": rate, "completion_s": completion,
            "latency_p50_s": float(np.percentile(lat, 50)),
            "latency_p99_s": float(np.percentile(lat, 99)),
            "server_util": min(rate * c.server_ns * 1e-9, c.server_cores),
            "client_util": min(rate * c.client_ns * 1e-9, c.client_cores),
            "down_util": min(rate * c.wire_down_bytes * 8.0 / c.link_bps, 1.0),
            "up_util": min(rate * c.wire_up_bytes * 8.0 / c.link_bps, 1.0),
            "simulated": self.completed, "events_s": env.now,
        }


def predict_requests_des(resolved: Resolved, engine: str, version: str,
                         max_requests: int = DEFAULT_MAX_REQUESTS) -> Prediction:
    """Simulate one request or handshake scenario and return its Prediction."""
    sim = RequestRun(resolved, max_requests)
    out = sim.run()
    c, s = sim.c, resolved.scenario
    x = out["requests_per_s"]
    bits = s.request_bytes * 8.0
    # The analytic capacities of every resource, beside the simulated result.
    window = np.array([math.inf])
    analytic = evaluate_requests([c], window)
    rates = {name: float(analytic.capacities_rps[0, k]) * bits / 1e6
             for k, name in enumerate(REQUEST_RESOURCES)}
    if out["server_util"] >= BUSY_LIMIT * c.server_cores:
        limit = "sender_cpu"
    elif out["client_util"] >= BUSY_LIMIT * c.client_cores:
        limit = "receiver_cpu"
    elif max(out["down_util"], out["up_util"]) >= BUSY_LIMIT:
        limit = "link"
    elif c.connection_wait_s / c.requests_per_connection > c.rtt_s:
        limit = "handshake"
    else:
        limit = "concurrency"
    duration = out["completion_s"]
    total = float(c.requests)
    whole = c.requests <= sim.target
    notes = [f"{s.workload}: {c.concurrency} in flight ({c.connections} connections); "
             + (f"all {out['simulated']} requests simulated, rate = requests / completion, "
                "latency from the second half" if whole else
                f"{out['simulated']} requests simulated, rate and latency from the second half"),
             "request DES: constant service times; no loss, windows or pair interplay",
             *c.notes]
    if not whole:
        notes.append(f"completion extrapolated from {sim.target} of {c.requests} requests")
    notes += unmodelled_notes(s, engine, reordering=False)
    if sim.chunks == MAX_CHUNKS and c.response_stream_bytes > MAX_CHUNKS * CHUNK_BYTES:
        notes.append(f"responses served in {MAX_CHUNKS} chunks of "
                     f"{c.response_stream_bytes / MAX_CHUNKS:,.0f} B")
    return Prediction(
        scenario=s, engine=engine, engine_version=version, goodput_mbps=x * bits / 1e6,
        limit=limit, duration_s=duration, rates_mbps=rates,
        server_cpu_util=out["server_util"], client_cpu_util=out["client_util"],
        server_cpu_s=out["server_util"] * duration, client_cpu_s=out["client_util"] * duration,
        server_packets_sent=total * c.server_packets_sent,
        server_packets_received=total * c.client_packets_sent,
        client_packets_sent=total * c.client_packets_sent,
        client_packets_received=total * c.server_packets_sent, acks=total * c.acks,
        losses=0.0, retransmissions=0.0, rcvbuf_drops=0.0,
        server_syscalls=total * c.server_calls, client_syscalls=total * c.client_calls,
        requests_per_s=x, completion_s=duration,
        latency_p50_ms=out["latency_p50_s"] * 1e3, latency_p99_ms=out["latency_p99_s"] * 1e3,
        model_versions=resolved.model_versions, cpu_rule=resolved.describe_cpu(),
        notes=tuple(notes))
