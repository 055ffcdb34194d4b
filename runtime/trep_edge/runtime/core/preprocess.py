"""Input preprocessing shared by training and the runtime: plausibility, differencing, card normalisation, per-stream
scaling."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from trep_edge.runtime.core.model_card import ModelCard
from trep_edge.runtime.core.stream_state import StreamState


def precise(x: np.ndarray) -> np.ndarray:
    """``x`` as floats at the precision it came with: float32 stays float32 (data sets stored so, whose digits are
    already gone), anything else is float64. A meter's total near 1e7 moves by 0.1 a reading, which float32 (steps
    of 1 there) reads as 0 or 1; a feed's readings and a CSV's cells arrive as float64 and keep those steps through
    differencing and normalisation."""
    x = np.asarray(x)
    return x if x.dtype == np.float32 else x.astype(np.float64, copy=False)


def difference(x: np.ndarray, order: int) -> np.ndarray:
    """Difference ``order`` times along the time axis (axis −2 of ``[..., T, C]``), NaN-filling the first steps.

    Keeping the length lets labels and timestamps stay aligned with the differenced series. Float32 values stay
    float32, any others become float64 (``precise``).
    """
    out = precise(x)
    for _ in range(order):
        shifted = np.full_like(out, np.nan)
        shifted[..., 1:, :] = out[..., 1:, :] - out[..., :-1, :]
        out = shifted
    return out


def forward_fill(
    x: np.ndarray,
    limit: int,
    barrier: np.ndarray | None = None,
    age: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Carry each channel's last observed value forward over at most ``limit`` missing steps (``[T, C]``).

    Bedside vitals are charted at different rates (temperature every few hours, heart rate hourly); the model
    masks a step if any channel is missing, so without a bounded carry-forward most ICU steps could not be scored.
    Rows flagged in ``barrier`` start a new sequence: nothing is carried across them, and their own value (NaN or
    not) is the carried value with age ``age`` (steps since it was observed) — the streaming runtime uses such a
    row to hand each stream's carry-over into one vectorised call over many streams. Returns the filled values,
    and for every row the carried value and its age (so the last row gives the carry-over for the next call).
    """
    values = precise(x)
    n, c = values.shape
    rows = np.arange(n)
    is_barrier = np.zeros(n, dtype=bool) if barrier is None else np.asarray(barrier, dtype=bool)
    start_age = np.zeros((n, c), dtype=np.float64) if age is None else np.asarray(age, dtype=np.float64)
    observed = ~np.isnan(values) | is_barrier[:, None]
    source = np.maximum.accumulate(np.where(observed, rows[:, None], 0), axis=0)
    cols = np.arange(c)[None, :]
    carried = values[source, cols]
    carried_age = (rows[:, None] - source) + start_age[source, cols]
    fill = np.isnan(values) & (carried_age <= limit)
    return np.where(fill, carried, values), carried, carried_age


def bend(x: np.ndarray, counts: np.ndarray | None) -> np.ndarray:
    """``[..., C]`` values with each count channel (``counts[k] = c > 0``, ``count_levels``) as ``asinh(x / c)``, the
    others unchanged (``precise``)."""
    x = precise(x)
    if counts is None:
        return x
    c = np.asarray(counts, dtype=x.dtype)
    return np.where(c > 0, np.arcsinh(x / np.where(c > 0, c, 1.0)), x).astype(x.dtype, copy=False)


