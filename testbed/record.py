"""Turn a :class:`~quiclab.testbed.runner.RunResult` into catalog rows.

Fresh runs use the same ``runs`` schema as the published ones
(:data:`quiclab.datasets.catalog.RUN_COLUMNS`) with ``source = 'fresh'``, so
calibration and validation never care where a measurement came from.
Counters that the schema has no column for (relay, qdisc, stack-reported
send/receive calls, peer reports) go to ``extra`` (JSON).

Packets: ``/proc/net/snmp`` ``OutDatagrams`` counts send calls and
``InDatagrams`` coalesced receives when GSO/GRO are on, and veth counters
count batches; wire packets come from the stack's own statistics where it
has them (``data_packets``), else, when the server sent without GSO, from its
``OutDatagrams`` (one datagram is one packet; ``ack_packets`` likewise from the
client's), else bytes ÷ UDP payload (``extra.wire_packets_est``).

The hosts: ``testbed`` is ``fresh-<this machine's hostname>`` for the namespace
pair and ``fresh-<hostpair>`` for an inventory's hosts; ``hostpair``, ``server_host``
and ``client_host`` name them (``veth`` and ``netns:<role>`` for the namespace pair,
the inventory's names over SSH), ``cpu`` is the server host's CPU,
``extra.hosts.<role>`` what each host was (CPU model, microarchitecture, cores, clock,
kernel, the test NIC's driver, firmware, rings, coalescing and offloads;
:func:`~quiclab.testbed.hosts.host_record`) and ``extra.nic.<role>.counters_delta``
its ``ethtool -S`` counters over the run. The ``hosts`` table keeps one row per host
and state (:func:`host_rows`).

Request workloads fill ``workload``, ``request_bytes``,
``requests``, ``connections``, ``streams``, ``requests_per_s`` and the latency
percentiles from the client's report; ``runtime_s`` is then the completion
time of all requests (connection set-up included). ``server_core`` /
``client_core`` are the pinned core, else the one observed (``extra.cores``).
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import subprocess
from pathlib import Path
from typing import Any

from quiclab.datasets.testbeds import fresh_id
from quiclab.testbed.runner import RunResult, Side

#: Longest experiment name kept whole in a run id.
SLUG_CHARS = 40


def experiment_slug(experiment: str) -> str:
    """The experiment's part of a run id: the name itself when it is made of
    ``[A-Za-z0-9_.-]`` and at most 40 characters (the ids of existing catalogs), else
    the name with other characters as ``_``, cut to 40, and 8 hex digits of its
    SHA-256, so that names differing only past the cut or in punctuation stay apart."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", experiment)[:SLUG_CHARS]
    if slug == experiment:
        return slug
    return f"{slug}-{hashlib.sha256(experiment.encode()).hexdigest()[:8]}"


def run_id(experiment: str, config_key: str, repetition: int, hostpair: str = "veth") -> str:
    """Stable and unique: the same experiment, configuration, repetition and hosts give the
    same id. The namespace pair's hosts (``veth``) are left out (the ids runs had before
    there were others); another pair's name follows the configuration key, so the same
    spec run on two testbeds into one catalog keeps both."""
    hosts = "" if hostpair == "veth" else f"-{experiment_slug(hostpair)}"
    return f"fresh-{experiment_slug(experiment)}-{config_key}{hosts}-r{repetition}"


def host_cpu(cpuinfo: str | None = None) -> tuple[str, bool]:
    """(catalog CPU name of this host, AES-NI present) from /proc/cpuinfo."""
    from quiclab.models.cpus import CpuCatalog, host_cpu_from_cpuinfo, read_host_cpu

    cpu = (host_cpu_from_cpuinfo(cpuinfo, CpuCatalog.packaged()) if cpuinfo is not None
           else read_host_cpu(CpuCatalog.packaged()))
    return cpu.name, cpu.aes_ni


def git_revision(repo: Path) -> dict[str, Any]:
    """Revision and dirty flag of the repository holding the peers (provenance)."""
    def git(*args: str) -> str:
        proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              check=False)
        return proc.stdout.strip()
    return {"revision": git("rev-parse", "HEAD") or None,
            "dirty": bool(git("status", "--porcelain", "--", "testbed"))}


def _num(report: dict[str, Any], key: str) -> Any:
    value = report.get(key)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _udp(side: Side) -> dict[str, int | None]:
    udp = side.snmp.get("Udp", {})
    return {"sent": udp.get("OutDatagrams"), "received": udp.get("InDatagrams"),
            "rcvbuf_errors": udp.get("RcvbufErrors"), "sndbuf_errors": udp.get("SndbufErrors"),
            "rx_errors": udp.get("InErrors")}


