"""Source 1: the QUIC Interop Runner 10G results (tumi8/quic-10g-paper).

``load(catalog, source)`` parses the **raw per-run files** of the calibration
subset (a ``.tar.xz``, an extracted folder or a clone) into ``runs``,
``cpu_samples`` and ``perf_stacks``, checks every run against the authors'
``processed.csv`` into ``processed_check``, and records provenance in
``sources``/``files``. Missing measurements are NULL; malformed or truncated
files are skipped with one line each in ``ingest_issues`` (``strict=True``
raises instead). Re-running replaces the source's rows: nothing is added twice.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any

from quiclab.datasets.catalog import Catalog
from quiclab.datasets.sources import qir_parsers as qp
from quiclab.datasets.sources.files import iter_files, sha256_file
from quiclab.datasets.sources.perf import CategoryMapping, fold_zstd, process_prefix
from quiclab.errors import DataError, ScenarioError, excerpt
from quiclab.sim.scenario import whole_number

SOURCE = "qir10g"
#: The QIR-10G hosts' testbed (datasets/testbeds.py); their stacks use kernel UDP sockets.
TESTBED = "qir10g"
PARSER_VERSION = "qir10g-parser-3"  # 2: pidstat intervals, goodput alignment, TCP ACKs; 3: testbed
DEFAULT_RCVBUF = 212992
OPTIMIZED_RCVBUF = 6815744  # README: "receive buffer raised to 6815744 bytes"
#: Hosts of the dataset and their CPU (dataset README: goracle-gard, AMD EPYC 7543).
HOST_CPUS = {"goracle": "AMD EPYC 7543", "gard": "AMD EPYC 7543"}
#: The process names pidstat followed, per implementation (the runner's scripts).
PROCESS_NAMES = {
    "lsquic": ("http_server", "http_client"),
    "quiche": ("quiche-server", "quiche-client"),
    "tcp+tls": ("nginx", "wget"),
    "mvfst": ("hq",),
    "picoquic": ("picoquicdemo",),
}
CIPHER_DIRS = {"aes-ni": "aes-ni", "aes-noni": "aes-sw", "chacha20": "chacha20"}

Progress = Callable[[str, int, int | None], None]


def normalise_impl(name: str) -> tuple[str, str, dict[str, Any]]:
    """Dataset implementation name → (implementation, build variant, run conditions).

    ``lsquic-goracle`` is the -march build of seed 002 §4.6 (``lsquic@march``);
    ``lsquic-aes`` is built against a BoringSSL without AES-NI (cipher aes-sw,
    §4.2); ``tls1.3`` is NGINX + wget over kernel TCP/TLS.
    """
    if name in ("tls1.3", "tcp", "tcp+tls"):
        return "tcp+tls", "", {}
    for suffix, build, cond in (("-goracle", "march", {}), ("-aes", "", {"cipher": "aes-sw"}),
                                ("-udp", "udp", {})):
        if name.endswith(suffix):
            return name[: -len(suffix)], build, cond
    return name, "", {}


@dataclass
class Experiment:
    """Where a run folder sits: experiment, setting and the conditions it implies."""

    experiment: str
    setting: str
    conditions: dict[str, Any]


def classify(logdir: str) -> Experiment:
    """Map ``results/...`` experiment folders to names and known conditions.

    Conditions the experiment did not vary take the testbed's defaults: 10 Gbit/s,
    MTU 1500, no added delay or loss, AES-NI, kernel offloads on (Linux default),
    HTTP/3 (seed 002 §3–4).
    """
    parts = logdir.split("/")
    base: dict[str, Any] = {"testbed": TESTBED, "io": "kernel",
                            "link_gbps": 10.0, "mtu_bytes": 1500, "rtt_ms": 0.0,
                            "loss_pct": 0.0, "reorder_pct": 0.0, "cipher": "aes-ni",
                            "aes_ni": True, "gso": True, "gro": True, "tso": True,
                            "streams": 1, "chunks": 1, "cc": "cubic"}
    if parts[:3] == ["results", "baseline", "client-timestamps"] and len(parts) >= 5:
        optimized = parts[3].endswith("-optimized")
        return Experiment("baseline-optimized" if optimized else "baseline", parts[4],
                          {**base,
                           "rcvbuf_bytes": OPTIMIZED_RCVBUF if optimized else DEFAULT_RCVBUF})
    if parts[:3] == ["results", "buffer", "udp"] and len(parts) >= 5:
        size = parts[4].rsplit("-", 1)[-1]
        if not size.isdigit():
            raise DataError(logdir, f"cannot read the buffer size from {parts[4]!r}",
                            field="rcvbuf_bytes")
        return Experiment("buffer", "/".join(parts[3:5]), {**base, "rcvbuf_bytes": int(size)})
    if parts[:2] == ["results", "crypto"] and len(parts) >= 4:
        cipher = CIPHER_DIRS.get(parts[2])
        if cipher is None:
            raise DataError(logdir, f"unknown cipher folder {parts[2]!r}", field="cipher")
        return Experiment("crypto", "/".join(parts[2:4]),
                          {**base, "rcvbuf_bytes": OPTIMIZED_RCVBUF, "cipher": cipher,
                           "aes_ni": cipher == "aes-ni"})
    if parts[:2] == ["results", "perf"]:
        return Experiment("perf", "/".join(parts[2:]), {**base, "rcvbuf_bytes": OPTIMIZED_RCVBUF})
    return Experiment("other", "/".join(parts[1:]), base)


@dataclass
class RunParts:
    """The parsed pieces of one repetition folder."""

    logdir: str
    pair: str
    repetition: int
    time: tuple[int, int] | None = None
    log: qp.RunnerLog | None = None
    pidstat: dict[str, list[qp.CpuSample]] = field(default_factory=dict)
    netstat: dict[str, dict[str, int]] = field(default_factory=dict)  # "server:start" → counters
    ethtool: dict[str, dict[str, int]] = field(default_factory=dict)
    perf: dict[str, bytes] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)


@dataclass
class IngestSummary:
    source: str
    runs: int = 0
    runs_by_experiment: dict[str, int] = field(default_factory=dict)
    cpu_samples: int = 0
    perf_stacks: int = 0
    files: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    processed_rows: int = 0
    processed_max_diff: dict[str, float] = field(default_factory=dict)
    processed_mismatches: list[tuple[str, str, str]] = field(default_factory=list)
    seconds: float = 0.0


def _split_run_path(rel: str) -> tuple[str, str, int, str] | None:
    """``results/…/<logdir>/<server>_<client>/goodput/<rep>/<rest>`` → parts."""
    parts = rel.split("/")
    try:
        k = parts.index("goodput")
    except ValueError:
        return None
    if k < 2 or (k + 2 > len(parts) - 1 and k + 2 != len(parts)):
        return None
    try:
        rep = int(parts[k + 1])
    except (IndexError, ValueError):
        return None
    return "/".join(parts[: k - 1]), parts[k - 1], rep, "/".join(parts[k + 2:])


def _run_id(logdir: str, pair: str, rep: int) -> str:
    return "q10g-" + hashlib.sha256(f"{logdir}/{pair}/{rep}".encode()).hexdigest()[:16]


def load(catalog: Catalog, source: Path, strict: bool = False, with_perf: bool = True,
         progress: Progress | None = None) -> IngestSummary:
    """Ingest the QIR-10G dataset at ``source`` into ``catalog`` (idempotent)."""
    started = time.perf_counter()
    source = Path(source)
    summary = IngestSummary(source=str(source))

    def issue(path: str, reason: str, fld: str | None = None) -> None:
        if strict:
            raise DataError(path, reason, field=fld)
        summary.skipped.append((path, reason if fld is None else f"[{fld}] {reason}"))

    runs: dict[tuple[str, str, int], RunParts] = {}
    results: dict[str, qp.ExperimentResult] = {}
    result_dirs: set[str] = set()  # folders with a result.json, readable or not
    processed: dict[str, bytes] = {}
    mappings: dict[str, dict[str, str]] = {}
    file_rows: list[dict[str, Any]] = []
    skip = () if with_perf else ("out.perf",)
    for n, (rel, data) in enumerate(iter_files(source, skip=skip), 1):
        summary.files += 1
        file_rows.append({"source": SOURCE, "path": rel,
                          "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)})
        if progress and n % 500 == 0:
            progress("reading files", n, None)
        name = rel.rsplit("/", 1)[-1]
        if name == "result.json":
            result_dirs.add(rel.rsplit("/", 1)[0])
            try:
                results[rel.rsplit("/", 1)[0]] = qp.parse_result_json(data.decode(), rel)
            except DataError as err:
                issue(rel, err.reason, err.field)
            except UnicodeDecodeError as err:
                issue(rel, f"not UTF-8 text (byte {err.start})")
            continue
        if name == "processed.csv":
            processed[rel.rsplit("/", 1)[0]] = data
            continue
        if "/perf/mappings/" in rel and name.endswith(".json"):
            try:
                rules = json.loads(data, object_pairs_hook=dict)
                if not isinstance(rules, dict) or not all(
                        isinstance(v, str) for v in rules.values()):
                    raise ValueError("not an object of category names")
                mappings[name[:-5]] = rules
            except json.JSONDecodeError as err:
                issue(rel, f"mapping is not valid JSON ({err.msg})")
            except UnicodeDecodeError as err:
                issue(rel, f"mapping is not UTF-8 text (byte {err.start})")
            except ValueError as err:
                issue(rel, f"mapping is {err}")
            continue
        split = _split_run_path(rel)
        if split is None:
            continue
        logdir, pair, rep, rest = split
        run = runs.setdefault((logdir, pair, rep), RunParts(logdir, pair, rep))
        run.files.append(rest)
        try:
            _parse_run_file(run, rest, data, rel)
        except DataError as err:
            issue(rel, err.reason, err.field)
        except UnicodeDecodeError:
            issue(rel, "not UTF-8 text")

    if not any(row["path"].startswith("results/") for row in file_rows):
        # Nothing to ingest: keep the runs already in the catalog rather than
        # replacing them with none.
        raise DataError(source, "no QIR-10G results/ found")
    rows, cpu_rows = [], []
    perf_jobs: list[tuple[str, str, str, bytes, str]] = []
    # Once per experiment folder, not once per run (a malformed one is already reported).
    for logdir in sorted({run.logdir for run in runs.values()} - result_dirs):
        issue(f"{logdir}/result.json", "missing: file size from output.txt, no reported goodput")
    reps_per_pair: dict[tuple[str, str], int] = {}
    for logdir, pair, _ in runs:
        reps_per_pair[(logdir, pair)] = reps_per_pair.get((logdir, pair), 0) + 1
    for (logdir, pair, rep), run in sorted(runs.items()):
        try:
            row, samples = _assemble(run, results.get(logdir), issue,
                                     repetitions=reps_per_pair[(logdir, pair)])
        except DataError as err:
            if strict:
                raise  # already names the file (issue() raised it)
            issue(f"{logdir}/{pair}/goodput/{rep}", err.reason, err.field)
            continue
        rows.append(row)
        cpu_rows.extend(samples)
        summary.runs_by_experiment[row["experiment"]] = (
            summary.runs_by_experiment.get(row["experiment"], 0) + 1)
        for side, blob in run.perf.items():
            impl = row["server_impl"] if side == "server" else row["client_impl"]
            perf_jobs.append((row["run_id"], side, impl, blob,
                              f"{logdir}/{pair}/goodput/{rep}/{side}/out.perf.zst"))

    why = (f"{summary.skipped[0][0]}: {summary.skipped[0][1]}" if summary.skipped
           else "no run folders under results/")
    with catalog.replacing(SOURCE, source, len(rows), why):
        catalog.con.execute("DELETE FROM runs WHERE source = ?", [SOURCE])
        catalog.con.execute("DELETE FROM cpu_samples WHERE run_id LIKE 'q10g-%'")
        catalog.con.execute("DELETE FROM perf_stacks WHERE run_id LIKE 'q10g-%'")
        catalog.con.execute("DELETE FROM processed_check WHERE run_id LIKE 'q10g-%'")
        catalog.con.execute("DELETE FROM files WHERE source = ?", [SOURCE])
        catalog.con.execute("DELETE FROM ingest_issues WHERE source = ?", [SOURCE])
        _bulk_insert(catalog, "runs", rows)
        _bulk_insert(catalog, "cpu_samples", cpu_rows)
        _bulk_insert(catalog, "files", file_rows)
        summary.runs = len(rows)
        summary.cpu_samples = len(cpu_rows)
        for i, (run_id, side, impl, blob, path) in enumerate(perf_jobs, 1):
            if progress:
                progress("folding perf traces", i, len(perf_jobs))
            summary.perf_stacks += _load_perf(catalog, run_id, side, impl, blob, path,
                                              mappings, issue)
        _check_processed(catalog, processed, rows, summary, issue)
        for path, reason in summary.skipped:
            catalog.record_issue(SOURCE, path, reason)
        catalog.upsert("sources", [{
            "source": SOURCE, "kind": "published raw data (tumi8/quic-10g-paper)",
            "location": str(source), "sha256": sha256_file(source) if source.is_file() else "",
            "parser_version": PARSER_VERSION, "ingested_at": time.time(),
            "runs": len(rows), "skipped": len(summary.skipped)}])
    summary.seconds = time.perf_counter() - started
    return summary


def _parse_run_file(run: RunParts, rest: str, data: bytes, rel: str) -> None:
    side, _, name = rest.partition("/")
    if rest == "output.txt":
        run.log = qp.parse_output(data.decode(errors="replace"))
    elif rest == "client/time.json":
        run.time = qp.parse_time_json(data.decode(), rel)
    elif name == "pidstat.txt" and side in ("server", "client"):
        run.pidstat[side] = qp.parse_pidstat(data.decode(), rel)
    elif name.startswith("netstat-") and side in ("server", "client"):
        run.netstat[f"{side}:{name[8:-4]}"] = qp.parse_netstat(data.decode(), rel)
    elif name.startswith("ethtool-") and side in ("server", "client"):
        run.ethtool[f"{side}:{name[8:-4]}"] = qp.parse_ethtool(data.decode(), rel)
    elif name == "out.perf.zst" and side in ("server", "client"):
        run.perf[side] = data


def _delta(parts: dict[str, dict[str, int]], side: str, key: str,
           issue: Callable[..., None] | None = None, where: str = "",
           kind: str = "") -> int | None:
    """A counter's stop minus start, or None; a counter that went backwards is an issue."""
    start, stop = parts.get(f"{side}:start"), parts.get(f"{side}:stop")
    if start is None or stop is None or key not in start or key not in stop:
        return None
    delta = stop[key] - start[key]
    if delta < 0:
        if issue is not None:
            issue(f"{where}/{side}/{kind}-stop.txt",
                  f"{stop[key]} is below its start value {start[key]}: the delta is NULL", key)
        return None
    return delta


