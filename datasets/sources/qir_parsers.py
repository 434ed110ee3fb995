"""Parsers for the raw per-run files of the QUIC Interop Runner 10G results.

Each parser takes the text of one file and returns plain values; a malformed
file raises :class:`~quiclab.errors.DataError` naming the field and the reason.
The file formats (tumi8/quic-10g-paper, Kempf et al. 2024 §3.3):

- ``pidstat.txt``: ``pidstat -u 1`` of the implementation's process, one block
  per second (12-hour clock), ended by ``Average:`` lines;
- ``netstat-{start,stop}.txt``: ``netstat -su`` (the ``Udp:`` section matters);
- ``ethtool-{start,stop}.txt``: ``ethtool -S`` of the measurement NIC;
- ``client/time.json``: client start/end in ns (the goodput's time base);
- ``output.txt``: the runner's log with ``rmem_value`` and the goodput line;
- ``result.json``: per experiment folder, runner configuration and per
  repetition goodput (``measurements[*][*].details``).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from quiclab.errors import DataError, excerpt


@dataclass(frozen=True)
class CpuSample:
    t_s: int  # pidstat intervals (1 s) since the first one with a sample
    user_pct: float
    system_pct: float
    total_pct: float
    core: int | None


_PIDSTAT_ROW = re.compile(
    r"^(\d{1,2}):(\d{2}):(\d{2})\s*(AM|PM)?\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+"
    r"([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+|-)\s+(\S.*)$")


def parse_pidstat(text: str, path: str = "pidstat.txt",
                  commands: tuple[str, ...] = ()) -> list[CpuSample]:
    """Per-interval CPU samples of the processes named ``commands`` (all if empty).

    ``pidstat -u 1`` prints one block per 1-s interval, each opened by a header
    line; ``t_s`` counts intervals from the first one in which the process
    appears. Several PIDs in one interval (e.g. NGINX master and worker) are
    summed, giving the process group's CPU. Two consecutive intervals can carry
    the same clock label (sampling jitter), so intervals are told apart by their
    header lines (or, in a file without headers, by a change of clock label),
    never by the label alone. ``Average:`` lines are ignored.
    Raises DataError naming the line if a line is none of these (garbage, or a
    sample cut short).
    """
    per_interval: dict[int, list[float]] = {}
    cores: dict[int, int | None] = {}
    interval = 0
    label: str | None = None  # clock label of the samples in the current interval
    first: int | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith(("Linux", "Average")):
            continue
        if "Command" in line:
            interval += 1  # a header opens the next interval
            label = None
            continue
        m = _PIDSTAT_ROW.match(line.strip())
        if not m:
            # Every line of the 2440 pidstat files of the dataset is blank, a
            # banner, a header, an Average or a sample: anything else is garbage.
            what = "unreadable sample" if re.match(r"^\d{1,2}:\d{2}:\d{2}", line.strip()) \
                else "not a pidstat line"
            raise DataError(path, f"line {lineno}: {what} {line.strip()[:60]!r}",
                            field="pidstat")
        clock = line.strip()[: m.start(5)].strip()
        if label is not None and clock != label:
            interval += 1  # no header in between: a new clock label is a new interval
        label = clock
        command = m.group(13).strip()
        if commands and not any(c in command for c in commands):
            continue
        if first is None:
            first = interval
        t = interval - first
        usr, sys_, total = float(m.group(7)), float(m.group(8)), float(m.group(11))
        if not all(0 <= v <= 100 * 512 for v in (usr, sys_, total)):
            raise DataError(path, f"line {lineno}: CPU value out of range", field="%CPU")
        acc = per_interval.setdefault(t, [0.0, 0.0, 0.0])
        acc[0] += usr
        acc[1] += sys_
        acc[2] += total
        core = m.group(12)
        cores.setdefault(t, int(core) if core.isdigit() else None)
    return [CpuSample(t, v[0], v[1], v[2], cores.get(t))
            for t, v in sorted(per_interval.items())]


def steady_window(samples: list[CpuSample]) -> list[CpuSample]:
    """All but the first two and last two samples (the authors' stated rule).

    Their code drops one more trailing sample where pidstat printed no
    ``Average:`` line for the process (clients) and one fewer where it printed
    two (NGINX); docs/explanation/catalog.md lists the consequences.
    """
    return samples[2:-2] if len(samples) > 4 else []


_NETSTAT_KEYS = {
    "packets received": "received",
    "packets to unknown port received": "unknown_port",
    "packet receive errors": "rx_errors",
    "packets sent": "sent",
    "receive buffer errors": "rcvbuf_errors",
    "send buffer errors": "sndbuf_errors",
}


def parse_netstat(text: str, path: str = "netstat.txt") -> dict[str, int]:
    """The ``Udp:`` counters of ``netstat -su`` as {received, sent, rcvbuf_errors, …}."""
    out: dict[str, int] = {}
    in_udp = False
    for line in text.splitlines():
        if not line.startswith((" ", "\t")):
            in_udp = line.strip() == "Udp:"
            continue
        if not in_udp:
            continue
        m = re.match(r"^\s*(\d+)\s+(.+?)\s*$", line)
        if m and m.group(2) in _NETSTAT_KEYS:
            out[_NETSTAT_KEYS[m.group(2)]] = int(m.group(1))
    if "sent" not in out or "received" not in out:
        raise DataError(path, "no Udp: section with packets sent/received", field="Udp")
    return out


#: NIC counter names by driver: Broadcom bnxt (the AMD hosts), then the
#: generic names used by Intel (ixgbe/i40e/ice) and Mellanox (mlx5 *_phy).
_ETHTOOL_TOTALS = {
    "rx_frames": ("rx_total_frames", "rx_packets_phy", "rx_packets"),
    "tx_frames": ("tx_total_frames", "tx_packets_phy", "tx_packets"),
    "rx_bytes": ("rx_bytes", "rx_bytes_phy", "rx_octets"),
    "tx_bytes": ("tx_bytes", "tx_bytes_phy", "tx_octets"),
    "rx_discards": ("rx_total_discard_pkts", "rx_discards_phy", "rx_dropped", "rx_missed_errors"),
    "tx_discards": ("tx_total_discard_pkts", "tx_discards_phy", "tx_dropped"),
}


_KNOWN_TOTALS = frozenset(c for names in _ETHTOOL_TOTALS.values() for c in names)


def parse_ethtool(text: str, path: str = "ethtool.txt") -> dict[str, int]:
    """NIC totals of ``ethtool -S`` under driver-independent names.

    Returns a dict with any of rx_frames, tx_frames, rx_bytes, tx_bytes,
    rx_discards, tx_discards that the driver reports (per-queue ``[n]:`` lines
    are ignored). Raises DataError if the file has no counters, or none of
    these totals.
    """
    raw: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition(": ")
        if not sep or key.startswith("["):
            continue
        value = value.strip()
        if value.lstrip("-").isdigit():
            raw[key] = int(value)
        elif key in _KNOWN_TOTALS:
            # A total the columns are read from: a garbled value would make
            # them NULL (and data_packets fall back to another counter) silently.
            raise DataError(path, f"{value!r} is not a counter", field=key)
    if not raw:
        raise DataError(path, "no NIC statistics", field="ethtool")
    out: dict[str, int] = {}
    for name, candidates in _ETHTOOL_TOTALS.items():
        for cand in candidates:
            if cand in raw:
                out[name] = raw[cand]
                break
    if not out:
        # Counters, but none of the totals any known driver reports: the NIC
        # columns would be NULL without a word, so say which file and why.
        raise DataError(path, f"none of the NIC totals ({', '.join(_ETHTOOL_TOTALS['tx_frames'])}"
                        f", …) among {len(raw)} counters", field="ethtool")
    return out


def parse_time_json(text: str, path: str = "time.json") -> tuple[int, int]:
    """(start_ns, end_ns) of the client run."""
    try:
        data = json.loads(text)
        start, end = int(data["start"]), int(data["end"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, OverflowError) as err:
        # OverflowError: int() of JSON's Infinity.
        raise DataError(path, f"expected {{\"start\": ns, \"end\": ns}} "
                              f"({excerpt(str(err))})", field="start/end") from None
    if end <= start:
        raise DataError(path, f"end {end} is not after start {start}", field="end")
    return start, end


@dataclass
class RunnerLog:
    rmem_values: list[int] = field(default_factory=list)
    goodput_mbps: float | None = None
    transferred_mb: float | None = None
    succeeded: bool | None = None


def parse_output(text: str) -> RunnerLog:
    """What the runner's ``output.txt`` says about the run (buffer size, goodput, verdict)."""
    log = RunnerLog()
    for rmem in re.finditer(r"'rmem_value': '?(\d+)'?", text):
        log.rmem_values.append(int(rmem.group(1)))
    m = re.search(r"Transferring ([\d.]+) MB took [\d.]+ s\. Goodput: ([\d.]+) Mbps", text)
    if m:
        log.transferred_mb = float(m.group(1))
        log.goodput_mbps = float(m.group(2))
    if "Test successful" in text:
        log.succeeded = True
    elif re.search(r"Test failed|✕", text):
        log.succeeded = False
    return log


@dataclass
class ExperimentResult:
    """One ``result.json``: an experiment folder of the runner."""

    server_node: str | None
    client_node: str | None
    commits: dict[str, str]
    filesize: dict[tuple[str, str], int]
    details: dict[tuple[str, str], list[float]]
    bandwidth_limit: str | None
    client_delay: str | None
    raw_args: dict[str, Any]


def _clip(value: Any) -> str:
    return excerpt(value, 40)


def _number(value: Any, path: str, field: str, pair: str) -> float:
    """A finite number ≥ 0 from a JSON value, or DataError naming pair, field and value."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise DataError(path, f"{pair}: {_clip(value)} is not a number", field=field)
    try:
        number = float(value)
    except ValueError:
        raise DataError(path, f"{pair}: {_clip(value)} is not a number", field=field) from None
    if not math.isfinite(number) or number < 0:
        raise DataError(path, f"{pair}: {_clip(value)} is not a finite non-negative number",
                        field=field)
    return number


def _whole(value: Any, path: str, field: str, pair: str) -> int:
    number = _number(value, path, field, pair)
    if not number.is_integer():
        raise DataError(path, f"{pair}: {_clip(value)} is not a whole number", field=field)
    return int(number)


def parse_result_json(text: str, path: str = "result.json") -> ExperimentResult:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(path, f"not valid JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(data, dict):
        raise DataError(path, f"expected a JSON object, got {_clip(data)}")
    if "measurements" not in data:
        raise DataError(path, "no measurements", field="measurements")
    filesize: dict[tuple[str, str], int] = {}
    details: dict[tuple[str, str], list[float]] = {}
    groups = data["measurements"]
    if not isinstance(groups, list) or not all(isinstance(g, list) for g in groups):
        raise DataError(path, f"not a list of lists: {_clip(groups)}", field="measurements")
    for group in groups:
        for m in group:
            if not isinstance(m, dict):
                raise DataError(path, f"a measurement is not an object: {_clip(m)}",
                                field="measurements")
            key = (str(m.get("server")), str(m.get("client")))
            pair = f"{key[0]}_{key[1]}"
            if m.get("filesize") is not None:
                filesize[key] = _whole(m["filesize"], path, "filesize", pair)
            raw = m.get("details", [])
            if not isinstance(raw, list):
                raise DataError(path, f"{pair}: not a list of goodputs: {_clip(raw)}",
                                field="details")
            details[key] = [_number(x, path, "details", pair) for x in raw]
    commits: dict[str, str] = {}
    for role in ("server", "client"):
        known = data.get(f"{role}_implementations") or {}
        if not isinstance(known, dict):
            raise DataError(path, f"not a mapping of implementations: {_clip(known)}",
                            field=f"{role}_implementations")
        commits.update({f"{role}:{k}": str(v) for k, v in known.items()})
    args = data.get("args") or {}
    if not isinstance(args, dict):
        raise DataError(path, f"not a mapping: {_clip(args)}", field="args")

    def none_if(value: Any) -> str | None:
        return None if value in (None, "None", "") else str(value)

    return ExperimentResult(
        server_node=none_if(data.get("server_node_name")),
        client_node=none_if(data.get("client_node_name")),
        commits=commits, filesize=filesize, details=details,
        bandwidth_limit=none_if(data.get("bandwidth_limit")),
        client_delay=none_if(data.get("client_delay")),
        raw_args=dict(args))
