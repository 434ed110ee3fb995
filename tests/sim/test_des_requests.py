"""The request DES (``quiclab.sim.des.requests``): what it simulates and what it reports."""

from __future__ import annotations

import pytest

from quiclab.models.registry import Registry
from quiclab.models.testing import synthetic_model, synthetic_registry
from quiclab.sim.des import DesEngine
from quiclab.sim.des.requests import CHUNK_BYTES, MAX_CHUNKS, RequestRun
from quiclab.sim.resolve import resolve
from quiclab.sim.scenario import Scenario


@pytest.fixture(scope="module")
def registry() -> Registry:
    return synthetic_registry(synthetic_model("a", sender_ns=2000, receiver_ns=1500))


def _requests(**fields: object) -> Scenario:
    return Scenario.from_dict({"server": "a", "client": "a", "workload": "requests",
                               "request_bytes": 1000, **fields})


@pytest.mark.parametrize(("requests", "connections", "streams"), [(1, 1, 1), (5, 2, 5),
                                                                  (300, 4, 4)])
def test_a_short_run_is_simulated_whole_and_reports_requests_over_completion(
        registry: Registry, requests: int, connections: int, streams: int) -> None:
    """No more requests than asked for: requests/s is the run's own, requests /
    completion time, and the CPU follows from it (one request cannot keep a
    server busy)."""
    scenario = _requests(requests=requests, connections=connections, streams=streams)
    run = RequestRun(resolve(scenario, registry))
    assert run.target == requests
    assert run.run()["simulated"] == requests
    p = DesEngine(registry).predict(scenario)
    assert p.requests_per_s == pytest.approx(requests / p.completion_s, rel=1e-12)
    assert p.goodput_mbps == pytest.approx(p.requests_per_s * 1000 * 8 / 1e6, rel=1e-12)
    assert f"all {requests} requests simulated" in p.notes[0]
    assert not any("extrapolated" in n for n in p.notes)
    if requests == 1:
        assert p.server_cpu_util < 0.5 and p.limit != "sender_cpu"


def test_a_long_run_is_a_prefix_extrapolated_at_its_steady_rate(registry: Registry) -> None:
    p = DesEngine(registry).predict(_requests(requests=100_000, connections=4, streams=4))
    assert "completion extrapolated from 20000 of 100000 requests" in p.notes
    # The rest at the prefix's steady rate: completion ≈ requests / rate.
    assert p.completion_s == pytest.approx(100_000 / p.requests_per_s, rel=0.02)


@pytest.mark.timeout(60)
def test_a_huge_response_is_served_in_at_most_max_chunks(registry: Registry) -> None:
    """A 1 TiB response would be 4 M chunks of 256 KiB (the run never ended):
    larger chunks instead, and the Prediction says so."""
    scenario = _requests(request_bytes=2**40, requests=2)
    run = RequestRun(resolve(scenario, registry))
    assert run.chunks == MAX_CHUNKS
    # Below the cap, chunks of CHUNK_BYTES (the response carries its header too).
    ten = RequestRun(resolve(_requests(request_bytes=10 * CHUNK_BYTES - 1000, requests=2),
                             registry))
    assert ten.c.response_stream_bytes <= 10 * CHUNK_BYTES and ten.chunks == 10
    p = DesEngine(registry).predict(scenario)
    # Two 1 TiB responses at the sender's 2 µs per 1359-byte packet, back to back.
    assert p.completion_s == pytest.approx(2 * 2**40 / 1359 * 2e-6, rel=0.05)
    assert any(f"responses served in {MAX_CHUNKS} chunks" in n for n in p.notes)
