"""Command-line options shared by several command groups, in a module that imports
nothing heavy (``quiclab predict`` must not pay for the experiments group)."""

from __future__ import annotations

import argparse


def interval_level(text: str) -> float:
    """``--level``: a fraction in (0, 1) or a percentage in (1, 100), e.g. 0.9 or 90."""
    try:
        value = float(text.rstrip("%").strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a level such as 0.9 or 90, got {text!r}") \
            from None
    value = value / 100.0 if value > 1.0 else value
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a level in (0, 1) or (1, 100) %, got {text!r}")
    return value


def add_level(p: argparse.ArgumentParser) -> None:
    p.add_argument("--level", type=interval_level, metavar="L",
                   help="level of every prediction's predictive interval, as a fraction or a "
                        "percentage (default: the models' intervals.json, 0.9)")
