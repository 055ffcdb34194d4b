"""The causal encoder option and its step graph (docs/causal.md)."""
import numpy as np
import onnxruntime as ort
import pytest
import torch

from trep_edge.runtime.core.step_engine import StepEngine, StepGraph
from trep_edge.training.config import TrainConfig
from trep_edge.training.encoder import EncoderConfig, TRepEncoder, bounded_dilations, receptive_field
from trep_edge.training.step_graph import StepEncoder, step_graph
from trep_edge.runtime.core.model_card import ModelCard

WINDOW = 40


def _causal(window=WINDOW):
    torch.manual_seed(0)
    cfg = EncoderConfig(input_dims=3, repr_dims=8, hidden_dims=16, depth=3,
                        time_embedding_dims=8, time_scale=24.0, causal=True, dilations=bounded_dilations(4, window))
    return TRepEncoder(cfg).eval()


def test_paper_size_schedule_fits_the_201_step_window():
    dilations = bounded_dilations(11, 201)
    assert dilations == (1, 2, 4, 8, 16, 1, 2, 4, 8, 1, 2)
    assert receptive_field(dilations) == 197
    # The paper's 2^i schedule reaches 1 + 4 (2^11 - 1) steps: far beyond any window.
    assert receptive_field([2**i for i in range(11)]) == 8189


def test_a_window_too_short_for_the_blocks_is_refused():
    with pytest.raises(ValueError, match="max_receptive_field"):
        bounded_dilations(11, 40)


def test_causal_outputs_do_not_depend_on_later_steps():
    enc = _causal()
    x = torch.randn(1, 60, 3)
    t = (torch.arange(60.0) % 24).unsqueeze(0)
    mask = torch.ones(1, 60, dtype=torch.bool)
    later = x.clone()
    later[0, 30:] = torch.randn(30, 3)
    with torch.no_grad():
        assert torch.equal(enc(x, mask, t)[0, :30], enc(later, mask, t)[0, :30])
        assert not torch.allclose(enc(x, mask, t)[0, 30:], enc(later, mask, t)[0, 30:])


def test_causal_training_config_needs_a_periodic_time_index():
    with pytest.raises(ValueError, match="periodic:P"):
        TrainConfig(causal=True)
    cfg = TrainConfig(causal=True, time_index="periodic:24")
    assert cfg.dilations == [1, 2, 4, 8, 16, 1, 2, 4, 8, 1, 2]
    assert TrainConfig.from_dict(cfg.to_dict()).dilations == cfg.dilations
    assert TrainConfig(causal=True, time_embedding="none", weights=(0.5, 0.5, 0, 0)).causal


def _window_pairs(enc, x, t):
    """The full encoder's last-step pair (unmasked, last step masked) on windows ``x [S, W, C]``."""
    mask = torch.ones(x.shape[:2], dtype=torch.bool)
    masked = mask.clone()
    masked[:, -1] = False
    with torch.no_grad():
        return enc(x, mask, t)[:, -1].numpy(), enc(x, masked, t)[:, -1].numpy()


def test_onnx_step_graph_fed_a_window_equals_the_full_encoder():
    enc = _causal()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, WINDOW, 3)).astype(np.float32)
    x[rng.random(x.shape) < 0.05] = np.nan
    x[0, :-3] = np.nan  # a new stream: everything before its first steps is missing
    x[1, -1, 0] = np.nan  # an incomplete last step
    ends = np.array([100, 101, 5, 77])  # absolute index of each window's last step
    t = ((ends[:, None] - WINDOW + 1 + np.arange(WINDOW)) % 24).astype(np.float32)
    zu, zm = _window_pairs(enc, torch.from_numpy(x), torch.from_numpy(t))

    graph = StepGraph(ort.InferenceSession(step_graph(enc, WINDOW)))
    card = ModelCard("c", ["a", "b", "c"], {"mean": [0.0] * 3, "std": [1.0] * 3}, 0, "periodic:24", "time2vec",
                     WINDOW, 8, 3)
    steps = StepEngine(graph, card)
    steps.add_streams(4)
    idx = np.arange(4)
    steps.rebuild(idx, x[:, :-1], ends - 1)
    su, sm = steps.advance(idx, x[:, -1], ends)
    np.testing.assert_allclose(su, zu, atol=1e-5)
    np.testing.assert_allclose(sm, zm, atol=1e-5)
    assert not np.allclose(su[0], sm[0], atol=1e-4)  # the masked variant really masks the reading


def test_step_encoder_pushes_the_unmasked_activations():
    enc = _causal()
    step = StepEncoder(enc)
    layout = step.layout()
    taps = [torch.zeros(2, layout["kernel_size"] - 1, w) for w in layout["widths"]]
    x, t = torch.randn(2, 3), torch.tensor([1.0, 2.0])
    with torch.no_grad():
        out = step(x, t, *taps)
        first_input = torch.cat([enc.projection(x), enc.embed_time(t.unsqueeze(-1))[:, 0]], dim=-1)
    assert [tuple(p.shape) for p in out[2:]] == [(2, w) for w in layout["widths"]]
    # The first convolution remembers GELU of the unmasked input (the masked copy exists only for the score).
    torch.testing.assert_close(out[2], torch.nn.functional.gelu(first_input))


def test_no_step_graph_for_a_non_causal_encoder_or_a_window_shorter_than_the_reach():
    torch.manual_seed(0)
    plain = TRepEncoder(EncoderConfig(input_dims=3, repr_dims=8, hidden_dims=16, depth=3))
    assert step_graph(plain, 201) is None
    with pytest.raises(ValueError, match="causal"):
        StepEncoder(plain)
    assert step_graph(_causal(window=WINDOW), WINDOW - 10) is None
