"""Model promotion: check a retrained model on the telemetry the monitor recorded, then install it atomically.

``trep-edge promote CANDIDATE.onnx --archive DIR --target models/current.onnx``:

1. parity: the candidate's checkpoint (``CANDIDATE.pt`` or ``--checkpoint``, its weights hash must match the card)
   against the ONNX graph, with ``export.parity_check`` on random and archived windows;
2. calibration: the threshold statistics on the archive's last ``days`` days with alert episodes left out,
   scored by ``export.calibration_stats`` (the exporter's own code path: the daemon's windows and scores);
3. alert rate: candidate and running model score the archive's last day (alerts included: that is what the
   operators saw) through the daemon's monitor (``offline.detect_recording``: the detector's decisions, gap resets
   at the archive's own timestamps; the daemon's ``[windows]`` and ``[detector]`` settings with ``--config``); the
   candidate is refused when its rate exceeds ``max_ratio`` × the running model's and ``min_rate`` (so a running
   model with no alert does not make every candidate alert fatal);
3b. shadow (``--shadow HOURS`` with the daemon's ``--config``): the candidate then scores live telemetry beside the
   installed model for that long (``shadow.shadow_score``: its own read-only MQTT client, the daemon's monitor
   code); the comparison is written to the target's history folder as
   ``shadow-<UTC time>-<sha256[:12]>.json`` and ``.txt``. The candidate is refused by step 3's alert-rate rule
   applied to the live alerts (the detector's, the daemon's own decision), or when no telemetry arrived;
   disagreement and surprise drift are reported only: a better model is expected to alert elsewhere than the one
   it replaces.
4. install: model card sidecar, then the model, each written to a temp file in the target's folder, fsynced and
   renamed over the target; the daemon's watcher swaps the model between two scoring ticks (readings keep
   queueing meanwhile) and publishes the new sha256 on its status topic.
5. history: before the install, the model it replaces (and its card) is kept in
   ``<target folder>/.history/<target stem>/<UTC time>-<sha256[:12]>/``, and the install is recorded in that
   folder's ``history.json``; the newest ``--keep`` models and records are kept. ``trep-edge rollback`` installs a
   kept model again the same way (so a rollback can be rolled back) and ``trep-edge rollback --list`` prints it all.

Torch (parity check, checkpoint) is imported only when a candidate is promoted: ``trep-edge rollback`` runs on an
edge box with the runtime's dependencies alone.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from trep_edge.datasets.archive import ArchivedSeries, latest_timestamp, read_alert_ranges, read_archive
from trep_edge.runtime.service.atomic_file import write_atomically
from trep_edge.runtime.service.config import MonitorConfig, load_config
from trep_edge.runtime.core.engine import Engine, file_sha256, load_engine
from trep_edge.runtime.core.model_card import sidecar_path
from trep_edge.runtime.core.detector import DetectorConfig
from trep_edge.runtime.core.offline import detect_recording, prepare
from trep_edge.runtime.core.windows import WindowConfig

from trep_edge.training.shadow import check_hours, shadow_score, summary

DAY = 86400.0
HISTORY = ".history"
HISTORY_FILE = "history.json"
SHADOW_PREFIX = "shadow-"
STAMP = "%Y%m%dT%H%M%S.%fZ"
KEPT_PATTERN = re.compile(r"^(\d{8}T\d{6}\.\d{6}Z)-[0-9a-f]{12}$")
CARD_FIELDS = ("name", "weights_sha256", "precision", "window", "channels")


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
    history: dict | None = None
    """The install's record in the target's history (``history.json``), when it was installed."""
    shadow: dict | None = None
    """The shadow run's comparison (``--shadow``) and ``report``, the path of its JSON in the target's history."""

    def to_dict(self) -> dict:
        """JSON form, with the rates spelled out."""
        out = dataclasses.asdict(self)
        out["candidate_rate"]["rate"] = self.candidate_rate.rate
        if self.running_rate is not None:
            out["running_rate"]["rate"] = self.running_rate.rate
        out["accepted"] = not self.refused
        return out


def alert_rate(engine: Engine, series: list[ArchivedSeries], config: MonitorConfig | None = None) -> AlertRate:
    """Score each archived series through the daemon's monitor at its own timestamps (``offline.detect_recording``)
    and count the detector's alerts per scored reading. ``config``: the daemon's settings (``[windows]``,
    ``[detector]``); without, the defaults on the card's period (1 s when it has none)."""
    windows = config.windows if config is not None else WindowConfig(period=engine.card.period or 1.0)
    detector = config.detector if config is not None else DetectorConfig()
    alerts = scored = 0
    for item in series:
        det = detect_recording(engine, item.values, detector, item.channels, windows=windows,
                               timestamps=item.timestamps, stream=item.stream)  # fmt: skip
        alerts += int(det.alerts.sum())
        scored += int((np.isfinite(det.surprise) & ~det.warming).sum())  # as the shadow run counts them
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
    keep: int = 5,
    shadow_hours: float | None = None,
    config: str | Path | None = None,
) -> PromotionReport:
    """Check ``candidate`` against the archive and the running ``target``; install it when every check passes.

    The model it replaces is kept in the target's history first (``keep``: how many models and records stay).
    ``config`` (the daemon's TOML file): its ``[windows]`` and ``[detector]`` settings score the alert rates.
    ``shadow_hours``: score live traffic beside the installed model that long first, subscribing as that daemon.
    """
    from trep_edge.training.export import calibration_stats, parity_check, write_card  # torch: only here, not for a rollback
    from trep_edge.training.trainer import Trainer, deployed_encoder, resolve_checkpoint

    candidate, archive, target = Path(candidate), Path(archive), Path(target)
    _check_keep(keep)
    if shadow_hours is not None:  # refused before the long checks: a shadow run that cannot start
        check_hours(shadow_hours)
        if config is None or not target.is_file():
            raise ValueError("--shadow needs the daemon's --config (broker, topics, detector settings) and the "
                             "model it runs installed at --target, to score beside it")  # fmt: skip
    monitor_config = None if config is None else load_config(config)
    engine = load_engine(candidate, "cpu")
    card = engine.card
    trainer = Trainer.load(resolve_checkpoint(checkpoint or candidate, card.weights_sha256), device="cpu")
    encoder = deployed_encoder(trainer, card.scaling == "stream")
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
        last_day_archive = read_archive(archive, card.channels, since=last_day)
        cand_rate = alert_rate(staged_engine, last_day_archive, monitor_config)
        running = load_engine(target, "cpu") if target.exists() else None
        run_rate = None if running is None else alert_rate(running, read_archive(archive, running.card.channels,
                                                                                    since=last_day), monitor_config)  # fmt: skip
        report = PromotionReport(str(candidate), str(target), staged_engine.sha256,
                                 {"max_abs_diff": parity.max_abs_diff, "cases": parity.cases,
                                  "alerts_identical": parity.alerts_identical, "ok": parity.ok},
                                 card.calibration.to_dict(), cand_rate, run_rate)  # fmt: skip
        report.refused = refusals(parity.ok, parity.max_abs_diff, cand_rate, run_rate, max_ratio, min_rate)
        if shadow_hours is not None and monitor_config is not None and not report.refused:
            report.shadow = run_shadow(monitor_config, target, staged, shadow_hours, keep)
            report.refused = shadow_refusals(report.shadow, max_ratio, min_rate)
        if not report.refused and not dry_run:
            checks = {"parity_max_abs_diff": parity.max_abs_diff, "alert_rate": cand_rate.rate,
                      "running_alert_rate": None if run_rate is None else run_rate.rate}  # fmt: skip
            if report.shadow is not None:
                checks["shadow_report"] = report.shadow["report"]
            report.history = install_with_history(staged, target, keep, command="promote", verdict="accepted",
                                                  source=str(candidate), checks=checks)  # fmt: skip
            report.installed = True
    return report


