"""qlog traces into the catalog: real stacks' and the engines' alike.

qlog (draft-ietf-quic-qlog-main-schema, -quic-events) is the IETF's trace
format for QUIC: one JSON record per event (``time``, ``name``, ``data``),
either in one JSON document (``.qlog``: ``traces[].events``) or as JSON text
sequences (``.sqlog``, RFC 7464: each record after an RS byte, 0x1e). The
stacks here write different revisions of it:

- quic-go v0.65 and quinn-proto 0.11 (``qlog`` crate 0.15) name events
  ``quic:packet_sent``, ``quic:recovery_metrics_updated`` …;
- quiche 0.30 and ngtcp2 0.12 the older ``transport:packet_sent``,
  ``recovery:metrics_updated`` …; aioquic 1.7 the same names in one JSON file;
- draft-01 traces (``event_fields`` + arrays) are read too.

Every event is normalised to one flat row (:data:`EVENT_COLUMNS`): the event's
short name without its category, time in ms since the trace's first event,
the recovery metrics (cwnd, bytes in flight, RTTs, pacing rate, ssthresh), the
packet (number, type, size, trigger) and what its frames say (ACK ranges and
delay, stream bytes, MAX_DATA / MAX_STREAM_DATA). No maintained Python reader
of qlog exists on PyPI (the ``qlog`` package there is an unrelated logger;
aioquic's ``QuicLogger`` only writes), so the reader is here.

Storage: each trace's full event table is written as Parquet (zstd) under
``<data dir>/qlog/<run id>/``; the catalog's ``qlog_events`` holds every event
of a trace up to ``max_events`` and, above that, all recovery events (metrics,
losses, congestion states) plus an even sample of packet events, with
``qlog_traces.sampled`` saying so; ``qlog_connections`` has one summary row
per trace. :func:`events` reads a trace back whole or sampled. A malformed or
truncated trace is one ``ingest_issues`` line and the events before the damage
are kept; the run itself is never touched.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

#: Event columns, in order, with DuckDB types (``qlog_events``; the Parquet files too).
EVENT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("trace_id", "VARCHAR"),
    ("seq", "BIGINT"),
    ("t_ms", "DOUBLE"),
    ("category", "VARCHAR"),
    ("event", "VARCHAR"),
    ("packet_type", "VARCHAR"),
    ("packet_number", "BIGINT"),
    ("size_bytes", "BIGINT"),
    ("trigger", "VARCHAR"),
    ("cwnd_bytes", "DOUBLE"),
    ("bytes_in_flight", "DOUBLE"),
    ("ssthresh_bytes", "DOUBLE"),
    ("smoothed_rtt_ms", "DOUBLE"),
    ("latest_rtt_ms", "DOUBLE"),
    ("min_rtt_ms", "DOUBLE"),
    ("rtt_variance_ms", "DOUBLE"),
    ("pacing_rate_bps", "DOUBLE"),
    ("old_state", "VARCHAR"),
    ("new_state", "VARCHAR"),
    ("ack_eliciting", "BOOLEAN"),
    ("ack_delay_ms", "DOUBLE"),
    ("ack_ranges", "VARCHAR"),
    ("acked_packets", "BIGINT"),
    ("largest_acked", "BIGINT"),
    ("stream_frames", "INTEGER"),
    ("stream_bytes", "BIGINT"),
    ("max_data", "BIGINT"),
    ("max_stream_data", "BIGINT"),
    ("lost_total", "BIGINT"),
)

#: One row per trace (``qlog_traces``): where it came from and how it is stored.
TRACE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("trace_id", "VARCHAR PRIMARY KEY"),
    ("run_id", "VARCHAR"),
    ("side", "VARCHAR"),  # server | client | sender | receiver
    ("stack", "VARCHAR"),
    ("origin", "VARCHAR"),  # fresh | des | ns3 | file
    ("path", "VARCHAR"),
    ("qlog_version", "VARCHAR"),
    ("format", "VARCHAR"),  # JSON | JSON-SEQ
    ("events", "BIGINT"),
    ("events_in_catalog", "BIGINT"),
    ("sampled", "BOOLEAN"),
    ("truncated", "BOOLEAN"),
    ("parquet_path", "VARCHAR"),
    ("sha256", "VARCHAR"),
)

#: One summary row per trace (``qlog_connections``), from its events.
CONNECTION_COLUMNS: tuple[tuple[str, str], ...] = (
    ("trace_id", "VARCHAR PRIMARY KEY"),
    ("run_id", "VARCHAR"),
    ("side", "VARCHAR"),
    ("stack", "VARCHAR"),
    ("duration_ms", "DOUBLE"),
    ("packets_sent", "BIGINT"),
    ("packets_received", "BIGINT"),
    ("packets_lost", "BIGINT"),
    ("loss_by_threshold", "BIGINT"),  # reordering / packet threshold
    ("loss_by_time", "BIGINT"),
    ("loss_by_pto", "BIGINT"),
    ("acks_sent", "BIGINT"),
    ("acks_received", "BIGINT"),
    ("bytes_sent", "BIGINT"),
    ("stream_bytes_sent", "BIGINT"),
    ("stream_bytes_received", "BIGINT"),
    ("metrics_updates", "BIGINT"),
    ("cwnd_max_bytes", "DOUBLE"),
    ("cwnd_median_bytes", "DOUBLE"),
    ("min_rtt_ms", "DOUBLE"),
    ("smoothed_rtt_median_ms", "DOUBLE"),
    ("smoothed_rtt_p95_ms", "DOUBLE"),
    ("congestion_state_changes", "BIGINT"),
    ("max_data_updates", "BIGINT"),
    ("max_stream_data_updates", "BIGINT"),
)

#: Events kept whole in the catalog when a trace is sampled (the recovery dynamics).
RECOVERY_EVENTS = frozenset({"metrics_updated", "packet_lost", "congestion_state_updated",
                             "loss_timer_updated", "parameters_set", "spurious_loss",
                             "packets_acked"})
#: A trace with more events than this keeps only a sample in the catalog.
MAX_EVENTS_IN_CATALOG = 200_000

#: Event names of later drafts, mapped to the short names used here.
_RENAMED = {
    "recovery_metrics_updated": "metrics_updated",
    "recovery_parameters_set": "parameters_set",
    "packet_dropped": "packet_dropped",
}

RS = "\x1e"


class QlogError(ValueError):
    """A trace that cannot be read at all (the message names the file and what is wrong)."""


@dataclass
class Trace:
    """One parsed trace: its header and its normalised events."""

    path: str
    format: str
    qlog_version: str
    vantage: str
    title: str
    events: pd.DataFrame
    truncated: bool = False
    problems: list[str] = field(default_factory=list)


def _read_text(path: Path) -> str:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    elif raw[:4] == b"\x28\xb5\x2f\xfd":
        import zstandard

        raw = zstandard.ZstdDecompressor().decompressobj().decompress(raw)
    return raw.decode("utf-8", errors="replace")


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            f = float(value)
        except ValueError:
            return None
        return f if math.isfinite(f) else None
    return None


def _int(value: Any) -> int | None:
    f = _num(value)
    return None if f is None else int(f)


def _obj(data: dict[str, Any], key: str) -> dict[str, Any]:
    """``data[key]`` when it is a JSON object, else an empty one."""
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _short(name: str) -> tuple[str, str]:
    category, _, short = name.rpartition(":")
    return category, _RENAMED.get(short, short)


def _ranges(acked: Any) -> tuple[list[tuple[int, int]], int]:
    """ACK ranges as (low, high) pairs and the packets they cover."""
    out: list[tuple[int, int]] = []
    if not isinstance(acked, list):
        return out, 0
    for r in acked:
        if isinstance(r, list | tuple) and r:
            lo, hi = _int(r[0]), _int(r[-1])
        else:
            lo = hi = _int(r)
        if lo is None or hi is None:
            continue
        out.append((min(lo, hi), max(lo, hi)))
    return out, sum(hi - lo + 1 for lo, hi in out)


def normalise(name: str, data: dict[str, Any], time_ms: float) -> dict[str, Any]:
    """One event as a flat row of :data:`EVENT_COLUMNS` (``trace_id`` and ``seq`` aside)."""
    category, short = _short(name)
    row: dict[str, Any] = {"t_ms": time_ms, "category": category, "event": short}
    if not isinstance(data, dict):
        return row
    header = _obj(data, "header")
    if header or "packet_number" in data:
        row["packet_number"] = _int(header.get("packet_number", data.get("packet_number")))
        row["packet_type"] = header.get("packet_type", data.get("packet_type"))
    raw = _obj(data, "raw")
    size = raw.get("length", header.get("length", header.get("packet_size",
                                                                data.get("packet_size"))))
    if size is not None:
        row["size_bytes"] = _int(size)
    trigger = data.get("trigger")
    if isinstance(trigger, str):
        row["trigger"] = trigger
    lost = data.get("cf_lost_packets")
    if isinstance(lost, dict):
        # quiche's cumulative count of lost packets (it logs no packet_lost events).
        row["lost_total"] = _int(lost.get("total"))
    for col, keys in (("cwnd_bytes", ("congestion_window", "cwnd")),
                      ("bytes_in_flight", ("bytes_in_flight",)),
                      ("ssthresh_bytes", ("ssthresh",)),
                      ("smoothed_rtt_ms", ("smoothed_rtt",)),
                      ("latest_rtt_ms", ("latest_rtt",)),
                      ("min_rtt_ms", ("min_rtt",)),
                      ("rtt_variance_ms", ("rtt_variance",)),
                      ("pacing_rate_bps", ("pacing_rate",))):
        for key in keys:
            if key in data:
                value = _num(data[key])
                # u64::MAX and the like stand for "infinite" (an unset ssthresh).
                row[col] = value if value is None or value < 1e15 else None
                break
    if short == "congestion_state_updated":
        row["old_state"] = data.get("old")
        row["new_state"] = data.get("new", data.get("state"))
    frames = data.get("frames")
    if isinstance(frames, list):
        eliciting = False
        acked_total, stream_frames, stream_bytes = 0, 0, 0
        ranges_all: list[tuple[int, int]] = []
        for f in frames:
            if not isinstance(f, dict):
                continue
            ft = f.get("frame_type")
            if ft == "ack":
                rr, n = _ranges(f.get("acked_ranges"))
                ranges_all.extend(rr)
                acked_total += n
                delay = _num(f.get("ack_delay"))
                if delay is not None:
                    row["ack_delay_ms"] = delay
            else:
                if ft not in ("padding", "connection_close"):
                    eliciting = True
                if ft == "stream":
                    stream_frames += 1
                    stream_bytes += _int(f.get("length")) or 0
                elif ft == "max_data":
                    row["max_data"] = _int(f.get("maximum"))
                elif ft == "max_stream_data":
                    row["max_stream_data"] = _int(f.get("maximum"))
        row["ack_eliciting"] = eliciting
        if ranges_all:
            row["ack_ranges"] = json.dumps(ranges_all, separators=(",", ":"))
            row["acked_packets"] = acked_total
            row["largest_acked"] = max(hi for _, hi in ranges_all)
        if stream_frames:
            row["stream_frames"] = stream_frames
            row["stream_bytes"] = stream_bytes
    return row


def _header_info(header: dict[str, Any]) -> tuple[str, str, str, float, str]:
    """(qlog_version, vantage, title, time scale to ms, time format) of a header record."""
    version = str(header.get("qlog_version", ""))
    trace = _obj(header, "trace") or header
    vp = _obj(trace, "vantage_point")
    vantage = str(vp.get("type", "") or "")
    title = str(trace.get("title", header.get("title", "")) or "")
    common = _obj(trace, "common_fields")
    config = _obj(trace, "configuration")
    units = common.get("time_units", config.get("time_units", "ms"))
    scale = 1e-3 if units == "us" else 1.0
    fmt = str(common.get("time_format", "relative"))
    return version, vantage, title, scale, fmt


def _records_seq(text: str) -> Iterator[tuple[int, str]]:
    """(index, JSON text) of each record of a JSON text sequence (RS-separated, or
    newline-delimited when the writer left the RS out)."""
    parts = text.split(RS) if RS in text else text.splitlines()
    for i, part in enumerate(parts):
        part = part.strip()
        if part:
            yield i, part


def parse(path: Path | str) -> Trace:
    """Read one qlog file (``.qlog``, ``.sqlog``, optionally ``.gz``/``.zst``).

    Damage after the header (a record that is not JSON, a truncated last record)
    keeps the events before it, sets ``truncated`` and names the damage in
    ``problems``; a file without a readable header raises :class:`QlogError`.
    """
    path = Path(path)
    try:
        text = _read_text(path)
    except (OSError, ValueError, ImportError) as err:
        raise QlogError(f"{path}: unreadable: {err}") from err
    stripped = text.lstrip()
    if not stripped:
        raise QlogError(f"{path}: empty file")
    problems: list[str] = []
    truncated = False
    raw_events: list[tuple[float, str, dict[str, Any]]] = []
    if stripped.startswith(RS) or (not stripped.startswith("{\"qlog_version\"") and RS in text):
        fmt = "JSON-SEQ"
    else:
        # One JSON document (aioquic, qvis exports) — unless the document does not
        # parse and is newline-delimited (a JSON-SEQ without RS).
        try:
            doc = json.loads(stripped)
            fmt = "JSON"
        except json.JSONDecodeError:
            fmt = "JSON-SEQ"
    if fmt == "JSON":
        if (not isinstance(doc, dict) or not isinstance(doc.get("traces"), list)
                or not doc["traces"]):
            raise QlogError(f"{path}: field traces: missing or empty (not a qlog file)")
        trace = doc["traces"][0]
        if not isinstance(trace, dict):
            raise QlogError(f"{path}: field traces[0]: not an object")
        version, vantage, title, scale, tfmt = _header_info({**trace, "qlog_version":
                                                            doc.get("qlog_version", "")})
        fields_ = trace.get("event_fields")
        for ev in trace.get("events", []) or []:
            if isinstance(ev, list) and isinstance(fields_, list):
                ev = dict(zip(fields_, ev, strict=False))
                ev = {"time": ev.get("relative_time", ev.get("time")),
                      "name": f"{ev.get('category', '')}:{ev.get('event', ev.get('name', ''))}",
                      "data": ev.get("data", {})}
            if not isinstance(ev, dict):
                continue
            t = _num(ev.get("time"))
            if t is None:
                continue
            raw_events.append((t * scale, str(ev.get("name", "")), ev.get("data") or {}))
    else:
        records = _records_seq(text)
        header: dict[str, Any] | None = None
        for i, rec in records:
            try:
                obj = json.loads(rec)
            except json.JSONDecodeError as err:
                if header is None:
                    raise QlogError(f"{path}: record 0: not JSON ({err.msg})") from err
                truncated = True
                problems.append(f"record {i}: not JSON ({err.msg} at char {err.pos}); "
                                "events after it dropped")
                break
            if header is None:
                if not isinstance(obj, dict) or ("qlog_version" not in obj and "trace" not in obj):
                    raise QlogError(f"{path}: record 0: no qlog_version (not a qlog header)")
                header = obj
                version, vantage, title, scale, tfmt = _header_info(obj)
                continue
            if not isinstance(obj, dict):
                continue
            t = _num(obj.get("time"))
            if t is None:
                continue
            raw_events.append((t * scale, str(obj.get("name", "")), obj.get("data") or {}))
        if header is None:
            raise QlogError(f"{path}: no qlog header record")
    rows = []
    if tfmt == "delta":
        acc = 0.0
        shifted = []
        for t, n, d in raw_events:
            acc += t
            shifted.append((acc, n, d))
        raw_events = shifted
    t0 = min((t for t, _, _ in raw_events), default=0.0)
    for seq, (t, name, data) in enumerate(raw_events):
        row = normalise(name, data, t - t0)
        row["seq"] = seq
        rows.append(row)
    frame = pd.DataFrame(rows, columns=[c for c, _ in EVENT_COLUMNS if c != "trace_id"])
    _rtt_in_seconds(frame)
    return Trace(path=str(path), format=fmt, qlog_version=version, vantage=vantage,
                 title=title, events=frame, truncated=truncated, problems=problems)


#: RFC 9002 §6.2.2 kInitialRtt (333 ms): the first RTT a trace's metrics report.
INITIAL_RTT_MS = 333.0
RTT_COLUMNS = ("smoothed_rtt_ms", "latest_rtt_ms", "min_rtt_ms", "rtt_variance_ms")


def _rtt_in_seconds(frame: pd.DataFrame) -> None:
    """Scale RTTs logged in seconds to milliseconds, in place. qlog's RTTs are
    milliseconds; quinn-proto 0.11 logs seconds (``as_secs_f32``), recognisable by
    its initial RTT, 0.333 (kInitialRtt, 333 ms) where others log 333."""
    srtt = frame["smoothed_rtt_ms"].dropna()
    if len(srtt) and (srtt.round(6) == INITIAL_RTT_MS / 1e3).any() \
            and not (srtt.round(3) == INITIAL_RTT_MS).any():
        for col in RTT_COLUMNS:
            frame[col] = frame[col] * 1e3


def summarise(events: pd.DataFrame) -> dict[str, Any]:
    """The ``qlog_connections`` numbers of one trace's events."""
    ev = events
    def count(mask: Any) -> int:
        return int(mask.sum())
    sent = ev[ev.event == "packet_sent"]
    received = ev[ev.event == "packet_received"]
    lost = ev[ev.event == "packet_lost"]
    trig = lost.trigger.astype("string").fillna("").str.lower()
    metrics = ev[ev.event == "metrics_updated"]
    cwnd = metrics.cwnd_bytes.dropna()
    srtt = ev.smoothed_rtt_ms.dropna()
    minrtt = pd.concat([ev.min_rtt_ms.dropna(), ev.latest_rtt_ms.dropna()])

    def q(s: pd.Series, p: float) -> float | None:
        return float(s.quantile(p)) if len(s) else None
    return {
        "duration_ms": float(ev.t_ms.max()) if len(ev) else 0.0,
        "packets_sent": len(sent), "packets_received": len(received),
        "packets_lost": max(len(lost), int(ev.lost_total.max())
                            if ev.lost_total.notna().any() else 0),
        "loss_by_threshold": count(trig.str.contains("reorder|packet_threshold|threshold")
                                   & ~trig.str.contains("time")),
        "loss_by_time": count(trig.str.contains("time")),
        "loss_by_pto": count(trig.str.contains("pto")),
        "acks_sent": count(sent.ack_ranges.notna()),
        "acks_received": count(received.ack_ranges.notna()),
        "bytes_sent": int(sent.size_bytes.fillna(0).sum()),
        "stream_bytes_sent": int(sent.stream_bytes.fillna(0).sum()),
        "stream_bytes_received": int(received.stream_bytes.fillna(0).sum()),
        "metrics_updates": len(metrics),
        "cwnd_max_bytes": float(cwnd.max()) if len(cwnd) else None,
        "cwnd_median_bytes": q(cwnd, 0.5),
        "min_rtt_ms": float(minrtt.min()) if len(minrtt) else None,
        "smoothed_rtt_median_ms": q(srtt, 0.5), "smoothed_rtt_p95_ms": q(srtt, 0.95),
        "congestion_state_changes": count(ev.event == "congestion_state_updated"),
        "max_data_updates": count(ev.max_data.notna()),
        "max_stream_data_updates": count(ev.max_stream_data.notna()),
    }


