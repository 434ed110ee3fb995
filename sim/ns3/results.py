"""Read one simulator run's JSON: window rates, extrapolation and the limit.

The binary prints its raw counters twice: at the start of the measurement
window (``warm``, after ``warm_fraction`` of the simulated bytes) and at the
end (``end``). Rates and utilisations that decide the limit come from the
window (steady state, no handshake or slow start); totals are the end
counters, extrapolated to the whole transfer when only a prefix was simulated.
"""

from __future__ import annotations

from typing import Any

from quiclab.errors import EngineError
from quiclab.sim.constants import BUSY_LIMIT
from quiclab.sim.resolve import Resolved


class RunResult:
    """One run's counters with the derived goodput, duration and window rates."""

    def __init__(self, data: dict[str, Any], transfer_bytes: int, data_start_s: float):
        self.data = data
        self.transfer_bytes = transfer_bytes
        self.completed: bool = bool(data["completed"])
        self.warm: dict[str, Any] = data["warm"]
        self.end: dict[str, Any] = data["end"]
        if self.end["consumed_bytes"] <= 0:
            raise EngineError(f"ns3 engine: no data delivered in {self.end['time_s']:.3g} s "
                              "of simulated time")
        if self.completed or self.warm["consumed_bytes"] <= 0:
            # A whole transfer is measured over its data phase, from the
            # request's arrival (1.5 RTT) to the end, as the DES does.
            self.warm = {k: (0 if not isinstance(v, dict) else dict.fromkeys(v, 0))
                         for k, v in self.end.items()}
            self.warm["time_s"] = min(data_start_s, 0.5 * float(self.end["time_s"]))

    # -- window ------------------------------------------------------------------
    @property
    def window_s(self) -> float:
        return float(self.end["time_s"] - self.warm["time_s"])

    def delta(self, name: str) -> float:
        return float(self.end[name] - self.warm[name])

    def state_s(self, state: str) -> float:
        return float(self.end["state_s"][state] - self.warm["state_s"][state])

    def window_util(self, side: str) -> float:
        """Cores busy on ``side`` ("sender" | "receiver") over the window."""
        return self.delta(f"{side}_busy_s") / self.window_s

    def link_util(self) -> float:
        return self.delta("link_busy_s") / self.window_s

    @property
    def window_rate_bps(self) -> float:
        return self.delta("consumed_bytes") * 8.0 / self.window_s

    # -- whole transfer ------------------------------------------------------------
    @property
    def remaining_bytes(self) -> int:
        return 0 if self.completed else self.transfer_bytes - int(self.end["consumed_bytes"])

    @property
    def duration_s(self) -> float:
        """Completion time (the client's view, handshake included), s."""
        if self.completed:
            return float(self.data["completion_s"])
        return float(self.end["time_s"]) + self.remaining_bytes * 8.0 / self.window_rate_bps

    @property
    def goodput_bps(self) -> float:
        return self.transfer_bytes * 8.0 / self.duration_s

    def extrapolated(self, name: str) -> float:
        """A counter for the whole transfer: simulated part + window rate × the rest."""
        value = float(self.end[name])
        if self.remaining_bytes > 0:
            value += self.delta(name) / self.delta("consumed_bytes") * self.remaining_bytes
        return value

    def notes(self) -> list[str]:
        out = []
        if self.data.get("stopped_by") == "time_limit":
            out.append(f"stopped at the simulated-time limit ({self.end['time_s']:.4g} s) "
                       "before the prefix was complete")
        if not self.completed:
            end = self.end
            out.append(
                f"simulated the first {end['consumed_bytes'] / 1e6:.1f} MB of "
                f"{self.transfer_bytes / 1e6:.1f} MB ({end['time_s']:.4g} s simulated) and "
                f"extrapolated at the steady-state {self.window_rate_bps / 1e6:.1f} Mbit/s of "
                f"its last {self.window_s:.4g} s "
                f"({self.delta('congestion_events'):.0f} congestion events)")
        return out


def limit_fractions(res: RunResult, r: Resolved) -> dict[str, float]:
    """Share of the window each resource was busy (CPUs per core) or blocked the sender."""
    events = res.delta("congestion_events")
    return {
        "link": res.link_util(),
        "sender_cpu": res.window_util("sender") / max(r.sender.cores, 1e-9),
        "receiver_cpu": res.window_util("receiver") / max(r.receiver.cores, 1e-9),
        "cwnd": res.state_s("cwnd") / res.window_s,
        "flow_control": res.state_s("flow_control") / res.window_s,
        "interop": res.state_s("interop") / res.window_s,
        "rcvbuf": res.delta("congestion_events_rcvbuf") / events if events > 0 else 0.0,
    }


def limit_of(fractions: dict[str, float]) -> str:
    """The limiting resource by TRANSPORT.md "Outputs" (the DES applies the same rule).

    A link or CPU busy ≥ 95 % of the window; else ``interop`` if the sender
    was either working or held off by the pair interplay (TRANSPORT.md "Pair
    interplay": it would be CPU-bound without the hold); else ``rcvbuf`` if
    receive-buffer drops started most congestion events; else the state that
    blocked the sender more than half of the time; else whatever was busiest.
    """
    for name in ("link", "sender_cpu", "receiver_cpu"):
        if fractions[name] >= BUSY_LIMIT:
            return name
    if fractions["interop"] > 0.02 and \
            fractions["sender_cpu"] + fractions["interop"] >= BUSY_LIMIT:
        return "interop"
    if fractions["rcvbuf"] > 0.5:
        return "rcvbuf"
    for name in ("cwnd", "flow_control", "interop"):
        if fractions[name] > 0.5:
            return name
    candidates = {k: v for k, v in fractions.items() if k != "rcvbuf"}
    return max(candidates, key=lambda k: candidates[k])
