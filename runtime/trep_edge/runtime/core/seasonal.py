"""A channel's cycle, ``deviation``'s seasonal floor, and scheduled channels: a reading judged against the one a cycle
earlier.

A cycle's normal edges (a beat's peak, a daily rise) lie far out against the last ``deviation_window`` readings but
near the same moment one cycle earlier. ``SeasonalRecord`` keeps each lane's recent readings per channel, finds the
channel's cycle in its first ``DetectorConfig.seasonal_after`` readings (``find_period``) and measures each later
reading's *seasonal level*: its difference from the reading a cycle earlier, against the window of such differences
(``detector.window_deviation``). The detector judges ``deviation`` no larger than ``seasonal_gain`` times that level
and learns the plain one (``Detector.step``), so the signal's statistics stay what they were.

The floor holds only on channels whose loud readings the cycle has not foretold: of a channel's readings so far
whose plain level reached ``seasonal_loud``, once at least ``seasonal_need`` and a share ``seasonal_trust`` had a
seasonal level under ``seasonal_ratio`` times the plain one, the channel is judged plainly again. Lowered on such
channels (ETT-like carriers whose days differ), faults were lost on streams of several faults; measured per-stream,
the floor where the cycle has not foretold the loud readings gains at committed alerts on every corpus
(docs/detection.md, the seasonal-trust and seasonal-floor rounds).

A channel that keeps to its cycle closely (``cycle_fit`` under ``DetectorConfig.seasonal_fit``: a schedule, not a
carrier whose days differ) is *scheduled*, and its ``deviation`` level is the seasonal one outright, judged and
learned: a reading out of step with the cycle (a shift that does not start, a plateau too low, a cycle run late) lies
inside the range its window spans, so its plain level is small, but far from the same moment a cycle earlier
(docs/detection.md, the schedule-fit round). Where the last cycle and an earlier one disagree at a moment (one of
them was out of step), it is compared with the nearer: against the last cycle only, a fault became the reference for
the next cycle's normal readings, which alerted one cycle later (docs/detection.md, the echo round). A cycle a week
back is one such earlier cycle: a working week's Saturday is out of step with its Friday, not with the Saturday
before it (docs/detection.md, the working-week round).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from trep_edge.runtime.core.stream_state import StreamState

MIN_READINGS = 64
"""Finite readings a series needs before its autocorrelation is read."""

MIN_LAG = 4
"""The shortest cycle looked for, as the detector prototypes that search for cycles always did (docs/detection.md)."""

CYCLE_ACF = 0.3
"""The least autocorrelation a cycle of a channel needs for its seasonal floor (``find_period``'s ``acf``)."""


REFINE = 0.03
"""How far, as a share of the cycle found in a lane's first ``after`` readings, the cycle is looked for again against
a week earlier (``SeasonalRecord._look_again``): a day of 288 readings was found as 281–287 in 750 of them."""


SHARP = 0.5
"""A week's best fit must be under this share of its worst within ``REFINE`` (``SeasonalRecord._look_again``): a
schedule's fit falls sharply off its cycle (a share of 0.02–0.38 on the clean schedules and working weeks), while a
carrier found a short spurious cycle fits every lag near a week of it alike (0.84–0.95 on ETT's: the week-relook
round, where one such channel scheduled at a week fit of 0.22 raised 4 false alarms)."""


SCHEDULED_SCALE = 0.02
"""The least scale a scheduled channel's seasonal level is read on, as a share of the standard deviation of the
readings its cycle was found in: a schedule kept exactly (no noise, or readings on a grid that repeat to the digit)
has windows of differences that hold still, whose scale (1e-3) read a change of one unit as a thousand scales. Well
under the noise of the schedules measured (``bench/periodic_faults.py``: 0.03 and up of the spread)."""


DISAGREE = 3.0
"""Two earlier cycles of a scheduled channel disagree at a moment when their readings there lie more than this many
of the channel's typical differences from a cycle earlier apart: one of them was out of step, and the reading is
judged against the nearer one. Where they agree the reading is judged against the last cycle alone: the nearer of two
cycles that agree picks the smaller of two noises, and read against a window of such differences a reading's own
noise reached 5–6 scales where one cycle read 3 (bench/periodic_faults.py: 29 false alarms against 21)."""


def cycle_fit(x: np.ndarray, period: int) -> float:
    """How much of a series' spread its cycle leaves unexplained: the scale of its differences from a cycle earlier
    (their mean absolute deviation, as a standard deviation) over the standard deviation of its finite readings;
    ``inf`` without a cycle, enough differences or any spread. A schedule kept to the reading reads a few hundredths,
    a carrier whose days differ (ETT) 0.6–0.9. The mean deviation, not the quartiles: a quantised channel's
    differences are mostly 0."""
    x = np.asarray(x, dtype=np.float64)
    if period <= 0 or len(x) <= period:
        return np.inf
    d = x[period:] - x[:-period]
    d = d[np.isfinite(d)]
    spread = np.nanstd(x) if np.isfinite(x).any() else 0.0
    if len(d) < MIN_READINGS or not spread:
        return np.inf
    return float(1.2533 * np.mean(np.abs(d - np.median(d))) / spread)


def nearest_difference(now: np.ndarray, last: np.ndarray, earlier: Sequence[np.ndarray], bar: np.ndarray) -> np.ndarray:
    """Each reading's difference from the same moment a cycle earlier (``now − last``), or, where that reading and one
    of ``earlier`` (the same moment 2, 3 … cycles back) lie more than ``bar`` apart (one of them was out of step) or
    the reading a cycle earlier is missing, from the nearer of them. All arrays broadcast alike; NaN = missing."""
    differences = now - last
    for back in earlier:
        other = now - back
        with np.errstate(invalid="ignore"):
            nearer = (np.abs(last - back) > bar) & (np.abs(other) < np.abs(differences)) | np.isnan(differences)
        differences = np.where(nearer, other, differences)
    return differences


def autocorrelation(x: np.ndarray) -> np.ndarray | None:
    """The normalised autocorrelation of ``x``'s finite readings at lags 0 … n − 1 (None: too few, or constant).

    Missing readings are dropped, not filled: the lags of a series with gaps are then counts of readings, not time.
    """
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    if len(x) < MIN_READINGS or not np.std(x):
        return None
    x = x - x.mean()
    spectrum = np.fft.rfft(x, 2 * len(x))  # zero-padded to twice the length: the linear, not circular, correlation
    ac = np.fft.irfft(spectrum * np.conj(spectrum))[: len(x)]
    return ac / ac[0]


def find_period(series: Sequence[np.ndarray], acf: float = 0.3, pmax: int = 1000) -> int:
    """The lag of the highest local peak (first found on ties) of the series' mean autocorrelation, if it reaches
    ``acf``; 0 when none does (or no series has enough readings).

    Args:
        series: 1-D series (channels, or series of one channel); their autocorrelations are averaged up to the
            shortest one's length.
        acf: the least autocorrelation a peak needs to count as a cycle.
        pmax: the longest cycle looked for (and at most half the shortest series).
    """
    curves = [c for c in (autocorrelation(s) for s in series) if c is not None]
    if not curves:
        return 0
    n = min(len(c) for c in curves)
    ac = np.mean([c[:n] for c in curves], axis=0)
    best, lag = acf, 0
    for p in range(MIN_LAG, min(pmax, n // 2)):
        if ac[p] > best and ac[p] >= ac[p - 1] and ac[p] >= ac[p + 1]:
            best, lag = ac[p], p
    return lag


class SeasonalRecord(StreamState):
    """Each lane's recent readings per channel, their cycle, how well they keep to it, and how often it foretold
    their loud readings.

    A lane's first ``after`` readings since its last reset find each channel's cycle (at most ``after // 2 − 1``
    readings; ``after`` 0 keeps nothing) and whether the channel keeps to it (``cycle_fit`` under ``fit``: a
    *scheduled* channel); a ring of ``size`` readings then holds the ``span`` differences from a cycle earlier that a
    seasonal level needs. State: ``ring_`` ``[S, C, size]`` (NaN = none yet), ``seen_`` ``[S]`` (readings written),
    ``period_`` ``[S, C]`` (0 = none, or not looked for yet), ``scheduled_`` ``[S, C]``, ``least_`` ``[S, C]`` (the
    least scale of a scheduled channel's seasonal level, ``SCHEDULED_SCALE``; 0 for others), ``typical_`` ``[S, C]``
    (a scheduled channel's typical difference from a cycle earlier, ``cycle_fit`` times its spread; 0 for others, or
    unknown), ``loud_`` and ``foretold_`` ``[S, C]`` (counts). A scheduled channel's differences are from a cycle
    earlier, or where that cycle and one up to ``cycles`` back, or ``week`` back, disagree (``DISAGREE``), from the
    nearer of them.
    """

    def __init__(
        self, channels: int = 1, span: int = 128, after: int = 750, fit: float = 0.0, cycles: int = 1,
        week: int = 0, week_fit: float = 0.0, n_streams: int = 0,
    ) -> None:
        self.channels, self.span, self.after, self.fit = int(channels), int(span), int(after), float(fit)
        # Only scheduled channels look further back: ``lags`` are the earlier cycles, besides the last, that their
        # readings may be compared with.
        self.cycles, self.week = (int(cycles), int(week)) if self.fit > 0 else (1, 0)
        self.lags = tuple(range(2, self.cycles + 1)) + ((self.week,) if self.week > self.cycles else ())
        # The first ``after`` readings, and the furthest lag's cycles of the longest cycle (after // 2 − 1) with a
        # window of differences behind them; none when ``after`` is 0 (no floor: the detector never pushes).
        reach = max((1, *self.lags)) * (self.after // 2 - 1) + self.span
        self.size = max(self.after, reach) if self.after else 0
        # A week back is read only on channels found scheduled; one whose first ``after`` readings held a weekend
        # is looked at again, against a week earlier, when the ring first holds a week (``_look_again``).
        self.week_fit = float(week_fit) if self.week > self.cycles and self.size > self.after else 0.0
        # The lanes whose channels the last ``push`` scheduled (its cycles found, or looked at again): not state.
        self.settled = np.zeros(0, dtype=np.int64)
        super().__init__(n_streams)

    def _fresh(self, n: int) -> dict[str, np.ndarray]:
        c = self.channels
        return {"ring_": np.full((n, c, self.size), np.nan, dtype=np.float32), "seen_": np.zeros(n, dtype=np.int64),
                "period_": np.zeros((n, c), dtype=np.int64), "scheduled_": np.zeros((n, c), dtype=bool),
                "least_": np.zeros((n, c), dtype=np.float64), "typical_": np.zeros((n, c), dtype=np.float64),
                "loud_": np.zeros((n, c), dtype=np.int64), "foretold_": np.zeros((n, c), dtype=np.int64)}  # fmt: skip

    def _config(self) -> dict[str, Any]:
        return {"channels": self.channels, "span": self.span, "after": self.after, "fit": self.fit,
                "cycles": self.cycles, "week": self.week, "week_fit": self.week_fit}

    def adopted(self, state: Mapping[str, Any]) -> SeasonalRecord:
        """A record of this one's configuration holding the lanes of a saved one (``state_dict`` output) whose ring has
        another size (kept with fewer ``cycles`` or no ``week``, or before the stream-scaled model kept any): each
        lane's last readings that fit this ring lie where it reads them, and its cycles, schedules and counts carry
        over, so an upgrade does not spend a lane's next ``after`` readings finding its cycle again."""
        ring = np.asarray(state["ring_"], dtype=np.float32)
        seen = np.asarray(state["seen_"], dtype=np.int64)
        laid = np.full((len(seen), self.channels, self.size), np.nan, dtype=np.float32)
        t = seen[:, None] - 1 - np.arange(min(ring.shape[2], self.size))  # each lane's last readings, newest first
        lanes, back = np.nonzero(t >= 0)
        t = t[lanes, back]
        laid[lanes, :, t % self.size] = ring[lanes, :, t % ring.shape[2]]
        return self.with_arrays({**state, "ring_": laid})

    def push(
        self, idx: np.ndarray, reading: np.ndarray, skip: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Write each selected lane's reading ``[m, C]`` (NaN = missing); return, for its channels with a cycle and
        not marked in ``skip`` ``[m, C]`` (their seasonal level is not needed: ``unused``), their positions (``rows``
        into ``idx``, ``channels``) and each one's last ``span`` differences from a cycle earlier ``[k, span]``, oldest
        first (NaN before the lane's first reading), whose last value's level is the seasonal one
        (``detector.window_deviation``). On a scheduled channel each difference is ``nearest_difference``'s over the
        same moment 1 … ``cycles`` and ``week`` cycles earlier: one cycle after a fault, the cycle before it is the
        reference, and on a working week's Saturday, the Saturday before it."""
        idx = np.asarray(idx, dtype=np.int64)
        reading = np.asarray(reading, dtype=np.float32).reshape(len(idx), self.channels)
        seen = self.seen_[idx]
        self.ring_[idx, :, seen % self.size] = reading
        self.seen_[idx] = seen + 1
        settled = []
        # The first ``after`` readings sit at ring slots 0 … after − 1.
        for lane in idx[seen + 1 == self.after].tolist():
            history = self.ring_[lane, :, : self.after]
            self.period_[lane] = [find_period([h], CYCLE_ACF, self.after) for h in history]
            fit = np.array([cycle_fit(h, p) for h, p in zip(history, self.period_[lane])])
            spread = np.array([np.nanstd(h) if np.isfinite(h).any() else 0.0 for h in history])
            if self._schedule(lane, fit < self.fit, fit, spread):
                settled.append(lane)
        if self.week_fit:
            settled += [lane for lane in idx[seen + 1 == self.size].tolist() if self._look_again(lane)]
        self.settled = np.array(settled, dtype=np.int64)
        rows, channels = np.nonzero((self.period_[idx] > 0) & (True if skip is None else ~skip))
        # Readings t − span + 1 … t and one cycle before each; a slot before the lane's first reading is NaN, as the
        # ring holds fewer than ``size`` readings then (the furthest lag × period + span <= size).
        t = seen[rows][:, None] - np.arange(self.span)[::-1]
        period = self.period_[idx[rows], channels][:, None]
        lanes, ch = idx[rows][:, None], channels[:, None]
        now = self.ring_[lanes, ch, t % self.size].astype(np.float64)
        last = self.ring_[lanes, ch, (t - period) % self.size].astype(np.float64)
        differences = now - last
        # Lanes restored from a state saved before ``typical_`` (0) compare with a cycle earlier only.
        kept = np.flatnonzero(self.typical_[idx[rows], channels] > 0)
        if len(kept) and self.lags:
            lanes, ch, t, period = lanes[kept], ch[kept], t[kept], period[kept]
            earlier = [self.ring_[lanes, ch, (t - k * period) % self.size] for k in self.lags]
            bar = DISAGREE * self.typical_[lanes, ch]
            differences[kept] = nearest_difference(now[kept], last[kept], earlier, bar)
        return rows, channels, differences

    def skip(self, idx: np.ndarray, steps: np.ndarray) -> None:
        """Run the selected lanes' clocks on over ``steps [n]`` missing steps (a gap after which their windows start
        again: ``Detector.resume``), as ``push`` would with missing readings, so the same moment a cycle earlier stays
        where it was. A lane whose gap would cover the reading at which its cycles are found (its ``after``-th) or
        looked at again (its ``size``-th, with ``week_fit``) starts afresh instead, and finds them in the readings
        after the gap: found in a stretch that is mostly gap, they would be missed for good."""
        idx = np.asarray(idx, dtype=np.int64)
        steps = np.asarray(steps, dtype=np.int64).reshape(len(idx))
        if not self.size or not len(idx):
            return
        seen = self.seen_[idx]
        never = np.iinfo(np.int64).max
        again = self.size if self.week_fit else never
        due = np.where(seen < self.after, self.after, np.where(seen < again, again, never))
        afresh = seen + steps >= due
        self.reset_streams(idx[afresh])
        for lane, at, n in zip(idx[~afresh].tolist(), seen[~afresh].tolist(), steps[~afresh].tolist()):
            self.ring_[lane, :, (at + np.arange(min(n, self.size))) % self.size] = np.nan
            self.seen_[lane] = at + n

    def _schedule(self, lane: int, chosen: np.ndarray, fit: np.ndarray, spread: np.ndarray) -> bool:
        """Schedule a lane's ``chosen`` channels ``[C]`` given their ``cycle_fit`` and spread ``[C]``: the least scale
        of their seasonal level (``SCHEDULED_SCALE``) and their typical difference; whether any was chosen."""
        self.scheduled_[lane] |= chosen
        # Only the chosen channels' products: another's fit may be inf beside a spread of 0 (a channel that holds
        # still), whose product warned on every such lane.
        self.least_[lane, chosen] = SCHEDULED_SCALE * spread[chosen]
        self.typical_[lane, chosen] = fit[chosen] * spread[chosen]
        return bool(chosen.any())

    def _look_again(self, lane: int) -> bool:
        """Look at a lane's channels with a cycle again in the ``size`` readings the ring now holds, its first: a
        channel that keeps to the same moment a ``week`` of cycles earlier (``cycle_fit`` at that lag under
        ``week_fit`` and ``SHARP`` times its worst, the cycle taken within ``REFINE`` of the one found where that fit
        is best) is scheduled, on that cycle, with its typical difference from a week earlier. A working week's
        channel whose first ``after`` readings held a weekend did not keep to its day there, and a day found a few
        readings short in them read every edge of a schedule a few readings early (docs/detection.md, the
        week-relook round). Returns whether any channel was scheduled."""
        history = self.ring_[lane].astype(np.float64)
        reach = (self.size - self.span) // self.week  # the longest cycle whose week back the ring holds
        chosen, fit, spread = np.zeros(self.channels, dtype=bool), np.zeros(self.channels), np.zeros(self.channels)
        for c in np.flatnonzero(self.period_[lane] > 0).tolist():
            p = int(self.period_[lane, c])
            near = max(2, round(REFINE * p))
            cycles = np.arange(max(MIN_LAG, p - near), min(reach, p + near) + 1)
            fits = np.array([cycle_fit(history[c], self.week * int(q)) for q in cycles])
            if len(fits) and fits.min() < min(self.week_fit, SHARP * fits.max()):
                chosen[c], fit[c], spread[c] = True, fits.min(), np.nanstd(history[c])
                self.period_[lane, c] = cycles[fits.argmin()]
        return self._schedule(lane, chosen, fit, spread)

    def history(self, lane: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """A lane's first ``n`` readings ``[C, n]`` (call it with ``after`` when its cycles have just been found, or
        with ``size`` when it has just been looked at again, before the ring wraps) and, on its scheduled channels,
        their differences as ``push`` gives them (NaN elsewhere, and before a cycle's worth): what its channels'
        levels would have been, had the cycles and schedules been known from the start."""
        readings = self.ring_[lane, :, :n].astype(np.float64)
        differences = np.full_like(readings, np.nan)
        for c in np.flatnonzero(self.typical_[lane] > 0).tolist():
            p, x = int(self.period_[lane, c]), readings[c]
            back = np.full((1 + len(self.lags), len(x)), np.nan)  # the same moment a cycle and each lag earlier
            for row, k in enumerate((1, *self.lags)):
                if k * p < len(x):
                    back[row, k * p :] = x[: -k * p]
            differences[c] = nearest_difference(x, back[0], back[1:], DISAGREE * self.typical_[lane, c])
        return readings, differences

    def judged(
        self, idx: np.ndarray, plain: np.ndarray, seasonal: np.ndarray, gain: float, trust: float, loud: float,
        ratio: float, need: int,
    ) -> np.ndarray:
        """The level to judge ``[m, C]`` given the selected lanes' plain and seasonal levels ``[m, C]``: the smaller of
        the plain one and ``gain`` times the seasonal one on channels with a cycle that has not yet foretold ``need``
        and a share ``trust`` of their loud readings (plain level >= ``loud``), else the plain one; then count this
        reading where it has a seasonal level (loud, and foretold: seasonal level under ``ratio`` times the plain
        one)."""
        idx = np.asarray(idx, dtype=np.int64)
        hits, seen = self.foretold_[idx], self.loud_[idx]
        floor = (self.period_[idx] > 0) & ~self._trusted(idx, trust, need)
        with np.errstate(invalid="ignore"):
            out = np.where(floor & np.isfinite(seasonal), np.minimum(plain, gain * seasonal), plain)
            # Only readings a cycle could have foretold count: before the cycle is known, every loud one would count
            # against it, and the floor would hold on periodic carriers whose loud readings it does foretell.
            was_loud = (plain >= loud) & np.isfinite(seasonal)
            self.loud_[idx] = seen + was_loud
            self.foretold_[idx] = hits + (was_loud & (seasonal < ratio * plain))
        return out

    def scheduled_levels(self, idx: np.ndarray, plain: np.ndarray, seasonal: np.ndarray) -> np.ndarray:
        """The selected lanes' levels ``[m, C]``: on scheduled channels their seasonal levels ``[m, C]``, else their
        plain levels. A reading out of step with a cycle its channel keeps to (a shift that does not start, a plateau
        too low, a late cycle) is far out though it lies inside the range its window spans, and the cycle's own edges,
        far out against the window, are not. The larger of the two levels found fewer faults: the edges then taught
        the signal's statistics that such levels are ordinary (docs/detection.md, the schedule-fit round). A scheduled
        channel without a seasonal level (the reading a cycle earlier is missing) has none: its plain level, read
        against statistics learned on seasonal ones, made a cycle's edge one cycle after a gap a false alarm."""
        return np.where(self.scheduled_[np.asarray(idx, dtype=np.int64)], seasonal, plain)

    def unused(
        self, idx: np.ndarray, plain: np.ndarray, trust: float, loud: float, need: int, floor: bool = True
    ) -> np.ndarray:
        """The selected lanes' channels ``[m, C]`` whose seasonal level neither ``scheduled_levels`` nor ``judged`` reads
        given their plain levels ``[m, C]``: a channel that is not scheduled and, under a ``floor``, trusted
        (``judged``: its floor is off) on a reading that is not loud (it does not count). A periodic carrier is mostly
        trusted and seldom scheduled, so ``push`` spares its differences on most readings."""
        idx = np.asarray(idx, dtype=np.int64)
        with np.errstate(invalid="ignore"):
            spared = self._trusted(idx, trust, need) & ~(plain >= loud) if floor else True
        return spared & ~self.scheduled_[idx]

    def _trusted(self, idx: np.ndarray, trust: float, need: int) -> np.ndarray:
        """The selected lanes' channels ``[m, C]`` whose cycle has foretold ``need`` and a share ``trust`` of their
        loud readings."""
        hits = self.foretold_[idx]
        return (hits >= need) & (hits >= trust * self.loud_[idx])
