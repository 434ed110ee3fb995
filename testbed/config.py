"""One testbed run's configuration: a Scenario, the testbed-only knobs, and
which knobs were asked for explicitly.

A knob that was set explicitly and that a stack cannot honour is refused with
one line (:class:`~quiclab.testbed.errors.TestbedError`). A knob left at its
default takes the stack's own behaviour, and the catalog records the value
that was in effect (aioquic runs without GSO whatever the Scenario default
says, and its row says ``gso = false``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from quiclab.errors import ScenarioError
from quiclab.sim.scenario import Scenario, parse_assignments
from quiclab.testbed.errors import TestbedError
from quiclab.testbed.stacks import HOST_KNOBS, TESTBED_KNOBS, Stack

#: Bytes per run when neither --bytes nor transfer_bytes is given (a few seconds
#: for the slowest stack; the Scenario default of 8 GiB is the QIR's file size).
DEFAULT_TRANSFER_BYTES = 200_000_000

#: Scenario fields the testbed does not control, with the reason it says when one is set.
NOT_TESTBED = {
    "cpu": "the testbed runs on this host's CPU",
    "cpu_ghz": "the testbed runs at this host's clock",
    "base_rtt_us": "the veth path has its own base RTT",
    "pipeline": "pipelines are not built into the peers",
    "chunks": "the peers transfer in one request",
    "app": "the application protocol is the stacks' own (perf, or h3 for wrapped tools)",
}

#: Scenario fields the testbed can only honour at their default, with the reason it
#: says when one is set to anything else.
DEFAULT_ONLY = {
    "queue_bdp": "the testbed's tbf queue is always 1 × BDP (at least 136 KiB); "
                 "set queue_bytes for another queue",
}

#: Numeric testbed knobs: (smallest, largest) value, and what bounds the largest.
#: Flow-control windows reach every peer's own integer type: MsQuic takes them as
#: u32 (peers/msquic: `as u32` would wrap a larger one silently). The relay's queue
#: bound is the Scenario's largest queue_bytes (16 GiB). A timeout is at most a day.
KNOB_RANGES: dict[str, tuple[float, float, str]] = {
    "stream_window_bytes": (0, 2**32 - 1, "0 (the stack's default) … 4294967295 (MsQuic's u32)"),
    "conn_window_bytes": (0, 2**32 - 1, "0 (the stack's default) … 4294967295 (MsQuic's u32)"),
    "relay_queue_bytes": (0, 2**34, "0 (2 × BDP, at least 1 MiB) … 17179869184 (16 GiB)"),
    "timeout_s": (0, 86_400, "0 (derived from the expected transfer time) … 86400 (a day)"),
    "rx_ring": (0, 1 << 20, "0 (leave the NIC's) … 1048576 descriptors"),
    "tx_ring": (0, 1 << 20, "0 (leave the NIC's) … 1048576 descriptors"),
    "app_write_bytes": (0, 1 << 30, "0 (the peer's default) … 1073741824"),
    "app_read_bytes": (0, 1 << 30, "0 (the peer's default) … 1073741824"),
    "nice": (-20, 19, "-20 … 19 (nice(1)'s range; 0: as started)"),
}


#: Testbed knobs added after catalogs held run ids (hashed only when set: RunConfig.key).
LATER_KNOBS = ("app_write_bytes", "app_read_bytes", "nice")

#: Scenario fields of request workloads, with their bulk default: a
#: bulk run is one transfer on one connection and one stream.
REQUEST_FIELDS: dict[str, int] = {"request_bytes": 0, "requests": 0, "connections": 1,
                                  "streams": 1}


def request_count(scenario: Scenario) -> int:
    """Requests a request or handshake run issues: ``requests``, or for handshakes
    without it one per connection (the Scenario's rule, ``sim.request_costs``)."""
    return scenario.requests if scenario.requests > 0 else scenario.connections


def _request_changes(changes: dict[str, Any], transfer_bytes: int | None) -> None:
    """Check the request fields against the workload; a request run's transfer_bytes is
    requests × request_bytes (what the client receives). Raises TestbedError."""
    workload = changes.get("workload", "bulk")
    if workload == "bulk":
        for name, default in REQUEST_FIELDS.items():
            if name in changes and changes[name] != default:
                raise TestbedError(f"{name}={changes[name]!r} needs workload=requests or "
                                   "workload=handshakes: a bulk run is one transfer on one "
                                   "connection and one stream")
        return
    if transfer_bytes is not None or "transfer_bytes" in changes:
        value = transfer_bytes if transfer_bytes is not None else changes["transfer_bytes"]
        raise TestbedError(f"transfer_bytes={value!r} cannot be set with workload={workload}: "
                           "a request run moves requests × request_bytes (set those, "
                           "not --bytes)")
    if workload == "handshakes" and changes.get("streams", 1) != 1:
        raise TestbedError(f"streams={changes['streams']!r} cannot be set with "
                           "workload=handshakes: each request has a new connection of its own")


def parse_set(items: list[str], source: str = "--set") -> tuple[dict[str, Any], dict[str, Any]]:
    """Split ``--set`` items into (Scenario changes, testbed knobs), both coerced.

    Raises ScenarioError/TestbedError naming the field and value.
    """
    scenario_items: list[str] = []
    knobs: dict[str, Any] = {}
    for item in items:
        for part in item.split():
            key, sep, raw = part.partition("=")
            key = key.strip()
            if sep and key in TESTBED_KNOBS:
                knobs[key] = coerce_knob(key, raw.strip(), source)
            else:
                scenario_items.append(part)
    return parse_assignments(scenario_items, source=source), knobs


def coerce_knob(key: str, raw: Any, source: str) -> Any:
    """One testbed knob's value (a string from ``--set`` or a YAML scalar), checked:
    booleans, and numbers that are finite, whole where the knob is, and in
    :data:`KNOB_RANGES`. Raises ScenarioError naming the knob and value."""
    default = TESTBED_KNOBS[key]
    if isinstance(default, bool):
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ScenarioError(key, raw, "true or false", source=source)
    lo, hi, allowed = KNOB_RANGES[key]
    if isinstance(raw, bool):
        raise ScenarioError(key, raw, allowed, source=source)
    try:
        number = float(str(raw).strip().replace("_", ""))
    except ValueError:
        raise ScenarioError(key, raw, allowed, source=source) from None
    if not math.isfinite(number) or not lo <= number <= hi:
        raise ScenarioError(key, raw, allowed, source=source)
    if isinstance(default, int):
        if number != int(number):
            raise ScenarioError(key, raw, f"a whole number, {allowed}", source=source)
        return int(number)
    return number


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines one run, except its repetition number."""

    scenario: Scenario
    knobs: dict[str, Any] = field(default_factory=dict)
    explicit: frozenset[str] = frozenset()
    experiment: str = "adhoc"

    @classmethod
    def build(cls, server: str, client: str, changes: dict[str, Any] | None = None,
              knobs: dict[str, Any] | None = None, transfer_bytes: int | None = None,
              experiment: str = "adhoc") -> RunConfig:
        changes = dict(changes or {})
        for name in changes:
            if name in NOT_TESTBED:
                raise TestbedError(f"{name}={changes[name]!r} cannot be set on the testbed: "
                                   f"{NOT_TESTBED[name]}")
            if name in DEFAULT_ONLY and changes[name] != getattr(Scenario(), name):
                raise TestbedError(f"{name}={changes[name]!r} cannot be set on the testbed: "
                                   f"{DEFAULT_ONLY[name]}")
        _request_changes(changes, transfer_bytes)
        if transfer_bytes is not None:
            changes["transfer_bytes"] = transfer_bytes
        changes.setdefault("transfer_bytes", DEFAULT_TRANSFER_BYTES)
        explicit = frozenset(changes) | frozenset(knobs or {})
        scenario = Scenario(**{**changes, "server": server, "client": client})
        if scenario.workload != "bulk":
            scenario = scenario.with_(
                transfer_bytes=scenario.request_bytes * request_count(scenario))
        return cls(scenario, {**TESTBED_KNOBS, **(knobs or {})}, explicit, experiment)

    def knob(self, name: str) -> Any:
        return self.knobs[name]

    def key(self) -> str:
        """16 hex digits naming this configuration (stable across processes).

        Knobs added since catalogs held run ids are hashed only when set (LATER_KNOBS
        when not at their default, HOST_KNOBS when given explicitly), and ``tso``, a
        knob before it became a Scenario field, is hashed among the knobs as it was
        (Scenario.key_dict leaves it out at its default), so that a run of an earlier
        configuration keeps its id and a rerun resumes it."""
        knobs = {k: v for k, v in self.knobs.items()
                 if (k not in LATER_KNOBS or v != TESTBED_KNOBS[k])
                 and (k not in HOST_KNOBS or k in self.explicit)}
        knobs["tso"] = self.scenario.tso
        scenario = self.scenario.key_dict()
        scenario.pop("tso", None)
        explicit = sorted(self.explicit)
        blob = json.dumps({"scenario": scenario, "knobs": knobs, "explicit": explicit},
                          sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Resolved:
    """Peer arguments per side and the values in effect (what the catalog records)."""

    server_args: list[str]
    client_args: list[str]
    effective: dict[str, Any]


def _offload(stack: Stack, name: str, wanted: bool, explicit: bool) -> bool:
    support = getattr(stack, name)
    if support == "switch":
        return wanted
    in_effect = support == "on"
    if explicit and wanted != in_effect:
        raise TestbedError(f"{name}={str(wanted).lower()} cannot be honoured by {stack.name}: "
                           f"its {name.upper()} is always {'on' if in_effect else 'off'}")
    return in_effect


def resolve(config: RunConfig, server: Stack, client: Stack,
            cores: dict[str, int] | None = None,
            peer_cores: dict[str, tuple[int, ...]] | None = None,
            restrict: bool = False) -> Resolved:
    """Map the configuration onto each peer's flags, refusing what a stack cannot do.

    Cores (``pin``, ``server_core``, ``client_core``) are checked against ``cores`` per
    role (None: this host's for both, the namespace pair, where ``irq_core`` is refused)
    and the hosts' ``peer_cores`` (:func:`pinned_cores`)."""
    s = config.scenario
    ex = config.explicit
    if (reason := client.can_talk_to(server)) is not None:
        raise TestbedError(reason)
    if s.irq_core >= 0 and cores is None:
        raise TestbedError(f"irq_core={s.irq_core} cannot be honoured: the namespace pair's "
                           "veth has no NIC interrupts to steer")
    if server.transport == "tcp":
        from quiclab.testbed import tcp

        return tcp.resolve(config, server, client, cores, peer_cores, restrict)
    for name in ("lro", "csum_offload"):
        if name in ex and getattr(s, name) != getattr(Scenario(), name):
            raise TestbedError(f"{name}={str(getattr(s, name)).lower()} cannot be honoured by "
                               f"{server.name}: {_NOT_QUIC[name]}")
    eff: dict[str, Any] = {"app": server.app}
    args: dict[str, list[str]] = {"server": [], "client": []}
    stacks = {"server": server, "client": client}

    # Offloads: GSO matters on the sender (server), GRO on the receiver (client).
    eff["gso"] = _offload(server, "gso", s.gso, "gso" in ex)
    eff["gro"] = _offload(client, "gro", s.gro, "gro" in ex)
    for role, stack in stacks.items():
        if stack.gso == "switch":
            args[role].append(f"--gso={str(_offload(stack, 'gso', s.gso, False)).lower()}")
        elif "gso" in ex:
            _offload(stack, "gso", s.gso, True)
        if stack.gro == "switch":
            args[role].append(f"--gro={str(_offload(stack, 'gro', s.gro, False)).lower()}")
        elif "gro" in ex:
            _offload(stack, "gro", s.gro, True)

    # Packet size: the sender's payload is what counts; both sides get the same cap.
    link_payload = s.mtu_bytes - 28
    if "udp_payload_bytes" in ex and s.udp_payload_bytes:
        for stack in stacks.values():
            if s.udp_payload_bytes > stack.max_udp_payload_bytes:
                raise TestbedError(
                    f"udp_payload_bytes={s.udp_payload_bytes} cannot be honoured by "
                    f"{stack.name}: its packets are capped at {stack.max_udp_payload_bytes} B")
            if not stack.payload_flag and s.udp_payload_bytes != stack.max_udp_payload_bytes:
                raise TestbedError(
                    f"udp_payload_bytes={s.udp_payload_bytes} cannot be honoured by "
                    f"{stack.name}: its packet size is fixed at {stack.max_udp_payload_bytes} B")
        payload = {r: s.udp_payload_bytes for r in stacks}
    elif s.mtu_bytes != 1500:
        payload = {r: min(link_payload, st.max_udp_payload_bytes) for r, st in stacks.items()}
    else:
        payload = {}
    for role, value in payload.items():
        if stacks[role].payload_flag:
            args[role].append(f"--max-udp-payload={value}")
    eff["udp_payload_bytes"] = payload.get(
        "server", min(server.default_udp_payload_bytes, link_payload))
    if (server.gso_max_payload_bytes and eff["gso"]
            and eff["udp_payload_bytes"] > server.gso_max_payload_bytes):
        raise TestbedError(
            f"gso=true with udp_payload_bytes={eff['udp_payload_bytes']} cannot be honoured by "
            f"{server.name}: above {server.gso_max_payload_bytes} B its GSO batches exceed "
            "64 KiB and fail silently; set gso=false or a smaller udp_payload_bytes")

    # Congestion control: the sender's; both sides are told when it was asked for.
    if "cc" in ex:
        for stack in stacks.values():
            if s.cc not in stack.ccs:
                raise TestbedError(f"cc={s.cc} cannot be honoured by {stack.name}: "
                                   f"it offers {' | '.join(stack.ccs)}")
        for role in stacks:
            args[role].append(f"--cc={s.cc}")
        eff["cc"] = s.cc
    else:
        eff["cc"] = server.default_cc

    if "cipher" in ex:
        for stack in stacks.values():
            if s.cipher not in stack.ciphers:
                raise TestbedError(f"cipher={s.cipher} cannot be honoured by {stack.name}: "
                                   f"it offers {' | '.join(stack.ciphers)}")
        for role in stacks:
            args[role].append(f"--cipher={s.cipher}")
    eff["cipher"] = s.cipher if "cipher" in ex else "aes-ni"

    for knob, flag in (("stream_window_bytes", "stream-window"),
                       ("conn_window_bytes", "conn-window")):
        value = int(config.knob(knob))
        if value:
            for role, stack in stacks.items():
                if not stack.flow_control:
                    raise TestbedError(f"{knob}={value} cannot be honoured by {stack.name}: "
                                       "its flow-control windows are not configurable")
                args[role].append(f"--{flag}={value}")
        eff[knob] = value or None

    if config.knob("qlog"):
        for stack in stacks.values():
            if not stack.qlog:
                raise TestbedError(f"qlog=true cannot be honoured by {stack.name}: "
                                   "it does not write qlog")
    eff["veth_segmentation"] = bool(config.knob("veth_segmentation"))
    eff["nic_gro"] = bool(config.knob("nic_gro"))
    if s.loss_pct > 0 and not s.rtt_ms and not s.reorder_pct:
        # Per-packet loss: tc sees a GSO batch as one skb, so the kernel must segment
        # before the receiver's ingress and the receiver's veth must not re-aggregate.
        if "veth_segmentation" in ex and config.knob("veth_segmentation"):
            raise TestbedError("veth_segmentation=true with loss_pct > 0 would drop whole GSO "
                               "batches; leave it unset (the testbed turns it off for loss)")
        eff["veth_segmentation"] = False
        eff["nic_gro"] = False
    eff["tso"] = s.tso

    # Request workloads: both peers need a request mode; the server is
    # told the count (it exits after that many) and the streams (its stream limit).
    eff["workload"] = s.workload
    if s.workload != "bulk":
        for stack in stacks.values():
            if s.workload not in stack.workloads:
                raise TestbedError(f"workload={s.workload} cannot be honoured by {stack.name}: "
                                   f"its peer runs {' | '.join(stack.workloads)} only")
        n = request_count(s)
        streams = 1 if s.workload == "handshakes" else s.streams
        for role in stacks:
            args[role] += [f"--requests={n}", f"--connections={s.connections}",
                           f"--streams={streams}"]
        if s.workload == "handshakes":
            args["client"].append("--new-connection=true")
        eff.update(requests=n, request_bytes=s.request_bytes, connections=s.connections,
                   streams=streams)

    pinning(s, eff, cores, peer_cores, restrict)
    return Resolved(args["server"] + list(server.server_args),
                    args["client"] + list(client.client_args), eff)


#: Why the QUIC peers refuse kernel TCP's offload fields that are not the default.
_NOT_QUIC = {
    "lro": "the veth pair has no large receive offload (ethtool: off [fixed])",
    "csum_offload": "its UDP GSO needs the device's checksum offload (the kernel refuses "
                    "UDP_SEGMENT sends without it)",
}


def pinning(s: Scenario, eff: dict[str, Any], cores: dict[str, int] | None = None,
            peer_cores: dict[str, tuple[int, ...]] | None = None,
            restrict: bool = False) -> None:
    """Pinning: explicit cores (server_core/client_core), else pin=true puts each side on
    its host's first peer core (one host: the server on core 0, the client on core 1).
    Writes ``<role>_pinned_core`` into ``eff``; ``cores`` None: this host's for both
    (:func:`pinned_cores`)."""
    eff.update(pinned_cores(s, {r: os.cpu_count() or 1 for r in ("server", "client")})
               if cores is None else pinned_cores(s, cores, peer_cores or {}, restrict))


def pinned_cores(s: Scenario, cores: dict[str, int],
                 peer_cores: dict[str, tuple[int, ...]] | None = None,
                 restrict: bool = False) -> dict[str, int | None]:
    """``{role}_pinned_core`` per side: ``server_core``/``client_core`` when set, else
    with ``pin=true`` the first of the host's ``peer_cores`` (the namespace pair on one
    host: the server on core 0, the client on core 1), else None. ``cores``: each
    host's core count (a role missing: its host is not reached yet, and is checked once
    it is); ``restrict``: an explicit core must be one of ``peer_cores`` (an
    inventory's hosts). Raises TestbedError naming the field."""
    out: dict[str, int | None] = {}
    defaults = {"server": 0, "client": min(1, max(cores.get("client", 2) - 1, 0))}
    for role, field_name in (("server", "server_core"), ("client", "client_core")):
        core = getattr(s, field_name)
        n = cores.get(role, 1 << 20)  # a host not reached yet: checked once it is
        allowed = (peer_cores or {}).get(role, ())
        host = f"the {role}'s host" if restrict else "this host"
        if core >= n:
            raise TestbedError(f"{field_name}={core} cannot be honoured: {host} has "
                               f"{n} core(s), 0 … {n - 1}")
        if core >= 0 and restrict and allowed and core not in allowed:
            raise TestbedError(f"{field_name}={core} cannot be honoured: the inventory gives "
                               f"the {role}'s peer cores {', '.join(map(str, allowed))}")
        if core < 0 and s.pin:
            core = allowed[0] if allowed else defaults[role]
            if core >= n:
                raise TestbedError(f"pin=true cannot be honoured: the {role}'s peer core "
                                   f"{core} is not on its host ({n} core(s))")
        out[f"{role}_pinned_core"] = core if core >= 0 else None
    return out


def expected_seconds(config: RunConfig, server: Stack, client: Stack) -> float:
    """Transfer time at the slowest plausible goodput of the pair (or the link rate);
    request runs add their requests (or new connections) at the pair's slowest rate."""
    mbps = min(server.min_goodput_mbps, client.min_goodput_mbps)
    if config.scenario.link_gbps and "link_gbps" in config.explicit:
        mbps = min(mbps, config.scenario.link_gbps * 1e3)
    if config.scenario.loss_pct > 0:
        # Loss-bound: x/net/quic moved 10–12 Mbit/s at 1 % loss here (~800 without), a
        # fifth of its plausible minimum; at 1/(1 + loss%) its 200 MB runs were killed.
        mbps /= 1 + 4 * config.scenario.loss_pct
    seconds = config.scenario.transfer_bytes * 8 / (mbps * 1e6)
    if config.scenario.workload == "requests":
        rate = min(server.min_requests_per_s, client.min_requests_per_s)
        seconds += request_count(config.scenario) / rate
    elif config.scenario.workload == "handshakes":
        rate = min(server.min_handshakes_per_s, client.min_handshakes_per_s)
        seconds += request_count(config.scenario) / rate
    return seconds


def timeout_seconds(config: RunConfig, server: Stack, client: Stack,
                    startup_s: float = 15.0) -> float:
    """Hang timeout: 4 × the expected transfer time + ``startup_s`` for start-up and handshake
    (+ 100 added RTTs for slow start). The ``timeout_s`` knob overrides it."""
    if config.knob("timeout_s"):
        return float(config.knob("timeout_s"))
    rtt_s = config.scenario.rtt_ms / 1e3
    return startup_s + 4.0 * expected_seconds(config, server, client) + 100 * rtt_s
