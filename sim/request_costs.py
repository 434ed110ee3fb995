"""What one request and one connection cost each end: the accounting both request engines share.

Request and handshake workloads (seeds 003/004) are many small transfers instead of
one long one. The analytic engine (:mod:`quiclab.sim.analytic.requests`) and
the DES (:mod:`quiclab.sim.des.requests`) start from the same numbers, built
here from a :class:`~quiclab.sim.resolve.Resolved` scenario, so that they
differ only in how they model queueing, never in the work:

- the packets of a request: the request's STREAM frame(s) from the client, the
  response's packets from the server, and the ACKs the client sends for them;
  small requests and responses of one connection's concurrent streams share a
  packet (``k`` per packet, at most ``streams``, as HTTP/3 stacks coalesce
  frames of ready streams);
- each packet's CPU at the end that sends it (the implementation's sender-role
  costs) and at the end that receives it (its receiver-role costs), with its
  system call, from the bulk cost model;
- the request terms of the cost model: ``ns_per_request``, ``ns_per_stream_frame``
  for each frame beyond one per packet, and per connection ``ns_per_connection``
  plus the handshake's datagrams, spread over the requests a connection carries
  (one for ``workload = handshakes``, ``requests / connections`` for ``requests``);
- the cores request work can use (``request_cores`` at this many connections)
  and the time a connection is held without CPU (``connection_wait_us``).

Sizes below are assumptions about typical encodings, named with their source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from quiclab.models.costmodel import CostModel

#: Request bytes on the stream: perf protocol 8-byte size (draft-banks-quic-
#: performance); HTTP/0.9 "GET /<name>\r\n"; HTTP/3 a HEADERS frame for a GET
#: with :method/:scheme/:authority/:path, QPACK static-table references plus a
#: literal path and authority (RFC 9204 §4.5), about 40 bytes.
REQUEST_STREAM_BYTES = {"perf": 8, "hq": 20, "h3": 40}
#: Response bytes besides the object: HTTP/3 HEADERS (:status 200,
#: content-length, content-type, ~30 B with QPACK) and one DATA frame header
#: (type + length varints, RFC 9114 §7.2.1); none for perf and HTTP/0.9.
RESPONSE_HEADER_BYTES = {"perf": 0, "hq": 0, "h3": 34}
#: UDP payloads of the handshake (RFC 9000 §14.1: a client Initial is padded to
#: 1200 bytes; RFC 9001 §4): the client sends its Initial and its Handshake
#: Finished; the server one datagram with Initial (ServerHello) and Handshake
#: (EncryptedExtensions, a P-256 certificate of ~500 B, CertificateVerify,
#: Finished), then HANDSHAKE_DONE. A connection ends with one CONNECTION_CLOSE
#: from the client. Assumed: a one-datagram server flight (an RSA certificate
#: chain would need two or three).
HANDSHAKE_CLIENT_TX = (1200, 100, 50)
HANDSHAKE_SERVER_TX = (1200, 60)
#: Ethernet + IP + UDP bytes per datagram on the wire (sim.resolve's constants).
WIRE_OVERHEAD_BYTES = 28 + 38
#: An ACK-only datagram (sim.resolve.ACK_PACKET_BYTES).
ACK_UDP_BYTES = 50


def endpoint_fields(model: CostModel, role_name: str, cipher: str, app: str,
                    connections: int, factor: float) -> dict[str, Any]:
    """The request terms of one endpoint, on the scenario's CPU (``factor`` is the
    CPU rule's cost factor). Used by :func:`quiclab.sim.resolve.resolve` to fill
    the Endpoint's request fields; the caller has checked the cipher and app."""
    crypto = model.crypto[cipher]
    send, recv = model.sender, model.receiver
    role = model.role(role_name)
    app_cost = role.app_ns_per_byte.get(app)
    sources = {name: p.source for name, p in role.items()
               if name in ("ns_per_connection", "ns_per_request")}
    return {
        # Sending a packet uses the implementation's sender-role costs,
        # receiving one its receiver-role costs, whichever end this is.
        "tx_ns_packet": factor * (send.ns_per_packet.value + crypto.ns_per_packet.value
                                  + send.ns_per_segment.value),
        "tx_ns_byte": factor * (send.ns_per_byte.value + crypto.ns_per_byte.value),
        "tx_ns_call": factor * send.ns_per_syscall.value,
        "rx_ns_packet": factor * (recv.ns_per_packet.value + crypto.ns_per_packet.value
                                  + recv.ns_per_segment.value),
        "rx_ns_byte": factor * (recv.ns_per_byte.value + crypto.ns_per_byte.value),
        "rx_ns_call": factor * recv.ns_per_syscall.value,
        "app_ns_byte": factor * (app_cost.value if app_cost is not None else 0.0),
        "ns_per_connection": factor * role.ns_per_connection.value,
        "ns_per_request": factor * role.ns_per_request.value,
        "ns_per_stream_frame": factor * role.ns_per_stream_frame.value,
        "request_cores": role.request_cores_at(float(connections)),
        "connection_wait_s": role.connection_wait_us.value * 1e-6,
        "request_source": "; ".join(f"{k}: {v}" for k, v in sorted(sources.items())),
    }


