"""``trep-edge score``: score a recorded file offline as the daemon would; write a CSV and a PNG
(``service/score_file.py``)."""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

from trep_edge.help_format import HelpFormatter

if TYPE_CHECKING:  # the config module loads only when the command runs
    from trep_edge.runtime.service.config import MonitorConfig


CAUSE_WORDS = {"stuck": "stuck sensor", "range": "beyond its range", "implausible": "sensor fault: implausible value",
               "disconnected": "sensor fault: disconnected"}
"""How an episode's cause reads in the summary (an anomaly episode needs no word beyond its severity)."""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``trep-edge score`` subcommand's arguments."""
    p = subparsers.add_parser(
        "score",
        help="score a recorded file offline; write a CSV and a PNG plot",
        description="The daemon's scoring and alert episodes over one series of DATA: a CSV of step, values, raw, "
        "adjusted, threshold, alert, event, label, and a PNG (signal, score, threshold, alerts, labels). The PNG "
        "needs matplotlib (pip install 'trep-edge[plot]'); --no-plot skips it.",
        formatter_class=HelpFormatter,
    )
    p.add_argument("data", help="UCR-anomaly .txt, sensor .csv (format: trep-edge train --help), or PhysioNet 2019 "
                   ".tar.gz")
    p.add_argument("--model", required=True, help="ONNX model with its card")
    p.add_argument("--config", help="monitor TOML: the settings of the model it names with --model's file ([model] or "
                   "a [[routes]] entry, overrides included: engine, [detector], [alerts], [windows]) apply; those of "
                   "[model] when it names that file nowhere")
    p.add_argument("--out", help="CSV path, or a folder for <stream>.csv (default runs/score/<stream>.csv)")
    p.add_argument("--plot", help="PNG path (default: the CSV path with .png)")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")
    p.add_argument("--series", type=int, default=0, help="which series of a multi-series file (0-based)")
    p.add_argument("--stream", help="stream id used in alert ids (default as replay names it)")
    p.add_argument("--channels", help="comma-separated dataset columns (before --rename)")
    p.add_argument("--rename", help="DATA=MODEL channel renames, e.g. O2Sat=SpO2")
    p.add_argument("--by-time", action="store_true",
                   help="place rows at their timestamps (a CSV's first column) as the daemon places a live feed's "
                   "readings: a missing step is a gap, filled up to [windows] max_gap; a longer one restarts the "
                   "stream's windows, and its detector resumes across it ([detector] resume) (default: rows are "
                   "consecutive steps, whatever their times)")
    p.add_argument("--period", type=float, help="with --by-time: seconds per step (default: the file's median "
                   "interval between readings)")
    p.add_argument("--providers", default="auto", help="onnxruntime providers: auto, cpu, cuda, tensorrt")
    p.add_argument("--data-root", help="data folder (default: $TREP_EDGE_DATA or ../shared/data)")
    return p


def _settings_of(config: MonitorConfig, model: str) -> MonitorConfig:
    """The daemon's settings for the model file ``model``: those of the route or ``[model]`` that names it (the
    daemon would score its streams so), else ``[model]``'s with the engine left to the model (``auto``: an engine
    forced for another file may not be in this one)."""
    for settings in config.models():
        path = settings.config.model.path
        if Path(path).is_file() and Path(model).is_file() and os.path.samefile(path, model):
            return settings.config
    return dataclasses.replace(config, model=dataclasses.replace(config.model, engine="auto"))


def run(args: argparse.Namespace) -> int:
    """``trep-edge score``: score a recorded file offline; write the CSV and the PNG."""
    import numpy as np

    from trep_edge.runtime.service.config import load_config
    from trep_edge.runtime.core.engine import load_engine
    from trep_edge.datasets.paths import resolve

    from trep_edge.runtime.service.replay import load_series, parse_rename
    from trep_edge.datasets.timestamps import median_interval
    from trep_edge.runtime.service.score_file import score_recording, write_csv, write_plot

    if args.series < 0:
        raise ValueError(f"--series counts from 0 (the file's first series), got {args.series}")
    if args.period is not None and not args.by_time:
        raise ValueError("--period sets the step of --by-time scoring; add --by-time, or leave --period out")
    if args.period is not None and not (math.isfinite(args.period) and args.period > 0):
        raise ValueError(f"--period must be a positive number of seconds, got {args.period}")
    config = _settings_of(load_config(args.config, os.environ, {}), args.model)
    engine = load_engine(args.model, args.providers, config.model.threads, config.model.engine)
    channels = args.channels.split(",") if args.channels else None
    series_list = load_series(resolve(args.data, args.data_root), channels, parse_rename(args.rename),
                              args.series + 1, args.stream)  # fmt: skip
    if args.series >= len(series_list):
        raise ValueError(f"--series {args.series}: the data has only {len(series_list)} series")
    series = series_list[args.series]
    windows = None
    if args.by_time:
        if series.timestamps is None:
            raise ValueError(f"--by-time: {args.data} has no timestamp column, so its rows can only be scored as "
                             "consecutive steps (leave --by-time out)")
        period = args.period if args.period is not None else median_interval(series.timestamps)
        windows = dataclasses.replace(config.windows, period=period)
        print(f"{series.stream}: by time, one step every {period:g} s; gaps over {windows.max_gap} steps reset the "
              "stream")
    result = score_recording(engine, series, config.alerts, config.detector, windows)
    stem = Path(args.out or "runs/score/")
    if args.out is None or stem.is_dir() or args.out.endswith(("/", os.sep)):
        stem = stem / f"{series.stream}.csv"
    write_csv(result, stem)
    judged = int(np.isfinite(result.surprise).sum())
    print(f"{series.stream}: {len(result.raw)} rows scored with {engine.card.name} (sha256 {engine.sha256[:12]}); "
          f"{len(result.raw) - judged} of them without a surprise (missing or implausible values, warm-up, or a "
          "timestamp merged into an earlier row's step)")  # fmt: skip
    print(f"detector alerts at steps {result.alerts.nonzero()[0].tolist()[:20]}"
          + (" ..." if result.alerts.sum() > 20 else ""))  # fmt: skip
    for step, state, severity, alert_id, cause in result.events:
        why = result.explanations.get(step)
        kind = ", ".join(filter(None, [severity, CAUSE_WORDS.get(cause, "")]))
        print(f"  step {step}: {alert_id} {state} ({kind})" + (f", top: {', '.join(why.top)}" if why else ""))
    if result.labels is not None and result.labels.any():
        idx = result.labels.nonzero()[0]
        print(f"labelled anomaly steps {idx[0]}..{idx[-1]} ({int(result.labels.sum())} steps)")
    print(f"CSV: {stem}")
    if not args.no_plot:
        png = Path(args.plot) if args.plot else stem.with_suffix(".png")
        write_plot(result, png, f"{series.stream} scored by {engine.card.name}")
        print(f"PNG: {png}")
    return 0
