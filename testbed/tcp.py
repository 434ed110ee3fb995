"""Kernel TCP on the testbed: the TCP peers' knobs, and what a TCP run records.

The TCP peers (``tcp+tls``, ``tcp``, ``tcp+ktls``; ``peers/tcp-tls``) leave
segmentation, aggregation and checksums to the kernel, so their offloads are
the veths' own features, set per run with ``ethtool -K`` on both ends
(topology.py): ``tso`` (tcp-segmentation-offload), ``gso``
(generic-segmentation-offload), ``gro`` (generic-receive-offload, which on a
veth also switches the peer's NAPI path on), ``csum_offload`` (tx- and
rx-checksumming; the kernel turns TSO off without it). ``lro`` is refused:
veth has no large receive offload (``large-receive-offload: off [fixed]``).
The namespaces' ``net.ipv4.tcp_rmem``/``tcp_wmem`` (their largest autotuned
buffer) and ``tcp_congestion_control`` are per network namespace and set for
the run; the peers also ask for the controller with ``TCP_CONGESTION``.

What a TCP run records beyond the UDP stacks' collectors (``extra.tcp``):

- each peer's ``struct tcp_info`` just before close (what ``ss -ti`` prints:
  cwnd, MSS, RTT, retransmissions, delivery rate, segments in and out);
- each namespace's TCP MIB (``/proc/net/snmp`` ``Tcp`` and ``/proc/net/netstat``
  ``TcpExt``, the counters ``nstat`` reads; a fresh namespace starts at zero);
- the super-segments the kernel actually used: the sender's veth counts skbs
  (a TSO or GSO skb passes a veth whole when the device may segment it), so
  bytes per transmitted skb is the sender's super-segment, and the same on the
  receiver's veth after GRO;
- the TLS records each side wrote and read (the peer's OpenSSL message
  callback), its application calls, and its system calls (``perf stat``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quiclab.sim.scenario import Scenario
from quiclab.testbed.errors import TestbedError
from quiclab.testbed.stacks import Stack

#: IPv4 (20) + TCP (20) + timestamps option (12): the MSS is the MTU less these.
TCP_HEADER_BYTES = 52
#: Where the kernel lists its TCP upper-layer protocols (kernel TLS registers "tls").
ULP_FILE = Path("/proc/sys/net/ipv4/tcp_available_ulp")
#: TcpExt counters kept per side (the rest of /proc/net/netstat is not about TCP's data path).
TCPEXT_KEPT = (
    "DelayedACKs", "DelayedACKLocked", "DelayedACKLost", "TCPHPHits", "TCPPureAcks",
    "TCPHPAcks", "TCPSackRecovery", "TCPSACKReorder", "TCPTSReorder", "TCPLostRetransmit",
    "TCPFastRetrans", "TCPSlowStartRetrans", "TCPTimeouts", "TCPLossProbes",
    "TCPLossProbeRecovery", "TCPSackRecoveryFail", "TCPRcvCollapsed", "TCPDSACKRecv",
    "TCPDSACKOldSent", "TCPSpuriousRTOs", "TCPSackShifted", "TCPSackMerged",
    "TCPRcvCoalesce", "TCPOFOQueue", "TCPOFODrop", "TCPOFOMerge", "TCPAutoCorking",
    "TCPOrigDataSent", "TCPDelivered", "TCPAckCompressed", "TCPRcvQDrop",
    "TCPWantZeroWindowAdv", "TCPToZeroWindowAdv", "TCPFromZeroWindowAdv", "TCPBacklogCoalesce",
    "TCPHystartTrainDetect", "TCPHystartDelayDetect", "TCPRenoRecovery", "TCPMemoryPressures",
    "PruneCalled", "TCPAbortOnData", "TCPSpuriousRtxHostQueues",
)


def kernel_ulps(path: Path = ULP_FILE) -> list[str]:
    """The TCP upper-layer protocols this kernel offers (empty if it lists none)."""
    try:
        return path.read_text().split()
    except OSError:
        return []


def _refuse(field: str, value: Any, stack: Stack, why: str) -> TestbedError:
    shown = str(value).lower() if isinstance(value, bool) else value
    return TestbedError(f"{field}={shown} cannot be honoured by {stack.name}: {why}")


def resolve(config: Any, server: Stack, client: Stack, cores: dict[str, int] | None = None,
            peer_cores: dict[str, tuple[int, ...]] | None = None,
            restrict: bool = False) -> Any:
    """Peer flags and the values in effect for a run of two TCP peers (one line refuses
    what the kernel or the veth cannot do). ``config`` is a testbed RunConfig; ``cores``,
    ``peer_cores``, ``restrict``: the hosts' cores, as for config.resolve."""
    from quiclab.testbed.config import Resolved, pinning

    s: Scenario = config.scenario
    ex = config.explicit
    default = Scenario()
    for stack in (server, client):
        if stack.ktls and "tls" not in kernel_ulps():
            raise TestbedError(
                f"{stack.name} cannot run on this kernel: it offers no TLS upper-layer protocol "
                f"(net.ipv4.tcp_available_ulp = {' '.join(kernel_ulps()) or 'empty'}; "
                "kernel TLS needs CONFIG_TLS)")
    if s.rtt_ms or s.reorder_pct:
        name, value = ("rtt_ms", s.rtt_ms) if s.rtt_ms else ("reorder_pct", s.reorder_pct)
        raise _refuse(name, value, server, "the delay relay carries UDP datagrams only, and this "
                      "kernel has neither netem nor sch_fq to hold TCP segments")
    if s.workload != "bulk":
        raise _refuse("workload", s.workload, server, "its peer runs one bulk HTTP/1.1 GET")
    for name, why in (("udp_payload_bytes", "TCP's segment is the MTU less 52 B (MSS)"),
                      ("rcvbuf_bytes", "TCP's buffers are tcp_rmem_bytes and tcp_wmem_bytes"),
                      ("sndbuf_bytes", "TCP's buffers are tcp_rmem_bytes and tcp_wmem_bytes")):
        if name in ex and getattr(s, name) != getattr(default, name):
            raise _refuse(name, getattr(s, name), server, why)
    for knob in ("stream_window_bytes", "conn_window_bytes"):
        if config.knob(knob):
            raise _refuse(knob, config.knob(knob), server, "TCP's window is its receive buffer "
                          "(tcp_rmem_bytes)")
    if config.knob("qlog"):
        raise _refuse("qlog", True, server, "TCP writes no qlog")
    if "lro" in ex and s.lro:
        raise _refuse("lro", True, server, "the veth pair has no large receive offload "
                      "(ethtool: large-receive-offload off [fixed])")
    if "tso" in ex and s.tso and not s.csum_offload:
        raise _refuse("tso", True, server, "TSO needs checksum offload (the kernel turns "
                      "tcp-segmentation-offload off without tx-checksumming)")
    tls = server.tls and client.tls
    if not tls:
        for name in ("cipher", "tls_record_bytes"):
            if name in ex:
                raise _refuse(name, getattr(s, name), server if not server.tls else client,
                              "plain TCP has no TLS")
    elif "cipher" in ex:
        for stack in (server, client):
            if s.cipher not in stack.ciphers:
                raise _refuse("cipher", s.cipher, stack, f"it offers {' | '.join(stack.ciphers)}")
    if s.cc not in server.ccs or s.cc not in client.ccs:
        raise _refuse("cc", s.cc, server, f"it offers {' | '.join(server.ccs)}")
    cc = s.cc if "cc" in ex else server.default_cc

    eff: dict[str, Any] = {"app": server.app, "transport": "tcp", "tls": tls,
                           "ktls": server.ktls or client.ktls}
    tso, gro = s.tso and s.csum_offload, s.gro
    if s.loss_pct > 0:
        # tc sees an skb: a TSO skb or a GRO aggregate would be dropped whole, so the
        # sender segments in software before its veth and the receiver does not
        # re-aggregate before the classifier (as for the UDP stacks' loss runs).
        for name, value in (("tso", s.tso), ("gro", s.gro)):
            if name in ex and value:
                raise _refuse(name, True, server, "with loss_pct > 0 whole super-segments "
                              "would be dropped; leave it unset (the testbed turns it off)")
        tso = gro = False
    mss = s.mtu_bytes - TCP_HEADER_BYTES
    eff.update(gso=s.gso, gro=gro, tso=tso, lro=False, csum_offload=s.csum_offload,
               nic_gro=gro, veth_segmentation=True, cc=cc,
               cipher=(s.cipher if "cipher" in ex else "aes-ni") if tls else "none",
               tls_record_bytes=s.tls_record_bytes if tls else None,
               tcp_rmem_bytes=s.tcp_rmem_bytes, tcp_wmem_bytes=s.tcp_wmem_bytes,
               mss_bytes=mss, udp_payload_bytes=mss, workload="bulk",
               app_write_bytes=int(config.knob("app_write_bytes")) or None,
               app_read_bytes=int(config.knob("app_read_bytes")) or None,
               stream_window_bytes=None, conn_window_bytes=None)
    args: list[str] = [f"--cc={cc}"]
    if tls:
        args += [f"--cipher={eff['cipher']}", f"--record-bytes={s.tls_record_bytes}"]
    if eff["app_write_bytes"]:
        args.append(f"--write-bytes={eff['app_write_bytes']}")
    if eff["app_read_bytes"]:
        args.append(f"--read-bytes={eff['app_read_bytes']}")
    pinning(s, eff, cores, peer_cores, restrict)
    return Resolved(args + list(server.server_args), args + list(client.client_args), eff)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def summary(report_server: dict[str, Any], report_client: dict[str, Any],
            snmp: dict[str, dict[str, dict[str, int]]], link: dict[str, dict[str, int]],
            transfer_bytes: int) -> dict[str, Any]:
    """``extra.tcp`` of one run: counts that the cost model reads, from the peers'
    reports, the namespaces' MIBs (``snmp[role]`` holds ``Tcp`` and ``TcpExt``) and
    the veths' counters (``link[role]``).

    - ``data_segments``: the sender's data segments on the wire (tcp_info
      data_segs_out counts tcp_skb_pcount, the MSS segments of each skb);
    - ``acks``: the receiver's segments out less its data segments (pure ACKs);
    - ``tx_skbs``, ``tx_skb_bytes``: skbs the sender's veth transmitted and their
      mean size (its super-segment); ``rx_skbs``, ``rx_skb_bytes`` the same on the
      receiver's veth (what arrived from the wire, before the receiver's GRO);
    - ``records_out``/``records_in``, ``record_bytes``: TLS records and their mean
      plaintext size (payload less the 17 B of content type and tag, RFC 8446 §5.2).
    """
    srv_ti = report_server.get("tcp_info") or {}
    cli_ti = report_client.get("tcp_info") or {}
    data_segments = _int(srv_ti.get("data_segs_out"))
    cli_out, cli_data = _int(cli_ti.get("segs_out")), _int(cli_ti.get("data_segs_out"))
    acks = cli_out - cli_data if cli_out is not None and cli_data is not None else None
    out: dict[str, Any] = {"data_segments": data_segments, "acks": acks}
    for role, direction in (("server", "tx"), ("client", "rx")):
        stats = link.get(role) or {}
        packets, nbytes = stats.get(f"{direction}_packets"), stats.get(f"{direction}_bytes")
        out[f"{direction}_skbs"] = packets
        out[f"{direction}_skb_bytes"] = (nbytes / packets
                                         if packets and nbytes is not None else None)
    records = _int(report_server.get("records_out"))
    payload = _int(report_server.get("record_payload_bytes_out"))
    out["records_out"] = records
    out["records_in"] = _int(report_client.get("records_in"))
    out["record_bytes"] = (payload / records - 17) if records and payload else None
    out["segments_per_tx_skb"] = (data_segments / out["tx_skbs"]
                                  if data_segments and out["tx_skbs"] else None)
    out["segments_per_ack"] = (data_segments / acks) if data_segments and acks else None
    out["retransmitted_segments"] = _int(srv_ti.get("total_retrans"))
    for role in ("server", "client"):
        mib = snmp.get(role) or {}
        tcp_mib = mib.get("Tcp", {})
        ext = mib.get("TcpExt", {})
        out[f"{role}_mib"] = {
            **{k: tcp_mib.get(k) for k in ("InSegs", "OutSegs", "RetransSegs", "InErrs")},
            **{k: ext[k] for k in TCPEXT_KEPT if k in ext}}
        report = report_server if role == "server" else report_client
        out[f"{role}_app_calls"] = _int(report.get("app_calls"))
        out[f"{role}_tcp_info"] = report.get("tcp_info") or {}
    out["transfer_bytes"] = transfer_bytes
    return out
