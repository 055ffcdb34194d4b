"""``trep-edge export``: a training checkpoint to ONNX with its model card, calibrated on normal data with the
runtime's scoring and optionally checked for torch/onnxruntime parity (``training/trep_edge/training/export.py``)."""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from trep_edge.help_format import HelpFormatter
from trep_edge.runtime.core.preprocess import Normalisation


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``trep-edge export`` subcommand's arguments."""
    p = subparsers.add_parser(
        "export",
        help="export a checkpoint to ONNX with its model card",
        description="Write the encoder as ONNX (inputs x, mask, t; output z) plus NAME.card.json, calibrate the paper "
        "protocol's threshold and the detector's prior on normal data with the runtime's scoring code, and optionally "
        "check torch/onnxruntime parity.",
        formatter_class=HelpFormatter,
    )
    p.add_argument("checkpoint", help="a checkpoint written by trep-edge train")
    p.add_argument("--out", required=True, help="output model path, ending in .onnx (the card goes beside it)")
    p.add_argument("--name", help="model name in the card (default: the file name)")
    p.add_argument("--window", type=int, default=201, help="scoring window W = padding + 1 (paper: padding 200)")
    p.add_argument("--z", type=int, default=21, help="the paper protocol's adjusted score: previous raw scores it "
                   "averages. Kept in the card for `trep-edge doctor` and the benchmark's paper peer; the monitor's "
                   "alerts come from its detector ([detector] in the monitor TOML), which does not read it")
    p.add_argument("--beta", type=float, default=4.0, help="the paper protocol's alert rule, adjusted score > mu + "
                   "beta * sigma (in the card only, as --z)")
    p.add_argument("--delay", type=int, default=7, help="the paper protocol's readings after an alert without a new "
                   "one (in the card only, as --z; the monitor's is [detector] refractory)")
    p.add_argument("--calibration-data", help="normal data for the threshold (default: the checkpoint's training data)")
    p.add_argument("--calibration-rows", help="START:END slice of the calibration data")
    p.add_argument("--calibration-steps", type=int, default=4000, help="at most this many scored steps for calibration "
                   "(the detector prior reads up to five times as many)")
    p.add_argument("--no-calibration", action="store_true", help="leave the threshold to be learned online (cold start)")
    p.add_argument("--data-root", help="data folder (default: $TREP_EDGE_DATA or ../shared/data)")
    p.add_argument("--precision", help="also write reduced-precision variants, e.g. fp16,int8 (kept only if their "
                   "adjusted scores stay within 0.1 sigma at p99 of the fp32 model's; see docs/export.md)")
    p.add_argument("--check", action="store_true", help="compare torch and onnxruntime (max |diff| <= 1e-4, identical alerts); exit 1 if not")
    p.add_argument("--graphs", help="extra graphs to embed, comma-separated from last_step, pruned_pair, step, or none "
                   "(default: every one that applies; each stores its own copy of the weights)")
    p.add_argument("--period", type=float, default=0.0, help="seconds between the training data's readings, written "
                   "to the card: a daemon whose [windows] period differs warns (default 0: any period; for a periodic "
                   "model trained on timestamped rows, their spacing, the step its phase is counted in)")
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
    return p


def run(args: argparse.Namespace) -> int:
    """``trep-edge export``: ONNX + model card, calibrated on normal data, optionally parity-checked."""
    from trep_edge.runtime.core.model_card import Scoring

    from trep_edge.training.data import load_training_data
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
    card = build_card(args.name or out.stem, encoder, trainer.meta, trainer.cfg.to_dict(), args.window, scoring,
                      trainer.step, float(getattr(args, "period", 0.0)))  # fmt: skip
    general = getattr(args, "general", False)
    if general:
        make_general(encoder, card)
    card.ranges = _channel_ranges(getattr(args, "range", []), card.channels)
    card.channel_codes = _channel_codes(getattr(args, "channel_codes", None))
    if card.channel_codes:
        card.validate(f"the card with --channel-codes {args.channel_codes}")  # refused now, not after calibration
    series, spec = None, dict(trainer.meta.get("data_spec") or {})
    if not args.no_calibration:
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
        engine = export_encoder(encoder, card, out, series, args.calibration_steps, names, with_prior=not general,
                                trained_rows=_trained_rows(series, spec, bool(args.calibration_data)))
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


def _trained_rows(series: list[np.ndarray] | None, spec: dict, other_data: bool) -> int:
    """The rows of the one series the model trained on, when the card's prior is drawn from it and it starts at its
    data's first row (``--rows`` absent or ``0:…``): a stream scored from that row leaves the training data after
    them (``detector.trained_rows``); else 0. Several series (patients) or other calibration data say nothing of
    where a scored stream's training rows end."""
    from trep_edge.training.data import row_range

    if other_data or not series or len(series) != 1 or row_range(spec.get("rows"))[0] not in (None, 0):
        return 0
    return len(series[0])


def _trim_padding(series: np.ndarray) -> np.ndarray:
    """Drop the trailing all-NaN steps that pad shorter series (e.g. patients) to a common length."""
    observed = np.flatnonzero(~np.isnan(series).all(axis=1))
    return series[: observed[-1] + 1] if len(observed) else series[:0]
