"""Several models in one daemon: which model scores a topic, and what the daemon keeps per model.

``[[routes]]`` (``runtime/trep_edge/runtime/service/config.py``) send the readings of some topics to another model than ``[model]``'s: the
routes are tried in order and the first whose filter matches a message's topic decides; a topic no route matches
goes to the default model. Every model is a ``ModelUnit``: its settings (the daemon's with its route's overrides),
engine, monitor (per-stream windows, detector, alert tracker), stream lifecycle and model file stamp, so that a
model file change, a reload or a checkpoint handles one model's streams without touching another's.

A stream belongs to one model. The daemon refuses a reading whose stream another model has taken readings of
since the start (``other_model_stream``: give the two topics distinct stream ids); a stream restored from the
checkpoint under another model (the routes changed) moves to its topic's model, where its state starts again.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from trep_edge.runtime.core.alerts import Lifecycle
from trep_edge.runtime.service.config import ConfigError, ModelSettings, MonitorConfig
from trep_edge.runtime.core.engine import Engine
from trep_edge.runtime.core.monitor import Monitor
from trep_edge.runtime.service.mqtt_io import TopicTemplate

OTHER_MODEL_KIND = "other_model_stream"
"""Rejection kind of a reading whose stream another model scores (its topic routes elsewhere)."""


@dataclass(eq=False)
class ModelUnit:
    """One model of the daemon and everything it keeps (module docstring)."""

    name: str
    match: list[TopicTemplate]  # empty for the default model: every topic no route takes
    config: MonitorConfig  # the daemon's settings with this model's route applied
    engine: Engine
    monitor: Monitor
    lifecycle: Lifecycle
    labels: dict[str, str]  # metric labels of its per-model series: {"model": name}, none in a daemon of one model
    stamp: tuple[int, int] | None = None  # the model file's (mtime, size) last seen by the file watch
    error: str | None = None  # why the last reload of this model was refused
    period_mismatches: int = 0  # streams last reported at another period than the model's

    def matches(self, topic: str) -> bool:
        """Whether this model scores the readings of ``topic`` (the default model: any topic)."""
        return not self.match or any(template.match(topic)[0] for template in self.match)

    @property
    def channels(self) -> list[str] | None:
        """The channels a reading may carry: the card's, or any (None) for a channel-independent model, which scores
        every channel a stream sends on its own lane."""
        card = self.engine.card
        return None if card.channel_mode == "independent" else card.channels


@dataclass(eq=False)
class Routes:
    """The daemon's models (the default one last) and, with routes, the model each stream took readings in since
    the start (``owner``): what decides which model a message, a control request or a silence is about."""

    units: list[ModelUnit]
    owner: dict[str, ModelUnit] = field(default_factory=dict)

    @property
    def routed(self) -> bool:
        """Whether the daemon runs several models (``[[routes]]``)."""
        return len(self.units) > 1

    @property
    def default(self) -> ModelUnit:
        """The ``[model]`` model: it scores every topic no route takes (the only one without routes)."""
        return self.units[-1]

    def unit_of(self, stream: str) -> ModelUnit:
        """The model that holds ``stream`` (or last took its readings); the default model for one none knows."""
        held = next((unit for unit in self.units if unit.monitor.has_stream(stream)), None)
        return held or self.owner.get(stream, self.default)

    def forget(self, streams: list[str]) -> None:
        """Streams gone (evicted, discharged, renamed): the next reading of the id claims it afresh."""
        for stream in streams:
            self.owner.pop(stream, None)


def scoring_settings(config: MonitorConfig) -> tuple:
    """The settings of a model whose change rebuilds its monitor on reload (the others are read where used)."""
    return config.model, config.windows, config.alerts, config.detector


def route(units: list[ModelUnit], topic: str) -> ModelUnit:
    """The model that scores ``topic``: the first whose route matches, else the default (the last unit)."""
    return next(unit for unit in units if unit.matches(topic))


def check_routes(config: MonitorConfig) -> list[ModelSettings]:
    """The configuration's models, after refusing routes that cannot work: a filter that is not one, a route that
    an earlier one shadows (the first match wins), a route no subscribed ``[mqtt] topics`` template can deliver."""
    models = config.models()
    subscribed = [TopicTemplate(t) for t in config.mqtt.topics]
    earlier: list[tuple[TopicTemplate, str]] = []
    for number, model in enumerate(models[:-1], 1):
        where = f"[[routes]] {number} ({model.name})"
        for text in model.match:
            try:
                template = TopicTemplate(text)
            except ValueError as exc:
                raise ConfigError(f"{where}: {exc}; a route matches with MQTT filters such as icu/+/vitals or "
                                  "plant/#") from None  # fmt: skip
            shadow = next(((t, w) for t, w in earlier if t.covers(template)), None)
            if shadow is not None:
                raise ConfigError(f"{where}: match {text!r} never applies: {shadow[0].template!r} of {shadow[1]} "
                                  "matches every topic it does and the first match wins; remove it, or put the "
                                  "narrower route first")  # fmt: skip
            if not any(template.overlaps(s) for s in subscribed):
                raise ConfigError(f"{where}: match {text!r} overlaps none of the subscribed mqtt.topics "
                                  f"{config.mqtt.topics}: add a template for its topics to mqtt.topics, or fix the "
                                  "filter")  # fmt: skip
            earlier.append((template, where))
    return models
