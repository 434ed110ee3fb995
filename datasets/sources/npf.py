"""NPF test definitions (https://github.com/tbarbette/npf), as the UCLouvain
experiments use them: ``%variables``, ``%config``, ``%init@role`` and
``%[stack:]script@role`` sections, from which the loader takes the stacks'
command lines, the cores variable and the NIC's interrupt setup.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from quiclab.errors import DataError


@dataclass
class NpfScript:
    """One ``%[stack:]script@role`` section: its options and command lines."""

    stack: str | None
    role: str
    options: dict[str, str]
    lines: list[str]

    @property
    def command(self) -> str:
        return "\n".join(self.lines)


@dataclass
class NpfTest:
    """An NPF test definition (https://github.com/tbarbette/npf, ``%section`` syntax)."""

    variables: dict[str, str] = field(default_factory=dict)
    config: dict[str, str] = field(default_factory=dict)
    init: dict[str, list[str]] = field(default_factory=dict)
    scripts: list[NpfScript] = field(default_factory=list)

    def script(self, stack: str, role: str) -> NpfScript | None:
        return next((s for s in self.scripts if s.stack == stack and s.role == role), None)

    def stacks(self) -> list[str]:
        return sorted({s.stack for s in self.scripts if s.stack})

    def irq_cpu_list(self, role: str) -> str | None:
        """The CPU list the NIC's interrupts are pinned to on ``role``'s host
        (``set_irq_affinity_cpulist.sh LIST`` in its ``%init``)."""
        for line in self.init.get(role, []):
            if (m := re.search(r"set_irq_affinity_cpulist\.sh\s+([0-9,-]+)", line)):
                return m.group(1)
        return None

    def nic_queues(self, role: str) -> int | None:
        """Combined NIC queues set by ``ethtool -L IFACE combined N`` in ``%init``."""
        for line in self.init.get(role, []):
            if (m := re.search(r"ethtool -L \S+ combined ([0-9]+)", line)):
                return int(m.group(1))
        return None

    def irqbalance_stopped(self, role: str) -> bool | None:
        lines = " ".join(self.init.get(role, []))
        if "irqbalance" not in lines:
            return None
        return "stop irqbalance" in lines

    def choices(self, variable: str) -> dict[str, str]:
        """``NAME={a:label,b:label}`` → {value: label}; ``NAME=v`` → {v: v}."""
        raw = self.variables.get(variable, "")
        if raw.startswith("{") and raw.endswith("}"):
            out = {}
            for item in raw[1:-1].split(","):
                value, _, label = item.partition(":")
                out[value.strip()] = label.strip() or value.strip()
            return out
        return {raw: raw} if raw else {}


_SECTION = re.compile(r"^%(?:(?P<stack>[A-Za-z0-9_]+):)?(?P<kind>[a-z_]+)(?:@(?P<role>\w+))?"
                      r"(?P<opts>.*)$")


def parse_npf(text: str, path: str = "<npf>") -> NpfTest:
    """Read an NPF test definition: ``%variables``/``%late_variables`` (``NAME=value``),
    ``%config`` (``key=value``), ``%init@role`` and ``%[stack:]script@role opts``
    sections; ``//`` comments are dropped. A script section without a role, or
    a text with no section at all, raises :class:`DataError` naming the file."""
    test = NpfTest()
    current: tuple[str, Any] | None = None
    seen = False
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("%"):
            m = _SECTION.match(line)
            if not m:
                raise DataError(f"{path}:{number}", f"unreadable section header {line!r}")
            seen = True
            kind, role = m.group("kind"), m.group("role")
            if kind == "script":
                if not role:
                    raise DataError(f"{path}:{number}", "a script section without @role",
                                    field="section")
                options = dict(o.split("=", 1) for o in m.group("opts").split() if "=" in o)
                script = NpfScript(m.group("stack"), role, options, [])
                test.scripts.append(script)
                current = ("script", script)
            elif kind == "init":
                current = ("init", test.init.setdefault(role or "all", []))
            elif kind in ("variables", "late_variables"):
                current = ("variables", test.variables)
            elif kind == "config":
                current = ("config", test.config)
            else:
                current = ("other", None)
            continue
        if not line or line.startswith("//") or current is None:
            continue
        kind, target = current
        if kind == "script":
            target.lines.append(line)
        elif kind == "init":
            target.append(line)
        elif kind in ("variables", "config") and "=" in line:
            name, _, value = line.partition("=")
            target[name.strip()] = value.strip()
    if not seen:
        raise DataError(path, "no NPF %section in the file")
    return test
