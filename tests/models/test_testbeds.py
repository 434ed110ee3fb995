"""Testbeds: effects fitted to one testbed's goodput act only on that testbed's Scenarios."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from quiclab.errors import ScenarioError
from quiclab.models.registry import Interop, PairEffects, Registry
from quiclab.models.testbeds import STATED, Speed, Testbeds, on_testbed, unknown_cpu_name
from quiclab.sim.analytic import AnalyticEngine
from quiclab.sim.resolve import resolve
from quiclab.sim.scenario import Scenario


@pytest.fixture(scope="module")
def packaged() -> Registry:
    return Registry.packaged()


def test_no_fitted_pair_effect_binds_on_another_testbed(packaged: Registry) -> None:
    """Every pair the shipped models fitted an interplay effect for, on every testbed
    that did not measure it (and on a user's unseen one): busy is 1, the limit is
    never the interplay, and the source says no effect was fitted there."""
    fitted = packaged.interop.testbeds
    assert fitted, "the shipped models fit pair effects on at least one testbed"
    engine = AnalyticEngine(packaged)
    targets = [*packaged.testbeds.ids(), "unseen"]
    checked = 0
    for measured, effects in fitted.items():
        for pair in sorted(effects.pair_effect):
            server, client = pair.split("|")
            if server not in packaged.models or client not in packaged.models:
                continue
            for other in targets:
                if other == measured or other in fitted:
                    continue
                busy, _lo, hi, source = packaged.interop.busy(server, client, other)
                assert busy == 1.0 and hi == 1.0, (pair, measured, other)
                assert "no pair interplay fitted" in source
                checked += 1
    assert checked > 0
    # An end-to-end case: the QIR-10G pair with the strongest effect, on an unseen testbed.
    qir = fitted["qir10g"]
    worst = min(qir.pair_effect, key=lambda p: qir.server_effect.get(p.split("|")[0], 0.0)
                + qir.client_effect.get(p.split("|")[1], 0.0) + qir.pair_effect[p])
    server, client = worst.split("|")
    app = "hq" if "msquic" in (server, client) else "h3"
    on_qir = engine.predict(Scenario(server=server, client=client, app=app, testbed="qir10g"))
    elsewhere = engine.predict(Scenario(server=server, client=client, app=app))
    assert on_qir.limit == "interop"
    assert elsewhere.limit != "interop"
    assert elsewhere.goodput_mbps > on_qir.goodput_mbps


def test_homogeneous_pair_not_capped_on_an_unseen_testbed(packaged: Registry) -> None:
    """A stack against itself on a user's own testbed is limited by a mechanism
    (CPU, link, window), never by an effect fitted elsewhere."""
    engine = AnalyticEngine(packaged)
    for name in ("picoquic", "msquic", "mvfst", "aioquic"):
        app = "hq" if name == "msquic" else "h3"
        p = engine.predict(Scenario(server=name, client=name, app=app, testbed="unseen"))
        assert p.limit != "interop", name


def test_interop_version_1_is_read_as_qir10g() -> None:
    v1 = {"schema": "quiclab.interop/1", "server_effect": {"a": -0.5}, "client_effect": {},
          "pair_effect": {"a|b": -0.1}, "pair_sd": {"a|b": 1.0}, "pair_ack_every": {"a|b": 7},
          "pair_overhead": {}, "provenance": {}}
    interop = Interop.from_json(v1, "interop.json")
    assert set(interop.testbeds) == {"qir10g"}
    busy = interop.busy("a", "b", "qir10g")[0]
    assert busy == pytest.approx(math.exp(-0.6))
    assert interop.busy("a", "b", "koenig25")[0] == 1.0
    assert interop.ack_every("a", "b") == 7


def test_interop_round_trip() -> None:
    interop = Interop({"qir10g": PairEffects({"a": -0.2}, {"b": -0.1}, {"a|b": 0.05},
                                             {"a|b": 1.0}, {"a|b": 0.3})}, {"a|b": 12.0})
    again = Interop.from_json(json.loads(json.dumps(interop.to_json())), "x")
    assert again.busy("a", "b", "qir10g") == interop.busy("a", "b", "qir10g")
    assert again.overhead("a", "b", "qir10g") == pytest.approx(math.exp(0.3))
    assert again.overhead("a", "b", "unseen") == 1.0


def test_testbeds_v1_keyed_by_document_are_read(tmp_path: Path) -> None:
    path = tmp_path / "testbeds.json"
    path.write_text(json.dumps({"schema": "quiclab.testbeds/1", "testbeds": {"000": {
        "description": "d", "fields": {"cpu": "Intel Xeon W-2145", "base_rtt_us": 123.0},
        "sources": {}}}}))
    tb = Testbeds.load(path)
    assert tb.get("koenig25").fields["base_rtt_us"] == 123.0
    assert tb.get("000").id == "koenig25"  # the document id is an alias
    assert "uclouvain" in tb.ids()  # the testbeds version 1 did not hold stay stated


def test_on_testbed_puts_the_testbeds_defaults_under_the_given_fields() -> None:
    tb = Testbeds.stated()
    fields = on_testbed({"testbed": "000", "link_gbps": 25.0}, tb)
    assert fields["testbed"] == "koenig25"
    assert fields["cpu"] == STATED["koenig25"].fields["cpu"]
    assert fields["link_gbps"] == 25.0  # the caller's value wins
    assert on_testbed({"testbed": "unseen", "mtu_bytes": 9000}, tb) == {
        "testbed": "unseen", "mtu_bytes": 9000}
    with pytest.raises(KeyError, match="known"):
        on_testbed({"testbed": "nowhere"}, tb)


def test_unknown_cpu_testbed_uses_its_fitted_speed(packaged: Registry) -> None:
    """A testbed whose CPU is not recorded scales costs by reference speed / its
    fitted speed (GHz × IPC), with the fitted interval."""
    tbs = Testbeds.stated().with_speed("uclouvain", Speed(7.4, 5.0, 9.0, "test"))
    reg = Registry(packaged.models, packaged.cpus, packaged.interop, testbeds=tbs)
    scaling = reg.cpus.scaling("AMD EPYC 7543", unknown_cpu_name("uclouvain"))
    assert scaling.factor == pytest.approx(3.7 / 7.4)  # EPYC 7543: 3.7 GHz × Zen 3 IPC 1.0
    assert scaling.factor_lo == pytest.approx(3.7 / 9.0)
    assert scaling.factor_hi == pytest.approx(3.7 / 5.0)
    s = Scenario(server="lsquic", client="lsquic", testbed="uclouvain",
                 cpu=unknown_cpu_name("uclouvain"))
    fast = AnalyticEngine(reg).predict(s)
    base = AnalyticEngine(reg).predict(s.with_(cpu="AMD EPYC 7543", testbed="unseen"))
    assert fast.limit == base.limit == "sender_cpu"
    assert fast.goodput_mbps == pytest.approx(2.0 * base.goodput_mbps, rel=0.05)
    with pytest.raises(ScenarioError, match="cpu_ghz"):
        resolve(s.with_(cpu_ghz=3.0), reg)


def test_testbed_names_are_checked(packaged: Registry) -> None:
    with pytest.raises(ScenarioError, match="testbed"):
        Scenario(testbed="QIR 10G")
    with pytest.raises(ScenarioError, match=r"one of: .*qir10g.*unseen"):
        resolve(Scenario(testbed="nowhere"), packaged)


def test_unseen_testbed_interval_spans_the_pairs_interplay_elsewhere() -> None:
    """A pair measured 0.5 × its CPU rate on one testbed: on an unseen testbed its busy
    stays 1 (nothing fitted there), but the interval reaches down to that testbed's
    lower bound, and the source names it; a pair measured nowhere keeps the spread."""
    interop = Interop({
        "qir10g": PairEffects(pair_effect={"a|b": math.log(0.5), "c|c": math.log(0.51),
                                           "d|d": math.log(0.52)},
                              pair_sd={"a|b": 0.1, "c|c": 0.01, "d|d": 0.01})})
    busy, lo, hi, source = interop.busy("a", "b", "unseen")
    assert (busy, hi) == (1.0, 1.0)
    assert lo == pytest.approx(0.5 * math.exp(-1.96 * 0.1))
    assert "this pair: busy 0.50 on qir10g" in source
    spread_lo = interop.busy("x", "y", "unseen")[1]
    assert spread_lo > lo and "this pair" not in interop.busy("x", "y", "unseen")[3]
