"""Export a trained encoder to ONNX with its model card, calibrate its threshold, and check parity.

The graph follows docs/model-contract.md. Calibration runs the runtime's own offline scoring on the exported
graph, so the threshold in the card is the one the daemon would compute on the same data.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import torch

from trep_edge import __version__
from trep_edge.runtime.service.atomic_file import copy_atomically, write_atomically
from trep_edge.runtime.core.engine import Engine, last_step_pair, load_engine
from trep_edge.runtime.core.model_card import ModelCard, Scoring, sidecar_path
from trep_edge.runtime.core.model_file import metadata, pack, share_weights, unpack
from trep_edge.runtime.core.offline import detector_prior, raw_scores
from trep_edge.runtime.core.preprocess import Normalisation
from trep_edge.runtime.core.scoring import Calibration, adjust_scores, calibrate
from trep_edge.runtime.core.time_index import TimeIndex, parse_time_index, time_index

from trep_edge.training.encoder import TRepEncoder
from trep_edge.training.evaluation.paper_protocol import score_series
from trep_edge.training.exporter import OPSET, export_module
from trep_edge.training.pruned_graph import last_step_graph, pruned_pair_graph
from trep_edge.training.step_graph import step_graph

log = logging.getLogger(__name__)


def weights_sha256(module: torch.nn.Module) -> str:
    """sha256 over the parameters and buffers, in name order: identifies the weights independent of file format."""
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


# the exporter's own chatter: graph-rewrite INFO lines, missing-torchvision notices, internal deprecations
_EXPORTER_LOGGERS = ("onnx_ir", "onnxscript", "torch.onnx", "torch._dynamo", "torch.export")


@contextlib.contextmanager
def quiet_exporter(quiet: bool = True) -> Iterator[None]:
    """Silence the ONNX exporter's INFO logs and internal warnings (not errors) while exporting, unless not quiet."""
    if not quiet:
        yield
        return
    loggers = [logging.getLogger(name) for name in _EXPORTER_LOGGERS]
    levels = [logger.level for logger in loggers]
    try:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            for category in (UserWarning, FutureWarning, DeprecationWarning):
                warnings.filterwarnings("ignore", category=category, module=r"(torch|onnx|onnxscript|onnx_ir|copyreg)")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def export_graph(encoder: TRepEncoder, path: Path, opset: int = OPSET) -> None:
    """Write the encoder as an ONNX graph with dynamic batch and time (the contract's full graph)."""
    encoder = encoder.eval().cpu()
    c = encoder.cfg.input_dims
    example = (torch.randn(2, 16, c), torch.ones(2, 16, dtype=torch.bool), torch.arange(16.0).repeat(2, 1))
    batch, steps = torch.export.Dim("batch"), torch.export.Dim("time", min=2)
    dynamic = {"x": {0: batch, 1: steps}, "mask": {0: batch, 1: steps}, "t": {0: batch, 1: steps}}
    export_module(encoder, example, path, ["x", "mask", "t"], ["z"], dynamic, opset)


GraphBuilder = Callable[[TRepEncoder, int, "dict[str, bytes]"], "bytes | None"]
GRAPH_BUILDERS: dict[str, GraphBuilder] = {
    "pruned_pair": pruned_pair_graph,
    "last_step": last_step_graph,  # cut out of the pruned pair graph when that was built
    "step": step_graph,
}
"""Extra graphs embedded in every exported model: name → builder(encoder, window, built) returning ONNX bytes, or
None when the graph does not apply to this encoder. Builders run in this order and ``built`` holds the graphs built
before, so one may derive from another instead of exporting again. Register a new variant here with one line."""


def build_graphs(encoder: TRepEncoder, window: int, names: list[str] | None = None) -> dict[str, bytes]:
    """Build the registered extra graphs ``names`` (default all) that apply to ``encoder`` at this window.

    Each comes with its own copy of the weights; ``shared_graphs`` stores them as references to the main graph's.
    """
    unknown = sorted(set(names or []) - set(GRAPH_BUILDERS))
    if unknown:
        raise ValueError(f"unknown extra graph(s) {unknown}: choose from {sorted(GRAPH_BUILDERS)}")
    built: dict[str, bytes] = {}
    for name, build in GRAPH_BUILDERS.items():
        blob = build(encoder, window, built) if names is None or name in names else None
        if blob is not None:
            built[name] = blob
    return built


