"""``quiclab validate``: how well each engine predicts every measurement the catalog holds.

Sources (the Evidence of :mod:`quiclab.calibration.evidence`, so validation
and calibration see the same scenarios):

- ``published`` — the seeds' stated bulk goodputs (``published_points``);
- ``dataset`` — medians of the QIR-10G cells (``runs`` with source ``qir10g``);
- ``fresh`` — cells of this host's testbed runs (``runs`` with source ``fresh``).

Each engine predicts each source's scenarios through the sweep runner
(cached, resumable). The report gives per source and engine the median and
95th-percentile absolute percentage error (APE = |predicted − observed| /
observed), the worst cases, and which seed findings are reproduced (from
``quiclab reproduce``'s ``findings.csv``): ``validation.md``,
``validation.html`` (plots embedded) and ``validation.csv``. Fresh goodput cells are
also summarised per engine, experiment and server stack, with the median noise
(coefficient of variation over repetitions) beside each error
(``fresh-by-stack.csv`` and a section listing every cell).

Fresh request-workload runs (``workload`` = ``requests`` or ``handshakes``)
are not goodput cells: each cell (setting and pair, median over its
repetitions) is compared on requests/s, completion time and latency p50/p99
(:data:`REQUEST_QUANTITIES`), with the repetitions' coefficient of variation
beside each error, for every engine asked for; an engine that does not model
request workloads gives NaN and is counted as not predicted
(``requests.csv``, ``requests-summary.csv`` and a section of the report).

The package splits the command by job; every name is importable from here:

- :mod:`~quiclab.experiments.validate.evidence` — loading each source's evidence;
- :mod:`~quiclab.experiments.validate.predict` — predicting it with one engine;
- :mod:`~quiclab.experiments.validate.summary` — error summaries, controlled
  knobs, interval coverage, stale reproductions;
- :mod:`~quiclab.experiments.validate.report` — the Markdown/HTML report and plot;
- :mod:`~quiclab.experiments.validate.cli` — ``main_validate``, the command.
"""

from __future__ import annotations

from quiclab.experiments.validate.cli import main_validate
from quiclab.experiments.validate.evidence import (
    REQUEST_QUANTITIES,
    SOURCES,
    RequestEvidence,
    SourceItems,
    _fresh_bulk_cells,
    _is_bulk,
    _sender_cc,
    load_evidence,
    request_cells,
)
from quiclab.experiments.validate.predict import (
    REQUEST_ITEM_COLUMNS,
    predict_requests,
    predict_source,
)
from quiclab.experiments.validate.report import (
    CONTROLLED_TEXT,
    WORST,
    _fmt_table,
    plot_items,
    write_report,
)
from quiclab.experiments.validate.summary import (
    CALIBRATED_SETTINGS,
    CONTROLLED_EXPERIMENTS,
    CPU_LIMITS,
    _setting_label,
    controlled_knobs,
    coverage_report,
    fresh_cells,
    stale_reason,
    summarise,
    summarise_controlled,
    summarise_fresh,
    summarise_requests,
)

__all__ = [
    "CALIBRATED_SETTINGS", "CONTROLLED_EXPERIMENTS", "CONTROLLED_TEXT", "CPU_LIMITS",
    "REQUEST_ITEM_COLUMNS", "REQUEST_QUANTITIES", "SOURCES", "WORST", "RequestEvidence",
    "SourceItems", "_fmt_table", "_fresh_bulk_cells", "_is_bulk", "_sender_cc",
    "_setting_label", "controlled_knobs", "coverage_report", "fresh_cells", "load_evidence",
    "main_validate", "plot_items", "predict_requests", "predict_source", "request_cells",
    "stale_reason", "summarise", "summarise_controlled", "summarise_fresh",
    "summarise_requests", "write_report",
]
