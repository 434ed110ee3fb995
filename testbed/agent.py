"""The testbed's agent: the one program quiclab runs on each host of a run.

The controller starts it once per host and run (inside a namespace with ``ip netns
exec``, on a server with ``ssh``) and talks to it in JSON lines over its stdin and
stdout: it starts the peers as its own children (so ``wait4`` gives their CPU
time, as before), samples their CPU (:mod:`collect`), runs commands, and makes
every change to the host through ``change``, which writes the change's undo to a
journal file *before* making it. The journal is undone, last change first:

- on ``restore`` (the end of every run);
- when its stdin closes without ``bye`` — the controller died, was interrupted,
  or its SSH connection dropped — after killing its peers;
- when nothing arrived for ``deadman_s`` (a silent network partition: sshd
  without ClientAlive would keep the session open for hours);
- by the next agent on the same host and network namespace, for a journal whose
  agent is gone (killed with SIGKILL, the host's Python crashed): ``hello`` with
  ``clean`` restores those first, under the host's lock.

A journal records the boot (``/proc/sys/kernel/random/boot_id``): after a reboot
what it records is gone anyway (MTU, offloads, qdiscs, sysctls and IRQ affinity
do not survive one), and it is removed unread.

Standard library only, Python ≥ 3.9: it is copied to the hosts with
``collect.py`` beside it and run by their own ``python3``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

try:  # inside the package (namespace mode, tests)
    from quiclab.testbed import collect
except ImportError:  # deployed on a host: collect.py beside this file
    import collect  # type: ignore[no-redef,import-not-found,unused-ignore]

PROTOCOL = 1
#: Tools the harness calls on a host, and whether a run needs them.
TOOLS = {"ip": True, "tc": True, "ethtool": True, "taskset": True, "setpriv": True,
         "perf": False, "nsenter": False}


def _now_ns() -> int:
    return time.time_ns()


def read_text(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return None


def boot_id() -> str:
    return (read_text("/proc/sys/kernel/random/boot_id") or "").strip()


def netns_id() -> str:
    """The network namespace this agent is in (its inode): changes to interfaces and
    per-namespace sysctls belong to it, and only an agent in it may undo them."""
    try:
        return str(os.stat("/proc/self/ns/net").st_ino)
    except OSError:
        return "unknown"


def proc_start(pid: int) -> str | None:
    """A process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat):
    with the pid it names one process, even after the pid is reused."""
    text = read_text(f"/proc/{pid}/stat")
    if not text:
        return None
    fields = text[text.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


def perform(action: dict[str, Any], timeout_s: float = 60.0) -> dict[str, Any]:
    """Carry out one change or undo: ``{"argv": [...]}`` runs a command;
    ``{"write": path, "value": text, "via": [prefix]}`` writes a file (a sysctl, an
    IRQ's affinity), through a command prefix when one is given."""
    try:
        if "write" in action:
            via = list(action.get("via") or [])
            if not via:
                with open(action["write"], "w") as f:
                    f.write(str(action["value"]))
                return {"rc": 0, "stdout": "", "stderr": ""}
            argv = [*via, "sh", "-c", 'printf "%s" "$1" > "$2"', "sh", str(action["value"]),
                    str(action["write"])]
        else:
            argv = [str(a) for a in action["argv"]]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                              check=False, stdin=subprocess.DEVNULL)
        return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
    except (OSError, subprocess.SubprocessError, KeyError, TypeError) as err:
        return {"rc": 127, "stdout": "", "stderr": str(err)}


