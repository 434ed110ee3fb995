"""A tiny synthetic QUIC Interop Runner 10G tree (tumi8/quic-10g-paper layout).

``build_qir_tree(root)`` writes, with hand-chosen numbers whose expected
results are the constants below:

- ``results/buffer/udp/run3/udp-buffer-212992/``: ``result.json`` and two
  repetitions of ``lsquic_lsquic`` with every raw file (``output.txt``,
  ``client/time.json``, ``{server,client}/pidstat.txt``,
  ``{server,client}/{netstat,ethtool}-{start,stop}.txt``), plus
  ``results/buffer/udp/processed.csv`` computed with our own rules, so raw and
  processed agree exactly;
- ``results/baseline/client-timestamps/goracle/run1/``: one ``quiche_lsquic``
  repetition with only ``output.txt``, ``client/time.json`` and a runner log
  (the default-buffer baseline collected no pidstat, netstat or ethtool);
- ``results/perf/goracle/optimized/run1/``: one ``lsquic_lsquic`` repetition
  with ``server/out.perf.zst`` (zstd of hand-written ``perf script`` samples)
  and the category mapping ``analysis-pipeline/.../mappings/lsquic.json``.

``pack_tarball(root, dest)`` packs the tree as ``.tar.xz`` under a wrapper
folder, as a download of the repository would be. No real dataset file is
copied: every byte is generated here.
"""

from __future__ import annotations

import csv
import io
import json
import tarfile
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import zstandard

FILESIZE = 8589934592  # 8 GiB, as in the dataset
BUFFER_LOGDIR = "results/buffer/udp/run3/udp-buffer-212992"
BASELINE_LOGDIR = "results/baseline/client-timestamps/goracle/run1"
PERF_LOGDIR = "results/perf/goracle/optimized/run1"
MAPPING_DIR = "analysis-pipeline/result-parsing/util/perf/mappings"
START_NS = 1674447849_000000000

#: Per repetition of the buffer experiment: runtime (s) and per-interval %CPU.
#: The steady window drops the first two and last two samples.
BUFFER_RUNS = {
    1: {"runtime_s": 23.0,
        "server_cpu": [30.0, 90.0, 100.0, 99.0, 98.0, 100.0, 97.0, 40.0],
        "client_cpu": [20.0, 60.0, 70.0, 71.0, 69.0, 70.0, 72.0, 30.0]},
    2: {"runtime_s": 25.0,
        "server_cpu": [10.0, 80.0, 96.0, 94.0, 95.0, 90.0, 35.0],
        "client_cpu": [15.0, 50.0, 66.0, 64.0, 65.0, 62.0, 12.0]},
}
#: Counter deltas (stop − start) per repetition; identical for both reps.
SERVER_UDP_SENT = 5_800_000
SERVER_UDP_RECEIVED = 120_000
CLIENT_UDP_SENT = 118_000
CLIENT_UDP_RECEIVED = 5_790_000
CLIENT_RCVBUF_ERRORS = 10_000
SERVER_NIC_TX_FRAMES = 5_800_050
SERVER_NIC_TX_BYTES = 8_700_000_000
CLIENT_NIC_RX_FRAMES = 5_799_990
CLIENT_NIC_RX_BYTES = 8_699_900_000
BASELINE_RUNTIME_S = 40.0
PERF_RUNTIME_S = 30.0

#: The perf trace: (comm, frames innermost first, period) per sample.
#: In-process (http_server) samples by category: 4 PACKET_IO, 1 CRYPTO,
#: 1 CONN_MGMT, 1 GENERAL; one sample of perf itself is OTHER_PROCESS.
_SENDMSG = ["__sys_sendmsg+0x4 ([kernel.kallsyms])",
            "__libc_sendmsg+0x17 (/usr/lib/x86_64-linux-gnu/libc-2.31.so)",
            "send_packets_out+0x2d (/usr/bin/http_server)",
            "main+0x38 (/usr/bin/http_server)"]