def sample(events: pd.DataFrame, max_events: int) -> pd.DataFrame:
    """At most about ``max_events`` rows: every recovery event, an even sample of the rest."""
    if len(events) <= max_events:
        return events
    keep = events.event.isin(RECOVERY_EVENTS)
    rest = events.index[~keep]
    room = max(max_events - int(keep.sum()), 0)
    if room and len(rest):
        step = max(1, math.ceil(len(rest) / room))
        keep.loc[rest[::step]] = True
    return events[keep]


def guess_side(path: Path, vantage: str, title: str) -> str:
    """server | client from the vantage point, else from the file's name."""
    for text in (vantage, title, path.name, path.parent.name):
        t = text.lower()
        if "server" in t:
            return "server"
        if "client" in t:
            return "client"
    return "unknown"


def qlog_files(logdir: Path) -> list[Path]:
    """qlog files a run's log directory holds (``qlog-*/`` and ``*.qlog``/``*.sqlog``)."""
    out: list[Path] = []
    for p in sorted(Path(logdir).rglob("*")):
        name = p.name.lower()
        if p.is_file() and any(name.endswith(s) for s in (".qlog", ".sqlog", ".qlog.gz",
                                                           ".sqlog.gz", ".qlog.zst",
                                                           ".sqlog.zst")):
            out.append(p)
    return out


