"""Sweep specs: validation messages (file, key, allowed keys) and axis expansion."""

from __future__ import annotations

from pathlib import Path

import pytest

from quiclab.errors import ScenarioError, SpecError
from quiclab.experiments.findings import load_repro
from quiclab.experiments.spec import find_spec, load_sweep, packaged_dir

from .conftest import write

GOOD = """\
kind: sweep
base: {cpu: Intel Xeon W-2145, app: perf}
axes:
  - {field: implementation, values: [fast, slow]}
  - {field: rtt_ms, range: {start: 0, stop: 10, step: 2.5}}
  - {zip: {gso: [false, true], gro: [false, true]}}
repetitions: 2
"""


def test_grid_zip_range_and_repetitions(tmp_path: Path) -> None:
    spec = load_sweep(write(tmp_path / "sweep-demo.yaml", GOOD))
    points = spec.scenarios()
    assert spec.name == "sweep-demo"
    assert len(spec) == len(points) == 2 * 5 * 2 * 2
    first = points[0]
    assert (first.server, first.client, first.rtt_ms, first.gso, first.gro, first.run) == \
        ("fast", "fast", 0.0, False, False, 0)
    assert points[1].run == 1 and points[1].rtt_ms == 0.0  # repetitions innermost
    assert sorted({p.rtt_ms for p in points}) == [0.0, 2.5, 5.0, 7.5, 10.0]
    assert {(p.gso, p.gro) for p in points} == {(False, False), (True, True)}  # zipped
    assert points[-1].server == "slow" and points[-1].cpu == "Intel Xeon W-2145"
    assert len({p.key() for p in points}) == len(points)


def test_logrange_integer_fields(tmp_path: Path) -> None:
    spec = load_sweep(write(tmp_path / "s.yaml", """\
kind: sweep
axes:
  - {field: rcvbuf_bytes, logrange: {start: 106496, stop: 6815744, num: 7}}
  - {field: link_gbps, logrange: {start: 1, stop: 100, num: 3}}
"""))
    bufs = sorted({p.rcvbuf_bytes for p in spec.scenarios()})
    assert bufs == [106496, 212992, 425984, 851968, 1703936, 3407872, 6815744]
    assert sorted({p.link_gbps for p in spec.scenarios()}) == [1.0, 10.0, 100.0]


@pytest.mark.parametrize(("text", "key", "allowed"), [
    ("kind: sweep\naxess: []\n", "axess", "axes"),
    ("kind: sweep\naxes:\n  - {feild: mtu_bytes, values: [1500]}\n", "axes[0].feild",
     "field, values"),
    ("kind: sweep\naxes:\n  - {field: mtu_bytes, range: {start: 1500, stop: 9000, stp: 1}}\n",
     "axes[0].range.stp", "start, stop, step"),
    ("kind: sweep\nengine_options: {des: {granularty: batch}}\n",
     "engine_options.des.granularty", "granularity"),
])
def test_typo_names_file_key_and_allowed_keys(tmp_path: Path, text: str, key: str,
                                               allowed: str) -> None:
    path = write(tmp_path / "sweep-typo.yaml", text)
    with pytest.raises(SpecError) as err:
        load_sweep(path)
    message = str(err.value)
    assert "\n" not in message
    assert str(path) in message and key in message and allowed in message


def test_scenario_errors_name_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "s.yaml", "kind: sweep\naxes:\n  - {field: mtu_bytes, values: [100]}\n")
    with pytest.raises(ScenarioError) as err:
        load_sweep(path)
    assert str(path) in str(err.value) and "mtu_bytes=100" in str(err.value)
    path = write(tmp_path / "t.yaml", "kind: sweep\naxes:\n  - {field: mtu_bites, values: [1]}\n")
    with pytest.raises(SpecError, match=r"mtu_bites.*not a Scenario field"):
        load_sweep(path)


@pytest.mark.parametrize(("text", "match"), [
    ("kind: sweep\naxes:\n  - {zip: {gso: [true], gro: [true, false]}}\n", "differ in length"),
    ("kind: sweep\naxes:\n  - {field: rtt_ms, values: [1]}\n  - {field: rtt_ms, values: [2]}\n",
     "already varied"),
    ("kind: sweep\naxes:\n  - {field: rtt_ms, range: {start: 5, stop: 1, step: 1}}\n",
     "below start"),
    ("kind: sweep\nrepetitions: 0\n", "out of range"),
    ("kind: sweeep\n", "this loader reads kind: sweep"),
    ("kind: reproduction\ntitle: t\n", "a reproduction spec — run it with `quiclab reproduce`"),
    ("- just a list\n", "expected a mapping"),
    ("kind: sweep\naxes: [unclosed\n", "not valid YAML"),
    # safe_load would keep the second value without a word
    ("kind: sweep\nrepetitions: 2\nrepetitions: 3\n",
     r"bad.yaml \(line 3\): not valid YAML: duplicate key 'repetitions'"),
])
def test_other_spec_errors(tmp_path: Path, text: str, match: str) -> None:
    with pytest.raises(SpecError, match=match):
        load_sweep(write(tmp_path / "bad.yaml", text))


def test_a_sweep_given_to_reproduce_names_the_command(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="a sweep spec — run it with `quiclab sweep`"):
        load_repro(write(tmp_path / "s.yaml", "kind: sweep\naxes: []\n"))


