"""The analytic model's compiled backend: numba's plumbing, apart from the equations.

:mod:`quiclab.sim.analytic.core` writes the model once, element by element,
with its elementwise primitives (``_where``, ``_min``, ``_exp``, …) as module
globals. Here numba compiles those same functions for one scenario, with
scalar primitives in their place (branch-free selects; exp and log as
polynomials on the float's bits, so that LLVM can vectorise them), and a
driver, ``_kernel``, that solves blocks of KERNEL_BLOCK scenarios one solver
step at a time across the block (AVX-512 where the CPU has it), moving the
scenarios still iterating to the front as others converge.

The machine code is cached on disk (numba ``cache=True``: next to this file,
else in numba's user cache): a process pays numba's import and the cache load
on its first call (~0.5 s). numba's cache notices changes to this file only,
not to the model's file or to the constants it reads, so the kernel's cached
name carries a digest of all three (:data:`SOURCES`): the first run after any
of them changes compiles (~5 s).

``core.evaluate`` picks the backend (``core.backend_for``) and runs the kernel
:func:`_compiled` returns; this module is imported only then.
"""

from __future__ import annotations

import hashlib
import math
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from quiclab.sim.analytic import core
from quiclab.sim.analytic.core import (
    _PREPARE_FIELDS,
    MAX_STEPS,
    N_W,
    RESOURCES,
    S_DONE,
    S_YOUT,
    _finish,
    _prepare,
    _solve_start,
    _solve_step,
)

#: The files whose source the compiled kernel is built from (see the module docstring).
SOURCES = (Path(__file__), Path(core.__file__),
           Path(__file__).resolve().parent.parent / "constants.py")


#: Scenarios per block of the compiled kernel: its work arrays then stay in
#: the core's cache (w and v: (2·N_W + 21) × 128 × 8 B ≈ 100 KB).
KERNEL_BLOCK = 128
#: Loops run over multiples of this many scenarios (AVX-512 doubles).
KERNEL_LANES = 8
#: Kernel-only rows after the work array: the inputs _finish reads (transfer
#: bytes, payload, sender and receiver cores) and its outputs, so that the loop
#: that computes them reads and writes one array only (rows a constant apart
#: need no run-time aliasing checks; LLVM vectorises it), then copy loops.
W_FIN = N_W
W_OUT = W_FIN + 4
N_KERNEL_ROWS = W_OUT + 17


def _prefer_wide_vectors() -> None:
    """Nothing here; compiled, it lets the kernel use 512-bit vectors (_scalar_primitives)."""


