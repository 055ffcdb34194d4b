"""Reduced-precision variants of an exported model (fp16, int8 QDQ), accepted only if scores barely move.

The anomaly score is the L1 difference of two nearly equal representations, so numeric noise in the encoder
lands directly in it. A variant is judged on the adjusted score, in units of the calibration σ: the threshold
is μ + βσ, so an error of ε·σ moves the effective β by at most ε.
"""
from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import onnx

from trep_edge.runtime.core.engine import Engine, load_engine, seconds_per_window
from trep_edge.runtime.core.model_card import sidecar_path
from trep_edge.runtime.core.offline import raw_scores, sliding_windows
from trep_edge.runtime.core.scoring import adjust_scores, threshold
from trep_edge.runtime.core.time_index import time_index
from trep_edge.runtime.service.atomic_file import copy_atomically

from trep_edge.training.export import write_card
from trep_edge.training.evaluation.paper_protocol import detect

# p99 of |Δ adjusted score| must stay within this many σ (β moves by ≤ 0.1 for 99 % of readings, 2.5 % of β = 4),
# and no single reading may move by more than MAX_TOLERANCE σ.
P99_TOLERANCE = 0.1
MAX_TOLERANCE = 0.5


@dataclass
class PrecisionReport:
    """How a variant compares with the fp32 model on the same series, and whether it is accepted."""

    precision: str
    path: str
    bytes: int
    fp32_bytes: int
    p99_error_sigma: float
    max_error_sigma: float
    alert_agreement: float
    ms_per_reading: float
    fp32_ms_per_reading: float
    accepted: bool

    def to_dict(self) -> dict:
        """JSON form for reports."""
        return asdict(self)


def convert_fp16(src: Path, dst: Path) -> None:
    """Weights and activations in float16, inputs and outputs kept float32 (the contract does not change)."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
    onnx.save(model, str(dst))


class _WindowReader:
    """Feeds training windows to the int8 calibrator, in the same layout the runtime sends."""

    def __init__(self, engine: Engine, series: list[np.ndarray], count: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        w = engine.card.window
        windows = np.concatenate([sliding_windows(s, w) for s in series])
        pick = rng.choice(len(windows), size=min(count, len(windows)), replace=False)
        self.batches = []
        for lo in range(0, len(pick), 32):
            x = np.ascontiguousarray(windows[pick[lo : lo + 32]])
            mask = np.ones(x.shape[:2], dtype=bool)
            mask[len(x) // 2 :, -1] = False
            t = time_index(engine.card.time_index, np.zeros(len(x), dtype=np.int64), w)
            self.batches.append({"x": x, "mask": mask, "t": t})

    def get_next(self) -> dict | None:
        """Next calibration batch, or None when done (onnxruntime's CalibrationDataReader protocol)."""
        return self.batches.pop() if self.batches else None


def quantize_int8(src: Path, dst: Path, engine: Engine, series: list[np.ndarray], windows: int = 512) -> None:
    """Static int8 QDQ quantisation of the convolutions and projections, calibrated on training windows."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    reader = _WindowReader(engine, series, windows)
    adapter = type("Reader", (CalibrationDataReader,), {"get_next": lambda self: reader.get_next()})()
    quantize_static(
        str(src), str(dst), adapter, quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
        weight_type=QuantType.QInt8, op_types_to_quantize=["Conv", "MatMul", "Gemm"], per_channel=True,
    )  # fmt: skip


def _ms_per_reading(engine: Engine, values: np.ndarray, streams: int = 64, repeats: int = 3) -> float:
    """Milliseconds per scored reading with ``streams`` windows scored together (best of ``repeats``)."""
    w = engine.card.window
    windows = np.ascontiguousarray(sliding_windows(values, w)[-streams:])
    starts = np.zeros(len(windows), dtype=np.int64)
    return 1000.0 * seconds_per_window(engine.last_step_pair, windows, starts, repeats)


def compare(reference: Engine, candidate: Engine, series: list[np.ndarray], precision: str) -> PrecisionReport:
    """Score the same series with both engines and judge the candidate against the tolerances above."""
    cal = reference.card.calibration
    if cal is None or cal.sigma <= 0:
        raise ValueError("reduced precision needs a calibrated model (σ > 0) to judge score errors against")
    z, scoring = reference.card.scoring.z, reference.card.scoring
    errors, agree, total = [], 0, 0
    thr = threshold(cal, scoring.beta)
    for values in series:
        a_ref = adjust_scores(raw_scores(reference, values), z)
        a_new = adjust_scores(raw_scores(candidate, values), z)
        finite = np.isfinite(a_ref) & np.isfinite(a_new)
        errors.append(np.abs(a_ref - a_new)[finite] / cal.sigma)
        agree += int((detect(a_ref, thr, scoring.delay) == detect(a_new, thr, scoring.delay)).sum())
        total += len(values)
    err = np.concatenate(errors)
    p99, worst = float(np.percentile(err, 99)), float(err.max())
    longest = max(series, key=len)
    return PrecisionReport(
        precision=precision,
        path=str(candidate.path),
        bytes=candidate.path.stat().st_size,
        fp32_bytes=reference.path.stat().st_size,
        p99_error_sigma=p99,
        max_error_sigma=worst,
        alert_agreement=agree / total,
        ms_per_reading=_ms_per_reading(candidate, longest),
        fp32_ms_per_reading=_ms_per_reading(reference, longest),
        accepted=p99 <= P99_TOLERANCE and worst <= MAX_TOLERANCE,
    )


def export_variant(reference: Engine, precision: str, series: list[np.ndarray], max_steps: int = 2000) -> PrecisionReport:
    """Write ``NAME.<precision>.onnx`` beside the fp32 model; keep it only if accepted (the report says why)."""
    src = reference.path
    dst = src.with_name(f"{src.stem}.{precision}.onnx")
    budget, judged = max_steps, []
    for s in series:
        if budget <= 0:
            break
        judged.append(s[:budget])
        budget -= len(judged[-1])
    with tempfile.TemporaryDirectory(dir=src.parent) as tmp:
        staged = Path(tmp) / dst.name
        if precision == "fp16":
            convert_fp16(src, staged)
        elif precision == "int8":
            quantize_int8(src, staged, reference, judged)
        else:
            raise ValueError(f"precision {precision!r} is not fp16 or int8")
        # Variants carry only the full graph: embedded fp32 graphs would not match the variant's numbers.
        write_card(staged, replace(reference.card, precision=precision, graphs={}))
        report = compare(reference, load_engine(staged, "cpu"), judged, precision)
        if report.accepted:
            copy_atomically(sidecar_path(staged), sidecar_path(dst))  # the card first, as export installs them
            copy_atomically(staged, Path(dst))
        report.path = str(dst) if report.accepted else f"{dst} (refused, not written)"
    return report
