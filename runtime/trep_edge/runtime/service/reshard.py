"""Move per-stream state between shard layouts: N daemons' checkpoints in, M checkpoints out.

``trep-edge reshard --to M OLD... --out DIR`` reads the checkpoints of all N shards of a stopped deployment,
merges them and writes one checkpoint per new shard, each stream's state going to its owner under M
(``runtime/trep_edge/runtime/core/sharding.py``). A restarted deployment of M daemons then resumes every stream warm, exactly as if it had
never moved (tests/deploy/test_scale_out.py checks scores and alerts against an un-resharded run).

The monitor's state (``Monitor.state_dict()``) is a flat dict of arrays that declares what indexes the rows of
each key (``runtime/trep_edge/runtime/core/stream_state.py``: per stream, per lane, per pending step, or a setting). Nothing here
names the monitor's keys: ``stream_state.select`` and ``stream_state.concatenate`` move every key by its
declaration, so state added to the monitor later moves with its stream once it is declared, and a key the state
does not declare (or whose rows do not fit its declaration) is refused with its name rather than guessed. Settings
must be equal in every old checkpoint (else the shards ran other models or settings and are refused) but for
their running ``counters``, which restart at zero after a merge, as after any fresh start.

A checkpoint of several models (``[[routes]]``) is split by ``checkpoint.split_models``, and each model's streams
are resharded on their own: every old checkpoint must hold the same models.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from trep_edge.runtime.service.checkpoint import join_models, load_checkpoint, save_checkpoint, split_models
from trep_edge.runtime.core.sharding import Shard, shard_of
from trep_edge.runtime.core.stream_state import ROOT, concatenate, counts, layout_of, select

State = Mapping[str, np.ndarray]
NAMES_KEY = "monitor/config"
"""The setting whose JSON ``names`` lists the stream ids, in the row order of every per-stream array."""
RUNNING_FIELDS = ("names", "counters")
"""Fields of a JSON setting that differ between shards by design (moved or reset here, not compared)."""
LANES_KEY = "monitor/lanes/stream"
"""The stream of each lane; resharding needs one lane per stream (a fixed-channel model)."""


def stream_names(state: State) -> list[str]:
    """The stream ids of a monitor state, in row order."""
    if NAMES_KEY not in state:
        raise ValueError(f"not a monitor checkpoint: it has no {NAMES_KEY!r} (keys: {', '.join(sorted(state))})")
    return list(json.loads(str(np.asarray(state[NAMES_KEY])))["names"])


def _check(state: State) -> dict[str, int]:
    """The state's rows per space, refusing what cannot be resharded."""
    n = counts(state)
    if LANES_KEY in state and not np.array_equal(np.asarray(state[LANES_KEY]), np.arange(n.get(ROOT, 0))):
        raise ValueError("this checkpoint's streams have several lanes (a channel-independent model): resharding "
                         "it is not supported; start the new shards without it (the streams warm up again)")
    return n


def select_streams(state: State, keep: np.ndarray) -> dict[str, np.ndarray]:
    """The state of the streams where ``keep`` (bool, one per stream) is true, in their order."""
    _check(state)
    return select(state, keep)


def _comparable(value: np.ndarray) -> Any:
    """A setting without its running fields, for checking that two shards ran the same thing."""
    value = np.asarray(value)
    if value.dtype.kind != "U":
        return value.item()
    parsed = json.loads(str(value))
    if isinstance(parsed, dict):
        return {k: v for k, v in parsed.items() if k not in RUNNING_FIELDS}
    return parsed


def _fresh_counters(value: np.ndarray) -> np.ndarray:
    parsed = json.loads(str(value)) if value.dtype.kind == "U" else None
    if not isinstance(parsed, dict) or "counters" not in parsed:
        return value
    parsed["counters"] = {k: 0 for k in parsed["counters"]}
    return np.array(json.dumps(parsed))


