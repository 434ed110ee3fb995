"""Predictive intervals learned from held-out error (``intervals.json`` beside the models).

A Prediction's band says where the *measured* goodput is expected to lie, model
error included. It is a conformal predictive system (the ``crepes`` library,
Boström et al.) over held-out residuals in log ratio:

    r = log(measured / predicted)            (= −log(predicted / measured))
    σ(x) = exp(b₀ + Σ bⱼ xⱼ)                 the item's difficulty
    band = predicted × exp(σ(x) · [α_lo, α_hi])

The residuals come from predictions made by models that never saw the item
(leave one experiment out, leave one pair out, leave one testbed out, fresh
sessions predicted by models fitted on another session; ``quiclab calibrate``
writes them here with their provenance). The difficulty ``σ(x)`` is a
log-linear model of the error's size (scikit-learn's ``Ridge`` on log |r|) on
what the residuals show drives error: the limiting regime, the engine, whether the
pair, the CPU and each knob lie inside the evidence (:mod:`quiclab.models.domain`),
how far outside, and whether the CPU is another than the models' reference.
``α_lo``, ``α_hi`` are the conformal percentiles of the signed normalised
residuals r / σ at the stated level, per Mondrian bin (``bin_by``: the
reference CPU against another, by default), so the band is as asymmetric and as
heavy-tailed as the residuals of its kind are.

Features are clipped to the range the residuals cover: a scenario further out
than any held-out item gets the band of the furthest such item, not an
extrapolated error model (its Prediction names the extrapolated fields).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from quiclab.errors import DataError

SCHEMA = "quiclab.intervals/1"
FILE = "intervals.json"
DEFAULT_LEVEL = 0.9

#: Limits grouped into regimes (quiclab.sim.prediction.LIMITS); a regime is the
#: mechanism whose parameters decide the goodput.
REGIMES: dict[str, str] = {
    "sender_cpu": "cpu", "receiver_cpu": "cpu", "interop": "interop", "link": "link",
    "cwnd": "window", "flow_control": "window", "rcvbuf": "rcvbuf",
    "handshake": "requests", "concurrency": "requests",
}
REGIME_NAMES = ("cpu", "interop", "link", "window", "rcvbuf", "requests")
ENGINE_NAMES = ("analytic", "des", "ns3")
#: Log distances beyond this (a value of 0 against a positive bound is infinitely far)
#: count as this far.
MAX_DISTANCE = 50.0


@dataclass(frozen=True)
class Situation:
    """What the interval is conditioned on, for one prediction (or one residual)."""

    regime: str
    engine: str
    pair_measured: bool = True
    cpu_measured: bool = True
    model_measured: bool = True
    #: Numeric and categorical knobs outside the models' evidence (cpu, pair not counted).
    knobs_outside: int = 0
    #: The largest log distance of a numeric knob outside (0 inside).
    distance: float = 0.0
    #: Knobs inside both models' evidence but outside the measured pair's own.
    pair_knobs_outside: int = 0
    #: The scenario's CPU is not the models' reference CPU: costs were moved by the CPU
    #: rule (and the hosts, NICs and kernel are another testbed's).
    cpu_scaled: bool = False
    #: Some evidence comes from the scenario's testbed (a user's own: none does).
    testbed_measured: bool = True

    @classmethod
    def of(cls, limit: str, engine: str, check: Any, cpu_scaled: bool = False) -> Situation:
        """From a Prediction's limit and engine and a
        :class:`~quiclab.models.domain.DomainCheck`."""
        knobs = sum(1 for f in check.fields if f.field != "cpu")
        return cls(REGIMES.get(limit, "cpu"), engine, bool(check.pair_measured),
                   bool(check.cpu_measured), not check.unmeasured, knobs,
                   float(check.distance), len(check.pair_fields), cpu_scaled,
                   bool(getattr(check, "testbed_measured", True)))


#: Feature names of the difficulty model, in order (see :func:`feature_row`).
FEATURES: tuple[str, ...] = (
    *(f"regime:{r}" for r in REGIME_NAMES if r != "cpu"),
    *(f"engine:{e}" for e in ENGINE_NAMES if e != "analytic"),
    "pair never measured", "cpu microarchitecture never measured", "model never measured",
    "knobs outside the evidence", "log distance outside", "outside the pair's own evidence",
    "another CPU than the reference", "testbed never measured",
)


def feature_row(s: Situation) -> list[float]:
    """The difficulty model's features of one situation (``FEATURES`` order)."""
    return [*(float(s.regime == r) for r in REGIME_NAMES if r != "cpu"),
            *(float(s.engine == e) for e in ENGINE_NAMES if e != "analytic"),
            float(not s.pair_measured), float(not s.cpu_measured), float(not s.model_measured),
            float(s.knobs_outside), min(float(s.distance), MAX_DISTANCE),
            float(s.pair_knobs_outside > 0), float(s.cpu_scaled),
            float(not s.testbed_measured)]


