"""Where a report came from: when, on which host, from which code (``stamp.json``).

Every command that writes a report folder (``calibrate``, ``validate``,
``reproduce``, ``bench``) leaves a ``stamp.json`` beside it; ``quiclab report``
prints it above each figure it takes from there, so a number in ``docs/results/``
says its date, host and code version. Standard library only (and cheap: no git
call unless asked).
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from quiclab import __version__

STAMP_FILE = "stamp.json"


def _cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib(meminfo: Path = Path("/proc/meminfo")) -> float | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def stamp(command: str | None = None) -> dict[str, Any]:
    """This process's date (UTC), host, CPU, cores, memory, load, quiclab version and
    checkout (git revision and dirty flag, None outside a checkout), and command."""
    from quiclab.experiments.provenance import git_state

    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "host": socket.gethostname(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "load_average_1min": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "quiclab": __version__,
        "git": git_state(),
        "command": command if command is not None else "quiclab " + " ".join(sys.argv[1:]),
    }


def write_stamp(directory: Path, command: str | None = None) -> Path:
    """Write ``directory/stamp.json`` for the report just written there."""
    path = Path(directory) / STAMP_FILE
    path.write_text(json.dumps(stamp(command), indent=1, sort_keys=True) + "\n")
    return path


def read_stamp(directory: Path) -> dict[str, Any] | None:
    """The stamp of a report folder, or None (written before stamps, or unreadable)."""
    try:
        data = json.loads((Path(directory) / STAMP_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def describe(data: dict[str, Any] | None) -> str:
    """One line: date, host (CPU, cores), quiclab version at revision, command."""
    if not data:
        return "not stamped (written before reports carried their date, host and version)"
    git = data.get("git") or {}
    revision = (git.get("revision") or "")[:10] or "no checkout"
    dirty = " + uncommitted changes" if git.get("dirty") else ""
    load = data.get("load_average_1min")
    return (f"{data.get('date', '?')} on {data.get('host', '?')} ({data.get('cpu', '?')}, "
            f"{data.get('cores', '?')} cores"
            + (f", load {load}" if load is not None else "") + "), "
            f"quiclab {data.get('quiclab', '?')} at {revision}{dirty}; "
            f"`{data.get('command', '?')}`")