@dataclass
class Normalisation:
    """Per-channel ``(b(x) − mean) / std`` with statistics of the training data; ``b`` is ``asinh(x / c)`` on a count
    or burst channel (``counts[k] = c > 0``, ``count_levels``), the identity elsewhere (``counts`` None: everywhere).

    One owner for what the model's input is, so training data, the runtime's windows, the plausible bounds and the
    explanations' expected values all read the same transform off the card's ``normalisation``.
    """

    mean: np.ndarray
    std: np.ndarray
    counts: np.ndarray | None = None

    def __post_init__(self) -> None:
        # One form for "nothing bent", so the card's JSON and the input contract of such a model keep their text.
        if self.counts is not None:
            self.counts = np.asarray(self.counts, dtype=np.float32)
            if not (self.counts > 0).any():
                self.counts = None

    def apply(self, x: np.ndarray) -> np.ndarray:
        """Normalise ``[..., C]`` values (NaN stays NaN) to the model's float32 input, computed at the values'
        precision (``precise``): a float64 reading's distance from the training mean keeps its digits however large
        the reading."""
        x = bend(x, self.counts)
        return ((x - self.mean.astype(x.dtype)) / self.std.astype(x.dtype)).astype(np.float32)

    def invert(self, x: np.ndarray) -> np.ndarray:
        """Normalised ``[..., C]`` values back in the readings' units (float64)."""
        out = np.asarray(x, dtype=np.float64) * self.std + self.mean
        if self.counts is None:
            return out
        c = self.counts.astype(np.float64)
        return np.where(c > 0, np.sinh(np.where(c > 0, out, 0.0)) * c, out)

    def to_dict(self) -> dict:
        """JSON form for the model card (``counts`` only when some channel is bent, so older cards keep their text)."""
        out = {"mean": [float(v) for v in self.mean], "std": [float(v) for v in self.std]}
        if self.counts is not None:
            out["counts"] = [float(v) for v in self.counts]
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "Normalisation":
        """Read the model card's form."""
        return cls(np.asarray(data["mean"], dtype=np.float32), np.asarray(data["std"], dtype=np.float32),
                   data.get("counts"))


def fit_normalisation(
    x: np.ndarray, counts: np.ndarray | None = None, names: list[str] | None = None
) -> Normalisation:  # fmt: skip
    """Per-channel NaN-aware mean and std over every axis but the last of ``bend(x, counts)``; a constant channel gets
    std 1. A channel without any value is refused, by its name in ``names`` when given."""
    flat = np.asarray(bend(x, counts), dtype=np.float64).reshape(-1, x.shape[-1])
    observed = ~np.isnan(flat)
    if not observed.any(axis=0).all():
        empty = np.flatnonzero(~observed.any(axis=0)).tolist()
        named = [names[i] for i in empty] if names else empty
        raise ValueError(f"channel(s) {named} have no observed value: drop them or choose other channels")
    mean = np.nanmean(flat, axis=0)
    std = np.nanstd(flat, axis=0)
    std = np.where(std > 1e-8, std, 1.0)
    return Normalisation(mean.astype(np.float32), std.astype(np.float32), counts)


COUNT_TAIL = 4.0
"""A count or burst channel's 99th percentile lies at least this many times as far above its median as its 1st
percentile lies below (docs/detection.md, "The count-feeds round": 3 also bent a UCR series and lost it)."""
COUNT_SPAN = 2.0
"""A count or burst channel's 99th percentile is also at least this many times its median: its bursts are multiples
of its usual level. A signal far from 0 with peaks (UCR 135: 1.55 times, tails 3.8 to 1) has a long upper tail too,
but judged by ratios to its level its peaks would only be blunted."""
COUNT_MIN_READINGS = 100
"""Fewer normal readings of a channel decide nothing: their 99th percentile is their largest value."""


