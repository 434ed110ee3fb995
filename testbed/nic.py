"""Interfaces through a host's agent: the run's knobs, set and journalled, and the
NIC's facts and counters.

Every change goes through :meth:`~quiclab.testbed.hosts.Host.change` or
:meth:`~quiclab.testbed.hosts.Host.write`, which journal the undo on the host
first; a setting already as wanted is not touched. The same code sets a
namespace's veth and a server's NIC:

- MTU (``ip link set mtu``);
- offloads (``ethtool -K``: ``tx-udp-segmentation``, ``gro``, ``tso``, ``lro``,
  ``gso``), each only when the run asks for it (a knob set explicitly, or one loss
  forces); a feature the driver has ``[fixed]`` the other way is refused;
- ring sizes (``ethtool -G``), refused where the driver has none (veth);
- IRQ affinity (``/proc/irq/N/smp_affinity_list`` of the interface's IRQs: its
  device's MSI IRQs, else ``/proc/interrupts`` names containing it, or the
  inventory's ``irq_match``);
- ``tc``: a ``tbf`` rate on the sender's egress (a root qdisc other than the
  kernel's default is not replaced), ``netem`` delay where the kernel has it, the
  eBPF loss classifier on the receiver's ingress (its own filter, so a ``clsact``
  already there keeps its other filters);
- sysctls (the socket-buffer ones per run, an inventory's own for every run).

Facts (``ethtool -i``, ``-g``, ``-c``, ``-l``, speed, NUMA node) and counters
(``ethtool -S`` before and after, ``ip -s link``, ``tc -s qdisc``,
``/proc/net/snmp``) are read the same way; a driver without one says so (None).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from quiclab.testbed.errors import TestbedError
from quiclab.testbed.hosts import Host

#: Offload knobs: the ``ethtool -K`` name and the ``ethtool -k`` name.
FEATURES: dict[str, tuple[str, str]] = {
    "veth_segmentation": ("tx-udp-segmentation", "tx-udp-segmentation"),
    "nic_gro": ("gro", "generic-receive-offload"),
    "tso": ("tso", "tcp-segmentation-offload"),
    "nic_lro": ("lro", "large-receive-offload"),
    "nic_gso": ("gso", "generic-segmentation-offload"),
    "tx_csum": ("tx", "tx-checksumming"),
    "rx_csum": ("rx", "rx-checksumming"),
}
#: What the applied record lists per interface (the keys ``ethtool -k`` prints).
RECORDED_FEATURES = ("tx-udp-segmentation", "generic-receive-offload",
                     "tcp-segmentation-offload", "large-receive-offload",
                     "generic-segmentation-offload", "rx-udp-gro-forwarding",
                     "tx-checksumming", "rx-checksumming")
#: Root qdiscs the kernel puts on an interface by itself; ``tc qdisc del root``
#: brings them back. Anything else is the host owner's and is not replaced.
DEFAULT_QDISCS = ("noqueue", "pfifo_fast", "mq", "fq_codel", "fq", "pfifo", "sfq", "cake")
#: Filter priority of the loss classifier on the receiver's ingress (ours to delete).
LOSS_FILTER_PREF = "4433"


def parse_features(text: str) -> dict[str, tuple[str, bool]]:
    """``ethtool -k`` → {feature: ("on"|"off", fixed)}."""
    out: dict[str, tuple[str, bool]] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        words = value.split()
        if sep and words and words[0] in ("on", "off"):
            out[key.strip()] = (words[0], "[fixed]" in value)
    return out


def parse_sections(text: str) -> dict[str, dict[str, str]]:
    """``ethtool -g``/``-l`` → {section: {key: value}} (sections end with ':' alone)."""
    out: dict[str, dict[str, str]] = {}
    section = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        key, sep, value = stripped.partition(":")
        if sep and not value.strip():
            section = key.strip()
            out.setdefault(section, {})
        elif sep and section:
            out[section][key.strip()] = value.strip()
    return out


def _number(value: str) -> int | str:
    return int(value) if re.fullmatch(r"-?\d+", value) else value


def parse_rings(text: str) -> dict[str, dict[str, int | str]]:
    """``ethtool -g`` → {"max": {"RX": 4096, …}, "current": {…}}."""
    sections = parse_sections(text)
    out: dict[str, dict[str, int | str]] = {}
    for name, values in sections.items():
        key = "max" if name.lower().startswith("pre-set") else (
            "current" if name.lower().startswith("current") else None)
        if key:
            out[key] = {k: _number(v) for k, v in values.items() if v != "n/a"}
    return out


def parse_pairs(text: str) -> dict[str, int | str]:
    """``key: value`` lines (``ethtool -c``, ``-i``)."""
    out: dict[str, int | str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if sep and key.strip() and value.strip() and value.strip() != "n/a":
            out[key.strip()] = _number(value.strip())
    return out


def parse_stats(text: str) -> dict[str, int]:
    """``ethtool -S`` → {counter: value} (numeric counters only)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if sep and re.fullmatch(r"-?\d+", value.strip()):
            out[key.strip()] = int(value.strip())
    return out


