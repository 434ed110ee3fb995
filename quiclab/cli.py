"""The ``quiclab`` command: one entry point, one subcommand group per stage of the loop.

Every subsystem contributes its group through an ``add_parser(subparsers)``
function in its own ``cli`` module; handlers are ``func(args) -> int`` and
find the resolved :class:`~quiclab.paths.Paths` in ``args.paths`` (and the
catalog file in ``args.catalog``). Errors are one line on stderr, exit code 2;
Ctrl-C exits 130 and keeps everything already written.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from quiclab import __version__
from quiclab.errors import QuiclabError
from quiclab.paths import Paths

#: Modules that contribute subcommand groups, in help order. A group whose
#: module is missing is skipped (the CLI stays usable while a part is built).
GROUPS = (
    "quiclab.datasets.cli",
    "quiclab.calibration.cli",
    "quiclab.sim.cli",
    "quiclab.experiments.cli",
    "quiclab.experiments.traces",
    "quiclab.testbed.cli",
    "quiclab.app.cli",
    "quiclab.bench",
)


class _Parser(argparse.ArgumentParser):
    """argparse with the house rule for errors: one line naming the command, exit 2.

    (argparse's own prints the whole usage first; ``--help`` still has it.)
    Subcommand parsers inherit the class through ``add_subparsers``.
    """

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("quiclab").strip()
        where = f"{command}: " if command else ""
        self.exit(2, f"quiclab: error: {where}{message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
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
    for module_name in GROUPS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name and module_name.startswith(err.name):
                continue
            raise
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
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
        print("quiclab: interrupted — results already written are kept; "
              "run the same command again to resume", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
