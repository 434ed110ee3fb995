"""Evidence cells of the UCLouvain picoquic-DPDK dataset (testbed ``uclouvain``).

:func:`cells` groups the dataset's **kernel-I/O bulk transfers** — one
connection, one stack on each end, status ``ok`` — into condition cells:
median goodput, the number of repetitions and their coefficient of
variation, one :class:`~quiclab.calibration.evidence.Evidence` per cell
(``source="dataset"``, ``group="uclouvain-<experiment>"``,
Scenario ``testbed="uclouvain"`` on the testbed's stand-in CPU, ``cpu_known=False``).

Left out, and why:

- DPDK runs (``io`` ``dpdk``) and the two interop mixes (``mixed``): kernel
  bypass is not modelled by the engines;
- runs whose I/O the files do not state (``copy``, ``old/output_tp_reverse``);
- several concurrent clients, request and handshake workloads, the proxy
  experiments (iperf3 and the UDP generator are no QUIC stack);
- runs without encryption (no Scenario cipher expresses it);
- builds no model describes (the authors' patched and "fair" picoquic, the
  vanilla and clean builds) and the early scripts' runs (``old``).

The cores the stacks were pinned to and the interrupt core become the
Scenario's ``server_core``/``client_core`` and ``irq_core``.

Implementation names (``runs.server_impl`` → Scenario): ``picoquic`` (the
authors' ``dpdk_picoquicdemo --nodpdk`` and the picoquic demo of the early
runs), ``msquic`` (``secnetperf``), ``quiche`` (``http3-server`` /
``http3-client``), ``quicly`` (``cli``) keep their names; ``tcp+tls`` is
picotls's ``cli -B`` over kernel TCP (TLS 1.3, AES128-GCM), the workbench's
TCP+TLS reference. Application protocol: picoquic and quiche ``h3`` (the
client logs ``Negotiated ALPN: h3``; quiche's HTTP/3 examples), MsQuic and
quicly ``perf`` (secnetperf's and quicly cli's own transfer protocol, no HTTP),
TCP+TLS ``perf`` (a raw TLS stream; the model ignores the field).
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from quiclab.calibration.evidence import Evidence
from quiclab.calibration.knowledge import IMPLEMENTATIONS
from quiclab.datasets.testbeds import UCLOUVAIN
from quiclab.models.testbeds import unknown_cpu_name
from quiclab.sim.scenario import Scenario

#: The link rate given to every cell's Scenario, in Gbit/s. The files do not
#: record it: the NICs are Mellanox ConnectX-5 (25, 50 or 100 Gbit/s ports),
#: iperf3 TCP carried 37.6 Gbit/s over 30 s on this pair (40.9 in the older
#: topology; the dataset README quotes 32.7) and the authors' DPDK generator
#: counted 93.2 Gbit/s of 1200-byte datagrams, which only a 100 Gbit/s port
#: carries (testbed ``uclouvain``'s ``link_note``). 100 is therefore the value
#: the measurements support; every kernel-I/O cell is CPU-bound at ≤ 20.4
#: Gbit/s, so any rate above 37.6 predicts the same unless the link binds.
LINK_GBPS = 100.0
#: Application protocol per implementation (module docstring).
APPS = {"picoquic": "h3", "quiche": "h3", "msquic": "perf", "quicly": "perf",
        "tcp+tls": "perf"}
#: What identifies a cell besides its experiment and stacks: conditions the runs
#: record (``runs`` columns) and, from ``extra``, the cipher suite, a variant tag
#: (``Fair``, ``Patched``) and whether the run was encrypted.
CELL_COLUMNS = ("cpu_list", "cores", "irq_cpu_list", "gso", "gro", "tso", "lro", "sg",
                "cipher", "cc")


def _extra(text: Any, key: str) -> Any:
    try:
        value = json.loads(text).get(key)
    except (TypeError, ValueError, AttributeError):
        return None
    return value


def _key_value(value: Any) -> Any:
    """A hashable, NaN-free cell key part (pandas groupby drops NaN keys otherwise)."""
    if value is None or (isinstance(value, float) and value != value) or value is pd.NA:
        return None
    return value.item() if hasattr(value, "item") else value


def bulk_kernel_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The UCLouvain runs a cell may hold: ok, kernel I/O, one bulk connection,
    encrypted, a positive goodput, implementations the workbench knows."""
    if runs.empty or "io" not in runs:
        return runs.iloc[0:0]
    df = runs[(runs["source"] == UCLOUVAIN) & (runs["status"] == "ok")
              & (runs["io"] == "kernel")].copy()
    df = df[df["workload"].fillna("bulk").eq("bulk")
            & df["connections"].fillna(1).eq(1)
            & df["goodput_mbps"].gt(0)
            & df["server_impl"].isin(list(IMPLEMENTATIONS))
            & df["client_impl"].isin(list(IMPLEMENTATIONS))]
    df["encryption"] = [_extra(t, "encryption") is not False for t in df["extra"]]
    return df[df["encryption"]]


