"""The pretraining loop: crops, masks, the hierarchical T-Rep loss, AdamW, averaging, exact-resume checkpoints."""
from __future__ import annotations

import contextlib
import copy
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.swa_utils import AveragedModel
from tqdm import tqdm

from trep_edge.runtime.service.atomic_file import write_atomically
from trep_edge.runtime.core.time_index import parse_time_index, time_index

from trep_edge.training.config import TrainConfig
from trep_edge.training.crops import Sections, draw_crops, gather, make_sections, random_keep_mask
from trep_edge.training.device import amp_enabled, autocast, select_device
from trep_edge.training.encoder import EncoderConfig, TRepEncoder
from trep_edge.training.heads import PretextHeads
from trep_edge.training.losses import hierarchical_loss

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = "trep-edge-checkpoint/1"
MIN_SECTION = 64
"""The shortest section the one-section warning suggests cutting a series into: the crops of a shorter one (a
random overlap and two views around it) leave the contrasts a handful of steps."""


@contextlib.contextmanager
def conv2d_on_cpu(module: nn.Module) -> Iterator[None]:
    """Run ``module``'s Conv1d layers as height-1 Conv2d on CPU tensors while inside (same weights, same math).

    Why: torch's CPU Conv1d backward is about 30x slower than the identical Conv2d (2.0 s vs 0.07 s for ten
    dilated width-32 layers on a 16 x 800 batch, torch 2.13, 2 cores). Only the training step uses this; the modules
    themselves, checkpoints and ONNX exports keep their Conv1d.
    """
    convs = [m for m in module.modules() if isinstance(m, nn.Conv1d) and m.padding_mode == "zeros"]

    def routed(conv: nn.Conv1d) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]:
        def forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
            if x.device.type != "cpu" or isinstance(conv.padding, str):
                return nn.Conv1d._conv_forward(conv, x, weight, bias)
            return F.conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, (1, conv.stride[0]), (0, conv.padding[0]),
                            (1, conv.dilation[0]), conv.groups).squeeze(2)  # fmt: skip

        return forward

    try:
        for conv in convs:
            conv._conv_forward = routed(conv)
        yield
    finally:
        for conv in convs:
            conv.__dict__.pop("_conv_forward", None)