def _kernel(payload, skb_bytes, wire, s_ns_packet, s_ns_call, s_segments, s_ns_ack, s_cores,
            r_ns_packet, r_ns_call, r_segments, r_ns_ack, r_cores, ack_every, immediate_ack,
            stall_rate_hz, stall_min_s, stall_alpha, max_ack_delay_s, fc_window_bytes, busy,
            link_bps, rtt_s, loss_prob, queue_bytes, rcvbuf_bytes, cc, ack_fixed, ack_floor,
            time_friendly, reno_beta, transfer_bytes,
            o_goodput, o_limit, o_rates, o_loss, o_pbuf, o_acks, o_s_ns, o_r_ns, o_s_util,
            o_r_util, o_duration, o_rtt_eff, start, stop):
    """Scenarios start…stop, KERNEL_BLOCK at a time; runs compiled only (see _compiled).

    Every loop over a block's scenarios is one straight-line body on the work
    array ``w``, which LLVM vectorises across scenarios.
    """
    _prefer_wide_vectors()
    w = np.zeros((N_KERNEL_ROWS, KERNEL_BLOCK))  # zeros: no subnormal garbage in the padding
    v = np.zeros((N_W, KERNEL_BLOCK))
    pos = np.empty(KERNEL_BLOCK, dtype=np.int64)
    for b0 in range(start, stop, KERNEL_BLOCK):
        m = stop - b0 if stop - b0 < KERNEL_BLOCK else KERNEL_BLOCK
        # Loops that compute run over whole vectors (the padding's results are
        # not used): a scalar remainder of the long loop bodies costs more.
        mp = (m + KERNEL_LANES - 1) // KERNEL_LANES * KERNEL_LANES
        for j in range(m):
            w[W_FIN, j] = transfer_bytes[b0 + j]
            w[W_FIN + 1, j] = payload[b0 + j]
            w[W_FIN + 2, j] = s_cores[b0 + j]
            w[W_FIN + 3, j] = r_cores[b0 + j]
        for j in range(m):  # 31 input arrays and w: see _compile on aliasing checks
            k = b0 + j
            _prepare(w, j, payload[k], skb_bytes[k], wire[k], s_ns_packet[k], s_ns_call[k],
                     s_segments[k], s_ns_ack[k], s_cores[k], r_ns_packet[k], r_ns_call[k],
                     r_segments[k], r_ns_ack[k], r_cores[k], ack_every[k], immediate_ack[k],
                     stall_rate_hz[k], stall_min_s[k], stall_alpha[k], max_ack_delay_s[k],
                     fc_window_bytes[k], busy[k], link_bps[k], rtt_s[k], loss_prob[k],
                     queue_bytes[k], rcvbuf_bytes[k], cc[k], ack_fixed[k], ack_floor[k],
                     time_friendly[k], reno_beta[k])
        for j in range(mp):
            _solve_start(w, w, j)
        # Scenarios converge after 3–5 evaluations, a few take many more: once
        # half of those iterating have converged, the others move to the front of
        # v (their invariants and state) and iterate there; w keeps the block's
        # order for _finish and each scenario's answer (S_YOUT).
        n_live = m
        in_v = False
        for _ in range(MAX_STEPS - 1):
            live = 0
            for k in range(n_live):
                live += 1 if (v[S_DONE, k] if in_v else w[S_DONE, k]) == 0.0 else 0
            if 2 * live <= n_live:
                k2 = 0
                for k in range(n_live):
                    if in_v:
                        if v[S_DONE, k] == 0.0:
                            for r in range(N_W):
                                v[r, k2] = v[r, k]
                            pos[k2] = pos[k]
                            k2 += 1
                        else:
                            w[S_YOUT, pos[k]] = v[S_YOUT, k]
                    elif w[S_DONE, k] == 0.0:
                        for r in range(N_W):
                            v[r, k2] = w[r, k]
                        pos[k2] = k
                        k2 += 1
                n_live = k2
                in_v = True
            if n_live == 0:
                break
            n_lanes = (n_live + KERNEL_LANES - 1) // KERNEL_LANES * KERNEL_LANES
            if in_v:
                for k in range(n_lanes):
                    _solve_step(v, v, k)
            else:
                for k in range(n_lanes):
                    _solve_step(w, w, k)
        if in_v:  # still iterating after MAX_STEPS evaluations
            for k in range(n_live):
                w[S_YOUT, pos[k]] = v[S_YOUT, k]
        for j in range(mp):
            r = _finish(w, j, w[S_YOUT, j], w[W_FIN, j], w[W_FIN + 1, j], w[W_FIN + 2, j],
                        w[W_FIN + 3, j])
            w[W_OUT, j] = r[0]
            w[W_OUT + 1, j] = r[1]
            w[W_OUT + 2, j] = r[2]
            w[W_OUT + 3, j] = r[3]
            w[W_OUT + 4, j] = r[4]
            w[W_OUT + 5, j] = r[5]
            w[W_OUT + 6, j] = r[6]
            w[W_OUT + 7, j] = r[7]
            w[W_OUT + 8, j] = r[8]
            w[W_OUT + 9, j] = r[9]
            w[W_OUT + 10, j] = r[10]
            w[W_OUT + 11, j] = r[11]
            w[W_OUT + 12, j] = r[12]
            w[W_OUT + 13, j] = r[13]
            w[W_OUT + 14, j] = r[14]
            w[W_OUT + 15, j] = r[15]
            w[W_OUT + 16, j] = r[16]
        for j in range(m):
            o_goodput[b0 + j] = w[W_OUT, j]
            o_limit[b0 + j] = np.intp(w[W_OUT + 1, j])
        for j in range(m):
            for q in range(6):
                o_rates[b0 + j, q] = w[W_OUT + 2 + q, j]
        for r, a in enumerate((o_loss, o_pbuf, o_acks, o_s_ns, o_r_ns, o_s_util, o_r_util,
                               o_duration, o_rtt_eff)):
            for j in range(m):
                a[b0 + j] = w[W_OUT + 8 + r, j]
    return 0


#: Functions compiled with scalar primitives, in dependency order.
_MODEL_FUNCTIONS = ("_cpu_rates", "_cwnd", "_upper_bound", "_rates", "_residual", "_prepare",
                    "_solve_start", "_solve_step", "_finish")

