"""The CPU rule in ``resolve()``: every CPU cost moves to the Scenario's CPU, nothing else does.

The cost model states nanoseconds on its reference CPU (AMD EPYC 7543, 3.7 GHz,
``models/cpus.json``); a Scenario on another CPU or clock divides every CPU
cost by the relative speed (clock × IPC). The expectations here are by hand:
a model whose every cost term is a different round number, so that a term the
rule forgets (or scales twice) shows up on its own.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from quiclab.models.costmodel import CryptoCost, Param
from quiclab.models.testing import synthetic_model, synthetic_registry
from quiclab.sim.resolve import resolve
from quiclab.sim.scenario import Scenario

#: The reference CPU's clock (models/cpus.json: AMD EPYC 7543, max 3.7 GHz).
REFERENCE_GHZ = 3.7


def _p(value: float, unit: str = "ns") -> Param:
    return Param.point(value, unit, "assumed: hand-made test model", rel=0.1)


def _model():
    """A model with a distinct, non-zero value for every CPU term of both roles."""
    base = synthetic_model("every", sender_ns=3000.0, receiver_ns=2000.0, syscall_ns=5000.0,
                           ack_ns=700.0, per_byte_ns=0.5, crypto_ns=300.0)
    sender = replace(base.sender, ns_per_segment=_p(400.0),
                     app_ns_per_byte={"perf": _p(0.0, "ns/B"), "hq": _p(0.1, "ns/B"),
                                      "h3": _p(0.25, "ns/B")},
                     ns_per_connection=_p(90_000.0), ns_per_request=_p(6000.0),
                     ns_per_stream_frame=_p(150.0), connection_wait_us=_p(800.0, "us"))
    # AES-GCM-like crypto: 300 ns per packet and 0.05 ns per byte (both roles).
    crypto = {c: CryptoCost(_p(300.0), _p(0.05, "ns/B")) for c in base.crypto}
    receiver = replace(base.receiver, ns_per_segment=_p(250.0),
                       app_ns_per_byte={"perf": _p(0.0, "ns/B"), "hq": _p(0.05, "ns/B"),
                                        "h3": _p(0.15, "ns/B")},
                       ns_per_connection=_p(70_000.0), ns_per_request=_p(4000.0),
                       ns_per_stream_frame=_p(120.0), connection_wait_us=_p(300.0, "us"))
    return replace(base, sender=sender, receiver=receiver, crypto=crypto)


REGISTRY = synthetic_registry(_model())
#: Bulk per-data-packet terms and request terms, all CPU time (ns).
CPU_TERMS = ("ns_protocol", "ns_crypto", "ns_app", "ns_segment", "ns_per_call", "ns_per_ack",
             "tx_ns_packet", "tx_ns_byte", "tx_ns_call", "rx_ns_packet", "rx_ns_byte",
             "rx_ns_call", "app_ns_byte", "ns_per_connection", "ns_per_request",
             "ns_per_stream_frame")


def _resolved(**fields):
    return resolve(Scenario(server="every", client="every", app="h3", **fields), REGISTRY)


def test_on_the_reference_cpu_each_term_is_the_models_own():
    r = _resolved()
    s, c = r.sender, r.receiver
    payload = 1400  # the model's UDP payload on a 1500-byte path
    # Hand-computed from the model above: protocol = packet + byte × payload,
    # crypto = 300 ns + 0.05 ns × 1400 B; h3 application cost on the stream bytes:
    # 1400 − 40 overhead − ceil(1360 × 4 / 16384) = 1 framing byte → 1359 B.
    assert s.ns_protocol == pytest.approx(3000.0 + 0.5 * payload)
    assert c.ns_protocol == pytest.approx(2000.0 + 0.5 * payload)
    assert (s.ns_crypto, c.ns_crypto) == pytest.approx((370.0, 370.0))
    assert (s.ns_app, c.ns_app) == pytest.approx((0.25 * 1359, 0.15 * 1359))
    assert (s.ns_segment, c.ns_segment) == pytest.approx((400.0, 250.0))
    assert (s.ns_per_call, c.ns_per_call) == pytest.approx((5000.0, 5000.0))
    assert (s.ns_per_ack, c.ns_per_ack) == pytest.approx((700.0, 700.0))
    # Request terms: sending uses the sender-role costs, receiving the receiver's.
    assert s.tx_ns_packet == pytest.approx(3000.0 + 300.0 + 400.0)
    assert s.rx_ns_packet == pytest.approx(2000.0 + 300.0 + 250.0)
    assert (s.tx_ns_byte, s.rx_ns_byte) == pytest.approx((0.55, 0.55))
    assert (s.ns_per_connection, c.ns_per_connection) == pytest.approx((90_000.0, 70_000.0))
    assert (s.ns_per_request, c.ns_per_request) == pytest.approx((6000.0, 4000.0))
    assert (s.ns_per_stream_frame, c.ns_per_stream_frame) == pytest.approx((150.0, 120.0))
    # A connection's wait is time without CPU: µs in the model, seconds here.
    assert (s.connection_wait_s, c.connection_wait_s) == pytest.approx((800e-6, 300e-6))


@pytest.mark.parametrize("speedup", [2.0, 0.5])
def test_a_clock_k_times_faster_divides_every_cpu_term_by_k(speedup):
    """The same CPU at k × its clock (``cpu_ghz``): clock × IPC is k times the
    reference's, so every per-packet, per-byte, per-call, per-ACK and per-request
    cost is divided by k; sizes, batches, ACK policy and waits stay."""
    ref = _resolved()
    fast = _resolved(cpu_ghz=REFERENCE_GHZ * speedup)
    assert fast.cpu.factor == pytest.approx(1.0 / speedup, rel=1e-12)
    for side in ("sender", "receiver"):
        a, b = getattr(ref, side), getattr(fast, side)
        for term in CPU_TERMS:
            assert getattr(a, term) > 0, (side, term)
            assert getattr(b, term) == pytest.approx(getattr(a, term) / speedup, rel=1e-12), \
                (side, term)
        for same in ("udp_payload_bytes", "stream_bytes", "segments_per_call",
                     "ack_every_packets", "connection_wait_s", "request_cores", "cores"):
            assert getattr(b, same) == getattr(a, same), (side, same)
        # All CPU per data packet, ACKs and calls included, moves by the same factor.
        assert b.ns_per_packet_amortised(0.1) == pytest.approx(
            a.ns_per_packet_amortised(0.1) / speedup, rel=1e-12)


def test_another_catalog_cpu_scales_by_its_clock_times_ipc():
    """Intel Xeon D-1518 (2.2 GHz max, Broadwell IPC 0.95 relative to Zen 3 in
    models/cpus.json): every CPU term is 3.7 × 1.0 / (2.2 × 0.95) = 1.77 × the
    reference's, the per-ACK and per-call terms included."""
    ref, slow = _resolved(), _resolved(cpu="D-1518")
    expected = REFERENCE_GHZ * 1.0 / (2.2 * 0.95)
    for side in ("sender", "receiver"):
        for term in CPU_TERMS:
            assert getattr(getattr(slow, side), term) == pytest.approx(
                getattr(getattr(ref, side), term) * expected, rel=1e-9), (side, term)
    # The cost interval: the parameters' ±10 % times the rule's own range relative to its
    # value — Broadwell's IPC 0.85 … 1.05 around 0.95 (Zen 3, the reference, is exact):
    # 0.9 × 0.95 / 1.05 and 1.1 × 0.95 / 0.85.
    assert (ref.sender.cost_lo, ref.sender.cost_hi) == pytest.approx((0.9, 1.1))
    assert slow.sender.cost_lo == pytest.approx(0.9 * 0.95 / 1.05, rel=1e-9)
    assert slow.sender.cost_hi == pytest.approx(1.1 * 0.95 / 0.85, rel=1e-9)


