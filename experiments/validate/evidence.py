"""Loading the evidence ``quiclab validate`` predicts: per source, the catalog's
measurements as calibration Evidence (bulk goodput cells) and, for fresh
request-workload runs, :class:`RequestEvidence` cells."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from quiclab.errors import DataError

SOURCES = ("published", "dataset", "fresh")

#: What a request-workload cell is compared on: (runs column, Prediction field).
REQUEST_QUANTITIES = (("requests_per_s", "requests_per_s"), ("runtime_s", "completion_s"),
                      ("latency_p50_ms", "latency_p50_ms"),
                      ("latency_p99_ms", "latency_p99_ms"))


@dataclass(frozen=True)
class RequestEvidence:
    """A cell of fresh request-workload runs: the scenario run and the medians measured."""

    scenario: Any  # Scenario
    ident: str
    group: str
    n: int
    observed: dict[str, float]  # Prediction field → median over the repetitions
    variation: dict[str, float]  # Prediction field → coefficient of variation (NaN below 2 runs)


@dataclass
class SourceItems:
    source: str
    evidence: list[Any]  # calibration Evidence
    skipped: list[tuple[str, str]]
    requests: list[RequestEvidence] = field(default_factory=list)
    #: Fresh runs: the host's background load per experiment (fresh.background_load).
    load: pd.DataFrame | None = None
    #: Fresh cells: each one's session and probed state (fresh_sessions.probed_evidence),
    #: and the cells as predicted without the probe (``--probe-scaling both``).
    states: pd.DataFrame | None = None
    unscaled: list[Any] | None = None


def _is_bulk(runs: pd.DataFrame) -> pd.Series:
    """Which runs are bulk transfers (a catalog without the workload column has only those)."""
    if "workload" not in runs.columns:
        return pd.Series(True, index=runs.index)
    return runs["workload"].isna() | (runs["workload"] == "bulk")


def _sender_cc(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with the controller each sender actually ran: a stack with only one
    (testbed/stacks.py; quic-go runs Reno, though its runs recorded before 2026-11-26
    say cubic) gets that one whatever the run recorded."""
    from quiclab.testbed.stacks import STACKS

    if "cc" not in runs.columns or "server_impl" not in runs.columns:
        return runs
    only = {name: stack.ccs[0] for name, stack in STACKS.items() if len(stack.ccs) == 1}
    actual = runs["server_impl"].map(only)
    if not actual.notna().any():
        return runs
    return runs.assign(cc=actual.where(actual.notna(), runs["cc"]))


def _fresh_bulk_cells(runs: pd.DataFrame, known: Any,
                      defaults: dict[str, Any] | None) -> list[Any]:
    """Goodput cells of fresh bulk runs, each with the congestion controller its runs used
    (x/net/quic and the Python stacks run NewReno, which the Scenario default, cubic,
    would contradict)."""
    from quiclab.calibration.evidence import dataset_cells

    runs = _sender_cc(runs)
    if "cc" not in runs.columns or runs["cc"].isna().all():
        out = dataset_cells(runs, source="fresh", known=known, defaults=defaults)
    else:
        out = []
        for cc, group in runs.groupby(runs["cc"].fillna(""), sort=True):
            cell_defaults = dict(defaults or {}) | ({"cc": cc} if cc else {})
            out += dataset_cells(group, source="fresh", known=known, defaults=cell_defaults)
    # veth hands the receiver what the sender wrote: a GSO super-packet arrives whole
    # (GRO's batch), single datagrams stay single (testbed README: ~1.0 packet per
    # receive without GSO, 10–44 with it). GRO without GSO batches nothing here.
    # (Kernel TCP's GRO is the veth's own, which the TCP models take as set.)
    tcp = {"tcp+tls", "tcp", "tcp+ktls"}
    return [replace(e, scenario=e.scenario.with_(gro=False))
            if e.scenario.gro and not e.scenario.gso and e.scenario.server not in tcp else e
            for e in out]


