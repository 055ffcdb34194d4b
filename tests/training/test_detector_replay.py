"""bench/detector_replay.py: a detector variant replayed on captured inputs gives exactly what the monitor gives."""
from __future__ import annotations

import argparse
import importlib.util
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest

from trep_edge.runtime.core.detector import DetectorConfig
from trep_edge.runtime.core.engine import load_engine
from trep_edge.runtime.core.offline import detect_recording
from trep_edge.training.evaluation import detection_metrics as dm
from trep_edge.training.evaluation.detection_corpus import Stream

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("detector_replay", ROOT / "bench" / "detector_replay.py")
replay_bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = replay_bench  # its dataclasses look their module up by name
_spec.loader.exec_module(replay_bench)


def _streams() -> list[Stream]:
    """Two streams of different lengths and lane counts, each with a fault and a few alerts under a low bar."""
    rng = np.random.default_rng(3)
    t = np.arange(700)
    one = (np.sin(2 * np.pi * t / 50) + rng.normal(0, 0.1, len(t)))[:, None]
    one[500] += 4.0
    three = np.stack([np.cos(2 * np.pi * np.arange(520) / 40) + rng.normal(0, 0.1, 520) for _ in range(3)], axis=1)
    three[300:340, 1] += 2.0
    return [Stream("one", "synthetic", ["c0"], one, [(500, 500)]),
            Stream("three", "synthetic", ["c0", "c1", "c2"], three, [(300, 339)])]  # fmt: skip


@pytest.mark.parametrize("spec", ["", "threshold=2;refractory=50;min_count=40"])
def test_replayed_variant_equals_the_monitors_scores_and_alerts(tmp_path, spec):
    engine = load_engine(ROOT / "models" / "general.onnx", "cpu")
    streams = _streams()
    tapes = [replay_bench.capture(engine, s, tmp_path)[0] for s in streams]
    config = DetectorConfig().with_overrides(spec)
    # As the benchmark replays it: the settings the card's scaling is judged with (the monitor chooses them itself).
    judged = config.for_scaling(engine.card.scaling)
    replayed = replay_bench.replay(tapes, judged, engine.card.detector_prior, [len(s.values) for s in streams])
    for s, (score, alerts) in zip(streams, replayed):
        want = detect_recording(engine, s.values, config)
        assert np.array_equal(score, want.score, equal_nan=True)
        assert np.array_equal(alerts, want.alerts)
    if spec:  # the low bar alerts, so the equality above covered alert decisions, not only silence
        assert sum(int(a.sum()) for _, a in replayed) >= 2


def test_a_captured_tape_is_read_back_from_the_cache(tmp_path):
    engine = load_engine(ROOT / "models" / "general.onnx", "cpu")
    stream = _streams()[0]
    first, committed = replay_bench.capture(engine, stream, tmp_path)
    assert len(list(tmp_path.glob("*.npz"))) == 1
    again, cached = replay_bench.capture(engine, stream, tmp_path)
    assert [c[0] for c in again] == [c[0] for c in first]
    assert np.array_equal(cached["score"], committed["score"], equal_nan=True)


def test_extra_train_flags_are_echoed_runnable_and_need_per_stream():
    parser = argparse.ArgumentParser()
    replay_bench.add_arguments(parser)
    args = parser.parse_args(["--quick", "--per-stream", "cache", "--per-stream-train-flags=--no-weight-average"])
    assert replay_bench.corpus_flags(args) == ["--quick", "--per-stream", "cache",
                                               "--per-stream-train-flags='--no-weight-average'"]  # fmt: skip
    assert parser.parse_args(shlex.split(" ".join(replay_bench.corpus_flags(args)))) == args
    with pytest.raises(SystemExit, match="give --per-stream too"):
        replay_bench.Bench.load(parser.parse_args(["--per-stream-train-flags=--seed 1"]))


def test_a_bench_of_given_streams_replays_them_as_the_monitor_scores_them(tmp_path):
    # bench/clustered_faults.py hands its own streams to Bench.load instead of the benchmark's corpus.
    parser = argparse.ArgumentParser()
    replay_bench.add_arguments(parser)
    args = parser.parse_args(["--model", str(ROOT / "models" / "general.onnx"), "--icu-model",
                              str(ROOT / "models" / "icu-vitals.onnx"), "--cache", str(tmp_path)])  # fmt: skip
    streams = _streams()
    bench = replay_bench.Bench.load(args, streams)
    assert [s.name for s in bench.streams] == ["one", "three"] and bench.groups == [[0, 1]]
    engine = load_engine(ROOT / "models" / "general.onnx", "cpu")
    for s, (score, alerts) in zip(streams, bench.run(DetectorConfig())):
        want = detect_recording(engine, s.values, DetectorConfig())
        assert np.array_equal(score, want.score, equal_nan=True) and np.array_equal(alerts, want.alerts)


