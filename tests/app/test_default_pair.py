"""The explorer opens on lsquic ↔ lsquic whatever order the registry lists its stacks in.

A URL without ``server``/``client`` shows the QIR-10G baseline pair (Kempf et
al. 2024; the Scenario's default, lsquic on both ends). The committed registry
lists its implementations alphabetically, so aioquic comes first: the default
must not be "the first one".
"""

from __future__ import annotations

from quiclab.app.resources import implementation_names
from quiclab.app.urlstate import decode
from quiclab.models.registry import Registry
from quiclab.paths import PROJECT_ROOT


def test_the_committed_registry_opens_on_lsquic():
    names = implementation_names(Registry.load(PROJECT_ROOT / "models" / "fitted"))
    assert names[0] != "lsquic"  # the case this guards: lsquic is not listed first
    selection, page, problems = decode({}, names)
    assert page == "whatif"
    assert (selection.servers, selection.clients) == (("lsquic",), ("lsquic",))
    assert (selection.base.server, selection.base.client) == ("lsquic", "lsquic")
    assert problems == []


def test_lsquic_is_preferred_wherever_it_is_listed():
    for names in (["aioquic", "lsquic", "quiche"], ["quiche", "msquic", "lsquic"]):
        selection, _, _ = decode({}, names)
        assert (selection.servers, selection.clients) == (("lsquic",), ("lsquic",)), names


def test_without_lsquic_the_first_listed_stack_is_the_default():
    selection, _, _ = decode({}, ["quiche", "aioquic"])
    assert (selection.servers, selection.clients) == (("quiche",), ("quiche",))
    # A server named in the URL is kept; the client still takes the default.
    selection, _, problems = decode({"server": "aioquic"}, ["aioquic", "lsquic"])
    assert (selection.servers, selection.clients, problems) == (("aioquic",), ("lsquic",), [])
