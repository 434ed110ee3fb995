"""quiclab wrapper for stacks that ship their own HTTP/3 client and server.

These speak HTTP/3, not the quiclab perf protocol: the client GETs ``/<N>``
(ngtcp2's examples generate N bytes for a numeric path up to
``--max-dyn-length``) or a file of N bytes that the server wrapper creates
(tquic_tools serves files from a root directory). They interoperate with
each other, not with the perf peers; the harness marks their app as ``h3``.

Translates quiclab's peer arguments (``--name=value``) into the tool's own
flags. The server replaces this process (``exec``) so its CPU time is the
tool's alone; the client runs the tool as a child and prints one JSON line
with the wall time of the child (handshake included: the tools print no
timings) and its exit status. Bytes are not verified unless
``--verify=true`` (downloading to tmpfs costs CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NGTCP2_SERVER = "/usr/sbin/gtlsserver"
NGTCP2_CLIENT = "/usr/bin/gtlsclient"


def fail(stack: str, message: str) -> None:
    print(json.dumps({"stack": stack, "error": message}), flush=True)
    sys.exit(1)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--tool", required=True, choices=["ngtcp2", "tquic"])
    p.add_argument("--tquic-bin", default="")
    p.add_argument("--role", default="client", choices=["server", "client"])
    p.add_argument("--addr", default="127.0.0.1:4433")
    p.add_argument("--bytes", type=int, default=1 << 20)
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--ca")
    p.add_argument("--server-name", default="quiclab")
    p.add_argument("--max-udp-payload", type=int, default=0)
    p.add_argument("--stream-window", type=int, default=0)
    p.add_argument("--conn-window", type=int, default=0)
    p.add_argument("--cc", default="")
    p.add_argument("--gso", default="")
    p.add_argument("--qlog")
    p.add_argument("--once", default="false")
    p.add_argument("--verify", default="false")
    return p.parse_args(argv)


def ngtcp2(o: argparse.Namespace, host: str, port: str) -> list[str]:
    common = ["-q", "--no-quic-dump", "--no-http-dump"]
    if o.max_udp_payload:
        common.append(f"--max-udp-payload-size={o.max_udp_payload}")
    if o.cc:
        common.append(f"--cc={'bbr2' if o.cc == 'bbr' else o.cc}")
    if o.stream_window:
        common += [f"--max-stream-window={o.stream_window}",
                   f"--max-stream-data-bidi-local={o.stream_window}"]
    if o.conn_window:
        common += [f"--max-window={o.conn_window}", f"--max-data={o.conn_window}"]
    if o.qlog:
        common.append(f"--qlog-dir={o.qlog}")
    if o.role == "server":
        if o.gso.lower() == "false":
            common.append("--max-gso-dgrams=1")
        docroot = tempfile.mkdtemp(prefix="quiclab-h3-")
        return [NGTCP2_SERVER, *common, "--max-dyn-length=1099511627776", "-d", docroot,
                host, port, o.key, o.cert]
    if o.no_pmtud:
        common.append("--no-pmtud")
    return [NGTCP2_CLIENT, *common, "--exit-on-all-streams-close", f"--sni={o.server_name}",
            host, port, f"https://{o.server_name}:{port}/{o.bytes}"]


def tquic(o: argparse.Namespace, host: str, port: str) -> list[str]:
    bindir = Path(o.tquic_bin)
    common: list[str] = []
    if o.cc:
        common += ["--congestion-control-algor", {"cubic": "CUBIC", "reno": "COPA",
                                                   "bbr": "BBR"}.get(o.cc, o.cc.upper())]
    if o.qlog:
        common += ["--qlog-dir", o.qlog]
    if o.role == "server":
        # tquic_server serves files: create one sparse file of the size clients ask for.
        root = Path(tempfile.mkdtemp(prefix="quiclab-h3-"))
        with open(root / str(o.bytes), "wb") as f:
            f.truncate(o.bytes)
        return [str(bindir / "tquic_server"), "--listen", f"{host}:{port}", "--cert", o.cert,
                "--key", o.key, "--root", str(root), "--log-level", "OFF", *common]
    if o.max_udp_payload:
        common += ["--send-udp-payload-size", str(o.max_udp_payload)]
    return [str(bindir / "tquic_client"), "--log-level", "OFF", *common,
            f"https://{host}:{port}/{o.bytes}"]


def main() -> None:
    o = parse(sys.argv[1:])
    o.no_pmtud = bool(o.max_udp_payload)
    stack = o.tool
    host, _, port = o.addr.rpartition(":")
    argv = ngtcp2(o, host, port) if o.tool == "ngtcp2" else tquic(o, host, port)
    if o.role == "server":
        sys.stdout.flush()
        os.execv(argv[0], argv)
    download = None
    if o.verify.lower() == "true":
        download = tempfile.mkdtemp(prefix="quiclab-dl-", dir="/dev/shm")
        flag = f"--download={download}" if o.tool == "ngtcp2" else f"--dump-dir={download}"
        argv.insert(1, flag)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    out = {"stack": stack, "app": "h3", "role": "client", "transfer_s": wall,
           "goodput_basis": "client wall time including start-up and handshake"}
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()
        out["error"] = f"{stack} client exited {proc.returncode}: {tail[-1] if tail else ''}"
    else:
        got = o.bytes
        if download:
            files = [p for p in Path(download).rglob("*") if p.is_file()]
            got = sum(p.stat().st_size for p in files)
            for p in files:
                p.unlink()
            if got != o.bytes:
                out["error"] = f"received {got} of {o.bytes} bytes"
        out.update(bytes=got, goodput_mbps=got * 8 / wall / 1e6, verified=bool(download))
    if download:
        shutil.rmtree(download, ignore_errors=True)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
