"""``trep-edge promote``: check a retrained model on archived telemetry and install it where the daemon watches
(``training/trep_edge/training/promote.py``)."""
from __future__ import annotations

import argparse

from trep_edge.help_format import HelpFormatter


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``trep-edge promote`` subcommand's arguments."""
    p = subparsers.add_parser(
        "promote",
        help="check a retrained model on archived telemetry and install it where the daemon watches",
        description="Parity check (torch vs onnxruntime, with the checkpoint), threshold calibration on the last "
        "--days of archived normal telemetry (alert ranges left out), the candidate's alert rate on the last day "
        "of the archive against the running model's, then an atomic write to --target (the daemon hot-swaps it). "
        "Prints a JSON report; exit 1 when the candidate is refused (docs/retraining.md).",
        formatter_class=HelpFormatter,
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
    p.add_argument("--config", help="the daemon's config file (monitor.toml): its [windows] and [detector] settings "
                   "score the alert rate; broker, topics and checkpoint for --shadow")
    p.add_argument("--report", help="also write the JSON report to this file")
    p.add_argument("--dry-run", action="store_true", help="check and report, but do not write --target")
    p.add_argument("--keep", type=int, default=5, help="models the target's history keeps for trep-edge rollback "
                   "(the one this install replaces is kept first; older ones are deleted)")
    return p


def run(args: argparse.Namespace) -> int:
    """``trep-edge promote``."""
    from trep_edge.training.promote import promote_command

    return promote_command(args)