def request_cells(runs: pd.DataFrame, known: Any, defaults: dict[str, Any] | None,
                  source: str = "fresh") -> list[RequestEvidence]:
    """One :class:`RequestEvidence` per (experiment, setting, pair) of ok request runs.

    The Scenario is the one the testbed ran (workload, request size and count,
    connections, streams, path), on this host's CPU with ``defaults`` (the veth's
    base RTT and link) for what the runs leave empty.
    """
    from quiclab.sim.scenario import Scenario

    known = set(known)
    df = runs[(runs["status"] == "ok") & runs["requests_per_s"].notna()]
    out = []
    keys = ["experiment", "setting", "server_impl", "client_impl", "cc"]
    for (exp, setting, server, client, cc), cell in df.groupby(keys, dropna=False):
        if server not in known or client not in known:
            continue
        first = cell.iloc[0]
        # (The relay's capacity is for bulk cells through it: dataset_cells.)
        fields: dict[str, Any] = {k: v for k, v in (defaults or {}).items() if k != "relay_gbps"}
        fields.update({
            "server": server, "client": client, "app": "perf",
            "cpu": first["cpu"] if isinstance(first["cpu"], str) else "AMD EPYC 7543",
            "cipher": first["cipher"] if isinstance(first["cipher"], str) else "aes-ni",
            "workload": str(first["workload"]), "request_bytes": int(first["request_bytes"]),
            "requests": int(cell["requests"].median()),
            "connections": int(first["connections"]), "streams": int(first["streams"]),
            "transfer_bytes": int(first["filesize_bytes"]),
        })
        if isinstance(cc, str) and cc:
            fields["cc"] = cc
        for name in ("rcvbuf_bytes", "mtu_bytes"):
            if pd.notna(first[name]):
                fields[name] = int(first[name])
        for name in ("link_gbps", "rtt_ms", "loss_pct"):
            if cell[name].notna().any():
                fields[name] = float(cell[name].median())
        for name in ("gso", "gro"):
            if cell[name].notna().any():
                fields[name] = bool(cell[name].mode().iloc[0])
        observed, variation = {}, {}
        for column, quantity in REQUEST_QUANTITIES:
            values = pd.to_numeric(cell[column], errors="coerce").dropna()
            observed[quantity] = float(values.median()) if len(values) else math.nan
            variation[quantity] = float(values.std() / values.mean()) \
                if len(values) > 1 and values.mean() else math.nan
        out.append(RequestEvidence(Scenario.from_dict(fields), f"{exp}|{setting}", str(exp),
                                   len(cell), observed, variation))
    return out


def load_evidence(catalog_path: Path, sources: list[str] | None,
                  fresh_registry: Any = None, fresh_defaults: dict[str, Any] | None = None,
                  testbeds: Any = None, probe_scaling: str = "off") -> list[SourceItems]:
    """Evidence per source from the catalog; sources=None means every one with data.
    Published points sit on ``testbeds`` (the models' calibrated testbeds; the stated
    ones when None).

    Fresh runs are predicted with this host's models (``fresh_registry``), for
    the stacks those models cover, with the veth path's defaults; with
    ``probe_scaling`` "on" (or "both": also as the cells were, in ``unscaled``)
    each cell at its session's probed host state (fresh_sessions.probed_evidence).
    """
    from quiclab.calibration.evidence import dataset_cells, published_points
    from quiclab.calibration.fresh import background_load
    from quiclab.datasets.catalog import Catalog

    out = []
    with Catalog(catalog_path, read_only=True) as catalog:
        tables = catalog.tables()
        runs = catalog.df("SELECT * FROM runs") if "runs" in tables else pd.DataFrame()
        points = catalog.df("SELECT * FROM published_points") \
            if "published_points" in tables else pd.DataFrame()
    wanted = sources or list(SOURCES)
    for source in wanted:
        if source == "published":
            if points.empty:
                if sources:
                    raise DataError(catalog_path, "no published points (run `quiclab data "
                                                  "ingest`)", field="published_points")
                continue
            evidence, skipped = published_points(points, testbeds)
        else:
            kind = "qir10g" if source == "dataset" else "fresh"
            sub = runs[runs["source"] == kind] if not runs.empty else runs
            if sub.empty:
                if sources:
                    hint = "quiclab data ingest" if source == "dataset" else "quiclab testbed run"
                    raise DataError(catalog_path, f"no runs with source={kind!r} (run `{hint}`)",
                                    field="runs")
                continue
            if source == "fresh":
                if fresh_registry is None:
                    if sources:
                        raise DataError("--fresh-models", "no models for this host (run "
                                        "`quiclab calibrate --source fresh`)")
                    continue
                from quiclab.experiments.fresh_sessions import probed_evidence

                bulk = _is_bulk(sub)
                evidence = _fresh_bulk_cells(sub[bulk], fresh_registry.names(), fresh_defaults)
                requests = request_cells(sub[~bulk], fresh_registry.names(), fresh_defaults)
                missing = sorted(set(sub["server_impl"]) - set(fresh_registry.names()))
                skipped = [(name, "no fresh model for this stack") for name in missing]
                scaled, states = probed_evidence(evidence, sub[bulk], fresh_registry,
                                                 catalog_path)
                out.append(SourceItems(
                    source, scaled if probe_scaling in ("on", "both") else evidence, skipped,
                    requests, background_load(sub), states,
                    evidence if probe_scaling == "both" else None))
                continue
            else:
                evidence, skipped = dataset_cells(sub[_is_bulk(sub)], source=source), []
        out.append(SourceItems(source, evidence, skipped))
    return out
