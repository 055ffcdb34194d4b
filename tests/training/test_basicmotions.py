"""A short CPU pretraining on real data reaches the accuracy the issue asks for (paper: 1.0)."""
import pytest

from trep_edge.datasets.paths import data_root
from trep_edge.training.classification import timedim_accuracy
from trep_edge.training.config import TrainConfig
from trep_edge.training.data import load_training_data
from trep_edge.training.encode import encode
from trep_edge.training.trainer import Trainer


def test_short_training_on_basicmotions_reaches_90_percent_with_timedim_svm():
    path = data_root() / "UEA/BasicMotions/BasicMotions_TRAIN.ts"
    if not path.is_file():
        pytest.skip(f"real data not found at {path} (set TREP_EDGE_DATA)")
    data = load_training_data(str(path))
    cfg = TrainConfig(time_embedding="mlp", hidden_dims=64, depth=4, repr_dims=128, iterations=50, seed=0)
    trainer = Trainer(cfg, input_dims=6)
    trainer.fit(data.x, progress=False)
    enc = trainer.inference_encoder()
    acc = timedim_accuracy(encode(enc, data.x), data.labels, encode(enc, data.test_x), data.test_labels)
    assert acc >= 0.9
