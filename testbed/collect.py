"""Collectors for one peer process: CPU time, per-second CPU samples, system calls.

- CPU seconds (user, system) come from ``wait4()``'s rusage when the peer
  exits: exact, all threads, and children included.
- Per-second samples read ``/proc/<pid>/stat`` of the process tree (utime,
  stime); the tree is read every ``core_interval_s`` so that, when the side
  exits or the sampler stops, a last sample covers the rest of the run since
  the last full second (at least one interval; its percentage is over that
  shorter span). A transfer shorter than a second thus still has one sample.
- The core a side ran on: every ``core_interval_s`` (0.1 s) the sampler reads
  each thread's ``/proc/<pid>/task/<tid>/stat`` (field 39, the core it last ran
  on, and its CPU time) and credits the thread's CPU time since the previous
  read to that core; the side's core is the one credited most (a busy peer's
  threads seldom move within 0.1 s, so this is close to where its CPU went).
  A side that used less CPU than one clock tick between reads (a short
  request run's server) is credited nothing; its core is then the one its
  busiest thread was last seen on (``last_core``).
- The transfer window: :meth:`CpuSampler.cut` ends the current sample at once and
  starts the per-second grid afresh. The server's sampler runs from its start-up;
  the harness cuts it when the client starts and when the client has exited, so
  its samples fall on the window's edges (``cpu_samples.in_window``) and the CPU
  it used within the window is the difference of the two readings.
- System calls are counted by ``perf stat -e raw_syscalls:sys_enter`` wrapped
  around the peer when available (a counting tracepoint, no sampling). perf
  reaps the peer: it exits with the peer's exit code, but for a peer killed by a
  signal it exits 0 and prints ``<argv0>: <signal description>`` (``psignal``) on
  the peer's stderr; :func:`perf_child_status` reads that back into the Exit.
- The host's load: busy CPU time of all cores from ``/proc/stat``, over a short
  window before the transfer (the server waiting, the client not started: what
  else runs on the host) and over the transfer (peers, relay, kernel softirq
  work and anything else). A shared machine's background load slows CPU-bound
  peers, which no model input knows; the run records it so sessions can be told
  apart (:func:`host_cpu_s`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class CpuSample:
    """CPU use of one side during one sampling interval (percent of one core)."""

    t_s: int
    user_pct: float
    system_pct: float
    core: int | None
    start_ns: int
    end_ns: int

    @property
    def total_pct(self) -> float:
        return self.user_pct + self.system_pct


def _children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                text = Path(f"/proc/{pid}/task/{task}/children").read_text()
                out.extend(int(c) for c in text.split())
    return out


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    seen, todo = [], [pid]
    while todo:
        p = todo.pop()
        seen.append(p)
        todo.extend(_children(p))
    return seen


def stat_times(pid: int, path: str | None = None) -> tuple[float, float, int | None]:
    """(user s, system s, last core) of one process from /proc/<pid>/stat (or of one
    thread, from ``path``); zeros if gone."""
    try:
        text = Path(path or f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0, 0.0, None
    # The command name may contain spaces: fields start after the last ')'.
    fields = text[text.rfind(")") + 2:].split()
    utime, stime = int(fields[11]), int(fields[12])
    core = int(fields[36]) if len(fields) > 36 else None
    return utime / CLOCK_TICKS, stime / CLOCK_TICKS, core


def thread_times(pid: int) -> dict[tuple[int, int], tuple[float, int | None]]:
    """{(pid, tid): (CPU s, last core)} of every thread of one process ({} if gone)."""
    out: dict[tuple[int, int], tuple[float, int | None]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        user, system, core = stat_times(pid, f"/proc/{pid}/task/{tid}/stat")
        out[(pid, int(tid))] = (user + system, core)
    return out


class CpuSampler:
    """Samples the CPU of a process tree once per ``interval_s``, and where its
    threads ran every ``core_interval_s``, in a thread."""

    def __init__(self, pid: int, interval_s: float = 1.0, core_interval_s: float = 0.1):
        self.pid = pid
        self.interval_s = interval_s
        self.core_interval_s = min(core_interval_s, interval_s)
        self.samples: list[CpuSample] = []
        #: CPU seconds credited to each core (see the module docstring).
        self.core_seconds: dict[int, float] = {}
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        # Per-pid last reading, so exited descendants don't make the sum go backwards.
        self._last: dict[int, tuple[float, float]] = {}
        self._threads: dict[tuple[int, int], float] = {}
        self._window: dict[int, float] = {}  # core seconds since the last sample
        #: (CPU s, core) of the thread with the most CPU time at its last reading.
        self._last_seen: tuple[float, int] | None = None
        # (time ns, user s, system s): the start of the current sample, and the last
        # reading of a live tree.
        self._prev: tuple[int, float, float] = (0, 0.0, 0.0)
        self._latest: tuple[int, float, float] = (0, 0.0, 0.0)
        self._t = 0
        self._complete = True

    def start(self) -> CpuSampler:
        self._thread.start()
        self._ready.wait(timeout=5)
        return self

    def stop(self) -> list[CpuSample]:
        self._stop.set()
        self._thread.join(timeout=5)
        return self.samples

    def cut(self) -> Cut:
        """End the current sample now (a shorter one) and start the per-second grid
        afresh from here; returns the time and the tree's CPU seconds so far."""
        with self._lock:
            self._read_cores()
            now = time.time_ns()
            user, system, alive = self._read()
            complete = alive and self._complete
            if alive:
                self._latest = (now, user, system)
            # A tree that has gone ends its last sample at its last live reading.
            end_ns, end_u, end_s = self._latest
            prev_ns, prev_u, prev_s = self._prev
            if end_ns > prev_ns:
                self._sample(self._t, prev_ns, end_ns, end_u - prev_u, end_s - prev_s)
                self._t += 1
            self._prev = self._latest
            return Cut(now, user, system, complete)

    def core_shares(self) -> dict[int, float]:
        """Share of the observed CPU time per core ({} when none was observed)."""
        total = sum(self.core_seconds.values())
        return {c: v / total for c, v in sorted(self.core_seconds.items())} if total else {}

    def main_core(self) -> int | None:
        """The core credited with the most CPU time (None when none was observed)."""
        return _busiest(self.core_seconds)

    def last_core(self) -> int | None:
        """The core the side's busiest thread was last seen on (None if never read)."""
        return self._last_seen[1] if self._last_seen else None

    def _read(self) -> tuple[float, float, bool]:
        """(user s, system s) summed over the tree's last readings, and whether any
        process of the tree was still there to read. ``_complete`` says whether every
        process read before was read again (none of them has gone)."""
        alive = False
        seen: set[int] = set()
        for pid in tree(self.pid):
            user, system, _ = stat_times(pid)
            # A process is kept from its first reading on, even at 0 CPU ticks (a C peer
            # that has only listened yet): if it then does all its work and exits between
            # two readings, the tree is incomplete (the caller falls back to wait4's
            # rusage) rather than silently missing it.
            if user or system or pid not in self._last:
                self._last[pid] = (user, system)
            if Path(f"/proc/{pid}/stat").exists():
                alive = True
                seen.add(pid)
        self._complete = set(self._last) <= seen
        return (sum(u for u, _ in self._last.values()),
                sum(s for _, s in self._last.values()), alive)

    def _read_cores(self) -> None:
        """Credit each thread's CPU time since the previous read to its current core."""
        for pid in tree(self.pid):
            for key, (cpu_s, core) in thread_times(pid).items():
                # A thread seen for the first time started since the previous read
                # (or with the process): all its CPU time is new.
                delta = cpu_s - self._threads.get(key, 0.0)
                self._threads[key] = cpu_s
                if core is not None and (self._last_seen is None
                                         or cpu_s >= self._last_seen[0]):
                    self._last_seen = (cpu_s, core)
                if core is not None and delta > 0:
                    self.core_seconds[core] = self.core_seconds.get(core, 0.0) + delta
                    self._window[core] = self._window.get(core, 0.0) + delta

    def _loop(self) -> None:
        with self._lock:
            t0 = time.time_ns()
            self._read_cores()
            user, system, _ = self._read()
            self._prev = self._latest = (t0, user, system)
        self._ready.set()
        while not self._stop.wait(self.core_interval_s):
            with self._lock:
                self._read_cores()
                now = time.time_ns()
                user, system, alive = self._read()
                if not alive:
                    break
                self._latest = (now, user, system)
                prev_ns, prev_u, prev_s = self._prev
                if now - prev_ns < self.interval_s * 1e9 * 0.999:
                    continue
                self._sample(self._t, prev_ns, now, user - prev_u, system - prev_s)
                self._t += 1
                self._prev = (now, user, system)
        # The rest of the run since the last full second (or cut), up to the last
        # reading of a live process (a shorter span; nothing if under one interval).
        with self._lock:
            prev_ns, prev_u, prev_s = self._prev
            last_ns, last_u, last_s = self._latest
            if last_ns - prev_ns >= self.core_interval_s * 1e9 * 0.999:
                self._sample(self._t, prev_ns, last_ns, last_u - prev_u, last_s - prev_s)
                self._t += 1
                self._prev = self._latest

    def _sample(self, t: int, start_ns: int, end_ns: int, user_s: float,
                system_s: float) -> None:
        span = (end_ns - start_ns) / 1e9
        self.samples.append(CpuSample(t, 100 * user_s / span, 100 * system_s / span,
                                      _busiest(self._window), start_ns, end_ns))
        self._window = {}


