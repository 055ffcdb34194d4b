"""``trep-edge init DIR``: a ready-to-edit monitor folder with the shipped models and a commented example config."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from trep_edge.bundled import example_config, shipped_models
from trep_edge.runtime.service.atomic_file import write_atomically


def _model_comment(model: Path) -> str:
    card = json.loads(model.with_suffix(".card.json").read_text())
    return (f"#   models/{model.name}: channels {', '.join(card['channels'])}; window {card['window']} readings; "
            f"{card.get('time_index', 'relative')} time index")  # fmt: skip


def write_monitor_folder(folder: Path, force: bool = False) -> Path:
    """Copy the shipped models into folder/models and write folder/monitor.toml naming them; return the config path."""
    config = folder / "monitor.toml"
    if config.exists() and not force:
        raise FileExistsError(f"{config} exists; pass --force to overwrite it")
    models = shipped_models()
    (folder / "models").mkdir(parents=True, exist_ok=True)
    for model in models:
        for path in (model, model.with_suffix(".card.json")):
            # Atomically: with --force a daemon may be watching the model it replaces.
            write_atomically(folder / "models" / path.name, lambda fh: fh.write(path.read_bytes()), mode=0o644)
    header = [
        "# Written by `trep-edge init`. Run the monitor from this folder (relative paths below are relative to it):",
        "#",
        "#   cd " + str(folder) + " && trep-edge run --config monitor.toml",
        "#",
        "# Models shipped with trep-edge, copied to models/ ([model] path picks one; replace it with your own from",
        "# trep-edge train + trep-edge export, see docs/quickstart-sensor.md):",
        *(_model_comment(m) for m in models),
        "#",
    ]
    text = "\n".join(header) + "\n" + example_config().read_text()
    write_atomically(config, lambda fh: fh.write(text.encode()), mode=0o644)
    return config


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``trep-edge init`` subcommand's arguments."""
    p = subparsers.add_parser(
        "init",
        help="write a monitor folder: the shipped models and a commented example config naming them",
        description="Copy the models shipped with trep-edge into DIR/models and write DIR/monitor.toml, the daemon's "
        "example configuration with every option commented, its [model] path set to the default model.",
    )
    p.add_argument("dir", metavar="DIR", help="folder to write (created if missing)")
    p.add_argument("--force", action="store_true", help="overwrite an existing DIR/monitor.toml")
    return p


def run(args: argparse.Namespace) -> int:
    """``trep-edge init``: write the monitor folder and say what to do next."""
    try:
        config = write_monitor_folder(Path(args.dir), args.force)
    except FileExistsError as exc:
        raise ValueError(str(exc)) from None
    print(f"wrote {config} and {len(shipped_models())} model(s) in {config.parent / 'models'}")
    print(f"next: cd {config.parent} && trep-edge run --config monitor.toml")
    return 0
