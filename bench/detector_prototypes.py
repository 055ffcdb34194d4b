"""Detector ideas measured as prototypes, rerun from the repository on the benchmark's tapes.

docs/detection.md records ideas that lost. A setting of ``DetectorConfig`` is replayed by ``bench/detector_replay.py``;
an idea that is not a setting needs code the runtime does not keep. Each prototype here changes one part of the
committed detector for the length of a run — its alert decision, how a lane's signal surprises combine, how fast
each signal's statistics forget, or the ``deviation`` input a tape feeds it — and replays the benchmark's captured
tapes through it, scored by the benchmark's own metrics. The first row, ``trep``, is the committed detector on the
same tapes; the prototypes patch the detector of ``--base`` settings (default: the committed ones). The quiet-record
round's rows were measured before the quiet path shipped (``quiet``): ``--base 'quiet=0'`` reruns them as they were;
rows from before the schedule round need ``schedule=0`` in ``--base`` as well.

    python bench/detector_prototypes.py --quick --base 'quiet=0;schedule=0' --prototypes \\
        'quiet-record:low=3.5;margin=0.5;after=500' 'brown:rho=0.4' 'window-gap:gap=4' 'seasonal:acf=0.6'

Prototypes (``KIND:key=value;...``, each key optional):

- ``quiet-record`` (``low``, ``margin``, ``after``, ``decay``, ``start``): a second way to alert, for streams whose
  anomalies stay under the threshold: a score of at least ``low`` that beats every earlier score of the stream from
  its ``start``-th scored reading on (less ``decay`` per reading since; 0: from the end of warm-up) by ``margin``,
  once the stream has ``after`` scored readings; the refractory period holds.
- ``brown`` (``rho``): Brown's method instead of Fisher's: the χ² statistic rescaled for signals correlated at
  ``rho`` (Kost and McDermott's polynomial for the covariance of ``−2 ln p``).
- ``signal-horizon`` (``horizons``, ``/``-separated in ``SIGNALS`` order): each signal's statistics with a horizon
  of its own.
- ``early-horizon`` (``early``, ``age``): the model signals' statistics (``MODEL_SIGNALS``) forget at a horizon of
  ``early`` values until their lane has learned ``age`` readings, then at the committed horizon, so that statistics
  learned on a per-stream model's own training readings give way sooner to the readings after them.
- ``growing-horizon`` (``share``, ``most``): each lane's statistics forget at a horizon of ``share`` of the readings
  it has learned, from the committed horizon up to ``most``: a long-lived stream's baseline spans more of its life.
- ``slow-floor`` (``share``, ``slow``): each signal's variance at least ``share`` of a slow variance (horizon ``slow``)
  learned from the same values, so a quiet stretch cannot narrow a long-lived stream's spread below its life's.
- ``run-rate`` (``k``, ``span``, ``memory``): the bar is also the ``k``-th largest peak, at full height, of the
  stream's runs that ended within the last ``span`` steps: spikes that recur every few hundred readings stop alerting.
- ``persist`` (``n``, ``short``, ``beat``): inside the refractory period a new run that stays at or above the bar
  for ``n`` readings alerts, when the last alerted run lasted fewer than ``short`` (0: ``n``) readings and the
  reading scores ``beat`` times the last alert's: a spike's alert no longer holds back a sustained fault after it.
- ``step-full`` (``m``): a step at least ``m`` times the bar a step must reach to count enters ``deviation`` in full
  instead of as the root of level and step, so a large jump inside a smooth cycle's range reads as large.
- ``window-gap`` (``gap``): ``deviation``'s level judged against the window less the last ``gap`` readings before the
  scored one (a slow fault then cannot hide in the readings it has already moved).
- ``context`` (``span``, ``where``): ``deviation``'s level is the smaller of the committed one and the reading's against
  its last ``span`` readings: far out only if far out against a longer stretch too, so a daily rise the last
  ``deviation_window`` readings had not seen stays small; with ``where`` 1 only where the window's earlier readings
  are all equal, with 2 only where their quartiles tie (a channel at rest between its stirs).
- ``seasonal`` (``acf``, ``pmax``, ``lower``, ``gain``, ``judge``, ``above``, ``trust``, ``loud``, ``ratio``,
  ``need``, ``distrust``, ``skip``, ``lag``): ``deviation``'s level is also the
  reading's difference from the reading one period earlier, judged against the window of such differences, times
  ``gain``, where the plain level exceeds ``above`` (default: everywhere); the period is the first autocorrelation
  peak of at least ``acf`` (lags 4 to ``pmax``) in the stream's first 15 % (at least 200 readings). With ``lower`` 1
  the level is the smaller of the two: a reading far out against its window but like the same moment a period
  earlier (a beat's peak, a daily edge) is ordinary. With ``judge`` 1 as well, the smaller level is judged but the
  plain one is learned, so the signal's statistics stay the committed ones. With ``trust`` a channel is lowered
  only after at least ``need`` of its readings so far with a plain level of ``loud`` or more, and a share ``trust``
  of them, had a seasonal level under ``ratio`` times the plain one: its loud readings have been foretold (with
  ``distrust`` 1, only the other channels are lowered). With ``skip`` (judged apart) a reading whose plain level
  reaches ``skip`` and was lowered is not learned; ``lag`` fixes the lag instead of finding a period, on every
  channel; ``fit`` only on channels that keep to their period (``seasonal.cycle_fit`` under ``fit`` in the part the
  period was found in).
- ``shift`` (``k``, ``gain``): ``deviation``'s level is also the mean of the last ``k`` readings against the window
  before them, times ``gain`` (default ``sqrt(k)``), for a sustained shift inside a noisy channel's spread.
- ``mean-shift`` (``k``, ``span``, ``gain``): ``deviation``'s level is also the mean of the last ``k`` readings
  against the means of ``k`` readings earlier in the window (or the last ``span``), in those means' own robust scale,
  times ``gain`` (``shift`` with a gain each window measures: large on a noisy channel, about 1 on a smooth one).
- ``drift`` (``k``, ``span``, ``gain``): ``mean-shift`` over a longer stretch (defaults ``k`` 32, ``span`` 1,024):
  a slow drift the committed window follows still leaves the longer stretch's range.
- ``rhythm`` (``k``, ``gain``): ``deviation``'s level is also the mean size of the last ``k`` steps against such means
  earlier in the window, in their own robust scale, times ``gain``: a channel moving faster than its window did.
- ``readout`` (``h``, ``refit``, ``ridge``, ``gain``, ``fit``): ``deviation``'s level is also the reading's miss from
  a ridge readout of the lane's representation ``h`` readings earlier (refitted every ``refit`` readings on the
  stream's pairs so far), against the window's misses, times ``gain``: a normal value at the wrong phase; with
  ``fit``, only while the readout explains that share of its pairs' variance.
- ``prior-spread`` (``k``, ``weight``): the card prior's variance of each model signal times ``k``, at ``weight``
  readings' worth (0: ``prior_weight``), for a per-stream model's prior measured on its own training readings.
- ``skew-scale`` (``floor``): ``deviation``'s level in the scale of the window's half on the reading's side
  ((q75 − median) or (median − q25), over 0.6745), at least ``floor`` times the symmetric scale, so that a skewed
  window (counts, bursts) judges its long side by that side's spread.
- ``constant-none``: no ``deviation`` level for a reading whose earlier window has no spread, instead of one over
  the committed scale floor (1 % of the window's level, in the window's units).
- ``winsor`` (``clip``): each signal enters its lane's long-run statistics at most ``clip`` of their standard
  deviations from their mean (``learn-cap`` bounds ``deviation`` alone, in robust units); judged whole as before.
- ``adaptive-tail`` (``cut``, ``weight``, ``dofs``): each signal of each lane is judged under the tail among ``dofs``
  (``/``-separated even degrees of freedom, 0 for the Gaussian; default 4 to 20 and the Gaussian) whose chance of a
  value more than ``cut`` standard deviations above the mean matches how often the lane's own learned values have
  been, counted from a start of ``weight`` values at the committed tail's chance; the committed detector judges every
  lane under ``tail_dof``.
- ``calibrated`` (``level``, ``horizon``, ``prior``, ``most``, ``least``): each stream's gate reads its scores lower
  by how far its own scores overshoot their nominal rate: ``log10`` of the share of its readings (of about the last
  ``horizon``, from ``prior`` readings at the nominal share) whose score lies between ``level`` and the threshold,
  over that share's nominal ``10**-level − 10**-threshold``, at most ``most``; a stream whose scores fall short of
  it reads them higher, by at most ``least`` (default 0: never). Fisher's combination overcounts signals that move
  together, by an amount that differs from stream to stream.
- ``cross`` (``gain``, ``over``, ``ratio``): ``deviation``'s level of each channel of a stream of several is also,
  times ``gain``, its miss from a least-squares fit on the other channels over its window (fitted on the readings
  before it), against the window's misses, where the miss reaches ``over`` and ``ratio`` times the level: a channel
  that leaves its siblings' relation stands out inside its own range.
- ``phase-novelty`` (``acf``, ``k``, ``pmax``): ``novelty`` of a lane with a period (``seasonal``'s) is the distance
  of its representation to those at the same moment of its last ``k`` periods, not to the nearest remembered one of
  any moment: a normal value at the wrong phase is near some earlier moment but not near the same one.
- ``young-gate`` (``margin``, ``age``): a stream's gate reads each score ``margin · exp(−n / age)`` lower, ``n`` its
  scored readings: a young stream, whose record, run peaks and budget are still unlearned, needs more surprise.
- ``peak-fade`` (``tau``, ``floor``): each remembered run peak falls toward the threshold by a share of its height
  above it per reading (time constant ``tau``), not by ``peak_decay`` (with ``floor`` 1, by at least that): a very
  loud run no longer raises the bar for a life.
- ``late-bar`` (``start``, ``rise``, ``span``): a stream's gate reads each score lower by ``rise`` times the share of
  ``span`` readings it has been judged on beyond its ``start``-th: a long-lived stream needs more surprise.
- ``growing-refractory`` (``share``, ``most``): the refractory period after an alert is at least ``share`` of the
  stream's scored readings so far (up to ``most``), not ``refractory`` whatever its age: one event on a stream watched
  for weeks pages once over a span in proportion to what has been watched.
- ``spent-peaks`` (``decay``): while a stream is over its alert budget its remembered run peaks fall by ``decay`` per
  reading instead of ``peak_decay``: a stream that keeps alerting remembers how loud its surprises get for longer.
- ``lone-model`` (``floor``, ``cap``): a lane whose ``deviation`` surprise is under ``floor`` scores at most ``cap``
  (just under the threshold by default): the model's signals alone, with the reading ordinary against its window,
  cannot alert through the plain bar.
- ``mean-range`` (``k``, ``lag``, ``tol``, ``after``): a lane also leaves its range (``RangeRecord``) when the mean of
  a channel's last ``k`` readings lies more than ``tol`` of the range of such means beyond every one that ended at
  least ``lag`` readings earlier (default ``k``), once ``after`` means are recorded: a sustained shift or a drift
  inside a noisy channel's spread of single readings.
- ``phase-range`` (``tol``, ``cycles``, ``width``, ``need``): a lane also leaves its range when a channel with a cycle
  (``SeasonalRecord``) reads more than ``tol`` of its whole range beyond every reading at the same moment (within
  ``width`` of a cycle) of its last ``cycles`` cycles the seasonal record holds, once it holds ``need``: a normal value
  at the wrong moment of the cycle.
- ``range-free``: an alert of the range path alone (its reading left its range, its score below the threshold)
  spends none of the stream's alert budget.
- ``range-calm`` (``gap``): a reading beyond its range alerts only where its channel has not left its range (alerting
  or not) within its last ``gap`` readings.
- ``range-young`` (``age``): a reading must leave its range by ``range_tol`` times ``age`` over the lane's recorded
  readings (at least ``range_tol``): a young range asks more.
- ``range-in-budget`` (``slack``): the range path alerts only while the stream's recent alerts (decayed) are at most
  its budget plus ``slack``; over it, a reading beyond its range must beat the raised bar like any other.
- ``surprise-scores``: every alert scores its own surprise, as before the scores said what the gate decided (an
  alert below the threshold keeps its lower score); the alerts are the committed ones, only the tuned figure moves.
- ``signal-tail`` (``dofs``, ``/``-separated in ``SIGNALS`` order): each signal judged under a Student-t tail of its
  own degrees of freedom (0: the Gaussian) instead of ``tail_dof`` for all.
- ``segment-novelty`` (``k``): ``novelty`` of the mean of the lane's last ``k`` representations instead of the last
  one's, so that a collective fault is judged by a segment's representation rather than one step's.
- ``discord`` (``m``, ``znorm``): ``novelty`` of the raw readings instead of the representation: each lane's last ``m``
  readings (a multichannel lane: at most the model's dimensions over its channels each) less their mean, over their
  own spread (``znorm`` 1) or the stream's robust scale in its first 15 % (0), judged against the remembered ones.
- ``cycle-profile`` (``rate``, ``signals``, ``side``): on a lane with a scheduled channel, ``novelty`` (with
  ``signals`` 1 both model signals) is judged and learned less its habitual excess at the same moment of the cycle
  (an average per moment, ``rate`` per cycle, less the signal's slow average; with ``side`` 0 a habitually low moment
  is raised too): a model signal that peaks at every daily edge no longer reads as a tail there.

The ``deviation`` prototypes recompute the level from the stream's raw values in sliding windows of the last
``deviation_window`` readings, where the monitor windows the float32 readings since the stream's last reset: with
``gap=0`` that reproduces the committed row to within a fraction of a point, not exactly (``window-gap:gap=0``).
"""
from __future__ import annotations