PERF_SAMPLES = [
    ("http_server 152907", _SENDMSG, 100),
    ("http_server 152907", _SENDMSG, 200),
    ("http_server 152907/152907", _SENDMSG, 300),  # pid/tid form
    ("http_server 152907", _SENDMSG, 400),
    ("http_server 152907", ["aes_gcm_enc_update_vaes_avx2+0x10 (/usr/lib/libcrypto.so)",
                            "EVP_AEAD_CTX_seal+0x99 (/usr/lib/libcrypto.so)",
                            "main+0x38 (/usr/bin/http_server)"], 500),
    ("http_server 152907", ["lsquic_send_ctl_got_ack+0x1 (/usr/bin/http_server)",
                            "main+0x38 (/usr/bin/http_server)"], 600),
    # A DSO name that itself holds parentheses, and an unknown symbol.
    ("http_server 152907", ["memcpy+0x5 (/usr/lib/libc.so (deleted))",
                            "[unknown] ([unknown])"], 700),
    ("perf_5.10 15922", ["native_write_msr+0x4 ([kernel.kallsyms])"], 16),
]
PERF_MAPPING = {
    "regex:.*AES.*": "CRYPTO (AES)",
    "regex:.*__libc_sendmsg.*": "PACKET_IO (sendmsg)",
    "regex:.*lsquic_send_ctl.*": "CONN_MGMT",
    "regex:.*": "GENERAL (UNMATCHED)",
}
PERF_FOLDED_SENDMSG = "http_server;main;send_packets_out;__libc_sendmsg;__sys_sendmsg"


def goodput_mbps(runtime_s: float) -> float:
    """What the parser computes: file size × 8 / runtime, in Mbit/s."""
    return FILESIZE * 8 / runtime_s / 1e6


def steady_mean(values: list[float]) -> float:
    window = values[2:-2]
    return sum(window) / len(window)


@dataclass(frozen=True)
class QirTree:
    """Where the synthetic tree lives and how to reach its files."""

    root: Path

    def buffer_rep(self, rep: int) -> Path:
        return self.root / BUFFER_LOGDIR / "lsquic_lsquic" / "goodput" / str(rep)

    @property
    def baseline_rep(self) -> Path:
        return self.root / BASELINE_LOGDIR / "quiche_lsquic" / "goodput" / "1"

    @property
    def perf_rep(self) -> Path:
        return self.root / PERF_LOGDIR / "lsquic_lsquic" / "goodput" / "1"

    @property
    def processed_csv(self) -> Path:
        return self.root / "results" / "buffer" / "udp" / "processed.csv"

    def rel(self, path: Path) -> str:
        """The dataset-relative path the ingest reports (``results/…``)."""
        return path.relative_to(self.root).as_posix()

    def files(self) -> list[Path]:
        return sorted(p for p in self.root.rglob("*") if p.is_file())


# -- file writers -----------------------------------------------------------
def _write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")


def _clock(t: datetime) -> str:
    return t.strftime("%I:%M:%S %p")


def pidstat_text(host: str, command: str, totals: list[float], with_average: bool,
                 pid: int = 152907, core: int = 25) -> str:
    """``pidstat -u 1`` output: banner, two empty intervals, one sample per
    interval, a trailing empty interval, and the Average block (with a line
    for the process only when ``with_average``, as for a server; a client has
    exited before pidstat stops and gets none)."""
    header = "   UID       PID    %usr %system  %guest   %wait    %CPU   CPU  Command"
    t = datetime(2023, 1, 23, 5, 23, 55)
    out = [f"Linux 5.10.0-8-amd64 ({host}) \t01/23/2023 \t_x86_64_\t(64 CPU)", ""]
    for _ in range(2):
        out += [f"{_clock(t)}{header}", ""]
        t += timedelta(seconds=1)
    for total in totals:
        usr = round(total * 0.4, 2)
        sys_ = round(total - usr, 2)
        out.append(f"{_clock(t)}{header}")
        t += timedelta(seconds=1)
        out += [f"{_clock(t)}     0    {pid:>6}   {usr:5.2f}   {sys_:5.2f}    0.00    0.00"
                f"  {total:6.2f}    {core:>2}  {command}", ""]
    out += [f"{_clock(t)}{header}", "", "", f"Average: {header}"]
    if with_average:
        mean = sum(totals) / len(totals)
        out.append(f"Average:        0    {pid:>6}   {mean * 0.4:5.2f}   {mean * 0.6:5.2f}"
                   f"    0.00    0.00   {mean:5.2f}     -  {command}")
    return "\n".join(out) + "\n"


