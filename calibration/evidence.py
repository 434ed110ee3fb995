"""Evidence: every measured goodput the calibration fits or validates against.

An :class:`Evidence` item is a Scenario plus the goodput observed for it and
where it came from: a cell of the QIR-10G dataset (median over the repetitions
of one experiment setting and pair), a cell of the UCLouvain dataset
(:func:`uclouvain_cells`), a published point of a seed, or a fresh testbed
cell; each names its testbed (``datasets/testbeds.py``). Published points
become Scenarios through their condition columns plus the document's stated
testbed (CPU, link, buffers); points that state bounds, duplicates, or
conditions the engines do not model yet (pipelines, chunked requests) are kept
out with the reason.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from quiclab.calibration.knowledge import IMPLEMENTATIONS
from quiclab.datasets.testbeds import QIR10G, fresh_id
from quiclab.models.testbeds import STATED, Testbeds
from quiclab.sim.scenario import QIR_TRANSFER_BYTES, Scenario

#: Testbed each seed describes (applied where a point's row leaves a field empty);
#: the stated values of quiclab.models.testbeds — the calibration refines the
#: ones a document leaves out (the seed-000 path's base RTT).
DOCUMENT_DEFAULTS: dict[str, dict[str, Any]] = {
    doc: {**v.fields, "testbed": v.id} for v in STATED.values() for doc in v.documents}
#: Builds a document measured under another name (seed 001 §5: "the baseline
#: implementation of mvfst supports GSO and GRO").
DOCUMENT_NAMES: dict[str, dict[str, str]] = {"001": {"mvfst": "mvfst@gso"}}
#: Points whose pair the text leaves unnamed but the rest of the document identifies:
#: point id → (server, client, app, why).
ATTRIBUTED: dict[str, tuple[str, str, str, str]] = {
    "kempf24-033": ("msquic", "msquic", "hq",
                    "seed 002 §4.3: the Fig. 6 maximum (4819 Mbit/s) is above every LSQUIC, "
                    "quiche, mvfst, picoquic, quic-go and aioquic pair of the raw data (best: "
                    "3820), and MsQuic is the third of 'the three best-performing "
                    "implementations'; MsQuic speaks hq only (§4)"),
}
#: Matrices whose extremes the seeds state: a "highest pair" point bounds every other
#: pair of the matrix from above, a "slowest pair" point from below.
#: document → (implementations, source).
MATRICES: dict[str, tuple[tuple[str, ...], str]] = {
    "000": (("lsquic", "picoquic", "ngtcp2", "quiche", "quic-go"),
            "seed 000 §V-A Fig. 3: the HTTP/3 matrix of the five implementations of Table III"),
}
#: Condition keywords that put a point outside what the bulk engines model today.
UNMODELLED = ("pipeline=", "pinned", "NUMA", "kernel bypass", "Shenango")


@dataclass(frozen=True)
class Evidence:
    scenario: Scenario
    goodput_mbps: float
    group: str  # cross-validation group (experiment or document)
    source: str  # "dataset" | "published" | "fresh"
    ident: str  # cell key or point id
    n: int = 1  # repetitions behind the value
    cv: float = float("nan")  # coefficient of variation over repetitions
    weight: float = 1.0
    #: Median CPU utilisation per side (cores busy, 1.0 = one core) where measured.
    server_util: float = float("nan")
    client_util: float = float("nan")
    #: "" (a value), "lower" (the goodput is at least this) or "upper" (at most this):
    #: a one-sided point constrains the fit only when a prediction violates it.
    bound: str = ""
    #: False when the testbed's CPU is unknown: the Scenario's ``cpu`` is then only
    #: a placeholder (its default), to be replaced by the testbed's fitted speed.
    cpu_known: bool = True
    #: Conditions of the cell that the Scenario cannot express, as (name, value)
    #: pairs (UCLouvain: the cores given to the stack, offloads other than GSO/GRO).
    conditions: tuple[tuple[str, Any], ...] = ()

    @property
    def testbed(self) -> str:
        """The testbed the goodput was measured on (its Scenario's ``testbed``;
        ``datasets/testbeds.py``): ``qir10g`` for dataset cells, the document's
        testbed for published points, the runs' ``fresh-<host>`` for fresh cells,
        ``uclouvain`` for :func:`uclouvain_cells`."""
        return self.scenario.testbed

    def errors_pct(self, predicted_mbps: float) -> tuple[float, float]:
        """(absolute, signed) percentage error of a prediction. A one-sided point has no
        absolute error (NaN: it is a constraint, not a value, and stays out of median
        and p95 figures); its signed error is by how much a prediction violates it (0
        when it does not)."""
        if not self.goodput_mbps > 0 or predicted_mbps != predicted_mbps:
            return math.nan, math.nan
        signed = (predicted_mbps / self.goodput_mbps - 1.0) * 100.0
        if self.bound == "lower":
            return math.nan, min(signed, 0.0)
        if self.bound == "upper":
            return math.nan, max(signed, 0.0)
        return abs(signed), signed


def recorded(extras: Any, *keys: str) -> list[Any]:
    """Per run, the value at ``keys`` in its ``extra`` JSON (the testbed's record of
    a fresh run), or None where the run has no record, bad JSON or not that key."""
    out: list[Any] = []
    for text in extras:
        try:
            value = json.loads(text)
            for key in keys:
                value = value[key]
        except (TypeError, ValueError, KeyError):
            value = None
        out.append(value)
    return out


def _applied_queue_bytes(cell: pd.DataFrame) -> int:
    """The bottleneck queue the testbed applied to these runs (``tc tbf`` limit in
    ``extra.topology.applied.tbf.limit_bytes``; testbed README "Rate": at least
    136 KiB, 64 KiB before 2026-11-24, not the Scenario's 1 × BDP), or 0 if none
    is recorded."""
    if "extra" not in cell:
        return 0
    limits = [int(v) for v in recorded(cell["extra"], "topology", "applied", "tbf",
                                       "limit_bytes") if v is not None]
    return int(np.median(limits)) if limits else 0


def _relay_queue_bytes(cell: pd.DataFrame) -> int:
    """The delay relay's queue bound per direction (``extra.topology.relay.queue_bytes``),
    or 0 if none is recorded."""
    if "extra" not in cell:
        return 0
    bounds = [int(v) for v in recorded(cell["extra"], "topology", "relay", "queue_bytes")
              if v is not None]
    return int(np.median(bounds)) if bounds else 0


def _single_datagrams(cell: pd.DataFrame, fields: dict[str, Any]) -> bool:
    """Whether a fresh cell's path hands the receiver one datagram at a time: the
    delay relay re-emits every datagram on its own (any added delay or reordering),
    and with loss the testbed turns veth segmentation off (testbed/README.md
    "Loss"), so the kernel segments each GSO batch before the client's veth."""
    if float(fields.get("rtt_ms", 0.0)) > 0:
        return True
    if "reorder_pct" in cell and (pd.to_numeric(cell["reorder_pct"], errors="coerce")
                                  .fillna(0.0) > 0).any():
        return True
    return "veth_segmentation" in cell and bool(cell["veth_segmentation"].eq(False).any())


def _relay_path(fields: dict[str, Any], cell: pd.DataFrame, relay_gbps: float) -> None:
    """A relayed fresh cell's bottleneck is the delay relay when it is slower than
    the link: its capacity (``calibrate --source fresh``'s ``relay_gbps``) becomes
    the link rate, and its queue bound, less the datagrams the delay line holds at
    that rate, the bottleneck queue (testbed/peers/udp-relay: the bound counts
    every datagram held, due or not)."""
    if relay_gbps >= float(fields.get("link_gbps", math.inf)):
        return
    fields["link_gbps"] = relay_gbps
    bound = _relay_queue_bytes(cell)
    if bound:
        delay_line = relay_gbps * 1e9 / 8 * float(fields.get("rtt_ms", 0.0)) / 2e3
        fields["queue_bytes"] = max(int(bound - delay_line), 64 * 1024)


def dataset_cells(runs: pd.DataFrame, source: str = "dataset", known: Any = None,
                  defaults: dict[str, Any] | None = None) -> list[Evidence]:
    """Median goodput per (experiment, setting, pair, cipher, buffer, path) of runs.

    ``known`` limits the implementations (default: the knowledge base);
    ``defaults`` fills Scenario fields the runs leave empty (fresh runs: the
    veth's base RTT and an unlimited link) and may carry ``relay_gbps``, the
    delay relay's capacity, for fresh cells whose path went through it.
    """
    known = set(known) if known is not None else set(IMPLEMENTATIONS)
    defaults = dict(defaults or {})
    relay_gbps = float(defaults.pop("relay_gbps", 0.0) or 0.0)
    df = runs[runs["status"] == "ok"].copy()
    df["g"] = df["goodput_mbps"].fillna(df["goodput_reported_mbps"])
    df = df[df["g"].notna() & (df["g"] > 0)]
    keys = ["experiment", "setting_group", "server_impl", "server_build", "client_impl",
            "client_build", "cipher", "rcvbuf_bytes", "cpu", "app"]
    # Runs of catalogs written before runs recorded their testbed: the published
    # QIR-10G dataset's were all made on its hosts; a fresh run's host is not known.
    unrecorded = defaults.get("testbed", fresh_id("unknown") if source == "fresh" else QIR10G)
    if "testbed" not in df.columns:
        df["testbed"] = unrecorded
    df["testbed"] = df["testbed"].fillna(unrecorded)
    if source == "fresh":
        # Fresh runs vary the path per setting: keep every setting its own cell.
        keys.append("setting")
    # Settings that are repetitions of the same conditions (run1/run2, crypto run2/run3)
    # form one cell; the buffer experiment's setting is its buffer size.
    df["setting_group"] = df["experiment"]
    keys.append("testbed")
    out = []
    for key, cell in df.groupby(keys, dropna=False):
        exp, _, s_impl, s_build, c_impl, c_build, cipher, rcvbuf, cpu, app = key[:10]
        if s_impl not in known or c_impl not in known:
            continue
        server = s_impl + (f"@{s_build}" if isinstance(s_build, str) and s_build else "")
        client = c_impl + (f"@{c_build}" if isinstance(c_build, str) and c_build else "")
        if source == "fresh":
            # A fresh run's build is the hash of the binary it ran (provenance), not
            # a model variant: this host's models are fitted per stack.
            server, client = s_impl, c_impl
        filesize = int(cell["filesize_bytes"].median()) if cell["filesize_bytes"].notna().any() \
            else QIR_TRANSFER_BYTES
        fields: dict[str, Any] = dict(defaults or {})
        fields.update({
            "server": server, "client": client,
            "cipher": cipher if isinstance(cipher, str) else "aes-ni",
            "rcvbuf_bytes": int(rcvbuf) if not _isnan(rcvbuf) else 212992,
            # The TCP peers speak HTTP/1.1 ("https", "http"): the TCP models have no
            # application layer apart from their TLS (sim/tcp.py), "perf" says so.
            "app": "h3" if app in ("h3", "tcp") else ("perf" if app in ("https", "http") else app),
            "transfer_bytes": filesize,
            "cpu": cpu if isinstance(cpu, str) else "AMD EPYC 7543",
            "testbed": str(key[-1]),
        })
        for name in ("mtu_bytes", "link_gbps", "rtt_ms", "loss_pct"):
            if name in cell and cell[name].notna().any():
                fields[name] = type(getattr(Scenario(), name))(cell[name].median())
        if source == "fresh" and "link_gbps" in fields:
            queue = _applied_queue_bytes(cell)
            if queue:
                fields["queue_bytes"] = queue
        if source == "fresh" and relay_gbps and (
                float(fields.get("rtt_ms", 0.0)) > 0
                or ("reorder_pct" in cell and (pd.to_numeric(cell["reorder_pct"], errors="coerce")
                                               .fillna(0.0) > 0).any())):
            _relay_path(fields, cell, relay_gbps)
        if "gso" in cell and cell["gso"].notna().any():
            fields["gso"] = bool(cell["gso"].mode().iloc[0])
            fields["gro"] = bool(cell["gro"].mode().iloc[0]) if cell["gro"].notna().any() \
                else fields["gso"]
        if source == "fresh" and "extra" in cell:
            # Fields the runs table has no column for (kernel TCP's offloads, buffers and
            # TLS records): as each run's recorded Scenario had them.
            fields.update(_recorded_fields(cell))
        if source == "fresh" and fields.get("gro", True) and _single_datagrams(cell, fields):
            # The receiver got single datagrams, whatever its socket asked for: GRO
            # has nothing to coalesce (TRANSPORT.md "Receive buffer").
            fields["gro"] = False
        g = cell["g"].astype(float)
        ident = f"{exp}|{server}|{client}|{fields['cipher']}|{fields['rcvbuf_bytes']}"
        if source == "fresh":
            ident = f"{exp}|{key[10]}"
        elif fields["testbed"] != "qir10g":
            ident = f"{fields['testbed']}|{ident}"
        utils = [float(cell[c].median()) / 100.0 if c in cell and cell[c].notna().any()
                 else float("nan") for c in ("server_cpu_pct", "client_cpu_pct")]
        out.append(Evidence(Scenario.from_dict(fields), float(g.median()), str(exp), source,
                            ident, n=len(g), cv=float(g.std() / g.mean()) if len(g) > 1 else 0.0,
                            server_util=utils[0], client_util=utils[1]))
    return out


def _recorded_fields(cell: pd.DataFrame) -> dict[str, Any]:
    """The LATER_FIELDS of a fresh cell's runs as recorded (``extra.scenario``), where
    they are not their default (the most common value over the cell's runs)."""
    from quiclab.sim.scenario import DEFAULTS, LATER_FIELDS

    out: dict[str, Any] = {}
    for name in LATER_FIELDS:
        values = [v for v in recorded(cell["extra"], "scenario", name) if v is not None]
        if values:
            value = max(set(values), key=values.count)
            if value != DEFAULTS[name]:
                out[name] = value
    return out


def uclouvain_cells(runs: pd.DataFrame) -> list[Evidence]:
    """Condition cells of the UCLouvain kernel-I/O bulk runs (testbed ``uclouvain``,
    CPU unknown): see :func:`quiclab.calibration.uclouvain.cells`."""
    from quiclab.calibration.uclouvain import cells

    return cells(runs)


def _isnan(x: Any) -> bool:
    if x is None or x is pd.NA:
        return True
    try:
        return math.isnan(float(x))
    except (TypeError, ValueError):
        return x is None


def _variant_known(name: str) -> bool:
    base, _, variant = name.partition("@")
    impl = IMPLEMENTATIONS.get(base)
    return impl is not None and (not variant or variant in impl.variants)


def published_points(points: pd.DataFrame, testbeds: Testbeds | None = None
                     ) -> tuple[list[Evidence], list[tuple[str, str]]]:
    """Bulk goodput points of the seeds as Evidence, and (point_id, reason) for the rest.

    Each point sits on its document's testbed: the stated one (the calibration's
    starting point) unless ``testbeds`` — e.g. a model directory's calibrated
    ``testbeds.json`` — is given.
    """
    defaults = ({doc: {**tb.fields, "testbed": tb.id} for tb in testbeds.items.values()
                 for doc in tb.documents} if testbeds else DOCUMENT_DEFAULTS)
    out: list[Evidence] = []
    skipped: list[tuple[str, str]] = []
    points = points.astype(object).where(points.notna(), None)
    for row in points.itertuples(index=False):
        pid = row.point_id
        if row.quantity not in ("goodput", "throughput"):
            continue
        cond = row.conditions if isinstance(row.conditions, str) else ""
        bound = ""
        if pid in ATTRIBUTED:
            # The range's end is this pair's value (ATTRIBUTED says why).
            server, client, app, _reason = ATTRIBUTED[pid]
            row = row._replace(server=server, client=client, app=app)
        elif ("bound=lower_limit" in cond or "bound=upper_limit" in cond) and row.cpu:
            # A one-sided point constrains the fit only on a stated testbed.
            bound = "lower" if "bound=lower_limit" in cond else "upper"
        elif "bound=" in cond:
            skipped.append((pid, "states a bound, not a value"))
            continue
        if "dup_of=" in cond:
            skipped.append((pid, "duplicate of another point"))
            continue
        if any(k in cond for k in UNMODELLED):
            skipped.append((pid, "pipelining/pinning/kernel bypass: see calibration/pipeline.py"))
            continue
        server, client = row.server, row.client
        if not isinstance(server, str) or not isinstance(client, str):
            skipped.append((pid, "implementation not named"))
            continue
        doc = str(row.document).zfill(3)
        if "year=2023" not in cond and doc == "000":
            # König et al. 2025 measured 2025 versions of every stack.
            server, client = _version_2025(server), _version_2025(client)
        names = DOCUMENT_NAMES.get(doc, {})
        server, client = names.get(server, server), names.get(client, client)
        if not (_variant_known(server) and _variant_known(client)):
            skipped.append((pid, f"no model for {server} / {client}"))
            continue
        if isinstance(row.chunks, int | float) and not _isnan(row.chunks) and row.chunks > 1:
            skipped.append((pid, "chunked requests: DES/ns-3 only"))
            continue
        fields: dict[str, Any] = dict(defaults.get(doc, {}))
        if doc == "001" and server.startswith("quicly") and "EPYC" in str(row.cpu):
            fields["cpu"] = "AMD EPYC 7302P"
        fields.update({"server": server, "client": client,
                       "app": row.app if row.app in ("perf", "hq", "h3") else "perf"})
        for name in ("cpu", "link_gbps", "mtu_bytes", "rtt_ms", "loss_pct", "cipher",
                     "rcvbuf_bytes", "transfer_bytes"):
            value = getattr(row, name)
            if value is not None and not _isnan(value) and value != "":
                fields[name] = value
        for name in ("gso", "gro"):
            value = getattr(row, name)
            if isinstance(value, bool):
                fields[name] = value
            elif value is not None and not _isnan(value) and str(value) in ("True", "False"):
                fields[name] = str(value) == "True"
        fields.pop("streams", None)
        try:
            scenario = Scenario.from_dict(fields, source=pid)
        except Exception as err:
            skipped.append((pid, str(err)))
            continue
        value = float(row.value) * (1000.0 if row.unit == "Gbit/s" else 1.0)
        out.append(Evidence(scenario, value, f"seed{doc}", "published", pid, bound=bound))
        extreme = ("upper" if "highest pair of the matrix" in cond else
                   "lower" if "slowest pair of the matrix" in cond else "")
        if extreme and doc in MATRICES:
            # Every other pair of the matrix is at most (at least) this pair's goodput.
            for s in MATRICES[doc][0]:
                for c in MATRICES[doc][0]:
                    other = replace(scenario, server=_version_2025(s), client=_version_2025(c))
                    if (other.server, other.client) == (scenario.server, scenario.client):
                        continue
                    out.append(Evidence(other, value, f"seed{doc}", "published",
                                        f"{pid}>{s}|{c}", bound=extreme))
    return out, skipped


def _version_2025(name: str) -> str:
    base, _, variant = name.partition("@")
    impl = IMPLEMENTATIONS.get(base)
    if variant or impl is None or "2025" not in impl.variants:
        return name
    return f"{base}@2025"
