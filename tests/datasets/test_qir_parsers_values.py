"""QIR-10G raw files: what the parsers take and refuse, on lines written by hand."""

from __future__ import annotations

import dataclasses
import json

import pytest

from quiclab.datasets.sources.qir_parsers import CpuSample, parse_pidstat, parse_result_json
from quiclab.errors import DataError

HEADER = "05:23:55 AM   UID       PID    %usr %system  %guest   %wait    %CPU   CPU  Command"


def _row(clock: str, pid: int, usr: float, sys_: float, total: float, command: str) -> str:
    return (f"{clock}     0    {pid:>6}   {usr:5.2f}   {sys_:5.2f}    0.00    0.00"
            f"  {total:8.2f}    12  {command}")


def test_pidstat_keeps_the_named_processes_of_every_interval():
    """Two intervals, each with another process listed before the one asked for."""
    text = "\n".join([
        HEADER, _row("05:23:56 AM", 10, 1.0, 1.0, 2.0, "nginx"),
        _row("05:23:56 AM", 11, 40.0, 60.0, 100.0, "lsquic_server"), "",
        HEADER, _row("05:23:57 AM", 10, 2.0, 2.0, 4.0, "nginx"),
        _row("05:23:57 AM", 11, 30.0, 20.0, 50.0, "lsquic_server"), ""])
    got = parse_pidstat(text, commands=("lsquic",))
    assert got == [CpuSample(0, 40.0, 60.0, 100.0, 12), CpuSample(1, 30.0, 20.0, 50.0, 12)]


def test_pidstat_takes_up_to_512_full_cores_and_no_more():
    ok = "\n".join([HEADER, _row("05:23:56 AM", 11, 25600.0, 25600.0, 51200.0, "srv")])
    assert parse_pidstat(ok)[0].total_pct == 51200.0  # 512 cores × 100 %
    bad = "\n".join([HEADER, _row("05:23:56 AM", 11, 25600.0, 25600.1, 51200.1, "srv")])
    with pytest.raises(DataError, match="line 2: CPU value out of range"):
        parse_pidstat(bad)
    with pytest.raises(dataclasses.FrozenInstanceError):
        parse_pidstat(ok)[0].total_pct = 0.0  # type: ignore[misc]


def _result(details) -> str:
    return json.dumps({"measurements": [[{"server": "lsquic", "client": "quiche",
                                          "filesize": 8589934592, "details": details}]]})


def test_result_json_refuses_what_is_not_a_goodput_naming_the_pair():
    assert parse_result_json(_result([3000.5, "2900"])).details[("lsquic", "quiche")] == [
        3000.5, 2900.0]
    for bad, what in ((True, "True is not a number"), ("x", "'x' is not a number"),
                      (-1, "-1 is not a finite non-negative number")):
        with pytest.raises(DataError) as err:
            parse_result_json(_result([bad]), "r/result.json")
        assert err.value.reason == f"lsquic_quiche: {what}" and err.value.field == "details"


def test_result_json_needs_a_list_of_lists():
    for groups in ([1], {"a": 1}, [[1], 2]):
        with pytest.raises(DataError, match="not a list of lists"):
            parse_result_json(json.dumps({"measurements": groups}))
    assert parse_result_json(json.dumps({"measurements": [[]]})).details == {}