#: LLVM fast-math flags of the compiled code: reassociation, contraction into
#: FMA, reciprocals — not nnan/ninf, as the model relies on inf (no window, no
#: flow-control limit) and on comparisons with NaN being false.
FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}

_compiled_kernel: Any = None
_compile_lock = threading.Lock()


def _scalar_primitives(numba: Any) -> dict[str, Any]:
    """The primitives for one float: selects, and exp/log that LLVM can vectorise.

    exp: e^x = 2^k·e^r with k = round(x/ln 2), |r| ≤ ln 2/2, e^r by its Taylor
    series to r^12 (error < 2e-16), 2^k written into the exponent bits. log: x =
    2^e·m with m in [√½, √2), log m = 2·atanh(s) = 2(s + s³/3 + …), s = (m−1)/(m+1),
    |s| ≤ 0.172, to s^19 (error < 1e-16). Both handle 0, ±inf and NaN as libm,
    except that exp flushes subnormal results (x < −708) to 0; subnormal
    arguments of log are not needed by the model and not handled.
    """
    from llvmlite import ir
    from numba.core import types
    from numba.extending import intrinsic

    def as_bits_typer(typingctx, x):
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], ir.IntType(64))
        return types.int64(types.float64), codegen

    def from_bits_typer(typingctx, b):
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], ir.DoubleType())
        return types.float64(types.int64), codegen

    def sqrt_typer(typingctx, x):
        # The LLVM intrinsic (one vsqrtpd for a vector); numba's math.sqrt calls libm.
        def codegen(context, builder, signature, args):
            fn = builder.module.declare_intrinsic("llvm.sqrt", [ir.DoubleType()])
            return builder.call(fn, args, fastmath=tuple(sorted(FASTMATH)))
        return types.float64(types.float64), codegen

    def prefer_wide_vectors_typer(typingctx):
        # The function this is called from may use the CPU's widest vectors
        # (LLVM keeps to 256 bits on many AVX-512 CPUs unless told so). A string
        # attribute, which llvmlite's attribute set does not list: added as such.
        def codegen(context, builder, signature, args):
            set.add(builder.function.attributes, '"prefer-vector-width"="512"')
            return context.get_dummy_value()
        return types.none(), codegen

    as_bits: Any = intrinsic(as_bits_typer)
    from_bits: Any = intrinsic(from_bits_typer)
    sqrt: Any = intrinsic(sqrt_typer)
    prefer_wide_vectors: Any = intrinsic(prefer_wide_vectors_typer)

    # Not reassoc: exp's scaling (p·2^k1)·2^k2 must keep its order.
    jit = numba.njit(forceinline=True, fastmath=FASTMATH - {"reassoc"}, error_model="numpy")
    ln2_hi = 6.93147180369123816490e-01
    ln2_lo = 1.90821492927058770002e-10
    inv_ln2 = 1.0 / math.log(2.0)
    sqrt2 = math.sqrt(2.0)
    mant = 0x000FFFFFFFFFFFFF
    one_bits = 0x3FF0000000000000

    def where(cond, a, b):
        return a if cond else b

    def minimum(a, b):
        return a if a < b else b

    def maximum(a, b):
        return a if a > b else b

    def absolute(a):
        return a if a >= 0.0 else -a

    def ceil(x):
        return np.ceil(x)

    def exp(x):
        xc = x if x > -708.0 else -708.0
        xc = xc if xc < 709.78 else 709.78
        k = math.floor(xc * inv_ln2 + 0.5)
        r = (xc - k * ln2_hi) - k * ln2_lo
        p = 1.0 / 479001600.0
        p = p * r + 1.0 / 39916800.0
        p = p * r + 1.0 / 3628800.0
        p = p * r + 1.0 / 362880.0
        p = p * r + 1.0 / 40320.0
        p = p * r + 1.0 / 5040.0
        p = p * r + 1.0 / 720.0
        p = p * r + 1.0 / 120.0
        p = p * r + 1.0 / 24.0
        p = p * r + 1.0 / 6.0
        p = p * r + 0.5
        p = p * r + 1.0
        p = p * r + 1.0
        # 2^k as 2^k1·2^k2: each factor a normal double for every k used here.
        k1 = np.int64(k) >> 1
        k2 = np.int64(k) - k1
        v = p * from_bits((k1 + 1023) << 52) * from_bits((k2 + 1023) << 52)
        v = 0.0 if x < -708.0 else v  # (subnormal results are flushed to 0)
        v = math.inf if x > 709.782712893384 else v  # log of the largest double
        return x if x != x else v

    def log(x):
        b = as_bits(x)
        e = (b >> 52) - 1023
        m = from_bits((b & mant) | one_bits)
        big = m > sqrt2
        m = 0.5 * m if big else m
        e = e + 1 if big else e
        s = (m - 1.0) / (m + 1.0)
        z = s * s
        p = 1.0 / 19.0
        p = p * z + 1.0 / 17.0
        p = p * z + 1.0 / 15.0
        p = p * z + 1.0 / 13.0
        p = p * z + 1.0 / 11.0
        p = p * z + 1.0 / 9.0
        p = p * z + 1.0 / 7.0
        p = p * z + 1.0 / 5.0
        p = p * z + 1.0 / 3.0
        p = p * z + 1.0
        fe = float(e)
        v = fe * ln2_hi + (2.0 * s * p + fe * ln2_lo)
        v = -math.inf if x == 0.0 else v
        v = math.inf if x == math.inf else v
        return math.nan if (x < 0.0) | (x != x) else v

    prims = {"where": where, "min": minimum, "max": maximum, "abs": absolute, "exp": exp,
             "log": log, "sqrt": sqrt, "ceil": ceil}
    out = {"_" + name: jit(fn) for name, fn in prims.items() if name != "sqrt"}
    out["_sqrt"] = sqrt
    out["_prefer_wide_vectors"] = prefer_wide_vectors
    return out


