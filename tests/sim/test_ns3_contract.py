"""ns-3 and the DES agree on the contract scenarios (``sim/contract.py``).

``tests/sim/test_contract.py`` holds every engine to each case's reference;
this file holds the two packet-level engines to each other:
the same limiting resource and goodput within 10 %. The deterministic cases
agree to a fraction of a percent (same model, same arithmetic), so they are
checked tightly on one run; the random ones (loss, receiver stalls) on the
mean of several seeds with a longer prefix, since one seed of either engine
scatters by a few percent. Slow: about a minute each.
"""

from __future__ import annotations

import statistics

import pytest

from quiclab.models.registry import Registry
from quiclab.sim.contract import CONTRACT_CASES, contract_registry
from quiclab.sim.engine import get_engine

pytest.importorskip("quiclab.sim.des")

DETERMINISTIC = ["link-bound", "sender-cpu-bound", "receiver-cpu-bound", "window-bound"]
RANDOM = ["loss-bound", "rcvbuf-bound"]


@pytest.fixture(scope="module")
def registry() -> Registry:
    return contract_registry()


@pytest.mark.slow
@pytest.mark.parametrize("case_name", DETERMINISTIC)
def test_deterministic_cases_agree_closely(case_name: str, registry: Registry) -> None:
    scenario = CONTRACT_CASES[case_name].build()
    des = get_engine("des", registry, max_packets=80_000).predict(scenario)
    ns3 = get_engine("ns3", registry, prefix_packets=80_000).predict(scenario)
    assert ns3.limit == des.limit
    assert ns3.goodput_mbps == pytest.approx(des.goodput_mbps, rel=0.02)
    assert ns3.server_packets_sent == pytest.approx(des.server_packets_sent, rel=0.02)
    assert ns3.acks == pytest.approx(des.acks, rel=0.05)


@pytest.mark.slow
@pytest.mark.parametrize("case_name", RANDOM)
def test_random_cases_agree_on_average(case_name: str, registry: Registry) -> None:
    scenarios = [CONTRACT_CASES[case_name].build(seed=seed) for seed in range(4)]
    des = get_engine("des", registry, max_packets=200_000).predict_batch(scenarios)
    ns3 = get_engine("ns3", registry, prefix_packets=200_000, jobs=2).predict_batch(scenarios)
    assert {p.limit for p in ns3} == {p.limit for p in des} == {CONTRACT_CASES[case_name].limit}
    des_mean = statistics.mean(p.goodput_mbps for p in des)
    ns3_mean = statistics.mean(p.goodput_mbps for p in ns3)
    assert ns3_mean == pytest.approx(des_mean, rel=0.10)
