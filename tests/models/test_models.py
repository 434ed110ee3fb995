"""Contract checks every registered cost model passes (like sklearn's parametrize_with_checks)."""

from __future__ import annotations

import json
import math

import pytest

from quiclab.models.costmodel import CostModel
from quiclab.models.cpus import CpuCatalog, host_cpu_from_cpuinfo, read_host_cpu
from quiclab.models.registry import Registry
from quiclab.paths import PROJECT_ROOT
from quiclab.sim.analytic import AnalyticEngine
from quiclab.sim.scenario import Scenario

FITTED = PROJECT_ROOT / "models" / "fitted"
REGISTRY = Registry.load(FITTED) if FITTED.is_dir() and any(FITTED.glob("*.json")) else None
NAMES = REGISTRY.names() if REGISTRY else []
pytestmark = pytest.mark.skipif(REGISTRY is None, reason="no fitted models (run quiclab calibrate)")


@pytest.mark.parametrize("name", NAMES)
def test_costs_are_non_negative_with_consistent_intervals(name):
    model = REGISTRY.models[name]
    for pname, p in model.params():
        # kernel TCP's kernel_scaling is an exponent on the CPU rule (models/tcpcost.py),
        # fitted below zero (seed 002 Fig. 8), not a cost.
        assert p.value >= 0 or pname == "tcp.kernel_scaling", f"{name} {pname} = {p.value}"
        assert p.lo <= p.value <= p.hi, f"{name} {pname}"
        assert p.source.split(":")[0] in ("fit", "published", "derived", "assumed", "prior"), \
            f"{name} {pname}: provenance {p.source!r}"


@pytest.mark.parametrize("name", NAMES)
def test_json_round_trip_is_exact(name, tmp_path):
    model = REGISTRY.models[name]
    text = model.dumps()
    again = CostModel.from_json(json.loads(text), "round trip")
    assert again.dumps() == text
    path = FITTED / f"{name.replace('+', '_')}.json"
    assert path.read_text() == text, "file on disk is not in canonical form"


@pytest.mark.parametrize("name", NAMES)
def test_every_variant_resolves(name):
    model = REGISTRY.models[name]
    for variant in model.variants:
        m = REGISTRY.model(f"{name}@{variant}")
        assert m.implementation == f"{name}@{variant}"


@pytest.mark.parametrize("name", NAMES)
def test_cpu_time_is_monotone_in_bytes_and_packets(name):
    engine = AnalyticEngine(REGISTRY)
    app = "hq" if "hq" in REGISTRY.models[name].behaviour.apps else "perf"
    base = Scenario(server=name, client=name, app=app, rcvbuf_bytes=2**24)
    small = engine.predict(base.with_(transfer_bytes=2**28))
    large = engine.predict(base.with_(transfer_bytes=2**30))
    assert large.server_cpu_s > small.server_cpu_s
    assert large.client_cpu_s > small.client_cpu_s
    # More packets for the same bytes (smaller packets) never cost less CPU per byte.
    beh = REGISTRY.models[name].behaviour
    # (Kernel TCP's segment follows the MTU: it refuses udp_payload_bytes.)
    if beh.udp_payload_bytes > 1250 and REGISTRY.models[name].tcp is None:
        smaller = engine.predict(base.with_(transfer_bytes=2**28, udp_payload_bytes=1200))
        assert smaller.server_packets_sent > small.server_packets_sent
        assert smaller.server_cpu_s >= small.server_cpu_s * 0.999
        assert smaller.client_cpu_s >= small.client_cpu_s * 0.999


@pytest.mark.parametrize(("family", "model", "uarch"), [
    (25, 0x01, "zen3"),   # Milan (EPYC 7543, the QIR servers)
    (25, 0x11, "zen4"),   # Genoa (this CI host: "AMD EPYC", family 25 model 17)
    (25, 0x21, "zen3"),   # Vermeer
    (25, 0x61, "zen4"),   # Raphael
    (25, 0xA0, "zen4"),   # Bergamo
    (23, 0x31, "zen2"),   # Rome
    (23, 0x08, "zen"),    # Zen+
    (26, 0x02, "zen4"),   # Zen 5: the nearest catalog entry
])
def test_host_microarchitecture_follows_amd_family_and_model(family, model, uarch):
    text = (f"vendor_id\t: AuthenticAMD\ncpu family\t: {family}\nmodel\t\t: {model}\n"
            "model name\t: AMD EPYC\ncpu MHz\t\t: 1500.000\nflags\t\t: aes\nprocessor\t: 0\n")
    cpu = host_cpu_from_cpuinfo(text, CpuCatalog.packaged())
    assert cpu.microarchitecture == uarch


def test_host_clock_is_cpufreq_maximum_not_the_current_clock(tmp_path):
    proc = tmp_path / "cpuinfo"
    proc.write_text("vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n"
                    "model name\t: AMD EPYC 7543 32-Core Processor\ncpu MHz\t\t: 1500.000\n"
                    "processor\t: 0\n")
    freq = tmp_path / "cpufreq"
    assert read_host_cpu(CpuCatalog.packaged(), proc, freq).max_ghz == 1.5  # a VM: no cpufreq
    freq.mkdir()
    (freq / "cpuinfo_max_freq").write_text("3700000\n")
    assert read_host_cpu(CpuCatalog.packaged(), proc, freq).max_ghz == 3.7


def test_cpu_catalog_rule_is_identity_on_the_reference_and_refuses_ambiguity():
    cpus = CpuCatalog.packaged()
    assert cpus.scaling("EPYC 7543", "AMD EPYC 7543").factor == 1.0
    slower = cpus.scaling("EPYC 7543", "D-1518")
    assert slower.factor > 1.5  # 2.2 GHz Broadwell vs 3.7 GHz Zen 3
    assert math.isclose(cpus.find("7551P").max_ghz, 3.0)
    with pytest.raises(Exception, match="matches"):
        cpus.find("Xeon")


def test_behaviour_keys_added_later_are_checked_and_left_out_at_default():
    """The ACK floor, ACK timer and CUBIC's Reno-friendly mode (2026-11-26): a model file
    leaves them out at their defaults (so its version does not move), and a bad value
    is one DataError naming the key and the value."""
    from quiclab.errors import DataError
    from quiclab.models.costmodel import Behaviour

    assert not {"ack_threshold_floor_packets", "ack_timer_ms", "cubic_reno_friendly",
                "reno_beta"} & set(Behaviour().to_json())
    timed = Behaviour(ack_threshold_floor_packets=10.0, cubic_reno_friendly="time")
    assert Behaviour.from_json(timed.to_json(), "x.json") == timed
    for key, bad in (("cubic_reno_friendly", "sometimes"), ("ack_threshold_floor_packets", 0.5),
                     ("ack_timer_ms", -1.0), ("reno_beta", 1.5)):
        with pytest.raises(DataError, match=f"{key}=.*{bad}"):
            Behaviour.from_json({**timed.to_json(), key: bad}, "x.json")