class Journal:
    """The undo list of one agent, kept in a file from before each change it covers."""

    def __init__(self, state_dir: Path, controller: dict[str, Any]):
        self.state_dir = state_dir
        self.path = state_dir / f"agent-{netns_id()}-{os.getpid()}.json"
        self.head = {"pid": os.getpid(), "start": proc_start(os.getpid()),
                     "boot_id": boot_id(), "netns": netns_id(), "controller": controller,
                     "created_ns": _now_ns()}
        self.undo: list[dict[str, Any]] = []

    def _write(self) -> None:
        if not self.undo:
            self.path.unlink(missing_ok=True)
            return
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump({**self.head, "undo": self.undo}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def add(self, undo: dict[str, Any]) -> None:
        self.undo.append(undo)
        self._write()

    def restore(self) -> list[str]:
        """Undo everything, last change first; returns the undos that failed (one line each)."""
        return restore_list(self.undo, self._write)


def restore_list(undo: list[dict[str, Any]], save: Any = None) -> list[str]:
    failed = []
    while undo:
        action = undo[-1]
        result = perform(action)
        if result["rc"] != 0 and not action.get("may_fail"):
            what = action.get("what") or " ".join(map(str, action.get("argv", [])))[:120]
            failed.append(f"{what}: {(result['stderr'] or result['stdout']).strip()[:200]}")
        undo.pop()
        if save:
            save()
    return failed


def restore_stale(state_dir: Path) -> list[dict[str, Any]]:
    """Undo the journals of agents that are gone (same boot, same network namespace);
    drop those of an earlier boot. Returns what was done per journal."""
    out: list[dict[str, Any]] = []
    if not state_dir.is_dir():
        return out
    mine, boot = netns_id(), boot_id()
    for path in sorted(state_dir.glob("agent-*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
            continue
        pid = int(data.get("pid", 0))
        if pid == os.getpid():
            continue
        if data.get("boot_id") != boot:
            path.unlink(missing_ok=True)
            out.append({"journal": path.name, "dropped": "an earlier boot"})
            continue
        if data.get("netns") != mine:
            continue
        if pid and proc_start(pid) is not None and proc_start(pid) == data.get("start"):
            continue  # its agent is alive
        undo = list(data.get("undo") or [])
        failed = restore_list(undo)
        path.unlink(missing_ok=True)
        out.append({"journal": path.name, "undone": len(data.get("undo") or []),
                    "failed": failed, "controller": data.get("controller")})
    return out


class Peer:
    """A process the agent started, with its CPU sampler."""

    def __init__(self, proc: subprocess.Popen[bytes], sampler: Any, started: float):
        self.proc = proc
        self.sampler = sampler
        self.started = started
        self.exit: Any = None


class Agent:
    def __init__(self, state_dir: Path, deadman_s: float, out: Any = None):
        self.state_dir = state_dir
        self.deadman_s = deadman_s
        self.out = out or sys.stdout
        self.peers: dict[str, Peer] = {}
        self.loads: dict[str, Any] = {}
        self.journal: Journal | None = None
        self.lock_file: Any = None
        self.inbox: queue.Queue[Any] = queue.Queue()
        self.last_heard = time.monotonic()
        self.aborting = threading.Event()
        self._write_lock = threading.Lock()

    # -- wire ----------------------------------------------------------------------
    def send(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, default=str)
        with self._write_lock:
            try:
                self.out.write(line + "\n")
                self.out.flush()
            except (BrokenPipeError, OSError, ValueError):
                self.abort("its output is closed")

    def reader(self, stream: Any) -> None:
        """Feed commands to the main loop; answer pings at once; EOF ends the run."""
        for line in stream:
            self.last_heard = time.monotonic()
            line = line.strip()
            if not line:
                continue
            try:
                message = json.loads(line)
            except ValueError:
                self.inbox.put({"op": "invalid", "line": line[:200]})
                continue
            if message.get("op") == "ping":
                continue
            self.inbox.put(message)
        self.abort("its input closed (the controller or its connection is gone)")

    def watchdog(self) -> None:
        while not self.aborting.wait(1.0):
            if time.monotonic() - self.last_heard > self.deadman_s:
                self.abort(f"nothing heard for {self.deadman_s:.0f} s")
                return

    def abort(self, why: str) -> None:
        """Kill the peers at once (a blocked wait returns) and end the main loop."""
        if self.aborting.is_set():
            return
        self.aborting.set()
        self.kill_all(signal.SIGKILL)
        self.inbox.put({"op": "_abort", "why": why})

    def kill_all(self, sig: int) -> None:
        for peer in list(self.peers.values()):
            if peer.proc.returncode is None:
                collect.kill_group(peer.proc, sig)

    # -- operations ------------------------------------------------------------------
    def op_hello(self, msg: dict[str, Any]) -> dict[str, Any]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        lock_path = self.state_dir / f"host-{netns_id()}.lock"
        self.lock_file = open(lock_path, "a+")  # noqa: SIM115 — held for the agent's life
        deadline = time.monotonic() + float(msg.get("lock_wait_s", 60.0))
        while True:
            try:
                fcntl.flock(self.lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    self.lock_file.seek(0)
                    holder = self.lock_file.read().strip() or "?"
                    raise RuntimeError(f"{lock_path}: another quiclab run holds this host "
                                       f"(agent pid {holder})") from None
                time.sleep(0.2)
        self.lock_file.seek(0)
        self.lock_file.truncate()
        self.lock_file.write(str(os.getpid()))
        self.lock_file.flush()
        if msg.get("nice") is not None:
            # The controller's nice value, for this agent and so for the peers it starts:
            # what they had as the controller's children in the namespace mode (sshd
            # would start them at 0).
            os.setpriority(os.PRIO_PROCESS, 0, int(msg["nice"]))
        restored = restore_stale(self.state_dir) if msg.get("clean", True) else []
        self.journal = Journal(self.state_dir, dict(msg.get("controller") or {}))
        freq = read_text("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
        nodes = sorted(p.name for p in Path("/sys/devices/system/node").glob("node[0-9]*"))
        return {"protocol": PROTOCOL, "pid": os.getpid(), "time_ns": _now_ns(),
                "boot_id": boot_id(), "netns": netns_id(), "hostname": platform.node(),
                "kernel": platform.release(), "machine": platform.machine(),
                "python": platform.python_version(), "cores": os.cpu_count() or 1,
                "cpuinfo": read_text("/proc/cpuinfo") or "",
                "cpufreq_max_khz": float(freq) if freq and freq.strip().isdigit() else None,
                "numa_nodes": len(nodes) or 1, "tools": {t: bool(shutil.which(t)) for t in TOOLS},
                "perf": collect.perf_available(), "restored": restored,
                "state_dir": str(self.state_dir), "euid": os.geteuid(),
                "nice": os.getpriority(os.PRIO_PROCESS, 0)}

    def op_exec(self, msg: dict[str, Any]) -> dict[str, Any]:
        return perform({"argv": msg["argv"]}, float(msg.get("timeout_s", 60.0)))

    def op_change(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Journal the undo, then make the change (a change that fails is undone too:
        a half-applied one is possible, and undoing an unchanged setting is harmless)."""
        if self.journal is None:
            raise RuntimeError("change before hello")
        self.journal.add(dict(msg["undo"]))
        return perform(dict(msg["do"]), float(msg.get("timeout_s", 60.0)))

    def op_restore(self, msg: dict[str, Any]) -> dict[str, Any]:
        return {"failed": self.journal.restore() if self.journal else []}

    def op_read(self, msg: dict[str, Any]) -> dict[str, Any]:
        text = read_text(msg["path"])
        return {"text": text, "exists": text is not None,
                "writable": os.access(msg["path"], os.W_OK)}

    def op_spawn(self, msg: dict[str, Any]) -> dict[str, Any]:
        name = msg["name"]
        logdir = Path(msg["logdir"])
        logdir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (msg.get("env") or {}).items()})
        argv = [str(a) for a in msg["argv"]]
        (logdir / f"{name}.cmd").write_text(" ".join(argv) + "\n")
        with open(logdir / f"{name}.out", "wb") as out, open(logdir / f"{name}.err", "wb") as err:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        autogroup = None
        if msg.get("autogroup_nice") is not None:
            # The peer is a session of its own (start_new_session): its autogroup's nice
            # is what weighs against other sessions' work (collect.set_autogroup_nice).
            autogroup = collect.set_autogroup_nice(proc.pid, int(msg["autogroup_nice"]))
        sampler = None
        if msg.get("sample", True):
            sampler = collect.CpuSampler(proc.pid).start()
        self.peers[name] = Peer(proc, sampler, time.monotonic())
        return {"pid": proc.pid, "autogroup": autogroup}

    def op_bound(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Wait until the peer has a UDP socket on ``port`` (``transport`` "tcp": a TCP
        socket listening there) — it is ready —, it exits, or ``timeout_s`` passes."""
        peer = self.peers[msg["name"]]
        deadline = time.monotonic() + float(msg.get("timeout_s", 10.0))
        transport = str(msg.get("transport", "udp"))
        while not collect.port_bound(peer.proc.pid, int(msg["port"]), transport):
            if peer.proc.poll() is not None or time.monotonic() > deadline:
                return {"bound": False, "exited": peer.proc.poll() is not None}
            time.sleep(0.02)
        return {"bound": True, "exited": False}

    def op_cut(self, msg: dict[str, Any]) -> dict[str, Any]:
        peer = self.peers[msg["name"]]
        cut = peer.sampler.cut()
        return {"time_ns": cut.time_ns, "user_s": cut.user_s, "system_s": cut.system_s,
                "complete": cut.complete}

    def op_wait(self, msg: dict[str, Any]) -> dict[str, Any]:
        peer = self.peers[msg["name"]]
        if peer.exit is None:
            started = peer.started if msg.get("since_start") else time.monotonic()
            peer.exit = collect.wait(peer.proc, float(msg["timeout_s"]), started)
        return {"exit": dict(peer.exit.__dict__)}

    def op_stop_sampler(self, msg: dict[str, Any]) -> dict[str, Any]:
        sampler = self.peers[msg["name"]].sampler
        if sampler is None:
            return {"samples": [], "core_shares": {}, "main_core": None, "last_core": None}
        samples = sampler.stop()
        return {"samples": [dict(s.__dict__) for s in samples],
                "core_shares": {str(c): v for c, v in sampler.core_shares().items()},
                "main_core": sampler.main_core(), "last_core": sampler.last_core()}

    def op_signal(self, msg: dict[str, Any]) -> dict[str, Any]:
        peer = self.peers[msg["name"]]
        sig = int(msg["signal"])
        if msg.get("peer_only"):
            collect.stop_peer(peer.proc, sig)
        else:
            collect.kill_group(peer.proc, sig)
        return {}

    def op_reap(self, msg: dict[str, Any]) -> dict[str, Any]:
        """End every peer still running: SIGTERM, two seconds, SIGKILL."""
        for peer in self.peers.values():
            if peer.proc.returncode is None and peer.proc.poll() is None:
                collect.kill_group(peer.proc, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    peer.proc.wait(timeout=2)
                collect.kill_group(peer.proc, signal.SIGKILL)
                peer.proc.wait()
            if peer.sampler is not None:
                peer.sampler.stop()
        return {}

    def op_load_begin(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Start a load window: the host's busy cores, and with ``per_core`` each core's
        busy time and ksoftirqd CPU (collect.CoreLoad)."""
        self.loads[msg["key"]] = (collect.HostLoad(),
                                  collect.CoreLoad() if msg.get("per_core") else None)
        return {}

    def op_load(self, msg: dict[str, Any]) -> dict[str, Any]:
        load, cores = self.loads[msg["key"]]
        return {"cores": load.cores(), "ncores": load.ncores,
                "per_core": cores.read() if cores is not None else None}

    def op_sleep(self, msg: dict[str, Any]) -> dict[str, Any]:
        time.sleep(float(msg["seconds"]))
        return {}

    # -- main loop -----------------------------------------------------------------
    def finish(self, why: str | None) -> int:
        self.kill_all(signal.SIGKILL)
        for peer in self.peers.values():
            with contextlib.suppress(Exception):
                peer.proc.wait(timeout=5)
        failed = self.journal.restore() if self.journal else []
        if why is not None:
            print(f"quiclab agent: {why}; peers killed, "
                  f"{'restore failed: ' + '; '.join(failed) if failed else 'host restored'}",
                  file=sys.stderr, flush=True)
        return 3 if why else 0

    def serve(self, stdin: Any) -> int:
        threading.Thread(target=self.reader, args=(stdin,), daemon=True).start()
        threading.Thread(target=self.watchdog, daemon=True).start()
        while True:
            msg = self.inbox.get()
            op = msg.get("op")
            if op == "_abort":
                return self.finish(str(msg.get("why")))
            if op == "bye":
                code = self.finish(None)
                self.send({"ok": True})
                return code
            handler = getattr(self, f"op_{op}", None)
            if handler is None:
                self.send({"ok": False, "error": f"unknown operation {op!r}"})
                continue
            try:
                reply = handler(msg)
                reply["ok"] = True
            except Exception as err:  # one line back to the controller, and go on
                reply = {"ok": False, "error": f"{type(err).__name__}: {err}"}
            if self.aborting.is_set():
                continue  # the next message is the abort
            self.send(reply)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="quiclab-agent")
    parser.add_argument("--state-dir", default="/run/quiclab")
    parser.add_argument("--deadman-s", type=float, default=120.0,
                        help="undo everything when nothing arrives for this long")
    args = parser.parse_args(argv)
    agent = Agent(Path(args.state_dir), args.deadman_s)
    # The controller handles Ctrl-C; a hang-up or SIGTERM here ends the run as an EOF does.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, lambda *_: agent.abort("signalled"))
    return agent.serve(sys.stdin)


if __name__ == "__main__":
    sys.exit(main())
