"""Source 3: the UCLouvain picoquic-DPDK experiments (UCLouvain-ENSG/picoquic-dpdk-experiments).

``load(catalog, source)`` reads the authors' output files (a ``.tar.xz``, an
extracted folder or a clone) into ``runs``: every transfer, repetition or
count the files hold is one row of testbed ``uclouvain``, with the
conditions of :func:`~quiclab.datasets.sources.ucl_files.classify` (the NPF
definitions, the harness, the file names). Each file is read by the parser of
its format (:mod:`~quiclab.datasets.sources.ucl_parsers`,
:mod:`~quiclab.datasets.sources.ucl_traffic`). What the files do
not record — the hosts' CPU and clock, kernel, MTU, link rate — is NULL, never
guessed. A file that is not a measurement, or cannot be read, is one line in
``ingest_issues``; a damaged or cut file is one line too, and its readable
runs are kept. Re-running replaces the source's rows.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quiclab.datasets.catalog import Catalog
from quiclab.datasets.sources import npf as npf_files
from quiclab.datasets.sources import ucl_files, ucl_parsers, ucl_traffic
from quiclab.datasets.sources.files import iter_files, sha256_file
from quiclab.errors import DataError

SOURCE = "uclouvain"
TESTBED = "uclouvain"
PARSER_VERSION = "uclouvain-parser-1"
#: The two directly connected hosts (``cluster/server.node``, ``cluster/client.node``).
SERVER_HOST, CLIENT_HOST = "dormeur", "grincheux"
#: How far the tool's own rate may differ from bytes × 8 / seconds before it is
#: reported (rounding of the printed numbers stays far below).
RATE_TOLERANCE = 0.01

Progress = Callable[[str, int, int | None], None]

#: Parser by format name (``FileSpec.format``).
PARSERS: dict[str, Callable[[str], ucl_parsers.Parsed]] = {
    "picoquic": ucl_parsers.parse_picoquic, "msquic": ucl_parsers.parse_msquic,
    "quicly": ucl_parsers.parse_quicly, "quiche": ucl_parsers.parse_quiche,
    "picotls": ucl_parsers.parse_picotls, "served": ucl_parsers.parse_served,
    "counts": ucl_parsers.parse_counts, "iperf3": ucl_traffic.parse_iperf3,
    "udp-goodput": ucl_traffic.parse_udp_goodput,
}


@dataclass
class IngestSummary:
    source: str
    runs: int = 0
    runs_by_experiment: dict[str, int] = field(default_factory=dict)
    runs_by_stack: dict[str, int] = field(default_factory=dict)
    files: int = 0
    issues: list[tuple[str, str, str]] = field(default_factory=list)  # path, reason, severity
    seconds: float = 0.0


def run_id(path: str, ordinal: int) -> str:
    """``ucl-`` + 16 hex digits of sha256("<path in the dataset>#<n>"), n the
    record's position in its file (1-based): stable across a tarball, a folder
    and a clone, so that re-ingesting replaces rows."""
    return "ucl-" + hashlib.sha256(f"{path}#{ordinal}".encode()).hexdigest()[:16]


def _dataset_paths(files: dict[str, bytes]) -> dict[str, bytes]:
    """Paths from the dataset's root: whatever wraps ``EverythingTesting/`` (a
    ``picoquic-dpdk-experiments-<sha>/`` folder of a download) is cut off."""
    prefixes = {p[: p.index("EverythingTesting/")] for p in files if "EverythingTesting/" in p}
    if len(prefixes) != 1:
        return files
    prefix = prefixes.pop()
    return {p[len(prefix):]: data for p, data in files.items() if p.startswith(prefix)}


def load(catalog: Catalog, source: Path, strict: bool = False,
         progress: Progress | None = None) -> IngestSummary:
    """Ingest the dataset at ``source`` into ``catalog`` (idempotent).

    Raises :class:`DataError` (one line, nothing written) for a source that is
    missing, not a readable archive, or holds no ``EverythingTesting/data/``;
    with ``strict=True`` also for the first file that is empty, damaged, cut or
    named by no rule (a file that holds no measurement stays an issue line).
    """
    started = time.perf_counter()
    source = Path(source)
    summary = IngestSummary(source=str(source))
    raw = {rel: data for rel, data in iter_files(source, markers=None)}
    files = _dataset_paths(raw)
    if not any(p.startswith(ucl_files.DATA_DIR) for p in files):
        raise DataError(source, f"no {ucl_files.DATA_DIR} found: not the "
                                "picoquic-dpdk-experiments dataset")
    summary.files = len(files)

    def issue(path: str, reason: str, severity: str) -> None:
        if strict and severity != "not-measured":  # a file of no measurement is not bad
            raise DataError(path, reason)
        summary.issues.append((path, reason, severity))

    npf: dict[str, npf_files.NpfTest] = {}
    for rel, data in sorted(files.items()):
        if rel.endswith(".npf") and "/" not in rel:
            try:
                npf[rel] = npf_files.parse_npf(data.decode("utf-8"), rel)
            except UnicodeDecodeError:
                issue(rel, "not UTF-8 text", "skipped")
            except DataError as err:
                if data.strip():
                    issue(rel, err.reason, "skipped")
    if ucl_files.COMPARE_NPF not in npf:
        issue(ucl_files.COMPARE_NPF, "missing or unreadable: the cmp runs' interrupt "
                                     "core and NPF command lines are NULL", "skipped")

    rows: list[dict[str, Any]] = []
    outputs = sorted(p for p in files if p.startswith(ucl_files.DATA_DIR))
    for n, rel in enumerate(outputs, 1):
        if progress and n % 50 == 0:
            progress("parsing output files", n, len(outputs))
        if not files[rel].strip():
            issue(rel, "empty file", "skipped")
            continue
        spec = ucl_files.classify(rel, npf)
        if isinstance(spec, ucl_files.NotMeasured):
            issue(rel, spec.reason, spec.severity)
            continue
        try:
            text = files[rel].decode("utf-8")
        except UnicodeDecodeError:
            issue(rel, "not UTF-8 text", "skipped")
            continue
        parsed = PARSERS[spec.format](text)
        made = [_row(rel, i, record, spec) for i, record in enumerate(parsed.records, 1)]
        problems = list(parsed.problems)
        for row in made:
            mismatch = row.pop("_rate_mismatch", None)
            if mismatch:
                problems.append(mismatch)
        if not made:
            reason = problems[0] if problems else "no measurement found"
            issue(rel, f"{spec.format} format: {reason}", "skipped")
            continue
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            issue(rel, f"{spec.format} format: {problems[0]}{more}; the other "
                       f"{len(made)} record(s) kept", "damaged")
        rows.extend(made)
        for row in made:
            summary.runs_by_experiment[row["experiment"]] = (
                summary.runs_by_experiment.get(row["experiment"], 0) + 1)
            stack = row["server_impl"] + (f"@{row['server_build']}" if row["server_build"]
                                          else "")
            summary.runs_by_stack[stack] = summary.runs_by_stack.get(stack, 0) + 1

    file_rows = [{"source": SOURCE, "path": rel, "sha256": hashlib.sha256(data).hexdigest(),
                  "bytes": len(data)} for rel, data in sorted(files.items())]
    why = f"{summary.issues[0][0]}: {summary.issues[0][1]}" if summary.issues else ""
    with catalog.replacing(SOURCE, source, len(rows), why):  # none read: nothing replaced
        catalog.con.execute("DELETE FROM runs WHERE source = ?", [SOURCE])
        catalog.con.execute("DELETE FROM files WHERE source = ?", [SOURCE])
        catalog.con.execute("DELETE FROM ingest_issues WHERE source = ?", [SOURCE])
        if rows:
            catalog._insert_arrow("runs", catalog.columns("runs"), rows)
        catalog._insert_arrow("files", catalog.columns("files"), file_rows)
        for path, reason, severity in summary.issues:
            catalog.record_issue(SOURCE, path, reason, severity=severity)
        catalog.upsert("sources", [{
            "source": SOURCE,
            "kind": "published raw data (UCLouvain-ENSG/picoquic-dpdk-experiments)",
            "location": str(source),
            "sha256": sha256_file(source, markers=None) if source.is_file() else "",
            "parser_version": PARSER_VERSION, "ingested_at": time.time(),
            "runs": len(rows), "skipped": len(summary.issues)}])
    summary.runs = len(rows)
    summary.seconds = time.perf_counter() - started
    return summary


def _row(path: str, ordinal: int, record: ucl_parsers.Record,
         spec: ucl_files.FileSpec) -> dict[str, Any]:
    """One ``runs`` row for a record of a file."""
    cond = dict(spec.conditions)
    repetition, client = divmod(ordinal - 1, spec.clients)
    nbytes = record.bytes if record.bytes is not None else (
        spec.requested_bytes if record.status == "ok" and spec.format == "quicly" else None)
    goodput = None
    if record.status == "ok" and nbytes and record.seconds:
        goodput = nbytes * 8 / record.seconds / 1e6
    reported = record.reported_mbps
    mismatch = None
    if goodput is not None and reported and abs(goodput / reported - 1) > RATE_TOLERANCE:
        mismatch = (f"line {record.line}: the tool's rate {reported:.6g} Mbit/s differs from "
                    f"bytes × 8 / seconds = {goodput:.6g}")
    if goodput is None and record.status == "ok" and reported is not None:
        goodput = reported  # a rate without bytes and time (UDP generator, offered-rate iperf3)
    requests = cond.pop("requests", None)
    requests_per_s = None
    if record.count is not None:
        requests = record.count
        test_s = spec.extra.get("test_s")
        requests_per_s = record.count / test_s if test_s else None
    elif requests and record.seconds and cond.get("workload") == "requests":
        # N requests over one connection in S seconds; a timed single handshake
        # (handshakeBBR*) is a latency (runtime_s), not a rate.
        requests_per_s = requests / record.seconds
    values = dict(record.values)
    if "max_mtu_sent" in values:
        # picoquic's largest packet sent: its UDP payload on this path.
        cond.setdefault("udp_payload_bytes", values["max_mtu_sent"])
    if "max_pkt_burst_tx" in values:
        cond.setdefault("batch_tx", values["max_pkt_burst_tx"])
        cond.setdefault("batch_rx", values.get("max_pkt_burst_rx"))
    if "cipher_suite" in values:
        cond.setdefault("cipher", "chacha20" if "CHACHA" in values["cipher_suite"].upper()
                        else "aes-ni")
    workload = cond.pop("workload", "bulk")
    row: dict[str, Any] = {
        "run_id": run_id(path, ordinal), "source": SOURCE, "testbed": TESTBED,
        "experiment": spec.experiment, "setting": spec.setting, "logdir": path,
        "hostpair": f"{SERVER_HOST}-{CLIENT_HOST}" if spec.format not in (
            "iperf3", "udp-goodput") else None,
        "server_host": SERVER_HOST if spec.format not in ("iperf3", "udp-goodput") else None,
        "client_host": CLIENT_HOST if spec.format not in ("iperf3", "udp-goodput") else None,
        "cpu": None,  # not recorded: never a guessed catalog CPU
        "server_impl": spec.server_impl, "client_impl": spec.client_impl,
        "server_build": spec.server_build, "client_build": spec.client_build,
        "repetition": repetition + 1, "status": record.status,
        "failure_reason": record.failure if record.status != "ok" else None,
        "filesize_bytes": nbytes, "runtime_s": record.seconds,
        "goodput_mbps": goodput, "goodput_reported_mbps": reported,
        "io": spec.io, "workload": workload, "requests": requests,
        "requests_per_s": requests_per_s, "streams": 1, "chunks": 1,
        **cond,
    }
    if workload == "bulk" and record.bytes is None and record.seconds is None:
        row["filesize_bytes"] = None
    if workload == "handshakes" and record.seconds is not None:
        row["request_bytes"] = record.bytes
    aes = values.pop("cipher_suite", None) or spec.extra.get("cipher_suite")
    extra = {**{k: v for k, v in spec.extra.items() if v not in (None, "")},
             "file": path, "line": record.line, "format": spec.format,
             "conditions_from": spec.source, **values}
    if aes:
        extra["cipher_suite"] = aes
    if spec.clients > 1:
        extra["client"] = client + 1
        extra["clients"] = spec.clients
    row["extra"] = json.dumps(extra, sort_keys=True, default=str)
    if mismatch:
        row["_rate_mismatch"] = mismatch
    return row
