"""Spec points checked against the model registry (implementations, @variants, CPUs) and
the published point ids, up front: one line naming file, key path and value, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from quiclab.cli import main
from quiclab.errors import SpecError
from quiclab.experiments.findings import load_repro
from quiclab.experiments.registry_check import check_sweep
from quiclab.experiments.reproduce import load_points
from quiclab.experiments.spec import load_sweep
from quiclab.models.registry import Registry

from .conftest import write


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("quiclab: error: "), err
    return err


SWEEP_OK = """\
kind: sweep
base: {cpu: AMD EPYC 7543}
axes:
  - {field: implementation, values: [fast, slow]}
  - {zip: {cpu: [AMD EPYC 7543, Gold 6312U], rtt_ms: [0, 1]}}
"""


@pytest.mark.parametrize("text, path, value", [
    ("kind: sweep\naxes:\n  - {field: implementation, values: [fast, msquik]}\n",
     "axes[0].values[1]", "server='msquik'"),
    ("kind: sweep\naxes:\n  - {field: server, values: [fast, slow@turbo]}\n",
     "axes[0].values[1]", "server='slow@turbo'"),
    ("kind: sweep\naxes:\n  - {field: rtt_ms, values: [0]}\n"
     "  - {zip: {client: [fast, nope], gso: [true, false]}}\n",
     "axes[1].zip.client[1]", "client='nope'"),
    ("kind: sweep\nbase: {cpu: Intel Xeon W-2154}\naxes:\n"
     "  - {field: implementation, values: [fast, slow]}\n",
     "base.cpu", "cpu='Intel Xeon W-2154'"),
    ("kind: sweep\naxes:\n  - {field: cpu, values: [AMD EPYC 7543, AMD EPYC 7515P]}\n",
     "axes[0].values[1]", "cpu='AMD EPYC 7515P'"),
])
def test_sweep_unknown_names_fail_before_running(tmp_path: Path, models_dir: Path,
                                                 capsys: pytest.CaptureFixture[str], text: str,
                                                 path: str, value: str) -> None:
    spec = write(tmp_path / "sw.yaml", text)
    out = tmp_path / "out"
    assert main(["--models", str(models_dir), "sweep", str(spec), "--quiet", "--no-catalog",
                 "--out", str(out)]) == 2
    err = _one_line_error(capsys)
    assert f"{spec}: {path}: {value} is impossible: allowed " in err
    assert not out.exists()  # nothing computed, nothing written


@pytest.mark.parametrize("text, path, value", [
    ("kind: sweep\nbase: {server_core: 20}\naxes:\n"
     "  - {field: cpu, values: [AMD EPYC 7543, Intel Xeon D-1518]}\n",
     "base.server_core", "server_core=20 is impossible: allowed -1 … 3 (Intel Xeon D-1518 "
                         "has 4 cores); cpu from axes[0].values[1]"),
    ("kind: sweep\nbase: {cpu: Intel Xeon W-2145, pin: true}\naxes:\n"
     "  - {zip: {client_core: [0, 8], rtt_ms: [0, 1]}}\n",
     "axes[0].zip.client_core[1]", "client_core=8 is impossible: allowed -1 … 7 (Intel Xeon "
                                   "W-2145 has 8 cores); cpu from base.cpu"),
])
def test_sweep_cores_the_cpu_lacks_fail_before_running(
        tmp_path: Path, models_dir: Path, capsys: pytest.CaptureFixture[str], text: str,
        path: str, value: str) -> None:
    spec = write(tmp_path / "sw.yaml", text)
    out = tmp_path / "out"
    assert main(["--models", str(models_dir), "sweep", str(spec), "--quiet", "--no-catalog",
                 "--out", str(out)]) == 2
    assert _one_line_error(capsys) == f"quiclab: error: {spec}: {path}: {value}"
    assert not out.exists()  # nothing computed, nothing written


def test_cores_every_cpu_has_pass(tmp_path: Path, registry: Registry) -> None:
    check_sweep(load_sweep(write(tmp_path / "sw.yaml", "kind: sweep\n"
                                 "base: {server_core: 3, client_core: 0, pin: true}\naxes:\n"
                                 "  - {field: cpu, values: [AMD EPYC 7543, D-1518]}\n")),
                registry)


def test_known_names_and_cpu_parts_pass(tmp_path: Path, registry: Registry) -> None:
    check_sweep(load_sweep(write(tmp_path / "sw.yaml", SWEEP_OK)), registry)


def test_empty_values_say_empty_list(tmp_path: Path) -> None:
    spec = write(tmp_path / "sw.yaml", "kind: sweep\naxes:\n  - {field: rtt_ms, values: []}\n")
    with pytest.raises(SpecError, match=r"sw\.yaml: axes\[0\]\.values: expected a list of at "
                                        r"least 1 item\(s\), got an empty list$"):
        load_sweep(spec)


REPRO = """\
kind: reproduction
title: synthetic checks against the registry and the published points
source: {document: "002", figure: Fig. 8}
base: {cpu: AMD EPYC 7543}
scenarios:
  one: {implementation: fast}
