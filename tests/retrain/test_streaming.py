"""The streaming dataset: ranks see disjoint patients, statistics match the in-memory loader, sections are the
in-memory loader's sections (in another order)."""
from __future__ import annotations

import numpy as np
import pytest

from trep_edge.datasets.paths import data_root
from trep_edge.datasets.physionet import VITALS
from trep_edge.training.crops import make_sections
from trep_edge.training.data import load_training_data
from trep_edge.training.streaming import PatientSections, batches, stream_normalisation

PATIENTS = 24
LENGTH = 32


@pytest.fixture(scope="module")
def set_b():
    path = data_root() / "PhysioNet2019_sepsis" / "training_setB.tar.gz"
    if not path.is_file():
        pytest.skip(f"PhysioNet set B not found at {path}")
    return path


def _sorted(sections) -> np.ndarray:
    flat = np.nan_to_num(np.stack(sections), nan=-999.0).reshape(len(sections), -1)
    return flat[np.lexsort(flat.T[::-1])]


def test_streamed_sections_are_the_in_memory_ones_split_disjointly_across_ranks(set_b):
    memory = load_training_data(str(set_b), max_series=PATIENTS, fill_limit=4, differencing=1)
    norm = stream_normalisation(set_b, VITALS, fill_limit=4, order=1, max_series=PATIENTS)
    np.testing.assert_allclose(norm.mean, memory.normalisation.mean, rtol=1e-5)
    np.testing.assert_allclose(norm.std, memory.normalisation.std, rtol=1e-4)
    ranks = [list(PatientSections(set_b, VITALS, memory.normalisation, LENGTH, fill_limit=4, order=1, buffer=8,
                                  seed=0, rank=r, world=2, max_series=PATIENTS)) for r in range(2)]  # fmt: skip
    streamed = [x for rank in ranks for x, _ in rank]
    expected = list(make_sections(memory.x, LENGTH).x)
    assert len(streamed) == len(expected) and min(len(r) for r in ranks) > 0
    np.testing.assert_allclose(_sorted(streamed), _sorted(expected), rtol=1e-5, atol=1e-6)


def test_the_shuffle_buffer_reorders_each_epoch_and_batches_have_the_batch_size(set_b):
    memory = load_training_data(str(set_b), max_series=8)
    dataset = PatientSections(set_b, VITALS, memory.normalisation, LENGTH, buffer=16, max_series=8)
    first = [start for _, start in dataset]
    second = [start for _, start in dataset]
    assert sorted(first) == sorted(second) and first != second
    x, start = next(batches(dataset, 5))
    assert x.shape == (5, LENGTH, len(VITALS)) and start.shape == (5,)