import argparse
import math
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from typing import Callable, Iterator
from unittest import mock

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

import detector_replay as dr
from trep_edge.runtime.core import detector as detector_module
from trep_edge.runtime.core.detector import (
    DEVIATION_MIN_VALUES, MODEL_SIGNALS, SIGNALS, AlertGate, DetectorConfig, SignalPrior, SignalStats,
    beyond_range, window_deviation,
)
from trep_edge.runtime.core.preprocess import robust_location_scale
from trep_edge.runtime.core.stream_state import StreamState
from trep_edge.training.evaluation.detection_corpus import Stream
from trep_edge.training.evaluation.detection_metrics import probation
from trep_edge.runtime.core.seasonal import cycle_fit, find_period


@dataclass
class Prototype:
    """One idea: patches applied while it replays, and a rewrite of each stream's tape (None: the tape as captured)."""

    patches: Callable[[], Iterator[None]]
    rewrite: Callable[[Stream, list], list] | None = None


def _patching(target: object, **attributes: object) -> Prototype:
    """A prototype that replaces ``attributes`` of ``target`` (a class or module) while it replays."""

    @contextmanager
    def patches() -> Iterator[None]:
        with mock.patch.multiple(target, **attributes):
            yield

    return Prototype(patches)


def quiet_record(
    low: float = 3.5, margin: float = 0.5, after: float = 500, decay: float = 0.0, start: float = 0
) -> Prototype:
    """A score of at least ``low`` that beats the stream's decayed record of its scores by ``margin`` alerts."""
    decide, reset = AlertGate.decide, AlertGate.reset_streams

    def best_of(gate: AlertGate) -> np.ndarray:
        best = getattr(gate, "_quiet_best", np.full(0, -np.inf))
        if len(best) < len(gate.scored_):  # streams added since
            best = np.concatenate([best, np.full(len(gate.scored_) - len(best), -np.inf)])
            gate._quiet_best = best
        return best

    def on_decide(self: AlertGate, idx: np.ndarray, score: np.ndarray, *inputs: np.ndarray | None):
        since = np.minimum(self.since_[idx] + 1, self.refractory + 1)
        in_run = self.alerted_[idx].copy()
        count = self.scored_[idx] + np.isfinite(score)
        alert, warming, learn, frozen = decide(self, idx, score, *inputs)
        best = best_of(self)
        record = best[idx] - decay
        judged = np.isfinite(score) & ~warming
        quiet = (judged & (count >= after) & (score >= low) & (score >= record + margin) & (since > self.refractory)
                 & ~alert & ~in_run)  # fmt: skip
        self.since_[idx[quiet]] = 0
        self.spent_[idx[quiet]] += 1
        best[idx] = np.where(judged & (count >= start), np.fmax(record, score), record)
        return alert | quiet, warming, learn & ~quiet, frozen

    def on_reset(self: AlertGate, streams: np.ndarray) -> None:
        reset(self, streams)
        best_of(self)[self._rows(streams)] = -np.inf

    return _patching(AlertGate, decide=on_decide, reset_streams=on_reset)


def brown(rho: float = 0.4) -> Prototype:
    """Brown's method at a common correlation ``rho`` in place of Fisher's (``combine_surprise``)."""
    try:
        from scipy import special
    except ImportError as exc:  # scipy comes with stumpy
        raise SystemExit("the brown prototype needs scipy: pip install -e '.[bench]'") from exc
    cov = 3.263 * rho + 0.710 * rho**2 + 0.027 * rho**3  # covariance of −2 ln p for two signals correlated at rho

    def combine(surprise: np.ndarray) -> np.ndarray:
        s = np.asarray(surprise, dtype=np.float64)
        seen = np.isfinite(s) | np.isposinf(s)
        k = seen.sum(axis=1).astype(np.float64)
        x = 2 * np.where(seen, s, 0.0).sum(axis=1) * math.log(10.0)  # −2 Σ ln p
        var, mean = 4 * k + k * (k - 1) * cov, 2 * k
        with np.errstate(divide="ignore", invalid="ignore"):
            c, f = var / (2 * mean), 2 * mean**2 / var  # x / c ~ χ² with f degrees of freedom
            out = -np.log10(special.gammaincc(f / 2, x / (2 * c)))
            far = ~np.isfinite(out) & (k > 0)  # log Q(a, z) ≈ (a − 1) ln z − z − ln Γ(a) where Q underflows
            a, z = f[far] / 2, x[far] / (2 * c[far])
            out[far] = -((a - 1) * np.log(z) - z - special.gammaln(a)) / math.log(10.0)
        return np.where(k > 0, np.where(np.isposinf(x), np.inf, out), np.nan)

    return _patching(detector_module, combine_surprise=combine)


def signal_horizon(horizons: str = "1000/1000/500") -> Prototype:
    """Each signal's statistics forget at a horizon of its own (``SignalStats.learn`` caps counts per column)."""
    per_signal = np.array([int(h) for h in str(horizons).split("/")])
    if len(per_signal) != len(SIGNALS):
        raise SystemExit(f"signal-horizon needs {len(SIGNALS)} horizons ({'/'.join(SIGNALS)}), got {horizons!r}")
    init = SignalStats.__init__

    def on_init(self: SignalStats, k: int, *args, **kwargs) -> None:
        init(self, k, *args, **kwargs)
        self.horizon = per_signal[:k]  # broadcast over the [n, K] counts

    return _patching(SignalStats, __init__=on_init)


def early_horizon(early: float = 300, age: float = 1500) -> Prototype:
    """The model signals forget at ``early`` values while their lane has learned fewer than ``age`` readings."""
    learn, model = SignalStats.learn, np.isin(SIGNALS, MODEL_SIGNALS)

    def on_learn(self: SignalStats, idx: np.ndarray, x: np.ndarray, baseline: np.ndarray) -> None:
        young = self.pos_[idx] < age  # readings the lane has learned (its short-term ring's position)
        cap = young[:, None] & model[None, : self.k]
        self.count_[idx] = np.where(cap, np.minimum(self.count_[idx], int(early) - 1), self.count_[idx])
        learn(self, idx, x, baseline)

    return _patching(SignalStats, learn=on_learn)


def growing_horizon(share: float = 0.25, most: float = 4000) -> Prototype:
    """Each lane's statistics forget at a horizon of ``share`` of the readings it has learned (at least the committed
    ``horizon``, at most ``most``): a young stream keeps a current baseline, and a long-lived one's baseline stops
    following the quiet stretches between its bursts."""
    learn = SignalStats.learn

    def on_learn(self: SignalStats, idx: np.ndarray, x: np.ndarray, baseline: np.ndarray) -> None:
        committed = self.horizon
        cap = np.clip((share * self.pos_[idx]).astype(np.int64), committed, int(most))
        self.count_[idx] = np.minimum(self.count_[idx], cap[:, None] - 1)
        self.pairs_[idx] = np.minimum(self.pairs_[idx], cap - 1)
        self.horizon = np.iinfo(np.int64).max  # the caps above stand in for it during this call
        try:
            learn(self, idx, x, baseline)
        finally:
            self.horizon = committed

    return _patching(SignalStats, learn=on_learn)


def _companion(host: StreamState, name: str, make: Callable[[], StreamState]) -> StreamState:
    """A prototype's own per-stream state kept beside ``host``'s as ``name``: made on first use, and given the streams
    ``host`` has added since."""
    if name not in host.__dict__:
        setattr(host, name, make())
    part = host.__dict__[name]
    if part.n_streams < host.n_streams:
        part.add_streams(host.n_streams - part.n_streams)
    return part


def slow_floor(share: float = 0.5, slow: float = 4000) -> Prototype:
    """Each signal's variance is at least ``share`` of a slow one (a horizon of ``slow`` values, learned from the same
    values as the committed statistics), which still learn and forget at the committed horizon: a quiet stretch no
    longer narrows a long-lived stream's spread below what its life has shown, while its mean and the spread above
    that floor recover from a disturbance as fast as before."""
    learn, scale = SignalStats.learn, SignalStats._scale

    def on_learn(self: SignalStats, idx: np.ndarray, x: np.ndarray, baseline: np.ndarray) -> None:
        # The slow statistics are a second SignalStats of the same lanes, learned by the committed (unpatched) update.
        companion = _companion(self, "slow_", lambda: SignalStats(self.k, int(slow), short=1))
        learn(companion, idx, x, baseline)
        learn(self, idx, x, baseline)

    def on_scale(self: SignalStats, idx: np.ndarray) -> np.ndarray:
        companion = self.__dict__.get("slow_")  # none yet, or the companion itself (its own learn reads its scale)
        if companion is None:
            return scale(self, idx)
        floor = np.where(companion.count_[idx] >= 2, share * companion.var_[idx], 0.0)
        std = np.sqrt(np.fmax(self.var_[idx], floor))
        return np.where((self.count_[idx] >= 2) & (std > 0), std, np.nan)

    return _patching(SignalStats, learn=on_learn, _scale=on_scale)


class _RunEnds(StreamState):
    """``run_rate``'s memory: each stream's last ``size`` ended runs at or above the threshold, their peaks ``peak_``
    (−inf = none) and the steps they ended at ``end_``."""

    def __init__(self, size: int, n_streams: int = 0) -> None:
        self.size = int(size)
        super().__init__(n_streams)

    def _fresh(self, n: int) -> dict[str, np.ndarray]:
        return {"peak_": np.full((n, self.size), -np.inf), "end_": np.full((n, self.size), -10**12, dtype=np.int64)}

    def _config(self) -> dict:
        return {"size": self.size}


def run_rate(k: float = 2, span: float = 1500, memory: float = 8) -> Prototype:
    """The bar is also the ``k``-th largest peak of the stream's runs at or above the threshold that ended within the
    last ``span`` steps, at its full height (the committed run peaks lose ``peak_decay`` per reading, so spikes that
    recur every few hundred readings each beat the decayed peaks of the ones before); ``memory`` runs remembered.

    An alert that does not reach that bar is undone: the refractory period, budget, schedule and last-alert score
    stay as they were before it, and its run may still alert later in the run if it reaches the bar."""
    decide, kth, size = AlertGate.decide, int(k), int(memory)

    def on_decide(self: AlertGate, idx: np.ndarray, score: np.ndarray, *inputs: np.ndarray | None):
        ends = _companion(self, "rate_", lambda: _RunEnds(size))
        peak, end = ends.peak_, ends.end_
        now = self.steps_[idx] + 1
        recent = np.where(now[:, None] - end[idx] <= span, peak[idx], -np.inf)
        bar = -np.sort(-recent, axis=1)[:, kth - 1]
        before = {name: getattr(self, name)[idx].copy() for name in ("since_", "last_", "spent_", "times_", "run_")}
        alert, warming, learn, frozen = decide(self, idx, score, *inputs)
        with np.errstate(invalid="ignore"):
            veto = alert & ~frozen & (score >= self.threshold) & (score <= bar)
        rows = idx[veto]
        self.since_[rows] = np.minimum(before["since_"][veto] + 1, self.refractory + 1)
        self.last_[rows] = before["last_"][veto]
        self.spent_[rows] -= 1
        self.times_[rows] = before["times_"][veto]
        self.alerted_[rows] = False
        ended = np.isfinite(before["run_"]) & ~np.isfinite(self.run_[idx])
        for row in np.flatnonzero(ended):  # the run's peak joins the ring in place of its oldest entry
            s = idx[row]
            oldest = int(np.argmin(end[s]))
            peak[s, oldest], end[s, oldest] = before["run_"][row], now[row]
        return alert & ~veto, warming, learn, frozen

    return _patching(AlertGate, decide=on_decide)


