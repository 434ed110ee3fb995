"""The SSH mode for real: two network namespaces of this machine, each running Debian's
OpenSSH server, reached over SSH from the root namespace, with the test link between
them (:class:`quiclab.testbed.lab.SshLab`). Deployment, knobs on interfaces that outlive
the run, the collectors, and restoring both hosts after a dropped connection, a killed
peer, a killed controller, a killed agent and Ctrl-C.

One short transfer runs in ``make test``; the rest is marked slow (``make test-testbed``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from quiclab.datasets.catalog import RUN_COLUMNS, Catalog
from quiclab.testbed.config import RunConfig
from quiclab.testbed.errors import TestbedError
from quiclab.testbed.inventory import Inventory
from quiclab.testbed.lab import SshLab, sshd_binary
from quiclab.testbed.runner import Testbed
from quiclab.testbed.session import Session
from quiclab.testbed.topology import exclusive

pytestmark = pytest.mark.testbed

GLOBAL_SYSCTLS = ("net.core.rmem_max", "net.core.rmem_default", "net.core.wmem_max",
                  "net.core.wmem_default")
#: The buffer size the runs here ask for: unlike any other engineer's setting, since the
#: machine's net.core sysctls are shared with their namespace-mode runs meanwhile.
BUFFER = 250_000
#: A per-namespace sysctl the lab's server host sets for every run (inventory sysctls).
HOST_SYSCTL = ("net.ipv4.udp_rmem_min", "8192")


def _irq_to_steer() -> tuple[str, int, str] | None:
    """An interrupt that has never fired (a virtio config IRQ) and whose affinity can be
    written: the lab steers it as it would a NIC's (a veth has none), so IRQ affinity is
    set and restored for real without moving any traffic's interrupts."""
    for line in Path("/proc/interrupts").read_text().splitlines()[1:]:
        head, _, rest = line.partition(":")
        if not head.strip().isdigit():
            continue
        irq, fields = int(head), rest.split()
        counts = [int(f) for f in fields[:os.cpu_count() or 1] if f.isdigit()]
        if sum(counts) or not fields or "config" not in fields[-1]:
            continue
        path = Path(f"/proc/irq/{irq}/smp_affinity_list")
        try:
            current = path.read_text().strip()
            path.write_text(current)  # the same value: only whether it may be written
        except OSError:
            continue
        if current != "1":
            return fields[-1], irq, current
    return None


@pytest.fixture(scope="module")
def lab(root: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshLab]:
    try:
        sshd_binary()
    except TestbedError as err:
        pytest.skip(f"no sshd here and none installable: {err}")
    irq = _irq_to_steer()
    lab = SshLab(tmp_path_factory.mktemp("ssh-lab"), irq_match=f"^{irq[0]}$" if irq else "",
                 irq_cores=(1,) if irq else ())
    lab.up()
    lab.irq = irq  # type: ignore[attr-defined]
    # The server host also sets a per-namespace sysctl of its own for every run.
    text = lab.inventory_path.read_text().replace(
        "    sysctl_via:", f"    sysctls:\n      {HOST_SYSCTL[0]}: {HOST_SYSCTL[1]}\n"
                          "    sysctl_via:", 1)
    lab.inventory_path.write_text(text)
    yield lab
    lab.down()


@pytest.fixture(scope="module")
def inventory(lab: SshLab) -> Inventory:
    return Inventory.load(lab.inventory_path)


def _in(ns: str, *argv: str) -> str:
    return subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True,
                          check=False).stdout


