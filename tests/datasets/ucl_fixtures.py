"""A tiny synthetic UCLouvain picoquic-dpdk-experiments tree.

Every byte is generated here (no dataset file is copied), with hand-chosen
numbers whose expected results are the constants below. The text of each
output format follows what the tools print (see
``datasets/sources/ucl_parsers.py``).
"""

from __future__ import annotations

import tarfile
from pathlib import Path

DATA = "EverythingTesting/data"

#: A minimal NPF test definition: two stacks, the cores variable, the %init that
#: pins the NIC's interrupts to core 2 and stops irqbalance.
_INIT = ("sudo ethtool -L ens1f0 combined 1 && sudo systemctl stop irqbalance && "
         "sudo /usr/sbin/set_irq_affinity_cpulist.sh 2 ens1f0")
NPF = f"""%info
A small comparison

%variables
NB_CORES={{2:1core,4:2cores}}

%config
n_runs=3

%init@client
{_INIT}

%init@server
{_INIT}

// a comment
%picoquic:script@server sudo=true
taskset -c $NB_CORES dpdk_picoquicdemo --nodpdk -p 4443

%picoquic:script@client sudo=true delay=3
taskset -c $NB_CORES dpdk_picoquicdemo --nodpdk -D 10.100.0.2 4443 /1000000000

%msquic:script@client sudo=true delay=3
secnetperf -cipher:1 -TestName:throughput -target:10.100.0.2 -download:1000000000
"""


def picoquic_block(nbytes: int, seconds: float, mtu: int = 1440) -> str:
    """One client run of the picoquic demo (kernel I/O), ending in success."""
    mbps = nbytes * 8 / seconds / 1e6
    return (f"Starting Picoquic (v1.01) connection to server = 10.100.0.2, port = 4443\n"
            "Waiting for packets.\nNegotiated ALPN: h3\n\n"
            "Connection established. Version = 1, I-CID: 0123456789abcdef, verified: 1\n"
            "ECN was received (ect0: 100, ect1: 0, ce: 0).\n"
            f"Received {nbytes} bytes in {seconds:.6f} seconds, {mbps:.6f} Mbps.\n"
            f"max_ack_gap_local: 3\nmax_mtu_sent: {mtu}\nmax_mtu_received: {mtu}\n"
            "Client exit with code = 0\n")


PICOQUIC_FAILED = ("Starting Picoquic (v1.01) connection to server = 10.100.0.2, port = 4443\n"
                   "Waiting for packets.\n"
                   "Closed. Retrans= 7, spurious= 0, dg-coal: 1.0Connection end with local "
                   "error 0x433.\nClient exit with code = -1\n")

#: picoquic -c-2 file: a failed run, then runs of 1 GB in 2.0 s and 2.5 s.
PICOQUIC_C2 = PICOQUIC_FAILED + picoquic_block(1_000_000_025, 2.0) + \
    picoquic_block(1_000_000_025, 2.5)
#: MsQuic with GRO off: 4000 and 5000 Mbit/s for 1 GB, then a cut run.
MSQUIC_NO_GRO = ("Started!\n\nResult: 1000000000 bytes @ 4000000 kbps (2000.000 ms).\n"
                 "App Main returning status 0\n"
                 "Started!\n\nResult: 1000000000 bytes @ 5000000 kbps (1600.000 ms).\n"
                 "App Main returning status 0\nStarted!\n")
#: quicly -c-4: 20 GB in 20 s (8 Gbit/s) and 16 s (10 Gbit/s).
QUICLY_C4 = "time : 20.000000 s.\nGoodput : 8.000000 Gbps\n" \
            "time : 16.000000 s.\nGoodput : 10.000000 Gbps\n"
#: quiche -c-4,6: 10 GB in 20 s = 4000 Mbit/s.
QUICHE_C46 = ("https://10.100.0.2:4445/10000000000\ninside\ngot 10000000000 bytes in total\n"
              "20000.000 ms\ngoodput : 4000.0 Mbps\ndone!!!\n")
#: picotls over TCP without LRO and TSO: 75 GB in 30 s (20000 Mbit/s; printed with
#: the stray digit of the tool), a run that received nothing, 60 GB in 30 s.
PICOTLS_NO_LRO_TSO = ("server started on port 8443\nwaiting for connections\n"
                      "received 75000000000 bytes in 30.000 seconds (20000.000000.3Mbps); "
                      "AES128-GCM\nwaiting for connections\n"
                      "server started on port 8443\nwaiting for connections\n"
                      "server started on port 8443\nwaiting for connections\n"
                      "received 60000000000 bytes in 30.000 seconds (16000.000000.3Mbps); "
                      "AES128-GCM\nwaiting for connections\n")
