"""Spec points checked against the model registry before anything is computed.

``Scenario.from_dict`` validates values on their own (ranges, choices); which
implementations (``name`` or ``name@variant``) and CPUs exist is known only to
the :class:`~quiclab.models.registry.Registry` the run uses. :class:`ModelCheck`
asks it once per distinct value and turns its one-line
:class:`~quiclab.errors.ScenarioError` into a :class:`~quiclab.errors.SpecError`
naming the spec file and the key path the bad value came from, e.g.
``sw.yaml: axes[0].values[1]: server='msquik' is impossible: allowed one of: …``.
The cores a point pins its endpoints to (``server_core``, ``client_core``) are
checked against that point's CPU in the same way, e.g. ``sw.yaml: base.server_core:
server_core=20 is impossible: allowed -1 … 3 (Intel Xeon D-1518 has 4 cores); cpu
from axes[0].values[1]``. (``pin`` alone asks for no particular core: any CPU has
the NIC's node, so there is nothing to check.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from quiclab.errors import ScenarioError
from quiclab.experiments.axes import IMPLEMENTATION, Axis
from quiclab.experiments.schema import fail
from quiclab.experiments.spec import SweepSpec
from quiclab.models.registry import Registry
from quiclab.sim.scenario import Scenario

#: Scenario fields whose values only the registry can check.
REGISTRY_FIELDS = ("server", "client", "cpu")
#: Placement fields checked against the core count of each point's CPU.
CORE_FIELDS = ("server_core", "client_core")

#: Where a point's values were written: (key path prefix, the mapping as written).
Layer = tuple[str, Mapping[str, Any]]


def registry_error(registry: Registry, field: str, value: str) -> ScenarioError | None:
    """The registry's one-line complaint about ``field=value``, or None if it is known."""
    try:
        if field == "cpu":
            registry.cpus.find(value, field="cpu")
        else:
            registry.model(value, field=field)
    except ScenarioError as err:
        return err
    return None


def _sets(name: str, field: str) -> bool:
    """Does spec key ``name`` set Scenario field ``field``?"""
    return name == field or (name == IMPLEMENTATION and field in ("server", "client"))


def locate(field: str, value: Any, axes: Sequence[Axis], layers: Sequence[Layer],
           fallback: str) -> str:
    """The key path that gave ``field`` its ``value``: an axis value (axes win), else the
    first layer that sets it, else ``fallback`` (the Scenario default)."""
    for axis in axes:
        paths = axis.paths or tuple("" for _ in axis.fields)
        for j, step in enumerate(axis.values):
            for name, v, path in zip(axis.fields, step, paths, strict=True):
                if path and _sets(name, field) and str(v) == str(value):
                    return f"{path}[{j}]"
    for prefix, written in layers:
        for key in (field, IMPLEMENTATION):
            if isinstance(written, Mapping) and key in written and _sets(key, field) \
                    and str(written[key]) == str(value):
                return f"{prefix}.{key}"
    return fallback


class ModelCheck:
    """Checks the points of one spec file against ``registry`` (see the module docstring)."""

    def __init__(self, registry: Registry, source: str):
        self.registry = registry
        self.source = source
        self._errors: dict[tuple[str, str], ScenarioError | None] = {}

    def error(self, field: str, value: str) -> ScenarioError | None:
        key = (field, value)
        if key not in self._errors:
            self._errors[key] = registry_error(self.registry, field, value)
        return self._errors[key]

    def point(self, scenario: Scenario, fallback: str, layers: Sequence[Layer] = (),
              axes: Sequence[Axis] = ()) -> None:
        """Raise SpecError (file, key path, the registry's message) for an unknown name,
        or for a core that the point's CPU does not have."""
        for field in REGISTRY_FIELDS:
            value = getattr(scenario, field)
            err = self.error(field, value)
            if err is not None:
                raise fail(self.source, locate(field, value, axes, layers, fallback), str(err))
        cpu = self.registry.cpus.find(scenario.cpu, field="cpu")
        for field in CORE_FIELDS:
            core = getattr(scenario, field)
            if core >= cpu.cores:  # the same rule as quiclab.sim.cores.placement
                err = ScenarioError(field, core, f"-1 … {cpu.cores - 1} ({cpu.name} has "
                                                 f"{cpu.cores} cores)")
                cpu_at = locate("cpu", scenario.cpu, axes, layers, fallback)
                raise fail(self.source, locate(field, core, axes, layers, fallback),
                           f"{err}; cpu from {cpu_at}")

    def points(self, scenarios: Iterable[Scenario], fallback: str,
               layers: Sequence[Layer] = (), axes: Sequence[Axis] = ()) -> None:
        """:meth:`point` for many scenarios, each distinct value asked once."""
        seen: set[tuple[str, str, str, int, int]] = set()
        for s in scenarios:
            names = (s.server, s.client, s.cpu, s.server_core, s.client_core)
            if names in seen:
                continue
            seen.add(names)
            self.point(s, fallback, layers, axes)


def check_sweep(spec: SweepSpec, registry: Registry) -> None:
    """Every point of a :class:`~quiclab.experiments.spec.SweepSpec` against ``registry``;
    raises SpecError naming the spec file and the axis value or base key."""
    ModelCheck(registry, spec.path).points(spec.scenarios(), "base", [("base", spec.base)],
                                          spec.axes)

