"""Pretrain the two encoders every evaluation compares: T-Rep and its TS2Vec ablation, on the same budget."""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from trep_edge.training.config import TrainConfig
from trep_edge.training.encoder import TRepEncoder
from trep_edge.training.trainer import Trainer

VARIANTS = ("trep", "ts2vec")
"""trep: the paper's model; ts2vec: no time-embedding, weights 0.5/0.5/0/0 (the TS2Vec ablation)."""
CAUSAL_VARIANTS = ("trep-causal", "ts2vec-causal")
"""The same two with causal convolutions and a receptive field within the scoring window (docs/causal.md)."""
KNOWN_VARIANTS = VARIANTS + CAUSAL_VARIANTS


@dataclass
class Budget:
    """What a 2-core CPU can afford per pretraining run; defaults are the reduced budget of docs/results.md."""

    iterations: int = 200
    hidden_dims: int = 64
    """Paper: 128. Halved for CPU time (TS2Vec's own default is 64)."""
    depth: int = 10
    batch_size: int = 16
    max_train_length: int = 800
    seed: int = 0

    def to_dict(self) -> dict:
        """Plain data for the results JSON."""
        return asdict(self)


@dataclass
class Pretrained:
    """An encoder ready for inference plus what the results table reports about its training."""

    encoder: TRepEncoder
    config: TrainConfig
    seconds: float
    final_loss: float


def variant_config(variant: str, time_embedding: str, repr_dims: int, budget: Budget, time_index: str = "relative",
                   max_receptive_field: int = 201) -> TrainConfig:  # fmt: skip
    """The training configuration of ``variant`` with the task's time-embedding, representation size and time index."""
    if variant not in KNOWN_VARIANTS:
        raise ValueError(f"variant {variant!r} is unknown: choose from {', '.join(KNOWN_VARIANTS)}")
    causal = variant in CAUSAL_VARIANTS
    if causal and time_index == "relative" and not variant.startswith("ts2vec"):
        raise ValueError(f"variant {variant} needs a periodic time index: pass --time-index periodic:P")
    common = dict(
        repr_dims=repr_dims,
        hidden_dims=budget.hidden_dims,
        depth=budget.depth,
        batch_size=budget.batch_size,
        max_train_length=budget.max_train_length,
        iterations=budget.iterations,
        seed=budget.seed,
        device="cpu",
        time_index=time_index,
        causal=causal,
        max_receptive_field=max_receptive_field,
    )
    if variant.startswith("ts2vec"):
        return TrainConfig(time_embedding="none", weights=(0.5, 0.5, 0.0, 0.0), **common)
    return TrainConfig(time_embedding=time_embedding, **common)


def pretrain(x: np.ndarray, variant: str, time_embedding: str, repr_dims: int, budget: Budget, time_index: str = "relative",
             max_receptive_field: int = 201) -> Pretrained:  # fmt: skip
    """Self-supervised pretraining of ``variant`` on ``x [N, T, C]`` (normalised, NaN = missing).

    ``max_receptive_field`` bounds a causal variant's receptive field (the scoring window it will be used with).
    """
    cfg = variant_config(variant, time_embedding, repr_dims, budget, time_index, max_receptive_field)
    trainer = Trainer(cfg, input_dims=x.shape[-1])
    started = time.perf_counter()
    records = trainer.fit(x, iterations=budget.iterations, progress=False)
    seconds = time.perf_counter() - started
    return Pretrained(trainer.inference_encoder(), cfg, seconds, float(records[-1]["loss"]) if records else float("nan"))
