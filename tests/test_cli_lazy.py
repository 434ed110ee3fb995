"""The CLI's lazy imports: ``--help`` imports no subsystem, ``predict`` imports none of
the heavy libraries, and the command table says what the modules register.

(Speed is a benchmark, ``quiclab bench cli``; these tests check what is imported.)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from quiclab.cli import COMMANDS, build_parser, command_of

#: Libraries an analytic prediction does not need (each costs 0.1–0.6 s to import).
HEAVY = ("numba", "scipy", "pandas", "dask", "duckdb", "pyarrow", "statsmodels", "sklearn",
         "streamlit", "matplotlib", "simpy", "yaml", "rich")


def _imported_after(argv: list[str]) -> tuple[int, set[str]]:
    """Run ``quiclab.cli.main(argv)`` in a fresh interpreter; its exit code and the
    top-level modules it imported (quiclab's own by full name)."""
    code = ("import json, sys\n"
            "from quiclab.cli import main\n"
            "try:\n"
            f"    rc = main({argv!r})\n"
            "except SystemExit as e:\n"
            "    rc = e.code or 0\n"
            "names = sorted({m if m.startswith('quiclab') else m.split('.')[0] "
            "for m in sys.modules})\n"
            "print(json.dumps({'rc': rc, 'modules': names}), file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["rc"], set(report["modules"])


def test_the_command_table_matches_what_the_modules_register() -> None:
    parser = build_parser("")  # every group, imported
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    registered = {choice.dest: choice.help for choice in sub._choices_actions}
    assert registered == {name: summary for name, (_, summary) in COMMANDS.items()}
    for name, (module, _) in COMMANDS.items():
        assert name in build_parser(name)._subparsers._group_actions[0].choices, (name, module)


def test_the_command_is_the_first_word_after_the_global_options() -> None:
    assert command_of(["--catalog", "x.duckdb", "--data-dir", "d", "predict", "--json"]) \
        == "predict"
    assert command_of(["--help"]) is None
    assert command_of([]) is None
    assert command_of(["--models", "m", "data", "sql", "SELECT 1"]) == "data"


def test_help_imports_no_subsystem() -> None:
    rc, modules = _imported_after(["--help"])
    assert rc == 0
    ours = {m for m in modules if m.startswith("quiclab")}
    assert ours <= {"quiclab", "quiclab.cli", "quiclab.errors", "quiclab.paths"}, ours
    assert "numpy" not in modules


def test_an_analytic_predict_imports_none_of_the_heavy_libraries() -> None:
    rc, modules = _imported_after(["predict", "--server", "lsquic", "--client", "lsquic"])
    assert rc == 0
    assert not modules & set(HEAVY), modules & set(HEAVY)
    assert not {m for m in modules if m.startswith(("quiclab.testbed", "quiclab.experiments",
                                                    "quiclab.datasets", "quiclab.app"))}


def test_an_unknown_command_still_lists_every_command() -> None:
    done = subprocess.run([sys.executable, "-m", "quiclab.cli", "no-such-command"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert "invalid choice: 'no-such-command'" in done.stderr
    assert all(f"'{name}'" in done.stderr for name in COMMANDS)
