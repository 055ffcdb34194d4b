"""Markdown tables of a results file beside the paper's numbers (TREP.md §6), for docs/results.md.

Paper numbers are only those TREP.md quotes; a cell it does not give is "—", never filled in from elsewhere.
"""
from __future__ import annotations

import numpy as np

from trep_edge.training.evaluation.classification import UEA_ORDER
from trep_edge.training.evaluation.forecasting import ETT_SETS

PAPER_UEA_TREP = {
    "ArticularyWordRecognition": 0.968, "AtrialFibrillation": 0.354, "BasicMotions": 1.0, "Epilepsy": 0.97,
    "ERing": 0.943, "FingerMovements": 0.495, "Handwriting": 0.414, "JapaneseVowels": 0.962, "Libras": 0.829,
    "LSST": 0.526, "NATOPS": 0.804, "PenDigits": 0.971, "RacketSports": 0.883, "StandWalkJump": 0.441,
    "UWaveGestureLibrary": 0.885,
}  # fmt: skip
PAPER_ETTH1_TREP_MSE = {"24": 0.511, "48": 0.546, "168": 0.759, "336": 0.936, "720": 1.061}
PAPER_SEPSIS = {"trep": (0.665, 0.790), "ts2vec": (0.619, 0.771), "raw": (0.241, 0.676)}
PAPER_YAHOO_F1 = {"trep": 0.757, "ts2vec": 0.733}
PAPER_AWR_MISSING_TREP = {0.0: 0.98, 0.75: 0.967}
"""T-Rep accuracy by fraction removed, read off the paper's figure (TREP.md: "≈ 0.967 (0.98 full)")."""
DASH = "—"


def _fmt(value: float | None, digits: int = 3) -> str:
    return DASH if value is None else f"{value:.{digits}f}"


def _get(rows: dict, key: str, *path: str) -> float | None:
    row = rows.get(key)
    if row is None:
        return None
    value = row["metrics"]
    for p in path:
        value = value[p]
    return float(value)


def _seconds(rows: dict, *keys: str) -> str:
    found = [rows[k]["wall_seconds"] for k in keys if k in rows]
    return " / ".join(f"{s:.0f}" for s in found) if found else DASH


def classification_table(rows: dict) -> str:
    """Per UEA set: accuracy of our T-Rep and TS2Vec ablation, paper T-Rep; mean over sets both models finished."""
    lines = ["| dataset | ours T-Rep | ours TS2Vec-abl. | paper T-Rep | paper TS2Vec | wall s (T-Rep / TS2Vec) |",
             "|---|---|---|---|---|---|"]
    ours = []
    for name in UEA_ORDER:
        keys = (f"classification/{name}/trep", f"classification/{name}/ts2vec")
        a, b = (_get(rows, k, "accuracy") for k in keys)
        if a is None and b is None:
            lines.append(f"| {name} | not run | not run | {_fmt(PAPER_UEA_TREP[name])} | {DASH} | {DASH} |")
            continue
        if a is not None and b is not None:
            ours.append((a, b, PAPER_UEA_TREP[name]))
        lines.append(f"| {name} | {_fmt(a)} | {_fmt(b)} | {_fmt(PAPER_UEA_TREP[name])} | {DASH} | {_seconds(rows, *keys)} |")
    if ours:
        m = np.mean(ours, axis=0)
        lines.append(f"| **mean of the {len(ours)} sets run** | **{m[0]:.3f}** | **{m[1]:.3f}** | **{m[2]:.3f}** | {DASH} | |")
    lines.append(f"| paper: mean over all 30 UEA sets | | | 0.706 | 0.699 | |")
    return "\n".join(lines)


