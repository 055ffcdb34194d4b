"""Data-parallel training: ``torchrun --nproc_per_node=2`` (gloo, CPU) ends with the weights of one process that
draws the same global batch with the same seed and averages the per-shard losses (training/trep_edge/training/distributed.py)."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from trep_edge.training.config import TrainConfig
from trep_edge.training.data import load_training_data
from trep_edge.training.trainer import Trainer, read_checkpoint

SETTINGS = dict(depth=2, hidden_dims=8, repr_dims=8, batch_size=2, seed=3, max_train_length=128)
STEPS = 4


@pytest.fixture()
def toy(tmp_path):
    rng = np.random.default_rng(1)
    t = np.arange(160)
    x = np.sin(t / 9)[None, :, None] + 0.2 * rng.normal(size=(8, 160, 2))
    x[rng.random(x.shape) < 0.05] = np.nan
    path = tmp_path / "toy.npy"
    np.save(path, x.astype(np.float32))
    return path


def _flags() -> list[str]:
    names = {"max_train_length": "--max-train-length", "hidden_dims": "--hidden-dims", "repr_dims": "--repr-dims",
             "batch_size": "--batch-size"}  # fmt: skip
    return [a for k, v in SETTINGS.items() for a in (names.get(k, f"--{k}"), str(v))]


def _weights(state: dict) -> dict[str, torch.Tensor]:
    out = {f"encoder.{k}": v for k, v in state["encoder"].items()}
    out.update({f"heads.{k}": v for k, v in state["heads"].items()})
    out.update({f"averaged.{k}": v for k, v in state["averaged"].items() if k.startswith("module.")})
    return out


def _reference(data, shards: int, batch_size: int) -> dict[str, torch.Tensor]:
    cfg = TrainConfig(**{**SETTINGS, "batch_size": batch_size})
    trainer = Trainer(cfg, input_dims=data.x.shape[-1], shards=shards)
    trainer.fit(data.x, iterations=STEPS, progress=False)
    return _weights(trainer.state_dict())


def test_torchrun_two_ranks_match_one_process_with_the_same_global_batch_and_seed(toy, tmp_path):
    out = tmp_path / "ddp.pt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "trep_edge.cli",
           "train", str(toy), "--out", str(out), "--iterations", str(STEPS), "--device", "cpu", "--no-progress",
           *_flags()]  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    summary = json.loads(run.stdout[run.stdout.index("{") :])  # rank 0 alone prints
    assert summary["processes"] == 2 and summary["steps"] == STEPS and run.stdout.count('"checkpoint"') == 1
    ddp = _weights(read_checkpoint(out))

    data = load_training_data(str(toy))
    reference = _reference(data, shards=2, batch_size=SETTINGS["batch_size"])
    assert ddp.keys() == reference.keys()
    for name, value in reference.items():
        torch.testing.assert_close(ddp[name], value, rtol=1e-4, atol=1e-5, msg=name)
    # Not a vacuous match: the same global batch as ONE contrastive batch (negatives across shards) trains otherwise.
    pooled = _reference(data, shards=1, batch_size=2 * SETTINGS["batch_size"])
    assert max(float((pooled[k] - reference[k]).abs().max()) for k in reference) > 1e-3
