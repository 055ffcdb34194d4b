"""Model promotion: check a retrained model on the telemetry the monitor recorded, then install it atomically.

``trep-edge promote CANDIDATE.onnx --archive DIR --target models/current.onnx``:

1. parity: the candidate's checkpoint (``CANDIDATE.pt`` or ``--checkpoint``, its weights hash must match the card)
   against the ONNX graph, with ``export.parity_check`` on random and archived windows;
2. calibration: the threshold statistics on the archive's last ``days`` days with alert episodes left out,
   scored by ``export.calibration_stats`` (the exporter's own code path: the daemon's windows and scores);
3. alert rate: candidate and running model score the archive's last day (alerts included: that is what the
   operators saw); the candidate is refused when its rate exceeds ``max_ratio`` × the running model's and
   ``min_rate`` (so a running model with no alert does not make every candidate alert fatal);
4. install: model card sidecar, then the model, each written to a temp file in the target's folder, fsynced and
   renamed over the target; the daemon's watcher swaps the model between two scoring ticks (readings keep
   queueing meanwhile) and publishes the new sha256 on its status topic.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trep_edge.datasets.archive import ArchivedSeries, latest_timestamp, read_alert_ranges, read_archive
from trep_edge.runtime.atomic_file import write_atomically
from trep_edge.runtime.engine import Engine, load_engine
from trep_edge.runtime.model_card import sidecar_path
from trep_edge.runtime.offline import prepare, raw_scores
from trep_edge.runtime.scoring import score_series

from .export import calibration_stats, parity_check, write_card
from .trainer import Trainer, resolve_checkpoint

DAY = 86400.0


@dataclass
class AlertRate:
    """Alerts per scored reading of one model over the archive's last day."""

    alerts: int
    scored: int

    @property
    def rate(self) -> float:
        """Alerts per scored reading (0 when nothing was scored)."""
        return self.alerts / self.scored if self.scored else 0.0


@dataclass
class PromotionReport:
    """Everything promotion checked, and its verdict (printed as JSON by ``trep-edge promote``)."""

    candidate: str
    target: str
    sha256: str
    parity: dict
    calibration: dict
    candidate_rate: AlertRate
    running_rate: AlertRate | None
    refused: list[str] = field(default_factory=list)
    installed: bool = False

    def to_dict(self) -> dict:
        """JSON form, with the rates spelled out."""
        out = dataclasses.asdict(self)
        out["candidate_rate"]["rate"] = self.candidate_rate.rate
        if self.running_rate is not None:
            out["running_rate"]["rate"] = self.running_rate.rate
        out["accepted"] = not self.refused
        return out


def alert_rate(engine: Engine, series: list[ArchivedSeries]) -> AlertRate:
    """Score each archived series as the daemon would (window, adjusted score, card threshold); count alerts."""
    alerts = scored = 0
    s = engine.card.scoring
    for item in series:
        result = score_series(raw_scores(engine, prepare(engine, item.values)), s.z, engine.card.calibration, s.beta,
                              s.delay)  # fmt: skip
        alerts += int(result.alerts.sum())
        scored += int(np.isfinite(result.adjusted).sum())
    return AlertRate(alerts, scored)


def promote(
    candidate: str | Path,
    archive: str | Path,
    target: str | Path,
    checkpoint: str | Path | None = None,
    days: float = 7.0,
    calibration_steps: int = 4000,
    max_ratio: float = 2.0,
    min_rate: float = 0.001,
    dry_run: bool = False,
) -> PromotionReport:
    """Check ``candidate`` against the archive and the running ``target``; install it when every check passes."""
    candidate, archive, target = Path(candidate), Path(archive), Path(target)
    engine = load_engine(candidate, "cpu")
    card = engine.card
    encoder = Trainer.load(resolve_checkpoint(checkpoint or candidate, card.weights_sha256), device="cpu").inference_encoder()
    newest = latest_timestamp(read_archive(archive, card.channels))
    normal = read_archive(archive, card.channels, since=newest - days * DAY, exclude=read_alert_ranges(archive))
    prepared = [p for p in (prepare(engine, s.values) for s in normal) if len(p) > 1]
    if not prepared:
        raise ValueError(f"{archive} holds no normal reading in its last {days} days to calibrate on")
    parity = parity_check(encoder, engine, max(prepared, key=len))
    calibration = calibration_stats(engine, prepared, calibration_steps)
    card.calibration = dataclasses.replace(calibration, source=f"archive {archive.name}, last {days:g} days")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".promote-") as tmp:
        staged = Path(tmp) / target.name
        shutil.copyfile(candidate, staged)
        write_card(staged, card)
        staged_engine = load_engine(staged, "cpu")
        last_day = newest - DAY
        cand_rate = alert_rate(staged_engine, read_archive(archive, card.channels, since=last_day))
        running = load_engine(target, "cpu") if target.exists() else None
        run_rate = None if running is None else alert_rate(running, read_archive(archive, running.card.channels,
                                                                                    since=last_day))  # fmt: skip
        report = PromotionReport(str(candidate), str(target), staged_engine.sha256,
                                 {"max_abs_diff": parity.max_abs_diff, "cases": parity.cases,
                                  "alerts_identical": parity.alerts_identical, "ok": parity.ok},
                                 card.calibration.to_dict(), cand_rate, run_rate)  # fmt: skip
        report.refused = refusals(parity.ok, parity.max_abs_diff, cand_rate, run_rate, max_ratio, min_rate)
        if not report.refused and not dry_run:
            install(staged, target)
            report.installed = True
    return report


def refusals(parity_ok: bool, max_abs_diff: float, candidate: AlertRate, running: AlertRate | None,
             max_ratio: float, min_rate: float) -> list[str]:  # fmt: skip
    """Why a candidate must not be installed (empty: it may): parity, then its alert rate against the running one."""
    reasons = []
    if not parity_ok:
        reasons.append(f"parity: max |torch - onnxruntime| {max_abs_diff:.2e} (limit 1e-4) or different alerts")
    if running is not None and candidate.rate > max(max_ratio * running.rate, min_rate):
        reasons.append(f"alert rate on the last day {candidate.rate:.4f} > {max_ratio:g} x the running model's "
                       f"{running.rate:.4f} (and > {min_rate:g})")  # fmt: skip
    return reasons


def install(staged: Path, target: Path) -> None:
    """Put the card, then the model, in place, each atomically and durably (``daemon.write_atomically``).

    The daemon watches the model file, so the card beside it is already the new one when the change is seen.
    """
    for source, dest in ((sidecar_path(staged), sidecar_path(target)), (staged, target)):
        write_atomically(dest, lambda fh: fh.write(source.read_bytes()), mode=0o644)  # the daemon's user reads it


def promote_command(args) -> int:
    """``trep-edge promote``: print the report; exit 1 when the candidate was refused."""
    report = promote(args.candidate, args.archive, args.target, args.checkpoint, args.days, args.calibration_steps,
                     args.max_alert_ratio, args.min_alert_rate, args.dry_run)  # fmt: skip
    text = json.dumps(report.to_dict(), indent=2)
    if args.report:
        Path(args.report).write_text(text + "\n")
    print(text)
    return 1 if report.refused else 0
