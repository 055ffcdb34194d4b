"""The general-purpose model's pretraining corpus: broad univariate real series, each robust-scaled on its own.

Sources (data root overridable): ETT (7 channels of the 4 files, first half of the rows), UCR and UEA ``_TRAIN.ts``
(UEA: per class and channel the cases concatenated into longer series), PhysioNet 2019 set B vitals of even
patient ids, MIMIC-II numerics ``icu_vitals/s00001_numerics`` (first half; 0 = sensor not connected) and the
250 Hz ECG/PLETH record ``icu_vitals/a103l`` averaged down to 50 Hz. Odd PhysioNet ids, second halves and
``_TEST`` files stay held out for the detection benchmark; ``UCR_Anomaly`` is not used. Every source is capped
in rows so no data set dominates. The result is one ``.npy`` ``[N, T_max, 1]`` (NaN padding) that
``trep-edge train`` reads; it goes in a cache folder, never in the repository.

    python -m trep_edge.training.general_corpus --out ~/.cache/trep-edge/general_corpus.npy
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Iterator

import numpy as np

from trep_edge.datasets.ett import load_csv
from trep_edge.datasets.paths import data_root
from trep_edge.datasets.physionet import VITALS, iter_patients
from trep_edge.datasets.ts_format import load_ts
from trep_edge.runtime.core.preprocess import robust_location_scale

# Rows each source may contribute at most: the large archives (ETTm, UEA) would otherwise be most of the corpus.
DEFAULT_CAPS = {"ett": 120_000, "ucr": 60_000, "uea": 120_000, "physionet": 80_000, "mimic": 20_000, "a103l": 40_000}
# Samples averaged into one: 250 Hz ECG/PLETH to 50 Hz keeps the beat shape (QRS ~ 5 samples) at a trainable length.
A103L_FACTOR = 5
# Pieces with fewer observed readings than this teach nothing about temporal structure.
MIN_OBSERVED = 16
# The runtime's StreamScaler clips scaled readings to this magnitude; training sees the same range.
CLIP = 100.0
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "trep-edge" / "general_corpus.npy"


def robust_scale(series: np.ndarray) -> np.ndarray:
    """One series ``[T]`` minus its median over its robust scale, clipped, as the runtime's per-stream scaling."""
    loc, scale = robust_location_scale(series[None, :])
    return np.clip((series - loc[0]) / scale[0], -CLIP, CLIP).astype(np.float32)