def count_levels(values: np.ndarray) -> np.ndarray:
    """Each channel's count level ``c`` from normal readings ``[..., C]`` in their own units, 0 for a channel that is
    not a count or burst feed: ``c`` is given to a channel with none below 0, its upper tail ``COUNT_TAIL`` times its
    lower and reaching ``COUNT_SPAN`` times its median, and is its median (of its readings above 0 where the median
    is 0). ``Normalisation`` feeds such a channel to the model as ``asinh(x / c)``.

    A count channel's bursts of an ordinary size lie many robust scales above its median: on the raw values the model
    learnt little but the bursts, and ``deviation`` raised a false alarm on every busy hour. On ``asinh(x / c)`` the
    scale is logarithmic above ``c`` and linear below, so a burst is judged by its ratio to the usual level and a drop
    to zero still stands out.
    """
    x_all = np.asarray(values, dtype=np.float64)
    flat = x_all.reshape(-1, x_all.shape[-1])
    levels = np.zeros(flat.shape[1], dtype=np.float32)
    for k in range(flat.shape[1]):
        x = flat[np.isfinite(flat[:, k]), k]
        if len(x) < COUNT_MIN_READINGS:
            continue
        # Readings stored as float32 carry rounding: a true zero may come back as −1e-7 of the level.
        tiny = 1e-5 * float(np.abs(x).max())
        q01, q50, q99 = np.percentile(x, [1, 50, 99])
        if x.min() < -tiny or not q99 - q50 > COUNT_TAIL * max(q50 - q01, tiny) or not q99 >= COUNT_SPAN * q50:
            continue
        levels[k] = q50 if q50 > tiny else np.median(x[x > tiny])
    return levels


def still_scale(level: np.ndarray) -> np.ndarray:
    """The scale of a channel that holds still at ``level``: 1 % of it, at least 1e-3, so that its first move reads
    as large but finite."""
    return np.maximum(np.abs(level) * 0.01, 1e-3)


