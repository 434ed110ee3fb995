"""Metrics that come from the cost model or the Table 3 crypto fit rather than an engine run.

- ``sender_io_pct``, ``sender_crypto_pct``, ``sender_protocol_pct`` (and
  ``receiver_…``): what ``perf`` would see on one endpoint at the predicted
  goodput (:func:`quiclab.sim.analytic.pipeline.perf_profile`): the stages of
  :class:`~quiclab.sim.resolve.Endpoint` weighted by the stack's measured
  profile — IO = kernel per-datagram work plus the system call's share,
  crypto = AEAD and header protection, protocol = QUIC processing, application
  and the ACKs per packet — plus the idle time a polling core spends in its
  I/O path. This is the split Mukherjee et al. 2025 Table 1 profiles (IO /
  crypto / protocol, libc left out); without a prediction, the cost split.
  ``sender_kernel_pct`` is the cost model's IO share, the kernel (sys) time of
  König et al. 2025 Fig. 11.
- ``crypto:<point_id>``: Table 3 of Mukherjee et al. 2025 predicted by
  :func:`quiclab.calibration.crypto.fit_table3` — encryption/decryption
  latency of 9000 bytes in units of S bytes, and the rate 9000·8 / latency.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pandas as pd

from quiclab.experiments.findings import ReproSpec
from quiclab.models.registry import Registry
from quiclab.sim.resolve import Endpoint, Resolved, resolve

STAGES = ("io", "crypto", "protocol")


def stage_ns(endpoint: Endpoint, acks_per_packet: float) -> dict[str, float]:
    """CPU ns per data packet in each stage (see the module docstring)."""
    return {
        "io": endpoint.ns_segment + endpoint.ns_per_call / endpoint.segments_per_call,
        "crypto": endpoint.ns_crypto,
        "protocol": endpoint.ns_protocol + endpoint.ns_app + acks_per_packet
        * endpoint.ns_per_ack,
    }


def stage_shares(resolved: Resolved, side: str) -> dict[str, float]:
    ep = resolved.sender if side == "sender" else resolved.receiver
    ns = stage_ns(ep, resolved.acks_per_packet)
    total = sum(ns.values())
    return {k: 100.0 * v / total for k, v in ns.items()}


def crypto_metric(point: dict[str, Any], fits: dict[str, Any]) -> float:
    """Table 3 quantity of ``point`` predicted by the crypto fit; KeyError if it has none."""
    cond = str(point.get("conditions") or "")
    op = re.search(r"op=(\w+)", cond)
    unit = re.search(r"unit=(\d+) B x (\d+)", cond)
    quantity = point.get("quantity")
    if quantity == "latency_share":
        raise KeyError("the linear fit puts the whole 1500-vs-9000 difference in its per-packet "
                       "term (100 %); the stated 54 % is the initialisation call alone")
    if not op or not unit:
        raise KeyError(f"{point.get('point_id')}: no op=/unit= in its conditions")
    size, count = int(unit.group(1)), int(unit.group(2))
    name = op.group(1)
    if name == "encrypt_init":
        raise KeyError("the fit has no separate initialisation term (per-packet cost only)")
    fit = fits.get("encrypt" if name.startswith("encrypt") else "decrypt")
    if fit is None:
        raise KeyError("Table 3 fit unavailable")
    latency = fit.latency_ns(size, count)
    if quantity == "latency":
        return float(latency)
    if quantity == "crypto_throughput":
        return size * count * 8.0 / float(latency)  # bits per ns = Gbit/s
    raise KeyError(f"{quantity}: not a Table 3 quantity")


def make_derived(spec: ReproSpec, registry: Registry | None, points: pd.DataFrame
                 ) -> Callable[..., float]:
    """The callback :class:`~quiclab.experiments.evaluate.Context` uses for these metrics."""
    cache: dict[str, Resolved] = {}
    fits: dict[str, Any] = {}
    by_id = {str(r["point_id"]): r for r in points.to_dict("records")}

    def derived(name: str, metric: str, row: Any = None) -> float:
        if metric.startswith("crypto:"):
            if not fits:
                from quiclab.calibration.crypto import fit_table3

                fits.update(fit_table3(points))
            pid = metric.split(":", 1)[1]
            if pid not in by_id:
                raise KeyError(f"unknown point id {pid}")
            return crypto_metric(by_id[pid], fits)
        m = re.fullmatch(r"(sender|receiver)_(io|crypto|protocol|kernel)_pct", metric)
        if not m:
            raise KeyError(f"unknown metric {metric!r}")
        if registry is None:
            raise KeyError("no model registry")
        if name not in cache:
            cache[name] = resolve(spec.named[name], registry)
        stage = "io" if m.group(2) == "kernel" else m.group(2)
        if m.group(2) != "kernel" and row is not None and row.get("goodput_mbps"):
            # Table 1 profiles on-CPU cycles: at the predicted goodput, with the
            # stack's measured stage weights and the idle time a polling core spends
            # in its I/O path (sim/analytic/pipeline.perf_profile).
            from quiclab.models.pipelines import PipelineCatalog
            from quiclab.sim.analytic.pipeline import perf_profile
            from quiclab.sim.cores import host_params

            r = cache[name]
            side = m.group(1)
            ep = r.sender if side == "sender" else r.receiver
            impl = r.scenario.server if side == "sender" else r.scenario.client
            profile = host_params(registry).profile(impl, side)
            polls = PipelineCatalog.packaged().polls_idle(impl)
            return perf_profile(ep, r.acks_per_packet, float(row["goodput_mbps"]) * 1e6,
                                profile, polls)[stage]
        return stage_shares(cache[name], m.group(1))[stage]

    return derived
