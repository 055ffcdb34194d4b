"""The model card: what a runtime must know to feed a model and judge its scores (docs/model-contract.md).

It travels twice: inside the ONNX file and as ``NAME.card.json`` beside it. Extra graphs of the same model (e.g.
``last_step``) travel only inside the file, and the card's optional ``graphs`` field names each with the sha256 of
its stored bytes. Where each part sits in the file: ``runtime/trep_edge/runtime/core/model_file.py``.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trep_edge.runtime.core.scoring import Calibration
from trep_edge.runtime.core.time_index import TimeIndex, parse_time_index

SCHEMA_VERSION = 1
TIME_EMBEDDINGS = ("time2vec", "mlp", "rbf", "none")
PRECISIONS = ("fp32", "fp16", "int8")
SCALINGS = ("card", "stream")
"""``card``: the card's fixed per-channel normalisation; ``stream``: each stream/channel learns its own online."""
CHANNEL_MODES = ("fixed", "independent")
"""``fixed``: the card's channels in its order; ``independent``: a univariate model applied to every channel."""


class ModelCardError(ValueError):
    """A card that is missing, malformed, or does not match its model."""


@dataclass
class Scoring:
    """Parameters of the streaming score (TREP.md §5)."""

    distance: str = "l1"
    z: int = 21
    beta: float = 4.0
    delay: int = 7


