"""The published tcp+tls model without the QIR-10G crypto runs (a cross-validation fold
that holds out the QIR-10G testbed) still encrypts: this host's TLS costs, moved."""

from __future__ import annotations

import pandas as pd

from quiclab.calibration.tcp import tcp_spec
from quiclab.models.cpus import CpuCatalog


def test_tcp_tls_without_qir_crypto_runs_takes_this_hosts_tls_costs() -> None:
    points = pd.DataFrame(columns=["document", "figure", "metric", "value", "unit",
                                   "conditions"])
    spec = tcp_spec("tcp+tls", {}, points, CpuCatalog.packaged(), "C", "OpenSSL")
    assert spec.tcp is not None
    assert {"aes-ni", "chacha20"} <= set(spec.tcp.encrypt) and spec.tcp.decrypt
    for table in (spec.tcp.encrypt, spec.tcp.decrypt):
        for param in table.values():
            assert param.value > 0 and param.lo <= param.value <= param.hi
            assert "no QIR-10G crypto runs in this fit" in param.source
    assert spec.tcp.user["record_out"].value > 0
