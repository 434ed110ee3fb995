"""Properties of the explorer's URL decoder (``app/urlstate.py``): it never raises,
each problem is one bounded line, and a selection survives its own URL."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quiclab.app.urlstate import PAGES, Selection, decode, encode
from quiclab.sim.engine import ENGINES
from quiclab.sim.scenario import Scenario, field_names

from .conftest import examples
from .harness import assert_one_line
from .strategies import NUMBERISH

pytestmark = pytest.mark.properties

KEYS = st.one_of(st.sampled_from([*field_names(), "page", "engines", "embed"]),
                 st.text(max_size=10))
URL_VALUES = st.one_of(NUMBERISH, st.text(max_size=30),
                       st.text(alphabet="0123456789", min_size=30, max_size=6000),
                       st.lists(st.sampled_from(["lsquic", "quiche", "x@", "", "des", "ns3"]),
                                max_size=4).map(",".join))
IMPLS = ["lsquic", "quiche", "lsquic@march", "ngtcp2"]


@settings(max_examples=examples(300))
@given(params=st.dictionaries(KEYS, URL_VALUES, max_size=8),
       known=st.one_of(st.none(), st.just(IMPLS)))
def test_decoding_any_url_never_raises(params, known):
    selection, page, problems = decode(params, known)
    assert page in PAGES
    assert isinstance(selection.base, Scenario)
    assert selection.engines[0] == "analytic" and set(selection.engines) <= set(ENGINES)
    for problem in problems:
        assert_one_line(problem)


@settings(max_examples=examples(100))
@given(mtu=st.integers(1228, 65535), rtt=st.floats(0, 10_000), seed=st.integers(0, 2**63 - 1),
       gso=st.booleans(), servers=st.lists(st.sampled_from(IMPLS), min_size=1, max_size=3,
                                           unique=True),
       engines=st.lists(st.sampled_from([e for e in ENGINES if e != "analytic"]), unique=True),
       page=st.sampled_from(list(PAGES)))
def test_a_selection_survives_its_url(mtu, rtt, seed, gso, servers, engines, page):
    base = Scenario(mtu_bytes=mtu, rtt_ms=rtt, seed=seed, gso=gso, server=servers[0],
                    client=servers[0])
    selection = Selection(base, tuple(servers), tuple(servers), ("analytic", *engines))
    decoded, decoded_page, problems = decode(encode(selection, page), IMPLS)
    assert problems == [] and decoded_page == page and decoded == selection
