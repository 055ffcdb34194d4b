"""Per-stream-trained models of the detection benchmark: only the probation part reaches training, with the
evaluator's flags and export's defaults; models are cached; partial rows are reported only where they ran."""
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from trep_edge.training.commands import export as export_command, train as train_command
from trep_edge.training.evaluation import detection, detection_metrics as dm, detection_per_stream as ps
from trep_edge.training.evaluation.detection_corpus import Stream

SENTINEL = 1e9  # every reading after the probation part, and nothing before it


def _stream(length: int, channels: int = 1) -> Stream:
    rng = np.random.default_rng(length)
    values = rng.normal(size=(length, channels))
    values[dm.probation(length) :] = SENTINEL
    onset = length // 2
    return Stream(f"s{length}", "synthetic", [f"c{c}" for c in range(channels)], values, [(onset, onset + 5)])


@pytest.mark.parametrize("length, rows", [(100, 15), (1000, 150), (5000, 750), (20_000, 750)])
def test_the_training_slice_is_the_probation_part_capped_at_750(length, rows):
    stream = _stream(length)
    piece = ps.training_slice(stream)
    assert len(piece) == rows == dm.probation(length)
    np.testing.assert_array_equal(piece, stream.values[:rows])
    assert piece.max() < SENTINEL


@pytest.fixture()
def fake_cli(monkeypatch):
    """The ``train`` / ``export`` commands' ``run``, recording what they were given instead of training."""
    seen = []

    def train(args):
        seen.append(("train", args, np.load(args.data)))
        print('{"final_losses": {"loss": 1.0}}')
        return 0

    def export(args):
        seen.append(("export", args, None))
        open(args.out, "wb").close()
        print('{"calibration": {"mu": 0.0, "sigma": 1.0}}')
        return 0

    monkeypatch.setattr(train_command, "run", train)
    monkeypatch.setattr(export_command, "run", export)
    return seen


def test_only_the_probation_part_reaches_training_with_the_evaluators_flags(fake_cli, tmp_path):
    stream = _stream(3000, channels=3)
    models = ps.PerStreamModels(tmp_path / "cache", threads=1)
    path = models.path(stream)
    (_, train_args, data), (_, export_args, _) = fake_cli
    assert data.shape == (450, 3) and data.dtype == np.float32  # one multichannel model of the stream's channels
    np.testing.assert_array_equal(data, stream.values[:450].astype(np.float32))
    assert (train_args.iterations, train_args.hidden_dims, train_args.depth, train_args.repr_dims,
            train_args.max_train_length, train_args.threads) == (200, 64, 8, 64, 201, 1)  # fmt: skip
    assert train_args.seed is None and train_args.channels is None and train_args.rows is None  # CLI defaults
    assert export_args.checkpoint == train_args.out
    assert (export_args.window, export_args.z, export_args.beta, export_args.delay) == (201, 21, 4.0, 7)
    assert not export_args.no_calibration and export_args.calibration_data is None  # calibrates on the slice
    assert path.is_file() and models.info[stream.name]["rows"] == 450 and not models.info[stream.name]["cached"]
    assert models.info[stream.name]["calibration"] == {"mu": 0.0, "sigma": 1.0}


def test_a_cached_model_is_reused_and_a_changed_slice_is_not(fake_cli, tmp_path):
    stream = _stream(2000)
    first = ps.PerStreamModels(tmp_path, threads=1).path(stream)
    again = ps.PerStreamModels(tmp_path, threads=1)
    assert again.path(stream) == first and again.info[stream.name]["cached"]
    assert len(fake_cli) == 2
    # Readings after the probation part are not part of the key: they never reach training.
    later = _stream(2000)
    later.values[dm.probation(2000) :] = 0.0
    assert ps.PerStreamModels(tmp_path, threads=1).path(later) == first
    changed = _stream(2000)
    changed.values[0, 0] += 1.0
    assert ps.PerStreamModels(tmp_path, threads=1).path(changed) != first
    assert len(fake_cli) == 4


