"""Plain-language names and number formats shared by the app's pages.

The engines name the limiting resource by a code (``sender_cpu``, ``rcvbuf``,
``interop``, :data:`quiclab.sim.prediction.LIMITS`); the pages show a phrase a
networking researcher reads at once, and keep the code in a tooltip so that it
can be looked up (``sim/TRANSPORT.md``, "Outputs"). CPU is always shown as a
percentage of one core (200 % = two cores busy), as the catalog stores it
(``*_cpu_pct``); headroom far above the limit as a factor (×198), not as
``+19747 %``.
"""

from __future__ import annotations

import math
from os import PathLike
from pathlib import Path, PurePosixPath

#: Limit and resource code → plain name (what the sentence "limited by …" ends with).
LIMIT_NAMES = {
    "sender_cpu": "server CPU (sender)",
    "receiver_cpu": "client CPU (receiver)",
    "link": "link rate",
    "cwnd": "congestion window",
    "flow_control": "flow-control window",
    "rcvbuf": "receive-buffer drops",
    "interop": "pair interplay",
    "handshake": "handshakes",
    "concurrency": "requests in flight",
}
#: What each limit means, one sentence (the tooltip's second half).
LIMIT_EXPLAINED = {
    "sender_cpu": "the server's CPU is busy all the time sending",
    "receiver_cpu": "the client's CPU is busy all the time receiving",
    "link": "the bottleneck link is full",
    "cwnd": "congestion control (loss and RTT) holds the sender back",
    "flow_control": "the receiver's flow-control window / RTT caps the rate",
    "rcvbuf": "the client's UDP socket buffer overflows; its drops act as losses",
    "interop": "this pair's ACK and flow-control interplay leaves both CPUs partly idle "
               "(seed 002 §4.3), fitted per testbed",
    "handshake": "new connections' handshakes take the time",
    "concurrency": "too few requests in flight for the round trips they wait",
}


def limit_name(code: str) -> str:
    """The plain name of a limit code; an unknown code is shown as it is."""
    return LIMIT_NAMES.get(code, code)


def limit_help(code: str) -> str:
    """Tooltip text: the meaning and the engine's own name (``sender_cpu``)."""
    meaning = LIMIT_EXPLAINED.get(code)
    return (f"{meaning} — engine name `{code}`" if meaning else f"engine name `{code}`")


def headroom_text(headroom: float) -> str:
    """How much more goodput a resource would allow: ``+19 %`` below ×2, ``×2.5``
    from there on, ``×198`` above ×100 (``∞`` when unbounded)."""
    if not math.isfinite(headroom):
        return "∞"
    factor = 1.0 + headroom
    if factor < 2.0:
        return f"{headroom * 100:+.0f} %"
    return f"×{factor:.2g}" if factor < 100 else f"×{factor:,.0f}"


def cpu_pct_text(cores: float) -> str:
    """CPU busy (in cores) as a percentage of one core: ``86.3 %``, ``100 %``, ``—``."""
    if not math.isfinite(cores):
        return "—"
    pct = cores * 100.0
    return f"{pct:,.0f} %" if pct == 0 or abs(pct) >= 100 else f"{pct:.3g} %"


def place(path: str | PathLike[str], data_dir: str | PathLike[str]) -> str:
    """Where a file is, without the machine's own folders in the page (a screenshot or
    a shared page should not carry them): under the data dir as ``<data dir>/…`` (the
    folder ``--data-dir`` / ``QUICLAB_DATA_DIR`` names), else its name alone."""
    target, root = Path(path), Path(data_dir)
    try:
        return str(PurePosixPath("<data dir>", *target.relative_to(root).parts))
    except ValueError:
        return target.name
