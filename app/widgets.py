"""The scenario sidebar shared by the What-if and Sweep pages.

Widgets keep their values in ``st.session_state`` under their keys
(``w.<field>``). They are created without a ``value=`` and seeded by
:func:`seed_widgets` from the stored :class:`~quiclab.app.urlstate.Selection`
(the URL on a session's first run, the last sidebar afterwards), because
Streamlit forgets a widget's state on a page that does not draw it. So the
choice can be read from that state (:func:`read_selection`) before the
sidebar is drawn (:func:`scenario_ui`): the What-if page draws its answer
first, and the browser shows it before it redraws some forty widgets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import streamlit as st

from quiclab.app.urlstate import WORKLOAD_DEFAULTS, Selection, matrix_shape
from quiclab.errors import ScenarioError
from quiclab.models.pipelines import NONE, PipelineCatalog, preset_names
from quiclab.models.registry import Registry
from quiclab.models.testbeds import UNSEEN
from quiclab.sim.engine import ENGINES
from quiclab.sim.scenario import APPS, CCS, CIPHERS, WORKLOADS, Scenario, field_names

KIB = 1024
#: The browser holds numbers as doubles: whole numbers beyond 2**53 - 1 are not exact.
JS_MAX_INT = 2**53 - 1
#: The default scenario (the fields' types), made once: each Scenario() is validated.
_DEFAULT = Scenario()


@dataclass(frozen=True)
class NumberField:
    """A Scenario field in a ``st.number_input`` (``scale``: field units per widget unit)."""

    field: str
    label: str
    step: float
    fmt: str
    scale: int = 1
    help: str = ""

    @property
    def key(self) -> str:
        return f"w.{self.field}"

    @property
    def is_int(self) -> bool:
        return isinstance(getattr(_DEFAULT, self.field), int)

    def to_widget(self, value: Any) -> Any:
        if self.is_int:
            return round(value / self.scale)
        return float(value)

    def from_widget(self, value: Any) -> Any:
        return int(value) * self.scale if self.is_int else float(value)

    def bounds(self) -> tuple[Any, Any]:
        lo, hi = Scenario.RANGES[self.field]
        if self.is_int:
            return int(-(-lo // self.scale)), int(min(hi, JS_MAX_INT) // self.scale)
        return float(lo), float(hi)

    def shown(self, value: Any) -> Any:
        """What the widget shows for a field value: in widget units, within its bounds
        (a URL's ``rcvbuf_bytes=100000`` shows as 98 KiB, a seed above 2**53 − 1 as that)."""
        lo, hi = self.bounds()
        return min(max(self.to_widget(value), lo), hi)


#: The main conditions, in sidebar order.
MAIN_NUMBERS = (
    NumberField("link_gbps", "Link rate (Gbit/s)", 1.0, "%g"),
    NumberField("mtu_bytes", "MTU (bytes)", 100, "%d",
                help="IP MTU of the path; QUIC packets fill it unless a packet size is set"),
    NumberField("rtt_ms", "Added RTT (ms)", 1.0, "%g",
                help="round-trip delay added to the testbed's own base RTT"),
    NumberField("loss_pct", "Loss (%)", 0.01, "%g", help="random loss on the path"),
    NumberField("rcvbuf_bytes", "UDP receive buffer (KiB)", 104, "%d", KIB,
                help="SO_RCVBUF; 208 KiB is the Linux default, 6656 KiB = 32 × 208 KiB"),
    NumberField("sndbuf_bytes", "UDP send buffer (KiB)", 104, "%d", KIB),
    NumberField("streams", "Streams", 1, "%d"),
)
#: Less common conditions, in the "More conditions" expander.
MORE_NUMBERS = (
    NumberField("transfer_bytes", "Transfer size (bytes)", 2**20, "%d",
                help="8589934592 = 8 GiB, the QIR-10G download"),
    NumberField("udp_payload_bytes", "QUIC packet size (UDP payload, 0 = default)", 8, "%d"),
    NumberField("cpu_ghz", "CPU clock override (GHz, 0 = max)", 0.1, "%g"),
    NumberField("base_rtt_us", "Base RTT of the testbed (µs)", 10.0, "%g"),
    NumberField("reorder_pct", "Reordering (%)", 0.1, "%g"),
    NumberField("queue_bdp", "Bottleneck queue (× BDP)", 0.25, "%g"),
    NumberField("chunks", "Chunks (files)", 1, "%d"),
    NumberField("seed", "Seed", 1, "%d"),
)
#: Where the work runs (sim/cores.py): cores of each side, pinned or not.
CORE_NUMBERS = (
    NumberField("server_core", "Server core (−1 = not pinned)", 1, "%d",
                help="pin the server to this core; cores are numbered node by node "
                     "(AMD EPYC 7543 in NPS4: 0, 8, 16, 24 are its four NUMA nodes)"),
    NumberField("client_core", "Client core (−1 = not pinned)", 1, "%d",
                help="pin the client to this core (same numbering)"),
)
#: The workload (sim/request_costs.py): bulk transfer, or requests / handshakes of
#: request_bytes each.
WORKLOAD_NUMBERS = (
    NumberField("request_bytes", "Request size (bytes)", 1000, "%d",
                help="bytes each request fetches (workload requests or handshakes)"),
    NumberField("requests", "Requests", 100, "%d", help="requests in all (workload requests)"),
    NumberField("connections", "Connections", 1, "%d",
                help="connections at a time; requests spread over them × streams"),
)
CHOICES: dict[str, Sequence[str]] = {"cipher": CIPHERS, "app": APPS, "cc": CCS,
                                     "pipeline": preset_names(), "workload": WORKLOADS}
CHECKS = ("gso", "gro", "pin")
CHOICE_LABELS = {"cipher": "Cipher", "app": "Application protocol",
                 "cc": "Congestion control", "pipeline": "Pipeline (stages on cores)",
                 "workload": "Workload"}
CHECK_LABELS = {"gso": "GSO (send offload)", "gro": "GRO (receive offload)",
                "pin": "Pin both ends to the NIC's NUMA node"}


NUMBERS = (*MAIN_NUMBERS, *WORKLOAD_NUMBERS, *CORE_NUMBERS, *MORE_NUMBERS)
#: Number fields by Scenario field name.
NUMBER_BY_FIELD = {spec.field: spec for spec in NUMBERS}


def testbed_names(registry: Registry) -> list[str]:
    """The testbeds a Scenario may name: ``unseen`` (your own hosts) first."""
    return [UNSEEN, *registry.testbeds.ids()]


def mentioned_fields(problem: str | None) -> set[str]:
    """The Scenario fields a one-line problem names (``udp_payload_bytes=4000 is
    impossible: allowed … mtu_bytes − 28``: both), to mark them in the sidebar."""
    if not problem:
        return set()
    words = set(problem.replace("=", " ").replace(",", " ").replace("(", " ").split())
    return {name for name in field_names() if name in words}


def pipeline_help() -> str:
    """One line per preset of ``models/pipelines.json``: its name and description."""
    catalog = PipelineCatalog.packaged()
    lines = [f"- **{NONE}**: the stack as shipped (its own threads)"]
    lines += [f"- **{name}**: {catalog.get(name).description}" for name in catalog.names()]
    return "\n".join(lines)


def widget_values(selection: Selection, cpu_name: str) -> dict[str, Any]:
    """Widget key → value for a selection (the inverse of reading the sidebar)."""
    base = selection.base
    values: dict[str, Any] = {"w.servers": list(selection.servers),
                              "w.clients": list(selection.clients),
                              "w.engines": list(selection.engines), "w.cpu": cpu_name,
                              "w.testbed": base.testbed}
    for spec in NUMBERS:
        values[spec.key] = spec.shown(getattr(base, spec.field))
    for name in (*CHOICES, *CHECKS):
        values[f"w.{name}"] = getattr(base, name)
    return values


def seed_widgets(selection: Selection, cpu_name: str, impls: Sequence[str],
                 cpus: Sequence[str], testbeds: Sequence[str], overwrite: bool = False) -> None:
    """Give every sidebar widget that has no state yet its value from ``selection``
    (every widget, with ``overwrite``: the URL changed under the page)."""
    for key, value in widget_values(selection, cpu_name).items():
        if key in ("w.servers", "w.clients"):
            value = [v for v in value if v in impls] or list(impls[:1])
        if key == "w.cpu" and value not in cpus:
            value = cpus[0]
        if key == "w.testbed" and value not in testbeds:
            value = UNSEEN
        if overwrite or key not in st.session_state:
            st.session_state[key] = value


def apply_workload_defaults() -> None:
    """``on_change`` of the Workload box: a request workload whose request fields are
    unset (0) gets :data:`~quiclab.app.urlstate.WORKLOAD_DEFAULTS`, so that switching
    to ``requests`` shows an answer, not a refusal."""
    state = st.session_state
    for name, value in WORKLOAD_DEFAULTS.get(str(state.get("w.workload")), {}).items():
        spec = NUMBER_BY_FIELD[name]
        if not state.get(spec.key):
            state[spec.key] = spec.shown(value)


def apply_testbed(registry: Registry, cpus: Sequence[str]) -> None:
    """``on_change`` of the Testbed box: the conditions its measurements ran with (CPU,
    link rate, buffers, base RTT; ``models/fitted/testbeds.json``) go into the sidebar,
    as ``quiclab predict --set testbed=…`` applies them. ``unseen`` changes nothing."""
    state = st.session_state
    testbed = registry.testbed(str(state.get("w.testbed", UNSEEN)))
    if testbed is None:
        return
    for name, value in testbed.fields.items():
        if name == "cpu":
            try:
                cpu = registry.cpus.find(str(value)).name
            except ScenarioError:
                continue
            if cpu in cpus:
                state["w.cpu"] = cpu
        elif name in NUMBER_BY_FIELD:
            state[NUMBER_BY_FIELD[name].key] = NUMBER_BY_FIELD[name].shown(value)
        elif name in CHECKS or name in CHOICES:
            state[f"w.{name}"] = value


def _mark(container: Any, field: str, marked: set[str] | frozenset[str]) -> None:
    """An error line under a widget whose field is part of impossible settings."""
    if field in marked:
        container.error(f"⛔ {field} is part of the impossible settings")


def _kept(spec: NumberField, current: Any, shown: Any) -> Any:
    """The field's value: ``current`` (the selection's, exactly) while the widget still
    shows it, else what the widget holds. So a URL's ``rcvbuf_bytes=100000`` stays
    100000 until the user edits the KiB widget."""
    return current if shown == spec.shown(current) else spec.from_widget(shown)


def _number(container: Any, spec: NumberField, current: Any, disabled: bool = False,
            marked: set[str] | frozenset[str] = frozenset()) -> None:
    """The field's widget, and under it a caption when it shows ``current`` rounded
    (an error line when the impossible settings involve it)."""
    lo, hi = spec.bounds()
    step: Any = int(spec.step) if spec.is_int else float(spec.step)
    value = container.number_input(spec.label, min_value=lo, max_value=hi, step=step,
                                   format=spec.fmt, key=spec.key, help=spec.help or None,
                                   disabled=disabled)
    _mark(container, spec.field, marked)
    if _kept(spec, current, value) != spec.from_widget(value):
        unit = " KiB" if spec.scale == KIB else ""
        container.caption(f"{spec.field}={current} exactly (the widget shows "
                          f"{spec.fmt % value}{unit}; editing it replaces the value)")


def read_selection(selection: Selection, cpu_name: str, with_engines: bool = True
                   ) -> tuple[Selection | None, str | None]:
    """The sidebar's choice, read from the widgets' state: (the selection, None) or
    (None, the problem). The same as :func:`scenario_ui` returns, but without drawing,
    so that a page can draw its answer before the sidebar (the browser then shows it
    first); :func:`seed_widgets` must have run.

    ``cpu_name`` is the catalog name of ``selection.base.cpu``; while that CPU
    stays chosen, the scenario keeps its own spelling of it (``EPYC 7543``).
    The problem is the one-line ScenarioError message of an impossible
    combination (e.g. a QUIC packet larger than the MTU allows).
    """
    state = st.session_state
    base = selection.base
    servers, clients = list(state["w.servers"]), list(state["w.clients"])
    engines = list(state["w.engines"]) if with_engines else list(selection.engines)
    fields: dict[str, Any] = {"cpu": state["w.cpu"], "testbed": state["w.testbed"]}
    for spec in NUMBERS:
        fields[spec.field] = _kept(spec, getattr(base, spec.field), state[spec.key])
    for name in (*CHOICES, *CHECKS):
        fields[name] = state[f"w.{name}"]
    if fields["cpu"] == cpu_name:
        fields["cpu"] = base.cpu
    if not servers or not clients:
        return None, "choose at least one server and one client implementation"
    engines = ["analytic", *[e for e in engines if e != "analytic"]]
    try:
        base = base.with_(server=servers[0], client=clients[0], **fields)
    except ScenarioError as err:
        return None, str(err)
    return replace(selection, base=base, servers=tuple(servers), clients=tuple(clients),
                   engines=tuple(engines)), None


def scenario_ui(selection: Selection, impls: Sequence[str], cpus: Sequence[str],
                cpu_name: str, testbeds: Sequence[str], registry: Registry,
                with_engines: bool = True, marked: set[str] | frozenset[str] = frozenset()
                ) -> tuple[Selection | None, str | None]:
    """Draw the sidebar; return :func:`read_selection` of what it holds. ``marked``: the
    fields of an impossible combination, each marked under its widget."""
    bar = st.sidebar
    base = selection.base
    bar.subheader("Implementations")
    servers = bar.multiselect("Server (sends the data)", impls, key="w.servers")
    clients = bar.multiselect("Client (receives)", impls, key="w.clients")
    if len(servers) * len(clients) > len(selection.pairs()):
        n_servers, n_clients = matrix_shape(len(servers), len(clients))
        bar.caption(f"Comparing a {n_servers} × {n_clients} matrix: the first {n_servers} "
                    f"server(s) and {n_clients} client(s). The Matrix page shows every pair.")
    if with_engines:
        bar.multiselect("Engines", ENGINES, key="w.engines",
                        help="analytic answers at once; des and ns3 run on a button")
    bar.subheader("Hosts and path")
    bar.selectbox("Testbed", testbeds, key="w.testbed", on_change=apply_testbed,
                  args=(registry, cpus),
                  help="where the transfer runs: `unseen` is your own hosts (only "
                       "mechanisms apply); a named testbed also brings the effects fitted "
                       "on its measurements (a pair's interplay) and its conditions "
                       "(docs/explanation/testbeds.md)")
    _mark(bar, "testbed", marked)
    bar.selectbox("CPU", cpus, key="w.cpu")
    _mark(bar, "cpu", marked)
    for spec in MAIN_NUMBERS[:4]:
        _number(bar, spec, getattr(base, spec.field), marked=marked)
    cols = bar.columns(2)
    cols[0].checkbox(CHECK_LABELS["gso"], key="w.gso")
    cols[1].checkbox(CHECK_LABELS["gro"], key="w.gro")
    for name in ("gso", "gro"):
        _mark(bar, name, marked)
    for spec in MAIN_NUMBERS[4:]:
        _number(bar, spec, getattr(base, spec.field), marked=marked)
    bar.selectbox(CHOICE_LABELS["cipher"], CIPHERS, key="w.cipher")
    _mark(bar, "cipher", marked)
    bar.selectbox(CHOICE_LABELS["app"], APPS, key="w.app")
    _mark(bar, "app", marked)
    bar.subheader("Workload")
    workload = bar.selectbox(
        CHOICE_LABELS["workload"], WORKLOADS, key="w.workload",
        on_change=apply_workload_defaults,
        help="bulk: one transfer of the transfer size; requests: that many requests over "
             "the connections (kept open) × streams; handshakes: a new connection per "
             "request, that many connections at a time")
    _mark(bar, "workload", marked)
    for spec in WORKLOAD_NUMBERS:
        _number(bar, spec, getattr(base, spec.field), disabled=workload == "bulk",
                marked=marked)
    bar.subheader("Pipelines and cores")
    bar.selectbox(CHOICE_LABELS["pipeline"], CHOICES["pipeline"], key="w.pipeline",
                  help=pipeline_help())
    _mark(bar, "pipeline", marked)
    bar.checkbox(CHECK_LABELS["pin"], key="w.pin",
                 help="seed 002 §4.7: pinned on a CPU with several NUMA nodes (four per "
                      "socket), the NIC's node is the fast one; unpinned is the calibrated "
                      "one-node-per-socket cost")
    cols = bar.columns(2)
    for col, spec in zip(cols, CORE_NUMBERS, strict=True):
        _number(col, spec, getattr(base, spec.field), marked=marked)
    more = marked & {"cc", *(spec.field for spec in MORE_NUMBERS)}
    with bar.expander("More conditions", expanded=bool(more)):
        st.selectbox(CHOICE_LABELS["cc"], CCS, key="w.cc")
        _mark(st, "cc", marked)
        for spec in MORE_NUMBERS:
            _number(st, spec, getattr(base, spec.field), marked=marked)
    return read_selection(selection, cpu_name, with_engines)
