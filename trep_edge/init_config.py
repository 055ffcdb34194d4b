"""``trep-edge init DIR``: a ready-to-edit monitor folder with the shipped models and a commented example config."""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from trep_edge.bundled import example_config, shipped_models


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
            shutil.copyfile(path, folder / "models" / path.name)
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
    config.write_text("\n".join(header) + "\n" + example_config().read_text())
    return config


def init(args: argparse.Namespace) -> int:
    """``trep-edge init``: write the monitor folder and say what to do next."""
    try:
        config = write_monitor_folder(Path(args.dir), args.force)
    except FileExistsError as exc:
        raise ValueError(str(exc)) from None
    print(f"wrote {config} and {len(shipped_models())} model(s) in {config.parent / 'models'}")
    print(f"next: cd {config.parent} && trep-edge run --config monitor.toml")
    return 0
