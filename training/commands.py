"""Implementations of the training-side subcommands (imported only when one of them runs)."""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from .config import TrainConfig
from .data import load_training_data
from .trainer import Trainer

# CLI flag -> TrainConfig field, for flags that override the config one to one.
_OVERRIDES = {
    "iterations": "iterations", "epochs": "epochs", "batch_size": "batch_size", "lr": "lr",
    "repr_dims": "repr_dims", "hidden_dims": "hidden_dims", "depth": "depth",
    "time_embedding": "time_embedding", "time_index": "time_index", "max_train_length": "max_train_length",
    "seed": "seed", "device": "device", "amp": "amp", "checkpoint_every": "checkpoint_every",
}  # fmt: skip


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """Defaults, then the TOML file, then explicit flags."""
    base = TrainConfig.from_toml(args.config).to_dict() if args.config else TrainConfig().to_dict()
    for flag, name in _OVERRIDES.items():
        value = getattr(args, flag, None)
        if value is not None:
            base[name] = value
    if args.weights:
        try:
            base["weights"] = [float(v) for v in args.weights.split(",")]
        except ValueError as exc:
            raise ValueError(f"--weights {args.weights!r} must be four numbers like 0.25,0.25,0.25,0.25") from exc
        if len(base["weights"]) != 4:
            raise ValueError(f"--weights needs four numbers (instance, temporal, divergence, forecast), got {args.weights!r}")
    return TrainConfig.from_dict(base)


def train(args: argparse.Namespace) -> int:
    """``trep-edge train``: pretrain, checkpoint, and print a JSON summary."""
    channels = args.channels.split(",") if args.channels else None
    data = load_training_data(args.data, args.data_root, channels, args.rows, args.max_series, args.difference)
    out = Path(args.out or f"runs/{Path(data.name).name.split('.')[0]}.pt")
    meta = {
        "dataset": data.name,
        "channels": data.channels,
        "normalisation": data.normalisation.to_dict(),
        "differencing": data.differencing,
        "data_fingerprint": data.fingerprint,
    }
    if args.resume:
        trainer = Trainer.load(args.resume, device=args.device)
        if trainer.meta.get("data_fingerprint") != data.fingerprint:
            raise ValueError(f"{args.resume} was trained on other data ({trainer.meta.get('dataset')}); resume needs the same data")
    else:
        trainer = Trainer(config_from_args(args), input_dims=len(data.channels), meta=meta)
    started = time.perf_counter()
    records = trainer.fit(data.x, iterations=trainer.cfg.iterations, checkpoint=out, progress=not args.no_progress)
    summary = {
        "checkpoint": str(out),
        "dataset": data.name,
        "series": int(data.x.shape[0]),
        "length": int(data.x.shape[1]),
        "channels": data.channels,
        "steps": trainer.step,
        "device": str(trainer.device),
        "seconds": round(time.perf_counter() - started, 1),
        "final_losses": records[-1] if records else None,
    }
    if args.evaluate:
        summary["timedim_accuracy"] = _evaluate_classification(trainer, data)
    print(json.dumps(summary, indent=2))
    return 0


def _evaluate_classification(trainer: Trainer, data) -> float:
    """TimeDim SVM accuracy on the TEST split of a .ts dataset."""
    from .classification import timedim_accuracy
    from .encode import encode

    if data.test_x is None or data.labels is None:
        raise ValueError(f"--evaluate needs a labelled .ts training file with a matching _TEST.ts; {data.name} has none")
    enc = trainer.inference_encoder()
    conv = trainer.cfg.time_index
    return timedim_accuracy(encode(enc, data.x, conv), data.labels, encode(enc, data.test_x, conv), data.test_labels)
