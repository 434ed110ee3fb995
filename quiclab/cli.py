"""The ``quiclab`` command: one entry point, one subcommand group per stage of the loop.

Every subsystem contributes its group through an ``add_parser(subparsers)``
function in its own ``cli`` module; handlers are ``func(args) -> int`` and
find the resolved :class:`~quiclab.paths.Paths` in ``args.paths`` (and the
catalog file in ``args.catalog``). Errors are one line on stderr, exit code 2;
Ctrl-C exits 130 and keeps everything already written (a handler that writes
nothing declares ``set_defaults(writes=False)``, and Ctrl-C then says so).

Imports are lazy: ``quiclab --help`` lists :data:`COMMANDS` without importing any
subsystem, and a command imports only the module that registers it (the whole
set of modules is imported only for a name :data:`COMMANDS` does not know), so
``quiclab predict`` never pays for the testbed, Dask or pandas. ``quiclab bench
cli`` times it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from quiclab import __version__
from quiclab.errors import QuiclabError, one_line
from quiclab.paths import Paths

#: Modules that contribute subcommand groups, in help order. A group whose
#: module is missing is skipped (the CLI stays usable while a part is built).
GROUPS = (
    "quiclab.datasets.cli",
    "quiclab.calibration.cli",
    "quiclab.sim.cli",
    "quiclab.experiments.cli",
    "quiclab.experiments.prospective_cli",
    "quiclab.experiments.traces",
    "quiclab.testbed.cli",
    "quiclab.testbed.hostcli",
    "quiclab.app.cli",
    "quiclab.bench",
    "quiclab.report",
)


#: Each command, in help order: the module whose ``add_parser`` registers it, and the
#: one-line help ``quiclab --help`` shows (tests/test_cli_lazy.py holds these to the
#: modules' own).
COMMANDS: dict[str, tuple[str, str]] = {
    "data": ("quiclab.datasets.cli", "build and query the catalog of measurements"),
    "calibrate": ("quiclab.calibration.cli",
                  "fit per-implementation cost models from the catalog"),
    "predict": ("quiclab.sim.cli", "predict goodput for one scenario"),
    "sweep": ("quiclab.experiments.cli",
              "run a sweep spec (experiments/sweep-*.yaml), resumable"),
    "reproduce": ("quiclab.experiments.cli",
                  "reproduce seed findings (experiments/repro-*.yaml)"),
    "validate": ("quiclab.experiments.cli",
                 "validation report: prediction errors per source and engine"),
    "prospective": ("quiclab.experiments.prospective_cli",
                    "register a fresh spec's predictions before its runs, then compare"),
    "trace": ("quiclab.experiments.traces", "qlog traces: ingest, simulate, compare, identify"),
    "testbed": ("quiclab.testbed.cli",
                "fresh runs of real QUIC stacks between network namespaces or two hosts"),
    "host": ("quiclab.testbed.hostcli",
             "probe this host's per-core rates (crypto, UDP, copy, a QUIC transfer)"),
    "app": ("quiclab.app.cli",
            "start the Streamlit what-if explorer (Streamlit options pass through)"),
    "bench": ("quiclab.bench", "print speed figures of the engines"),
    "report": ("quiclab.report", "regenerate docs/results/ from the catalog and the reports"),
}

#: Global options that take a value (the command is the first word after them).
_VALUED_OPTIONS = ("--catalog", "--data-dir", "--shared", "--models")


class _Parser(argparse.ArgumentParser):
    """argparse with the house rule for errors: one line naming the command, exit 2.

    (argparse's own prints the whole usage first; ``--help`` still has it.)
    Subcommand parsers inherit the class through ``add_subparsers``.
    """

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("quiclab").strip()
        where = f"{command}: " if command else ""
        # one_line: argparse quotes the value it refused, which may be megabytes long.
        self.exit(2, f"quiclab: error: {one_line(where + message)} "
                     f"(see `{self.prog} --help`)\n")


def command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (the first word that is not a global option
    or its value), or None (no command, or ``--help`` / ``--version`` before it)."""
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word in _VALUED_OPTIONS:
            skip = True
        elif not word.startswith("-"):
            return word
        elif word in ("-h", "--help", "--version"):
            return None
    return None


def build_parser(command: str | None = "") -> argparse.ArgumentParser:
    """The parser: for ``command`` "" every group (imported), for a name in
    :data:`COMMANDS` only the module that registers it, for None only the list of
    commands (``--help``). An unknown name gets every group, so argparse can say
    which names exist, and a group registered without a :data:`COMMANDS` entry
    still works."""
    parser = _Parser(
        prog="quiclab",
        description="Predict and measure the sustained throughput of QUIC implementations.",
    )
    parser.add_argument("--version", action="version", version=f"quiclab {__version__}")
    parser.add_argument("--catalog", metavar="PATH",
                        help="DuckDB catalog file (env QUICLAB_CATALOG; "
                             "default <data dir>/catalog.duckdb)")
    parser.add_argument("--data-dir", metavar="DIR",
                        help="where catalogs, caches and reports live (env QUICLAB_DATA_DIR)")
    parser.add_argument("--shared", metavar="DIR",
                        help="the shared folder with datasets/ and seeds/ "
                             "(env QUICLAB_SHARED; default ../shared)")
    parser.add_argument("--models", metavar="DIR",
                        help="fitted cost-model directory (env QUICLAB_MODELS; "
                             "default the package's models/fitted)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    if command is None:
        for name, (_, summary) in COMMANDS.items():
            sub.add_parser(name, help=summary, add_help=False)
        return parser
    modules = [COMMANDS[command][0]] if command in COMMANDS else GROUPS
    for module_name in modules:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name and module_name.startswith(err.name):
                continue
            raise
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(command_of(argv))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        args.paths = Paths.resolve(data_dir=args.data_dir, catalog=args.catalog,
                                   shared=args.shared, models=args.models)
        args.catalog = args.paths.catalog
        return int(args.func(args) or 0)
    except QuiclabError as err:
        print(f"quiclab: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # A command that writes nothing says so (set_defaults(writes=False)): there is
        # nothing to keep or resume.
        if getattr(args, "writes", True):
            print("quiclab: interrupted — results already written are kept; "
                  "run the same command again to resume", file=sys.stderr)
        else:
            print(f"quiclab: interrupted — `{_command(args)}` writes nothing, so nothing "
                  "was lost and there is nothing to resume", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


def _command(args: argparse.Namespace) -> str:
    """``quiclab predict`` / ``quiclab data sql``: the subcommand that ran."""
    words = [getattr(args, "command", None), getattr(args, "data_command", None)]
    return " ".join(["quiclab", *(w for w in words if w)])


if __name__ == "__main__":
    sys.exit(main())
