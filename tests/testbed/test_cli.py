"""The `testbed` command group through a tiny local argparse harness."""

from __future__ import annotations

import argparse
import json

import pytest

from quiclab.testbed import cli


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="quiclab")
    parser.add_argument("--catalog", default=None)
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_stacks_prints_the_coverage_table(capsys):
    assert parse(["testbed", "stacks", "--json"]).func(parse(["testbed", "stacks", "--json"])) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"quic-go", "quinn", "s2n-quic", "aioquic"} <= {r["stack"] for r in rows}


def test_without_root_it_says_so_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    args = parse(["testbed", "run", "--server", "quic-go", "--client", "quic-go"])
    assert args.func(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "needs root" in err


def test_a_refused_knob_is_one_line(capsys):
    args = parse(["testbed", "run", "--server", "quinn", "--client", "quinn",
                  "--set", "mtu_bytes=9000"])
    assert args.func(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot be honoured by quinn" in err


def test_repeated_set_flags_accumulate():
    # `--set a=1 --set b=2` must keep both (argparse's default would keep only the last).
    args = parse(["testbed", "run", "--server", "quinn", "--client", "quinn",
                  "--set", "rtt_ms=10", "--set", "transfer_bytes=5000000", "rcvbuf_bytes=65536"])
    assert args.set == ["rtt_ms=10", "transfer_bytes=5000000", "rcvbuf_bytes=65536"]


@pytest.mark.testbed
def test_run_json_last_line(root, quic_go, tmp_path, capsys):
    catalog = tmp_path / "c.duckdb"
    args = parse(["--catalog", str(catalog), "testbed", "--runs-dir", str(tmp_path / "runs"),
                  "run", "--server", "quic-go", "--client", "quic-go", "--bytes", "5000000",
                  "--set", "mtu_bytes=9000", "gso=false", "--json"])
    assert args.func(args) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["status"] == "ok" and last["goodput_mbps"] > 0
    assert last["server_cpu_s"] > 0 and last["client_cpu_s"] > 0
    assert last["gso"] is False