@dataclass(frozen=True)
class Cut:
    """A reading of a sampled tree at a sample boundary (:meth:`CpuSampler.cut`):
    when, its CPU seconds so far, and whether every process of it seen before was
    still there (else the CPU of one that has gone since its last reading is missing)."""

    time_ns: int
    user_s: float
    system_s: float
    complete: bool


def _busiest(seconds: dict[int, float]) -> int | None:
    return max(seconds, key=lambda c: (seconds[c], -c)) if seconds else None


@dataclass
class Exit:
    """How a peer process ended and what it used."""

    returncode: int | None
    user_s: float = 0.0
    system_s: float = 0.0
    max_rss_kb: int = 0
    voluntary_switches: int = 0
    involuntary_switches: int = 0
    timed_out: bool = False
    wall_s: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)
    #: The signal that ended the peer (None when it exited); ``returncode`` is then
    #: ``-signal``, as subprocess has it.
    signal: int | None = None

    @property
    def how(self) -> str:
        """How it ended, in words: "exited 3", "killed by SIGKILL"."""
        if self.signal is not None:
            return f"killed by {signal_name(self.signal)}"
        return f"exited {self.returncode}"

    @property
    def cpu_s(self) -> float:
        return self.user_s + self.system_s


def wait(proc: subprocess.Popen[bytes], timeout_s: float, started: float) -> Exit:
    """Wait for ``proc`` up to ``timeout_s``, killing its process group on timeout.

    Blocks in ``wait4`` (no polling: the harness shares the two cores with the
    peers) while a timer kills the group at the deadline; the exit carries the
    rusage of the peer and its children.
    """
    fired = threading.Event()

    def expire() -> None:
        fired.set()
        kill_group(proc, signal.SIGKILL)

    if not timeout_s >= 0:  # nan: refused where the knob is read; never "at once" here
        raise ValueError(f"timeout_s={timeout_s!r}: allowed a number ≥ 0")
    timer = threading.Timer(min(timeout_s, threading.TIMEOUT_MAX), expire)
    timer.daemon = True
    timer.start()
    try:
        while True:
            try:
                _, status, usage = os.wait4(proc.pid, 0)
                break
            except InterruptedError:
                continue
    finally:
        timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return Exit(proc.returncode, usage.ru_utime, usage.ru_stime, usage.ru_maxrss,
                usage.ru_nvcsw, usage.ru_nivcsw, fired.is_set(), time.monotonic() - started,
                signal=-proc.returncode if proc.returncode < 0 else None)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def perf_child_status(exit: Exit, stderr_text: str, argv0: str) -> Exit:
    """The peer's own ending when ``perf stat`` ran it: perf exits with the peer's
    exit code, but exits 0 for a peer killed by a signal, after printing
    ``<argv0>: <description>`` (``psignal``) as its last line on stderr. Returns
    ``exit`` with ``returncode = -signal`` and ``signal`` set in that case."""
    if exit.signal is not None or exit.returncode != 0:
        return exit  # perf itself was killed, or it passed on the peer's exit code
    lines = [line.strip() for line in stderr_text.splitlines() if line.strip()]
    if not lines:
        return exit
    for number in sorted(signal.valid_signals()):
        description = signal.strsignal(number)
        if description and lines[-1] == f"{argv0}: {description}":
            exit.signal = int(number)
            exit.returncode = -int(number)
            break
    return exit


