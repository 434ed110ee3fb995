"""The QUIC stacks the testbed can run, as data: where each comes from, how it
is built and started, its packet-size cap and which knobs it honours.

Adding a stack is one small program under ``testbed/peers/<dir>/`` and one
:class:`Stack` entry in :data:`STACKS`. Every peer speaks the same command
line (``--name=value``; see ``testbed/peers/README.md``) and prints one JSON
line per side; the harness passes a knob only to a stack whose entry lists it,
and refuses (one line) a knob that was asked for explicitly and that the stack
cannot honour, rather than measuring something else.

Facts recorded here (measured on this kind of machine, a 2-core VM with veth pairs):

- quic-go caps QUIC packets at 1452 B of UDP payload (IPv4, MTU 1500) and has
  neither GRO nor a congestion-control choice; GSO is switched off with
  ``QUIC_GO_DISABLE_GSO``.
- quinn needs ``max_udp_payload_size`` and ``min_mtu`` set for jumbo packets;
  with GSO above ~6.5 KB packets its batches exceed 64 KiB and fail silently
  (goodput collapses), so that combination is refused. quinn-udp always turns
  UDP_GRO on.
- aioquic and qh3 send one datagram per system call (no GSO/GRO); aioquic
  does no path-MTU discovery (1200 B unless told).
- Request workloads: only the quic-go and x/net/quic peers have a
  request mode (``--requests``, ``--connections``, ``--streams``,
  ``--new-connection``); the other peers run one bulk transfer.
- The TCP references (``transport="tcp"``): one C peer over OpenSSL
  (``peers/tcp-tls``) runs TLS 1.3 over kernel TCP (``tcp+tls``), plain TCP as
  iperf3 does (``tcp``) and kernel TLS (``tcp+ktls``), each an HTTP/1.1 GET of
  N bytes. Their offloads are the veths' own (TSO, GSO, GRO, checksum), their
  buffers the namespaces' tcp_rmem/tcp_wmem, their congestion control the
  kernel's (testbed/tcp.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quiclab.testbed.errors import TestbedError

#: Where a knob's support is recorded. Values: "switch" (on and off), "on"
#: (always on, cannot be turned off), "off" (not implemented).
OFFLOAD_SUPPORT = ("switch", "on", "off")

#: Testbed-only knobs (not Scenario fields), with defaults; set with ``--set`` too.
TESTBED_KNOBS: dict[str, Any] = {
    # ethtool -K tx-udp-segmentation on the sender's veth: on hands 64 KB GSO
    # batches to the peer unsegmented (flatters GSO); off makes the kernel
    # segment, closer to a real NIC.
    "veth_segmentation": True,
    # ethtool -K gro on the receiver's veth (NAPI GRO, aggregates for UDP_GRO sockets).
    "nic_gro": False,
    # ethtool -K tso (TCP's own: a Scenario field, ``tso``, since the TCP peers; the
    # key of a run still hashes it here, testbed/config.py RunConfig.key).
    "stream_window_bytes": 0,
    "conn_window_bytes": 0,
    "qlog": False,
    # Count system calls with `perf stat -e raw_syscalls:sys_enter` (small overhead).
    "count_syscalls": True,
    # Bound of each direction of the delay relay's queue (0 = 2 × BDP, at least 1 MiB).
    "relay_queue_bytes": 0,
    # Per-run timeout in seconds (0 = derived from the expected transfer time).
    "timeout_s": 0.0,
    # Host knobs (real NICs; refused where an interface lacks them, as a veth does):
    # ethtool -K lro / gso on both interfaces and ring sizes (ethtool -G; 0 = leave).
    # The core the NIC's interrupts go to is the Scenario's irq_core.
    "nic_lro": False,
    "nic_gso": True,
    "rx_ring": 0,
    "tx_ring": 0,
    # TCP peers: bytes per application write (SSL_write or write()) and read buffer
    # (0 = the peer's default: one TLS record, or iperf3's 128 KiB for plain TCP).
    "app_write_bytes": 0,
    "app_read_bytes": 0,
    # Scheduling priority of both peers (0 = as started): their nice value and, since
    # each peer is a session of its own and the scheduler shares CPU between sessions
    # first (autogroups, sched(7)), their autogroup's. On a host shared with other work
    # a negative value keeps a CPU-bound peer's core its own, so that its CPU cost is
    # measured, not the host's load.
    "nice": 0,
}
#: Knobs that enter a configuration's key (its run ids) only when set explicitly: added
#: after runs were recorded, whose ids must stay as they were.
HOST_KNOBS = ("nic_lro", "nic_gso", "rx_ring", "tx_ring")


@dataclass(frozen=True)
class Stack:
    """One QUIC implementation as the testbed sees it.

    ``command`` is the argument vector that starts a peer, with ``{build}``
    (the build directory) and ``{peers}`` (the peers source directory)
    substituted; ``--role=…`` and the knob flags are appended.
    """

    name: str
    #: Where it comes from (a registry and a package), for the build log and the report.
    origin: str
    #: How it is built: "go", "cargo", "pyvenv", "debian" (prebuilt examples), "none".
    build: str
    #: Source directory under testbed/peers/ (hashed to decide whether to rebuild).
    source: str
    command: tuple[str, ...]
    version: str
    #: Application protocol it speaks: "perf" (the quiclab perf protocol), "h3", or for
    #: the TCP peers "https" (HTTP/1.1 over TLS) and "http" (plain HTTP/1.1).
    app: str = "perf"
    #: Transport: "udp" (QUIC) or "tcp" (kernel TCP; testbed/tcp.py resolves its knobs).
    transport: str = "udp"
    #: TCP peers: whether it runs TLS, and whether in the kernel (TCP_ULP "tls").
    tls: bool = True
    ktls: bool = False
    #: Largest UDP payload it will send, in bytes (IPv4).
    max_udp_payload_bytes: int = 65527
    #: UDP payload when nothing is set and the MTU is 1500.
    default_udp_payload_bytes: int = 1452
    gso: str = "switch"
    gro: str = "switch"
    #: Whether the peer takes ``--max-udp-payload`` (x/net/quic has no such setting).
    payload_flag: bool = True
    #: GSO is refused above this UDP payload (0 = no limit).
    gso_max_payload_bytes: int = 0
    ccs: tuple[str, ...] = ("cubic",)
    default_cc: str = "cubic"
    #: Whether the peer's packets leave paced (at a rate from cwnd and RTT) or back to
    #: back as the library hands them out; the fresh models take it (TRANSPORT.md
    #: "Pacing"), so a burst into a small queue or buffer is simulated as it happens.
    pacing: bool = True
    pacing_source: str = "the library's own default: it paces (RFC 9002 §7.7)"
    #: The pacer's bucket and timer (models/costmodel.py Behaviour.pacing_burst_*,
    #: pacing_min_delay_ms): (ms of the pacing rate sent back to back, at least,
    #: at most datagrams (0: no cap), the shortest wait in ms). The default paces
    #: packet by packet, for the pacers nobody has read.
    pacing_burst: tuple[float, int, int, float] = (0.0, 1, 1, 0.0)
    pacing_burst_source: str = "not read: modelled packet by packet"
    #: The receive window a single stream gets with the peer's defaults (bytes; the
    #: fresh models' Behaviour.fc_window_bytes), and where that comes from. 0: not
    #: read, the models keep their 16 MiB default. The engines share that window
    #: among a Scenario's streams, so for a per-stream limit (quinn's) it is right
    #: for one stream and too small for several.
    fc_window_bytes: int = 0
    fc_window_source: str = "not read: the models' default (16 MiB)"
    #: The receiver's ACK threshold stays fixed whatever the sender's window (no
    #: ACK-frequency extension; models/costmodel.py Behaviour.ack_threshold_fixed),
    #: and where that comes from. False: not read, the engines keep the threshold
    #: within the window.
    ack_threshold_fixed: bool = False
    ack_threshold_source: str = "not read: kept within the sender's window"
    #: The rest of the receiver's ACK policy where it is not RFC 9000 §13.2's (a
    #: threshold of at least 2 packets, a gap ACKed at once, the max_ack_delay
    #: timer): the fewest packets it waits for when the window is small
    #: (Behaviour.ack_threshold_floor_packets), its own delayed-ACK timer in ms
    #: (Behaviour.ack_timer_ms; 0 = the max_ack_delay it advertises), whether it
    #: ACKs a gap at once (Behaviour.immediate_ack_on_gap); and where that comes from.
    ack_floor_packets: float = 2.0
    ack_timer_ms: float = 0.0
    immediate_ack_on_gap: bool = True
    ack_policy_source: str = ("not read: RFC 9000 §13.2 (at least 2 packets, a gap at once, "
                              "max_ack_delay)")
    #: CUBIC's Reno-friendly estimate (Behaviour.cubic_reno_friendly: "acks", RFC 9438
    #: §4.3, or "time", RFC 8312 §4.2 over the minimum RTT) and where that comes from.
    cubic_reno_friendly: str = "acks"
    cubic_source: str = "not read: RFC 9438 §4.3 (W_est grows per acknowledged segment)"
    #: NewReno's multiplicative decrease (Behaviour.reno_beta) and where that comes from.
    reno_beta: float = 0.5
    reno_source: str = "not read: RFC 9002 §7.3.2 (kLossReductionFactor 0.5)"
    ciphers: tuple[str, ...] = ("aes-ni",)
    flow_control: bool = True
    socket_buffers: bool = True
    qlog: bool = False
    #: Slowest plausible goodput here, Mbit/s: sets the hang timeout.
    min_goodput_mbps: float = 50.0
    #: Workloads its peer runs: "bulk" (one transfer), "requests" (N requests over
    #: C connections × K streams), "handshakes" (a new connection per request).
    workloads: tuple[str, ...] = ("bulk",)
    #: Slowest plausible request and new-connection rates here (per second, any
    #: concurrency): with the bytes they set the hang timeout of request runs.
    min_requests_per_s: float = 200.0
    min_handshakes_per_s: float = 20.0
    #: Extra environment for the peer processes.
    env: tuple[tuple[str, str], ...] = ()
    #: Debian packages the build needs.
    apt: tuple[str, ...] = ()
    notes: str = ""
    #: Whether the server exits by itself after one connection (``--once``); wrapped
    #: tools don't, and the harness stops them once the client is done.
    server_exits: bool = True
    #: Extra arguments only the client or server gets.
    client_args: tuple[str, ...] = ()
    server_args: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def argv(self, build_dir: Path, peers_dir: Path) -> list[str]:
        return [part.format(build=build_dir, peers=peers_dir) for part in self.command]

    def can_talk_to(self, server: Stack) -> str | None:
        """None when this client can talk to ``server``, else the reason it cannot."""
        if self.app != server.app:
            return (f"{self.name} speaks {self.app}, {server.name} speaks {server.app}: "
                    "no common application protocol")
        return None


_PYQUIC = ("{build}/pyenv/bin/python", "{peers}/pyquic/peer.py")
_TCP_PEER = ("{build}/bin/tcp-tls-peer",)
#: Kernel TCP's own behaviour, for the three TCP stacks (Linux 6.x, net/ipv4/).
_TCP_FACTS: dict[str, Any] = dict(
    transport="tcp", build="cc", source="tcp-tls", apt=("gcc", "libssl-dev"),
    max_udp_payload_bytes=65483, default_udp_payload_bytes=1448, payload_flag=False,
    gso="switch", gro="switch", ccs=("cubic", "bbr", "reno"), default_cc="cubic",
    flow_control=False, socket_buffers=False, min_goodput_mbps=100.0,
    pacing=False,
    pacing_source="Linux TCP paces only with sch_fq or for a controller that asks for it "
                  "(tcp_needs_internal_pacing: BBR); CUBIC sends what cwnd allows, in TSO "
                  "skbs sized by tcp_tso_autosize (about 1 ms of the rate, at most 64 KiB)",
    ack_threshold_fixed=False, ack_floor_packets=2.0, ack_timer_ms=40.0,
    immediate_ack_on_gap=True,
    ack_threshold_source="net/ipv4/tcp_input.c __tcp_ack_snd_check: an ACK once more than "
                         "one full-sized segment (rcv_mss) is unacknowledged and the window's "
                         "right edge moves, else tcp_cleanup_rbuf's window update once the "
                         "reader could double the window: the threshold follows the window",
    ack_policy_source="net/ipv4/tcp_input.c: out-of-order data is ACKed at once "
                      "(tcp_data_queue → tcp_enter_quickack_mode, a duplicate ACK with SACK "
                      "blocks); the delayed-ACK timer is at least TCP_DELACK_MIN (40 ms)",
    cubic_reno_friendly="acks",
    cubic_source="net/ipv4/tcp_cubic.c bictcp_update: tcp_friendliness grows the Reno "
                 "estimate by acknowledged packets (β = 717/1024), fast convergence on")

_H3WRAP = ("{build}/pyenv/bin/python", "{peers}/h3wrap/wrap.py")

STACKS: dict[str, Stack] = {s.name: s for s in (
    Stack(
        name="quic-go", origin="Go module proxy: github.com/quic-go/quic-go v0.65.0",
        build="go", source="quic-go", command=("{build}/bin/quic-go-peer",),
        version="quic-go v0.65.0", max_udp_payload_bytes=1452, default_udp_payload_bytes=1452,
        gso="switch", gro="off", ccs=("reno",), default_cc="reno", ciphers=("aes-ni",),
        qlog=True, min_goodput_mbps=200.0, workloads=("bulk", "requests", "handshakes"),
        reno_beta=0.7,
        reno_source="quic-go v0.65.0 internal/ackhandler/sent_packet_handler.go: "
                    "NewCubicSender(..., true /* use Reno */); internal/congestion/"
                    "cubic_sender.go: renoBeta = 0.7, +1 datagram per window acknowledged "
                    "(its qlog here: cwnd 15474 → 10831 B on a loss, +1441 B a round). "
                    "Runs recorded before 2026-11-26 say cc=cubic: it was Reno all along",
        pacing_source="quic-go: the sent-packet handler answers SendPacingLimited until the pacer "
                      "has budget (internal/congestion/pacer.go)",
        pacing_burst=(2.0, 10, 0, 1.0),
        pacing_burst_source="quic-go internal/congestion/pacer.go: maxBurstSize is (MinPacingDelay "
                            "+ TimerGranularity = 2 ms) of the adjusted bandwidth (1.25 × cwnd / "
                            "RTT), at least maxBurstSizePackets = 10 datagrams; TimeUntilSend "
                            "waits at least MinPacingDelay = 1 ms (internal/protocol/params.go)",
        fc_window_bytes=512 * 1024,
        fc_window_source="quic-go internal/protocol/params.go: DefaultInitialMaxStreamData = "
                         "512 KiB (auto-tuned up to 6 MiB, which is not modelled); measured: at "
                         "+10 ms with 4 MiB buffers quic-go moved 318-361 Mbit/s with no drops "
                         "(fresh-calibration relay row, 2026-11-24), 0.41-0.52 MB per RTT, so the "
                         "window stayed near its initial size in these runs",
        notes="1452 B packet cap; GSO via QUIC_GO_DISABLE_GSO; no GRO; Reno only "
              "(its CUBIC sender in Reno mode, β = 0.7)"),
    Stack(
        name="quinn", origin="crates.io: quinn 0.11.12 (rustls/ring)",
        build="cargo", source="quinn", command=("{peers}/quinn/target/release/quinn-peer",),
        version="quinn 0.11.12", default_udp_payload_bytes=1452,
        gso="switch", gro="on", gso_max_payload_bytes=6500, ccs=("cubic", "reno", "bbr"),
        ciphers=("aes-ni", "chacha20"), min_goodput_mbps=200.0, qlog=True,
        pacing_source="quinn-proto: poll_transmit waits on Pacer::delay, a token bucket at 1.25 × "
                      "cwnd / RTT (connection/pacing.rs); no switch",
        pacing_burst=(1.6, 10, 256, 1.0),
        cubic_reno_friendly="time-srtt",
        cubic_source="quinn-proto 0.11.19 congestion/cubic.rs: w_est(t, rtt) = β·W_max + "
                     "3(1−β)/(1+β)·t/rtt (RFC 8312 eq. 4) with rtt = the smoothed RTT "
                     "(RttEstimator::get), t since the recovery start; per acknowledged "
                     "packet cwnd grows by at most one MTU (cwnd_inc)",
        pacing_burst_source="quinn-proto connection/pacing.rs: the bucket holds the window × "
                            "BURST_INTERVAL (2 ms) / RTT, i.e. 1.6 ms of the 1.25 × cwnd / RTT "
                            "rate, clamped to MIN_BURST_SIZE 10 … MAX_BURST_SIZE 256 datagrams; "
                            "the 2 ms is chosen because 'framework timers might have 1ms "
                            "precision' (tokio's timer wheel ticks in 1 ms)",
        fc_window_bytes=1_250_000,
        fc_window_source="quinn-proto TransportConfig::default(): stream_receive_window = "
                         "STREAM_RWND = MAX_STREAM_BANDWIDTH (12 500 000 B/s) / 1000 × "
                         "EXPECTED_RTT (100 ms) = 1 250 000 B; receive_window VarInt::MAX; the "
                         "peer keeps them unless --stream-window / --conn-window are given",
        notes="jumbo needs max_udp_payload_size + min_mtu; GSO batches > 64 KiB above "
              "~6.5 KB packets fail silently; quinn-udp always enables GRO"),
    Stack(
        name="s2n-quic", origin="crates.io: s2n-quic 1.91.0 (s2n-tls/aws-lc)",
        build="cargo", source="s2n-quic",
        command=("{peers}/s2n-quic/target/release/s2n-quic-peer",),
        version="s2n-quic 1.91.0", default_udp_payload_bytes=1472,
        gso="switch", gro="switch", ccs=("cubic", "bbr"), ciphers=("aes-ni",),
        apt=("cmake",), min_goodput_mbps=200.0, pacing=False,
        pacing_source="s2n-quic-core recovery/pacing.rs: paces only at a smoothed RTT of 2 ms "
                      "or more (MINIMUM_PACING_RTT); the veth path is ~0.07 ms, so here it "
                      "sends back to back (the +10 ms cells would pace)",
        ack_floor_packets=10.0,
        ack_policy_source="s2n-quic-transport 0.91 ack/ack_manager.rs on_processed_packet: an "
                          "ACK once 10 ack-eliciting packets arrived since the last one "
                          "(packet_tolerance = 10; the delayed-ACK draft is not supported), at "
                          "once for a packet below the largest or after a gap, else after "
                          "max_ack_delay (25 ms); it sends out ACKs after a receive batch",
        cubic_reno_friendly="time",
        cubic_source="s2n-quic-core 0.91 recovery/cubic.rs: w_est(t, rtt) = β·W_max + "
                     "3(1−β)/(1+β)·t/rtt (RFC 8312 eq. 4) with rtt = min_rtt, t since "
                     "congestion avoidance began; an ACK raises cwnd by at most half the "
                     "bytes it acknowledges (as Linux)",
        notes="MTU set as IP MTU (payload + 28)"),
    Stack(
        name="aioquic", origin="PyPI: aioquic 1.7.2",
        build="pyvenv", source="pyquic", command=(*_PYQUIC, "--impl=aioquic"),
        version="aioquic 1.7.2", default_udp_payload_bytes=1200,
        gso="off", gro="off", ccs=("reno", "cubic"), default_cc="reno",
        ciphers=("aes-ni", "chacha20"), qlog=True, min_goodput_mbps=10.0,
        extra={"pip": ("aioquic==1.7.2",)},
        ack_threshold_fixed=True, ack_timer_ms=1.0, immediate_ack_on_gap=False,
        ack_threshold_source="aioquic 1.7.2 quic/connection.py: no packet count and no "
                             "ACK_FREQUENCY; its ACKs come from the timer (below), so the "
                             "measured packets per ACK stand whatever the window",
        ack_policy_source="aioquic 1.7.2 quic/connection.py receive_datagram: an "
                          "ack-eliciting packet sets ack_at = now + K_GRANULARITY (1 ms) "
                          "unless one is pending, and _write_application sends the ACK once "
                          "ack_at has passed; no immediate ACK for a gap (it advertises "
                          "max_ack_delay 25 ms)",
        pacing_source="aioquic: _write_application stops at QuicPacketPacer.next_send_time "
                      "(quic/recovery.py)",
        notes="pure Python; no GSO/GRO; no PMTUD (1200 B unless told)"),
    Stack(
        name="qh3", origin="PyPI: qh3 2.1.0 (aioquic fork, Rust TLS)",
        build="pyvenv", source="pyquic", command=(*_PYQUIC, "--impl=qh3"),
        version="qh3 2.1.0", max_udp_payload_bytes=1408, default_udp_payload_bytes=1280,
        gso="off", gro="off", ccs=("reno",), default_cc="reno",
        ciphers=("aes-ni", "chacha20"), min_goodput_mbps=10.0,
        extra={"pip": ("qh3==2.1.0",)},
        pacing_source="qh3: aioquic's _pacing_at logic, the pacer in its Rust core",
        notes="aioquic's API; packets capped near 1408 B; no GSO/GRO"),
    Stack(
        name="xnet-quic", origin="Go module proxy: golang.org/x/net v0.56.0 (quic)",
        build="go", source="xnet-quic", command=("{build}/bin/xnet-quic-peer",),
        version="golang.org/x/net/quic v0.56.0", max_udp_payload_bytes=1200,
        default_udp_payload_bytes=1200, gso="off", gro="off", ccs=("reno",),
        default_cc="reno", ciphers=("aes-ni",), min_goodput_mbps=50.0, payload_flag=False,
        workloads=("bulk", "requests", "handshakes"),
        pacing_source="golang.org/x/net/quic: lossState.sendLimit returns ccPaced until "
                      "pacerState.canSend (quic/loss.go)",
        fc_window_bytes=1 << 20,
        fc_window_source="golang.org/x/net/quic config.go: maxStreamReadBufferSize and "
                         "maxConnReadBufferSize default to 1 MiB (the read buffer is the "
                         "window); the peer keeps them unless --stream-window / --conn-window",
        ack_threshold_fixed=True,
        ack_threshold_source="golang.org/x/net/quic acks.go mustAckImmediately: 2 "
                             "ack-eliciting packets for the first 100, then 10, else the "
                             "max_ack_delay timer (25 ms less 1 ms granularity); it sends no "
                             "ACK_FREQUENCY frames and reads none",
        ack_policy_source="golang.org/x/net/quic acks.go mustAckImmediately: at once for a "
                          "packet below the largest or after a gap (RFC 9000 §13.2.1); the "
                          "count is ack_threshold_fixed's",
        notes="1200 B packets, NewReno, no statistics API, no GSO/GRO"),
    Stack(
        name="quiche", origin="crates.io: quiche 0.30.0 (BoringSSL; needs libclang-dev)",
        build="cargo", source="quiche", command=("{peers}/quiche/target/release/quiche-peer",),
        version="quiche 0.30.0", default_udp_payload_bytes=1472, gso="switch", gro="switch",
        ccs=("cubic", "reno", "bbr"), ciphers=("aes-ni",), apt=("libclang-dev", "cmake"),
        min_goodput_mbps=100.0, pacing=False, qlog=True,
        fc_window_bytes=16 << 20,
        fc_window_source="peers/quiche/src/main.rs config(): max stream window 16 MiB, "
                         "connection window 24 MiB unless --stream-window / --conn-window",
        pacing_source="peers/quiche: quiche only stamps SendInfo.at; the peer sends each "
                      "GSO batch at once (Config::enable_pacing(false))",
        notes="sans-I/O: the peer does GSO (UDP_SEGMENT) and GRO itself; pacing off"),
    Stack(
        name="msquic", origin="crates.io: msquic 2.5.1-beta (builds the C library with cmake)",
        build="cargo", source="msquic", command=("{peers}/msquic/target/release/msquic-peer",),
        version="msquic 2.5.1-beta", max_udp_payload_bytes=1472, default_udp_payload_bytes=1472,
        gso="on", gro="on", ccs=("cubic", "bbr"), ciphers=("aes-ni",), flow_control=True,
        apt=("cmake", "libssl-dev"), min_goodput_mbps=200.0,
        env=(("LD_LIBRARY_PATH", "{peers}/msquic/target/release"),),
        extra={"copy_libs": "target/release/build/msquic-*/out/**/libmsquic.so*"},
        pacing=False, pacing_source="MsQuic: PacingEnabled defaults to TRUE but cubic.c paces only"
                                    " at a smoothed RTT of QUIC_MIN_PACING_RTT (1 ms) or more; the"
                                    " veth path is ~0.07 ms, so here it sends back to back (the "
                                    "+10 ms cells would pace)",
        notes="packets stay ≤ 1500 B IP MTU; GSO/GRO always on; the .so needs "
              "LD_LIBRARY_PATH; the client skips certificate validation"),
    Stack(
        name="ngtcp2", origin="Debian: ngtcp2-server/ngtcp2-client 0.12.1 (GnuTLS examples)",
        build="debian", source="h3wrap",
        command=(*_H3WRAP, "--tool=ngtcp2"), version="ngtcp2 0.12.1 (Debian)", app="h3",
        default_udp_payload_bytes=1452, gso="on", gro="off",
        ccs=("cubic", "reno", "bbr"), ciphers=("aes-ni",), qlog=True,
        apt=("ngtcp2-server", "ngtcp2-client"), server_exits=False, min_goodput_mbps=50.0,
        client_args=("--verify=true",),
        pacing_source="ngtcp2: the library refuses to write before its pacing time "
                      "(conn_pacing_pkt_tx_allowed; every congestion controller paces since "
                      "2022)",
        notes="wrapped example gtlsserver/gtlsclient, HTTP/3 (GET /<N>); goodput from the "
              "client's wall time"),
    Stack(
        name="tquic", origin="crates.io: tquic_tools 1.6.0 (cargo install)",
        build="cargo-install", source="h3wrap",
        command=(*_H3WRAP, "--tool=tquic", "--tquic-bin={build}/tquic/bin"),
        version="tquic_tools 1.6.0", app="h3", max_udp_payload_bytes=1200,
        default_udp_payload_bytes=1200, gso="off", gro="off", ccs=("cubic", "bbr"),
        ciphers=("aes-ni",), flow_control=False, server_exits=False, min_goodput_mbps=50.0,
        client_args=("--verify=true",),
        extra={"crate": "tquic_tools@1.6.0", "outputs": ("tquic/bin/tquic_client",)},
        pacing_source="tquic: Config::enable_pacing, default true (src/lib.rs)",
        notes="wrapped tquic_server/tquic_client, HTTP/3 (file of N bytes); ~1200 B packets"),
    Stack(
        name="tcp+tls", origin="Debian: OpenSSL 3.0 (libssl-dev) under quiclab's C peer (gcc)",
        command=(*_TCP_PEER, "--tls=true"), app="https",
        version="kernel TCP + OpenSSL 3.0 (TLS 1.3)", ciphers=("aes-ni", "aes-sw", "chacha20"),
        notes="HTTP/1.1 GET over TLS 1.3 in user space (OpenSSL's record layer, 16 KiB "
              "records unless tls_record_bytes); aes-sw masks AES-NI with OPENSSL_ia32cap",
        **_TCP_FACTS),
    Stack(
        name="tcp", origin="Debian: quiclab's C peer (gcc), no TLS",
        command=(*_TCP_PEER, "--tls=false"), app="http", tls=False,
        version="kernel TCP (plain, as iperf3)", ciphers=(),
        notes="plain HTTP/1.1 over kernel TCP, 128 KiB writes and reads (iperf3's TCP "
              "block): seed 001 Table 2's TCP column",
        **_TCP_FACTS),
    Stack(
        name="tcp+ktls", origin="Debian: OpenSSL 3.0 with SSL_OP_ENABLE_KTLS (needs the "
                                "kernel's CONFIG_TLS)",
        command=(*_TCP_PEER, "--tls=true", "--ktls=true"), app="https", ktls=True,
        version="kernel TCP + kernel TLS (OpenSSL 3.0 handshake)",
        ciphers=("aes-ni", "chacha20"),
        notes="TLS records built by the kernel (TCP_ULP \"tls\"); refused where the kernel "
              "has no TLS upper-layer protocol",
        **_TCP_FACTS),
)}


def get(name: str, stacks: dict[str, Stack] | None = None) -> Stack:
    """The stack called ``name``; raises TestbedError naming the known ones."""
    table = STACKS if stacks is None else stacks
    if name not in table:
        raise TestbedError(f"stack={name!r} is unknown: allowed {', '.join(sorted(table))}")
    return table[name]


def select(names: list[str] | None, stacks: dict[str, Stack] | None = None) -> list[Stack]:
    table = STACKS if stacks is None else stacks
    if not names:
        return list(table.values())
    return [get(n, table) for n in names]


def coverage_table(stacks: dict[str, Stack] | None = None) -> list[dict[str, Any]]:
    """Stack × knob support as rows (for the report and ``quiclab testbed stacks``)."""
    table = STACKS if stacks is None else stacks
    rows = []
    for s in table.values():
        jumbo = (f"no (cap {s.max_udp_payload_bytes} B)"
                 if s.max_udp_payload_bytes < 8972 else "yes")
        rows.append({
            "stack": s.name, "app": s.app, "max_udp_payload": s.max_udp_payload_bytes,
            "jumbo": jumbo, "gso": s.gso, "gro": s.gro, "cc": "/".join(s.ccs),
            "cipher": "/".join(s.ciphers), "flow_control": s.flow_control,
            "socket_buffers": s.socket_buffers, "qlog": s.qlog,
            "workloads": "/".join(s.workloads)})
    return rows
