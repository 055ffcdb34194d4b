"""Implementations of the training-side subcommands (imported only when one of them runs)."""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import time
from pathlib import Path

import numpy as np

from trep_edge.training.config import TrainConfig
from trep_edge.runtime.core.preprocess import Normalisation

from trep_edge.training.data import load_training_data
from trep_edge.training.trainer import Trainer, read_checkpoint, resolve_checkpoint

# CLI flag -> TrainConfig field, for flags that override the config one to one.
_OVERRIDES = {
    "iterations": "iterations", "epochs": "epochs", "batch_size": "batch_size", "lr": "lr",
    "repr_dims": "repr_dims", "hidden_dims": "hidden_dims", "depth": "depth",
    "time_embedding": "time_embedding", "time_index": "time_index", "max_train_length": "max_train_length",
    "seed": "seed", "device": "device", "amp": "amp", "checkpoint_every": "checkpoint_every",
    "causal": "causal", "max_receptive_field": "max_receptive_field",
}  # fmt: skip


def config_from_args(args: argparse.Namespace, base: dict | None = None) -> TrainConfig:
    """Defaults (or ``base``, a fine-tuned checkpoint's settings), then the TOML file, then explicit flags."""
    if base is None:
        base = TrainConfig.from_toml(args.config).to_dict() if args.config else TrainConfig().to_dict()
    elif args.config:
        base = {**base, **TrainConfig.from_toml(args.config).to_dict()}
    base = dict(base)
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
    """``trep-edge train``: pretrain (or fine-tune, or one rank of a torchrun job), checkpoint, print a JSON summary."""
    import torch

    from trep_edge.training.distributed import device_for, setup, teardown, world_from_env, wrap

    world = world_from_env()
    if getattr(args, "threads", None):
        if args.threads < 1:
            raise ValueError(f"--threads must be at least 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    channels = args.channels.split(",") if args.channels else None
    base = read_checkpoint(resolve_checkpoint(args.init_from)) if args.init_from else None
    inputs = _inputs_of(base, args, channels)
    if args.stream:
        data, source = _streamed(args, inputs, world), None
    else:
        data = source = load_training_data(args.data, args.data_root, inputs["channels"], args.rows, args.max_series,
                                           inputs["difference"], inputs["forward_fill"], args.exclude_alerts,
                                           inputs["normalisation"])  # fmt: skip
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
                      "difference": data.differencing, "forward_fill": data.forward_fill,
                      "exclude_alerts": args.exclude_alerts},
        "init_from": args.init_from,
    }
    shards, rank = (world.size, world.rank) if world else (1, None)
    if world:
        args.device = device_for(world, args.device or (base or {}).get("config", {}).get("device", "auto"))
        setup(world, args.device)
    if args.resume:
        trainer = Trainer.load(args.resume, args.device, shards, rank)
        if trainer.meta.get("data_fingerprint") != data.fingerprint:
            raise ValueError(f"{args.resume} was trained on other data ({trainer.meta.get('dataset')}); resume needs the same data")
    else:
        trainer = Trainer(config_from_args(args, base and base["config"]), len(data.channels), meta, shards, rank)
        if base is not None:
            trainer.init_from(base, args.init_from)
    if world:
        wrap(trainer)
    started = time.perf_counter()
    progress = not args.no_progress
    if source is None:
        iterations = trainer.cfg.iterations or 600
        records = trainer.fit_stream(data.batches(trainer.cfg), iterations, out, progress)
    else:
        records = trainer.fit(source.x, iterations=trainer.cfg.iterations, checkpoint=out, progress=progress)
    if world:
        teardown()
    if not trainer.is_chief:
        return 0
    summary = {
        "checkpoint": str(out),
        "dataset": data.name,
        "series": None if source is None else int(source.x.shape[0]),
        "length": None if source is None else int(source.x.shape[1]),
        "channels": data.channels,
        "steps": trainer.step,
        "processes": shards,
        "device": str(trainer.device),
        "seconds": round(time.perf_counter() - started, 1),
        "final_losses": records[-1] if records else None,
    }
    if args.evaluate:
        summary["timedim_accuracy"] = _evaluate_classification(trainer, source)
    print(json.dumps(summary, indent=2))
    return 0


