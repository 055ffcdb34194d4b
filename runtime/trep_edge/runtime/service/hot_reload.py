"""Loading a model for the daemon, and swapping models while it runs: the model file watch and SIGHUP reloads.

A model is loaded and checked aside (``load_checked_engine``: it must score a neutral window), and a reload first
prepares every changed model's new engine and monitor (``plan_reload``, the streams' state carried over), so that
an error anywhere leaves every running model as it was; only then are they swapped in (``apply_swaps``). A model
whose file and scoring settings did not change keeps its monitor untouched. Settings that need a restart (the
broker, HTTP, topics, archive, shard and routes) keep their running values and are named in a warning.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Iterator, Mapping, Sequence

import numpy as np

from trep_edge.runtime.core.alerts import Lifecycle
from trep_edge.runtime.core.engine import Engine, file_sha256, load_engine
from trep_edge.runtime.core.monitor import Monitor
from trep_edge.runtime.service.config import ModelSettings, MonitorConfig, load_config
from trep_edge.runtime.service.http_status import Metrics
from trep_edge.runtime.service.mqtt_io import TopicTemplate
from trep_edge.runtime.service.routing import ModelUnit, check_routes, scoring_settings

log = logging.getLogger(__name__)

RESTART_ONLY = ("mqtt", "http", "topics", "archive")
"""Config sections a reload keeps as they run: the connection, the server and the files they opened."""


@dataclasses.dataclass
class Swap:
    """A model's part of a reload: its new settings and, when its file or scoring settings changed, the engine and
    monitor prepared for them (None: its streams are not touched)."""

    unit: ModelUnit
    config: MonitorConfig
    prepared: tuple[Engine, Monitor] | None


def check_engine(engine: Engine) -> None:
    """Refuse a model that loads but cannot score: one masked/unmasked pair on a neutral window must be finite."""
    card = engine.card
    window = np.zeros((1, card.window, card.input_dims), dtype=np.float32)
    z_unmasked, z_masked = engine.last_step_pair(window, np.zeros(1, dtype=np.int64))
    if z_unmasked.shape != (1, card.repr_dims) or not (np.isfinite(z_unmasked).all() and np.isfinite(z_masked).all()):
        raise ValueError(f"{engine.path} loads but does not score: representation shape {z_unmasked.shape} "
                         f"(expected (1, {card.repr_dims})) or non-finite values")  # fmt: skip


def check_lifecycle(config: MonitorConfig) -> None:
    """Refuse a ``stale_after`` that every stream trips between two readings (no_data and ok on every reading)."""
    stale, period = config.monitor.stale_after, config.windows.period
    if stale and stale <= period:
        raise ValueError(f"monitor.stale_after ({stale:g} s) must exceed [windows] period ({period:g} s): every "
                         f"stream is silent that long between two readings; e.g. stale_after = {5 * period:g}, "
                         "or 0 (off)")  # fmt: skip


def checked_models(config: MonitorConfig) -> list[ModelSettings]:
    """The configuration's models, after the checks that need more than one table (routes, lifecycle timing)."""
    models = check_routes(config)
    for model in models:
        check_lifecycle(model.config)
    return models


def load_checked_engine(config: MonitorConfig) -> Engine:
    """The model of ``config``, loaded and checked (``check_engine``); a provider fallback is logged loudly."""
    engine = load_engine(config.model.path, config.model.providers, config.model.threads, config.model.engine)
    check_engine(engine)
    if engine.fallback:
        log.warning("PROVIDER FALLBACK: %s", engine.fallback)
    return engine


def new_monitor(config: MonitorConfig, engine: Engine) -> Monitor:
    """A monitor of no streams for ``engine`` with ``config``'s window, alert and detector settings."""
    return Monitor(engine, config.windows, config.alerts, config.detector)


def new_unit(model: ModelSettings, routed: bool) -> ModelUnit:
    """A model of the daemon, loaded (``routed``: the daemon runs several, so errors and metrics name it)."""
    try:
        engine = load_checked_engine(model.config)
    except Exception as exc:
        if not routed:
            raise
        raise ValueError(f"model {model.name} ({model.config.model.path}): {exc}") from exc
    return ModelUnit(model.name, [TopicTemplate(t) for t in model.match], model.config, engine,
                     new_monitor(model.config, engine), Lifecycle(model.config.alerts.pending),
                     {"model": model.name} if routed else {}, model_stamp(model.config.model.path))  # fmt: skip


