"""The causal variants of the evaluation protocols and the PhysioNet streaming-AD task (docs/causal.md)."""
import numpy as np
import pytest
import torch

from trep_edge.datasets.physionet import VITALS
from trep_edge.training.encoder import TRepEncoder, receptive_field
from trep_edge.training.evaluation import sepsis_stream
from trep_edge.training.evaluation.pretrain import Budget, variant_config
from trep_edge.training.trainer import encoder_config


def test_causal_variants_bound_their_receptive_field_by_the_window():
    cfg = variant_config("trep-causal", "time2vec", 64, Budget(), "periodic:24", max_receptive_field=49)
    assert cfg.causal and receptive_field(cfg.dilations) <= 49
    assert variant_config("ts2vec-causal", "time2vec", 64, Budget()).time_embedding == "none"
    assert not variant_config("trep", "time2vec", 64, Budget()).causal
    with pytest.raises(ValueError, match="periodic"):
        variant_config("trep-causal", "time2vec", 64, Budget())


def _patient(rng, hours, septic_from=None):
    values = rng.normal([80, 97, 37, 120, 80, 60, 16], 3, size=(hours, len(VITALS))).astype(np.float32)
    labels = np.zeros(hours, dtype=bool)
    if septic_from is not None:
        labels[septic_from:] = True
    return values, labels


def test_sepsis_hours_are_the_anomalous_points():
    rng = np.random.default_rng(0)
    healthy = [_patient(rng, 60)[0] for _ in range(6)]
    test = [_patient(rng, 50, septic_from=30), _patient(rng, 40, septic_from=35), _patient(rng, 45)]
    cohort = sepsis_stream.StreamCohort(train=healthy[:3], calibration=healthy[3:], test=test)
    norm = sepsis_stream.normalisation(cohort)
    x = sepsis_stream.training_array(cohort, norm)
    assert x.shape == (3, 60, len(VITALS)) and abs(float(np.nanmean(x))) < 0.2
    cfg = variant_config("trep-causal", "time2vec", 8, Budget(hidden_dims=8, depth=2), "periodic:24", 49)
    torch.manual_seed(0)
    encoder = TRepEncoder(encoder_config(cfg, len(VITALS))).eval()
    engine = sepsis_stream.engine_for(encoder, cfg.to_dict(), norm, z=5)
    out = sepsis_stream.evaluate(engine, cohort, norm, beta=4.0, z=5, delays=(3, 7))
    assert (out["test_patients"], out["septic_test_patients"], out["test_hours"], out["septic_hours"]) == (3, 2, 135, 25)
    for delay in (3, 7):
        counts = out[f"delay{delay}"]
        assert counts["tp"] + counts["fn"] == 25  # every septic hour is one labelled point
        assert counts["fp"] <= counts["alerts"]