series:
  cpus:
    set: {implementation: slow}
    axes: [{field: cpu, values: [AMD EPYC 7543, AMD EPYC 9354]}]
findings:
  - id: f
    claim: synthetic
    checks:
      - {point: kempf24-059, scenario: one, tolerance: {rel: 0.1}, reason: synthetic}
    shapes:
      - {type: monotone, series: cpus, direction: increasing, slack: 1, reason: synthetic}
"""


@pytest.mark.parametrize("old, new, path, value", [
    ("values: [AMD EPYC 7543, AMD EPYC 9354]", "values: [AMD EPYC 7543, AMD EPYC 7515P]",
     "series.cpus.axes[0].values[1]", "cpu='AMD EPYC 7515P' is impossible"),
    ("one: {implementation: fast}", "one: {implementation: quiche-x}",
     "scenarios.one.implementation", "server='quiche-x' is impossible"),
    ("set: {implementation: slow}", "set: {implementation: slow@nope}",
     "series.cpus.set.implementation", "server='slow@nope' is impossible"),
    ("base: {cpu: AMD EPYC 7543}", "base: {cpu: AMD EPYC 7515P}",
     "base.cpu", "cpu='AMD EPYC 7515P' is impossible"),
    ("point: kempf24-059", "point: kempf24-959",
     "findings[0].checks[0].point", "'kempf24-959' is not a published point id"),
])
def test_reproduce_typos_fail_before_running(tmp_path: Path, models_dir: Path,
                                             capsys: pytest.CaptureFixture[str], old: str,
                                             new: str, path: str, value: str) -> None:
    good = write(tmp_path / "repro-good.yaml", REPRO)
    assert main(["--models", str(models_dir), "reproduce", str(good), "--no-catalog",
                 "--quiet", "--out", str(tmp_path / "ok")]) == 0
    capsys.readouterr()
    assert old in REPRO
    spec = write(tmp_path / "repro-bad.yaml", REPRO.replace(old, new))
    out = tmp_path / "out"
    assert main(["--models", str(models_dir), "reproduce", str(spec), "--no-catalog",
                 "--quiet", "--out", str(out)]) == 2
    err = _one_line_error(capsys)
    assert f"{spec}: {path}: {value}" in err
    assert not out.exists()


def test_not_covered_spec_may_name_unmodelled_stacks(tmp_path: Path, models_dir: Path,
                                                     registry: Registry,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """``status: not-covered`` (e.g. implementation: udp) is reported, not refused; its
    point ids are still checked."""
    text = REPRO.replace("kind: reproduction\n", "kind: reproduction\nstatus: not-covered\n"
                         "reason: plain UDP has no cost model\n") \
        .replace("one: {implementation: fast}", "one: {implementation: udp}")
    spec = write(tmp_path / "repro-nc.yaml", text)
    ids = set(load_points(None)["point_id"].astype(str))
    load_repro(spec, registry, ids)
    assert main(["--models", str(models_dir), "reproduce", str(spec), "--no-catalog",
                 "--quiet", "--out", str(tmp_path / "out")]) == 0
    assert "0 pass   0 fail   1 n/c" in capsys.readouterr().out
    bad = write(tmp_path / "repro-nc-bad.yaml", text.replace("kempf24-059", "kempf24-959"))
    with pytest.raises(SpecError, match=r"findings\[0\]\.checks\[0\]\.point: 'kempf24-959'"):
        load_repro(bad, registry, ids)
