"""The last_step graph: which positions it computes, and that it equals the full graph's last step."""
import numpy as np
import onnxruntime as ort
import pytest
import torch

from trep_edge.training.encoder import EncoderConfig, TRepEncoder
from trep_edge.training.pruned_graph import (
    LastStepEncoder,
    PrunedPairEncoder,
    conv_positions,
    last_step_graph,
    masked_plan,
    position_plan,
    pruned_pair_graph,
)

SMALL = dict(repr_dims=8, hidden_dims=12, depth=5, time_embedding_dims=6)


def _encoder(time_embedding: str, seed: int = 0, **overrides) -> TRepEncoder:
    torch.manual_seed(seed)
    return TRepEncoder(EncoderConfig(input_dims=2, time_embedding=time_embedding, **{**SMALL, **overrides})).eval()


def _inputs(batch: int, window: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random values with NaNs, random keep-masks, the masked-last-step variant in the second half of the rows."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, window, 2, generator=g)
    x[torch.rand(x.shape, generator=g) < 0.1] = float("nan")
    mask = torch.rand(batch, window, generator=g) > 0.2
    mask[:, -1] = True
    mask[batch // 2 :, -1] = False
    t = torch.arange(window, dtype=torch.float32) + torch.randint(0, 500, (batch, 1), generator=g)
    return x, mask, t


def test_paper_size_window_201_computes_about_7x_fewer_conv_positions():
    encoder = TRepEncoder(EncoderConfig(input_dims=1, depth=10))
    pruned, full = conv_positions(encoder, 201)
    assert full == 2 * 11 * 201
    assert (pruned, full) == (616, 4422) and full / pruned > 7
    # Dilations 256..1024 reach only outside the window from its last step: those blocks compute one position.
    assert [len(p.outputs) for p in position_plan(encoder, 201)[-3:]] == [1, 1, 1]
    # Masking the last step changes 43 of those 616 positions: all the pair graph computes twice.
    assert sum(len(p.middle) + len(p.outputs) for p in masked_plan(encoder, 201)) == 43


@pytest.mark.parametrize("time_embedding", ["time2vec", "mlp", "rbf", "none"])
@pytest.mark.parametrize("window", [2, 23, 64])
def test_torch_last_step_equals_full_graph_last_step(time_embedding, window):
    encoder = _encoder(time_embedding)
    pruned = LastStepEncoder(encoder, window).eval()
    for batch in (1, 6):
        x, mask, t = _inputs(batch, window, seed=batch)
        with torch.no_grad():
            expected = encoder(x, mask, t)[:, -1]
            got = pruned(x, mask, t)
        assert got.shape == expected.shape
        assert torch.isfinite(got).all()
        assert float((got - expected).abs().max()) <= 1e-5


def test_causal_encoder_last_step_equals_full_graph_last_step():
    from trep_edge.training.encoder import bounded_dilations, receptive_field

    dilations = bounded_dilations(SMALL["depth"] + 1, 30)
    encoder = _encoder("time2vec", causal=True, dilations=dilations)
    pruned = LastStepEncoder(encoder, 41).eval()
    # Causal taps only look back: the first block reads exactly the receptive field ending at the last step.
    first = position_plan(encoder, 41)[0].inputs
    assert (first[0], first[-1]) == (41 - receptive_field(dilations), 40)
    x, mask, t = _inputs(4, 41)
    masked = mask.clone()
    masked[:, -1] = False
    with torch.no_grad():
        full = encoder(x, mask, t)[:, -1]
        assert float((pruned(x, mask, t) - full).abs().max()) <= 1e-5
        zu, zm = PrunedPairEncoder(encoder, 41).eval()(x, mask, t)
        assert float((zu - full).abs().max()) <= 1e-5
        assert float((zm - encoder(x, masked, t)[:, -1]).abs().max()) <= 1e-5


def test_a_nan_last_step_equals_a_masked_last_step():
    pruned = LastStepEncoder(_encoder("time2vec"), 16).eval()
    x, mask, t = _inputs(2, 16)
    mask[:] = True
    masked = mask.clone()
    masked[:, -1] = False
    missing = x.clone()
    missing[:, -1, 0] = float("nan")
    with torch.no_grad():
        assert torch.allclose(pruned(missing, mask, t), pruned(x, masked, t), atol=1e-6)
        assert not torch.allclose(pruned(x, mask, t), pruned(x, masked, t), atol=1e-6)


@pytest.mark.parametrize("time_embedding", ["time2vec", "mlp", "rbf", "none"])
@pytest.mark.parametrize("window", [2, 23, 64])
def test_pair_equals_full_graph_unmasked_and_with_the_last_step_masked(time_embedding, window):
    encoder = _encoder(time_embedding)
    pair = PrunedPairEncoder(encoder, window).eval()
    x, mask, t = _inputs(6, window, seed=window)
    mask[:, -1] = True
    x[1, -1] = float("nan")  # a missing last reading: both variants equal the masked one
    masked = mask.clone()
    masked[:, -1] = False
    with torch.no_grad():
        zu, zm = pair(x, mask, t)
        assert float((zu - encoder(x, mask, t)[:, -1]).abs().max()) <= 1e-5
        assert float((zm - encoder(x, masked, t)[:, -1]).abs().max()) <= 1e-5
    assert float((zu - zm)[0].abs().max()) > 1e-4 and float((zu - zm)[1].abs().max()) <= 1e-6


def test_wrong_window_length_is_refused():
    for graph in (LastStepEncoder, PrunedPairEncoder):
        with pytest.raises(ValueError, match="windows of 16 steps, got 15"):
            graph(_encoder("none"), 16)(*_inputs(1, 15))


@pytest.mark.parametrize("time_embedding", ["time2vec", "mlp", "rbf", "none"])
def test_onnx_pair_and_last_step_graphs_equal_torch_full_graph(time_embedding):
    # One export per embedding, the last-step graph cut out of the pair graph as export builds them.
    window = 40
    encoder = _encoder(time_embedding, seed=3, depth=3)
    pair_bytes = pruned_pair_graph(encoder, window)
    pair = ort.InferenceSession(pair_bytes, providers=["CPUExecutionProvider"])
    last = ort.InferenceSession(last_step_graph(encoder, window, {"pruned_pair": pair_bytes}),
                                providers=["CPUExecutionProvider"])  # fmt: skip
    assert [i.name for i in last.get_inputs()] == ["x", "mask", "t"]
    assert [o.name for o in pair.get_outputs()] == ["z_unmasked", "z_masked"]
    for batch in (1, 5, 32):
        x, mask, t = _inputs(batch, window, seed=batch)
        with torch.no_grad():
            expected = encoder(x, mask, t)[:, -1].numpy()
        got = last.run(["z_last"], {"x": x.numpy(), "mask": mask.numpy(), "t": t.numpy()})[0]
        assert got.shape == (batch, SMALL["repr_dims"])
        assert float(np.max(np.abs(got - expected))) <= 1e-5
    for batch in (1, 7):
        x, mask, t = _inputs(batch, window, seed=batch)
        mask[:, -1] = True
        masked = mask.clone()
        masked[:, -1] = False
        zu, zm = pair.run(None, {"x": x.numpy(), "mask": mask.numpy(), "t": t.numpy()})
        with torch.no_grad():
            assert float(np.max(np.abs(zu - encoder(x, mask, t)[:, -1].numpy()))) <= 1e-5
            assert float(np.max(np.abs(zm - encoder(x, masked, t)[:, -1].numpy()))) <= 1e-5
        assert float(np.max(np.abs(zu - zm))) > 1e-4