def ensure_tables(con: Any) -> None:
    """Create the three qlog tables if they are missing (the catalog's schema stays 3:
    the tables are additive and empty until a trace is ingested)."""
    con.execute("CREATE TABLE IF NOT EXISTS qlog_traces ("
                + ", ".join(f"{n} {t}" for n, t in TRACE_COLUMNS) + ")")
    con.execute("CREATE TABLE IF NOT EXISTS qlog_connections ("
                + ", ".join(f"{n} {t}" for n, t in CONNECTION_COLUMNS) + ")")
    con.execute("CREATE TABLE IF NOT EXISTS qlog_events ("
                + ", ".join(f"{n} {t}" for n, t in EVENT_COLUMNS) + ")")
    for table, columns in (("qlog_events", EVENT_COLUMNS), ("qlog_connections",
                                                           CONNECTION_COLUMNS)):
        have = {r[0] for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ?",
            [table]).fetchall()}
        for name, kind in columns:
            if name not in have:  # a column added since the table was made
                con.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind.split()[0]}")


def trace_id(run_id: str, side: str, path: Path) -> str:
    return f"{run_id}:{side}:{path.name}"


def store(cat: Any, trace: Trace, *, run_id: str, side: str, stack: str | None,
          origin: str, parquet_dir: Path | None,
          max_events: int = MAX_EVENTS_IN_CATALOG) -> dict[str, Any]:
    """Write one parsed trace into the catalog (replacing an earlier ingest of it) and
    its full events to Parquet (zstd) when ``parquet_dir`` is given. Returns the
    ``qlog_traces`` row."""
    tid = trace_id(run_id, side, Path(trace.path))
    events = trace.events.copy()
    events.insert(0, "trace_id", tid)
    parquet_path = None
    if parquet_dir is not None:
        parquet_dir.mkdir(parents=True, exist_ok=True)
        target = parquet_dir / (Path(trace.path).name.replace(":", "_") + ".parquet")
        events.to_parquet(target, compression="zstd", index=False)
        parquet_path = str(target)
    kept = sample(events, max_events)
    try:
        digest = hashlib.sha256(Path(trace.path).read_bytes()).hexdigest()[:16]
    except OSError:
        digest = None
    trow = {"trace_id": tid, "run_id": run_id, "side": side, "stack": stack, "origin": origin,
            "path": trace.path, "qlog_version": trace.qlog_version, "format": trace.format,
            "events": len(events), "events_in_catalog": len(kept),
            "sampled": len(kept) < len(events), "truncated": trace.truncated,
            "parquet_path": parquet_path, "sha256": digest}
    crow = {"trace_id": tid, "run_id": run_id, "side": side, "stack": stack,
            **summarise(trace.events)}
    con = cat.con if hasattr(cat, "con") else cat
    ensure_tables(con)
    for table in ("qlog_events", "qlog_connections", "qlog_traces"):
        con.execute(f"DELETE FROM {table} WHERE trace_id = ?", [tid])
    cols = [c for c, _ in EVENT_COLUMNS]
    frame = kept[cols]  # noqa: F841 - read by DuckDB's replacement scan below
    con.execute(f"INSERT INTO qlog_events SELECT {', '.join(cols)} FROM frame")
    for table, row in (("qlog_traces", trow), ("qlog_connections", crow)):
        names = list(row)
        con.execute(f"INSERT INTO {table} ({', '.join(names)}) VALUES "
                    f"({', '.join('?' for _ in names)})", [row[n] for n in names])
    return trow