def default_iterations(cfg: TrainConfig, sections: Sections) -> int:
    """Steps to run: explicit iterations, else epochs × batches per epoch, else 200 (≤ 1e5 values) or 600."""
    if cfg.iterations is not None:
        return cfg.iterations
    per_epoch = max(1, len(sections.x) // min(cfg.batch_size, len(sections.x)))
    if cfg.epochs is not None:
        return cfg.epochs * per_epoch
    return 200 if sections.x.size <= 100_000 else 600


def encoder_config(cfg: TrainConfig, input_dims: int) -> EncoderConfig:
    """The encoder architecture a training configuration implies."""
    conv = parse_time_index(cfg.time_index)
    scale = float(conv.period) if conv.kind == "periodic" else float(cfg.max_train_length)
    return EncoderConfig(
        input_dims=input_dims,
        repr_dims=cfg.repr_dims,
        hidden_dims=cfg.hidden_dims,
        depth=cfg.depth,
        time_embedding=cfg.time_embedding,
        time_embedding_dims=cfg.time_embedding_dims,
        time_scale=scale,
        repr_dropout=cfg.repr_dropout,
        causal=cfg.causal,
        dilations=None if cfg.dilations is None else tuple(cfg.dilations),
    )


class PretextObjective(nn.Module):
    """Encoder and pretext heads → the hierarchical loss of a batch of two views (the module DDP wraps)."""

    def __init__(self, encoder: TRepEncoder, heads: PretextHeads, cfg: TrainConfig, device: torch.device,
                 amp: bool) -> None:  # fmt: skip
        super().__init__()
        self.encoder, self.heads, self.cfg, self.device, self.amp = encoder, heads, cfg, device, amp

    def forward(self, view1: tuple, view2: tuple, overlap: int, seed: int) -> tuple[torch.Tensor, dict[str, float]]:
        """Loss and per-task values; ``seed`` seeds the pair sampling of the divergence and forecasting tasks."""
        with autocast(self.device, self.amp):
            z1 = self.encoder(*view1)[:, -overlap:]
            z2 = self.encoder(*view2)[:, :overlap]
            tau = self.encoder.embed_time(view1[2][:, -overlap:])
        # The losses run in float32: softmax over dot products overflows float16.
        return hierarchical_loss(
            z1.float(),
            z2.float(),
            None if tau is None else tau.float(),
            self.heads,
            self.cfg.weights,
            torch.Generator().manual_seed(seed),
            delta_max=self.cfg.delta_max,
            max_pairs=self.cfg.max_pairs,
            detach_targets=self.cfg.detach_targets,
        )


class Trainer:
    """Owns the encoder, the pretext heads, the optimiser and every random state, so it can resume exactly.

    Data parallelism (``training/trep_edge/training/distributed.py``): with ``shards = N`` each step draws a global batch of
    ``N × batch_size`` series and splits it into N shards of ``batch_size``; every shard gets its own contrastive
    loss (its rows are each other's negatives) and dropout seed. With ``rank = r`` the trainer computes shard r
    only and DDP averages the gradients over the ranks; with ``rank = None`` it computes every shard and averages
    the losses: the single-process run with the same gradients. ``shards = 1`` is plain training.
    """

    def __init__(self, cfg: TrainConfig, input_dims: int, meta: dict | None = None, shards: int = 1,
                 rank: int | None = None) -> None:  # fmt: skip
        if shards < 1 or (rank is not None and not 0 <= rank < shards):
            raise ValueError(f"need shards >= 1 and 0 <= rank < shards, got shards {shards}, rank {rank}")
        self.cfg = cfg
        self.shards, self.rank = shards, rank
        self.device = select_device(cfg.device)
        self.amp = amp_enabled(self.device, cfg.amp)
        torch.manual_seed(cfg.seed)
        self.rng = np.random.default_rng(cfg.seed)
        self.encoder = TRepEncoder(encoder_config(cfg, input_dims)).to(self.device)
        te_dims = 0 if cfg.time_embedding == "none" else cfg.time_embedding_dims
        self.heads = PretextHeads(cfg.repr_dims, te_dims).to(self.device)
        self.objective: nn.Module = PretextObjective(self.encoder, self.heads, cfg, self.device, self.amp)
        self.averaged = AveragedModel(self.encoder) if cfg.average_weights else None
        params = list(self.encoder.parameters()) + list(self.heads.parameters())
        self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp)
        self.time_convention = parse_time_index(cfg.time_index)
        self.meta = dict(meta or {})
        self.step = 0
        self.total_steps: int | None = None
        self.epoch = 0
        self.order = np.zeros(0, dtype=np.int64)
        self.cursor = 0
        self.history: list[dict[str, float]] = []

    @property
    def is_chief(self) -> bool:
        """The process that writes checkpoints and logs (rank 0, or the only one)."""
        return not self.rank

    def _next_rows(self, count: int) -> np.ndarray:
        """Indices of the next (global) batch: a fresh permutation per epoch, incomplete tail batches dropped."""
        batch = min(self.cfg.batch_size * self.shards, count)
        if self.shards > 1 and batch % self.shards:
            raise ValueError(f"{count} training sections cannot fill {self.shards} shards of a batch: use more data "
                             "or fewer processes")  # fmt: skip
        if self.cursor + batch > len(self.order) or len(self.order) != count:
            self.order = self.rng.permutation(count)
            self.cursor = 0
            self.epoch += 1
        rows = self.order[self.cursor : self.cursor + batch]
        self.cursor += batch
        return rows

    def _tensor(self, a: np.ndarray, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.as_tensor(a, dtype=dtype).to(self.device)

    def train_step(self, sections: Sections) -> dict[str, float]:
        """One optimiser step on a random batch; returns the total and per-task losses."""
        rows = self._next_rows(len(sections.x))
        return self.train_on(sections.x[rows], sections.start[rows])

    def _shards_of(self, batch: int, local: bool) -> list[tuple[int, slice]]:
        """(shard id, rows) of the batch this process computes (module docstring of ``Trainer``)."""
        if self.shards == 1 or local:
            return [(self.rank or 0, slice(None))]
        size = batch // self.shards
        ids = range(self.shards) if self.rank is None else [self.rank]
        return [(k, slice(k * size, (k + 1) * size)) for k in ids]

    def train_on(self, x: np.ndarray, start: np.ndarray, local: bool = False) -> dict[str, float]:
        """One optimiser step on the sections ``x [B, L, C]`` starting at ``start [B]``.

        ``x`` is the global batch, or with ``local`` this rank's own batch (a streaming dataset shards series, not
        batches).
        """
        self.encoder.train()
        self.heads.train()
        rows = np.arange(len(x))
        crops = draw_crops(self.rng, len(rows), x.shape[1], self.cfg.temporal_unit)
        views = []
        for pos in (crops.pos1, crops.pos2):
            xv = gather(x, rows, pos)
            t = time_index(self.time_convention, start + pos[:, 0], pos.shape[1], origin=start)
            keep = random_keep_mask(self.rng, xv.shape[:2])
            views.append((self._tensor(xv), self._tensor(keep, torch.bool), self._tensor(t)))
        seed = int(self.rng.integers(2**62))
        pieces = self._shards_of(len(x), local)
        with conv2d_on_cpu(self.encoder), conv2d_on_cpu(self.heads):
            if len(pieces) == 1 and self.shards == 1:
                loss, parts = self.objective(views[0], views[1], crops.overlap, seed)
            else:
                loss, parts = self._sharded_loss(views, crops.overlap, seed, pieces)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"loss became {float(loss)} at step {self.step}: lower --lr or check the data")
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.averaged is not None:
            self.averaged.update_parameters(self.encoder)
        self.step += 1
        record = {"step": self.step, "loss": float(loss.detach()), **parts}
        self.history.append(record)
        return record

    def _sharded_loss(self, views: list[tuple], overlap: int, seed: int,
                      pieces: list[tuple[int, slice]]) -> tuple[torch.Tensor, dict[str, float]]:  # fmt: skip
        """Mean over shards of each shard's own loss; shard k's dropout is seeded by (step seed, k) on every rank."""
        dropout_seed = int(self.rng.integers(2**62))
        devices = [self.device] if self.device.type == "cuda" else []
        losses, parts = [], []
        for k, rows in pieces:
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed((dropout_seed + k) % 2**63)
                loss, part = self.objective(*(tuple(a[rows] for a in v) for v in views), overlap, seed)
            losses.append(loss)
            parts.append(part)
        return torch.stack(losses).mean(), {k: float(np.mean([p[k] for p in parts])) for k in parts[0]}

    def fit(
        self,
        data: np.ndarray,
        iterations: int | None = None,
        checkpoint: str | Path | None = None,
        progress: bool = True,
    ) -> list[dict[str, float]]:
        """Train on ``data [N, T, C]`` (NaN = missing) up to the planned number of steps; resumable."""
        sections = make_sections(np.asarray(data, dtype=np.float32), self.cfg.max_train_length)
        if sections.x.shape[-1] != self.encoder.cfg.input_dims:
            raise ValueError(
                f"data has {sections.x.shape[-1]} channels, the encoder expects {self.encoder.cfg.input_dims}"
            )
        if len(sections.x) == 1:
            steps = sections.x.shape[1]
            # Sections shorter than MIN_SECTION leave the crops too little to learn from: then more data is the fix.
            cut = next((steps // k for k in (8, 4, 2) if steps // k >= MIN_SECTION), None)
            advice = (f"lower --max-train-length (e.g. to {cut}) to cut it into sections" if cut else
                      f"it is too short to cut into sections of {MIN_SECTION} steps or more: train on a longer "
                      "recording or on several series")  # fmt: skip
            log.warning("the data is one section of %d steps, so every batch holds one section and the instance-"
                        "contrast loss is 0: %s", steps, advice)  # fmt: skip
        if self.total_steps is None:
            self.total_steps = iterations if iterations is not None else default_iterations(self.cfg, sections)
        return self._loop(lambda: self.train_step(sections), checkpoint, progress)

    def fit_stream(
        self,
        batches: Iterator[tuple[np.ndarray, np.ndarray]],
        iterations: int,
        checkpoint: str | Path | None = None,
        progress: bool = True,
    ) -> list[dict[str, float]]:
        """Train on this rank's batches ``(x [B, L, C], start [B])`` of a streaming dataset (``training/trep_edge/training/streaming.py``).

        Resuming restores weights, optimiser and step, not the stream's position: the stream restarts.
        """
        if self.total_steps is None:
            self.total_steps = iterations
        return self._loop(lambda: self.train_on(*next(batches), local=True), checkpoint, progress)

    def _loop(self, step: Callable[[], dict[str, float]], checkpoint: str | Path | None,
              progress: bool) -> list[dict[str, float]]:  # fmt: skip
        """Steps up to ``total_steps`` with progress, periodic log lines and checkpoints (chief process only)."""
        progress = progress and self.is_chief
        checkpoint = checkpoint if self.is_chief else None
        bar = tqdm(total=self.total_steps, initial=self.step, disable=not progress, desc="pretrain", unit="step")
        records = []
        last_log = time.monotonic()
        while self.step < self.total_steps:
            record = step()
            records.append(record)
            bar.update(1)
            losses = {k: f"{v:.3f}" for k, v in record.items() if k != "step"}
            bar.set_postfix(losses)
            # Without a bar (logs, services) a line every 30 s still shows that, and how, training moves.
            if not progress and self.is_chief and time.monotonic() - last_log >= 30:
                log.info("step %d/%d %s", self.step, self.total_steps, losses)
                last_log = time.monotonic()
            every = self.cfg.checkpoint_every
            if checkpoint is not None and every and self.step % every == 0:
                self.save(checkpoint)
        bar.close()
        if checkpoint is not None:
            self.save(checkpoint)
        return records

    def inference_encoder(self) -> TRepEncoder:
        """The encoder used downstream (the weight average when kept), in eval mode."""
        enc = self.averaged.module if self.averaged is not None else self.encoder
        return enc.eval()

    def state_dict(self) -> dict:
        """Everything needed to continue training bit-for-bit."""
        return {
            "format": CHECKPOINT_FORMAT,
            "config": self.cfg.to_dict(),
            "encoder_config": asdict(self.encoder.cfg),
            "encoder": self.encoder.state_dict(),
            "averaged": None if self.averaged is None else self.averaged.state_dict(),
            "heads": self.heads.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "step": self.step,
            "total_steps": self.total_steps,
            "epoch": self.epoch,
            "order": torch.as_tensor(self.order),
            "cursor": self.cursor,
            "numpy_rng": self.rng.bit_generator.state,
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "meta": self.meta,
            "history": self.history,
        }

    def save(self, path: str | Path) -> None:
        """Write a checkpoint atomically (a crash mid-write leaves the previous one intact)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        state = self.state_dict()
        write_atomically(path, lambda fh: torch.save(state, fh), mode=0o644)

    @classmethod
    def load(cls, path: str | Path, device: str | None = None, shards: int = 1, rank: int | None = None) -> "Trainer":
        """Restore a trainer from a checkpoint, optionally on another device (and as one rank of a sharded run)."""
        state = read_checkpoint(path)
        cfg = TrainConfig.from_dict(state["config"])
        if device is not None:
            cfg.device = device
        trainer = cls(cfg, state["encoder_config"]["input_dims"], state["meta"], shards, rank)
        trainer.encoder.load_state_dict(state["encoder"])
        if trainer.averaged is not None and state["averaged"] is not None:
            trainer.averaged.load_state_dict(state["averaged"])
        trainer.heads.load_state_dict(state["heads"])
        trainer.optimizer.load_state_dict(state["optimizer"])
        trainer.scaler.load_state_dict(state["scaler"])
        trainer.step = state["step"]
        trainer.total_steps = state["total_steps"]
        trainer.epoch = state["epoch"]
        trainer.order = state["order"].numpy()
        trainer.cursor = state["cursor"]
        trainer.rng.bit_generator.state = state["numpy_rng"]
        torch.set_rng_state(state["torch_rng"])
        if state["cuda_rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        trainer.history = list(state["history"])
        return trainer

    def init_from(self, state: dict, source: str) -> None:
        """Fine-tuning: start from a checkpoint's deployed encoder (its weight average when kept) and its heads.

        The optimiser, step count and weight average start afresh; the architecture must be the same.
        """
        weights = state["encoder"]
        if state.get("averaged") is not None:
            weights = {k[len("module.") :]: v for k, v in state["averaged"].items() if k.startswith("module.")}
        try:
            self.encoder.load_state_dict(weights)
            self.heads.load_state_dict(state["heads"])
        except RuntimeError as exc:
            raise ValueError(f"{source} has another architecture than this run ({exc}); fine-tune with its own "
                             "settings (drop the architecture flags)") from None  # fmt: skip


def resolve_checkpoint(model_or_checkpoint: str | Path, weights_sha256: str | None = None) -> Path:
    """The checkpoint behind a model: the path itself, or for ``M.onnx`` the sibling ``M.pt`` with the same weights.

    An exported model's card records a sha256 of its weights (``weights_sha256`` if already known), so a
    checkpoint that was retrained since is refused rather than silently used. A general model's export folded the
    training normalisation into its weights (``export.make_general``): its checkpoint matches once folded the same way.
    """
    path = Path(model_or_checkpoint)
    if path.suffix != ".onnx" and weights_sha256 is None:
        return path
    from trep_edge.runtime.core.engine import load_engine

    from trep_edge.training.export import weights_sha256 as sha_of

    checkpoint = path.with_suffix(".pt")
    if not checkpoint.is_file():
        raise FileNotFoundError(f"{path} is an exported model; its checkpoint {checkpoint} (same name, .pt) is "
                                "needed for its weights: copy it there or pass the checkpoint itself")  # fmt: skip
    expected = weights_sha256 or load_engine(path, "cpu").card.weights_sha256
    trainer = Trainer.load(checkpoint, device="cpu")
    exports = (False, True) if trainer.inference_encoder().cfg.input_dims == 1 else (False,)
    if expected not in {sha_of(deployed_encoder(trainer, general)) for general in exports}:
        raise ValueError(f"{checkpoint} does not hold the weights of {path} (weights_sha256 differs): pass the "
                         "checkpoint the model was exported from")  # fmt: skip
    return checkpoint


def deployed_encoder(trainer: Trainer, general: bool) -> TRepEncoder:
    """The encoder an export of ``trainer`` holds: its inference encoder, or for a general model (``export --general``)
    a copy with the training normalisation folded into the input projection (``export.make_general``)."""
    encoder = trainer.inference_encoder()
    if not general:
        return encoder
    from trep_edge.training.export import fold_normalisation

    folded = copy.deepcopy(encoder)
    norm = trainer.meta["normalisation"]
    fold_normalisation(folded, float(norm["mean"][0]), float(norm["std"][0]))
    return folded


def read_checkpoint(path: str | Path) -> dict:
    """Load a checkpoint file, refusing anything that is not one with a message that says what it is."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several unrelated types for a corrupt or foreign file
        raise ValueError(f"{path} is not a readable trep-edge checkpoint ({type(exc).__name__}: {exc})") from exc
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not a trep-edge checkpoint (expected format {CHECKPOINT_FORMAT})")
    return state

