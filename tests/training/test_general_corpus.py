"""The general model's corpus (training parts only, scaled, capped, deterministic) and `trep-edge export --general`."""
import io
import tarfile

import numpy as np
import pytest

from trep_edge.cli import main
from trep_edge.datasets.ett import load_csv
from trep_edge.datasets.paths import data_root
from trep_edge.runtime.core.engine import load_engine
from trep_edge.training.general_corpus import CLIP, a103l_series, build_corpus, ett_series, physionet_series
from trep_edge.training.trainer import resolve_checkpoint

PATIENTS = 8


@pytest.fixture(scope="module")
def small_root(tmp_path_factory):
    """A data root of real files: ETT, one UCR and one UEA set, the ICU records, and the first set B patients."""
    real = data_root()
    if not (real / "PhysioNet2019_sepsis" / "training_setB.tar.gz").is_file():
        pytest.skip(f"real data not found at {real} (set TREP_EDGE_DATA)")
    root = tmp_path_factory.mktemp("root")
    (root / "ETT").symlink_to(real / "ETT")
    (root / "icu_vitals").symlink_to(real / "icu_vitals")
    for archive, name in (("UCR", "PigCVP"), ("UEA", "BasicMotions")):
        (root / archive).mkdir()
        (root / archive / name).symlink_to(real / archive / name)
    (root / "PhysioNet2019_sepsis").mkdir()
    with tarfile.open(real / "PhysioNet2019_sepsis" / "training_setB.tar.gz", "r|gz") as src, tarfile.open(
        root / "PhysioNet2019_sepsis" / "training_setB.tar.gz", "w:gz"
    ) as dst:
        kept = 0
        for member in src:
            if member.isfile() and member.name.endswith(".psv") and kept < PATIENTS:
                dst.addfile(member, io.BytesIO(src.extractfile(member).read()))
                kept += 1
            if kept == PATIENTS:
                break
    return root


