"""The ``trep-edge`` command: one entry point, one subcommand per job.

Subcommand implementations are imported only when run, so ``trep-edge run`` on an edge box never imports torch, and
a missing optional dependency is reported as one line naming the pip extra that provides it (trep_edge/extras.py).
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from trep_edge.extras import missing_extra_hint

# subcommand -> "module:function" taking the parsed arguments and returning an exit code.
HANDLERS = {
    "train": "trep_edge.training.commands:train",
    "demo": "trep_edge.demo:run_demo",
    "export": "trep_edge.training.commands:export",
    "eval": "trep_edge.training.evaluation.command:evaluate",
    "run": "trep_edge.runtime.service.commands:run",
    "replay": "trep_edge.runtime.service.commands:replay",
    "score": "trep_edge.runtime.service.commands:score",
    "doctor": "trep_edge.runtime.service.commands:doctor",
    "promote": "trep_edge.training.promote:promote_command",
    "rollback": "trep_edge.training.promote:rollback_command",
    "reshard": "trep_edge.runtime.service.commands:reshard",
    "init": "trep_edge.init_config:init",
}


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Show a default only when it says something: not None/False, and not when the help already names one."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text:
            return text
        return super()._get_help_string(action)


def _csv_format() -> str:
    from trep_edge.datasets.timestamps import CSV_FORMAT

    return CSV_FORMAT


def _train_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="pretrain a T-Rep encoder on a dataset",
        description="Self-supervised T-Rep pretraining. Settings come from the defaults, then --config, then flags.",
        epilog=_csv_format(),
        formatter_class=_HelpFormatter,
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
    p.add_argument("--time-index", help="time index convention: relative or periodic:P (TREP.md §4)")
    p.add_argument("--max-train-length", type=int, help="cut long series into sections of at most this many steps")
    p.add_argument("--causal", action="store_true", default=None, help="causal convolutions with a receptive field "
                   "within --max-receptive-field, for the incremental step engine (docs/causal.md); needs "
                   "--time-index periodic:P")
    p.add_argument("--max-receptive-field", type=int, help="causal: steps the dilations may reach (default 201; keep "
                   "it <= the export --window)")
    p.add_argument("--weights", help="four task weights a,b,c,d summing to 1: instance, temporal, divergence, forecast")
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


def _export_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="export a checkpoint to ONNX with its model card",
        description="Write the encoder as ONNX (inputs x, mask, t; output z) plus NAME.card.json, calibrate the alert "
        "threshold on normal data with the runtime's scoring code, and optionally check torch/onnxruntime parity.",
        formatter_class=_HelpFormatter,
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
                   "adjusted scores stay within 0.1 sigma at p99 of the fp32 model's; see docs/export.md)")
    p.add_argument("--check", action="store_true", help="compare torch and onnxruntime (max |diff| <= 1e-4, identical alerts); exit 1 if not")
    p.add_argument("--graphs", help="extra graphs to embed, comma-separated from last_step, pruned_pair, step, or none "
                   "(default: every one that applies; each stores its own copy of the weights)")
    p.add_argument("--period", type=float, default=0.0, help="seconds between the training data's readings, written "
                   "to the card: a daemon whose [windows] period differs warns (default 0: any period)")
    p.add_argument("--range", action="append", default=[], metavar="CHANNEL=LOW:HIGH",
                   help="a channel's physically possible values (repeatable), e.g. HR=0:350: the runtime treats a "
                   "value outside as a sensor fault (missing for scoring, a sensor alert), not as an anomaly")
    p.add_argument("--channel-codes", metavar="FILE", help="JSON object channel -> {system, code, display, unit} "
                   "written to the card: what each channel measures (e.g. LOINC with a UCUM unit), used by the FHIR "
                   "output (models/icu-vitals.codes.json: the ICU vitals' LOINC codes)")
    p.add_argument("--general", action="store_true", help="a general-purpose model (input_dims 1 only): per-stream "
                   "scaling, each channel scored on its own with shared weights, channel 'value', identity "
                   "normalisation (the training normalisation is folded into the weights), no detector prior "
                   "(each stream learns its own signal statistics)")


def _run_parser(sub: argparse._SubParsersAction) -> None:
    try:
        from trep_edge.runtime.service.config import add_config_flags
    except ModuleNotFoundError as exc:
        # Without onnxruntime the daemon's flags cannot be listed; `run` then only says what to install.
        hint = missing_extra_hint(exc)
        if hint is None:
            raise
        p = sub.add_parser("run", help="run the streaming monitor daemon (" + hint + ")", description=hint)
        p.set_defaults(accept_unknown=True)
        return
    p = sub.add_parser(
        "run",
        help="run the streaming monitor daemon (MQTT in, scores and alerts out)",
        description="The monitor daemon. Settings: defaults, then --config TOML, then TREP_EDGE_<SECTION>_<FIELD> "
        "environment variables, then the flags below. Secrets only from the environment or files: "
        "TREP_EDGE_MQTT_PASSWORD or [mqtt] password_file, TREP_EDGE_MQTT_KEY_PASSWORD or [mqtt] key_password_file. "
        "SIGTERM checkpoints and stops; SIGHUP reloads config and model. Example config: trep-edge init DIR writes "
        "one (deploy/monitor.toml in the source).",
        # No prefix matching: --mqtt-password must not silently mean --mqtt-password-file.
        allow_abbrev=False,
    )
    p.add_argument("--config", help="TOML file (trep-edge init DIR writes a commented example)")
    p.add_argument("--shard", dest="cfg__monitor__shard", metavar="I/N", help="this daemon's shard of N (same as "
                   "--monitor-shard): it scores the streams with crc32(stream id) %% N == I (docs/operations.md)")
    add_config_flags(p)


def _reshard_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "reshard",
        help="move stopped shards' checkpoints to another number of shards",
        description="Read the checkpoints of all N shards of a stopped deployment and write one checkpoint per new "
        "shard of --to M, each stream's state going to its new owner (crc32(stream id) %% M). Start the M daemons "
        "with --shard i/M and [state] path pointing at their file: every stream resumes warm (docs/operations.md).",
        formatter_class=_HelpFormatter,
    )
    p.add_argument("checkpoints", nargs="+", metavar="OLD", help="the old shards' checkpoint files ([state] path)")
    p.add_argument("--to", type=int, required=True, metavar="M", help="the new number of shards")
    p.add_argument("--out", required=True, help="folder for the new checkpoints")
    p.add_argument("--name", default="shard-{i}-of-{n}.npz", help="file name of new shard {i} of {n}")
    p.add_argument("--allow-missing", action="store_true", help="go on when an old shard's checkpoint is not given "
                   "(its streams warm up again)")


def _replay_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay",
        help="publish a recorded dataset to MQTT as sensor readings (a simulator)",
        description="Publish DATA as JSON readings {ts, values} with QoS 1, one stream per series, at --rate "
        "readings/s per stream or --speed times real time. Timestamps advance by --period per reading.",
        formatter_class=_HelpFormatter,
    )
    p.add_argument("data", help="UCR-anomaly .txt, sensor .csv (format: trep-edge train --help), or PhysioNet 2019 "
                   ".tar.gz (patients as beds); a path or a path under the data folder")
    p.add_argument("--topic", required=True, help="topic template with one {name} for the stream id, e.g. icu/{bed}/vitals")
    p.add_argument("--broker", default="127.0.0.1:1883", help="HOST:PORT")
    p.add_argument("--rate", type=float, help="readings per second per stream (0 = as fast as possible)")
    p.add_argument("--speed", type=float, help="multiple of real time (rate = speed / period); default 1")
    p.add_argument("--period", type=float, default=1.0, help="seconds between a stream's readings (timestamps)")
    p.add_argument("--channels", help="comma-separated dataset columns to send (PhysioNet default: the bedside vitals)")
    p.add_argument("--rename", help="DATA=MODEL channel renames, e.g. O2Sat=SpO2,Resp=RESP")
    p.add_argument("--max-series", type=int, help="at most this many streams (e.g. PhysioNet patients)")
    p.add_argument("--stream", help="stream id (single-series files) or stream name prefix (PhysioNet: bed)")
    p.add_argument("--start", type=int, default=0, help="first step to send")
    p.add_argument("--limit", type=int, help="send at most this many steps")
    p.add_argument("--qos", type=int, default=1, choices=[0, 1, 2], help="publish QoS")
    p.add_argument("--client-id", default="", help="MQTT client id ('' = random)")
    p.add_argument("--username", help="broker user (password: --password-file or $TREP_EDGE_MQTT_PASSWORD)")
    p.add_argument("--password-file", help="file holding the broker password")
    p.add_argument("--ca-file", help="CA certificate: connect with TLS")
    p.add_argument("--cert-file", help="client certificate (TLS)")
    p.add_argument("--key-file", help="client key (TLS)")
    p.add_argument("--data-root", help="data folder (default: $TREP_EDGE_DATA or ../shared/data)")


def _score_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "score",
        help="score a recorded file offline; write a CSV and a PNG plot",
        description="The daemon's scoring and alert episodes over one series of DATA: a CSV of step, values, raw, "
        "adjusted, threshold, alert, event, label, and a PNG (signal, score, threshold, alerts, labels). The PNG "
        "needs matplotlib (pip install 'trep-edge[plot]'); --no-plot skips it.",
        formatter_class=_HelpFormatter,
    )
    p.add_argument("data", help="UCR-anomaly .txt, sensor .csv (format: trep-edge train --help), or PhysioNet 2019 "
                   ".tar.gz")
    p.add_argument("--model", required=True, help="ONNX model with its card")
    p.add_argument("--config", help="monitor TOML: its [alerts] and [monitor] settings apply")
    p.add_argument("--out", help="CSV path (default runs/score/<stream>.csv)")
    p.add_argument("--plot", help="PNG path (default: the CSV path with .png)")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")
    p.add_argument("--series", type=int, default=0, help="which series of a multi-series file (0-based)")
    p.add_argument("--stream", help="stream id used in alert ids (default as replay names it)")
    p.add_argument("--channels", help="comma-separated dataset columns (before --rename)")
    p.add_argument("--rename", help="DATA=MODEL channel renames, e.g. O2Sat=SpO2")
    p.add_argument("--providers", default="auto", help="onnxruntime providers: auto, cpu, cuda, tensorrt")
    p.add_argument("--data-root", help="data folder (default: $TREP_EDGE_DATA or ../shared/data)")


def _doctor_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor",
        help="check the installation and a model: versions, providers, model vs card",
        description="Print versions and the onnxruntime execution providers; with --model, load it, check it against "
        "its card and score a test window. Exit 1 on any problem, including a provider fallback.",
    )
    p.add_argument("--model", help="ONNX model to check")
    p.add_argument("--providers", default="auto", help="providers to request: auto, or a comma list of tensorrt, cuda, cpu")


def _promote_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "promote",
        help="check a retrained model on archived telemetry and install it where the daemon watches",
        description="Parity check (torch vs onnxruntime, with the checkpoint), threshold calibration on the last "
        "--days of archived normal telemetry (alert ranges left out), the candidate's alert rate on the last day "
        "of the archive against the running model's, then an atomic write to --target (the daemon hot-swaps it). "
        "Prints a JSON report; exit 1 when the candidate is refused (docs/retraining.md).",
        formatter_class=_HelpFormatter,
    )
    p.add_argument("candidate", help="exported model (.onnx, its checkpoint beside it as .pt or via --checkpoint)")
    p.add_argument("--archive", required=True, help="the daemon's telemetry archive folder ([archive] path)")
    p.add_argument("--target", required=True, help="the model file the daemon runs ([model] path)")
    p.add_argument("--checkpoint", help="checkpoint the candidate was exported from (None: CANDIDATE.pt beside it)")
    p.add_argument("--days", type=float, default=7.0, help="calibrate on the archive's last DAYS days")
    p.add_argument("--calibration-steps", type=int, default=4000, help="at most this many scored steps for calibration")
    p.add_argument("--max-alert-ratio", type=float, default=2.0, help="refuse when the candidate's alert rate on "
                   "the last day exceeds this multiple of the running model's ...")
    p.add_argument("--min-alert-rate", type=float, default=0.001, help="... and this absolute rate (alerts per "
                   "scored reading)")
    p.add_argument("--shadow", type=float, metavar="HOURS", help="before installing, score live telemetry with the "
                   "candidate beside the installed model for HOURS (a read-only MQTT client of the daemon's broker); "
                   "the comparison goes to the target's history folder, and the alert-rate rule applies to it too")
    p.add_argument("--config", help="the daemon's config file (monitor.toml): broker, topics, detector settings and "
                   "checkpoint for --shadow")
    p.add_argument("--report", help="also write the JSON report to this file")
    p.add_argument("--dry-run", action="store_true", help="check and report, but do not write --target")
    p.add_argument("--keep", type=int, default=5, help="models the target's history keeps for trep-edge rollback "
                   "(the one this install replaces is kept first; older ones are deleted)")


def _rollback_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rollback",
        help="put back the model an install replaced (the target's history), or list that history",
        description="Every install by promote (and by rollback) first keeps the model it replaces in "
        "TARGET_DIR/.history/TARGET_STEM/. Rollback installs a kept model again, card then model, each atomically, "
        "keeping the one it replaces (so a rollback can be rolled back); the daemon hot-swaps it. Prints the "
        "install's record as JSON; --list prints the history instead (docs/retraining.md).",
        formatter_class=_HelpFormatter,
    )
    p.add_argument("--target", required=True, help="the model file the daemon runs ([model] path)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--to", metavar="SHA_PREFIX", help="the kept model to install, by the start of its sha256 "
                       "(None: the model the last install replaced)")
    which.add_argument("--list", action="store_true", help="print the kept models and the install records as JSON; "
                       "change nothing")
    p.add_argument("--keep", type=int, default=5, help="models the history keeps; older ones are deleted")


def _eval_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
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
        formatter_class=_HelpFormatter,
    )
    p.add_argument("task", choices=["anomaly", "yahoo", "classification", "forecasting", "sepsis", "sepsis-stream",
                                     "missing", "heatmap", "report", "detect"])
    d = p.add_argument_group("detect")
    d.add_argument("--quick", action="store_true", help="detect: the fixed quick subset (under 10 minutes on 2 cores)")
    d.add_argument("--model", default="models/general.onnx", help="detect: T-Rep model for the non-ICU streams")
    d.add_argument("--icu-model", default="models/icu-vitals.onnx", help="detect: T-Rep model for the sepsis streams")
    d.add_argument("--ablations", nargs="*", help="detect: detector variants NAME:key=value;key=value (DetectorConfig)")
    d.add_argument("--peers", help="detect: comma-separated peers (default rolling_z,hst,stumpi,paper; '' = none)")
    d.add_argument("--table", default="bench/results/detection.md", help="detect: results as Markdown tables")
    d.add_argument("--cache", default="~/.cache/trep-edge/detect", help="detect: cache of the model's features")
    d.add_argument("--per-stream-train", action="store_true", help="detect: also a trep:per-stream row: one model per "
                   "synthetic/UCR stream trained on its probation part (an evaluator's settings), export defaults")
    d.add_argument("--per-stream-ablations", nargs="*", help="detect: detector variants of the per-stream row, "
                   "NAME:key=value;key=value (rows trep:per-stream:NAME; models reused)")
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


def _demo_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="end-to-end demo: private broker, daemon, real data replayed (ICU beds, or plant machines)",
        description="Starts a private Mosquitto on a free loopback port (or uses --broker) and the monitor daemon. "
        "Scenario icu: the default model, PhysioNet 2019 patients replayed as bedside streams, live counters and every "
        "alert, alerts set against the sepsis labels, one bed scored offline as a PNG. Scenario plant: the general "
        "model, machines of real signals at scales 1e-3 to 1e4 with injected faults, and the faults found, missed "
        "and the false alarms.",
        formatter_class=_HelpFormatter,
    )
    p.add_argument("--scenario", choices=("icu", "plant"), default="icu", help="ICU beds, or plant machines")
    p.add_argument("--model", help="ONNX model with its card (default: the shipped icu-vitals.onnx; general.onnx "
                   "for the plant)")
    p.add_argument("--broker", help="HOST:PORT of an existing broker instead of a private mosquitto")
    p.add_argument("--beds", type=int, default=40, help="patients replayed as beds")
    p.add_argument("--machines", type=int, default=11, help="plant: machines, one per fault kind in turn (11: all)")
    p.add_argument("--seed", type=int, default=0, help="plant: which signals and fault positions")
    p.add_argument("--rate", type=float, default=10.0, help="readings per second per bed or machine (icu: each "
                   "reading is one hour; plant: use 100 or more, a machine sends 1,500)")
    p.add_argument("--every", type=float, default=3.0, help="seconds between live summary lines")
    p.add_argument("--out", default="runs/demo", help="folder for the daemon log, the CSV and the PNG")
    p.add_argument("--data-root", help="data folder (default: $TREP_EDGE_DATA or ../shared/data)")


def _init_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "init",
        help="write a monitor folder: the shipped models and a commented example config naming them",
        description="Copy the models shipped with trep-edge into DIR/models and write DIR/monitor.toml, the daemon's "
        "example configuration with every option commented, its [model] path set to the default model.",
    )
    p.add_argument("dir", metavar="DIR", help="folder to write (created if missing)")
    p.add_argument("--force", action="store_true", help="overwrite an existing DIR/monitor.toml")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (also used to document every option with --help)."""
    parser = argparse.ArgumentParser(prog="trep-edge", description="Edge anomaly monitoring with T-Rep representations.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging, and export's full detail")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _train_parser(sub)
    _demo_parser(sub)
    _export_parser(sub)
    _eval_parser(sub)
    _run_parser(sub)
    _replay_parser(sub)
    _score_parser(sub)
    _doctor_parser(sub)
    _promote_parser(sub)
    _rollback_parser(sub)
    _reshard_parser(sub)
    _init_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and run the chosen subcommand; user errors exit 2 with a one-line message."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and not getattr(args, "accept_unknown", False):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    module_name, func_name = HANDLERS[args.command].split(":")
    try:
        handler = getattr(importlib.import_module(module_name), func_name)
        return int(handler(args) or 0)
    except ModuleNotFoundError as exc:
        hint = missing_extra_hint(exc)
        if hint is None:
            raise
        if exc.name == "matplotlib" and hasattr(args, "no_plot"):
            hint += ", or pass --no-plot"
        print(f"trep-edge {args.command}: {hint}", file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError) as exc:
        print(f"trep-edge {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