def netstat_text(received: int, sent: int, rcvbuf_errors: int = 0) -> str:
    """``netstat -su``: only the ``Udp:`` section counts; the others must be ignored."""
    return (
        "IcmpMsg:\n    InType3: 171\n    OutType3: 80\n"
        "Udp:\n"
        f"    {received} packets received\n"
        "    80 packets to unknown port received\n"
        "    0 packet receive errors\n"
        f"    {sent} packets sent\n"
        f"    {rcvbuf_errors} receive buffer errors\n"
        "    4988 send buffer errors\n"
        "    IgnoredMulti: 1601\n"
        "UdpLite:\n"
        "IpExt:\n    InMcastPkts: 79\n    InOctets: 9487610294\n")


def ethtool_text(rx_frames: int, tx_frames: int, rx_bytes: int, tx_bytes: int) -> str:
    """``ethtool -S`` of a Broadcom bnxt NIC, with per-queue lines to be ignored."""
    return (
        "NIC statistics:\n"
        "     [0]: rx_ucast_packets: 14057358\n"
        "     [0]: tx_bytes: 999\n"
        "     rx_total_discard_pkts: 0\n"
        "     tx_total_discard_pkts: 0\n"
        "     rx_64b_frames: 64926\n"
        f"     rx_total_frames: {rx_frames}\n"
        f"     rx_bytes: {rx_bytes}\n"
        f"     tx_total_frames: {tx_frames}\n"
        f"     tx_bytes: {tx_bytes}\n")


def output_text(rmem: int, runtime_s: float | None, implementation: str = "lsquic") -> str:
    """The runner's log; ``runtime_s=None`` writes a failed run."""
    lines = ["2023-01-23 05:23:46,020 ",
             "2023-01-23 05:23:53,529 Setting variables:",
             f"{{'implementation': '{implementation}', 'role': 'server', "
             f"'rmem_value': {rmem}}}",
             f"{{'implementation': '{implementation}', 'role': 'client', "
             f"'rmem_value': {rmem}}}"]
    if runtime_s is None:
        lines.append("2023-01-23 05:24:45,432 ☠ Test failed")
    else:
        lines.append(f"2023-01-23 05:24:45,431 Transferring {FILESIZE / 1e6:.2f} MB took "
                     f"{runtime_s:.3f} s. Goodput: {goodput_mbps(runtime_s):.3f} Mbps")
        lines.append("2023-01-23 05:24:45,432 ✓ Test successful")
    return "\n".join(lines) + "\n"


def time_json(start_ns: int, runtime_s: float) -> str:
    return json.dumps({"start": start_ns, "end": start_ns + round(runtime_s * 1e9)})


def result_json(pairs: dict[tuple[str, str], list[float]]) -> str:
    """``result.json``: runner configuration and per-repetition goodput (``details``)."""
    measurements = [[{"name": "goodput", "abbr": "G", "filesize": FILESIZE,
                      "result": "succeeded", "details": details,
                      "server": server, "client": client}]
                    for (server, client), details in pairs.items()]
    impls = {name: "0123abcd" for pair in pairs for name in pair}
    return json.dumps({
        "server_node_name": "goracle", "client_node_name": "gard",
        "server_implementations": impls, "client_implementations": impls,
        "bandwidth_limit": "None", "client_delay": "None", "server_delay": "None",
        "measurements": measurements})


def perf_script_text() -> str:
    """``perf script`` output: header, frames innermost first, blank line."""
    blocks = []
    for i, (comm_pid, frames, period) in enumerate(PERF_SAMPLES):
        lines = [f"{comm_pid} [025]  2670.{75461 + i:06d}:     {period} cycles: "]
        lines += [f"\t    {0x7f010e5cecc7 + j:x} {frame}" for j, frame in enumerate(frames)]
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks) + "\n"


