"""Receiver behaviour from the dataset: ACK frequency and receive-buffer drops.

- ACK frequency: data packets per ACK packet (client UDP datagrams sent),
  per (server, client) pair where measured and per client as the median over
  its servers, from runs with large buffers (≥ 1.6 MiB) so that loss-triggered
  ACKs do not dominate.
- Receive-buffer drops: the receiver-stall model of
  :func:`quiclab.sim.rcvbuf.rcvbuf_drop_fraction` with Pareto shape α
  and scale K = rate·τm^α/(α−1) is fitted to the drop fraction (client UDP
  receive-buffer errors / data packets) against buffer size and arrival rate
  — Kempf et al. 2024 Fig. 3 (buffer experiment, LSQUIC and quiche). Other
  receivers get the LSQUIC shape and a K from their drop fraction at the
  largest buffer of the baseline-optimized runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from quiclab.sim.rcvbuf import skb_truesize_array

#: Minimum stall length (assumed): the receiver-stall model needs a scale;
#: 50 µs is a typical scheduler time slice remnant on an idle core.
STALL_MIN_S = 50e-6


@dataclass(frozen=True)
class StallFit:
    alpha: float
    k: float  # rate × τm^α / (α − 1), s^(α−1)·Hz
    rate_hz: float
    min_s: float
    rows: int
    source: str

    def drop_fraction(self, rcvbuf_bytes: float, arrival_Bps: float) -> float:
        x = rcvbuf_bytes / arrival_Bps
        return float(min(1.0, self.k * x ** (1.0 - self.alpha)))


def _frame(runs: pd.DataFrame) -> pd.DataFrame:
    df = runs[(runs["status"] == "ok") & runs["ack_packets"].notna()
              & runs["data_packets"].notna() & (runs["data_packets"] > 0)].copy()
    df["g"] = df["goodput_mbps"].fillna(df["goodput_reported_mbps"])
    df["drop_frac"] = df["client_udp_rcvbuf_errors"] / df["data_packets"]
    df["pkts_per_ack"] = df["data_packets"] / df["ack_packets"].clip(lower=1)
    payload = df["filesize_bytes"] / df["data_packets"]
    df["arrival_Bps"] = df["g"] * 1e6 / 8 / payload * skb_truesize_array(payload + 40)
    return df


def ack_frequency(runs: pd.DataFrame) -> tuple[dict[str, float], dict[str, float]]:
    """(per client, per 'server|client' pair) data packets per ACK, large buffers only."""
    df = _frame(runs)
    df = df[(df["rcvbuf_bytes"] >= 1_600_000) & (df["server_impl"] != "tcp+tls")]
    pair = df.groupby(["server_impl", "client_impl"])["pkts_per_ack"].median()
    pairs = {f"{s}|{c}": float(v) for (s, c), v in pair.items()}
    per_client = pair.groupby(level="client_impl").median()
    return {str(k): float(v) for k, v in per_client.items()}, pairs


def fit_stalls(runs: pd.DataFrame) -> dict[str, StallFit]:
    """Receiver stall parameters per client implementation (see module docstring)."""
    df = _frame(runs)
    df = df[df["server_impl"] != "tcp+tls"]
    fits: dict[str, StallFit] = {}
    buf = df[(df["experiment"] == "buffer") & (df["server_impl"] == df["client_impl"])]
    for client, d in buf.groupby("client_impl"):
        d = d[d["drop_frac"] > 0]
        if len(d) < 10:
            continue
        x = np.log(d["rcvbuf_bytes"] / d["arrival_Bps"])
        y = np.log(d["drop_frac"])
        # log p = log K + (1 − α)·log(B/r), least squares over all repetitions.
        slope, intercept = np.polyfit(x, y, 1)
        alpha = float(np.clip(1.0 - slope, 1.2, 8.0))
        k = float(np.exp(intercept))
        fits[str(client)] = StallFit(alpha, k, _rate(k, alpha), STALL_MIN_S, len(d),
                                     f"fit: buffer experiment, {client} pair, {len(d)} runs "
                                     f"(log drop fraction vs log buffer/arrival rate)")
    base = fits.get("lsquic")
    alpha0 = base.alpha if base else 2.0
    opt = df[(df["experiment"] == "baseline-optimized")]
    for client, d in opt.groupby("client_impl"):
        if str(client) in fits:
            continue
        frac = float(d["drop_frac"].median())
        x = float((d["rcvbuf_bytes"] / d["arrival_Bps"]).median())
        k = max(frac, 1e-7) / x ** (1.0 - alpha0)
        fits[str(client)] = StallFit(alpha0, k, _rate(k, alpha0), STALL_MIN_S, len(d),
                                     f"fit: baseline-optimized drop fraction {frac:.2e} at "
                                     f"6.5 MiB ({len(d)} runs), shape α from lsquic")
    return fits


def _rate(k: float, alpha: float) -> float:
    """Stall rate (Hz) from K = rate·τm^α/(α−1) with the assumed τm."""
    return k * (alpha - 1.0) / STALL_MIN_S**alpha