class _RunLengths(StreamState):
    """``persist``'s memory: each stream's current run of readings at or above its bar (``len_``) and how long its
    last alerted run lasted (``alerted_len_``; a large number before any alert)."""

    def _fresh(self, n: int) -> dict[str, np.ndarray]:
        return {"len_": np.zeros(n, dtype=np.int64), "alerted_len_": np.full(n, 10**9, dtype=np.int64)}

    def _config(self) -> dict:
        return {}


def persist(n: float = 10, short: float = 0, beat: float = 0) -> Prototype:
    """Inside the refractory period a new run (not the alerted one going on) alerts once it has stayed at or above
    the bar for ``n`` readings in a row, if the stream's last alerted run lasted fewer than ``short`` readings
    (0: ``n``) and the reading's score is at least ``beat`` times the last alert's: a one-reading spike's alert no
    longer holds back a sustained fault that follows it, which escalation misses when the fault is not twice as
    surprising as the spike was."""
    decide, need = AlertGate.decide, int(n)
    brief = int(short) or need

    def on_decide(self: AlertGate, idx: np.ndarray, score: np.ndarray, *inputs: np.ndarray | None):
        runs = _companion(self, "persist_", _RunLengths)
        inside = np.minimum(self.since_[idx] + 1, self.refractory + 1) <= self.refractory
        alert, warming, learn, frozen = decide(self, idx, score, *inputs)
        hot = self.hot_[idx] > 0
        length = np.where(hot, runs.len_[idx] + 1, 0)
        loud = score >= beat * self.last_[idx] if beat else np.ones(len(idx), dtype=bool)
        extra = hot & inside & ~alert & ~self.alerted_[idx] & (length >= need) & (runs.alerted_len_[idx] < brief) & loud
        rows = idx[extra]
        self.alerted_[rows] = True
        self.since_[rows] = 0
        self.last_[rows] = score[extra]
        self.spent_[rows] += 1
        runs.len_[idx] = length
        runs.alerted_len_[idx] = np.where(self.alerted_[idx], length, runs.alerted_len_[idx])
        return alert | extra, warming, learn, frozen

    return _patching(AlertGate, decide=on_decide)


def step_full(m: float = 3.0) -> Prototype:
    """A step at least ``m`` times the bar a step must reach to count (``step_record`` times the channel's recent
    record) counts in ``deviation`` in full, not as the root of level and step: a jump of tens of noise scales inside
    a smooth cycle's range (a daily curve lifted at once) read as about 2 robust scales and never alerted."""
    fold = detector_module.fold_step

    def on_fold(parts: np.ndarray, bar: np.ndarray) -> np.ndarray:
        out, step = fold(parts, bar), parts[:, 1]
        with np.errstate(invalid="ignore"):
            return np.where(step >= m * bar, np.fmax(out, step), out)

    return _patching(detector_module, fold_step=on_fold)


def prior_spread(k: float = 2.0, weight: float = 0) -> Prototype:
    """The card prior's variance of each model signal (``MODEL_SIGNALS``) times ``k``, at ``weight`` readings' worth
    (0: ``prior_weight``): a per-stream model's prior comes from its own training readings, whose signals are smaller
    and steadier than those of readings it never saw."""
    plain = SignalPrior.from_card.__func__

    def from_card(cls: type, card_prior: dict, signals: tuple, configured: int) -> SignalPrior | None:
        prior = plain(cls, card_prior, signals, int(weight) or configured)
        if prior is None:
            return None
        var = tuple(v * float(k) if s in MODEL_SIGNALS else v for s, v in zip(signals, prior.var))
        return SignalPrior(prior.mean, var, prior.count)

    return _patching(SignalPrior, from_card=classmethod(from_card))


def _windows(x: np.ndarray, span: int) -> np.ndarray:
    """The last ``span`` readings of one channel ``[T]`` at each reading, NaN before it starts: ``[T, span]``."""
    return sliding_window_view(np.concatenate([np.full(span - 1, np.nan), x]), span)


def _levels(x: np.ndarray, span: int, gap: int = 0, lag: int = 0) -> np.ndarray:
    """``deviation``'s level of each reading of one channel ``[T]`` against its last ``span`` readings, less the
    ``gap`` before it; with ``lag``, of the differences ``x_t − x_{t−lag}`` instead."""
    if lag:
        x = np.concatenate([np.full(lag, np.nan), x[lag:] - x[:-lag]])
    windows = _windows(x, span)
    if gap:
        windows = np.concatenate([np.full((len(windows), gap), np.nan), windows[:, : span - 1 - gap], windows[:, -1:]],
                                 axis=1)  # fmt: skip
    return window_deviation(windows[:, :, None])[:, 0, 0]


def _with_levels(
    stream: Stream, tape: list, level: Callable[[np.ndarray], np.ndarray], lower: bool = False, apart: bool = False
) -> list:
    """The tape with each step's ``deviation`` level replaced by ``level`` of its channel's raw values at its row
    (``lower``: by the smaller of the two, the tape's kept where ``level`` is NaN; ``apart``: see
    ``_with_channel_levels``)."""
    return _with_stream_levels(stream, tape, lambda x: [level(x[:, c]) for c in range(x.shape[1])], lower, apart)


def _with_stream_levels(
    stream: Stream, tape: list, levels: Callable[[np.ndarray], list[np.ndarray] | None], lower: bool = False,
    apart: bool = False,
) -> list:
    """The tape with each step's ``deviation`` level of channel ``c`` replaced by ``levels(x)[c]`` at its row, ``x``
    the stream's raw values ``[T, C]`` in float64 (``apart``: see ``_with_channel_levels``); ``levels`` returning
    None keeps the tape.

    Sepsis streams keep their tape: the ICU model's window (49) is shorter than ``deviation_window``, which the raw
    sliding windows here assume."""
    if stream.category == "sepsis":
        return tape
    channel_levels = levels(stream.values.astype(np.float64))
    return tape if channel_levels is None else _with_channel_levels(tape, channel_levels, lower, apart)


def _with_channel_levels(tape: list, levels: list[np.ndarray], lower: bool = False, apart: bool = False) -> list:
    """The tape with each step's ``deviation`` level of channel ``c`` replaced by ``levels[c]`` at the step's row
    (``lower``: by the smaller of the two, so that a NaN of ``levels`` keeps the tape's); with ``apart`` the new
    level goes into a third slot beside the plain parts (``[m, 3, C]``, for ``_judged_apart``)."""
    pick = np.fmin if lower else (lambda old, new: new)
    out, row = [], -1
    for call in tape:
        if call[0] == "row":
            row = call[1]
        elif call[0] == "step" and row >= 0 and call[6] is not None:
            deviation = call[6].copy()  # [m, 2, C]: a lane per channel ([m, 2, 1]) or one lane of every channel
            if apart:
                deviation = np.concatenate([deviation, deviation[:, :1]], axis=1)
            slot = 2 if apart else 0
            if deviation.shape[2] == 1:
                deviation[:, slot, 0] = pick(deviation[:, 0, 0], [levels[int(lane)][row] for lane in call[2]])
            else:
                deviation[0, slot, :] = pick(deviation[0, 0, :], [level[row] for level in levels])
            call = (*call[:6], deviation, *call[7:])
        out.append(call)
    return out


def window_gap(gap: int = 4) -> Prototype:
    """``deviation``'s level against the window less the ``gap`` readings before the scored one."""
    span = DetectorConfig().deviation_window

    def rewrite(stream: Stream, tape: list) -> list:
        return _with_levels(stream, tape, lambda x: _levels(x, span, int(gap)))

    return Prototype(_no_patches, rewrite)


def context(span: int = 1024, where: int = 0) -> Prototype:
    """``deviation``'s level is the smaller of the reading's against the committed window and against its last
    ``span`` readings: a reading counts as far out only if it is far out in both, so a daily rise that leaves the
    last few hours' range but not the day's stays small. ``where`` 0: everywhere, both levels from the raw values;
    1 or 2: only where the committed window's earlier readings are all equal (1) or their quartiles tie (2), a
    channel at rest whose every stir is judged on the scale floor, and there the smaller of the tape's level and the
    longer stretch's; elsewhere the tape's level stays (a count channel's on its bent scale)."""
    committed, span, where = DetectorConfig().deviation_window, int(span), int(where)
    if where not in (0, 1, 2):
        raise ValueError(f"prototype context: where must be 0 (everywhere), 1 (all equal) or 2 (quartiles tie), "
                         f"got {where}")

    def level(x: np.ndarray) -> np.ndarray:
        if not where:
            return np.fmin(_levels(x, committed), _levels(x, span))
        earlier = _windows(x, committed)[:, :-1]
        with warnings.catch_warnings():  # a window before the stream's start is all NaN: never at rest
            warnings.simplefilter("ignore", RuntimeWarning)
            if where == 1:
                rest = np.nanmax(earlier, axis=1) == np.nanmin(earlier, axis=1)
            else:
                q25, q75 = np.nanpercentile(earlier, [25, 75], axis=1)
                rest = q25 == q75
        return np.where(rest, _levels(x, span), np.nan)  # NaN: the tape's level stays

    def rewrite(stream: Stream, tape: list) -> list:
        return _with_levels(stream, tape, level, lower=bool(where))

    return Prototype(_no_patches, rewrite)


def seasonal(
    acf: float = 0.3, pmax: int = 1000, lower: float = 0, gain: float = 1.0, judge: float = 0, above: float = -math.inf,
    trust: float = 0, loud: float = 4.0, ratio: float = 0.5, need: int = 5, skip: float = math.inf, lag: int = 0,
    distrust: float = 0, fit: float = math.inf,
) -> Prototype:
    """``deviation``'s level is also the reading's against the one a period earlier, where the stream has a period;
    with ``lower``, only where it is both (the smaller of the two, the seasonal one times ``gain``, and only where the
    plain level exceeds ``above``); with ``judge`` as well, the smaller one is judged and the plain one learned
    (``_judged_apart``). With ``trust`` a channel is lowered only once it has earned it: of its readings so far whose
    plain level reached ``loud``, at least ``need`` and a share ``trust`` had a seasonal level under ``ratio`` times
    the plain one (the period earlier foretold them), so a channel whose loud readings are news is never lowered.
    ``distrust`` lowers the other channels instead, those whose loud readings have not been foretold. ``skip``: see
    ``_judged_apart``; ``lag``: this lag on every channel instead of a period found. ``fit``: only on a channel that
    keeps to its period (``seasonal.cycle_fit`` under ``fit`` in the part the period was found in)."""
    span = DetectorConfig().deviation_window
    pick = np.fmin if lower else np.fmax

    def trusted(plain: np.ndarray, season: np.ndarray) -> np.ndarray:
        """Whether each reading's channel had, before it, enough loud readings foretold by the period earlier."""
        with np.errstate(invalid="ignore"):
            was_loud = plain >= loud
            foretold = was_loud & (season < ratio * plain)
        seen = np.concatenate([[0], np.cumsum(was_loud)[:-1]])
        hits = np.concatenate([[0], np.cumsum(foretold)[:-1]])
        return (hits >= need) & (hits >= trust * seen)

    def level(x: np.ndarray) -> np.ndarray:
        first = x[: max(probation(len(x)), 200)]
        period = int(lag) or find_period([first], acf, int(pmax))
        plain = _levels(x, span)
        if not period:
            return plain
        if math.isfinite(fit) and not cycle_fit(first, period) < fit:
            return plain
        season = _levels(x, span, lag=period)
        with np.errstate(invalid="ignore"):
            lowered = np.where(plain <= above, plain, pick(plain, gain * season))
        if not trust:
            return lowered
        earned = trusted(plain, season)
        return np.where(~earned if distrust else earned, lowered, plain)

    if judge and not lower:
        raise ValueError("seasonal judge=1 needs lower=1: a raised level judged but not learned is always news")

    def rewrite(stream: Stream, tape: list) -> list:
        return _with_levels(stream, tape, level, lower=bool(judge), apart=bool(judge))

    return Prototype(partial(_judged_apart, skip) if judge else _no_patches, rewrite)