def robust_location_scale(values: np.ndarray, floor: np.ndarray | float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """NaN-aware median and robust scale of each row of ``[n, T]``: IQR/1.349, at least ``floor`` (per row or for
    all) times the mean absolute deviation's σ-estimate ``1.2533 · mean |x − median|``; where that is 0,
    MAD·1.4826, else std.

    The floor is for rows that tie by design, a count channel's zeros (``window_deviation``'s ``tied``): their
    quartiles fall on the zeros (the std was then the scale), between them and the smallest count, or on a small
    count, so the IQR alone read an ordinary count as two scales in one window and as dozens in the next. It holds
    where the quartiles tie too, so that every window of such a row is read by one rule. A row without spread (a
    constant warm-up) gets 1 % of its level, at least 1e-3, so a later change is large but finite; a row with no
    value gets location 0 and scale 1.
    """
    x = np.asarray(values, dtype=np.float64)
    n = x.shape[0]
    loc, scale = np.zeros(n), np.ones(n)
    seen = ~np.isnan(x).all(axis=1)
    if not seen.any():
        return loc, scale
    xs = x[seen]
    # The NaN-aware reductions cost several times the plain ones, and the detector calls this twice per reading:
    # take them only when a value is missing.
    gaps = np.isnan(xs).any()
    quantile, mean, stdev = (np.nanquantile, np.nanmean, np.nanstd) if gaps else (np.quantile, np.mean, np.std)
    q25, med, q75 = quantile(xs, [0.25, 0.5, 0.75], axis=1)
    spread = (q75 - q25) / 1.349
    away = np.abs(xs - med[:, None])
    floor = np.broadcast_to(np.asarray(floor, dtype=np.float64), (n,))[seen]
    if floor.any():
        spread = np.maximum(spread, floor * 1.2533 * mean(away, axis=1))
    mad = quantile(away, 0.5, axis=1) * 1.4826
    std = stdev(xs, axis=1)
    fallback = still_scale(med)
    spread = np.where(spread > 0, spread, np.where(mad > 0, mad, np.where(std > 0, std, fallback)))
    loc[seen], scale[seen] = med, spread
    return loc, scale


class StreamScaler(StreamState):
    """Per-lane location and scale learned online, for models whose card says ``scaling = "stream"``.

    A lane's first ``warmup`` readings set its location and scale robustly (``robust_location_scale`` of its window,
    recomputed at each of them); afterwards both follow the readings slowly (exponential, weight ``1/adapt``;
    ``adapt = 0`` freezes them), skipping readings more than ``outlier`` scales away, so an anomaly never becomes
    the stream's scale. ``apply`` maps values to ``(x − loc) / scale``, clipped to ±``clip``.
    A warm-up does not end on a window whose readings are all one value (a sensor idle since the lane started): it
    starts again, and begins only at the first reading that moves (``idle`` until then), so the scale is learnt on
    the readings that move. Ended there, its scale was ``still_scale``, every later reading of a running machine lay
    beyond ``outlier`` of it and was skipped, and each window was clipped for good. The lane keeps ``still_scale``
    of its level as its least scale: a channel that holds at 99 and steps by 1 now and then is read in such steps,
    not in the spread of its rare moves.
    State: ``loc_``, ``scale_`` ``[S]`` float64, ``count_`` ``[S]`` readings seen (since the warm-up last began),
    ``still_`` ``[S]`` the lane's warm-up met a still window.
    """

    def __init__(
        self, warmup: int = 100, adapt: int = 10_000, outlier: float = 6.0, clip: float = 100.0, n_streams: int = 0
    ) -> None:
        if warmup < 2 or adapt < 0 or not outlier > 0 or not clip > 0:
            raise ValueError(f"scaler needs warmup >= 2, adapt >= 0, outlier > 0, clip > 0; got {warmup}, {adapt}, "
                             f"{outlier}, {clip}")  # fmt: skip
        self.warmup, self.adapt, self.outlier, self.clip = int(warmup), int(adapt), float(outlier), float(clip)
        super().__init__(n_streams)

    def _fresh(self, n: int) -> dict[str, np.ndarray]:
        return {"loc_": np.zeros(n), "scale_": np.ones(n), "count_": np.zeros(n, dtype=np.int64),
                "still_": np.zeros(n, dtype=bool)}

    def _config(self) -> dict[str, Any]:
        return {"warmup": self.warmup, "adapt": self.adapt, "outlier": self.outlier, "clip": self.clip}

    def update(self, idx: np.ndarray, windows: np.ndarray) -> None:
        """Learn each selected lane's newest reading, the last step of its window ``[n, W]`` (NaN = missing)."""
        windows = np.asarray(windows, dtype=np.float64)
        x = windows[:, -1]
        seen = np.isfinite(x)
        count = self.count_[idx] + seen
        # On a still window: the warm-up's last reading, or any reading of a warm-up that began again on one.
        check = np.flatnonzero(seen & ((count == self.warmup) | (self.still_[idx] & (count <= self.warmup))))
        if check.size:
            last = windows[check]
            again = check[(np.fmax.reduce(last, axis=1) == np.fmin.reduce(last, axis=1))
                          & (np.isfinite(last).sum(axis=1) > 1)]  # fmt: skip
            count[again] = 0
            self.still_[idx[again]] = True
        early = seen & (count <= self.warmup)
        if early.any():
            rows = idx[early]
            loc, scale = robust_location_scale(windows[early])
            self.loc_[rows] = loc
            self.scale_[rows] = np.where(self.still_[rows], np.maximum(scale, still_scale(loc)), scale)
        late = seen & ~early & (self.adapt > 0)
        if late.any():
            rows, value = idx[late], x[late]
            loc, scale = self.loc_[rows], self.scale_[rows]
            inlier = np.abs(value - loc) <= self.outlier * scale
            rows, value, loc, scale = rows[inlier], value[inlier], loc[inlier], scale[inlier]
            r = 1.0 / self.adapt
            self.loc_[rows] = loc + r * (value - loc)
            # The scale follows the mean absolute deviation, scaled to σ for a Gaussian, robust to the clipped tail.
            self.scale_[rows] = np.maximum(scale + r * (np.abs(value - loc) * math.sqrt(math.pi / 2) - scale),
                                           1e-12)  # fmt: skip
        self.count_[idx] = count

    def idle(self, idx: np.ndarray) -> np.ndarray:
        """Whether each selected lane's last reading left it idle: its warm-up began again on a still window and
        waits for a reading that moves (class docstring)."""
        return self.still_[idx] & (self.count_[idx] == 0)

    def apply(self, idx: np.ndarray, values: np.ndarray) -> np.ndarray:
        """``values [n, ...]`` of the selected lanes, scaled with each lane's current location and scale."""
        shape = (len(idx),) + (1,) * (np.ndim(values) - 1)
        loc, scale = self.loc_[idx].reshape(shape), self.scale_[idx].reshape(shape)
        return np.clip((np.asarray(values, dtype=np.float64) - loc) / scale, -self.clip, self.clip).astype(np.float32)


def scale_windows(scaler: StreamScaler, rows: np.ndarray, windows: np.ndarray, learn: bool = True) -> np.ndarray:
    """Learn the newest reading of windows ``[n, W, C]`` (lane ``rows[i * C + c]`` = window i, channel c), then scale.

    The one place where a stream-scaled model's input is made, for the daemon's monitor and offline scoring alike.
    ``learn=False`` scales without learning (readings learnt already, scored again by a swapped-in model).
    """
    n, w, c = windows.shape
    flat = np.asarray(windows).transpose(0, 2, 1).reshape(n * c, w)
    if learn:
        scaler.update(rows, flat)
    return scaler.apply(rows, flat).reshape(n, c, w).transpose(0, 2, 1)


IMPLAUSIBLE_SCALES = 1e6
"""A value further than this many of the card's training standard deviations from its training mean is no reading
of the process: a unit slip or a corrupted register (heart rate 1e15), not a heart."""
IMPLAUSIBLE_LEVEL = 0.01
"""The training standard deviation that sets a channel's plausible range counts as at least this share of its training
mean's magnitude: a channel that held almost still while the model learned (a setpoint at 5.0 ± 0.00004) says
nothing of how far it may move, and a million of its tiny deviations filed an ordinary move as a broken sensor."""
IMPLAUSIBLE_MAGNITUDE = 1e30
"""Beyond this magnitude no sensor reading is plausible for any model, and float32 windows would overflow."""


def plausible_bounds(card: ModelCard) -> tuple[np.ndarray, np.ndarray]:
    """Per card channel, the lowest and highest plausible value: the card's declared ``ranges``, within
    ``IMPLAUSIBLE_SCALES`` training standard deviations (at least ``IMPLAUSIBLE_LEVEL`` of the training mean's
    magnitude; count levels on a count channel) for a card-normalised, undifferenced model, within
    ±``IMPLAUSIBLE_MAGNITUDE`` always. A channel-independent model's one channel bounds every channel it is applied to.

    A value outside is treated as missing (and reported as a sensor fault) instead of being scored: one absurd value
    in a window would otherwise dominate the model's input for a whole window length.
    """
    low = np.full(card.input_dims, -IMPLAUSIBLE_MAGNITUDE)
    high = np.full(card.input_dims, IMPLAUSIBLE_MAGNITUDE)
    if card.scaling == "card" and card.differencing == 0:
        norm = Normalisation.from_dict(card.normalisation)
        # A count channel's std is one of asinh(x / c), whose multiples in reading units grow without bound: its
        # level c is the unit there instead (a million times the usual count is a corrupted register too).
        level = np.zeros(card.input_dims) if norm.counts is None else norm.counts
        spread = np.maximum(norm.std, IMPLAUSIBLE_LEVEL * np.abs(norm.mean))
        centre, unit = np.where(level > 0, 0.0, norm.mean), np.where(level > 0, level, spread)
        low = np.maximum(low, centre - IMPLAUSIBLE_SCALES * unit)
        high = np.minimum(high, centre + IMPLAUSIBLE_SCALES * unit)
    for c, name in enumerate(card.channels):
        if name in card.ranges:
            low[c], high[c] = max(low[c], card.ranges[name][0]), min(high[c], card.ranges[name][1])
    return low, high


def implausible(values: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Where ``values [..., C]`` lie outside ``[low, high]`` (``plausible_bounds``), ±inf included; NaN is never
    implausible."""
    x = np.asarray(values, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return ~np.isnan(x) & ((x < low) | (x > high))