def refusals(parity_ok: bool, max_abs_diff: float, candidate: AlertRate, running: AlertRate | None,
             max_ratio: float, min_rate: float) -> list[str]:  # fmt: skip
    """Why a candidate must not be installed (empty: it may): parity, then its alert rate against the running one."""
    reasons = []
    if not parity_ok:
        reasons.append(f"parity: max |torch - onnxruntime| {max_abs_diff:.2e} (limit 1e-4) or different alerts")
    return reasons + _rate_refusal("alert rate on the last day", candidate, running, max_ratio, min_rate)


def _rate_refusal(what: str, candidate: AlertRate, running: AlertRate | None, max_ratio: float,
                  min_rate: float) -> list[str]:  # fmt: skip
    """The alert-rate rule: refused above ``max_ratio`` x the running model's rate and above ``min_rate``."""
    if running is None or candidate.rate <= max(max_ratio * running.rate, min_rate):
        return []
    return [f"{what} {candidate.rate:.4f} > {max_ratio:g} x the running model's {running.rate:.4f} "
            f"(and > {min_rate:g})"]  # fmt: skip


def shadow_refusals(shadow: dict, max_ratio: float, min_rate: float) -> list[str]:
    """Why the shadow run refuses a candidate: no telemetry at all, or the live alert-rate rule (alerts per scored
    reading, the detector's decisions). Disagreement and drift are reported, not refused."""
    models = shadow["models"]
    if not models["installed"]["readings"]:
        return [f"shadow: no reading arrived in {shadow['hours']:g} h on {', '.join(shadow['topics'])}; check "
                "--config (the daemon's broker and topics)"]  # fmt: skip
    installed, candidate = (AlertRate(models[r]["alerts"], models[r]["scored"]) for r in ("installed", "candidate"))
    return _rate_refusal("shadow: alert rate on live traffic", candidate, installed, max_ratio, min_rate)


