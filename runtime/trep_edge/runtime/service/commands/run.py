"""``trep-edge run``: the monitor daemon (``service/daemon.py``); settings from defaults, TOML, environment, flags."""
from __future__ import annotations

import argparse
import os

from trep_edge.extras import missing_extra_hint


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``trep-edge run`` subcommand's arguments."""
    try:
        from trep_edge.runtime.service.config import add_config_flags
    except ModuleNotFoundError as exc:
        # Without onnxruntime the daemon's flags cannot be listed; `run` then only says what to install.
        hint = missing_extra_hint(exc)
        if hint is None:
            raise
        p = subparsers.add_parser("run", help="run the streaming monitor daemon (" + hint + ")", description=hint)
        p.set_defaults(accept_unknown=True)
        return p
    p = subparsers.add_parser(
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
    return p


def run(args: argparse.Namespace) -> int:
    """``trep-edge run``: the monitor daemon."""
    from trep_edge.runtime.service.config import flag_overrides, load_config
    from trep_edge.runtime.service.daemon import run_daemon

    flags = flag_overrides(args)
    config = load_config(args.config, os.environ, flags)
    return run_daemon(config, args.config, flags)
