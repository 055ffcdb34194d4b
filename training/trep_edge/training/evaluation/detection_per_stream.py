"""Per-stream-trained models for ``trep-edge eval detect`` (``--per-stream-train``): the evaluator's protocol.

One model per stream, trained only on that stream's probation part (its first 15 %, at most 750 readings:
``detection_metrics.probation``) with ``trep-edge train`` at the evaluator's settings (``TRAIN_FLAGS``), exported
with ``trep-edge export``'s defaults (window 201, z 21, beta 4, delay 7; calibrated on the training data, which also
writes the card's ``detector_prior``), then every reading of the stream scored by the product's detector
(``offline.detect_recording``, the code ``trep-edge score`` runs).

Train and export go through the CLI's own command modules (``training.commands.train`` / ``export``: their
parsers and ``run``) in this process, so every default is the CLI's. They read data from a file: the probation slice is written as a ``.npy``
to a temporary folder outside the repository and deleted once the model is exported. A stream of several channels
gets one multichannel model of its channels. Models are cached under ``--per-stream-cache`` (default
``runs/detect-per-stream``, not committed), keyed by the slice, the flags and ``CACHE_VERSION``; a rerun reuses
them. Torch runs on ``--per-stream-threads`` threads (default 1: on the shared 2-core machine one thread trained
about 7x faster than two) with the CLI's fixed seed 0, so a model is a function of its key.

Only the ``CATEGORIES`` streams (synthetic, archive, UCR) get a model: a sepsis stay is about 40 hourly readings, so
its probation part is about 6 readings, far below one training window (``NOTE``).

With ``--per-stream-init-from M.onnx`` (its checkpoint ``M.pt`` beside it) each model is instead that model fine-tuned
on the same slice (``FineTune``): the route a team with a general model and a stream's short history would take.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trep_edge.runtime.core.engine import Engine, load_engine
from trep_edge.runtime.core.preprocess import count_levels

from trep_edge.training.evaluation import detection_metrics as dm
from trep_edge.training.evaluation.detection_corpus import Stream

TRAIN_FLAGS = ("--iterations", "200", "--hidden-dims", "64", "--depth", "8", "--repr-dims", "64",
               "--max-train-length", "201")  # fmt: skip
"""The evaluator's ``trep-edge train`` flags; ``trep-edge export`` ran with its defaults (no flag)."""
CATEGORIES = ("synthetic", "archive", "ucr")
NOTE = ("one model per stream, trained on the stream's first 15 % (at most 750 readings) only; synthetic, archive "
        "and ucr streams; sepsis not run: 15 % of a ~40-hour stay is ~6 hourly readings, too short to train "
        "on")  # fmt: skip
CACHE_VERSION = b"3"  # bump when training or export change what a cached model would be for the same key (3: the card
# prior names its training rows)
MAX_STREAMS = 1000  # a bound on the models one run may train (the full corpus has 91 non-sepsis, non-multi streams)
FINE_TUNE_ITERATIONS = 200
"""Default fine-tuning steps: the evaluator's training budget, spent from the base model's weights instead of random
ones."""
FINE_TUNE_NOTE = ("one model per stream, the base model fine-tuned for {iterations} iterations on the stream's first "
                  "15 % (at most 750 readings) only; synthetic, archive and ucr streams")  # fmt: skip


@dataclass(frozen=True)
class FineTune:
    """A base model to fine-tune per stream: ``M.onnx``, its checkpoint, and how its inputs are prepared.

    A base with per-stream scaling (the general model) learnt from series each robust-scaled on its own, one channel
    at a time: the slice is prepared the same way (``general_corpus.robust_scale`` per channel, each channel a series)
    and the result is exported as a general model of the base's window. A fixed-channel base keeps its channels and
    normalisation (``trep-edge train --init-from``).
    """

    model: Path
    sha256: str
    window: int
    stream_scaled: bool
    iterations: int = FINE_TUNE_ITERATIONS

    @classmethod
    def of(cls, model: Path, iterations: int = FINE_TUNE_ITERATIONS) -> FineTune:
        """Read ``model``'s card; refused (with what to fix) when its checkpoint is missing or was retrained since."""
        from trep_edge.training.trainer import resolve_checkpoint

        if iterations < 1:
            raise ValueError(f"--per-stream-fine-tune-iterations must be at least 1, got {iterations}")
        resolve_checkpoint(model)
        card = load_engine(model, "cpu").card
        return cls(model, card.weights_sha256, card.window, card.scaling == "stream", iterations)

    @property
    def note(self) -> str:
        """The benchmark's note on the rows of these models."""
        return FINE_TUNE_NOTE.format(iterations=self.iterations)

    def prepare(self, values: np.ndarray) -> np.ndarray:
        """The training data for ``values [T, C]``: ``[C, T, 1]`` robust-scaled series, or ``values`` as they are."""
        if not self.stream_scaled:
            return np.asarray(values, dtype=np.float32)
        from trep_edge.training.general_corpus import robust_scale

        channels = [robust_scale(np.asarray(values[:, c], dtype=np.float64)) for c in range(values.shape[1])]
        return np.stack(channels)[..., None]

    def budget_flags(self) -> tuple[str, ...]:
        return ("--iterations", str(self.iterations))

    def train_flags(self) -> tuple[str, ...]:
        return ("--init-from", str(self.model), *self.budget_flags())

    def export_flags(self) -> tuple[str, ...]:
        return ("--window", str(self.window)) + ("--general",) * self.stream_scaled


