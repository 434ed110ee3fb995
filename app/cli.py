"""``quiclab app``: start the Streamlit what-if explorer on localhost.

Everything after ``app`` goes to ``streamlit run`` unchanged, so Streamlit's
own options work (``quiclab app --server.port 8599 --server.headless true``).
The models, catalog and data directory are the ones every subcommand uses
(``quiclab --models DIR --catalog FILE app``, or the ``QUICLAB_*``
environment variables); they reach the app as script arguments.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from quiclab.app.config import script_arguments

SCRIPT = Path(__file__).resolve().parent / "streamlit_app.py"
#: Defaults for Streamlit's settings, each overridden by a flag or the variable itself:
#: serve on localhost only, send no usage statistics (the network is closed anyway),
#: and show the viewer's toolbar (no "Deploy" button for a local workbench).
STREAMLIT_DEFAULTS = {
    "STREAMLIT_SERVER_ADDRESS": "localhost",
    "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false",
    "STREAMLIT_CLIENT_TOOLBAR_MODE": "viewer",
}
HELP_FLAGS = ("-h", "--help")


def add_parser(sub: argparse._SubParsersAction) -> None:
    # prefix_chars="+": the app has no options of its own, so every "--x.y"
    # after `app` is a positional handed to Streamlit instead of an error.
    p = sub.add_parser(
        "app", help="start the Streamlit what-if explorer (Streamlit options pass through)",
        description="Start the what-if explorer on localhost (default port 8501). Options "
                    "after `app` go to `streamlit run`, e.g. --server.port 8599 "
                    "--server.headless true; see `streamlit run --help`. Models, catalog "
                    "and data dir come from the global options (quiclab --models DIR app).",
        prefix_chars="+", add_help=False)
    p.add_argument("streamlit_args", nargs=argparse.REMAINDER, metavar="STREAMLIT_OPTION",
                   help="options for `streamlit run` (--server.port 8599, …)")
    p.set_defaults(func=run_app, app_parser=p)


def command(args: argparse.Namespace) -> list[str]:
    """The ``streamlit run`` command line for these arguments."""
    return [sys.executable, "-m", "streamlit", "run", str(SCRIPT), *args.streamlit_args,
            "--", *script_arguments(args.paths)]


def run_app(args: argparse.Namespace) -> int:
    if any(a in HELP_FLAGS for a in args.streamlit_args):
        args.app_parser.print_help()
        return 0
    env = dict(os.environ)
    for key, value in STREAMLIT_DEFAULTS.items():
        env.setdefault(key, value)
    process = subprocess.Popen(command(args), env=env)
    try:
        return process.wait()
    except KeyboardInterrupt:
        # Ctrl-C reaches Streamlit too (same process group); let it shut down.
        return process.wait()