#: What the Mondrian bins of the normalised residuals are: one pooled bin (``none``),
#: one per regime, or the models' reference CPU against another (``cpu``).
BIN_BY = ("none", "regime", "cpu")


def bin_label(bin_by: str, regime: str, cpu_scaled: bool) -> str:
    """The Mondrian bin of a situation (``all`` when there are none)."""
    if bin_by == "regime":
        return regime
    if bin_by == "cpu":
        return "another CPU" if cpu_scaled else "reference CPU"
    return "all"


def bin_of(s: Situation, bin_by: str) -> str:
    return bin_label(bin_by, s.regime, s.cpu_scaled)


@dataclass(frozen=True)
class Band:
    """An interval for one prediction and why it is that wide."""

    lo_mbps: float
    hi_mbps: float
    level: float
    sigma: float
    bin: str
    source: str


@dataclass
class IntervalModel:
    """The stored interval model (see the module docstring); ``band()`` applies it."""

    level: float
    features: tuple[str, ...]
    intercept: float
    coef: tuple[float, ...]
    clip: dict[str, tuple[float, float]]
    sigma_floor: float
    bin_by: str  # BIN_BY: what the Mondrian bins are
    scores: dict[str, tuple[float, ...]]  # bin → sorted normalised residuals
    provenance: dict[str, Any] = field(default_factory=dict)
    residuals: list[dict[str, Any]] = field(default_factory=list)
    coverage: list[dict[str, Any]] = field(default_factory=list)
    estimator: str = ""
    #: Digest of the model files the residuals were computed for (stale check).
    models_digest: str = ""
    #: Conformal percentiles computed when the file was written (level → bin →
    #: (α_lo, α_hi, thin)): a prediction at one of these levels needs no crepes (and
    #: none of the pandas it imports), and gets the very numbers crepes gives.
    precomputed: dict[float, dict[str, tuple[float, float, bool]]] = field(
        default_factory=dict)

    def __post_init__(self) -> None:
        known = tuple(self.features)
        if known != FEATURES[:len(known)]:
            raise DataError(FILE, f"features {list(self.features)} are not this code's "
                                  f"{list(FEATURES)} (re-run `quiclab calibrate`)",
                            field="difficulty.features")
        # A file fitted before a feature existed: that feature's coefficient is 0 (it
        # does not widen the band) until the next calibration learns it.
        self._missing = FEATURES[len(known):]
        self._coef = np.concatenate([np.asarray(self.coef, dtype=float),
                                     np.zeros(len(self._missing))])
        self._lo = np.array([self.clip.get(f, (-math.inf, math.inf))[0] for f in FEATURES])
        self._hi = np.array([self.clip.get(f, (-math.inf, math.inf))[1] for f in FEATURES])
        self._alphas: dict[float, dict[str, tuple[float, float, bool]]] = dict(
            self.precomputed)

    # -- applying ------------------------------------------------------------
    def sigma(self, rows: np.ndarray) -> np.ndarray:
        """Difficulty σ of feature rows (n × len(FEATURES)), clipped features, ≥ the floor."""
        x = np.clip(np.atleast_2d(rows), self._lo, self._hi)
        return np.maximum(np.exp(self.intercept + x @ self._coef), self.sigma_floor)

    def alphas(self, level: float) -> dict[str, tuple[float, float, bool]]:
        """Per bin: the conformal percentiles (α_lo, α_hi) of the normalised residuals at
        ``level``, and whether the bin's residuals were too few for it (then the pooled
        residuals', else the extreme ones, are used)."""
        level = float(level)
        if level not in self._alphas:
            self._alphas[level] = _percentiles(
                tuple(sorted((k, tuple(v)) for k, v in self.scores.items())), level)
        return self._alphas[level]

    def bands(self, goodput_mbps: Sequence[float] | np.ndarray, situations: Sequence[Situation],
              level: float | None = None, link_mbps: Sequence[float] | np.ndarray | None = None
              ) -> list[Band]:
        """One Band per prediction (vectorised over the batch)."""
        rows = np.array([feature_row(s) for s in situations], dtype=float).reshape(
            len(situations), len(FEATURES))
        names = [bin_of(s, self.bin_by) for s in situations]
        lo, hi, sig, used, thin = self.band_arrays(goodput_mbps, rows, names, level, link_mbps)
        level = self.level if level is None else level
        texts = self.describe_many(rows, sig, used, level, thin)
        return [Band(float(lo[i]), float(hi[i]), level, float(sig[i]), used[i], texts[i])
                for i in range(len(situations))]

    def band_arrays(self, goodput_mbps: Sequence[float] | np.ndarray, rows: np.ndarray,
                    bins: Sequence[str], level: float | None = None,
                    link_mbps: Sequence[float] | np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str], np.ndarray]:
        """(lo, hi, σ, bin used, too-few-residuals flag) per prediction, from feature
        rows (n × FEATURES) and Mondrian bin names. ``link_mbps`` caps ``hi``: no
        measurement exceeds the nominal link rate."""
        level = self.level if level is None else level
        check_level(level)
        g = np.asarray(goodput_mbps, dtype=float)
        sig = self.sigma(rows) if len(g) else np.zeros(0)
        table = self.alphas(level)
        used = [b if b in table else "all" for b in bins]
        a_lo = np.array([table[b][0] for b in used])
        a_hi = np.array([table[b][1] for b in used])
        thin = np.array([table[b][2] for b in used], dtype=bool)
        lo = g * np.exp(sig * a_lo)
        hi = g * np.exp(sig * a_hi)
        # No band narrower than ±sigma_floor (log units): a measurement repeats only so
        # well, so a zero-width band would claim more than any residual can show.
        lo = np.minimum(lo, g * math.exp(-self.sigma_floor))
        hi = np.maximum(hi, g * math.exp(self.sigma_floor))
        if link_mbps is not None:
            hi = np.minimum(hi, np.maximum(np.asarray(link_mbps, dtype=float), g))
        return np.minimum(lo, g), np.maximum(hi, g), sig, used, thin

    def describe(self, row: Sequence[float], sigma: float, b: str, level: float,
                 thin: bool = False) -> str:
        """Which residuals set a band, and what widened it (one line)."""
        return self.describe_many(np.atleast_2d(np.asarray(row, dtype=float)),
                                  np.array([sigma]), [b], level, np.array([thin]))[0]

    def describe_many(self, rows: np.ndarray, sigma: np.ndarray, bins: Sequence[str],
                      level: float, thin: np.ndarray) -> list[str]:
        """:meth:`describe` for every row of a batch (one column of text per feature)."""
        kinds = self.provenance.get("fold_kinds", {})
        n = self.provenance.get("residuals", len(self.residuals))
        made = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
        head = {b: (f"{level * 100:g} % band from {n} held-out residuals (folds: {made}); "
                    f"{b} bin of {len(self.scores.get(b, ()))}; σ ")
                for b in set(bins)}
        tail = {b: (f" (too few residuals in the {b} bin for {level * 100:g} %: the widest "
                    "seen)") for b in set(bins)}
        base = f" = base {math.exp(self.intercept):.3f}"
        x = np.clip(np.atleast_2d(rows), self._lo, self._hi)
        effect = x * self._coef
        columns = []
        for j, name in enumerate(FEATURES):
            active = (x[:, j] != 0) & (np.abs(effect[:, j]) > 0.05)
            if active.any():
                # One text per distinct value (most features take a few).
                values, which = np.unique(np.where(active, effect[:, j], np.nan),
                                          return_inverse=True)
                texts = ["" if v != v else f" · {name} ×{math.exp(v):.2g}"
                         for v in values.tolist()]
                columns.append([texts[k] for k in which.tolist()])
        raw = np.atleast_2d(rows)
        for j, name in enumerate(FEATURES):
            # A situation no residual had (a regime no held-out item reached, an engine
            # without residuals of its own): its band is the others', and says so.
            if (name.startswith(("regime:", "engine:")) and self._hi[j] <= 0
                    and (raw[:, j] > 0).any()):
                what = name.split(":", 1)[1]
                note = (f" · no held-out residual in the {what} regime" if name[0] == "r"
                        else f" · no held-out residual of the {what} engine")
                columns.append([note if v > 0 else "" for v in raw[:, j].tolist()])
        factors = ["".join(parts) for parts in zip(*columns, strict=True)] if columns \
            else [""] * len(bins)
        return [f"{head[b]}{s:.3f}{base}{f}" + (tail[b] if t else "")
                for b, s, f, t in zip(bins, sigma.tolist(), factors, thin.tolist(),
                                      strict=True)]

    # -- storage -------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "level": self.level, "estimator": self.estimator,
            "score": "log(measured / predicted) / sigma; band = predicted × "
                     "exp(sigma × conformal percentiles of the score)",
            # Full precision (JSON floats round-trip exactly): the stored model gives
            # the bands the calibration measured, bit for bit.
            "difficulty": {"features": list(self.features),
                           "intercept": float(self.intercept),
                           "coef": [float(c) for c in self.coef],
                           "clip": {k: [float(v[0]), float(v[1])]
                                    for k, v in self.clip.items()},
                           "sigma_floor": self.sigma_floor},
            "bin_by": self.bin_by,
            "scores": {k: [float(v) for v in vals] for k, vals in sorted(self.scores.items())},
            "models_digest": self.models_digest,
            "provenance": self.provenance, "coverage": self.coverage,
            "residuals": self.residuals,
            "percentiles": {repr(level): {k: [float(a), float(b), bool(t)]
                                          for k, (a, b, t) in sorted(self.alphas(level).items())}
                            for level in sorted({self.level, *STORED_LEVELS})},
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, data: Any, where: str) -> IntervalModel:
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            got = data.get("schema") if isinstance(data, dict) else type(data).__name__
            raise DataError(where, f"schema={got!r}, expected {SCHEMA!r}", field="schema")
        try:
            d = data["difficulty"]
            return cls(
                level=float(data["level"]), features=tuple(d["features"]),
                intercept=float(d["intercept"]), coef=tuple(float(c) for c in d["coef"]),
                clip={k: (float(v[0]), float(v[1])) for k, v in d["clip"].items()},
                sigma_floor=float(d["sigma_floor"]), bin_by=str(data["bin_by"]),
                scores={k: tuple(float(x) for x in v) for k, v in data["scores"].items()},
                provenance=dict(data.get("provenance", {})),
                residuals=list(data.get("residuals", [])),
                coverage=list(data.get("coverage", [])),
                estimator=str(data.get("estimator", "")),
                models_digest=str(data.get("models_digest", "")),
                precomputed={float(level): {k: (float(v[0]), float(v[1]), bool(v[2]))
                                            for k, v in bins.items()}
                             for level, bins in (data.get("percentiles") or {}).items()})
        except (KeyError, TypeError, ValueError, IndexError) as err:
            raise DataError(where, f"incomplete interval model ({err!r})") from None

    @classmethod
    def load(cls, path: Path) -> IntervalModel:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as err:
            raise DataError(path, f"cannot be read as JSON ({err})") from None
        model = cls.from_json(data, str(path))
        if "all" not in model.scores:
            raise DataError(path, "no pooled residuals (bin 'all')", field="scores")
        return model


