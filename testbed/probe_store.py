"""Host probes in the catalog (table ``host_probes``), and a session's state at a time.

A probe is written once with the SHA-256 of its content; reading it back
checks that hash (a row whose content no longer matches is refused, naming
it). A probe is looked up by ``this-host`` (the latest probe of this host), by
its name, or by a prefix of its id.
"""

from __future__ import annotations

import json
import math
import socket
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from quiclab.errors import DataError
from quiclab.testbed.probe import COMPONENTS, Figure, HostProbe

#: The name that means "the latest probe of the host this runs on".
THIS_HOST = "this-host"


def _row(probe: HostProbe) -> dict[str, Any]:
    content = probe.content()
    clocks = list(probe.state.clock_mhz.values())
    return {
        "probe_id": probe.probe_id, "sha256": probe.sha256, "name": probe.name or None,
        "taken_at": datetime.strptime(probe.taken_at, "%Y-%m-%dT%H:%M:%SZ"),
        "host": probe.host, "cpu": probe.cpu, "session": probe.session or None,
        "phase": probe.phase, "rounds": probe.rounds, "duration_s": probe.duration_s,
        "figures": json.dumps({k: round(v.ns, 6) for k, v in sorted(probe.figures.items())}),
        "other_busy_cores": probe.state.other_busy_cores,
        "steal_cores": probe.state.steal_cores, "busy_cores": probe.state.busy_cores,
        "clock_mhz": sum(clocks) / len(clocks) if clocks else None,
        "quic_stack": probe.quic.get("stack"),
        "quic_goodput_mbps": _median([r.get("goodput_mbps") for r in probe.quic.get("runs", [])
                                      if r.get("status") == "ok"]),
        "content": json.dumps(content, sort_keys=True),
    }


def _median(values: Sequence[Any]) -> float | None:
    vals = sorted(float(v) for v in values if isinstance(v, int | float))
    if not vals:
        return None
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2


def store(catalog_path: Path, probe: HostProbe) -> str:
    """Write ``probe`` (idempotent: the id is its content's hash). Returns its id."""
    from quiclab.datasets.catalog import Catalog

    with Catalog(catalog_path) as cat:
        cat.upsert("host_probes", [_row(probe)])
    return probe.probe_id


def _decode(row: dict[str, Any], where: Path) -> HostProbe:
    content = row["content"]
    data = json.loads(content) if isinstance(content, str) else content
    try:
        probe = HostProbe.from_content(data)
    except (KeyError, TypeError, ValueError) as err:
        raise DataError(where, f"host_probes {row['probe_id']}: unreadable content ({err})",
                        field="content") from None
    if probe.sha256 != row["sha256"]:
        raise DataError(where, f"host_probes {row['probe_id']}: content does not match its "
                        f"sha256 {row['sha256'][:12]}… (edited after it was stored)",
                        field="content")
    return probe


def load(catalog_path: Path, session: str | None = None) -> list[HostProbe]:
    """Every stored probe (of one session), oldest first; [] without the table."""
    from quiclab.datasets.catalog import Catalog

    if not Path(catalog_path).exists():
        return []
    with Catalog(catalog_path, read_only=True) as cat:
        if "host_probes" not in cat.tables():
            return []
        where, params = ("WHERE session = ?", [session]) if session else ("", [])
        rows = cat.df(f"SELECT probe_id, sha256, content FROM host_probes {where} "
                      "ORDER BY taken_at, probe_id", params).to_dict("records")
    return [_decode(r, Path(catalog_path)) for r in rows]


