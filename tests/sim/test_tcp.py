"""Kernel TCP + TLS through resolve and the engines: counts, placement, offloads."""

from __future__ import annotations

import pytest

from quiclab.errors import ScenarioError
from quiclab.models.testing import synthetic_model, synthetic_registry
from quiclab.models.testing_tcp import KERNEL_NS, tcp_model
from quiclab.sim.analytic import AnalyticEngine
from quiclab.sim.resolve import resolve
from quiclab.sim.scenario import Scenario
from quiclab.sim.tcp import core_work, counts, geometry


@pytest.fixture(scope="module")
def registry():
    return synthetic_registry(tcp_model("tcp+tls"), tcp_model("veth", placement="veth"),
                              tcp_model("tcp", tls=False), synthetic_model("fast"))


def _scenario(**kw) -> Scenario:
    base = dict(server="tcp+tls", client="tcp+tls", link_gbps=100.0, app="perf")
    base.update(kw)
    return Scenario(**base)


def _amortised(r) -> tuple[float, float]:
    acks = r.acks_per_packet
    return (r.sender.ns_per_packet_amortised(acks) / r.sender.stream_bytes,
            r.receiver.ns_per_packet_amortised(acks) / r.receiver.stream_bytes)


def test_geometry_counts_segments_and_tls_overhead():
    s = _scenario()
    mss, wire = geometry(s, tls=True)
    assert mss == 1448 and wire == pytest.approx(16406 / 16384)
    assert geometry(s.with_(mtu_bytes=9000), tls=False) == (8948, 1.0)


def test_endpoint_costs_give_back_the_cores_ns_per_byte(registry):
    r = resolve(_scenario(), registry)
    snd, rcv = _amortised(r)
    # The Endpoint is per wire segment; its amortised cost per goodput byte is the
    # breakdown's total, which the note prints first.
    assert f"{snd:.3f} ns/B" in r.sender.placement_note
    assert f"{rcv:.3f} ns/B" in r.receiver.placement_note
    # A wire segment is MSS + 52 B of headers: the engines' wire rule (payload + 28).
    assert r.sender.udp_payload_bytes + 28 == 1448 + 52


def test_tso_off_costs_the_sender_per_segment_and_gso_does_not_reach_tcp(registry):
    on = resolve(_scenario(), registry)
    # Without TSO the skbs stay big (TCP always has GSO; here the sender becomes the
    # bottleneck, so one write each) and each segment is cut in software.
    tso = resolve(_scenario(tso=False), registry)
    assert tso.sender.segments_per_call > 10
    assert "tx_segment" in tso.sender.placement_note
    assert _amortised(tso)[0] > _amortised(on)[0]
    # The device's gso flag does not reach TCP (sk_setup_caps): nothing changes.
    gso = resolve(_scenario(gso=False), registry)
    assert _amortised(gso) == pytest.approx(_amortised(on))
    assert "sk_setup_caps" in gso.sender.placement_note
    both = resolve(_scenario(tso=False, gso=False), registry)
    assert _amortised(both) == pytest.approx(_amortised(tso))
    # Without checksum offload the kernel drops TSO: software segmentation again.
    csum = resolve(_scenario(csum_offload=False), registry)
    assert "tx_segment" in csum.sender.placement_note


def test_gro_off_costs_the_receiver_per_frame_on_a_nic(registry):
    on = resolve(_scenario(), registry)
    off = resolve(_scenario(gro=False), registry)
    assert off.receiver.segments_per_call == 1 < on.receiver.segments_per_call
    assert _amortised(off)[1] > _amortised(on)[1]
    # The sender's ACK work is on its host's interrupt core: its own cost stays.
    assert _amortised(off)[0] == pytest.approx(_amortised(on)[0])
    assert off.receiver.ack_every_packets < on.receiver.ack_every_packets
    assert "receiver interrupt core" in off.receiver.placement_note


