"""quiclab's perf peer for the Python QUIC stacks aioquic and qh3 (a fork with the same API).

Protocol (draft-banks-quic-performance): the client opens one bidirectional
stream, sends the number of bytes it wants as an 8-byte big-endian integer and
ends its side; the server answers with that many bytes. Each side prints one
JSON line. Arguments are ``--name=value``, the same set as every quiclab peer;
a knob the stack cannot honour is refused with one JSON error line.

Neither stack uses GSO or GRO; aioquic does no path-MTU discovery, so its UDP
payload is ``--max-udp-payload`` (default 1200, RFC 9000 §14).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import socket
import struct
import sys
import time
from typing import Any

CHUNK = 256 * 1024
#: Bytes the server lets sit unacknowledged in a stream's send buffer before it waits.
SEND_BUFFER_LIMIT = 4 * 1024 * 1024


def fail(stack: str, message: str) -> None:
    print(json.dumps({"stack": stack, "error": message}), flush=True)
    sys.exit(1)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--impl", default="aioquic", choices=["aioquic", "qh3"])
    p.add_argument("--role", default="client", choices=["server", "client"])
    p.add_argument("--addr", default="127.0.0.1:4433")
    p.add_argument("--bytes", type=int, default=1 << 20)
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--ca")
    p.add_argument("--server-name", default="quiclab")
    p.add_argument("--gso", default="false")
    p.add_argument("--gro", default="false")
    p.add_argument("--max-udp-payload", type=int, default=0)
    p.add_argument("--stream-window", type=int, default=0)
    p.add_argument("--conn-window", type=int, default=0)
    p.add_argument("--rcvbuf", type=int, default=0)
    p.add_argument("--sndbuf", type=int, default=0)
    p.add_argument("--cc", default="reno")
    p.add_argument("--cipher", default="aes-ni")
    p.add_argument("--qlog")
    p.add_argument("--once", default="false")
    return p.parse_args(argv)


class Stack:
    """The imported modules of one implementation (aioquic or qh3)."""

    def __init__(self, name: str):
        self.name = name
        self.asyncio = importlib.import_module(f"{name}.asyncio")
        self.protocol = importlib.import_module(f"{name}.asyncio.protocol")
        self.config = importlib.import_module(f"{name}.quic.configuration")
        self.events = importlib.import_module(f"{name}.quic.events")
        self.tls = importlib.import_module(f"{name}.tls")
        try:
            self.logger: Any = importlib.import_module(f"{name}.quic.logger")
        except ImportError:
            self.logger = None


def configuration(stack: Stack, o: argparse.Namespace, is_client: bool) -> Any:
    if o.gso.lower() in ("true", "1", "on") or o.gro.lower() in ("true", "1", "on"):
        fail(stack.name, f"gso/gro not supported: {stack.name} sends and receives one datagram "
                         "per system call")
    c = stack.config.QuicConfiguration(is_client=is_client, alpn_protocols=["perf"],
                                       idle_timeout=30.0)
    if o.max_udp_payload:
        c.max_datagram_size = o.max_udp_payload
    if o.stream_window:
        c.max_stream_data = o.stream_window
    if o.conn_window:
        c.max_data = o.conn_window
    if o.cc not in ("reno", "cubic"):
        fail(stack.name, f"cc={o.cc} not supported: {stack.name} offers reno | cubic")
    if hasattr(c, "congestion_control_algorithm"):
        c.congestion_control_algorithm = o.cc
    elif o.cc != "reno":
        fail(stack.name, f"cc={o.cc} not supported by this {stack.name} version")
    suites = {"aes-ni": "AES_128_GCM_SHA256", "aes256gcm": "AES_256_GCM_SHA384",
              "chacha20": "CHACHA20_POLY1305_SHA256"}
    if o.cipher not in suites:
        fail(stack.name, f"cipher={o.cipher} not supported: allowed {' | '.join(suites)}")
    c.cipher_suites = [getattr(stack.tls.CipherSuite, suites[o.cipher])]
    if o.qlog:
        if stack.logger is None or not hasattr(stack.logger, "QuicFileLogger"):
            fail(stack.name, "qlog not supported by this version")
        c.quic_logger = stack.logger.QuicFileLogger(o.qlog)
    return c


def set_buffers(transport: Any, o: argparse.Namespace) -> None:
    sock = transport.get_extra_info("socket")
    if sock is None:
        return
    if o.rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, o.rcvbuf)
    if o.sndbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, o.sndbuf)


def stats(quic: Any) -> dict[str, Any]:
    """What the connection object can tell (internal attributes, read defensively)."""
    out: dict[str, Any] = {}
    number = getattr(quic, "_packet_number", None)
    if isinstance(number, int):
        out["packets_sent"] = number
    loss = getattr(quic, "_loss", None)
    if loss is not None:
        cc = getattr(loss, "_cc", None)
        cwnd = getattr(cc, "congestion_window", None) or getattr(loss, "congestion_window", None)
        if cwnd:
            out["cwnd_bytes"] = int(cwnd)
        srtt = getattr(loss, "_rtt_smoothed", None)
        if srtt:
            out["rtt_ms"] = float(srtt) * 1e3
        rtt_min = getattr(loss, "_rtt_min", None)
        if rtt_min and rtt_min != float("inf"):
            out["min_rtt_ms"] = float(rtt_min) * 1e3
    return out


def unacked(quic: Any, stream_id: int) -> int:
    """Bytes written to a stream and not yet acknowledged (0 if the stack hides it)."""
    stream = getattr(quic, "_streams", {}).get(stream_id)
    sender = getattr(stream, "sender", None)
    buffer = getattr(sender, "_buffer", None)
    return len(buffer) if buffer is not None else 0


def make_protocol(stack: Stack, o: argparse.Namespace, done: asyncio.Future[dict[str, Any]]):
    base = stack.protocol.QuicConnectionProtocol
    events = stack.events

    class PerfProtocol(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.request = bytearray()
            self.received = 0
            self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.progress = asyncio.Event()
            self.sent = 0
            self.started = time.perf_counter()

        def datagram_received(self, data: bytes, addr: Any) -> None:
            super().datagram_received(data, addr)
            self.progress.set()

        def quic_event_received(self, event: Any) -> None:
            if isinstance(event, events.StreamDataReceived):
                if self._quic.configuration.is_client:
                    self.received += len(event.data)
                    if event.end_stream and not self.finished.done():
                        self.finished.set_result(None)
                elif len(self.request) < 8:
                    self.request += event.data
                    if len(self.request) >= 8:
                        want = struct.unpack("!Q", bytes(self.request[:8]))[0]
                        asyncio.ensure_future(self.send(event.stream_id, want))
            elif isinstance(event, events.ConnectionTerminated):
                if not self._quic.configuration.is_client and not done.done():
                    out = stats(self._quic)
                    out.update(role="server", bytes=self.sent,
                               transfer_s=time.perf_counter() - self.started,
                               close_code=getattr(event, "error_code", None),
                               close_reason=getattr(event, "reason_phrase", None))
                    done.set_result(out)
                if self._quic.configuration.is_client and not self.finished.done():
                    self.finished.set_exception(ConnectionError(
                        f"connection closed: {getattr(event, 'reason_phrase', '')}"))

        async def send(self, stream_id: int, want: int) -> None:
            self.started = time.perf_counter()
            chunk = bytes(CHUNK)
            while self.sent < want:
                while unacked(self._quic, stream_id) > SEND_BUFFER_LIMIT:
                    self.progress.clear()
                    self.transmit()
                    await self.progress.wait()
                n = min(CHUNK, want - self.sent)
                self.sent += n
                self._quic.send_stream_data(stream_id, chunk[:n], end_stream=self.sent >= want)
                self.transmit()
                await asyncio.sleep(0)

    return PerfProtocol


async def server(stack: Stack, o: argparse.Namespace) -> None:
    c = configuration(stack, o, is_client=False)
    c.load_cert_chain(o.cert, o.key)
    host, _, port = o.addr.rpartition(":")
    loop = asyncio.get_running_loop()
    while True:
        done: asyncio.Future[dict[str, Any]] = loop.create_future()
        srv = await stack.asyncio.serve(host, int(port), configuration=c,
                                        create_protocol=make_protocol(stack, o, done))
        set_buffers(srv._transport, o)
        out = await done
        emit(stack, out)
        srv.close()
        if o.once.lower() in ("true", "1", "on"):
            return


def emit(stack: Stack, out: dict[str, Any]) -> None:
    out.update(stack=stack.name, app="perf")
    print(json.dumps(out), flush=True)


async def client(stack: Stack, o: argparse.Namespace) -> None:
    c = configuration(stack, o, is_client=True)
    c.server_name = o.server_name
    if o.ca:
        c.load_verify_locations(o.ca)
    host, _, port = o.addr.rpartition(":")
    loop = asyncio.get_running_loop()
    unused: asyncio.Future[dict[str, Any]] = loop.create_future()
    t0 = time.perf_counter()
    async with stack.asyncio.connect(host, int(port), configuration=c,
                                     create_protocol=make_protocol(stack, o, unused)) as proto:
        handshake = time.perf_counter() - t0
        set_buffers(proto._transport, o)
        quic = proto._quic
        stream_id = quic.get_next_available_stream_id()
        t_req = time.perf_counter()
        quic.send_stream_data(stream_id, struct.pack("!Q", o.bytes), end_stream=True)
        proto.transmit()
        error = None
        try:
            await proto.finished
        except ConnectionError as err:
            error = f"read after {proto.received} bytes: {err}"
        transfer = time.perf_counter() - t_req
        out = stats(quic)
        out.update(role="client", bytes=proto.received, handshake_ms=handshake * 1e3,
                   transfer_s=transfer, goodput_mbps=proto.received * 8 / transfer / 1e6,
                   udp_payload_bytes=c.max_datagram_size)
        if error or proto.received != o.bytes:
            out["error"] = error or f"received {proto.received} of {o.bytes} bytes"
        emit(stack, out)
        proto.close()


def main(argv: list[str] | None = None) -> None:
    o = parse(sys.argv[1:] if argv is None else argv)
    try:
        stack = Stack(o.impl)
    except ImportError as err:
        fail(o.impl, f"cannot import {o.impl}: {err}")
    runner = server if o.role == "server" else client
    try:
        asyncio.run(runner(stack, o))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