def shared_graphs(model_path: Path, graphs: dict[str, bytes]) -> dict[str, bytes]:
    """``graphs`` as the model file stores them: each weight equal to one of the main graph's kept there only."""
    main = model_path.read_bytes()
    return {name: share_weights(main, blob) for name, blob in graphs.items()}


def write_card(model_path: Path, card: ModelCard, graphs: dict[str, bytes] | None = None) -> None:
    """Store the card (and the extra graphs it lists) in the model file, and the card beside the file.

    The graph bytes (as stored: ``shared_graphs``) come from ``graphs`` or, for a name not given there, from the
    file's current contents, so a card can be rewritten (calibration, precision) without rebuilding graphs. A graph
    the card does not list is dropped; one whose bytes do not match the card's sha256 is an error.
    """
    card.validate()
    data = model_path.read_bytes()
    blobs = {**unpack(metadata(data)).graphs, **(graphs or {})}
    for name, info in card.graphs.items():
        if name not in blobs:
            raise ValueError(f"the card lists graph {name!r} but no bytes were given or found in {model_path}")
        if hashlib.sha256(blobs[name]).hexdigest() != info["sha256"]:
            raise ValueError(f"graph {name!r} does not match the sha256 in the card: rebuild it with graph_entry()")
    packed = pack(data, card.to_json(), {name: blobs[name] for name in card.graphs})
    # 0644: a model is read by the daemon's own (often dynamic) service user; mkstemp would leave it 0600.
    card_text = card.to_json().encode()
    write_atomically(model_path, lambda fh: fh.write(packed), mode=0o644)
    write_atomically(sidecar_path(model_path), lambda fh: fh.write(card_text), mode=0o644)


def graph_entry(blob: bytes, window: int) -> dict:
    """The card's description of an embedded graph (stored bytes): its identity and the window it was built for."""
    return {"sha256": hashlib.sha256(blob).hexdigest(), "window": window, "bytes": len(blob)}


def calibration_stats(engine: Engine, series: list[np.ndarray], max_steps: int = 4000) -> Calibration:
    """μ, σ of the adjusted score on normal (prepared) series, scored exactly as the daemon scores a stream."""
    budget, adjusted = max_steps, []
    for values in series:
        if budget <= 0:
            break
        values = values[:budget]
        budget -= len(values)
        adjusted.append(adjust_scores(raw_scores(engine, values), engine.card.scoring.z))
    return calibrate(np.concatenate(adjusted), source="training data")


