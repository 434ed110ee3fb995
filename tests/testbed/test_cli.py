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


@pytest.mark.parametrize("command", [
    ["matrix", "--stacks", "quic-go", "nope"],
    ["noise", "--stacks", "quic-go", "nope"],
])
def test_an_unknown_stack_is_refused_before_anything_runs(monkeypatch, capsys, command):
    # Not root: the name is checked before the root check, the lock or any namespace.
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    args = parse(["testbed", *command])
    assert args.func(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "stack='nope' is unknown" in err


def test_a_bad_sweep_spec_is_refused_before_anything_runs(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    spec = tmp_path / "bad.yaml"
    spec.write_text("axes: {implementation: [quic-go]}\nbase: {los_pct: 1}\n")
    args = parse(["testbed", "sweep", str(spec)])
    assert args.func(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{spec}: base.los_pct=1: unknown field" in err


@pytest.mark.testbed
def test_a_sweep_with_a_failed_run_exits_non_zero(root, tmp_path, capsys):
    """quinn always has GRO: gro=false is refused and recorded failed (no namespaces are
    made for it); the sweep says so and exits 1, not 0."""
    spec = tmp_path / "s.yaml"
    spec.write_text("name: refused\naxes: {implementation: [quinn], gro: [false]}\n")
    catalog = tmp_path / "c.duckdb"
    args = parse(["--catalog", str(catalog), "testbed", "--runs-dir", str(tmp_path / "runs"),
                  "sweep", str(spec)])
    assert args.func(args) == 1
    assert "1 runs, 1 failed, 0 already in the catalog (1 points)" in capsys.readouterr().out