def find(catalog_path: Path, ref: str, host: str | None = None) -> HostProbe:
    """The probe ``ref`` names: ``this-host`` (the latest of ``host``, default this
    machine), a probe name (the latest of that name) or a prefix of a probe id.

    Raises DataError (one line) when none or several match.
    """
    probes = load(catalog_path)
    if ref == THIS_HOST:
        host = host or socket.gethostname()
        mine = [p for p in probes if p.host == host]
        if not mine:
            raise DataError(catalog_path, f"cpu={ref}: no host probe of {host} in the catalog "
                            "(run `quiclab host probe`)", field="host_probes")
        return mine[-1]
    named = [p for p in probes if p.name == ref]
    if named:
        return named[-1]
    hits = [p for p in probes if p.probe_id.startswith(ref)]
    if len(hits) == 1:
        return hits[0]
    known = ", ".join(sorted({p.name or p.probe_id for p in probes})[-8:]) or "none"
    raise DataError(catalog_path, f"cpu={ref}: {'several' if hits else 'no'} host probes "
                    f"match (names or id prefixes; stored: {known})", field="host_probes")


def _epoch(probe: HostProbe) -> float:
    return datetime.strptime(probe.taken_at, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=UTC).timestamp()


def state_at(probes: Sequence[HostProbe], when_s: float) -> dict[str, Figure]:
    """A session's figures at ``when_s`` (Unix seconds): per component, the log-linear
    interpolation between the two probes around that time, the nearest probe outside
    them. The spread is the larger of the two probes'."""
    ordered = sorted(probes, key=_epoch)
    if not ordered:
        return {}
    times = [_epoch(p) for p in ordered]
    out: dict[str, Figure] = {}
    for comp in COMPONENTS:
        have = [(t, p.figures[comp]) for t, p in zip(times, ordered, strict=True)
                if comp in p.figures and p.figures[comp].ns > 0]
        if not have:
            continue
        before = [h for h in have if h[0] <= when_s]
        after = [h for h in have if h[0] > when_s]
        if before and after:
            (t0, f0), (t1, f1) = before[-1], after[0]
            w = (when_s - t0) / max(t1 - t0, 1e-9)
            ns = math.exp((1 - w) * math.log(f0.ns) + w * math.log(f1.ns))
            out[comp] = Figure(ns, max(f0.spread, f1.spread), ())
        else:
            _, fig = before[-1] if before else after[0]
            out[comp] = Figure(fig.ns, fig.spread, ())
    return out


def median_state(probes: Sequence[HostProbe]) -> dict[str, Figure]:
    """Per component: the median over ``probes`` (a calibration session's state), with
    spread the larger of the probes' own spread and the probes' half-range."""
    out: dict[str, Figure] = {}
    for comp in COMPONENTS:
        figs = [p.figures[comp] for p in probes if comp in p.figures and p.figures[comp].ns > 0]
        if not figs:
            continue
        values = sorted(f.ns for f in figs)
        med = _median(values) or math.nan
        half = (values[-1] - values[0]) / 2 / med if len(values) > 1 else 0.0
        out[comp] = Figure(med, max(half, max(f.spread for f in figs)), tuple(values))
    return out


def as_cpu(base: Any, name: str, figures: dict[str, Figure], source: str) -> Any:
    """``base`` (a :class:`~quiclab.models.cpus.Cpu`, e.g. this host's) in the state
    ``figures`` describe, as a catalog entry named ``name`` for the probe rule."""
    from dataclasses import replace

    return replace(base, name=name, probe=tuple(sorted(
        (k, float(f.ns), float(f.spread)) for k, f in figures.items() if f.ns > 0)),
        probe_source=source)


def run_sessions(runs: Any) -> Any:
    """The testbed session of each run (``extra.provenance.session``; None for runs
    recorded before sessions had ids), as a pandas Series on ``runs``' index."""
    import pandas as pd

    def one(extra: Any) -> str | None:
        try:
            data = json.loads(extra) if isinstance(extra, str) else (extra or {})
        except ValueError:
            return None
        session = (data.get("provenance") or {}).get("session") if isinstance(data, dict) \
            else None
        return str(session) if session else None
    if "extra" not in runs:
        return pd.Series([None] * len(runs), index=runs.index, dtype=object)
    return runs["extra"].map(one)


