"""The What-if page's numbers against values worked out by hand, not against another
call of the same engine.

The app tests' lsquic model (tests/app/appdata.py) costs the sender 3000 ns per
data packet, 500 ns per system call (no GSO: one packet per call) and 300 ns per
ACK received, one ACK per 2 packets (the default ACK frequency): 3650 ns; the
receiver 2500 + 500 + 300 / 2 = 3150 ns. The default Scenario (a 1500-byte path, 1400-byte UDP
payload, HTTP/3, 10 Gbit/s, an 8 GiB transfer) is sender-bound:
1359 goodput bytes (1400 − 40 QUIC overhead − 1 HTTP/3 framing byte) × 8 bits
/ 3650 ns = 2978.6 Mbit/s, with the sender 100 % busy and the receiver
3150 / 3650 = 86.3 %. Slow start is ~1e-5 of an 8 GiB transfer.
"""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from quiclab.app.whatif import GOODPUT_LABEL

from .test_whatif import metric, predictions

SENDER_NS = 3000 + 500 + 300 / 2
RECEIVER_NS = 2500 + 500 + 300 / 2
GOODPUT_MBPS = 1359 * 8 / SENDER_NS * 1e3  # 2978.6


def test_the_default_pair_shows_the_hand_computed_goodput_and_cpu(app: AppTest) -> None:
    app.run()
    assert not app.exception and not app.error
    row = predictions(app).iloc[0]
    assert row["pair"] == "lsquic → lsquic" and row["engine"] == "analytic"
    assert row["limit"] == "sender_cpu"
    assert row["goodput_mbps"] == pytest.approx(GOODPUT_MBPS, rel=1e-4)
    assert row["server_cpu_pct"] == pytest.approx(100.0, rel=1e-4)
    assert row["client_cpu_pct"] == pytest.approx(100 * RECEIVER_NS / SENDER_NS, rel=1e-4)
    assert metric(app, GOODPUT_LABEL) == "2,979 Mbit/s"
    assert metric(app, "Server CPU") == "100 %"
    assert metric(app, "Client CPU") == "86.3 %"


def test_a_cpu_twice_as_fast_doubles_the_goodput_on_the_page(app: AppTest) -> None:
    """``cpu_ghz`` 7.4 on the 3.7 GHz reference: every CPU cost halves (the CPU
    rule), so a sender-bound pair moves twice the goodput."""
    app.query_params.update({"cpu_ghz": "7.4"})
    app.run()
    assert not app.exception and not app.error
    row = predictions(app).iloc[0]
    assert row["goodput_mbps"] == pytest.approx(2 * GOODPUT_MBPS, rel=1e-4)