def merge_states(states: Sequence[State], labels: Sequence[str]) -> dict[str, np.ndarray]:
    """One state holding every stream of ``states`` (labels name them in errors); running counters restart at 0."""
    if not states:
        raise ValueError("nothing to merge: give at least one checkpoint")
    for state in states:
        _check(state)
    layouts = [layout_of(s) for s in states]
    first, label0 = states[0], labels[0]
    for state, layout, label in zip(states[1:], layouts[1:], labels[1:]):
        if layout != layouts[0]:
            differ = sorted(set(layout) ^ set(layouts[0])) or sorted(k for k in layout if layout[k] != layouts[0][k])
            raise ValueError(f"{label} and {label0} hold different state ({differ[:4]}): they were written by other "
                             "versions or models; reshard checkpoints of one deployment only")  # fmt: skip
        for key, rows in layout.items():
            if rows.space is None and _comparable(state[key]) != _comparable(first[key]):
                raise ValueError(f"{label} and {label0} differ in {key!r} (model, window or alert settings): "
                                 "reshard checkpoints of one deployment, all stopped on the same model")  # fmt: skip
    owners: dict[str, str] = {}
    for state, label in zip(states, labels):
        for name in stream_names(state):
            if name in owners:
                raise ValueError(f"stream {name!r} is in both {owners[name]} and {label}: give each old shard's "
                                 "checkpoint once, all from the same stop")  # fmt: skip
            owners[name] = label
    merged = concatenate(states)
    for key, rows in layouts[0].items():
        if rows.space is None:
            merged[key] = _fresh_counters(merged[key])
    return merged


def reshard(states: Sequence[State], labels: Sequence[str], count: int) -> list[dict[str, np.ndarray]]:
    """The states of ``count`` new shards: every stream of ``states`` goes to shard ``shard_of(stream, count)``."""
    merged = merge_states(states, labels)
    owner = np.array([shard_of(name, count) for name in stream_names(merged)], dtype=np.int64)
    return [select_streams(merged, owner == i) for i in range(count)]


def _check_layout(metas: Sequence[Mapping[str, Any]], paths: Sequence[Path], allow_missing: bool) -> None:
    """All old checkpoints come from one layout i/N, each shard once and (unless allowed) none missing."""
    shards = [Shard.parse(str(m.get("shard", "0/1"))) for m in metas]
    counts = {s.count for s in shards}
    if len(counts) != 1:
        listing = ", ".join(f"{p} ({s})" for p, s in zip(paths, shards))
        raise ValueError(f"the checkpoints come from different shard layouts: {listing}")
    (count,) = counts
    seen: dict[int, Path] = {}
    for path, shard in zip(paths, shards):
        if shard.index in seen:
            raise ValueError(f"{seen[shard.index]} and {path} are both shard {shard}: give each shard once")
        seen[shard.index] = path
    missing = [f"{i}/{count}" for i in range(count) if i not in seen]
    if missing and not allow_missing:
        raise ValueError(f"no checkpoint given for shard(s) {', '.join(missing)}: their streams would warm up "
                         "again; give every old shard's checkpoint, or --allow-missing if one never wrote any")


def reshard_files(paths: Sequence[str | Path], count: int, out_dir: str | Path, allow_missing: bool = False,
                  name: str = "shard-{i}-of-{n}.npz") -> list[Path]:  # fmt: skip
    """Read old checkpoints, write ``count`` new ones into ``out_dir`` (named by ``name``); return their paths."""
    if count < 1:
        raise ValueError(f"--to must be >= 1 shard, got {count}")
    paths = [Path(p) for p in paths]
    loaded = []
    for path in paths:
        try:
            loaded.append(load_checkpoint(path))
        except FileNotFoundError:
            raise
        except Exception as exc:  # numpy and json raise several kinds for a file that is not a checkpoint
            raise ValueError(f"{path} is not a readable trep-edge checkpoint (a daemon's [state] path): {exc}") from exc
    metas = [meta for _, meta in loaded]
    _check_layout(metas, paths, allow_missing)
    # A daemon of several models: each model's streams are resharded on their own, then joined again.
    models = [split_models(state, meta) for state, meta in loaded]
    if any(m.keys() != models[0].keys() for m in models):
        listing = "; ".join(f"{p}: {', '.join(sorted(k or '[model]' for k in m))}" for p, m in zip(paths, models))
        raise ValueError(f"the checkpoints hold different models: {listing}; reshard checkpoints of one deployment, "
                         "all run with the same [[routes]]")  # fmt: skip
    parts = {key: reshard([m[key][0] for m in models], [str(p) for p in paths], count) for key in models[0]}
    out_dir = Path(out_dir)
    written = []
    for i in range(count):
        meta = {"saved_at": min(float(m.get("saved_at", time.time())) for m in metas), "shard": str(Shard(i, count)),
                "resharded_from": [str(p) for p in paths], "resharded_at": time.time()}  # fmt: skip
        per_model = {key: (part[i], {k: models[0][key][1].get(k) for k in ("model", "model_sha256")})
                     for key, part in parts.items()}  # fmt: skip
        target = out_dir / name.format(i=i, n=count)
        save_checkpoint(target, *join_models(per_model, meta))
        written.append(target)
    return written