#: The fastest NIC in the dataset (seed 002 §4.7: 100G on node 1), the bound
#: when a run's conditions name no link rate, and the slack over a link's rate
#: that a goodput may show (timer granularity, not physics).
MAX_LINK_GBPS = 100.0
LINK_SLACK = 1.05


def _reported_goodput(details: list[float], log: qp.RunnerLog | None,
                      repetition: int, repetitions: int | None) -> float | None:
    """The runner's goodput of one repetition, from ``result.json``'s ``details``.

    ``details`` holds the goodput of the *successful* repetitions only, in
    order, so indexing it by repetition shifts every value after a failed
    repetition (121 runs of the dataset). The entry is found by the goodput the
    runner logged for this repetition in ``output.txt`` (rounded to 0.001 Mbit/s);
    without a log, by position only when no repetition of the pair is missing.
    A failed repetition has no reported goodput.
    """
    if log is not None and log.succeeded is False:
        return None
    if log is not None and log.goodput_mbps is not None:
        logged = log.goodput_mbps
        best = min(details, key=lambda d: abs(d - logged), default=None)
        return best if best is not None and abs(best - logged) <= 1e-3 else logged
    if repetitions is not None and len(details) == repetitions \
            and 1 <= repetition <= len(details):
        return details[repetition - 1]
    return None


