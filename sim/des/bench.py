"""``quiclab bench des``: simulated packets per CPU-second, packet and batch granularity.

:func:`bench` runs fixed workloads on synthetic models (no fitted models
needed: it measures the engine, not a calibration), returns a dict of figures
and prints a short table through ``out`` (``print`` by default, ``None`` to
stay quiet). Times are process CPU time (``time.process_time``) of the
simulation itself; a busy machine still slows the interpreter, so compare
engines within one run.

- ``packet``: the workloads of ``quiclab bench ns3`` (``quiclab.sim.ns3.bench``)
  so that the two engines are compared on the same work: a link-bound
  10 Gbit/s transfer of ``packets`` data packets between 0.5 µs/packet hosts,
  once with one packet per system call and once with GSO/GRO of ≤ 40
  segments. Counted like ns-3 counts: data + ACK packets per CPU-second
  (``packets_per_cpu_s``), and data packets alone;
- ``batch``: 8 GiB at 10 Gbit/s and 10 ms RTT with 64 MiB buffers (windows
  large enough for units of ``unit_packets``), whole transfer simulated:
  *effective* data packets (what the units stand for) per CPU-second;
- ``batch_qir``: 8 GiB on the QIR-10G default path (50 µs RTT, 208 KiB
  buffer), batch granularity with its defaults: CPU-seconds for the transfer;
- ``ns3``: when ``ns3=True`` and the ns-3 engine is importable, its own bench
  (which builds its simulator binary once, minutes) on the same workloads.

Targets: packet ≥ 2 × ns-3 in the same run; batch ≥ 10 M effective
packets per second; 8 GiB at batch granularity in seconds. ``build`` says
whether the hot path ran compiled (mypyc, built by ``pip install -e .``) or as
pure Python (:mod:`quiclab.sim.des.native`); both give the same results.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from quiclab.models.testing import synthetic_model, synthetic_registry
from quiclab.sim.des import native
from quiclab.sim.des.engine import DesEngine
from quiclab.sim.resolve import resolve
from quiclab.sim.scenario import QIR_TRANSFER_BYTES, Scenario

#: The two host setups of ``quiclab bench ns3`` (same names, same behaviour).
PACKET_CASES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("one packet per call", {}),
    ("GSO/GRO ≤ 40 segments", {"supports_gso": True, "supports_gro": True,
                               "gso_max_segments": 40}),
)
#: The bench's targets: packet mode against ns-3, batch mode's packet rate.
TARGET_PACKET_VS_NS3 = 2.0
TARGET_BATCH_PPS = 10e6


def _run(engine: DesEngine, scenario: Scenario) -> tuple[float, dict[str, float], Any]:
    """CPU seconds of one simulation, its raw counters (the simulated part), the Prediction."""
    resolved = resolve(scenario, engine.registry)
    t0 = time.process_time()
    result = engine.run(resolved)
    cpu_s = time.process_time() - t0
    from quiclab.sim.des.engine import prediction_from_run

    pred = prediction_from_run(resolved, result, engine.name, engine.version,
                               engine.granularity)
    return cpu_s, result.end, pred


def bench(packets: int = 100_000, transfer_bytes: int = QIR_TRANSFER_BYTES,
          ns3: bool = False, ns3_cache_dir: str | None = None,
          out: Callable[[str], None] | None = print) -> dict[str, Any]:
    """Measure the DES (and, with ``ns3=True``, the ns-3 engine); returns the figures.

    Keys: ``build`` (compiled or pure Python, and why),
    ``packet`` (a list, one dict per case of :data:`PACKET_CASES`, with
    ``packets_per_cpu_s`` counting data + ACK packets and
    ``data_packets_per_cpu_s``), ``packets_per_cpu_s`` (the headline: the
    first case), ``batch_pps`` (effective data packets per CPU-second),
    ``batch_qir_cpu_s``, ``ns3`` (its bench's dict, or None), ``packet_vs_ns3``
    and ``targets_met``. ``ns3_cache_dir`` is passed to the ns-3 bench (where
    its simulator binary is built and cached).
    """
    say = out or (lambda _line: None)
    result: dict[str, Any] = {"engine": "des", "build": native.STATUS, "packet": []}
    say(f"des bench: hot path {native.STATUS}")
    for label, behaviour in PACKET_CASES:
        model = synthetic_model("bench", sender_ns=500, receiver_ns=500, **behaviour)
        engine = DesEngine(synthetic_registry(model), max_packets=0)
        scenario = Scenario(server="bench", client="bench", link_gbps=10.0,
                            transfer_bytes=packets * 1360)
        cpu_s, end, pred = _run(engine, scenario)
        data, acks = end["packets_sent"], end["acks_sent"]
        run = {"case": label, "data_packets": data, "ack_packets": acks, "cpu_s": cpu_s,
               "goodput_mbps": pred.goodput_mbps, "limit": pred.limit,
               "packets_per_cpu_s": (data + acks) / cpu_s,
               "data_packets_per_cpu_s": data / cpu_s}
        result["packet"].append(run)
        say(f"des bench: packet, {label}: {data:,.0f} data + {acks:,.0f} ACK packets in "
            f"{cpu_s:.2f} CPU-s → {run['packets_per_cpu_s']:,.0f} packets/CPU-s "
            f"({run['data_packets_per_cpu_s']:,.0f} data packets/CPU-s)")
    result["packets_per_cpu_s"] = result["packet"][0]["packets_per_cpu_s"]

    registry = synthetic_registry(synthetic_model(
        "bench", sender_ns=500, receiver_ns=500, supports_gso=True, supports_gro=True))
    wide = Scenario(server="bench", client="bench", transfer_bytes=transfer_bytes,
                    rtt_ms=10.0, rcvbuf_bytes=64 * 2**20)
    cpu_s, end, pred = _run(DesEngine(registry, granularity="batch", max_packets=0,
                                      max_units=0), wide)
    result["batch_cpu_s"] = cpu_s
    result["batch_goodput_mbps"] = pred.goodput_mbps
    result["batch_pps"] = end["packets_sent"] / cpu_s
    say(f"des bench: batch, {transfer_bytes / 2**30:.0f} GiB at 10 Gbit/s, 10 ms RTT: "
        f"{end['packets_sent']:,.0f} packets in {cpu_s:.2f} CPU-s → "
        f"{result['batch_pps']:,.0f} effective packets/CPU-s")

    qir = Scenario(server="bench", client="bench", transfer_bytes=transfer_bytes)
    cpu_s, end, pred = _run(DesEngine(registry, granularity="batch"), qir)
    result["batch_qir_cpu_s"] = cpu_s
    result["batch_qir_goodput_mbps"] = pred.goodput_mbps
    how = "whole transfer" if end["consumed_bytes"] >= transfer_bytes else \
        "prefix + extrapolation"
    say(f"des bench: batch, {transfer_bytes / 2**30:.0f} GiB on the QIR-10G path "
        f"(50 µs RTT, 208 KiB buffer): {cpu_s:.2f} CPU-s ({how})")

    result["ns3"] = None
    result["packet_vs_ns3"] = None
    if ns3:
        try:
            from quiclab.sim.ns3.bench import bench as ns3_bench
        except ImportError:
            say("des bench: ns-3 engine not available")
        else:
            result["ns3"] = ns3_bench(cache_dir=ns3_cache_dir, packets=packets, out=out)
            result["packet_vs_ns3"] = result["packets_per_cpu_s"] / result["ns3"][
                "packets_per_cpu_s"]
            say(f"des bench: packet granularity = {result['packet_vs_ns3']:.1f} × ns-3")
    result["targets_met"] = {
        "batch >= 10M packets/CPU-s": result["batch_pps"] >= TARGET_BATCH_PPS,
        "packet >= 2 x ns3": (None if result["packet_vs_ns3"] is None
                              else result["packet_vs_ns3"] >= TARGET_PACKET_VS_NS3),
    }
    return result
