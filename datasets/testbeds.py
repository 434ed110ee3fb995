"""Testbeds: where every run and published point was measured.

A testbed is the hosts (CPU model or ``"unknown"``, cores, NIC and its
offloads, kernel), the link between them and its rate, and the path. Every
fact carries its source (a seed's section or table, a dataset README, a file
of the dataset); a fact no source states is ``None`` (``"unknown"`` for the
CPU), never a guess. :func:`records` returns them for the calibration;
:func:`load` writes them into the catalog's ``testbeds`` table.

Ids: ``qir10g`` (the TUM QIR-10G hosts of seed 002 and its raw data),
``koenig25`` (seed 000), ``mukherjee25`` (seed 001), ``tquic`` (seed 003),
``litespeed`` (seed 004), ``uclouvain`` (the picoquic-DPDK experiments),
``fresh-<hostname>`` (network namespaces on the host that ran the testbed) and
``fresh-<hostpair>`` (an inventory's two hosts over SSH, :func:`fresh_pair`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from quiclab.datasets.catalog import Catalog

QIR10G = "qir10g"
KOENIG25 = "koenig25"
MUKHERJEE25 = "mukherjee25"
TQUIC = "tquic"
LITESPEED = "litespeed"
UCLOUVAIN = "uclouvain"
#: Seed document → its testbed (``published_points.testbed``). Seed 002's Fig. 8
#: points on other CPUs are still that lab's testbed; their CPU is the point's own.
DOCUMENT_TESTBEDS: dict[str, str] = {"000": KOENIG25, "001": MUKHERJEE25, "002": QIR10G,
                                     "003": TQUIC, "004": LITESPEED}
FRESH_PREFIX = "fresh-"
UNKNOWN_CPU = "unknown"

S000 = "seed 000 (König et al. 2025)"
S001 = "seed 001 (Mukherjee et al. 2025)"
S002 = "seed 002 (Kempf et al. 2024)"
QIR_README = "../shared/datasets/tumi8-quic-10g-paper/README.md"
UCL_README = "../shared/datasets/picoquic-dpdk-experiments/README.md"
UCL_HARNESS = "EverythingTesting/scripts/automated_tests.py"


@dataclass(frozen=True)
class Host:
    """One host (or a pair of identical hosts, ``count`` 2) of a testbed."""

    name: str
    cpu: str = UNKNOWN_CPU
    cores: int | None = None
    threads: int | None = None
    memory_gb: int | None = None
    nic: str | None = None
    role: str = "server and client"
    count: int = 1
    note: str = ""


@dataclass(frozen=True)
class Testbed:
    """One testbed: its main facts as columns, its hosts, and the source of each fact.

    ``cpu`` is a catalog CPU name (``models/cpus.json``) or ``"unknown"``;
    ``cores``/``threads`` are per host; ``link_gbps`` is None when no source states
    the rate (``link_note`` says what is known); ``sources`` maps each fact
    (a field name) to where it comes from.
    """

    testbed: str
    description: str
    kind: str  # "dataset" | "published" | "fresh"
    documents: str = ""
    cpu: str = UNKNOWN_CPU
    cpu_ghz: float | None = None
    cores: int | None = None
    threads: int | None = None
    nic: str | None = None
    offloads: str | None = None
    kernel: str | None = None
    os: str | None = None
    link_gbps: float | None = None
    link_note: str | None = None
    path: str | None = None
    mtu_bytes: int | None = None
    hosts: tuple[Host, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def cpu_known(self) -> bool:
        return self.cpu != UNKNOWN_CPU

    def to_row(self) -> dict[str, Any]:
        row = {k: v for k, v in asdict(self).items() if k not in ("hosts", "sources")}
        row["hosts"] = json.dumps([asdict(h) for h in self.hosts], sort_keys=True)
        row["sources"] = json.dumps(self.sources, sort_keys=True)
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Testbed:
        hosts = tuple(Host(**h) for h in json.loads(row.get("hosts") or "[]"))
        sources = json.loads(row.get("sources") or "{}")
        plain: dict[str, Any] = {k: (None if _isnull(v) else v) for k, v in row.items()
                                 if k not in ("hosts", "sources")}
        return cls(**plain, hosts=hosts, sources=sources)


def _isnull(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


#: The testbeds the seeds and the datasets describe.
STATED: tuple[Testbed, ...] = (
    Testbed(
        QIR10G, "TUM QUIC Interop Runner on bare metal (Kempf et al. 2024, Jaeger et al. "
                "2023): the QIR-10G raw data's hosts goracle and gard, and the other host "
                "pairs of seed 002 Table 1",
        "dataset", documents="002", cpu="AMD EPYC 7543", cpu_ghz=3.7, cores=32, threads=64,
        nic="Broadcom BCM57416 (10 Gbit/s); a 100 Gbit/s NIC on NUMA node 1 (§4.7)",
        offloads="TSO, GSO, GRO on (Linux defaults; the raw data varies none)",
        kernel="5.10.0-8-amd64", os="Debian Bullseye", link_gbps=10.0,
        path="client and server hosts on one 10 Gbit/s link (and a 100 Gbit/s link); the "
             "runner on a separate management host",
        mtu_bytes=1500,
        hosts=(Host("goracle, gard", "AMD EPYC 7543", 32, 64, 512, "Broadcom BCM57416",
                    count=2, note="AMD-2, the default pair and the raw data's hosts"),
               Host("AMD-1 pair", "AMD EPYC 7551P", count=2, note="seed 002 Fig. 8 only"),
               Host("AMD-3 pair", "AMD EPYC 9354", count=2, note="seed 002 Fig. 8 only"),
               Host("Intel-1 pair", "Intel Xeon D-1518", count=2, note="seed 002 Fig. 8 only"),
               Host("Intel-2 pair", "Intel Xeon Gold 6312U", count=2,
                    note="seed 002 Fig. 8 only")),
        sources={"cpu": f"{S002} §3.2, Table 1 (AMD-2); {QIR_README}",
                 "cpu_ghz": f"{S002} Table 1 (max GHz); {QIR_README}",
                 "cores": f"{S002} §4.7: 32 cores and 64 threads",
                 "threads": f"{S002} §4.7", "nic": f"{S002} §3.2, §4.7; {QIR_README}",
                 "offloads": f"{S002} §2.4 (Linux offloads), docs/explanation/catalog.md",
                 "kernel": f"{S002} §3.2", "os": f"{S002} §3.2; {QIR_README}",
                 "link_gbps": f"{S002} §3.2", "path": f"{S002} §3.1–3.2, Fig. 2",
                 "mtu_bytes": f"{S002} §3.2 (default setup)",
                 "hosts": f"{S002} Table 1: five host pairs, client and server alike"}),
    Testbed(
        KOENIG25, "KIT testbed of König et al. 2025: two Xeon W-2145 endpoints through a "
                  "hardware switch and a NetEm software switch",
        "published", documents="000", cpu="Intel Xeon W-2145", cpu_ghz=4.5, cores=8, threads=16,
        nic="Intel X550-T2", offloads="GSO/GRO on or off per experiment (§VI-D)",
        kernel="5.15.0-56-generic", os="Ubuntu 22.04.1 LTS", link_gbps=10.0,
        path="sender → hardware switch → software switch (NetEm) → receiver, 10 Gbit/s links",
        mtu_bytes=1500,
        hosts=(Host("sender, receiver, software switch", "Intel Xeon W-2145", 8, 16, 128,
                    "Intel X550-T2", count=3, note="identically configured (§IV)"),),
        sources={"cpu": f"{S000} Table I", "cpu_ghz": f"{S000} Table I: 3.7–4.5 GHz",
                 "cores": f"{S000} Table I", "threads": f"{S000} Table I",
                 "nic": f"{S000} Table I", "offloads": f"{S000} §VI-D, Fig. 9a",
                 "kernel": f"{S000} Table I", "os": f"{S000} Table I",
                 "link_gbps": f"{S000} §IV", "path": f"{S000} §IV, Fig. 2",
                 "mtu_bytes": f"{S000} §VI-D (1500; 9000 in the jumbo-frame runs)",
                 "hosts": f"{S000} §IV"}),
    Testbed(
        MUKHERJEE25, "CloudLab host pairs of Mukherjee et al. 2025: x1170 (Intel E5-2640 v4, "
                     "ConnectX-4) for most results, AMD 7302P (ConnectX-5) for quicly",
        "published", documents="001", cpu="Intel Xeon E5-2640 v4", cpu_ghz=3.4, cores=10,
        threads=20, nic="Mellanox ConnectX-4 25 Gbit/s (one port); ConnectX-5 on the AMD pair",
        offloads="GSO on in every run; GRO where the stack uses it (§2)",
        kernel="Linux 5.4", os="Ubuntu 20.04", link_gbps=25.0,
        path="two CloudLab machines per pair, one 25 Gbit/s port each",
        mtu_bytes=1500,
        hosts=(Host("x1170 pair", "Intel Xeon E5-2640 v4", nic="Mellanox ConnectX-4 25 Gbit/s",
                    count=2, note="all results before §5 and every mvfst run"),
               Host("AMD pair", "AMD EPYC 7302P", nic="Mellanox ConnectX-5 25 Gbit/s",
                    count=2, note="every quicly run of §5 (MTU up to 4000)")),
        sources={"cpu": f"{S001} §5 (evaluation setup)",
                 "cpu_ghz": "models/cpus.json (the catalog's max clock)",
                 "cores": "models/cpus.json", "threads": "models/cpus.json",
                 "nic": f"{S001} §5", "offloads": f"{S001} §2 ('All evaluation is done with "
                                                    "GSO enabled')",
                 "kernel": f"{S001} §5", "os": f"{S001} §5", "link_gbps": f"{S001} §2, §5",
                 "path": f"{S001} §5", "mtu_bytes": f"{S001} §5: 1500, up to 4000",
                 "hosts": f"{S001} §5"}),
    Testbed(
        TQUIC, "TQUIC benchmark machine: client and server on one AMD EPYC 7K62 host, on "
               "different cores",
        "published", documents="003", cpu="AMD EPYC 7K62", cpu_ghz=3.3, cores=48, threads=96,
        kernel="Linux 4.14",
        path="client and server on the same machine, different CPU cores (the network "
             "between them is not stated)",
        hosts=(Host("benchmark host", "AMD EPYC 7K62", 48, 96, role="server and client"),),
        sources={"cpu": "seed 003 (TQUIC benchmarking page), 'CPU AMD EPYC 7K62 48-Core'",
                 "cpu_ghz": "models/cpus.json", "cores": "seed 003",
                 "threads": "models/cpus.json", "kernel": "seed 003 'OS Linux 4.14'",
                 "path": "seed 003 'Methods for testing'"}),
    Testbed(
        LITESPEED, "LiteSpeed QUIC benchmark: two machines on a private network with a 10G link",
        "published", documents="004", link_gbps=10.0,
        path="client and server machines on a private network, one 10G link",
        hosts=(Host("client machine"), Host("server machine")),
        sources={"link_gbps": "seed 004 (LiteSpeed benchmarks page), test setup",
                 "path": "seed 004, test setup", "cpu": "not stated by seed 004"}),
    Testbed(
        UCLOUVAIN, "UCLouvain picoquic-DPDK experiments (Tyunyayev, Piraux et al.): two "
                   "directly connected hosts with Mellanox ConnectX-5 NICs",
        "dataset", cpu=UNKNOWN_CPU, threads=32,
        nic="Mellanox ConnectX-5 (MT27800 family), ens1f0; DPDK 21.11 at PCI 0000:18:00.0",
        offloads="GRO, LRO, TSO, GSO, scatter-gather on by default; switched off one by one "
                 "in the picotls runs (ethtool -K); one combined NIC queue, interrupts on "
                 "core 2, irqbalance stopped (NPF %init)",
        link_note="rate not recorded: ConnectX-5 ports are 25, 50 or 100 Gbit/s. iperf3 TCP "
                  "through the DPDK L2 forwarder carried 37.6 Gbit/s over 30 s "
                  "(proxy/noproxyTCP1200.txt; 40.9 in proxy/oldtopo/; the README quotes "
                  "32.7), so the port is faster than 25 Gbit/s; the authors' DPDK UDP "
                  "generator counted 93.2 Gbit/s of 1200-byte datagrams (noproxy_1200.txt, "
                  "where it counted them is not stated)",
        path="two directly connected hosts: grincheux (client), dormeur (server), "
             "10.100.0.0/24",
        hosts=(Host("dormeur", role="server", nic="Mellanox ConnectX-5"),
               Host("grincheux", role="client", nic="Mellanox ConnectX-5")),
        sources={"cpu": f"not recorded ({UCL_README})",
                 "threads": "inferred: NPF quic_tester_handshakes.npf %init@client sets 32 "
                            "combined queues with interrupts on CPUs 0-31 (README: 'suggests "
                            "32 logical CPUs')",
                 "nic": f"EverythingTesting/scripts/cards.txt; {UCL_README}; "
                        "quic_tester_compare.npf (DPDK -a 0000:18:00.0)",
                 "offloads": f"{UCL_HARNESS} reset_nics, picotls_full_testing_test, "
                             "picotls_testing_no_gro_no_lro_no_sg_test; "
                             "quic_tester_compare.npf %init",
                 "link_note": f"{UCL_README}; EverythingTesting/data/proxy/noproxyTCP1200.txt, "
                              "proxy/oldtopo/noproxyTCP1100.txt, noproxy_1200.txt",
                 "path": f"{UCL_README}; cluster/client.node, cluster/server.node",
                 "kernel": "not recorded", "mtu_bytes": "not recorded (picoquic's largest "
                                                       "packet, max_mtu_sent, is 1440 bytes)",
                 "hosts": "cluster/*.node"}),
)


@dataclass(frozen=True)
class HostFacts:
    """What this host says about itself, for its ``fresh-<hostname>`` testbed."""

    hostname: str
    cpu: str = UNKNOWN_CPU
    cpu_ghz: float | None = None
    threads: int | None = None
    kernel: str | None = None


def fresh_id(hostname: str) -> str:
    """The testbed id of fresh runs made on ``hostname``."""
    return FRESH_PREFIX + (hostname or "unknown")


def fresh(host: HostFacts) -> Testbed:
    """The testbed of fresh runs on one host: two network namespaces joined by a
    veth pair (``testbed/topology.py``), rate, delay and loss set per run."""
    return Testbed(
        fresh_id(host.hostname), f"fresh runs on {host.hostname}: two network namespaces "
                                 "joined by a veth pair", "fresh",
        cpu=host.cpu or UNKNOWN_CPU, cpu_ghz=host.cpu_ghz, threads=host.threads,
        nic="veth pair (virtual)",
        offloads="GSO/GRO per run (runs.gso, runs.gro); veth segmentation per run",
        kernel=host.kernel,
        link_note="no NIC: the rate is a per-run tc limit (runs.link_gbps), else the host's "
                  "memory and CPU",
        path="server and client namespaces on one host, veth pair, optional delay relay",
        hosts=(Host(host.hostname, host.cpu or UNKNOWN_CPU, threads=host.threads,
                    nic="veth", role="server and client (namespaces)"),),
        sources={"cpu": "/proc/cpuinfo of the host (runs.cpu of its fresh runs)",
                 "threads": "the host's logical CPU count", "kernel": "uname -r of the host",
                 "path": "testbed/topology.py, testbed/README.md",
                 "offloads": "testbed/README.md"})


def fresh_pair(testbed: str, server: dict[str, Any], client: dict[str, Any]) -> Testbed:
    """The testbed of fresh runs on an inventory's two hosts over SSH (``quiclab testbed
    … --hosts``, id ``fresh-<hostpair>``), from the hosts' records of its latest run
    (``extra.hosts.<role>``, testbed/hosts.py ``host_record``)."""
    def host(rec: dict[str, Any], role: str) -> Host:
        cpu, nic = rec.get("cpu") or {}, rec.get("nic") or {}
        return Host(str(rec.get("name")), str(cpu.get("name") or UNKNOWN_CPU),
                    cores=cpu.get("cores"), threads=cpu.get("threads"),
                    nic=f"{nic.get('driver')} {nic.get('interface')} (firmware "
                        f"{nic.get('firmware') or '-'}, {nic.get('speed_mbps') or '?'} Mbit/s)",
                    role=role)
    speeds = [float(s) / 1e3 for rec in (server, client)
              if isinstance(s := (rec.get("nic") or {}).get("speed_mbps"), int | float)]
    cpu = server.get("cpu") or {}
    recorded = "extra.hosts of its runs (the host's /proc/cpuinfo, uname, ethtool -i)"
    return Testbed(
        testbed, f"fresh runs on two hosts over SSH: {server.get('name')} (server) and "
                 f"{client.get('name')} (client)", "fresh",
        cpu=str(cpu.get("name") or UNKNOWN_CPU), cpu_ghz=cpu.get("max_ghz"),
        cores=cpu.get("cores"), threads=cpu.get("threads"),
        nic=host(server, "server").nic, offloads="per run (extra.hosts.<role>.nic.features)",
        kernel=server.get("kernel"), link_gbps=min(speeds) if speeds else None,
        link_note="the slower NIC's speed; a run's tc rate is runs.link_gbps",
        path="the inventory's test interfaces; delay by netem, else a relay on the client",
        hosts=(host(server, "server"), host(client, "client")),
        sources={k: recorded for k in ("cpu", "cpu_ghz", "cores", "threads", "nic", "kernel",
                                       "link_gbps")})


def records(catalog: Catalog | None = None) -> list[Testbed]:
    """The testbeds: the catalog's ``testbeds`` table when given (it also holds
    each fresh host's testbed), else the stated ones."""
    if catalog is None:
        return list(STATED)
    df = catalog.df("SELECT * FROM testbeds ORDER BY testbed")
    return [Testbed.from_row(row) for row in df.to_dict("records")]


