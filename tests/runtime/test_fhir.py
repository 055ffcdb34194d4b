"""FHIR output (runtime/trep_edge/runtime/service/fhir.py, docs/alerts.md "FHIR"): an ICU episode's raise, severity update and clear as
transaction Bundles that the maintained ``fhir.resources`` models accept as FHIR R5 and as R4B, with the channels'
values coded by the shipped card's LOINC codes; a broken resource is refused; bad ``[fhir]`` settings are refused;
and a real daemon on a real Mosquitto publishes a valid Bundle on the FHIR topic for each alert message.
"""
from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path

import pytest
from broker import broker, collectors, daemons, daemon_tables  # noqa: F401 - fixtures
from fhir.resources.bundle import Bundle
from fhir.resources.R4B.bundle import Bundle as BundleR4B
from pydantic import ValidationError
from test_daemon_bad_input import _ready_daemon
from test_daemon_lifecycle import _send, _series

from trep_edge.runtime.core.engine import load_engine
from trep_edge.runtime.service.fhir import ID_PATTERN, FhirConfig, FhirEpisodes, fhir_id
from trep_edge.runtime.core.model_card import ModelCard
from trep_edge.runtime.core.monitor import AlertOut
from trep_edge.training.export import write_card

MODELS = Path(__file__).resolve().parents[2] / "models"
ICU_CARD = ModelCard.from_json((MODELS / "icu-vitals.card.json").read_text())
UCUM = "http://unitsofmeasure.org"
T0 = 1_714_564_800.0  # 2024-05-01T12:00:00Z
VALUES = {"HR": 131.0, "O2Sat": 88.0, "Temp": 38.9, "SBP": 92.0, "MAP": 61.0, "DBP": 45.0, "Resp": math.nan}
FLAG_STATUSES = {"active", "inactive", "entered-in-error"}
OBSERVATION_STATUSES = {"registered", "preliminary", "final", "amended", "corrected", "cancelled", "entered-in-error",
                        "unknown"}  # fmt: skip
"""The specification's required code lists, which the models do not check."""


def _alert(state: str, severity: str, t: float, score: float = 6.0, values: dict | None = None) -> AlertOut:
    """A change of episode 1 of stream ``icu/bed 7`` (not a FHIR id), threshold 4.5, at time ``t``."""
    values = dict(VALUES) if values is None else values
    return AlertOut("icu/bed 7-1", "icu/bed 7", state, severity, score, 4.5, "", values, t - 48 * 3600, t, t)


def _episode(config: FhirConfig) -> list[dict]:
    """An ICU episode's three changes as Bundles, through JSON text as on the wire."""
    episodes = FhirEpisodes()
    changes = [_alert("raised", "warning", T0), _alert("updated", "critical", T0 + 3600, score=9.0),
               _alert("cleared", "critical", T0 + 3 * 3600, score=2.0)]  # fmt: skip
    return [json.loads(json.dumps(episodes.bundle(a, ICU_CARD, "ab" * 32, config, a.timestamp + 1))) for a in changes]


def _resources(bundle) -> tuple:
    """(Flag, anomaly Observation, channel Observations) of a parsed Bundle."""
    flag, anomaly, *readings = [e.resource for e in bundle.entry]
    return flag, anomaly, readings


@pytest.mark.parametrize("model", [Bundle, BundleR4B], ids=["R5", "R4B"])
def test_an_icu_episode_is_a_valid_flag_and_loinc_coded_observations_at_each_change(model):
    config = FhirConfig(enabled=True, device="Device/{stream}")
    parsed = [model.model_validate(b) for b in _episode(config)]
    flags, anomalies, readings = zip(*map(_resources, parsed))
    stream = fhir_id("icu/bed 7")
    assert ID_PATTERN.fullmatch(stream) and stream != fhir_id("icu-bed-7") and stream.startswith("icu-bed-7-")

    assert {f.get_resource_type() for f in flags} == {"Flag"} and len({f.id for f in flags}) == 1
    assert [f.status for f in flags] == ["active", "active", "inactive"] and {f.status for f in flags} <= FLAG_STATUSES
    assert [f.extension[0].valueCodeableConcept.coding[0].code for f in flags] == ["PM", "PH", "PH"]
    assert [f.identifier[0].value for f in flags] == ["icu/bed 7-1"] * 3
    assert all(f.subject.reference == f"Patient/{stream}" for f in flags)
    assert flags[0].period.end is None and flags[2].period.start == flags[0].period.start  # the raise, kept to the end
    assert flags[2].period.end.timestamp() == T0 + 3 * 3600 and flags[0].period.start.timestamp() == T0

    assert [a.interpretation[0].coding[0].code for a in anomalies] == ["A", "AA", "N"]
    assert [a.valueQuantity.value for a in anomalies] == [6.0, 9.0, 2.0]
    assert all(a.referenceRange[0].high.value == 4.5 and a.status in OBSERVATION_STATUSES for a in anomalies)
    assert len({a.id for a in anomalies}) == 3  # one per change: a repeat of the same change overwrites, never adds

    for anomaly, observed in zip(anomalies, readings):
        loinc = {o.code.coding[0].code: o for o in observed}
        assert {c: float(o.valueQuantity.value) for c, o in loinc.items()} == {
            ICU_CARD.channel_codes[ch]["code"]: v for ch, v in VALUES.items() if not math.isnan(v)}  # Resp is missing
        assert {o.code.coding[0].system for o in observed} == {"http://loinc.org"}
        hr, spo2 = loinc["8867-4"], loinc["59408-5"]
        assert (hr.valueQuantity.code, hr.valueQuantity.system, spo2.valueQuantity.code) == ("/min", UCUM, "%")
        assert hr.category[0].coding[0].code == "vital-signs" and hr.device.reference == f"Device/{stream}"
        assert hr.effectiveDateTime == anomaly.effectiveDateTime and hr.subject.reference == f"Patient/{stream}"
        assert [r.reference for r in anomaly.derivedFrom] == [f"Observation/{o.id}" for o in observed]
    for bundle in parsed:
        assert bundle.type == "transaction"
        assert all(e.request.method == "PUT" and e.request.url == f"{e.resource.get_resource_type()}/{e.resource.id}"
                   for e in bundle.entry)  # fmt: skip