def _placement(cpu_list: Any, irq_cpu_list: Any) -> dict[str, int]:
    """Scenario core fields from the cores the stack was given (``taskset -c``, the
    same on both hosts) and the core that handles the NIC's interrupts: the stack's
    (first) core on both ends, and the interrupt core (NPF ``%init``: one queue,
    ``set_irq_affinity_cpulist.sh 2``)."""
    out: dict[str, int] = {}
    first = str(cpu_list).split(",")[0] if cpu_list is not None else ""
    if first.isdigit():
        out["server_core"] = out["client_core"] = int(first)
    irq = str(irq_cpu_list).split(",")[0] if irq_cpu_list is not None else ""
    if irq.isdigit() and len(str(irq_cpu_list).split(",")) == 1:
        out["irq_core"] = int(irq)
    return out


def cells(runs: pd.DataFrame) -> list[Evidence]:
    """One Evidence per condition cell of the UCLouvain kernel-I/O bulk runs.

    A cell is the runs of one experiment with the same stacks and builds and the
    same recorded conditions (:data:`CELL_COLUMNS`, cipher suite, variant), so
    that two files of the same conditions (``cmp/picotls_ctesting_no_GRO`` and
    ``cmp/picotls/picotls_ctesting_nogro``) form one cell. The Scenario carries
    what the engines can express: the stacks, the application protocol, the
    transfer size (median), GSO/GRO, the cipher (AES-GCM as ``aes-ni``:
    assumed hardware-accelerated, the CPU is unknown), picoquic's recorded UDP
    payload (``max_mtu_sent``), :data:`LINK_GBPS`, the testbed and its stand-in
    CPU (``models.testbeds.unknown_cpu_name``, ``cpu_known=False``), whose speed
    the calibration fits. Congestion control stays the default (picoquic ran
    BBR, which the cost models refuse; the cells are CPU-bound on a lossless
    direct link). The rest is in ``Evidence.conditions``.
    """
    df = bulk_kernel_runs(runs)
    if df.empty:
        return []
    df["suite"] = [_extra(t, "cipher_suite") for t in df["extra"]]
    df["variant"] = [_extra(t, "variant") for t in df["extra"]]
    # Builds no model describes (the authors' patched and "fair" picoquic, the
    # vanilla and clean builds of their early scripts) and the early scripts'
    # runs (another topology, 1 GB transfers) stay out of the evidence.
    df = df[df["variant"].isna() & (df["experiment"] != "old")]
    if df.empty:
        return []
    keys = ["experiment", "server_impl", "server_build", "client_impl", "client_build",
            *CELL_COLUMNS, "suite", "variant"]
    df["cell"] = [tuple(_key_value(v) for v in row)
                  for row in df[keys].itertuples(index=False, name=None)]
    out: list[Evidence] = []
    for key, cell in df.groupby("cell", sort=True):
        named = dict(zip(keys, key, strict=True))
        server, client = named["server_impl"], named["client_impl"]
        g = cell["goodput_mbps"].astype(float)
        fields: dict[str, Any] = {
            "server": server, "client": client, "app": APPS.get(server, "perf"),
            "link_gbps": LINK_GBPS,
            "transfer_bytes": int(cell["filesize_bytes"].median()),
            "cipher": "chacha20" if named["cipher"] == "chacha20" else "aes-ni",
            "gso": named["gso"] is not False, "gro": named["gro"] is not False,
            **_placement(named["cpu_list"], named["irq_cpu_list"]),
            # The hosts' CPU is not recorded: the testbed's stand-in CPU, whose speed
            # the calibration fits from these cells (quiclab.models.testbeds).
            "testbed": UCLOUVAIN, "cpu": unknown_cpu_name(UCLOUVAIN),
        }
        payload = cell["udp_payload_bytes"].dropna()
        if server != "tcp+tls" and not payload.empty:
            fields["udp_payload_bytes"] = int(payload.median())
        if server == "tcp+tls":
            # Kernel TCP's offloads as the NPF scripts set them on the ConnectX-5s (on
            # unless switched off); without scatter-gather the kernel turns TSO and GSO
            # off too (netdev_fix_features).
            fields.update(tso=named["tso"] is not False, lro=named["lro"] is not False)
            if named["sg"] is False:
                fields.update(tso=False, gso=False)
        offs = [name for name in ("gro", "lro", "tso", "gso", "sg") if named[name] is False]
        conditions = tuple((name, named[name]) for name in (
            "cpu_list", "cores", "irq_cpu_list", "tso", "lro", "sg", "cc", "suite", "variant")
            if named[name] is not None)
        conditions += (("settings", tuple(sorted(set(cell["setting"])))),)
        ident = (f"uclouvain|{named['experiment']}|{server}|{client}|"
                 f"cpus={named['cpu_list'] or 'any'}|off={'+'.join(offs) or 'none'}|"
                 f"{named['suite'] or named['cipher'] or 'default'}|"
                 f"cc={named['cc'] or 'default'}"
                 + (f"|{named['variant']}" if named["variant"] else ""))
        out.append(Evidence(
            Scenario.from_dict(fields, source=ident), float(g.median()),
            # Kernel TCP's costs are this host's, moved by the CPU rule (calibration/tcp.py):
            # its UCLouvain cells check that model and are not fitted (REFERENCE_GROUPS).
            "uclouvain-tcp" if server == "tcp+tls" else f"uclouvain-{named['experiment']}",
            "dataset", ident, n=len(g),
            variation=float(g.std() / g.mean()) if len(g) > 1 else 0.0,
            cpu_known=False, conditions=conditions))
    return out
