"""Parsers for the output files of the UCLouvain picoquic-DPDK experiments.

One function per output format; each takes a file's text and returns a
:class:`Parsed`: the measurements (:class:`Record`, one per transfer,
repetition or count) in file order, and what could not be read. The formats
are the tools' own output as the authors' harness appended it to the files
(``EverythingTesting/scripts/automated_tests.py``) and as their plotting
scripts read it back (``EverythingTesting/scripts/simplePlotter.py``):

============================  =================================================
``picoquic``                  ``Received N bytes in S seconds, M Mbps.`` — alone
                              on each line (``grep Mbps``), or inside the demo
                              client's whole log (``Starting Picoquic …`` blocks)
``msquic``                    ``Started!`` … ``Result: N bytes @ K kbps (T ms).``
``quicly``                    ``time : S s.`` then ``Goodput : G Gbps``
``quiche``                    ``<url>``, ``got N bytes in total``, ``T ms``,
                              ``goodput : M Mbps``
``picotls``                   ``server started …`` … ``received N bytes in S
                              seconds (M.<d>Mbps); CIPHER`` (kernel TCP + TLS)
``served``                    ``Number of handshakes served : N`` /
                              ``Number of request served : N``
``counts``                    one integer per line (picotls handshakes)
``iperf3``                    iperf3 reports: interval and ``sender`` /
                              ``receiver`` summary lines, TCP or UDP, optionally
                              prefixed with the offered rate (``300 Mbps[  5] …``)
``udp-goodput``               the authors' UDP sender: ``final goodput : M``,
                              ``goodput : M`` series ended by ``goodput
                              decreased``, or ``goodput : M number of packets :
                              P elapsed : S``
============================  =================================================

A line a parser does not recognise, or a repetition the file ends inside (a
cut file), is a :attr:`Parsed.problems` entry naming the line; everything
before and after it is kept. Library code: no I/O, no catalog.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from quiclab.errors import DataError


@dataclass
class Record:
    """One measurement: a transfer, a repetition's count, or a failed repetition.

    ``bytes``/``seconds`` are the tool's own numbers where it prints them;
    ``reported_mbps`` its own rate, converted to Mbit/s (10⁶ bit/s); ``count``
    a number of handshakes or requests served. ``values`` holds what else the
    output states (packet sizes, ECN counters, burst sizes, loss, …).
    """

    line: int
    status: str = "ok"
    failure: str | None = None
    bytes: int | None = None
    seconds: float | None = None
    reported_mbps: float | None = None
    count: int | None = None
    values: dict[str, Any] = field(default_factory=dict)


@dataclass
class Parsed:
    """The records of one file and the lines that could not be read."""

    records: list[Record] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def problem(self, line: int, text: str, reason: str) -> None:
        shown = text.strip()
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        self.problems.append(f"line {line}: {reason} ({shown!r})" if shown
                             else f"line {line}: {reason}")


_NUM = r"[0-9]+(?:\.[0-9]+)?"


def _lines(text: str) -> list[tuple[int, str]]:
    """(1-based number, stripped line) of the non-empty lines."""
    return [(i, line.strip()) for i, line in enumerate(text.splitlines(), 1) if line.strip()]


def _blocks(lines: list[tuple[int, str]], starts: Callable[[str, list[str]], bool]
            ) -> list[list[tuple[int, str]]]:
    """Split lines into repetition blocks; ``starts(line, block_so_far)`` opens a new one.
    Lines before the first start form a block of their own (a file cut at its head)."""
    blocks: list[list[tuple[int, str]]] = []
    for number, line in lines:
        if not blocks or starts(line, [t for _, t in blocks[-1]]):
            blocks.append([])
        blocks[-1].append((number, line))
    return blocks


# --- picoquic --------------------------------------------------------------

PICOQUIC_RESULT = re.compile(
    rf"^Received ([0-9]+) bytes in ({_NUM}) seconds, ({_NUM}) Mbps\.*$")  # one file: "Mbps.."
_PICO_START = re.compile(r"^Starting Picoquic \(v([^)]*)\)")
_PICO_EXIT = re.compile(r"^Client exit with code = (-?[0-9]+)$")
_PICO_VALUE = re.compile(r"^(max_[a-z_]+|MAX_PKT_BURST_(?:RX|TX)|queueid)\s*:\s*([0-9]+)$")
_PICO_ACK_DELAY = re.compile(r"^(ack_delay_(?:local|remote)): ([0-9]+) \.\.\. ([0-9]+)$")
_PICO_ECN = re.compile(r"^ECN was (received|acknowledged) \(ect0: ([0-9]+), ect1: ([0-9]+), "
                       r"ce: ([0-9]+)\)\.?$")
_PICO_ALPN = re.compile(r"^Negotiated ALPN: (\S+)$")
_PICO_ERROR = re.compile(r"(local|remote) error (0x[0-9a-fA-F]+)")
_PICO_RETRANS = re.compile(r"Retrans= ([0-9]+)")


def _picoquic_result(match: re.Match[str], number: int) -> Record:
    return Record(number, bytes=int(match.group(1)), seconds=float(match.group(2)),
                  reported_mbps=float(match.group(3)))


def parse_picoquic(text: str) -> Parsed:
    """picoquic demo client output (``dpdk_picoquicdemo``, ``picoquicdemo``).

    A file of result lines only (the harness's ``grep Mbps``) gives one record
    per line. A file of whole client logs is split into one block per client
    run — a block opens at ``EAL setup finshed`` (sic, DPDK builds) or at a
    second ``Starting Picoquic`` — and each block is one record: ``ok`` with its
    ``Received …`` line, ``failed`` without one when the client exited with an
    error or another block follows; a last block without a result or an exit
    line is a cut file (a problem, no record).
    """
    parsed = Parsed()
    lines = _lines(text)
    if not any(_PICO_START.match(t) for _, t in lines):
        for number, line in lines:
            match = PICOQUIC_RESULT.match(line)
            if match:
                parsed.records.append(_picoquic_result(match, number))
            else:
                parsed.problem(number, line, "not a picoquic result line")
        return parsed

    def starts(line: str, block: list[str]) -> bool:
        # A DPDK run prints "EAL setup finshed" before its "Starting Picoquic".
        return line.startswith("EAL setup fin") or (
            bool(_PICO_START.match(line)) and any(_PICO_START.match(t) for t in block))

    blocks = _blocks(lines, starts)
    for i, block in enumerate(blocks):
        result: Record | None = None
        values: dict[str, Any] = {}
        exit_code: int | None = None
        error: str | None = None
        for number, line in block:
            match = PICOQUIC_RESULT.match(line)
            if match:
                if result is not None:
                    parsed.problem(number, line, "a second result in one client run")
                    continue
                result = _picoquic_result(match, number)
                continue
            if (m := _PICO_START.match(line)):
                values["version"] = m.group(1)
            elif (m := _PICO_EXIT.match(line)):
                exit_code = int(m.group(1))
            elif (m := _PICO_VALUE.match(line)):
                values[m.group(1).lower()] = int(m.group(2))
            elif (m := _PICO_ACK_DELAY.match(line)):
                values[m.group(1)] = [int(m.group(2)), int(m.group(3))]
            elif (m := _PICO_ECN.match(line)):
                values[f"ecn_{m.group(1)}"] = {"ect0": int(m.group(2)), "ect1": int(m.group(3)),
                                              "ce": int(m.group(4))}
            elif (m := _PICO_ALPN.match(line)):
                values["alpn"] = m.group(1)
            if (m := _PICO_ERROR.search(line)):
                error = f"connection ended with {m.group(1)} error {m.group(2)}"
            if (m := _PICO_RETRANS.search(line)):
                values["retransmissions"] = int(m.group(1))
        first = block[0][0]
        if result is not None:
            result.values.update(values)
            if exit_code not in (None, 0):
                result.values["exit_code"] = exit_code
            parsed.records.append(result)
        elif error or exit_code not in (None, 0) or i < len(blocks) - 1:
            reason = error or (f"client exited with code {exit_code}" if exit_code not in (None, 0)
                               else "no result line in this client run")
            parsed.records.append(Record(first, status="failed", failure=reason,
                                         values={**values, "exit_code": exit_code}))
        else:
            parsed.problem(first, block[0][1], "the file ends inside a client run "
                                               "(no result line): cut")
    return parsed


# --- MsQuic secnetperf -------------------------------------------------------

MSQUIC_RESULT = re.compile(rf"^Result: ([0-9]+) bytes @ ([0-9]+) kbps \(({_NUM}) ms\)\.?$")
_MSQUIC_STATUS = re.compile(r"^App Main returning status (-?[0-9]+)$")


def parse_msquic(text: str) -> Parsed:
    """MsQuic ``secnetperf -TestName:throughput`` client output: one ``Started!``
    block per run with ``Result: N bytes @ K kbps (T ms).``; the time is the
    tool's own transfer time. A block without a result is a failed run, the
    last one a cut file."""
    parsed = Parsed()
    blocks = _blocks(_lines(text), lambda line, block: line == "Started!")
    for i, block in enumerate(blocks):
        result: Record | None = None
        status: int | None = None
        for number, line in block:
            if line == "Started!":
                continue
            if (m := MSQUIC_RESULT.match(line)):
                result = Record(number, bytes=int(m.group(1)), seconds=float(m.group(3)) / 1e3,
                                reported_mbps=int(m.group(2)) / 1e3)
            elif (m := _MSQUIC_STATUS.match(line)):
                status = int(m.group(1))
            else:
                parsed.problem(number, line, "not a secnetperf line")
        if result is not None:
            if status not in (None, 0):
                result.values["exit_status"] = status
            parsed.records.append(result)
        elif status not in (None, 0) or i < len(blocks) - 1:
            parsed.records.append(Record(block[0][0], status="failed",
                                         failure=f"no Result line (exit status {status})"))
        else:
            parsed.problem(block[0][0], block[-1][1],
                           "the file ends inside a run (no Result line): cut")
    return parsed


# --- quicly ----------------------------------------------------------------

_QUICLY_TIME = re.compile(rf"^time : ({_NUM}) s\.?$")
_QUICLY_GOODPUT = re.compile(rf"^Goodput : ({_NUM}) Gbps$")


def parse_quicly(text: str) -> Parsed:
    """quicly ``cli`` client (the authors' build): ``time : S s.`` then ``Goodput :
    G Gbps`` per run. The byte count is not printed: it is the size requested
    (the loader's conditions)."""
    parsed = Parsed()
    pending: tuple[int, float] | None = None
    for number, line in _lines(text):
        if (m := _QUICLY_TIME.match(line)):
            if pending is not None:
                parsed.problem(pending[0], "", "a time without its Goodput line")
            pending = (number, float(m.group(1)))
        elif (m := _QUICLY_GOODPUT.match(line)):
            if pending is None:
                parsed.problem(number, line, "a Goodput line without its time line")
                continue
            parsed.records.append(Record(pending[0], seconds=pending[1],
                                         reported_mbps=float(m.group(1)) * 1e3))
            pending = None
        else:
            parsed.problem(number, line, "not a quicly cli line")
    if pending is not None:
        parsed.problem(pending[0], "", "the file ends after a time line: cut")
    return parsed


# --- quiche ----------------------------------------------------------------

_QUICHE_URL = re.compile(r"^https?://\S+$")
_QUICHE_GOT = re.compile(r"^got ([0-9]+) bytes in total$")
_QUICHE_MS = re.compile(rf"^({_NUM}) ms$")
_QUICHE_GOODPUT = re.compile(rf"^goodput : ({_NUM}) Mbps$")
_QUICHE_NOISE = ("inside", "done!!!")


def parse_quiche(text: str) -> Parsed:
    """quiche ``http3-client`` (the authors' build): per run the URL, ``got N bytes
    in total``, the transfer time ``T ms`` and ``goodput : M Mbps``."""
    parsed = Parsed()
    blocks = _blocks(_lines(text), lambda line, block: bool(_QUICHE_URL.match(line)))
    for i, block in enumerate(blocks):
        got = ms = mbps = None
        url = None
        for number, line in block:
            if _QUICHE_URL.match(line):
                url = line
            elif (m := _QUICHE_GOT.match(line)):
                got = int(m.group(1))
            elif (m := _QUICHE_MS.match(line)):
                ms = float(m.group(1))
            elif (m := _QUICHE_GOODPUT.match(line)):
                mbps = float(m.group(1))
            elif line not in _QUICHE_NOISE:
                parsed.problem(number, line, "not a quiche client line")
        if got is not None and ms is not None and mbps is not None:
            parsed.records.append(Record(block[0][0], bytes=got, seconds=ms / 1e3,
                                         reported_mbps=mbps, values={"url": url}))
        elif i < len(blocks) - 1:
            parsed.records.append(Record(block[0][0], status="failed",
                                         failure="no 'got … bytes' / goodput lines"))
        else:
            parsed.problem(block[0][0], block[-1][1], "the file ends inside a run: cut")
    return parsed


# --- picotls over TCP ----------------------------------------------------------

PICOTLS_RESULT = re.compile(
    rf"^received ([0-9]+) bytes in ({_NUM}) seconds \(([0-9]+\.[0-9]+)(?:\.[0-9]+)?Mbps\); "
    r"(\S+)$")
_PICOTLS_NOISE = ("waiting for connections",)


def parse_picotls(text: str) -> Parsed:
    """picotls ``cli -B`` server over kernel TCP: per run ``server started on port
    N``, then ``received N bytes in S seconds (M.<d>Mbps); CIPHER``. The rate in
    parentheses carries one stray digit (``14039.062374.3Mbps``); the authors cut
    it off (``x[1:-8]``, simplePlotter.py) and so does this parser. A run whose
    server received nothing is failed."""
    parsed = Parsed()
    blocks = _blocks(_lines(text), lambda line, block: line.startswith("server started"))
    for i, block in enumerate(blocks):
        result: Record | None = None
        for number, line in block:
            if line.startswith("server started") or line in _PICOTLS_NOISE:
                continue
            if (m := PICOTLS_RESULT.match(line)):
                result = Record(number, bytes=int(m.group(1)), seconds=float(m.group(2)),
                                reported_mbps=float(m.group(3)),
                                values={"cipher_suite": m.group(4)})
            else:
                parsed.problem(number, line, "not a picotls cli line")
        if result is not None:
            parsed.records.append(result)
        elif i < len(blocks) - 1:
            parsed.records.append(Record(block[0][0], status="failed",
                                         failure="the server received no transfer"))
        else:
            parsed.problem(block[0][0], block[-1][1],
                           "the file ends inside a run (no 'received' line): cut")
    return parsed


# --- counts ---------------------------------------------------------------------

_SERVED = re.compile(r"^Number of (handshakes|request) served : ([0-9]+)$")


def parse_served(text: str) -> Parsed:
    """picoquic ``-H`` client: ``Number of handshakes served : N`` (DPDK build) or
    ``Number of request served : N`` per run. Other lines of a whole client log
    are the client's chatter and are passed over; a ``Number of`` line that does
    not parse is a problem."""
    parsed = Parsed()
    for number, line in _lines(text):
        if (m := _SERVED.match(line)):
            parsed.records.append(Record(number, count=int(m.group(2)),
                                         values={"counted": m.group(1)}))
        elif line.startswith("Number of"):
            parsed.problem(number, line, "not a 'served' count")
    return parsed


def parse_counts(text: str) -> Parsed:
    """One non-negative integer per line (picotls ``cli --client``: handshakes
    completed in one run, summed over its clients by the harness's awk)."""
    parsed = Parsed()
    for number, line in _lines(text):
        if line.isdigit():
            parsed.records.append(Record(number, count=int(line)))
        else:
            parsed.problem(number, line, "not a count")
    return parsed


# --- iperf3 -----------------------------------------------------------------------

_IPERF_LINE = re.compile(
    rf"^(?:(?P<offered>{_NUM}) Mbps(?: iteration : [0-9]+)?\s*)?\[\s*(?P<id>[0-9]+|SUM)\]\s+"
    rf"(?P<start>{_NUM})-(?P<end>{_NUM})\s+sec\s+(?P<xfer>{_NUM}) (?P<xunit>[KMGT]?)Bytes\s+"
    rf"(?P<rate>{_NUM}) (?P<runit>[KMGT]?)bits/sec(?P<rest>.*)$")
_IPERF_UDP = re.compile(rf"({_NUM}) ms\s+([0-9]+)/([0-9]+) \(({_NUM})%\)")
_IPERF_NOISE = re.compile(r"^(Connecting to host|\[ ID\]|- - -|iperf Done|Server listening|"
                          r"Accepted connection|\[\s*[0-9]+\] local )")
_UNITS = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_BYTE_UNITS = {"": 1.0, "K": 1024.0, "M": 1024.0**2, "G": 1024.0**3, "T": 1024.0**4}


def _iperf_interval(m: re.Match[str]) -> dict[str, Any]:
    rest = m.group("rest").strip()
    out: dict[str, Any] = {
        "start": float(m.group("start")), "end": float(m.group("end")),
        # iperf3 prints transfers in binary units (MBytes = MiB), rates in decimal.
        "bytes": float(m.group("xfer")) * _BYTE_UNITS[m.group("xunit")],
        "mbps": float(m.group("rate")) * _UNITS[m.group("runit")] / 1e6,
        "role": rest.split()[-1] if rest.endswith(("sender", "receiver")) else None,
    }
    if (u := _IPERF_UDP.search(rest)):
        out.update(jitter_ms=float(u.group(1)), lost=int(u.group(2)), datagrams=int(u.group(3)))
    elif rest and rest.split()[0].isdigit():
        out["retransmissions"] = int(rest.split()[0])
    if m.group("offered"):
        out["offered_mbps"] = float(m.group("offered"))
    return out


def parse_iperf3(text: str) -> Parsed:
    """iperf3 client reports, TCP or UDP.

    A run opens at ``Connecting to host``. A run with a summary gives one record
    from its ``receiver`` line (else its ``sender`` line): transfer, duration and
    rate as iperf3 states them. A file of interval lines only (the harness kept
    no summary) is one run: bytes and seconds summed over its intervals. A line
    prefixed with an offered rate (``300 Mbps[  5] … receiver``, the harness's
    ``grep receiver`` of UDP runs at a set rate) is one record with
    ``offered_mbps``.
    """
    parsed = Parsed()
    runs: list[list[tuple[int, dict[str, Any]]]] = [[]]
    for number, line in _lines(text):
        if line.startswith("Connecting to host"):
            if runs[-1]:
                runs.append([])
            continue
        if (m := _IPERF_LINE.match(line)):
            interval = _iperf_interval(m)
            if "offered_mbps" in interval:
                parsed.records.append(_iperf_record(number, [interval], interval))
                continue
            runs[-1].append((number, interval))
        elif line.startswith("iperf3: error"):
            parsed.records.append(Record(number, status="failed", failure=line[:120]))
        elif not _IPERF_NOISE.match(line):
            parsed.problem(number, line, "not an iperf3 report line")
    for run in runs:
        if not run:
            continue
        intervals = [iv for _, iv in run if iv["role"] is None]
        summaries = {iv["role"]: (n, iv) for n, iv in run if iv["role"] is not None}
        summary = summaries.get("receiver") or summaries.get("sender")
        if summary is not None:
            number, chosen = summary
            record = _iperf_record(number, intervals, chosen)
            sender = summaries.get("sender")
            if sender and "retransmissions" in sender[1]:
                record.values["retransmissions"] = sender[1]["retransmissions"]
            parsed.records.append(record)
        else:
            seconds = sum(iv["end"] - iv["start"] for iv in intervals)
            total = {"start": intervals[0]["start"], "end": intervals[-1]["end"],
                     "bytes": sum(iv["bytes"] for iv in intervals),
                     "mbps": None, "role": None}
            for key in ("lost", "datagrams", "retransmissions"):
                if all(key in iv for iv in intervals):
                    total[key] = sum(iv[key] for iv in intervals)
            record = _iperf_record(run[0][0], intervals, total)
            record.seconds = seconds
            record.values["summary"] = "none: intervals summed"
            parsed.records.append(record)
    return parsed


def _iperf_record(number: int, intervals: list[dict[str, Any]],
                  chosen: dict[str, Any]) -> Record:
    values: dict[str, Any] = {"intervals": len(intervals)}
    if chosen.get("role"):
        values["summary"] = chosen["role"]
    for key in ("jitter_ms", "lost", "datagrams", "retransmissions", "offered_mbps"):
        if key in chosen:
            values[key] = chosen[key]
    return Record(number, bytes=round(chosen["bytes"]),
                  seconds=chosen["end"] - chosen["start"], reported_mbps=chosen["mbps"],
                  values=values)


# --- the authors' UDP sender ----------------------------------------------------------

_UDP_FINAL = re.compile(rf"^final goodput : ({_NUM})$")
_UDP_POINT = re.compile(rf"^goodput : ({_NUM})$")
_UDP_PACKETS = re.compile(r"^number of (?:packets|pkts received) : ([0-9]+)$")
_UDP_LINE = re.compile(rf"^goodput : ({_NUM}) number of packets : ([0-9]+) elapsed : ({_NUM})$")
_UDP_NOISE = re.compile(r"^(before start|loop start|mac : )")


def parse_udp_goodput(text: str) -> Parsed:
    """The authors' UDP generator/receiver (``exec_scripts/proxy*.sh``), in Mbit/s.

    ``final goodput : M`` lines and ``goodput : M number of packets : P elapsed :
    S`` lines are one record each. A series of ``goodput : M`` /
    ``number of packets : P`` samples ended by ``goodput decreased`` is one
    record whose rate is the series' maximum, as the authors read it
    (``get_full_data_UDP`` in simplePlotter.py); a series the file ends inside
    is a cut file.
    """
    parsed = Parsed()
    series: list[tuple[int, float, int | None]] = []
    for number, line in _lines(text):
        if (m := _UDP_FINAL.match(line)):
            parsed.records.append(Record(number, reported_mbps=float(m.group(1))))
        elif (m := _UDP_LINE.match(line)):
            parsed.records.append(Record(number, reported_mbps=float(m.group(1)),
                                         seconds=float(m.group(3)),
                                         values={"packets": int(m.group(2))}))
        elif (m := _UDP_POINT.match(line)):
            series.append((number, float(m.group(1)), None))
        elif (m := _UDP_PACKETS.match(line)):
            if series:
                n, rate, _ = series[-1]
                series[-1] = (n, rate, int(m.group(1)))
        elif line == "goodput decreased":
            if series:
                best = max(series, key=lambda s: s[1])
                parsed.records.append(Record(series[0][0], reported_mbps=best[1],
                                             values={"samples": len(series),
                                                     "packets": series[-1][2]}))
            series = []
        elif not _UDP_NOISE.match(line):
            parsed.problem(number, line, "not a UDP goodput line")
    if series:
        parsed.problem(series[0][0], "", "the file ends inside a goodput series: cut")
    return parsed


#: Parser by format name (the loader's ``FileSpec.format``).
PARSERS: dict[str, Callable[[str], Parsed]] = {
    "picoquic": parse_picoquic, "msquic": parse_msquic, "quicly": parse_quicly,
    "quiche": parse_quiche, "picotls": parse_picotls, "served": parse_served,
    "counts": parse_counts, "iperf3": parse_iperf3, "udp-goodput": parse_udp_goodput,
}


# --- NPF test definitions -------------------------------------------------------------

@dataclass
class NpfScript:
    """One ``%[stack:]script@role`` section: its options and command lines."""

    stack: str | None
    role: str
    options: dict[str, str]
    lines: list[str]

    @property
    def command(self) -> str:
        return "\n".join(self.lines)


@dataclass
class NpfTest:
    """An NPF test definition (https://github.com/tbarbette/npf, ``%section`` syntax)."""

    variables: dict[str, str] = field(default_factory=dict)
    config: dict[str, str] = field(default_factory=dict)
    init: dict[str, list[str]] = field(default_factory=dict)
    scripts: list[NpfScript] = field(default_factory=list)

    def script(self, stack: str, role: str) -> NpfScript | None:
        return next((s for s in self.scripts if s.stack == stack and s.role == role), None)

    def stacks(self) -> list[str]:
        return sorted({s.stack for s in self.scripts if s.stack})

    def irq_cpu_list(self, role: str) -> str | None:
        """The CPU list the NIC's interrupts are pinned to on ``role``'s host
        (``set_irq_affinity_cpulist.sh LIST`` in its ``%init``)."""
        for line in self.init.get(role, []):
            if (m := re.search(r"set_irq_affinity_cpulist\.sh\s+([0-9,-]+)", line)):
                return m.group(1)
        return None

    def nic_queues(self, role: str) -> int | None:
        """Combined NIC queues set by ``ethtool -L IFACE combined N`` in ``%init``."""
        for line in self.init.get(role, []):
            if (m := re.search(r"ethtool -L \S+ combined ([0-9]+)", line)):
                return int(m.group(1))
        return None

    def irqbalance_stopped(self, role: str) -> bool | None:
        lines = " ".join(self.init.get(role, []))
        if "irqbalance" not in lines:
            return None
        return "stop irqbalance" in lines

    def choices(self, variable: str) -> dict[str, str]:
        """``NAME={a:label,b:label}`` → {value: label}; ``NAME=v`` → {v: v}."""
        raw = self.variables.get(variable, "")
        if raw.startswith("{") and raw.endswith("}"):
            out = {}
            for item in raw[1:-1].split(","):
                value, _, label = item.partition(":")
                out[value.strip()] = label.strip() or value.strip()
            return out
        return {raw: raw} if raw else {}


_SECTION = re.compile(r"^%(?:(?P<stack>[A-Za-z0-9_]+):)?(?P<kind>[a-z_]+)(?:@(?P<role>\w+))?"
                      r"(?P<opts>.*)$")


def parse_npf(text: str, path: str = "<npf>") -> NpfTest:
    """Read an NPF test definition: ``%variables``/``%late_variables`` (``NAME=value``),
    ``%config`` (``key=value``), ``%init@role`` and ``%[stack:]script@role opts``
    sections; ``//`` comments are dropped. A script section without a role, or
    a text with no section at all, raises :class:`DataError` naming the file."""
    test = NpfTest()
    current: tuple[str, Any] | None = None
    seen = False
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("%"):
            m = _SECTION.match(line)
            if not m:
                raise DataError(f"{path}:{number}", f"unreadable section header {line!r}")
            seen = True
            kind, role = m.group("kind"), m.group("role")
            if kind == "script":
                if not role:
                    raise DataError(f"{path}:{number}", "a script section without @role",
                                    field="section")
                options = dict(o.split("=", 1) for o in m.group("opts").split() if "=" in o)
                script = NpfScript(m.group("stack"), role, options, [])
                test.scripts.append(script)
                current = ("script", script)
            elif kind == "init":
                current = ("init", test.init.setdefault(role or "all", []))
            elif kind in ("variables", "late_variables"):
                current = ("variables", test.variables)
            elif kind == "config":
                current = ("config", test.config)
            else:
                current = ("other", None)
            continue
        if not line or line.startswith("//") or current is None:
            continue
        kind, target = current
        if kind == "script":
            target.lines.append(line)
        elif kind == "init":
            target.append(line)
        elif kind in ("variables", "config") and "=" in line:
            name, _, value = line.partition("=")
            target[name.strip()] = value.strip()
    if not seen:
        raise DataError(path, "no NPF %section in the file")
    return test