def run_shadow(config: MonitorConfig, target: Path, staged: Path, hours: float, keep: int) -> dict:
    """Score live traffic with the staged candidate beside the installed ``target`` (``shadow.shadow_score``, both
    loaded as the daemon loads its model); write the JSON report and its summary to the target's history folder
    (the newest ``keep`` are kept) and return the comparison with ``report``, the JSON's path."""
    m = config.model
    installed, candidate = (load_engine(p, m.providers, m.threads, m.engine) for p in (target, staged))
    result = shadow_score(config, installed, candidate, hours)
    folder = history_folder(target)
    folder.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime(STAMP)
    path = folder / f"{SHADOW_PREFIX}{stamp}-{candidate.sha256[:12]}.json"
    text = summary(result)
    result["report"] = str(path)
    write_atomically(path, lambda fh: fh.write((json.dumps(result, indent=2) + "\n").encode()), mode=0o644)
    write_atomically(path.with_suffix(".txt"), lambda fh: fh.write(text.encode()), mode=0o644)
    for old in sorted(folder.glob(f"{SHADOW_PREFIX}*.json"))[:-keep]:
        old.unlink()
        old.with_suffix(".txt").unlink(missing_ok=True)
    print(text, end="", file=sys.stderr)
    return result


def install(staged: Path, target: Path) -> None:
    """Put the card, then the model, in place, each atomically and durably (``write_atomically``).

    The daemon watches the model file, so the card beside it is already the new one when the change is seen. A
    staged model without a card sidecar (a kept model that ran without one) removes the target's: the card inside
    the model file then speaks alone. The history keeps and restores models with this function too.
    """
    card = sidecar_path(staged)
    if card.is_file():
        write_atomically(sidecar_path(target), lambda fh: fh.write(card.read_bytes()), mode=0o644)
    else:
        sidecar_path(target).unlink(missing_ok=True)
    write_atomically(target, lambda fh: fh.write(staged.read_bytes()), mode=0o644)  # the daemon's user reads it