def source_digest() -> str:
    """SHA-256 (hex, 16 digits) of :data:`SOURCES`, the kernel's cache key."""
    digest = hashlib.sha256()
    for path in SOURCES:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _rebind(fn: Callable[..., Any], namespace: dict[str, Any]) -> Callable[..., Any]:
    """``fn``'s code with ``namespace`` as its globals (the same source, other primitives)."""
    import types

    return types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__,
                              fn.__closure__)


def _compiled() -> Any:
    """The compiled kernel (loaded from numba's cache, or compiled: ~5 s), or None
    when numba cannot be imported (or compiling fails: then with a warning)."""
    global _compiled_kernel
    if _compiled_kernel is None:
        with _compile_lock:
            if _compiled_kernel is None:
                try:
                    _compiled_kernel = _compile() or False
                except Exception as e:  # numba is there but cannot build the kernel
                    warnings.warn(f"analytic core: the compiled kernel failed ({e!r}); "
                                  "using numpy", RuntimeWarning, stacklevel=2)
                    _compiled_kernel = False
    return _compiled_kernel or None


def _compile() -> Any:
    try:
        import llvmlite.binding as llvm
        import numba
    except ImportError:
        return None
    # The loop that runs _prepare reads 31 input arrays and writes w: LLVM
    # vectorises it only behind run-time checks that they do not overlap, and
    # by default gives up beyond 8 such checks. (A process-wide LLVM option; it
    # matters only when numba compiles, i.e. not when the kernel comes from
    # the cache.)
    llvm.set_option("", "-runtime-memory-check-threshold=64")
    # The model's own source, its globals (the model's module, then the
    # kernel's) the scalar primitives and the compiled model functions (inlined
    # into the kernel by LLVM).
    ns = {**vars(core), **globals()}
    ns.update(_scalar_primitives(numba))
    model = numba.njit(fastmath=FASTMATH, error_model="numpy", forceinline=True)
    for name in _MODEL_FUNCTIONS:
        ns[name] = model(_rebind(getattr(core, name), ns))
    options: dict[str, Any] = {"fastmath": FASTMATH, "error_model": "numpy", "nogil": True}
    # numba names its cache files after the function: this name changes with SOURCES.
    kernel_fn = _rebind(_kernel, ns)
    kernel_fn.__qualname__ = f"_kernel_{source_digest()}"
    try:
        kernel = numba.njit(cache=True, **options)(kernel_fn)
    except RuntimeError:  # no writable cache directory: compile in every process
        kernel = numba.njit(**options)(kernel_fn)
    # Load (or compile) it now, in this thread, with the argument types evaluate uses.
    a = np.zeros(0)
    kernel(*[a] * (len(_PREPARE_FIELDS) + 1), a, np.zeros(0, dtype=np.intp),
           np.zeros((0, len(RESOURCES))), *[a] * 9, 0, 0)
    return kernel
