"""The ``trep-edge`` command: one entry point, one subcommand per job, one command module per subcommand.

``COMMANDS`` lists the command modules in the order ``--help`` shows them. Each offers ``add_parser(subparsers)``
(its arguments) and ``run(args) -> int`` (the exit code) and imports what it runs only inside ``run``: listing
them all stays cheap, ``trep-edge run`` on an edge box never imports torch, and a missing optional dependency is
reported as one line naming the pip extra that provides it (trep_edge/extras.py).
"""
from __future__ import annotations

import argparse
import logging
import sys

from trep_edge import demo, init_config
from trep_edge.extras import missing_extra_hint
from trep_edge.runtime.service.commands import doctor, replay, reshard, run, score
from trep_edge.training.commands import export, promote, rollback, train
from trep_edge.training.evaluation import command as evaluate

COMMANDS = (train, demo, export, evaluate, run, replay, score, doctor, promote, rollback, reshard, init_config)
"""Every subcommand's module, in the order of ``trep-edge --help``."""


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (also used to document every option with --help)."""
    parser = argparse.ArgumentParser(prog="trep-edge", description="Edge anomaly monitoring with T-Rep representations.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging, and export's full detail")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub).set_defaults(run=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and run the chosen subcommand; user errors exit 2 with a one-line message."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and not getattr(args, "accept_unknown", False):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.run(args) or 0)
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
