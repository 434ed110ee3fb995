"""Where the app finds models, the catalog and reports: the CLI's flags and environment.

``quiclab app`` resolves :class:`~quiclab.paths.Paths` like every subcommand and
hands the result to the Streamlit script as script arguments
(``streamlit run streamlit_app.py -- --models DIR --catalog FILE …``). Run by
other means (``streamlit run`` by hand, ``AppTest``), the script falls back to
the same environment variables (``QUICLAB_MODELS``, ``QUICLAB_CATALOG``,
``QUICLAB_DATA_DIR``, ``QUICLAB_SHARED``) and defaults. The result is an
:class:`AppConfig` passed down as an argument; no cached function reads a
module global.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from quiclab.paths import Paths

#: The flags shared with the ``quiclab`` command (same names, same meaning).
PATH_FLAGS = ("--data-dir", "--catalog", "--shared", "--models")


@dataclass(frozen=True)
class AppConfig:
    """Resolved locations, as strings so that they can key Streamlit's caches."""

    models_dir: str
    catalog: str
    data_dir: str
    reports_dir: str
    ns3_cache_dir: str
    #: Where finished DES and ns-3 results are kept (quiclab.app.jobs).
    results_dir: str

    @classmethod
    def from_paths(cls, paths: Paths) -> AppConfig:
        return cls(models_dir=str(paths.models), catalog=str(paths.catalog),
                   data_dir=str(paths.data_dir), reports_dir=str(paths.reports),
                   ns3_cache_dir=str(paths.cache / "ns3"),
                   results_dir=str(paths.cache / "app-results"))

    @property
    def screenshots_dir(self) -> Path:
        """Where screenshots of the pages go (``<data dir>/reports/app``)."""
        return Path(self.reports_dir) / "app"


def script_arguments(paths: Paths) -> list[str]:
    """The script arguments that carry ``paths`` to the Streamlit script."""
    return ["--data-dir", str(paths.data_dir), "--catalog", str(paths.catalog),
            "--shared", str(paths.shared), "--models", str(paths.models)]


def parse_config(argv: Sequence[str], env: Mapping[str, str] | None = None) -> AppConfig:
    """Build the AppConfig from script arguments, then environment, then defaults.

    Raises SystemExit (argparse's) for an unknown argument: Streamlit shows it.
    """
    parser = argparse.ArgumentParser(prog="quiclab app (script)")
    for flag in PATH_FLAGS:
        parser.add_argument(flag)
    args = parser.parse_args(list(argv))
    paths = Paths.resolve(data_dir=args.data_dir, catalog=args.catalog, shared=args.shared,
                          models=args.models, env=env)
    return AppConfig.from_paths(paths)