def processed_row(rep: int) -> dict[str, object]:
    """The authors' processed.csv row for one buffer repetition, by our rules."""
    spec = BUFFER_RUNS[rep]
    return {
        "logdir": f"../../{BUFFER_LOGDIR}", "hostpair": "goracle-gard", "server": "lsquic",
        "client": "lsquic", "bw_limit": "none", "repetition": rep,
        "goodput": goodput_mbps(spec["runtime_s"]),
        "server_cpu": str(spec["server_cpu"][2:-2]),
        "server_cpu_avg": steady_mean(spec["server_cpu"]),
        "client_cpu": str(spec["client_cpu"][2:-2]),
        "client_cpu_avg": steady_mean(spec["client_cpu"]),
        "client_ethtool_rx_bytes": CLIENT_NIC_RX_BYTES,
        "client_ethtool_rx_total_frames": CLIENT_NIC_RX_FRAMES,
        "server_ethtool_tx_bytes": SERVER_NIC_TX_BYTES,
        "server_ethtool_tx_total_frames": SERVER_NIC_TX_FRAMES,
        "client_netstat_packets_received": CLIENT_UDP_RECEIVED,
        "client_netstat_packets_sent": CLIENT_UDP_SENT,
        "client_netstat_receive_buffer_errors": CLIENT_RCVBUF_ERRORS,
        "server_netstat_packets_received": SERVER_UDP_RECEIVED,
        "server_netstat_packets_sent": SERVER_UDP_SENT,
        "client_runtime": spec["runtime_s"],
    }


