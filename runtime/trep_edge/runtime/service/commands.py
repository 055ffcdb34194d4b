"""The runtime's ``trep-edge`` subcommands: ``run``, ``replay``, ``score``, ``doctor`` and ``reshard`` (parsers in
trep_edge/cli.py).

Each takes the parsed arguments and returns an exit code; user errors raise ValueError / FileNotFoundError, which
the CLI prints as one line.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import logging
import os
import platform
import shutil
import signal
import sys
import threading
from pathlib import Path

log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> int:
    """``trep-edge run``: the monitor daemon."""
    from trep_edge.runtime.service.config import flag_overrides, load_config
    from trep_edge.runtime.service.daemon import run_daemon

    flags = flag_overrides(args)
    config = load_config(args.config, os.environ, flags)
    return run_daemon(config, args.config, flags)


def _broker(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--broker must be HOST:PORT, got {text!r}")
    return host, int(port)


def replay(args: argparse.Namespace) -> int:
    """``trep-edge replay``: publish a dataset as sensor readings."""
    from trep_edge.datasets.paths import resolve

    from trep_edge.runtime.service.replay import Publisher, load_series, parse_rename, replay as publish_series, step_range

    if args.rate is not None and args.speed is not None:
        raise ValueError("give --rate (readings/s per stream) or --speed (multiple of real time), not both")
    rate = args.rate if args.rate is not None else (args.speed or 1.0) / args.period
    channels = args.channels.split(",") if args.channels else None
    series = load_series(resolve(args.data, args.data_root), channels, parse_rename(args.rename), args.max_series,
                         args.stream)  # fmt: skip
    host, port = _broker(args.broker)
    password = None
    if args.password_file:
        password = Path(args.password_file).read_text().rstrip("\r\n")
    elif args.username:
        password = os.environ.get("TREP_EDGE_MQTT_PASSWORD")
    publisher = Publisher(host, port, args.client_id, args.username or "", password, args.ca_file or "",
                          args.cert_file or "", args.key_file or "")  # fmt: skip
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        publisher.wait_connected()
        steps = len(step_range(series, args.start, args.limit))
        pace = "as fast as possible" if rate == 0 else f"{rate:g} readings/s per stream"
        print(f"replaying {len(series)} stream(s) x {steps} steps from {args.data} to {args.topic}, {pace}",
              flush=True)
        stats = publish_series(series, publisher, args.topic, rate, args.period, start=args.start, limit=args.limit,
                               qos=args.qos, stop=stop)  # fmt: skip
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        publisher.close()
    print(f"published {stats.published} readings of {stats.streams} stream(s) in {stats.seconds:.1f} s"
          + (f"; {stats.unconfirmed} QoS 1 publishes were not acknowledged" if stats.unconfirmed else ""))  # fmt: skip
    return 1 if stats.unconfirmed else 0


def score(args: argparse.Namespace) -> int:
    """``trep-edge score``: score a recorded file offline; write the CSV and the PNG."""
    from trep_edge.runtime.service.config import load_config
    from trep_edge.runtime.core.engine import load_engine
    from trep_edge.datasets.paths import resolve

    from trep_edge.runtime.service.replay import load_series, parse_rename
    from trep_edge.runtime.service.score_file import score_recording, write_csv, write_plot

    config = load_config(args.config, os.environ, {})
    engine = load_engine(args.model, args.providers)
    channels = args.channels.split(",") if args.channels else None
    series_list = load_series(resolve(args.data, args.data_root), channels, parse_rename(args.rename),
                              args.series + 1, args.stream)  # fmt: skip
    if args.series >= len(series_list):
        raise ValueError(f"--series {args.series}: the data has only {len(series_list)} series")
    series = series_list[args.series]
    result = score_recording(engine, series, config.alerts, config.detector)
    stem = Path(args.out or f"runs/score/{series.stream}.csv")
    write_csv(result, stem)
    print(f"{series.stream}: {len(result.raw)} steps scored with {engine.card.name} (sha256 {engine.sha256[:12]})")
    print(f"detector alerts at steps {result.alerts.nonzero()[0].tolist()[:20]}"
          + (" ..." if result.alerts.sum() > 20 else ""))  # fmt: skip
    for step, state, severity, alert_id in result.events:
        why = result.explanations.get(step)
        print(f"  step {step}: {alert_id} {state} ({severity})" + (f", top: {', '.join(why.top)}" if why else ""))
    if result.labels is not None and result.labels.any():
        idx = result.labels.nonzero()[0]
        print(f"labelled anomaly steps {idx[0]}..{idx[-1]} ({int(result.labels.sum())} steps)")
    print(f"CSV: {stem}")
    if not args.no_plot:
        png = Path(args.plot) if args.plot else stem.with_suffix(".png")
        write_plot(result, png, f"{series.stream} scored by {engine.card.name}")
        print(f"PNG: {png}")
    return 0


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def doctor(args: argparse.Namespace) -> int:
    """``trep-edge doctor``: versions, execution providers, and a model-vs-card check; exit 1 on any problem."""
    import onnxruntime as ort

    problems = []
    print(f"python        {platform.python_version()} ({platform.machine()}, {platform.system()})")
    for package in ("trep-edge", "numpy", "onnxruntime", "onnxruntime-gpu", "paho-mqtt", "matplotlib"):
        print(f"{package:<13} {_version(package)}")
    broker = shutil.which("mosquitto") or ("/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None)
    print(f"mosquitto     {broker or 'not found (only needed for a local demo broker)'}")
    print(f"onnxruntime providers available: {', '.join(ort.get_available_providers())} (device {ort.get_device()})")
    if args.model:
        from trep_edge.runtime.service.daemon import check_engine
        from trep_edge.runtime.core.engine import load_engine

        try:
            engine = load_engine(args.model, args.providers)
            check_engine(engine)
        except Exception as exc:  # report every kind of model failure as a finding, not a traceback
            print(f"MODEL PROBLEM: {exc}")
            return 1
        card = engine.card
        cal = card.calibration
        print(f"model         {card.name}  sha256 {engine.sha256}")
        print(f"  card        channels {card.channels}, window {card.window}, repr_dims {card.repr_dims}, "
              f"differencing {card.differencing}, time index {card.time_index}, embedding {card.time_embedding}, "
              f"precision {getattr(card, 'precision', 'fp32')}")  # fmt: skip
        print(f"  scoring     z {card.scoring.z}, beta {card.scoring.beta}, delay {card.scoring.delay}; "
              + (f"threshold {cal.mu + card.scoring.beta * cal.sigma:.4g} from {cal.n} calibration scores"
                 if cal else "no calibration: thresholds learned online per stream (cold start)"))  # fmt: skip
        print("  check       graph matches the card (inputs x/mask/t, channels, repr dims); sidecar card agrees; "
              "a test window scores finite")  # fmt: skip
        print(f"  providers   requested {args.providers!r}, running on {engine.providers}")
        print(f"  engine      {engine.selected}: {engine.selection_reason}")
        for name, verdict in engine.candidates.items():
            print(f"    {name:<11} {verdict}")
        if engine.fallback:
            print(f"\n!!! PROVIDER FALLBACK !!! {engine.fallback}\n", file=sys.stderr)
            print(f"  PROVIDER FALLBACK: {engine.fallback}")
            problems.append("provider fallback")
    print(f"runtime imports torch: {'YES (a bug: the runtime must not)' if 'torch' in sys.modules else 'no'}")
    if "torch" in sys.modules:
        problems.append("torch imported")
    print("OK" if not problems else f"PROBLEMS: {', '.join(problems)}")
    return 1 if problems else 0


def reshard(args: argparse.Namespace) -> int:
    """``trep-edge reshard``: N stopped shards' checkpoints in, M out (runtime/trep_edge/runtime/service/reshard.py)."""
    from trep_edge.runtime.service.reshard import reshard_files, stream_names
    from trep_edge.runtime.service.checkpoint import load_checkpoint

    for path in reshard_files(args.checkpoints, args.to, args.out, args.allow_missing, args.name):
        state, meta = load_checkpoint(path)
        print(f"{path}: shard {meta['shard']}, {len(stream_names(state))} streams")
    return 0