@contextmanager
def _judged_apart(skip: float = math.inf) -> Iterator[None]:
    """``Detector.step`` for tapes whose ``deviation`` parts carry a third slot, a level to judge in place of the
    plain one (``_with_channel_levels``'s ``apart``): the plain parts fold and are learned as committed, and the
    lane's surprise judges the third slot's level, folded against the same step record, instead. A lane whose plain
    level reaches ``skip`` and whose judged one is lower learns no ``deviation`` this reading: a foretold loud
    reading neither widens the statistics nor, lowered, narrows them."""
    step, fold = detector_module.Detector.step, detector_module.StepRecord.fold

    def on_step(
        self: detector_module.Detector, stream_idx: np.ndarray, lanes: np.ndarray, lane_of: np.ndarray,
        distance: np.ndarray, z: np.ndarray, deviation: np.ndarray | None = None, repeat: np.ndarray | None = None,
        reading: np.ndarray | None = None,
    ) -> detector_module.DetectorStep:
        if deviation is None or np.shape(deviation)[1] == 2 or "deviation" not in self.config.signals:
            return step(self, stream_idx, lanes, lane_of, distance, z, deviation, repeat, reading)
        deviation = np.asarray(deviation, dtype=np.float64)
        valid = np.isfinite(np.asarray(distance, dtype=np.float64))
        rows = np.asarray(lanes, dtype=np.int64)[valid]
        kept = self.steps.peak_[rows].copy(), self.steps.seen_[rows].copy()
        judged = np.full((len(valid), self.channels), np.nan)
        judged[valid] = fold(self.steps, rows, deviation[valid][:, [2, 1]])[0]
        self.steps.peak_[rows], self.steps.seen_[rows] = kept  # the step itself records the steps, once
        column = self.config.signals.index("deviation")
        lane_judged, skipped = np.fmax.reduce(judged, axis=1), set()
        if math.isfinite(skip):
            plain = np.full((len(valid), self.channels), np.nan)
            plain[valid] = fold(self.steps, rows, deviation[valid][:, :2])[0]
            self.steps.peak_[rows], self.steps.seen_[rows] = kept
            lane_plain = np.fmax.reduce(plain, axis=1)
            with np.errstate(invalid="ignore"):
                lowered = (lane_plain >= skip) & (lane_judged < lane_plain)
            skipped = set(np.asarray(lanes, dtype=np.int64)[lowered].tolist())
        surprise, learn = self.stats.surprise, self.stats.learn

        def on_surprise(idx: np.ndarray, x: np.ndarray) -> np.ndarray:
            x = x.copy()
            x[:, column] = lane_judged  # a lane's worst channel, as the step takes it
            return surprise(idx, x)

        def on_learn(idx: np.ndarray, x: np.ndarray, baseline: np.ndarray) -> None:
            if skipped:
                x = x.copy()
                x[np.isin(idx, list(skipped)), column] = np.nan
            learn(idx, x, baseline)

        self.stats.surprise, self.stats.learn = on_surprise, on_learn
        try:
            return step(self, stream_idx, lanes, lane_of, distance, z, deviation[:, :2], repeat, reading)
        finally:
            del self.stats.surprise, self.stats.learn

    with mock.patch.object(detector_module.Detector, "step", on_step):
        yield


def shift(k: int = 8, gain: float = 0.0) -> Prototype:
    """``deviation``'s level is also the mean of the last ``k`` readings against the window before them, times
    ``gain`` (0: ``sqrt(k)``, the mean's smaller spread under white noise): a sustained shift of a noisy channel
    shows in the mean long before any one reading stands out."""
    span, k = DetectorConfig().deviation_window, int(k)
    factor = float(gain) or math.sqrt(k)

    def level(x: np.ndarray) -> np.ndarray:
        windows = _windows(x, span)
        earlier, recent = windows[:, : span - k], windows[:, span - k :]
        loc, scale = robust_location_scale(earlier)
        enough = (np.isfinite(earlier).sum(axis=1) >= DEVIATION_MIN_VALUES) & np.isfinite(recent).all(axis=1)
        with np.errstate(invalid="ignore"):
            moved = np.where(enough, factor * np.abs(recent.mean(axis=1) - loc) / scale, np.nan)
        return np.fmax(_levels(x, span), moved)

    def rewrite(stream: Stream, tape: list) -> list:
        return _with_levels(stream, tape, level)

    return Prototype(_no_patches, rewrite)


def _recent_mean_levels(x: np.ndarray, span: int, k: int) -> np.ndarray:
    """The mean of the last ``k`` values of ``[T]`` at each reading against the means of ``k`` values earlier in its
    window of ``span`` (those ending before the last ``k`` began), in their own robust scale; NaN without enough."""
    padded = np.concatenate([np.full(span - 1, np.nan), x])
    means = sliding_window_view(padded, k).mean(axis=1)  # means[j]: values padded[j .. j + k − 1]
    # The window ending at reading t spans padded[t .. t + span − 1]; its last mean starts at t + span − k, and
    # the earlier means that end before it start at t .. t + span − 2k.
    windows = sliding_window_view(means, span - k + 1)
    earlier, recent = windows[:, : span - 2 * k + 1], windows[:, -1]
    loc, scale = robust_location_scale(earlier)
    enough = (np.isfinite(earlier).sum(axis=1) >= DEVIATION_MIN_VALUES) & np.isfinite(recent)
    with np.errstate(invalid="ignore"):
        return np.where(enough, np.abs(recent - loc) / scale, np.nan)


def mean_shift(k: int = 8, span: int = 0, gain: float = 1.0) -> Prototype:
    """``deviation``'s level is also the mean of the last ``k`` readings against the means of ``k`` readings earlier
    in the last ``span`` (0: the committed window; those ending before the last ``k`` began), in their own robust
    scale, times ``gain``: ``shift`` with a gain that each window measures, so a k-mean of a noisy channel stands out
    by its smaller spread while on a smooth channel, whose means spread as its readings do, it adds nothing. With a
    ``span`` longer than the committed window (``drift``), a slow drift that window follows as it moves still leaves
    the longer stretch's range."""
    committed, k = DetectorConfig().deviation_window, int(k)
    span = int(span) or committed

    def level(x: np.ndarray) -> np.ndarray:
        return np.fmax(_levels(x, committed), float(gain) * _recent_mean_levels(x, span, k))

    def rewrite(stream: Stream, tape: list) -> list:
        return _with_levels(stream, tape, level)

    return Prototype(_no_patches, rewrite)


def rhythm(k: int = 16, gain: float = 1.0) -> Prototype:
    """``deviation``'s level is also the mean size of the last ``k`` steps (``|x_t − x_{t−1}|``) against such means
    ending before them in the window, in their own robust scale, times ``gain``: a channel that moves faster or
    rougher than its window did (a frequency change of a smooth cycle) stands out though no reading leaves its range."""
    span, k = DetectorConfig().deviation_window, int(k)

    def level(x: np.ndarray) -> np.ndarray:
        steps = np.abs(np.diff(x, prepend=np.nan))
        return np.fmax(_levels(x, span), float(gain) * _recent_mean_levels(steps, span, k))

    def rewrite(stream: Stream, tape: list) -> list:
        return _with_levels(stream, tape, level)

    return Prototype(_no_patches, rewrite)


def _representations(tape: list, rows: int) -> dict[int, np.ndarray]:
    """Each lane's representation at each row of a tape: ``{lane: [rows, F]}``, NaN where a row has none."""
    out: dict[int, np.ndarray] = {}
    steps = [call for call in tape if call[0] == "step"]
    for row, call in zip(dr.step_rows(tape), steps, strict=True):
        for lane, z in zip(call[2], call[5]) if row >= 0 else ():
            out.setdefault(int(lane), np.full((rows, len(z)), np.nan))[row] = z
    return out


def _readout_residuals(z: np.ndarray, x: np.ndarray, h: int, refit: int, ridge: float, fit: float = 0.0) -> np.ndarray:
    """``x_t`` less its ridge readout from the representation ``h`` rows earlier, the readout refitted every
    ``refit`` rows on the pairs seen before them (at least 200); NaN before, and where the readout explains less than
    ``fit`` of those pairs' variance."""
    out = np.full(len(x), np.nan)
    source = np.concatenate([np.full((h, z.shape[1]), np.nan), z[:-h]])
    ok = np.isfinite(source).all(axis=1) & np.isfinite(x)
    for start in range(0, len(x), refit):
        seen = np.flatnonzero(ok[:start])
        if len(seen) < 200:
            continue
        mean, std = source[seen].mean(axis=0), source[seen].std(axis=0) + 1e-9

        def design(rows: np.ndarray | slice) -> np.ndarray:
            return np.column_stack([(source[rows] - mean) / std, np.ones(len(source[rows]))])

        a, y = design(seen), x[seen]
        coef = np.linalg.solve(a.T @ a + ridge * np.eye(a.shape[1]), a.T @ y)
        if fit and np.var(y - a @ coef) > (1 - fit) * np.var(y):
            continue
        block = slice(start, start + refit)
        with np.errstate(invalid="ignore"):
            out[block] = x[block] - design(block) @ coef
    return out


def readout(h: int = 8, refit: int = 100, ridge: float = 10.0, gain: float = 1.0, fit: float = 0.0) -> Prototype:
    """``deviation``'s level is also the reading's miss from a linear readout of the lane's representation ``h``
    readings earlier (ridge, refitted every ``refit`` readings on the stream's pairs so far), judged against the
    misses of the window, times ``gain``: a reading ordinary in size but not what the representation led to expect (a
    normal value at the wrong phase, a cycle that changed its speed). With ``fit``, only while the readout explains
    at least that share of the variance of the pairs it was fitted on (a predictable carrier)."""
    span, h, refit = DetectorConfig().deviation_window, int(h), int(refit)

    def rewrite(stream: Stream, tape: list) -> list:
        def levels(values: np.ndarray) -> list[np.ndarray]:
            lanes = _representations(tape, len(values))
            out = []
            for c in range(values.shape[1]):
                z = lanes[sorted(lanes)[c if len(lanes) == values.shape[1] else 0]]
                miss = _readout_residuals(z, values[:, c], h, refit, ridge, fit)
                out.append(np.fmax(_levels(values[:, c], span), float(gain) * _levels(miss, span)))
            return out

        return _with_stream_levels(stream, tape, levels)

    return Prototype(_no_patches, rewrite)


def skew_scale(floor: float = 0.5) -> Prototype:
    """``deviation``'s level in the scale of the window's half on the reading's side: (q75 − median) / 0.6745 above
    the median, (median − q25) / 0.6745 below, each at least ``floor`` times the symmetric IQR scale; a skewed
    window (counts, bursts) judges its long side by its own spread, a symmetric one as before."""
    span = DetectorConfig().deviation_window

    def level(x: np.ndarray) -> np.ndarray:
        windows = _windows(x, span)
        earlier, last = windows[:, :-1], windows[:, -1]
        loc, scale = robust_location_scale(earlier)
        enough = np.isfinite(earlier).sum(axis=1) >= DEVIATION_MIN_VALUES
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            q75, q25 = np.nanpercentile(earlier, [75, 25], axis=1)
            half = np.where(last >= loc, q75 - loc, loc - q25) / 0.6745
            side = np.fmax(half, float(floor) * scale)
            return np.where(enough, np.abs(last - loc) / side, np.nan)

    def rewrite(stream: Stream, tape: list) -> list:
        return _with_levels(stream, tape, level)

    return Prototype(_no_patches, rewrite)


