"""The ns-3 engine: the transport of sim/TRANSPORT.md as ns-3 Applications in C++.

``Ns3Engine(registry).predict(scenario)`` builds the simulator against the
``ns3`` wheel on first use (cached by source hash), runs it as a subprocess and
returns a Prediction. Nothing here imports the Python ``ns`` module.
"""

from quiclab.sim.ns3.engine import DEFAULT_CACHE_DIR, ENGINE_VERSION, Ns3Engine

__all__ = ["DEFAULT_CACHE_DIR", "ENGINE_VERSION", "Ns3Engine"]
