"""Kernel TCP + TLS as a cost mechanism: what each unit of work costs, and where it runs.

A QUIC stack does its packet work in one process; kernel TCP splits a transfer
into units that each have their own count and place:

==================  =====================================  ==========================
term                one unit                               counted per transfer
==================  =====================================  ==========================
``tx_call``         a write() system call (sender)         B / write size
``tx_byte``         copying a byte into the socket         B
``tx_skb``          an skb TCP transmits (tcp_write_xmit   super-segments (TCP always
                    … dev_queue_xmit): a super-segment     builds GSO skbs; see below)
``tx_segment``      a segment cut in software (a device    wire segments, TSO off
                    without TSO: skb_gso_segment + its     (the device's gso flag does
                    xmit)                                  not matter to TCP)
``csum_byte``       a byte summed in software (each side)  B, without checksum offload
``ack_in``          an ACK the sender processes            ACKs
``rx_frame``        a frame the receiving host takes in    frames on the wire (NIC); the
                    (driver, GRO per frame)                veth's units (veth)
``gro_frame``       a frame passed through GRO (a NAPI     frames, GRO on
                    poll's gro_receive), merged or not
``rx_skb``          an skb the receiver's TCP processes    GRO aggregates (GRO/LRO on),
                    (ip_rcv … tcp_v4_rcv, queue, wake-up)  else frames
``ack_out``         an ACK the receiver builds and sends   ACKs
``rx_call``         a read() system call (receiver)        read calls
``rx_byte``         copying a byte out of the socket       B
``wake_out``        waking the sleeping reader on another  reader wake-ups (its
                    core (try_to_wake_up: an IPI; in a VM  voluntary context switches)
                    an exit and an injected interrupt)
``wake_in``         the reader scheduled in again on its   reader wake-ups
                    own core
``file_in``         the sender reading its file (page      B (a web server's file; 0
                    cache → user: read())                  for bytes made in memory)
``file_out``        the receiver writing the file it       B (a downloader's file; 0
                    downloads (user → page cache)          for bytes discarded)
==================  =====================================  ==========================

all in the kernel (system time), and in user space (the TLS library):
``record_out`` / ``record_in`` per TLS record sealed or opened (header, nonce,
AEAD set-up and tag, the library's buffer handling, the application's write or
read call around it) and, per cipher, ``encrypt`` / ``decrypt`` ns per byte.

Offloads: Linux gives every TCP socket GSO whatever its device offers
(net/core/sock.c ``sk_setup_caps`` sets ``NETIF_F_GSO`` for TCP, since 4.13),
so TCP always builds super-segments and the device's ``gso`` flag does not reach
it; a device without TSO (``tso`` off, or checksum offload off, which makes the
kernel drop TSO) gets each skb cut into segments in software (``tx_segment``).
GRO (``gro_frame``) and LRO change how many skbs the receiving TCP processes.

Where: the sender's terms run on the sender's core and the receiver's process
terms on the receiver's; the receive path's softirq work (``rx_frame``,
``rx_skb``, ``ack_out``) runs where the receiving host handles its NIC — the
core that takes the NIC's interrupts on a real host (for one flow, one core; the
kernel does not put it on the receiving process's core, so it is a stage of its
own), but the *sender's* core between two network namespaces joined by a veth
pair, where the sender's transmit raises the receive softirq on its own CPU
(``placement``: ``"nic"`` or ``"veth"``). With a NIC the sender's ACK processing
runs on its own interrupt core likewise; a side's rate is then that of the
slower of its two cores.

Every term is a :class:`~quiclab.models.costmodel.Param` (value, interval,
source) in ns on the model's reference CPU. Kernel and user work may move to
another CPU differently: kernel costs scale with the CPU rule's factor to the
power ``kernel_scaling`` (1 = the rule as is), user costs with the rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from quiclab.errors import DataError
from quiclab.models.costmodel import Param

#: Kernel terms (system time) in the order of the data path.
KERNEL_TERMS = ("tx_call", "tx_byte", "tx_skb", "tx_segment", "csum_byte", "ack_in",
                "rx_frame", "gro_frame", "rx_skb", "ack_out", "wake_out", "rx_call", "rx_byte",
                "wake_in", "file_in", "file_out")
#: User terms (the TLS library and the application's calls), besides the ciphers.
USER_TERMS = ("record_out", "record_in")
#: Where the receive path's softirq work runs.
PLACEMENTS = ("nic", "veth")
#: Terms of the receive softirq (on the receiver's core with a NIC, the sender's on veth).
SOFTIRQ_TERMS = ("rx_frame", "gro_frame", "rx_skb", "ack_out", "wake_out")
#: Units of each term.
UNITS = {name: ("ns/B" if name.endswith("_byte") else "ns") for name in KERNEL_TERMS}


@dataclass(frozen=True)
class TcpCosts:
    """Kernel TCP + TLS costs of one implementation (see the module docstring).

    ``facts`` holds what is not a CPU cost, each as ``{"value": …, "source": …}``:
    ``placement`` ("nic" | "veth"), ``write_bytes`` and ``read_bytes`` (application
    calls; 0 = one TLS record), ``size_goal_bytes`` (the largest skb TCP builds,
    Linux's 64 KiB GSO limit), ``gro_window_us`` (how long a NIC's receive path
    gathers frames into one GRO aggregate), ``ack_segments`` (segments per ACK the
    receiver sends), ``wakeups_per_write`` (times the reader sleeps and is woken per
    write the sender makes), ``busy`` (the share of the transfer the bottleneck core
    works: the engines' pair busy fraction), ``skb_fill`` (a sender-bound skb's share
    of one write's segments), ``window_ratio`` (payload a socket buffer byte holds,
    for the window tcp_rmem and tcp_wmem allow), ``tls`` (whether the pair runs TLS).
    """

    kernel: dict[str, Param]
    user: dict[str, Param]
    encrypt: dict[str, Param]
    decrypt: dict[str, Param]
    kernel_scaling: Param
    facts: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        missing = [t for t in KERNEL_TERMS if t not in self.kernel] + [
            t for t in USER_TERMS if t not in self.user]
        if missing:
            raise ValueError(f"TcpCosts: missing term {missing[0]!r}")
        if self.fact("placement", "nic") not in PLACEMENTS:
            raise ValueError(f"TcpCosts: placement={self.fact('placement')!r}: allowed "
                             + " | ".join(PLACEMENTS))

    def fact(self, name: str, default: Any = None) -> Any:
        entry = self.facts.get(name)
        return default if entry is None else entry.get("value", default)

    def params(self) -> list[tuple[str, Param]]:
        """Every cost with a dotted name (``kernel.tx_skb``, ``encrypt.aes-ni`` …)."""
        out = [(f"kernel.{k}", self.kernel[k]) for k in KERNEL_TERMS]
        out += [(f"user.{k}", self.user[k]) for k in USER_TERMS]
        out += [(f"encrypt.{k}", v) for k, v in sorted(self.encrypt.items())]
        out += [(f"decrypt.{k}", v) for k, v in sorted(self.decrypt.items())]
        out.append(("kernel_scaling", self.kernel_scaling))
        return out

    def to_json(self) -> dict[str, Any]:
        return {"kernel": {k: self.kernel[k].to_json() for k in KERNEL_TERMS},
                "user": {k: self.user[k].to_json() for k in USER_TERMS},
                "encrypt": {k: v.to_json() for k, v in sorted(self.encrypt.items())},
                "decrypt": {k: v.to_json() for k, v in sorted(self.decrypt.items())},
                "kernel_scaling": self.kernel_scaling.to_json(),
                "facts": {k: dict(v) for k, v in sorted(self.facts.items())}}

    @classmethod
    def from_json(cls, data: Any, where: str) -> TcpCosts:
        if not isinstance(data, dict):
            raise DataError(where, "tcp: expected an object")
        try:
            kernel = {k: Param.from_json(data["kernel"][k], f"{where}.kernel.{k}")
                      for k in KERNEL_TERMS}
            user = {k: Param.from_json(data["user"][k], f"{where}.user.{k}") for k in USER_TERMS}
            enc = {k: Param.from_json(v, f"{where}.encrypt.{k}")
                   for k, v in data.get("encrypt", {}).items()}
            dec = {k: Param.from_json(v, f"{where}.decrypt.{k}")
                   for k, v in data.get("decrypt", {}).items()}
            scaling = Param.from_json(data["kernel_scaling"], f"{where}.kernel_scaling")
            facts = {str(k): dict(v) for k, v in data.get("facts", {}).items()}
            return cls(kernel, user, enc, dec, scaling, facts)
        except (KeyError, TypeError) as err:
            raise DataError(where, f"tcp: missing or malformed {err}") from None
        except ValueError as err:
            raise DataError(where, str(err)) from None