def test_a_clear_on_the_streams_removal_has_no_reading_and_still_validates():
    episodes, config = FhirEpisodes(), FhirConfig(enabled=True)
    episodes.bundle(_alert("raised", "warning", T0), ICU_CARD, "ab" * 32, config, T0)
    gone = _alert("cleared", "warning", T0 + 600, score=math.nan, values=dict.fromkeys(VALUES, math.nan))
    flag, anomaly, readings = _resources(Bundle.model_validate(episodes.bundle(gone, ICU_CARD, "ab" * 32, config, T0)))
    assert readings == [] and anomaly.derivedFrom is None and anomaly.valueQuantity is None
    assert anomaly.dataAbsentReason.coding[0].code == "unknown" and flag.status == "inactive"


@pytest.mark.parametrize("path, value", [(("entry", 0, "resource", "code"), None),  # Flag.code is required
                                         (("entry", 1, "resource", "effectiveDateTime"), "2024-05-01 12:00"),
                                         (("entry", 2, "resource", "valueQuantity", "value"), "high"),
                                         (("entry", 0, "resource", "id"), "icu/bed 7-1"),
                                         (("entry", 1, "resource", "score"), 6.0)])  # fmt: skip
def test_a_broken_resource_is_refused_by_the_fhir_models(path, value):
    bundle = _episode(FhirConfig(enabled=True))[0]
    Bundle.model_validate(bundle)
    *parents, key = path
    node = bundle
    for step in parents:
        node = node[step]
    if value is None:
        del node[key]
    else:
        node[key] = value
    with pytest.raises(ValidationError):
        Bundle.model_validate(bundle)


@pytest.mark.parametrize("settings, problem", [({"subject": "Device/{stream}"}, "fhir.subject must be"),
                                               ({"subject": "{stream}"}, "fhir.subject must be"),
                                               ({"device": "Patient/{stream}"}, "fhir.device must be"),
                                               ({"category": "vitals"}, "fhir.category must be"),
                                               ({"topic": "fhir/#"}, "fhir.topic must be")])  # fmt: skip
def test_bad_fhir_settings_are_refused_with_what_to_write(settings, problem):
    with pytest.raises(ValueError, match=problem):
        FhirConfig(**settings)


def test_the_daemon_publishes_a_valid_fhir_bundle_for_each_alert_message(
    tmp_path, broker, daemons, collectors, univariate_model, ucr_series
):
    model = tmp_path / "coded.onnx"  # the fixture model with a LOINC code on its channel
    shutil.copy(univariate_model, model)
    engine = load_engine(model, "cpu")
    engine.card.channel_codes = {"value": ICU_CARD.channel_codes["HR"]}
    write_card(model, engine.card)
    out = collectors(broker.port, ["trep-edge/alerts/#", "fhir/#"])
    _ready_daemon(tmp_path, broker, daemons, model, monitor={"tick_interval": 0.1},
                  fhir={"enabled": True, "topic": "fhir/{stream}", "subject": "Patient/{stream}"})  # fmt: skip
    t0 = float(int(time.time())) - 1000
    _send(broker, "bed7", _series(ucr_series), t0)

    def episode(c) -> list[dict]:
        got = [m for m in (r.json() for r in c.select("trep-edge/alerts/bed7")) if m["kind"] == "anomaly"]
        return got if got and got[-1]["state"] == "cleared" and len(c.select("fhir/bed7")) >= len(got) else []

    alerts = out.wait_for(episode, timeout=60, what="bed7's episode, raised to cleared, and its FHIR Bundles")
    bundles = [Bundle.model_validate_json(m.payload) for m in out.select("fhir/bed7")]
    assert len(bundles) == len(alerts) >= 2
    for alert, bundle in zip(alerts, bundles):
        flag, anomaly, [reading] = _resources(bundle)
        assert flag.identifier[0].value == alert["alert_id"] and flag.subject.reference == "Patient/bed7"
        assert flag.status == ("inactive" if alert["state"] == "cleared" else "active")
        assert float(anomaly.valueQuantity.value) == pytest.approx(alert["score"])
        assert anomaly.effectiveDateTime.timestamp() == pytest.approx(alert["timestamp"])
        assert (reading.code.coding[0].code, float(reading.valueQuantity.value)) == ("8867-4", alert["values"]["value"])
    assert bundles[-1].entry[0].resource.period.start.timestamp() == pytest.approx(alerts[0]["timestamp"])
