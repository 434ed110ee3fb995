"""The engine contract: every engine on the same named scenarios (``sim/contract.py``).

Like scikit-learn's ``parametrize_with_checks``: one test per engine and
scenario, each asserting the limiting resource and the goodput within the
case's tolerance of its reference, a hand formula that no engine computes
(link rate, CPU capacity from the cost model, the Mathis response where loss
dominates, window / RTT for flow control), so the analytic engine is held to
the contract like the others.
To add an engine, add its name to ``ENGINES`` and its test-speed options to
``ENGINE_OPTIONS``.
"""

from __future__ import annotations

import math
from dataclasses import replace

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


def test_each_case_says_what_its_scenario_has() -> None:
    rcvbuf = CONTRACT_CASES["rcvbuf-bound"]
    assert f"the {rcvbuf.build().rcvbuf_bytes // 1024} KiB socket buffer" in rcvbuf.why
    window = CONTRACT_CASES["window-bound"]
    assert f"per {window.build().rtt_ms:g} ms RTT" in window.why


def test_reference_values_by_hand(references: dict[str, float]) -> None:
    """The references are what the module docstring says they are: 1400-byte
    packets of 1359 stream bytes (40 B overhead, 1 B of HTTP/3 framing), 1466
    bytes on the wire."""
    # 1 Gbit/s × 1359 stream bytes / 1466 wire bytes.
    assert references["link-bound"] == pytest.approx(1000 * 1359 / 1466, rel=1e-9)
    # 1359 B·8 per (4000 + 2000/46 + 500/2) ns, and (4000 + 1000/46 + 500/2) ns.
    assert references["sender-cpu-bound"] == pytest.approx(
        1359 * 8 / (4000 + 2000 / 46 + 250) * 1e3, rel=1e-9)
    assert references["receiver-cpu-bound"] == pytest.approx(
        1359 * 8 / (4000 + 1000 / 46 + 250) * 1e3, rel=1e-9)
    # Mathis: √(1.5/p) packets per RTT of 2.05 ms + one packet at 1 Gbit/s,
    # stretched by the wait for each ACK's second packet: 59.3 Mbit/s.
    window = math.sqrt(1.5 / 0.01)
    rtt = (2.05e-3 + 1466 * 8 / 1e9) / (1 - 1 / window)
    assert references["loss-bound"] == pytest.approx(window * 1359 * 8 / rtt / 1e6, rel=1e-9)
    # 256 KiB per RTT of 10.05 ms.
    assert references["window-bound"] == pytest.approx(262144 * 8 / 10.05e-3 / 1e6, rel=1e-9)
    # 65536 / 2304 = 28.4: 28 whole datagrams; 1 kHz of Pareto(200 µs, 2) stalls
    # leave a window of 31.7 packets per 1.085 ms, 4.2 % of the datagrams dropped:
    # 304 Mbit/s.
    assert references["rcvbuf-bound"] == pytest.approx(31.72 * 1359 * 8 / 1.0854e-3 * 0.9583
                                                       / 1e6, rel=2e-3)


@pytest.mark.parametrize("factor", [1.5, 0.6])
def test_a_wrong_analytic_engine_breaks_the_contract(factor: float, registry: Registry,
                                                     references: dict[str, float],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The references do not come from the analytic engine: scaling its goodput
    breaks every case (a reference taken from the engine would move with it)."""
    from quiclab.sim.analytic import AnalyticEngine

    honest = AnalyticEngine._prediction

    def scaled(self: AnalyticEngine, *args: object) -> object:
        pred = honest(self, *args)  # type: ignore[arg-type]
        return replace(pred, goodput_mbps=pred.goodput_mbps * factor)

    monkeypatch.setattr(AnalyticEngine, "_prediction", scaled)
    for name, case in CONTRACT_CASES.items():
        prediction = _engine("analytic", registry).predict(case.build())
        assert reference_goodput_mbps(case, registry) == references[name]
        assert any("from the reference" in p for p in check(case, prediction, references[name])), \
            name


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