def snapshot(lab: SshLab) -> dict[str, Any]:
    """What a run may change on the lab's hosts: MTU, offloads, qdiscs and ingress
    filters of the test link, the server host's own sysctl, the steered IRQ's affinity,
    whether any quiclab agent or peer is left there; and whether a global buffer sysctl
    still has the runs' value (other runs on this machine change them meanwhile, so
    their values are not compared)."""
    names = lab.names(lab.index)
    out: dict[str, Any] = {}
    for role, n in names.items():
        ns = n["ns"]
        out[role] = {
            "mtu": json.loads(_in(ns, "ip", "-j", "link", "show", "test0"))[0]["mtu"],
            "features": _in(ns, "ethtool", "-k", "test0"),
            "qdisc": [q["kind"] for q in json.loads(_in(ns, "tc", "-j", "qdisc", "show", "dev",
                                                        "test0"))],
            "filters": _in(ns, "tc", "filter", "show", "dev", "test0", "ingress"),
            "udp_rmem_min": _in(ns, "cat", "/proc/sys/net/ipv4/udp_rmem_min").strip(),
            "processes": sorted(
                Path(f"/proc/{pid}/comm").read_text().strip()
                for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                          text=True).stdout.split()
                if Path(f"/proc/{pid}/comm").exists()),
        }
    out["sysctl_left_at_the_runs_value"] = [
        n for n in GLOBAL_SYSCTLS
        if Path("/proc/sys", *n.split(".")).read_text().strip() == str(BUFFER)]
    irq = getattr(lab, "irq", None)
    if irq:
        out["irq"] = Path(f"/proc/irq/{irq[1]}/smp_affinity_list").read_text().strip()
    return out


