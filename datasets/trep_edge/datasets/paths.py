"""Where the shared data folder is: one setting, with a default that works in the checkout."""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "TREP_EDGE_DATA"
# The data lives beside the repository (../shared/data), never inside it; this file is datasets/trep_edge/datasets/paths.py.
DEFAULT_ROOT = Path(__file__).resolve().parents[3].parent / "shared" / "data"


def data_root(override: str | os.PathLike[str] | None = None) -> Path:
    """Return the data folder: the override, else $TREP_EDGE_DATA, else ../shared/data beside the repo."""
    if override is not None:
        root, origin = Path(override), "the data-root argument"
    elif os.environ.get(ENV_VAR):
        root, origin = Path(os.environ[ENV_VAR]), f"${ENV_VAR}"
    else:
        root, origin = DEFAULT_ROOT, "the default location"
    if not root.is_dir():
        raise FileNotFoundError(
            f"data folder {root} (from {origin}) does not exist; "
            f"set {ENV_VAR} or pass --data-root to point at the shared data folder"
        )
    return root


def resolve(spec: str | os.PathLike[str], override: str | os.PathLike[str] | None = None) -> Path:
    """A dataset path as given if it exists, else relative to the data folder; a clear error when neither exists."""
    direct = Path(spec).expanduser()
    if direct.exists():
        return direct
    candidate = data_root(override) / spec
    if candidate.exists():
        return candidate
    raise FileNotFoundError(f"data {str(spec)!r} not found as a path nor under the data folder {candidate.parent}")
