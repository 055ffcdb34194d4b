"""``trep-edge eval``: run one of the paper's protocols for T-Rep and the TS2Vec ablation, append to a results file."""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import torch

from trep_edge.training.evaluation import anomaly, runner
from trep_edge.training.evaluation.classification import UEA_ORDER
from trep_edge.training.evaluation.forecasting import ETT_SETS
from trep_edge.training.evaluation.missing import FRACTIONS
from trep_edge.training.evaluation.pretrain import KNOWN_VARIANTS, VARIANTS, Budget
from trep_edge.training.evaluation.results import ResultsFile

UCR_ANOMALY = [
    "001_UCR_Anomaly_DISTORTED1sddb40_35000_52000_52620.txt",
    "002_UCR_Anomaly_DISTORTED2sddb40_35000_56600_56900.txt",
    "135_UCR_Anomaly_InternalBleeding16_1200_4187_4199.txt",
]


def _names(spec: str | None, default: list[str] | tuple[str, ...]) -> list[str]:
    return [s.strip() for s in spec.split(",") if s.strip()] if spec else list(default)


def settings_from_args(args: argparse.Namespace) -> runner.RunSettings:
    """Budget and shared settings from the command line."""
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
    return runner.RunSettings(budget, variants, args.data_root, command, args.repr_dims, args.time_index)


def evaluate(args: argparse.Namespace) -> int:
    """Run the chosen task; print the rows it wrote (or found) as JSON."""
    store = ResultsFile(args.results)
    if args.task == "detect":
        from trep_edge.training.evaluation.detection import run

        args.command = "trep-edge " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        run(args)
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
