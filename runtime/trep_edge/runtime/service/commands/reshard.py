"""``trep-edge reshard``: N stopped shards' checkpoints in, M out (``service/reshard.py``)."""
from __future__ import annotations

import argparse

from trep_edge.help_format import HelpFormatter


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``trep-edge reshard`` subcommand's arguments."""
    p = subparsers.add_parser(
        "reshard",
        help="move stopped shards' checkpoints to another number of shards",
        description="Read the checkpoints of all N shards of a stopped deployment and write one checkpoint per new "
        "shard of --to M, each stream's state going to its new owner (crc32(stream id) %% M). Start the M daemons "
        "with --shard i/M and [state] path pointing at their file: every stream resumes warm (docs/operations.md).",
        formatter_class=HelpFormatter,
    )
    p.add_argument("checkpoints", nargs="+", metavar="OLD", help="the old shards' checkpoint files ([state] path)")
    p.add_argument("--to", type=int, required=True, metavar="M", help="the new number of shards")
    p.add_argument("--out", required=True, help="folder for the new checkpoints")
    p.add_argument("--name", default="shard-{i}-of-{n}.npz", help="file name of new shard {i} of {n}")
    p.add_argument("--allow-missing", action="store_true", help="go on when an old shard's checkpoint is not given "
                   "(its streams warm up again)")
    return p


def run(args: argparse.Namespace) -> int:
    """``trep-edge reshard``: N stopped shards' checkpoints in, M out (runtime/trep_edge/runtime/service/reshard.py)."""
    from trep_edge.runtime.service.reshard import reshard_files, stream_names
    from trep_edge.runtime.service.checkpoint import load_checkpoint

    for path in reshard_files(args.checkpoints, args.to, args.out, args.allow_missing, args.name):
        state, meta = load_checkpoint(path)
        print(f"{path}: shard {meta['shard']}, {len(stream_names(state))} streams")
    return 0
