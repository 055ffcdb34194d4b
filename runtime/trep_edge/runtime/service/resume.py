"""How a restarted daemon takes its models' streams back from its checkpoint (``checkpoint.py`` holds the format).

Each model restores its part (``checkpoint.split_models``): the streams this shard owns (after a change of shard
layout without ``trep-edge reshard``, not all of them), their monitor state and their lifecycle; a model no route
names any more is dropped with a warning. An unreadable checkpoint is moved aside for inspection and the daemon
starts fresh; an unusable lifecycle alone costs only the lifecycle.
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from trep_edge.runtime.core.alerts import AlertTracker, Lifecycle
from trep_edge.runtime.core.monitor import Monitor
from trep_edge.runtime.core.sharding import Shard
from trep_edge.runtime.service.checkpoint import load_checkpoint, model_key, split_models
from trep_edge.runtime.service.control_topics import Control
from trep_edge.runtime.service.reshard import select_streams, stream_names
from trep_edge.runtime.service.routing import ModelUnit

log = logging.getLogger(__name__)


def restore_models(path: Path, units: Sequence[ModelUnit], shard: Shard, control: Control) -> None:
    """Every model's streams from the checkpoint at ``path``, into ``units``, and into ``control`` the acks and
    silences that still apply; an unusable checkpoint is moved aside."""
    routed = len(units) > 1
    try:
        saved, saved_meta = load_checkpoint(path)
        parts = split_models(saved, saved_meta)
        restored = []
        for unit in units:
            part = parts.pop(model_key(unit, units), None)
            if part is None:
                continue
            state, meta = part
            state = _owned_state(state, meta, path, shard)
            restored.append((unit, state, meta, Monitor.from_state(unit.engine, state, unit.config.windows,
                                                                   unit.config.alerts, unit.config.detector)))
    except Exception as exc:  # any unreadable checkpoint: keep it for inspection, start fresh
        aside = path.with_name(path.name + f".unusable-{int(time.time())}")
        os.replace(path, aside)
        log.error("could not restore the checkpoint %s (%s); moved it to %s and starting fresh", path, exc, aside)
        return
    for name, (state, _) in parts.items():
        log.warning("checkpoint %s holds %d stream(s) of model %s, which no route names any more: dropped", path,
                    len(stream_names(state)), name)  # fmt: skip
    for unit, state, meta, monitor in restored:
        unit.monitor = monitor
        age = time.time() - float(meta.get("saved_at", time.time()))
        states = list(monitor.streams.values())
        log.info("restored %d streams (%d active, %d warming)%s from %s, saved %.1f s ago", len(states),
                 states.count("active"), states.count("warming"), f" of model {unit.name}" if routed else "",
                 path, age)  # fmt: skip
        _restore_lifecycle(unit, state, meta, path)
    open_ids = {m.get("alert_id") for unit in units for m in unit.lifecycle.open.values()}
    control.restore(saved_meta.get("control"), open_ids, time.time())


def _restore_lifecycle(unit: ModelUnit, state: Mapping[str, np.ndarray], meta: Mapping[str, Any], path: Path) -> None:
    """The lifecycle saved with the checkpoint (absent before it existed, and after ``trep-edge reshard``), for
    the restored streams; the open episodes are the alert tracker's. Unusable: start a fresh one, keep the rest."""
    pending, streams = unit.config.alerts.pending, unit.monitor.streams
    try:
        tracker = AlertTracker.from_state({k[8:]: v for k, v in state.items() if k.startswith("tracker/")})
        unit.lifecycle = Lifecycle.restore(pending, meta.get("lifecycle"), streams,
                                           tracker.open_ids(stream_names(state)))  # fmt: skip
    except Exception as exc:
        log.warning("checkpoint %s: could not restore the streams' lifecycle (%s); no stream is reported as "
                    "no_data or pending", path, exc)  # fmt: skip
        unit.lifecycle = Lifecycle.restore(pending, None, streams, {})
        return
    if unit.lifecycle.stale:
        log.info("%d restored stream(s) were reported as no_data: their next reading reports ok",
                 len(unit.lifecycle.stale))  # fmt: skip


def _owned_state(state: dict[str, np.ndarray], meta: dict[str, Any], path: Path, shard: Shard) -> dict[str, np.ndarray]:
    """The checkpoint's streams ``shard`` owns: after a change of layout without ``reshard``, not all of them."""
    names = stream_names(state)
    keep = np.array([shard.owns(name) for name in names], dtype=bool)
    if keep.all():
        return state
    log.warning("checkpoint %s (written as shard %s) holds %d of %d streams that shard %s does not own: dropped; "
                "they warm up again on their owner (to move their state instead, stop every shard and run "
                "trep-edge reshard)", path, meta.get("shard", "0/1"), int((~keep).sum()), len(names), shard)
    return select_streams(state, keep)