@pytest.mark.parametrize(("mtu", "stream_bytes"), [
    (1500, 1400 - 40 - 1),  # ceil(1360 × 4 / 16384) = 1 framing byte
    (4068, 4040 - 40 - 1),  # ceil(4000 × 4 / 16384) = 1 (5 per 16 KiB would be 2)
    (65535, 65507 - 40 - 16),  # ceil(65467 × 4 / 16384) = 16 (5 per 16 KiB: 20)
    (16453, 16425 - 40 - 5),  # ceil(16385 × 4 / 16384) = ceil(4.0002) = 5
])
def test_http3_frames_a_data_packet_with_4_bytes_per_16_kib(mtu, stream_bytes):
    """RFC 9114 §7.2.1: a DATA frame's type and length varints, about 4 bytes per
    16 KiB of body, are the only framing on the bulk path; a jumbo path sends the
    largest payload it can (MTU − 28)."""
    r = _resolved(mtu_bytes=mtu)
    assert r.sender.udp_payload_bytes == (1400 if mtu == 1500 else mtu - 28)
    assert r.sender.stream_bytes == stream_bytes
    perf = resolve(Scenario(server="every", client="every", app="perf", mtu_bytes=mtu),
                   REGISTRY)
    assert perf.sender.stream_bytes == perf.sender.udp_payload_bytes - 40  # no framing


