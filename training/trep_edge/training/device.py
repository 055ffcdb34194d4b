"""Device selection and mixed precision: CUDA when present, CPU otherwise, said out loud."""
from __future__ import annotations

import contextlib
import logging

import torch

log = logging.getLogger(__name__)


def select_device(requested: str = "auto") -> torch.device:
    """Resolve ``auto``/``cpu``/``cuda``/``cuda:N``; asking for CUDA on a machine without it is an error."""
    if requested == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        log.info("device auto-selected: %s", device)
        return device
    try:
        device = torch.device(requested)
    except RuntimeError as exc:
        raise ValueError(f"device {requested!r} is not understood: use auto, cpu, cuda or cuda:N") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {requested!r} asked for, but torch sees no CUDA device: use --device cpu or auto")
    return device


def amp_enabled(device: torch.device, requested: bool) -> bool:
    """Mixed precision runs only on CUDA; on CPU the request is dropped with a warning."""
    if requested and device.type != "cuda":
        log.warning("mixed precision (amp) needs CUDA; training in float32 on %s", device)
        return False
    return requested


def autocast(device: torch.device, enabled: bool) -> contextlib.AbstractContextManager:
    """float16 autocast on CUDA when enabled, a no-op context otherwise."""
    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.float16)
