"""Trainer: every part learns, checkpoints resume exactly, devices fall back cleanly."""
import numpy as np
import pytest
import torch

from trep_edge.training.config import TrainConfig
from trep_edge.training.crops import draw_crops, make_sections
from trep_edge.training.device import amp_enabled, select_device
from trep_edge.training.trainer import Trainer, read_checkpoint

SMALL = dict(repr_dims=8, hidden_dims=16, depth=2, time_embedding_dims=8, batch_size=4, max_train_length=64)


def _data(seed=0, n=10, length=50):
    rng = np.random.default_rng(seed)
    x = np.sin(np.linspace(0, 20, length))[None, :, None] + 0.1 * rng.normal(size=(n, length, 2))
    x = x.astype(np.float32)
    x[0, 10:15, 0] = np.nan
    return x


def test_one_step_updates_heads_time_embedding_and_encoder():
    trainer = Trainer(TrainConfig(**SMALL, average_weights=False), input_dims=2)
    before = {
        "G1": [p.detach().clone() for p in trainer.heads.divergence.parameters()],
        "G2": [p.detach().clone() for p in trainer.heads.forecast.parameters()],
        "time_embedding": [p.detach().clone() for p in trainer.encoder.time_embedding.parameters()],
        "tcn": [p.detach().clone() for p in trainer.encoder.blocks.parameters()],
        "projection": [p.detach().clone() for p in trainer.encoder.projection.parameters()],
    }
    after = {
        "G1": trainer.heads.divergence.parameters,
        "G2": trainer.heads.forecast.parameters,
        "time_embedding": trainer.encoder.time_embedding.parameters,
        "tcn": trainer.encoder.blocks.parameters,
        "projection": trainer.encoder.projection.parameters,
    }
    trainer.fit(_data(), iterations=1, progress=False)
    for name, params in before.items():
        changed = any(not torch.equal(a, b.detach()) for a, b in zip(params, after[name]()))
        assert changed, f"{name} did not change after one optimiser step"


def test_resume_reproduces_the_uninterrupted_run(tmp_path):
    cfg = dict(**SMALL, seed=7)
    full = Trainer(TrainConfig(**cfg), input_dims=2)
    full_losses = [r["loss"] for r in full.fit(_data(), iterations=6, progress=False)]

    first = Trainer(TrainConfig(**cfg), input_dims=2)
    first.fit(_data(), iterations=3, progress=False)
    first.save(tmp_path / "ckpt.pt")
    resumed = Trainer.load(tmp_path / "ckpt.pt")
    resumed.total_steps = 6
    later = [r["loss"] for r in resumed.fit(_data(), progress=False)]
    assert later == full_losses[3:]


def test_checkpoint_saved_mid_run_resumes_to_the_planned_total(tmp_path):
    trainer = Trainer(TrainConfig(**SMALL, checkpoint_every=2), input_dims=2)
    trainer.fit(_data(), iterations=5, checkpoint=tmp_path / "c.pt", progress=False)
    state = read_checkpoint(tmp_path / "c.pt")
    assert state["step"] == 5 and state["total_steps"] == 5


def test_foreign_file_is_refused_as_checkpoint(tmp_path):
    bad = tmp_path / "model.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a readable trep-edge checkpoint"):
        read_checkpoint(bad)
    torch.save({"weights": torch.zeros(1)}, bad)
    with pytest.raises(ValueError, match="expected format"):
        read_checkpoint(bad)


def test_ts2vec_ablation_trains_without_time_embedding():
    cfg = TrainConfig(**{**SMALL, "time_embedding": "none"}, weights=(0.5, 0.5, 0.0, 0.0))
    records = Trainer(cfg, input_dims=2).fit(_data(), iterations=2, progress=False)
    assert set(records[-1]) == {"step", "loss", "instance", "temporal"}


def test_time_embedding_none_with_tau_weights_is_refused():
    with pytest.raises(ValueError, match="divergence and forecast weights of 0"):
        TrainConfig(time_embedding="none")


def test_device_auto_falls_back_to_cpu_and_amp_is_dropped_there(caplog):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the fallback path is what is tested here")
    assert select_device("auto").type == "cpu"
    with pytest.raises(ValueError, match="no CUDA device"):
        select_device("cuda")
    with caplog.at_level("WARNING"):
        assert amp_enabled(torch.device("cpu"), True) is False
    assert "needs CUDA" in caplog.text
    trainer = Trainer(TrainConfig(**SMALL, amp=True), input_dims=2)
    assert trainer.amp is False
    assert trainer.fit(_data(), iterations=1, progress=False)[-1]["loss"] > 0


def test_sections_cut_long_series_and_record_their_start():
    x = np.arange(2 * 10 * 1, dtype=np.float32).reshape(2, 10, 1)
    sec = make_sections(x, 4)
    assert sec.x.shape == (6, 4, 1)
    assert sec.start.tolist() == [0, 4, 8, 0, 4, 8]
    assert np.isnan(sec.x[2, 2:]).all()


def test_crops_overlap_and_stay_inside_the_series():
    rng = np.random.default_rng(0)
    for _ in range(200):
        crops = draw_crops(rng, batch=5, length=30)
        assert crops.pos1.min() >= 0 and crops.pos2.max() < 30
        np.testing.assert_array_equal(crops.pos1[:, -crops.overlap :], crops.pos2[:, : crops.overlap])


def test_training_convolutions_run_as_conv2d_with_the_conv1d_result_and_gradients():
    from trep_edge.training.trainer import conv2d_on_cpu

    torch.manual_seed(0)
    trainer = Trainer(TrainConfig(**SMALL, average_weights=False), input_dims=2)
    encoder = trainer.encoder.eval()  # no dropout: the two runs must see the same network
    x = torch.randn(3, 40, 2)
    mask = torch.ones(3, 40, dtype=torch.bool)
    t = torch.arange(40.0).repeat(3, 1)

    def out_and_grads():
        encoder.zero_grad()
        z = encoder(x, mask, t)
        z.square().sum().backward()
        return z.detach(), [p.grad.clone() for p in encoder.parameters() if p.grad is not None]

    plain_z, plain_g = out_and_grads()
    with conv2d_on_cpu(encoder):
        fast_z, fast_g = out_and_grads()
    torch.testing.assert_close(fast_z, plain_z, rtol=1e-5, atol=1e-5)
    for a, b in zip(fast_g, plain_g):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    # outside the step the modules are plain Conv1d again (what checkpoints and the ONNX export see)
    assert not any("_conv_forward" in m.__dict__ for m in encoder.modules())


def test_thread_count_changes_results_only_by_float_rounding():
    losses = []
    for threads in (1, 2):
        previous = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            trainer = Trainer(TrainConfig(**SMALL, average_weights=False), input_dims=2)
            losses.append([r["loss"] for r in trainer.fit(_data(), iterations=3, progress=False)])
        finally:
            torch.set_num_threads(previous)
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-4)


def test_one_section_per_batch_is_warned_about(caplog):
    trainer = Trainer(TrainConfig(**SMALL, average_weights=False), input_dims=2)
    with caplog.at_level("WARNING"):
        trainer.fit(_data(n=1, length=50), iterations=1, progress=False)
    # 50 steps cut in sections would leave crops too short to learn from: more data is the advice, not a cut.
    assert "instance-contrast loss is 0" in caplog.text and "train on a longer recording" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        Trainer(TrainConfig(**{**SMALL, "max_train_length": 3000}, average_weights=False),
                input_dims=2).fit(_data(n=1, length=600), iterations=1, progress=False)  # fmt: skip
    assert "lower --max-train-length (e.g. to 75)" in caplog.text
