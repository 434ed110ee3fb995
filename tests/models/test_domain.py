"""The domain of validity: envelopes of the evidence, and what a Scenario outside names."""

from __future__ import annotations

import json

import pytest

from quiclab.errors import DataError
from quiclab.models.cpus import CpuCatalog
from quiclab.models.domain import Domain
from quiclab.sim.scenario import Scenario


@pytest.fixture(scope="module")
def cpus() -> CpuCatalog:
    return CpuCatalog.packaged()


@pytest.fixture(scope="module")
def domain(cpus: CpuCatalog) -> Domain:
    # lsquic measured at MTU 1500 and 9000 on two CPUs, quiche only at 1500 with 5 ms
    # added; the pair lsquic→quiche only at the baseline.
    return Domain.from_scenarios([
        Scenario(server="lsquic", client="lsquic"),
        Scenario(server="lsquic", client="lsquic", mtu_bytes=9000, cpu="W-2145"),
        Scenario(server="quiche", client="quiche", rtt_ms=5.0),
        Scenario(server="lsquic", client="quiche"),
    ], cpus)


def test_a_scenario_inside_the_evidence_names_nothing(domain: Domain, cpus: CpuCatalog):
    check = domain.check(Scenario(server="lsquic", client="lsquic", mtu_bytes=4000), cpus)
    assert check.inside and check.line() == "" and check.names == ()
    assert check.pair_measured and check.cpu_measured and check.distance == 0.0


def test_far_out_names_each_field_and_how_far(domain: Domain, cpus: CpuCatalog):
    """100 Gbit/s, 200 ms and a Zen 4 CPU, which no evidence ran: each field in one line
    with the model whose evidence it leaves and the factor beyond the envelope."""
    check = domain.check(Scenario(link_gbps=100.0, rtt_ms=200.0, cpu="EPYC 9354"), cpus)
    assert check.names == ("rtt_ms", "link_gbps", "cpu")
    line = check.line()
    assert "\n" not in line
    assert "link_gbps=100 (lsquic: 10 Gbit/s, ×10)" in line
    assert "rtt_ms=200.1 (lsquic: 0.05 ms, ×4001)" in line
    assert "cpu=zen4 (lsquic: evidence: skylake, zen3)" in line
    assert not check.cpu_measured and check.pair_measured


def test_a_pair_never_measured_and_a_model_without_evidence_are_named(domain: Domain,
                                                                       cpus: CpuCatalog):
    check = domain.check(Scenario(server="quiche", client="lsquic", rtt_ms=5.0), cpus)
    assert not check.pair_measured and "pair quiche→lsquic never measured" in check.line()
    assert "rtt_ms=5.05 (lsquic: 0.05 ms, ×101)" in check.line()
    unknown = domain.check(Scenario(server="picoquic", client="lsquic"), cpus)
    assert unknown.unmeasured == ("picoquic",) and "model" in unknown.names
    variant = domain.check(Scenario(server="lsquic@march", client="lsquic"), cpus)
    assert variant.unmeasured == ("lsquic@march",)


def test_a_loss_rate_beyond_zero_is_told_in_percentage_points(domain: Domain,
                                                              cpus: CpuCatalog):
    check = domain.check(Scenario(loss_pct=0.1), cpus)
    assert check.names == ("loss_pct",) and "loss_pct=0.1 (lsquic: 0 %, +0.1 %)" in check.line()
    assert check.distance == pytest.approx(2.3979, rel=1e-3)  # log((0.1 + 0.01) / 0.01)


def test_a_measured_pair_outside_its_own_conditions_is_flagged_apart(cpus: CpuCatalog):
    """5 ms is inside both models' evidence but not the pair's own (measured at the
    baseline only): a pair field, not an extrapolated one; MTU 9000, which quiche
    never ran, is extrapolated."""
    domain = Domain.from_scenarios([
        Scenario(server="lsquic", client="lsquic"),
        Scenario(server="lsquic", client="lsquic", rtt_ms=5.0, mtu_bytes=9000),
        Scenario(server="quiche", client="quiche"),
        Scenario(server="quiche", client="quiche", rtt_ms=5.0),
        Scenario(server="lsquic", client="quiche"),
    ], cpus)
    check = domain.check(Scenario(server="lsquic", client="quiche", rtt_ms=5.0), cpus)
    assert check.names == () and check.pair_fields == ("rtt_ms",)
    assert check.line() == "" and check.inside
    mtu = domain.check(Scenario(server="lsquic", client="quiche", mtu_bytes=9000), cpus)
    assert mtu.names == ("mtu_bytes",) and "mtu_bytes=9000 (quiche: 1500 B, ×6)" in mtu.line()
    assert domain.check_many([Scenario(server="lsquic", client="quiche", rtt_ms=5.0)],
                             ["zen3"]).pair_knobs_outside[0] == 1


def test_the_batch_check_agrees_with_one_at_a_time(domain: Domain, cpus: CpuCatalog):
    scenarios = [Scenario(), Scenario(loss_pct=1.0, rtt_ms=20.0),
                 Scenario(server="quiche", client="lsquic"),
                 Scenario(server="quiche", client="quiche", cipher="chacha20", rtt_ms=2.0),
                 Scenario(link_gbps=100.0, cpu="EPYC 9354")]
    archs = ["zen3", "zen3", "zen3", "zen3", "zen4"]
    batch = domain.check_many(scenarios, archs)
    for i, s in enumerate(scenarios):
        one = domain.check(s, cpus)
        assert batch.lines()[i] == one.line() == batch.check(i).line()
        assert batch.knobs_outside[i] == sum(f.field != "cpu" for f in one.fields)
        assert batch.pair_measured[i] == one.pair_measured
        assert batch.distance[i] == pytest.approx(one.distance)


def test_round_trip_and_bad_files(domain: Domain, tmp_path):
    path = tmp_path / "domain.json"
    domain.dump(path)
    again = Domain.load(path)
    assert again.to_json() == domain.to_json()
    path.write_text(json.dumps({"schema": "other"}))
    with pytest.raises(DataError, match="schema"):
        Domain.load(path)
    path.write_text("{")
    with pytest.raises(DataError, match="JSON"):
        Domain.load(path)
