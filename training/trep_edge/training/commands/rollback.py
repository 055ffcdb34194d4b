"""``trep-edge rollback``: put back the model an install replaced, or list the target's history
(``training/trep_edge/training/promote.py``)."""
from __future__ import annotations

import argparse

from trep_edge.help_format import HelpFormatter


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``trep-edge rollback`` subcommand's arguments."""
    p = subparsers.add_parser(
        "rollback",
        help="put back the model an install replaced (the target's history), or list that history",
        description="Every install by promote (and by rollback) first keeps the model it replaces in "
        "TARGET_DIR/.history/TARGET_STEM/. Rollback installs a kept model again, card then model, each atomically, "
        "keeping the one it replaces (so a rollback can be rolled back); the daemon hot-swaps it. Prints the "
        "install's record as JSON; --list prints the history instead (docs/retraining.md).",
        formatter_class=HelpFormatter,
    )
    p.add_argument("--target", required=True, help="the model file the daemon runs ([model] path)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--to", metavar="SHA_PREFIX", help="the kept model to install, by the start of its sha256 "
                       "(None: the model the last install replaced)")
    which.add_argument("--list", action="store_true", help="print the kept models and the install records as JSON; "
                       "change nothing")
    p.add_argument("--keep", type=int, default=5, help="models the history keeps; older ones are deleted")
    return p


def run(args: argparse.Namespace) -> int:
    """``trep-edge rollback``."""
    from trep_edge.training.promote import rollback_command

    return rollback_command(args)