def processed_csv_text(rows: list[dict[str, object]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


# -- the tree ---------------------------------------------------------------
def build_qir_tree(root: Path) -> QirTree:
    """Write the synthetic dataset under ``root`` and return its handle."""
    tree = QirTree(Path(root))
    base = tree.root

    _write(base / BUFFER_LOGDIR / "result.json", result_json(
        {("lsquic", "lsquic"): [goodput_mbps(BUFFER_RUNS[r]["runtime_s"]) for r in (1, 2)]}))
    for rep, spec in BUFFER_RUNS.items():
        d = tree.buffer_rep(rep)
        start = START_NS + rep * 100_000_000_000
        _write(d / "output.txt", output_text(212992, spec["runtime_s"]))
        _write(d / "client" / "time.json", time_json(start, spec["runtime_s"]))
        _write(d / "server" / "pidstat.txt",
               pidstat_text("goracle", "http_server", spec["server_cpu"], with_average=True))
        _write(d / "client" / "pidstat.txt",
               pidstat_text("gard", "http_client", spec["client_cpu"], with_average=False,
                            pid=48152, core=44))
        _write(d / "server" / "netstat-start.txt", netstat_text(1_000_000, 2_000_000))
        _write(d / "server" / "netstat-stop.txt",
               netstat_text(1_000_000 + SERVER_UDP_RECEIVED, 2_000_000 + SERVER_UDP_SENT))
        _write(d / "client" / "netstat-start.txt", netstat_text(3_000_000, 4_000_000, 5))
        _write(d / "client" / "netstat-stop.txt",
               netstat_text(3_000_000 + CLIENT_UDP_RECEIVED, 4_000_000 + CLIENT_UDP_SENT,
                            5 + CLIENT_RCVBUF_ERRORS))
        _write(d / "server" / "ethtool-start.txt", ethtool_text(10, 20, 30, 40))
        _write(d / "server" / "ethtool-stop.txt",
               ethtool_text(10 + 100, 20 + SERVER_NIC_TX_FRAMES, 30 + 1000,
                            40 + SERVER_NIC_TX_BYTES))
        _write(d / "client" / "ethtool-start.txt", ethtool_text(50, 60, 70, 80))
        _write(d / "client" / "ethtool-stop.txt",
               ethtool_text(50 + CLIENT_NIC_RX_FRAMES, 60 + 100, 70 + CLIENT_NIC_RX_BYTES,
                            80 + 1000))
    _write(tree.processed_csv, processed_csv_text([processed_row(1), processed_row(2)]))

    _write(base / BASELINE_LOGDIR / "result.json",
           result_json({("quiche", "lsquic"): [goodput_mbps(BASELINE_RUNTIME_S)]}))
    _write(tree.baseline_rep / "output.txt", output_text(212992, BASELINE_RUNTIME_S, "quiche"))
    _write(tree.baseline_rep / "client" / "time.json", time_json(START_NS, BASELINE_RUNTIME_S))
    _write(tree.baseline_rep / "server" / "log.txt", "a runner log the ingest does not parse\n")

    _write(base / PERF_LOGDIR / "result.json",
           result_json({("lsquic", "lsquic"): [goodput_mbps(PERF_RUNTIME_S)]}))
    _write(tree.perf_rep / "output.txt", output_text(6815744, PERF_RUNTIME_S))
    _write(tree.perf_rep / "client" / "time.json", time_json(START_NS, PERF_RUNTIME_S))
    _write(tree.perf_rep / "server" / "out.perf.zst",
           zstandard.ZstdCompressor().compress(perf_script_text().encode()))
    _write(base / MAPPING_DIR / "lsquic.json", json.dumps(PERF_MAPPING, indent=4))
    return tree


TCP_LOGDIR = "results/crypto/aes-noni/tcp1"
TCP_CLIENT_NIC_TX_FRAMES = 190_000  # wget's TCP ACKs


def add_tcp_run(tree: QirTree) -> Path:
    """A crypto-experiment NGINX/wget run (``tls1.3_tls1.3``) with AES-NI disabled:
    TCP, so the UDP counters barely move and the ACKs are NIC frames."""
    _write(tree.root / TCP_LOGDIR / "result.json",
           result_json({("tls1.3", "tls1.3"): [goodput_mbps(10.0)]}))
    d = tree.root / TCP_LOGDIR / "tls1.3_tls1.3" / "goodput" / "1"
    _write(d / "output.txt", output_text(6815744, 10.0, "tls1.3"))
    _write(d / "client" / "time.json", time_json(START_NS, 10.0))
    for side in ("server", "client"):
        _write(d / side / "netstat-start.txt", netstat_text(100, 100))
        _write(d / side / "netstat-stop.txt", netstat_text(102, 101))
    _write(d / "server" / "ethtool-start.txt", ethtool_text(0, 0, 0, 0))
    _write(d / "server" / "ethtool-stop.txt",
           ethtool_text(TCP_CLIENT_NIC_TX_FRAMES, SERVER_NIC_TX_FRAMES, 1, SERVER_NIC_TX_BYTES))
    _write(d / "client" / "ethtool-start.txt", ethtool_text(0, 0, 0, 0))
    _write(d / "client" / "ethtool-stop.txt",
           ethtool_text(SERVER_NIC_TX_FRAMES, TCP_CLIENT_NIC_TX_FRAMES, SERVER_NIC_TX_BYTES, 1))
    return d


# `conditions` is the one optional column a file must still carry (empty cells here).
PUBLISHED_HEADER = ("point_id,document,section,locator,quantity,value,unit,server,client,app,"
                    "stated,conditions")
PUBLISHED_ROWS = [
    "t-001,002,4.6,Fig. 6,goodput,3250,Mbit/s,lsquic,lsquic,h3,text,",
    "t-002,002,4.4,Fig. 7,cpu_share,37.0,%,lsquic,lsquic,h3,text,",
    "t-003,000,VI-A,text,goodput,4.94,Gbit/s,ngtcp2,ngtcp2,perf,text,",
]


def write_published(directory: Path, rows: list[str] | None = None,
                    name: str = "tiny.csv", header: str = PUBLISHED_HEADER) -> Path:
    """A small curated published-points CSV (the packaged ones take seconds to load)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("\n".join([header, *(PUBLISHED_ROWS if rows is None else rows)]) + "\n")
    return path


@dataclass(frozen=True)
class FullIngest:
    """The shared data ingested once into a temporary catalog (``full_ingest`` fixture)."""

    catalog: Path
    output: str  # what `quiclab data ingest` printed
    seconds: float


def pack_tarball(tree: QirTree, dest: Path, wrapper: str = "quic-10g-paper") -> Path:
    """Pack the tree as ``dest`` (``.tar.xz``) under a wrapper folder."""
    with tarfile.open(dest, "w:xz") as tar:
        for path in tree.files():
            tar.add(path, arcname=f"{wrapper}/{tree.rel(path)}")
    return dest
