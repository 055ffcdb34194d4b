"""Resharding moves each stream's state to its new owner: N shards' checkpoints → M, and the resumed monitors score
and alert exactly as one monitor that never moved anything (in-process; tests/deploy/test_scale_out.py does the same
with daemons and a broker)."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from trep_edge.cli import main
from trep_edge.runtime.service.checkpoint import load_checkpoint, save_checkpoint
from trep_edge.runtime.service.daemon import Daemon
from trep_edge.runtime.service.config import load_config
from trep_edge.runtime.core.engine import load_engine
from trep_edge.runtime.core.monitor import Monitor
from trep_edge.runtime.core.reading import Reading
from trep_edge.runtime.service.reshard import merge_states, reshard, select_streams, stream_names
from trep_edge.runtime.core.sharding import Shard, shard_of
from trep_edge.runtime.core.stream_state import Rows, declare

STREAMS = [f"bed{k:02d}" for k in range(12)]
STEPS, SWITCH = 160, 90  # reshard after step SWITCH - 1
T0 = 1_700_000_000.0


def _vitals(stream: str, steps: int) -> np.ndarray:
    """Synthetic 1 Hz vitals like the fixture model's training data, with an HR spike per stream and gaps."""
    rng = np.random.default_rng(zlib_seed(stream))
    t = np.arange(steps)
    x = np.stack([75 + 5 * np.sin(t / 30) + rng.normal(0, 1, steps), 97 + rng.normal(0, 0.5, steps),
                  16 + 2 * np.sin(t / 10) + rng.normal(0, 0.5, steps)], axis=-1)  # fmt: skip
    x[rng.random(x.shape) < 0.05] = np.nan
    spike = 50 + int(rng.integers(0, 100))
    x[spike : spike + 3, 0] += 60.0
    return x


def zlib_seed(stream: str) -> int:
    return shard_of(stream, 2**31)


def _run(monitors: dict[int, Monitor], owner, data: dict[str, np.ndarray], steps: range) -> tuple[dict, list]:
    """Feed ``steps`` of every stream to its owner's monitor, one tick per step; scores by (stream, step), alerts."""
    scores, alerts = {}, []
    for k in steps:
        now = T0 + k
        for stream, x in data.items():
            values = {c: float(v) for c, v in zip(("HR", "SpO2", "RESP"), x[k])}
            assert monitors[owner(stream)].ingest(Reading(stream, now, values), now) is None
        for monitor in monitors.values():
            result = monitor.tick(now + 0.5)
            scores.update({(s.stream, s.step): (s.raw, s.score, s.threshold, s.warming, s.alert)
                           for s in result.scored})  # fmt: skip
            alerts += [(a.stream, a.alert_id, a.state, a.severity, a.timestamp) for a in result.alerts]
    return scores, sorted(alerts)


def _save_shards(monitors: dict[int, Monitor], count: int, folder) -> list:
    paths = []
    for i, monitor in monitors.items():
        paths.append(folder / f"old-{i}.npz")
        save_checkpoint(paths[-1], monitor.state_dict(), {"saved_at": T0, "shard": f"{i}/{count}"})
    return paths


def test_three_shards_resharded_to_two_score_and_alert_like_one_unmoved_monitor(tmp_path, vitals_model, capsys):
    engine = load_engine(vitals_model, "cpu")
    data = {s: _vitals(s, STEPS) for s in STREAMS}
    reference = {0: Monitor(engine)}
    ref_scores, ref_alerts = _run(reference, lambda s: 0, data, range(STEPS))
    assert ref_alerts, "the spikes should raise alerts, or this comparison proves little"

    old = {i: Monitor(engine) for i in range(3)}
    scores, alerts = _run(old, lambda s: shard_of(s, 3), data, range(SWITCH))
    assert all(m.streams for m in old.values()), "every shard should own some streams"
    paths = _save_shards(old, 3, tmp_path)
    assert main(["reshard", *map(str, paths), "--to", "2", "--out", str(tmp_path / "new")]) == 0
    printed = capsys.readouterr().out
    assert "shard 0/2" in printed and "shard 1/2" in printed

    new = {}
    for i in range(2):
        state, meta = load_checkpoint(tmp_path / "new" / f"shard-{i}-of-2.npz")
        assert meta["shard"] == f"{i}/2" and all(shard_of(s, 2) == i for s in stream_names(state))
        new[i] = Monitor.from_state(engine, state)
    assert sorted(sum((list(m.streams) for m in new.values()), [])) == sorted(STREAMS)
    assert all(v == "active" for m in new.values() for v in m.streams.values()), "a moved stream warms up again"
    more_scores, more_alerts = _run(new, lambda s: shard_of(s, 2), data, range(SWITCH, STEPS))
    scores.update(more_scores)

    assert scores.keys() == ref_scores.keys()
    for key, expected in ref_scores.items():
        # Batches of other sizes round float32 differently.
        np.testing.assert_allclose(scores[key][:3], expected[:3], rtol=1e-5, atol=1e-6, err_msg=str(key))
        assert scores[key][3:] == expected[3:], key
    assert sorted(alerts + more_alerts) == ref_alerts


def _small_state(engine, streams: list[str]) -> dict[str, np.ndarray]:
    monitor = Monitor(engine)
    for k in range(3):
        for s in streams:
            monitor.ingest(Reading(s, T0 + k, {"HR": 70.0, "SpO2": 97.0, "RESP": 16.0}), T0 + k)
    monitor.ingest(Reading(streams[0], T0 + 5, {"HR": 70.0}), T0 + 5)  # a pending (unfinished) step
    monitor.tick(T0 + 3)
    return monitor.state_dict()


