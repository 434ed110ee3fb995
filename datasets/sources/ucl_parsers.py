"""Parsers for the QUIC and TLS stacks' output in the UCLouvain picoquic-DPDK experiments.

One function per output format (the traffic generators of the proxy runs are in
:mod:`~quiclab.datasets.sources.ucl_traffic`, the NPF test definitions in
:mod:`~quiclab.datasets.sources.npf`); each takes a file's text and returns a
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


#: A decimal number as the tools print it.
NUM = r"[0-9]+(?:\.[0-9]+)?"


def lines_of(text: str) -> list[tuple[int, str]]:
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
    rf"^Received ([0-9]+) bytes in ({NUM}) seconds, ({NUM}) Mbps\.*$")  # one file: "Mbps.."
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
    lines = lines_of(text)
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

MSQUIC_RESULT = re.compile(rf"^Result: ([0-9]+) bytes @ ([0-9]+) kbps \(({NUM}) ms\)\.?$")
_MSQUIC_STATUS = re.compile(r"^App Main returning status (-?[0-9]+)$")


def parse_msquic(text: str) -> Parsed:
    """MsQuic ``secnetperf -TestName:throughput`` client output: one ``Started!``
    block per run with ``Result: N bytes @ K kbps (T ms).``; the time is the
    tool's own transfer time. A block without a result is a failed run, the
    last one a cut file."""
    parsed = Parsed()
    blocks = _blocks(lines_of(text), lambda line, block: line == "Started!")
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

_QUICLY_TIME = re.compile(rf"^time : ({NUM}) s\.?$")
_QUICLY_GOODPUT = re.compile(rf"^Goodput : ({NUM}) Gbps$")


def parse_quicly(text: str) -> Parsed:
    """quicly ``cli`` client (the authors' build): ``time : S s.`` then ``Goodput :
    G Gbps`` per run. The byte count is not printed: it is the size requested
    (the loader's conditions)."""
    parsed = Parsed()
    pending: tuple[int, float] | None = None
    for number, line in lines_of(text):
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
_QUICHE_MS = re.compile(rf"^({NUM}) ms$")
_QUICHE_GOODPUT = re.compile(rf"^goodput : ({NUM}) Mbps$")
_QUICHE_NOISE = ("inside", "done!!!")


def parse_quiche(text: str) -> Parsed:
    """quiche ``http3-client`` (the authors' build): per run the URL, ``got N bytes
    in total``, the transfer time ``T ms`` and ``goodput : M Mbps``."""
    parsed = Parsed()
    blocks = _blocks(lines_of(text), lambda line, block: bool(_QUICHE_URL.match(line)))
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
    rf"^received ([0-9]+) bytes in ({NUM}) seconds \(([0-9]+\.[0-9]+)(?:\.[0-9]+)?Mbps\); "
    r"(\S+)$")
_PICOTLS_NOISE = ("waiting for connections",)


def parse_picotls(text: str) -> Parsed:
    """picotls ``cli -B`` server over kernel TCP: per run ``server started on port
    N``, then ``received N bytes in S seconds (M.<d>Mbps); CIPHER``. The rate in
    parentheses carries one stray digit (``14039.062374.3Mbps``); the authors cut
    it off (``x[1:-8]``, simplePlotter.py) and so does this parser. A run whose
    server received nothing is failed."""
    parsed = Parsed()
    blocks = _blocks(lines_of(text), lambda line, block: line.startswith("server started"))
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
    for number, line in lines_of(text):
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
    for number, line in lines_of(text):
        if line.isdigit():
            parsed.records.append(Record(number, count=int(line)))
        else:
            parsed.problem(number, line, "not a count")
    return parsed
