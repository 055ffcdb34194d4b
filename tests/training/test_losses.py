"""The pretext losses against independent computations."""
import math

import numpy as np
import pytest
import torch
from scipy.spatial.distance import jensenshannon

from trep_edge.training.heads import PretextHeads
from trep_edge.training.losses import (
    LossWeights,
    divergence_loss,
    forecast_loss,
    hierarchical_loss,
    instance_contrast,
    jensen_shannon,
    sample_distinct_pairs,
    temporal_contrast,
)


def test_jsd_matches_scipy_on_random_simplex_vectors():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(8), size=50)
    q = rng.dirichlet(np.ones(8), size=50)
    ours = jensen_shannon(torch.tensor(p), torch.tensor(q)).numpy()
    # scipy returns the JS *distance* (the square root of the divergence).
    ref = jensenshannon(p, q, axis=1) ** 2
    np.testing.assert_allclose(ours, ref, rtol=1e-10, atol=1e-12)


def test_jsd_is_finite_with_zero_entries():
    p = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    q = torch.tensor([[0.0, 1.0], [0.5, 0.5]])
    out = jensen_shannon(p, q)
    assert torch.allclose(out, torch.tensor([math.log(2), 0.0]))


def _hand_contrast(anchor, candidates, positive):
    logits = np.array([anchor @ c for c in candidates])
    return -(logits[positive] - np.log(np.exp(logits).sum()))


def _expected_paired(rows):
    """Mean cross-entropy of each row against every other, its positive being the row half the list away."""
    rows = [r.numpy().astype(np.float64) for r in rows]
    half, losses = len(rows) // 2, []
    for k in range(len(rows)):
        others = [r for j, r in enumerate(rows) if j != k]
        partner = (k + half) % len(rows)
        losses.append(_hand_contrast(rows[k], others, partner if partner < k else partner - 1))
    return np.mean(losses)


def test_instance_contrast_equals_hand_computation():
    z1 = torch.tensor([[[1.0, 0.0]], [[0.0, 2.0]]])  # B=2, T=1, F=2
    z2 = torch.tensor([[[0.5, 0.5]], [[1.0, -1.0]]])
    expected = _expected_paired([z1[0, 0], z1[1, 0], z2[0, 0], z2[1, 0]])
    assert instance_contrast(z1, z2).item() == pytest.approx(expected, rel=1e-6)


def test_temporal_contrast_equals_hand_computation():
    z1 = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # B=1, T=2, F=2
    z2 = torch.tensor([[[2.0, 1.0], [0.5, -1.0]]])
    expected = _expected_paired([z1[0, 0], z1[0, 1], z2[0, 0], z2[0, 1]])
    assert temporal_contrast(z1, z2).item() == pytest.approx(expected, rel=1e-6)


def test_contrasts_are_zero_and_finite_in_degenerate_shapes():
    z = torch.randn(1, 1, 4)
    assert instance_contrast(z, z).item() == 0.0
    assert temporal_contrast(z, z).item() == 0.0
    assert torch.isfinite(instance_contrast(torch.randn(3, 1, 4), torch.randn(3, 1, 4)))
    assert torch.isfinite(temporal_contrast(torch.randn(1, 5, 4), torch.randn(1, 5, 4)))


def test_divergence_pairs_never_share_a_timestep():
    gen = torch.Generator().manual_seed(0)
    _, t, _, t2 = sample_distinct_pairs(batch=4, length=2, count=10_000, gen=gen)
    assert (t != t2).all()


def test_divergence_loss_target_is_jsd_of_the_sampled_taus():
    gen_a = torch.Generator().manual_seed(3)
    gen_b = torch.Generator().manual_seed(3)
    tau = torch.distributions.Dirichlet(torch.ones(6)).sample((2, 5))
    z = torch.randn(2, 5, 4)

    class Zero(torch.nn.Module):
        def forward(self, v):
            return torch.zeros(v.shape[0], 1)

    loss = divergence_loss(z, z, tau, Zero(), 7, gen_a)
    i, t, j, t2 = sample_distinct_pairs(2, 5, 7, gen_b)
    expected = np.mean([
        (jensenshannon(tau[a, b].numpy(), tau[c, d].numpy()) ** 2) ** 2 for a, b, c, d in zip(i, t, j, t2)
    ])
    assert loss.item() == pytest.approx(expected, rel=1e-4)


def test_forecast_loss_targets_stay_inside_the_overlap():
    # z equals its time index and τ is one-hot of it, so the head sees (t, t+Δ): a wrapped-around target
    # (t+Δ < 0 read as the window's end) would show up as a jump larger than delta_max.
    length, delta_max = 6, 4
    z = torch.arange(length, dtype=torch.float32).view(1, length, 1).expand(3, length, 1).contiguous()
    tau = torch.eye(length).unsqueeze(0).expand(3, length, length)
    seen = []

    class Oracle(torch.nn.Module):
        def forward(self, v):
            target = v[:, 1:].argmax(dim=1, keepdim=True).float()
            seen.append(torch.cat([v[:, :1], target], dim=1))
            return target

    gen = torch.Generator().manual_seed(0)
    assert forecast_loss((z, z), tau, Oracle(), 2000, delta_max, gen).item() == 0.0
    source, target = seen[0][:, 0], seen[0][:, 1]
    assert (target - source).abs().max().item() <= delta_max
    assert (target - source).abs().max().item() == delta_max  # the full range is reached


@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (4, 1), (3, 9)])
def test_hierarchical_loss_is_finite_at_edge_shapes(shape):
    b, t = shape
    heads = PretextHeads(8, 5)
    z1, z2 = torch.randn(b, t, 8), torch.randn(b, t, 8)
    tau = torch.softmax(torch.randn(b, t, 5), dim=-1)
    loss, parts = hierarchical_loss(z1, z2, tau, heads, LossWeights(), torch.Generator().manual_seed(0))
    assert torch.isfinite(loss)
    assert all(math.isfinite(v) for v in parts.values())


def test_loss_weights_must_sum_to_one():
    with pytest.raises(ValueError, match="sum to 1"):
        LossWeights(0.5, 0.5, 0.5, 0.0)
