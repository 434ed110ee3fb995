"""What the app tests run on: synthetic cost models and a small catalog, in a temp folder.

The models are :mod:`quiclab.models.testing` ones with round numbers, named
like real implementations so that the catalog rows match them; the catalog
holds a handful of runs and published points whose conditions exercise the
matching rules of :mod:`quiclab.app.measured`.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from quiclab.datasets.catalog import Catalog
from quiclab.models.cpus import CpuCatalog
from quiclab.models.testing import synthetic_model

CPU = "AMD EPYC 7543"
#: Implementations of the synthetic registry (sender ns, receiver ns per packet).
MODELS = {"lsquic": (3000.0, 2500.0), "quiche": (4500.0, 3800.0), "quicly": (3500.0, 3000.0)}
#: Their behaviour where it is not the default: quicly refuses HTTP/3 (as the real one).
BEHAVIOUR = {"quicly": {"apps": ("perf", "hq")}}


@dataclass(frozen=True)
class AppData:
    """Locations of one test setup (also the environment the app reads)."""

    root: Path
    models: Path
    data_dir: Path
    catalog: Path

    def env(self) -> dict[str, str]:
        return {"QUICLAB_MODELS": str(self.models), "QUICLAB_DATA_DIR": str(self.data_dir),
                "QUICLAB_CATALOG": str(self.catalog)}


def write_models(directory: Path) -> Path:
    """Synthetic models as JSON files, loadable by ``Registry.load``."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, (sender_ns, receiver_ns) in MODELS.items():
        model = synthetic_model(name, sender_ns=sender_ns, receiver_ns=receiver_ns,
                                syscall_ns=500.0, ack_ns=300.0, **BEHAVIOUR.get(name, {}))
        (directory / f"{name}.json").write_text(model.dumps())
    return directory


def _run(run_id: str, goodput: float, **conditions: object) -> dict[str, object]:
    row: dict[str, object] = {
        "run_id": run_id, "source": "qir10g", "experiment": "baseline", "setting": "run1",
        "server_impl": "lsquic", "client_impl": "lsquic", "server_build": "",
        "client_build": "", "repetition": 1, "status": "ok", "goodput_mbps": goodput,
        "cpu": CPU, "app": "h3", "cipher": "aes-ni", "aes_ni": True, "rcvbuf_bytes": 212992,
        "gso": True, "gro": True, "tso": True, "mtu_bytes": 1500, "link_gbps": 10.0,
        "rtt_ms": 0.0, "loss_pct": 0.0, "reorder_pct": 0.0, "streams": 1, "chunks": 1,
        "cc": "cubic", "filesize_bytes": 8589934592,
    }
    row.update(conditions)
    return row


