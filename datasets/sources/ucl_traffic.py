"""Parsers for the traffic generators of the UCLouvain proxy experiments.

The authors measured their picoquic(-DPDK) proxy, a DPDK L2 forwarder and
WireGuard with iperf3 and with their own UDP generator; the records are the
same :class:`~quiclab.datasets.sources.ucl_parsers.Record` as the stacks'.

============================  =================================================
``iperf3``                    iperf3 reports: interval and ``sender`` /
                              ``receiver`` summary lines, TCP or UDP, optionally
                              prefixed with the offered rate (``300 Mbps[  5] …``)
``udp-goodput``               the authors' UDP sender: ``final goodput : M``,
                              ``goodput : M`` series ended by ``goodput
                              decreased``, or ``goodput : M number of packets :
                              P elapsed : S``
============================  =================================================
"""

from __future__ import annotations

import re
from typing import Any

from quiclab.datasets.sources.ucl_parsers import NUM, Parsed, Record, lines_of

# --- iperf3 -----------------------------------------------------------------------

_IPERF_LINE = re.compile(
    rf"^(?:(?P<offered>{NUM}) Mbps(?: iteration : [0-9]+)?\s*)?\[\s*(?P<id>[0-9]+|SUM)\]\s+"
    rf"(?P<start>{NUM})-(?P<end>{NUM})\s+sec\s+(?P<xfer>{NUM}) (?P<xunit>[KMGT]?)Bytes\s+"
    rf"(?P<rate>{NUM}) (?P<runit>[KMGT]?)bits/sec(?P<rest>.*)$")
_IPERF_UDP = re.compile(rf"({NUM}) ms\s+([0-9]+)/([0-9]+) \(({NUM})%\)")
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
    for number, line in lines_of(text):
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

_UDP_FINAL = re.compile(rf"^final goodput : ({NUM})$")
_UDP_POINT = re.compile(rf"^goodput : ({NUM})$")
_UDP_PACKETS = re.compile(r"^number of (?:packets|pkts received) : ([0-9]+)$")
_UDP_LINE = re.compile(rf"^goodput : ({NUM}) number of packets : ([0-9]+) elapsed : ({NUM})$")
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
    for number, line in lines_of(text):
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
