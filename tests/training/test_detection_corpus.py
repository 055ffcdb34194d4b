"""The detection benchmark's ``archive`` category: long real carriers from held-out UCR/UEA cases, one fault each."""
import functools

import numpy as np
import pytest

from trep_edge.datasets.paths import data_root
from trep_edge.datasets.ts_format import load_ts
from trep_edge.training.evaluation import detection_corpus as dc


@pytest.fixture(scope="module")
def root():
    path = data_root()
    if not all((path / folder / name / f"{name}_TEST.ts").is_file() for folder, name, _ in dc.ARCHIVE):
        pytest.skip(f"UCR/UEA data not found under {path} (set TREP_EDGE_DATA)")
    return path


@functools.cache
def quick_categories() -> frozenset[str]:
    """The categories of the quick corpus (built once per worker: four tests check that theirs stays out of it)."""
    return frozenset(s.category for s in dc.corpus(None, True))


def test_each_carrier_is_the_largest_class_of_held_out_test_cases_in_file_order(root):
    for (folder, name, width), (source, values) in zip(dc.ARCHIVE, dc._archive_sources(root)):
        cases, labels = load_ts(root / folder / name / f"{name}_TEST.ts")
        classes, counts = np.unique(labels, return_counts=True)
        chosen = np.flatnonzero(labels == classes[counts.argmax()])
        assert source == name and values.shape == (len(chosen) * cases.shape[1], width)
        # Case by case, in the file's order: the first and last case of the class open and close the carrier.
        np.testing.assert_array_equal(values[: cases.shape[1]], cases[chosen[0], :, :width])
        np.testing.assert_array_equal(values[-cases.shape[1] :], cases[chosen[-1], :, :width])


def test_the_quick_archive_streams_have_every_kind_once_every_size_and_one_fault_each(root):
    streams = dc.archive(root, 11)
    again = dc.archive(root, 11)
    assert [s.name for s in streams] == [s.name for s in again]
    assert all(np.array_equal(a.values, b.values, equal_nan=True) for a, b in zip(streams, again))
    assert sorted(s.meta["kind"] for s in streams) == sorted(dc.KINDS)
    assert {s.meta["size"] for s in streams} == set(dc.SIZES)
    sources = dict(dc._archive_sources(root))
    for s in streams:
        carrier = sources[s.name.split("#")[0]]
        assert s.category == "archive" and 2500 <= len(s.values) < 5000
        assert s.values.shape[1] == (3 if s.name.startswith("StandWalkJump") else 1)
        assert (s.events == []) == (s.meta["kind"] == "none")
        for onset, last in s.events:
            assert 0.35 * len(s.values) <= onset <= last < len(s.values)
        if s.values.shape[1] > 1:
            # The fault goes into the first channel only; the others are the carrier's, unchanged.
            n = len(s.values)
            starts = np.flatnonzero((carrier[: len(carrier) - n + 1, 1:] == s.values[0, 1:]).all(axis=1))
            assert any(np.array_equal(s.values[:, 1:], carrier[i : i + n, 1:]) for i in starts)


def test_the_corpus_holds_the_archive_category(root):
    categories = [s.category for s in dc.archive(root, 22)]
    assert categories == ["archive"] * 22


def test_clustered_streams_hold_three_or_four_ending_faults_close_together_and_stay_out_of_the_corpus():
    path = data_root()
    if not (path / "ETT" / "ETTh1.csv").is_file():
        pytest.skip(f"ETT data not found under {path} (set TREP_EDGE_DATA)")
    streams = dc.clustered(path, 4)
    again = dc.clustered(path, 4)
    assert all(np.array_equal(a.values, b.values, equal_nan=True) for a, b in zip(streams, again))
    assert [len(s.events) for s in streams] == [3, 4, 3, 4]
    for s in streams:
        assert s.category == "clustered" and 4000 <= len(s.values) < 6000
        assert s.events[0][0] == int(0.3 * len(s.values)) and s.events[-1][1] < len(s.values)
        for (_, end), (onset, _) in zip(s.events, s.events[1:]):
            assert 250 <= onset - end < 450  # past the refractory period, within the gate's memory of the last
        assert all(k.rstrip("0123456789.") in ("spike", "dip", "variance", "dropout", "cycle", "frequency")
                   for k in s.meta["kinds"])
    assert "clustered" not in quick_categories()


