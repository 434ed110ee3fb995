"""Sections of the What-if page below its answer: uncertainty, engines, CPU breakdown.

Each has a pure part that computes what to say (tested directly) and a
``show_*`` function that draws it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from quiclab.app import breakdown
from quiclab.app.charts import measured_summary, pair_label, three_digits
from quiclab.app.config import AppConfig
from quiclab.app.engines import Disagreement
from quiclab.app.resources import catalog_query, catalog_stamp
from quiclab.errors import QuiclabError
from quiclab.sim.prediction import Prediction
from quiclab.sim.resolve import Resolved


def _pct(value: float, reference: float) -> str:
    return f"{(value / reference - 1) * 100:+.1f} %" if reference > 0 else "—"


def band_coverage(p: Prediction) -> str:
    """What the prediction's interval covers, in one sentence."""
    if math.isnan(p.goodput_lo_mbps):
        return "no interval: the engine gave none"
    if math.isfinite(p.interval_level):
        return (f"{p.interval_level * 100:g} % predictive band "
                f"{three_digits(p.goodput_lo_mbps)} … {three_digits(p.goodput_hi_mbps)} Mbit/s "
                f"({_pct(p.goodput_lo_mbps, p.goodput_mbps)} … "
                f"{_pct(p.goodput_hi_mbps, p.goodput_mbps)}): where "
                f"{p.interval_level * 100:g} % of measured runs are expected, model error "
                "included, learned from held-out residuals")
    return (f"interval {three_digits(p.goodput_lo_mbps)} … "
            f"{three_digits(p.goodput_hi_mbps)} Mbit/s: it covers the fitted parameters "
            "only, not the model's error")


def uncertainty_lines(predictions: Sequence[Prediction], measured: pd.DataFrame
                      ) -> list[str]:
    """Markdown, one item per prediction: the band and what it covers, the parameter
    interval, and the spread of the matching measured values of its pair."""
    summary = measured_summary(measured)
    lines = []
    for p in predictions:
        pair = pair_label(p.scenario.server, p.scenario.client)
        text = f"**{pair} · {p.engine}**: {band_coverage(p)}"
        if math.isfinite(p.param_lo_mbps) and math.isfinite(p.interval_level):
            text += (f"; the fitted parameters alone: {three_digits(p.param_lo_mbps)} … "
                     f"{three_digits(p.param_hi_mbps)} "
                     f"({_pct(p.param_lo_mbps, p.goodput_mbps)} … "
                     f"{_pct(p.param_hi_mbps, p.goodput_mbps)})")
        if p.engine == "analytic":
            for _, row in summary[summary["pair"] == pair].iterrows():
                inside = ""
                if math.isfinite(p.goodput_lo_mbps) and row["n"] >= 1:
                    values = measured_values(measured, p, str(row["source"]))
                    share = ((values >= p.goodput_lo_mbps) & (values <= p.goodput_hi_mbps)
                             ).mean() if len(values) else math.nan
                    inside = f"; {share * 100:.0f} % of them inside the band"
                text += (f". Measured ({row['source']}): {int(row['n'])} value(s), median "
                         f"{three_digits(row['median'])}, 5–95 % {three_digits(row['p5'])} "
                         f"… {three_digits(row['p95'])} "
                         f"({_pct(row['p5'], row['median'])} … "
                         f"{_pct(row['p95'], row['median'])} of the median){inside}")
        if p.interval_source:
            text += f" — *{p.interval_source}*"
        lines.append("- " + text)
    return lines


def measured_values(measured: pd.DataFrame, p: Prediction, source: str) -> pd.Series:
    """The exact (not bound) measured goodput values of ``p``'s pair from ``source``."""
    rows = measured[(measured["server"] == p.scenario.server)
                    & (measured["client"] == p.scenario.client)
                    & (measured["source"] == source) & measured["bound"].isna()]
    return rows["goodput_mbps"].astype(float)