def forecasting_table(rows: dict) -> str:
    """Per ETT set and horizon: MSE / MAE of both models, paper T-Rep MSE where TREP.md gives it."""
    lines = ["| set | H | ours T-Rep MSE / MAE | ours TS2Vec-abl. MSE / MAE | paper T-Rep MSE | α (T-Rep / TS2Vec) |",
             "|---|---|---|---|---|---|"]
    sums = []
    tagged = sorted({k.split("/")[1] for k in rows if k.startswith("forecasting/") and "@" in k.split("/")[1]})
    for name in (*ETT_SETS, *tagged):
        a, b = rows.get(f"forecasting/{name}/trep"), rows.get(f"forecasting/{name}/ts2vec")
        if a is None and b is None:
            lines.append(f"| {name} | all | not run | not run | {DASH} | |")
            continue
        if "@" in name:
            b = None  # a time-index variant: the ablation has no time-embedding, its row is the plain one
        for h in sorted((a or b)["metrics"], key=int):
            cells = []
            for row in (a, b):
                m = None if row is None else row["metrics"][h]
                cells.append(DASH if m is None else f"{m['mse']:.3f} / {m['mae']:.3f}")
            paper = PAPER_ETTH1_TREP_MSE.get(h) if name.split("@")[0] == "ETTh1" else None
            alphas = " / ".join(_fmt(None if r is None else r["metrics"][h]["alpha"], 1) for r in (a, b))
            lines.append(f"| {name} | {h} | {cells[0]} | {cells[1]} | {_fmt(paper)} | {alphas} |")
            if a is not None and b is not None and "@" not in name:
                sums.append((a["metrics"][h]["mse"], a["metrics"][h]["mae"], b["metrics"][h]["mse"], b["metrics"][h]["mae"]))
    if sums:
        m = np.mean(sums, axis=0)
        lines.append(f"| **mean of the {len(sums)} (set, H) run** | | **{m[0]:.3f} / {m[1]:.3f}** | **{m[2]:.3f} / {m[3]:.3f}** | | |")
    lines.append("| paper: mean over 4 sets × 5 H | | 0.986 / 0.702 | 1.004 / 0.712 | | |")
    return "\n".join(lines)


def anomaly_table(rows: dict, dataset: str = "UCR") -> str:
    """Micro-averaged point-adjusted P / R / F1 at delay 3 and 7, per model, plus per-series F1."""
    lines = ["| model | delay | precision | recall | F1 | alerts | paper F1 (Yahoo) | wall s |", "|---|---|---|---|---|---|---|---|"]
    for variant, label in (("trep", "ours T-Rep"), ("ts2vec", "ours TS2Vec-abl.")):
        row = rows.get(f"anomaly/{dataset}/{variant}")
        for delay in (3, 7):
            if row is None:
                lines.append(f"| {label} | {delay} | not run | | | | {_fmt(PAPER_YAHOO_F1[variant])} | |")
                continue
            m = row["metrics"][f"delay{delay}"]
            alerts = sum(s[f"delay{delay}"]["alerts"] for s in row["series"])
            lines.append(f"| {label} | {delay} | {m['precision']:.3f} | {m['recall']:.3f} | {m['f1']:.3f} | {alerts} | "
                         f"{_fmt(PAPER_YAHOO_F1[variant])} | {row['wall_seconds']:.0f} |")
    return "\n".join(lines)