def test_categories_keep_only_the_named_streams_and_are_echoed_runnable(tmp_path):
    parser = argparse.ArgumentParser()
    replay_bench.add_arguments(parser)
    flags = ["--model", str(ROOT / "models" / "general.onnx"), "--icu-model", str(ROOT / "models" / "icu-vitals.onnx"),
             "--cache", str(tmp_path)]  # fmt: skip
    one, three = _streams()
    three.category = "archive"
    args = parser.parse_args([*flags, "--categories", "archive"])
    assert [s.name for s in replay_bench.Bench.load(args, [one, three]).streams] == ["three"]
    assert replay_bench.corpus_flags(args) == ["--categories archive"]
    assert parser.parse_args([*flags, *shlex.split(" ".join(replay_bench.corpus_flags(args)))]) == args
    with pytest.raises(SystemExit, match="no stream of"):
        replay_bench.Bench.load(parser.parse_args([*flags, "--categories", "ucr"]), [one, three])
    one.category = "sepsis"  # too short a stay to train on: per-stream models are refused it by name
    per_stream = ["--per-stream", str(tmp_path / "models"), "--categories", "sepsis"]
    with pytest.raises(SystemExit, match="sepsis stays are too short"):
        replay_bench.Bench.load(parser.parse_args([*flags, *per_stream]), [one, three])


def test_peers_are_chosen_by_name_and_an_unknown_one_is_refused(monkeypatch):
    monkeypatch.setattr(replay_bench.detection, "PEER_PACKAGES", {})  # as if [bench] were installed
    parser = argparse.ArgumentParser()
    replay_bench.add_peers_argument(parser)
    peers, flags = replay_bench.chosen_peers(parser.parse_args([]), parser)
    assert peers == list(replay_bench.PEERS) and flags == []  # the default says nothing in a results file
    peers, flags = replay_bench.chosen_peers(parser.parse_args(["--peers", "rolling_z"]), parser)
    assert peers == ["rolling_z"] and flags == ["--peers 'rolling_z'"]
    assert replay_bench.chosen_peers(parser.parse_args(["--peers", ""]), parser)[0] == []
    with pytest.raises(SystemExit):
        replay_bench.chosen_peers(parser.parse_args(["--peers", "rolling_z,oracle"]), parser)


def test_a_peer_whose_bench_package_is_missing_is_refused_before_any_work_in_one_line(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "river" else real(name, *a))
    parser = argparse.ArgumentParser()
    replay_bench.add_peers_argument(parser)
    with pytest.raises(SystemExit, match=r"the hst peer needs River: pip install 'trep-edge\[bench\]'"):
        replay_bench.chosen_peers(parser.parse_args(["--peers", "rolling_z,hst"]), parser)
    assert replay_bench.chosen_peers(parser.parse_args(["--peers", "rolling_z"]), parser)[0] == ["rolling_z"]


def test_step_rows_follow_the_row_before_each_step():
    tape = [("init", 4, 1), ("row", 0), ("step",), ("row", -1), ("step",), ("reset",), ("row", 5), ("step",)]
    assert replay_bench.step_rows(tape) == [0, -1, 5]


def test_rows_before_count_from_are_uncounted_but_never_a_labelled_window():
    rows = 1000
    values = np.zeros((rows, 1))
    late = Stream("late", "long", ["c0"], values, [(600, 610)])
    early = Stream("early", "long", ["c0"], values, [(150, 155)])  # its NAB window starts before 20 % of the rows
    bench = replay_bench.Bench([late, early], [], [], [], [], [], 0.0, count_from=0.2)
    score, alerts = np.arange(rows, dtype=np.float32), np.zeros(rows, dtype=bool)
    alerts[[100, 199, 200, 600]] = True
    (late_score, late_alerts), (early_score, early_alerts) = bench.uncounted_before([(score, alerts)] * 2)
    window = replay_bench.nab_windows(rows, early.events)[0][0]
    assert window < 200
    assert list(np.flatnonzero(late_alerts)) == [200, 600] and np.isnan(late_score[:200]).all()
    assert late_score[200] == 200
    assert list(np.flatnonzero(early_alerts)) == [a for a in (100, 199, 200, 600) if a >= window]
    assert np.isnan(early_score[:window]).all() and early_score[window] == window
    assert alerts.sum() == 4 and not np.isnan(score).any()  # the outputs given are left as they were
    bench.count_from = 0.0
    assert bench.uncounted_before([(score, alerts)])[0][1] is alerts


def test_every_row_is_paired_with_the_committed_one_on_the_same_stream_draws():
    rows = 1000
    streams = [Stream(f"s{k}", "long", ["c0"], np.zeros((rows, 1)), [(500, 500)]) for k in range(8)]
    bench = replay_bench.Bench(streams, [], [], [], [], [], 0.0)
    score, silent, found = np.zeros(rows), np.zeros(rows, dtype=bool), np.zeros(rows, dtype=bool)
    found[450] = True  # the start of each stream's window
    results = {"rows": {}, "seconds": {}}
    bench.score(results, "peer", [(score, silent)] * 8, 0.0)  # scored before the committed row, paired all the same
    bench.score(results, "trep", [(score, found), (score, silent)] * 4, 0.0)
    bench.score(results, "same", [(score, found), (score, silent)] * 4, 0.0)
    bench.paired(results)
    assert "vs_trep" not in results["rows"]["trep"]["overall"]
    assert results["rows"]["same"]["overall"]["vs_trep"] == "+0.0 to +0.0"
    low, high = (float(v) for v in results["rows"]["peer"]["overall"]["vs_trep"].split(" to "))
    assert -100.0 <= low <= high < 0.0  # never alerting loses on every draw that holds a found window
    assert results["rows"]["trep"]["overall"]["nab_interval"] == "{:.1f}–{:.1f}".format(
        *dm.nab_interval([a for _, a in bench.scored["trep"]], [s.events for s in streams]))
