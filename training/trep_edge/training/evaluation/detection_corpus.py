"""The detection benchmark's corpus, built deterministically from the data folder (nothing is copied anywhere).

- ``synthetic``: faults injected into real normal signals — ETT channels (the second half of each file: the first
  half is the general model's training data) and MIMIC-II numerics (second half) — of eleven kinds (spike, dip,
  level shift, flatline, variance change, slow drift, frequency change, dropout to zero, contextual: a stretch of
  the signal from elsewhere, distorted cycle, none) at three sizes in robust scales of the stream (2, 3, 5), one
  labelled event per stream; every fifth stream has three channels with the fault in one.
- ``archive``: the same faults in other kinds of real signal, made long by concatenating the held-out ``_TEST`` cases
  of one class of a UCR/UEA data set in file order (``ARCHIVE``): five-minute freeway traffic counts, one day per
  case (DodgerLoopWeekend, whole numbers, some missing); a pig's central venous pressure (PigCVP); three ECG leads
  (UEA StandWalkJump, every stream with all three channels). Sizes cycle with the kinds, so the quick subset has
  every kind once and every size. The joins between cases are part of the carrier, as a restart is part of a feed.
- ``multi``: longer streams of the same real signals with two or three faults each (kinds and sizes drawn at
  random, one per equal slot of the part after probation), as real feeds have: a false alarm or a long refractory
  period now costs the next event, which one-event streams cannot show.
- ``ucr``: the three UCR anomaly archive series (train part, then one labelled segment in the test part).
- ``short`` (not in ``corpus``): one-fault streams of the same carriers only 1,000–2,000 readings long, for
  ``bench/short_streams.py``: a per-stream model and the detector's statistics then learn from 150–300 readings.
- ``long`` (not in ``corpus``): streams of 12,000–20,000 readings with zero to three faults each, for
  ``bench/long_streams.py``: a false-alarm rate and an alert budget over weeks of a five-minute feed.
- ``clustered`` (not in ``corpus``): streams of the same carriers with three or four faults a few hundred readings
  apart, for ``bench/clustered_faults.py``: what the alert gate learned from one fault must not silence the next.
- ``sepsis``: PhysioNet 2019 set B patients with odd ids (never model training data), seven vitals, hourly; the
  event is the first hour labelled septic; most patients have none.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trep_edge.datasets.ett import load_csv
from trep_edge.datasets.paths import data_root
from trep_edge.datasets.physionet import VITALS, iter_patients
from trep_edge.datasets.ts_format import load_ts
from trep_edge.datasets.ucr_anomaly import load_ucr_anomaly

KINDS = ("spike", "dip", "level", "flat", "variance", "drift", "frequency", "dropout", "context", "cycle", "none")
SIZES = (2.0, 3.0, 5.0)
ARCHIVE = (("UCR", "DodgerLoopWeekend", 1), ("UCR", "PigCVP", 1), ("UEA", "StandWalkJump", 3))
"""Carriers of the ``archive`` category: (archive folder, data set, channels kept)."""
UCR = ("001_UCR_Anomaly_DISTORTED1sddb40_35000_52000_52620.txt", "002_UCR_Anomaly_DISTORTED2sddb40_35000_56600_56900.txt",
       "135_UCR_Anomaly_InternalBleeding16_1200_4187_4199.txt")  # fmt: skip


@dataclass
class Stream:
    """One benchmark stream: values ``[T, C]``, events ``[(onset, last row)]`` and where its test part starts."""

    name: str
    category: str
    channels: list[str]
    values: np.ndarray
    events: list[tuple[int, int]]
    test_start: int = 0
    meta: dict = field(default_factory=dict)


def _robust_scale(x: np.ndarray) -> float:
    q75, q25 = np.nanpercentile(x, [75, 25])
    return float((q75 - q25) / 1.349) or float(np.nanstd(x)) or 1.0


def inject(
    values: np.ndarray, kind: str, size: float, rng: np.random.Generator, onset: int | None = None
) -> tuple[np.ndarray, list]:
    """A copy of a univariate series with one fault of ``kind`` at ``size`` robust scales; its event list.

    The onset is drawn from 35–80 % of the series unless ``onset`` is given; scales are the series' own.
    """
    v = values.copy()
    t, s = len(v), _robust_scale(values)
    e, span = int(rng.integers(int(0.35 * t), int(0.8 * t))), int(rng.integers(30, 150))
    e = e if onset is None else int(onset)
    if kind == "none":
        return v, []
    if kind in ("spike", "dip"):
        v[e] += (2 * size * s) * (1 if kind == "spike" else -1)
        return v, [(e, e)]
    if kind == "level":
        v[e:] += size * s
        return v, [(e, e)]
    if kind == "drift":
        v[e : e + 4 * span] += np.linspace(0, size * s, len(v[e : e + 4 * span]))
        v[e + 4 * span :] += size * s
        return v, [(e, min(e + 4 * span, t - 1))]
    if kind == "flat":
        v[e : e + 2 * span] = v[e]
        return v, [(e, min(e + 2 * span, t - 1))]
    if kind == "variance":
        v[e : e + span] += rng.normal(0, size * s, len(v[e : e + span]))
    elif kind == "frequency":
        v[e : e + span] = values[e : e + 2 * span : 2][:span]
    elif kind == "dropout":
        span //= 3
        v[e : e + span] = 0.0
    elif kind == "context":
        v[e : e + span] = values[e - 2 * span : e - span][::-1]
    elif kind == "cycle":
        v[e : e + span] += 0.5 * size * s * np.sin(np.linspace(0, np.pi, span))
    return v, [(e, min(e + span, t - 1))]


def _sources(root: Path) -> list[tuple[str, np.ndarray]]:
    """Named real normal signals ``[T, 3]`` (three channels of one recording), held-out halves only (read-only)."""
    return list(_read_sources(Path(root)))


@functools.lru_cache(maxsize=2)
def _read_sources(root: Path) -> tuple[tuple[str, np.ndarray], ...]:
    """``_sources``, read once per process: every category draws from them, and parsing the five CSVs took about
    5 s a call. Read-only, so that no category can change what the next one draws."""
    out = []
    for name in ("ETTh1", "ETTh2", "ETTm1", "ETTm2"):
        frame = load_csv(root / "ETT" / f"{name}.csv", dtype=np.float32)  # the corpus of every earlier round
        values = frame.values[len(frame.values) // 2 :]
        for k in range(0, values.shape[1] - 2, 3):
            out.append((f"{name}.{'+'.join(frame.channels[k : k + 3])}", values[:, k : k + 3].astype(np.float64)))
    mimic = load_csv(next((root / "icu_vitals" / "s00001_numerics").glob("*_decoded.csv")), zero_as_missing=True,
                     dtype=np.float32)
    half = mimic.values[len(mimic.values) // 2 :].astype(np.float64)
    # Sensor channels only: the first column is the recording's minute counter, a clock rather than a signal.
    cols = [c for c in range(half.shape[1]) if np.isfinite(half[:, c]).mean() > 0.8 and np.nanstd(half[:, c]) > 0
            and not (np.diff(half[np.isfinite(half[:, c]), c]) > 0).all()]
    out.append(("mimic." + "+".join(mimic.channels[c] for c in cols[:3]), half[:, cols[:3]]))
    for _, values in out:
        values.flags.writeable = False
    return tuple(out)


def _excerpt(
    values: np.ndarray, rng: np.random.Generator, lengths: tuple[int, int], all_channels: bool
) -> tuple[np.ndarray, list[int], np.ndarray]:
    """A random stretch of a ``[T, C]`` source: its channels (all of them, or one drawn), the block and its first
    channel with gaps filled by the median (the channel faults go into)."""
    length = int(rng.integers(*lengths))
    start = int(rng.integers(0, max(len(values) - length, 1)))
    width = values.shape[1]
    channels = list(range(width)) if all_channels else [int(rng.integers(0, width))]
    block = values[start : start + length][:, channels].copy()
    return block, channels, np.where(np.isnan(block[:, 0]), np.nanmedian(block[:, 0]), block[:, 0])


def synthetic(root: Path, count: int, seed: int = 0) -> list[Stream]:
    """``count`` streams of real signals with one injected fault each (module docstring)."""
    rng = np.random.default_rng(seed)
    sources = _sources(root)
    streams = []
    for k in range(count):
        name, values = sources[k % len(sources)]
        kind, size = KINDS[k % len(KINDS)], SIZES[(k // len(KINDS)) % len(SIZES)]
        streams.append(_one_fault(f"{name}#{k}", "synthetic", values, kind, size, rng, k % 5 == 4))
    return streams


def _one_fault(
    name: str, category: str, values: np.ndarray, kind: str, size: float, rng: np.random.Generator,
    all_channels: bool, lengths: tuple[int, int] = (2500, 5000),
) -> Stream:  # fmt: skip
    """An excerpt of ``lengths`` readings of a source with one fault of ``kind`` at ``size`` in its first channel."""
    block, channels, clean = _excerpt(values, rng, lengths, all_channels)
    block[:, 0], events = inject(clean, kind, size, rng)
    return Stream(f"{name}:{kind}{size:g}", category, [f"c{c}" for c in channels], block, events,
                  meta={"kind": kind, "size": size})  # fmt: skip


def _archive_sources(root: Path) -> list[tuple[str, np.ndarray]]:
    """Each ``ARCHIVE`` data set's largest class of ``_TEST`` cases, concatenated in file order: ``[T, channels]``."""
    out = []
    for folder, name, width in ARCHIVE:
        cases, labels = load_ts(root / folder / name / f"{name}_TEST.ts")
        classes, counts = np.unique(labels, return_counts=True)
        chosen = cases[labels == classes[counts.argmax()]][:, :, :width]
        out.append((name, chosen.reshape(-1, width).astype(np.float64)))
    return out


