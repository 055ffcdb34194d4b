"""The inference engine: an onnxruntime session for a T-Rep model, its card, and the masked/unmasked pair.

Loading refuses a model whose card is missing, malformed, or disagrees with the graph, with a message that says
what differs; asking for a GPU provider that is not there falls back to CPU loudly (log and ``status``).
"""
from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort

from .model_card import METADATA_KEY, ModelCard, ModelCardError, sidecar_path
from .time_index import TimeIndex, parse_time_index, time_index

log = logging.getLogger(__name__)

PROVIDERS = {
    "tensorrt": "TensorrtExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "cpu": "CPUExecutionProvider",
}
CONTRACT_INPUTS = {"x": "tensor(float)", "mask": "tensor(bool)", "t": "tensor(float)"}


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes (the model identity reported in alerts and status)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def choose_providers(requested: str | list[str] = "auto") -> tuple[list[str], list[str]]:
    """Resolve provider names (auto, tensorrt, cuda, cpu) to those onnxruntime has; returns (chosen, missing)."""
    available = ort.get_available_providers()
    if requested == "auto":
        names = ["cuda", "cpu"]
    elif isinstance(requested, str):
        names = [n.strip() for n in requested.split(",") if n.strip()]
    else:
        names = list(requested)
    unknown = [n for n in names if n not in PROVIDERS]
    if unknown:
        raise ValueError(f"unknown execution provider(s) {unknown}: use auto or a list of {sorted(PROVIDERS)}")
    chosen = [PROVIDERS[n] for n in names if PROVIDERS[n] in available]
    missing = [PROVIDERS[n] for n in names if PROVIDERS[n] not in available and not (requested == "auto" and n == "cuda")]
    if PROVIDERS["cpu"] not in chosen:
        chosen.append(PROVIDERS["cpu"])
    return chosen, missing


def read_card(session: ort.InferenceSession, model_path: Path) -> ModelCard:
    """The card from the ONNX metadata; a sidecar JSON, when present, must say the same."""
    meta = session.get_modelmeta().custom_metadata_map
    if METADATA_KEY not in meta:
        raise ModelCardError(
            f"{model_path} has no model card (metadata key {METADATA_KEY!r}): export it with `trep-edge export`"
        )
    card = ModelCard.from_json(meta[METADATA_KEY], source=f"{model_path} card")
    side = sidecar_path(model_path)
    if side.is_file():
        side_card = ModelCard.from_json(side.read_text(), source=str(side))
        if side_card.to_json() != card.to_json():
            raise ModelCardError(f"{side} differs from the card inside {model_path}: re-export, or delete the stale JSON")
    return card


def check_graph(session: ort.InferenceSession, card: ModelCard, model_path: Path) -> None:
    """The graph must have the contract's inputs/outputs with the card's channel and representation sizes."""
    inputs = {i.name: i for i in session.get_inputs()}
    problems = []
    for name, dtype in CONTRACT_INPUTS.items():
        if name not in inputs:
            problems.append(f"input {name!r} missing (has {sorted(inputs)})")
        elif inputs[name].type != dtype:
            problems.append(f"input {name!r} is {inputs[name].type}, expected {dtype}")
    if "x" in inputs:
        channels = inputs["x"].shape[-1]
        if isinstance(channels, int) and channels != card.input_dims:
            problems.append(f"graph takes {channels} channels, card says {card.input_dims} ({card.channels})")
    outputs = {o.name: o for o in session.get_outputs()}
    if "z" not in outputs:
        problems.append(f"output 'z' missing (has {sorted(outputs)})")
    else:
        dims = outputs["z"].shape[-1]
        if isinstance(dims, int) and dims != card.repr_dims:
            problems.append(f"graph outputs {dims} representation dims, card says {card.repr_dims}")
    if problems:
        raise ModelCardError(f"{model_path} does not match its card: " + "; ".join(problems))


def last_step_pair(
    encode: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    convention: TimeIndex,
    windows: np.ndarray,
    starts: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Last-step representations of ``windows [S, W, C]`` unmasked and with the last step masked.

    Both variants go through one ``encode`` call (rows 0..S−1 and S..2S−1); ``starts`` are the absolute index of
    each window's first step (used by a periodic time index).
    """
    s, w, _ = windows.shape
    x = np.ascontiguousarray(np.concatenate([windows, windows]), dtype=np.float32)
    mask = np.ones((2 * s, w), dtype=bool)
    mask[s:, -1] = False
    t = time_index(convention, np.concatenate([starts, starts]), w)
    z = encode(x, mask, t)
    return z[:s, -1], z[s:, -1]


@dataclass
class Engine:
    """A loaded model: session, card, identity and the providers actually in use."""

    path: Path
    session: ort.InferenceSession
    card: ModelCard
    sha256: str
    providers: list[str]
    fallback: str | None = None
    max_rows: int = 1024
    _conv: TimeIndex = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._conv = parse_time_index(self.card.time_index)

    @property
    def status(self) -> dict:
        """What is running, for the status topic, metrics and ``trep-edge doctor``."""
        return {
            "model": self.card.name,
            "path": str(self.path),
            "sha256": self.sha256,
            "providers": self.providers,
            "provider_fallback": self.fallback,
        }

    def encode(self, x: np.ndarray, mask: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Run the graph on ``[B, T, C]`` in chunks of at most ``max_rows`` rows."""
        out = [
            self.session.run(["z"], {"x": x[i : i + self.max_rows], "mask": mask[i : i + self.max_rows],
                                     "t": t[i : i + self.max_rows]})[0]
            for i in range(0, len(x), self.max_rows)
        ]  # fmt: skip
        return np.concatenate(out, axis=0)

    def last_step_pair(self, windows: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Last-step representations of ``windows [S, W, C]`` unmasked and masked, in one ``run()``."""
        return last_step_pair(self.encode, self._conv, windows, starts)


def load_engine(path: str | Path, providers: str | list[str] = "auto", threads: int = 0) -> Engine:
    """Load and check a model file; raise ModelCardError / ValueError with what to fix."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"model file {path} does not exist")
    chosen, missing = choose_providers(providers)
    fallback = None
    if missing:
        fallback = f"requested {missing} not available in this onnxruntime; running on {chosen}"
        log.warning("EXECUTION PROVIDER FALLBACK: %s", fallback)
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    try:
        session = ort.InferenceSession(str(path), sess_options=options, providers=chosen)
    except Exception as exc:  # onnxruntime raises its own exception types for unreadable graphs
        raise ModelCardError(f"{path} is not a loadable ONNX model: {exc}") from exc
    actual = session.get_providers()
    if actual[0] != chosen[0]:
        fallback = f"{chosen[0]} failed to initialise; running on {actual}"
        log.warning("EXECUTION PROVIDER FALLBACK: %s", fallback)
    card = read_card(session, path)
    check_graph(session, card, path)
    return Engine(path, session, card, file_sha256(path), actual, fallback)