def _assemble(run: RunParts, result: qp.ExperimentResult | None,
              issue: Callable[..., None], repetitions: int | None = None,
              ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    exp = classify(run.logdir)
    server_raw, _, client_raw = run.pair.partition("_")
    if not client_raw:
        raise DataError(run.logdir, f"pair folder {run.pair!r} is not <server>_<client>")
    s_impl, s_build, s_cond = normalise_impl(server_raw)
    c_impl, c_build, c_cond = normalise_impl(client_raw)
    cond = {**exp.conditions, **s_cond, **c_cond}
    if cond.get("cipher") == "aes-sw":
        cond["aes_ni"] = False
    run_id = _run_id(run.logdir, run.pair, run.repetition)
    where = f"{run.logdir}/{run.pair}/goodput/{run.repetition}"
    filesize = None
    reported = None
    server_host = client_host = None
    versions: dict[str, str] = {}
    if result is not None:
        filesize = result.filesize.get((server_raw, client_raw))
        details = result.details.get((server_raw, client_raw), [])
        reported = _reported_goodput(details, run.log, run.repetition, repetitions)
        server_host, client_host = result.server_node, result.client_node
        versions = {"server": result.commits.get(f"server:{server_raw}", ""),
                    "client": result.commits.get(f"client:{client_raw}", "")}
        if result.bandwidth_limit:
            cond["link_gbps"] = _rate_gbps(result.bandwidth_limit)
    if filesize is None and run.log and run.log.transferred_mb:
        filesize = round(run.log.transferred_mb * 1e6)
    if run.time is None and "client/time.json" not in run.files:
        issue(f"{where}/client/time.json", "missing: runtime and raw goodput are NULL")
    for side in ("server", "client"):
        for kind in ("netstat", "ethtool"):
            present = {end for end in ("start", "stop")
                       if f"{side}/{kind}-{end}.txt" in run.files}
            if len(present) == 1:  # a counter without its other end gives no delta
                absent = "stop" if "start" in present else "start"
                issue(f"{where}/{side}/{kind}-{absent}.txt",
                      f"missing: {side} {kind} deltas are NULL")
    rcvbuf = cond.get("rcvbuf_bytes")
    if run.log and run.log.rmem_values and rcvbuf is not None and \
            run.log.rmem_values[0] != rcvbuf:
        issue(f"{where}/output.txt",
              f"rmem_value {run.log.rmem_values[0]} differs from the folder's {rcvbuf}",
              "rmem_value")
    start_ns = end_ns = None
    runtime = goodput = None
    if run.time:
        start_ns, end_ns = run.time
        runtime = (end_ns - start_ns) / 1e9
        if filesize:
            goodput = filesize * 8 / runtime / 1e6
    app = "tcp" if s_impl == "tcp+tls" else ("hq" if "msquic" in (s_impl, c_impl) else "h3")
    status = "ok" if (goodput or reported) else "failed"
    failure = "runner reported failure"
    if run.log and run.log.succeeded is False:
        status = "failed"
    if status == "failed":
        # A failed transfer ended early (an error after ~1 s, or the runner's
        # timeout): size / runtime is not a goodput (it reached 6.8 Tbit/s).
        goodput = None
    elif goodput is not None and runtime is not None:
        link_mbps = float(cond.get("link_gbps") or MAX_LINK_GBPS) * 1e3
        if goodput > LINK_SLACK * link_mbps:
            # A run the runner calls successful cannot beat its link: the
            # timestamps are wrong, so is size / runtime.
            issue(f"{where}/client/time.json",
                  f"runtime {runtime:.6g} s gives {goodput:.0f} Mbit/s for {filesize} B, "
                  f"above the {link_mbps:.0f} Mbit/s link: goodput is NULL", "end")
            goodput = None
            if not reported:  # no goodput at all: not an ok run
                status, failure = "failed", "timestamps give a goodput above the link"
    row: dict[str, Any] = {
        "run_id": run_id, "source": SOURCE, "experiment": exp.experiment,
        "setting": exp.setting, "logdir": run.logdir,
        "hostpair": f"{server_host}-{client_host}" if server_host else None,
        "server_host": server_host, "client_host": client_host,
        "cpu": HOST_CPUS.get(server_host or ""),
        "server_impl": s_impl, "client_impl": c_impl, "server_build": s_build,
        "client_build": c_build, "server_version": versions.get("server"),
        "client_version": versions.get("client"), "repetition": run.repetition,
        "status": status, "failure_reason": None if status == "ok" else failure,
        "filesize_bytes": filesize, "start_ns": start_ns, "end_ns": end_ns,
        "runtime_s": runtime, "goodput_mbps": goodput, "goodput_reported_mbps": reported,
        "app": app, **{k: v for k, v in cond.items() if k != "rcvbuf_bytes"},
        "rcvbuf_bytes": rcvbuf, "udp_payload_bytes": None,
    }
    samples: list[dict[str, Any]] = []
    for side in ("server", "client"):
        cpu = run.pidstat.get(side)
        if cpu is not None:
            window = qp.steady_window(cpu)
            in_window = {s.t_s for s in window}
            for s in cpu:
                samples.append({"run_id": run_id, "side": side, "t_s": s.t_s,
                                "user_pct": s.user_pct, "system_pct": s.system_pct,
                                "total_pct": s.total_pct, "core": s.core,
                                "in_window": s.t_s in in_window})
            if window:
                row[f"{side}_cpu_pct"] = fmean(s.total_pct for s in window)
                row[f"{side}_cpu_user_pct"] = fmean(s.user_pct for s in window)
                row[f"{side}_cpu_sys_pct"] = fmean(s.system_pct for s in window)
                if runtime:
                    row[f"{side}_cpu_s"] = row[f"{side}_cpu_pct"] / 100 * runtime
                cores = [s.core for s in window if s.core is not None]
                row[f"{side}_core"] = max(set(cores), key=cores.count) if cores else None
        for key, col in (("sent", "udp_sent"), ("received", "udp_received"),
                         ("rcvbuf_errors", "udp_rcvbuf_errors"),
                         ("sndbuf_errors", "udp_sndbuf_errors"), ("rx_errors", "udp_rx_errors")):
            row[f"{side}_{col}"] = _delta(run.netstat, side, key, issue, where, "netstat")
        for key in ("tx_frames", "rx_frames", "tx_bytes", "rx_bytes", "rx_discards",
                    "tx_discards"):
            row[f"{side}_nic_{key}"] = _delta(run.ethtool, side, key, issue, where, "ethtool")
    row["data_packets"] = row.get("server_nic_tx_frames") or row.get("server_udp_sent")
    # TCP's ACKs are not UDP datagrams (client_udp_sent is 0 for NGINX/wget): count
    # the client NIC's frames instead; QUIC's ACKs are the client's UDP datagrams.
    row["ack_packets"] = (row.get("client_nic_tx_frames") if s_impl == "tcp+tls"
                          else row.get("client_udp_sent"))
    row["extra"] = json.dumps({"pair": run.pair, "files": sorted(run.files),
                               "rmem_values": run.log.rmem_values if run.log else []})
    return row, samples


def _rate_gbps(text: str) -> float | None:
    units = {"gbit": 1.0, "mbit": 1e-3, "kbit": 1e-6}
    lower = text.lower()
    for unit, factor in units.items():
        if lower.endswith(unit):
            try:
                return float(lower[: -len(unit)]) * factor
            except ValueError:
                return None
    return None


def _bulk_insert(catalog: Catalog, table: str, rows: list[dict[str, Any]]) -> None:
    if rows:
        catalog._insert_arrow(table, catalog.columns(table), rows)


def _load_perf(catalog: Catalog, run_id: str, side: str, impl: str, blob: bytes, path: str,
               mappings: dict[str, dict[str, str]], issue: Callable[..., None]) -> int:
    try:
        stacks = fold_zstd(blob, path)
    except DataError as err:
        issue(path, err.reason, err.field)
        return 0
    rules = mappings.get(impl)
    if rules is None:
        issue(path, f"no category mapping for {impl} (analysis-pipeline/…/mappings/{impl}.json)")
    try:
        mapping = CategoryMapping(rules or {}, f"{impl}.json")
    except DataError as err:  # a rule that is not a regular expression
        issue(path, err.reason, err.field)
        mapping = CategoryMapping({}, f"{impl}.json")
    prefix = process_prefix(impl, side)
    rows = []
    for st in stacks:
        in_process = st.stack.startswith(prefix + ";") or st.stack == prefix
        cat, label = mapping.classify(st.stack) if in_process else ("OTHER_PROCESS", st.comm)
        rows.append({"run_id": run_id, "side": side, "comm": st.comm, "stack": st.stack,
                     "samples": st.samples, "period": st.period, "category": cat,
                     "subcategory": label, "in_process": in_process})
    _bulk_insert(catalog, "perf_stacks", rows)
    return len(rows)


#: processed.csv column → (runs column, tolerance as relative difference).
PROCESSED_COLUMNS = {
    # Our goodput (file size × 8 / time.json runtime) against the runner's: the
    # runner times the transfer with its own µs clock, up to 0.1 ms (4e-6) apart.
    "goodput": ("goodput_mbps", 1e-5),
    "client_runtime": ("runtime_s", 1e-6),
    "server_cpu_avg": ("server_cpu_pct", 1e-6),
    "client_cpu_avg": ("client_cpu_pct", 1e-6),
    "server_netstat_packets_sent": ("server_udp_sent", 0.0),
    "server_netstat_packets_received": ("server_udp_received", 0.0),
    "client_netstat_packets_sent": ("client_udp_sent", 0.0),
    "client_netstat_packets_received": ("client_udp_received", 0.0),
    "client_netstat_receive_buffer_errors": ("client_udp_rcvbuf_errors", 0.0),
    "server_ethtool_tx_total_frames": ("server_nic_tx_frames", 0.0),
    "client_ethtool_rx_total_frames": ("client_nic_rx_frames", 0.0),
    "server_ethtool_tx_bytes": ("server_nic_tx_bytes", 0.0),
    "client_ethtool_rx_bytes": ("client_nic_rx_bytes", 0.0),
}


def _check_processed(catalog: Catalog, processed: dict[str, bytes], rows: list[dict[str, Any]],
                     summary: IngestSummary, issue: Callable[..., None]) -> None:
    """Compare each run's raw-derived values with the authors' processed.csv."""
    lookup = {(r["logdir"], _raw_pair(r), int(r["repetition"])): r for r in rows}
    checks: list[dict[str, Any]] = []
    for folder, data in sorted(processed.items()):
        path = f"{folder}/processed.csv"
        text = data.decode(errors="replace")
        if not text.strip():
            issue(path, "empty file (no header, no rows)")
            continue
        reader = csv.DictReader(io.StringIO(text))
        for line in reader:
            summary.processed_rows += 1
            # The authors' logdir is relative to their checkout ("../../results/…"
            # or "srv/quic-10g/results/…"): keep it from "results/" on.
            logdir = line.get("logdir", "")
            logdir = logdir[logdir.index("results/"):] if "results/" in logdir else logdir
            pair = f"{line.get('server')}_{line.get('client')}"
            try:
                rep = whole_number("repetition", line.get("repetition") or "")
            except ScenarioError:
                issue(path, f"row {reader.line_num}: {excerpt(line.get('repetition'))} is not "
                            "a whole number", "repetition")
                continue
            run = lookup.get((logdir, pair, rep))
            if run is None:
                summary.processed_mismatches.append(
                    (f"{logdir}/{pair}/{rep}", "all", "in processed.csv but no raw run folder"))
                continue
            for col, (ours, tol) in PROCESSED_COLUMNS.items():
                raw_text = line.get(col, "")
                if raw_text in ("", None):
                    continue
                try:
                    processed_value = float(raw_text)
                except ValueError:  # a word where the authors' file has numbers
                    issue(path, f"row {reader.line_num}: {excerpt(raw_text)} is not a number",
                          col)
                    continue
                if not math.isfinite(processed_value):
                    issue(path, f"row {reader.line_num}: {excerpt(raw_text)} is not a finite "
                                "number", col)
                    continue
                mine = run.get(ours)
                if mine is None:
                    summary.processed_mismatches.append(
                        (run["run_id"], col, "processed has a value, the raw files do not"))
                    continue
                diff = abs(float(mine) - processed_value)
                rel = diff / abs(processed_value) if processed_value else diff
                checks.append({"run_id": run["run_id"], "column_name": col, "raw": float(mine),
                               "processed": processed_value, "abs_diff": diff, "rel_diff": rel})
                summary.processed_max_diff[col] = max(summary.processed_max_diff.get(col, 0.0), rel)
                if rel > max(tol, 1e-9):
                    summary.processed_mismatches.append(
                        (run["run_id"], col, f"raw {float(mine):.6g} vs processed "
                                             f"{processed_value:.6g}"))
    _bulk_insert(catalog, "processed_check", checks)


def _raw_pair(row: dict[str, Any]) -> str:
    """The dataset's own folder name for the pair (before normalisation)."""
    return str(json.loads(row["extra"])["pair"])
