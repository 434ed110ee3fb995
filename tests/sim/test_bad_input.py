"""Defects a bad-input campaign found in Scenario input and `quiclab predict`, one test
each: every reproduction is one bounded line and exit 2, or the right result — never
a traceback, a hang or a misleading word. Driven through ``quiclab.cli.main`` with the
packaged models (no ../shared)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from quiclab.app.urlstate import decode
from quiclab.cli import main
from quiclab.errors import MAX_MESSAGE_CHARS, ScenarioError
from quiclab.sim import cli as sim_cli
from quiclab.sim.scenario import Scenario, coerce, parse_assignments

DIGITS_400 = "9" * 400
DIGITS_5000 = "9" * 5000


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as done:
        code = int(done.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("quiclab: error: "), err[:2000]
    assert len(lines[0]) <= len("quiclab: error: ") + MAX_MESSAGE_CHARS
    return lines[0]


# 3 -- a 400- or 5000-digit integer: OverflowError / ValueError before ------------------
@pytest.mark.parametrize("digits", [DIGITS_400, DIGITS_5000])
def test_a_huge_integer_in_a_scenario_file_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], digits: str):
    for field in ("mtu_bytes", "rtt_ms", "transfer_bytes"):
        path = tmp_path / "s.yaml"
        path.write_text(f"{field}: {digits}\n")
        code, _, err = _run(capsys, "predict", "--scenario", str(path))
        line = _one_error_line(err)
        assert code == 2 and str(path) in line and "digits" in line


@pytest.mark.parametrize("digits", [DIGITS_400, DIGITS_5000])
def test_the_url_decoder_never_raises_on_a_huge_integer(digits: str):
    selection, _, problems = decode({"mtu_bytes": digits, "rtt_ms": digits, "seed": digits})
    assert selection.base.mtu_bytes == Scenario().mtu_bytes
    assert len(problems) == 3 and all(len(p) <= MAX_MESSAGE_CHARS for p in problems)


# 9 -- "--set mtu_bytes=<400 digits>" said "allowed a whole number" ---------------------
def test_a_400_digit_set_value_names_the_range_it_breaks(capsys: pytest.CaptureFixture[str]):
    code, _, err = _run(capsys, "predict", "--set", f"mtu_bytes={DIGITS_400}")
    line = _one_error_line(err)
    assert code == 2 and line.startswith("quiclab: error: --set: mtu_bytes='9999")
    assert line.endswith("is impossible: allowed 1228 … 65535")


def test_whole_numbers_are_read_exactly_from_text():
    assert coerce("seed", str(2**53 + 1)) == 2**53 + 1
    assert coerce("transfer_bytes", "8.6e9") == 8_600_000_000
    assert parse_assignments(["seed=9223372036854775807"]) == {"seed": 2**63 - 1}


# 4 -- unbounded input: aliases, long values, large files -------------------------------
def test_nested_yaml_aliases_are_refused_at_once(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]):
    """A 1 KB file of nested aliases under cpu: hung (killed after 60 s); five levels
    gave a 349 KB error line."""
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\ncpu: *a9\n")
    started = time.perf_counter()
    code, _, err = _run(capsys, "predict", "--scenario", str(path))
    assert time.perf_counter() - started < 20  # it hung before; seconds at most now
    line = _one_error_line(err)
    assert code == 2 and "values once aliases are expanded" in line


def test_a_list_where_a_name_belongs_is_refused_in_a_bounded_line():
    nested: list = ["lol"] * 10
    for _ in range(5):
        nested = [nested] * 10
    with pytest.raises(ScenarioError) as err:
        Scenario.from_dict({"cpu": nested})
    assert len(str(err.value)) <= MAX_MESSAGE_CHARS and "cpu=" in str(err.value)


def test_a_50_mb_value_gives_a_short_line(capsys: pytest.CaptureFixture[str]):
    code, _, err = _run(capsys, "predict", "--set", "cpu=" + "x" * 50_000_000)
    assert code == 2 and len(_one_error_line(err)) < 1000


def test_a_25_mb_scenario_file_is_refused_by_its_size(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "big.yaml"
    path.write_text("seed: 1\n" + "# padding\n" * 2_500_000)
    code, _, err = _run(capsys, "predict", "--scenario", str(path))
    line = _one_error_line(err)
    assert code == 2 and str(path) in line and "a scenario file is at most" in line


# 9 -- Ctrl-C of predict offered to resume though predict writes nothing ---------------
def test_ctrl_c_of_predict_does_not_offer_to_resume(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]):
    def interrupted(pred):
        raise KeyboardInterrupt

    monkeypatch.setattr(sim_cli, "format_prediction", interrupted)
    code, _, err = _run(capsys, "predict")
    assert code == 130 and "resume" not in err.replace("nothing to resume", "")
    assert "`quiclab predict` writes nothing" in err


# 10 -- oddities --------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["lsquic@", "@march", "lsquic@march@x"])
def test_an_empty_or_double_variant_is_refused(capsys: pytest.CaptureFixture[str], name: str):
    code, _, err = _run(capsys, "predict", "--server", name)
    assert code == 2 and "optionally @variant" in _one_error_line(err)


@pytest.mark.parametrize("runs", ["0", "10001", DIGITS_5000, "many"])
def test_predict_runs_is_bounded(capsys: pytest.CaptureFixture[str], runs: str):
    code, _, err = _run(capsys, "predict", "--engine", "des", "--runs", runs)
    assert code == 2 and "expected a whole number 1 … 10000" in _one_error_line(err)


def test_a_one_byte_transfer_is_one_data_packet(capsys: pytest.CaptureFixture[str]):
    code, out, _ = _run(capsys, "predict", "--set", "transfer_bytes=1", "--json")
    pred = json.loads(out)  # packets sent = delivered ones + expected retransmissions
    assert code == 0 and pred["server_packets_sent"] - pred["retransmissions"] == 1.0


def test_the_des_limit_has_no_headroom_at_50_percent_loss(capsys: pytest.CaptureFixture[str]):
    """The DES named cwnd the limit with +33,867 % cwnd headroom (the analytic bound)."""
    code, out, _ = _run(capsys, "predict", "--engine", "des", "--set",
                        "loss_pct=50 transfer_bytes=2000000", "--json")
    pred = json.loads(out)
    assert code == 0 and pred["limit"] == "cwnd"
    assert pred["headroom"][pred["limit"]] == pytest.approx(0.0, abs=1e-9)
    assert min(pred["headroom"].values()) >= -1e-9
    assert any("analytic bound" in n for n in pred["notes"])