@dataclass(frozen=True)
class RequestCosts:
    """Per-request work and sizes of one resolved request scenario (ns on its CPU).

    ``server_ns`` / ``client_ns`` are the CPU of one request at each end with
    its share of the connection's handshake; ``*_conn_ns`` the handshake alone
    (per connection). Packet counts are per request and may be fractional
    (coalesced small responses, a connection's handshake spread over its
    requests).
    """

    requests: int  # requests in the run
    concurrency: int  # requests in flight: connections × streams (or connections)
    connections: int
    requests_per_connection: float
    response_stream_bytes: int
    request_stream_bytes: int
    response_packets: float  # data packets per request, server → client
    request_packets: float  # client → server
    acks: float  # client ACK-only packets per request
    server_ns: float
    client_ns: float
    server_request_ns: float  # without the connection share
    client_request_ns: float
    client_send_ns: float  # of client_request_ns: before the request leaves (DES order)
    server_conn_ns: float  # one connection's handshake CPU at the server
    client_conn_ns: float
    server_cores: float
    client_cores: float
    wire_down_bytes: float  # server → client bytes on the wire per request
    wire_up_bytes: float
    rtt_s: float
    link_bps: float
    connection_wait_s: float  # both ends' non-CPU wait per connection
    server_packets_sent: float
    client_packets_sent: float
    server_calls: float
    client_calls: float
    cost_lo: tuple[float, float]  # (server, client) multiplicative intervals
    cost_hi: tuple[float, float]
    notes: tuple[str, ...] = ()

    @property
    def handshake_rtts(self) -> float:
        """Round trips before a connection's first request is answered (1-RTT handshake)."""
        return 1.0 if self.requests_per_connection <= 1.0 else 0.0


