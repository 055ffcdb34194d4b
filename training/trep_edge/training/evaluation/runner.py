"""Run each protocol for T-Rep and the TS2Vec ablation on identical data and budget, one results row at a time.

A row is keyed ``task/dataset/variant`` and skipped when the results file already has it, so a run cut short
resumes where it stopped. Every row records its budget, seed, wall time and the command that produced it.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trep_edge.datasets.paths import data_root as default_data_root

from trep_edge.training.evaluation import anomaly, classification, forecasting, missing, sepsis, sepsis_stream
from trep_edge.training.evaluation.pretrain import VARIANTS, Budget, Pretrained, pretrain
from trep_edge.training.evaluation.results import ResultsFile

log = logging.getLogger(__name__)


@dataclass
class RunSettings:
    """What every task shares: the pretraining budget, the variants compared, where data and results live."""

    budget: Budget = field(default_factory=Budget)
    variants: tuple[str, ...] = VARIANTS
    data_root: str | None = None
    command: str = ""
    repr_dims: int | None = None
    """Override every task's representation size (defaults: per task, see each run_* function)."""
    time_index: str = "relative"
    """Time-index convention of the encoders (TREP.md §4); any other than relative tags the dataset key."""

    def root(self) -> Path:
        """The data folder."""
        return default_data_root(self.data_root)

    def tag(self, dataset: str) -> str:
        """The dataset part of a row key: ``ETTh1``; ``ETTh1@periodic:24`` for a non-default time index,
        ``ETTh1#seed1`` for a seed other than 0 (so repeated seeds add rows instead of being skipped)."""
        tag = dataset if self.time_index == "relative" else f"{dataset}@{self.time_index}"
        return tag if self.budget.seed == 0 else f"{tag}#seed{self.budget.seed}"


def result_row(settings: RunSettings, started: float, metrics: dict, **extra) -> dict:
    """A results row: metrics plus budget, seed, wall time since ``started``, command and finishing time."""
    return {
        "metrics": metrics,
        "budget": settings.budget.to_dict(),
        "seed": settings.budget.seed,
        "wall_seconds": round(time.perf_counter() - started, 1),
        "command": settings.command,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **extra,
    }


def _pending(store: ResultsFile, settings: RunSettings, task: str, dataset: str) -> list[str]:
    """The variants whose row ``task/dataset/variant`` is not finished yet."""
    return [v for v in settings.variants if not store.has(f"{task}/{settings.tag(dataset)}/{v}")]


def _pretrain(
    x: np.ndarray, variant: str, time_embedding: str, repr_dims: int, settings: RunSettings, window: int = 201
) -> Pretrained:
    model = pretrain(x, variant, time_embedding, settings.repr_dims or repr_dims, settings.budget, settings.time_index,
                     max_receptive_field=window)  # fmt: skip
    log.info("pretrained %s in %.0f s (final loss %.3f)", variant, model.seconds, model.final_loss)
    return model


def _train_info(model: Pretrained) -> dict:
    return {"train_seconds": round(model.seconds, 1), "final_loss": model.final_loss, "repr_dims": model.config.repr_dims,
            "time_embedding": model.config.time_embedding}


def run_anomaly(
    store: ResultsFile,
    settings: RunSettings,
    cases: list[anomaly.AnomalyCase],
    dataset: str,
    max_test_steps: int | None = None,
    calibration_steps: int | None = None,
    beta: float = 4.0,
) -> None:
    """Streaming point AD: one encoder per variant pretrained on every series' train part (F = 64 by default)."""
    pending = _pending(store, settings, "anomaly", dataset)
    if not pending:
        return
    prepared = [anomaly.prepare_case(c) for c in cases]
    x = anomaly.training_array(prepared)
    for variant in pending:
        key = f"anomaly/{settings.tag(dataset)}/{variant}"
        started = time.perf_counter()
        model = _pretrain(x, variant, "time2vec", 64, settings)
        config = model.config.to_dict()
        per_series = []
        for p in prepared:
            engine = anomaly.engine_for(model.encoder, config, p, window=201, z=21)
            per_series.append(anomaly.evaluate_case(engine, p, beta, 21, calibration_steps, max_test_steps))
            log.info("%s %s: %s", variant, p.case.name, {d: per_series[-1][d]["f1"] for d in ("delay3", "delay7")})
        metrics = anomaly.summarise(per_series)
        store.put(key, result_row(settings, started, metrics, series=per_series, beta=beta, window=201, z=21,
                            max_test_steps=max_test_steps, calibration_steps=calibration_steps, **_train_info(model)))


