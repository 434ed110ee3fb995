"""The analytic core's answer is well defined, whichever backend or batch computes it.

``evaluate`` solves g = f(g) per scenario to a tolerance and reports every
output at the solution; the same model source runs on numpy arrays or
compiled by numba (vectorised across scenarios, blocks on threads, scenarios
compacted as they converge). Checked here: the answer is the fixed point (and
does not move when the tolerance is tightened), it does not depend on the
batch or on the backend, the compiled primitives match numpy's, and the
solver's form of the receive-buffer law matches its closed form. Correctness
only — nothing here is timed.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

from quiclab.sim.analytic import compiled as compiled_backend
from quiclab.sim.analytic import core
from quiclab.sim.analytic.core import BLOCK, Inputs, Outputs, evaluate
from quiclab.sim.rcvbuf import rcvbuf_drop_fraction, skb_truesize_array

compiled = pytest.mark.skipif(compiled_backend._compiled() is None,
                              reason="numba is not installed")
BACKENDS = ["numpy", pytest.param("compiled", marks=compiled)]


def random_inputs(n: int, seed: int, extreme: bool = True) -> Inputs:
    """Scenarios spread over the model's regimes, edge cases mixed in row by row.

    ``extreme=False`` keeps to what implementations and paths look like (at
    least one ACK per ten packets, loss below 5 %, RTT below 2 s, receiver
    stalls that leave it running most of the time).
    """
    rng = np.random.default_rng(seed)

    def some(p: float) -> np.ndarray:
        return rng.random(n) < p

    udp = rng.choice([1200.0, 1252.0, 1350.0, 1472.0, 8952.0], n)
    payload = udp - rng.uniform(30, 60, n)
    a = {
        "payload_bytes": payload,
        "skb_truesize_bytes": skb_truesize_array(udp),
        "wire_bytes": udp + 66.0,
        "s_ns_packet": rng.uniform(300, 9000, n),
        "s_ns_call": rng.uniform(500, 3000, n),
        "s_segments": rng.choice([1.0, 8.0, 44.0], n),
        "s_ns_ack": rng.uniform(100, 30000, n),
        "s_cores": rng.choice([1.0, 1.0, 2.0], n),
        "r_ns_packet": rng.uniform(300, 9000, n),
        "r_ns_call": rng.uniform(500, 3000, n),
        "r_segments": rng.choice([1.0, 8.0, 44.0], n),
        "r_ns_ack": rng.uniform(100, 10000, n),
        "r_cores": rng.choice([1.0, 1.0, 2.0], n),
        "ack_every": rng.choice([0.0, 1.0, 2.0, 8.5, 10.0] if extreme else [1.0, 2.0, 8.5, 10.0],
                                n),
        "immediate_ack": rng.integers(0, 2, n).astype(float),
        "stall_rate_hz": np.where(some(0.25), 0.0,
                                  10 ** rng.uniform(-1, 3.5 if extreme else 2.5, n)),
        "stall_min_s": 10 ** rng.uniform(-7, -2 if extreme else -3.7, n),
        "stall_alpha": rng.uniform(0.8 if extreme else 1.3, 4.0, n),
        "max_ack_delay_s": rng.uniform(0.0, 0.05, n),
        "fc_window_bytes": np.where(some(0.1), 0.0, 2.0 ** rng.integers(16, 26, n)),
        "busy": rng.uniform(0.3, 1.0, n),
        "link_bps": 10 ** rng.uniform(6, 11.5, n),
        "rtt_s": 10 ** rng.uniform(-5, 1.3 if extreme else 0.3, n),
        "loss_prob": np.where(some(0.2), 0.0, 10 ** rng.uniform(-8, -0.4 if extreme else -1.3, n)),
        "queue_bytes": 10 ** rng.uniform(3, 9, n),
        "rcvbuf_bytes": 10 ** rng.uniform(2 if extreme else 4, 8, n),
        "cc": rng.integers(0, 3, n).astype(float),
        "transfer_bytes": 10 ** rng.uniform(0, 10, n),
        "pacing": rng.integers(0, 2, n).astype(float),
        "ack_fixed": some(0.2).astype(float),
        "ack_floor": rng.choice([2.0, 2.0, 10.0], n),
        "time_friendly": rng.choice([0.0, 0.0, 0.0, 1.0, 2.0], n),
        "reno_beta": rng.choice([0.5, 0.5, 0.7], n),
    }
    return Inputs(**a)


def rows(x: Inputs, idx: np.ndarray) -> Inputs:
    return Inputs(*[np.asarray(getattr(x, f.name))[idx] for f in fields(Inputs)])


def assert_identical(got: Outputs, want: Outputs, idx: np.ndarray, what: str = "") -> None:
    for f in fields(Outputs):
        g, w = getattr(got, f.name), getattr(want, f.name)[idx]
        assert np.array_equal(g, w, equal_nan=True), (what, f.name)


def assert_close(got: Outputs, want: Outputs, idx: np.ndarray | slice = slice(None),
                 rel: float = 1e-12, what: str = "") -> None:
    """Every output within ``rel`` (relative); the limit equal unless two rates tie to ``rel``."""
    for f in fields(Outputs):
        g, w = getattr(got, f.name), getattr(want, f.name)[idx]
        if len(g) != len(w):  # got is the whole batch
            g = g[idx]
        if f.name == "limit":
            continue
        with np.errstate(all="ignore"):
            close = (g == w) | (np.abs(g - w) <= rel * np.abs(w)) | (np.isnan(g) & np.isnan(w))
        assert close.all(), (what, f.name, np.flatnonzero(~close)[:5])
    got_limit = got.limit if len(got.limit) == len(want.limit[idx]) else got.limit[idx]
    differ = got_limit != want.limit[idx]
    if differ.any():
        rates = np.sort(want.rates_bps[idx][differ], axis=1)
        assert (rates[:, 1] - rates[:, 0] <= 10 * rel * rates[:, 0]).all(), (what, "limit")


def residual(x: Inputs, goodput_bps: np.ndarray) -> np.ndarray:
    """|log f(g) − log g| of the model (numpy form) at each scenario's goodput g."""
    x = x.broadcast()
    with np.errstate(all="ignore"):
        w = np.empty((core.N_W, len(goodput_bps)))
        core._prepare(w, slice(None), *[getattr(x, name) for name in core._PREPARE_FIELDS])
        return np.abs(core._residual(w, slice(None), np.log(goodput_bps)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_answer_is_the_fixed_point(backend):
    x = random_inputs(4000, 3, extreme=False)
    out = evaluate(x, backend=backend)
    # Goodput before the startup correction is the smallest rate: f(g) at the solution g.
    g = np.maximum(out.rates_bps.min(axis=1), 1.0)
    assert (residual(x, g) <= 1e-6).all()
    # Extreme inputs: ~1 % of them have an f that jumps across g = f(g) (no fixed point).
    x = random_inputs(4000, 4)
    out = evaluate(x, backend=backend)
    assert np.mean(residual(x, np.maximum(out.rates_bps.min(axis=1), 1.0)) <= 1e-6) > 0.98


def test_a_tighter_tolerance_does_not_move_the_answer(monkeypatch):
    x = random_inputs(4000, 5, extreme=False)
    answer = evaluate(x, backend="numpy")
    monkeypatch.setattr(core, "TOL_STEP", 1e-13)
    tight = evaluate(x, backend="numpy")
    assert_close(answer, tight, rel=1e-6, what="TOL_STEP")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", [1, 2])
def test_a_scenario_gets_the_same_bits_in_any_batch(backend, seed):
    """Each scenario goes through the same operations whatever its neighbours
    (numpy: elementwise; compiled: the same vector code in every lane — loops
    run over whole vectors — whether it iterates in place or after compaction)."""
    n = 2 * BLOCK + 321  # several blocks and threads, a short last block
    x = random_inputs(n, seed)
    whole = evaluate(x, backend=backend)
    rng = np.random.default_rng(seed)
    for i in rng.choice(n, 100, replace=False):
        assert_identical(evaluate(rows(x, np.array([i])), backend=backend), whole, np.array([i]),
                         what=f"row {i}")
    groups = {
        "no stalls": np.asarray(x.stall_rate_hz) == 0,
        "cubic": np.asarray(x.cc) == 0,
        "bbr": np.asarray(x.cc) == 2,
        "no loss": np.asarray(x.loss_prob) == 0,
    }
    for name, mask in groups.items():
        idx = np.flatnonzero(mask)
        assert len(idx) > 100, name
        assert_identical(evaluate(rows(x, idx), backend=backend), whole, idx, what=name)
    perm = rng.permutation(n)  # other block boundaries, other neighbours
    assert_identical(evaluate(rows(x, perm), backend=backend), whole, perm, what="shuffled")


@compiled
@pytest.mark.parametrize("seed", [1, 6])
def test_the_backends_agree(seed):
    x = random_inputs(5000, seed, extreme=False)
    assert_close(evaluate(x, backend="compiled"), evaluate(x, backend="numpy"), rel=1e-9)
    # Extreme inputs: to the solver's tolerance where a fixed point exists (near
    # a steep f, rounding may end the iteration a step earlier or later; where
    # f jumps across g = f(g), it may put the answer on either side of the jump).
    x = random_inputs(5000, seed)
    want = evaluate(x, backend="numpy")
    fixed = np.flatnonzero(residual(x, np.maximum(want.rates_bps.min(axis=1), 1.0)) <= 1e-6)
    assert_close(evaluate(x, backend="compiled"), want, fixed, rel=1e-6)


@compiled
def test_compiled_exp_and_log_match_numpy():
    import numba

    prims = compiled_backend._scalar_primitives(numba)
    exp, log = prims["_exp"], prims["_log"]

    @numba.njit
    def both(x, e, lg):
        for i in range(x.shape[0]):
            e[i] = exp(x[i])
            lg[i] = log(np.abs(x[i]))

    x = np.concatenate([np.linspace(-745, 710, 20001), 10 ** np.linspace(-300, 300, 20001),
                        -(10 ** np.linspace(-300, 2, 2001)), [0.0, np.inf, -np.inf, np.nan]])
    e, lg = np.empty_like(x), np.empty_like(x)
    both(x, e, lg)
    with np.errstate(all="ignore"):
        want_e, want_lg = np.exp(x), np.log(np.abs(x))
        normal = np.abs(x) < 708  # exp: subnormal results flush to 0, as said
        assert np.allclose(e[normal], want_e[normal], rtol=1e-15, atol=0, equal_nan=True)
        assert np.array_equal(np.isinf(e), np.isinf(want_e) & (x > 0))
        assert np.allclose(lg, want_lg, rtol=1e-15, atol=1e-300, equal_nan=True)


def test_the_solvers_buffer_law_is_the_closed_form():
    """_rates' receive-buffer drops equal rcvbuf_drop_fraction (two forms of one law)."""
    x = random_inputs(3000, 8)
    xb = x.broadcast()
    pkt = 10 ** np.random.default_rng(8).uniform(0, 7, 3000)
    with np.errstate(all="ignore"):
        w = np.empty((core.N_W, 3000))
        core._prepare(w, slice(None), *[getattr(xb, name) for name in core._PREPARE_FIELDS])
        y = np.log(pkt * xb.payload_bytes * 8.0)
        p_buf = core._rates(w, slice(None), y)[6]
    arrival = pkt * xb.skb_truesize_bytes
    want = rcvbuf_drop_fraction(arrival, xb.rcvbuf_bytes, xb.stall_rate_hz,
                                xb.stall_min_s, xb.stall_alpha)
    ok = xb.rcvbuf_bytes >= 1.0
    assert np.allclose(p_buf[ok], want[ok], rtol=1e-9, atol=1e-300)


def test_backend_choice(monkeypatch):
    """Compiled whenever numba imports (whatever the batch size), numpy on request."""
    monkeypatch.delenv("QUICLAB_ANALYTIC_PURE", raising=False)  # the suite may run pure
    expected = "numpy" if compiled_backend._compiled() is None else "compiled"
    assert core.backend_for(1) == core.backend_for(10**6) == expected
    assert core.backend_for(10**6, "numpy") == "numpy"
    monkeypatch.setenv("QUICLAB_ANALYTIC_PURE", "1")
    assert core.backend_for(10**6) == "numpy"
    monkeypatch.setenv("QUICLAB_ANALYTIC_PURE", "0")
    assert core.backend_for(1) == expected
    with pytest.raises(ValueError, match="backend"):
        core.backend_for(1, "fortran")


def test_the_kernel_cache_key_covers_the_model_and_its_constants():
    """numba's disk cache sees changes to the kernel's own file only; the kernel's
    cached name carries a digest of the model and the constants it reads too."""
    sources = {p.name: p for p in compiled_backend.SOURCES}
    assert set(sources) == {"compiled.py", "core.py", "constants.py"}
    assert sources["core.py"].samefile(core.__file__)
    assert all(p.is_file() for p in sources.values())
    kernel = compiled_backend._compiled()
    if kernel is not None:
        assert kernel.py_func.__qualname__ == f"_kernel_{compiled_backend.source_digest()}"
