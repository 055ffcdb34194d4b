"""``trep-edge eval``: run one of the paper's protocols for T-Rep and the TS2Vec ablation, append to a results file."""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from trep_edge.help_format import HelpFormatter

if TYPE_CHECKING:  # torch: imported only when the command runs
    from trep_edge.training.evaluation.runner import RunSettings

UCR_ANOMALY = [
    "001_UCR_Anomaly_DISTORTED1sddb40_35000_52000_52620.txt",
    "002_UCR_Anomaly_DISTORTED2sddb40_35000_56600_56900.txt",
    "135_UCR_Anomaly_InternalBleeding16_1200_4187_4199.txt",
]


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``trep-edge eval`` subcommand's arguments."""
    p = subparsers.add_parser(
        "eval",
        help="reproduce a paper evaluation for T-Rep and the TS2Vec ablation",
        description="Pretrain T-Rep and its TS2Vec ablation (no time-embedding, weights 0.5/0.5/0/0) on identical data, "
        "splits, seed and budget, run a protocol of TREP.md §5, and add one row per dataset and model to --results "
        "(rows already there are skipped, so an interrupted run resumes). Tasks: anomaly (UCR anomaly series), yahoo "
        "(Yahoo S5, --yahoo-root), classification (UEA, TimeDim SVM), forecasting (ETT, ridge), sepsis (PhysioNet "
        "2019 set B), sepsis-stream (the daemon's streaming score on set B vitals, sepsis hours as anomalies, "
        "point-adjusted F1; --patients for pretraining), missing (accuracy vs removed timesteps), heatmap (latent heatmap PNG of DodgerLoopGame), report "
        "(markdown tables of --results beside the paper's numbers), detect (the streaming-detection benchmark: this "
        "product's detector beside rolling z-score, HalfSpaceTrees, a matrix-profile discord score and the paper's "
        "protocol on synthetic faults in real signals, the UCR anomaly series and PhysioNet sepsis onsets; "
        "docs/detection.md).",
        formatter_class=HelpFormatter,
    )
    p.add_argument("task", choices=["anomaly", "yahoo", "classification", "forecasting", "sepsis", "sepsis-stream",
                                     "missing", "heatmap", "report", "detect"])
    d = p.add_argument_group("detect")
    d.add_argument("--quick", action="store_true", help="detect: the fixed quick subset (under 10 minutes on 2 cores)")
    d.add_argument("--model", default="models/general.onnx", help="detect: T-Rep model for the non-ICU streams")
    d.add_argument("--icu-model", default="models/icu-vitals.onnx", help="detect: T-Rep model for the sepsis streams")
    d.add_argument("--ablations", nargs="*", help="detect: detector variants NAME:key=value;key=value (DetectorConfig)")
    d.add_argument("--peers", help="detect: comma-separated peers (default rolling_z,hst,stumpi,paper; '' = none)")
    d.add_argument("--table", help="detect: results as Markdown tables (default: --out's path ending in .md)")
    d.add_argument("--cache", default="~/.cache/trep-edge/detect",
                   help="detect: cache of the detector's scores per model, settings and stream")
    d.add_argument("--per-stream-train", action="store_true", help="detect: also a trep:per-stream row: one model per "
                   "synthetic/UCR stream trained on its probation part (an evaluator's settings), export defaults")
    d.add_argument("--per-stream-ablations", nargs="*", help="detect: detector variants of the per-stream row, "
                   "NAME:key=value;key=value (rows trep:per-stream:NAME; models reused)")
    d.add_argument("--per-stream-init-from", metavar="M.onnx", help="detect: also a trep:fine-tuned row: M.onnx (its "
                   "checkpoint M.pt beside it) fine-tuned per stream on the same probation part")
    d.add_argument("--per-stream-fine-tune-iterations", type=int,
                   help="detect: training steps of each --per-stream-init-from model (default 200)")
    d.add_argument("--per-stream-cache", default="runs/detect-per-stream", help="detect: per-stream models")
    d.add_argument("--per-stream-threads", type=int, default=1, help="detect: torch threads of per-stream training")
    p.add_argument("--datasets", help="comma-separated: UEA names, ETT sets, UCR anomaly file names, or the missing-data "
                   "set (default: all present, cheapest first)")
    p.add_argument("--results", default="bench/results/paper_eval.json", help="results JSON, written row by row")
    p.add_argument("--variants", default="trep,ts2vec", help="models to compare: trep, ts2vec, and their causal "
                   "versions trep-causal, ts2vec-causal (docs/causal.md; trep-causal needs --time-index periodic:P)")
    p.add_argument("--data-root", help="data folder (default: $TREP_EDGE_DATA or ../shared/data)")
    p.add_argument("--iterations", type=int, help="pretraining steps per model (default 200)")
    p.add_argument("--hidden-dims", type=int, help="TCN width (default 64; paper 128)")
    p.add_argument("--depth", type=int, help="dilated residual blocks (paper: 10)")
    p.add_argument("--batch-size", type=int, help="batch size (paper: 16)")
    p.add_argument("--max-train-length", type=int, help="training sections of at most this many steps (default 800)")
    p.add_argument("--repr-dims", type=int, help="representation size F (default per task: anomaly 64, UEA 128, ETT 128, sepsis 32)")
    p.add_argument("--seed", type=int, help="seed of pretraining, splits and sampling (default 0)")
    p.add_argument("--time-index", default="relative", help="time index: relative or periodic:P (TREP.md §4); "
                   "non-default values are recorded under DATASET@periodic:P")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--beta", type=float, default=4.0, help="anomaly: alert when adjusted score > mu + beta sigma")
    p.add_argument("--max-test-steps", type=int, help="anomaly: score at most this many test steps per series, centred on its labels")
    p.add_argument("--calibration-steps", type=int, help="anomaly: last train steps scored for mu and sigma (default: all)")
    p.add_argument("--yahoo-root", help="yahoo: folder holding A1Benchmark ... A4Benchmark")
    p.add_argument("--patients", type=int, default=2000, help="sepsis: patients sampled from set B")
    p.add_argument("--septic-share", type=float, default=0.5, help="sepsis: share of septic patients in the sample")
    p.add_argument("--max-train-windows", type=int, default=3000, help="sepsis: SVM training windows (subsampled)")
    p.add_argument("--cv-metric", choices=["accuracy", "f1"], default="accuracy", help="sepsis: what the SVM's C is "
                   "chosen on (rows of f1 are recorded under setB+cv-f1)")
    p.add_argument("--fractions", help="missing: comma-separated fractions of timesteps removed (default 0,0.1,...,0.9)")
    p.add_argument("--out", help="missing: PNG of the accuracy curve; heatmap: PNG path (default docs/latent_heatmap_DodgerLoopGame.png); "
                   "detect: results JSON (default bench/results/detection.json)")
    return p


