"""Calibrate where the work runs: stage profiles, pipeline hand-offs, placement, runtime threads.

``HostCalibrator().fit(points, perf, registry)`` runs after the joint fit
(stage D of :mod:`quiclab.calibration.fit`) on the models it produced, and
keeps what it learned in attributes ending in ``_``; ``params_`` is the
:class:`~quiclab.models.pipelines.HostParams` written as
``models/fitted/pipeline.json``. Nothing here changes a cost model: the
parameters only act when a Scenario asks for a pipeline, pins a core, or runs
a stack whose runtime spreads over cores.

1. **Stage profiles** — how one implementation's cost divides into the
   kernel network path ("IO" in seed 001 Table 1: driver to socket API),
   crypto and QUIC protocol. From Table 1 (seed 001, sender profiles of
   quicly, quicly without GRO, mvfst, picoquic, picoquic with Fusion) and the
   catalog's perf categories (seed 002's QIR traces: Packet I/O, Crypto,
   Connection Management for lsquic and quiche). The weight of a stage is the
   profiled share over the cost model's own share at the profile's condition.
   libc samples (packet copies and allocation) count to IO by the fraction λ.
2. **Hand-off and λ** — per-message cost of an inter-core queue and λ, by
   least squares on the two simple-pipelining gains (mvfst +31.4 %, quicly
   +31 %; seed 001 §5). The best-configuration gains stay out of the fit: they
   are the check (``repro-mukherjee25-fig2/3``).
3. **Placement** — far-from-the-NIC penalty δ of each role from LSQUIC in
   seed 002 §4.7: the server pinned near the 100 G NIC is ~22 % above the mean
   over all pinnings (kempf24-073), both ends near the 10 G NIC reach
   3855 Mbit/s (kempf24-070).
4. **Runtime threads** — quic-go's extra CPU (seed 000 Fig. 7): the client
   at about 400 % with ≥ 32 streams (koenig25-018), the server 160–190 %
   whatever the streams (koenig25-019/020), the goodput unchanged; the
   overhead is the stated total minus what the packet path uses.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from quiclab.calibration.evidence import DOCUMENT_DEFAULTS, DOCUMENT_NAMES
from quiclab.models.costmodel import Param
from quiclab.models.pipelines import HostParams, RuntimeThreads, StageProfile
from quiclab.models.registry import Registry
from quiclab.sim.analytic import AnalyticEngine
from quiclab.sim.analytic.pipeline import model_stages
from quiclab.sim.resolve import resolve
from quiclab.sim.scenario import Scenario

#: Table 1 columns used as profiles (Linux columns; the kernel-bypass ones
#: profile busy polling, not the kernel path) and their throughput rows.
TABLE1 = {"quicly@noopt": "mukherjee25-013", "quicly": "mukherjee25-018",
          "mvfst": "mukherjee25-023", "picoquic": "mukherjee25-028",
          "picoquic@fusion": "mukherjee25-033"}
#: Seed 002 perf categories → stages (Fig. 7 definitions, §4.4): Packet I/O is
#: sendmsg/recvmsg and the kernel; Connection Management is QUIC protocol
#: handling; file I/O and uncategorised samples are left out (spread evenly).
PERF_STAGES = {"PACKET_IO": "kernel", "CRYPTO": "crypto", "CONN_MGMT": "protocol"}
#: Simple pipelining gains (the fit) and the baseline each is relative to.
SIMPLE_POINTS = ("mukherjee25-079", "mukherjee25-088")
#: Assumed kernel-bypass costs (reference CPU): a user-space driver and UDP/IP
#: stack touch each packet once; no seed gives them apart from busy polling.
BYPASS_IO_NS = 120.0
BYPASS_UDPIP_NS = 60.0
S001 = "seed 001 (Mukherjee et al. 2025)"


def _points_by_id(points: pd.DataFrame) -> dict[str, dict[str, Any]]:
    rows = points.astype(object).where(points.notna(), None).to_dict("records")
    return {str(r["point_id"]): r for r in rows}


def _value(row: dict[str, Any]) -> float:
    return float(row["value"])


def doc001_scenario(server: str, cpu: str | None, mtu: int = 1500, **extra: Any) -> Scenario:
    """A seed 001 scenario: the document's testbed, perf app, GSO and GRO on."""
    fields: dict[str, Any] = dict(DOCUMENT_DEFAULTS["001"])
    name = DOCUMENT_NAMES["001"].get(server, server)
    fields.update(server=name, client=name, app="perf", gso=True, gro=True, mtu_bytes=mtu,
                  sndbuf_bytes=fields["rcvbuf_bytes"])
    if cpu:
        fields["cpu"] = cpu
    fields.update(extra)
    return Scenario.from_dict(fields)


