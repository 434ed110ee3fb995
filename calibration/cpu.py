"""Stage A: per-packet and per-ACK CPU cost from runs that recorded CPU time.

For every run with pidstat and netstat counters, the CPU time one side spent
per data packet is regressed on the ACK ratio (ACK packets per data packet):

    sender_cpu_s / data_packets     = c_packet[cipher] + c_ack · acks / data_packets
    receiver_cpu_s / packets_recv   = d_packet[cipher] + d_ack · acks / packets_recv

with one intercept per cipher and a shared ACK slope, fitted per
implementation with a robust M-estimator (statsmodels RLM, Huber's T): a few
runs with scheduler hiccups should not pull the fit. The statsmodels results
are kept in ``results_`` for ``summary()``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class CostEstimate:
    """ns on the dataset's CPU, with a 95 % interval and the rows used."""

    value: float
    lo: float
    hi: float
    n: int
    rows: str


class CpuCostEstimator:
    """Fit per-packet and per-ACK costs per implementation and role (sklearn-style)."""

    def __init__(self, min_runs: int = 20, ack_floor_ns: float = 200.0):
        self.min_runs = min_runs
        # An ACK is at least a system call and a decryption: never cheaper than this.
        self.ack_floor_ns = ack_floor_ns

    def fit(self, runs: pd.DataFrame) -> CpuCostEstimator:
        import statsmodels.api as sm
        import statsmodels.formula.api as smf

        df = runs[(runs["status"] == "ok") & runs["server_cpu_s"].notna()
                  & runs["data_packets"].notna() & (runs["server_impl"] == runs["client_impl"])
                  & (runs["server_build"].fillna("") == "")].copy()
        df = df[~df["server_impl"].isin(("tcp+tls", "tcp"))]  # kernel TCP: calibration/tcp.py
        df["sender_us"] = df["server_cpu_s"] / df["data_packets"] * 1e6
        df["receiver_us"] = df["client_cpu_s"] / df["client_udp_received"] * 1e6
        df["ack_ratio_s"] = df["ack_packets"] / df["data_packets"]
        df["ack_ratio_r"] = df["ack_packets"] / df["client_udp_received"]
        self.costs_: dict[tuple[str, str], dict[str, CostEstimate]] = {}
        self.results_: dict[tuple[str, str], object] = {}
        self.residual_sd_: dict[tuple[str, str], float] = {}
        for impl, group in df.groupby("server_impl"):
            for role, y, x in (("sender", "sender_us", "ack_ratio_s"),
                               ("receiver", "receiver_us", "ack_ratio_r")):
                d = group[[y, x, "cipher", "run_id"]].replace([np.inf, -np.inf], np.nan).dropna()
                if len(d) < self.min_runs:
                    continue
                d = d.rename(columns={y: "y", x: "acks"})
                model = smf.rlm("y ~ C(cipher) + acks - 1", d, M=sm.robust.norms.HuberT())
                res = model.fit()
                self.results_[(str(impl), role)] = res
                ci = res.conf_int(0.05)
                out: dict[str, CostEstimate] = {}
                rows = (f"runs where server_impl = client_impl = '{impl}' with CPU samples "
                        f"({len(d)} runs)")
                for name in res.params.index:
                    v, lo, hi = (float(res.params[name]) * 1e3, float(ci.loc[name, 0]) * 1e3,
                                 float(ci.loc[name, 1]) * 1e3)
                    if name == "acks":
                        key = "ns_per_ack"
                        v = max(v, self.ack_floor_ns)
                        lo, hi = max(lo, self.ack_floor_ns * 0.5), max(hi, v)
                    else:
                        key = "ns_per_packet." + name.split("[")[1].rstrip("]")
                        n = int((d["cipher"] == key.split(".")[1]).sum())
                    out[key] = CostEstimate(v, min(lo, v), max(hi, v), n if key != "ns_per_ack"
                                            else len(d), rows)
                self.costs_[(str(impl), role)] = out
                self.residual_sd_[(str(impl), role)] = float(np.std(res.resid))
        return self

    def summary(self) -> str:
        lines = []
        for (impl, role), res in sorted(self.results_.items()):
            lines.append(f"== {impl} {role}: µs per data packet ~ cipher + ACK ratio (RLM, Huber)")
            lines.append(str(res.summary()))  # type: ignore[attr-defined]
        return "\n".join(lines)

    def table(self) -> pd.DataFrame:
        rows = []
        for (impl, role), costs in sorted(self.costs_.items()):
            for name, est in costs.items():
                rows.append({"implementation": impl, "role": role, "parameter": name,
                             "ns": est.value, "lo": est.lo, "hi": est.hi, "runs": est.n})
        return pd.DataFrame(rows)