def anomaly_series_table(rows: dict, dataset: str = "UCR") -> str:
    """Per series: differencing, scored steps and F1 / alerts per model and delay."""
    lines = ["| series | d | test steps | labelled | T-Rep F1 d3 / d7 (alerts d7) | TS2Vec-abl. F1 d3 / d7 (alerts d7) |",
             "|---|---|---|---|---|---|"]
    a, b = rows.get(f"anomaly/{dataset}/trep"), rows.get(f"anomaly/{dataset}/ts2vec")
    if a is None and b is None:
        return ""
    for i, s in enumerate((a or b)["series"]):
        cells = []
        for row in (a, b):
            if row is None:
                cells.append("not run")
                continue
            r = row["series"][i]
            cells.append(f"{r['delay3']['f1']:.3f} / {r['delay7']['f1']:.3f} ({r['delay7']['alerts']})")
        lo, hi = s["test_steps"]
        lines.append(f"| {s['series']} | {s['differencing']} | {lo}–{hi} | {s['labelled_points']} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def anomaly_diagnostics_table(rows: dict, dataset: str = "UCR") -> str:
    """Per series and model: the threshold against the largest adjusted score inside and outside the labels."""
    lines = ["| series | model | threshold μ+βσ | max adjusted score in labelled points | max elsewhere in the test steps | "
             "alerts in labelled points (d3 / d7) |", "|---|---|---|---|---|---|"]
    for variant, label in (("trep", "T-Rep"), ("ts2vec", "TS2Vec-abl.")):
        row = rows.get(f"anomaly/{dataset}/{variant}")
        for s in [] if row is None else row["series"]:
            if "threshold" not in s:
                continue
            inside = " / ".join(str(s[f"delay{d}"]["alerts_in_labels"]) for d in (3, 7))
            lines.append(f"| {s['series']} | {label} | {s['threshold']:.3f} | {_fmt(s['max_adjusted_in_labels'])} | "
                         f"{_fmt(s['max_adjusted_elsewhere'])} | {inside} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def sepsis_table(rows: dict, dataset: str = "setB") -> str:
    """F1, accuracy, precision, recall per model and the raw-data baseline, beside the paper's F1 / accuracy."""
    lines = ["| model | F1 | accuracy | precision | recall | C | paper F1 / acc | wall s |", "|---|---|---|---|---|---|---|---|"]
    for variant, label in (("trep", "ours T-Rep"), ("ts2vec", "ours TS2Vec-abl."), ("raw", "raw data (ours)")):
        row = rows.get(f"sepsis/{dataset}/{variant}")
        paper = "{:.3f} / {:.3f}".format(*PAPER_SEPSIS[variant])
        if row is None:
            lines.append(f"| {label} | not run | | | | | {paper} | |")
            continue
        m = row["metrics"]
        lines.append(f"| {label} | {m['f1']:.3f} | {m['accuracy']:.3f} | {m['precision']:.3f} | {m['recall']:.3f} | "
                     f"{m['C']:g} | {paper} | {row['wall_seconds']:.0f} |")
    return "\n".join(lines)


def missing_table(rows: dict, name: str = "ArticularyWordRecognition") -> str:
    """Accuracy per removed fraction for both models."""
    lines = ["| removed | ours T-Rep | ours TS2Vec-abl. | paper T-Rep |", "|---|---|---|---|"]
    paper = {f: f"≈ {v:.3f}" for f, v in PAPER_AWR_MISSING_TREP.items()}
    fractions = sorted({row["fraction"] for k, row in rows.items() if k.startswith(f"missing/{name}@")})
    for f in fractions:
        a, b = (_get(rows, f"missing/{name}@{f:.1f}/{v}", "accuracy") for v in ("trep", "ts2vec"))
        lines.append(f"| {100 * f:.0f} % | {_fmt(a)} | {_fmt(b)} | {paper.get(f, DASH)} |")
    return "\n".join(lines)


def seed_table(rows: dict) -> str:
    """Rows repeated with another seed beside seed 0: UEA accuracy and ETT MSE per horizon, both models."""
    lines = ["| task | dataset | seed | T-Rep | TS2Vec-abl. | T-Rep − TS2Vec |", "|---|---|---|---|---|---|"]
    for key in sorted(k for k in rows if "#seed" in k and k.endswith("/trep")):
        task, tagged, _ = key.split("/")
        name, seed = tagged.split("#seed")
        for s, dataset in (("0", name), (seed, tagged)):
            a, b = rows.get(f"{task}/{dataset}/trep"), rows.get(f"{task}/{dataset}/ts2vec")
            if a is None or b is None:
                continue
            if task == "classification":
                x, y = a["metrics"]["accuracy"], b["metrics"]["accuracy"]
                lines.append(f"| {task} | {name} | {s} | {x:.3f} | {y:.3f} | {x - y:+.3f} |")
            elif task == "forecasting":
                for h in sorted(a["metrics"], key=int):
                    x, y = a["metrics"][h]["mse"], b["metrics"][h]["mse"]
                    lines.append(f"| {task} MSE H{h} | {name} | {s} | {x:.3f} | {y:.3f} | {x - y:+.3f} |")
    return "\n".join(lines) if len(lines) > 2 else "(no repeated seeds)"


def report(rows: dict) -> str:
    """All tables, one section per task."""
    return "\n\n".join([
        "### Anomaly detection (UCR anomaly)\n\n" + anomaly_table(rows) + "\n\n" + anomaly_series_table(rows)
        + "\n\n" + anomaly_diagnostics_table(rows),
        "### Classification (UEA, TimeDim SVM)\n\n" + classification_table(rows),
        "### Forecasting (ETT)\n\n" + forecasting_table(rows),
        "### Sepsis segment AD (PhysioNet 2019 set B)\n\nC chosen by CV accuracy:\n\n" + sepsis_table(rows)
        + "\n\nC chosen by CV F1:\n\n" + sepsis_table(rows, "setB+cv-f1"),
        "### Missing data (ArticularyWordRecognition)\n\n" + missing_table(rows),
        "### Seed repeats\n\n" + seed_table(rows),
    ])  # fmt: skip
