"""The inventory: the two hosts of a testbed, read and checked from YAML."""

from __future__ import annotations

from pathlib import Path

import pytest

from quiclab.errors import SpecError
from quiclab.testbed.inventory import Inventory

GOOD = """\
name: lab-25g
defaults:
  key: ~/.ssh/quiclab
  ssh_options: [ProxyJump=bastion]
hosts:
  server:
    ssh: root@10.0.0.11
    interface: enp65s0f0np0
    address: 192.168.50.1
    peer_cores: [2, 3]
    irq_cores: [0]
    sysctls: {net.core.netdev_max_backlog: 5000}
  client:
    ssh: lab-client
    port: 2222
    sudo: true
    interface: enp65s0f0np0
    address: 192.168.50.2
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text(text)
    return path


def test_an_inventory_names_both_hosts(tmp_path):
    inv = Inventory.load(_write(tmp_path, GOOD))
    assert inv.name == "lab-25g" and inv.ssh and inv.kind == "ssh"
    server, client = inv.server, inv.client
    assert server.ssh == "root@10.0.0.11" and server.name == "10.0.0.11"
    assert server.key == str(Path("~/.ssh/quiclab").expanduser())
    assert server.ssh_options == ("ProxyJump=bastion",) == client.ssh_options  # defaults
    assert server.peer_cores == (2, 3) and server.irq_cores == (0,)
    assert server.sysctls == (("net.core.netdev_max_backlog", "5000"),)
    assert client.port == 2222 and client.sudo and client.name == "lab-client"
    assert client.workdir == "/var/tmp/quiclab" and client.state_dir == "/run/quiclab"
    assert inv.hostpair == "10.0.0.11-lab-client"
    assert server.label == "ssh:10.0.0.11"


def test_the_namespace_pair_is_an_inventory_without_ssh():
    inv = Inventory.namespaces(cores=2)
    assert not inv.ssh and inv.hostpair == "veth"
    assert inv.server.label == "netns:server" and inv.client.label == "netns:client"
    assert inv.server.peer_cores == (0,) and inv.client.peer_cores == (1,)
    assert Inventory.namespaces(cores=1).client.peer_cores == (0,)


@pytest.mark.parametrize("edit, message", [
    (("address: 192.168.50.2", "address: 192.168.50.1"),
     "hosts.client.address='192.168.50.1': the same address as the server's"),
    (("port: 2222", "port: 70000"), "hosts.client.port=70000: allowed a whole number 1 … 65535"),
    (("peer_cores: [2, 3]", "peer_cores: [2, 2]"),
     "hosts.server.peer_cores=[2, 2]: allowed a list of distinct core numbers"),
    (("interface: enp65s0f0np0\n    address: 192.168.50.1", "interface: a/b\n    address: "
      "192.168.50.1"), "hosts.server.interface='a/b': allowed a network interface name"),
    (("address: 192.168.50.1", "address: 192.168.50.300"),
     "hosts.server.address='192.168.50.300': allowed the interface's IPv4 address"),
    (("sudo: true", "sudo: yes please"), "hosts.client.sudo='yes please': allowed true or false"),
    (("  client:\n", "  clients:\n"), "hosts.clients="),
    (("    irq_cores: [0]\n", "    irq_core: [0]\n"), "hosts.server.irq_core=[0]: unknown key"),
    (("ssh: root@10.0.0.11", "ssh: 'root@10.0.0.11; rm -rf /'"),
     "hosts.server.ssh='root@10.0.0.11; rm -rf /': allowed an SSH target"),
    (("name: lab-25g", "name: lab 25g"), "name='lab 25g': allowed 1-64 characters"),
    (("{net.core.netdev_max_backlog: 5000}", "{'net.core.x; reboot': 1}"),
     "hosts.server.sysctls='net.core.x; reboot': allowed sysctl names"),
])
def test_a_bad_value_is_refused_in_one_line(tmp_path, edit, message):
    old, new = edit
    assert old in GOOD
    path = _write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(SpecError) as err:
        Inventory.load(path)
    text = str(err.value)
    assert text.startswith(f"{path}: ") and message in text, text
    assert "\n" not in text


def test_a_missing_host_or_file_is_one_line(tmp_path):
    path = _write(tmp_path, "hosts:\n  server: {ssh: a, interface: e, address: 10.0.0.1}\n")
    with pytest.raises(SpecError, match=r"hosts\.client=None: missing"):
        Inventory.load(path)
    with pytest.raises(SpecError, match="cannot read"):
        Inventory.load(tmp_path / "absent.yaml")
    bad = _write(tmp_path, "hosts: [\n")
    with pytest.raises(SpecError, match="not valid YAML: line"):
        Inventory.load(bad)
    twice = _write(tmp_path, GOOD.replace("    peer_cores: [2, 3]\n",
                                          "    peer_cores: [2, 3]\n    peer_cores: [1]\n"))
    with pytest.raises(SpecError, match="duplicate key 'peer_cores'"):
        Inventory.load(twice)