def _packets(result: RunResult, side: Side, role: str) -> tuple[Any, str | None]:
    """(packets side sent, where the number comes from): the stack's statistics, else
    its UDP datagrams when it sent without GSO (each datagram one packet on the veth).
    For kernel TCP the segments of its struct tcp_info: the server's data segments,
    the client's segments less its data segments (pure ACKs)."""
    info = side.report.get("tcp_info")
    if isinstance(info, dict):
        out, data = _num(info, "segs_out"), _num(info, "data_segs_out")
        if role == "server":
            return data, "tcp_info"
        return (out - data if out is not None and data is not None else None), "tcp_info"
    reported = _num(side.report, "packets_sent")
    if reported is not None:
        return reported, "stack"
    gso = result.effective.get("gso") if role == "server" else False
    datagrams = _udp(side)["sent"]
    if not gso and datagrams is not None and result.status == "ok":
        return datagrams, "udp_datagrams"
    return None, None


def run_row(result: RunResult, cpu_name: str, aes_ni: bool,
            provenance: dict[str, Any] | None = None) -> dict[str, Any]:
    """One ``runs`` row."""
    s = result.config.scenario
    eff = result.effective
    srv, cli = result.server, result.client
    runtime_s = _num(cli.report, "transfer_s")
    if runtime_s is None and result.end_ns > result.start_ns:
        runtime_s = (result.end_ns - result.start_ns) / 1e9
    requests = s.workload != "bulk"
    data_packets, data_from = _packets(result, srv, "server")
    ack_packets, ack_from = _packets(result, cli, "client")
    hosts = result.hosts
    server_host = hosts.get("server") or {}
    if server_host.get("kind") == "ssh":
        # The sender's CPU is the run's, as the published rows have it (its host's).
        cpu_name = str(server_host["cpu"]["name"])
        aes_ni = bool(server_host["cpu"].get("aes_ni", aes_ni))
    row: dict[str, Any] = {
        "run_id": result.run_id, "source": "fresh",
        "testbed": fresh_id(socket.gethostname() if result.hostpair == "veth"
                            else result.hostpair),
        "experiment": result.config.experiment,
        "setting": s.describe(), "logdir": result.logdir, "hostpair": result.hostpair,
        "server_host": _host_column(hosts.get("server"), "netns:server"),
        "client_host": _host_column(hosts.get("client"), "netns:client"),
        "cpu": cpu_name, "server_impl": s.server, "client_impl": s.client,
        "server_build": (provenance or {}).get("builds", {}).get(s.server),
        "client_build": (provenance or {}).get("builds", {}).get(s.client),
        "server_version": (provenance or {}).get("versions", {}).get(s.server),
        "client_version": (provenance or {}).get("versions", {}).get(s.client),
        "repetition": result.repetition, "status": result.status,
        "failure_reason": result.failure_reason, "filesize_bytes": s.transfer_bytes,
        "start_ns": result.start_ns, "end_ns": result.end_ns, "runtime_s": runtime_s,
        "goodput_mbps": result.goodput_mbps, "goodput_reported_mbps": result.goodput_mbps,
        "app": eff.get("app", "perf"),
        "cipher": None if eff.get("cipher") == "none" else eff.get("cipher", s.cipher),
        "aes_ni": aes_ni,
        "rcvbuf_bytes": s.rcvbuf_bytes, "sndbuf_bytes": s.sndbuf_bytes,
        "gso": eff.get("gso"), "gro": eff.get("gro"), "tso": eff.get("tso"),
        "veth_segmentation": eff.get("veth_segmentation"), "mtu_bytes": s.mtu_bytes,
        "udp_payload_bytes": _num(srv.report, "udp_payload_bytes")
        or eff.get("udp_payload_bytes"),
        "link_gbps": s.link_gbps if "link_gbps" in result.config.explicit else None,
        "rtt_ms": s.rtt_ms, "loss_pct": s.loss_pct, "reorder_pct": s.reorder_pct,
        "streams": eff.get("streams", 1) if requests else 1, "chunks": 1, "cc": eff.get("cc"),
        "server_core": srv.core, "client_core": cli.core,
        "data_packets": data_packets, "ack_packets": ack_packets,
        "server_syscalls": srv.syscalls, "client_syscalls": cli.syscalls,
        "handshake_ms": _num(cli.report, "handshake_ms"),
        "workload": s.workload,
        "request_bytes": s.request_bytes if requests else None,
        "requests": _num(cli.report, "requests") if requests else None,
        "connections": s.connections if requests else None,
        "requests_per_s": result.requests_per_s,
        "latency_p50_ms": _num(cli.report, "latency_p50_ms") if requests else None,
        "latency_p90_ms": _num(cli.report, "latency_p90_ms") if requests else None,
        "latency_p99_ms": _num(cli.report, "latency_p99_ms") if requests else None,
    }
    window_s = (result.end_ns - result.start_ns) / 1e9
    for prefix, side in (("server", srv), ("client", cli)):
        if side.exit is not None:
            # CPU seconds: the whole life (wait4's rusage; calibration separates start-up
            # from per-packet costs with two transfer sizes). CPU %: within the transfer
            # window only, both sides over the same span.
            row[f"{prefix}_cpu_s"] = side.exit.cpu_s
        if side.window_cpu is not None and window_s > 0:
            user_s, system_s = side.window_cpu
            row[f"{prefix}_cpu_pct"] = 100 * (user_s + system_s) / window_s
            row[f"{prefix}_cpu_user_pct"] = 100 * user_s / window_s
            row[f"{prefix}_cpu_sys_pct"] = 100 * system_s / window_s
        for key, value in _udp(side).items():
            row[f"{prefix}_udp_{key}"] = value
        if side.link:
            row[f"{prefix}_nic_tx_frames"] = side.link["tx_packets"]
            row[f"{prefix}_nic_rx_frames"] = side.link["rx_packets"]
            row[f"{prefix}_nic_tx_bytes"] = side.link["tx_bytes"]
            row[f"{prefix}_nic_rx_bytes"] = side.link["rx_bytes"]
            row[f"{prefix}_nic_rx_discards"] = side.link["rx_dropped"]
            row[f"{prefix}_nic_tx_discards"] = side.link["tx_dropped"]
    payload = row["udp_payload_bytes"] or 0
    extra = {
        "scenario": s.to_dict(), "knobs": result.config.knobs,
        "explicit": sorted(result.config.explicit), "effective": eff,
        "topology": result.topology, "timeout_s": result.timeout_s,
        "expected_s": result.expected_s, "host": result.host,
        "wire_packets_est": (s.transfer_bytes // payload) if payload else None,
        "packets_from": {"data_packets": data_from, "ack_packets": ack_from},
        "cores": {role: {"core": side.core, "source": side.core_source,
                         "shares": {str(c): round(v, 4) for c, v in side.core_shares.items()}}
                  for role, side in (("server", srv), ("client", cli))},
        "requests_wanted": eff.get("requests") if requests else None,
        "server_report": srv.report, "client_report": cli.report,
        "server_stderr": srv.stderr_tail, "client_stderr": cli.stderr_tail,
        "window_s": window_s,
        "window_cpu_s": {role: None if side.window_cpu is None else
                         {"user": side.window_cpu[0], "system": side.window_cpu[1]}
                         for role, side in (("server", srv), ("client", cli))},
        "hosts": hosts,
        "nic": {"server": srv.nic, "client": cli.nic},
        "server_exit": srv.exit.__dict__ if srv.exit else None,
        "client_exit": cli.exit.__dict__ if cli.exit else None,
        "provenance": provenance or {},
    }
    if eff.get("transport") == "tcp":
        from quiclab.testbed import tcp

        extra["tcp"] = tcp.summary(srv.report, cli.report,
                                   {"server": srv.snmp, "client": cli.snmp},
                                   {"server": srv.link, "client": cli.link}, s.transfer_bytes)
    row["extra"] = json.dumps(extra, sort_keys=True, default=str)
    return row


def _host_column(host: dict[str, Any] | None, default: str) -> str:
    """``server_host``/``client_host``: an SSH host's inventory name (as the published
    runs name their nodes), ``netns:<role>`` for the namespace pair."""
    if host and host.get("kind") == "ssh":
        return str(host["name"])
    return default


def host_rows(result: RunResult) -> list[dict[str, Any]]:
    """``hosts`` rows: each host a run was made on, in the state it was in (host_id)."""
    rows = []
    for host in result.hosts.values():
        cpu, nic = host.get("cpu") or {}, host.get("nic") or {}
        rows.append({
            "host_id": host["host_id"], "name": host.get("name"), "kind": host.get("kind"),
            "ssh": host.get("ssh"), "hostname": host.get("hostname"), "cpu": cpu.get("name"),
            "vendor": cpu.get("vendor"), "microarchitecture": cpu.get("microarchitecture"),
            "cores": cpu.get("cores"), "max_ghz": cpu.get("max_ghz"),
            "aes_ni": cpu.get("aes_ni"), "numa_nodes": host.get("numa_nodes"),
            "kernel": host.get("kernel"), "machine": host.get("machine"),
            "interface": nic.get("interface"), "nic_driver": nic.get("driver"),
            "nic_firmware": nic.get("firmware"), "nic_speed_mbps": nic.get("speed_mbps"),
            "nic_numa_node": nic.get("numa_node"), "first_run_ns": result.start_ns,
            "last_run_ns": result.start_ns,
            "facts": json.dumps({k: v for k, v in host.items() if k != "boot_id"},
                                sort_keys=True, default=str)})
    return rows


def sample_rows(result: RunResult) -> list[dict[str, Any]]:
    """``cpu_samples`` rows: per-second CPU of each side, marked in the transfer window."""
    rows = []
    for side_name, side in (("server", result.server), ("client", result.client)):
        for sample in side.samples:
            rows.append({
                "run_id": result.run_id, "side": side_name, "t_s": sample.t_s,
                "user_pct": sample.user_pct, "system_pct": sample.system_pct,
                "total_pct": sample.total_pct, "core": sample.core,
                "in_window": result.start_ns <= sample.start_ns
                and sample.end_ns <= result.end_ns})
    return rows


def config_digest(rows: list[dict[str, Any]]) -> str:
    blob = json.dumps(rows, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
