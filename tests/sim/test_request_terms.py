"""Request-workload terms of a cost model, from the model file to requests/s, by hand.

``request_cores`` and ``request_cores_half`` say how many cores request work
spreads over with C connections (``1 + (cores − 1) · C / (C + half)``, a
saturating curve: half of the extra cores in use at C = half);
``connection_wait_us`` is the time a connection is held at an end without CPU
(timers, deferred work), in microseconds. The numbers below are worked out
by hand from those definitions (models/costmodel.py, RoleCosts).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from quiclab.models.costmodel import Param, RoleCosts
from quiclab.models.testing import synthetic_model, synthetic_registry
from quiclab.sim.analytic import AnalyticEngine
from quiclab.sim.request_costs import request_costs
from quiclab.sim.resolve import resolve
from quiclab.sim.scenario import Scenario


def _p(value: float, unit: str) -> Param:
    return Param.point(value, unit, "assumed: hand-made test model")


def _role(cores: float, half: float) -> RoleCosts:
    base = synthetic_model("x").sender
    return replace(base, request_cores=_p(cores, "cores"),
                   request_cores_half=_p(half, "connections"))


@pytest.mark.parametrize(("connections", "expected"), [
    (0, 1.0),  # no connection: the event loop alone
    (10, 3.0),  # C = half: half of the 4 extra cores
    (30, 4.0),  # 1 + 4 × 30/40
    (90, 4.6),  # 1 + 4 × 90/100
])
def test_request_cores_saturate_at_half_the_extra_cores_at_c_half(connections, expected):
    assert _role(5.0, 10.0).request_cores_at(connections) == pytest.approx(expected, rel=1e-12)


def test_request_cores_without_a_half_point_are_all_in_use_and_never_below_one():
    assert _role(5.0, 0.0).request_cores_at(1) == pytest.approx(5.0)
    # A model that states fewer than one request core still has its event loop.
    assert _role(0.5, 10.0).request_cores_at(30) == pytest.approx(1.0)


def _model():
    base = synthetic_model("req", sender_ns=2000.0, receiver_ns=1500.0)
    sender = replace(base.sender, request_cores=_p(5.0, "cores"),
                     request_cores_half=_p(10.0, "connections"),
                     connection_wait_us=_p(4000.0, "us"), ns_per_connection=_p(20_000.0, "ns"))
    receiver = replace(base.receiver, request_cores=_p(3.0, "cores"),
                       request_cores_half=_p(30.0, "connections"),
                       connection_wait_us=_p(6000.0, "us"),
                       ns_per_connection=_p(30_000.0, "ns"))
    return replace(base, sender=sender, receiver=receiver)


REGISTRY = synthetic_registry(_model())


def _scenario(**fields) -> Scenario:
    return Scenario.from_dict({"server": "req", "client": "req", "app": "perf",
                               "base_rtt_us": 100.0, "rtt_ms": 1.0, **fields})


def test_resolve_carries_the_cores_at_the_scenarios_connections_and_the_wait_in_seconds():
    r = resolve(_scenario(workload="requests", request_bytes=1000, requests=3000,
                          connections=30), REGISTRY)
    # Server: 1 + 4 × 30/40 = 4; client: 1 + 2 × 30/60 = 2.
    assert r.sender.request_cores == pytest.approx(4.0)
    assert r.receiver.request_cores == pytest.approx(2.0)
    # 4000 µs and 6000 µs, and both ends hold a connection: 10 ms per connection.
    assert r.sender.connection_wait_s == pytest.approx(4e-3)
    assert r.receiver.connection_wait_s == pytest.approx(6e-3)
    assert request_costs(r).connection_wait_s == pytest.approx(10e-3)


def test_a_handshakes_datagrams_on_the_wire():
    """RFC 9000 §14.1: the client's Initial is padded to 1200 bytes; then its Handshake
    (100) and a close (50); the server's one flight of 1200 and HANDSHAKE_DONE (60);
    66 bytes of Ethernet, IP and UDP each. With a 100-byte response (140 bytes of
    payload, 1 packet) and the 8-byte request (48), half an ACK (50 + 66) up."""
    r = resolve(_scenario(workload="handshakes", connections=1, request_bytes=100), REGISTRY)
    c = request_costs(r)
    assert c.wire_down_bytes == pytest.approx(140 + 66 + (1200 + 66) + (60 + 66))
    assert c.wire_up_bytes == pytest.approx(48 + 66 + 0.5 * 116 + (1200 + 66) + (100 + 66)
                                            + (50 + 66))
    assert (c.server_packets_sent, c.client_packets_sent) == pytest.approx((1 + 2, 1.5 + 3))
    p = AnalyticEngine(REGISTRY).predict(r.scenario)
    # One handshake in the run: what one end sends the other receives.
    assert (p.server_packets_sent, p.client_packets_received) == pytest.approx((3, 3))
    assert (p.client_packets_sent, p.server_packets_received) == pytest.approx((4.5, 4.5))
    assert p.acks == pytest.approx(0.5)


def test_one_connection_at_a_time_is_held_by_the_round_trips_and_the_wait():
    """Handshakes on one connection at a time: a closed loop of one, so each
    handshake takes its 1-RTT handshake and its request round trip (2 × 1.1 ms),
    the ends' waits (4 + 6 ms) and its own CPU and serialisation, which are
    below 0.2 ms here (50 µs of connection CPU, a few packets at 2 µs, 1.5 kB on
    a 10 Gbit/s link): 1 / 12.2 ms = 82 handshakes/s within 2 %."""
    p = AnalyticEngine(REGISTRY).predict(_scenario(workload="handshakes", connections=1,
                                                   request_bytes=100))
    rtt_s = 100e-6 + 1e-3
    expected = 1.0 / (2 * rtt_s + 4e-3 + 6e-3)
    assert p.requests_per_s == pytest.approx(expected, rel=0.02)
    assert p.requests_per_s < expected  # the CPU and wire time only add


@pytest.mark.parametrize(("n", "z", "expected"), [
    (1.0, 0.0, 1.0),  # one customer, no delay: always at the station
    (1.0, 3.0, 0.25),  # one customer: u = 1 / (1 + z)
    (2.0, 1.0, 3.0 - 5.0 ** 0.5),  # 0.5u² − 3u + 2 = 0 → u = 3 − √5 = 0.764
    (10.0, 0.5, (10.5 - 92.25 ** 0.5) / 0.9),  # 0.45u² − 10.5u + 10 = 0 → 0.9948
    (1000.0, 2.0, None),  # many customers: the station saturates
])
def test_schweitzers_utilisation_is_the_smaller_root_by_hand(n, z, expected):
    """a·z·u² − (1 + z + a·n)·u + n = 0 with a = (n − 1)/n (Schweitzer 1979), worked out
    by hand for a few (n, z)."""
    from quiclab.sim.analytic.requests import schweitzer_utilisation

    u = float(schweitzer_utilisation(n, z))
    if expected is None:
        assert 0.99 < u <= 1.0
    else:
        assert u == pytest.approx(expected, rel=1e-9)


def test_a_cpu_bound_request_run_carries_the_cost_models_interval():
    """Many connections keep the server's CPU saturated: the goodput's interval is the
    cost interval of the server's parameters (the synthetic model's ±10 %):
    goodput / 1.1 … goodput / 0.9. A run the round trips limit has none."""
    slow = synthetic_registry(synthetic_model("srv", sender_ns=20_000.0, receiver_ns=20_000.0),
                              synthetic_model("cli", sender_ns=1000.0, receiver_ns=1000.0))
    p = AnalyticEngine(slow).predict(_scenario(workload="requests", request_bytes=1000,
                                               requests=100_000, connections=200,
                                               server="srv", client="cli"))
    assert p.limit == "sender_cpu"
    assert p.goodput_lo_mbps == pytest.approx(p.goodput_mbps / 1.1, rel=1e-9)
    assert p.goodput_hi_mbps == pytest.approx(p.goodput_mbps / 0.9, rel=1e-9)
    idle = AnalyticEngine(REGISTRY).predict(_scenario(workload="handshakes", connections=1,
                                                      request_bytes=100))
    assert idle.limit == "handshake"
    assert idle.goodput_lo_mbps == idle.goodput_mbps == idle.goodput_hi_mbps


def test_one_handshake_at_a_time_worked_out_to_the_microsecond():
    """The same closed loop of one, every term by hand (sim/request_costs.py's accounting):

    - CPU: the server's handshake is 20 µs of connection work, 2 datagrams sent at
      2 µs and 3 received at 1.5 µs, plus the request's 1 packet each way: 32.0 µs;
      the client's 30 µs + 3 sent × 2 + 2 received × 1.5 + 3.5 = 42.5 µs;
    - wire: down 100 + 40 B of the response + 66 B of headers, and the server's
      flight (1200 + 60 B + 2 × 66); up the 8-byte request + 40 + 66, half an ACK
      (50 + 66 B) and the client's flight (1200 + 100 + 50 B + 3 × 66): 3318 B at
      10 Gbit/s = 2.65 µs;
    - two round trips of 1.1 ms and the ends' 10 ms of waits.

    One in flight: the zero-load time R0 = 12.277 ms, except that the bottleneck (the
    client's CPU: 1.0645 request cores at one connection, 1 + 2 · 1/31, against the
    server's 1.364 for 32 µs) serves at its demand 42.5 µs / 1.0645 in the closed
    loop, so X = 1 / (R0 − 42.5 µs + 39.9 µs). A request's latency is its own time,
    R0, less the waits, the same at the median and the 99th percentile (nothing
    queues).
    """
    p = AnalyticEngine(REGISTRY).predict(_scenario(workload="handshakes", connections=1,
                                                   request_bytes=100))
    cpu_s = (32_000 + 42_500) * 1e-9
    wire_s = (100 + 40 + 66 + 1200 + 60 + 2 * 66 + 8 + 40 + 66 + 0.5 * (50 + 66)
              + 1200 + 100 + 50 + 3 * 66) * 8 / 10e9
    r0 = cpu_s + wire_s + 2 * 1.1e-3 + 10e-3
    client_cores = 1 + 2 * 1 / (1 + 30)
    cycle = r0 - 42_500e-9 + 42_500e-9 / client_cores
    assert p.notes[0] == ("handshakes: 1 in flight (1 connections), server 32.0 µs and "
                          "client 42.5 µs CPU per request")
    assert p.requests_per_s == pytest.approx(1 / cycle, rel=1e-5)
    assert p.latency_p50_ms == pytest.approx((r0 - 10e-3) * 1e3, rel=1e-5)
    assert p.latency_p99_ms == pytest.approx(p.latency_p50_ms, rel=1e-9)
    # One handshake in the run: its own time (no connection set-up before it, as every
    # request opens its own connection), then the loop's cycle.
    assert p.completion_s == pytest.approx(r0 - 10e-3 + cycle, rel=1e-5)
    assert p.server_cpu_util == pytest.approx(32_000e-9 / cycle, rel=1e-5)
    assert p.client_cpu_util == pytest.approx(42_500e-9 / cycle, rel=1e-5)


def _gamma2_quantile(level: float) -> float:
    """Quantile of Gamma(shape 2, scale 1) by bisection on its CDF 1 − e^(−x)(1 + x)."""
    lo, hi = 0.0, 100.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 1 - math.exp(-mid) * (1 + mid) < level else (lo, mid)
    return (lo + hi) / 2


@pytest.mark.parametrize(("q", "expected"), [
    (0.25, 0.0),  # half the requests do not wait at all
    (0.5, 0.0),
    (0.75, _gamma2_quantile(0.5)),  # the median of those that wait: 1.678
    (0.99, _gamma2_quantile(0.98)),  # 5.834
])
def test_the_waiting_time_is_zero_or_an_erlang_of_the_requests_ahead(q, expected):
    """Half the requests wait (p = 0.5), 1.0 s on average overall, so 2.0 s when they
    wait, behind 2 services of 1.0 s: Erlang(2, 1 s) — worked out from its CDF here."""
    from quiclab.sim.analytic.requests import wait_quantile

    got = float(wait_quantile(q, np.array(1.0), np.array(0.5), np.array(1.0)))
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("requests", [1000, 2])
def test_a_run_of_requests_on_one_connection_by_hand(requests):
    """R requests of 100 bytes over one connection, one at a time: the handshake's
    work and bytes are shared by the R requests, the connection's 10 ms of waits too.

    Per request: server 3500 ns + 28 500 / R, client 3500 + 39 000 / R; wire
    206 + 1392 / R bytes down (140 + 66, the server's flight) and 172 + 1548 / R up
    (48 + 66 + half an ACK of 116, the client's flight); one round trip of 1.1 ms (no
    handshake round trip after the first); the client's CPU (1.0645 request cores)
    is the bottleneck. Completion: the set-up, 1.5 RTT and one connection's
    handshake work on its slower end (max(28.5 µs / 1.364, 39 µs / 1.0645)), then
    the first request's own time, then R cycles. Left out by hand: the response's
    800 bits at the connection's window rate (no loss: ~100 Gbit/s), < 10 ns of a
    1.1 ms cycle, hence 2e-5. With R = 2 the set-up is 0.1 % of the completion.
    """
    p = AnalyticEngine(REGISTRY).predict(_scenario(workload="requests", connections=1,
                                                   requests=requests, request_bytes=100))
    share = 1 / requests
    s_ns, c_ns = 3500 + 28_500 * share, 3500 + 39_000 * share
    wire_s = (206 + 1392 * share + 172 + 1548 * share) * 8 / 10e9
    wait = 10e-3 * share
    r0 = (s_ns + c_ns) * 1e-9 + wire_s + 1.1e-3 + wait
    client_cores = 1 + 2 * 1 / (1 + 30)
    cycle = r0 - c_ns * 1e-9 + c_ns * 1e-9 / client_cores
    assert p.requests_per_s == pytest.approx(1 / cycle, rel=2e-5)
    setup = 1.5 * 1.1e-3 + max(28_500 / (1 + 4 / 11), 39_000 / client_cores) * 1e-9
    assert p.completion_s == pytest.approx(setup + (r0 - wait) + requests * cycle,
                                           rel=2e-5)
    assert p.latency_p50_ms == pytest.approx((r0 - wait) * 1e3, rel=2e-5)
    # Counts per run: one response packet and one request packet a request, the
    # client's ACK every 2 packets (half an ACK), and the handshake's 2 + 3 datagrams.
    assert p.acks == pytest.approx(0.5 * requests)
    assert p.server_packets_sent == pytest.approx(requests + 2)
    assert p.client_packets_sent == pytest.approx(1.5 * requests + 3)
    assert p.client_cpu_s == pytest.approx(p.client_cpu_util * p.completion_s, rel=1e-12)
    assert p.server_cpu_s == pytest.approx(p.server_cpu_util * p.completion_s, rel=1e-12)


def test_a_large_response_through_a_small_window_is_window_bound():
    """1 MB responses through a 100 kB flow-control window at a 10.1 ms RTT: each waits
    for the window, 8 Mbit at 800 kbit per round trip of the bulk model: 10.1 ms plus
    1.17 µs of serialisation and 1.5 µs of receiver work, plus one packet interval at
    the window's own rate, as the receiver ACKs every second packet — the round trip
    R solves R = R₀ + 10 880 bits · R / 800 kbit: 0.1024 s; plus its own CPU
    (736 packets of 1360 bytes sent at 2 µs and received at 1.5 µs, the request packet
    the other way, and a thousandth of the handshake's 8.5 and 9 µs), 1.121 MB on the
    wire (0.897 ms) and one round trip. One request in flight: X = 1 / that."""
    reg = synthetic_registry(synthetic_model("req", sender_ns=2000.0, receiver_ns=1500.0,
                                             fc_window_bytes=100_000))
    p = AnalyticEngine(reg).predict(Scenario.from_dict({
        "server": "req", "client": "req", "app": "perf", "base_rtt_us": 100.0,
        "rtt_ms": 10.0, "workload": "requests", "connections": 1, "requests": 1000,
        "request_bytes": 1_000_000}))
    round_trip = (10.1e-3 + 1466 * 8 / 10e9 + 1500e-9) / (1 - 1360 * 8 / (100_000 * 8))
    window_time = 8e6 / (100_000 * 8 / round_trip)
    cpu = (736 * 2000 + 1500 + 8.5 + 2000 + 736 * 1500 + 9.0) * 1e-9
    wire = ((1_000_000 + 736 * (40 + 66) + 1.392) + (48 + 66 + 368 * 116 + 1.548)) * 8 / 10e9
    assert p.requests_per_s == pytest.approx(1 / (window_time + cpu + wire + 10.1e-3),
                                             rel=1e-4)
    assert p.rates_mbps["flow_control"] == pytest.approx(8 / window_time, rel=1e-6)


SLOW_SERVER = synthetic_registry(
    synthetic_model("srv", sender_ns=20_000.0, receiver_ns=20_000.0),
    synthetic_model("cli", sender_ns=1000.0, receiver_ns=1000.0))
#: Bytes on the wire of one handshake with its 100-byte response (see above).
DOWN_BYTES = 100 + 40 + 66 + 1200 + 60 + 2 * 66
UP_BYTES = 8 + 40 + 66 + 58 + 1200 + 100 + 50 + 3 * 66


def test_one_handshake_at_a_time_on_a_slow_server():
    """The server's CPU the bottleneck (one request core): 2 datagrams sent and 3
    received at 20 µs, and the request's 1 each way: 140 µs; the client 7 µs. Its
    demand is its own time, so X = 1 / R0 with no waits: 147 µs + 2.65 µs of wire +
    2 × 1.1 ms."""
    p = AnalyticEngine(SLOW_SERVER).predict(_scenario(workload="handshakes", connections=1,
                                                      request_bytes=100, server="srv",
                                                      client="cli"))
    r0 = (140_000 + 7000) * 1e-9 + (DOWN_BYTES + UP_BYTES) * 8 / 10e9 + 2 * 1.1e-3
    assert p.requests_per_s == pytest.approx(1 / r0, rel=2e-5)
    assert p.server_cpu_util == pytest.approx(140e-6 / r0, rel=2e-5)


def test_one_handshake_at_a_time_on_a_1_mbit_link():
    """The link the bottleneck: its demand is the larger direction, 1720 B up; a
    handshake's own time on it is what it sends down, 1598 B; both directions' bytes
    are in its zero-load time."""
    p = AnalyticEngine(REGISTRY).predict(_scenario(workload="handshakes", connections=1,
                                                   request_bytes=100, link_gbps=0.001))
    link = 1e6
    r0 = (32_000 + 42_500) * 1e-9 + (DOWN_BYTES + UP_BYTES) * 8 / link + 2 * 1.1e-3 + 10e-3
    cycle = r0 - DOWN_BYTES * 8 / link + UP_BYTES * 8 / link
    assert (DOWN_BYTES, UP_BYTES) == (1598, 1720)
    assert p.requests_per_s == pytest.approx(1 / cycle, rel=2e-5)


def test_path_loss_is_named_as_not_modelled_for_requests():
    note = "path loss is not modelled for request workloads (no retransmissions)"
    lossy = AnalyticEngine(REGISTRY).predict(_scenario(workload="handshakes", connections=1,
                                                       request_bytes=100, loss_pct=0.5))
    clean = AnalyticEngine(REGISTRY).predict(_scenario(workload="handshakes", connections=1,
                                                       request_bytes=100))
    assert note in lossy.notes and note not in clean.notes


def test_ten_handshakes_in_flight_queue_at_the_server_by_schweitzers_formula():
    """Ten connections at once on the slow server (one request core, 140 µs per
    handshake, 0.1 ms RTT): the server queues. Worked out from the module's
    documented model, not its code: Schweitzer's approximate MVA for one station
    (demand D = 140 µs) and one delay (Z = R0 − D, R0 = 147 µs of CPU + 2.65 µs of
    wire + 2 RTTs), u the smaller root of a·z·u² − (1 + z + a·n)·u + n = 0 with
    z = Z/D, a = (n − 1)/n; X = u/D; a request waits with probability u·a, then
    an Erlang of shape (mean wait given waiting)/D, scale D (quantiles from the
    Gamma CDF by bisection)."""
    from scipy.special import gammainc

    p = AnalyticEngine(SLOW_SERVER).predict(_scenario(
        workload="handshakes", connections=10, request_bytes=100, server="srv",
        client="cli", rtt_ms=0.0))
    n, demand, rtt = 10, 140e-6, 100e-6
    r0 = 147e-6 + (DOWN_BYTES + UP_BYTES) * 8 / 10e9 + 2 * rtt
    z = (r0 - demand) / demand
    a = (n - 1) / n
    b = 1 + z + a * n
    u = (b - math.sqrt(b * b - 4 * a * z * n)) / (2 * a * z)
    x = u / demand
    assert p.requests_per_s == pytest.approx(x, rel=1e-6)
    assert p.limit == "sender_cpu" and u > 0.98  # saturated: named by its bottleneck
    mean_wait = n / x - r0
    p_wait = u * a
    cond = mean_wait / p_wait
    shape, scale = cond / demand, demand

    def quantile(q: float) -> float:
        level = (q - (1 - p_wait)) / p_wait
        lo, hi = 0.0, 100.0 * shape
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if gammainc(shape, mid) < level else (lo, mid)
        return (lo + hi) / 2 * scale

    assert p.latency_p50_ms == pytest.approx((r0 + quantile(0.5)) * 1e3, rel=1e-6)
    assert p.latency_p99_ms == pytest.approx((r0 + quantile(0.99)) * 1e3, rel=1e-6)
    assert p.latency_p99_ms > p.latency_p50_ms > 3 * r0 * 1e3  # queueing dominates
    assert p.rates_mbps["sender_cpu"] == pytest.approx(1 / demand * 100 * 8 / 1e6, rel=1e-9)