def test_a_partial_row_appears_only_in_the_sections_it_ran_on():
    row = {"nab_standard": 1.0, "f1": 0.5}
    results = {"command": "c", "wall_seconds": 1.0, "streams": {}, "model": "m", "icu_model": "i",
               "notes": {"trep:per-stream": "synthetic and ucr only"}, "seconds": {"trep": 1.0, "trep:per-stream": 2.0},
               "rows": {"trep": {"overall": row, "sepsis": row, "synthetic": row, "synthetic+ucr": row},
                        "trep:per-stream": {"synthetic": row, "synthetic+ucr": row}}}  # fmt: skip
    text = detection.markdown(results)
    sections = {part.split("**")[0]: part for part in text.split("\n\n**")[1:]}
    assert set(sections) == {"overall", "sepsis", "synthetic", "synthetic+ucr"}
    assert "trep:per-stream" not in sections["overall"] and "trep:per-stream" not in sections["sepsis"]
    assert "| trep:per-stream |" in sections["synthetic+ucr"]
    assert "- `trep:per-stream`: synthetic and ucr only" in text


def test_a_fine_tuned_model_starts_from_the_base_on_the_slice_prepared_as_the_base_expects(fake_cli, tmp_path):
    stream = _stream(3000, channels=3)
    stream.values[:, 1] = 1e4 + 50 * stream.values[:, 1]  # a channel on another scale: scaled on its own
    stream.values[dm.probation(3000) :] = SENTINEL
    base = ps.FineTune(tmp_path / "general.onnx", "a" * 64, window=128, stream_scaled=True)
    ps.PerStreamModels(tmp_path / "cache", threads=1, base=base).path(stream)
    (_, train_args, data), (_, export_args, _) = fake_cli
    assert data.shape == (3, 450, 1)  # each channel one series, as the general corpus is
    np.testing.assert_allclose(np.median(data, axis=1), 0.0, atol=1e-5)  # robust-scaled, channel by channel
    assert np.abs(data).max() < 100  # the runtime's clip; nothing of the sentinel
    assert train_args.init_from == str(base.model) and train_args.iterations == 200
    assert train_args.hidden_dims is None and train_args.max_train_length is None  # the base's architecture
    assert export_args.general and export_args.window == 128


def test_fine_tuned_models_are_cached_apart_from_scratch_ones_and_per_base(fake_cli, tmp_path):
    stream = _stream(2000)

    def model(base: ps.FineTune | None) -> Path:
        return ps.PerStreamModels(tmp_path, threads=1, base=base).path(stream)

    scratch = model(None)
    one, other = (model(ps.FineTune(tmp_path / f"{m}.onnx", m * 64, 128, True)) for m in "ab")
    shorter = ps.FineTune(tmp_path / "a.onnx", "a" * 64, 128, True, iterations=50)
    brief = model(shorter)
    assert len({scratch, one, other, brief}) == 4 and len(fake_cli) == 8
    assert fake_cli[-2][1].iterations == 50 and "50 iterations" in shorter.note


def test_a_base_without_its_checkpoint_is_refused_before_any_training(tmp_path):
    with pytest.raises(FileNotFoundError, match="its checkpoint"):
        ps.FineTune.of(tmp_path / "general.onnx")


def test_extra_train_flags_reach_training_and_their_models_are_cached_apart(fake_cli, tmp_path):
    stream = _stream(2000)
    plain = ps.PerStreamModels(tmp_path, threads=1)
    extra = ps.PerStreamModels(tmp_path, threads=1, extra=("--seed", "1", "--no-weight-average"))
    assert extra.path(stream) != plain.path(stream) and len(fake_cli) == 4
    (_, with_extra, _), _, (_, evaluators, _), _ = fake_cli
    assert (with_extra.seed, with_extra.average_weights, with_extra.iterations, with_extra.depth) == (1, False, 200, 8)
    assert evaluators.seed is None and evaluators.average_weights is None  # the CLI's defaults
    # Without extras the key is what it was before extras existed, so models cached then are found again.
    values = ps.training_slice(stream)
    before = hashlib.sha256(ps.CACHE_VERSION + json.dumps([ps.TRAIN_FLAGS, 1, values.shape]).encode())
    before.update(np.ascontiguousarray(values, dtype=np.float32).tobytes())
    assert plain.key(values) == before.hexdigest()[:24] != extra.key(values)
