"""The compiled DES hot path (mypyc, ``quiclab.sim.des.native``) against the pure-Python one.

Both builds run the same source, so every Prediction must be the same bit for
bit. The comparison runs a set of scenarios in a subprocess with the build this
process selected and in one with ``QUICLAB_DES_PURE=1``; it is skipped unless
the compiled build runs (no build, or sources edited since it, would compare
pure Python with itself), and then only the selection is checked.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from quiclab.sim.des import native

#: Runs the scenarios of ``_cases()`` and prints one JSON object (name → fields).
SCRIPT = r"""
import dataclasses, json, math, sys
sys.path.insert(0, sys.argv[1])
from test_des_native import _cases
from quiclab.sim.des import native
out = {"status": native.STATUS}
for name, engine, scenario in _cases():
    p = dataclasses.asdict(engine.predict(scenario))
    p.pop("scenario")
    out[name] = p
print(json.dumps(out, default=repr))
"""


def _cases() -> list[tuple[str, Any, Any]]:
    """Packet and batch granularity over the mechanisms the hot path has branches for."""
    from quiclab.models.testing import synthetic_model, synthetic_registry
    from quiclab.sim.des import DesEngine
    from quiclab.sim.scenario import Scenario

    reg = synthetic_registry(
        synthetic_model("plain", sender_ns=1000, receiver_ns=800),
        synthetic_model("gso", sender_ns=1500, receiver_ns=1200, syscall_ns=3000, ack_ns=400,
                        supports_gso=True, supports_gro=True),
        synthetic_model("nopace", sender_ns=1500, receiver_ns=1200, ack_ns=400, pacing=False,
                        supports_gso=True, supports_gro=True),
        synthetic_model("cores", sender_ns=3000, receiver_ns=4000, cores=2.5, ack_ns=300),
        synthetic_model("stall", sender_ns=1000, receiver_ns=900, rx_stall_rate_hz=500.0,
                        rx_stall_min_us=300.0, rx_stall_alpha=1.8, supports_gro=True),
        synthetic_model("window", sender_ns=1000, receiver_ns=800, fc_window_bytes=256 * 1024),
    )
    mb = 1_000_000
    scenarios = {
        "link": Scenario(server="plain", client="plain", transfer_bytes=20 * mb),
        "gso-loss-reorder": Scenario(server="gso", client="gso", rtt_ms=1.0, loss_pct=0.2,
                                     reorder_pct=0.5, transfer_bytes=20 * mb),
        "nopace-reno-queue": Scenario(server="nopace", client="nopace", cc="reno",
                                      link_gbps=1.0, queue_bdp=0.3, rtt_ms=2.0,
                                      transfer_bytes=20 * mb),
        "cores": Scenario(server="cores", client="cores", rtt_ms=0.5, transfer_bytes=20 * mb),
        "stall-streams": Scenario(server="stall", client="stall", rcvbuf_bytes=262144,
                                  reorder_pct=2.0, streams=3, chunks=6,
                                  transfer_bytes=20 * mb),
        "window": Scenario(server="window", client="window", rtt_ms=10.0,
                           transfer_bytes=10 * mb),
    }
    out = []
    for granularity in ("packet", "batch"):
        engine = DesEngine(reg, granularity=granularity, max_packets=5000)
        for name, s in scenarios.items():
            out.append((f"{name}:{granularity}", engine, s))
    out.append(("link:timeseries", DesEngine(reg, timeseries=True, timeseries_interval_s=0.002),
                scenarios["gso-loss-reorder"].with_(transfer_bytes=5 * mb)))
    return out


def _run(pure: bool) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop(native.ENV_PURE, None)
    if pure:
        env[native.ENV_PURE] = "1"
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(Path(__file__).parent)],
                          env=env, capture_output=True, text=True, timeout=600, check=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_selection_matches_the_loaded_modules() -> None:
    """STATUS says what runs: compiled extensions, or every module from its .py file."""
    from quiclab.sim.des import sender

    compiled = str(sender.__file__).endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
    assert compiled == native.COMPILED
    assert native.STATUS.startswith("compiled" if compiled else "pure Python")
    if native.compiled_files() and not compiled:
        # Never a mix: when the extensions are not used, no module of the group is.
        for name in native.MODULES:
            module = sys.modules[f"{native.PACKAGE}.{name}"]
            assert str(module.__file__).endswith(".py"), name


@pytest.mark.skipif(not native.COMPILED,
                    reason=f"the compiled DES does not run here, nothing to compare: "
                           f"{native.STATUS}")
def test_compiled_equals_pure_python_bit_for_bit() -> None:
    """Only where the compiled build runs: else (no build, or sources edited since
    it) both runs would be pure Python and the comparison would prove nothing."""
    pure = _run(pure=True)
    default = _run(pure=False)
    assert pure.pop("status").startswith("pure Python")
    assert default.pop("status") == native.STATUS == "compiled (mypyc)"
    assert pure.keys() == default.keys()
    for name in pure:
        assert default[name] == pure[name], name
