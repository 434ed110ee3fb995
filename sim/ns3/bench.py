"""``quiclab bench ns3``: simulated packets per CPU-second and the build time.

Runs the simulator binary at packet granularity on two synthetic link-bound
10 Gbit/s transfers — one packet per system call, and GSO/GRO batches of up to
40 segments — and reads the simulator's own CPU time for its event loop
(process start-up and topology set-up excluded). "Packets" counts every packet
ns-3 carries through its UDP/IPv4 stack and the link: data packets and ACKs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from quiclab.models.testing import synthetic_model, synthetic_registry
from quiclab.sim.ns3.engine import Ns3Engine
from quiclab.sim.scenario import Scenario

#: Synthetic hosts fast enough for a 10 Gbit/s link to be the limit.
_CASES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("one packet per call", {}),
    ("GSO/GRO ≤ 40 segments", {"supports_gso": True, "supports_gro": True,
                               "gso_max_segments": 40}),
)


def bench(cache_dir: Path | str | None = None, packets: int = 100_000,
          out: Callable[[str], None] | None = print, compiler: str | None = None
          ) -> dict[str, Any]:
    """Build (or reuse) the simulator and time ``packets`` data packets per case.

    Returns a dict with ``build_s`` (how long the cached binary took to build),
    ``built_now``, and per case the packets, events, CPU seconds and rates;
    ``packets_per_cpu_s`` is the packet-granularity headline (data + ACK
    packets of the first case). ``out`` receives one summary line per item.
    Raises EngineError if the build or a run fails.
    """
    say = out or (lambda _line: None)
    lines: list[str] = []
    engine = Ns3Engine(synthetic_registry(), cache_dir=cache_dir, compiler=compiler,
                       progress=lines.append)
    binary = engine.binary()
    built_now = bool(lines)
    record = engine.build_record
    say(f"ns3 bench: binary {binary.name} (ns-{record.get('ns3_version')}), build "
        f"{record.get('build_s')} s" + (" (just now)" if built_now else " (cached)"))
    runs = []
    for label, behaviour in _CASES:
        model = synthetic_model("bench", sender_ns=500, receiver_ns=500, **behaviour)
        engine.registry = synthetic_registry(model)
        scenario = Scenario(server="bench", client="bench", link_gbps=10.0,
                            transfer_bytes=packets * 1360)
        resolved = engine.resolve(scenario)
        res = engine.run(binary, resolved)
        end, cpu_s = res.end, float(res.data["cpu_s"])
        data, acks = int(end["data_sent"]), int(end["acks_sent"])
        events = int(res.data["events"])
        run = {
            "case": label,
            "data_packets": data,
            "ack_packets": acks,
            "events": events,
            "cpu_s": cpu_s,
            "simulated_s": float(end["time_s"]),
            "packets_per_cpu_s": (data + acks) / cpu_s,
            "data_packets_per_cpu_s": data / cpu_s,
            "events_per_cpu_s": events / cpu_s,
        }
        runs.append(run)
        say(f"ns3 bench: {label}: {data:,} data + {acks:,} ACK packets in {cpu_s:.2f} CPU-s "
            f"→ {run['packets_per_cpu_s']:,.0f} packets/CPU-s "
            f"({run['data_packets_per_cpu_s']:,.0f} data packets/CPU-s, "
            f"{run['events_per_cpu_s']:,.0f} events/CPU-s)")
    return {
        "engine": "ns3",
        "engine_version": engine.version,
        "ns3_version": record.get("ns3_version"),
        "binary": str(binary),
        "build_s": record.get("build_s"),
        "built_now": built_now,
        "runs": runs,
        "packets_per_cpu_s": runs[0]["packets_per_cpu_s"],
        "data_packets_per_cpu_s": runs[0]["data_packets_per_cpu_s"],
    }
