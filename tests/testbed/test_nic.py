"""What the hosts' tools print, read back; how an SSH host is reached and what it gets."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from quiclab.testbed.hostpair import host_python_tag, stack_files
from quiclab.testbed.inventory import Inventory
from quiclab.testbed.nic import parse_features, parse_pairs, parse_rings, parse_stats
from quiclab.testbed.remote import elf_machine, remote_command, ssh_agent_argv, ssh_base
from quiclab.testbed.stacks import STACKS
from quiclab.testbed.topology import MIN_TBF_LIMIT_BYTES, LinkConfig

# As ethtool 6.1 prints them for an mlx5 port (abridged).
FEATURES = """Features for enp65s0f0np0:
rx-checksumming: on
tcp-segmentation-offload: on
generic-segmentation-offload: on
generic-receive-offload: on
large-receive-offload: off
tx-udp-segmentation: on
rx-udp-gro-forwarding: off [fixed]
"""
RINGS = """Ring parameters for enp65s0f0np0:
Pre-set maximums:
RX:			8192
RX Mini:		n/a
RX Jumbo:		n/a
TX:			8192
Current hardware settings:
RX:			1024
RX Mini:		n/a
RX Jumbo:		n/a
TX:			1024
"""
COALESCE = """Coalesce parameters for enp65s0f0np0:
Adaptive RX: on  TX: on
rx-usecs: 8
rx-frames: 128
tx-usecs: 8
tx-frames: 128
"""
STATS = """NIC statistics:
     rx_packets: 125017
     tx_packets: 88123
     rx_out_of_buffer: 3
     ch0_arm: n/a