#: picotls handshakes, 16 clients, irqbalance on: three 10-s runs.
PICOTLS_HANDSHAKES = "10000\n9000\n11000\n\n"
#: picoquic-DPDK, 2 server cores, 8 clients: two repetitions of 8 lines each.
TP_2CORE = "".join(f"Received 1000000025 bytes in {2 + i / 10:.6f} seconds, "
                   f"{1000000025 * 8 / (2 + i / 10) / 1e6:.6f} Mbps.\n" for i in range(16))
#: DPDK batching, TX 4, RX 64: three runs, the second cut in the middle of its line.
BATCHING_TX4 = ("Received 20000000025 bytes in 10.000000 seconds, 16000.000002 Mbps.\n"
                "Received 20000000025 bytes in 1")
#: picoquic-DPDK handshakes served in 20 s.
HANDSHAKES_DPDK = "Number of handshakes served : 7000\nNumber of handshakes served : 7200\n"
#: iperf3 TCP with MSS 1200 through the DPDK proxy: one run with its summary.
IPERF_TCP = ("Connecting to host 3.0.0.1, port 5201\n"
             "[  5] local 1.0.0.1 port 55038 connected to 3.0.0.1 port 5201\n"
             "[ ID] Interval           Transfer     Bitrate         Retr  Cwnd\n"
             "[  5]   0.00-1.00   sec  1.00 GBytes  8.59 Gbits/sec  10   500 KBytes\n"
             "- - - - - - - - - - - - - - - - - - - - - - - - -\n"
             "[  5]   0.00-30.00  sec  30.0 GBytes  8.59 Gbits/sec  300             sender\n"
             "[  5]   0.00-30.00  sec  29.9 GBytes  8.56 Gbits/sec                  receiver\n"
             "\niperf Done.\n")
RSS_BALANCE = "queueid : 0\nqueueid : 1\n"


def build_ucl_tree(root: Path, extra: dict[str, str] | None = None) -> Path:
    """Write the tree under ``root`` (the dataset's own root) and return it."""
    files = {
        "README.md": "# README\nsynthetic\n",
        "quic_tester_compare.npf": NPF,
        "cluster/client.node": "addr=grincheux\n",
        f"{DATA}/cmp/picoquic_ctesting-c-2.txt": PICOQUIC_C2,
        f"{DATA}/cmp/msquic_ctesting_no_GRO.txt": MSQUIC_NO_GRO,
        f"{DATA}/cmp/quicly_ctesting-c-4.txt": QUICLY_C4,
        f"{DATA}/cmp/quiche_ctesting-c-4,6.txt": QUICHE_C46,
        f"{DATA}/cmp/picotls_ctesting_no_LRO_no_TSO.txt": PICOTLS_NO_LRO_TSO,
        f"{DATA}/cmp/handshakes/picotls_16_clients_with_irqbalance.txt": PICOTLS_HANDSHAKES,
        f"{DATA}/TP_2core_dpdk_8_client.txt": TP_2CORE,
        f"{DATA}/batching/throughput_4_fixed_20GB_RX64_dpdk.txt": BATCHING_TX4,
        f"{DATA}/handshake_dpdk.txt": HANDSHAKES_DPDK,
        f"{DATA}/proxy/proxyTCP1200.txt": IPERF_TCP,
        f"{DATA}/RSS/balance_5core_dpdk_8_client.txt": RSS_BALANCE,
        f"{DATA}/test.txt": "",
        **(extra or {}),
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


#: What the tree above gives: runs per file (failed ones included).
RUNS_PER_FILE = {
    "cmp/picoquic_ctesting-c-2.txt": 3,  # 1 failed + 2 ok
    "cmp/msquic_ctesting_no_GRO.txt": 2,  # the cut third run is an issue, not a row
    "cmp/quicly_ctesting-c-4.txt": 2,
    "cmp/quiche_ctesting-c-4,6.txt": 1,
    "cmp/picotls_ctesting_no_LRO_no_TSO.txt": 3,  # 2 ok + 1 failed (nothing received)
    "cmp/handshakes/picotls_16_clients_with_irqbalance.txt": 3,
    "TP_2core_dpdk_8_client.txt": 16,
    "batching/throughput_4_fixed_20GB_RX64_dpdk.txt": 1,  # the cut line is an issue
    "handshake_dpdk.txt": 2,
    "proxy/proxyTCP1200.txt": 1,
}


def pack(root: Path, dest: Path, wrapper: str = "picoquic-dpdk-experiments-1eb8402") -> Path:
    """Pack the tree as ``.tar.xz`` under a wrapper folder (a download's layout)."""
    with tarfile.open(dest, "w:xz") as tar:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                tar.add(path, arcname=f"{wrapper}/{path.relative_to(root)}")
    return dest
