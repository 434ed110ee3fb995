"""The probe rule: each cost component moves by its own probe's ratio (models/cpus.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from quiclab.models.cpus import PROBE_COMPONENTS, CpuCatalog, probe_fields
from quiclab.models.registry import Registry
from quiclab.sim.resolve import resolve
from quiclab.sim.scenario import Scenario

CAL = {"quic_packet": (1000.0, 0.02), "copy_byte": (0.03, 0.05),
       "aes_gcm_packet": (800.0, 0.02), "aes_gcm_byte": (0.16, 0.1),
       "chacha20_packet": (1100.0, 0.02), "chacha20_byte": (0.45, 0.02),
       "udp_send": (9000.0, 0.05), "udp_recv": (2000.0, 0.1),
       "udp_gso_segment": (300.0, 0.05), "udp_gro_segment": (170.0, 0.05)}


def _probe(scale: dict[str, float]) -> tuple[tuple[str, float, float], ...]:
    return tuple(sorted((k, ns * scale.get(k, 1.0), sp) for k, (ns, sp) in CAL.items()))


def _catalog(now: dict[str, float]) -> CpuCatalog:
    base = CpuCatalog.packaged()
    host = base.find("EPYC 7543")
    cal = replace(host, name="host at calibration", probe=_probe({}), probe_source="cal")
    cur = replace(host, name="host now", probe=_probe(now), probe_source="now")
    return base.with_cpu(cal).with_cpu(cur)


def test_each_part_moves_by_its_own_probe() -> None:
    cpus = _catalog({"quic_packet": 1.5, "udp_send": 2.0, "aes_gcm_packet": 1.25})
    s = cpus.scaling("host at calibration", "host now")
    assert s.part("protocol") == pytest.approx(1.5)
    assert s.part("ack") == pytest.approx(1.5)
    assert s.part("call:sender") == pytest.approx(2.0)
    assert s.part("call:receiver") == pytest.approx(1.0)
    assert s.part("crypto_packet:aes-ni") == pytest.approx(1.25)
    assert s.part("crypto_byte:aes-ni") == pytest.approx(1.0)
    assert s.factor == pytest.approx(1.5)  # what the rest of a prediction reports
    # The interval holds the probes' spreads (quadrature), around the protocol factor.
    assert s.factor_lo < 1.5 < s.factor_hi
    assert "probe:" in s.rule and "udp_send" in s.rule
    assert {p for p, *_ in s.parts} == set(PROBE_COMPONENTS)


def test_same_state_is_identity_and_without_a_reference_probe_clock_ipc() -> None:
    cpus = _catalog({})
    s = cpus.scaling("host at calibration", "host now")
    assert all(f == pytest.approx(1.0) for _, f, _, _ in s.parts)
    plain = cpus.scaling("AMD EPYC 7543", "host now")
    assert plain.parts == () and plain.rule.startswith("clock×IPC")
    assert "reference has none" in plain.rule


def test_protocol_falls_back_to_the_interpreter_loop_without_a_quic_transfer() -> None:
    base = CpuCatalog.packaged()
    host = base.find("EPYC 7543")
    a = replace(host, name="a", probe=(("interp_packet", 100.0, 0.0),))
    b = replace(host, name="b", probe=(("interp_packet", 130.0, 0.0),
                                       ("quic_packet", 999.0, 0.0)))
    s = base.with_cpu(a).with_cpu(b).scaling("a", "b")
    assert s.part("protocol") == pytest.approx(1.3)
    # A part neither probe covers takes the protocol factor.
    assert s.part("call:sender") == pytest.approx(1.3)


def test_cpus_json_round_trip_keeps_the_probe() -> None:
    host = CpuCatalog.packaged().find("EPYC 7543")
    cpu = replace(host, name="h", probe=_probe({}), probe_source="session x")
    row = {**cpu.to_row(), "sources": list(cpu.sources), "probe": cpu.probe_json()}
    assert "probe" not in cpu.to_row()
    data = json.loads(json.dumps({"schema": "quiclab.cpus/1", "cpus": [row],
                                  "microarchitectures": {
                                      k: vars(v) for k, v in
                                      CpuCatalog.packaged().microarchitectures.items()}}))
    back = CpuCatalog.from_json(data).find("h")
    assert back.probe == cpu.probe and back.probe_source == "session x"
    assert probe_fields(None) == {} and probe_fields({"components": {}}) == {}


def test_resolve_scales_costs_by_part() -> None:
    registry = Registry.packaged()
    cpus = _catalog({"quic_packet": 2.0, "udp_send": 3.0})
    host = cpus.find("host at calibration")
    # Make the packaged quiche model's reference the calibrated host state.
    model = registry.models["quiche"]
    registry.models["quiche"] = replace(model, reference_cpu=host.name)
    registry.cpus = cpus
    cal = resolve(Scenario(server="quiche", client="quiche", cpu="host at calibration"),
                  registry)
    now = resolve(Scenario(server="quiche", client="quiche", cpu="host now"), registry)
    assert now.sender.ns_per_call == pytest.approx(3.0 * cal.sender.ns_per_call)
    assert now.receiver.ns_per_call == pytest.approx(cal.receiver.ns_per_call)
    assert now.sender.ns_per_ack == pytest.approx(2.0 * cal.sender.ns_per_ack)
    assert now.sender.ns_crypto == pytest.approx(cal.sender.ns_crypto)
    assert now.sender.ns_segment == pytest.approx(cal.sender.ns_segment)
