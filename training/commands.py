"""Implementations of the training-side subcommands (imported only when one of them runs)."""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

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
    data = load_training_data(args.data, args.data_root, channels, args.rows, args.max_series, args.difference,
                              args.forward_fill)
    out = Path(args.out or f"runs/{Path(data.name).name.split('.')[0]}.pt")
    meta = {
        "dataset": data.name,
        "channels": data.channels,
        "normalisation": data.normalisation.to_dict(),
        "differencing": data.differencing,
        "forward_fill": data.forward_fill,
        "data_fingerprint": data.fingerprint,
        # Enough to load the same data again (export calibrates on it by default).
        "data_spec": {"data": args.data, "channels": channels, "rows": args.rows, "max_series": args.max_series,
                      "difference": data.differencing, "forward_fill": data.forward_fill},
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


def export(args: argparse.Namespace) -> int:
    """``trep-edge export``: ONNX + model card, calibrated on normal data, optionally parity-checked."""
    from trep_edge.runtime.model_card import Scoring

    from .export import build_card, export_encoder, parity_check
    from .trainer import Trainer

    trainer = Trainer.load(args.checkpoint, device="cpu")
    encoder = trainer.inference_encoder()
    out = Path(args.out)
    if out.suffix != ".onnx":
        raise ValueError(f"--out {out} must end in .onnx")
    if args.window < 2:
        raise ValueError(f"--window must be at least 2 steps, got {args.window}")
    scoring = Scoring(z=args.z, beta=args.beta, delay=args.delay)
    card = build_card(args.name or out.stem, encoder, trainer.meta, trainer.cfg.to_dict(), args.window, scoring, trainer.step)
    series = None
    if not args.no_calibration:
        spec = dict(trainer.meta.get("data_spec") or {})
        if args.calibration_data:
            spec.update(data=args.calibration_data, rows=args.calibration_rows, max_series=None)
        if not spec.get("data"):
            raise ValueError("the checkpoint does not say what it was trained on: pass --calibration-data or --no-calibration")
        data = load_training_data(spec["data"], args.data_root, spec.get("channels"), spec.get("rows"),
                                  spec.get("max_series"), spec.get("difference", 0), spec.get("forward_fill", 0))
        if data.channels != card.channels:
            raise ValueError(f"calibration data has channels {data.channels}, the model {card.channels}")
        series = [s for s in map(_trim_padding, data.x) if len(s) > 1]
    engine = export_encoder(encoder, card, out, series, args.calibration_steps)
    summary = {"model": str(out), "card": str(out.with_suffix("")) + ".card.json", "sha256": engine.sha256,
               "calibration": None if engine.card.calibration is None else engine.card.calibration.to_dict(),
               "bytes": out.stat().st_size}
    status = 0
    if args.check:
        real = series[0] if series else None
        report = parity_check(encoder, engine, real)
        summary["parity"] = {"max_abs_diff": report.max_abs_diff, "cases": report.cases,
                             "alerts_identical": report.alerts_identical, "ok": report.ok}
        status = 0 if report.ok else 1
    if args.precision:
        from .precision import export_variant

        if not series:
            raise ValueError("--precision needs calibration data to judge the variants' scores")
        summary["variants"] = [export_variant(engine, p, series).to_dict() for p in args.precision.split(",")]
    print(json.dumps(summary, indent=2))
    return status


def _trim_padding(series: np.ndarray) -> np.ndarray:
    """Drop the trailing all-NaN steps that pad shorter series (e.g. patients) to a common length."""
    observed = np.flatnonzero(~np.isnan(series).all(axis=1))
    return series[: observed[-1] + 1] if len(observed) else series[:0]
