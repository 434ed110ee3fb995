"""What a fit writes, on the synthetic evidence of test_cv.py: values the evidence
cannot move stay at their stated priors, and the written files give back the same
predictions.

Expectations come from the stated sources, not from the fit: the lsquic ``march``
build's prior is seed 002 §4.6 ("compile flags improve LSQUIC by 11–20 %", a cost
factor 1/1.155 with log sd 0.05); seed 000's base RTT is its testbed's stated value
(models/testbeds.py) since no seed-000 point is in this evidence; a pair effect
nothing informs is its ridge prior's mean, 0.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from quiclab.calibration.fit import Calibrator, Frames
from quiclab.models.registry import Registry
from quiclab.models.testbeds import STATED
from quiclab.sim.analytic import AnalyticEngine

from .test_cv import _runs, _table3

OBSERVED = {"alpha": 1000.0, "beta": 1000.0, "gamma": 2000.0}


@pytest.fixture(scope="module")
def cal() -> Calibrator:
    frames = Frames(_runs(OBSERVED), _table3(),
                    pd.DataFrame(columns=["server_impl", "client_impl", "experiment", "side",
                                          "category", "share"]))
    return Calibrator(requests=False).fit(frames)


def test_what_no_evidence_informs_stays_at_its_stated_prior(cal):
    march = cal.models_["lsquic"].variants["march"]
    assert march["cost_factor"] == pytest.approx(1 / 1.155, rel=1e-3)
    assert march["cost_factor_source"] == "prior only: no evidence runs this variant"
    stated = STATED["koenig25"].fields["base_rtt_us"]  # seed 000's testbed
    assert cal.testbeds_.get("000").fields["base_rtt_us"] == pytest.approx(stated, rel=1e-3)
    params = cal.report_.params.set_index("name")
    assert params.loc["V|lsquic|march", "natural"] == pytest.approx(1 / 1.155, rel=1e-3)
    for name, row in params.iterrows():
        natural = math.exp(row["value"]) if not name.startswith("C|") else \
            1 / (1 + math.exp(-row["value"]))
        assert row["natural"] == pytest.approx(natural, rel=1e-12), name


def test_variants_carry_the_behaviour_the_seeds_state(cal):
    """Without evidence on them, variants keep their stated behaviour: quiche's 2025
    and quicperf builds GSO/GRO and the 16 MiB window of seed 000 §VI-E's prior;
    mvfst's ``gso`` build GSO/GRO (seed 001 §5); quicly "no opt." no GRO, on the
    client only (seed 001 §2.2)."""
    quiche = cal.models_["quiche"].variants
    for v in ("2025", "quicperf"):
        beh = dict(quiche[v]["behaviour"])
        # The fit stores int(exp(log(16 MiB))): float rounding may leave it a byte short.
        assert abs(beh.pop("fc_window_bytes") - 16 * 2**20) <= 1, v
        assert beh == {"supports_gso": True, "supports_gro": True}, v
    assert cal.models_["mvfst"].variants["gso"]["behaviour"] == {"supports_gso": True,
                                                                 "supports_gro": True}
    noopt = cal.models_["quicly"].variants["noopt"]
    assert noopt["behaviour"] == {"supports_gro": False}
    assert noopt["cost_roles"] == ["receiver"]
    for v, d in cal.models_["lsquic"].variants.items():
        assert "behaviour" not in d or "supports_gso" not in d["behaviour"], v


def test_without_tcp_runs_kernel_tcp_takes_this_hosts_tls_costs(cal):
    """No TCP+TLS runs in this evidence: the published tcp+tls model's ciphers are this
    host's measured TLS costs moved by the CPU rule (models/tcp_host.json), software
    AES dearer than AES-NI, each saying where it came from."""
    tcp = cal.models_["tcp+tls"].tcp
    assert tcp is not None and {"aes-ni", "aes-sw", "chacha20"} <= set(tcp.encrypt)
    assert tcp.encrypt["aes-sw"].value > tcp.encrypt["aes-ni"].value > 0
    assert all("no QIR-10G crypto runs in this fit" in p.source
               for p in (*tcp.encrypt.values(), *tcp.decrypt.values()))


def test_the_evidence_table_says_what_each_cell_is(cal):
    ev = cal.report_.evidence
    assert len(ev) == 3 and ev["in_fit"].all()
    assert set(ev["group"]) == set(OBSERVED) and set(ev["source"]) == {"dataset"}
    assert (ev["n"] == 3).all() and (ev["cv"] == 0).all()  # three equal repetitions
    assert ev["violation_pct"].isna().all()  # no one-sided points
    assert cal.report_.nfev > 0 and cal.report_.seconds > 0


def test_the_written_models_predict_what_the_fit_predicted(cal, tmp_path):
    written = cal.write(tmp_path / "models")
    assert "lsquic.json" in written and "interop.json" in written
    assert "tcp_tls.json" in written  # '+' is not written into file names
    assert {"testbeds.json", "pipeline.json"} <= set(written)
    loaded = Registry.load(tmp_path / "models")
    scenarios = [e.scenario for e in cal.all_evidence_]
    ours = AnalyticEngine(cal.registry_).predict_batch(scenarios)
    theirs = AnalyticEngine(loaded).predict_batch(scenarios)
    for a, b, observed in zip(ours, theirs, cal.report_.evidence["predicted_mbps"],
                              strict=True):
        # The files keep parameters to 6–7 significant digits: 1e-5 relative.
        assert b.goodput_mbps == pytest.approx(a.goodput_mbps, rel=1e-5)
        assert a.goodput_mbps == pytest.approx(observed, rel=1e-6)