def settle(lab: SshLab, before: dict[str, Any], wait_s: float = 30.0) -> dict[str, Any]:
    """The hosts' state once it equals ``before`` (agents finish restoring on their own
    after a fault), or as it is after ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        now = snapshot(lab)
        if now == before or time.monotonic() > deadline:
            return now
        time.sleep(0.25)


@pytest.fixture
def testbed(paths, builder, inventory, quic_go) -> Iterator[Testbed]:
    """The lab's testbed, holding the testbed lock: the machine's buffer sysctls are
    shared with every other run here."""
    with exclusive(paths.state_dir):
        yield Testbed(paths, builder=builder, startup_s=5.0, inventory=inventory)


def _config(changes: dict[str, Any] | None = None, nbytes: int = 20_000_000,
            experiment: str = "ssh") -> RunConfig:
    return RunConfig.build("quic-go", "quic-go", changes or {}, transfer_bytes=nbytes,
                           experiment=experiment)


def test_a_transfer_over_ssh_fills_the_same_columns_as_a_namespace_run(
        lab, testbed, paths, builder, tmp_path):
    """The short case of ``make test``: the same configuration in namespace mode and on
    the two SSH hosts; both rows fill the same catalog columns, the hosts are recorded,
    and both hosts are as they were."""
    before = snapshot(lab)
    catalog = tmp_path / "fresh.duckdb"
    config = _config({"mtu_bytes": 9000, "pin": True})
    ssh = Session(testbed, catalog, log=lambda line: None)
    [over_ssh] = ssh.run(config, 1)
    ns = Session(Testbed(paths, builder=builder, startup_s=5.0), catalog, log=lambda line: None)
    [in_ns] = ns.run(_config({"mtu_bytes": 9000, "pin": True}, experiment="ns"), 1)
    assert over_ssh.status == "ok", over_ssh.failure_reason
    assert in_ns.status == "ok", in_ns.failure_reason
    assert settle(lab, before) == before
    with Catalog(catalog, read_only=True) as cat:
        rows = {r["experiment"]: r for r in cat.df("SELECT * FROM runs").to_dict("records")}
        hosts = cat.df("SELECT * FROM hosts ORDER BY name").to_dict("records")
    row, ns_row = rows["ssh"], rows["ns"]
    assert set(row) == {name for name, _ in RUN_COLUMNS}

    def filled(r: dict[str, Any]) -> set[str]:
        return {k for k, v in r.items() if v is not None and v == v}  # NaN is not filled
    assert filled(row) == filled(ns_row), filled(row) ^ filled(ns_row)
    assert row["hostpair"] == f"lab{lab.index}-server-lab{lab.index}-client"
    assert (row["server_host"], row["client_host"]) == (f"lab{lab.index}-server",
                                                        f"lab{lab.index}-client")
    assert ns_row["hostpair"] == "veth" and ns_row["server_host"] == "netns:server"
    assert row["cpu"] == ns_row["cpu"] and row["mtu_bytes"] == 9000
    assert (row["server_core"], row["client_core"]) == (0, 1)
    assert row["server_syscalls"] > 0 and row["client_nic_rx_bytes"] >= 20_000_000
    extra = json.loads(row["extra"])
    assert extra["hosts"]["server"]["nic"]["driver"] == "veth"
    assert extra["hosts"]["server"]["cpu"]["microarchitecture"]
    assert extra["topology"]["applied"]["sysctl"]["server"][HOST_SYSCTL[0]] == HOST_SYSCTL[1]
    assert extra["nic"]["client"]["counters_delta"] is not None  # veth has ethtool -S
    assert {h["name"] for h in hosts} >= {f"lab{lab.index}-server", f"lab{lab.index}-client"}
    assert all(h["cores"] and h["kernel"] and h["cpu"] for h in hosts)
    # Nothing of the run is left on the hosts' disks either (its logs came back).
    for role in ("server", "client"):
        assert not (Path(inventory_workdir(lab, role)) / "runs" / over_ssh.run_id).exists()
    assert (Path(over_ssh.logdir) / "server.perf").exists()


def inventory_workdir(lab: SshLab, role: str) -> str:
    return Inventory.load(lab.inventory_path).host(role).workdir


@pytest.mark.slow
def test_knobs_on_the_hosts_interfaces_are_set_and_restored(lab, testbed):
    """MTU, offloads, a tbf rate, eBPF loss, buffer sysctls (the machine's, through
    sysctl_via), the host's own sysctl and IRQ affinity: set for the run, as they were
    after."""
    before = snapshot(lab)
    config = _config({"mtu_bytes": 9000, "link_gbps": 1.0, "loss_pct": 0.5,
                      "rcvbuf_bytes": BUFFER, "sndbuf_bytes": BUFFER},
                     nbytes=10_000_000)
    result = testbed.run(config, 0, "ssh-knobs")
    assert result.status == "ok", result.failure_reason
    applied = result.topology["applied"]
    assert applied["tbf"]["rate_bps"] == 1_000_000_000
    assert applied["loss"]["loss_pct"] == 0.5 and applied["loss"]["where"].startswith("client")
    # Loss: the sender's segmentation and the receiver's GRO off (per-packet drops).
    assert applied["server.test0"]["tx-udp-segmentation"] == "off"
    assert applied["client.test0"]["generic-receive-offload"] == "off"
    assert result.effective["veth_segmentation"] is False
    assert applied["sysctl"]["server"]["net.core.rmem_max"] == str(BUFFER)
    assert applied["sysctl"]["server"][HOST_SYSCTL[0]] == HOST_SYSCTL[1]
    if lab.irq:  # type: ignore[attr-defined]
        assert list(applied["irq"]["server"].values()) == ["1"]
    assert result.hosts["server"]["nic"]["mtu"] == 9000  # read while it was set
    assert result.goodput_mbps and result.goodput_mbps < 1000
    assert settle(lab, before) == before


@pytest.mark.slow
def test_kernel_tcp_over_ssh_sets_its_offloads_buffers_and_priority_and_restores_them(
        lab, testbed, builder):
    """A tcp+tls run on the two hosts: its offloads (checksums, TSO, GSO, GRO) and
    tcp_rmem set through the agents and undone after, the peers at the run's nice value
    (and their autogroups'), the TCP micro-benchmark and per-core load recorded, the
    TCP counters read from each host."""
    from quiclab.testbed.stacks import STACKS

    assert builder.build(STACKS["tcp+tls"]).ok
    before = snapshot(lab)
    rmem = {role: _in(n["ns"], "cat", "/proc/sys/net/ipv4/tcp_rmem")
            for role, n in lab.names(lab.index).items()}
    config = RunConfig.build("tcp+tls", "tcp+tls",
                             {"pin": True, "gro": False, "tcp_rmem_bytes": 262144},
                             {"nice": 5}, transfer_bytes=20_000_000, experiment="ssh-tcp")
    result = testbed.run(config, 0, "ssh-tcp")
    assert result.status == "ok", result.failure_reason
    applied = result.topology["applied"]
    assert applied["client.test0"]["generic-receive-offload"] == "off"
    assert applied["server.test0"]["tx-checksumming"] == "on"
    assert applied["sysctl"]["client"]["net.ipv4.tcp_rmem"].split() == ["4096", "131072",
                                                                        "262144"]
    assert set(result.host["bench"]) == {"server", "client"}
    assert result.host["bench"]["server"]["aes128gcm_ns_per_byte_median"] > 0
    assert result.host["per_core"]
    assert (Path(result.logdir) / "server.cmd").read_text().startswith("nice -n 5 ")
    assert result.server.snmp["TcpExt"] and result.server.report["tcp_info"]
    assert settle(lab, before) == before
    assert {role: _in(n["ns"], "cat", "/proc/sys/net/ipv4/tcp_rmem")
            for role, n in lab.names(lab.index).items()} == rmem


@pytest.mark.slow
def test_a_knob_a_hosts_interface_lacks_is_refused_in_one_line(lab, testbed):
    before = snapshot(lab)
    config = RunConfig.build("quic-go", "quic-go", {}, {"rx_ring": 512},
                             transfer_bytes=1_000_000, experiment="ssh")
    result = testbed.run(config, 0, "ssh-rings")
    assert result.status == "failed"
    assert result.failure_reason and result.failure_reason.startswith(
        "rx_ring=512 cannot be honoured on ssh:lab")
    assert "no ring sizes" in result.failure_reason and "\n" not in result.failure_reason
    assert settle(lab, before) == before


def _cli(paths, inventory_path: Path, nbytes: int, *more: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "quiclab.testbed", "testbed", "--runs-dir", str(paths.runs_dir),
         "run", "--hosts", str(inventory_path), "--server", "quic-go", "--client", "quic-go",
         "--bytes", str(nbytes), "--set", "link_gbps=0.05", "mtu_bytes=9000",
         f"rcvbuf_bytes={BUFFER}", *more],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _peer_pid(lab: SshLab, role: str, wait_s: float = 60.0) -> int:
    """The quic-go peer running on a lab host (once the transfer is under way)."""
    ns = lab.names(lab.index)[role]["ns"]
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                  text=True).stdout.split():
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == "quic-go-peer":
                    return int(pid)
            except OSError:
                continue
        time.sleep(0.05)
    raise AssertionError(f"no quic-go peer appeared on the {role} host")


def _processes(match: Callable[[str], bool]) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if match(cmd):
                out.append(int(entry.name))
    return out


def _fault_then_next_run_works(lab, paths, inventory, fault: Callable[[subprocess.Popen[str]],
                                                                      None],
                               ) -> tuple[subprocess.Popen[str], str, str, dict[str, Any],
                                          dict[str, Any]]:
    before = snapshot(lab)
    proc = _cli(paths, lab.inventory_path, 200_000_000)
    _peer_pid(lab, "client")
    time.sleep(1.0)  # mid-transfer
    fault(proc)
    try:
        out, err = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    after = settle(lab, before)
    with exclusive(paths.state_dir):
        nxt = Testbed(paths, startup_s=5.0, inventory=inventory).run(
            _config(nbytes=5_000_000), 0, f"ssh-after-fault-{time.monotonic_ns()}")
    assert nxt.status == "ok", f"the next run failed: {nxt.failure_reason}"
    return proc, out, err, before, after


def _one_line_failure(out: str) -> str:
    lines = [ln for ln in out.splitlines() if " rep 0: failed — " in ln]
    assert len(lines) == 1, out
    return lines[0].split(" rep 0: failed — ", 1)[1]


@pytest.mark.slow
def test_a_dropped_ssh_connection_fails_the_run_and_leaves_both_hosts_as_they_were(
        lab, paths, inventory, quic_go):
    client_ip = inventory.client.ssh.split("@")[1]

    def drop(proc: subprocess.Popen[str]) -> None:
        [ssh] = _processes(lambda cmd: cmd.startswith("ssh ") and client_ip in cmd
                           and "agent.py" in cmd)
        os.kill(ssh, signal.SIGKILL)

    proc, out, err, before, after = _fault_then_next_run_works(lab, paths, inventory, drop)
    assert proc.returncode == 1, err
    reason = _one_line_failure(out)
    assert reason.startswith(f"lost the agent on client host {inventory.client.ssh}"), reason
    assert after == before


@pytest.mark.slow
def test_a_killed_sshd_session_on_the_host_is_a_dropped_connection_too(
        lab, paths, inventory, quic_go):
    ns = lab.names(lab.index)["server"]["ns"]

    def drop(proc: subprocess.Popen[str]) -> None:
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                              text=True).stdout.split()
        sessions = [int(p) for p in pids if Path(f"/proc/{p}/cmdline").exists() and
                    b"sshd: root" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert sessions, "no sshd session on the server host"
        for pid in sessions:
            os.kill(pid, signal.SIGKILL)

    proc, out, err, before, after = _fault_then_next_run_works(lab, paths, inventory, drop)
    assert proc.returncode == 1, err
    reason = _one_line_failure(out)
    assert reason.startswith("lost the agent on server host"), reason
    assert after == before


@pytest.mark.slow
def test_a_killed_peer_fails_the_run_in_one_line(lab, paths, inventory, quic_go):
    def kill_peer(proc: subprocess.Popen[str]) -> None:
        os.kill(_peer_pid(lab, "client"), signal.SIGKILL)

    proc, out, err, before, after = _fault_then_next_run_works(lab, paths, inventory,
                                                               kill_peer)
    assert proc.returncode == 1, err
    reason = _one_line_failure(out)
    assert reason.startswith("client quic-go killed by SIGKILL"), reason
    assert after == before


@pytest.mark.slow
def test_a_killed_controller_leaves_the_hosts_to_restore_themselves(lab, paths, inventory,
                                                                   quic_go):
    def kill_controller(proc: subprocess.Popen[str]) -> None:
        proc.kill()

    proc, _, _, before, after = _fault_then_next_run_works(lab, paths, inventory,
                                                           kill_controller)
    assert proc.returncode == -signal.SIGKILL
    assert after == before


@pytest.mark.slow
def test_ctrl_c_restores_both_hosts_and_exits_130(lab, paths, inventory, quic_go):
    def interrupt(proc: subprocess.Popen[str]) -> None:
        proc.send_signal(signal.SIGINT)

    proc, _, err, before, after = _fault_then_next_run_works(lab, paths, inventory, interrupt)
    assert proc.returncode == 130, err
    assert "interrupted" in err.strip().splitlines()[-1]
    assert after == before


@pytest.mark.slow
def test_agents_killed_with_the_controller_are_undone_by_clean(lab, paths, inventory, quic_go):
    """SIGKILL for the controller and both agents: nothing restores by itself; the
    journals stay on the hosts until ``testbed clean --hosts`` (or the next run)."""
    before = snapshot(lab)
    proc = _cli(paths, lab.inventory_path, 200_000_000)
    _peer_pid(lab, "client")
    time.sleep(1.0)
    agents = _processes(lambda cmd: "agent.py" in cmd and "quiclab-lab" in cmd
                        and not cmd.startswith("ssh "))
    assert len(agents) == 2, agents
    for pid in agents:
        os.kill(pid, signal.SIGKILL)
    proc.kill()
    proc.communicate()
    time.sleep(1.0)
    changed = snapshot(lab)
    assert changed["server"]["mtu"] == 9000
    assert "net.core.rmem_max" in changed["sysctl_left_at_the_runs_value"]
    done = subprocess.run([sys.executable, "-m", "quiclab.testbed", "testbed", "--runs-dir",
                           str(paths.runs_dir), "clean", "--hosts", str(lab.inventory_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "server host" in done.stdout and "change(s) undone" in done.stdout
    assert settle(lab, before, wait_s=5) == before


def test_a_bad_inventory_is_refused_before_anything_runs(root, tmp_path):
    bad = tmp_path / "hosts.yaml"
    bad.write_text("hosts:\n  server: {ssh: root@a, interface: e, address: 10.0.0.1, "
                   "port: 0}\n  client: {ssh: root@b, interface: e, address: 10.0.0.2}\n")
    done = subprocess.run([sys.executable, "-m", "quiclab.testbed", "testbed", "run",
                           "--hosts", str(bad), "--server", "quic-go", "--client", "quic-go"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"quiclab testbed: {bad}: hosts.server.port=0: allowed a "
                                   "whole number 1 … 65535")


def test_an_unreachable_host_fails_the_run_in_one_line(root, paths, builder, tmp_path,
                                                       quic_go):
    inv = Inventory.from_dict({"hosts": {
        "server": {"ssh": "root@198.19.255.254", "interface": "e", "address": "10.0.0.1",
                   "connect_timeout_s": 1},
        "client": {"ssh": "root@198.19.255.253", "interface": "e", "address": "10.0.0.2",
                   "connect_timeout_s": 1}}})
    result = Testbed(paths, builder=builder, inventory=inv).run(_config(), 0, "unreachable")
    assert result.status == "failed" and result.failure_reason
    assert result.failure_reason.startswith("ssh root@198.19.255.254: cannot connect")
    assert "\n" not in result.failure_reason



@pytest.mark.slow
def test_peers_built_on_the_host_are_used_where_they_are(lab, paths, builder, quic_go,
                                                         tmp_path):
    """``quiclab_dir``: a checkout on the host with its own builds (another architecture):
    nothing of the peers is copied, only the agent and the certificate."""
    from quiclab.testbed.hosts import PACKAGE_DIR

    checkout = PACKAGE_DIR.parent  # this machine's checkout is the hosts' (one filesystem)
    text = lab.inventory_path.read_text()
    for role in ("server", "client"):
        text = text.replace(f"workdir: /var/tmp/quiclab-lab{lab.index}-{role}",
                            f"workdir: {tmp_path / role}\n    quiclab_dir: {checkout}")
    inv_path = tmp_path / "inventory.yaml"
    inv_path.write_text(text)
    inventory = Inventory.load(inv_path)
    assert inventory.server.quiclab_dir == str(checkout)
    with exclusive(paths.state_dir):
        result = Testbed(paths, builder=builder, startup_s=5.0, inventory=inventory).run(
            _config(nbytes=5_000_000), 0, "ssh-quiclab-dir")
    assert result.status == "ok", result.failure_reason
    for role in ("server", "client"):
        assert sorted(p.name for p in (tmp_path / role).iterdir()) == [
            ".manifest.json", "agent", "certs", "runs"]
    cmd = (Path(result.logdir) / "server.cmd").read_text()
    assert f"{checkout}/testbed/.build/bin/quic-go-peer" in cmd


def test_hosts_says_what_each_host_is_and_changes_nothing(lab, paths):
    before = snapshot(lab)
    done = subprocess.run([sys.executable, "-m", "quiclab.testbed", "testbed", "--runs-dir",
                           str(paths.runs_dir), "hosts", "--hosts", str(lab.inventory_path),
                           "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    records = json.loads(done.stdout)
    for role in ("server", "client"):
        rec = records[role]
        assert rec["name"] == f"lab{lab.index}-{role}" and rec["kind"] == "ssh"
        assert rec["address_present"] and rec["nic"]["interface"] == "test0"
        assert rec["nic"]["driver"] == "veth" and rec["nic"]["rings"] is None
        assert rec["cpu"]["cores"] == os.cpu_count() and rec["kernel"] == os.uname().release
    assert snapshot(lab) == before