def test_veth_puts_the_receive_softirq_on_the_sender(registry):
    nic = resolve(_scenario(gro=False), registry)
    veth = resolve(_scenario(server="veth", client="veth"), registry)
    assert "rx_skb" in veth.sender.placement_note and "rx_skb" not in veth.receiver.placement_note
    # A NIC host's receive softirq is a stage of its own (here the slower one: GRO off).
    assert "receiver interrupt core" in nic.receiver.placement_note
    assert "rx_skb" in nic.receiver.placement_note
    assert _amortised(veth)[0] > _amortised(resolve(_scenario(), registry))[0]


def test_checksum_offload_off_sums_every_byte(registry):
    on = resolve(_scenario(), registry)
    off = resolve(_scenario(csum_offload=False, tso=False), registry)
    gso = resolve(_scenario(tso=False), registry)
    csum = KERNEL_NS["csum_byte"] * 16406 / 16384
    assert f"csum_byte (tx) {csum:.3f}" in off.sender.placement_note
    assert "csum_byte" not in gso.sender.placement_note
    # With a NIC the receive check runs on the receiver's interrupt core; on veth both
    # sums land on the sender's core.
    tx = registry.model("tcp+tls").tcp
    c = counts(off.scenario, tx, tx, True, True, 5e9)
    _, rcv = core_work(off.scenario, c, tx, tx, True, (1.0, 1.0), (1.0, 1.0))
    c_on = counts(gso.scenario, tx, tx, True, True, 5e9)
    _, rcv_on = core_work(gso.scenario, c_on, tx, tx, True, (1.0, 1.0), (1.0, 1.0))
    irq = (rcv.other if rcv.stage == "core" else rcv.ns_per_byte)
    irq_on = (rcv_on.other if rcv_on.stage == "core" else rcv_on.ns_per_byte)
    assert irq - irq_on == pytest.approx(csum)
    veth = resolve(_scenario(server="veth", client="veth", csum_offload=False, tso=False),
                   registry)
    assert "csum_byte (rx)" in veth.sender.placement_note
    assert _amortised(off)[0] > _amortised(gso)[0] + csum > _amortised(on)[0]


def test_record_size_and_cipher_act_through_user_work(registry):
    big = resolve(_scenario(), registry)
    small = resolve(_scenario(tls_record_bytes=2048), registry)
    chacha = resolve(_scenario(cipher="chacha20"), registry)
    assert _amortised(small)[0] > _amortised(big)[0]
    assert f"decrypt (chacha20) {1.0 * 16406 / 16384:.3f}" in chacha.receiver.placement_note
    # A slower receiver also gathers smaller GRO aggregates (fewer frames per window).
    assert _amortised(chacha)[1] - _amortised(big)[1] >= (1.0 - 0.3) * 16406 / 16384


def test_plain_tcp_has_no_tls_and_talks_only_to_plain_tcp(registry):
    r = resolve(_scenario(server="tcp", client="tcp"), registry)
    assert "encrypt" not in r.sender.placement_note
    with pytest.raises(ScenarioError, match="client"):
        resolve(_scenario(server="tcp", client="tcp+tls"), registry)
    with pytest.raises(ScenarioError, match="kernel TCP talks only to kernel TCP"):
        resolve(_scenario(client="fast"), registry)


def test_a_sender_held_back_fills_its_skbs_to_the_size_goal(registry):
    bound = counts(_scenario(), registry.model("tcp+tls").tcp, registry.model("tcp+tls").tcp,
                   True, True, 5e9)
    held = counts(_scenario(), registry.model("tcp+tls").tcp, registry.model("tcp+tls").tcp,
                  True, False, 5e9)
    assert bound.tx_skb_segments == pytest.approx(0.95 * 16406 / 1448)
    assert held.tx_skb_segments == 45


def test_small_buffers_bound_the_window(registry):
    r = resolve(_scenario(tcp_rmem_bytes=65536, rtt_ms=10), registry)
    assert r.sender.fc_window_bytes == 32768
    p = AnalyticEngine(registry).predict(_scenario(tcp_rmem_bytes=65536, rtt_ms=10))
    assert p.limit == "flow_control"
    # At most the window per round trip; the receiver's ACK turnaround adds to the round.
    assert 0.5 < p.goodput_mbps / (32768 * 8 / 0.01005 / 1e6) <= 1.0


