"""Crypto cost per packet from Mukherjee et al. 2025, Table 3.

The table gives the latency of encrypting (and decrypting) 9000 bytes passed
to OpenSSL's AEAD in units of 1500, 3000, 4500 and 9000 bytes. Per unit of
``S`` bytes the cost is a fixed part (cipher initialisation per packet,
§2.3) plus a per-byte part::

    latency(n units of S) = n · (ns_per_packet + ns_per_byte · S)

fitted by weighted least squares on relative error (statsmodels WLS with
weights 1/latency², so that the small 9000-byte latencies count as much as
the large 1500-byte ones). Ceilings follow: a single core can encrypt at most
``S·8 / (ns_per_packet + ns_per_byte·S)`` Gbit/s — 14.1 at 1500 B and 27.9 at
9000 B in the paper.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

#: The CPU Table 3 was measured on (§5: all results before §5 on the x1170 pair).
TABLE3_CPU = "Intel Xeon E5-2640 v4"


@dataclass(frozen=True)
class CryptoFit:
    op: str  # "encrypt" | "decrypt"
    ns_per_packet: float
    ns_per_byte: float
    ns_per_packet_ci: tuple[float, float]
    ns_per_byte_ci: tuple[float, float]
    points: tuple[str, ...]
    table: pd.DataFrame  # unit bytes, units, observed ns, predicted ns, error %

    def latency_ns(self, unit_bytes: float, units: float) -> float:
        return units * (self.ns_per_packet + self.ns_per_byte * unit_bytes)

    def ceiling_gbps(self, unit_bytes: float) -> float:
        return unit_bytes * 8 / (self.ns_per_packet + self.ns_per_byte * unit_bytes)


def table3_rows(points: pd.DataFrame) -> pd.DataFrame:
    """Rows of Table 3 from the published points: op, unit bytes, units, latency (ns)."""
    rows = []
    for r in points.itertuples(index=False):
        if r.locator != "Table 3" or r.quantity != "latency":
            continue
        cond = str(r.conditions)
        op = re.search(r"op=(\w+)", cond)
        unit = re.search(r"unit=(\d+) B x (\d+)", cond)
        if not op or not unit:
            continue
        rows.append({"point_id": r.point_id, "op": op.group(1), "unit_bytes": int(unit.group(1)),
                     "units": int(unit.group(2)), "ns": float(r.value)})
    return pd.DataFrame(rows)


def fit_table3(points: pd.DataFrame) -> dict[str, CryptoFit]:
    """Fit encryption and decryption totals of Table 3 (see module docstring)."""
    import statsmodels.api as sm

    rows = table3_rows(points)
    fits: dict[str, CryptoFit] = {}
    for op, name in (("encrypt_total", "encrypt"), ("decrypt_total", "decrypt")):
        d = rows[rows["op"] == op]
        if len(d) < 3:
            continue
        X = np.column_stack([d["units"], d["units"] * d["unit_bytes"]]).astype(float)
        y = d["ns"].to_numpy(float)
        res = sm.WLS(y, X, weights=1.0 / y**2).fit()
        ci = res.conf_int(0.05)
        pred = X @ res.params
        table = pd.DataFrame({"point_id": d["point_id"].to_numpy(),
                              "unit_bytes": d["unit_bytes"].to_numpy(),
                              "units": d["units"].to_numpy(), "observed_ns": y,
                              "predicted_ns": pred, "error_pct": (pred / y - 1) * 100})
        fits[name] = CryptoFit(name, float(res.params[0]), float(res.params[1]),
                               (float(ci[0, 0]), float(ci[0, 1])),
                               (float(ci[1, 0]), float(ci[1, 1])),
                               tuple(d["point_id"]), table)
    return fits
