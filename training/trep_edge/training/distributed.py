"""Data-parallel pretraining under ``torchrun``: one process per device, gradients averaged by DDP.

Launch lines (docs/training.md): ``torchrun --nproc_per_node=N -m trep_edge.cli train DATA ...`` on one machine,
``torchrun --nnodes=M --node_rank=i --rdzv_backend=c10d --rdzv_endpoint=HOST:29500 --nproc_per_node=N -m
trep_edge.cli train ...`` on several. ``trep-edge train`` notices torchrun's environment and calls ``setup``.

Semantics (``Trainer``'s docstring): every rank holds the same seed, so every rank draws the same global batch of
``world × batch_size`` series, the same crops and masks; rank r keeps rows ``[r·B, (r+1)·B)`` (the sampler that
shards series across ranks) and computes their loss; DDP averages the gradients. The TS2Vec/T-Rep contrastive
losses are not separable over rows (each row's negatives are the other rows), so the contrast is per rank, over
its B rows, as DDP implies; ``Trainer(shards=world, rank=None)`` computes exactly this in one process (the mean of
the per-shard losses), which is what the equivalence test compares against. Checkpoints and logs: rank 0 only.

Backends: gloo on CPU (tested, 2 processes), NCCL on CUDA with one device per local rank (written, not run: no
GPU on the development machines).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from trep_edge.training.trainer import Trainer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class World:
    """This process's place in a torchrun job."""

    size: int
    rank: int
    local_rank: int

    @property
    def is_chief(self) -> bool:
        """Rank 0: the one process that writes checkpoints and prints."""
        return self.rank == 0


def world_from_env(env: dict[str, str] | None = None) -> World | None:
    """The torchrun job this process belongs to (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``), or None when alone."""
    env = dict(os.environ) if env is None else env
    size = int(env.get("WORLD_SIZE", "1"))
    if size <= 1:
        return None
    return World(size, int(env["RANK"]), int(env.get("LOCAL_RANK", "0")))


def device_for(world: World, requested: str) -> str:
    """One CUDA device per local rank when CUDA is used, else CPU (several ranks on one device would contend)."""
    if requested in ("auto", "cuda") and torch.cuda.is_available():
        return f"cuda:{world.local_rank}"
    if requested.startswith("cuda") and requested != "cuda":
        raise ValueError(f"--device {requested} under torchrun: use cuda (each rank takes cuda:LOCAL_RANK) or cpu")
    return "cpu" if requested == "auto" else requested


def setup(world: World, device: str) -> None:
    """Join the process group: NCCL for CUDA devices, gloo for CPU."""
    backend = "nccl" if device.startswith("cuda") else "gloo"
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    dist.init_process_group(backend=backend, rank=world.rank, world_size=world.size)
    log.info("rank %d/%d joined (%s, %s)", world.rank, world.size, backend, device)


def wrap(trainer: Trainer) -> None:
    """Let DDP average the objective's gradients across ranks (parameters are identical: same seed, or broadcast)."""
    unused = any(w == 0 for w in (trainer.cfg.weights.divergence, trainer.cfg.weights.forecast))
    ids = [trainer.device.index] if trainer.device.type == "cuda" else None
    trainer.objective = DistributedDataParallel(trainer.objective, device_ids=ids, find_unused_parameters=unused)


def teardown() -> None:
    """Leave the process group (after the last checkpoint)."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
