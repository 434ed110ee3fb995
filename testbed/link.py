"""A run's path knobs (:class:`LinkConfig`) and the code that sets them on the
server's and the client's interface, the same for the namespace pair and for two
servers over SSH (:func:`apply_knobs`, through :class:`~quiclab.testbed.nic.Interface`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from quiclab.testbed.errors import TestbedError
from quiclab.testbed.nic import FEATURES, Interface

#: The largest UDP GSO skb as tc counts it: a 64 KiB datagram plus, for each further
#: segment, the Ethernet/IP/UDP headers it will carry (qdisc_pkt_len; 54 segments at the
#: smallest payload the stacks send, 1200 B).
MAX_GSO_SKB_BYTES = 65535 + 14 + 53 * 42
#: The default tbf queue floor, two of those (136 KiB). A bfifo admits an skb whole or
#: drops it whole, so a 64 KiB limit refuses every full-size GSO batch (44 × 1472 B counts
#: 66.6 KB): quiche at 1 Gbit/s then moved 277 Mbit/s with a 27 ms PTO after each refused
#: batch (19 in 0.6 s, strace), and 942 Mbit/s with this floor (README "Rate").
MIN_TBF_LIMIT_BYTES = 136 * 1024


@dataclass(frozen=True)
class LinkConfig:
    """The knobs of one run's path. Units in the names; 0 means "not set"."""

    mtu_bytes: int = 1500
    #: Offloads (``ethtool -K``); None leaves the interface's own setting (a veth's:
    #: tx-udp-segmentation on — GSO batches pass unsegmented —, gro off, tso on).
    veth_segmentation: bool | None = None
    nic_gro: bool | None = None
    tso: bool | None = None
    nic_lro: bool | None = None
    nic_gso: bool | None = None
    #: tx- and rx-checksumming (kernel TCP runs: without tx-checksumming the kernel
    #: turns TSO off itself); None leaves them.
    csum_offload: bool | None = None
    #: Ring sizes (``ethtool -G``; 0 = leave), the core the interfaces' IRQs go to
    #: (the Scenario's ``irq_core``; -1 = the inventory's ``irq_cores``, else leave).
    rx_ring: int = 0
    tx_ring: int = 0
    irq_core: int = -1
    rate_gbps: float = 0.0
    #: tbf queue limit in bytes (0 = 1 × BDP at the rate, at least MIN_TBF_LIMIT_BYTES).
    queue_bytes: int = 0
    loss_pct: float = 0.0
    #: Added round-trip delay (half each way, in the relay).
    rtt_ms: float = 0.0
    reorder_pct: float = 0.0
    relay_queue_bytes: int = 0
    rcvbuf_bytes: int = 0
    sndbuf_bytes: int = 0
    seed: int = 0
    #: "udp" (the QUIC peers) or "tcp" (kernel TCP peers: the fields below apply,
    #: and the loss classifier drops TCP segments).
    transport: str = "udp"
    #: net.ipv4.tcp_rmem[2] / tcp_wmem[2] and tcp_congestion_control for the run
    #: (0 / "": left as the kernel has them).
    tcp_rmem_bytes: int = 0
    tcp_wmem_bytes: int = 0
    tcp_cc: str = ""

    @property
    def relayed(self) -> bool:
        return self.rtt_ms > 0 or self.reorder_pct > 0

    def offloads(self) -> dict[str, bool]:
        """The offload knobs this run sets ({knob: on?}) in the order ``ethtool -K`` gets
        them (checksums first: TSO needs tx-checksumming); the others stay as they are."""
        out = ({"tx_csum": self.csum_offload, "rx_csum": self.csum_offload}
               if self.csum_offload is not None else {})
        out.update({k: bool(getattr(self, k)) for k in FEATURES
                    if k not in ("tx_csum", "rx_csum") and getattr(self, k) is not None})
        return out

    def tcp_sysctls(self) -> dict[str, str]:
        """The per-namespace TCP sysctls this run sets: the largest autotuned buffers
        (their initial size capped at the kernel's defaults, 128 KiB and 16 KiB)."""
        out: dict[str, str] = {}
        if self.tcp_rmem_bytes:
            r = self.tcp_rmem_bytes
            out["net.ipv4.tcp_rmem"] = f"4096 {min(131072, r)} {r}"
        if self.tcp_wmem_bytes:
            w = self.tcp_wmem_bytes
            out["net.ipv4.tcp_wmem"] = f"4096 {min(16384, w)} {w}"
        return out

    def tbf(self) -> tuple[int, int]:
        """(burst, limit) bytes of the rate's tbf: burst at least one 64 KiB GSO batch or
        2 ms at the rate (one timer tick); limit ``queue_bytes`` or 1 × BDP, at least
        MIN_TBF_LIMIT_BYTES."""
        rate_bps = self.rate_gbps * 1e9
        burst = max(64 * 1024 + 2 * self.mtu_bytes, int(rate_bps / 8 * 0.002))
        limit = self.queue_bytes or max(MIN_TBF_LIMIT_BYTES, int(
            rate_bps / 8 * max(self.rtt_ms, 0.1) / 1e3))
        return burst, limit

    def buffer_sysctls(self) -> dict[str, int]:
        """The UDP buffer sysctls this run sets."""
        out = {}
        if self.rcvbuf_bytes:
            out.update({"net.core.rmem_max": self.rcvbuf_bytes,
                        "net.core.rmem_default": self.rcvbuf_bytes})
        if self.sndbuf_bytes:
            out.update({"net.core.wmem_max": self.sndbuf_bytes,
                        "net.core.wmem_default": self.sndbuf_bytes})
        return out


