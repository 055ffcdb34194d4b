"""The daemon's checkpoint file: the monitor's state (a flat dict of arrays) and a JSON ``meta``, in one ``.npz``.

Written by the daemon every ``checkpoint_interval`` seconds and on SIGTERM, read back when it starts, and read and
written by ``trep-edge reshard`` (``reshard.py``) when streams move between shard layouts. The file is replaced
atomically (``atomic_file.write_atomically``), so a crash leaves either the old checkpoint or the new one. The
meta sits under the key ``daemon/meta`` with the ``format`` number this module reads; any other format is refused.

The daemon's meta: ``saved_at``, ``model``, ``model_sha256``, ``config_revision``, ``shard`` and, optional (absent
from checkpoints of earlier daemons and from ``trep-edge reshard``'s output, which then restore without it),
``lifecycle``: ``alerts.Lifecycle.to_json()``, the streams reported ``no_data`` (stream -> epoch seconds), those
with a ``pending`` status out, and the last message of each open episode, so that a restart repeats none of them;
and ``control``: ``control_topics.Control.to_json()``, the acknowledged episodes, the silences and the episode
messages a silence holds back, so that a restart keeps them.
Readers ignore meta keys they do not know, so an optional key needs no new format number.

The state declares what indexes the rows of each of its keys (``stream_state.LAYOUT_KEY``, written by
``Monitor.state_dict``), which ``reshard`` moves by; checkpoints written before the declaration existed (format 1
without it) restore nowhere warm: a daemon refuses them as it refuses any unreadable state and starts fresh.

A daemon of several models (``[[routes]]``) writes one file: the default model's state and meta exactly as a daemon
of one model does (so adding or removing routes keeps the default model's streams), and each routed model's state
under ``route/NAME/`` with its meta (``model``, ``model_sha256``, ``lifecycle``) under ``meta["routes"][NAME]``;
``join_models`` and ``split_models`` are the only code that knows this layout.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from trep_edge.runtime.service.atomic_file import write_atomically

if TYPE_CHECKING:  # the daemon's models; reshard reads and writes checkpoints without loading any
    from trep_edge.runtime.service.routing import ModelUnit

CHECKPOINT_FORMAT = 2
META_KEY = "daemon/meta"
DEFAULT_MODEL = ""
"""The key of the default model (``[model]``) in ``join_models`` / ``split_models``."""
ROUTE_PREFIX = "route/"

State = dict[str, np.ndarray]


def save_checkpoint(path: str | Path, state: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
    """Write ``state`` (flat dict of arrays) and ``meta`` atomically: temp file, fsync, rename, fsync the folder.

    A crash at any moment leaves either the old checkpoint or the new one, never a torn file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = dict(state)
    arrays[META_KEY] = np.array(json.dumps({**meta, "format": CHECKPOINT_FORMAT}))
    write_atomically(path, lambda fh: np.savez(fh, **arrays))


def save_models(path: str | Path, units: Sequence[ModelUnit], common: Mapping[str, Any]) -> None:
    """The daemon's checkpoint: every model's monitor state with its meta (``model``, ``model_sha256``,
    ``lifecycle``), keyed by ``model_key``, and the meta every model shares (``common``)."""
    models = {model_key(unit, units): (unit.monitor.state_dict(), {
        "model": unit.engine.card.name, "model_sha256": unit.engine.sha256,
        "lifecycle": unit.lifecycle.to_json()}) for unit in units}  # fmt: skip
    save_checkpoint(path, *join_models(models, common))


def model_key(unit: ModelUnit, units: Sequence[ModelUnit]) -> str:
    """A model's key in the checkpoint: the default model (the last unit) is stored as a daemon of one model stores
    it."""
    return DEFAULT_MODEL if unit is units[-1] else unit.name


def load_checkpoint(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read a checkpoint written by ``save_checkpoint``: (state, meta)."""
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    meta = json.loads(str(arrays.pop(META_KEY)))
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"checkpoint {path} has format {meta.get('format')!r}, this daemon reads {CHECKPOINT_FORMAT}")
    return arrays, meta


def join_models(models: Mapping[str, tuple[Mapping[str, np.ndarray], Mapping[str, Any]]],
                common: Mapping[str, Any]) -> tuple[State, dict[str, Any]]:  # fmt: skip
    """One checkpoint's (state, meta) from each model's (state, meta), keyed by model name (``DEFAULT_MODEL`` for
    the default one, which must be there), and the meta every model shares (when and where it was saved)."""
    state, meta = dict(models[DEFAULT_MODEL][0]), {**common, **models[DEFAULT_MODEL][1]}
    routes = {name: part for name, part in models.items() if name != DEFAULT_MODEL}
    for name, (part, _) in routes.items():
        state.update({f"{ROUTE_PREFIX}{name}/{key}": value for key, value in part.items()})
    if routes:
        meta["routes"] = {name: dict(part_meta) for name, (_, part_meta) in routes.items()}
    return state, meta


def split_models(state: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> dict[str, tuple[State, dict[str, Any]]]:
    """Each model's (state, meta) of a checkpoint, keyed as ``join_models`` takes them; a checkpoint of one model
    is its default model alone. Every model's meta carries the shared keys too."""
    common = {k: v for k, v in meta.items() if k != "routes"}
    routes = meta.get("routes") or {}
    out: dict[str, tuple[State, dict[str, Any]]] = {DEFAULT_MODEL: ({}, common)}
    for name, part_meta in routes.items():
        out[name] = ({}, {**common, "model": None, "model_sha256": None, "lifecycle": None, **part_meta})
    for key, value in state.items():
        name, rest = (DEFAULT_MODEL, key)
        if key.startswith(ROUTE_PREFIX):
            name, _, rest = key[len(ROUTE_PREFIX) :].partition("/")
        if name not in out:
            raise ValueError(f"checkpoint key {key!r} belongs to model {name!r}, which its meta does not list")
        out[name][0][rest] = value
    return out