def _first_half(values: np.ndarray) -> np.ndarray:
    return values[: len(values) // 2]


def ett_series(root: Path) -> Iterator[np.ndarray]:
    """Every channel of the four ETT files, first half of the rows (the second half is held out)."""
    for name in ("ETTh1", "ETTh2", "ETTm1", "ETTm2"):
        # float32, as the shipped general model was trained on it
        values = _first_half(load_csv(root / "ETT" / f"{name}.csv", dtype=np.float32).values)
        yield from values.T


def ucr_series(root: Path) -> Iterator[np.ndarray]:
    """Each case of every UCR ``_TRAIN.ts`` (univariate)."""
    for path in sorted((root / "UCR").glob("*/*_TRAIN.ts")):
        x, _ = load_ts(path)
        for case in x:
            yield from case.T


def uea_series(root: Path) -> Iterator[np.ndarray]:
    """UEA ``_TRAIN.ts``: per class and channel, that class's cases concatenated (their NaN tails dropped)."""
    for path in sorted((root / "UEA").glob("*/*_TRAIN.ts")):
        x, y = load_ts(path)
        for label in sorted(set(y.tolist())):
            cases = x[y == label]
            for c in range(x.shape[-1]):
                yield np.concatenate([_trim_tail(case[:, c]) for case in cases])


def physionet_series(root: Path) -> Iterator[np.ndarray]:
    """Hourly vitals of set B patients with an even id (odd ids are held out); missing hours stay NaN."""
    columns = None
    for patient in iter_patients(root / "PhysioNet2019_sepsis" / "training_setB.tar.gz"):
        if int(patient.id.lstrip("p")) % 2:
            continue
        columns = columns or [patient.columns.index(v) for v in VITALS]
        yield from patient.values[:, columns].T


def mimic_series(root: Path) -> Iterator[np.ndarray]:
    """MIMIC-II numerics, first half of the rows, 0 (sensor not connected) as NaN; the minute counter dropped."""
    for path in sorted((root / "icu_vitals" / "s00001_numerics").glob("*_decoded.csv")):
        series = load_csv(path)
        sensors = [c for c in series.channels if c != "minute"]
        values = load_csv(path, zero_as_missing=sensors, dtype=np.float32).values
        for c, name in enumerate(series.channels):
            if name in sensors:
                yield _first_half(values[:, c])


def a103l_series(root: Path) -> Iterator[np.ndarray]:
    """The three 250 Hz signals of record a103l (ECG II, V, PLETH), block-averaged to 50 Hz."""
    header = (root / "icu_vitals" / "a103l" / "a103l.hea").read_text().split()
    channels, samples = int(header[1]), int(header[3])
    # WFDB format 16 in a MATLAB v4 file: a 24-byte header, then int16 samples interleaved by channel.
    raw = np.fromfile(root / "icu_vitals" / "a103l" / "a103l.mat", dtype="<i2", offset=24)
    if raw.size != channels * samples:
        raise ValueError(f"a103l.mat holds {raw.size} samples, its header says {channels} x {samples}")
    signals = raw.reshape(samples, channels).astype(np.float32)
    usable = samples // A103L_FACTOR * A103L_FACTOR
    yield from signals[:usable].reshape(-1, A103L_FACTOR, channels).mean(axis=1).T


SOURCES = {"ett": ett_series, "ucr": ucr_series, "uea": uea_series, "physionet": physionet_series,
           "mimic": mimic_series, "a103l": a103l_series}  # fmt: skip


def _trim_tail(series: np.ndarray) -> np.ndarray:
    observed = np.flatnonzero(~np.isnan(series))
    return series[: observed[-1] + 1] if len(observed) else series[:0]


def _pieces(series: np.ndarray, length: int) -> Iterator[np.ndarray]:
    """Scaled series cut into pieces of at most ``length`` with enough observed readings."""
    series = _trim_tail(np.asarray(series, dtype=np.float32))
    if np.count_nonzero(~np.isnan(series)) < MIN_OBSERVED:
        return
    scaled = robust_scale(series)
    for start in range(0, len(scaled), length):
        piece = scaled[start : start + length]
        if np.count_nonzero(~np.isnan(piece)) >= MIN_OBSERVED:
            yield piece


def build_corpus(
    root: str | os.PathLike[str] | None = None, length: int = 2048, caps: dict[str, int] | None = None, seed: int = 0
) -> tuple[np.ndarray, dict[str, dict[str, int]]]:
    """The corpus ``[N, length, 1]`` (NaN padding) and, per source, how many series and rows it contributes."""
    base = data_root(root)
    caps = {**DEFAULT_CAPS, **(caps or {})}
    unknown = sorted(set(caps) - set(SOURCES))
    if unknown:
        raise ValueError(f"unknown corpus source(s) {unknown}; known: {sorted(SOURCES)}")
    kept: list[np.ndarray] = []
    counts: dict[str, dict[str, int]] = {}
    for name, source in SOURCES.items():
        pieces = [p for s in source(base) for p in _pieces(s, length)]
        # A seeded shuffle before the cap: the kept rows sample the whole source, not its first files.
        order = np.random.default_rng(seed).permutation(len(pieces))
        rows, chosen = 0, []
        for i in order:
            if rows >= caps[name]:
                break
            chosen.append(pieces[i])
            rows += len(pieces[i])
        counts[name] = {"series": len(chosen), "rows": rows, "available_series": len(pieces)}
        kept.extend(chosen)
    corpus = np.full((len(kept), length, 1), np.nan, dtype=np.float32)
    for i, piece in enumerate(kept):
        corpus[i, : len(piece), 0] = piece
    return corpus, counts


def main(argv: list[str] | None = None) -> int:
    """Build the corpus and write it as one .npy (default: the user's cache folder)."""
    parser = argparse.ArgumentParser(prog="python -m trep_edge.training.general_corpus", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_CACHE, help="output .npy (default: %(default)s)")
    parser.add_argument("--data-root", help="data folder (default: $TREP_EDGE_DATA or ../shared/data)")
    parser.add_argument("--length", type=int, default=2048, help="longest piece T_max (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the per-source sampling (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.out.suffix != ".npy":
        parser.error(f"--out {args.out} must end in .npy")
    corpus, counts = build_corpus(args.data_root, args.length, seed=args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.save(args.out, corpus)
    for name, c in counts.items():
        print(f"{name:10s} {c['series']:6d} series {c['rows']:8d} rows (of {c['available_series']} series)")
    print(f"wrote {args.out}: {corpus.shape}, {np.count_nonzero(~np.isnan(corpus))} readings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
