"""A streaming dataset for corpora that do not fit in memory: PhysioNet 2019 patients read from the tarball.

Memory stays bounded by the shuffle buffer, not the corpus: patients are parsed one at a time
(``datasets.physionet.iter_patients`` streams the .tar.gz), prepared exactly as ``training/trep_edge/training/data.py`` prepares
them (channels, bounded forward fill, differencing, normalisation), cut into training sections, and sections
leave through a bounded shuffle buffer. Each rank (and each DataLoader worker) keeps every k-th patient of the
archive order, so ranks see disjoint patients. Normalisation statistics come from one streaming pass
(``stream_normalisation``), per-channel sums in float64, also in bounded memory.
Measured peak RSS against loading everything: ``bench/streaming_rss.py`` (results in docs/training.md).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
from torch.utils.data import IterableDataset, get_worker_info

from trep_edge.datasets.physionet import iter_patients
from trep_edge.runtime.core.preprocess import Normalisation, difference, forward_fill

from trep_edge.training.crops import make_sections


def _raw_series(tar_path: Path, channels: list[str], fill_limit: int, order: int, max_series: int | None,
                shard: int = 0, shards: int = 1) -> Iterator[np.ndarray]:  # fmt: skip
    """Each kept patient's channels, forward-filled and differenced (not normalised): ``[T, C]``."""
    for i, patient in enumerate(iter_patients(tar_path, limit=max_series)):
        if i % shards != shard:
            continue
        missing = [c for c in channels if c not in patient.columns]
        if missing:
            raise ValueError(f"{tar_path}: channel(s) {missing} not present; available: {patient.columns}")
        x = patient.values[:, [patient.columns.index(c) for c in channels]]
        # As in the in-memory loader, where trailing hours without any of the channels look like padding.
        observed = np.flatnonzero(~np.isnan(x).all(axis=1))
        x = x[: observed[-1] + 1 if len(observed) else 0]
        if fill_limit:
            x = forward_fill(x, fill_limit)[0]
        yield difference(x, order)


def stream_normalisation(tar_path: str | Path, channels: list[str], fill_limit: int = 0, order: int = 0,
                         max_series: int | None = None) -> Normalisation:  # fmt: skip
    """Per-channel mean and std over every patient in one pass (the same statistics as ``fit_normalisation``)."""
    count = np.zeros(len(channels))
    total = np.zeros(len(channels))
    squares = np.zeros(len(channels))
    for x in _raw_series(Path(tar_path), channels, fill_limit, order, max_series):
        values = np.asarray(x, dtype=np.float64)
        seen = ~np.isnan(values)
        count += seen.sum(axis=0)
        total += np.where(seen, values, 0).sum(axis=0)
        squares += np.where(seen, values**2, 0).sum(axis=0)
    if not count.all():
        raise ValueError(f"channel(s) {[c for c, n in zip(channels, count) if not n]} have no observed value")
    mean = total / count
    std = np.sqrt(np.maximum(squares / count - mean**2, 0))
    std = np.where(std > 1e-8, std, 1.0)
    return Normalisation(mean.astype(np.float32), std.astype(np.float32))


class PatientSections(IterableDataset):
    """Training sections ``(x [L, C], start)`` of the patients of one rank, through a bounded shuffle buffer.

    Iterating again starts a new epoch with a new shuffle (the buffer's generator is seeded by seed, rank and
    epoch). Sections are NaN-padded to ``max_train_length`` so they batch without another copy.
    """

    def __init__(self, tar_path: str | Path, channels: list[str], normalisation: Normalisation, max_train_length: int,
                 fill_limit: int = 0, order: int = 0, buffer: int = 1024, seed: int = 0, rank: int = 0,
                 world: int = 1, max_series: int | None = None) -> None:  # fmt: skip
        super().__init__()
        if buffer < 1:
            raise ValueError(f"shuffle buffer must hold at least 1 section, got {buffer}")
        self.tar_path, self.channels, self.normalisation = Path(tar_path), list(channels), normalisation
        self.max_train_length, self.fill_limit, self.order = max_train_length, fill_limit, order
        self.buffer, self.seed, self.rank, self.world, self.max_series = buffer, seed, rank, world, max_series
        self.epoch = 0

    def _sections(self, shard: int, shards: int) -> Iterator[tuple[np.ndarray, int]]:
        for x in _raw_series(self.tar_path, self.channels, self.fill_limit, self.order, self.max_series, shard, shards):
            prepared = self.normalisation.apply(x)[None]
            if np.isnan(prepared).all():
                continue
            cut = make_sections(prepared, self.max_train_length)
            for piece, start in zip(cut.x, cut.start):
                padded = np.full((self.max_train_length, piece.shape[1]), np.nan, dtype=np.float32)
                padded[: len(piece)] = piece
                yield padded, int(start)

    def __iter__(self) -> Iterator[tuple[np.ndarray, int]]:
        worker = get_worker_info()
        workers, worker_id = (1, 0) if worker is None else (worker.num_workers, worker.id)
        shard, shards = self.rank * workers + worker_id, self.world * workers
        rng = np.random.default_rng([self.seed, shard, self.epoch])
        self.epoch += 1
        pool: list[tuple[np.ndarray, int]] = []
        for item in self._sections(shard, shards):
            if len(pool) < self.buffer:
                pool.append(item)
                continue
            k = int(rng.integers(len(pool)))
            pool[k], item = item, pool[k]
            yield item
        rng.shuffle(pool)
        yield from pool


def batches(dataset: PatientSections, batch_size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Endless batches ``(x [B, L, C], start [B])`` over epochs of the dataset (an incomplete last batch is dropped)."""
    while True:
        x, start = [], []
        produced = False
        for section, offset in dataset:
            x.append(section)
            start.append(offset)
            if len(x) == batch_size:
                yield np.stack(x), np.asarray(start, dtype=np.int64)
                x, start, produced = [], [], True
        if not produced:
            raise ValueError(f"the stream holds fewer than {batch_size} sections for this rank: lower --batch-size")
