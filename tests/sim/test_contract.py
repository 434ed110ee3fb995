"""The engine contract: every engine on the same named scenarios (``sim/contract.py``).

Like scikit-learn's ``parametrize_with_checks``: one test per engine and
scenario, each asserting the limiting resource and the goodput within the
case's tolerance of its reference (the analytic answer where it is exact,
the Mathis response where loss dominates, window / RTT for flow control).
To add an engine, add its name to ``ENGINES`` and its test-speed options to
``ENGINE_OPTIONS``.
"""

from __future__ import annotations

import pytest

from quiclab.models.registry import Registry
from quiclab.sim.contract import (
    CONTRACT_CASES,
    CONTRACT_SCENARIOS,
    check,
    contract_registry,
    reference_goodput_mbps,
)
from quiclab.sim.engine import Engine, get_engine
from quiclab.sim.scenario import Scenario

ENGINES = ["analytic", "des", "ns3"]
#: Options that keep each engine's run short (the DES and ns-3: an 80 k-packet prefix).
ENGINE_OPTIONS: dict[str, dict[str, object]] = {
    "analytic": {},
    "des": {"max_packets": 80_000},
    "ns3": {"prefix_packets": 80_000},
}


@pytest.fixture(scope="module")
def registry() -> Registry:
    return contract_registry()


@pytest.fixture(scope="module")
def references(registry: Registry) -> dict[str, float]:
    return {name: reference_goodput_mbps(case, registry) for name, case in CONTRACT_CASES.items()}


def _engine(name: str, registry: Registry, **extra: object) -> Engine:
    return get_engine(name, registry, **{**ENGINE_OPTIONS.get(name, {}), **extra})


@pytest.mark.parametrize("case_name", list(CONTRACT_CASES))
@pytest.mark.parametrize("engine_name", ENGINES)
def test_contract(engine_name: str, case_name: str, registry: Registry,
                  references: dict[str, float]) -> None:
    case = CONTRACT_CASES[case_name]
    prediction = _engine(engine_name, registry).predict(case.build())
    assert prediction.engine == engine_name
    assert check(case, prediction, references[case_name]) == []


def test_scenarios_are_builders() -> None:
    assert set(CONTRACT_SCENARIOS) == {"link-bound", "sender-cpu-bound", "receiver-cpu-bound",
                                       "loss-bound", "window-bound", "rcvbuf-bound"}
    for name, build in CONTRACT_SCENARIOS.items():
        scenario = build(seed=3)
        assert isinstance(scenario, Scenario), name
        assert scenario.seed == 3


def test_reference_values_by_hand(registry: Registry,
                                  references: dict[str, float]) -> None:
    """The references are what the module docstring says they are."""
    # 1 Gbit/s × 1360 stream bytes / 1466 wire bytes (startup < 0.5 %).
    assert references["link-bound"] == pytest.approx(1000 * 1360 / 1466, rel=0.005)
    # 1360 B·8 per (4000 + 2000/46 + 500/2) ns.
    assert references["sender-cpu-bound"] == pytest.approx(
        1360 * 8 / (4000 + 2000 / 46 + 250) * 1e3, rel=0.005)
    # Mathis: √1.5/p packets of 1360 B per effective RTT (2.05 ms + ACK wait).
    assert 40 < references["loss-bound"] < 60
    # About 256 KiB per RTT of 10.05 ms.
    assert references["window-bound"] == pytest.approx(262144 * 8 / 10.05e-3 / 1e6, rel=0.02)


@pytest.mark.slow
@pytest.mark.parametrize("case_name", list(CONTRACT_CASES))
def test_contract_des_batch(case_name: str, registry: Registry,
                            references: dict[str, float]) -> None:
    """Batch granularity passes the same contract."""
    case = CONTRACT_CASES[case_name]
    prediction = _engine("des", registry, granularity="batch",
                         max_packets=400_000).predict(case.build())
    assert check(case, prediction, references[case_name]) == []


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("case_name", ["loss-bound", "rcvbuf-bound"])
def test_contract_des_other_seeds(case_name: str, seed: int, registry: Registry,
                                  references: dict[str, float]) -> None:
    """The random cases hold for other seeds too, with a longer prefix."""
    case = CONTRACT_CASES[case_name]
    prediction = _engine("des", registry, max_packets=200_000).predict(case.build(seed=seed))
    assert check(case, prediction, references[case_name]) == []


def test_engine_versions_name_the_code() -> None:
    """Each engine's version is its base version and the digest of the engines'
    sources, the digest sweeps key their results on: a Prediction names its code."""
    from quiclab.experiments.runner import engine_code_digest
    from quiclab.sim.analytic import ENGINE_VERSION as analytic
    from quiclab.sim.des import ENGINE_VERSION as des
    from quiclab.sim.engine import code_digest, versioned
    from quiclab.sim.ns3 import ENGINE_VERSION as ns3

    digest = engine_code_digest()
    assert digest == code_digest() and len(digest) == 16
    assert (analytic, des, ns3) == (f"analytic-1.0+{digest[:8]}", f"des-1.0+{digest[:8]}",
                                    f"ns3-1.0+{digest[:8]}")
    assert versioned("x-2") == f"x-2+{digest[:8]}"