def constant_none() -> Prototype:
    """No ``deviation`` level for a reading whose earlier window has no spread at all (every earlier value equal):
    the committed scale floor (1 % of the window's level, at least 1e-3) is in the window's units, so a change after
    a constant stretch read as 48 or as 4,500 robust scales depending on the channel's level and the card's
    normalisation, and such a value learnt during warm-up widened the lane's statistics for hundreds of readings."""
    span = DetectorConfig().deviation_window

    def level(x: np.ndarray) -> np.ndarray:
        windows = _windows(x, span)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            flat = np.nanmax(windows[:, :-1], axis=1) == np.nanmin(windows[:, :-1], axis=1)
        return np.where(flat, np.nan, window_deviation(windows[:, :, None])[:, 0, 0])

    def rewrite(stream: Stream, tape: list) -> list:
        return _with_levels(stream, tape, level)

    return Prototype(_no_patches, rewrite)


def segment_novelty(k: int = 8) -> Prototype:
    """``novelty`` of the mean of the lane's last ``k`` representations (since its last reset) instead of the last
    one's: a collective fault (a changed frequency, a distorted cycle, a drift) moves a segment's representation
    steadily, where one step's representation also carries that step's noise."""
    k = int(k)

    def rewrite(stream: Stream, tape: list) -> list:
        recent: dict[int, list[np.ndarray]] = {}
        out = []
        for call in tape:
            if call[0] == "reset":
                for lane in call[2]:
                    recent.pop(int(lane), None)
            elif call[0] == "step":
                z = call[5].copy()
                for i, lane in enumerate(call[2]):
                    if np.isfinite(call[4][i]):
                        ring = recent.setdefault(int(lane), [])
                        ring.append(call[5][i].astype(np.float64))
                        del ring[:-k]
                        z[i] = np.mean(ring, axis=0)
                call = (*call[:5], z, *call[6:])
            out.append(call)
        return out

    return Prototype(_no_patches, rewrite)


def _shapes(x: np.ndarray, m: int, scale: float, znorm: bool) -> np.ndarray:
    """The last ``m`` readings of one channel ``[T]`` at each reading, less their mean, over their own standard
    deviation (``znorm``, at least a tenth of ``scale``) or over ``scale``: ``[T, m]``, missing readings 0."""
    w = _windows(x, m)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a window of no value yet
        centred = w - np.nanmean(w, axis=1, keepdims=True)
        spread = np.fmax(np.nanstd(w, axis=1, keepdims=True), 0.1 * scale) if znorm else scale
    return np.nan_to_num(centred / spread, nan=0.0)


