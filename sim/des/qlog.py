"""qlog of a DES run: the sender's view, in the format real stacks write.

``DesEngine(registry, qlog_path=PATH)`` writes one JSON-SEQ trace (``.sqlog``,
RFC 7464 records; qlog 0.3 event names, as quiche and ngtcp2 write them) from
the sender's vantage point — the server of a download, as a real server's
qlog is — so that a simulated run and a fresh one open side by side in qvis
and load in the same ingest (``quiclab.datasets.qlog``):

- ``transport:packet_sent`` per data packet (pn, size, its STREAM frame);
- ``transport:packet_received`` per ACK frame the sender processes (ranges and
  ACK delay; one ACK frame may stand for several ACK packets at batch
  granularity, so qlog is written at packet granularity only);
- ``recovery:metrics_updated`` after each ACK and each congestion event (cwnd,
  bytes in flight, ssthresh, smoothed/latest/min RTT and variation, pacing rate);
- ``recovery:packet_lost`` with trigger ``reordering_threshold`` (RFC 9002
  §6.1.1) or ``time_threshold`` (§6.1.2); ``recovery:congestion_state_updated``
  (slow_start, congestion_avoidance, recovery); ``recovery:loss_timer_updated``
  when a PTO fires.

Size is bounded: after ``max_events`` events only the recovery events (metrics,
losses, states) are written, up to ``2 × max_events`` in all; the trace's
description says where it was cut. Times are milliseconds since the start of
the simulation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

#: Events written at most, in all and of packet events (see the module docstring).
DEFAULT_MAX_EVENTS = 200_000
RS = "\x1e"


class QlogWriter:
    """Writes the sender's events to ``path`` (see the module docstring)."""

    def __init__(self, path: Path | str, title: str, description: str = "",
                 max_events: int = DEFAULT_MAX_EVENTS, vantage: str = "server"):
        if max_events < 1:
            raise ValueError(f'"qlog_max_events" must be ≥ 1, got {max_events!r}')
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.max_events = max_events
        self.events = 0
        self.packet_events_dropped = 0
        self.state = "slow_start"
        self.recovery_start_s = -1.0
        #: Send time of packets not yet acknowledged (pn → s), to tell when recovery
        #: ends (RFC 9002 §7.3.2: a packet sent after it began is acknowledged).
        self._sent_s: dict[int, float] = {}
        self._last_metrics: tuple[float, ...] = ()
        self._out: IO[str] = open(self.path, "w", encoding="utf-8")  # noqa: SIM115
        header = {
            "qlog_version": "0.3", "qlog_format": "JSON-SEQ", "title": title,
            "description": description,
            "trace": {"title": title, "description": description,
                      "vantage_point": {"type": vantage, "name": "quiclab DES"},
                      "common_fields": {"time_format": "relative", "reference_time": 0.0,
                                        "protocol_type": ["QUIC"]}},
        }
        self._out.write(RS + json.dumps(header) + "\n")
        #: Events as (time, order, JSON), written in time order at close: the sender
        #: runs ahead of the clock, so a paced packet's send time can follow an ACK
        #: processed later in the loop (bounded by ``max_events``).
        self._buffer: list[tuple[float, int, str]] = []

    # ------------------------------------------------------------ writing
    def _emit(self, t_s: float, name: str, data: dict[str, Any], packet: bool) -> None:
        limit = self.max_events if packet else 2 * self.max_events
        if self.events >= limit:
            if packet:
                self.packet_events_dropped += 1
            return
        self.events += 1
        self._buffer.append((t_s, self.events, json.dumps(
            {"time": round(t_s * 1e3, 6), "name": name, "data": data}, separators=(",", ":"))))

    def sent(self, t_s: float, pn: int, size: int, sid: int, off: int, length: int) -> None:
        self._sent_s[pn] = t_s
        self._emit(t_s, "transport:packet_sent", {
            "header": {"packet_type": "1RTT", "packet_number": pn},
            "raw": {"length": size},
            "frames": [{"frame_type": "stream", "stream_id": sid, "offset": off,
                        "length": length}]}, True)

    def ack(self, t_s: float, ranges: Any, delay_s: float, sender: Any) -> None:
        """An ACK frame processed at ``t_s``; then the metrics the sender holds."""
        if ranges:
            largest = ranges[0][1]
            sent_s = self._sent_s.get(largest)
            for pn in [p for p in self._sent_s if p <= largest]:
                del self._sent_s[pn]
            self._emit(t_s, "transport:packet_received", {
                "header": {"packet_type": "1RTT"},
                "frames": [{"frame_type": "ack", "ack_delay": round(delay_s * 1e3, 6),
                            "acked_ranges": [[lo, hi] for lo, hi in reversed(ranges)]}]},
                True)
            if (self.state == "recovery" and sent_s is not None
                    and sent_s > self.recovery_start_s):
                self._state(t_s, "congestion_avoidance", "packet_acked")
        if self.state == "slow_start" and sender.cc.cwnd >= sender.cc.ssthresh:
            self._state(t_s, "congestion_avoidance", "ssthresh")
        self.metrics(t_s, sender)

    def lost(self, t_s: float, pn: int, size: int, by_packets: bool) -> None:
        self._sent_s.pop(pn, None)
        self._emit(t_s, "recovery:packet_lost", {
            "header": {"packet_type": "1RTT", "packet_number": pn}, "raw": {"length": size},
            "trigger": "reordering_threshold" if by_packets else "time_threshold"}, False)

    def congestion(self, t_s: float, sender: Any) -> None:
        self.recovery_start_s = t_s
        self._state(t_s, "recovery", "packet_lost")
        self.metrics(t_s, sender)

    def pto(self, t_s: float, count: int) -> None:
        self._emit(t_s, "recovery:loss_timer_updated", {
            "timer_type": "pto", "event_type": "expired", "pto_count": count}, False)

    def _state(self, t_s: float, new: str, trigger: str) -> None:
        if new != self.state:
            self._emit(t_s, "recovery:congestion_state_updated",
                       {"old": self.state, "new": new, "trigger": trigger}, False)
            self.state = new

    def metrics(self, t_s: float, sender: Any) -> None:
        cc, rtt = sender.cc, sender.rtt
        values = (cc.cwnd, float(sender.inflight), cc.ssthresh, rtt.smoothed, rtt.latest,
                  rtt.min, rtt.var)
        if values == self._last_metrics:
            return
        self._last_metrics = values
        data: dict[str, Any] = {
            "congestion_window": round(cc.cwnd), "bytes_in_flight": int(sender.inflight),
            "smoothed_rtt": round(rtt.smoothed * 1e3, 6), "latest_rtt": round(rtt.latest * 1e3, 6),
            "min_rtt": round(rtt.min * 1e3, 6), "rtt_variance": round(rtt.var * 1e3, 6)}
        if cc.ssthresh < 1e18:
            data["ssthresh"] = round(cc.ssthresh)
        if sender.pacing and rtt.smoothed > 0:
            data["pacing_rate"] = round(1.25 * cc.cwnd / rtt.smoothed * 8)
        self._emit(t_s, "recovery:metrics_updated", data, False)

    def close(self) -> str:
        """Close the file; a note for the Prediction."""
        if not self._out.closed:
            self._buffer.sort()
            self._out.writelines(RS + text + "\n" for _, _, text in self._buffer)
            self._buffer = []
            self._out.close()
        cut = (f", {self.packet_events_dropped} packet events past the bound left out"
               if self.packet_events_dropped else "")
        return f"qlog: {self.events} events written to {self.path}{cut}"
