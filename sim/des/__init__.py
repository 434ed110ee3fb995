"""The SimPy discrete-event engine: one QUIC connection, packet by packet.

``DesEngine(registry, granularity="packet"|"batch")`` implements the Engine
protocol (``predict``, ``predict_batch``) over the transport model of
``sim/TRANSPORT.md``. Design notes, the event structure and what batch
granularity gives up: ``sim/des/README.md``. The per-packet loops run
compiled by mypyc when ``pip install -e .`` built them, else as the pure-Python
sources, with the same results (:mod:`quiclab.sim.des.native`).
"""

from quiclab.sim.des import native

native.select()  # before any compiled module is imported

from quiclab.sim.des.engine import ENGINE_VERSION, GRANULARITIES, DesEngine  # noqa: E402

__all__ = ["ENGINE_VERSION", "GRANULARITIES", "DesEngine"]
