"""T-Rep pretext losses (TREP.md §3), each a pure function of tensors, and the hierarchical combination.

Views ``z1, z2`` are the two contexts' representations of the overlap, ``[B, T, F]``; ``tau`` is the (shared)
time-embedding of the overlap, ``[B, T, K]``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from trep_edge.training.heads import PretextHeads


@dataclass(frozen=True)
class LossWeights:
    """α for instance contrast, temporal contrast, JSD prediction and forecasting; must sum to 1."""

    instance: float = 0.25
    temporal: float = 0.25
    divergence: float = 0.25
    forecast: float = 0.25

    def __post_init__(self) -> None:
        values = (self.instance, self.temporal, self.divergence, self.forecast)
        if any(v < 0 for v in values) or abs(sum(values) - 1.0) > 1e-6:
            raise ValueError(f"loss weights must be non-negative and sum to 1, got {values}")


def _paired_contrast(z: torch.Tensor) -> torch.Tensor:
    """Contrast along axis 1 of ``z [G, 2N, F]``: row k's positive is row (k+N) mod 2N, the rest negatives."""
    n2 = z.shape[1]
    n = n2 // 2
    sim = z @ z.transpose(1, 2)
    eye = torch.eye(n2, dtype=torch.bool, device=z.device)
    log_p = F.log_softmax(sim.masked_fill(eye, float("-inf")), dim=-1)
    partner = (torch.arange(n2, device=z.device) + n) % n2
    return -log_p[:, torch.arange(n2, device=z.device), partner].mean()


