"""Fresh runs of real QUIC stacks between network namespaces on this host, or between
two servers over SSH (an inventory: :mod:`~quiclab.testbed.inventory`).

Read top to bottom, the modules are the data flow of one run:
:mod:`~quiclab.testbed.stacks` (the stacks as data) →
:mod:`~quiclab.testbed.build` (peers built from the registries, cached) →
:mod:`~quiclab.testbed.config` (Scenario + testbed knobs → peer flags) →
:mod:`~quiclab.testbed.topology` (namespaces, veth, tc, eBPF loss, delay relay) or
:mod:`~quiclab.testbed.hostpair` (two servers over SSH), each host driven through its
agent (:mod:`~quiclab.testbed.hosts`, :mod:`~quiclab.testbed.agent`) and its interface
(:mod:`~quiclab.testbed.nic`) →
:mod:`~quiclab.testbed.runner` + :mod:`~quiclab.testbed.collect` (one transfer and its
counters) → :mod:`~quiclab.testbed.record` (catalog rows) →
:mod:`~quiclab.testbed.session` (repetitions, sweeps, the interop matrix) →
:mod:`~quiclab.testbed.cli` (``quiclab testbed …``).
"""