@dataclass
class KeptModel:
    """A model of the target's history: ``path`` is its model file (its card sidecar beside it, when it had one)."""

    path: Path
    sha256: str
    kept_at: str

    def to_dict(self) -> dict:
        """JSON form, with the card's identifying fields."""
        return {"sha256": self.sha256, "kept_at": self.kept_at, "path": str(self.path),
                "card": card_fields(sidecar_path(self.path))}  # fmt: skip


def history_folder(target: str | Path) -> Path:
    """``models/current.onnx`` → ``models/.history/current``: the kept models and ``history.json``."""
    target = Path(target)
    return target.parent / HISTORY / target.stem


def card_fields(card: Path) -> dict | None:
    """The identifying fields of a card sidecar (name, weights hash, precision, window, channels, calibration
    source); None when there is no readable card."""
    try:
        data = json.loads(card.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    fields = {k: data.get(k) for k in CARD_FIELDS}
    fields["calibration_source"] = (data.get("calibration") or {}).get("source")
    return fields


def kept_models(target: str | Path) -> list[KeptModel]:
    """The models kept for ``target``, oldest first (a folder whose model file is missing is skipped)."""
    folder, name = history_folder(target), Path(target).name
    kept = sorted(p for p in folder.iterdir() if KEPT_PATTERN.match(p.name)) if folder.is_dir() else []
    return [KeptModel(p / name, file_sha256(p / name), KEPT_PATTERN.match(p.name)[1]) for p in kept
            if (p / name).is_file()]  # fmt: skip


def install_with_history(staged: Path, target: Path, keep: int = 5, **record) -> dict:
    """``install``, keeping the model it replaces in the target's history first; returns the install's record.

    ``record``: what else the record says (command, verdict, ...). A model kept already (same sha256 and card) is
    moved to the newest place instead of copied again, so going back and forth does not push older models out.
    Only the newest ``keep`` kept models and records stay.
    """
    _check_keep(keep)
    folder = history_folder(target)
    records = read_history(target)  # a broken history.json stops here, before anything changed
    previous = file_sha256(target) if target.is_file() else None
    if previous is not None:
        folder.mkdir(parents=True, exist_ok=True)
        _keep(target, previous, folder)
    entry = {"installed_at": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"),
             "sha256": file_sha256(staged), "previous_sha256": previous, **record,
             "card": card_fields(sidecar_path(staged))}  # fmt: skip
    install(staged, target)
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"target": target.name, "installs": [*records, entry][-keep:]}, indent=2) + "\n"
    write_atomically(folder / HISTORY_FILE, lambda fh: fh.write(text.encode()), mode=0o644)
    for old in sorted(p for p in folder.iterdir() if KEPT_PATTERN.match(p.name))[:-keep]:
        shutil.rmtree(old)
    return entry


def _keep(target: Path, sha256: str, folder: Path) -> None:
    """Keep the installed model and its card in a new, newest folder of the history."""
    newest = max((KEPT_PATTERN.match(p.name)[1] for p in folder.iterdir() if KEPT_PATTERN.match(p.name)), default="")
    now = datetime.now(timezone.utc)
    if newest and now <= (last := datetime.strptime(newest, STAMP).replace(tzinfo=timezone.utc)):
        now = last + timedelta(microseconds=1)  # a clock set back must not make this the oldest
    dest = folder / f"{now.strftime(STAMP)}-{sha256[:12]}"
    card = _read_or_none(sidecar_path(target))
    same = [k for k in kept_models(target) if k.sha256 == sha256 and _read_or_none(sidecar_path(k.path)) == card]
    if same:
        os.replace(same[-1].path.parent, dest)
    else:
        dest.mkdir()
        install(target, dest / target.name)