class HostCalibrator:
    """Fit :class:`~quiclab.models.pipelines.HostParams` (see the module docstring)."""

    def __init__(self, progress: Callable[[str], None] | None = None):
        self.progress = progress or (lambda msg: None)

    # ------------------------------------------------------------- 1. profiles
    def _table1_shares(self, rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Table 1 shares per column: {impl: {io, crypto, protocol, libc, ids, throughput row}}."""
        out: dict[str, dict[str, Any]] = {}
        for pid, row in rows.items():
            cond = str(row.get("conditions") or "")
            if row["quantity"] != "cpu_share" or "dup_of=" in cond or "component=" not in cond:
                continue
            impl = str(row.get("server") or "")
            if impl not in TABLE1:
                continue
            component = cond.split("component=")[1].split(";")[0].strip()
            entry = out.setdefault(impl, {"ids": []})
            entry[component] = _value(row) / 100.0
            entry["ids"].append(pid)
        return {k: v for k, v in out.items()
                if all(c in v for c in ("io", "crypto", "protocol", "libc"))}

    def _perf_shares(self, perf: pd.DataFrame) -> dict[tuple[str, str], dict[str, float]]:
        """Perf category shares of same-implementation pairs (QIR traces) per (impl, role)."""
        out: dict[tuple[str, str], dict[str, float]] = {}
        if perf is None or perf.empty:
            return out
        same = perf[perf["server_impl"] == perf["client_impl"]]
        for (impl, side), g in same.groupby(["server_impl", "side"]):
            shares = g.groupby("category")["share"].mean()
            stage = {v: float(shares.get(k, 0.0)) for k, v in PERF_STAGES.items()}
            if all(x > 0 for x in stage.values()):
                out[(str(impl), "sender" if side == "server" else "receiver")] = stage
        return out

    def _profile(self, target: dict[str, float], scenario: Scenario, registry: Registry,
                 role: str, source: str, rel: float) -> StageProfile:
        """Weights = profiled share / the model's share of ``role`` at ``scenario``."""
        r = resolve(scenario, registry)
        ep = r.sender if role == "sender" else r.receiver
        model = model_stages(ep, r.acks_per_packet)
        keys = ("kernel", "crypto", "protocol")
        m_tot = sum(model[k] for k in keys)
        t_tot = sum(target[k] for k in keys)
        raw = {k: (target[k] / t_tot) / (model[k] / m_tot) for k in keys}
        # Only ratios matter (resplit keeps the total): scale to a geometric mean of 1.
        norm = math.exp(sum(math.log(v) for v in raw.values()) / len(raw))
        params = {k: Param.point(raw[k] / norm, "", source, rel) for k in keys}
        return StageProfile(params["kernel"], params["crypto"], params["protocol"], source)

    def _profiles(self, rows: dict[str, dict[str, Any]], perf: pd.DataFrame, registry: Registry,
                  libc_io: float) -> dict[str, dict[str, StageProfile]]:
        out: dict[str, dict[str, StageProfile]] = {}
        for impl, sh in sorted(self._table1_shares(rows).items()):
            base = rows[TABLE1[impl]]
            scenario = doc001_scenario(impl, str(base.get("cpu") or ""),
                                       gso=True, gro=bool(base.get("gro")
                                                          if base.get("gro") is not None
                                                          else True))
            target = {"kernel": sh["io"] + libc_io * sh["libc"], "crypto": sh["crypto"],
                      "protocol": sh["protocol"]}
            src = (f"fit: {S001} Table 1 sender profile of {impl} ({', '.join(sorted(sh['ids']))}:"
                   f" IO {sh['io']:.3f} + λ·libc {sh['libc']:.3f} with λ = {libc_io:.2f}, crypto "
                   f"{sh['crypto']:.3f}, protocol {sh['protocol']:.3f}) over the cost model's "
                   "split at that condition")
            out[impl] = {
                "sender": self._profile(target, scenario, registry, "sender", src, 0.2),
                # Seed 001 profiled senders only; mvfst's pipelines are symmetric.
                "receiver": self._profile(target, scenario, registry, "receiver",
                                          "assumed: the client's profile is the server's; "
                                          + src, 0.3)}
        for (impl, role), sh in sorted(self._perf_shares(perf).items()):
            if impl in TABLE1 or impl not in registry.models:
                continue
            side = "server" if role == "sender" else "client"
            src = (f"fit: perf categories of the {impl} {side} (dataset tumi8-quic-10g-paper perf "
                   f"traces; seed 002 Fig. 7): Packet I/O {sh['kernel']:.3f}, Crypto "
                   f"{sh['crypto']:.3f}, Connection Management {sh['protocol']:.3f}, over the "
                   "cost model's split at the QIR-10G baseline")
            out.setdefault(impl, {})[role] = self._profile(
                sh, Scenario(server=impl, client=impl), registry, role, src, 0.3)
        return out

    # ---------------------------------------------------- 2. hand-off and λ
    def _simple_cases(self, rows: dict[str, dict[str, Any]]) -> list[tuple[str, Scenario, float]]:
        cases = []
        for pid in SIMPLE_POINTS:
            row = rows.get(pid)
            if row is None:
                continue
            base = doc001_scenario(str(row["server"]), str(row.get("cpu") or ""))
            cases.append((pid, base, 1.0 + _value(row) / 100.0))
        return cases

    def _gains(self, registry: Registry, cases: list[tuple[str, Scenario, float]],
               preset: str = "mukherjee-simple") -> np.ndarray:
        engine = AnalyticEngine(registry)
        scenarios = [s for _, s, _ in cases] + [s.with_(pipeline=preset) for _, s, _ in cases]
        preds = engine.predict_batch(scenarios)
        n = len(cases)
        return np.array([preds[n + i].goodput_mbps / preds[i].goodput_mbps for i in range(n)])

    # ------------------------------------------------------------ 3. placement
    def _placement(self, rows: dict[str, dict[str, Any]], registry: Registry,
                   params: HostParams) -> tuple[Param, Param, list[dict[str, Any]]]:
        """One far-from-the-NIC penalty δ for both roles, fitted to kempf24-070.

        Both ends near the NIC reach 3855 Mbit/s (LSQUIC, 10 G NIC on node 2);
        the calibrated models are the unpinned mean, so δ sets the near-NIC
        gain (:func:`quiclab.sim.cores.near_factor`). The same δ for both roles
        is assumed (both directions touch NIC-local packet buffers). The other
        statements of §4.7 (+22 % for the server row at 100 G, "up to 20 %",
        the row pattern) are the check, ``repro-kempf24-fig11-pinning``.
        """
        from scipy.optimize import brentq

        row = rows.get("kempf24-070")
        if row is None:
            return params.sender_far_penalty, params.receiver_far_penalty, []
        observed = _value(row)
        scenario = Scenario(server="lsquic", client="lsquic", rcvbuf_bytes=6815744,
                            sndbuf_bytes=6815744, pin=True)

        def predict(delta: float) -> float:
            p = Param.point(delta, "", "")
            reg = _with_host(registry, replace(params, sender_far_penalty=p,
                                               receiver_far_penalty=p))
            return AnalyticEngine(reg).predict(scenario).goodput_mbps

        unpinned = predict(0.0)
        if predict(5.0) < observed or unpinned > observed:
            delta = 0.0 if unpinned > observed else 5.0
        else:
            delta = float(brentq(lambda d: predict(d) - observed, 0.0, 5.0, xtol=1e-6))
        # Interval: the stated 3855 Mbit/s ± 3 % (20 repetitions; the abstract's "up to
        # 20 %" and §4.7's "around 22 %" bracket the near-NIC gain similarly).
        ends = []
        for target in (observed * 0.97, observed * 1.03):
            try:
                ends.append(float(brentq(lambda d, t=target: predict(d) - t, 0.0, 5.0,
                                         xtol=1e-6)))
            except ValueError:
                ends.append(delta)
        src = ("fit: seed 002 (Kempf et al. 2024) §4.7, Fig. 11a — LSQUIC pinned to core 16 on "
               f"both ends (the 10 G NIC's node) reaches {observed:.0f} Mbit/s (kempf24-070), "
               f"unpinned {unpinned:.0f}; interval for ±3 %; the same δ for server and client "
               "is assumed")
        lo, hi = min([delta, *ends]), max([delta, *ends])
        penalty = Param(delta, lo, hi, "", src)
        report = [{"target": "kempf24-070", "observed": observed, "predicted": predict(delta),
                   "parameters": "sender_far_penalty = receiver_far_penalty"}]
        return penalty, penalty, report

    # --------------------------------------------------------- 4. runtime threads
    def _threads(self, rows: dict[str, dict[str, Any]], registry: Registry
                 ) -> tuple[dict[str, dict[str, RuntimeThreads]], list[dict[str, Any]]]:
        need = ("koenig25-018", "koenig25-019", "koenig25-020")
        if not all(pid in rows for pid in need) or "quic-go" not in registry.models:
            return {}, []
        d = DOCUMENT_DEFAULTS["000"]
        s = Scenario(server="quic-go@2025", client="quic-go@2025", app="h3", streams=32,
                     chunks=100, **d)
        # The packet path's own CPU (no thread model: a registry without host threads).
        pred = AnalyticEngine(_with_host(registry, replace(registry.host, threads={}))
                              ).predict(s)
        client_total = _value(rows["koenig25-018"]) / 100.0
        srv_lo, srv_hi = _value(rows["koenig25-019"]) / 100.0, _value(rows["koenig25-020"]) / 100.0
        srv_total = 0.5 * (srv_lo + srv_hi)
        c_sat = max(0.0, client_total - pred.client_cpu_util)
        s_over = max(0.0, srv_total - pred.server_cpu_util)
        s_lo = max(0.0, srv_lo - pred.server_cpu_util)
        s_hi = max(0.0, srv_hi - pred.server_cpu_util)
        src_c = ("fit: seed 000 (König et al. 2025) Fig. 7, koenig25-018 — quic-go client at "
                 f"about 400 % CPU with ≥ 32 streams, minus the packet path's "
                 f"{pred.client_cpu_util * 100:.0f} % (analytic engine); ±10 % for 'about'")
        src_s = ("fit: seed 000 Fig. 7, koenig25-019/020 — quic-go server steady at 160–190 % "
                 f"over stream counts, minus the packet path's {pred.server_cpu_util * 100:.0f} %")
        src_one = ("assumed: at one stream the client's runtime burns what the server's does "
                   "(same runtime, no stream-driven goroutines); seed 000 states the client "
                   "only at ≥ 32 streams")
        sat_c = Param(c_sat, max(0.0, c_sat - 0.4), c_sat + 0.4, "cores", src_c)
        over_s = Param(s_over, s_lo, s_hi, "cores", src_s)
        one_c = Param(s_over, s_lo, max(s_hi, s_over), "cores", src_one)
        threads = {"quic-go": {
            "sender": RuntimeThreads(over_s, over_s, 32),
            "receiver": RuntimeThreads(one_c, sat_c, 32)}}
        report = [
            {"target": "koenig25-018", "observed": client_total,
             "predicted": pred.client_cpu_util + c_sat, "parameters": "threads.quic-go.receiver"},
            {"target": "koenig25-019/020", "observed": srv_total,
             "predicted": pred.server_cpu_util + s_over, "parameters": "threads.quic-go.sender"}]
        return threads, report

    # --------------------------------------------------------------------- fit
    def fit(self, points: pd.DataFrame, perf: pd.DataFrame, registry: Registry
            ) -> HostCalibrator:
        """Fit every part on ``registry``'s cost models. Returns self."""
        from scipy.optimize import least_squares

        self.progress("pipelines: stage profiles, hand-off, placement, runtime threads")
        rows = _points_by_id(points)
        start = HostParams.assumed()
        bypass_src = ("assumed: a user-space driver (DPDK / Shenango IOKernel) and UDP/IP stack "
                      f"touch each packet once; {S001} §3 says only that kernel-bypass stacks "
                      "beat Linux's UDP stack")
        start = replace(start,
                        bypass_io_ns=Param.point(BYPASS_IO_NS, "ns", bypass_src, 0.5),
                        bypass_udpip_ns=Param.point(BYPASS_UDPIP_NS, "ns", bypass_src, 0.5))
        cases = self._simple_cases(rows)
        report: list[dict[str, Any]] = []

        def host_for(theta: np.ndarray) -> HostParams:
            libc, handoff = float(theta[0]), float(theta[1])
            profiles = self._profiles(rows, perf, registry, libc)
            return replace(start, libc_io_fraction=Param(libc, 0.0, 1.0, "", "fit"),
                           handoff_ns=Param.point(handoff, "ns", "fit"), profiles=profiles)

        if cases:
            obs = np.log([g for _, _, g in cases])

            def residuals(theta: np.ndarray) -> np.ndarray:
                return np.log(self._gains(_with_host(registry, host_for(theta)), cases)) - obs

            fit = least_squares(residuals, np.array([0.8, 40.0]), bounds=([0.0, 0.0],
                                                                          [1.0, 2000.0]),
                                x_scale=np.array([0.3, 50.0]), diff_step=1e-3)
            libc, handoff = float(fit.x[0]), float(fit.x[1])
            # Intervals: λ ± 0.25 (two gains, two parameters: the fit itself is exact), and
            # the hand-off refitted to both gains with λ held at those ends.
            libc_lo, libc_hi = max(0.0, libc - 0.25), min(1.0, libc + 0.25)
            alone = []
            for end in (libc_lo, libc_hi):
                one = least_squares(
                    lambda t, e=end: np.log(self._gains(
                        _with_host(registry, host_for(np.array([e, t[0]]))), cases)) - obs,
                    np.array([handoff]), bounds=([0.0], [2000.0]), diff_step=1e-3)
                alone.append(float(one.x[0]))
            gains = self._gains(_with_host(registry, host_for(fit.x)), cases)
            ids = ", ".join(pid for pid, _, _ in cases)
            src = (f"fit: {S001} §5 simple-pipelining gains ({ids}: mvfst +31.4 %, quicly +31 %) "
                   "by least squares on the analytic engine, jointly with λ")
            handoff_p = Param(handoff, min([handoff, *alone]), max([handoff, *alone]), "ns", src)
            libc_p = Param(libc, libc_lo, libc_hi, "", src + "; "
                           "λ = share of Table 1's libc samples that move with the IO stage")
            for (pid, _, g), p in zip(cases, gains, strict=True):
                report.append({"target": pid, "observed": g, "predicted": float(p),
                               "parameters": "handoff_ns, libc_io_fraction"})
        else:
            handoff_p, libc_p = start.handoff_ns, start.libc_io_fraction
            libc = libc_p.value
        host = replace(start, handoff_ns=handoff_p, libc_io_fraction=libc_p,
                       profiles=self._profiles(rows, perf, registry, libc))
        ds, dr, placed = self._placement(rows, registry, host)
        host = replace(host, sender_far_penalty=ds, receiver_far_penalty=dr)
        threads, threaded = self._threads(rows, _with_host(registry, host))
        host = replace(host, threads=threads, provenance={
            "fit": "quiclab.calibration.pipeline (after the joint fit, on its models)",
            "reference_cpu": "AMD EPYC 7543 (ns values; moved by the CPU rule)"})
        self.params_ = host
        self.report_ = pd.DataFrame(report + placed + threaded)
        return self


def _with_host(registry: Registry, host: HostParams) -> Registry:
    """The same models and CPUs with other host parameters (no version hashing)."""
    return Registry(registry.models, registry.cpus, registry.interop, source=registry.source,
                    track_versions=False, host=host)