def ingest_run(cat: Any, run_id: str, logdir: Path | str, *, server: str | None,
               client: str | None, parquet_root: Path | None,
               origin: str = "fresh", log: Any = None) -> list[dict[str, Any]]:
    """Ingest every qlog file under a run's log directory. A trace that cannot be read is
    one ``ingest_issues`` line (source ``qlog``) and the others, and the run, are kept."""
    rows = []
    for path in qlog_files(Path(logdir)):
        try:
            trace = parse(path)
        except QlogError as err:
            _issue(cat, path, str(err))
            if log:
                log(f"qlog: {err}")
            continue
        side = guess_side(path, trace.vantage, trace.title)
        stack = server if side == "server" else client if side == "client" else None
        for problem in trace.problems:
            _issue(cat, path, problem)
            if log:
                log(f"qlog: {path}: {problem}")
        rows.append(store(cat, trace, run_id=run_id, side=side, stack=stack, origin=origin,
                          parquet_dir=None if parquet_root is None else parquet_root / run_id))
    return rows


def _issue(cat: Any, path: Path, reason: str) -> None:
    if hasattr(cat, "record_issue"):
        cat.record_issue("qlog", str(path), reason)


def events(cat: Any, trace_id_: str, *, every: int = 1,
           names: tuple[str, ...] | None = None) -> pd.DataFrame:
    """One trace's events: from its Parquet file when it has one (all of them), else
    from ``qlog_events``; ``every`` keeps every n-th row (a sample on request),
    ``names`` only those events."""
    con = cat.con if hasattr(cat, "con") else cat
    row = con.execute("SELECT parquet_path FROM qlog_traces WHERE trace_id = ?",
                      [trace_id_]).fetchone()
    if row is None:
        raise QlogError(f"trace_id={trace_id_!r}: not in the catalog")
    where = ""
    params: list[Any] = []
    if names:
        where = f" AND event IN ({', '.join('?' for _ in names)})"
        params = list(names)
    if row[0] and Path(row[0]).exists():
        src = f"read_parquet('{row[0]}')"
        sql = f"SELECT * FROM {src} WHERE 1=1{where}"
    else:
        sql = f"SELECT * FROM qlog_events WHERE trace_id = ?{where}"
        params = [trace_id_, *params]
    frame = con.execute(sql + " ORDER BY seq", params).df()
    return frame.iloc[::every].reset_index(drop=True) if every > 1 else frame