@dataclass
class ModelCard:
    """Everything the runtime needs besides the graph itself."""

    name: str
    channels: list[str]
    normalisation: dict
    differencing: int
    time_index: str
    time_embedding: str
    window: int
    repr_dims: int
    input_dims: int
    forward_fill: int = 0
    scoring: Scoring = field(default_factory=Scoring)
    calibration: Calibration | None = None
    training: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)
    weights_sha256: str = ""
    precision: str = "fp32"
    graphs: dict = field(default_factory=dict)
    scaling: str = "card"
    channel_mode: str = "fixed"
    detector_prior: dict = field(default_factory=dict)
    period: float = 0.0
    """Seconds per step of the training data; 0 = any (a general model, or not declared)."""
    phase_origin: int = 0
    """A periodic model's phase at absolute step 0: its training data's first row stood at Unix-epoch step ``S``
    (timestamp / ``period``) and ``phase_origin = S mod P``, so a live reading gets the phase its training rows had
    (``time_index.TimeIndex``). 0 when the training data had no timestamps: then the first row is taken to start a
    cycle."""
    ranges: dict = field(default_factory=dict)
    """Physically possible values, ``{channel: [low, high]}``: a reading outside is a sensor fault, not the process."""
    channel_codes: dict = field(default_factory=dict)
    """What each channel measures in a standard terminology, ``{channel: {"system", "code", "display", "unit"}}``
    (e.g. LOINC, with a UCUM unit): the FHIR output's codes (runtime/trep_edge/runtime/service/fhir.py). Channels left out are named only."""
    schema_version: int = SCHEMA_VERSION

    def convention(self) -> TimeIndex:
        """The time index the model's ``t`` follows: ``time_index`` with the card's ``phase_origin``."""
        return parse_time_index(self.time_index, self.phase_origin)

    def to_json(self) -> str:
        """Canonical JSON text (sorted keys), identical in the ONNX metadata and the sidecar file.

        ``graphs``, ``scaling``, ``channel_mode``, ``detector_prior``, ``ranges``, ``period``, ``phase_origin`` and
        ``channel_codes`` are left out at their defaults, so a card without them keeps the text (and the
        sha256-compared identity) older runtimes wrote.
        """
        data = asdict(self)
        if not self.graphs:
            del data["graphs"]
        for key, default in (("scaling", "card"), ("channel_mode", "fixed"), ("detector_prior", {}), ("ranges", {}),
                             ("period", 0.0), ("phase_origin", 0), ("channel_codes", {})):
            if data[key] == default:
                del data[key]
        return json.dumps(data, sort_keys=True, indent=2)

    @classmethod
    def from_json(cls, text: str, source: str = "model card") -> "ModelCard":
        """Parse and validate; every problem is reported with the field name and what was expected."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ModelCardError(f"{source} is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ModelCardError(f"{source} must be a JSON object, got {type(data).__name__}")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ModelCardError(f"{source} has schema_version {version!r}; this runtime reads {SCHEMA_VERSION}")
        required = ["name", "channels", "normalisation", "differencing", "time_index", "time_embedding",
                    "window", "repr_dims", "input_dims"]  # fmt: skip
        missing = [k for k in required if k not in data]
        if missing:
            raise ModelCardError(f"{source} lacks field(s) {missing}")
        try:
            scoring = Scoring(**data.get("scoring", {}))
            cal = data.get("calibration")
            calibration = Calibration.from_dict(cal) if cal is not None else None
            known = {k: data[k] for k in data if k in cls.__dataclass_fields__ and k not in ("scoring", "calibration")}
            card = cls(**known, scoring=scoring, calibration=calibration)
        except (TypeError, KeyError, ValueError) as exc:
            raise ModelCardError(f"{source}: {exc}") from exc
        card.validate(source)
        return card

    def validate(self, source: str = "model card") -> None:
        """Check internal consistency (types, sizes, known conventions)."""
        problems = []
        if not isinstance(self.channels, list) or not all(isinstance(c, str) and c for c in self.channels):
            problems.append("channels must be a list of non-empty names")
        elif len(set(self.channels)) != len(self.channels):
            problems.append(f"channels must be unique, got {self.channels}")
        elif len(self.channels) != self.input_dims:
            problems.append(f"{len(self.channels)} channels named but input_dims is {self.input_dims}")
        norm = self.normalisation if isinstance(self.normalisation, dict) else {}
        for key in ("mean", "std"):
            values = norm.get(key)
            if not isinstance(values, list) or len(values) != self.input_dims:
                problems.append(f"normalisation.{key} must list {self.input_dims} numbers")
            elif key == "std" and any((not isinstance(v, (int, float))) or v <= 0 for v in values):
                problems.append("normalisation.std values must be positive numbers")
        if isinstance(self.phase_origin, bool) or not isinstance(self.phase_origin, int):
            problems.append(f"phase_origin must be a whole number of steps, got {self.phase_origin!r}")
        else:
            try:
                self.convention()
            except (ValueError, AttributeError) as exc:
                problems.append(str(exc))
        if self.time_embedding not in TIME_EMBEDDINGS:
            problems.append(f"time_embedding {self.time_embedding!r} is not one of {TIME_EMBEDDINGS}")
        for key in ("window", "repr_dims", "input_dims"):
            value = getattr(self, key)
            if not isinstance(value, int) or value < 1:
                problems.append(f"{key} must be a positive integer, got {value!r}")
        if not isinstance(self.differencing, int) or not 0 <= self.differencing <= 3:
            problems.append(f"differencing must be 0..3, got {self.differencing!r}")
        if self.precision not in PRECISIONS:
            problems.append(f"precision {self.precision!r} is not one of {PRECISIONS}")
        if not isinstance(self.forward_fill, int) or self.forward_fill < 0:
            problems.append(f"forward_fill must be a number of steps >= 0, got {self.forward_fill!r}")
        if self.scoring.distance != "l1":
            problems.append(f"scoring.distance {self.scoring.distance!r} is not supported (l1)")
        if self.scoring.z < 1 or self.scoring.delay < 0:
            problems.append("scoring.z must be ≥ 1 and scoring.delay ≥ 0")
        if self.calibration is not None and not self.calibration.sigma >= 0:
            problems.append("calibration.sigma must be ≥ 0")
        if self.scaling not in SCALINGS:
            problems.append(f"scaling {self.scaling!r} is not one of {SCALINGS}")
        if self.channel_mode not in CHANNEL_MODES:
            problems.append(f"channel_mode {self.channel_mode!r} is not one of {CHANNEL_MODES}")
        elif self.channel_mode == "independent" and self.input_dims != 1:
            problems.append(f"channel_mode 'independent' needs a univariate model (input_dims 1), got {self.input_dims}")
        problems += _prior_problems(self.detector_prior)
        problems += _range_problems(self.ranges, self.channels)
        problems += _code_problems(self.channel_codes, self.channels)
        problems += _count_problems(norm.get("counts"), self.input_dims, self.differencing)
        if isinstance(self.period, bool) or not isinstance(self.period, (int, float)) or not 0 <= self.period < math.inf:
            problems.append(f"period must be a number of seconds >= 0 (0 = any), got {self.period!r}")
        problems += _graph_problems(self.graphs)
        if problems:
            raise ModelCardError(f"{source} is invalid: " + "; ".join(problems))


def _prior_problems(prior: object) -> list[str]:
    """What is wrong with a card's ``detector_prior``: lists ``signals``, ``mean``, ``var`` of one length, and ``n``;
    ``rows``, if given, a whole number >= 0."""
    if not prior:
        return []
    keys = ("signals", "mean", "var")
    if not isinstance(prior, dict) or not all(isinstance(prior.get(k), list) for k in keys):
        return ["detector_prior must hold the lists signals, mean and var, and n"]
    if len({len(prior[k]) for k in keys}) != 1 or any(v < 0 for v in prior["var"]):
        return ["detector_prior signals, mean and var must have one length, and var must be >= 0"]
    rows = prior.get("rows", 0)
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 0:
        return [f"detector_prior rows must be a whole number of training rows >= 0 (0: unknown), got {rows!r}"]
    return []


def _count_problems(counts: object, dims: int, differencing: object) -> list[str]:
    """What is wrong with a card's ``normalisation.counts`` (``preprocess.Normalisation``): absent, or one finite
    number ≥ 0 per channel (0: not bent), and none above 0 on a differenced model."""
    if counts is None:
        return []
    if not isinstance(counts, list) or len(counts) != dims or any(
            isinstance(c, bool) or not isinstance(c, (int, float)) or not 0 <= c < math.inf for c in counts):
        return [f"normalisation.counts must list {dims} finite numbers >= 0 (0: not a count channel), got {counts!r}"]
    if differencing != 0 and any(c > 0 for c in counts):
        return ["normalisation.counts apply to undifferenced readings only (differencing 0)"]
    return []


def _range_problems(ranges: object, channels: list[str]) -> list[str]:
    """What is wrong with a card's ``ranges``: ``{channel of the card: [low, high]}`` with finite ``low < high``."""
    if not isinstance(ranges, dict):
        return [f"ranges must be an object of channel -> [low, high], got {type(ranges).__name__}"]
    problems = []
    for name, bounds in ranges.items():
        if name not in channels:
            problems.append(f"ranges.{name} names no channel of the card ({channels})")
        elif not (isinstance(bounds, list) and len(bounds) == 2
                  and all(isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b) for b in bounds)
                  and bounds[0] < bounds[1]):  # fmt: skip
            problems.append(f"ranges.{name} must be [low, high] with finite low < high, got {bounds!r}")
    return problems