def _inputs_of(base: dict | None, args: argparse.Namespace, channels: list[str] | None) -> dict:
    """How to prepare the data: from the flags, or for fine-tuning from the previous model (same input contract)."""
    if base is None:
        return {"channels": channels, "difference": args.difference, "forward_fill": args.forward_fill,
                "normalisation": None}  # fmt: skip
    meta = base["meta"]
    if channels and channels != meta["channels"]:
        raise ValueError(f"--init-from model has channels {meta['channels']}; fine-tuning keeps them (drop --channels)")
    return {"channels": list(meta["channels"]), "difference": int(meta["differencing"]),
            "forward_fill": int(meta.get("forward_fill", 0)), "normalisation": Normalisation.from_dict(meta["normalisation"])}  # fmt: skip


def _streamed(args: argparse.Namespace, inputs: dict, world) -> "StreamedData":
    """A PhysioNet tarball as a streaming dataset of this rank's patients (``training/trep_edge/training/streaming.py``)."""
    from trep_edge.datasets.paths import resolve
    from trep_edge.datasets.physionet import VITALS

    path = resolve(args.data, args.data_root)
    if not path.name.endswith(".tar.gz") or args.rows or args.exclude_alerts:
        raise ValueError("--stream reads a PhysioNet .tar.gz (without --rows or --exclude-alerts)")
    if inputs["difference"] == "auto":
        raise ValueError("--stream needs an explicit --difference N (the ADF test needs the whole corpus in memory)")
    return StreamedData(path, inputs["channels"] or VITALS, int(inputs["difference"]), inputs["forward_fill"],
                        inputs["normalisation"], args, world)  # fmt: skip


class StreamedData:
    """What ``train`` needs of a streamed corpus: its name, channels, preprocessing and this rank's batches."""

    def __init__(self, path: Path, channels: list[str], order: int, fill: int, norm: Normalisation | None,
                 args: argparse.Namespace, world) -> None:  # fmt: skip
        from trep_edge.training.streaming import stream_normalisation

        self.path, self.name, self.channels = path, path.name, list(channels)
        self.differencing, self.forward_fill, self.args, self.world = order, fill, args, world
        self.normalisation = norm or stream_normalisation(path, self.channels, fill, order, args.max_series)

    @property
    def fingerprint(self) -> str:
        """sha256 of what defines the stream (file, size, channels, preprocessing): resuming needs the same."""
        spec = [self.name, self.path.stat().st_size, self.channels, self.differencing, self.forward_fill,
                self.args.max_series, self.normalisation.to_dict()]  # fmt: skip
        return hashlib.sha256(json.dumps(spec).encode()).hexdigest()

    def batches(self, cfg: TrainConfig):
        """Endless batches of this rank's sections through the bounded shuffle buffer."""
        from trep_edge.training.streaming import PatientSections, batches

        rank, size = (self.world.rank, self.world.size) if self.world else (0, 1)
        dataset = PatientSections(self.path, self.channels, self.normalisation, cfg.max_train_length,
                                  self.forward_fill, self.differencing, self.args.shuffle_buffer, cfg.seed, rank, size,
                                  self.args.max_series)  # fmt: skip
        return batches(dataset, cfg.batch_size)


def _evaluate_classification(trainer: Trainer, data) -> float:
    """TimeDim SVM accuracy on the TEST split of a .ts dataset."""
    from trep_edge.training.classification import timedim_accuracy
    from trep_edge.training.encode import encode

    if data.test_x is None or data.labels is None:
        raise ValueError(f"--evaluate needs a labelled .ts training file with a matching _TEST.ts; {data.name} has none")
    enc = trainer.inference_encoder()
    conv = trainer.cfg.time_index
    return timedim_accuracy(encode(enc, data.x, conv), data.labels, encode(enc, data.test_x, conv), data.test_labels)


def _channel_ranges(entries: list[str], channels: list[str]) -> dict[str, list[float]]:
    """``--range CHANNEL=LOW:HIGH`` entries as the card's ``ranges``; a bad entry is refused with what to write."""
    ranges = {}
    for entry in entries:
        name, _, bounds = entry.partition("=")
        low, _, high = bounds.partition(":")
        try:
            values = [float(low), float(high)]
        except ValueError:
            raise ValueError(f"--range {entry!r}: write CHANNEL=LOW:HIGH with two numbers, e.g. HR=0:350") from None
        if name not in channels:
            raise ValueError(f"--range {entry!r}: the model has no channel {name!r}; its channels are {channels}")
        if not (math.isfinite(values[0]) and math.isfinite(values[1]) and values[0] < values[1]):
            raise ValueError(f"--range {entry!r}: LOW and HIGH must be finite with LOW < HIGH")
        ranges[name] = values
    return ranges


