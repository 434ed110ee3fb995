"""The protocol and model constants every engine shares, each with its source.

One home, so that the analytic model, the DES and the Python side of the ns-3
engine cannot drift apart. (The ns-3 C++ sources, ``sim/ns3/*.cc``, keep their
own ``constexpr`` copies, cited to the same sections.)

- QUIC loss detection and congestion control: RFC 9002 (the constants are
  listed together in its Appendices A.2 and B.1);
- CUBIC: RFC 9438;
- the ACK-frequency cap and the busy-time rule that names a run's limit:
  ``sim/TRANSPORT.md``, the specification all three engines implement.
"""

from __future__ import annotations

# ---------------------------------------------------------------------------
# RFC 9002: loss detection (§6) and congestion control (§7)

#: RFC 9002 §6.1.1: kPacketThreshold — a packet is lost once a packet this many
#: packet numbers later is acknowledged.
PACKET_THRESHOLD = 3
#: RFC 9002 §6.1.2: kTimeThreshold — a packet is lost 9/8 × max(smoothed_rtt,
#: latest_rtt) after it was sent ...
TIME_THRESHOLD = 9.0 / 8.0
#: ... but never sooner than kGranularity (s), RFC 9002 §6.1.2; also the floor of
#: the PTO's variance term (§6.2.1).
GRANULARITY_S = 0.001
#: RFC 9002 §7.2: kInitialWindow — the TRANSPORT.md spec fixes it at 10 packets.
INITIAL_WINDOW_PACKETS = 10
#: RFC 9002 §7.2: kMinimumWindow = 2 × max_datagram_size.
MINIMUM_WINDOW_PACKETS = 2
#: RFC 9002 §7.3.2 / Appendix B.1: kLossReductionFactor = 0.5 for NewReno.
RENO_BETA = 0.5
#: RFC 9002 §7.6.1: kPersistentCongestionThreshold (PTOs).
PERSISTENT_CONGESTION_THRESHOLD = 3
#: RFC 9002 §7.7: pacing rate = N · cwnd / smoothed_rtt with N = 1.25.
PACING_GAIN = 1.25

# ---------------------------------------------------------------------------
# RFC 9438: CUBIC

#: RFC 9438 §5.1 (the constant of §4.1.1): C = 0.4 segments / s³.
CUBIC_C = 0.4
#: RFC 9438 §4.6: multiplicative decrease β_cubic = 0.7.
CUBIC_BETA = 0.7
#: RFC 9438 §4.3: α_cubic = 3 (1 − β) / (1 + β), the Reno-friendly additive increase.
CUBIC_ALPHA = 3.0 * (1.0 - CUBIC_BETA) / (1.0 + CUBIC_BETA)

# ---------------------------------------------------------------------------
# The engines' shared rules (sim/TRANSPORT.md)

#: TRANSPORT.md "Outputs": a resource busy at least this fraction of the time is
#: the limit; a CPU this busy is named rather than the pair's interplay (kempf24
#: §4.4: "server limited … with a server CPU usage above 95 %").
BUSY_LIMIT = 0.95
#: TRANSPORT.md "ACKs": the receiver's ACK threshold is capped at this fraction of
#: the sender's congestion window, in packets (draft-ietf-quic-ack-frequency).
ACK_WINDOW_FRACTION = 0.25
