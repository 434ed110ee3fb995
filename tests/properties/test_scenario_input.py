"""Properties of Scenario input: coercion of any value, ``Scenario.from_dict``, ``--set``
and the one whole-number reader. Never a traceback; a refusal is one bounded line
naming the field; whole numbers are read exactly."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quiclab.errors import MAX_MESSAGE_CHARS, ScenarioError
from quiclab.sim.scenario import Scenario, coerce, field_names, parse_assignments, whole_number

from .conftest import examples
from .harness import assert_clean, assert_one_line, run_cli
from .strategies import NUMBERISH, SCALARS, VALUES

pytestmark = pytest.mark.properties

FIELDS = field_names()
FIELD_NAMES = st.one_of(st.sampled_from(FIELDS), st.text(max_size=12))


@settings(max_examples=examples(300))
@given(name=st.sampled_from(FIELDS), value=VALUES)
def test_coerce_gives_the_fields_type_or_one_line_naming_the_field(name, value):
    try:
        result = coerce(name, value)
    except ScenarioError as err:
        assert err.field == name
        assert_one_line(str(err), (name,))
        return
    kind = type(getattr(Scenario(), name))
    assert isinstance(result, kind) and not (kind is int and isinstance(result, bool))


@settings(max_examples=examples(100))
@given(fields=st.dictionaries(FIELD_NAMES, VALUES, max_size=6))
def test_from_dict_builds_a_scenario_or_refuses_in_one_line(fields):
    try:
        scenario = Scenario.from_dict(fields, source="s.yaml")
    except ScenarioError as err:
        assert_one_line(str(err), ("s.yaml",))
        assert len(str(err)) <= MAX_MESSAGE_CHARS
        return
    assert scenario == Scenario.from_dict(scenario.to_dict())  # what was built is valid


@settings(max_examples=examples(200))
@given(items=st.lists(st.one_of(
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(FIELDS), NUMBERISH),
    st.text(max_size=30)), max_size=4))
def test_set_items_parse_or_refuse_in_one_line(items):
    try:
        parse_assignments(items)
    except ScenarioError as err:
        assert_one_line(str(err), ("--set",))


@settings(max_examples=examples(300))
@given(number=st.integers(min_value=-(10**40) + 1, max_value=10**40 - 1),
       underscores=st.booleans())
def test_whole_numbers_are_read_exactly(number, underscores):
    text = f"{number:_}" if underscores else str(number)
    assert whole_number("seed", text) == number
    assert whole_number("seed", f" {text} ") == number


@settings(max_examples=examples(200))
@given(value=SCALARS)
def test_whole_number_reads_or_refuses_any_scalar(value):
    try:
        number = whole_number("mtu_bytes", value)
    except ScenarioError as err:
        assert_one_line(str(err), ("mtu_bytes",))
        return
    assert isinstance(number, int) and not isinstance(number, bool)


@settings(max_examples=examples(25, 250))
@given(items=st.lists(st.builds(lambda k, v: f"{k}={v}", st.sampled_from(FIELDS),
                                st.one_of(NUMBERISH, st.text(max_size=20))),
                      min_size=1, max_size=3))
def test_predict_with_any_set_is_a_prediction_or_one_line(items):
    outcome = run_cli("predict", "--set", *items)
    assert_clean(outcome, ("--set", "server", "client"))
