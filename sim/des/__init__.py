"""The SimPy discrete-event engine: one QUIC connection, packet by packet.

``DesEngine(registry, granularity="packet"|"batch")`` implements the Engine
protocol (``predict``, ``predict_batch``) over the transport model of
``sim/TRANSPORT.md``. Design notes, the event structure and what batch
granularity gives up: ``sim/des/README.md``.
"""

from quiclab.sim.des.engine import ENGINE_VERSION, GRANULARITIES, DesEngine

__all__ = ["ENGINE_VERSION", "GRANULARITIES", "DesEngine"]