def _read_or_none(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def _check_keep(keep: int) -> None:
    if keep < 1:
        raise ValueError(f"--keep {keep}: keep at least 1 model (the history is what trep-edge rollback restores)")


def read_history(target: str | Path) -> list[dict]:
    """The install records of ``target``'s ``history.json``, oldest first (none when there is no history yet)."""
    path = history_folder(target) / HISTORY_FILE
    if not path.is_file():
        return []
    try:
        return list(json.loads(path.read_text())["installs"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path} is not a trep-edge model history ({exc!r}): repair or delete it") from None


def history(target: str | Path) -> dict:
    """What ``trep-edge rollback --list`` prints: the installed sha256, the kept models and the install records,
    newest first."""
    target = Path(target)
    folder = history_folder(target)
    if not folder.is_dir():
        raise FileNotFoundError(_no_history(target))
    return {"target": str(target), "history": str(folder),
            "installed_sha256": file_sha256(target) if target.is_file() else None,
            "kept": [k.to_dict() for k in reversed(kept_models(target))],
            "installs": list(reversed(read_history(target)))}  # fmt: skip


def _no_history(target: Path) -> str:
    return (f"no model history for {target} ({history_folder(target)} is missing): only trep-edge promote and "
            "rollback keep the model they replace")  # fmt: skip


def rollback(target: str | Path, to: str | None = None, keep: int = 5) -> dict:
    """Install a kept model at ``target`` again (card, then model), keeping the one it replaces; return the record.

    ``to``: the start of the kept model's sha256; default: the newest kept model other than the installed one, i.e.
    the model the last install replaced (so a second rollback undoes the first).
    """
    target = Path(target)
    if not target.is_file():
        raise FileNotFoundError(f"{target} does not exist: --target must name the installed model file (the "
                                "daemon's [model] path)")  # fmt: skip
    kept = kept_models(target)
    if not kept:
        raise FileNotFoundError(_no_history(target) if not history_folder(target).is_dir() else
                                f"no model is kept in {history_folder(target)} yet: nothing to roll back to")
    installed = file_sha256(target)
    if to is None:
        others = [k for k in kept if k.sha256 != installed]
        if not others:
            raise ValueError(f"the history of {target} keeps only the installed model ({installed[:12]}): nothing "
                             "to roll back to")  # fmt: skip
        chosen = others[-1]
    else:
        by_sha = {k.sha256: k for k in kept}  # the newest copy of each model
        prefix = to.strip().lower()
        matches = sorted(s for s in {*by_sha, installed} if prefix and s.startswith(prefix))
        if not matches:
            listing = ", ".join(k.sha256[:12] for k in reversed(kept))
            raise ValueError(f"--to {to!r}: no model kept for {target} has a sha256 starting with it (kept: "
                             f"{listing}; see trep-edge rollback --list --target {target})")  # fmt: skip
        if len(matches) > 1:
            raise ValueError(f"--to {to!r} is ambiguous: it starts the sha256 of {len(matches)} models "
                             f"({', '.join(s[:12] for s in matches)}): give more digits")  # fmt: skip
        if matches[0] == installed:
            raise ValueError(f"--to {to!r} is the model installed at {target} already: nothing to roll back")
        chosen = by_sha[matches[0]]
    return install_with_history(chosen.path, target, keep, command="rollback", verdict="rollback",
                                source=str(chosen.path.parent))  # fmt: skip


def promote_command(args) -> int:
    """``trep-edge promote``: print the report; exit 1 when the candidate was refused."""
    report = promote(args.candidate, args.archive, args.target, args.checkpoint, args.days, args.calibration_steps,
                     args.max_alert_ratio, args.min_alert_rate, args.dry_run, args.keep, args.shadow,
                     args.config)  # fmt: skip
    text = json.dumps(report.to_dict(), indent=2)
    if args.report:
        Path(args.report).write_text(text + "\n")
    print(text)
    return 1 if report.refused else 0


def rollback_command(args) -> int:
    """``trep-edge rollback``: print the install's record (``--list``: the history) as JSON."""
    result = history(args.target) if args.list else rollback(args.target, args.to, args.keep)
    print(json.dumps(result, indent=2))
    return 0
