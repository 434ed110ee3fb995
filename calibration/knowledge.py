"""What is known about each implementation before fitting: facts with their source.

These are the inputs the raw data cannot give (packet sizes a stack picks,
offload support, threads, application protocols, ACK behaviour) and the
published anchors that identify cost levels for implementations the
QIR-10G subset does not profile. Every entry says where it comes from; an
``assumed:`` source says why the value was chosen. The calibration turns them
into :class:`~quiclab.models.costmodel.CostModel` files; nothing here is a
fitted number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Sources used repeatedly.
QIR = "dataset tumi8-quic-10g-paper (QIR-10G), baseline-optimized wire sizes (ethtool tx bytes/frames)"
S000 = "seed 000 (König et al. 2025)"
S001 = "seed 001 (Mukherjee et al. 2025)"
S002 = "seed 002 (Kempf et al. 2024)"
S003 = "seed 003 (TQUIC benchmark)"
S004 = "seed 004 (LiteSpeed benchmark)"
#: quicly's client ACKs once per receive call: every datagram without GRO, every GRO
#: batch with it.
QUICLY_ACKS = (S001 + " Table 1: only the client differs between 'quicly (no opt.)' and "
               "'quicly' (§2.2: GRO), yet the sender's IO share falls from 60.7 % to 21.3 % "
               "and its crypto per bit stays within 7 % (the sender is as busy in both); the "
               "client's ACKs are the only sender I/O the client drives: one per datagram "
               "read without GRO (IO 60 %, crypto 27 % in the model), one per GRO batch with it")


@dataclass(frozen=True)
class Fact:
    value: Any
    source: str


@dataclass(frozen=True)
class Implementation:
    """Static knowledge about one QUIC implementation (or the TCP+TLS reference)."""

    name: str
    language: str
    tls_library: str
    udp_payload_bytes: Fact  # default UDP payload on a 1500-byte MTU path
    max_recv_udp_payload_bytes: Fact
    overhead_bytes: Fact  # UDP payload bytes that are not goodput (headers, tag, frames)
    supports_gso: Fact
    supports_gro: Fact
    apps: Fact
    sender_cores: Fact = field(default_factory=lambda: Fact(1.0, "assumed: single-threaded event loop"))
    receiver_cores: Fact = field(default_factory=lambda: Fact(1.0, "assumed: single-threaded event loop"))
    max_udp_payload_bytes: Fact = field(default_factory=lambda: Fact(0, "assumed: uses the path MTU when configured for jumbo frames (seed 000 §VI-D)"))
    immediate_ack_on_gap: Fact = field(default_factory=lambda: Fact(True, "assumed: RFC 9000 §13.2.1 — an immediate ACK for the packet that opens a gap and for one below the largest"))
    ack_every_packets: Fact | None = None  # None: measured from the dataset
    ack_per_receive_call: Fact = field(default_factory=lambda: Fact(False, "assumed: ACKs by count (ack_every_packets), whatever a receive call returns"))
    fc_window_bytes: Fact = field(default_factory=lambda: Fact(16 * 2**20, "assumed: a 16 MiB connection window, large enough not to limit LAN transfers; no seed states it"))
    pacing: Fact = field(default_factory=lambda: Fact(True, "assumed: RFC 9002 §7.7 recommends pacing"))
    ccs: tuple[str, ...] = ("cubic", "reno")
    #: Build/version variants: name → (description, source).
    variants: dict[str, Fact] = field(default_factory=dict)
    #: Dataset name in the QIR-10G catalog (runs.server_impl), if profiled there.
    in_dataset: bool = False
    notes: tuple[str, ...] = ()


GENERATOR_2025 = "2025 version driven by the {} traffic generator (app=perf), König et al. 2025 §VI-B"

IMPLEMENTATIONS: dict[str, Implementation] = {
    "lsquic": Implementation(
        name="lsquic", language="C", tls_library="BoringSSL",
        immediate_ack_on_gap=Fact(True, "source: lsquic src/liblsquic/lsquic_full_conn_ietf.c process_regular_packet / try_queueing_ack_app: WM_MAX_GAP queues an ACK for the packet that opens a gap; a packet below the largest only after an ACK that reported a gap (the RFC 9000 §13.2.1 rule in its source: an immediate ACK for the packet that opens a gap and for one below the largest)"),
        udp_payload_bytes=Fact(1472, QIR + ": 1517.6-byte frames → 1472-byte UDP payload"),
        max_recv_udp_payload_bytes=Fact(65527, QIR + ": other senders reach their full size"),
        overhead_bytes=Fact(37, QIR + ": 1472 − 1434.6 goodput bytes per packet"),
        supports_gso=Fact(False, S002 + " §4.5: only MsQuic supports offloading (Dec 2023); "
                          + S000 + " §VI-C: lsquic does not support GSO/GRO"),
        supports_gro=Fact(False, S002 + " §4.5"),
        apps=Fact(("perf", "hq", "h3"), S000 + " Table III (integrated generator), QIR h3"),
        variants={
            "march": Fact("built with -march for the host (LSQUIC*)", S002 + " §4.6"),
            "2025": Fact("2025 version", S000 + " §VI-G Fig. 9b"),
            "quicperf": Fact(GENERATOR_2025.format("quicperf"), S000),
            "integrated": Fact(GENERATOR_2025.format("integrated lsquic"), S000),
        },
        in_dataset=True),
    "quiche": Implementation(
        name="quiche", language="Rust", tls_library="BoringSSL",
        udp_payload_bytes=Fact(1350, QIR + ": 1396-byte frames → 1350-byte UDP payload"),
        max_recv_udp_payload_bytes=Fact(1350, QIR + ": lsquic and picoquic senders capped at 1348–1350 bytes towards quiche"),
        overhead_bytes=Fact(54, QIR + ": 1350 − 1296.3 goodput bytes per packet"),
        supports_gso=Fact(False, S002 + " §4.5 (2023 builds)"),
        supports_gro=Fact(False, S002 + " §4.5 (2023 builds)"),
        apps=Fact(("perf", "hq", "h3"), S000 + " Table III (quicperf), QIR h3"),
        immediate_ack_on_gap=Fact(False, "dataset: quiche clients' ACK count does not rise with receive-buffer drops (buffer experiment, 0.45–0.51 M ACKs at every size)"),
        variants={
            "march": Fact("built with -march for the host (quiche*)", S002 + " §4.6"),
            "2025": Fact("2025 version with GSO/GRO", S000 + " §VI-C"),
            "quicperf": Fact(GENERATOR_2025.format("quicperf"), S000),
        },
        in_dataset=True),
    "ngtcp2": Implementation(
        name="ngtcp2", language="C", tls_library="quictls/OpenSSL",
        immediate_ack_on_gap=Fact(True, "source: ngtcp2 lib/ngtcp2_conn.c pktns_commit_recv_pkt_num calls ngtcp2_acktr_immediate_ack for a packet below the largest ack-eliciting one and for one past a new gap (the RFC 9000 §13.2.1 rule in its source: an immediate ACK for the packet that opens a gap and for one below the largest)"),
        udp_payload_bytes=Fact(1452, "assumed: ngtcp2 example clients use 1452-byte UDP payloads on Ethernet"),
        max_recv_udp_payload_bytes=Fact(65527, "assumed: accepts full-size datagrams"),
        overhead_bytes=Fact(40, "assumed: short header + AEAD tag + STREAM frame ≈ 40 bytes"),
        supports_gso=Fact(True, S000 + " §VI-C: ngtcp2 gains 1.2 Gbit/s with GSO/GRO"),
        supports_gro=Fact(True, S000 + " §VI-C"),
        apps=Fact(("perf", "hq", "h3"), S000 + " Table III (quicperf), QIR h3"),
        fc_window_bytes=Fact(16 * 2**20, "source: ngtcp2's example client (examples/client.cc) opens a 6 MiB stream window and auto-tunes it up to max_stream_window = 16 MiB (connection: 15 MiB up to 24 MiB), so one stream is held to 16 MiB; quicperf's own setting (seed 000) is not in the stored sources"),
        variants={
            "2025": Fact("2025 version", S000),
            "quicperf": Fact(GENERATOR_2025.format("quicperf"), S000),
        }),
    "picoquic": Implementation(
        name="picoquic", language="C", tls_library="picotls (OpenSSL)",
        immediate_ack_on_gap=Fact(True, "source: picoquic sacks.c picoquic_record_pn_received sets out_of_order_received for a packet past a gap or below the highest ACKed, and frames.c picoquic_is_ack_needed_in_ctx ACKs at once on it (the RFC 9000 §13.2.1 rule in its source: an immediate ACK for the packet that opens a gap and for one below the largest)"),
        udp_payload_bytes=Fact(1440, QIR + ": 1486-byte frames → 1440-byte UDP payload"),
        max_recv_udp_payload_bytes=Fact(1440, QIR + ": lsquic sends 1440-byte payloads to picoquic"),
        overhead_bytes=Fact(39, QIR + ": 1440 − 1401 goodput bytes per packet"),
        supports_gso=Fact(True, QIR + ": 15–19 NIC frames per send call from picoquic servers"),
        supports_gro=Fact(False, "assumed: GRO not used by the 2023 picoquicdemo client (the QIR clients' NIC frames equal received datagrams)"),
        apps=Fact(("perf", "hq", "h3"), S000 + " Table III, QIR h3"),
        variants={
            "2025": Fact("2025 version", S000 + " §VI-G Fig. 9b"),
            "quicperf": Fact(GENERATOR_2025.format("quicperf"), S000),
            "integrated": Fact(GENERATOR_2025.format("integrated picoquic"), S000),
            "dpdk": Fact("kernel-bypass I/O with DPDK", S001 + " §2.1, Table 1"),
            "fusion": Fact("Fusion AES-GCM engine", S001 + " Table 1"),
            "dpdk-fusion": Fact("DPDK and Fusion", S001 + " Table 1"),
        }),
    "quic-go": Implementation(
        name="quic-go", language="Go", tls_library="Go crypto/tls",
        immediate_ack_on_gap=Fact(True, "source: quic-go internal/ackhandler/received_packet_tracker.go: isMissing and hasNewMissingPackets queue an ACK once per new gap and for a packet the last ACK reported missing (the RFC 9000 §13.2.1 rule in its source: an immediate ACK for the packet that opens a gap and for one below the largest)"),
        udp_payload_bytes=Fact(1402, QIR + ": 1448-byte frames → 1402-byte UDP payload"),
        max_recv_udp_payload_bytes=Fact(1452, QIR + ": lsquic sends 1452-byte payloads to quic-go; testbed fact: quic-go caps packets at 1452 bytes"),
        overhead_bytes=Fact(37, QIR + ": 1402 − 1365 goodput bytes per packet"),
        supports_gso=Fact(False, QIR + ": one NIC frame per send call in the 2023 build"),
        supports_gro=Fact(False, "assumed: as GSO"),
        apps=Fact(("perf", "hq", "h3"), "QIR h3"),
        sender_cores=Fact(1.0, "assumed; " + S000 + " Fig. 7: quic-go spreads over ~4 cores without gaining goodput, so its extra cores do not add packet rate"),
        variants={"2025": Fact("2025 version", S000)}),
    "mvfst": Implementation(
        name="mvfst", language="C++", tls_library="fizz",
        immediate_ack_on_gap=Fact(True, "source: mvfst quic/state/QuicStateFunctions.cpp updateAckSendStateOnRecvPacket: ACK at once when the packet is not the next expected one (reorder threshold 0; the RFC 9000 §13.2.1 rule in its source: an immediate ACK for the packet that opens a gap and for one below the largest)"),
        udp_payload_bytes=Fact(1232, QIR + ": 1278-byte frames → 1232-byte UDP payload"),
        max_recv_udp_payload_bytes=Fact(1444, QIR + ": lsquic sends 1444-byte payloads to mvfst"),
        overhead_bytes=Fact(35, QIR + ": 1232 − 1197 goodput bytes per packet"),
        supports_gso=Fact(False, QIR + ": one NIC frame per send call in the QIR build"),
        supports_gro=Fact(False, "assumed: as GSO in the QIR build"),
        apps=Fact(("perf", "hq", "h3"), "QIR h3; " + S001 + " tperf"),
        variants={"gso": Fact("GSO/GRO enabled, tperf", S001 + " §5: baseline mvfst supports GSO and GRO")}),
    "aioquic": Implementation(
        name="aioquic", language="Python", tls_library="cryptography (OpenSSL)",
        immediate_ack_on_gap=Fact(False, "source: aioquic src/aioquic/quic/connection.py receive_datagram: every ACK is scheduled 1 ms (K_GRANULARITY) after the first unacknowledged ack-eliciting packet; no rule for gaps"),
        udp_payload_bytes=Fact(1060, QIR + ": 1106-byte frames → 1060-byte UDP payload"),
        max_recv_udp_payload_bytes=Fact(65527, QIR + ": lsquic sends 1471-byte payloads to aioquic"),
        overhead_bytes=Fact(36, QIR + ": 1060 − 1024 goodput bytes per packet"),
        supports_gso=Fact(False, "assumed: pure-Python asyncio datagram transport"),
        supports_gro=Fact(False, "assumed: pure-Python asyncio datagram transport"),
        apps=Fact(("perf", "hq", "h3"), "QIR h3"),
        pacing=Fact(True, "assumed")),
    "msquic": Implementation(
        name="msquic", language="C", tls_library="OpenSSL (quictls)",
        immediate_ack_on_gap=Fact(True, "source: msquic src/core/ack_tracker.c QuicAckTrackerAckPacket: an immediate ACK when a new largest packet number lies past a gap (reordering threshold 1); a reordered arrival does not trigger one, which the model, like the RFC, does"),
        udp_payload_bytes=Fact(1472, "testbed fact (testbed/stacks.py): MsQuic packets stay at a 1500-byte IP MTU"),
        max_recv_udp_payload_bytes=Fact(1472, "testbed fact (testbed/stacks.py)"),
        overhead_bytes=Fact(40, "assumed: short header + AEAD tag + STREAM frame"),
        supports_gso=Fact(True, S002 + " §4.5: MsQuic supports GSO/GRO and batching"),
        supports_gro=Fact(True, S002 + " §4.5"),
        apps=Fact(("perf", "hq"), S002 + " §3.1: MsQuic has no HTTP/3; hq-interop is used"),
        sender_cores=Fact(2.0, S001 + " §2.1: MsQuic pipelines protocol processing and socket I/O on two threads"),
        receiver_cores=Fact(2.0, S001 + " §2.1"),
        variants={}),
    "quicly": Implementation(
        name="quicly", language="C", tls_library="picotls (OpenSSL)",
        udp_payload_bytes=Fact(1472, "assumed: full 1500-byte MTU"),
        max_recv_udp_payload_bytes=Fact(65527, "assumed"),
        overhead_bytes=Fact(40, "assumed"),
        supports_gso=Fact(True, S001 + " §2.2: quicly uses GSO at the server"),
        supports_gro=Fact(True, S001 + " §2.2: the optimised quicly client uses GRO"),
        apps=Fact(("perf",), S001 + " §4: qperf"),
        ack_every_packets=Fact(1.0, QUICLY_ACKS),
        ack_per_receive_call=Fact(True, QUICLY_ACKS),
        variants={"noopt": Fact("client without GRO", S001 + " Table 1 'quicly (no opt.)'")}),
    "tquic": Implementation(
        name="tquic", language="Rust", tls_library="BoringSSL",
        immediate_ack_on_gap=Fact(False, "source: tquic src/connection/connection.rs try_schedule_ack_frame: the largest received is updated before its gap check, so only a reordered arrival triggers an immediate ACK (none on a loss-only path; the model has no reordered-only mode)"),
        udp_payload_bytes=Fact(1350, S003 + ": the tests set max_udp_payload_size 1350"),
        max_recv_udp_payload_bytes=Fact(1350, S003),
        overhead_bytes=Fact(40, "assumed"),
        supports_gso=Fact(False, "assumed: not stated"),
        supports_gro=Fact(False, "assumed: not stated"),
        apps=Fact(("perf", "hq", "h3"), S003 + ": HTTP/3 server and client")),
    "tcp+tls": Implementation(
        name="tcp+tls", language="kernel TCP + user-space TLS (NGINX 1.18 / wget)",
        tls_library="OpenSSL (NGINX), GnuTLS (wget)",
        udp_payload_bytes=Fact(1448, "TCP MSS on a 1500-byte MTU with timestamps (the TCP "
                                     "model counts its own segments: calibration/tcp.py)"),
        max_recv_udp_payload_bytes=Fact(65527, "not applicable"),
        overhead_bytes=Fact(24, "TCP's headers beyond IP+UDP's 28 B: 52 − 28"),
        supports_gso=Fact(True, "TSO/GSO: the kernel sends 64 KiB super-segments (" + S002 + " §2.4)"),
        supports_gro=Fact(True, "GRO/LRO (" + S002 + " §2.4)"),
        apps=Fact(("perf", "hq", "h3"), "HTTP/1.1 over TLS; the app protocol field is ignored"),
        immediate_ack_on_gap=Fact(True, "RFC 5681 §4.2: a duplicate ACK at once for out-of-order data"),
        ack_every_packets=Fact(2.0, "RFC 1122: at least every second full segment"),
        ccs=("cubic", "reno", "bbr")),
    "tcp": Implementation(
        name="tcp", language="kernel TCP (iperf3)", tls_library="none",
        udp_payload_bytes=Fact(1448, "TCP MSS on a 1500-byte MTU with timestamps"),
        max_recv_udp_payload_bytes=Fact(65527, "not applicable"),
        overhead_bytes=Fact(24, "TCP's headers beyond IP+UDP's 28 B: 52 − 28"),
        supports_gso=Fact(True, "TSO/GSO (" + S001 + " Table 2 footnote: TCP GSO and GRO are "
                                "typically offloaded to the NIC)"),
        supports_gro=Fact(True, S001 + " Table 2 footnote"),
        apps=Fact(("perf", "hq", "h3"), "plain TCP bytes (iperf3); the app protocol field is ignored"),
        immediate_ack_on_gap=Fact(True, "RFC 5681 §4.2: a duplicate ACK at once for out-of-order data"),
        ack_every_packets=Fact(2.0, "RFC 1122: at least every second full segment"),
        ccs=("cubic", "reno", "bbr")),
}

#: Implementations that only appear as request servers in seeds 003/004.
REQUEST_SERVERS = {
    "quiche-g": "Google QUICHE (TQUIC's QUICHE-G), " + S003,
    "nginx-quic": "NGINX-QUIC, " + S003,
    "lsws": "LiteSpeed Web Server (lsquic), " + S004,
    "proto-quic": "Google proto-quic (gQUIC), " + S004,
    "caddy": "Caddy (quic-go), " + S004,
}


# --- Request and handshake workloads (seeds 003/004) ----------------------------------

#: Which bulk model gives each request server its packet-path structure
#: (per-packet, per-byte, system-call and crypto split, packet size); the cost
#: level is then fitted (``quiclab.calibration.requests``).
REQUEST_SERVER_BASES: dict[str, Fact] = {
    "lsws": Fact("lsquic", S004 + ": LiteSpeed Web Server is built on lsquic"),
    "caddy": Fact("quic-go", S004 + ": Caddy serves QUIC with quic-go"),
    "proto-quic": Fact("lsquic", "assumed: a C/C++ stack on BoringSSL without GSO has "
                                 "lsquic's cost structure; its level is fitted (seed 004)"),
    "quiche-g": Fact("lsquic", "assumed: as proto-quic (Google QUICHE, C++, BoringSSL); "
                               "level fitted (seed 003)"),
    "nginx-quic": Fact("lsquic", "assumed: a C stack (nginx's own QUIC code, OpenSSL-compatible "
                                 "TLS) with lsquic's cost structure; level fitted (seed 003)"),
}
#: Language and TLS library of the request servers, for the record.
REQUEST_SERVER_FACTS: dict[str, tuple[str, str]] = {
    "lsws": ("C", "BoringSSL"), "caddy": ("Go", "Go crypto/tls"),
    "proto-quic": ("C++", "BoringSSL"), "quiche-g": ("C++", "BoringSSL"),
    "nginx-quic": ("C", "OpenSSL-compatible (quictls/BoringSSL)"),
}
#: Build variants that exist only for the request benchmarks.
REQUEST_VARIANTS: dict[str, dict[str, Fact]] = {
    "quic-go": {"gquic": Fact("2018 gQUIC quic-go server benchmarked by LiteSpeed",
                              S004 + " Rounds 1–2 (server quic-go)")},
}
#: UDP payload of the request servers (packet size of their responses).
REQUEST_SERVER_PAYLOAD: dict[str, Fact] = {
    "proto-quic": Fact(1350, "assumed: gQUIC's default maximum packet size (1350 bytes)"),
    "quiche-g": Fact(1350, S003 + ": max_udp_payload_size 1350 in every test"),
    "nginx-quic": Fact(1350, S003 + ": max_udp_payload_size 1350 in every test"),
}
#: Threads a client uses for its requests (request cores of its receiver role).
CLIENT_THREADS: dict[str, Fact] = {
    "tquic": Fact(4.0, S003 + ": the TQUIC stress client runs several threads (--threads) "
                        "so that the single-threaded servers reach 100 % CPU; the count is "
                        "not stated, 4 assumed"),
}

#: Handshake cryptography (TLS 1.3 with X25519 and an ECDSA P-256 certificate, as
#: the testbed's certificate), measured with ``openssl speed -seconds 1..3
#: ecdhx25519 ecdsap256`` (OpenSSL 3.0.19) on the testbed host, an Intel Xeon
#: (Cascade Lake) at 2.5 GHz, 2026-11-22: the best of four runs; run-to-run
#: spread on this shared two-core VM about ±30 %. µs per operation.
HANDSHAKE_CRYPTO_US: dict[str, Fact] = {
    "x25519": Fact(40.1, "measured: openssl speed ecdhx25519, 24 914 op/s (best of 4)"),
    "ecdsa_p256_sign": Fact(26.1, "measured: openssl speed ecdsap256, 38 274 sign/s"),
    "ecdsa_p256_verify": Fact(77.6, "measured: openssl speed ecdsap256, 12 894 verify/s"),
}
#: The host those numbers were measured on (moved to a model's reference CPU by the CPU rule).
HANDSHAKE_CRYPTO_CPU = {"name": "testbed host Intel Xeon @ 2.50GHz", "vendor": "Intel",
                        "microarchitecture": "cascade-lake", "ghz": 2.5}
#: Relative interval of the measured handshake cryptography (run-to-run spread).
HANDSHAKE_CRYPTO_REL = 0.3
#: TLS and connection work of a handshake besides its public-key operations
#: (handshake messages, transcript hashes, about ten HKDF expansions, transport
#: parameters, connection IDs and state), in units of one data packet's protocol
#: work (ns_per_packet + ns_per_segment) of the same role. Assumed; ×/÷ 3.
HANDSHAKE_PROTOCOL_PACKETS = Fact(10.0, "assumed: the non-cryptographic handshake work equals "
                                        "the protocol work of ten data packets; ×/÷ 3")
#: One STREAM frame beyond the first in a packet, as a share of the role's
#: per-packet protocol work. Not identifiable from the seeds.
STREAM_FRAME_SHARE = Fact(0.1, "assumed: a STREAM frame header, stream lookup and "
                               "reassembly bookkeeping, a tenth of a data packet's protocol "
                               "work (ns_per_packet); not identifiable from the seeds, ×/÷ 3")

#: The request benchmarks' testbeds as Scenario fields; the reproduction specs
#: (experiments/repro-tquic-*.yaml, repro-litespeed-*.yaml) use the same values.
REQUEST_TESTBEDS: dict[str, dict[str, Any]] = {
    # Seed 003: one AMD EPYC 7K62 host, client and server on separate cores,
    # max_udp_payload_size 1350, HTTP/3. Connections and streams are not stated:
    # 100 connections with one request each in flight assumed.
    "003": {"cpu": "AMD EPYC 7K62", "app": "h3", "client": "tquic", "udp_payload_bytes": 1350,
            "connections": 100, "testbed": "tquic"},
    # Seed 004: two machines on a 10G link; the CPU is not stated — a Broadwell
    # server of the benchmark's time (the catalog's Xeon E5-2640 v4) is assumed.
    # gQUIC is approximated by the HTTP/3 application model, with gQUIC's 1350-byte
    # default packets. One lsquic http_client.
    "004": {"cpu": "Intel Xeon E5-2640 v4", "link_gbps": 10.0, "app": "h3",
            "client": "lsquic", "udp_payload_bytes": 1350, "testbed": "litespeed"},
}
