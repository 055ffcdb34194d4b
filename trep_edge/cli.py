"""The ``trep-edge`` command: one entry point, one subcommand per job.

Subcommand implementations are imported only when run, so ``trep-edge run`` on an edge box never imports torch.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

# subcommand -> "module:function" taking the parsed arguments and returning an exit code.
HANDLERS = {
    "train": "trep_edge.training.commands:train",
    "export": "trep_edge.training.commands:export",
}


def _train_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="pretrain a T-Rep encoder on a dataset",
        description="Self-supervised T-Rep pretraining. Settings come from the defaults, then --config, then flags.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("data", help="dataset file: a path, or a path under the data folder (e.g. UEA/BasicMotions/BasicMotions_TRAIN.ts); "
                   "formats: .csv (ETT-style), .ts (UEA/UCR), .txt (UCR anomaly: trains on the normal prefix), .npy, "
                   ".tar.gz (PhysioNet 2019: one series per patient)")
    p.add_argument("--data-root", help="data folder (default: $TREP_EDGE_DATA or ../shared/data)")
    p.add_argument("--out", help="checkpoint path (default: runs/<data name>.pt)")
    p.add_argument("--config", help="TOML file with a [train] table of TrainConfig fields")
    p.add_argument("--resume", metavar="CHECKPOINT", help="continue an interrupted run from its checkpoint")
    p.add_argument("--channels", help="comma-separated channel names to use (CSV and PhysioNet; PhysioNet default: the bedside vitals)")
    p.add_argument("--rows", help="START:END slice of time steps (single-series CSV), e.g. 0:8640 for ETTh1's 12 training months")
    p.add_argument("--max-series", type=int, help="use at most this many series (e.g. PhysioNet patients)")
    p.add_argument("--difference", default="0", help="difference the input N times, or 'auto' (ADF test, TREP.md §5)")
    p.add_argument("--iterations", type=int, help="optimiser steps (default: 200 for small data, 600 otherwise)")
    p.add_argument("--epochs", type=int, help="epochs instead of iterations")
    p.add_argument("--batch-size", type=int, help="batch size (paper: 16)")
    p.add_argument("--lr", type=float, help="learning rate (paper: 1e-3)")
    p.add_argument("--repr-dims", type=int, help="representation size F per timestep")
    p.add_argument("--hidden-dims", type=int, help="TCN width (paper: 128)")
    p.add_argument("--depth", type=int, help="dilated residual blocks (paper: 10)")
    p.add_argument("--time-embedding", choices=["time2vec", "mlp", "rbf", "none"], help="time-embedding module; none = TS2Vec ablation")
    p.add_argument("--time-index", help="time index convention: relative or periodic:P (TREP.md §4)")
    p.add_argument("--max-train-length", type=int, help="cut long series into sections of at most this many steps")
    p.add_argument("--weights", help="four task weights a,b,c,d summing to 1: instance, temporal, divergence, forecast")
    p.add_argument("--seed", type=int, help="random seed")
    p.add_argument("--device", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--amp", action="store_true", default=None, help="float16 mixed precision (CUDA only)")
    p.add_argument("--checkpoint-every", type=int, help="save a checkpoint every N steps")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--evaluate", action="store_true", help="after training a .ts set with a TEST split, report TimeDim SVM accuracy")


def _export_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="export a checkpoint to ONNX with its model card",
        description="Write the encoder as ONNX (inputs x, mask, t; output z) plus NAME.card.json, calibrate the alert "
        "threshold on normal data with the runtime's scoring code, and optionally check torch/onnxruntime parity.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("checkpoint", help="a checkpoint written by trep-edge train")
    p.add_argument("--out", required=True, help="output model path, ending in .onnx (the card goes beside it)")
    p.add_argument("--name", help="model name in the card (default: the file name)")
    p.add_argument("--window", type=int, default=201, help="scoring window W = padding + 1 (paper: padding 200)")
    p.add_argument("--z", type=int, default=21, help="previous scores averaged by the adjusted score")
    p.add_argument("--beta", type=float, default=4.0, help="alert when adjusted score > mu + beta * sigma")
    p.add_argument("--delay", type=int, default=7, help="readings after an alert during which no new alert is raised")
    p.add_argument("--calibration-data", help="normal data for the threshold (default: the checkpoint's training data)")
    p.add_argument("--calibration-rows", help="START:END slice of the calibration data")
    p.add_argument("--calibration-steps", type=int, default=4000, help="at most this many scored steps for calibration")
    p.add_argument("--no-calibration", action="store_true", help="leave the threshold to be learned online (cold start)")
    p.add_argument("--data-root", help="data folder (default: $TREP_EDGE_DATA or ../shared/data)")
    p.add_argument("--precision", help="also write reduced-precision variants, e.g. fp16,int8 (kept only if their "
                   "adjusted scores stay within 0.1 sigma at p99 of the fp32 model's; see docs/precision.md)")
    p.add_argument("--check", action="store_true", help="compare torch and onnxruntime (max |diff| <= 1e-4, identical alerts); exit 1 if not")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (also used to document every option with --help)."""
    parser = argparse.ArgumentParser(prog="trep-edge", description="Edge anomaly monitoring with T-Rep representations.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _train_parser(sub)
    _export_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and run the chosen subcommand; user errors exit 2 with a one-line message."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    module_name, func_name = HANDLERS[args.command].split(":")
    handler = getattr(importlib.import_module(module_name), func_name)
    try:
        return int(handler(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        print(f"trep-edge {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
