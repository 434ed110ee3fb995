"""What each output file of the UCLouvain picoquic-DPDK experiments measured.

``classify(path, npf)`` maps a file under ``EverythingTesting/data/`` to a
:class:`FileSpec`: the experiment, the stacks, DPDK or kernel I/O, and the
conditions its name and the authors' harness imply. Sources, cited per rule:

- the NPF test definitions (``quic_tester_compare.npf``: the stacks' command
  lines, the cores variable ``NB_CORES``, ``%init``'s single NIC queue with
  its interrupts on core 2 and irqbalance stopped; parsed, not copied);
- the harness that wrote the files (``EverythingTesting/scripts/
  automated_tests.py``: one function per file family, named in ``source``);
- the plotting scripts' labels (``simplePlotter.py``: ``-c 2`` is "1 core",
  ``-c 4`` "2 cores" — the stack on core 4, the NIC's interrupts on core 2 —,
  no ``taskset`` "no restriction"; ``BBR20`` is ChaCha20, ``BBR128``/``256``
  AES-128/256);
- the file names themselves (``_no_GRO``, ``_RX64``, ``_8_client``).

What none of them records — CPU model and clock, kernel, MTU, link rate — is
not set here (NULL in the catalog). Library code: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from quiclab.datasets.sources.npf import NpfTest

#: Where the output files live inside the dataset.
DATA_DIR = "EverythingTesting/data/"
#: The NPF definition of the stack comparison (``cmp/`` files).
COMPARE_NPF = "quic_tester_compare.npf"
HARNESS = "EverythingTesting/scripts/automated_tests.py"
#: The five kernel offloads the authors switch off (``ethtool -K ens1f0 X off``:
#: automated_tests.py ``picotls_full_testing_test``, ``…_no_sg_test``); all on by
#: default (``reset_nics``).
OFFLOADS = ("gro", "lro", "tso", "gso", "sg")
_OFFLOAD = re.compile(r"_?no_?(gro|lro|tso|gso|sg)(?=_|$)", re.IGNORECASE)
#: DPDK clients of the scaling runs: 15 (``dpdk15Client``) or 8 (``dpdk8Client``)
#: virtual functions, one client each (automated_tests.py ``test_RSS_15``/``_8``).
RSS_CLIENTS = 15
UNKNOWN_LAYOUT = "no rule for this file name: its experiment and conditions are unknown"


@dataclass(frozen=True)
class NotMeasured:
    """A file the ingest does not turn into runs, and why (``severity`` for
    ``ingest_issues``: ``not-measured`` for a file that holds no throughput or
    handshake measurement, ``skipped`` for one no rule knows)."""

    reason: str
    severity: str = "skipped"


@dataclass
class FileSpec:
    """One file's experiment, stacks and conditions.

    ``conditions`` are ``runs`` columns; ``extra`` what has no column (a
    variant tag, the tunnel of a proxy run, a batch size whose flag the
    scripts do not show). ``clients`` is the number of concurrent transfers
    per repetition (one result line each); ``requested_bytes`` the transfer
    size asked for, used where the output prints no byte count.
    """

    experiment: str
    setting: str
    format: str
    server_impl: str
    client_impl: str
    io: str | None
    server_build: str = ""
    client_build: str = ""
    clients: int = 1
    requested_bytes: int | None = None
    conditions: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    source: str = ""


def offloads_off(text: str) -> set[str]:
    """The offloads a file name switches off: ``_no_GRO_no_LRO``, ``_nogro_nogso``."""
    return {m.group(1).lower() for m in _OFFLOAD.finditer(text)}


def cores_of(suffix: str) -> dict[str, Any]:
    """``-c-2`` / ``-c-4,6`` / ``''`` (the harness's ``taskset -c LIST`` on both
    hosts, ``clean_setup`` in automated_tests.py) → cpu_list, cores, core columns."""
    if not suffix:
        return {"cpu_list": None, "cores": None}
    cpus = suffix[len("-c-"):]
    listed = [c for c in cpus.split(",") if c]
    out: dict[str, Any] = {"cpu_list": cpus, "cores": len(listed)}
    if len(listed) == 1 and listed[0].isdigit():
        out["server_core"] = out["client_core"] = int(listed[0])
    return out


def _kernel_offloads(off: set[str]) -> dict[str, bool]:
    return {name: name not in off for name in OFFLOADS}


def _io(tag: str) -> str:
    return "dpdk" if tag == "dpdk" else "kernel"


def _picoquic(io: str) -> tuple[str, str]:
    """picoquic's implementation and build for DPDK or kernel I/O: one binary,
    ``dpdk_picoquicdemo --dpdk`` or ``--nodpdk``."""
    return "picoquic", "dpdk" if io == "dpdk" else ""


def _cmp(stack: str, cores: str, off: set[str], npf: dict[str, NpfTest], name: str) -> FileSpec:
    impl = {"picotls": "tcp+tls"}.get(stack, stack)
    compare = npf.get(COMPARE_NPF)
    conditions: dict[str, Any] = {**cores_of(cores), **_kernel_offloads(off),
                                  "connections": 1, "workload": "bulk", "streams": 1}
    extra: dict[str, Any] = {"stack": stack}
    src = [f"{HARNESS} {stack}_test / picotls_*_test: `taskset -c` on both hosts"]
    if compare is not None:
        irq = compare.irq_cpu_list("server")
        conditions["irq_cpu_list"] = irq
        extra["nic_queues"] = compare.nic_queues("server")
        extra["irqbalance"] = not compare.irqbalance_stopped("server") \
            if compare.irqbalance_stopped("server") is not None else None
        script = compare.script(stack, "client")
        if script is not None:
            extra["npf_client_command"] = script.command
        src.append(f"{COMPARE_NPF} %init (NIC interrupts on core {irq})")
    # The cipher suite each tool was told to use (command lines of the harness and
    # the NPF file): secnetperf -cipher:1 = AES_128_GCM_SHA256 (MsQuic's
    # QUIC_ALLOWED_CIPHER_SUITE_FLAGS); picotls -y aes128gcmsha256; picoquic,
    # quicly and quiche negotiate their default, which the files do not print.
    suite = {"msquic": "AES128-GCM", "picotls": "AES128-GCM"}.get(stack)
    if suite:
        conditions["cipher"] = "aes-ni"
        extra["cipher_suite"] = suite
    app = {"picoquic": "h3", "quiche": "h3", "msquic": "perf", "quicly": "perf",
           "picotls": "tcp"}[stack]
    conditions["app"] = app
    if stack == "picoquic":
        # picoquic's default congestion control in these builds: the authors name
        # the same runs (client args "-D", no -G) throughputBBR_* (test_throughput).
        conditions["cc"] = "bbr"
    requested = {"picoquic": 20_000_000_000, "msquic": 20_000_000_000,
                 "quicly": 20_000_000_000, "quiche": 10_000_000_000}.get(stack)
    return FileSpec("cmp", name, stack, impl, impl, "kernel", requested_bytes=requested,
                    conditions=conditions, extra=extra, source="; ".join(src))


def classify(path: str, npf: dict[str, NpfTest] | None = None) -> FileSpec | NotMeasured:
    """The :class:`FileSpec` of an output file (``path`` from the dataset's root),
    or :class:`NotMeasured`: why the file holds no throughput or handshake
    measurement, or no rule knows it."""
    npf = npf or {}
    if not path.startswith(DATA_DIR) or not path.endswith(".txt"):
        return NotMeasured("not an output file (EverythingTesting/data/*.txt)")
    rel = path[len(DATA_DIR):]
    name = rel.rsplit("/", 1)[-1][:-len(".txt")]

    # -- the stack comparison (automated_tests.py "Big Comparison Tests") ----------
    m = re.fullmatch(r"cmp/(picoquic|msquic|quiche|quicly|picotls)_ctesting"
                     r"(-c-[0-9,]+)?((?:_no_[A-Za-z]+)*)", rel[:-4])
    if m:
        return _cmp(m.group(1), m.group(2) or "", offloads_off(m.group(3)), npf, name)
    m = re.fullmatch(r"cmp/picotls((?:_no_[a-z]+)+)_ctesting(-c-[0-9,]+)?", rel[:-4])
    if m:
        return _cmp("picotls", m.group(2) or "", offloads_off(m.group(1)), npf, name)
    m = re.fullmatch(r"cmp/picotls/picotls_ctesting((?:_no[a-z]+)*)", rel[:-4])
    if m:
        spec = _cmp("picotls", "", offloads_off(m.group(1)), npf, name)
        spec.source += f"; {HARNESS} picotls_full_testing_test (every subset of lro/gro/gso/tso)"
        return spec
    m = re.fullmatch(r"cmp/handshakes/picotls_([0-9]+)_clients(_with_irqbalance)?"
                     r"(_no_core_restriction)?", rel[:-4])
    if m:
        # request_test_picotls: server `taskset -c 4 ./cli … -B`, clients
        # `cli --client 10 N` for 10 s; the file has one count per run (the
        # harness sums the clients' nb_handshakes with awk).
        restricted = not m.group(3)
        return FileSpec(
            "cmp-handshakes", name, "counts", "tcp+tls", "tcp+tls", "kernel",
            conditions={"workload": "handshakes", "connections": int(m.group(1)),
                        "cpu_list": "4" if restricted else None,
                        "cores": 1 if restricted else None,
                        "server_core": 4 if restricted else None,
                        "app": "tcp", "cipher": "aes-ni"},
            extra={"irqbalance": bool(m.group(2)), "test_s": 10, "cipher_suite": "AES128-GCM",
                   "cpu_list_role": "server"},
            source=f"{HARNESS} request_test_picotls (test_time = 10 s)")
    m = re.fullmatch(r"cmp/client(NoDPDK|DPDK)Interop(NoPatch)?", rel[:-4])
    if m:
        # interop_test(_2): the client (exec_scripts/client.sh = kernel picoquic or
        # newClient.sh = picoquic-DPDK) against the other build as server; plot
        # labels "picoquic client / picoquic-dpdk server" and the reverse.
        dpdk_client = m.group(1) == "DPDK"
        return FileSpec(
            "interop", name, "picoquic", "picoquic", "picoquic", "mixed",
            server_build="" if dpdk_client else "dpdk", client_build="dpdk" if dpdk_client else "",
            requested_bytes=20_000_000_000,
            conditions={"workload": "bulk", "connections": 1, "app": "h3"},
            extra={"patch": not m.group(2)},
            source=f"{HARNESS} interop_test / interop_test_2; simplePlotter.py "
                   "throughput_comparison_interop_plot_box labels")

    # -- picoquic-DPDK scaling over server cores and clients ------------------------
    m = re.fullmatch(r"TP_([0-9]+)core_dpdk(_8_client)?(_X)?", name)
    if m and "/" not in rel:
        clients = 8 if m.group(2) else RSS_CLIENTS
        cores = int(m.group(1))
        return FileSpec(
            "rss", name, "picoquic", "picoquic", "picoquic", "dpdk",
            server_build="dpdk", client_build="dpdk", clients=clients,
            conditions={"workload": "bulk", "connections": clients, "cores": cores,
                        "cpu_list": f"0-{cores}", "app": "h3", "cc": "bbr"},
            extra={"client_args": "-D -X" if m.group(3) else "-D", "cpu_list_role": "server"},
            source=f"{HARNESS} test_RSS_15 / test_RSS_8 / test_RSS_8_X (server EAL "
                   f"`-l 0-N`, the file's N; one client per virtual function)")
    m = re.fullmatch(r"RSS/balance_([0-9]+)core_dpdk_8_client(_X)?", rel[:-4])
    if m:
        return NotMeasured("RSS queue assignment (`grep queueid` of the server): which core "
                           "each client landed on, not a throughput or handshake measurement",
                           "not-measured")
    m = re.fullmatch(r"server_scaling_dpdk_([0-9]+)", name)
    if m and "/" not in rel:
        cores = int(m.group(1))
        return FileSpec(
            "server-scaling", name, "picoquic", "picoquic", "picoquic", "dpdk",
            server_build="dpdk", client_build="dpdk", clients=RSS_CLIENTS,
            conditions={"workload": "bulk", "connections": RSS_CLIENTS, "cores": cores,
                        "cpu_list": f"0-{cores}", "app": "h3", "cc": "bbr"},
            extra={"cpu_list_role": "server", "pci": "0000:51:00.1"},
            source=f"{HARNESS} test_server_scaling (server `dpdk -l 0-N -a 0000:51:00.1`; "
                   "15 DPDK clients)")

    # -- congestion control and batching (picoquic-DPDK) ----------------------------
    m = re.fullmatch(r"CC_(big_)?(bbr|cubic|fast|reno)_dpdk", name)
    if m and "/" not in rel:
        big = bool(m.group(1))
        return FileSpec(
            "cc", name, "picoquic", "picoquic", "picoquic", "dpdk",
            server_build="dpdk", client_build="dpdk",
            conditions={"workload": "bulk", "connections": 1, "cc": m.group(2),
                        "batch_tx": 32 if big else 1, "app": "h3"},
            source=f"{HARNESS} test_congestion_{'big_' if big else ''}dpdk "
                   f"(`-G CC -* {32 if big else 1}` on both ends)")
    m = re.fullmatch(r"batching/throughput_([0-9]+)_fixed_20GB_(RX|TX)64_dpdk", rel[:-4]) or \
        re.fullmatch(r"throughput_([0-9]+)_fixed_[0-9]+GB_(RX|TX)([0-9]+)_dpdk", rel[:-4])
    if m:
        n = int(m.group(1))
        fixed = int(m.group(3)) if m.re.groups == 3 else 64
        # `-*` is the TX batch, `-@` the RX batch: test_batching_fixed_RX64 runs
        # `-* N -@ 64` into *_RX64, test_batching_fixed_TX64 `-* 64 -@ N` into *_TX64.
        tx, rx = (n, fixed) if m.group(2) == "RX" else (fixed, n)
        conditions = {"workload": "bulk", "connections": 1, "batch_tx": tx, "batch_rx": rx,
                      "app": "h3"}
        if fixed == 128:
            conditions["cc"] = "cubic"  # test_batching_fixed_RX: "-G cubic"
        return FileSpec("batching", name, "picoquic", "picoquic", "picoquic", "dpdk",
                        server_build="dpdk", client_build="dpdk", conditions=conditions,
                        source=f"{HARNESS} test_batching_fixed_RX64 / _TX64 / _RX "
                               "(`-* TX -@ RX`)")
    m = re.fullmatch(r"throughput_([0-9]+)T([0-9]+)R_fixed_[0-9]+GB\w*_dpdk", name) \
        or re.fullmatch(r"throughput(?:32)?_([0-9]+)_(?:fixed_[0-9]+GB\w*_)?dpdk", name) \
        or re.fullmatch(r"throughputRXBatching_([0-9]+)_dpdk", name) \
        or re.fullmatch(r"throughput_noCC_noPacing_([0-9]+)_dpdk", name)
    if m and "/" not in rel:
        n = int(m.group(1))
        conditions = {"workload": "bulk", "connections": 1, "app": "h3"}
        extra: dict[str, Any] = {}
        if name.startswith("throughputRXBatching"):
            conditions["batch_rx"] = n
        elif name.startswith("throughput_noCC"):
            # test_batching_noCC_noPacing: `-* N -@ N`, a build without CC or pacing.
            conditions.update(batch_tx=n, batch_rx=n, cc="none")
        elif "T" in name.split("_")[1]:
            conditions.update(batch_tx=n, batch_rx=int(m.group(2)), cc="cubic")  # test_batching
        elif name.startswith("throughput32_") or "_fixed_" in name:
            conditions["batch_tx"] = n  # test_batching2 / _fixed_: `-* N`
            tag = re.search(r"_fixed_([0-9]+GB\w*)_dpdk", name)
            if tag:
                extra["variant"] = tag.group(1)
        else:
            extra["batch"] = n  # throughput_N_dpdk: the scripts do not show the flag
        return FileSpec("batching", name, "picoquic", "picoquic", "picoquic", "dpdk",
                        server_build="dpdk", client_build="dpdk", conditions=conditions,
                        extra=extra, source=f"{HARNESS} test_batching* (file name's N)")

    # -- picoquic throughput, ciphers, handshakes, requests ---------------------------
    m = re.fullmatch(r"throughputBBR(20|128|256|_noEncryption|Fair|Patched)?_(dpdk|nodpdk)", name)
    if m and "/" not in rel:
        io = _io(m.group(2))
        variant = m.group(1) or ""
        conditions = {"workload": "bulk", "connections": 1, "cc": "bbr", "app": "h3"}
        extra = {}
        if variant in ("20", "128", "256"):
            # simplePlotter.py encryption_plot_(NO)DPDK: 20 = CHACHA, 128/256 = AES.
            conditions["cipher"] = "chacha20" if variant == "20" else "aes-ni"
            extra["cipher_suite"] = {"20": "CHACHA20-POLY1305", "128": "AES128-GCM",
                                     "256": "AES256-GCM"}[variant]
        elif variant == "_noEncryption":
            extra["encryption"] = False
        elif variant:
            extra["variant"] = variant
        if io == "kernel":
            conditions.update(_kernel_offloads(set()))
        impl, build = _picoquic(io)
        return FileSpec("throughput", name, "picoquic", impl, impl, io, server_build=build,
                        client_build=build, conditions=conditions, extra=extra,
                        source=f"{HARNESS} test_throughput* (client `-D`, one client and "
                               "server core pair; BBR in the name)")
    m = re.fullmatch(r"throughput_(dpdk|nodpdk)", name) or \
        re.fullmatch(r"output_(dpdk|nodpdk)_(chacha|tp_enc|tp_noenc)", name)
    if m and "/" not in rel:
        io = _io(m.group(1))
        impl, build = _picoquic(io)
        conditions = {"workload": "bulk", "connections": 1, "app": "h3"}
        extra = {}
        kind = m.group(2) if m.re.groups == 2 else ""
        if kind == "chacha":
            conditions["cipher"] = "chacha20"
        elif kind == "tp_noenc":
            extra["encryption"] = False
        if io == "kernel":
            conditions.update(_kernel_offloads(set()))
        return FileSpec("throughput", name, "picoquic", impl, impl, io, server_build=build,
                        client_build=build, conditions=conditions, extra=extra,
                        source="plot.py comparison_aes_chacha / tp_comparison_encryption "
                               "(file names: dpdk / nodpdk, chacha, enc / noenc)")
    m = re.fullmatch(r"output_(copy|copyv2|nocopy|nopy|nopyv2)", name)
    if m and "/" not in rel:
        return FileSpec("copy", name, "picoquic", "picoquic", "picoquic", None,
                        conditions={"workload": "bulk", "connections": 1, "app": "h3"},
                        extra={"variant": m.group(1)},
                        source="plot.py copy_comparison (copy vs no copy; the I/O mode "
                               "is not stated)")
    m = re.fullmatch(r"handshakeBBR(20|fixed)?_(dpdk|nodpdk)", name)
    if m and "/" not in rel:
        io = _io(m.group(2))
        impl, build = _picoquic(io)
        conditions = {"workload": "handshakes", "connections": 1, "requests": 1,
                      "cc": "bbr", "app": "h3"}
        extra = {}
        if m.group(1) == "20":
            conditions["cipher"] = "chacha20"
        elif m.group(1):
            extra["variant"] = m.group(1)
        return FileSpec("handshake", name, "picoquic", impl, impl, io, server_build=build,
                        client_build=build, conditions=conditions, extra=extra,
                        source=f"{HARNESS} test_handshake_simple (one new connection per "
                               "run, request `/8`; simplePlotter.py reads the time as "
                               "request time)")
    m = re.fullmatch(r"handshake(_new)?_(dpdk|nodpdk)", name)
    if m and "/" not in rel:
        io = _io(m.group(2))
        impl, build = _picoquic(io)
        return FileSpec("handshake", name, "served", impl, impl, io, server_build=build,
                        client_build=build,
                        conditions={"workload": "handshakes", "request_bytes": 100, "app": "h3"},
                        extra={"test_s": 20, "variant": "new" if m.group(1) else ""},
                        source=f"{HARNESS} test_handshake (client `-H -D`, request `/100`); "
                               "simplePlotter.py handshake_comparison_plot: count / 20 s")
    m = re.fullmatch(r"request_75_(dpdk|nodpdk)", name)
    if m and "/" not in rel:
        io = _io(m.group(1))
        impl, build = _picoquic(io)
        return FileSpec("request", name, "picoquic", impl, impl, io, server_build=build,
                        client_build=build,
                        conditions={"workload": "requests", "requests": 75,
                                    "request_bytes": 30000, "connections": 1, "app": "h3"},
                        source=f"{HARNESS} test_request (request `*75:/30000`: 75 × 30 kB)")

    # -- early runs (old/): another host setup (PCI 0000:51:00.x, `localhost`) -------------
    m = re.fullmatch(r"old/output_tp_(dpdk|van)(_noencrypt)?(?:_([0-9]+))?(?:_([0-9]+))?", rel[:-4])
    if m:
        io = _io(m.group(1))
        impl, build = _picoquic(io)
        conditions = {"workload": "bulk", "app": "h3"}
        extra = {"pci": "0000:51:00.x"} if io == "dpdk" else {}
        clients = 1
        if m.group(2):
            extra["encryption"] = False
        if m.group(4):  # output_tp_dpdk_8_N: dpdk_test_batching_8client.py, 8 clients
            clients = int(m.group(3))
            extra["batch"] = int(m.group(4))
        elif m.group(3):  # output_tp_dpdk_N: dpdk_test_batching.py `-@ N`
            conditions["batch_rx"] = int(m.group(3))
        conditions["connections"] = clients
        return FileSpec("old", name, "picoquic", impl, impl, io, server_build=build,
                        client_build=build, clients=clients, conditions=conditions,
                        extra=extra, source="EverythingTesting/scripts/tp_test*.py, "
                                            "dpdk_tp_test*.py, dpdk_test_batching*.py")
    if rel in ("old/output_tp_reverse.txt", "old/vanilla_tp.txt"):
        # "vanilla": picoquic's own demo over kernel sockets (newClientTestingLoop.py
        # runs /memoire/picoquic/picoquicdemo); "reverse": the I/O is not stated.
        vanilla = "vanilla" in rel
        return FileSpec("old", name, "picoquic", "picoquic", "picoquic",
                        "kernel" if vanilla else None,
                        conditions={"workload": "bulk", "connections": 1, "app": "h3"},
                        extra={"variant": "vanilla" if vanilla else "reverse"},
                        source="file name (no script writes it)")
    m = re.fullmatch(r"old/output_handshakes_(dpdk|van)(_clean)?", rel[:-4])
    if m:
        io = _io(m.group(1))
        impl, build = _picoquic(io)
        return FileSpec("old", name, "served", impl, impl, io, server_build=build,
                        client_build=build,
                        conditions={"workload": "handshakes", "app": "h3"},
                        extra={"test_s": 20, "variant": "clean" if m.group(2) else ""},
                        source="EverythingTesting/scripts/test_handshake.py, "
                               "dpdk_test_handshakes.py; plot.py handshake_comparison (/ 20 s)")

    # -- the picoquic(-DPDK) proxy / VPN: iperf3 and UDP generators through it ------------
    return _proxy(rel, name)


def _proxy(rel: str, name: str) -> FileSpec | NotMeasured:
    """Traffic through the authors' picoquic(-DPDK) proxy (automated_tests.py
    "PROXY TESTING"): iperf3 TCP with MSS N (``iperf3 -M N -t 30``, 5 runs per
    file), iperf3 UDP at a set rate, the authors' UDP generator. ``tunnel``: the
    proxy (``picoquic-dpdk``, ``picoquic``), the DPDK L2 forwarder without QUIC
    (``noproxy``; "l2-forwarder" in simplePlotter.py TCP_PROXY) or WireGuard."""
    folder = rel.rsplit("/", 1)[0] if "/" in rel else ""
    where = {"proxy": "", "proxy/old": "old", "proxy/oldtopo": "oldtopo",
             "proxy/proxy_old": "proxy_old", "": ""}.get(folder)
    if where is None:
        return NotMeasured(UNKNOWN_LAYOUT)
    tunnels = {"proxy": ("picoquic-dpdk", "dpdk"), "noproxy": ("l2-forwarder", "dpdk"),
               "wireguard": ("wireguard", "kernel")}
    base = {"workload": "bulk", "connections": 1, "app": "perf"}
    src = f"{HARNESS} proxy_TCP_testing / proxy_TCP_noDPDK / proxy_UDP_testing* / wireguard_testing"
    m = re.fullmatch(r"(proxy|noproxy|wireguard)TCP(NoDPDK)?([0-9]+)", name)
    if m and folder.startswith("proxy"):
        tunnel, io = tunnels[m.group(1)]
        if m.group(2):
            tunnel, io = "picoquic", "kernel"
        return FileSpec("proxy", rel[:-4], "iperf3", "iperf3", "iperf3", io,
                        conditions=dict(base), source=src,
                        extra={"tunnel": tunnel, "protocol": "tcp", "mss_bytes": int(m.group(3)),
                               "topology": where or "current"})
    m = re.fullmatch(r"(proxy|noproxy)UDP([12]_)?([0-9]+)", name)
    if m and folder.startswith("proxy"):
        tunnel, io = tunnels[m.group(1)]
        flow = m.group(2)
        return FileSpec("proxy", rel[:-4], "iperf3" if flow else "udp-goodput",
                        "iperf3" if flow else "udpsender", "iperf3" if flow else "udpsender",
                        io, conditions={**base, "udp_payload_bytes": int(m.group(3))},
                        source=src, extra={"tunnel": tunnel, "protocol": "udp",
                                           "flow": int(flow[0]) if flow else None,
                                           "topology": where or "current"})
    m = re.fullmatch(r"(tcp|udp([0-9]+))(No)?Proxy", name)
    if m and not folder:
        tunnel, io = ("l2-forwarder", "dpdk") if m.group(3) else ("picoquic-dpdk", "dpdk")
        conditions = dict(base)
        if m.group(2):
            conditions["udp_payload_bytes"] = int(m.group(2))
        return FileSpec("proxy", name, "iperf3", "iperf3", "iperf3", io, conditions=conditions,
                        source="file name (iperf3 interval lines; no script writes it)",
                        extra={"tunnel": tunnel, "protocol": "udp" if m.group(2) else "tcp"})
    m = re.fullmatch(r"noproxy_([0-9]+)", name)
    if m and not folder:
        return FileSpec("proxy", name, "udp-goodput", "udpsender", "udpsender", "dpdk",
                        conditions={**base, "udp_payload_bytes": int(m.group(1))},
                        extra={"tunnel": "l2-forwarder", "protocol": "udp"},
                        source="simplePlotter.py noproxy_pkt_size_plot (payload size)")
    return NotMeasured(UNKNOWN_LAYOUT)