def instance_contrast(z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
    """At each t, z1[i,t] vs z2[i,t] positive, every other instance of both views negative (0 when B = 1)."""
    if z1.shape[0] < 2:
        return z1.new_zeros(())
    return _paired_contrast(torch.cat([z1, z2], dim=0).transpose(0, 1))


def temporal_contrast(z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
    """For each instance, z1[i,t] vs z2[i,t] positive, other timesteps of both views negative (0 when T = 1)."""
    if z1.shape[1] < 2:
        return z1.new_zeros(())
    return _paired_contrast(torch.cat([z1, z2], dim=1))


def jensen_shannon(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """JSD(p‖q) along the last axis, natural log (bounded by ln 2); 0·log 0 counts as 0."""
    m = 0.5 * (p + q)
    return 0.5 * torch.xlogy(p, p / m).sum(-1) + 0.5 * torch.xlogy(q, q / m).sum(-1)


def sample_distinct_pairs(batch: int, length: int, count: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Draw ``count`` pairs (i, t), (j, t') with t ≠ t' guaranteed (length ≥ 2)."""
    i = torch.randint(batch, (count,), generator=gen)
    j = torch.randint(batch, (count,), generator=gen)
    t = torch.randint(length, (count,), generator=gen)
    t2 = (t + torch.randint(1, length, (count,), generator=gen)) % length
    return i, t, j, t2


def divergence_loss(
    z1: torch.Tensor,
    z2: torch.Tensor,
    tau: torch.Tensor,
    head: nn.Module,
    pairs: int,
    gen: torch.Generator,
    detach_target: bool = False,
) -> torch.Tensor:
    """MSE between ``G1(z1[i,t] − z2[j,t'])`` and ``JSD(τ[i,t] ‖ τ[j,t'])`` over sampled pairs with t ≠ t'.

    With ``detach_target`` false the time-embedding module also learns from this task, which is how h_ψ gets a
    training signal of its own beyond being an input to the encoder.
    """
    if z1.shape[1] < 2:
        return z1.new_zeros(())
    i, t, j, t2 = (a.to(z1.device) for a in sample_distinct_pairs(z1.shape[0], z1.shape[1], pairs, gen))
    target = jensen_shannon(tau[i, t].float(), tau[j, t2].float())
    if detach_target:
        target = target.detach()
    pred = head(z1[i, t] - z2[j, t2]).squeeze(-1)
    return F.mse_loss(pred.float(), target)


def forecast_loss(
    views: tuple[torch.Tensor, torch.Tensor],
    tau: torch.Tensor,
    head: nn.Module,
    pairs: int,
    delta_max: int,
    gen: torch.Generator,
    detach_target: bool = False,
) -> torch.Tensor:
    """MSE of ``G2([z^{c1}[i,t], τ[i,t+Δ]])`` against ``z^{c2}[i,t+Δ]``; Δ keeps t+Δ inside the overlap.

    The contexts c1, c2 are drawn independently per pair from the two views, so the head must forecast across
    contexts as well as within one.
    """
    z1, z2 = views
    batch, length = z1.shape[:2]
    if length < 2:
        return z1.new_zeros(())
    i = torch.randint(batch, (pairs,), generator=gen)
    t = torch.randint(length, (pairs,), generator=gen)
    lo = torch.clamp(-t, min=-delta_max)
    hi = torch.clamp(length - 1 - t, max=delta_max)
    delta = lo + (torch.rand(pairs, generator=gen) * (hi - lo + 1)).long().clamp(max=hi - lo)
    c1 = torch.randint(2, (pairs,), generator=gen).bool()
    c2 = torch.randint(2, (pairs,), generator=gen).bool()
    i, t, target_t, c1, c2 = (a.to(z1.device) for a in (i, t, t + delta, c1, c2))
    source = torch.where(c1.unsqueeze(-1), z2[i, t], z1[i, t])
    target = torch.where(c2.unsqueeze(-1), z2[i, target_t], z1[i, target_t])
    if detach_target:
        target = target.detach()
    pred = head(torch.cat([source, tau[i, target_t].to(source.dtype)], dim=-1))
    return F.mse_loss(pred.float(), target.float())


def pool_time(a: torch.Tensor) -> torch.Tensor:
    """Max-pool ``[B, T, D]`` by 2 along time (a trailing odd step is dropped, as max_pool1d does)."""
    return F.max_pool1d(a.transpose(1, 2), kernel_size=2).transpose(1, 2)


def hierarchical_loss(
    z1: torch.Tensor,
    z2: torch.Tensor,
    tau: torch.Tensor | None,
    heads: PretextHeads | None,
    weights: LossWeights,
    gen: torch.Generator,
    delta_max: int = 10,
    max_pairs: int = 1024,
    detach_targets: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Weighted sum of the four tasks at every scale (max-pooling by 2), averaged over scales.

    At length 1 only instance contrast applies. Pooled τ is renormalised to sum to 1. Returns the loss and
    each task's mean over the scales where it applied (for the progress bar).
    """
    total = z1.new_zeros(())
    parts = {"instance": 0.0, "temporal": 0.0, "divergence": 0.0, "forecast": 0.0}
    counts = dict.fromkeys(parts, 0)
    levels = 0
    use_tau = tau is not None and heads is not None and (weights.divergence > 0 or weights.forecast > 0)
    while True:
        length = z1.shape[1]
        terms: dict[str, torch.Tensor] = {}
        if weights.instance > 0:
            terms["instance"] = instance_contrast(z1, z2)
        if length > 1:
            if weights.temporal > 0:
                terms["temporal"] = temporal_contrast(z1, z2)
            if use_tau:
                pairs = min(max_pairs, z1.shape[0] * length)
                if weights.divergence > 0:
                    terms["divergence"] = divergence_loss(
                        z1, z2, tau, heads.divergence, pairs, gen, detach_targets
                    )
                if weights.forecast > 0:
                    terms["forecast"] = forecast_loss(
                        (z1, z2), tau, heads.forecast, pairs, delta_max, gen, detach_targets
                    )
        for name, value in terms.items():
            total = total + getattr(weights, name) * value
            parts[name] += float(value.detach())
            counts[name] += 1
        levels += 1
        if length <= 1:
            break
        z1, z2 = pool_time(z1), pool_time(z2)
        if use_tau:
            pooled = pool_time(tau)
            tau = pooled / pooled.sum(dim=-1, keepdim=True)
    return total / levels, {k: parts[k] / counts[k] for k in parts if counts[k]}
