"""One per-stream state mechanism (core/stream_state.py) and one engine interface (engine.Scorer) under the monitor."""
import dataclasses

import numpy as np
import pytest

from trep_edge.runtime.core.engine import StepScorer, WindowedScorer, load_engine
from trep_edge.runtime.core.monitor import Monitor
from trep_edge.runtime.core.reading import Reading
from trep_edge.runtime.core.stream_state import LAYOUT_KEY, Rows, StreamState, concatenate, counts, declare, select
from trep_edge.runtime.core.windows import WindowStore
from round_trips import json_round_trip, npz_round_trip

T0 = 1_700_000_000.0


class Pair(StreamState):
    """A holder with a matrix field and a vector field."""

    def _fresh(self, n):
        return {"ring": np.zeros((n, 3)), "count": np.zeros(n, dtype=np.int64)}

    def _config(self):
        return {}


@pytest.mark.parametrize("round_trip", [npz_round_trip, json_round_trip])
def test_a_holder_round_trips_after_growing_past_its_capacity_and_losing_rows(round_trip):
    state = Pair()
    for i in range(20):  # past the first doubling (8, 16, 32 rows)
        state.add_streams(1)
        state.ring[i], state.count[i] = i, 10 * i
    state.remove_streams(np.array([0, 5, 19]))
    restored = Pair.from_state(round_trip(state.state_dict()))
    assert restored.n_streams == 17 and restored.fields == ("ring", "count")
    kept = [i for i in range(20) if i not in (0, 5, 19)]
    np.testing.assert_array_equal(restored.ring[:, 0], kept)
    np.testing.assert_array_equal(restored.count, np.array(kept) * 10)


def _flat(streams, tag):
    """A flat state: per stream, two lanes per stream, three rows per lane, a table of entries, a named setting."""
    n = len(streams)
    lane_stream = np.repeat(np.arange(n), 2)
    state = {"s/config": np.array('{"names": %s, "counters": {"x": 3}}' % str(list(streams)).replace("'", '"')),
             "s/value": tag + np.arange(n, dtype=float), "l/stream": lane_stream,
             "l/scale": tag + np.arange(6 * n, dtype=float), "e/lane": np.array([0, 2 * n - 1]),
             "e/step": np.array([7, 9])}  # fmt: skip
    declare(state, {"s/config": Rows(names="stream"), "s/value": Rows("stream"),
                    "l/stream": Rows("lane", refers="stream"), "l/scale": Rows("lane", per=3),
                    "e/lane": Rows("entry", refers="lane"), "e/step": Rows("entry")})  # fmt: skip
    return state


def test_rows_move_with_their_stream_by_their_declaration_alone():
    merged = concatenate([_flat(["a", "b"], 0.0), _flat(["c"], 100.0)])
    assert counts(merged) == {"stream": 3, "lane": 6, "entry": 4}
    assert merged["l/stream"].tolist() == [0, 0, 1, 1, 2, 2] and merged["e/lane"].tolist() == [0, 3, 4, 5]
    part = select(merged, np.array([False, True, True]))
    assert '"names": ["b", "c"]' in str(part["s/config"])
    np.testing.assert_array_equal(part["s/value"], [1.0, 100.0])
    assert part["l/stream"].tolist() == [0, 0, 1, 1]
    np.testing.assert_array_equal(part["l/scale"], np.r_[6.0:12.0, 100.0:106.0])  # b's lanes, then c's
    assert part["e/lane"].tolist() == [1, 2, 3] and part["e/step"].tolist() == [9, 7, 9]


def test_a_key_declared_wrong_or_not_at_all_is_refused_by_name():
    wrong = _flat(["a", "b"], 0.0)
    wrong["s/value"] = np.zeros(3)  # declared per stream: 2 rows
    with pytest.raises(ValueError, match="'s/value' has 3 stream rows"):
        counts(wrong)
    uneven = _flat(["a", "b"], 0.0)
    uneven["l/scale"] = np.zeros(13)  # declared 3 rows per lane
    with pytest.raises(ValueError, match="'l/scale'.*3 rows per lane"):
        select(uneven, np.array([True, False]))
    undeclared = _flat(["a"], 0.0)
    undeclared["future/table"] = np.zeros(1)
    with pytest.raises(ValueError, match="cannot move state key 'future/table'"):
        counts(undeclared)
    outside = _flat(["a"], 0.0)
    outside["e/lane"] = np.array([0, 2])
    with pytest.raises(ValueError, match="'e/lane' points at lane rows outside 0..1"):
        counts(outside)


@pytest.mark.parametrize("independent", [False, True])
def test_a_monitors_state_declares_every_key(univariate_engine, independent):
    engine = univariate_engine
    if independent:
        engine = dataclasses.replace(engine, card=dataclasses.replace(engine.card, channel_mode="independent"))
    channels = ("HR", "SpO2") if independent else engine.card.channels[:1]
    monitor = Monitor(engine)
    for k in range(4):
        for stream in ("a", "b"):
            monitor.ingest(Reading(stream, T0 + k, {c: 70.0 + k for c in channels}), T0 + k)
    monitor.tick(T0 + 3)
    monitor.ingest(Reading("a", T0 + 9, {channels[0]: 70.0}), T0 + 9)  # a pending step: an entry of its table
    state = monitor.state_dict()
    assert LAYOUT_KEY in state
    assert counts(state) == {"stream": 2, "lane": 4 if independent else 2, "windows/pending": 1}
    one = Monitor.from_state(engine, select(state, np.array([False, True])))
    assert list(one.streams) == ["b"] and one.counters["ticks"] == 1


@pytest.fixture(scope="module")
def causal_engines(causal_model):
    return load_engine(causal_model, "cpu", engine="step"), load_engine(causal_model, "cpu", engine="full")


def test_the_step_and_windowed_scorers_answer_the_same_call_alike(causal_engines, ucr_series):
    step, full = causal_engines
    scorers = step.scorer(), full.scorer()
    assert isinstance(scorers[0], StepScorer) and isinstance(scorers[1], WindowedScorer)
    assert scorers[1].state is None and not scorers[0].needs_windows
    scorers[0].state.add_streams(2)  # the monitor adds and removes a stateful scorer's lanes with its own
    store = WindowStore(step.card)
    values = ucr_series.values[:40]
    out = []
    for first in (0, 25):  # two ticks; the second continues each lane's state
        for t in range(first, first + (25 if first == 0 else 15)):
            for lane, offset in enumerate((0, 7)):
                store.ingest(Reading(f"s{lane}", T0 + t, {"value": float(values[(t + offset) % 40])}), T0 + t)
        scorers[0].refresh(store.histories)  # the monitor's call before each tick finalises its steps
        batch = store.collect(T0 + first + 30)
        rounds = [np.flatnonzero(batch.round == r) for r in range(int(batch.round.max()) + 1)]
        out.append((batch.complete, [scorer.score(batch, rounds, batch.windows) for scorer in scorers]))
    for (complete, (ours, theirs)), batch_rows in zip(out, (50, 30)):
        assert ours.rows == 2 * batch_rows and theirs.calls == 1 and ours.calls == batch_rows // 2
        assert complete.sum() > batch_rows // 2
        np.testing.assert_allclose(ours.z_unmasked[complete], theirs.z_unmasked[complete], atol=1e-5)
        np.testing.assert_allclose(ours.z_masked[complete], theirs.z_masked[complete], atol=1e-5)
    assert scorers[0].state.valid.all()
