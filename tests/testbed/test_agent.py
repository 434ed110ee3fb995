"""The agent every host of a run has: peers, journalled changes, and restoring them when
its controller goes away. Run here as a plain child process (no namespace, no root)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from quiclab.testbed import agent as agent_mod
from quiclab.testbed.errors import TestbedError
from quiclab.testbed.hosts import PACKAGE_DIR, AgentClient, Host, HostLost, netns_agent_argv
from quiclab.testbed.inventory import Inventory

BUSY = "import json, time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\nprint(json.dumps({'done': True}))"  # noqa: E501


def _host(tmp_path: Path, name: str = "a") -> Host:
    client = AgentClient(netns_agent_argv(None, tmp_path / "state"), f"local {name}",
                         tmp_path / f"agent-{name}.log").start()
    host = Host(Inventory.namespaces().server, client)
    host.hello({"test": name}, lock_wait_s=5)
    return host


def _gone(pid: int, wait_s: float = 5.0) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # A zombie child of the agent counts as gone once the agent has reaped it.
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0]
            if state == "Z":
                return True
        except (OSError, IndexError):
            return True
        time.sleep(0.05)
    return False


def test_a_peer_runs_under_the_agent_with_its_cpu_and_output(tmp_path):
    host = _host(tmp_path)
    try:
        assert host.facts["protocol"] == agent_mod.PROTOCOL and host.clock_offset_ns == 0
        assert host.facts["cores"] >= 1 and "processor" in host.facts["cpuinfo"]
        logdir = tmp_path / "run"
        host.agent.request("spawn", name="peer", argv=[sys.executable, "-c", BUSY],
                           env={}, logdir=str(logdir))
        first = host.agent.request("cut", name="peer")
        reply = host.agent.request("wait", name="peer", timeout_s=30, since_start=True)
        cores = host.agent.request("stop_sampler", name="peer")
        used = reply["exit"]["user_s"] + reply["exit"]["system_s"]
        assert reply["exit"]["returncode"] == 0 and used >= 0.25
        assert not reply["exit"]["timed_out"] and first["time_ns"] > 0
        assert json.loads((logdir / "peer.out").read_text()) == {"done": True}
        assert (logdir / "peer.cmd").read_text().startswith(sys.executable)
        assert cores["samples"] and sum(cores["core_shares"].values()) == pytest.approx(1.0)
        with pytest.raises(TestbedError, match=r"^local a: frobnicate: unknown operation"):
            host.agent.request("frobnicate")
        assert host.run(["echo", "still here"]).stdout == "still here\n"
    finally:
        host.agent.close()
    assert host.agent.proc is not None and host.agent.proc.returncode == 0


def test_a_hanging_peer_is_killed_at_its_timeout(tmp_path):
    host = _host(tmp_path)
    try:
        host.agent.request("spawn", name="hang", argv=["sleep", "60"], env={},
                           logdir=str(tmp_path / "run"), sample=False)
        reply = host.agent.request("wait", name="hang", timeout_s=0.5)
        assert reply["exit"]["timed_out"] and reply["exit"]["signal"] == signal.SIGKILL
    finally:
        host.agent.close()


def test_changes_are_undone_at_restore_last_first(tmp_path):
    setting = tmp_path / "setting"
    setting.write_text("original")
    host = _host(tmp_path)
    try:
        host.write(str(setting), "first", "original")
        host.write(str(setting), "second", "first")
        host.change(["sh", "-c", f"echo extra > {tmp_path / 'extra'}"],
                    ["rm", str(tmp_path / "extra")])
        assert setting.read_text() == "second" and (tmp_path / "extra").exists()
        journal = json.loads(next((tmp_path / "state" / "agent").glob("agent-*.json"))
                             .read_text())
        assert len(journal["undo"]) == 3 and journal["controller"] == {"test": "a"}
        assert host.restore() == []
        assert setting.read_text() == "original" and not (tmp_path / "extra").exists()
        assert not list((tmp_path / "state" / "agent").glob("agent-*.json"))
    finally:
        host.agent.close()


def test_a_controller_that_goes_away_leaves_the_host_restored(tmp_path):
    """Its input closes without a word (the controller died, its ssh dropped): the agent
    kills its peers and undoes its journal by itself."""
    setting = tmp_path / "setting"
    setting.write_text("original")
    host = _host(tmp_path)
    host.write(str(setting), "changed", "original")
    reply = host.agent.request("spawn", name="peer", argv=["sleep", "300"], env={},
                               logdir=str(tmp_path / "run"), sample=False)
    assert host.agent.abandon(timeout_s=20)
    assert setting.read_text() == "original"
    assert _gone(int(reply["pid"]))
    assert "input closed" in (tmp_path / "agent-a.log").read_text()


def test_an_interrupted_wait_is_no_obstacle_to_leaving(tmp_path):
    """A request cut short (Ctrl-C in the controller) leaves the channel out of step:
    the next request refuses, and abandoning still restores."""
    setting = tmp_path / "setting"
    setting.write_text("original")
    host = _host(tmp_path)
    host.write(str(setting), "changed", "original")
    host.agent.request("spawn", name="peer", argv=["sleep", "300"], env={},
                       logdir=str(tmp_path / "run"), sample=False)
    with pytest.raises(HostLost, match="no answer in time"):
        host.agent.request("wait", wait_s=0.5, name="peer", timeout_s=300)
    assert not host.agent.usable
    host.agent.close()
    assert setting.read_text() == "original"


def test_a_killed_agents_journal_is_undone_by_the_next_agent(tmp_path):
    setting = tmp_path / "setting"
    setting.write_text("original")
    host = _host(tmp_path)
    host.write(str(setting), "changed", "original")
    assert host.agent.pid is not None
    os.kill(host.agent.pid, signal.SIGKILL)  # no chance to restore anything
    host.agent.proc.wait()  # type: ignore[union-attr]
    assert setting.read_text() == "changed"
    nxt = _host(tmp_path, "b")
    try:
        [restored] = nxt.facts["restored"]
        assert restored["undone"] == 1 and restored["failed"] == []
        assert restored["controller"] == {"test": "a"}
        assert setting.read_text() == "original"
    finally:
        nxt.agent.close()


def test_one_run_at_a_time_per_host(tmp_path):
    first = _host(tmp_path)
    try:
        second = AgentClient(netns_agent_argv(None, tmp_path / "state"), "local b",
                             tmp_path / "agent-b.log").start()
        with pytest.raises(TestbedError, match="another quiclab run holds this host"):
            Host(Inventory.namespaces().client, second).hello({}, lock_wait_s=0.5)
        second.close()
    finally:
        first.agent.close()


def test_a_silent_controller_is_given_up_on(tmp_path):
    """No ping for --deadman-s seconds (a silent network partition): undo and exit."""
    setting = tmp_path / "setting"
    setting.write_text("original")
    proc = subprocess.Popen([sys.executable, str(PACKAGE_DIR / "agent.py"), "--state-dir",
                             str(tmp_path / "state"), "--deadman-s", "1.5"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    for message in ({"op": "hello", "lock_wait_s": 5},
                    {"op": "change", "do": {"write": str(setting), "value": "changed"},
                     "undo": {"write": str(setting), "value": "original"}}):
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["ok"]
    assert setting.read_text() == "changed"
    assert proc.wait(timeout=15) == 3  # the input stays open: the watchdog ended it
    assert setting.read_text() == "original"
    assert "nothing heard for 2 s" in proc.stderr.read()  # type: ignore[union-attr]
    proc.stdin.close()


def test_stale_journals_of_other_boots_go_and_other_namespaces_stay(tmp_path):
    journals = tmp_path / "agent"
    journals.mkdir()
    setting = tmp_path / "setting"
    setting.write_text("changed")
    undo = [{"write": str(setting), "value": "original"}]
    old_boot = journals / "agent-1-999999.json"
    old_boot.write_text(json.dumps({"pid": 999999, "boot_id": "an-earlier-boot",
                                    "netns": agent_mod.netns_id(), "undo": undo}))
    elsewhere = journals / "agent-2-999998.json"
    elsewhere.write_text(json.dumps({"pid": 999998, "boot_id": agent_mod.boot_id(),
                                     "netns": "another-namespace", "undo": undo}))
    done = agent_mod.restore_stale(journals)
    assert done == [{"journal": old_boot.name, "dropped": "an earlier boot"}]
    assert not old_boot.exists() and elsewhere.exists()
    assert setting.read_text() == "changed"  # neither was this namespace's to undo