def parse_snmp(text: str) -> dict[str, dict[str, int]]:
    """Parse ``/proc/net/snmp`` (pairs of header and value lines per protocol)."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    out: dict[str, dict[str, int]] = {}
    for header, values in zip(lines[::2], lines[1::2], strict=False):
        section = header[0].rstrip(":")
        try:
            out[section] = {k: int(v) for k, v in zip(header[1:], values[1:], strict=False)}
        except ValueError:
            continue
    return out


def interface_irqs(host: Host, dev: str, match: str = "") -> list[tuple[int, str]]:
    """(IRQ, name) of an interface: ``match`` (a regex on /proc/interrupts names) when
    given, else its device's MSI IRQs, else /proc/interrupts names containing ``dev``."""
    text = host.read("/proc/interrupts") or ""
    names: dict[int, str] = {}
    for line in text.splitlines()[1:]:
        head, sep, _ = line.partition(":")
        if sep and head.strip().isdigit():
            names[int(head)] = line.split()[-1]
    if match:
        pattern = re.compile(match)
        return [(irq, name) for irq, name in sorted(names.items()) if pattern.search(name)]
    listing = host.run(["ls", f"/sys/class/net/{dev}/device/msi_irqs"])
    msi = [int(w) for w in listing.stdout.split() if w.isdigit()] if listing.rc == 0 else []
    if msi:
        return [(irq, names.get(irq, "?")) for irq in sorted(msi)]
    return [(irq, name) for irq, name in sorted(names.items()) if dev in name]


def _cores_list(cores: list[int] | tuple[int, ...]) -> str:
    return ",".join(str(c) for c in cores)


