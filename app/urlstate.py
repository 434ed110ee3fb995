"""The what-if selection and its URL form, so that a what-if can be shared.

A :class:`Selection` is what the sidebar chooses: a base Scenario, the server
and client implementations to compare (every server with every client), and
the engines. In the URL it becomes query parameters: ``page``, ``server`` and
``client`` (comma-separated names), ``engines``, and every other Scenario
field that differs from its default (``mtu_bytes=9000&rtt_ms=10``). Reading a
URL never raises: the fields are applied together (a request workload needs
its ``request_bytes``), and only a value refused even then is dropped, with
the one-line ScenarioError message, which the app shows.

Pure functions without Streamlit, so they are tested directly.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from quiclab.errors import ScenarioError, excerpt, one_line
from quiclab.sim.engine import ENGINES
from quiclab.sim.scenario import Scenario, coerce, field_names

#: The app's pages: URL name → title.
PAGES = {"whatif": "What-if", "matrix": "Matrix", "dynamics": "Dynamics", "sweep": "Sweep",
         "reproductions": "Reproductions", "data": "Data"}
DEFAULT_PAGE = "whatif"
#: At most this many (server, client) pairs are compared at once (a 6 × 6 matrix).
MAX_PAIRS = 36
#: The side of the square sub-matrix compared when both lists are long.
MAX_SIDE = 6
#: What a request workload starts from when its fields are unset (0): sizes the seeds
#: measured, with a request count the packet engines finish in seconds. ``requests``:
#: seed 004's small object (630 bytes); ``handshakes``: seed 003's 1 KiB response.
WORKLOAD_DEFAULTS: dict[str, dict[str, int]] = {
    "requests": {"request_bytes": 630, "requests": 10_000},
    "handshakes": {"request_bytes": 1024, "requests": 1_000},
}
_DEFAULT = Scenario()


@dataclass(frozen=True)
class Selection:
    """Base scenario, implementations to compare, engines (analytic is always first)."""

    base: Scenario = field(default_factory=Scenario)
    servers: tuple[str, ...] = ("lsquic",)
    clients: tuple[str, ...] = ("lsquic",)
    engines: tuple[str, ...] = ("analytic",)

    def pairs(self) -> list[tuple[str, str]]:
        """Every (server, client) combination, in selection order; when there are more
        than MAX_PAIRS, a server × client sub-matrix of the first ones (6 × 6, or all of
        the shorter list against as many of the other as fit), never a ragged list."""
        servers, clients = matrix_shape(len(self.servers), len(self.clients))
        return list(itertools.product(self.servers[:servers], self.clients[:clients]))

    def scenarios(self) -> list[Scenario]:
        """One Scenario per pair: the base with that server and client."""
        return [self.base.with_(server=s, client=c) for s, c in self.pairs()]


def matrix_shape(servers: int, clients: int) -> tuple[int, int]:
    """How many of ``servers`` and ``clients`` the compared sub-matrix takes (at most
    MAX_PAIRS cells): all when they fit, else the shorter side whole if it has at most
    MAX_SIDE names, else MAX_SIDE × MAX_SIDE."""
    if servers * clients <= MAX_PAIRS:
        return servers, clients
    if clients <= MAX_SIDE:
        return MAX_PAIRS // clients, clients
    if servers <= MAX_SIDE:
        return servers, MAX_PAIRS // servers
    return MAX_SIDE, MAX_SIDE


def with_workload_defaults(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` with :data:`WORKLOAD_DEFAULTS` for a request workload's absent request
    fields, so that ``workload=requests`` alone is a scenario (a value given, even an
    impossible 0, is kept and reported)."""
    out = dict(fields)
    for name, value in WORKLOAD_DEFAULTS.get(str(out.get("workload", "bulk")), {}).items():
        out.setdefault(name, value)
    return out


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def encode(selection: Selection, page: str = DEFAULT_PAGE) -> dict[str, str]:
    """Query parameters for a selection (Scenario fields only where not default)."""
    params = {"page": page, "server": ",".join(selection.servers),
              "client": ",".join(selection.clients), "engines": ",".join(selection.engines)}
    default = Scenario()
    for name in field_names():
        if name in ("server", "client"):
            continue
        value = getattr(selection.base, name)
        if value != getattr(default, name):
            params[name] = _text(value)
    return params