class TorchEngine:
    """The torch encoder behind the runtime engine's interface, for parity checks against the ONNX graph."""

    def __init__(self, encoder: TRepEncoder, card: ModelCard) -> None:
        self.encoder = encoder.eval()
        self.card = card
        self._conv = card.convention()

    @torch.no_grad()
    def encode(self, x: np.ndarray, mask: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Same contract as ``Engine.encode``."""
        return self.encoder(torch.from_numpy(x), torch.from_numpy(mask), torch.from_numpy(t)).numpy()

    def last_step_pair(self, windows: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Same contract as ``Engine.last_step_pair``."""
        return last_step_pair(self.encode, self._conv, windows, starts)


@dataclass
class ParityReport:
    """Largest |torch − onnxruntime| over every case, and whether alert decisions matched on a real series."""

    max_abs_diff: float
    cases: int
    alerts_identical: bool | None

    @property
    def ok(self) -> bool:
        """Within the contract's 1e-4 and with identical alerts (when checked)."""
        return self.max_abs_diff <= 1e-4 and self.alerts_identical is not False


def parity_check(
    encoder: TRepEncoder,
    engine: Engine,
    real: np.ndarray | None = None,
    seed: int = 0,
    lengths: tuple[int, ...] = (2, 3, 17, 201, 1000),
    batches: tuple[int, ...] = (1, 3, 8),
) -> ParityReport:
    """Compare torch and onnxruntime on random and real windows with NaNs and masks, and on alert decisions."""
    rng = np.random.default_rng(seed)
    reference = TorchEngine(encoder, engine.card)
    conv = engine.card.convention()
    c = engine.card.input_dims
    worst, cases = 0.0, 0
    sources = ["random"] + (["real"] if real is not None and len(real) >= 2 else [])
    for source in sources:
        for length in lengths:
            for batch in batches:
                if source == "real":
                    starts = rng.integers(0, max(1, len(real) - length), size=batch)
                    x = np.stack([_slice_padded(real, s, length) for s in starts])
                else:
                    x = rng.normal(size=(batch, length, c)).astype(np.float32)
                x[rng.random(x.shape) < 0.05] = np.nan
                mask = rng.random((batch, length)) > 0.2
                mask[0, -1] = False
                t = time_index(conv, rng.integers(0, 10_000, size=batch), length)
                diff = np.abs(reference.encode(x, mask, t) - engine.encode(x, mask, t))
                worst = max(worst, float(np.nanmax(diff)))
                cases += 1
    alerts_identical = None
    if real is not None and len(real) >= 2:
        scoring, fixed = engine.card.scoring, engine.card.calibration
        series = real[: min(len(real), 1500)]
        ours = score_series(raw_scores(engine, series), scoring.z, fixed, scoring.beta, scoring.delay)
        theirs = score_series(raw_scores(reference, series), scoring.z, fixed, scoring.beta, scoring.delay)  # type: ignore[arg-type]
        alerts_identical = bool(np.array_equal(ours.alerts, theirs.alerts))
    return ParityReport(worst, cases, alerts_identical)


def _slice_padded(values: np.ndarray, start: int, length: int) -> np.ndarray:
    out = np.full((length, values.shape[1]), np.nan, dtype=np.float32)
    piece = values[start : start + length]
    out[: len(piece)] = piece
    return out


def build_card(
    name: str, encoder: TRepEncoder, meta: dict, config: dict, window: int, scoring: Scoring, step: int,
    period: float = 0.0,
) -> ModelCard:
    """The card of a trained encoder, before calibration; ``period`` is the seconds per step to declare (0: any, or
    for a periodic model trained on timestamped rows their own spacing, ``card_timing``)."""
    convention = parse_time_index(config["time_index"])
    period, origin = card_timing(meta, convention, period)
    return ModelCard(
        name=name,
        channels=list(meta["channels"]),
        normalisation=meta["normalisation"],
        differencing=int(meta["differencing"]),
        forward_fill=int(meta.get("forward_fill", 0)),
        time_index=str(convention),
        period=period,
        phase_origin=origin,
        time_embedding=encoder.cfg.time_embedding,
        window=window,
        repr_dims=encoder.cfg.repr_dims,
        input_dims=encoder.cfg.input_dims,
        scoring=scoring,
        calibration=None,
        training={
            "dataset": meta.get("dataset"),
            "data_spec": meta.get("data_spec"),
            "data_fingerprint": meta.get("data_fingerprint"),
            "steps": step,
            "config": config,
        },
        versions={"trep_edge": __version__, "torch": torch.__version__, "onnx": onnx.__version__, "opset": OPSET},
        weights_sha256=weights_sha256(encoder),
    )


def card_timing(meta: dict, convention: TimeIndex, period: float = 0.0) -> tuple[float, int]:
    """The card's ``period`` and ``phase_origin``.

    A periodic model trained on timestamped rows (``meta["timing"]``) keeps their phase: the origin is the first
    training row's Unix-epoch step mod P, and the period the rows' own spacing, the unit that step was counted in (the
    daemon counts ``timestamp / period``). Another ``period`` for such a model is refused: its phases would slide.
    Otherwise the origin is 0 (the first training row starts a cycle) and ``period`` is returned as given.
    """
    timing = meta.get("timing")
    if convention.kind != "periodic" or not timing:
        return float(period), 0
    spacing = float(timing["step_seconds"])
    if period and not math.isclose(period, spacing, rel_tol=1e-6):
        raise ValueError(f"--period {period:g}: the training data's readings are {spacing:g} s apart, and this "
                         f"periodic model counts the phase of its cycle in those steps; leave --period out (the card "
                         f"then says {spacing:g}) or train on readings {period:g} s apart")  # fmt: skip
    return spacing, int(timing["first_step"]) % convention.period


def fold_normalisation(encoder: TRepEncoder, mean: float, std: float) -> None:
    """Fold a univariate input normalisation ``(x − mean) / std`` into the input projection, in place."""
    with torch.no_grad():
        weight = encoder.projection.weight
        encoder.projection.bias -= weight[:, 0] * (mean / std)
        weight /= std


def make_general(encoder: TRepEncoder, card: ModelCard) -> None:
    """Turn a univariate encoder and its card into a general-purpose model (per-stream scaling, channel-independent).

    The training normalisation is folded into the input projection, so the card's identity normalisation feeds the
    encoder exactly what it was trained on; a NaN step is zeroed after the projection, so folding is exact.
    """
    if encoder.cfg.input_dims != 1:
        raise ValueError(f"--general needs a univariate model (input_dims 1), this one has {encoder.cfg.input_dims} "
                         "channels: train it on single-channel series (e.g. the general corpus, docs/training.md)")
    if Normalisation.from_dict(card.normalisation).counts is not None:
        # A count level is one stream's unit; a general model meets every scale through its per-stream scaling.
        raise ValueError("--general needs a model trained on scaled series, but its training data was read as a count "
                         "feed (normalisation.counts): train it on the general corpus (docs/training.md)")
    fold_normalisation(encoder, float(card.normalisation["mean"][0]), float(card.normalisation["std"][0]))
    card.channels = ["value"]
    card.normalisation = {"mean": [0.0], "std": [1.0]}
    card.scaling = "stream"
    card.channel_mode = "independent"
    card.weights_sha256 = weights_sha256(encoder)


def embed_graphs(model_path: Path, encoder: TRepEncoder, names: list[str] | None = None) -> ModelCard:
    """(Re)build the extra graphs ``names`` (default all registered) of a model of ``encoder``'s weights, card kept.

    For models exported before extra graphs existed or before they shared weights (``repack.py``): the full graph,
    calibration and scoring stay as they are.
    """
    text = unpack(metadata(model_path.read_bytes())).card_text
    if text is None:
        raise ValueError(f"{model_path} has no model card: export it with `trep-edge export` instead")
    card = ModelCard.from_json(text, source=f"{model_path} card")
    if card.precision != "fp32":
        raise ValueError(f"{model_path} is a {card.precision} variant; variants carry only the full graph")
    if weights_sha256(encoder) != card.weights_sha256:
        raise ValueError(f"the encoder's weights are not those of {model_path} (weights_sha256 differs)")
    graphs = shared_graphs(model_path, build_graphs(encoder, card.window, names))
    card.graphs = {name: graph_entry(blob, card.window) for name, blob in graphs.items()}
    write_card(model_path, card, graphs)
    return card


PRIOR_STEPS_PER_CALIBRATION_STEP = 5
"""The detector prior's budget of steps per calibration step (``export_encoder``'s ``max_calibration_steps``)."""


def export_encoder(
    encoder: TRepEncoder,
    card: ModelCard,
    out: Path,
    calibration_series: list[np.ndarray] | None,
    max_calibration_steps: int = 4000,
    graph_names: list[str] | None = None,
    with_prior: bool = True,
    trained_rows: int = 0,
) -> Engine:
    """Export, write the card, calibrate on normal series with the runtime's scoring, and reload the result.

    ``graph_names``: the extra graphs to embed (``build_graphs``; default all that apply). ``with_prior``: write the
    card's ``detector_prior`` from the calibration series (off for a general model, see ``training.commands``), at
    most ``PRIOR_STEPS_PER_CALIBRATION_STEP · max_calibration_steps`` steps of them. ``trained_rows`` > 0: the
    calibration series is the one the model trained on, from its data's first row, and the prior says how many rows
    that is (``rows``: ``detector.trained_rows``).
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        staged = Path(tmp) / out.name
        export_graph(encoder, staged)
        graphs = shared_graphs(staged, build_graphs(encoder, card.window, graph_names))
        card.graphs = {name: graph_entry(blob, card.window) for name, blob in graphs.items()}
        write_card(staged, card, graphs)
        if calibration_series:
            staged_engine = load_engine(staged, "cpu")
            card.calibration = calibration_stats(staged_engine, calibration_series, max_calibration_steps)
            if with_prior:
                # The detector's cold-start prior: its signals on the same normal data, as fresh streams see them.
                # It reads more than the threshold (20,000 steps at the default 4,000), and scales with what was asked
                # for, so that a small calibration is also a quick one (it runs the detector reading by reading).
                budget = PRIOR_STEPS_PER_CALIBRATION_STEP * max_calibration_steps
                card.detector_prior = detector_prior(staged_engine, calibration_series, max_steps=budget)
                if trained_rows > 0:
                    card.detector_prior["rows"] = int(trained_rows)
            write_card(staged, card)
        # The card first: a daemon watching the model file reloads when the model lands and reads its card then.
        copy_atomically(sidecar_path(staged), sidecar_path(out))
        copy_atomically(staged, out)
    return load_engine(out, "cpu")