CODE_FIELDS = ("system", "code", "display", "unit")
"""The fields of a ``channel_codes`` entry; the first two are required."""


def _code_problems(codes: object, channels: list[str]) -> list[str]:
    """What is wrong with a card's ``channel_codes``: ``{channel of the card: {"system", "code"[, "display", "unit"]}}``
    of non-empty strings (``unit``: a UCUM code)."""
    if not isinstance(codes, dict):
        return [f"channel_codes must be an object of channel -> {{system, code}}, got {type(codes).__name__}"]
    problems = []
    for name, entry in codes.items():
        if name not in channels:
            problems.append(f"channel_codes.{name} names no channel of the card ({channels})")
        elif not (isinstance(entry, dict) and set(CODE_FIELDS[:2]) <= set(entry) <= set(CODE_FIELDS)
                  and all(isinstance(v, str) and v.strip() for v in entry.values())):  # fmt: skip
            problems.append(f"channel_codes.{name} must hold non-empty strings system and code, and optionally "
                            f"display and unit, got {entry!r}")
    return problems


def _graph_problems(graphs: object) -> list[str]:
    """What is wrong with a card's ``graphs`` field: ``{name: {"sha256": 64 hex digits, ...}}``."""
    if not isinstance(graphs, dict):
        return [f"graphs must be an object of name -> {{sha256, window}}, got {type(graphs).__name__}"]
    problems = []
    for name, info in graphs.items():
        digest = info.get("sha256") if isinstance(info, dict) else None
        if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            problems.append(f"graphs.{name}.sha256 must be 64 lowercase hex digits")
    return problems


def sidecar_path(model_path: str | Path) -> Path:
    """``models/NAME.onnx`` → ``models/NAME.card.json``."""
    p = Path(model_path)
    return p.with_name(p.name[: -len(".onnx")] + ".card.json" if p.name.endswith(".onnx") else p.name + ".card.json")