def scenario_from(fields: Mapping[str, Any], base: Scenario | None = None
                  ) -> tuple[Scenario, list[tuple[str, Any, ScenarioError]]]:
    """``base`` (the default Scenario) with every field of ``fields``, and what was
    left out: (field, value, the error applying it gave).

    All fields are applied at once, since some need others (``workload=requests``
    needs ``request_bytes``). Only if that is refused are they applied one at a
    time, each tried again after the others, so that one bad value does not
    discard the rest; each field left out is reported once, with its error —
    which may name another field, the one it conflicts with
    (``mtu_bytes=1280`` left out because ``udp_payload_bytes=1400`` needs more).
    """
    base = base or Scenario()
    try:
        return base.with_(**fields), []
    except ScenarioError:
        pass
    pending = dict(fields)
    progress = True
    while pending and progress:
        progress = False
        for key, value in list(pending.items()):
            try:
                base = base.with_(**{key: value})
            except ScenarioError:
                continue
            del pending[key]
            progress = True
    refused = []
    for key, value in pending.items():
        try:
            base.with_(**{key: value})
        except ScenarioError as err:
            refused.append((key, value, err))
    return base, refused


def dropped_text(key: str, value: Any, err: ScenarioError) -> str:
    """The warning for a URL field left out: it names that field, and the error when
    the error is about another one (the field it conflicts with)."""
    if err.field == key:
        return f"URL: {err}"
    return f"URL: {key}={_text(value)} was left out: with it, {err}"


def _names(raw: str | None) -> tuple[str, ...]:
    return tuple(dict.fromkeys(n.strip() for n in (raw or "").split(",") if n.strip()))


def decode(params: Mapping[str, str], known_impls: Sequence[str] | None = None
           ) -> tuple[Selection, str, list[str]]:
    """(selection, page, problems) from query parameters.

    ``known_impls``, if given, are the implementation names (with variants) that
    exist; others are dropped with a message. Unknown parameters are ignored
    silently (Streamlit and browsers add their own, e.g. ``embed``).
    """
    problems: list[str] = []
    page = params.get("page", DEFAULT_PAGE)
    if page not in PAGES:
        problems.append(f"page={excerpt(page)} is unknown: allowed {' | '.join(PAGES)}")
        page = DEFAULT_PAGE
    fields: dict[str, Any] = {}
    names = set(field_names()) - {"server", "client"}
    for key, raw in params.items():
        if key not in names:
            continue
        try:
            # coerce() reads whole numbers exactly (2**53 + 1 too) and refuses, in one
            # bounded line, a value of any length.
            fields[key] = coerce(key, raw, source="URL")
        except ScenarioError as err:
            problems.append(str(err))
    base, refused = scenario_from(with_workload_defaults(fields))
    problems += [dropped_text(key, value, err) for key, value, err in refused]

    def impls(key: str) -> tuple[str, ...]:
        chosen = _names(params.get(key))
        if known_impls is not None:
            for bad in [n for n in chosen if n not in known_impls]:
                problems.append(one_line(f"URL: {key}={excerpt(bad)} is impossible: allowed "
                                         "one of " + ", ".join(known_impls)))
            chosen = tuple(n for n in chosen if n in known_impls)
        valid = []
        for name in chosen:  # a name the Scenario refuses ("lsquic@") is dropped, not raised
            try:
                _DEFAULT.with_(**{key: name})
            except ScenarioError as err:
                problems.append(f"URL: {err}")
                continue
            valid.append(name)
        chosen = tuple(valid)
        if chosen:
            return chosen
        if known_impls is None or "lsquic" in known_impls or not known_impls:
            return ("lsquic",)
        return (known_impls[0],)

    servers, clients = impls("server"), impls("client")
    engines = tuple(e for e in _names(params.get("engines")) if e in ENGINES)
    for bad in [e for e in _names(params.get("engines")) if e not in ENGINES]:
        problems.append(f"URL: engines={excerpt(bad)} is impossible: "
                        f"allowed {' | '.join(ENGINES)}")
    engines = ("analytic", *[e for e in engines if e != "analytic"])
    base = base.with_(server=servers[0], client=clients[0])
    return Selection(base, servers, clients, engines), page, problems
