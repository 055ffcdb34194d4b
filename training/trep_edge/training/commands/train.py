"""``trep-edge train``: pretrain a T-Rep encoder (or fine-tune one, or run one rank of a torchrun job), checkpoint it
and print a JSON summary (``training/trep_edge/training/trainer.py``)."""
from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from trep_edge.datasets.timestamps import CSV_FORMAT
from trep_edge.help_format import HelpFormatter
from trep_edge.runtime.core.preprocess import Normalisation

if TYPE_CHECKING:  # torch: imported only when a command runs
    from trep_edge.training.config import TrainConfig
    from trep_edge.training.trainer import Trainer

# CLI flag -> TrainConfig field, for flags that override the config one to one.
_OVERRIDES = {
    "iterations": "iterations", "epochs": "epochs", "batch_size": "batch_size", "lr": "lr",
    "repr_dims": "repr_dims", "hidden_dims": "hidden_dims", "depth": "depth",
    "time_embedding": "time_embedding", "time_index": "time_index", "max_train_length": "max_train_length",
    "seed": "seed", "device": "device", "amp": "amp", "checkpoint_every": "checkpoint_every",
    "causal": "causal", "max_receptive_field": "max_receptive_field", "average_weights": "average_weights",
}  # fmt: skip


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``trep-edge train`` subcommand's arguments."""
    p = subparsers.add_parser(
        "train",
        help="pretrain a T-Rep encoder on a dataset",
        description="Self-supervised T-Rep pretraining. Settings come from the defaults, then --config, then flags.",
        epilog=CSV_FORMAT,
        formatter_class=HelpFormatter,
    )
    p.add_argument("data", help="dataset file: a path, or a path under the data folder (e.g. "
                   "UEA/BasicMotions/BasicMotions_TRAIN.ts); formats: .csv (see CSV format below), .ts (UEA/UCR), "
                   ".txt (UCR anomaly: trains on the normal prefix), .npy, .tar.gz (PhysioNet 2019: one series per "
                   "patient)")
    p.add_argument("--data-root", help="data folder (default: $TREP_EDGE_DATA or ../shared/data)")
    p.add_argument("--out", help="checkpoint path (default: runs/<data name>.pt)")
    p.add_argument("--config", help="TOML file with a [train] table of TrainConfig fields")
    p.add_argument("--resume", metavar="CHECKPOINT", help="continue an interrupted run from its checkpoint")
    p.add_argument("--channels", help="comma-separated channel names to use (CSV and PhysioNet; PhysioNet default: the bedside vitals)")
    p.add_argument("--rows", help="START:END slice of time steps (single-series CSV), e.g. 0:8640 for ETTh1's 12 training months")
    p.add_argument("--max-series", type=int, help="use at most this many series (e.g. PhysioNet patients)")
    p.add_argument("--forward-fill", type=int, default=0, metavar="STEPS",
                   help="carry each channel's last value over at most STEPS missing steps (stored in the model card; "
                   "the runtime does the same); 0 = off")
    p.add_argument("--difference", default="0", help="difference the input N times, or 'auto' (ADF test, TREP.md §5)")
    p.add_argument("--iterations", type=int, help="optimiser steps (default: 200 for small data, 600 otherwise)")
    p.add_argument("--epochs", type=int, help="epochs instead of iterations")
    p.add_argument("--batch-size", type=int, help="batch size (paper: 16)")
    p.add_argument("--lr", type=float, help="learning rate (paper: 1e-3)")
    p.add_argument("--repr-dims", type=int, help="representation size F per timestep")
    p.add_argument("--hidden-dims", type=int, help="TCN width (paper: 128)")
    p.add_argument("--depth", type=int, help="dilated residual blocks (paper: 10)")
    p.add_argument("--time-embedding", choices=["time2vec", "mlp", "rbf", "none"], help="time-embedding module; none = TS2Vec ablation")
    p.add_argument("--time-index", help="time index convention: relative, periodic:P (TREP.md §4), or auto: "
                   "periodic:P where the training data's channels share a cycle of P readings (autocorrelation "
                   "peak of at least 0.3), else relative")
    p.add_argument("--max-train-length", type=int, help="cut long series into sections of at most this many steps")
    p.add_argument("--causal", action="store_true", default=None, help="causal convolutions with a receptive field "
                   "within --max-receptive-field, for the incremental step engine (docs/causal.md); needs "
                   "--time-index periodic:P")
    p.add_argument("--max-receptive-field", type=int, help="causal: steps the dilations may reach (default 201; keep "
                   "it <= the export --window)")
    p.add_argument("--weights", help="four task weights a,b,c,d summing to 1: instance, temporal, divergence, forecast")
    p.add_argument("--no-weight-average", dest="average_weights", action="store_false", default=None,
                   help="infer with the last step's encoder weights, not their running (SWA) average")
    p.add_argument("--seed", type=int, help="random seed")
    p.add_argument("--device", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice, one per core); results "
                   "do not depend on it beyond float rounding")
    p.add_argument("--amp", action="store_true", default=None, help="float16 mixed precision (CUDA only)")
    p.add_argument("--checkpoint-every", type=int, help="save a checkpoint every N steps")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--evaluate", action="store_true", help="after training a .ts set with a TEST split, report TimeDim SVM accuracy")
    p.add_argument("--exclude-alerts", metavar="FILE_OR_DIR", help="telemetry archive: leave out the time ranges of "
                   "alert episodes, from the archive's own alerts (pass the archive folder) or a JSONL file of alert "
                   "messages (docs/retraining.md)")
    p.add_argument("--init-from", metavar="MODEL_OR_CKPT", help="fine-tune: start from this checkpoint's weights (or "
                   "M.onnx with its checkpoint M.pt beside it), keeping its channels, differencing and normalisation")
    p.add_argument("--stream", action="store_true", help="PhysioNet .tar.gz: stream patients through a bounded "
                   "shuffle buffer instead of loading the corpus (memory bounded; docs/training.md)")
    p.add_argument("--shuffle-buffer", type=int, default=1024, help="--stream: training sections held for shuffling")
    return p


def config_from_args(args: argparse.Namespace, base: dict | None = None) -> TrainConfig:
    """Defaults (or ``base``, a fine-tuned checkpoint's settings), then the TOML file, then explicit flags."""
    from trep_edge.training.config import TrainConfig

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


def run(args: argparse.Namespace) -> int:
    """``trep-edge train``: pretrain (or fine-tune, or one rank of a torchrun job), checkpoint, print a JSON summary."""
    import torch

    from trep_edge.training.data import load_training_data
    from trep_edge.training.distributed import device_for, setup, teardown, world_from_env, wrap
    from trep_edge.training.period import auto_time_index
    from trep_edge.training.trainer import Trainer, read_checkpoint, resolve_checkpoint

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
    if args.time_index == "auto":
        args.time_index = auto_time_index(source.x)
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
    if source is not None and source.first_step is not None:
        # Where the training rows stood in time, so export can give a periodic model the daemon's phases.
        meta["timing"] = {"first_step": source.first_step, "step_seconds": source.step_seconds}
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
        "time_index": trainer.cfg.time_index,
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

    if args.time_index == "auto":
        raise ValueError("--stream needs an explicit --time-index (auto reads the cycle off the whole corpus in memory)")
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
