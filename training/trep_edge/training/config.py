"""Training configuration: one typed object with working defaults, loadable from TOML."""
from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from trep_edge.runtime.core.time_index import parse_time_index
from trep_edge.training.encoder import bounded_dilations, receptive_field
from trep_edge.training.losses import LossWeights
from trep_edge.training.time_embedding import KINDS


@dataclass
class TrainConfig:
    """Every knob of pretraining. Defaults follow the paper (TREP.md §3) unless a field says otherwise."""

    repr_dims: int = 128
    """F, the representation size per timestep."""
    hidden_dims: int = 128
    """Width of the TCN's hidden channels."""
    depth: int = 10
    """Number of dilated residual blocks before the final block."""
    time_embedding: str = "time2vec"
    """time2vec (anomaly detection, forecasting), mlp (classification), rbf, or none (the TS2Vec ablation)."""
    time_embedding_dims: int = 32
    """K, the size of τ."""
    time_index: str = "relative"
    """relative or periodic:P (TREP.md §4); stored in the model card."""
    repr_dropout: float = 0.1
    """Dropout on the output representation during training."""
    causal: bool = False
    """Causal convolutions (left padding only) for the incremental step engine (docs/causal.md); needs a
    ``periodic:P`` time index (or time_embedding none) and exports a window at least ``max_receptive_field``."""
    dilations: list[int] | None = None
    """Dilation of each of the depth + 1 blocks. None: 2^i (the paper); for a causal model it is filled in with the
    doubling-and-restarting schedule that fits ``max_receptive_field`` (stored, so the checkpoint says it)."""
    max_receptive_field: int = 201
    """Causal models: the largest receptive field the default dilations may reach (≤ the export window)."""
    weights: LossWeights = field(default_factory=LossWeights)
    """α of the four pretext tasks; must sum to 1."""
    delta_max: int = 10
    """Largest forecasting horizon Δ of the time-embedding-conditioned forecasting task (≤ 20)."""
    max_pairs: int = 1024
    """Pairs sampled per scale for the divergence and forecasting tasks (at most B×T)."""
    detach_targets: bool = False
    """Stop gradients through the JSD and forecasting targets."""
    batch_size: int = 16
    lr: float = 1e-3
    weight_decay: float = 0.0
    """AdamW weight decay (0 = plain Adam)."""
    max_train_length: int = 800
    """Long series are cut into sections of at most this many steps."""
    temporal_unit: int = 0
    """The shortest crop is 2^(temporal_unit+1) steps."""
    iterations: int | None = None
    """Optimiser steps; None = derived from epochs, or 200 (small data) / 600 as the reference does."""
    epochs: int | None = None
    average_weights: bool = True
    """Keep a running (SWA) average of the encoder weights for inference, as TS2Vec does."""
    seed: int = 0
    device: str = "auto"
    """auto (CUDA when present, else CPU), cpu, cuda, or cuda:N."""
    amp: bool = False
    """float16 autocast on CUDA; ignored (with a warning) on CPU."""
    checkpoint_every: int = 0
    """Save a checkpoint every N steps (0 = only at the end)."""

    def __post_init__(self) -> None:
        if isinstance(self.weights, dict):
            self.weights = LossWeights(**self.weights)
        elif isinstance(self.weights, (list, tuple)):
            self.weights = LossWeights(*self.weights)
        if self.time_embedding not in KINDS:
            raise ValueError(f"time_embedding {self.time_embedding!r} is unknown: choose one of {', '.join(KINDS)}")
        if self.time_embedding == "none" and (self.weights.divergence or self.weights.forecast):
            raise ValueError("time_embedding 'none' needs divergence and forecast weights of 0 (e.g. 0.5,0.5,0,0)")
        self._check_causal()
        if not 1 <= self.delta_max <= 20:
            raise ValueError(f"delta_max must be between 1 and 20, got {self.delta_max}")
        for name in ("repr_dims", "hidden_dims", "depth", "batch_size", "max_train_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.lr <= 0:
            raise ValueError(f"lr must be positive, got {self.lr}")

    def _check_causal(self) -> None:
        conv = parse_time_index(self.time_index)
        if self.dilations is not None:
            self.dilations = [int(d) for d in self.dilations]
            if len(self.dilations) != self.depth + 1 or min(self.dilations) < 1:
                raise ValueError(f"dilations must list depth + 1 = {self.depth + 1} positive integers, got {self.dilations}")
        if not self.causal:
            return
        if conv.kind == "relative" and self.time_embedding != "none":
            raise ValueError("a causal model carries its state from step to step, so each step's time embedding must "
                             "be fixed by its absolute index: use time_index 'periodic:P' (or time_embedding 'none')")  # fmt: skip
        if self.dilations is None:
            self.dilations = list(bounded_dilations(self.depth + 1, self.max_receptive_field))
        elif receptive_field(self.dilations) > self.max_receptive_field:
            raise ValueError(f"dilations {self.dilations} reach {receptive_field(self.dilations)} steps, more than "
                             f"max_receptive_field {self.max_receptive_field}")  # fmt: skip

    def to_dict(self) -> dict:
        """Plain-data form, for checkpoints and the model card."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "TrainConfig":
        """Build from a dict, refusing unknown keys so a typo is not silently ignored."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown training setting(s) {unknown}; known: {sorted(known)}")
        return cls(**data)

    @classmethod
    def from_toml(cls, path: str | Path) -> "TrainConfig":
        """Load the ``[train]`` table (or the top level) of a TOML file."""
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
        return cls.from_dict(data.get("train", data))