def by_id(catalog: Catalog | None = None) -> dict[str, Testbed]:
    return {tb.testbed: tb for tb in records(catalog)}


def load(catalog: Catalog, host: HostFacts | None = None) -> int:
    """Replace the ``testbeds`` table: the stated testbeds, this host's fresh
    testbed (``host``), and one for every other ``fresh-*`` testbed the runs name
    (its CPU from those runs' ``cpu``). Returns rows written."""
    rows = {tb.testbed: tb for tb in STATED}
    if host is not None:
        rows[fresh_id(host.hostname)] = fresh(host)
    seen = catalog.con.execute(
        "SELECT testbed, mode(cpu) FROM runs WHERE testbed LIKE ? GROUP BY testbed",
        [FRESH_PREFIX + "%"]).fetchall()
    for testbed, cpu in seen:
        if testbed in rows:
            continue
        # Runs on an inventory's hosts record them; the namespace pair's name its host.
        latest = catalog.con.execute(
            "SELECT json_extract(extra, '$.hosts') FROM runs WHERE testbed = ? AND "
            "hostpair <> 'veth' AND json_extract_string(extra, '$.hosts.server.kind') = 'ssh' "
            "ORDER BY start_ns DESC LIMIT 1",
            [testbed]).fetchone()
        hosts = json.loads(latest[0]) if latest and latest[0] else None
        rows[testbed] = (fresh_pair(testbed, hosts["server"], hosts["client"]) if hosts
                         else fresh(HostFacts(testbed[len(FRESH_PREFIX):], cpu or UNKNOWN_CPU)))
    with catalog.transaction():
        catalog.con.execute("DELETE FROM testbeds")
        catalog.upsert("testbeds", [tb.to_row() for tb in rows.values()])
    return len(rows)