def test_a_pairs_overhead_scales_every_bulk_cost_of_both_ends():
    """Interop.pair_overhead (log): a pair whose interplay costs CPU per packet moves
    every bulk term of both endpoints by its factor, here e^ln 1.5 = 1.5."""
    from quiclab.models.registry import Interop

    pair = synthetic_registry(_model(), interop=Interop.for_testbed(
        "qir10g", pair_overhead={"every|every": math.log(1.5)}))
    ref = _resolved()
    over = resolve(Scenario(server="every", client="every", app="h3", testbed="qir10g"), pair)
    for side in ("sender", "receiver"):
        for term in ("ns_protocol", "ns_crypto", "ns_app", "ns_segment", "ns_per_call",
                     "ns_per_ack"):
            assert getattr(getattr(over, side), term) == pytest.approx(
                1.5 * getattr(getattr(ref, side), term), rel=1e-12), (side, term)


def test_what_a_client_spends_before_its_request_leaves():
    """The DES orders a request's client work: sending it — one 81-byte packet (40 bytes
    of HTTP/3 HEADERS + 41 of packet overhead) at 3700 ns + 0.55 ns/B, its 5000 ns
    system call — and half the client's 4000 ns per request."""
    from quiclab.sim.request_costs import request_costs

    r = resolve(Scenario(server="every", client="every", app="h3", workload="requests",
                         request_bytes=1000, requests=10), REGISTRY)
    c = request_costs(r)
    assert c.client_send_ns == pytest.approx(3700 + 5000 + 0.55 * 81 + 2000)
    # The response: the object, an HTTP/3 HEADERS frame (~30 bytes with QPACK) and a
    # DATA frame header (RFC 9114 §7.2.1): 34 bytes; the request's HEADERS 40.
    assert (c.response_stream_bytes, c.request_stream_bytes) == (1000 + 34, 40)


def test_values_are_frozen():
    import dataclasses

    from quiclab.sim.resolve import path_for

    with pytest.raises(dataclasses.FrozenInstanceError):
        path_for(Scenario()).mtu_bytes = 9000  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        _resolved().sender.ns_crypto = 0.0  # type: ignore[misc]


def test_one_requests_cpu_at_each_end_term_by_term():
    """A 1000-byte HTTP/3 response on 4 streams, with every cost term non-zero.

    Sizes: the response is 1034 stream bytes (1000 + 34 of HEADERS and DATA framing)
    in 1 packet of 1075 bytes (41 of packet overhead); 4 requests of 40 bytes share a
    packet (a quarter each, 50.25 bytes with their share of the overhead), so each
    request's frame is 0.75 of a frame beyond its packet; half an ACK per response.
    Server (sender-role costs 3700 ns + 0.55 ns/B per packet sent, 2550 + 0.55 per
    packet received, 5000 per call, 0.25 ns/B of HTTP/3, 700 per ACK, 6000 per
    request, 150 per extra frame):
      3700 + 0.55·1075 + 5000 + 0.25·1000 + 0.25·(2550 + 5000) + 0.55·50.25
      + 0.5·700 + 6000 + 0.75·150 = 17 918.89 ns.
    Client (receiver-role request terms: 0.15 ns/B, 4000 per request, 120 per frame):
      0.25·(3700 + 5000) + 0.55·50.25 + 2550 + 0.55·1075 + 5000 + 0.15·1000
      + 0.5·700 + 4000 + 0.75·120 = 14 933.89 ns.
    Handshake: the server's 90 µs plus 2 datagrams sent (1200, 60 B) and 3 received
    (1200, 100, 50 B): 131 485.5 ns; the client's 70 µs plus the reverse: 112 635.5 ns.
    """
    from quiclab.sim.request_costs import request_costs

    r = resolve(Scenario(server="every", client="every", app="h3", workload="requests",
                         request_bytes=1000, requests=40, connections=1, streams=4),
                REGISTRY)
    c = request_costs(r)
    assert (c.response_packets, c.request_packets, c.acks) == pytest.approx((1.0, 0.25, 0.5))
    assert c.server_request_ns == pytest.approx(17_918.8875, rel=1e-12)
    assert c.client_request_ns == pytest.approx(14_933.8875, rel=1e-12)
    assert c.server_conn_ns == pytest.approx(131_485.5, rel=1e-12)
    assert c.client_conn_ns == pytest.approx(112_635.5, rel=1e-12)
    # 40 requests on one connection: each carries 1/40 of the handshake.
    assert c.server_ns == pytest.approx(17_918.8875 + 131_485.5 / 40, rel=1e-12)
