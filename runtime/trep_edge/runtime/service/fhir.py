"""Alert episodes as FHIR resources: each episode change (raised, updated, cleared) as one FHIR R5 transaction Bundle.

The Bundle holds three kinds of resource, all PUT under ids derived from the episode's ``alert_id``, so a FHIR
server keeps one Flag per episode that each change replaces, and a change published twice (after a restart from a
checkpoint, docs/alerts.md) writes the same resources again instead of adding copies:

- a **Flag**: the episode, ``active`` while it is open (raised, updated), ``inactive`` once cleared, its severity
  as the core extension ``flag-priority`` (warning: PM, critical: PH), ``period`` from the raise to the clear;
- an **Observation** of the anomaly: the detector's score against its threshold (``referenceRange.high``),
  interpretation ``A`` (warning), ``AA`` (critical) or ``N`` (cleared), derived from the readings below;
- one **Observation per channel value** of the reading that changed the episode, coded by the model card's
  ``channel_codes`` (LOINC and a UCUM unit for the ICU vitals) or named by the channel only.

Why R5 Flag + Observation: the resource made for device alarms, DeviceAlert, exists only in the R6 ballots, and
``fhir.resources`` (the maintained Python models, R5 by default with R4B and STU3 builds) has none. Every element
used here exists with the same meaning in R4/R4B, so an R4 server reads the same JSON (the tests validate it with
both builds). The resources are built as plain dicts: edge boxes do not have ``fhir.resources``; only the tests do.
"""
from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from trep_edge.runtime.core.model_card import ModelCard
from trep_edge.runtime.core.monitor import AlertOut

ID_PATTERN = re.compile(r"[A-Za-z0-9\-.]{1,64}")
"""A FHIR resource id (the ``id`` datatype)."""
SUBJECT_TYPES = ("Patient", "Group", "Location")
"""Resource types a subject may name: ones both Flag.subject and Observation.subject accept."""
DEVICE_TYPES = ("Device", "DeviceMetric")
"""Resource types Observation.device accepts."""
OBSERVATION_CATEGORIES = ("social-history", "vital-signs", "imaging", "laboratory", "procedure", "survey", "exam",
                          "therapy", "activity")  # fmt: skip
"""Codes of http://terminology.hl7.org/CodeSystem/observation-category."""
INTERPRETATION = {"warning": ("A", "Abnormal"), "critical": ("AA", "Critical abnormal"), "cleared": ("N", "Normal")}
PRIORITY = {"warning": ("PM", "Medium priority"), "critical": ("PH", "High priority")}
INTERPRETATION_SYSTEM = "http://terminology.hl7.org/CodeSystem/v3-ObservationInterpretation"
PRIORITY_EXTENSION = "http://hl7.org/fhir/StructureDefinition/flag-priority"
PRIORITY_SYSTEM = "http://hl7.org/fhir/flag-priority-code"
UCUM = "http://unitsofmeasure.org"


@dataclass(frozen=True)
class FhirConfig:
    """FHIR output of alert episodes ([fhir], docs/alerts.md "FHIR").

    Attributes:
        enabled: publish each episode change (raised, updated, cleared) also as a FHIR R5 transaction Bundle of a
            Flag and Observations, next to the alert message.
        topic: topic of the Bundles, QoS 1, not retained; {stream} is the stream id.
        subject: reference of whom an episode is about (the Flag's and the Observations' subject), of type Patient,
            Group or Location; {stream} is the stream id as a FHIR id (other characters than letters, digits, '-'
            and '.' become '-', with a hash suffix).
        device: reference of the device that measured the readings (the channel Observations' device), e.g.
            Device/{stream}; '' = none.
        category: observation category code of the channel Observations (e.g. vital-signs, laboratory); '' = none.
    """

    enabled: bool = False
    topic: str = "trep-edge/fhir/{stream}"
    subject: str = "Patient/{stream}"
    device: str = ""
    category: str = "vital-signs"

    def __post_init__(self) -> None:
        if not self.topic or "+" in self.topic or "#" in self.topic:
            raise ValueError(f"fhir.topic must be a topic without wildcards, got {self.topic!r}")
        if _reference_type(self.subject) not in SUBJECT_TYPES:
            raise ValueError(f"fhir.subject must be a reference TYPE/ID with TYPE one of {list(SUBJECT_TYPES)} (what "
                             f"Flag and Observation both accept), got {self.subject!r}; e.g. Patient/{{stream}}")
        if self.device and _reference_type(self.device) not in DEVICE_TYPES:
            raise ValueError(f"fhir.device must be '' or a reference TYPE/ID with TYPE one of {list(DEVICE_TYPES)}, "
                             f"got {self.device!r}; e.g. Device/{{stream}}")
        if self.category and self.category not in OBSERVATION_CATEGORIES:
            raise ValueError(f"fhir.category must be '' or one of {list(OBSERVATION_CATEGORIES)}, "
                             f"got {self.category!r}")


def _reference_type(template: str) -> str:
    """The resource type of a ``TYPE/ID`` reference template ('' when it is not one)."""
    kind, _, rest = template.partition("/")
    return kind if rest and "/" not in rest else ""


def fhir_id(text: str) -> str:
    """``text`` as a FHIR id: itself when it is one; else its other characters as '-', cut to leave room for a hash
    of the whole text, so that two different texts never share an id."""
    if ID_PATTERN.fullmatch(text):
        return text
    return re.sub(r"[^A-Za-z0-9\-.]", "-", text)[:53] + "-" + hashlib.sha256(text.encode()).hexdigest()[:10]