def show_engines(predictions: Sequence[Prediction], found: Sequence[Disagreement]) -> None:
    """The engines' answers per pair and where their bands do not overlap."""
    engines = sorted({p.engine for p in predictions})
    if len(engines) < 2:
        st.caption("Only the analytic engine has answered: choose des or ns3 under Engines "
                   "and run them to compare the three on the chart above.")
        return
    if not found:
        st.success(f"{', '.join(engines)} agree: every pair's bands overlap.")
        return
    st.warning(f"{len(found)} disagreement(s) beyond the engines' bands:")
    for item in found:
        st.markdown(item.text())


@dataclass(frozen=True)
class Breakdown:
    """The CPU breakdown of one pair: the model's components and the comparison."""

    pair: str
    predicted: pd.DataFrame
    measured: pd.DataFrame
    compared: pd.DataFrame
    problem: str | None


def cpu_breakdown(config: AppConfig, resolved: Resolved, p: Prediction) -> Breakdown:
    """The model's components of ``p``'s pair and the measured profiles of its stacks."""
    acks = p.acks / p.server_packets_sent \
        if math.isfinite(p.acks) and p.server_packets_sent > 0 else None
    predicted = breakdown.predicted_shares(resolved, acks)
    server = p.scenario.server.partition("@")[0]
    client = p.scenario.client.partition("@")[0]
    measured, compared, problem = measured_profiles(config.catalog,
                                                    catalog_stamp(config.catalog), server,
                                                    client)
    return Breakdown(pair_label(p.scenario.server, p.scenario.client), predicted, measured,
                     pd.concat([breakdown.grouped(predicted, measured.iloc[:0]), compared],
                               ignore_index=True), problem)


@functools.lru_cache(maxsize=64)
def measured_profiles(catalog: str, stamp: float, server: str, client: str
                      ) -> tuple[pd.DataFrame, pd.DataFrame, str | None]:
    """The perf profiles of ``server`` as a sender and ``client`` as a receiver (base
    names), their comparison rows (:func:`breakdown.grouped` without the model's), and
    why there are none where the catalog cannot say. Kept per catalog version: every
    change of a What-if scenario redraws the breakdown, the profiles stay the same."""
    perf_sql, published_sql = breakdown.measured_sql(sorted({server, client}))
    problem = None
    try:
        perf = breakdown.perf_shares(catalog_query(catalog, stamp, perf_sql))
        published = breakdown.published_shares(catalog_query(catalog, stamp, published_sql))
        measured = pd.concat([f for f in (perf, published) if not f.empty]
                             or [perf], ignore_index=True)
    except (QuiclabError, Exception) as err:  # a catalog without the tables: no profile
        measured = pd.DataFrame(columns=["run_id", "side", "stack", "category", "share",
                                         "source", "group"])
        problem = str(err).splitlines()[0]
    if not measured.empty:
        own = ((measured["side"] == "server") & (measured["stack"] == server)) | \
              ((measured["side"] == "client") & (measured["stack"] == client))
        measured = measured[own].reset_index(drop=True)
    no_model = pd.DataFrame(columns=["side", "stack", "component", "group", "share"])
    return measured, breakdown.grouped(no_model, measured), problem


def show_breakdown(item: Breakdown) -> None:
    """The model's components per side, then the comparison with measured profiles."""
    left, right = st.columns(2)
    with left:
        st.caption(f"{item.pair}: the model's CPU per data packet, by component")
        st.vega_lite_chart(spec=breakdown.components_chart(item.predicted), width="stretch")
        st.markdown("\n".join(f"- {line}" for line in breakdown.shares_text(item.predicted)))
    with right:
        if item.measured.empty:
            st.caption(f"{item.pair}: no measured profile of these stacks in the catalog"
                       + (f" ({item.problem})" if item.problem else "")
                       + " — perf traces exist for lsquic and quiche (seed 002), shares for "
                         "quicly, mvfst, picoquic (seed 001 Table 1).")
        else:
            st.caption("Model beside the measured profiles of the same stacks (their own "
                       "runs' conditions, not this scenario's), in the three groups the "
                       "calibration maps: packet I/O, crypto, protocol; file I/O, libc and "
                       "uncategorised samples are left out and the rest renormalised.")
            st.vega_lite_chart(spec=breakdown.comparison_chart(item.compared),
                               width="stretch")
            st.markdown("\n".join(f"- {line}"
                                   for line in breakdown.grouped_text(item.compared)))