@dataclass
class Interface:
    """One interface of one host, as a run uses it."""

    host: Host
    dev: str
    role: str

    @property
    def where(self) -> str:
        return f"{self.host.spec.label} {self.dev}"

    # -- facts -----------------------------------------------------------------------
    def exists(self) -> bool:
        return self.host.read(f"/sys/class/net/{self.dev}/mtu") is not None

    def mtu(self) -> int:
        text = self.host.read(f"/sys/class/net/{self.dev}/mtu")
        if text is None:
            raise TestbedError(f"{self.host.where}: no interface {self.dev!r}")
        return int(text.strip())

    def features(self) -> dict[str, tuple[str, bool]]:
        return parse_features(self.host.check(["ethtool", "-k", self.dev]).stdout)

    def addresses(self) -> list[str]:
        done = self.host.run(["ip", "-j", "-4", "addr", "show", "dev", self.dev])
        try:
            data = json.loads(done.stdout) if done.rc == 0 else []
        except ValueError:
            return []
        return [a.get("local", "") for entry in data for a in entry.get("addr_info", [])]

    def info(self) -> dict[str, Any]:
        """Driver, firmware, bus, speed, NUMA node, rings, coalescing, channels (None
        where the driver has none)."""
        def optional(argv: list[str]) -> str | None:
            done = self.host.run(argv)
            return done.stdout if done.rc == 0 else None

        driver = parse_pairs(optional(["ethtool", "-i", self.dev]) or "")
        rings = optional(["ethtool", "-g", self.dev])
        coalesce = optional(["ethtool", "-c", self.dev])
        channels = optional(["ethtool", "-l", self.dev])
        speed = (self.host.read(f"/sys/class/net/{self.dev}/speed") or "").strip()
        numa = (self.host.read(f"/sys/class/net/{self.dev}/device/numa_node") or "").strip()
        return {
            "interface": self.dev, "driver": driver.get("driver"),
            "driver_version": driver.get("version"),
            "firmware": driver.get("firmware-version") or None,
            "bus": driver.get("bus-info") or None,
            "speed_mbps": int(speed) if speed.lstrip("-").isdigit() and int(speed) > 0 else None,
            "numa_node": int(numa) if numa.lstrip("-").isdigit() else None,
            "rings": parse_rings(rings) if rings is not None else None,
            "coalesce": parse_pairs(coalesce) if coalesce is not None else None,
            "channels": parse_rings(channels) if channels is not None else None,
            "mtu": self.mtu(),
            "features": {k: v[0] for k, v in self.features().items()
                         if k in RECORDED_FEATURES},
        }

    def counters(self) -> dict[str, int] | None:
        """``ethtool -S`` (None where the driver has no statistics)."""
        done = self.host.run(["ethtool", "-S", self.dev])
        return parse_stats(done.stdout) if done.rc == 0 else None

    def link_stats(self) -> dict[str, int]:
        """The interface's own counters (``ip -s -j link``); on veth packets are GSO batches."""
        done = self.host.check(["ip", "-s", "-j", "link", "show", "dev", self.dev])
        data = json.loads(done.stdout)[0].get("stats64", {})
        rx, tx = data.get("rx", {}), data.get("tx", {})
        return {"rx_packets": rx.get("packets", 0), "rx_bytes": rx.get("bytes", 0),
                "rx_dropped": rx.get("dropped", 0), "tx_packets": tx.get("packets", 0),
                "tx_bytes": tx.get("bytes", 0), "tx_dropped": tx.get("dropped", 0)}

    def qdiscs(self) -> list[dict[str, Any]]:
        done = self.host.run(["tc", "-s", "-j", "qdisc", "show", "dev", self.dev])
        try:
            return list(json.loads(done.stdout)) if done.rc == 0 else []
        except ValueError:
            return []

    def qdisc_stats(self) -> list[dict[str, Any]]:
        return [{k: q.get(k) for k in ("kind", "bytes", "packets", "drops", "overlimits",
                                        "requeues", "backlog")} for q in self.qdiscs()]

    # -- knobs -------------------------------------------------------------------------
    def set_mtu(self, mtu: int) -> None:
        old = self.mtu()
        if old == mtu:
            return
        done = self.host.change(["ip", "link", "set", "dev", self.dev, "mtu", str(mtu)],
                                ["ip", "link", "set", "dev", self.dev, "mtu", str(old)],
                                f"{self.dev} mtu {old}")
        if done.rc != 0 or self.mtu() != mtu:
            raise TestbedError(f"mtu_bytes={mtu} cannot be honoured on {self.where}: "
                               f"{done.first_line}")

    def set_offloads(self, wanted: dict[str, bool]) -> dict[str, str]:
        """Set offload knobs ({knob: on?}); returns the recorded features as they are now."""
        have = self.features()
        change: list[str] = []
        undo: list[str] = []
        for knob, value in wanted.items():
            short, long = FEATURES[knob]
            state, fixed = have.get(long, ("off", True))
            want = "on" if value else "off"
            if state == want:
                continue
            if fixed:
                raise TestbedError(f"{knob}={str(value).lower()} cannot be honoured on "
                                   f"{self.where}: {long} is fixed {state}")
            change += [short, want]
            undo += [short, state]
        if change:
            done = self.host.change(["ethtool", "-K", self.dev, *change],
                                    ["ethtool", "-K", self.dev, *undo],
                                    f"ethtool -K {self.dev} {' '.join(undo)}")
            now = self.features()
            for knob, value in wanted.items():
                long = FEATURES[knob][1]
                if now.get(long, ("?", False))[0] != ("on" if value else "off"):
                    raise TestbedError(f"{knob}={str(value).lower()} cannot be honoured on "
                                       f"{self.where}: {long} stays "
                                       f"{now.get(long, ('absent',))[0]} ({done.first_line})")
            have = now
        return {k: v[0] for k, v in have.items() if k in RECORDED_FEATURES}

    def set_rings(self, rx: int, tx: int) -> dict[str, Any]:
        done = self.host.run(["ethtool", "-g", self.dev])
        knob = "rx_ring" if rx else "tx_ring"
        if done.rc != 0:
            raise TestbedError(f"{knob}={rx or tx} cannot be honoured on {self.where}: "
                               f"its driver has no ring sizes ({done.first_line})")
        rings = parse_rings(done.stdout)
        current, limit = rings.get("current", {}), rings.get("max", {})
        change, undo = [], []
        for name, value in (("RX", rx), ("TX", tx)):
            if not value:
                continue
            top = limit.get(name)
            if isinstance(top, int) and value > top:
                raise TestbedError(f"{name.lower()}_ring={value} cannot be honoured on "
                                   f"{self.where}: its largest is {top}")
            if current.get(name) != value:
                change += [name.lower(), str(value)]
                undo += [name.lower(), str(current.get(name))]
        if change:
            done = self.host.change(["ethtool", "-G", self.dev, *change],
                                    ["ethtool", "-G", self.dev, *undo],
                                    f"ethtool -G {self.dev} {' '.join(undo)}")
            if done.rc != 0:
                raise TestbedError(f"{knob}={rx or tx} cannot be honoured on {self.where}: "
                                   f"{done.first_line}")
        return parse_rings(self.host.check(["ethtool", "-g", self.dev]).stdout)

    def steer_irqs(self, cores: tuple[int, ...], match: str = "") -> dict[str, str]:
        """Spread the interface's IRQs over ``cores`` (queue i → cores[i mod n])."""
        irqs = interface_irqs(self.host, self.dev, match)
        if not irqs:
            raise TestbedError(f"irq_core={_cores_list(cores)} cannot be honoured on "
                               f"{self.where}: no IRQs found for it"
                               + (f" (irq_match {match!r})" if match else
                                  " (a virtual interface; set irq_match in the inventory)"))
        out = {}
        for i, (irq, name) in enumerate(irqs):
            path = f"/proc/irq/{irq}/smp_affinity_list"
            old = (self.host.read(path) or "").strip()
            core = str(cores[i % len(cores)])
            if old != core:
                done = self.host.write(path, core, old, what=f"IRQ {irq} ({name}) → {old}")
                now = (self.host.read(path) or "").strip()
                if done.rc != 0 or now != core:
                    raise TestbedError(f"irq_core={core} cannot be honoured on {self.where}: "
                                       f"IRQ {irq} ({name}) stays on {now or '?'} "
                                       f"({done.first_line})")
            out[f"{irq} {name}"] = core
        return out

    def root_qdisc(self) -> str:
        for q in self.qdiscs():
            if q.get("root"):
                return str(q.get("kind"))
        return "noqueue"

    def _own_root(self, knob: str) -> None:
        kind = self.root_qdisc()
        if kind not in DEFAULT_QDISCS:
            raise TestbedError(f"{knob} cannot be honoured on {self.where}: its root qdisc is "
                               f"{kind} (not a kernel default), which quiclab does not replace")

    def set_rate(self, rate_gbps: float, burst: int, limit: int, netem_delay_us: float = 0.0,
                 netem_limit: int = 1000) -> dict[str, Any]:
        """``tbf`` as the root qdisc (and ``netem`` delay under it, when asked)."""
        self._own_root("link_gbps")
        rate_bps = int(rate_gbps * 1e9)
        done = self.host.change(
            ["tc", "qdisc", "replace", "dev", self.dev, "root", "handle", "1:", "tbf", "rate",
             f"{rate_bps}bit", "burst", str(burst), "limit", str(limit)],
            ["tc", "qdisc", "del", "dev", self.dev, "root"], f"tc qdisc del dev {self.dev} root",
            may_fail=True)
        if done.rc != 0:
            raise TestbedError(f"link_gbps={rate_gbps:g} cannot be honoured on {self.where}: "
                               f"{done.first_line}")
        applied: dict[str, Any] = {"rate_bps": rate_bps, "burst_bytes": burst,
                                   "limit_bytes": limit}
        if netem_delay_us and not self._netem(["parent", "1:1", "handle", "10:"],
                                              netem_delay_us, netem_limit):
            raise TestbedError(f"rtt_ms cannot be honoured on {self.where}: "
                               "its kernel has no netem")
        return applied

    def set_delay(self, delay_us: float, limit_packets: int) -> bool:
        """``netem`` delay as the root qdisc; False when the kernel has no netem."""
        self._own_root("rtt_ms")
        return self._netem(["root", "handle", "1:"], delay_us, limit_packets)

    def _netem(self, where: list[str], delay_us: float, limit_packets: int) -> bool:
        done = self.host.change(
            ["tc", "qdisc", "replace", "dev", self.dev, *where, "netem", "delay",
             f"{delay_us:.0f}us", "limit", str(limit_packets)],
            ["tc", "qdisc", "del", "dev", self.dev, "root"], f"tc qdisc del dev {self.dev} root",
            may_fail=True)
        if done.rc != 0 and "unknown" in (done.stderr + done.stdout).lower():
            return False
        if done.rc != 0:
            raise TestbedError(f"rtt_ms cannot be honoured on {self.where}: {done.first_line}")
        return True

    def set_loss(self, obj_path: str, loss_pct: float) -> dict[str, Any]:
        """The eBPF loss classifier on this interface's ingress (``bpf/loss.bpf.c``)."""
        had_clsact = any(q.get("kind") == "clsact" for q in self.qdiscs())
        if not had_clsact:
            done = self.host.change(["tc", "qdisc", "add", "dev", self.dev, "clsact"],
                                    ["tc", "qdisc", "del", "dev", self.dev, "clsact"],
                                    f"tc qdisc del dev {self.dev} clsact", may_fail=True)
            if done.rc != 0:
                raise TestbedError(f"loss_pct={loss_pct:g} cannot be honoured on {self.where}: "
                                   f"{done.first_line}")
        done = self.host.change(
            ["tc", "filter", "replace", "dev", self.dev, "ingress", "pref", LOSS_FILTER_PREF,
             "bpf", "direct-action", "obj", obj_path, "sec", "tc"],
            ["tc", "filter", "del", "dev", self.dev, "ingress", "pref", LOSS_FILTER_PREF],
            f"tc filter del dev {self.dev} ingress pref {LOSS_FILTER_PREF}", may_fail=True)
        if done.rc != 0:
            raise TestbedError(f"loss_pct={loss_pct:g} cannot be honoured on {self.where}: "
                               f"{done.first_line}")
        return {"where": f"{self.role} {self.dev} ingress (tc bpf)",
                "object": obj_path.rsplit("/", 1)[-1], "loss_pct": loss_pct}


def set_sysctl(host: Host, name: str, value: str | int, knob: str,
               via: tuple[str, ...] = ()) -> str:
    """Set one sysctl for the run (journalled); returns its value now. A sysctl already
    at the value is not written (a host that may not write it still runs); one the
    host's namespace may not write goes through ``via`` (the inventory's
    ``sysctl_via``)."""
    path = "/proc/sys/" + name.replace(".", "/")
    old = host.read(path)
    if old is None:
        raise TestbedError(f"{knob} cannot be honoured on {host.spec.label}: no sysctl {name}")
    old = old.strip()
    if old.split() == str(value).split():
        return old
    # The prefix only for what this namespace may not write (net.core.* in a namespace).
    via = () if host.writable(path) else via
    done = host.write(path, str(value), old, via=via, what=f"sysctl {name}={old}")
    now = (host.read(path) or "").strip()
    if done.rc != 0 or now.split() != str(value).split():
        hint = ("" if via or "denied" not in done.first_line.lower() else
                " (a network namespace cannot write net.core.*: set sysctl_via in the "
                "inventory)")
        raise TestbedError(f"{knob} cannot be honoured on {host.spec.label}: {name} stays "
                           f"{now or old}: {done.first_line}{hint}")
    return now