def run_sepsis_stream(
    store: ResultsFile,
    settings: RunSettings,
    n_patients: int = 600,
    beta: float = 4.0,
) -> None:
    """Streaming point AD on PhysioNet vitals, sepsis hours as anomalies (F = 64, Time2Vec; ``sepsis_stream``)."""
    pending = _pending(store, settings, "sepsis_stream", "setB-vitals")
    if not pending:
        return
    rng = np.random.default_rng(settings.budget.seed)
    path = settings.root() / "PhysioNet2019_sepsis" / "training_setB.tar.gz"
    cohort = sepsis_stream.load_stream_cohort(path, n_patients, n_patients // 4, n_patients // 2, rng)
    norm = sepsis_stream.normalisation(cohort)
    x = sepsis_stream.training_array(cohort, norm)
    for variant in pending:
        started = time.perf_counter()
        model = _pretrain(x, variant, "time2vec", 64, settings, window=sepsis_stream.WINDOW)
        engine = sepsis_stream.engine_for(model.encoder, model.config.to_dict(), norm, z=21)
        metrics = sepsis_stream.evaluate(engine, cohort, norm, beta, 21, anomaly.DELAYS)
        log.info("sepsis stream %s %s", variant, {d: metrics[f"delay{d}"]["f1"] for d in anomaly.DELAYS})
        store.put(f"sepsis_stream/{settings.tag('setB-vitals')}/{variant}", result_row(
            settings, started, metrics, beta=beta, window=sepsis_stream.WINDOW, z=21,
            train_patients=len(cohort.train), calibration_patients=len(cohort.calibration), **_train_info(model),
        ))  # fmt: skip


def run_classification(store: ResultsFile, settings: RunSettings, names: list[str]) -> None:
    """TimeDim SVM accuracy on UEA sets, in the given order (F = 128, MLP time-embedding, as the paper)."""
    for name in names:
        pending = _pending(store, settings, "classification", name)
        if not pending:
            continue
        data = classification.load_uea_split(name, settings.data_root)
        for variant in pending:
            started = time.perf_counter()
            model = _pretrain(data.x_train, variant, "mlp", 128, settings)
            acc = classification.accuracy(model.encoder, data, model.config.time_index)
            log.info("%s %s accuracy %.3f", name, variant, acc)
            shape = {"train": list(data.x_train.shape), "test": list(data.x_test.shape)}
            row = result_row(settings, started, {"accuracy": acc}, shape=shape, **_train_info(model))
            store.put(f"classification/{settings.tag(name)}/{variant}", row)


def run_forecasting(store: ResultsFile, settings: RunSettings, names: list[str]) -> None:
    """Ridge forecasting on ETT sets at their five horizons (F = 128 by default, Time2Vec)."""
    for name in names:
        pending = _pending(store, settings, "forecasting", name)
        if not pending:
            continue
        data = forecasting.load_ett(name, settings.data_root)
        train = data.values[None, : data.splits.train_end]
        for variant in pending:
            started = time.perf_counter()
            model = _pretrain(train, variant, "time2vec", 128, settings)
            metrics = forecasting.evaluate(model.encoder, data, time_index_spec=model.config.time_index)
            log.info("%s %s %s", name, variant, metrics)
            row = result_row(settings, started, metrics, splits=vars(data.splits), window=forecasting.WINDOW,
                             **_train_info(model))
            store.put(f"forecasting/{settings.tag(name)}/{variant}", row)


def run_sepsis(
    store: ResultsFile,
    settings: RunSettings,
    n_patients: int = 2000,
    septic_share: float = 0.5,
    test_share: float = 0.5,
    max_train_windows: int = 3000,
    cv_metric: str = "accuracy",
) -> None:
    """Sepsis segment AD on a seeded patient sample of set B (F = 32, Time2Vec), plus the raw-data baseline."""
    variants = [*settings.variants, "raw"]
    dataset = settings.tag("setB") + ("" if cv_metric == "accuracy" else f"+cv-{cv_metric}")
    if all(store.has(f"sepsis/{dataset}/{v}") for v in variants):
        return
    started = time.perf_counter()
    rng = np.random.default_rng(settings.budget.seed)
    cohort = sepsis.load_cohort(settings.root() / "PhysioNet2019_sepsis" / "training_setB.tar.gz")
    sample = sepsis.sample_patients(cohort, n_patients, septic_share, rng)
    train, test = sepsis.split_patients(sample, test_share, rng)
    x_train, x_test = sepsis.normalise(train, test)
    w_train, y_train = sepsis.windows(x_train, train.labels)
    w_test, y_test = sepsis.windows(x_test, test.labels)
    cohort_info = {"patients_in_set": int(len(cohort.ids)), "septic_in_set": int(cohort.septic.sum()),
                   "patients": n_patients, "septic_share": septic_share, "train_patients": int(len(train.ids)),
                   "test_patients": int(len(test.ids)), "max_train_windows": max_train_windows}
    prep_seconds = time.perf_counter() - started
    for variant in variants:
        key = f"sepsis/{dataset}/{variant}"
        if store.has(key):
            continue
        started = time.perf_counter()
        if variant == "raw":
            feats = (sepsis.raw_features(w_train), sepsis.raw_features(w_test))
            info = {}
        else:
            model = _pretrain(x_train, variant, "time2vec", 32, settings)
            feats = (sepsis.window_features(model.encoder, w_train), sepsis.window_features(model.encoder, w_test))
            info = _train_info(model)
        metrics = sepsis.svm_scores((feats[0], y_train), (feats[1], y_test), max_train_windows, settings.budget.seed,
                                    cv_metric)
        log.info("sepsis %s %s", variant, metrics)
        store.put(key, result_row(settings, started, metrics, cohort=cohort_info, load_seconds=round(prep_seconds, 1),
                                  cv_metric=cv_metric, **info))


def run_missing(store: ResultsFile, settings: RunSettings, name: str, fractions: tuple[float, ...]) -> None:
    """Accuracy with a fraction of timesteps removed from TRAIN and TEST; one pretraining per fraction."""
    data = None
    for fraction in fractions:
        for variant in settings.variants:
            key = f"missing/{settings.tag(name)}@{fraction:.1f}/{variant}"
            if store.has(key):
                continue
            data = data or classification.load_uea_split(name, settings.data_root)
            started = time.perf_counter()
            holed = missing.with_missing(data, fraction, settings.budget.seed)
            model = _pretrain(holed.x_train, variant, "mlp", 128, settings)
            acc = classification.accuracy(model.encoder, holed, model.config.time_index)
            log.info("%s %.0f%% missing %s accuracy %.3f", name, 100 * fraction, variant, acc)
            store.put(key, result_row(settings, started, {"accuracy": acc}, fraction=fraction, **_train_info(model)))
