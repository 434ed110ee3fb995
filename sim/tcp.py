"""Kernel TCP + TLS resolved for a Scenario: how many of each unit a byte costs, and
what that costs on each core (``models/tcpcost.py`` names the units).

:func:`resolve_tcp` is what :func:`quiclab.sim.resolve.resolve` does for a pair of
TCP models. It counts, per goodput byte, the work the Scenario implies:

- segments: the MSS is the MTU less IPv4, TCP and timestamp headers (52 B);
  TLS adds 22 B to each record (5 B header, 1 B content type, 16 B tag, RFC
  8446 §5.2);
- super-segments: TCP builds skbs of up to its size goal (tcp_xmit_size_goal:
  64 KiB less headers, whole segments) whatever the device offers: Linux gives
  every TCP socket GSO (net/core/sock.c sk_setup_caps sets NETIF_F_GSO for TCP,
  since 4.13), so the device's ``gso`` flag does not reach TCP. A sender that is
  the bottleneck sends what each write() handed it at once (tcp_push), so its
  skbs are one write long; a sender held back by the receiver, the link or the
  window queues data and fills the goal;
- software segmentation: a device without TSO gets every skb cut into segments
  in software before its driver (validate_xmit_skb → skb_gso_segment: one per
  wire segment); without checksum offload the kernel turns TSO off
  (netdev_fix_features), so that case segments in software too;
- the receive path: a NIC delivers frames; GRO (or LRO in the NIC) gathers those
  arriving within ``gro_window_us`` of each other into one skb (at most the size
  goal). A veth pair hands the peer what the sender transmitted: a TSO skb whole,
  or the segments of a GSO skb, which its GRO gathers again;
- ACKs: one per ``ack_segments`` segments (the model's measured rule: Linux ACKs
  when the window's right edge moves, tcp_input.c __tcp_ack_snd_check, so the
  count follows the reader, not a fixed two segments);
- TLS records (``tls_record_bytes``), write() calls (the application's write
  size: one record for NGINX and the testbed peer) and read() calls;
- files: a web server reads the file it sends and a downloader writes it
  (``file_in``/``file_out``, one byte each per goodput byte), except with
  ``app=perf``, whose bytes are made in memory and discarded.

Each count times its cost gives ns per goodput byte on the sender's and the
receiver's core (the receive softirq on the receiver's with a NIC, on the
sender's on veth). Kernel costs move to the Scenario's CPU by the CPU rule's
factor to the power ``kernel_scaling``, user costs by the rule itself. The two
cores' totals become the engines' usual :class:`~quiclab.sim.resolve.Endpoint`
costs per wire segment (the engines' "packet"), so every engine sees the same
numbers; the breakdown is in each Endpoint's ``placement_note`` and so in every
Prediction's notes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from quiclab.errors import ScenarioError
from quiclab.models.tcpcost import SOFTIRQ_TERMS, TcpCosts

if TYPE_CHECKING:
    from quiclab.models.costmodel import CostModel
    from quiclab.models.cpus import CpuScaling
    from quiclab.models.registry import Registry
    from quiclab.sim.resolve import Endpoint, Resolved
    from quiclab.sim.scenario import Scenario

#: IPv4 (20) + TCP (20) + timestamps (12) bytes between the MTU and the MSS.
TCP_HEADER_BYTES = 52
#: What the engines' wire-size rule adds to a "UDP payload" (IP+UDP 28 B): a TCP
#: segment carries 24 B more headers, so its packet is MSS + 24 in their terms.
EXTRA_HEADER_BYTES = TCP_HEADER_BYTES - 28
#: TLS 1.3 bytes per record beyond its plaintext (RFC 8446 §5.2: 5 B header, the
#: inner content type, a 16-byte AEAD tag).
TLS_RECORD_OVERHEAD_BYTES = 22
#: Linux's largest TSO/GSO skb (GSO_LEGACY_MAX_SIZE 65536) less MAX_TCP_HEADER
#: (about 320 B): tcp_xmit_size_goal builds skbs of whole segments within it.
SIZE_GOAL_BYTES = 65536 - 1 - 320
#: The engines' receive buffer for a TCP receiver: larger than any window, so no drops.
TCP_NO_DROP_BYTES = 1 << 40
#: A few rounds of the fixed point between rate and rate-dependent counts (regime,
#: GRO aggregates): the counts settle in two or three.
ROUNDS = 4


def is_tcp(model: CostModel) -> bool:
    return getattr(model, "tcp", None) is not None


@dataclass(frozen=True)
class Counts:
    """Units per goodput byte (and the sizes behind them) for one Scenario."""

    mss: int
    wire_per_byte: float  # payload bytes on the wire per goodput byte (TLS overhead)
    segments: float
    records: float
    writes: float
    reads: float
    tx_skbs: float
    tx_skb_segments: float
    sw_segments: float
    rx_frames: float
    rx_skbs: float
    rx_skb_segments: float
    gro_frames: float
    acks: float
    wakeups: float
    sender_bound: bool
    #: Which side sleeps and is woken ("receiver": the reader drains faster than the
    #: sender writes; "sender": the sender waits for the reader's window updates).
    sleeper: str = "receiver"
    #: Bytes read from and written to files per goodput byte: 1 for a web server and a
    #: downloader (the models' ``file_in``/``file_out``), 0 for ``app=perf`` (bytes
    #: made in memory and discarded, as iperf3 and the testbed's peers do).
    files: float = 1.0

    def per(self, name: str) -> float:
        """Units of a cost term per goodput byte (bytes for the ``*_byte`` terms)."""
        return {"tx_call": self.writes, "tx_byte": self.wire_per_byte, "tx_skb": self.tx_skbs,
                "tx_segment": self.sw_segments, "csum_byte": self.wire_per_byte,
                "ack_in": self.acks, "rx_frame": self.rx_frames, "rx_skb": self.rx_skbs,
                "gro_frame": self.gro_frames, "ack_out": self.acks, "wake_out": self.wakeups,
                "wake_in": self.wakeups, "rx_call": self.reads, "rx_byte": self.wire_per_byte,
                "file_in": self.files, "file_out": self.files,
                "record_out": self.records, "record_in": self.records}[name]


@dataclass(frozen=True)
class CoreWork:
    """ns per goodput byte on one core, by term (on the Scenario's CPU), and the sums of
    the terms at the low and high ends of their parameters' intervals."""

    terms: dict[str, float] = field(default_factory=dict)
    lo: float = 0.0
    hi: float = 0.0
    #: "core" (the process's) or "interrupt core" (a NIC host's softirq, when it is the
    #: slower stage), and the other stage's total ns per byte.
    stage: str = "core"
    other: float = 0.0

    @property
    def ns_per_byte(self) -> float:
        return sum(self.terms.values())

    def interval(self) -> tuple[float, float]:
        """(lo, hi) of the total relative to its value."""
        total = self.ns_per_byte
        return (self.lo / total, self.hi / total) if total > 0 else (1.0, 1.0)

    def describe(self, top: int = 6) -> str:
        total = self.ns_per_byte
        parts = sorted(self.terms.items(), key=lambda kv: -kv[1])[:top]
        text = f"{self.stage} {total:.3f} ns/B = " + " + ".join(
            f"{k} {v:.3f}" for k, v in parts if v > 0)
        if self.other:
            text += (f" (its {'process core' if self.stage != 'core' else 'interrupt core'}: "
                     f"{self.other:.3f} ns/B)")
        return text


def geometry(s: Scenario, tls: bool) -> tuple[int, float]:
    """(MSS, payload bytes on the wire per goodput byte)."""
    mss = s.mtu_bytes - TCP_HEADER_BYTES
    if not tls:
        return mss, 1.0
    return mss, (s.tls_record_bytes + TLS_RECORD_OVERHEAD_BYTES) / s.tls_record_bytes


def counts(s: Scenario, tx: TcpCosts, rx: TcpCosts, tls: bool, sender_bound: bool,
           rate_bps: float, wakes_per_write: float = 0.0, sleeper: str = "receiver") -> Counts:
    """Units per goodput byte for ``s`` (``rate_bps``: the goodput the receive path sees,
    for a NIC's GRO aggregates; ``sender_bound``: whether the sender is the bottleneck)."""
    mss, wire = geometry(s, tls)
    segments = wire / mss
    record = s.tls_record_bytes
    records = 1.0 / record if tls else 0.0
    write = float(tx.fact("write_bytes", 0) or (record if tls else 131072))
    read = float(rx.fact("read_bytes", 0) or (record if tls else 131072))
    goal = max(1, SIZE_GOAL_BYTES // mss)
    # TSO needs checksum offload (the kernel clears it without); GSO is TCP's always.
    tso = s.tso and s.csum_offload
    if sender_bound:
        # Each write goes out at once: an skb of what it handed TCP (a record on the
        # wire), times the fill the runs measured (a partial tail waits for the next).
        fill = float(tx.fact("skb_fill", 1.0))
        tx_segs = min(float(goal), max(1.0, fill * write * wire / mss))
    else:
        tx_segs = float(goal)
    tx_skbs = segments / tx_segs
    sw_segments = 0.0 if tso else segments
    placement = rx.fact("placement", "nic")
    if placement == "veth":
        # veth hands the peer what the device transmitted: a TSO skb whole, or each
        # segment of a software GSO skb, which the peer's GRO (NAPI) gathers again.
        rx_frames = tx_skbs if tso else segments
        rx_segs = tx_segs if (tso or s.gro) else 1.0
    else:
        rx_frames = segments
        if s.gro or s.lro:
            window_s = float(rx.fact("gro_window_us", 30.0)) * 1e-6
            per_s = rate_bps / 8.0 * segments
            rx_segs = min(float(goal), max(1.0, per_s * window_s))
        else:
            rx_segs = 1.0
        if s.lro:
            rx_frames = segments / rx_segs  # the NIC merged them: the driver sees aggregates
    rx_skbs = segments / rx_segs
    gro_frames = rx_frames if (s.gro and not s.lro) else 0.0
    ack_segments = float(rx.fact("ack_segments", 2.0))
    acks = segments / max(ack_segments, rx_segs if placement == "nic" else 1.0, 1.0)
    writes = 1.0 / write
    wakeups = writes * wakes_per_write
    return Counts(mss, wire, segments, records, writes, 1.0 / read, tx_skbs, tx_segs,
                  sw_segments, rx_frames, rx_skbs, rx_segs, gro_frames, acks, wakeups,
                  sender_bound, sleeper, 0.0 if s.app == "perf" else 1.0)


def wakeups_per_write(rx: TcpCosts, snd_ns: float, rcv_ns: float,
                      deliveries: float = 1.0) -> float:
    """Times the faster side sleeps and is woken per write of the sender, by the
    receiver model's law (``wake_law``: min(cap, k × slack × deliveries^β), slack =
    1 − faster / slower, both sides' ns per byte without wake-ups; deliveries: the
    frames the receive path hands up per write), else its measured mean."""
    law = (rx.facts.get("wake_law") or {}).get("value")
    if not law:
        return float(rx.fact("wakeups_per_write", 0.0))
    slack = 1.0 - min(snd_ns, rcv_ns) / max(snd_ns, rcv_ns, 1e-12)
    spread = max(deliveries, 1.0) ** float(law.get("beta", 0.0))
    return min(float(law["cap"]), float(law["k"]) * slack * spread)


def core_work(s: Scenario, c: Counts, tx: TcpCosts, rx: TcpCosts, tls: bool,
              f_tx: tuple[float, float], f_rx: tuple[float, float]) -> tuple[CoreWork, CoreWork]:
    """(sender core, receiver core) ns per goodput byte by term. ``f_tx``/``f_rx``: the
    (kernel, user) CPU factors of each model from its reference CPU to the Scenario's."""
    sides: dict[str, dict[str, tuple[float, float, float]]] = {
        "snd": {}, "rcv": {}, "snd_irq": {}, "rcv_irq": {}}
    k_tx, u_tx = f_tx
    k_rx, u_rx = f_rx
    veth = rx.fact("placement", "nic") == "veth"

    def add(side: str, name: str, factor: float, param: Any, count: float) -> None:
        sides[side][name] = (factor * param.value * count, factor * param.lo * count,
                             factor * param.hi * count)

    for name in ("tx_call", "tx_byte", "tx_skb", "tx_segment", "file_in"):
        add("snd", name, k_tx, tx.kernel[name], c.per(name))
    if not s.csum_offload:
        add("snd", "csum_byte (tx)", k_tx, tx.kernel["csum_byte"], c.wire_per_byte)
    # veth: the receive softirq and the ACKs it sends back run on the sender's core.
    # NIC: on each host's interrupt core, a stage apart from the processes.
    add("snd" if veth else "snd_irq", "ack_in", k_tx, tx.kernel["ack_in"], c.acks)
    soft, k_soft = ("snd", k_tx) if veth else ("rcv_irq", k_rx)
    for name in SOFTIRQ_TERMS:
        if name != "wake_out":
            add(soft, name, k_soft, rx.kernel[name], c.per(name))
    if not s.csum_offload:
        add(soft, "csum_byte (rx)", k_soft, rx.kernel["csum_byte"], c.wire_per_byte)
    for name in ("rx_call", "rx_byte", "file_out"):
        add("rcv", name, k_rx, rx.kernel[name], c.per(name))
    # The side that sleeps pays its own scheduling in; the waker pays the wake-up where
    # the waking softirq runs: data for a sleeping reader is delivered by the receive
    # softirq; a sleeping sender is woken by the ACK or window update the reader sends
    # (on veth that softirq runs on the reader's core, with a NIC on the sender's host).
    if c.sleeper == "receiver":
        add(soft, "wake_out", k_soft, rx.kernel["wake_out"], c.wakeups)
        add("rcv", "wake_in", k_rx, rx.kernel["wake_in"], c.wakeups)
    else:
        add("rcv" if veth else "snd_irq", "wake_out", k_rx if veth else k_tx,
            rx.kernel["wake_out"], c.wakeups)
        add("snd", "wake_in", k_tx, rx.kernel["wake_in"], c.wakeups)
    if tls:
        for name, side, f, table in (("encrypt", "snd", u_tx, tx.encrypt),
                                     ("decrypt", "rcv", u_rx, rx.decrypt)):
            if s.cipher not in table:
                raise ScenarioError("cipher", s.cipher, " | ".join(sorted(table))
                                    + f" ({'server' if side == 'snd' else 'client'} TLS)")
            add(side, f"{name} ({s.cipher})", f, table[s.cipher], c.wire_per_byte)
        add("snd", "record_out", u_tx, tx.user["record_out"], c.records)
        add("rcv", "record_in", u_rx, rx.user["record_in"], c.records)
    out = []
    for side, irq in (("snd", "snd_irq"), ("rcv", "rcv_irq")):
        # A NIC host's interrupt core is a stage in series with the process's core:
        # the side runs at the slower of the two (sim/tcp.py module docstring).
        proc, other = sides[side], sides[irq]
        slower = other if _total(other) > _total(proc) else proc
        work = CoreWork({k: v[0] for k, v in slower.items()},
                        sum(v[1] for v in slower.values()), sum(v[2] for v in slower.values()),
                        stage="interrupt core" if slower is other else "core",
                        other=_total(proc if slower is other else other))
        out.append(work)
    return out[0], out[1]


def _total(terms: dict[str, tuple[float, float, float]]) -> float:
    return sum(v[0] for v in terms.values())


def _factors(costs: TcpCosts, scale: CpuScaling) -> tuple[float, float]:
    """(kernel, user) factors: the rule's factor, kernel work to the fitted power."""
    return scale.factor ** costs.kernel_scaling.value, scale.factor


def window_bytes(s: Scenario, tx: TcpCosts, rx: TcpCosts) -> int:
    """The most payload in flight tcp_rmem (receive window) and tcp_wmem (send queue)
    allow: each buffer byte holds ``window_ratio`` payload bytes (skb overhead)."""
    return int(min(s.tcp_rmem_bytes * float(rx.fact("window_ratio", 0.5)),
                   s.tcp_wmem_bytes * float(tx.fact("window_ratio", 0.5))))


def resolve_tcp(s: Scenario, registry: Registry, server: CostModel, client: CostModel,
                s_scale: CpuScaling, c_scale: CpuScaling) -> Resolved:
    """The Resolved of a TCP pair (see the module docstring). Raises ScenarioError for a
    pair that cannot talk or a Scenario field the TCP models cannot honour."""
    from quiclab.sim.resolve import Resolved, path_for

    if not (is_tcp(server) and is_tcp(client)):
        quic = client if is_tcp(server) else server
        raise ScenarioError("client" if is_tcp(server) else "server", quic.implementation,
                            "a TCP implementation: kernel TCP talks only to kernel TCP "
                            f"({server.implementation} → {client.implementation})")
    tx, rx = server.tcp, client.tcp
    tls_s, tls_c = bool(tx.fact("tls", True)), bool(rx.fact("tls", True))
    if tls_s != tls_c:
        raise ScenarioError("client", client.implementation,
                            f"a {'TLS' if tls_s else 'plain'} TCP client like "
                            f"{server.implementation}")
    if s.workload != "bulk":
        raise ScenarioError("workload", s.workload, "bulk (the TCP models have no request "
                            "terms)")
    if s.udp_payload_bytes:
        raise ScenarioError("udp_payload_bytes", s.udp_payload_bytes,
                            "0 for kernel TCP: its segment is the MTU less 52 B (set mtu_bytes)")
    if s.cc not in server.behaviour.ccs:
        raise ScenarioError("cc", s.cc, f"{' | '.join(server.behaviour.ccs)} for "
                            f"{server.implementation}")
    # TCP's receive buffer is its window (flow control below): the receiver never drops
    # for lack of room, so the engines' UDP socket buffer (rcvbuf_bytes) does not apply.
    path = replace(path_for(s), rcvbuf_bytes=TCP_NO_DROP_BYTES)
    f_tx, f_rx = _factors(tx, s_scale), _factors(rx, c_scale)
    window = window_bytes(s, tx, rx)
    cap = min(path.link_bps * (s.mtu_bytes - TCP_HEADER_BYTES) / (
        s.mtu_bytes + 38), window * 8.0 / max(path.rtt_s, 1e-9))
    rate, bound, wakes, sleeper = cap, True, 0.0, "receiver"
    for _ in range(ROUNDS):
        # The two sides without wake-ups decide how often the faster one sleeps.
        c = counts(s, tx, rx, tls_s, bound, rate)
        snd, rcv = core_work(s, c, tx, rx, tls_s, f_tx, f_rx)
        wakes = wakeups_per_write(rx, snd.ns_per_byte, rcv.ns_per_byte,
                                  c.rx_frames / max(c.writes, 1e-30))
        sleeper = "receiver" if rcv.ns_per_byte <= snd.ns_per_byte else "sender"
        c = counts(s, tx, rx, tls_s, bound, rate, wakes, sleeper)
        snd, rcv = core_work(s, c, tx, rx, tls_s, f_tx, f_rx)
        r_snd = 8e9 / max(snd.ns_per_byte, 1e-12)
        r_rcv = 8e9 / max(rcv.ns_per_byte, 1e-12)
        # The sender is the bottleneck when its own rate (with write-sized skbs) is the
        # smallest; otherwise data queues in its socket and its skbs fill the goal.
        bound = r_snd <= min(r_rcv, cap)
        rate = min(r_snd, r_rcv, cap)
    c = counts(s, tx, rx, tls_s, bound, rate, wakes, sleeper)
    snd, rcv = core_work(s, c, tx, rx, tls_s, f_tx, f_rx)
    sender = _endpoint(server, "sender", s, c, snd, tx, s_scale, window)
    receiver = _endpoint(client, "receiver", s, c, rcv, rx, c_scale, window)
    busy, lo, hi, src = registry.interop.busy(s.server.split("@")[0], s.client.split("@")[0],
                                            s.testbed)
    if "busy" in tx.facts:
        # The share of a transfer the bottleneck core works (the rest it waits for the
        # other side's data, window or wake-up): the TCP model's own measurement.
        entry = tx.facts["busy"]
        busy = float(entry["value"])
        lo, hi = float(entry.get("lo", busy)), float(entry.get("hi", busy))
        src = str(entry.get("source", ""))
    resolved = Resolved(scenario=s, sender=sender, receiver=receiver, path=path,
                        interop_busy=busy, interop_lo=lo, interop_hi=hi, interop_source=src,
                        cpu=s_scale, cc=s.cc, model_versions=registry.versions())
    from quiclab.sim.cores import apply

    return apply(resolved, registry)


def _endpoint(model: CostModel, role: str, s: Scenario, c: Counts, work: CoreWork,
              costs: TcpCosts, scale: CpuScaling, window: int) -> Endpoint:
    """The engines' Endpoint: the core's ns per goodput byte as costs per wire segment
    (``stream_bytes`` goodput bytes each), per-skb work as the per-call cost."""
    from quiclab.sim.resolve import Endpoint

    beh = model.behaviour
    stream = c.mss / c.wire_per_byte  # goodput bytes per wire segment
    per_skb = "tx_skb" if role == "sender" else "rx_skb"
    skb_segments = c.tx_skb_segments if role == "sender" else c.rx_skb_segments
    batch = max(1, round(skb_segments))
    acks_per_segment = c.acks / c.segments
    ack_terms = [t for t in ("ack_in", "ack_out") if t in work.terms]
    ack_per_byte = sum(work.terms[t] for t in ack_terms)
    user = [t for t in work.terms if t.startswith(("encrypt", "decrypt", "record"))]
    user_per_byte = sum(work.terms[t] for t in user)
    skb_per_byte = work.terms.get(per_skb, 0.0)
    rest = work.ns_per_byte - user_per_byte - skb_per_byte - ack_per_byte
    lo, hi = work.interval()
    tag = "sender" if role == "sender" else "receiver"
    note = (f"kernel TCP{'+TLS' if c.records else ''}: {tag} {work.describe()} "
            f"(MSS {c.mss} B; skbs of {skb_segments:.1f} segments"
            f"{', sender-bound: one write each' if c.sender_bound and role == 'sender' else ''};"
            f" {c.segments / max(c.acks, 1e-30):.1f} segments per ACK)")
    if role == "sender" and not s.gso:
        note += ("; gso=false leaves TCP's skbs as they are: Linux gives every TCP socket "
                 "GSO (sk_setup_caps), software segmentation follows tso")
    return Endpoint(
        impl=model.implementation, role=role,
        udp_payload_bytes=c.mss + EXTRA_HEADER_BYTES, stream_bytes=max(1, int(stream)),
        segments_per_call=batch,
        # Per wire segment: the engines add ns_per_call / segments_per_call and
        # acks_per_packet × ns_per_ack to these, which gives the core's ns per byte back.
        ns_protocol=rest * stream, ns_crypto=user_per_byte * stream, ns_app=0.0, ns_segment=0.0,
        ns_per_call=skb_per_byte * stream * batch,
        ns_per_ack=ack_per_byte * stream / max(acks_per_segment, 1e-12),
        cost_lo=lo * scale.factor_lo / scale.factor, cost_hi=hi * scale.factor_hi / scale.factor,
        cores=1.0, ack_every_packets=1.0 / max(acks_per_segment, 1e-9),
        immediate_ack_on_gap=beh.immediate_ack_on_gap,
        max_ack_delay_s=beh.max_ack_delay_ms / 1000.0,
        # Linux ACKs when the window's right edge moves (tcp_cleanup_rbuf: the reader's
        # window update once it could double), so a small window gets its ACKs sooner:
        # the engines' cap of the threshold within the window (TRANSPORT.md "ACKs").
        ack_threshold_fixed=False,
        ack_floor_packets=beh.ack_threshold_floor_packets,
        ack_timer_s=(beh.ack_timer_ms or beh.max_ack_delay_ms) / 1000.0,
        cubic_reno_friendly=beh.cubic_reno_friendly, reno_beta=beh.reno_beta,
        fc_window_bytes=window, pacing=beh.pacing or s.cc == "bbr",
        pacing_burst_s=beh.pacing_burst_ms / 1000.0,
        pacing_burst_min_packets=beh.pacing_burst_min_packets,
        pacing_burst_max_packets=beh.pacing_burst_max_packets,
        pacing_min_delay_s=beh.pacing_min_delay_ms / 1000.0, tx_burst_bytes=beh.tx_burst_bytes,
        rx_stall_rate_hz=0.0, rx_stall_min_s=0.0, rx_stall_alpha=2.0, recovery="tcp",
        placement_note=note)


def describe(resolved: Resolved) -> dict[str, Any]:
    """The TCP breakdown of a Resolved (for tables): each side's note."""
    return {"sender": resolved.sender.placement_note, "receiver": resolved.receiver.placement_note}