def test_new_per_stream_arrays_and_pending_steps_move_with_their_stream(vitals_model):
    engine = load_engine(vitals_model, "cpu")
    a, b = _small_state(engine, ["a1", "a2"]), _small_state(engine, ["b1", "b2", "b3"])
    for state, tag in ((a, 1.0), (b, 2.0)):  # state another component might add: one row per stream
        state["future/per_stream"] = np.arange(len(stream_names(state)))[:, None] * np.ones(4) + 10 * tag
        declare(state, {"future/per_stream": Rows("stream")})  # moved by its declaration, not by its shape
    merged = merge_states([a, b], ["a", "b"])
    assert stream_names(merged) == ["a1", "a2", "b1", "b2", "b3"]
    np.testing.assert_array_equal(merged["future/per_stream"][:, 0], [10, 11, 20, 21, 22])
    assert merged["windows/pending_stream"].tolist() == [0, 2]  # a1's and b1's pending steps
    part = select_streams(merged, np.array([False, False, True, False, True]))
    assert stream_names(part) == ["b1", "b3"] and part["windows/pending_stream"].tolist() == [0]
    np.testing.assert_array_equal(part["future/per_stream"][:, 0], [20, 22])
    before = Monitor.from_state(engine, b).streams
    assert Monitor.from_state(engine, part).streams == {s: before[s] for s in ("b1", "b3")}
    assert json.loads(str(merged["monitor/config"]))["counters"]["ticks"] == 0  # totals restart after a merge


def test_a_channel_independent_models_state_is_refused(univariate_engine):
    card = dataclasses.replace(univariate_engine.card, channel_mode="independent")
    monitor = Monitor(dataclasses.replace(univariate_engine, card=card))
    monitor.ingest(Reading("bed1", T0, {"HR": 70.0, "SpO2": 97.0}), T0)  # one stream, two lanes
    monitor.tick(T0 + 1)
    with pytest.raises(ValueError, match="several lanes.*not supported"):
        reshard([monitor.state_dict()], ["a"], 2)


def test_state_it_cannot_classify_is_refused_by_name(vitals_model):
    state = _small_state(load_engine(vitals_model, "cpu"), ["a1", "a2"])
    state["future/global_table"] = np.zeros(7)
    with pytest.raises(ValueError, match="cannot move state key 'future/global_table'.*teach runtime/trep_edge/runtime/service/reshard.py"):
        reshard([state], ["a"], 2)


def test_checkpoints_of_other_settings_or_overlapping_streams_are_refused(vitals_model):
    vitals = _small_state(load_engine(vitals_model, "cpu"), ["a1"])
    other_settings = _small_state(load_engine(vitals_model, "cpu"), ["b1"])
    tracker = json.loads(str(vitals["tracker/config"]))
    other_settings["tracker/config"] = np.array(json.dumps({**tracker, "debounce": 3}))
    with pytest.raises(ValueError, match="differ in 'tracker/config'"):
        merge_states([vitals, other_settings], ["x.npz", "y.npz"])
    with pytest.raises(ValueError, match="stream 'a1' is in both x.npz and y.npz"):
        merge_states([vitals, _small_state(load_engine(vitals_model, "cpu"), ["a1"])], ["x.npz", "y.npz"])


def test_reshard_command_wants_every_old_shard_once(tmp_path, vitals_model, capsys):
    engine = load_engine(vitals_model, "cpu")
    paths = []
    for i, streams in enumerate((["a"], ["b"], ["c"])):
        paths.append(tmp_path / f"{i}.npz")
        save_checkpoint(paths[-1], _small_state(engine, streams), {"saved_at": T0, "shard": f"{i}/3"})
    out = str(tmp_path / "new")
    assert main(["reshard", str(paths[0]), str(paths[1]), "--to", "2", "--out", out]) == 2
    assert "no checkpoint given for shard(s) 2/3" in capsys.readouterr().err
    assert main(["reshard", str(paths[0]), str(paths[0]), "--to", "2", "--out", out]) == 2
    assert "are both shard 0/3" in capsys.readouterr().err
    (tmp_path / "notes.npz").write_text("not a checkpoint")
    assert main(["reshard", str(tmp_path / "notes.npz"), "--to", "2", "--out", out]) == 2
    assert "notes.npz is not a readable trep-edge checkpoint" in capsys.readouterr().err
    assert main(["reshard", str(paths[0]), str(paths[1]), "--to", "1", "--out", out, "--allow-missing"]) == 0
    state, _ = load_checkpoint(tmp_path / "new" / "shard-0-of-1.npz")
    assert stream_names(state) == ["a", "b"]


def test_a_daemon_keeps_only_its_own_streams_of_a_checkpoint_from_another_layout(tmp_path, vitals_model, caplog):
    """The rolling alternative to reshard: each new shard keeps its streams, the others warm up on their owner."""
    engine = load_engine(vitals_model, "cpu")
    names = [f"bed{k}" for k in range(10)]
    save_checkpoint(tmp_path / "state.npz", _small_state(engine, names), {"saved_at": T0, "shard": "0/1"})
    flags = {("model", "path"): str(vitals_model), ("model", "providers"): "cpu", ("http", "port"): "0",
             ("state", "path"): str(tmp_path / "state.npz"), ("monitor", "shard"): "1/3"}  # fmt: skip
    daemon = Daemon(load_config(None, {}, flags))
    owned = [n for n in names if Shard(1, 3).owns(n)]
    assert 0 < len(owned) < len(names) and sorted(daemon.monitor.streams) == sorted(owned)
    assert f"holds {len(names) - len(owned)} of {len(names)} streams that shard 1/3 does not own" in caplog.text
