"""quiclab — a research workbench for the sustained throughput of QUIC implementations.

The package's subpackages are the stages of the loop in docs/explanation/design.md:
``quiclab.datasets`` (the DuckDB catalog), ``quiclab.calibration`` (estimators),
``quiclab.models`` (cost models and the CPU catalog), ``quiclab.sim``
(the Scenario/Prediction contract and the analytic, DES and ns-3 engines),
``quiclab.experiments`` (sweeps, reproductions, validation), ``quiclab.testbed``
(fresh runs of real QUIC stacks) and ``quiclab.app`` (the Streamlit explorer).
"""

__version__ = "0.1.0"