def _channel_codes(path: str | None) -> dict:
    """``--channel-codes FILE``: the card's ``channel_codes`` (checked with the card); none without a file."""
    if path is None:
        return {}
    try:
        codes = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"--channel-codes {path}: cannot read a JSON object from it ({exc})") from None
    if not isinstance(codes, dict):
        raise ValueError(f"--channel-codes {path} must hold a JSON object channel -> {{system, code, display, unit}}")
    return codes


def export(args: argparse.Namespace) -> int:
    """``trep-edge export``: ONNX + model card, calibrated on normal data, optionally parity-checked."""
    from trep_edge.runtime.core.model_card import Scoring

    from trep_edge.training.export import build_card, export_encoder, make_general, parity_check, quiet_exporter
    from trep_edge.training.trainer import Trainer

    trainer = Trainer.load(args.checkpoint, device="cpu")
    encoder = trainer.inference_encoder()
    out = Path(args.out)
    if out.suffix != ".onnx":
        raise ValueError(f"--out {out} must end in .onnx")
    if args.window < 2:
        raise ValueError(f"--window must be at least 2 steps, got {args.window}")
    scoring = Scoring(z=args.z, beta=args.beta, delay=args.delay)
    card = build_card(args.name or out.stem, encoder, trainer.meta, trainer.cfg.to_dict(), args.window, scoring, trainer.step)
    general = getattr(args, "general", False)
    if general:
        make_general(encoder, card)
    card.ranges = _channel_ranges(getattr(args, "range", []), card.channels)
    card.period = float(getattr(args, "period", 0.0))
    card.channel_codes = _channel_codes(getattr(args, "channel_codes", None))
    if card.channel_codes:
        card.validate(f"the card with --channel-codes {args.channel_codes}")  # refused now, not after calibration
    series = None
    if not args.no_calibration:
        spec = dict(trainer.meta.get("data_spec") or {})
        if args.calibration_data:
            spec.update(data=args.calibration_data, rows=args.calibration_rows, max_series=None)
        if not spec.get("data"):
            raise ValueError("the checkpoint does not say what it was trained on: pass --calibration-data or --no-calibration")
        # The model's own normalisation: calibration data must reach the model exactly as the daemon's will.
        data = load_training_data(spec["data"], args.data_root, spec.get("channels"), spec.get("rows"),
                                  spec.get("max_series"), spec.get("difference", 0), spec.get("forward_fill", 0),
                                  spec.get("exclude_alerts"), Normalisation.from_dict(card.normalisation))
        if not general and data.channels != card.channels:
            raise ValueError(f"calibration data has channels {data.channels}, the model {card.channels}")
        series = [s for s in map(_trim_padding, data.x) if len(s) > 1]
    names = None if args.graphs is None else [n.strip() for n in args.graphs.split(",") if n.strip() not in ("", "none")]
    with quiet_exporter(not getattr(args, "verbose", False)):
        # A general model's calibration data pools many kinds of signal, so a prior drawn from it describes no stream
        # in particular: each stream learning its own signal statistics from its first readings scored higher on
        # the detection benchmark (docs/detection.md), and such streams are long enough to afford that warm-up.
        engine = export_encoder(encoder, card, out, series, args.calibration_steps, names, with_prior=not general)
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
            from trep_edge.training.precision import export_variant

            if not series:
                raise ValueError("--precision needs calibration data to judge the variants' scores")
            summary["variants"] = [export_variant(engine, p, series).to_dict() for p in args.precision.split(",")]
    print(json.dumps(summary, indent=2))
    return status


def _trim_padding(series: np.ndarray) -> np.ndarray:
    """Drop the trailing all-NaN steps that pad shorter series (e.g. patients) to a common length."""
    observed = np.flatnonzero(~np.isnan(series).all(axis=1))
    return series[: observed[-1] + 1] if len(observed) else series[:0]