def instant(seconds: float) -> str:
    """Unix seconds as a FHIR instant (UTC, milliseconds)."""
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _coding(system: str, code: str, display: str) -> dict[str, Any]:
    return {"coding": [{"system": system, "code": code, "display": display}]}


def episode_bundle(
    alert: AlertOut,
    card: ModelCard,
    model_sha256: str,
    config: FhirConfig,
    raised_at: float | None,
    published: float,
) -> dict[str, Any]:
    """The transaction Bundle of one episode change (module docstring); ``raised_at`` is when the episode opened,
    None when unknown (the Flag's period then starts nowhere)."""
    subject = {"reference": config.subject.replace("{stream}", fhir_id(alert.stream))}
    model = f"trep-edge model {card.name}"
    measured = {"issued": instant(published)}
    if math.isfinite(alert.timestamp):
        measured = {"effectiveDateTime": instant(alert.timestamp), **measured}
    readings = [_reading(alert, channel, value, card, config, subject, measured)
                for channel, value in alert.values.items() if math.isfinite(value)]  # fmt: skip
    level = "cleared" if alert.state == "cleared" else alert.severity
    anomaly: dict[str, Any] = {
        "resourceType": "Observation", "id": fhir_id(f"{alert.alert_id}-{alert.state}"), "status": "final",
        "code": {"text": "trep-edge anomaly score"}, "subject": subject, **measured,
        "interpretation": [_coding(INTERPRETATION_SYSTEM, *INTERPRETATION[level])],
        "method": {"text": f"{model} (sha256 {model_sha256[:12]}): surprise, -log10 of the reading's tail probability "
                           "in the stream's history"},
        "device": {"display": model},
    }  # fmt: skip
    if math.isfinite(alert.score):
        anomaly["valueQuantity"] = {"value": alert.score}
    else:  # a clear on the stream's removal: no reading
        anomaly["dataAbsentReason"] = _coding("http://terminology.hl7.org/CodeSystem/data-absent-reason", "unknown",
                                              "Unknown")  # fmt: skip
    if math.isfinite(alert.threshold):
        anomaly["referenceRange"] = [{"high": {"value": alert.threshold}, "text": "the detector's alert threshold"}]
    if readings:
        anomaly["derivedFrom"] = [{"reference": f"Observation/{r['id']}"} for r in readings]
    flag: dict[str, Any] = {
        "resourceType": "Flag", "id": fhir_id(alert.alert_id),
        "extension": [{"url": PRIORITY_EXTENSION, "valueCodeableConcept": _coding(PRIORITY_SYSTEM,
                                                                                  *PRIORITY[alert.severity])}],
        "identifier": [{"value": alert.alert_id}],
        "status": "inactive" if alert.state == "cleared" else "active",
        "category": [_coding("http://terminology.hl7.org/CodeSystem/flag-category", "clinical", "Clinical")],
        "code": {"text": f"Anomalous {alert.channel + ' ' if alert.channel else ''}readings ({alert.severity}), "
                         f"{model}"},
        "subject": subject, "author": {"display": model},
    }  # fmt: skip
    period = {"start": instant(raised_at)} if raised_at is not None and math.isfinite(raised_at) else {}
    if alert.state == "cleared" and math.isfinite(alert.timestamp):
        period["end"] = instant(alert.timestamp)
    if period:
        flag["period"] = period
    return {"resourceType": "Bundle", "type": "transaction", "timestamp": instant(published),
            "entry": [{"resource": r, "request": {"method": "PUT", "url": f"{r['resourceType']}/{r['id']}"}}
                      for r in (flag, anomaly, *readings)]}  # fmt: skip


def _reading(
    alert: AlertOut,
    channel: str,
    value: float,
    card: ModelCard,
    config: FhirConfig,
    subject: dict[str, str],
    measured: dict[str, str],
) -> dict[str, Any]:
    """One channel's value of the reading that changed the episode, coded by the card when it can be."""
    coded = card.channel_codes.get(channel, {})
    reading_id = fhir_id(f"{alert.alert_id}-{alert.state}-{channel}")
    observation: dict[str, Any] = {"resourceType": "Observation", "id": reading_id, "status": "final"}
    if config.category:
        observation["category"] = [{"coding": [{"system": "http://terminology.hl7.org/CodeSystem/observation-category",
                                                "code": config.category}]}]  # fmt: skip
    coding = [{k: coded[k] for k in ("system", "code", "display") if k in coded}] if coded else []
    observation["code"] = {"coding": coding, "text": channel} if coding else {"text": channel}
    observation.update(subject=subject, **measured, valueQuantity={"value": value})
    if "unit" in coded:
        observation["valueQuantity"].update(unit=coded["unit"], system=UCUM, code=coded["unit"])
    if config.device:
        observation["device"] = {"reference": config.device.replace("{stream}", fhir_id(alert.stream))}
    return observation


class FhirEpisodes:
    """The daemon's FHIR publisher state: when each open episode was raised, for its Flag's period (held from the
    raise to the clear; lost on a restart, after which the Flag of an episode open across it has no start)."""

    def __init__(self) -> None:
        self._raised: dict[str, float] = {}

    def bundle(self, alert: AlertOut, card: ModelCard, model_sha256: str, config: FhirConfig,
               published: float) -> dict[str, Any]:  # fmt: skip
        """The Bundle of one episode change (``episode_bundle``), remembering or forgetting the raise time."""
        if alert.state == "raised":
            self._raised[alert.alert_id] = alert.timestamp
        raised_at = (self._raised.pop if alert.state == "cleared" else self._raised.get)(alert.alert_id, None)
        return episode_bundle(alert, card, model_sha256, config, raised_at, published)