def sessions_probes(catalog_path: Path, sessions: Sequence[str]) -> dict[str, list[HostProbe]]:
    """Each session's probes (sessions without probes are left out)."""
    out: dict[str, list[HostProbe]] = {}
    for probe in load(catalog_path):
        if probe.session in sessions:
            out.setdefault(probe.session, []).append(probe)
    return out


def calibration_states(catalog_path: Path, runs: Any, experiment: str
                       ) -> dict[str, tuple[str, dict[str, Figure], str]]:
    """Per stack (server = client) that ran ``experiment``'s ``ok`` runs in sessions
    with probes: (the sessions' key, the component-wise median of their probes, where
    it comes from). A stack calibrated in another session than the rest gets that
    session's state."""
    cal = runs[(runs["experiment"] == experiment) & (runs["status"] == "ok")
               & (runs["server_impl"] == runs["client_impl"])]
    sessions_of = run_sessions(cal)
    every = sorted({s for s in sessions_of if s})
    found = sessions_probes(catalog_path, every)
    out: dict[str, tuple[str, dict[str, Figure], str]] = {}
    for stack, group in cal.groupby("server_impl"):
        sessions = sorted({s for s in sessions_of[group.index] if s in found})
        probes = [p for s in sessions for p in found[s]]
        if not probes:
            continue
        source = (f"median of {len(probes)} host probes of session(s) {', '.join(sessions)} "
                  f"({probes[0].taken_at} … {probes[-1].taken_at}; "
                  f"{', '.join(p.probe_id for p in probes)})")
        out[str(stack)] = (",".join(sessions), median_state(probes), source)
    return out


def calibration_state(catalog_path: Path, runs: Any, experiment: str
                      ) -> tuple[dict[str, Figure], str] | None:
    """The probed state of the sessions that ran ``experiment``'s ``ok`` runs: the
    component-wise median of their probes, and where it comes from. None when those
    sessions took no probes."""
    cal = runs[(runs["experiment"] == experiment) & (runs["status"] == "ok")]
    sessions = sorted({s for s in run_sessions(cal) if s})
    found = sessions_probes(catalog_path, sessions)
    probes = [p for s in sessions for p in found.get(s, [])]
    if not probes:
        return None
    source = (f"median of {len(probes)} host probes of session(s) {', '.join(sorted(found))} "
              f"({probes[0].taken_at} … {probes[-1].taken_at}; "
              f"{', '.join(p.probe_id for p in probes)})")
    return median_state(probes), source


def with_cpus(registry: Any, cpus: Sequence[Any]) -> Any:
    """``registry`` with more CPU entries (probed states); its versions, which hash the
    CPU catalog, are computed afresh."""
    catalog = registry.cpus
    for cpu in cpus:
        catalog = catalog.with_cpu(cpu)
    registry.cpus = catalog
    registry.__dict__.pop("_versions", None)
    return registry


def attach(registry: Any, ref: str, catalog_path: Path, host_cpu: Any) -> Any:
    """Make ``cpu=ref`` resolvable when it names a stored probe: ``this-host`` (the
    latest probe of this machine), a probe's name or an id prefix. A CPU the registry
    already knows is left alone. The entry is ``host_cpu`` (this machine's catalog
    entry, or the registry's CPU of the probe's name) in the probed state."""
    from quiclab.errors import ScenarioError

    if ref != THIS_HOST:
        try:
            registry.cpus.find(ref)
            return registry
        except ScenarioError:
            pass
    try:
        probe = find(catalog_path, ref)
    except DataError:
        if ref == THIS_HOST:
            raise
        registry.cpus.find(ref)  # the catalog's own one-line refusal
        raise
    try:
        base = registry.cpus.find(probe.cpu)
    except ScenarioError:
        base = host_cpu
    source = f"host probe {probe.probe_id}" + (f" '{probe.name}'" if probe.name else "") \
        + f" {probe.taken_at}"
    return with_cpus(registry, [as_cpu(base, ref, dict(probe.figures), source)])
