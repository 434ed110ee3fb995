"""Engines side by side: where analytic, DES and ns-3 disagree, and why.

Two engines *disagree* on a scenario when their predictive bands do not
overlap (an engine without a band is its point). The note then names the
limit each engine found, in plain words, how that engine models it
(:data:`HOW`), and what the engine itself says it models differently
(``Prediction.engine_specific`` where the engines write it; the prefix a packet
engine simulated otherwise), with a link that opens the scenario on the
What-if page with all three engines.

Pure functions without Streamlit, so they are tested directly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlencode

from quiclab.app.charts import pair_label, three_digits
from quiclab.app.labels import limit_name
from quiclab.app.urlstate import Selection, encode
from quiclab.sim.prediction import Prediction

#: How each engine models each limit (TRANSPORT.md; sim/analytic): what the numbers
#: of one engine rest on, so that a reader sees where the other's differ.
HOW = {
    ("analytic", "sender_cpu"): "one core's packet rate from the cost model, closed form",
    ("analytic", "receiver_cpu"): "one core's packet rate from the cost model, closed form",
    ("analytic", "link"): "the link rate less the framing",
    ("analytic", "cwnd"): "the mean rate of an average loss cycle (Mathis; CUBIC's cycle, "
                          "RFC 9438) from the loss rate and RTT",
    ("analytic", "rcvbuf"): "the expected receive-buffer overflows as loss events of an "
                            "average loss cycle, even where the transfer sees few of them",
    ("analytic", "flow_control"): "the flow-control window per RTT",
    ("analytic", "interop"): "the fitted busy fraction of the slower side",
    ("analytic", "concurrency"): "a closed queueing loop (Little's law)",
    ("analytic", "handshake"): "handshake CPU and round trips, closed form",
    ("packet", "sender_cpu"): "CPU servers working off each packet and ACK in simulated time",
    ("packet", "receiver_cpu"): "CPU servers working off each packet and ACK in simulated "
                                "time",
    ("packet", "link"): "packets serialised at the link rate through the bottleneck queue",
    ("packet", "cwnd"): "CUBIC/Reno and RFC 9002 recovery on each simulated loss, over the "
                        "simulated part of the transfer",
    ("packet", "rcvbuf"): "the socket buffer filling and dropping datagrams as they arrive",
    ("packet", "flow_control"): "MAX_DATA credit returned as the receiver consumes",
    ("packet", "interop"): "the sender's loop idling after each send by the fitted "
                           "interplay fraction (TRANSPORT.md, Pair interplay)",
    ("packet", "concurrency"): "requests in flight simulated one by one",
    ("packet", "handshake"): "handshakes simulated one by one",
}
ENGINE_NAMES = {"analytic": "the analytic engine", "des": "the DES", "ns3": "ns-3"}


def how(engine: str, limit: str) -> str:
    """How ``engine`` models ``limit`` (one phrase)."""
    kind = "analytic" if engine == "analytic" else "packet"
    return HOW.get((kind, limit), "its own model of it")


def band(p: Prediction) -> tuple[float, float]:
    """The prediction's band (its point where it has none)."""
    lo, hi = p.goodput_lo_mbps, p.goodput_hi_mbps
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return p.goodput_mbps, p.goodput_mbps
    return min(lo, p.goodput_mbps), max(hi, p.goodput_mbps)


def disagree(a: Prediction, b: Prediction) -> bool:
    """Whether the two bands do not overlap."""
    a_lo, a_hi = band(a)
    b_lo, b_hi = band(b)
    return a_hi < b_lo or b_hi < a_lo


@dataclass(frozen=True)
class Disagreement:
    """Two engines' predictions of one scenario whose bands do not overlap."""

    first: Prediction
    second: Prediction
    link: str

    @property
    def pair(self) -> str:
        s = self.first.scenario
        return pair_label(s.server, s.client)

    @property
    def ratio(self) -> float:
        lo, hi = sorted((self.first.goodput_mbps, self.second.goodput_mbps))
        return hi / lo if lo > 0 else math.inf

    def text(self) -> str:
        """Markdown: the two answers, their limits and how each engine reaches its own."""
        parts = []
        for p in (self.first, self.second):
            lo, hi = band(p)
            parts.append(f"{ENGINE_NAMES.get(p.engine, p.engine)} "
                         f"**{three_digits(p.goodput_mbps)} Mbit/s** "
                         f"(band {three_digits(lo)} … {three_digits(hi)}), limited by "
                         f"**{limit_name(p.limit)}** (`{p.limit}`)")
        lines = [f"**{self.pair}**: " + " vs ".join(parts)
                 + f" — ×{self.ratio:.2g} apart, bands do not overlap."]
        for p in (self.first, self.second):
            lines.append(f"- {ENGINE_NAMES.get(p.engine, p.engine)} models "
                         f"{limit_name(p.limit)} as {how(p.engine, p.limit)}.")
            for mechanism in _specific(p):
                lines.append(f"  - {mechanism}")
        lines.append(f"- [open this scenario with all three engines]({self.link})")
        return "\n".join(lines)


def _specific(p: Prediction) -> list[str]:
    """What the engine says it models differently: ``engine_specific`` where engines
    write it, else the note of a packet engine's simulated prefix."""
    named = list(getattr(p, "engine_specific", ()) or ())
    if named:
        return named
    return [n for n in p.notes if n.startswith("simulated the first")]


def scenario_link(p: Prediction, engines: Sequence[str] = ("analytic", "des", "ns3")) -> str:
    """A relative URL opening ``p``'s scenario on the What-if page with ``engines``."""
    s = p.scenario
    params = encode(Selection(s, (s.server,), (s.client,), tuple(engines)), "whatif")
    return "?" + urlencode(params)


def disagreements(predictions: Sequence[Prediction]) -> list[Disagreement]:
    """Every pair of engines whose bands do not overlap on the same scenario (compared
    by scenario key), the analytic engine first, largest ratio first."""
    by_key: dict[str, list[Prediction]] = {}
    for p in predictions:
        by_key.setdefault(p.scenario.key(), []).append(p)
    order = {"analytic": 0, "des": 1, "ns3": 2}
    found = []
    for group in by_key.values():
        group = sorted(group, key=lambda p: order.get(p.engine, 9))
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                if a.engine != b.engine and disagree(a, b):
                    found.append(Disagreement(a, b, scenario_link(a)))
    return sorted(found, key=lambda d: -d.ratio)
