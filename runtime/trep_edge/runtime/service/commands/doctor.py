"""``trep-edge doctor``: versions, execution providers, and a model checked against its card; exit 1 on any problem."""
from __future__ import annotations

import argparse
import importlib.metadata
import platform
import shutil
import sys
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``trep-edge doctor`` subcommand's arguments."""
    p = subparsers.add_parser(
        "doctor",
        help="check the installation and a model: versions, providers, model vs card",
        description="Print versions and the onnxruntime execution providers; with --model, load it, check it against "
        "its card and score a test window. Exit 1 on any problem, including a provider fallback.",
    )
    p.add_argument("--model", help="ONNX model to check")
    p.add_argument("--providers", default="auto", help="providers to request: auto, or a comma list of tensorrt, cuda, cpu")
    return p


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def run(args: argparse.Namespace) -> int:
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
        from trep_edge.runtime.service.hot_reload import check_engine
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
              f"differencing {card.differencing}, time index {card.time_index}"
              + (f" (phase origin {card.phase_origin}, step {card.period:g} s)" if card.phase_origin else "")
              + f", embedding {card.time_embedding}, "
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
