"""Properties of hand-written YAML: the bounded loader, scenario files for ``predict
--scenario``, sweep specs and testbed specs, from random structures and from damaged
copies of the shipped specs. Never a traceback; a refusal is one bounded line naming
the file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from quiclab import yamlio
from quiclab.errors import QuiclabError
from quiclab.experiments.spec import load_sweep, packaged_dir
from quiclab.sim.scenario import field_names
from quiclab.testbed import session

from .conftest import examples
from .harness import assert_clean, assert_one_line, run_cli
from .strategies import NUMBERISH, VALUES, damaged

pytestmark = pytest.mark.properties

SHIPPED = sorted(packaged_dir().glob("sweep-*.yaml"))
TESTBED_SPECS = sorted((Path(session.PACKAGE_DIR) / "specs").glob("*.yaml"))
YAML_BITS = st.sampled_from(["&a ", "*a", "[", "]", "{", "}", ": ", "- ", "\n", "  ", "#",
                             "!!int ", "!!binary ", "? ", "'", '"', "|", ">", "---",
                             "1e9", "9" * 50, ",", "%YAML 1.1\n"])
YAML_TEXT = st.lists(st.one_of(YAML_BITS, st.text(max_size=8)), max_size=40).map("".join)


def _dump(data: object) -> str:
    try:
        return yaml.safe_dump(data, allow_unicode=True)
    except (yaml.YAMLError, ValueError, TypeError):
        return str(data)


@settings(max_examples=examples(200))
@given(text=st.one_of(YAML_TEXT, VALUES.map(_dump)))
def test_the_yaml_loader_parses_or_raises_a_yaml_error(text):
    try:
        yamlio.load(text)
    except yaml.YAMLError as err:
        assert_one_line(yamlio.where(err))


SCENARIO_FILES = st.one_of(
    st.dictionaries(st.sampled_from(field_names()), VALUES, max_size=4).map(_dump),
    st.dictionaries(st.sampled_from(field_names()), NUMBERISH, max_size=4).map(_dump),
    YAML_TEXT)


@settings(max_examples=examples(25, 250))
@given(text=SCENARIO_FILES, suffix=st.sampled_from([".yaml", ".json"]))
def test_predict_scenario_file_is_a_prediction_or_one_line(tmp_path_factory, text, suffix):
    path = tmp_path_factory.mktemp("scenario") / f"s{suffix}"
    path.write_text(text, encoding="utf-8")
    assert_clean(run_cli("predict", "--scenario", str(path)), (str(path),))


def _load_sweep(path: Path) -> None:
    try:
        load_sweep(path)
    except QuiclabError as err:
        assert_one_line(str(err), (str(path),))


@settings(max_examples=examples(40))
@given(spec=st.sampled_from(SHIPPED), data=st.data())
def test_a_damaged_shipped_sweep_spec_loads_or_is_one_line(tmp_path_factory, spec, data):
    path = tmp_path_factory.mktemp("spec") / spec.name
    path.write_bytes(data.draw(damaged(spec.read_bytes())))
    _load_sweep(path)


SPEC_KEYS = st.sampled_from(["kind", "name", "base", "axes", "engines", "engine_options",
                             "repetitions", "record", "chunk", "description", "zip"])
AXIS = st.fixed_dictionaries({}, optional={
    "field": st.one_of(st.sampled_from(["implementation", *field_names()]), st.text(max_size=6)),
    "values": VALUES, "range": st.dictionaries(st.sampled_from(["start", "stop", "step"]),
                                               st.one_of(NUMBERISH, st.integers(), st.floats())),
    "logrange": st.dictionaries(st.sampled_from(["start", "stop", "num"]),
                                st.one_of(NUMBERISH, st.integers(), st.floats())),
    "zip": st.dictionaries(st.sampled_from(field_names()), VALUES, max_size=2)})
SWEEPS = st.fixed_dictionaries(
    {"kind": st.one_of(st.just("sweep"), NUMBERISH)},
    optional={"axes": st.lists(AXIS, max_size=3),
              "base": st.dictionaries(st.sampled_from(field_names()), VALUES, max_size=3),
              "engines": st.one_of(st.lists(st.sampled_from(["analytic", "des", "x"])),
                                   VALUES),
              "repetitions": st.one_of(NUMBERISH, st.integers(-5, 10**30)),
              "engine_options": VALUES, "record": VALUES, "chunk": VALUES})


@settings(max_examples=examples(60))
@given(spec=st.one_of(SWEEPS, st.dictionaries(SPEC_KEYS, VALUES, max_size=5)))
def test_a_random_sweep_spec_loads_or_is_one_line(tmp_path_factory, spec):
    path = tmp_path_factory.mktemp("spec") / "sweep-random.yaml"
    path.write_text(_dump(spec), encoding="utf-8")
    _load_sweep(path)


TESTBED = st.fixed_dictionaries({"name": st.one_of(st.just("t"), VALUES)}, optional={
    "base": st.dictionaries(st.sampled_from([*field_names(), "implementation"]), VALUES,
                            max_size=3),
    "axes": st.dictionaries(st.sampled_from(["implementation", "mtu_bytes", "gso", "cpu",
                                             "veth_segmentation", "rtt_ms"]),
                            st.one_of(VALUES, st.lists(NUMBERISH, min_size=1, max_size=3)),
                            max_size=3),
    "zip": st.dictionaries(st.sampled_from(["gso", "mtu_bytes", "chunks"]),
                           st.lists(st.one_of(st.none(), NUMBERISH), max_size=3), max_size=2),
    "testbed": st.dictionaries(st.sampled_from(["repeat", "bytes", "knobs", "servers"]),
                               VALUES, max_size=2)})


@settings(max_examples=examples(60))
@given(spec=TESTBED)
def test_a_random_testbed_spec_plans_or_is_one_line(spec):
    try:
        session.plan(spec, "t.yaml")
    except QuiclabError as err:
        assert_one_line(str(err), ("t.yaml",))


@settings(max_examples=examples(20, 200))
@given(spec=st.sampled_from(TESTBED_SPECS), data=st.data())
def test_a_damaged_shipped_testbed_spec_plans_or_is_one_line(tmp_path_factory, spec, data):
    path = tmp_path_factory.mktemp("tb") / spec.name
    path.write_bytes(data.draw(damaged(spec.read_bytes())))
    try:
        session.sweep_plan(path)
    except QuiclabError as err:
        assert_one_line(str(err), (str(path),))