def training_slice(stream: Stream) -> np.ndarray:
    """The readings a per-stream model may learn from: the probation part and nothing after it (no label either)."""
    return stream.values[: dm.probation(len(stream.values))]


class PerStreamModels:
    """Trains (or finds in the cache) the model of each stream; ``info`` records what each one took."""

    def __init__(self, cache: Path, threads: int = 1, base: FineTune | None = None,
                 extra: tuple[str, ...] = ()) -> None:  # fmt: skip
        """``extra``: ``trep-edge train`` flags added after the evaluator's (a training setting measured against
        them, e.g. ``("--seed", "1")``); the models they make are cached apart."""
        if threads < 1:
            raise ValueError(f"--per-stream-threads must be at least 1, got {threads}")
        self.cache, self.threads, self.base, self.extra = cache, threads, base, tuple(extra)
        self.info: dict[str, dict] = {}

    def key(self, values: np.ndarray) -> str:
        """Cache key: the slice's values and shape, the flags, the base model's weights and the cache version; and a
        slice's count levels when training bends some of its channels (``preprocess.count_levels``), so the models of
        the others keep the keys they were cached under when that changed."""
        fine_tune = [] if self.base is None else [self.base.sha256, self.base.budget_flags(), self.base.export_flags()]
        # Extra flags join the key only when given, so the evaluator's models keep the keys they were cached under.
        extra = [list(self.extra)] if self.extra else []
        flags = json.dumps([TRAIN_FLAGS, self.threads, values.shape, *fine_tune, *extra])
        digest = hashlib.sha256(CACHE_VERSION + flags.encode())
        digest.update(np.ascontiguousarray(values, dtype=np.float32).tobytes())
        if self.base is None and (levels := count_levels(values)).any():
            digest.update(b"counts" + levels.tobytes())
        return digest.hexdigest()[:24]

    def path(self, stream: Stream) -> Path:
        """The stream's exported model, trained first if the cache does not hold it."""
        values = training_slice(stream)
        folder = self.cache / self.key(values)
        model, summary = folder / "model.onnx", folder / "summary.json"
        if model.is_file() and summary.is_file():
            info = json.loads(summary.read_text()) | {"cached": True}
        else:
            if len(self.info) >= MAX_STREAMS:
                raise ValueError(f"more than {MAX_STREAMS} per-stream models in one run")
            info = train_and_export(values, folder, self.threads, self.base, self.extra) | {"cached": False}
        # A later row finds the model this run trained in the cache: keep the first record (what training took).
        self.info.setdefault(stream.name, info | {"model": str(model)})
        return model

    def engine(self, stream: Stream) -> Engine:
        """The stream's model loaded as the runtime loads it."""
        return load_engine(self.path(stream), "cpu")


def train_and_export(values: np.ndarray, folder: Path, threads: int = 1, base: FineTune | None = None,
                     extra: tuple[str, ...] = ()) -> dict:  # fmt: skip
    """``trep-edge train SLICE.npy TRAIN_FLAGS EXTRA`` then ``trep-edge export`` (defaults) into ``folder``; a summary.

    With ``base``: ``train --init-from`` on the slice as the base expects it, exported as the base was."""
    import torch

    from trep_edge.training.commands import export, train

    folder.mkdir(parents=True, exist_ok=True)
    parser, previous = argparse.ArgumentParser(prog="trep-edge"), torch.get_num_threads()
    commands = parser.add_subparsers(dest="command", required=True)
    train.add_parser(commands)
    export.add_parser(commands)
    began = time.perf_counter()
    out = io.StringIO()
    try:
        with tempfile.TemporaryDirectory(prefix="trep-per-stream-") as tmp:
            data = Path(tmp) / "probation.npy"
            np.save(data, np.asarray(values, dtype=np.float32) if base is None else base.prepare(values))
            checkpoint = folder / "model.pt"
            flags = (TRAIN_FLAGS if base is None else base.train_flags()) + tuple(extra)
            train_args = parser.parse_args(["train", str(data), *flags, "--threads", str(threads),
                                            "--out", str(checkpoint), "--no-progress"])  # fmt: skip
            with contextlib.redirect_stdout(out):
                if train.run(train_args) != 0:
                    raise RuntimeError(f"per-stream training failed: {out.getvalue()[-500:]}")
                trained = time.perf_counter()
                # Export reloads the training data from the checkpoint's data_spec: the slice file must still exist.
                export_flags = () if base is None else base.export_flags()
                export_args = parser.parse_args(["export", str(checkpoint), "--out", str(folder / "model.onnx"),
                                                 *export_flags])  # fmt: skip
                if export.run(export_args) != 0:
                    raise RuntimeError(f"per-stream export failed: {out.getvalue()[-500:]}")
    finally:
        torch.set_num_threads(previous)
    summaries = _json_objects(out.getvalue())
    info = {"rows": int(len(values)), "channels": int(values.shape[1]), "train_seconds": trained - began,
            "export_seconds": time.perf_counter() - trained,
            "final_losses": summaries[0].get("final_losses") if summaries else None,
            "calibration": summaries[-1].get("calibration") if len(summaries) > 1 else None}  # fmt: skip
    (folder / "summary.json").write_text(json.dumps(info, indent=1))
    return info


def _json_objects(text: str) -> list[dict]:
    """The JSON summaries train and export print, in order (anything else on stdout is skipped)."""
    decoder, found, i = json.JSONDecoder(), [], 0
    while (i := text.find("{", i)) >= 0:
        try:
            obj, end = decoder.raw_decode(text, i)
        except ValueError:
            i += 1
            continue
        found.append(obj)
        i = end
    return found