"""


def test_ethtool_outputs_are_read():
    features = parse_features(FEATURES)
    assert features["tx-udp-segmentation"] == ("on", False)
    assert features["rx-udp-gro-forwarding"] == ("off", True)
    assert parse_rings(RINGS) == {"max": {"RX": 8192, "TX": 8192},
                                  "current": {"RX": 1024, "TX": 1024}}
    coalesce = parse_pairs(COALESCE)
    assert coalesce["rx-usecs"] == 8 and coalesce["tx-frames"] == 128
    assert parse_stats(STATS) == {"rx_packets": 125017, "tx_packets": 88123,
                                  "rx_out_of_buffer": 3}


def test_a_link_sets_only_what_the_run_asks_for():
    assert LinkConfig().offloads() == {}
    assert LinkConfig(veth_segmentation=False, nic_lro=True).offloads() == {
        "veth_segmentation": False, "nic_lro": True}
    assert LinkConfig().buffer_sysctls() == {}
    assert LinkConfig(rcvbuf_bytes=4096).buffer_sysctls() == {
        "net.core.rmem_max": 4096, "net.core.rmem_default": 4096}
    burst, limit = LinkConfig(rate_gbps=1.0).tbf()
    assert burst == 250_000 and limit == MIN_TBF_LIMIT_BYTES


def test_ssh_commands_carry_the_hosts_options_and_quote_the_remote_side(tmp_path):
    inv = Inventory.from_dict({"hosts": {
        "server": {"ssh": "root@10.0.0.1", "port": 2222, "key": "/k", "interface": "e",
                   "address": "10.1.0.1", "ssh_options": ["ProxyJump=jump"],
                   "workdir": "/var/tmp/q l"},
        "client": {"ssh": "ubuntu@10.0.0.2", "sudo": True, "interface": "e",
                   "address": "10.1.0.2"}}})
    base = ssh_base(inv.server)
    assert base[:2] == ["ssh", "-T"] and "BatchMode=yes" in base and base[-2:] == [
        "root@10.0.0.1", "--"]
    assert base[base.index("-p"):base.index("-p") + 2] == ["-p", "2222"]
    assert "ProxyJump=jump" in base and base[base.index("-i"):base.index("-i") + 2] == ["-i", "/k"]
    argv = ssh_agent_argv(inv.server)
    assert shlex.split(argv[-1])[:2] == ["python3", "/var/tmp/q l/agent/agent.py"]
    assert remote_command(inv.client, ["sh", "-c", "echo $1", "x; y"]).startswith("sudo -n sh -c")
    assert shlex.split(remote_command(inv.client, ["echo", "a b; c"])) == [
        "sudo", "-n", "echo", "a b; c"]


def test_a_stacks_files_are_its_binaries_libraries_and_sources(tmp_path):
    build, peers = tmp_path / "build", tmp_path / "peers"
    release = peers / "msquic" / "target" / "release"
    release.mkdir(parents=True)
    for name in ("msquic-peer", "libmsquic.so", "libmsquic.so.2", "other.txt"):
        (release / name).write_bytes(b"x")
    assert sorted(p.name for p in stack_files(STACKS["msquic"], build, peers)) == [
        "libmsquic.so", "libmsquic.so.2", "msquic-peer"]
    (peers / "pyquic").mkdir()
    (peers / "pyquic" / "peer.py").write_text("")
    # The venv's interpreter is made on the host, not copied.
    assert stack_files(STACKS["aioquic"], build, peers) == [peers / "pyquic" / "peer.py"]
    tquic = build / "tquic" / "bin"
    tquic.mkdir(parents=True)
    for name in ("tquic_client", "tquic_server"):
        (tquic / name).write_bytes(b"x")
    (peers / "h3wrap").mkdir()
    (peers / "h3wrap" / "wrap.py").write_text("")
    assert sorted(p.name for p in stack_files(STACKS["tquic"], build, peers)) == [
        "tquic_client", "tquic_server", "wrap.py"]


def test_an_elf_files_machine_is_read_from_its_header(tmp_path):
    def elf(machine: int) -> Path:
        path = tmp_path / f"elf{machine}"
        path.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(11) + machine.to_bytes(2, "little"))
        return path
    assert elf_machine(elf(62)) == "x86_64" and elf_machine(elf(183)) == "aarch64"
    script = tmp_path / "s.py"
    script.write_text("print()")
    assert elf_machine(script) is None
    assert host_python_tag({"python": "3.11.2", "machine": "aarch64"}) == "cp311-aarch64"



def test_runs_on_another_pair_of_hosts_have_ids_of_their_own():
    from quiclab.testbed import record

    assert record.run_id("e", "k", 0) == record.run_id("e", "k", 0, "veth") == "fresh-e-k-r0"
    assert record.run_id("e", "k", 2, "lab0-server-lab0-client") == (
        "fresh-e-k-lab0-server-lab0-client-r2")
    assert record.run_id("e", "k", 0, "a b") != record.run_id("e", "k", 0, "a/b")


def test_cores_of_hosts_not_reached_yet_are_checked_once_they_are():
    from quiclab.errors import QuiclabError
    from quiclab.testbed.config import RunConfig, pinned_cores, resolve

    config = RunConfig.build("quic-go", "quic-go", {"server_core": 7, "client_core": 5})
    resolved = resolve(config, STACKS["quic-go"], STACKS["quic-go"], cores={})
    assert resolved.effective["server_pinned_core"] == 7
    s = config.scenario
    assert pinned_cores(s, {"server": 8, "client": 8}, {"server": (6, 7)}, restrict=True) == {
        "server_pinned_core": 7, "client_pinned_core": 5}
    with pytest.raises(QuiclabError, match=r"^server_core=7 cannot be honoured: the "
                                           r"server's host has 4 core\(s\), 0 … 3"):
        pinned_cores(s, {"server": 4, "client": 8}, restrict=True)
    with pytest.raises(QuiclabError, match="the inventory gives the client's peer cores 2, 3"):
        pinned_cores(s, {"server": 8, "client": 8}, {"client": (2, 3)}, restrict=True)
    pinned = RunConfig.build("quic-go", "quic-go", {"pin": True}).scenario
    assert pinned_cores(pinned, {"server": 8, "client": 8}, {"server": (2, 3)}, True) == {
        "server_pinned_core": 2, "client_pinned_core": 1}


def test_noise_measures_the_stacks_named_and_only_those():
    import argparse

    from quiclab.testbed import cli

    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    named = parser.parse_args(["testbed", "noise", "--stacks", "quiche", "--stacks", "quinn"])
    assert named.stacks == ["quiche", "quinn"]
    assert parser.parse_args(["testbed", "noise"]).stacks is None  # cli.NOISE_STACKS then