def test_sources_keep_only_their_training_parts(small_root):
    etth1 = load_csv(small_root / "ETT" / "ETTh1.csv", dtype=np.float32).values  # as the general model read it
    first = next(ett_series(small_root))
    np.testing.assert_array_equal(first, etth1[: len(etth1) // 2, 0])
    with tarfile.open(small_root / "PhysioNet2019_sepsis" / "training_setB.tar.gz") as tar:
        ids = [int(m.name.rsplit("/p", 1)[1][:-4]) for m in tar.getmembers()]
    even = sum(1 for i in ids if i % 2 == 0)
    assert 0 < even < PATIENTS  # the real first patients mix odd and even ids, so the filter is exercised
    assert len(list(physionet_series(small_root))) == 7 * even
    ecg = list(a103l_series(small_root))
    assert len(ecg) == 3 and all(len(s) == 82500 // 5 for s in ecg)


def test_corpus_is_scaled_capped_and_deterministic(small_root):
    caps = {"ett": 3000, "ucr": 2000, "uea": 2000, "physionet": 500, "mimic": 800, "a103l": 1000}
    corpus, counts = build_corpus(small_root, length=256, caps=caps)
    again, _ = build_corpus(small_root, length=256, caps=caps)
    np.testing.assert_array_equal(corpus, again)
    assert corpus.shape == (sum(c["series"] for c in counts.values()), 256, 1)
    for name, cap in caps.items():
        assert 0 < counts[name]["rows"] <= cap + 256, name
    observed = corpus[~np.isnan(corpus)]
    assert np.abs(observed).max() <= CLIP
    # Robust scaling puts the bulk of every source near unit scale whatever its units (ECG counts, mmHg, kW).
    assert 0.3 < np.percentile(np.abs(observed), 75) < 3
    with pytest.raises(ValueError, match="unknown corpus source"):
        build_corpus(small_root, caps={"yahoo": 10})


@pytest.fixture()
def shifted_npy(tmp_path):
    rng = np.random.default_rng(0)
    x = (50 + 3 * np.sin(np.arange(400) / 7)[None, :, None] + rng.normal(size=(3, 400, 1))).astype(np.float32)
    np.save(tmp_path / "one.npy", x)
    np.save(tmp_path / "two.npy", np.concatenate([x, x], axis=-1))
    return tmp_path


TINY = ["--iterations", "3", "--depth", "2", "--hidden-dims", "8", "--repr-dims", "4", "--no-progress"]


def test_export_general_folds_the_normalisation_and_marks_the_card(shifted_npy, capsys):
    ckpt = shifted_npy / "one.pt"
    assert main(["train", str(shifted_npy / "one.npy"), "--out", str(ckpt), *TINY]) == 0
    plain, general = shifted_npy / "plain.onnx", shifted_npy / "general.onnx"
    common = ["--window", "16", "--no-calibration", "--graphs", "none"]
    assert main(["export", str(ckpt), "--out", str(plain), *common]) == 0
    assert main(["export", str(ckpt), "--out", str(general), "--general", *common]) == 0
    capsys.readouterr()
    p, g = load_engine(plain, "cpu"), load_engine(general, "cpu")
    assert (g.card.scaling, g.card.channel_mode, g.card.channels) == ("stream", "independent", ["value"])
    assert g.card.normalisation == {"mean": [0.0], "std": [1.0]}
    assert abs(p.card.normalisation["mean"][0] - 50) < 1
    raw = np.load(shifted_npy / "one.npy")[:1, :64]
    mask, t = np.ones(raw.shape[:2], dtype=bool), np.arange(64, dtype=np.float32)[None]
    normed = (raw - p.card.normalisation["mean"][0]) / p.card.normalisation["std"][0]
    # The general model on raw values = the trained model on normalised values: the folding is exact.
    np.testing.assert_allclose(g.encode(raw, mask, t), p.encode(normed.astype(np.float32), mask, t), atol=1e-4)


def test_a_general_model_with_its_checkpoint_beside_it_can_be_fine_tuned_and_a_retrained_one_cannot(
    shifted_npy, capsys
):
    # The general export folds the training normalisation into the weights, so its card's weights_sha256 is not the
    # checkpoint's own: the checkpoint must still be recognised as the one the model was exported from.
    ckpt, model = shifted_npy / "g.pt", shifted_npy / "g.onnx"
    assert main(["train", str(shifted_npy / "one.npy"), "--out", str(ckpt), *TINY]) == 0
    assert main(["export", str(ckpt), "--out", str(model), "--general", "--window", "16", "--no-calibration",
                 "--graphs", "none"]) == 0  # fmt: skip
    assert resolve_checkpoint(model) == ckpt
    assert main(["train", str(shifted_npy / "one.npy"), "--init-from", str(model), "--out",
                 str(shifted_npy / "tuned.pt"), "--iterations", "2", "--no-progress"]) == 0  # fmt: skip
    assert main(["train", str(shifted_npy / "one.npy"), "--out", str(ckpt), *TINY, "--seed", "1"]) == 0  # retrained
    capsys.readouterr()
    with pytest.raises(ValueError, match="does not hold the weights"):
        resolve_checkpoint(model)


def test_export_general_writes_no_detector_prior_where_a_plain_export_does(shifted_npy, capsys):
    ckpt = shifted_npy / "prior.pt"
    assert main(["train", str(shifted_npy / "one.npy"), "--out", str(ckpt), *TINY]) == 0
    common = ["--window", "32", "--calibration-steps", "200", "--graphs", "none"]
    for name, extra in (("plain", []), ("general", ["--general"])):
        assert main(["export", str(ckpt), "--out", str(shifted_npy / f"{name}-prior.onnx"), *common, *extra]) == 0
    capsys.readouterr()
    assert load_engine(shifted_npy / "plain-prior.onnx", "cpu").card.detector_prior["n"] > 0
    assert not load_engine(shifted_npy / "general-prior.onnx", "cpu").card.detector_prior


def test_export_general_refuses_a_multichannel_model(shifted_npy, capsys):
    ckpt = shifted_npy / "two.pt"
    assert main(["train", str(shifted_npy / "two.npy"), "--out", str(ckpt), *TINY]) == 0
    capsys.readouterr()
    assert main(["export", str(ckpt), "--out", str(shifted_npy / "m.onnx"), "--general", "--no-calibration"]) == 2
    assert "input_dims 1" in capsys.readouterr().err
    assert not (shifted_npy / "m.onnx").exists()


def test_export_general_refuses_a_model_trained_on_a_count_feed(shifted_npy, capsys):
    rng = np.random.default_rng(0)
    np.save(shifted_npy / "counts.npy", rng.poisson(20 * np.where(rng.random(600) < 0.03, 8, 1)).astype(np.float32))
    ckpt = shifted_npy / "counts.pt"
    assert main(["train", str(shifted_npy / "counts.npy"), "--out", str(ckpt), *TINY]) == 0
    capsys.readouterr()
    assert main(["export", str(ckpt), "--out", str(shifted_npy / "c.onnx"), "--general", "--no-calibration"]) == 2
    assert "count feed" in capsys.readouterr().err and not (shifted_npy / "c.onnx").exists()