def _coalesced(stream_bytes: int, packet_stream_bytes: int, streams: int) -> tuple[float, float]:
    """(packets, frames) per message of ``stream_bytes`` when ``streams`` messages of one
    connection are ready together: small ones share packets, large ones fill their own."""
    if stream_bytes >= packet_stream_bytes:
        packets = float(math.ceil(stream_bytes / packet_stream_bytes))
        return packets, packets
    per_packet = max(1, min(streams, packet_stream_bytes // max(stream_bytes, 1)))
    return 1.0 / per_packet, 1.0


def request_costs(r: Any) -> RequestCosts:
    """Per-request costs of a resolved request or handshake scenario (see module docstring)."""
    s = r.scenario
    srv, cli = r.sender, r.receiver
    handshakes = s.workload == "handshakes"
    streams = 1 if handshakes else s.streams
    conns = s.connections
    total = s.requests if s.requests > 0 else conns
    per_conn = 1.0 if handshakes else max(1.0, total / conns)
    concurrency = conns * streams
    app = s.app
    resp = s.request_bytes + RESPONSE_HEADER_BYTES[app]
    req = REQUEST_STREAM_BYTES[app]
    ovh_s = max(srv.udp_payload_bytes - srv.stream_bytes, 0)
    ovh_c = max(cli.udp_payload_bytes - cli.stream_bytes, 0)
    pk_resp, fr_resp = _coalesced(resp, srv.stream_bytes, streams)
    pk_req, fr_req = _coalesced(req, cli.stream_bytes, streams)
    resp_udp = resp + pk_resp * ovh_s
    req_udp = req + pk_req * ovh_c
    # Frames beyond one per packet (coalesced streams) cost ns_per_stream_frame each.
    extra_frames = (fr_resp - pk_resp) + (fr_req - pk_req)
    # The client ACKs the response's packets by its bulk policy; ACKs for the
    # requests ride on the response packets (and vice versa), so they add no packets.
    acks = pk_resp / max(cli.ack_every_packets, 1.0)
    # GSO/GRO batch what one connection sends together: a response's packets, or
    # the coalesced responses of its ready streams.
    batch_s = min(srv.segments_per_call, max(1.0, pk_resp * streams))
    batch_c = min(cli.segments_per_call, max(1.0, pk_resp * streams))
    server_req = (pk_resp * srv.tx_ns_packet + srv.tx_ns_byte * resp_udp
                  + pk_resp / batch_s * srv.tx_ns_call + srv.app_ns_byte * s.request_bytes
                  + pk_req * (srv.rx_ns_packet + srv.rx_ns_call) + srv.rx_ns_byte * req_udp
                  + acks * srv.ns_per_ack
                  + srv.ns_per_request + extra_frames * srv.ns_per_stream_frame)
    client_send = (pk_req * (cli.tx_ns_packet + cli.tx_ns_call) + cli.tx_ns_byte * req_udp
                   + 0.5 * cli.ns_per_request)
    client_req = (pk_req * (cli.tx_ns_packet + cli.tx_ns_call) + cli.tx_ns_byte * req_udp
                  + pk_resp * cli.rx_ns_packet + cli.rx_ns_byte * resp_udp
                  + pk_resp / batch_c * cli.rx_ns_call + cli.app_ns_byte * s.request_bytes
                  + acks * cli.ns_per_ack
                  + cli.ns_per_request + extra_frames * cli.ns_per_stream_frame)

    def tx(ep: Any, sizes: tuple[int, ...]) -> float:
        return sum(ep.tx_ns_packet + ep.tx_ns_call + ep.tx_ns_byte * b for b in sizes)

    def rx(ep: Any, sizes: tuple[int, ...]) -> float:
        return sum(ep.rx_ns_packet + ep.rx_ns_call + ep.rx_ns_byte * b for b in sizes)

    server_conn = (srv.ns_per_connection + tx(srv, HANDSHAKE_SERVER_TX)
                   + rx(srv, HANDSHAKE_CLIENT_TX))
    client_conn = (cli.ns_per_connection + tx(cli, HANDSHAKE_CLIENT_TX)
                   + rx(cli, HANDSHAKE_SERVER_TX))
    share = 1.0 / per_conn
    hs_down = sum(b + WIRE_OVERHEAD_BYTES for b in HANDSHAKE_SERVER_TX)
    hs_up = sum(b + WIRE_OVERHEAD_BYTES for b in HANDSHAKE_CLIENT_TX)
    notes = []
    for ep, side in ((srv, "server"), (cli, "client")):
        if "not in this model file" in ep.request_source:
            notes.append(f"{side} {ep.impl}: request terms not calibrated (zero)")
    return RequestCosts(
        requests=total, concurrency=concurrency, connections=conns,
        requests_per_connection=per_conn, response_stream_bytes=resp,
        request_stream_bytes=req, response_packets=pk_resp, request_packets=pk_req,
        acks=acks,
        server_ns=server_req + share * server_conn, client_ns=client_req + share * client_conn,
        server_request_ns=server_req, client_request_ns=client_req, client_send_ns=client_send,
        server_conn_ns=server_conn, client_conn_ns=client_conn,
        server_cores=srv.request_cores, client_cores=cli.request_cores,
        wire_down_bytes=resp_udp + pk_resp * WIRE_OVERHEAD_BYTES + share * hs_down,
        wire_up_bytes=(req_udp + pk_req * WIRE_OVERHEAD_BYTES
                       + acks * (ACK_UDP_BYTES + WIRE_OVERHEAD_BYTES) + share * hs_up),
        rtt_s=r.path.rtt_s, link_bps=r.path.link_bps,
        connection_wait_s=srv.connection_wait_s + cli.connection_wait_s,
        server_packets_sent=pk_resp + share * len(HANDSHAKE_SERVER_TX),
        client_packets_sent=pk_req + acks + share * len(HANDSHAKE_CLIENT_TX),
        server_calls=pk_resp / batch_s + pk_req + share * (len(HANDSHAKE_SERVER_TX)
                                                          + len(HANDSHAKE_CLIENT_TX)),
        client_calls=pk_req + pk_resp / batch_c + acks + share * (
            len(HANDSHAKE_SERVER_TX) + len(HANDSHAKE_CLIENT_TX)),
        cost_lo=(srv.cost_lo, cli.cost_lo), cost_hi=(srv.cost_hi, cli.cost_hi),
        notes=tuple(notes))
