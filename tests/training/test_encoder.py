"""Encoder behaviour: NaN handling, masking, time-embeddings."""
import numpy as np
import pytest
import torch

from trep_edge.training.encoder import EncoderConfig, TRepEncoder
from trep_edge.training.time_embedding import build_time_embedding


def _encoder(kind="time2vec"):
    torch.manual_seed(0)
    return TRepEncoder(EncoderConfig(input_dims=3, repr_dims=8, hidden_dims=16, depth=3, time_embedding=kind)).eval()


def test_forward_leaves_the_callers_nan_array_unchanged():
    x = np.random.default_rng(0).normal(size=(2, 20, 3)).astype(np.float32)
    x[0, 4, 1] = np.nan
    xt = torch.from_numpy(x)
    before = xt.clone()
    _encoder()(xt, torch.ones(2, 20, dtype=torch.bool), torch.arange(20.0).expand(2, 20))
    assert torch.equal(torch.isnan(xt), torch.isnan(before))
    assert torch.equal(torch.nan_to_num(xt), torch.nan_to_num(before))


@pytest.mark.parametrize("kind", ["time2vec", "mlp", "rbf", "none"])
def test_nan_step_and_masked_step_give_the_same_representation(kind):
    enc = _encoder(kind)
    x = torch.randn(1, 30, 3)
    t = torch.arange(30.0).unsqueeze(0)
    x_nan = x.clone()
    x_nan[0, 12, 0] = float("nan")
    mask = torch.ones(1, 30, dtype=torch.bool)
    masked = mask.clone()
    masked[0, 12] = False
    z_nan = enc(x_nan, mask, t)
    z_mask = enc(x, masked, t)
    z_plain = enc(x, mask, t)
    assert torch.isfinite(z_nan).all()
    assert torch.allclose(z_nan, z_mask, atol=1e-6)
    assert not torch.allclose(z_plain, z_mask, atol=1e-4)


@pytest.mark.parametrize("kind", ["time2vec", "mlp", "rbf"])
def test_time_embedding_rows_are_positive_and_sum_to_one(kind):
    torch.manual_seed(0)
    module = build_time_embedding(kind, 16, time_scale=1000.0)
    t = torch.tensor([[0.0, 1.0, 50.0, 999.0, 1e5]])
    tau = module(t)
    assert tau.shape == (1, 5, 16)
    assert (tau > 0).all()
    assert torch.allclose(tau.sum(-1), torch.ones(1, 5), atol=1e-6)


def test_rbf_is_a_radial_basis_centred_on_its_centres():
    module = build_time_embedding("rbf", 4, time_scale=30.0)
    raw_peak = []
    for centre in module.centres.detach():
        tau = module(centre.view(1, 1))
        raw_peak.append(int(tau.argmax()))
    assert raw_peak == [0, 1, 2, 3]


def test_masked_step_still_gets_its_time_embedding():
    enc = _encoder()
    x = torch.randn(1, 10, 3)
    masked = torch.ones(1, 10, dtype=torch.bool)
    masked[0, 5] = False
    t1 = torch.arange(10.0).unsqueeze(0)
    t2 = t1.clone()
    t2[0, 5] = 500.0
    assert not torch.allclose(enc(x, masked, t1)[0, 5], enc(x, masked, t2)[0, 5])


def test_unknown_time_embedding_is_refused():
    with pytest.raises(ValueError, match="time2vec"):
        build_time_embedding("gaussian", 8, 10.0)