def test_gso_off_lowers_the_answer_through_the_sender_cpu(registry):
    eng = AnalyticEngine(registry)
    s = _scenario(server="veth", client="veth")
    on, off = eng.predict(s), eng.predict(s.with_(gso=False, tso=False))
    assert on.limit == off.limit == "sender_cpu"
    assert off.goodput_mbps < on.goodput_mbps * 0.8
    assert off.rates_mbps["sender_cpu"] < on.rates_mbps["sender_cpu"]
    assert any("kernel TCP+TLS: sender core" in n for n in off.notes)


def test_tcp_recovery_rules_are_rack_tlp_and_rto():
    from quiclab.sim.des.cc import RttEstimator

    quic, tcp = RttEstimator(0.01), RttEstimator(0.01, "tcp")
    for est in (quic, tcp):
        est.update(0.012, ack_delay_s=0.002, max_ack_delay_s=0.025)
    # TCP reports no ACK delay: its sample keeps it.
    assert tcp.smoothed > quic.smoothed
    # RACK: latest RTT + min_rtt / 4; QUIC: 9/8 of the larger of smoothed and latest.
    assert tcp.loss_delay_s() == pytest.approx(0.012 + 0.01 / 4)
    assert quic.loss_delay_s() == pytest.approx(9 / 8 * 0.012)
    # A tail-loss probe at 2 × srtt + 2 ms, then timeouts of at least 200 ms, doubling.
    assert tcp.probe_s(0.04, 0) == pytest.approx(2 * tcp.smoothed + 0.002)
    assert tcp.probe_s(0.04, 1) == pytest.approx(0.2)
    assert tcp.probe_s(0.04, 3) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="recovery='sack'"):
        RttEstimator(0.01, "sack")


@pytest.mark.parametrize("loss_pct", [0.0, 1.0])
def test_the_des_runs_kernel_tcp_with_its_recovery(registry, loss_pct):
    from quiclab.sim.des import DesEngine

    s = _scenario(link_gbps=10.0, transfer_bytes=40_000_000, loss_pct=loss_pct, rtt_ms=1.0)
    r = resolve(s, registry)
    assert r.sender.recovery == "tcp" and r.path.rcvbuf_bytes > 1 << 32
    pred = DesEngine(registry).predict(s)
    assert pred.goodput_mbps > 0 and pred.rcvbuf_drops == 0
    if loss_pct:
        assert pred.limit == "cwnd" and pred.retransmissions > 0


def test_the_faster_side_sleeps_and_its_waker_pays_the_wake_up():
    from quiclab.models.testing import synthetic_registry as registry_of

    reg = registry_of(tcp_model("w", placement="veth", wakeups_per_write=1.0),
                      tcp_model("slow", placement="veth", wakeups_per_write=1.0))
    # veth, the sender the slower side: the reader sleeps; the sender's core (its receive
    # softirq delivers the data) pays the wake-up, the reader its schedule-in.
    r = resolve(_scenario(server="w", client="w"), reg)
    assert "wake_out" in r.sender.placement_note and "wake_in" in r.receiver.placement_note
    # A slow reader (software AES): the sender waits for its window updates instead.
    slow = resolve(_scenario(server="w", client="w", cipher="aes-sw", gso=False, tso=False,
                             gro=False), reg)
    snd, rcv = (slow.sender.placement_note, slow.receiver.placement_note)
    assert ("wake_in" in snd) == ("wake_out" in rcv)


def test_perf_has_no_file_io(registry):
    c_h3 = counts(_scenario(app="h3"), *(registry.model("tcp+tls").tcp,) * 2, True, False, 1e9)
    c_perf = counts(_scenario(), *(registry.model("tcp+tls").tcp,) * 2, True, False, 1e9)
    assert c_h3.per("file_in") == c_h3.per("file_out") == 1.0
    assert c_perf.per("file_in") == c_perf.per("file_out") == 0.0