class NoNetem(TestbedError):
    """The client host's kernel has no netem: the delay goes through the relay."""


def apply_knobs(server: Interface, client: Interface, link: LinkConfig,
                loss_object: str | None, irq_cores: dict[str, tuple[int, ...]] | None = None,
                irq_match: dict[str, str] | None = None,
                netem_delay_us: float = 0.0) -> dict[str, Any]:
    """Set the run's knobs on the server's and the client's interface (every change
    journalled on its host); returns what was applied, as the catalog records it
    (``extra.topology.applied``). ``irq_cores`` per role: the inventory's, used unless
    the run sets ``irq_core``. ``netem_delay_us``: one-way delay for each side's egress
    (SSH mode on a kernel with netem; the caller has checked it is there)."""
    applied: dict[str, Any] = {}
    pair = (server, client)
    for iface in pair:
        iface.set_mtu(link.mtu_bytes)
    wanted = link.offloads()
    for iface in pair:
        applied[f"{iface.role}.{iface.dev}"] = iface.set_offloads(wanted)
    if link.rx_ring or link.tx_ring:
        applied["rings"] = {i.role: i.set_rings(link.rx_ring, link.tx_ring) for i in pair}
    for iface in pair:
        cores = ((link.irq_core,) if link.irq_core >= 0
                 else (irq_cores or {}).get(iface.role, ()))
        if cores:
            applied.setdefault("irq", {})[iface.role] = iface.steer_irqs(
                cores, (irq_match or {}).get(iface.role, ""))
    if netem_delay_us:
        # The client's egress first: a kernel without netem refuses it before the
        # server's qdisc is touched (the caller then takes the relay).
        if not client.set_delay(netem_delay_us, netem_limit_packets(link)):
            raise NoNetem(f"{client.where}: the kernel has no netem")
        applied["netem"] = {"delay_us_each_way": round(netem_delay_us),
                            "limit_packets": netem_limit_packets(link)}
    if link.rate_gbps:
        burst, limit = link.tbf()
        applied["tbf"] = server.set_rate(link.rate_gbps, burst, limit, netem_delay_us,
                                         netem_limit_packets(link))
    elif netem_delay_us and not server.set_delay(netem_delay_us, netem_limit_packets(link)):
        raise TestbedError(f"rtt_ms={link.rtt_ms:g} cannot be honoured on {server.where}: "
                           "its kernel has no netem (the client's has)")
    if link.loss_pct:
        if loss_object is None:
            raise TestbedError("loss_pct needs the eBPF loss classifier (clang); "
                               "run `quiclab testbed build`")
        applied["loss"] = client.set_loss(loss_object, link.loss_pct)
    return applied


def netem_limit_packets(link: LinkConfig) -> int:
    """netem's queue: 2 × what the delay holds at the link rate (or 10 Gbit/s) in
    MTU-sized packets, at least netem's default 1000."""
    rate_bps = link.rate_gbps * 1e9 if link.rate_gbps else 10e9
    return max(1000, int(2 * rate_bps / 8 * link.rtt_ms / 1e3 / link.mtu_bytes))
