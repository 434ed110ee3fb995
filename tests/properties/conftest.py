"""Hypothesis profiles for the property-based tests of everything that takes user input.

- ``fast`` (the default; ``make test``): a few dozen examples per property, derandomised
  so that CI runs the same examples every time, no example database on disk;
- ``long`` (``make test-slow`` sets ``QUICLAB_HYPOTHESIS_PROFILE=long``): ten times as
  many examples per property (100 to 3000), fresh random ones each run.

Properties whose every example is costly (a catalog opened, a dataset ingested) are
marked ``slow`` and run only under ``long``; their fast versions run a handful.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, database=None, print_blob=True,
               suppress_health_check=(HealthCheck.too_slow, HealthCheck.data_too_large,
                                      HealthCheck.filter_too_much))
settings.register_profile("fast", max_examples=40, derandomize=True, **_COMMON)
settings.register_profile("long", max_examples=1000, **_COMMON)
settings.load_profile(os.environ.get("QUICLAB_HYPOTHESIS_PROFILE", "fast"))


def examples(fast: int, long: int | None = None) -> int:
    """Examples for one property under the active profile (``long`` defaults to 10×)."""
    if settings().max_examples >= 1000:  # the long profile
        return long if long is not None else 10 * fast
    return fast