def test_short_streams_are_at_most_2000_readings_with_every_kind_and_size_and_stay_out_of_the_corpus(root):
    streams = dc.short(root, 33)
    again = dc.short(root, 33)
    assert all(np.array_equal(a.values, b.values, equal_nan=True) for a, b in zip(streams, again))
    assert sorted(s.meta["kind"] for s in streams) == sorted(dc.KINDS * 3)
    assert {s.meta["size"] for s in streams} == set(dc.SIZES)
    sources = {name: len(values) for name, values in dc._sources(root) + dc._archive_sources(root)}
    assert {s.name.split("#")[0] for s in streams} == set(sources)  # every carrier, synthetic and archive
    for s in streams:
        # 1,000–2,000 readings, or the whole carrier where it is shorter (the MIMIC-II half holds 968).
        assert s.category == "short" and min(1000, sources[s.name.split("#")[0]]) <= len(s.values) < 2000
        assert (s.events == []) == (s.meta["kind"] == "none")
        for onset, last in s.events:
            assert 0.35 * len(s.values) <= onset <= last < len(s.values)
    assert any(s.values.shape[1] > 1 for s in streams)
    assert "short" not in quick_categories()


def test_long_streams_span_weeks_with_zero_to_three_faults_in_their_slots_and_stay_out_of_the_corpus(root):
    streams = dc.long(root, 15)
    again = dc.long(root, 17)  # a larger draw (bench/long_streams.py --streams) keeps the default's streams
    assert len(again) == 17 and [s.name for s in again[:15]] == [s.name for s in streams]
    assert all(np.array_equal(a.values, b.values, equal_nan=True) and a.events == b.events
               for a, b in zip(streams, again))  # fmt: skip
    assert [len(s.events) for s in streams] == list(dc.LONG_FAULTS) * 3
    counts = set(dc.count_carriers())
    assert {s.name.split("#")[0] for s in streams} >= counts  # every count feed, whole
    for s in streams:
        carrier = s.name.split("#")[0]
        assert s.category == "long"
        assert len(s.values) == 12000 if carrier in counts else 12000 <= len(s.values) < 20000
        assert len(s.meta["kinds"]) == len(s.events)
        edges = np.linspace(0.2 * len(s.values), 0.95 * len(s.values), len(s.events) + 1).astype(int)
        for (onset, last), a, b in zip(s.events, edges[:-1], edges[1:]):
            assert a <= onset < a + (b - a) // 2 and onset <= last < len(s.values)  # the first half of its slot
    assert any(s.values.shape[1] > 1 for s in streams)
    assert "long" not in quick_categories()


def test_count_feeds_put_every_kind_on_every_skewed_carrier_at_every_size():
    carriers = dc.count_carriers()
    streams = dc.counts()
    again = dc.counts()
    assert all(np.array_equal(a.values, b.values) for a, b in zip(streams, again))
    assert len(streams) == len(carriers) * len(dc.KINDS)
    for name, values in carriers.items():
        assert values.min() >= 0
        q01, q50, q99 = np.percentile(values, [1, 50, 99])
        assert q99 - q50 > 2 * (q50 - q01)  # skewed: the long side well beyond the short one
        mine = [s for s in streams if s.name.startswith(name + "#")]
        assert sorted(s.meta["kind"] for s in mine) == sorted(dc.KINDS)
        assert {s.meta["size"] for s in mine} == set(dc.SIZES)
    for kind in dc.KINDS:
        sizes = sorted(s.meta["size"] for s in streams if s.meta["kind"] == kind)
        assert sizes == sorted(dc.SIZES * 2)
    for s in streams:
        assert s.category == "counts" and s.values.shape[1] == 1 and 2500 <= len(s.values) < 5000
        assert (s.events == []) == (s.meta["kind"] == "none")
        for onset, last in s.events:
            assert 0.35 * len(s.values) <= onset <= last < len(s.values)
    assert "counts" not in quick_categories()