def archive(root: Path, count: int, seed: int = 2) -> list[Stream]:
    """``count`` streams of the ``ARCHIVE`` carriers with one fault each (module docstring)."""
    rng = np.random.default_rng(seed)
    sources = _archive_sources(root)
    streams = []
    for k in range(count):
        name, values = sources[k % len(sources)]
        kind, size = KINDS[k % len(KINDS)], SIZES[k % len(SIZES)]
        streams.append(_one_fault(f"{name}#a{k}", "archive", values, kind, size, rng, values.shape[1] > 1))
    return streams


def _several_faults(
    name: str, category: str, values: np.ndarray, rng: np.random.Generator, lengths: tuple[int, int], faults: int,
    all_channels: bool,
) -> Stream:  # fmt: skip
    """An excerpt of ``lengths`` readings of a source with ``faults`` faults of random kinds and sizes in its first
    channel, one in the first half of each equal slot of rows 20–95 % (room for its span)."""
    block, channels, series = _excerpt(values, rng, lengths, all_channels)
    t = len(series)
    edges = np.linspace(0.2 * t, 0.95 * t, faults + 1).astype(int)
    events, kinds = [], []
    for a, b in zip(edges[:-1], edges[1:]):
        kind, size = str(rng.choice(KINDS[:-1])), float(rng.choice(SIZES))
        onset = int(rng.integers(a, a + (b - a) // 2))
        series, found = inject(series, kind, size, rng, onset)
        events += found
        kinds.append(f"{kind}{size:g}")
    block[:, 0] = series
    return Stream(f"{name}:{'+'.join(kinds) or 'none'}", category, [f"c{c}" for c in channels], block, events,
                  meta={"kinds": kinds})  # fmt: skip


def multi(root: Path, count: int, seed: int = 1) -> list[Stream]:
    """``count`` longer streams with two or three faults each, one per slot of rows 20–95 % (module docstring)."""
    rng = np.random.default_rng(seed)
    sources = [s for s in _sources(root) if len(s[1]) >= 6000]  # room for three slots (the MIMIC-II half is short)
    streams = []
    for k in range(count):
        name, values = sources[(k * 5 + 2) % len(sources)]
        streams.append(_several_faults(f"{name}#m{k}", "multi", values, rng, (6000, 9000), 2 + k % 2, k % 4 == 3))
    return streams


LONG_FAULTS = (2, 3, 0, 1, 2)
"""Faults per ``long`` stream, cycling: 1.6 on average, a fifth of the streams fault-free."""


def long(root: Path, count: int, seed: int = 6) -> list[Stream]:
    """``count`` streams of 12,000–20,000 readings with zero to three faults each (``LONG_FAULTS``), on the ETT
    carriers long enough and the drawn count feeds (``count_carriers``, 12,000 readings each) in turn (not part of
    ``corpus``).

    A monitor watches a feed for weeks: a five-minute feed is 12,000 readings in six weeks. The benchmark's streams
    hold at most 9,000, so a false-alarm rate that is cheap over 4,000 readings, and an alert budget that rarely
    binds there, are not measured over a long life. ``bench/long_streams.py`` scores the detector on them."""
    rng = np.random.default_rng(seed)
    sources = [s for s in _sources(root) if len(s[1]) >= 20000]
    sources += [(name, values[:, None]) for name, values in count_carriers().items()]
    streams = []
    for k in range(count):
        name, values = sources[k % len(sources)]
        faults = LONG_FAULTS[k % len(LONG_FAULTS)]
        streams.append(_several_faults(f"{name}#l{k}", "long", values, rng, (12000, 20000), faults, k % 4 == 3))
    return streams


def short(root: Path, count: int, seed: int = 4) -> list[Stream]:
    """``count`` streams of the synthetic and archive carriers, 1,000–2,000 readings each (the whole carrier where it
    is shorter: the MIMIC-II half holds 968), with one fault (or none) each (not part of ``corpus``).

    Many real feeds are this short when they reach a monitor, and the evaluator's protocol then trains a stream's
    model on its first 150–300 readings and the detector has as few to learn each signal's spread from, where the
    benchmark's streams give both 375–750. Kinds and sizes cycle as ``archive``'s do, the carriers step through
    every synthetic and archive source; every fifth stream has all its carrier's channels.
    ``bench/short_streams.py`` scores the detector on them."""
    rng = np.random.default_rng(seed)
    sources = _sources(root) + _archive_sources(root)
    streams = []
    for k in range(count):
        name, values = sources[(k * 5) % len(sources)]
        kind, size = KINDS[k % len(KINDS)], SIZES[k % len(SIZES)]
        streams.append(_one_fault(f"{name}#s{k}", "short", values, kind, size, rng, k % 5 == 4, (1000, 2000)))
    return streams


def clustered(root: Path, count: int, seed: int = 3) -> list[Stream]:
    """``count`` streams with three or four short faults close together (not part of ``corpus``).

    Faults of the kinds that end (spike, dip, variance, dropout, cycle, frequency) at random sizes, each 250–450
    readings after the last, from 30 % of a 4,000–6,000-reading excerpt: enough apart for the refractory period to
    pass, close enough that what the alert gate learned from the first ones still stands when the next one comes.
    ``bench/clustered_faults.py`` scores the detector on them; the benchmark's ``multi`` streams space their faults
    over the whole stream."""
    rng = np.random.default_rng(seed)
    sources = [s for s in _sources(root) if len(s[1]) >= 6000]
    kinds = ("spike", "dip", "variance", "dropout", "cycle", "frequency")
    streams = []
    for k in range(count):
        name, values = sources[k % len(sources)]
        block, channels, series = _excerpt(values, rng, (4000, 6000), k % 4 == 3)
        onset, events, labels = int(0.3 * len(series)), [], []
        for _ in range(3 + k % 2):
            kind, size = str(rng.choice(kinds)), float(rng.choice(SIZES))
            series, found = inject(series, kind, size, rng, onset)
            events += found
            labels.append(f"{kind}{size:g}")
            onset = found[-1][1] + int(rng.integers(250, 450))
        block[:, 0] = series
        streams.append(Stream(f"{name}#c{k}:{'+'.join(labels)}", "clustered", [f"c{c}" for c in channels], block,
                              events, meta={"kinds": labels}))  # fmt: skip
    return streams


COUNT_LENGTH, COUNT_DAY = 12000, 288


def count_carriers(seed: int = 11) -> dict[str, np.ndarray]:
    """Fault-free feeds of counts and bursts ``{name: [T]}``, five-minute readings over about 42 days: requests
    per interval at a rate that wanders log-normally, the same with a daily cycle, a latency in milliseconds,
    bytes per interval with a daily cycle, sparse events that are zero most of the time, and a message count whose
    rate drifts slowly. ``../shared/data`` holds no such feed without labels, so they are drawn, not read."""
    rng = np.random.default_rng(seed)
    t = np.arange(COUNT_LENGTH)
    daily = np.sin(2 * np.pi * t / COUNT_DAY)
    return {
        "bursty-counts": rng.poisson(20 * np.exp(rng.normal(0, 0.8, COUNT_LENGTH))).astype(float),
        "daily-bursty-counts": rng.poisson(30 * np.exp(0.8 * daily + rng.normal(0, 0.5, COUNT_LENGTH))).astype(float),
        "latency-ms": np.round(np.exp(rng.normal(3.5, 0.5, COUNT_LENGTH)), 1),
        "bytes-daily": np.exp(12 + 0.6 * daily + rng.normal(0, 0.7, COUNT_LENGTH)),
        "sparse-events": np.where(rng.random(COUNT_LENGTH) < 0.05, rng.exponential(5, COUNT_LENGTH), 0.0),
        "message-counts": rng.poisson(np.exp(2.5 + 0.5 * daily + 0.3 * np.cumsum(rng.normal(0, 0.02, COUNT_LENGTH))
                                             + rng.normal(0, 0.4, COUNT_LENGTH))).astype(float),
    }  # fmt: skip


def counts(seed: int = 5) -> list[Stream]:
    """Every fault kind (and none) once on each ``count_carriers`` feed, 2,500–5,000 readings each (not part of
    ``corpus``): the corpus's carriers are physical signals and the archive's, while many plant and IT feeds are
    counts and bursts, skewed and heavy-tailed, where an ordinary burst stands far out of a symmetric scale. Sizes
    cycle with kind and carrier, so each carrier sees every size and each kind every size twice.
    ``bench/count_feeds.py`` scores the detector on them."""
    rng = np.random.default_rng(seed)
    streams = []
    for c, (name, values) in enumerate(count_carriers().items()):
        for k, kind in enumerate(KINDS):
            size = SIZES[(k + c) % len(SIZES)]
            streams.append(_one_fault(f"{name}#{k}", "counts", values[:, None], kind, size, rng, False))
    return streams


def ucr(root: Path, names: tuple[str, ...] = UCR) -> list[Stream]:
    """The UCR anomaly series: the train part is normal, the test part holds one labelled segment."""
    out = []
    for name in names:
        case = load_ucr_anomaly(root / "UCR_Anomaly" / name)
        labels = np.flatnonzero(case.labels)
        out.append(Stream(name.split("_")[0], "ucr", ["value"], case.values.reshape(-1, 1).astype(np.float64),
                          [(int(labels[0]), int(labels[-1]))], test_start=case.train_end))  # fmt: skip
    return out


def sepsis(root: Path, patients: int, septic_share: float = 0.3) -> list[Stream]:
    """Odd-id PhysioNet 2019 set B patients, up to ``patients`` of them with about ``septic_share`` septic ones."""
    out: list[Stream] = []
    septic = plain = 0
    for p in iter_patients(root / "PhysioNet2019_sepsis" / "training_setB.tar.gz"):
        if int(p.id.lstrip("p")) % 2 == 0:
            continue
        is_septic = bool(p.sepsis.any())
        if (is_septic and septic >= septic_share * patients) or (not is_septic and plain >= (1 - septic_share) * patients):
            continue
        values = p.values[:, [p.columns.index(c) for c in VITALS]].astype(np.float64)
        events = [(int(np.flatnonzero(p.sepsis)[0]),) * 2] if is_septic else []
        out.append(Stream(p.id, "sepsis", list(VITALS), values, events))
        septic, plain = septic + is_septic, plain + (not is_septic)
        if len(out) >= patients:
            break
    return out


def corpus(root_override: str | None, quick: bool) -> list[Stream]:
    """The benchmark corpus; ``quick`` is a smaller fixed subset of every category."""
    root = data_root(root_override)
    return (synthetic(root, 33 if quick else 66) + archive(root, 11 if quick else 22) + multi(root, 12 if quick else 24)
            + ucr(root, UCR[2:] if quick else UCR)
            + sepsis(root, 150 if quick else 500))  # fmt: skip