#: Levels whose percentiles intervals.json stores beside its own (the CLI's usual --level).
STORED_LEVELS = (0.5, 0.8, 0.9, 0.95)


def check_level(level: float) -> None:
    """ValueError unless 0 < level < 1."""
    if not (isinstance(level, int | float) and 0.0 < float(level) < 1.0):
        raise ValueError(f"level={level!r} must be a fraction in (0, 1), e.g. 0.9")


@lru_cache(maxsize=64)
def _percentiles(scores: tuple[tuple[str, tuple[float, ...]], ...], level: float
                 ) -> dict[str, tuple[float, float, bool]]:
    """crepes' conformal predictive percentiles of each bin's normalised residuals."""
    import warnings

    from crepes import ConformalPredictiveSystem

    names = [k for k, _ in scores]
    values = np.concatenate([np.asarray(v, dtype=float) for _, v in scores])
    labels = np.concatenate([[k] * len(v) for k, v in scores])
    cps = ConformalPredictiveSystem().fit(values, bins=labels)
    lower, upper = (1.0 - level) / 2.0 * 100.0, (1.0 + level) / 2.0 * 100.0
    with warnings.catch_warnings():
        # A bin too small for the level gives ±inf (crepes warns); handled below.
        warnings.simplefilter("ignore")
        got = cps.predict(np.zeros(len(names)), bins=np.array(names),
                          lower_percentiles=lower, higher_percentiles=upper)
    got = np.atleast_2d(got)
    found = {name: (float(a), float(b)) for name, (a, b) in zip(names, got, strict=True)}
    pooled = dict(scores)["all"]
    p_lo, p_hi = found["all"]
    # Too few residuals in the pooled bin for the level: the extremes seen.
    pooled_pair = (p_lo if math.isfinite(p_lo) else min(pooled),
                   p_hi if math.isfinite(p_hi) else max(pooled))
    out = {}
    for name, (a_lo, a_hi) in found.items():
        thin = not (math.isfinite(a_lo) and math.isfinite(a_hi))
        # A bin too small for the level takes the pooled residuals' percentile.
        out[name] = (a_lo if math.isfinite(a_lo) else pooled_pair[0],
                     a_hi if math.isfinite(a_hi) else pooled_pair[1], thin)
    return out


def models_digest(directory: Path) -> str:
    """SHA-256 (12 hex digits) of the cost-model and interop files of a model directory
    (what the held-out residuals were computed for)."""
    h = hashlib.sha256()
    for path in sorted(Path(directory).glob("*.json")):
        if path.name in (FILE, "domain.json"):
            continue
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:12]