def _names(spec: str | None, default: list[str] | tuple[str, ...]) -> list[str]:
    return [s.strip() for s in spec.split(",") if s.strip()] if spec else list(default)


def settings_from_args(args: argparse.Namespace) -> RunSettings:
    """Budget and shared settings from the command line."""
    from trep_edge.training.evaluation.pretrain import KNOWN_VARIANTS, VARIANTS, Budget
    from trep_edge.training.evaluation.runner import RunSettings

    budget = Budget()
    for name in ("iterations", "hidden_dims", "depth", "batch_size", "max_train_length", "seed"):
        value = getattr(args, name, None)
        if value is not None:
            setattr(budget, name, value)
    variants = tuple(_names(args.variants, VARIANTS))
    unknown = [v for v in variants if v not in KNOWN_VARIANTS]
    if unknown:
        raise ValueError(f"--variants {unknown} unknown: choose from {', '.join(KNOWN_VARIANTS)}")
    command = "trep-edge " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["eval"] else ""
    return RunSettings(budget, variants, args.data_root, command, args.repr_dims, args.time_index)


def run(args: argparse.Namespace) -> int:
    """Run the chosen task; print the rows it wrote (or found) as JSON."""
    import torch

    from trep_edge.training.evaluation import anomaly, runner
    from trep_edge.training.evaluation.classification import UEA_ORDER
    from trep_edge.training.evaluation.forecasting import ETT_SETS
    from trep_edge.training.evaluation.missing import FRACTIONS
    from trep_edge.training.evaluation.results import ResultsFile

    store = ResultsFile(args.results)
    if args.task == "detect":
        from trep_edge.training.evaluation import detection

        args.command = "trep-edge " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        detection.run(args)
        return 0
    if args.task == "report":
        from trep_edge.training.evaluation.report import report

        print(report(store.rows))
        return 0
    torch.set_num_threads(args.threads)
    settings = settings_from_args(args)
    started = time.perf_counter()
    task = args.task
    if task == "anomaly":
        cases = anomaly.ucr_cases([settings.root() / "UCR_Anomaly" / f for f in _names(args.datasets, UCR_ANOMALY)])
        runner.run_anomaly(store, settings, cases, "UCR", args.max_test_steps, args.calibration_steps, args.beta)
    elif task == "yahoo":
        if not args.yahoo_root:
            raise ValueError("the yahoo task needs --yahoo-root: the unpacked Webscope S5 folder holding A1Benchmark ...")
        cases = anomaly.yahoo_cases(args.yahoo_root)
        runner.run_anomaly(store, settings, cases, "Yahoo", args.max_test_steps, args.calibration_steps, args.beta)
    elif task == "sepsis-stream":
        runner.run_sepsis_stream(store, settings, args.patients, args.beta)
    elif task == "classification":
        runner.run_classification(store, settings, _names(args.datasets, UEA_ORDER))
    elif task == "forecasting":
        runner.run_forecasting(store, settings, _names(args.datasets, ETT_SETS))
    elif task == "sepsis":
        runner.run_sepsis(store, settings, args.patients, args.septic_share, 0.5, args.max_train_windows, args.cv_metric)
    elif task == "missing":
        fractions = tuple(float(f) for f in _names(args.fractions, [str(f) for f in FRACTIONS]))
        name = _names(args.datasets, ["ArticularyWordRecognition"])[0]
        runner.run_missing(store, settings, name, fractions)
        if args.out:
            from trep_edge.training.evaluation.plots import missing_curve
            from trep_edge.training.evaluation.report import PAPER_AWR_MISSING_TREP

            missing_curve(store.rows, name, args.out, PAPER_AWR_MISSING_TREP)
    elif task == "heatmap":
        from trep_edge.training.evaluation.plots import latent_heatmap

        out = Path(args.out or "docs/latent_heatmap_DodgerLoopGame.png")
        if not (store.has("heatmap/DodgerLoopGame/both") and out.is_file()):
            info = latent_heatmap(out, settings.budget, args.data_root)
            store.put("heatmap/DodgerLoopGame/both", runner.result_row(settings, started, info))
    prefix = {"yahoo": "anomaly", "sepsis-stream": "sepsis_stream"}.get(task, task) + "/"
    rows = {k: v["metrics"] for k, v in store.rows.items() if k.startswith(prefix)}
    print(json.dumps({"task": task, "results": str(store.path), "seconds": round(time.perf_counter() - started, 1),
                      "rows": rows}, indent=1))
    return 0
