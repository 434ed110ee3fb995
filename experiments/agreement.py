"""Do the three engines agree? A grid of pairs × RTT × loss × receive buffer.

Every cell is predicted by the analytic engine, the DES and ns-3. A cell
*agrees* when every engine's goodput is within :data:`TOLERANCE` (25 %) of the
others' median; a cell that does not must be explained by a mechanism one of
its Predictions names in ``Prediction.engine_specific`` (a mechanism the other
engines model differently or not at all). ``tests/experiments/test_agreement.py``
holds the grid to that; ``python -m quiclab.experiments.agreement`` prints it.

Mechanisms named so far (the engines set them; :func:`prefix_transient` is the
rule the DES and ns-3 share, in ``sim/engine.py``):

- ``loss-cycle-not-reached`` (DES, ns-3): a long transfer is simulated as a
  prefix and extrapolated; when the prefix's measurement window holds fewer
  than ``min_window_events`` congestion events even after it grew, the rate
  extrapolated is a transient. Rare loss events (receiver stalls that overflow
  a small buffer every few seconds) at a large window then leave the packet
  engines at the loss-free rate, while the analytic engine takes the average
  loss cycle of CUBIC, whose epoch at a window of thousands of packets lasts
  seconds (RFC 9438 §4.2: K = ∛(W_max·(1 − β)/C)).
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass
from typing import Any

from quiclab.sim.engine import prefix_transient

__all__ = ["grid", "judge", "prefix_transient", "run", "table"]

#: Engines within this fraction of their median agree.
TOLERANCE = 0.25
#: The grid of the test: pairs with distinct ACK, stall and window behaviour.
PAIRS = (("lsquic", "quiche"), ("ngtcp2", "ngtcp2"), ("quic-go", "quic-go"))
RTTS_MS = (0.0, 10.0, 40.0)
LOSSES_PCT = (0.0, 1.0)
RCVBUFS = (212_992, 4_194_304)
ENGINES = ("analytic", "des", "ns3")
#: Transfer per cell: long enough for a sawtooth at 1 % loss, short enough for a test.
TRANSFER_BYTES = 200_000_000


@dataclass(frozen=True)
class Cell:
    server: str
    client: str
    rtt_ms: float
    loss_pct: float
    rcvbuf_bytes: int

    def scenario(self, transfer_bytes: int = TRANSFER_BYTES) -> Any:
        from quiclab.sim.scenario import Scenario

        return Scenario(server=self.server, client=self.client, rtt_ms=self.rtt_ms,
                        loss_pct=self.loss_pct, rcvbuf_bytes=self.rcvbuf_bytes,
                        transfer_bytes=transfer_bytes)


def grid(pairs: tuple[tuple[str, str], ...] = PAIRS, rtts: tuple[float, ...] = RTTS_MS,
         losses: tuple[float, ...] = LOSSES_PCT,
         rcvbufs: tuple[int, ...] = RCVBUFS) -> list[Cell]:
    return [Cell(s, c, r, p, b) for (s, c), r, p, b in
            itertools.product(pairs, rtts, losses, rcvbufs)]


def judge(predictions: dict[str, Any]) -> dict[str, Any]:
    """One cell's verdict: goodput per engine, the largest deviation from their median,
    ``agree``, and the mechanisms the Predictions name (``explained`` if any)."""
    goodput = {e: p.goodput_mbps for e, p in predictions.items()}
    median = statistics.median(goodput.values())
    spread = max(abs(g / median - 1.0) for g in goodput.values()) if median > 0 else math.inf
    named = [f"{e}: {m}" for e, p in predictions.items() for m in p.engine_specific]
    return {**{f"{e}_mbps": round(g, 1) for e, g in goodput.items()},
            **{f"{e}_limit": p.limit for e, p in predictions.items()},
            "spread": round(spread, 3), "agree": spread <= TOLERANCE,
            "explained": bool(named), "mechanisms": named}


def run(cells: list[Cell], registry: Any, engines: tuple[str, ...] = ENGINES,
        transfer_bytes: int = TRANSFER_BYTES, log: Any = None) -> list[dict[str, Any]]:
    from quiclab.sim.engine import get_engine

    built = {e: get_engine(e, registry) for e in engines}
    rows = []
    for cell in cells:
        scenario = cell.scenario(transfer_bytes)
        preds = {e: eng.predict(scenario) for e, eng in built.items()}
        row = {"pair": f"{cell.server}→{cell.client}", "rtt_ms": cell.rtt_ms,
               "loss_pct": cell.loss_pct, "rcvbuf_bytes": cell.rcvbuf_bytes, **judge(preds)}
        rows.append(row)
        if log:
            log(row)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    import pandas as pd

    df = pd.DataFrame(rows)
    df["mechanisms"] = df["mechanisms"].map(lambda m: "; ".join(x.split(":")[0] + ":"
                                                               + x.split(":")[1] for x in m))
    return df.to_string(index=False)


def main() -> int:  # pragma: no cover - a report, the test covers run()
    from pathlib import Path

    from quiclab.models.registry import Registry

    registry = Registry.load(Path(__file__).resolve().parent.parent / "models" / "fitted")
    rows = run(grid(), registry, log=lambda r: print(r, flush=True))
    print(table(rows))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