def stop_peer(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Signal the peer but not a ``perf stat`` wrapped around it: perf then reaps the
    peer, so its CPU time reaches ``wait4``'s rusage, and writes its counts."""
    descendants = tree(proc.pid)[1:]
    for pid in descendants or [proc.pid]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def kill_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def port_bound(pid: int, port: int, transport: str = "udp") -> bool:
    """Whether the network namespace of ``pid`` has a UDP socket on ``port`` (IPv4 or a
    dual-stack IPv6 socket, as MsQuic opens), or for ``transport="tcp"`` a TCP socket
    listening there (state 0A, TCP_LISTEN)."""
    lines: list[str] = []
    for table in (transport, transport + "6"):
        with contextlib.suppress(OSError):
            lines += Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
    hex_port = f":{port:04X}"
    return any(line.split()[1].endswith(hex_port)
               and (transport != "tcp" or line.split()[3] == "0A")
               for line in lines if len(line.split()) > 3)


def udp_port_bound(pid: int, port: int) -> bool:
    """:func:`port_bound` for UDP."""
    return port_bound(pid, port, "udp")


def perf_available() -> bool:
    """Whether ``perf stat`` can count the raw_syscalls tracepoint here."""
    if shutil.which("perf") is None:
        return False
    proc = subprocess.run(["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter", "true"],
                          capture_output=True, text=True, check=False)
    return proc.returncode == 0 and "raw_syscalls" in proc.stderr


#: Run a peer without CAP_NET_ADMIN (it runs as root in its namespace). With it,
#: SO_RCVBUFFORCE/SO_SNDBUFFORCE pass net.core.rmem_max/wmem_max: quic-go v0.65
#: falls back to them and got 14 MiB buffers whatever the run's rcvbuf_bytes
#: (found 2026-11-27), so its buffer cells measured another setting.
NO_NET_ADMIN = ["setpriv", "--inh-caps=-net_admin", "--bounding-set=-net_admin", "--"]


def perf_prefix(output: Path) -> list[str]:
    return ["perf", "stat", "-x,", "--no-big-num", "-e", "raw_syscalls:sys_enter",
            "-o", str(output), "--"]


def parse_perf(output: Path) -> int | None:
    """System calls counted by a ``perf stat -x,`` output file (None when absent)."""
    try:
        text = output.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[2] == "raw_syscalls:sys_enter" and parts[0].isdigit():
            return int(parts[0])
    return None


def host_cpu_s(path: str = "/proc/stat") -> tuple[float, float]:
    """(busy, total) CPU seconds of all cores since boot, from the aggregate ``cpu``
    line of ``/proc/stat`` (busy = everything but idle and iowait)."""
    fields = Path(path).read_text().split("\n", 1)[0].split()
    if not fields or fields[0] != "cpu":
        raise ValueError(f"{path}: first line is not the aggregate cpu line")
    ticks = [int(v) for v in fields[1:]]
    # user nice system idle iowait irq softirq steal (guest time is inside user)
    total = sum(ticks[:8])
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    hz = os.sysconf("SC_CLK_TCK")
    return (total - idle) / hz, total / hz


class HostLoad:
    """Busy cores of the whole host over a window: creating it starts the window,
    ``cores()`` reads it (busy CPU seconds per wall second; 0 … number of cores)."""

    def __init__(self, ncores: int | None = None) -> None:
        self.ncores = ncores or os.cpu_count() or 1
        self._busy = host_cpu_s()[0]
        self._wall = time.monotonic()

    def cores(self) -> float:
        """Busy cores, at most the host's: /proc/stat counts whole clock ticks per core,
        so over a short window the count can pass the wall time × cores by a tick."""
        busy, _ = host_cpu_s()
        rate = max(0.0, busy - self._busy) / max(time.monotonic() - self._wall, 1e-9)
        return min(rate, float(self.ncores))


def per_core_ticks(path: str = "/proc/stat") -> dict[int, dict[str, float]]:
    """Seconds since boot per core from ``/proc/stat``'s ``cpuN`` lines: user (with
    nice), system, softirq, irq and busy (everything but idle and iowait)."""
    hz = os.sysconf("SC_CLK_TCK")
    out: dict[int, dict[str, float]] = {}
    for line in Path(path).read_text().splitlines():
        fields = line.split()
        if not fields or not fields[0].startswith("cpu") or fields[0] == "cpu":
            continue
        ticks = [int(v) for v in fields[1:]]
        total = sum(ticks[:8])
        idle = ticks[3] + ticks[4]
        out[int(fields[0][3:])] = {"user_s": (ticks[0] + ticks[1]) / hz,
                                   "system_s": ticks[2] / hz, "irq_s": ticks[5] / hz,
                                   "softirq_s": ticks[6] / hz, "busy_s": (total - idle) / hz}
    return out


def ksoftirqd_s() -> dict[int, float]:
    """CPU seconds (user + system) of each core's ksoftirqd thread: the softirq work the
    kernel deferred from the context it was raised in, charged to no peer."""
    out: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if comm.startswith("ksoftirqd/") and comm[10:].isdigit():
            user, system, _ = stat_times(int(entry.name))
            out[int(comm[10:])] = user + system
    return out


class CoreLoad:
    """Per-core busy time and ksoftirqd CPU over a window: creating it starts the
    window, ``read()`` gives {core: {user_s, system_s, softirq_s, irq_s, busy_s,
    ksoftirqd_s}} of the window (tick resolution: 1/CLK_TCK s)."""

    def __init__(self) -> None:
        self._cores = per_core_ticks()
        self._soft = ksoftirqd_s()

    def read(self) -> dict[str, dict[str, float]]:
        cores, soft = per_core_ticks(), ksoftirqd_s()
        out: dict[str, dict[str, float]] = {}
        for core, now in cores.items():
            before = self._cores.get(core, now)
            row = {k: round(now[k] - before[k], 4) for k in now}
            row["ksoftirqd_s"] = round(soft.get(core, 0.0) - self._soft.get(core, 0.0), 4)
            out[str(core)] = row
        return out


def set_autogroup_nice(pid: int, nice: int) -> bool:
    """Give the scheduling autogroup of ``pid`` (its session: the harness starts each
    peer in a new one) the nice value ``nice``. With CONFIG_SCHED_AUTOGROUP
    (``kernel.sched_autogroup_enabled``) the scheduler shares CPU between sessions
    first and by nice only within one, so a peer's own nice value does nothing
    against another session's work; the autogroup's nice does (sched(7),
    "The autogroup feature"). Returns whether it was set (False without autogroups)."""
    try:
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))
    except OSError:
        return False
    return True
