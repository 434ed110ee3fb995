"""The host probe: its measurements, its record and hash, the catalog table, states."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import duckdb
import pytest

from quiclab.errors import DataError
from quiclab.testbed import probe as probe_mod
from quiclab.testbed import probe_bench, probe_store
from quiclab.testbed.probe import Figure, HostProbe, HostState


def _state() -> HostState:
    return HostState(wall_s=1.0, cores=2, busy_cores=0.5, other_busy_cores=0.1,
                     steal_cores=0.01, per_core_busy={"cpu0": 0.3}, per_core_steal={},
                     clock_mhz={"cpu0": 2600.0}, clock_source="test", loadavg_1m=0.2)


def _probe(taken_at: str, scale: float = 1.0, **kw: object) -> HostProbe:
    figures = {"aes_gcm_packet": Figure(800.0 * scale, 0.02, (790.0, 810.0)),
               "udp_send": Figure(9000.0 * scale, 0.05, (8800.0, 9200.0)),
               "quic_packet": Figure(1000.0 * scale, 0.03, (990.0, 1010.0))}
    return HostProbe(taken_at=taken_at, host="h", cpu="host: test", figures=figures,
                     state=_state(), rounds=2, duration_s=1.0, **kw)  # type: ignore[arg-type]


def test_figure_median_and_spread() -> None:
    f = Figure.of([10.0, 12.0, 11.0], [5.0, 6.0, 7.0])
    # Semi-interquartile range (10.5 … 11.5) over the median.
    assert f.ns == 11.0 and f.spread == pytest.approx(0.5 / 11) and f.cpu_ns == 6.0
    # One round another task took whole does not make the spread.
    assert Figure.of([10.0] * 9 + [100.0]).spread == 0.0
    assert Figure.of([3.0]).spread == 0.0


def test_microbenchmarks_measure_something() -> None:
    for t in (probe_bench.aead("aes-gcm", 64, 0.01), probe_bench.aead("chacha20", 1024, 0.01),
              probe_bench.copy_bytes(0.01), probe_bench.interpreter(0.01)):
        assert t.ops > 0 and t.wall_ns > 0 and t.cpu_ns >= 0
    with pytest.raises(ValueError, match="cipher"):
        probe_bench.aead("rot13", 64, 0.01)


def test_probe_without_network_or_quic_records_its_state(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe_mod, "MICRO_S", 0.005)
    p = probe_mod.run_probe(rounds=2, network=False, testbed=None, name="t")
    assert {"aes_gcm_packet", "aes_gcm_byte", "chacha20_packet", "copy_byte",
            "interp_packet"} <= set(p.figures)
    assert "udp_send" not in p.figures and "quic_packet" not in p.figures
    assert any("QUIC transfer not measured" in n for n in p.notes)
    assert p.state.cores >= 1 and p.state.busy_cores >= 0
    cores = probe_mod.probe_cores()
    # Two rounds on each measured core, pooled; each core's median kept apart.
    assert all(len(f.rounds) == 2 * len(cores) for f in p.figures.values())
    assert sorted(p.per_core) == [str(c) for c in cores]
    assert "copy_byte" in p.per_core[str(cores[0])]
    with pytest.raises(Exception, match="rounds"):
        probe_mod.run_probe(rounds=0, network=False)


def test_content_round_trip_and_hash() -> None:
    p = _probe("2026-11-28T08:00:00Z", name="a", session="s1", phase="start")
    back = HostProbe.from_content(p.content())
    assert back.sha256 == p.sha256 and back.probe_id == p.probe_id == p.sha256[:12]
    assert replace(p, name="b").sha256 != p.sha256


def test_store_load_find_and_tampering(tmp_path: Path) -> None:
    cat = tmp_path / "c.duckdb"
    a = _probe("2026-11-28T08:00:00Z", name="first")
    b = _probe("2026-11-28T09:00:00Z", scale=1.2)
    assert probe_store.store(cat, a) == a.probe_id
    probe_store.store(cat, b)
    probe_store.store(cat, b)  # idempotent
    assert [p.probe_id for p in probe_store.load(cat)] == [a.probe_id, b.probe_id]
    assert probe_store.find(cat, "this-host", host="h").probe_id == b.probe_id
    assert probe_store.find(cat, "first").probe_id == a.probe_id
    assert probe_store.find(cat, b.probe_id[:6]).probe_id == b.probe_id
    with pytest.raises(DataError, match="no host probes match"):
        probe_store.find(cat, "nonesuch")
    with pytest.raises(DataError, match="no host probe of elsewhere"):
        probe_store.find(cat, "this-host", host="elsewhere")
    con = duckdb.connect(str(cat))
    con.execute("UPDATE host_probes SET content = replace(content, '9000.0', '4500.0') "
                "WHERE probe_id = ?", [a.probe_id])
    con.close()
    with pytest.raises(DataError, match="does not match its sha256"):
        probe_store.load(cat)


def test_state_at_interpolates_between_a_sessions_probes() -> None:
    start = _probe("2026-11-28T08:00:00Z")
    end = _probe("2026-11-28T08:20:00Z", scale=2.0)
    t0 = 1795852800.0  # 2026-11-28T08:00:00Z
    mid = probe_store.state_at([end, start], t0 + 600)
    assert mid["udp_send"].ns == pytest.approx(9000 * math.sqrt(2))  # log-linear
    assert probe_store.state_at([start, end], t0 - 60)["udp_send"].ns == 9000
    assert probe_store.state_at([start, end], t0 + 3600)["udp_send"].ns == 18000
    med = probe_store.median_state([start, end, _probe("2026-11-28T08:10:00Z", 1.5)])
    assert med["quic_packet"].ns == 1500 and med["quic_packet"].spread == pytest.approx(1 / 3)
    assert probe_store.state_at([], t0) == {}


def test_as_cpu_and_attach(tmp_path: Path) -> None:
    from quiclab.models.cpus import CpuCatalog
    from quiclab.models.registry import Registry

    cat = tmp_path / "c.duckdb"
    probe_store.store(cat, _probe("2026-11-28T08:00:00Z", name="mine"))
    host = CpuCatalog.packaged().find("EPYC 7543")
    registry = probe_store.attach(Registry.packaged(), "mine", cat, host)
    cpu = registry.cpus.find("mine")
    assert cpu.probe_ns("udp_send") == (9000.0, 0.05) and "mine" in cpu.probe_source
    # A catalog CPU stays itself; an unknown name is the catalog's one-line refusal.
    assert probe_store.attach(Registry.packaged(), "7551P", cat, host).cpus.find("7551P")
    from quiclab.errors import ScenarioError
    with pytest.raises(ScenarioError, match="nonesuch"):
        probe_store.attach(Registry.packaged(), "nonesuch", cat, host)


@pytest.mark.testbed
def test_udp_between_namespaces(root: None, tmp_path: Path) -> None:
    from quiclab.testbed.topology import exclusive

    cores = probe_mod.probe_cores()
    with exclusive():
        per_core = probe_mod._udp(1, Path("/run/quiclab"), cores)
    assert sorted(per_core) == cores
    for measured in per_core.values():
        for name in ("udp_send", "udp_recv", "udp_gso_segment", "udp_gro_segment"):
            (wall,), _ = measured[name]
            assert wall > 0
        # A GSO batch costs less per datagram than single sends (the point of GSO).
        assert measured["udp_gso_segment"][0][0] < measured["udp_send"][0][0]


def test_a_failing_core_is_one_line() -> None:
    def boom() -> None:
        raise ValueError("no such core")
    with pytest.raises(Exception, match="core 0: ValueError: no such core"):
        probe_mod.on_cores({0: boom})


@pytest.mark.testbed
def test_a_session_probes_at_start_middle_and_end(quic_go: None, testbed: object,
                                                   catalog_path: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from quiclab.datasets.catalog import Catalog
    from quiclab.testbed.session import Session, sweep_summary
    from quiclab.testbed.topology import exclusive

    monkeypatch.setattr(probe_mod, "MICRO_S", 0.005)
    monkeypatch.setattr(probe_mod, "UDP_S", 0.01)
    monkeypatch.setattr(probe_mod, "QUIC_STACK", "quic-go")
    monkeypatch.setattr(probe_mod, "QUIC_BYTES", 2_000_000)
    monkeypatch.setattr(probe_mod, "QUIC_TRANSFERS", 1)
    spec = tmp_path / "s.yaml"
    spec.write_text("name: probe-test\nbase: {transfer_bytes: 2000000}\n"
                    "axes: {implementation: [quic-go], mtu_bytes: [1500, 9000]}\n")
    session = Session(testbed, catalog_path, log=lambda line: None,  # type: ignore[arg-type]
                      probing=True)
    with exclusive():
        done = sweep_summary(session, spec)
    assert done.failed == 0 and len(session.probes) == 3
    probes = probe_store.load(catalog_path, session.session_id)
    assert [p.phase for p in probes] == ["start", "middle", "end"]
    assert all("quic_packet" in p.figures and "udp_send" in p.figures for p in probes)
    with Catalog(catalog_path, read_only=True) as cat:
        sessions = cat.df("SELECT DISTINCT json_extract_string(extra, '$.provenance.session') "
                          "AS s FROM runs")["s"].tolist()
    assert sessions == [session.session_id]