def model_stamp(path: str) -> tuple[int, int] | None:
    """A model file's (mtime, size), what the file watch compares; None while the file is missing."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def changed_files(units: Sequence[ModelUnit]) -> Iterator[ModelUnit]:
    """The watched models whose file changed since last seen (each noted as seen before it is yielded)."""
    for unit in units:
        if not unit.config.model.watch:
            continue
        stamp = model_stamp(unit.config.model.path)
        if stamp is None or stamp == unit.stamp:
            continue
        unit.stamp = stamp
        yield unit


class Reloads:
    """The daemon's reloads of config and models (module docstring), and why the last reload of the config was
    refused (``config_error``; a model's own refusal is its ``ModelUnit.error``)."""

    def __init__(self, config_path: str | None, env: Mapping[str, str] | None, flags: Mapping[tuple[str, str], str],
                 metrics: Metrics) -> None:  # fmt: skip
        self._source, self.metrics = (config_path, env, dict(flags)), metrics
        self.config_error: str | None = None

    def run(self, reason: str, running: MonitorConfig, units: Sequence[ModelUnit], config: MonitorConfig | None = None,
            only: ModelUnit | None = None) -> tuple[MonitorConfig | None, list[ModelUnit]] | None:  # fmt: skip
        """Load config (unless given) and models aside, then swap in the models that changed (``only``: that model
        alone, its file changed); refuse, log and keep the old ones on any error (None). Done: the new running
        config (None with ``only``) and the models now running another engine."""
        try:
            if config is None:
                config = load_config(*self._source)
            swaps = plan_reload(running, units, config, only, reason)
        except Exception as exc:  # a bad model or config must never take the running monitor down
            which = f" of model {only.name}" if len(units) > 1 and only is not None else ""
            error = f"refused reload{which} ({reason}): {exc}"
            if only is None:
                self.config_error = error
            else:
                only.error = error
            log.error("%s; still running %s", error, ", ".join(f"model {u.engine.card.name} (sha256 "
                                                              f"{u.engine.sha256[:12]})" for u in units))
            self.metrics.inc("trep_edge_model_reloads_total", result="refused")
            return None
        if only is None:
            running = keep_restart_only(running, config)
            self.config_error = None
        swapped = apply_swaps(swaps)
        log.info("reloaded (%s): %s, config revision %s", reason, ", ".join(
            f"model {s.unit.engine.card.name} sha256 {s.unit.engine.sha256[:12]}" for s in swaps), running.revision)
        self.metrics.inc("trep_edge_model_reloads_total", result="ok")
        return (running if only is None else None), swapped


def plan_reload(running: MonitorConfig, units: Sequence[ModelUnit], config: MonitorConfig, only: ModelUnit | None,
                reason: str) -> list[Swap]:  # fmt: skip
    """Every model's swap for ``config`` (``only``: that model's alone), prepared aside; raises on any error, with
    nothing swapped. Restart-only changes are logged; a change of routes keeps the running ones in ``config``."""
    models = checked_models(config)
    restart_only = [f"[{s}]" for s in RESTART_ONLY if getattr(config, s) != getattr(running, s)]
    if running.monitor.shard != config.monitor.shard:
        restart_only.append("monitor.shard")  # the state holds the streams of the running shard
    if [(m.name, m.match) for m in models] != [(u.name, tuple(t.template for t in u.match)) for u in units]:
        restart_only.append("[[routes]]")  # the streams are the models' of the running routes
        config.routes = running.routes
        models = config.models()
    if restart_only:
        log.warning("reload (%s): changes to %s take effect after a restart", reason, ", ".join(restart_only))
    return [Swap(unit, model.config, prepare(unit, model.config))
            for unit, model in zip(units, models) if only is None or unit is only]  # fmt: skip


def keep_restart_only(running: MonitorConfig, config: MonitorConfig) -> MonitorConfig:
    """``config`` with the running values of the sections only a restart changes."""
    for section in RESTART_ONLY:
        setattr(config, section, getattr(running, section))
    return config


def prepare(unit: ModelUnit, config: MonitorConfig) -> tuple[Engine, Monitor] | None:
    """A model's new engine and monitor for ``config`` (its streams' state carried over), loaded aside; None
    when neither its file nor its settings changed."""
    same_file = _file_sha(config.model.path) == unit.engine.sha256
    if same_file and scoring_settings(config) == scoring_settings(unit.config):
        return None
    engine = unit.engine
    if config.model != unit.config.model or not same_file:
        engine = load_checked_engine(config)
    state = unit.monitor.state_dict()
    monitor = Monitor.from_state(unit.engine, state, config.windows, config.alerts, config.detector)
    if engine is not unit.engine:
        monitor.swap_engine(engine)
    return engine, monitor


def apply_swaps(swaps: Sequence[Swap]) -> list[ModelUnit]:
    """Swap the prepared models in (every swap's settings too); return the models now running another engine."""
    swapped = []
    for swap in swaps:
        unit = swap.unit
        unit.config, unit.error = swap.config, None
        unit.stamp = model_stamp(swap.config.model.path)
        unit.lifecycle.pending_enabled = swap.config.alerts.pending
        if swap.prepared is None:
            continue  # nothing of this model changed: its streams are not touched
        if swap.prepared[0] is not unit.engine:
            swapped.append(unit)
        unit.engine, unit.monitor = swap.prepared
    return swapped


def _file_sha(path: str) -> str | None:
    try:
        return file_sha256(path)
    except OSError:
        return None
