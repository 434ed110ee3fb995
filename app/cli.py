"""``quiclab app``: start the Streamlit what-if explorer on localhost.

Everything after ``app`` goes to ``streamlit run`` unchanged, so Streamlit's
own options work (``quiclab app --server.port 8599 --server.headless true``).
The models, catalog and data directory are the ones every subcommand uses
(``quiclab --models DIR --catalog FILE app``, or the ``QUICLAB_*``
environment variables); they reach the app as script arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

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
#: Signals that end the app: each is passed on to Streamlit's process group.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: Seconds Streamlit gets to shut down before its group is killed (a DES run in the
#: worker would otherwise hold the server's exit until it finishes).
STOP_GRACE_S = 10.0


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
    """Run Streamlit in a process group of its own (its worker processes join it), pass
    SIGTERM, SIGINT and SIGHUP on to the whole group, and kill the group if it has not
    ended :data:`STOP_GRACE_S` later: stopping ``quiclab app`` stops the server and
    every simulation it started, which a signal to this process alone did not."""
    if any(a in HELP_FLAGS for a in args.streamlit_args):
        args.app_parser.print_help()
        return 0
    env = dict(os.environ)
    for key, value in STREAMLIT_DEFAULTS.items():
        env.setdefault(key, value)
    process = subprocess.Popen(command(args), env=env, start_new_session=True)
    stopping: list[float] = []  # when the first stop signal came (monotonic s)

    def forward(signum: int, frame: FrameType | None) -> None:
        del frame
        if not stopping:
            stopping.append(time.monotonic())
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in STOP_SIGNALS}
    try:
        while True:
            try:
                code = process.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if stopping and time.monotonic() - stopping[0] > STOP_GRACE_S:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGKILL)
                    code = process.wait()
                    break
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        # Whatever of the group is left (a worker between jobs): it ends with the app.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    return 0 if stopping and code in (0, -signal.SIGTERM, -signal.SIGINT) else code
