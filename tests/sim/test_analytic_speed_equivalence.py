"""The analytic core's fast paths compute exactly what the plain algorithm computes.

``evaluate`` splits large batches into blocks run on threads, skips the terms a
whole block does not need (stalls, CUBIC, BBR, zero loss) and updates the
solver with a bitwise select instead of ``np.where``. None of that may change
a single bit: a scenario's outputs must not depend on the batch it is in, and
the solver must agree with the Illinois iteration written out with
``np.where``. Correctness only — nothing here is timed.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

from quiclab.sim.analytic import core
from quiclab.sim.analytic.core import BLOCK, Inputs, Outputs, evaluate


def random_inputs(n: int, seed: int) -> Inputs:
    """Scenarios spread over the model's regimes, edge cases mixed in row by row."""
    rng = np.random.default_rng(seed)

    def some(p: float) -> np.ndarray:
        return rng.random(n) < p

    udp = rng.choice([1200.0, 1252.0, 1350.0, 1472.0, 8952.0], n)
    payload = udp - rng.uniform(30, 60, n)
    a = {
        "payload_bytes": payload,
        "udp_payload_bytes": udp,
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
        "ack_every": rng.choice([0.0, 1.0, 2.0, 8.5, 10.0], n),
        "immediate_ack": rng.integers(0, 2, n).astype(float),
        "stall_rate_hz": np.where(some(0.25), 0.0, 10 ** rng.uniform(-1, 3.5, n)),
        "stall_min_s": 10 ** rng.uniform(-7, -2, n),
        "stall_alpha": rng.uniform(0.8, 4.0, n),
        "max_ack_delay_s": rng.uniform(0.0, 0.05, n),
        "fc_window_bytes": np.where(some(0.1), 0.0, 2.0 ** rng.integers(16, 26, n)),
        "busy": rng.uniform(0.3, 1.0, n),
        "link_bps": 10 ** rng.uniform(6, 11.5, n),
        "rtt_s": 10 ** rng.uniform(-5, 1.3, n),
        "loss_prob": np.where(some(0.2), 0.0, 10 ** rng.uniform(-8, -0.4, n)),
        "queue_bytes": 10 ** rng.uniform(3, 9, n),
        "rcvbuf_bytes": 10 ** rng.uniform(2, 8, n),
        "cc": rng.integers(0, 3, n).astype(float),
        "transfer_bytes": 10 ** rng.uniform(0, 10, n),
        "pacing": rng.integers(0, 2, n).astype(float),
    }
    return Inputs(**a)


def rows(x: Inputs, idx: np.ndarray) -> Inputs:
    return Inputs(*[np.asarray(getattr(x, f.name))[idx] for f in fields(Inputs)])


def assert_identical(got: Outputs, want: Outputs, idx: np.ndarray | slice) -> None:
    for f in fields(Outputs):
        g, w = getattr(got, f.name), getattr(want, f.name)[idx]
        assert np.array_equal(g, w, equal_nan=True), f.name


@pytest.mark.parametrize("seed", [1, 2])
def test_a_scenario_gets_the_same_bits_in_any_batch(seed):
    n = 2 * BLOCK + 321  # several blocks, threads, a short last block
    x = random_inputs(n, seed)
    with np.errstate(all="ignore"):
        whole = evaluate(x)
        rng = np.random.default_rng(seed)
        # Alone: every skip a one-row block allows (no stalls, no CUBIC, …).
        for i in rng.choice(n, 150, replace=False):
            assert_identical(evaluate(rows(x, np.array([i]))), whole, np.array([i]))
        # Homogeneous groups take the skipping branches for many rows at once.
        groups = {
            "no stalls": np.asarray(x.stall_rate_hz) == 0,
            "stalls": np.asarray(x.stall_rate_hz) > 0,
            "cubic": np.asarray(x.cc) == 0,
            "reno": np.asarray(x.cc) == 1,
            "bbr": np.asarray(x.cc) == 2,
            "no loss": np.asarray(x.loss_prob) == 0,
        }
        for name, mask in groups.items():
            idx = np.flatnonzero(mask)
            assert len(idx) > 100, name
            assert_identical(evaluate(rows(x, idx)), whole, idx)
        # Shuffled: other block boundaries and other neighbours.
        perm = rng.permutation(n)
        assert_identical(evaluate(rows(x, perm)), whole, perm)


def plain_illinois(x: Inputs, iterations: int) -> core._RateModel:
    """The solver as core._evaluate's docstring states it, with np.where throughout.

    Returns the rate model after its last call, at the bracket's midpoint: its
    attributes are the state the engine reports.
    """
    x = x.broadcast()
    P8 = x.payload_bytes * 8.0
    rate_link = evaluate(x, iterations).rates_bps[:, 3]  # the solver's input, not under test
    f = core._RateModel(x, P8, rate_link)
    g_hi = f.loss_free()
    y_b = np.log(g_hi)
    h_b = np.log(f(g_hi)) - y_b
    g_lo = np.exp(y_b + h_b)
    y_a = np.log(g_lo)
    h_a = np.log(f(g_lo)) - y_a
    side = np.zeros_like(y_a)
    for _ in range(max(iterations - 2, 1)):
        denom = h_a - h_b
        y_c = np.where(np.abs(denom) > 1e-15,
                       (y_b * h_a - y_a * h_b) / np.where(denom == 0, 1.0, denom), y_a)
        h_c = np.log(f(np.exp(y_c))) - y_c
        right = h_c < 0
        y_b = np.where(right, y_c, y_b)
        h_b = np.where(right, h_c, np.where(side == -1, 0.5 * h_b, h_b))
        y_a = np.where(right, y_a, y_c)
        h_a = np.where(right, np.where(side == 1, 0.5 * h_a, h_a), h_c)
        side = np.where(right, 1, -1)
    f(np.exp(0.5 * (y_a + y_b)))
    return f


@pytest.mark.parametrize("iterations", [2, 5, 8, 12])
def test_solver_equals_the_plain_illinois_iteration(iterations):
    x = random_inputs(3000, 7)
    with np.errstate(all="ignore"):
        out = evaluate(x, iterations)
        f = plain_illinois(x, iterations)
    want = {
        "rates_bps": np.stack([f.rate_s, f.rate_r, f.rate_pair, f.rate_link, f.rate_cc,
                               f.rate_fc], axis=1),
        "loss_prob": f.loss,
        "rcvbuf_drop_prob": f.p_buf,
        "acks_per_packet": f.acks,
        "s_ns_per_goodput_packet": f.s_ns,
        "r_ns_per_goodput_packet": f.r_ns,
        "rtt_eff_s": f.rtt_eff,
    }
    for name, value in want.items():
        assert np.array_equal(getattr(out, name), value, equal_nan=True), name
