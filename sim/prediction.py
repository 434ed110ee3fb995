"""The Prediction: what every engine returns for one Scenario.

Flat fields (so that a batch becomes a table row and a DuckDB ``predictions``
row without translation), units in the names. The bulk data flows server →
client, so "sender" is the server and "receiver" the client.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from quiclab.sim.scenario import Scenario

#: The resources an engine can name as the limit. ``interop`` is the pair's
#: ACK/flow-control interplay that leaves both CPUs partly idle (seed 002 §4.3:
#: LSQUIC server + quiche client at ~70 % CPU on both sides).
LIMITS = (
    "sender_cpu",
    "receiver_cpu",
    "link",
    "cwnd",
    "flow_control",
    "rcvbuf",
    "interop",
    "handshake",
    # Request workloads (sim/request_costs.py): too few requests in flight for the round
    # trips they wait (closed loop, Little's law).
    "concurrency",
)


@dataclass(frozen=True)
class Prediction:
    """Predicted outcome of one Scenario by one engine.

    ``rates_mbps`` holds, for every resource the engine evaluated, the goodput
    that resource alone would allow; ``headroom`` is ``rate / goodput − 1`` for
    each (0 for the limit). CPU utilisations are in cores (1.0 = one core busy).

    ``goodput_lo_mbps``/``goodput_hi_mbps`` is the predictive interval at
    ``interval_level``: where the measured goodput is expected, model error
    included (learned from held-out residuals, :mod:`quiclab.models.intervals`;
    ``interval_source`` says which). ``param_lo_mbps``/``param_hi_mbps`` is the
    narrower interval of the fitted parameters alone. ``extrapolated`` names,
    in one line, each field on which the Scenario lies outside the evidence of
    its models and pair, and how far ('' inside; :mod:`quiclab.models.domain`).
    """

    scenario: Scenario
    engine: str
    engine_version: str
    goodput_mbps: float
    limit: str
    goodput_lo_mbps: float = float("nan")
    goodput_hi_mbps: float = float("nan")
    interval_level: float = float("nan")
    param_lo_mbps: float = float("nan")
    param_hi_mbps: float = float("nan")
    extrapolated: str = ""
    interval_source: str = ""
    duration_s: float = float("nan")
    rates_mbps: dict[str, float] = field(default_factory=dict)
    server_cpu_util: float = float("nan")
    client_cpu_util: float = float("nan")
    server_cpu_s: float = float("nan")
    client_cpu_s: float = float("nan")
    server_packets_sent: float = float("nan")
    server_packets_received: float = float("nan")
    client_packets_sent: float = float("nan")
    client_packets_received: float = float("nan")
    acks: float = float("nan")
    losses: float = float("nan")
    retransmissions: float = float("nan")
    rcvbuf_drops: float = float("nan")
    server_syscalls: float = float("nan")
    client_syscalls: float = float("nan")
    # Request workloads (sim/request_costs.py); NaN for bulk transfers.
    requests_per_s: float = float("nan")
    completion_s: float = float("nan")
    latency_p50_ms: float = float("nan")
    latency_p99_ms: float = float("nan")
    #: Provenance: model files and versions, CPU scaling rule, seed.
    model_versions: dict[str, str] = field(default_factory=dict)
    cpu_rule: str = ""
    notes: tuple[str, ...] = ()
    #: Mechanisms that decide this prediction and that the other engines model
    #: differently or not at all, each "name: what" (experiments/agreement.py): where
    #: the engines disagree on a Scenario, these say why. Empty when none applies.
    engine_specific: tuple[str, ...] = ()
    timeseries: dict[str, list[float]] | None = None

    def __post_init__(self) -> None:
        if self.limit not in LIMITS:
            raise ValueError(f"limit={self.limit!r} is not one of {', '.join(LIMITS)}")
        if not (self.goodput_mbps >= 0) or math.isinf(self.goodput_mbps):
            raise ValueError(f"goodput_mbps={self.goodput_mbps!r} must be a finite number ≥ 0")

    @property
    def headroom(self) -> dict[str, float]:
        """For every evaluated resource, how much more goodput it would allow (fraction)."""
        g = self.goodput_mbps
        if g <= 0:
            return {k: math.inf for k in self.rates_mbps}
        return {k: v / g - 1.0 for k, v in self.rates_mbps.items()}

    def to_dict(self, timeseries: bool = False) -> dict[str, Any]:
        """A JSON-safe dict: scenario fields prefixed ``scenario.``; NaN becomes None."""
        data = asdict(self)
        data.pop("scenario")
        if not timeseries:
            data.pop("timeseries")
        data["headroom"] = self.headroom
        data["scenario"] = self.scenario.to_dict()
        data["scenario_key"] = self.scenario.key()
        return _json_safe(data)

    def to_row(self) -> dict[str, Any]:
        """A flat row for tables: scenario fields, scalar outputs, dicts as JSON text."""
        row: dict[str, Any] = dict(self.scenario.to_dict())
        row["scenario_key"] = self.scenario.key()
        for key, value in asdict(self).items():
            if key in ("scenario", "timeseries"):
                continue
            if isinstance(value, dict | tuple | list):
                row[key] = json.dumps(_json_safe(value), sort_keys=True)
            else:
                row[key] = value
        return row

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return None if not math.isfinite(value) else value
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value