RUNS = [
    _run("t-base-1", 3000.0),
    # The cores it ran on (observed, not pinned): any unpinned scenario matches it.
    _run("t-base-2", 3100.0, server_core=16, client_core=16),
    # A QIR run of a slow pair moved 200 MiB, not 8 GiB: another transfer size.
    _run("t-200mib", 1500.0, filesize_bytes=209715200),
    _run("t-failed", 9999.0, status="failed", failure_reason="runner reported failure"),
    _run("t-bigbuf", 3300.0, rcvbuf_bytes=6815744, experiment="buffer",
         setting="run3/udp-buffer-6815744"),
    _run("t-march", 3900.0, server_build="march", client_build="march",
         experiment="baseline-optimized"),
    _run("t-quiche", 2000.0, server_impl="quiche", client_impl="quiche"),
    _run("t-mixed", 2400.0, client_impl="quiche"),
    # The packet size the stack used is recorded, the workload too.
    _run("t-fresh", 2500.0, source="fresh", experiment="fresh-mtu", server_build="abc123",
         client_build="abc123", app="h3", link_gbps=None, mtu_bytes=9000, cpu=CPU,
         udp_payload_bytes=8952, workload="bulk"),
    _run("t-requests", 520.0, source="fresh", experiment="fresh-requests",
         server_build="abc123", client_build="abc123", workload="requests",
         request_bytes=10000, requests=1000, connections=1, filesize_bytes=10**7),
]
PUBLISHED = [
    # A stated value in Gbit/s, rcvbuf not stated: matches every buffer.
    {"point_id": "t-pub-001", "document": "002", "section": "4.7", "locator": "Fig. 11a",
     "quantity": "goodput", "value": 3.2, "unit": "Gbit/s", "server": "lsquic",
     "client": "lsquic", "app": "h3", "cpu": CPU, "link_gbps": 10.0, "mtu_bytes": 1500,
     "cipher": "aes-ni", "conditions": "mean of 20 repetitions", "stated": "text"},
    # An upper limit in Mbit/s with a stated large buffer.
    {"point_id": "t-pub-002", "document": "002", "section": "4.1", "locator": "Fig. 3",
     "quantity": "goodput", "value": 3250.0, "unit": "Mbit/s", "server": "lsquic",
     "client": "lsquic", "app": "h3", "cpu": CPU, "rcvbuf_bytes": 6815744,
     "conditions": "largest tested buffer; bound=upper_limit", "stated": "text"},
    # Not a goodput: never shown.
    {"point_id": "t-pub-003", "document": "002", "quantity": "cpu_util", "value": 100.0,
     "unit": "%", "server": "lsquic", "client": "lsquic", "stated": "text"},
]


#: Per-second CPU of t-base-1's two processes (% of one core); the first and last
#: seconds are outside the steady window, as the collector marks them.
CPU_SAMPLES = [
    {"run_id": "t-base-1", "side": side, "t_s": t, "user_pct": None, "system_pct": None,
     "total_pct": pct, "core": None, "in_window": 0 < t < 5}
    for side, series in (("server", (40.0, 97.0, 99.0, 98.0, 100.0, 30.0)),
                         ("client", (35.0, 80.0, 84.0, 82.0, 86.0, 20.0)))
    for t, pct in enumerate(series)]
#: Folded perf samples of t-base-1 by category (the perf_categories view sums them).
PERF_SAMPLES = {"server": {"PACKET_IO": 500, "CRYPTO": 200, "CONN_MGMT": 300, "IO": 100,
                           "GENERAL": 400},
                "client": {"PACKET_IO": 600, "CRYPTO": 150, "CONN_MGMT": 250}}
PERF_STACKS = [
    {"run_id": "t-base-1", "side": side, "comm": "lsquic", "stack": f"main;{category}",
     "samples": samples, "period": samples * 1000, "category": category, "subcategory": "",
     "in_process": True}
    for side, categories in PERF_SAMPLES.items() for category, samples in categories.items()]


def write_catalog(path: Path) -> Path:
    """A catalog with :data:`RUNS`, :data:`PUBLISHED`, t-base-1's CPU samples and perf
    stacks, and the packaged CPU catalog."""
    with Catalog(path) as catalog:
        catalog.upsert("runs", RUNS)
        catalog.upsert("published_points", PUBLISHED)
        catalog.upsert("cpu_samples", CPU_SAMPLES)
        catalog.upsert("perf_stacks", PERF_STACKS, key=("run_id", "side"))
        catalog.upsert("cpus", [cpu.to_row() for cpu in CpuCatalog.packaged().cpus])
    return path


def build(root: Path) -> AppData:
    """Models and catalog under ``root`` (the data dir is ``root/data``)."""
    data_dir = root / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    return AppData(root=root, models=write_models(root / "models"), data_dir=data_dir,
                   catalog=write_catalog(data_dir / "catalog.duckdb"))


def tiny_png(path: Path, width: int = 4, height: int = 3) -> Path:
    """A valid grey PNG (what a reproduction's figure file would be)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    path.write_bytes(b"\x89PNG\r\n\x1a\n"
                     + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
    return path
