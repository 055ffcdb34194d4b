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
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from trep_edge.runtime.core.engine import Engine, load_engine

from trep_edge.training.evaluation import detection_metrics as dm
from trep_edge.training.evaluation.detection_corpus import Stream

TRAIN_FLAGS = ("--iterations", "200", "--hidden-dims", "64", "--depth", "8", "--repr-dims", "64",
               "--max-train-length", "201")  # fmt: skip
"""The evaluator's ``trep-edge train`` flags; ``trep-edge export`` ran with its defaults (no flag)."""
CATEGORIES = ("synthetic", "archive", "ucr")
NOTE = ("one model per stream, trained on the stream's first 15 % (at most 750 readings) only; synthetic, archive "
        "and ucr streams; sepsis not run: 15 % of a ~40-hour stay is ~6 hourly readings, too short to train "
        "on")  # fmt: skip
CACHE_VERSION = b"1"  # bump when training or export change what a cached model would be for the same key
MAX_STREAMS = 1000  # a bound on the models one run may train (the full corpus has 91 non-sepsis, non-multi streams)


def training_slice(stream: Stream) -> np.ndarray:
    """The readings a per-stream model may learn from: the probation part and nothing after it (no label either)."""
    return stream.values[: dm.probation(len(stream.values))]


class PerStreamModels:
    """Trains (or finds in the cache) the model of each stream; ``info`` records what each one took."""

    def __init__(self, cache: Path, threads: int = 1) -> None:
        if threads < 1:
            raise ValueError(f"--per-stream-threads must be at least 1, got {threads}")
        self.cache, self.threads = cache, threads
        self.info: dict[str, dict] = {}

    def key(self, values: np.ndarray) -> str:
        """Cache key: the slice's values and shape, the flags and the cache version."""
        digest = hashlib.sha256(CACHE_VERSION + json.dumps([TRAIN_FLAGS, self.threads, values.shape]).encode())
        digest.update(np.ascontiguousarray(values, dtype=np.float32).tobytes())
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
            info = train_and_export(values, folder, self.threads) | {"cached": False}
        # A later row finds the model this run trained in the cache: keep the first record (what training took).
        self.info.setdefault(stream.name, info | {"model": str(model)})
        return model

    def engine(self, stream: Stream) -> Engine:
        """The stream's model loaded as the runtime loads it."""
        return load_engine(self.path(stream), "cpu")


def train_and_export(values: np.ndarray, folder: Path, threads: int = 1) -> dict:
    """``trep-edge train SLICE.npy TRAIN_FLAGS`` then ``trep-edge export`` (defaults) into ``folder``; a summary."""
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
            np.save(data, np.asarray(values, dtype=np.float32))
            checkpoint = folder / "model.pt"
            train_args = parser.parse_args(["train", str(data), *TRAIN_FLAGS, "--threads", str(threads),
                                            "--out", str(checkpoint), "--no-progress"])  # fmt: skip
            with contextlib.redirect_stdout(out):
                if train.run(train_args) != 0:
                    raise RuntimeError(f"per-stream training failed: {out.getvalue()[-500:]}")
                trained = time.perf_counter()
                # Export reloads the training data from the checkpoint's data_spec: the slice file must still exist.
                if export.run(parser.parse_args(["export", str(checkpoint), "--out", str(folder / "model.onnx")])) != 0:
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