def discord(m: int = 32, znorm: float = 1) -> Prototype:
    """``novelty`` of the raw readings instead of the representation: the memory holds each lane's recent shapes (its
    last ``m`` readings less their mean, per channel, over their own spread with ``znorm`` or over the stream's
    robust scale in its first 15 % without), so a reading scores by how unlike every remembered shape of its stream
    its last ``m`` readings are, a left discord of the matrix profile within the memory's reach."""
    m = int(m)

    def rewrite(stream: Stream, tape: list) -> list:
        x = stream.values.astype(np.float64)
        head = x[: max(probation(len(x)), 2)]
        scales = robust_location_scale(head.T)[1]
        out, row = [], -1
        shapes = None
        for call in tape:
            if call[0] == "row":
                row = call[1]
            elif call[0] == "step" and row >= 0:
                z = np.zeros_like(call[5])
                dims, channels = z.shape[1], x.shape[1]
                if shapes is None:
                    per = min(m, dims if call[6] is None or call[6].shape[2] == 1 else dims // channels)
                    shapes = [_shapes(x[:, c], per, float(scales[c]), bool(znorm)) for c in range(channels)]
                if call[6] is not None and call[6].shape[2] == channels and channels > 1:
                    flat = np.concatenate([s[row] for s in shapes])
                    z[:, : len(flat)] = flat
                else:
                    for i, lane in enumerate(call[2]):
                        z[i, : shapes[int(lane)].shape[1]] = shapes[int(lane)][row]
                call = (*call[:5], z, *call[6:])
            out.append(call)
        return out

    return Prototype(_no_patches, rewrite)


PHASE_MARK = np.float32(1e30)
"""``phase-novelty`` marks a step's representation slot with this in column 1 when column 0 carries its novelty."""


def _phase_novelty(z: np.ndarray, period: int, k: int) -> np.ndarray:
    """Distance of each row's representation ``z [T, F]`` to the nearest of those ``period``, ``2·period``, …
    ``k·period`` rows earlier (NaN rows skipped; NaN where none is there)."""
    out = np.full(len(z), np.inf)
    for j in range(1, k + 1):
        lag = j * period
        if lag >= len(z):
            break
        dist = np.sqrt(np.sum((z[lag:] - z[:-lag]) ** 2, axis=1))
        out[lag:] = np.fmin(out[lag:], dist)
    return np.where(np.isfinite(out), out, np.nan)


def phase_novelty(acf: float = 0.3, k: int = 3, pmax: int = 1000) -> Prototype:
    """``novelty`` of a periodic lane is the distance of its representation to those at the same phase of its last
    ``k`` periods instead of to the nearest remembered one of any phase: a normal value at the wrong phase, or a
    cycle gone faster or out of shape, is near some earlier moment but not near the same moment of the cycle. The
    period is ``seasonal``'s (the first autocorrelation peak of at least ``acf`` at lags 4 to ``pmax`` in the stream's
    first 15 %, at least 200 readings; a lane of several channels takes its first periodic channel's); a lane without
    one keeps the committed ``novelty``. The tape's representation slot carries the value (``PHASE_MARK``)."""
    k, pmax = int(k), int(pmax)
    plain = detector_module.RepresentationMemory.novelty

    def novelty(self: detector_module.RepresentationMemory, idx: np.ndarray, z: np.ndarray) -> np.ndarray:
        marked = z[:, 1] == PHASE_MARK
        return np.where(marked, z[:, 0].astype(np.float64), plain(self, idx, z))

    def rewrite(stream: Stream, tape: list) -> list:
        # Charted vitals miss readings: ``find_period`` would close the gaps up, not time.
        if stream.category == "sepsis":
            return tape
        x = stream.values.astype(np.float64)
        head = x[: max(probation(len(x)), 200)]
        periods = [find_period([head[:, c]], acf, pmax) for c in range(x.shape[1])]
        lanes = _representations(tape, len(x))
        several = len(lanes) != x.shape[1]
        values = {}
        for lane, z in lanes.items():
            period = next((p for p in periods if p), 0) if several else periods[lane]
            if period:
                values[lane] = _phase_novelty(z, period, k)
        if not values:
            return tape
        out, row = [], -1
        for call in tape:
            if call[0] == "row":
                row = call[1]
            elif call[0] == "step" and row >= 0 and any(int(lane) in values for lane in call[2]):
                z = call[5].copy()
                for i, lane in enumerate(call[2]):
                    if int(lane) in values:
                        z[i] = 0.0
                        z[i, 0], z[i, 1] = values[int(lane)][row], PHASE_MARK
                call = (*call[:5], z, *call[6:])
            out.append(call)
        return out

    return Prototype(_patching(detector_module.RepresentationMemory, novelty=novelty).patches, rewrite)


def _cross_residuals(x: np.ndarray, c: int, span: int) -> np.ndarray:
    """Channel ``c`` of ``[T, C]`` less its least-squares fit on the other channels (and a constant), over each
    reading's last ``span`` readings, the fit made on the earlier ones only: ``[T, span]``, NaN where a reading
    misses a channel or fewer than ``DEVIATION_MIN_VALUES`` earlier readings are whole."""
    padded = np.concatenate([np.full((span - 1, x.shape[1]), np.nan), x])
    windows = sliding_window_view(padded, span, axis=0)  # [T, C, span]
    y = windows[:, c]
    others = np.delete(windows, c, axis=1).transpose(0, 2, 1)  # [T, span, C − 1]
    design = np.concatenate([np.ones(y.shape + (1,)), others], axis=2)
    whole = np.isfinite(y) & np.isfinite(design).all(axis=2)
    fit_rows = whole.copy()
    fit_rows[:, -1] = False
    yd, dd = np.where(whole, y, 0.0), np.where(whole[:, :, None], design, 0.0)
    w = fit_rows[:, :, None]
    gram = np.einsum("tsi,tsj->tij", dd * w, dd)
    moment = np.einsum("tsi,ts->ti", dd * w, yd)
    ridge = 1e-9 * np.trace(gram, axis1=1, axis2=2)[:, None, None] + 1e-12
    enough = fit_rows.sum(axis=1) >= DEVIATION_MIN_VALUES
    gram[~enough] = np.eye(gram.shape[1])
    beta = np.linalg.solve(gram + ridge * np.eye(gram.shape[1]), moment[:, :, None])[:, :, 0]
    residual = yd - np.einsum("tsi,ti->ts", dd, beta)
    return np.where(whole & enough[:, None], residual, np.nan)


def cross(gain: float = 1.0, over: float = 0.0, ratio: float = 0.0) -> Prototype:
    """``deviation``'s level of each channel of a stream of several is also, times ``gain``, its miss from a fit on
    the stream's other channels over its window (made on the readings before it), against the window's misses: a
    channel that leaves its sibling channels' relation (a sensor drifting from its twin, a fault in one of several
    coupled measurements) stands out even inside its own range, while a process event that moves every coupled
    channel together reads as before. With ``over`` and ``ratio`` the miss counts only where it reaches ``over`` and
    ``ratio`` times the committed level, so that a coupled stream's ordinary readings keep their level."""
    span = DetectorConfig().deviation_window

    def levels(x: np.ndarray) -> list[np.ndarray] | None:
        if x.shape[1] < 2:
            return None
        out = []
        for c in range(x.shape[1]):
            miss = window_deviation(_cross_residuals(x, c, span)[:, :, None])[:, 0, 0]
            level = _levels(x[:, c], span)
            with np.errstate(invalid="ignore"):
                counts = (miss >= over) & (miss >= ratio * level)
            out.append(np.where(counts, np.fmax(level, float(gain) * miss), level))
        return out

    def rewrite(stream: Stream, tape: list) -> list:
        return _with_stream_levels(stream, tape, levels)

    return Prototype(_no_patches, rewrite)


class _Overshoot(StreamState):
    """``calibrated``'s counts: each stream's readings scored ``n_`` and those between the level and the threshold
    ``hits_``, both fading over the horizon."""

    def _fresh(self, n: int) -> dict[str, np.ndarray]:
        return {"n_": np.zeros(n), "hits_": np.zeros(n)}

    def _config(self) -> dict:
        return {}


def calibrated(
    level: float = 2.0, horizon: float = 2000.0, prior: float = 200.0, most: float = 2.0, least: float = 0.0
) -> Prototype:
    """Each stream's gate reads its scores lower by the log10 of how many times more often than nominal its scores
    lie between ``level`` and the threshold (module docstring); readings at or above the threshold count as scored,
    not as hits, so a fault's run does not lower the stream's later scores."""
    decide, keep = AlertGate.decide, float(np.exp(-1.0 / horizon))

    def on_decide(self: AlertGate, idx: np.ndarray, score: np.ndarray, *inputs: np.ndarray | None):
        counts = _companion(self, "overshoot_", _Overshoot)
        nominal = 10.0 ** -level - 10.0 ** -self.threshold
        share = (counts.hits_[idx] + prior * nominal) / (counts.n_[idx] + prior)
        lower = np.clip(np.log10(share / nominal), -least, most)
        out = decide(self, idx, score - lower, *inputs)
        scored = np.isfinite(score)
        with np.errstate(invalid="ignore"):
            hit = scored & (score >= level) & (score < self.threshold)
        counts.n_[idx] = counts.n_[idx] * keep + scored
        counts.hits_[idx] = counts.hits_[idx] * keep + hit
        return out

    return _patching(AlertGate, decide=on_decide)


def young_gate(margin: float = 1.0, age: float = 1500.0) -> Prototype:
    """A young stream's gate reads each score ``margin · exp(−n / age)`` lower (``n``: the stream's scored readings),
    so that its first alerts need more surprise while its record, run peaks and budget are still unlearned; the
    margin fades with the stream's age, not with its alerts (a budget with no free alerts delayed faults' first
    alerts in the alert-budget round)."""
    return _reads_lower(lambda scored: margin * np.exp(-scored / age))


def _reads_lower(by: Callable[[np.ndarray], np.ndarray]) -> Prototype:
    """A prototype whose gate reads each score lower by ``by(n)``, ``n`` the stream's scored readings so far."""
    decide = AlertGate.decide

    def on_decide(self: AlertGate, idx: np.ndarray, score: np.ndarray, *inputs: np.ndarray | None):
        return decide(self, idx, score - by(self.scored_[idx]), *inputs)

    return _patching(AlertGate, decide=on_decide)


def late_bar(start: float = 5000.0, rise: float = 1.0, span: float = 10_000.0) -> Prototype:
    """An old stream's gate reads each score ``rise · clip((n − start) / span, 0, 1)`` lower (``n``: the stream's
    scored readings): the more readings a stream has been judged on, the more chances it has had to raise a false
    alarm by chance, so the bar rises with its life once it is older than the benchmark's streams of one fault."""
    return _reads_lower(lambda scored: rise * np.clip((scored - start) / span, 0.0, 1.0))


def peak_fade(tau: float = 2000.0, floor: float = 0) -> Prototype:
    """Each remembered run peak falls toward the threshold by a share ``1 − exp(−1 / tau)`` of its height above it
    per reading, instead of by ``peak_decay`` whatever its height: a run of surprise 80 (a model meeting activity its
    training slice never held) no longer keeps the bar above every later fault for 15,000 readings, while a peak of 14
    falls about as fast as before (``tau`` 2,000: 0.005 a reading at first). With ``floor`` 1 a peak falls by at
    least ``peak_decay`` too, so only peaks high enough to fall faster that way change."""
    decide, keep = AlertGate.decide, math.exp(-1.0 / tau)

    def on_decide(self: AlertGate, idx: np.ndarray, score: np.ndarray, *inputs: np.ndarray | None):
        # The committed decide subtracts peak_decay from every remembered peak; hand it the faded peak plus that.
        peaks = self.peaks_[idx]
        above = np.isfinite(peaks) & (peaks > self.threshold)
        faded = self.threshold + (peaks - self.threshold) * keep
        if floor:
            faded = np.fmin(faded, peaks - self.peak_decay)
        self.peaks_[idx] = np.where(above, faded + self.peak_decay, peaks)
        return decide(self, idx, score, *inputs)

    return _patching(AlertGate, decide=on_decide)


def growing_refractory(share: float = 0.05, most: float = 2000.0) -> Prototype:
    """The refractory period is the larger of ``refractory`` and ``share`` of the stream's scored readings (at most
    ``most``): a stream watched for weeks gives one event, and what follows it, a span in proportion to its watched
    life before it pages again, while a young stream keeps the committed period. The period grows by at most one
    reading per reading (``share`` ≤ 1), so a stream quiet for longer than it stays free to alert."""
    decide = AlertGate.decide

    def on_decide(self: AlertGate, idx: np.ndarray, score: np.ndarray, *inputs: np.ndarray | None):
        committed = self.refractory
        grown = np.minimum(np.ceil(share * (self.scored_[idx] + 1)), most).astype(np.int64)
        self.refractory = np.maximum(committed, grown)
        try:
            return decide(self, idx, score, *inputs)
        finally:
            self.refractory = committed

    return _patching(AlertGate, decide=on_decide)


def spent_peaks(decay: float = 0.001) -> Prototype:
    """While a stream has spent its alert budget (more than ``budget`` recent alerts), its remembered run peaks fall by
    ``decay`` per reading instead of ``peak_decay``: on long streams the alerts beyond the budget come at surprise
    8–16, the level of the stream's own earlier runs, whose peaks had faded within about 2,000 readings; a stream
    within its budget (most of the benchmark's, with their one to three faults) keeps the committed decay."""
    decide = AlertGate.decide

    def on_decide(self: AlertGate, idx: np.ndarray, score: np.ndarray, *inputs: np.ndarray | None):
        # The committed decide subtracts peak_decay from every remembered peak; give back what it should not take.
        over = self.spent_[idx] * self._keep > self.budget
        self.peaks_[idx] = np.where(over[:, None], self.peaks_[idx] + (self.peak_decay - decay), self.peaks_[idx])
        return decide(self, idx, score, *inputs)

    return _patching(AlertGate, decide=on_decide)


def learn_cap(cap: float = 30.0) -> Prototype:
    """``deviation`` enters its lane's long-run statistics at most ``cap`` (robust units); it is still judged whole.

    A window that was constant until its last reading (a quantised channel's long hold) gives a deviation of
    hundreds or thousands, since its scale is the floor of ``robust_location_scale``; one such value entered the
    statistics as it was and widened their spread for thousands of readings, which silenced every later fault."""
    column = SIGNALS.index("deviation")
    learn = SignalStats.learn

    def on_learn(self: SignalStats, idx: np.ndarray, x: np.ndarray, baseline: np.ndarray) -> None:
        x = np.array(x, dtype=np.float64)
        if x.shape[1] == len(SIGNALS):
            x[:, column] = np.fmin(x[:, column], cap)
        learn(self, idx, x, baseline)

    return _patching(SignalStats, learn=on_learn)


def winsor(clip: float = 3.0) -> Prototype:
    """Every signal enters its lane's long-run statistics at most ``clip`` of their standard deviations from their
    mean, on either side; it is still judged whole, and the short-term ring keeps the value as it was.

    A fault's tail that stays under the alert bar (and an ordinary burst) is learned in full and widens the spread
    for about ``horizon`` readings; clipped, it moves the statistics no more than a tail value would."""
    learn = SignalStats.learn

    def on_learn(self: SignalStats, idx: np.ndarray, x: np.ndarray, baseline: np.ndarray) -> None:
        x = np.asarray(x, dtype=np.float64)
        reach = clip * self._scale(idx)
        mean = self.mean_[idx]
        learn(self, idx, np.where(np.isfinite(reach), np.clip(x, mean - reach, mean + reach), x), baseline)
        self.recent_[idx, :, (self.pos_[idx] - 1) % self.short] = x

    return _patching(SignalStats, learn=on_learn)


def adaptive_tail(cut: float = 2.5, weight: float = 200.0, dofs: str = "4/6/8/12/20/0") -> Prototype:
    """Each lane's signals under the tail of ``dofs`` (0: the Gaussian) whose chance of exceeding ``cut`` is nearest
    (in log) to the share of the lane's learned values that did (``SignalStats`` gains that share per lane and
    signal)."""
    fresh, learn = SignalStats._fresh, SignalStats.learn
    tails_of = [int(d) for d in str(dofs).split("/")]
    log_chance = -np.array([detector_module._surprise(np.array([cut]), d)[0] for d in tails_of])

    def on_fresh(self: SignalStats, n: int) -> dict[str, np.ndarray]:
        out = fresh(self, n)
        start = 10.0 ** -detector_module._surprise(np.array([cut]), self.tail_dof)[0]
        out["exceed_"] = np.full((n, self.k), start)
        return out

    def on_learn(self: SignalStats, idx: np.ndarray, x: np.ndarray, baseline: np.ndarray) -> None:
        std = np.sqrt(self.var_[idx])
        ok = np.isfinite(x) & np.asarray(baseline, dtype=bool)[:, None] & (self.count_[idx] >= 2) & (std > 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            over = (x - self.mean_[idx]) > cut * std
        rate = 1.0 / np.maximum(np.minimum(self.count_[idx] + 1, self.horizon), weight)
        self.exceed_[idx] += np.where(ok, rate * (over - self.exceed_[idx]), 0.0)
        learn(self, idx, x, baseline)

    def on_surprise(self: SignalStats, idx: np.ndarray, x: np.ndarray) -> np.ndarray:
        chosen["dof"] = np.abs(np.log10(np.maximum(self.exceed_[idx], 1e-9))[..., None] - log_chance).argmin(axis=-1)
        try:
            return surprise(self, idx, x)
        finally:
            chosen.pop("dof")

    def tails(z: np.ndarray, dof: int) -> np.ndarray:
        if "dof" not in chosen:  # not a lane's signals (a call from elsewhere): the tail it asks for
            return judge(z, dof)
        out = np.full(z.shape, np.nan)
        for k, d in enumerate(tails_of):
            pick = chosen["dof"] == k
            out[pick] = judge(z[pick], d)
        return out

    chosen: dict[str, np.ndarray] = {}
    surprise, judge = SignalStats.surprise, detector_module._surprise

    @contextmanager
    def patches() -> Iterator[None]:
        with mock.patch.multiple(SignalStats, _fresh=on_fresh, learn=on_learn, surprise=on_surprise), \
                mock.patch.object(detector_module, "_surprise", tails):
            yield

    return Prototype(patches)


def lone_model(floor: float = 2.0, cap: float = 3.9) -> Prototype:
    """A lane whose ``deviation`` surprise is under ``floor`` scores at most ``cap`` (module docstring). Most alerts
    that the model's ``distance`` carries while ``deviation`` is ordinary are false alarms under per-stream models
    (docs/detection.md, the seed-ensemble round)."""
    combine = detector_module.Detector.combine

    def on_combine(self: detector_module.Detector, lanes: np.ndarray, surprise: np.ndarray) -> np.ndarray:
        out = combine(self, lanes, surprise)
        if "deviation" not in self.config.signals:
            return out
        with np.errstate(invalid="ignore"):
            ordinary = ~(surprise[:, self.config.signals.index("deviation")] >= floor)
        return np.where(ordinary, np.fmin(out, cap), out)

    return _patching(detector_module.Detector, combine=on_combine)


def surprise_scores() -> Prototype:
    """Every alert scores its own surprise, as before the scores said what the gate decided: an alert below the
    threshold (the quiet, range and stuck paths) keeps its lower score, which a threshold swept over the scores
    misses. The alerts are the committed ones; only the corpus-tuned figure can move."""
    step = detector_module.Detector.step

    def on_step(self: detector_module.Detector, *args: object) -> detector_module.DetectorStep:
        out = step(self, *args)
        return replace(out, score=np.where(out.alert & ~out.warming, out.surprise, out.score))

    return _patching(detector_module.Detector, step=on_step)


def mean_range(k: float = 16, lag: float = -1, tol: float = 0.1, after: float = 300) -> Prototype:
    """A lane also leaves its range when the mean of a channel's last ``k`` readings lies more than ``tol`` of the
    range of such means beyond every one that ended at least ``lag`` readings earlier (-1: ``k``), once ``after``
    means are recorded: a sustained shift or a drift inside a noisy channel's spread of single readings."""
    k, lag, after = int(k), int(k if lag < 0 else lag), int(after)
    fresh, beyond = detector_module.RangeRecord._fresh, detector_module.RangeRecord.beyond

    def on_fresh(self: detector_module.RangeRecord, n: int) -> dict[str, np.ndarray]:
        c = self.channels
        return {**fresh(self, n), "ring_": np.full((n, c, k), np.nan), "queue_": np.full((n, c, max(lag, 1)), np.nan),
                "mlo_": np.full((n, c), np.inf), "mhi_": np.full((n, c), -np.inf),
                "mseen_": np.zeros(n, dtype=np.int64)}

    def on_beyond(self: detector_module.RangeRecord, idx: np.ndarray, reading: np.ndarray) -> np.ndarray:
        plain = beyond(self, idx, reading)
        x = np.asarray(reading, dtype=np.float64).reshape(len(idx), self.channels)
        ring = self.ring_[idx]
        ring[:, :, 0] = x  # over the oldest of the last k, which the roll below brings to slot 0
        mean = ring.mean(axis=2)  # NaN until k readings in a row
        lo, hi = self.mlo_[idx], self.mhi_[idx]
        span = hi - lo
        known = np.isfinite(span) & (span > 0) & (self.mseen_[idx] >= after)[:, None]
        out = known & beyond_range(mean, lo, hi, tol * np.where(known, span, 0.0))
        queue = self.queue_[idx]
        old = queue[:, :, -1] if lag else mean
        queue = np.roll(queue, 1, axis=2)
        queue[:, :, 0] = mean
        self.queue_[idx] = queue
        self.mlo_[idx], self.mhi_[idx] = np.fmin(lo, old), np.fmax(hi, old)
        self.mseen_[idx] += np.isfinite(old).any(axis=1)
        self.ring_[idx] = np.roll(ring, 1, axis=2)
        return plain | out.any(axis=1)

    return _patching(detector_module.RangeRecord, _fresh=on_fresh, beyond=on_beyond)


def phase_range(tol: float = 0.1, cycles: float = 7, width: float = 0.02, need: float = 3) -> Prototype:
    """A lane also leaves its range when a channel with a cycle (``SeasonalRecord.period_``) reads more than ``tol``
    of its whole range (``RangeRecord``) beyond every reading at the same moment (within ``width`` of a cycle) of its
    last ``cycles`` cycles that the seasonal record still holds, once it holds ``need`` of them: a normal value at
    the wrong moment of the cycle."""
    cycles, need = int(cycles), int(need)
    step, beyond = detector_module.Detector.step, detector_module.RangeRecord.beyond

    def on_step(self: detector_module.Detector, *args: object) -> detector_module.DetectorStep:
        self.range._seasons = self.seasons  # the record the range's check reads (written before it in the step)
        return step(self, *args)

    def on_beyond(self: detector_module.RangeRecord, idx: np.ndarray, reading: np.ndarray) -> np.ndarray:
        seasons = getattr(self, "_seasons", None)
        x = np.asarray(reading, dtype=np.float64).reshape(len(idx), self.channels)
        span = (self.hi_[idx] - self.lo_[idx]).copy()
        plain = beyond(self, idx, reading)
        if seasons is None or not seasons.size:
            return plain
        period = seasons.period_[idx]
        rows, ch = np.nonzero((period > 0) & np.isfinite(x) & np.isfinite(span) & (span > 0)
                              & (self.seen_[idx] >= self.least)[:, None])  # fmt: skip
        out = np.zeros(len(idx), dtype=bool)
        for r, c in zip(rows.tolist(), ch.tolist()):
            lane, p = int(idx[r]), int(period[r, c])
            t = int(seasons.seen_[lane]) - 1  # the reading's slot: the step pushed it before this check
            w = max(1, round(width * p))
            reach = [j * p for j in range(1, cycles + 1) if j * p + w <= t and j * p + w < seasons.size]
            if len(reach) < need:
                continue
            back = np.concatenate([t - j + np.arange(-w, w + 1) for j in reach])
            seen = seasons.ring_[lane, c, back % seasons.size].astype(np.float64)
            if not np.isfinite(seen).any():
                continue
            lo, hi, margin = np.nanmin(seen), np.nanmax(seen), tol * span[r, c]
            out[r] |= bool(beyond_range(x[r, c], lo, hi, margin))
        return plain | out

    @contextmanager
    def patches() -> Iterator[None]:
        with mock.patch.object(detector_module.Detector, "step", on_step), \
                mock.patch.object(detector_module.RangeRecord, "beyond", on_beyond):
            yield

    return Prototype(patches)


def range_free() -> Prototype:
    """An alert of the range path alone (its reading left its range, its score below the threshold) spends none of
    the stream's alert budget: each one widens the range, so they are rare by construction."""
    decide = AlertGate.decide

    def on_decide(self: AlertGate, idx: np.ndarray, score: np.ndarray, *inputs: np.ndarray | None):
        out = decide(self, idx, score, *inputs)
        beyond = inputs[1] if len(inputs) > 1 and inputs[1] is not None else None
        if beyond is not None:
            with np.errstate(invalid="ignore"):
                ranged = out[0] & ~out[3] & np.asarray(beyond, dtype=bool) & ~(score >= self.threshold)
            self.spent_[idx[ranged]] -= 1
        return out

    return _patching(AlertGate, decide=on_decide)


def range_calm(gap: float = 500) -> Prototype:
    """A channel's reading beyond its range alerts only where the channel has not left its range (by ``range_tol`` of
    it, alerting or not: while the lane is young, in a refractory period) within its last ``gap`` readings: a channel
    that keeps setting new extremes is still finding its range or wanders, and its next exit is not news."""
    gap = int(gap)
    fresh, beyond = detector_module.RangeRecord._fresh, detector_module.RangeRecord.beyond

    def on_fresh(self: detector_module.RangeRecord, n: int) -> dict[str, np.ndarray]:
        return {**fresh(self, n), "calm_": np.full((n, self.channels), gap, dtype=np.int64)}

    def on_beyond(self: detector_module.RangeRecord, idx: np.ndarray, reading: np.ndarray) -> np.ndarray:
        x = np.asarray(reading, dtype=np.float64).reshape(len(idx), self.channels)
        lo, hi = self.lo_[idx], self.hi_[idx]
        span = hi - lo
        exits = np.isfinite(span) & (span > 0) & beyond_range(x, lo, hi, self.tol * span)
        calm = self.calm_[idx]
        plain = beyond(self, idx, reading)
        self.calm_[idx] = np.where(exits, 0, np.minimum(calm + 1, gap))
        return plain & (exits & (calm >= gap)).any(axis=1)

    return _patching(detector_module.RangeRecord, _fresh=on_fresh, beyond=on_beyond)


def range_young(age: float = 1000) -> Prototype:
    """A young range asks more: a reading must leave its channel's range by ``range_tol`` times ``age`` over the
    readings the lane has recorded (at least ``range_tol``): a range a few hundred readings old has seen little of a
    wandering channel, and the range path's false alarms fall early in a stream's life."""
    beyond = detector_module.RangeRecord.beyond

    def on_beyond(self: detector_module.RangeRecord, idx: np.ndarray, reading: np.ndarray) -> np.ndarray:
        x = np.asarray(reading, dtype=np.float64).reshape(len(idx), self.channels)
        lo, hi = self.lo_[idx], self.hi_[idx]
        margin = (self.tol * np.maximum(1.0, age / np.maximum(self.seen_[idx], 1)))[:, None] * (hi - lo)
        return beyond(self, idx, reading) & beyond_range(x, lo, hi, margin).any(axis=1)

    return _patching(detector_module.RangeRecord, beyond=on_beyond)


def range_in_budget(slack: float = 0.0) -> Prototype:
    """The range path alerts only while the stream is within its alert budget (its recent alerts, decayed, at most
    ``budget`` + ``slack``): over it, a reading beyond its range must beat the raised bar like any other, so a stream
    already past its budget does not spend more of it on a reading whose score stays below the threshold."""
    decide = AlertGate.decide

    def on_decide(self: AlertGate, idx: np.ndarray, score: np.ndarray, *inputs: np.ndarray | None):
        if len(inputs) > 1 and inputs[1] is not None and self.budget_cost:
            within = self.spent_[idx] * self._keep <= self.budget + slack
            inputs = (inputs[0], np.asarray(inputs[1], dtype=bool) & within, *inputs[2:])
        return decide(self, idx, score, *inputs)

    return _patching(AlertGate, decide=on_decide)


def signal_tail(dofs: str = "8/8/4") -> Prototype:
    """Each signal judged under a tail of its own (``dofs``, ``/``-separated even degrees of freedom in ``SIGNALS``
    order, 0 for the Gaussian) instead of ``tail_dof`` for all: the plain-value ``deviation`` is what alarms on
    bursty and heavy-tailed streams, the model signals are not."""
    per_signal = [int(d) for d in str(dofs).split("/")]
    if len(per_signal) != len(SIGNALS):
        raise ValueError(f"signal-tail needs {len(SIGNALS)} tails ({'/'.join(SIGNALS)}), got {dofs!r}")
    surprise, judge = SignalStats.surprise, detector_module._surprise
    inside: list[bool] = []

    def on_surprise(self: SignalStats, idx: np.ndarray, x: np.ndarray) -> np.ndarray:
        inside.append(True)
        try:
            return surprise(self, idx, x)
        finally:
            inside.pop()

    def tails(z: np.ndarray, dof: int) -> np.ndarray:
        if not inside or z.ndim != 2 or z.shape[1] != len(per_signal):  # not a lane's signals: the tail asked for
            return judge(z, dof)
        return np.stack([judge(z[:, k], d) for k, d in enumerate(per_signal)], axis=1)

    @contextmanager
    def patches() -> Iterator[None]:
        with mock.patch.object(SignalStats, "surprise", on_surprise), \
                mock.patch.object(detector_module, "_surprise", tails):
            yield

    return Prototype(patches)


def signal_weight(weights: str = "1/1/1") -> Prototype:
    """Each signal's surprise times its weight (``/``-separated, in ``SIGNALS`` order) before the lane's signals are
    combined: a signal at weight 0.5 counts as the square root of its tail probability, so it alerts alone only when
    twice as surprising and adds less to the others' agreement."""
    weight = np.array([float(w) for w in str(weights).split("/")])
    if len(weight) != len(SIGNALS) or (weight < 0).any():
        raise ValueError(f"signal-weight needs {len(SIGNALS)} weights ({'/'.join(SIGNALS)}) of at least 0, "
                         f"got {weights!r}")
    combine = detector_module.Detector.combine

    def on_combine(self: detector_module.Detector, lanes: np.ndarray, surprise: np.ndarray) -> np.ndarray:
        picked = weight[[SIGNALS.index(name) for name in self.config.signals]]
        return combine(self, lanes, surprise * picked)

    return _patching(detector_module.Detector, combine=on_combine)


def relative_distance(distance: float = 1, novelty: float = 0) -> Prototype:
    """With ``distance``, ``distance`` over the mean size of the reading's unmasked representation (``mean |z|``),
    so that a reading that moves the representation no more than its own size scores as ordinary however loud it
    is; with ``novelty``, the representation itself scaled to a mean size of 1, so ``novelty`` compares the shapes
    of representations rather than their sizes. The raw ``distance`` grows with the reading's amplitude
    (DETECTION_FINDINGS, cause 1), which ``deviation`` already measures."""

    def rewrite(stream: Stream, tape: list) -> list:
        out = []
        for call in tape:
            if call[0] == "step":
                z = np.asarray(call[5], dtype=np.float64)
                size = np.abs(z).mean(axis=1)
                sized = size > 0  # an unscorable lane's zero representation has no size: NaN distance, z kept
                relative = np.asarray(call[4], dtype=np.float64) / np.where(sized, size, np.nan)
                scaled = (z / np.where(sized, size, 1.0)[:, None]).astype(np.float32)
                call = (*call[:4], relative if distance else call[4], scaled if novelty else call[5], *call[6:])
            out.append(call)
        return out

    return Prototype(_no_patches, rewrite)


@contextmanager
def _no_patches() -> Iterator[None]:
    yield


def full_novelty(after: float = 233) -> Prototype:
    """No ``novelty`` (not judged, not learned) until a lane has remembered ``after`` readings since its start or
    reset: a young lane's windows are mostly padding, while a per-stream card's prior describes full windows, and a
    constant feed's first ``novelty``, at reading 33, alerted on a flat line (docs/detection.md, "Missing or weak").
    233 is the evaluator's window of 201 and the memory's exclusion of 32."""
    after = int(after)
    plain = detector_module.RepresentationMemory.novelty

    def novelty(self: detector_module.RepresentationMemory, idx: np.ndarray, z: np.ndarray) -> np.ndarray:
        return np.where(self.phase_[idx] >= after, plain(self, idx, z), np.nan)

    return _patching(detector_module.RepresentationMemory, novelty=novelty)


class _CycleProfile(StreamState):
    """``cycle_profile``'s memory of a lane's model signals (log) at each moment of its scheduled cycle: an
    exponential average per moment ``level_`` ``[S, K, slots]`` (NaN: none yet) from ``seen_`` values, the cycle it is
    kept on ``period_`` (a new cycle starts it afresh) and the signals' slow average over every moment ``base_``."""

    def __init__(self, k: int, slots: int, rate: float, n_streams: int = 0) -> None:
        self.k, self.slots, self.rate = int(k), int(slots), float(rate)
        super().__init__(n_streams)

    def _fresh(self, n: int) -> dict[str, np.ndarray]:
        return {"level_": np.full((n, self.k, self.slots), np.nan), "seen_": np.zeros((n, self.slots)),
                "period_": np.zeros(n, dtype=np.int64), "base_": np.full((n, self.k), np.nan)}  # fmt: skip

    def _config(self) -> dict:
        return {"k": self.k, "slots": self.slots, "rate": self.rate}

    def excess(self, lanes: np.ndarray, period: np.ndarray, at: np.ndarray) -> np.ndarray:
        """Each lane's habitual level at this moment of its cycle less its slow average ``[m, K]`` (0 without a
        cycle or a value yet), shrunk toward 0 while the moment has few values."""
        moved = self.period_[lanes] != period
        self.level_[lanes[moved]], self.seen_[lanes[moved]], self.period_[lanes[moved]] = np.nan, 0, period[moved]
        out = np.zeros((len(lanes), self.k))
        on = (period > 0) & (period <= self.slots)
        rows, slot = lanes[on], at[on] % np.maximum(period[on], 1)
        seen = self.seen_[rows, slot][:, None]
        excess = seen / (seen + 2.0) * (self.level_[rows, :, slot] - self.base_[rows])
        out[on] = np.where(np.isfinite(excess), excess, 0.0)
        return out

    def learn(self, lanes: np.ndarray, x: np.ndarray, period: np.ndarray, at: np.ndarray, baseline: np.ndarray) -> None:
        """Learn each lane's log-signals ``x [m, K]`` at its moment, where ``baseline`` and every signal has a value."""
        on = (period > 0) & (period <= self.slots) & baseline & np.isfinite(x).all(axis=1)
        rows, slot, v = lanes[on], at[on] % np.maximum(period[on], 1), x[on]
        old = self.level_[rows, :, slot]
        self.level_[rows, :, slot] = np.where(np.isfinite(old), old + self.rate * (v - old), v)
        self.seen_[rows, slot] += 1
        base = self.base_[rows]
        self.base_[rows] = np.where(np.isfinite(base), base + (v - base) / CYCLE_BASE, v)


CYCLE_BASE = 500
"""Values over which ``cycle_profile``'s slow average of a signal forgets (the committed ``horizon``)."""


def cycle_profile(rate: float = 0.2, signals: float = 0, side: float = 1) -> Prototype:
    """On a lane with a scheduled channel (``SeasonalRecord``: it keeps to its cycle closely), each model signal is
    judged and learned less its habitual excess at the same moment of the cycle: the signal's exponential average
    (``rate`` per cycle) at that moment less its slow average over every moment. A model's signals on such a lane are
    mostly its cycle's (the moment explains a median 68 % of ``distance``'s variance and 39 % of ``novelty``'s on
    ``bench/periodic_faults.py``'s scheduled lanes), so a daily edge reads as a tail every day. ``signals`` 0 corrects
    ``novelty`` only, 1 both model signals; ``side`` 1 removes only a habitual excess (a moment where the signal is
    habitually high), 0 also raises a moment where it is habitually low. The moment is the lane's reading count less
    one, modulo the longest cycle of its scheduled channels."""
    seasonal_levels = detector_module.Detector._seasonal_levels
    surprise, learn = SignalStats.surprise, SignalStats.learn

    def on_seasonal_levels(
        self: detector_module.Detector, lanes: np.ndarray, reading: np.ndarray | None, plain: np.ndarray | None
    ) -> np.ndarray | None:
        # The lane's cycle and moment for this step, stashed on its statistics for the patched surprise and learn.
        out = seasonal_levels(self, lanes, reading, plain)
        if self.seasonal:
            record = self.seasons
            period = np.max(np.where(record.scheduled_, record.period_, 0), axis=1)
            names = self.config.signals
            chosen = [k for k, name in enumerate(names) if name == "novelty" or (signals and name in MODEL_SIGNALS)]
            self.stats.__dict__["cycle_"] = (period, record.seen_ - 1, chosen, record.size)
        return out

    def correction(self: SignalStats, idx: np.ndarray) -> np.ndarray | None:
        step = self.__dict__.get("cycle_")
        if step is None:
            return None
        period, at, chosen, slots = step
        profile = _companion(self, "cycle_profile_", lambda: _CycleProfile(self.k, slots, rate))
        excess = profile.excess(idx, period[idx], at[idx])
        keep = np.zeros(self.k, dtype=bool)
        keep[chosen] = True
        excess = np.where(keep, np.maximum(excess, 0.0) if side else excess, 0.0)
        # This step's excess per lane, for ``on_learn``: it learns a subset of the lanes judged (those with a value).
        step_excess = np.zeros((self.n_streams, self.k))
        step_excess[idx] = excess
        self.__dict__["cycle_excess_"] = step_excess
        return excess

    def on_surprise(self: SignalStats, idx: np.ndarray, x: np.ndarray) -> np.ndarray:
        excess = correction(self, idx)
        return surprise(self, idx, x if excess is None else x - excess)

    def on_learn(self: SignalStats, idx: np.ndarray, x: np.ndarray, baseline: np.ndarray) -> None:
        step, known = self.__dict__.get("cycle_"), self.__dict__.get("cycle_excess_")
        if step is None or known is None:
            return learn(self, idx, x, baseline)
        period, at, _, _ = step
        self.__dict__["cycle_profile_"].learn(idx, x, period[idx], at[idx], np.asarray(baseline, dtype=bool))
        learn(self, idx, x - known[idx], baseline)

    @contextmanager
    def patches() -> Iterator[None]:
        with mock.patch.multiple(detector_module.Detector, _seasonal_levels=on_seasonal_levels), \
                mock.patch.multiple(SignalStats, surprise=on_surprise, learn=on_learn):
            yield

    return Prototype(patches)


PROTOTYPES: dict[str, Callable[..., Prototype]] = {
    "quiet-record": quiet_record, "brown": brown, "signal-horizon": signal_horizon, "early-horizon": early_horizon,
    "window-gap": window_gap, "seasonal": seasonal, "shift": shift, "mean-shift": mean_shift,
    "drift": partial(mean_shift, k=32, span=1024),
    "rhythm": rhythm,
    "skew-scale": skew_scale, "constant-none": constant_none, "segment-novelty": segment_novelty,
    "learn-cap": learn_cap, "discord": discord, "adaptive-tail": adaptive_tail, "signal-tail": signal_tail,
    "prior-spread": prior_spread, "readout": readout, "context": context, "winsor": winsor,
    "young-gate": young_gate, "growing-horizon": growing_horizon,
    "slow-floor": slow_floor, "run-rate": run_rate,
    "step-full": step_full, "persist": persist, "late-bar": late_bar, "peak-fade": peak_fade,
    "growing-refractory": growing_refractory, "spent-peaks": spent_peaks, "calibrated": calibrated, "cross": cross,
    "phase-novelty": phase_novelty, "lone-model": lone_model, "relative-distance": relative_distance,
    "signal-weight": signal_weight, "full-novelty": full_novelty, "cycle-profile": cycle_profile,
    "surprise-scores": surprise_scores, "mean-range": mean_range, "phase-range": phase_range,
    "range-free": range_free, "range-in-budget": range_in_budget,
    "range-calm": range_calm, "range-young": range_young,
}  # fmt: skip


def parse(spec: str) -> Prototype:
    """A prototype from ``KIND:key=value;...`` (values are numbers, or ``/``-separated for ``horizons``)."""
    kind, _, rest = spec.partition(":")
    if kind not in PROTOTYPES:
        raise ValueError(f"unknown prototype {kind!r}: choose from {', '.join(PROTOTYPES)}")
    params: dict[str, float | str] = {}
    for item in filter(None, rest.split(";")):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"prototype option {item!r} must be key=value")
        try:
            params[key.strip()] = value.strip() if "/" in value else float(value)
        except ValueError:
            raise ValueError(f"prototype option {item!r} needs a number") from None
    try:
        return PROTOTYPES[kind](**params)
    except TypeError as exc:
        raise ValueError(f"prototype {spec!r}: {exc}") from exc


def score_prototypes(bench: dr.Bench, results: dict, prototypes: dict[str, Prototype], base: DetectorConfig) -> None:
    """Add a row to ``results`` for each prototype: ``bench``'s tapes (rewritten, where it rewrites them) replayed
    on a detector of ``base`` settings under its patches."""
    for spec, prototype in prototypes.items():
        began = time.perf_counter()
        tapes = None if prototype.rewrite is None else [
            prototype.rewrite(s, t) for s, t in zip(bench.streams, bench.tapes)]
        with prototype.patches():
            bench.score(results, spec, bench.run(base, tapes), began)


def stream_set_main(
    script: str, description: str, load: Callable[[argparse.Namespace], list[Stream]], streams: int = 0
) -> None:
    """The command line of a script that replays one fixed set of streams (``load``): the committed detector,
    ``--variants``, ``--prototypes`` and ``--peers`` on them, its table printed and written to ``--out``. With
    ``streams`` > 0 the set is drawn stream by stream and ``--streams`` (default ``streams``) says how many ``load``
    builds (``args.streams``): a larger draw keeps the default's streams and adds more."""
    parser = argparse.ArgumentParser(description=description)
    if streams:
        parser.add_argument("--streams", type=int, default=streams, metavar="N",
                            help=f"how many streams to draw (default {streams}; the first ones are the same whatever "
                            "the count)")  # fmt: skip
    dr.add_arguments(parser)
    parser.add_argument("--variants", nargs="*", default=[], help="NAME:key=value;key=value detector variants")
    parser.add_argument("--prototypes", nargs="*", default=[], metavar="KIND:key=value;...",
                        help=f"prototypes to replay ({', '.join(PROTOTYPES)})")
    parser.add_argument("--base", default="", metavar="key=value;...",
                        help="detector settings the prototypes patch (default: the committed ones)")
    dr.add_peers_argument(parser)
    parser.add_argument("--count-from", type=float, default=0.0, metavar="SHARE",
                        help="leave each stream's rows before this share of its length (or its first labelled "
                        "window, if earlier) uncounted: where the set places no fault (0.2 for the long streams)")
    args = parser.parse_args()
    if args.quick or args.categories:
        parser.error("--quick and --categories do not apply: this script has one set of streams")
    if not 0.0 <= args.count_from < 1.0:
        parser.error(f"--count-from {args.count_from}: give a share of a stream's rows, at least 0 and below 1")
    if streams and args.streams < 1:
        parser.error(f"--streams {args.streams}: give at least 1")
    peers, peer_flags = dr.chosen_peers(args, parser)
    variants = dr.committed_and(args.variants, parser)
    try:
        prototypes = {spec: parse(spec) for spec in args.prototypes}
        base = DetectorConfig().with_overrides(args.base)
    except ValueError as exc:
        parser.error(str(exc))
    bench = dr.Bench.load(args, load(args))
    bench.count_from = args.count_from
    flags = (dr.corpus_flags(args) + [f"--streams {args.streams}"] * bool(streams and args.streams != streams)
             + [f"--count-from {args.count_from:g}"] * bool(args.count_from)
             + ["--variants", *(f"'{v}'" for v in args.variants)] * bool(args.variants)
             + ["--base", f"'{args.base}'"] * bool(args.base)
             + ["--prototypes", *(f"'{p}'" for p in args.prototypes)] * bool(args.prototypes) + peer_flags)
    results = bench.results(" ".join([f"python {script}", *flags]), args)
    bench.score_peers(results, peers)
    bench.score_variants(results, variants)
    score_prototypes(bench, results, prototypes, base)
    bench.finish(results, args.out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    dr.add_arguments(parser)
    parser.add_argument("--prototypes", nargs="+", required=True, metavar="KIND:key=value;...",
                        help=f"prototypes to replay ({', '.join(PROTOTYPES)})")
    parser.add_argument("--base", default="", metavar="key=value;...",
                        help="detector settings the prototypes patch (default: the committed ones)")
    args = parser.parse_args()
    try:
        prototypes = {spec: parse(spec) for spec in args.prototypes}
        base = DetectorConfig().with_overrides(args.base)
    except ValueError as exc:
        parser.error(str(exc))
    bench = dr.Bench.load(args)
    if args.check:
        bench.check()
    results = bench.results("python bench/detector_prototypes.py " + " ".join(
        dr.corpus_flags(args) + ["--check"] * args.check
        + ["--base", f"'{args.base}'"] * bool(args.base) + ["--prototypes", *(f"'{p}'" for p in args.prototypes)]),
        args)  # fmt: skip
    began = time.perf_counter()
    bench.score(results, "trep", bench.run(DetectorConfig()), began)
    score_prototypes(bench, results, prototypes, base)
    bench.finish(results, args.out)


if __name__ == "__main__":
    main()