def test_shipped_specs_load() -> None:
    sweeps = sorted(packaged_dir().glob("sweep-*.yaml"))
    repros = sorted(packaged_dir().glob("repro-*.yaml"))
    assert len(sweeps) >= 5 and len(repros) >= 20
    for path in sweeps:
        assert len(load_sweep(path)) > 0
    names = {load_repro(p).name for p in repros}
    for required in ("repro-koenig25-fig9a-mtu-offload", "repro-kempf24-fig3-buffers",
                     "repro-mukherjee25-table3-crypto", "repro-litespeed-round1"):
        assert required in names
    assert find_spec("sweep-mtu-offload", "sweep-").name == "sweep-mtu-offload.yaml"
    assert find_spec("mtu-offload", "sweep-").name == "sweep-mtu-offload.yaml"
    with pytest.raises(SpecError, match="no such spec; shipped:"):
        find_spec("nonexistent", "sweep-")


@pytest.mark.parametrize(("options", "key", "said"), [
    ("{des: {granularity: banana}}", "engine_options.des.granularity",
     "'banana' is not allowed; allowed: packet, batch"),
    ("{des: {max_units: lots}}", "engine_options.des.max_units",
     "expected a whole number, got 'lots'"),
    ("{des: {max_units: 2.5}}", "engine_options.des.max_units",
     "expected a whole number, got 2.5"),
    ("{des: {max_sim_s: -1}}", "engine_options.des.max_sim_s",
     "-1 is out of range; allowed > 0"),
    ("{des: {max_sim_s: 0}}", "engine_options.des.max_sim_s",
     "0 is out of range; allowed > 0"),
    ("{des: {unit_packets: 0}}", "engine_options.des.unit_packets",
     "0 is out of range; allowed ≥ 1"),
    ("{des: {max_packets: true}}", "engine_options.des.max_packets",
     "expected a whole number, got True"),
    ("{ns3: {warm_fraction: 0.95}}", "engine_options.ns3.warm_fraction",
     "0.95 is out of range; allowed > 0 and < 0.9"),
    ("{ns3: {prefix_packets: 10}}", "engine_options.ns3.prefix_packets",
     "10 is out of range; allowed ≥ 1000"),
])
def test_engine_option_values_are_checked_on_load(tmp_path: Path, options: str, key: str,
                                                  said: str) -> None:
    path = write(tmp_path / "s.yaml", f"kind: sweep\nengines: [analytic, des]\n"
                                      f"engine_options: {options}\n")
    with pytest.raises(SpecError) as err:
        load_sweep(path)
    assert str(err.value) == f"{path}: {key}: {said}"


def test_engine_options_load_as_the_engines_take_them(tmp_path: Path) -> None:
    spec = load_sweep(write(tmp_path / "s.yaml", "kind: sweep\nengine_options:\n"
                            "  des: {granularity: batch, max_units: 30000.0, max_sim_s: 60}\n"
                            "  ns3: {prefix_packets: 5000, warm_fraction: 0.5}\n"))
    assert spec.engine_options == {
        "des": {"granularity": "batch", "max_units": 30000, "max_sim_s": 60.0},
        "ns3": {"prefix_packets": 5000, "warm_fraction": 0.5}}
    assert isinstance(spec.engine_options["des"]["max_units"], int)


@pytest.mark.parametrize(("entry", "key", "value"), [
    ("{field: rtt_ms, range: {start: 0, stop: .inf, step: 1}}", "axes[0].range.stop", "inf"),
    ("{field: rtt_ms, range: {start: .nan, stop: 1, step: 1}}", "axes[0].range.start", "nan"),
    ("{field: rtt_ms, range: {start: 0, stop: 1, step: -.inf}}", "axes[0].range.step", "-inf"),
    ("{field: link_gbps, logrange: {start: 1, stop: .inf, num: 3}}", "axes[0].logrange.stop",
     "inf"),
    ("{zip: {rtt_ms: {range: {start: 0, stop: .NaN, step: 1}}}}",
     "axes[0].zip.rtt_ms.range.stop", "nan"),
])
def test_non_finite_numbers_are_refused(tmp_path: Path, entry: str, key: str,
                                        value: str) -> None:
    path = write(tmp_path / "s.yaml", f"kind: sweep\naxes:\n  - {entry}\n")
    with pytest.raises(SpecError) as err:
        load_sweep(path)
    assert str(err.value) == f"{path}: {key}: {value} is not a finite number"


def test_a_range_too_fine_to_count_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "s.yaml", "kind: sweep\naxes:\n"
                 "  - {field: rtt_ms, range: {start: 0, stop: 1.0e+308, step: 1.0e-308}}\n")
    with pytest.raises(SpecError, match=r"axes\[0\]\.range: too many values; at most 100000"):
        load_sweep(path)
    with pytest.raises(SpecError, match=r"repetitions: inf is not a finite number"):
        load_sweep(write(tmp_path / "r.yaml", "kind: sweep\nrepetitions: .inf\n"))


def test_a_spec_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_bytes("kind: sweep\ndescription: café\n".encode("latin-1"))
    with pytest.raises(SpecError) as err:
        load_sweep(path)
    assert str(err.value) == f"{path}: not UTF-8 text (byte 28)"
    with pytest.raises(SpecError, match=r"s\.yaml: not UTF-8 text \(byte 28\)$"):
        load_repro(path)


def test_a_spec_that_cannot_be_read_is_one_line(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "s.yaml", "kind: sweep\n")

    def refuse(self: Path, *args: object, **kwargs: object) -> str:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_text", refuse)
    with pytest.raises(SpecError) as err:
        load_sweep(path)
    assert str(err.value) == f"{path}: cannot be read (Permission denied)"
