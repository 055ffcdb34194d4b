"""The streaming anomaly detector: per-reading signals → surprise → one alert decision (numpy only).

The paper's adjusted masked-vs-unmasked score measures amplitude, turns slow anomalies into nothing and spikes at
every recurring normal edge, and its Gaussian μ + 4σ threshold does not fit its heavy tail
(docs/detection.md). This detector keeps the model's two views of a reading and judges each against the stream's
own history, on a scale that means the same for every stream and every model:

1. **Signals** of each scored reading (``SIGNALS``):
   ``distance``, the paper's L1 distance between the last-step representations of the unmasked and the
   last-step-masked window (how unexpected the reading is in its context), and ``novelty``, the distance from the
   window's representation to the nearest of a bounded memory of the stream's earlier representations
   (``RepresentationMemory``: how new the recent pattern is — a flat stretch where a cycle should be, a changed
   period, a new level). Both are ≥ 0 and heavy-tailed, so they are judged in log space. ``deviation`` is the
   reading's distance from the rest of its window in robust scales (``window_deviation``), the plain-value view
   that catches the faults an imperfect model smooths over; where the reading's change from the previous one is a
   record of its channel's recent changes (``StepRecord``), that step counts too, so a jump that stays inside the
   range of a periodic window is not lost in the cycle's spread.
2. **Surprise** (``SignalStats``): each signal's long-run mean and variance per stream (expanding, then exponential
   with memory ``horizon``), and the tail probability of the reading's value — and of the mean of the last
   ``short`` values, for anomalies that last — under a Student-t tail (``tail_dof`` degrees of freedom) of that
   history's mean and standard deviation. A signal's surprise is
   ``−log10`` of that probability. A lane's signals are combined by Fisher's method (``combine_surprise``: the
   tail probability of ``−2 Σ ln p`` under χ² with ``2k`` degrees of freedom), so a reading that several signals
   find unusual outranks one that a single signal finds a little more unusual; the reading's score is the best
   lane's surprise less ``log10`` of the number of lanes (a Bonferroni correction, so more channels do not mean
   more false alarms).
3. **Alert** (``AlertGate``), the product's one alert decision: score ≥ ``threshold``, above the stream's
   decaying record of surprises outside alerts and above the ``peaks``-th largest peak of its recent runs (a level
   it keeps reaching, such as every heart beat, is its normal), for ``debounce`` readings in a row once the stream has
   ``min_count`` scored readings, once per such run, and not within ``refractory`` readings of its previous alert;
   a stream that has spent its alert budget (``budget`` recent alerts) must beat that bar by a margin to alert again.
   A frozen channel alerts too, outside the anomaly score (``StuckRecord``: a run of identical readings longer than
   the channel's repeat rate and longest earlier run make likely), once per run and outside the refractory period.
   So does a reading that leaves its channel's range by ``range_tol`` of it (``RangeRecord``), whatever its score.
   The daemon's alert episodes (``alerts.AlertTracker``) open on these alerts and no other way. While a stream
   alerts, its signal statistics do not learn (an anomaly must not become the baseline that hides the next one),
   for at most ``protect`` readings in a row — after that a lasting change is the new normal and is learned. The
   representation memory remembers every scored reading, alerting ones included (``memory_alerts``): it says which
   patterns the stream has shown, and a pattern it has alerted on is not new when it recurs.

A stream may be one model window (``channel_mode = fixed``) or several univariate channels scored by one shared
model (``independent``): every channel then has its own signals and statistics (a *lane*), and the stream's score
is the largest lane surprise, Bonferroni-corrected by the number of tests (lanes × signals); the lane that gave it is
reported, which names the channel behind an alert. A lane younger than its stream (a channel first sent late, or
restarted alone by a gap of its own) joins the stream's score once it has the stream's warm-up of its own readings
with a surprise (``SignalStats.judged_``): its statistics of a handful of values would turn noise into alerts, and
the stream's other lanes keep it alert-capable meanwhile.

Everything is a ``stream_state.StreamState``: rows of numpy arrays, saved and restored as flat dicts, so the daemon's
checkpoints and ``trep-edge score`` run the same arithmetic. ``Detector.step`` is the only entry point.
"""
from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Iterable, Mapping

import numpy as np

from trep_edge.runtime.core.preprocess import robust_location_scale
from trep_edge.runtime.core.seasonal import MIN_LAG as MIN_CYCLE
from trep_edge.runtime.core.seasonal import SeasonalRecord
from trep_edge.runtime.core.stream_state import StreamState

SIGNALS = ("distance", "novelty", "deviation")
"""The per-reading signals the detector can judge, in the order of ``SignalStats`` columns: ``distance`` and
``novelty`` from the model's representations, ``deviation`` from the readings of the window it saw, before any stream
scaling (``window_deviation``)."""

COMBINATIONS = ("fisher", "max")
"""How a lane's signal surprises become one: Fisher's method, or the largest one (Bonferroni over the signals)."""

MODEL_SIGNALS = ("distance", "novelty")
"""The signals read off the model's representations: their statistics (and the representation memory) describe one
model's outputs, so a model swap relearns them (``Detector.for_model``); ``deviation`` describes the stream alone."""

RELEARN_MIN_VALUES = 16
"""Values a model signal needs in ``Detector.relearn`` to replace the old model's statistics of a lane."""

RELEARN_STRIDE = 4
"""Readings between two windows whose level ``Detector._relearn_deviation`` learns: a lane's 150-odd levels describe
its history's spread as well as all 600 of them, at a quarter of the cost (a robust scale per window)."""

LOG_FLOOR = {"distance": 1e-6, "novelty": 1e-2}
"""Signals judged in log space (≥ 0 and heavy-tailed), and what is added before the log so that 0 stays finite;
``deviation`` (already in robust units) is judged as it is."""


DEVIATION_MIN_VALUES = 16
"""Earlier values a window needs before its last step's deviation from them is judged."""

REDUNDANCY_MIN_VALUES = 50
"""Readings with a value of every signal that a lane needs before its signals' correlations count
(``SignalStats.overlap``)."""

TAIL_LEVEL = 1.5
"""Deviations above its mean at which a signal stands out, for the signals' joint tails (``SignalStats.overlap``)."""

TAIL_MIN_VALUES = 200
"""Readings with a value of every signal that a lane needs before its signals' joint tails count (about 14
exceedances of ``TAIL_LEVEL`` each)."""

GAMMA_TERMS = 60
"""The most terms of the series and of the continued fraction in ``log_upper_gamma`` (each stops once its terms no
longer change the sum): within 1e-9 of the exact value for the shape parameters Brown's method meets with at most
three signals (0.5 to 3)."""

STEP_FLOOR = 0.1
"""The least scale of a window's changes, as a fraction of its level scale (``window_deviation``): the changes of a
quantised or near-flat window are mostly 0, and without a floor every flip of its last digit was a huge step."""

TIED_FLOOR = 0.5
"""A count channel's ``deviation`` scales are at least this share of their window's mean-deviation scale
(``preprocess.robust_location_scale``'s ``floor``): half, so it binds only where most readings tie. Applied to every
window, the same floor cost the per-stream quick corpus 2.7 points (docs/detection.md, the tie round): an ECG's beats
lift the mean deviation above the IQR of the baseline between them. Count channels tie at zero."""

STEP_BLOCKS = 8
"""Blocks a ``StepRecord`` keeps of a lane's recent steps: the record spans the last ``step_span`` readings to within
one block (an eighth)."""


STUCK_MIN_RUN = 3
"""Identical readings in a row before a run may count as stuck (``StuckRecord``): two equal readings of a continuous
signal happen; three, where the stream never repeats, are a frozen sensor's first sign."""
REST_SHARE = 0.5
"""The share of a channel's consecutive readings that repeat from which it is at rest by nature (``RestRecord``):
a frozen sensor's channel repeated rarely before it froze, a valve at 0 that opens now and then almost always."""
F16_MAX = float(np.finfo(np.float16).max)
"""The largest float16: the representation memory's entries are kept within it."""


def transform_signals(values: np.ndarray, signals: tuple[str, ...]) -> np.ndarray:
    """Map raw signal values ``[m, K]`` (columns in ``signals`` order) to the space their statistics live in."""
    out = np.asarray(values, dtype=np.float64).copy()
    for k, name in enumerate(signals):
        if name in LOG_FLOOR:
            out[:, k] = np.log(out[:, k] + LOG_FLOOR[name])
    return out


@dataclass(frozen=True)
class DetectorConfig:
    """Detector settings (one ``[detector]`` TOML table; defaults measured in docs/detection.md).

    Attributes:
        signals: which of ``SIGNALS`` are judged.
        combine: how a lane's signal surprises become its score: ``fisher`` (Fisher's method over the signals with
            a value) or ``max`` (the largest, corrected for the number of signals).
        redundancy: the correlation of two of a lane's signals (learned on its own readings) above which Fisher's
            method counts them as partly one (Brown's method, at ``(ρ − redundancy) / (1 − redundancy)``); 1 =
            Fisher's method always. A model trained on a noise-like stream learns little beyond the reading's size,
            so its ``distance`` repeats ``deviation`` (ρ 0.9–0.96) and Fisher's method counted one ordinary outlier
            twice: 40 false alarms on four fault-free noise streams of 7,250 readings, 31 with 0.8 (white noise: 10,
            4). Below 0.8 it reaches lanes whose signals agree because faults move them together, and loses faults
            (docs/detection.md, the redundancy round).
        redundancy_tail: the joint-tail dependence of two of a lane's signals above which they count as partly one too,
            at ``(λ − redundancy_tail) / (1 − redundancy_tail)`` where that is more than their correlation's overlap;
            ``λ`` is how often both stand ``TAIL_LEVEL`` deviations above their means over the root of how often each
            does (1: every exceedance together; about the exceedance rate: apart). 1 = the correlation alone. On a
            noise-like stream a per-stream model's signals all read the reading's size at an ordinary outlier although
            they correlate little overall (white noise: ``novelty`` and ``distance`` at 0.26, yet ``novelty`` exceeds 2
            deviations 8 times as often when ``distance`` does), so Fisher's method counted one outlier two or three
            times. Under per-stream models 0.4 gains on the count feeds (52.0 → 54.2), the working weeks (34.7 → 38.3)
            and the long streams (36.0 → 37.5), ties the quick corpus (61.6 → 61.8), loses one window where every signal
            rises at the fault on the clean schedules (69.5 → 67.2) and the short streams (52.4 → 49.8; with a machine
            stop 60.2 → 58.8), and raises 113 false alarms on the fault-free shapes against 127; 0.5 does worse on four
            of the six sets it was run on, and lower loses more faults that every signal reads at once
            (docs/detection.md, the week-bar and tail-overlap rounds).
        redundancy_tail_scaled: whether a stream-scaled model (card ``scaling = "stream"``: the general model) counts
            joint tails too. Its signals rise together at the quick corpus's faults: with it the general model's
            quick corpus falls 39.9 → 38.4 (a distorted cycle, a level step lost; the week-bar round).
        memory: representations remembered per lane for ``novelty``.
        stride: readings between two remembered representations (memory spans ``memory * stride`` readings).
        exclusion: the most recent readings whose representations are never compared with (overlapping windows
            look alike, so a neighbour from the last few readings would hide every novelty).
        horizon: effective number of readings in each signal's long-run statistics.
        short: readings in the short-term mean of a signal (sustained anomalies); 1 disables it.
        min_count: scored readings a lane needs before it may alert.
        threshold: surprise (−log10 tail probability) from which a reading alerts.
        refractory: readings after an alert during which the stream raises no new alert, unless it escalates.
        escalate: how many times the score of the stream's last alert a new run must reach to alert inside the
            refractory period (the same run going on never does); 0 = never. The refractory period keeps one event
            from paging again and again, but it also kept the largest event of a stream's life silent: a burst of 15
            times a count stream's usual level (surprise 14.6) 27 readings after an ordinary burst had alerted (6.2)
            raised nothing. Twice the score is a tail probability squared (docs/detection.md, the escalation round).
        debounce: consecutive readings at or above the threshold needed to alert (1 = the first one).
        protect: alerting readings in a row that the statistics skip before they learn a lasting change.
        relearn: a lane's newest stored readings that a model swapped in with the same inputs scores again, to
            relearn the model signals' statistics from (at most the window; ``Detector.relearn``); 0 = the old
            model's statistics stay (right for a re-export of the same weights).
        scale_warmup: readings that set a lane's location and scale (models with ``scaling = "stream"``).
        scale_adapt: effective readings in the slow update of location and scale after that; 0 = frozen.
        record_decay: how fast (surprise per reading) the stream's record falls; the record is the largest score of
            its readings outside alerted runs (the surprises a stream produces without alerting), and a reading
            alerts only above both ``threshold`` and the record. 0 disables it.
        record_cap: the highest score that enters the record, so that a real anomaly the refractory period held
            back cannot hide the next one for long (``inf``: no cap).
        record_held: whether readings at or above the threshold that the refractory period holds back enter the
            record. Off: such a run, most often the alerted event going on, raised the record to its cap and hid
            a fault a thousand readings later (docs/detection.md, the held-record round); recurring loud patterns
            are the run peaks' to learn.
        peaks: how many recent *runs* (readings in a row at or above the threshold, alerted or not) a surprise level
            must have reached before it stops alerting: the bar is also the ``peaks``-th largest run peak of the
            stream, each falling by ``peak_decay`` per reading. A pattern that recurs (heart beats, a daily edge)
            alerted once per refractory period for ever, because a capped record cannot follow its surprise (10–40)
            and an alerted run never entered it; ``peaks - 1`` anomalies in a row still alert whatever their size.
            0 disables it.
        peak_decay: surprise per reading that each remembered run peak loses (0.01: a run of surprise 15 counts
            for 1,000 readings).
        prior_weight: readings' worth of weight given to the model card's ``detector_prior`` (the signals' statistics
            on the model's calibration data), which lets a new stream alert after ``min_count - prior_weight``
            readings; 0 ignores the prior.
        min_warmup: scored readings a stream needs before it may alert however much of ``min_count`` the prior
            stands for (at most ``min_count``). A new stream's first windows are mostly padding, which the prior
            (full windows only) does not describe, and its own statistics are still settling away from the prior:
            with 1, a quarter of streams with a per-stream card alerted on reading 0, and 107 of 150 ICU patients
            within their first 5 hours; 30 won the benchmark against 16, 24 and 48 (docs/detection.md).
        memory_alerts: whether the representation memory also remembers the readings the statistics skip while
            the stream alerts. An alerted pattern that recurs (a daily reset, a beat the threshold caught) is then
            no longer novel; without it such a pattern stayed new and its surprise grew with every recurrence
            (docs/detection.md).
        tail_dof: the tail each signal is judged under: Student's t with this many (even) degrees of freedom, or
            0 for the Gaussian. The signals are heavy-tailed (a stream's ordinary outliers sit 5–10 of its standard
            deviations out), and a Gaussian tail made them p = 1e-8 to 1e-20 events, which the record and run peaks
            then had to absorb; with 8 a value 10 standard deviations out is p ≈ 4e-6 (docs/detection.md).
        step_record: how many times the largest step of the channel's last ``step_span`` readings a reading's step
            (its change from the previous reading, ``window_deviation``) must be to count in ``deviation``
            (``fold_step``); 0 = the level alone. A jump inside the range of a periodic window is small by its level; a step that
            recurs (every heart beat's upstroke) is never a record, so it does not make the signal noisier
            (docs/detection.md, the step round). 1.2 rather than 1.5: with the general model it found more faults
            in every fault category of the benchmark, and 1.1 fewer with more false alarms; with models trained on
            one stream it is about neutral (the step-factor round).
        step_span: readings over which a channel's largest step is remembered (``StepRecord``).
        budget: alerts a stream may raise at the plain bar within about ``budget_span`` readings (its recent alerts
            are counted with an exponential decay of that time constant); each recent alert beyond it raises the bar
            for a new alert by ``budget_cost``. Real anomalies are rare, so a stream that keeps alerting is one the
            signals misjudge: the benchmark's long heart-beat recordings alerted on beats every 400–700 readings over
            80,000, which cost more than every fault of the benchmark found (docs/detection.md, the alert-budget
            round).
        budget_span: readings over which an alert counts against the budget (the decay's time constant). 40,000
            rather than 20,000: at 20,000 a stream that storms steadily still raised one alert per 2,500 readings,
            and the longer memory halved what the benchmark's heart-beat recordings lost without costing any
            stream of several faults (docs/detection.md, the budget-span round).
        budget_cost: surprise added to the bar for a new alert per recent alert beyond ``budget``; 0 = no budget.
        quiet: the least score at which a stream's highest score yet alerts below ``threshold`` (``AlertGate``: a
            second way to alert, for subtle faults on streams that never get loud); 0 disables it. Under models
            trained on one stream it found a distorted cycle and a jitter that were their streams' top scores at
            3.45 and 3.7, with no false alarm added (docs/detection.md, the quiet-record round). Off with
            ``debounce`` > 1, which asks for persistence that one reading cannot show.
        quiet_margin: surprise by which such a score must beat every earlier score of the stream since its
            ``min_count``-th scored reading (the first windows are mostly padding).
        quiet_after: scored readings a stream needs before its highest score yet may alert this way.
        stuck: the surprise at which a channel's run of identical readings alerts as a stuck sensor (``StuckRecord``:
            a second way to alert, outside the anomaly score); 0 disables it. The anomaly signals see a frozen
            sensor only when it unsticks, which earns a detection nothing; this alerts a few readings into the
            run (docs/detection.md, the stuck-sensor round).
        stuck_history: pairs of consecutive readings a channel needs before a run of identical ones may alert (its
            repeat rate and longest run are read off them). Real signals hold a value for longer now and then than
            a few hundred readings show, and a young channel's first such hold alerted (docs/detection.md, the
            stuck-history round).
        schedule: how many earlier alerts of a stream, spaced alike, make a new alert that continues their progression
            *on schedule* (``on_schedule``): it is kept back, not raised, and still counts as an alert for the gate
            (its run alerts once and is not learned) and for the schedule, but starts no refractory period; 0
            disables it. An edge that recurs once a day or once a shift is a surprise every time under a per-stream
            model, and its run peaks have faded by the next day (a day is 288 readings at five minutes, 1,440 at
            one): a plain square wave of working hours alerted at every evening's fall, 12 days running
            (docs/detection.md, the schedule round).
        schedule_tol: how far (a share of the spacing, and at least 2 steps) an alert may fall from where the
            progression puts it; spacing counts the stream's steps, a gap's missing ones included. 0.002 rather than
            0.01: at 0.01 (20 readings either side of a spacing of 2,000) two of the benchmark's 60 multi-fault
            windows fell on a progression of earlier false alarms by chance. A heartbeat's spacing varies by a tenth:
            0.2 with ``schedule`` 4 quiets it but keeps a long stream's faults back among its dense false alarms
            (docs/detection.md, the jittered-schedule round).
        deviation_window: the last readings of the model's window that ``deviation`` judges the reading against
            (``window_deviation``; a shorter model window is used whole); 0 = the whole window. The window is the
            model's choice (201 for a model exported with the defaults, 128 for the general model, 49 for the ICU
            model), but what a reading is measured against should not depend on which model a stream has: 128
            scores per-stream models 10 points higher than their whole 201 (docs/detection.md, the
            deviation-window round).
        seasonal_gain: ``deviation`` is judged no larger than this times the reading's *seasonal level* (its
            difference from the reading a cycle earlier, against the window of such differences) on channels with a
            cycle, and learned plain (``seasonal.SeasonalRecord``); 0 = never (also whenever ``deviation_window`` is
            0). A beat's peak or a daily edge lies far out against the window but not against a cycle earlier.
            Measured, it gains with per-stream models and loses with the general model (docs/detection.md, the
            seasonal-reach and scaled-floor rounds), so a stream-scaled model is judged without it unless
            ``seasonal_scaled`` (``for_scaling``).
        seasonal_fit: on a channel that keeps to its cycle (``seasonal.cycle_fit`` under this in the readings its
            cycle was found in: a *scheduled* channel), ``deviation``'s level is the seasonal one, judged and learned:
            a shift that does not start, a plateau too low or a cycle run late lies inside the range the window spans
            but far from the same moment a cycle earlier, and the cycle's own edges are far out against the window
            only. 0 = never. It reaches every model, the stream-scaled one too; 0.2 leaves nearly all of the
            benchmark's carriers (ETT, MIMIC-II, traffic, ECG) unscheduled, and on clean schedules
            (``bench/periodic_faults.py``) it finds faults the window cannot (docs/detection.md, the schedule-fit
            round).
        seasonal_cycles: how many cycles back a scheduled channel's reading may be compared: where the reading a
            cycle earlier and one up to this many cycles back disagree (``seasonal.DISAGREE``: one was out of step),
            the nearer counts; elsewhere the last cycle does. With 1, a fault one cycle long became the reference for
            the next cycle, whose normal readings then alerted too (6 of 52 alerts on clean schedules); each more cycle
            costs a seasonal record of up to ``seasonal_after // 2`` more readings per channel (docs/detection.md, the
            echo round).
        seasonal_week: one more cycle back a scheduled channel's reading may be compared with, as
            ``seasonal_cycles``'s are (0 = none; at most ``seasonal_cycles`` adds nothing): with 7, a feed whose cycle
            is a day reads its Saturday, out of step with Friday, against the Saturday before it, and so its Monday.
            Found on weekdays, a working week's cycle read every weekend's start and end as a fault: 8 false alarms
            in six weeks of a shift feed, 2 with it (docs/detection.md, the working-week round). The record then
            holds 7 of the longest cycles and a window (2,746 readings per channel at the defaults).
        seasonal_week_fit: when the seasonal record first holds a week of the longest cycle (its first 2,746
            readings), a channel with a cycle whose readings keep to the same moment ``seasonal_week`` cycles earlier
            (``seasonal.cycle_fit`` at that lag under this) is scheduled, on the cycle that fits best near the one
            found, and its ``deviation`` statistics relearnt: a working week's channel whose first
            ``seasonal_after`` readings held a weekend did not keep to its day there, and a day found a few readings
            short in them read a schedule's edges early (docs/detection.md, the week-relook round). 0.3, not the 0.2
            of ``seasonal_fit``: under per-stream models it schedules every working week of ``bench/weekly_faults.py``
            at no false alarm more on the fault-free shapes, the quick corpus or the clean schedules (the week-bar
            round). 0 = never; only with ``seasonal_week`` (and ``seasonal_fit``).
        seasonal_after: readings since a lane's start or reset in which its channels' cycles are found (the longest
            cycle looked for is half of it); the floor and scheduled channels start after them.
        seasonal_trust: a channel is judged plainly once its cycle has foretold ``seasonal_need`` and this share of
            its loud readings. On such channels, periodic carriers whose cycles differ, the floor lost faults on
            streams of several faults; kept where the cycle has not foretold the loud readings it gains at committed
            alerts on every per-stream corpus as a prototype (two training seeds), and in this form on the quick
            corpus, every category (docs/detection.md, the seasonal-trust and seasonal-runtime rounds).
        seasonal_loud: the plain level from which a reading is loud, and counts for or against its channel's cycle
            (only once the channel has a seasonal level).
        seasonal_ratio: a loud reading was foretold when its seasonal level was under this times its plain one.
        seasonal_need: foretold loud readings a channel needs, besides the share ``seasonal_trust``, before it is
            judged plainly.
        seasonal_scaled: whether a stream-scaled model (card ``scaling = "stream"``: the general model) has the
            seasonal floor too. Without it the general model scores higher on the quick corpus (36.9 → 39.3 at
            committed alerts) and the long streams (31.5 → 35.5), while card-normalised per-stream models gain with
            the floor on every corpus but the short streams (docs/detection.md, the scaled-floor round).
        rest_ratio: on a channel at rest by nature (``RestRecord``), a change out of a window that holds exactly
            still is judged as a multiple of the largest such change before it unless it is this many times that or
            more; 0 = every change out of a still window is judged plainly (hundreds or thousands of scales: its
            scale is a hundredth of its level). Long streams 34.9 → 36.0 at committed alerts (46.6 → 49.4 tuned),
            the quick corpus unchanged (docs/detection.md, the rest round).
        in_sample_weight: readings' worth that a lane's model-signal statistics keep once its stream passes the rows
            its model was trained on (the card prior's ``rows``: ``trained_rows``), as a stream scored from the start
            of its model's training data is, in a backtest and in the evaluator's protocol; 0 = they keep their full
            weight. On those rows the model has seen every window, so ``distance`` and ``novelty`` run low, and the
            statistics learnt there read the first readings the model never saw as surprising: ``distance`` exceeded
            surprise 3 twice as often in the 250 readings after them as later (docs/detection.md, the in-sample
            round). With 300 the statistics follow the new readings within a few hundred of them: long streams 37.5 →
            41.8 at committed alerts, the full corpus 56.8 → 56.6, the count feeds 54.2 → 52.4, the other per-stream
            sets within 0.2; 150 gained as much on the long streams (and 42.5 → 46.1 with models trained on their
            first 15 %) but lost 2.7 on the working weeks and 3.1 on the short streams (docs/detection.md, the
            in-sample-weight round). On the long streams' models trained anew the next round it changed neither the
            score nor the events found and false alarms (41.9 with and without it): on 15 streams one window moves
            the score by about 4, and the 90 % interval of that score over draws of the streams spans 35 points
            (docs/detection.md, the stream-draw round). A stream that does not start with the training rows (a live
            feed) has that reading discounted all the same: the detector cannot tell the two apart, and a discount
            only makes the statistics follow the stream's latest readings sooner.
        stop: readings every channel of a lane must hold one value for the lane to count as stopped (a machine at a
            standstill, or a frozen sensor), once each has shown that it moves by nature; 0 = never, else at least
            ``STUCK_MIN_RUN``. A stopped lane is not judged or learned (its restart's step included), nor for as
            many readings after it moves again, while the windows it is judged against still hold the stop; the stop
            is no part of its channels' repeat history, and alerts as a stuck sensor (when ``stuck`` is on),
            whatever the history ``stuck_history`` asks for. Judged, a restart read as thousands of scales out of a
            still window: it alerted, its refractory period hid what came next, and the stop's readings taught the
            statistics a still machine (docs/detection.md, the stop round).
        resume: whether a stream whose windows restart after a gap longer than the windows' ``max_gap`` (or a
            disconnection) keeps what its detector has learnt of the sensor (``Detector.resume``): the gap is a run
            of missing steps to it, as a shorter one is, and what is read off the model's windows (the model
            signals' statistics, the representation memory) and the warm-up start again. Off, such a stream starts
            afresh, and an outage cost a feed its cycle, schedule, run peaks, repeat history and ``deviation``
            statistics (docs/detection.md, the outage round).
        range_tol: a reading more than this share of a channel's range beyond its lowest or highest reading since
            the lane started alerts, whatever its score, outside the refractory period (``RangeRecord``); 0 = off;
            off too with ``debounce`` > 1 (it judges single readings).
            The signals judge a reading against the stream's recent readings and their own spread, so a level the
            stream has never been near, reached in one step, still read as ordinary where the stream is noisy or
            earlier loud readings had widened its statistics; streaming detectors built on a predictor keep this
            check beside their score for that reason. With 0.1, per-stream models 62.9 → 64.4 on the quick corpus
            and 57.3 → 57.9 on the full one, the general model 66.1 → 68.4 quick, 38.5 → 50.2 on streams that start
            idle and 59.3 → 59.2 on the full corpus; 0.05 alerted on noisy channels' ordinary records, and from 0.5 on
            every such reading alerted already (docs/detection.md, the range round).
        range_after: readings a lane records before it may leave its range: the range of a young stream, which has
            not yet shown its whole cycle, is left every time the cycle reaches further than it had.
    """

    signals: tuple[str, ...] = SIGNALS
    combine: str = "fisher"
    redundancy: float = 0.8
    redundancy_tail: float = 0.4
    redundancy_tail_scaled: bool = False
    memory: int = 128
    stride: int = 4
    exclusion: int = 32
    horizon: int = 500
    short: int = 5
    min_count: int = 100
    threshold: float = 4.0
    refractory: int = 200
    escalate: float = 2.0
    debounce: int = 1
    protect: int = 200
    relearn: int = 48
    scale_warmup: int = 100
    scale_adapt: int = 10_000
    prior_weight: int = 100
    record_decay: float = 0.0015
    record_cap: float = 6.0
    record_held: bool = False
    peaks: int = 3
    peak_decay: float = 0.005
    min_warmup: int = 30
    tail_dof: int = 8
    memory_alerts: bool = True
    step_record: float = 1.2
    step_span: int = 1000
    budget: float = 8.0
    budget_span: int = 40_000
    budget_cost: float = 1.0
    quiet: float = 3.3
    quiet_margin: float = 0.25
    quiet_after: int = 300
    deviation_window: int = 128
    stuck: float = 4.0
    stuck_history: int = 1000
    schedule: int = 2
    schedule_tol: float = 0.002
    seasonal_gain: float = 1.414
    seasonal_fit: float = 0.2
    seasonal_cycles: int = 2
    seasonal_week: int = 7
    seasonal_week_fit: float = 0.3
    seasonal_after: int = 750
    seasonal_trust: float = 0.3
    seasonal_loud: float = 4.0
    seasonal_ratio: float = 0.5
    seasonal_need: int = 5
    seasonal_scaled: bool = False
    rest_ratio: float = 1.5
    in_sample_weight: int = 300
    stop: int = 128
    resume: bool = True
    range_tol: float = 0.1
    range_after: int = 300

    def __post_init__(self) -> None:
        signals = tuple(self.signals)
        object.__setattr__(self, "signals", signals)
        unknown = [s for s in signals if s not in SIGNALS]
        if not signals or unknown:
            raise ValueError(f"detector signals must be a non-empty subset of {SIGNALS}, got {list(signals)}")
        if self.combine not in COMBINATIONS:
            raise ValueError(f"detector combine must be one of {list(COMBINATIONS)}, got {self.combine!r}")
        for name in ("memory", "stride", "horizon", "short", "min_count", "scale_warmup", "debounce", "min_warmup",
                     "budget_span", "seasonal_cycles"):
            if getattr(self, name) < 1:
                raise ValueError(f"detector {name} must be >= 1, got {getattr(self, name)}")
        if self.tail_dof < 0 or self.tail_dof % 2:
            raise ValueError(f"detector tail_dof must be even and >= 2, or 0 for the Gaussian tail, got {self.tail_dof}")
        if 0 < self.stop < STUCK_MIN_RUN:
            raise ValueError(f"detector stop must be 0 (off) or at least {STUCK_MIN_RUN} readings, got {self.stop}")
        for name in ("exclusion", "refractory", "protect", "scale_adapt", "prior_weight", "relearn", "peaks",
                     "quiet_after", "stuck_history", "schedule", "seasonal_need", "stop", "seasonal_week",
                     "in_sample_weight", "range_after"):
            if getattr(self, name) < 0:
                raise ValueError(f"detector {name} must be >= 0, got {getattr(self, name)}")
        for name in ("record_decay", "peak_decay", "budget", "budget_cost", "quiet", "quiet_margin", "stuck",
                     "schedule_tol", "escalate", "seasonal_gain", "seasonal_fit", "seasonal_week_fit", "seasonal_trust",
                     "seasonal_loud", "seasonal_ratio", "rest_ratio", "range_tol"):
            if not math.isfinite(getattr(self, name)) or getattr(self, name) < 0:
                raise ValueError(f"detector {name} must be finite and >= 0, got {getattr(self, name)}")
        if math.isnan(self.record_cap) or self.record_cap <= 0:
            raise ValueError(f"detector record_cap must be > 0 (inf for none), got {self.record_cap}")
        if not math.isfinite(self.threshold) or self.threshold <= 0:
            raise ValueError(f"detector threshold must be a positive surprise (-log10 p), got {self.threshold}")
        if not (self.step_record == 0 or 1 <= self.step_record < math.inf):
            raise ValueError(f"detector step_record must be >= 1 (0 = the level alone), got {self.step_record}")
        if self.deviation_window != 0 and self.deviation_window <= DEVIATION_MIN_VALUES:
            raise ValueError(f"detector deviation_window must be > {DEVIATION_MIN_VALUES} readings (0 = the model's "
                             f"whole window), got {self.deviation_window}")
        if not 0 <= self.redundancy <= 1:
            raise ValueError(f"detector redundancy must be a correlation in [0, 1] (1 = Fisher's method always), got "
                             f"{self.redundancy}")
        if not 0 <= self.redundancy_tail <= 1:
            raise ValueError(f"detector redundancy_tail must be a dependence in [0, 1] (1 = the correlation alone), "
                             f"got {self.redundancy_tail}")
        if self.seasonal_after < 2 * MIN_CYCLE + 2:
            raise ValueError(f"detector seasonal_after must be >= {2 * MIN_CYCLE + 2} readings (cycles of "
                             f"{MIN_CYCLE} or more are looked for in them), got {self.seasonal_after}")
        if self.step_span < STEP_BLOCKS:
            raise ValueError(f"detector step_span must be >= {STEP_BLOCKS} readings, got {self.step_span}")
        # Settings that pass the bounds above but would switch a part off without saying so.
        if self.horizon < 2:
            raise ValueError(f"detector horizon must be >= 2 readings (with 1 a signal's variance stays 0 and "
                             f"nothing is ever surprising), got {self.horizon}")
        if self.schedule > SCHEDULE_MEMORY:
            raise ValueError(f"detector schedule must be <= {SCHEDULE_MEMORY} (the alerts a stream remembers; 0 = "
                             f"off), got {self.schedule}")
        if "novelty" in self.signals and -(-self.exclusion // self.stride) >= self.memory:
            raise ValueError(f"detector novelty compares with remembered readings older than exclusion = "
                             f"{self.exclusion}, but memory x stride = {self.memory * self.stride} readings hold none "
                             "that old: raise memory or stride, or lower exclusion")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (checkpoints, model cards, benchmark rows)."""
        data = asdict(self)
        data["signals"] = list(self.signals)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DetectorConfig:
        """Read ``to_dict`` output; unknown keys are an error naming the known ones."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown detector setting(s) {unknown}; known: {sorted(known)}")
        values = dict(data)
        if "signals" in values:
            values["signals"] = tuple(values["signals"])
        return cls(**values)

    def with_overrides(self, spec: str) -> DetectorConfig:
        """Apply ``key=value;key=value`` overrides (benchmark ablations), each read as its field's type; ``signals``
        takes ``a+b``, a flag ``0/1/true/false``."""
        types = {f.name: f.type for f in fields(self)}
        changes: dict[str, Any] = {}
        for item in filter(None, (part.strip() for part in spec.split(";"))):
            key, sep, value = item.partition("=")
            if not sep or key not in types:
                raise ValueError(f"detector override {item!r} must be key=value with a key among {sorted(types)}")
            kind = types[key]
            if key == "signals":
                changes[key] = tuple(v for v in value.split("+") if v)
            elif kind == "bool":
                if value.lower() not in ("0", "1", "true", "false"):
                    raise ValueError(f"detector override {item!r}: {key} takes 0/1 or true/false")
                changes[key] = value.lower() in ("1", "true")
            else:
                changes[key] = {"int": int, "float": float}.get(kind, str)(value)
        return replace(self, **changes)

    def for_scaling(self, scaling: str | None) -> DetectorConfig:
        """The settings a model of this card ``scaling`` is judged with: these, without the seasonal floor for a
        stream-scaled model unless ``seasonal_scaled``, and without joint tails unless ``redundancy_tail_scaled``."""
        if scaling != "stream":
            return self
        changes: dict[str, float] = {}
        if not self.seasonal_scaled and self.seasonal_gain:
            changes["seasonal_gain"] = 0.0
        if not self.redundancy_tail_scaled and self.redundancy_tail < 1:
            changes["redundancy_tail"] = 1.0
        return replace(self, **changes) if changes else self

    @classmethod
    def variants(cls, items: Iterable[str]) -> dict[str, DetectorConfig]:
        """Named variants of the default settings from ``NAME:key=value;...`` items (benchmark ablation rows)."""
        named: dict[str, DetectorConfig] = {}
        for item in items:
            name, sep, spec = item.partition(":")
            if not sep or not name:
                raise ValueError(f"detector variant {item!r} must be NAME:key=value;key=value")
            named[name] = cls().with_overrides(spec)
        return named


def count_channels(counts: np.ndarray | None, channels: int) -> np.ndarray | None:
    """``window_deviation``'s ``tied`` for a lane of ``channels`` from a card's ``normalisation.counts`` (None: no
    count channel, or lanes of one channel of a channel-independent model, whose card bends none)."""
    if counts is None or len(counts) != channels:
        return None
    return np.asarray(counts) > 0


def window_deviation(
    windows: np.ndarray, span: int = 0, tied: np.ndarray | None = None, least: np.ndarray | None = None
) -> np.ndarray:
    """How far each window's last step lies from the rest of its window ``[n, W, C]``, per channel: ``[n, 2, C]``;
    ``span`` > 0 judges it against the last ``span`` steps only (``DetectorConfig.deviation_window``); ``tied``
    ``[C]`` marks the channels whose readings tie by design (count channels: ``count_channels``), whose scales are
    at least ``TIED_FLOOR`` times their mean-deviation scale; ``least`` ``[n, C]`` is the least scale each level is
    read on (a scheduled channel's, ``seasonal.SCHEDULED_SCALE``; 0 = none).

    Row 0 is the *level*, ``|x_last − median| / scale`` of the earlier steps (``preprocess.robust_location_scale``);
    row 1 the *step*, ``|Δ_last − median Δ| / max(scale Δ, STEP_FLOOR · scale)``, the last change against the
    window's earlier changes. The level misses a jump that stays inside the range a periodic window spans (its scale is the
    cycle's, not the noise's); the step sees it, and the detector lets it into ``deviation`` where it is a record
    (``StepRecord``). NaN for a window without a last value or with fewer than ``DEVIATION_MIN_VALUES`` earlier
    values (all ``W − 1`` of them when the window is shorter), and a step also without the previous value. Give it the
    windows before the stream scaling, as ``window_repeats``: an affine map leaves it unchanged, but the scaling clips
    a level far beyond what its scale has learnt, and a constant window's scale floor (1 % of its level) moves with
    the level, so that under the scaling the first change after a constant opening read as thousands.
    """
    if span:
        windows = windows[:, -span:]
    n, w, c = windows.shape
    x = np.asarray(windows, dtype=np.float64).transpose(0, 2, 1).reshape(n * c, w)
    earlier = x[:, :-1]
    floor = 0.0 if tied is None else np.tile(np.where(tied, TIED_FLOOR, 0.0), n)
    loc, scale = robust_location_scale(earlier, floor)
    # A scale read off a handful of values (a stream's first readings, a window that is mostly gap) is noise and
    # made every new stream's first readings look like faults: too few earlier values give no deviation.
    enough = np.isfinite(earlier).sum(axis=1) >= min(DEVIATION_MIN_VALUES, w - 1)
    level_scale = scale if least is None else np.maximum(scale, np.asarray(least, dtype=np.float64).reshape(n * c))
    level = np.where(enough, np.abs(x[:, -1] - loc) / level_scale, np.nan)
    change = np.diff(x, axis=1)
    change_loc, change_scale = robust_location_scale(change[:, :-1], floor)
    step = np.where(enough, np.abs(change[:, -1] - change_loc) / np.maximum(change_scale, STEP_FLOOR * scale), np.nan)
    return np.stack([level.reshape(n, c), step.reshape(n, c)], axis=1)


def fold_step(parts: np.ndarray, bar: np.ndarray) -> np.ndarray:
    """Each channel's ``deviation`` ``[n, C]`` from ``window_deviation`` parts ``[n, 2, C]`` and the bar its step must
    reach to count ``[n, C]`` (``inf``: none counts): the level, or where the step reaches the bar, the larger of the
    level and the geometric mean of level and step (a jump far out in both counts most; a step alone, inside the
    window's range, still counts as the root of the two, so a recurring sharp edge of normal size stays small)."""
    level, step = parts[:, 0], parts[:, 1]
    with np.errstate(invalid="ignore"):
        counts = step >= bar
        return np.where(counts, np.fmax(level, np.sqrt(level * step)), level)


def window_repeats(windows: np.ndarray) -> np.ndarray:
    """Whether each window's last step repeats the one before it, per channel ``[n, W, C]`` → ``[n, C]``: 1.0 equal,
    0.0 different, NaN where either is missing (``StuckRecord``'s input). Give it the windows before the stream
    scaling: that clips, so a level far beyond what the scale has learnt would read as a frozen one. The card's
    normalisation maps every step of a window alike, so equal readings stay equal after it."""
    last, before = windows[:, -1].astype(np.float64), windows[:, -2].astype(np.float64)
    return np.where(np.isfinite(last) & np.isfinite(before), (last == before).astype(np.float64), np.nan)


def upper_tail_surprise(z: np.ndarray) -> np.ndarray:
    """``−log10 P(N(0,1) > z)``, elementwise; exact (erfc) up to z = 8, asymptotic beyond (no underflow)."""
    z = np.asarray(z, dtype=np.float64)
    out = np.full(z.shape, np.nan)
    finite = np.isfinite(z)
    small = finite & (z <= 8.0)
    out[small] = -np.log10(0.5 * _erfc(z[small] / math.sqrt(2.0)).astype(np.float64))
    large = finite & (z > 8.0)
    zl = z[large]
    # log Q(z) ≈ −z²/2 − log(z √(2π)) + log(1 − 1/z² + 3/z⁴ − 15/z⁶) (Mills ratio series), within 3e-6 of the
    # exact value at z = 8 and above it: without the series the surprise dropped by 0.0065 across the switch.
    series = 1 - zl**-2 + 3 * zl**-4 - 15 * zl**-6
    out[large] = (zl**2 / 2 + np.log(zl * math.sqrt(2 * math.pi)) - np.log(series)) / math.log(10)
    out[np.isposinf(z)] = np.inf
    return out


_erfc = np.frompyfunc(math.erfc, 1, 1)

_T_SERIES = 64
"""Terms of the tail series in ``student_upper_tail_surprise`` (used where ``x ≤ 0.5``: remainder below 0.5⁶⁴)."""


@functools.lru_cache(maxsize=8)
def _t_series_coefficients(dof: int) -> np.ndarray:
    """``c_k = C(2k, k) / 4^k`` for ``k < dof/2 + _T_SERIES``, built once per ``dof`` (this is every tick's hot path)."""
    k = np.arange(dof // 2 + _T_SERIES - 1)
    coef = np.cumprod(np.concatenate(([1.0], (2 * k + 1) / (2 * k + 2))))
    coef.flags.writeable = False  # shared between calls
    return coef


def _power_series(x: np.ndarray, coef: np.ndarray) -> np.ndarray:
    """``Σ_j coef_j x^j`` elementwise, as one power table summed row by row: numpy's ``polyval`` loops over the
    coefficients in Python, and the upper tail's 60-odd terms made it most of a reading's detector time. ``einsum``
    (unoptimised: its own loop) sums each row in one order; a matrix product's BLAS kernel sums a row by its place
    in the batch, so a stream's score changed in its last bits with the other streams of a daemon's tick."""
    return np.einsum("ij,j->i", np.power(x[:, None], np.arange(len(coef))), coef)


def student_upper_tail_surprise(z: np.ndarray, dof: int) -> np.ndarray:
    """``−log10 P(T > z)`` for Student's t with an even number ``dof`` of degrees of freedom, elementwise.

    With ``x = dof / (dof + z²)`` and ``s = √(1 − x)``, ``P(|T| < |z|) = s Σ_{k<dof/2} c_k x^k`` (``c_k = C(2k, k) / 4^k``,
    the series of ``(1 − x)^(−1/2)``), which is exact near the centre. Its complement, the upper tail
    ``½ s Σ_{k≥dof/2} c_k x^k``, is summed in log space where ``x ≤ 0.5``, so that no surprise is lost to cancellation
    or underflow however far out ``z`` lies (about ``dof · log10 z`` for large ``z``, against ``z²/2`` for the
    Gaussian).
    """
    if dof < 2 or dof % 2:
        raise ValueError(f"Student tail degrees of freedom must be even and >= 2, got {dof}")
    z = np.asarray(z, dtype=np.float64)
    out = np.full(z.shape, np.nan)
    finite = np.isfinite(z)
    zf = z[finite]
    with np.errstate(divide="ignore"):
        log_x = -np.logaddexp(0.0, 2.0 * np.log(np.abs(zf) / math.sqrt(dof)))  # z² would overflow beyond 1e154
    x = np.exp(log_x)
    s = np.sqrt(1.0 - x)
    m = dof // 2
    coef = _t_series_coefficients(dof)
    res = np.empty(zf.shape)
    far = (zf > 0) & (x <= 0.5)
    near = ~far
    central = s[near] * _power_series(x[near], coef[:m])  # P(|T| < |z|)
    res[near] = -np.log10(0.5 * (1.0 - np.sign(zf[near]) * central))
    tail = _power_series(x[far], coef[m:])  # Σ_j c_{m+j} x^j
    res[far] = -(np.log10(0.5 * s[far]) + m * log_x[far] / math.log(10.0) + np.log10(tail))
    out[finite] = res
    out[np.isposinf(z)] = np.inf
    out[np.isneginf(z)] = 0.0
    return out


def combine_surprise(surprise: np.ndarray, overlap: np.ndarray | None = None) -> np.ndarray:
    """Fisher's method over each row's signal surprises ``[m, K]`` (NaN = no value): ``[m]``, NaN when none.

    With ``k`` values, ``X = −2 Σ ln p`` follows χ² with ``2k`` degrees of freedom under the null, whose tail is
    ``e^{−X/2} Σ_{i<k} (X/2)^i / i!``; the result is ``−log10`` of that tail (one value gives itself back).

    ``overlap [m, K, K]``: the correlation each pair of signals is counted at (0 = independent, 1 = the same signal;
    the diagonal is ignored). Where a pair with values overlaps, Brown's method replaces Fisher's: ``X / c`` follows
    χ² with ``f`` degrees of freedom, ``c = Var / 2E`` and ``f = 2E² / Var`` for ``E = 2k`` and ``Var = 4k + Σ_{i≠j}
    cov_ij``, the covariance of ``−2 ln p`` of two signals correlated at ρ being ``3.263ρ + 0.710ρ² + 0.027ρ³``
    (Kost and McDermott 2002). Two identical signals then give their one surprise back.
    """
    s = np.asarray(surprise, dtype=np.float64)
    seen = np.isfinite(s) | np.isposinf(s)
    k = seen.sum(axis=1)
    half = np.where(seen, s, 0.0).sum(axis=1) * math.log(10.0)  # X / 2
    total, term = np.zeros(len(s)), np.ones(len(s))
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for i in range(s.shape[1]):
            total += np.where(i < k, term, 0.0)
            term = term * half / (i + 1)
        out = (half - np.log(total)) / math.log(10.0)
    if overlap is not None:
        pairs = seen[:, :, None] & seen[:, None, :] & ~np.eye(s.shape[1], dtype=bool)
        rho = np.where(pairs, np.asarray(overlap, dtype=np.float64), 0.0)
        extra = (3.263 * rho + 0.710 * rho**2 + 0.027 * rho**3).sum(axis=(1, 2))
        brown = (extra > 0) & np.isfinite(half)
        if brown.any():
            mean, var = 2.0 * k[brown], 4.0 * k[brown] + extra[brown]
            c, f = var / (2 * mean), 2 * mean**2 / var
            out[brown] = -log_upper_gamma(f / 2, half[brown] / c) / math.log(10.0)
    return np.where(k > 0, np.where(np.isposinf(half), np.inf, out), np.nan)


_lgamma = np.frompyfunc(math.lgamma, 1, 1)


def log_upper_gamma(a: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``ln Q(a, z)``, the regularised upper incomplete gamma function, elementwise for ``a > 0`` and ``z ≥ 0``
    (``P(χ²_f > x) = Q(f/2, x/2)``).

    Below ``z = a + 1`` from the series of the lower function, ``P = z^a e^{−z} / Γ(a + 1) · Σ_n z^n / ((a+1)…(a+n))``;
    above it from the continued fraction of ``Q`` (modified Lentz), kept in log space so that a far tail does not
    underflow (a χ² tail of 1e-400 is still a finite surprise).
    """
    a, z = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(z, dtype=np.float64))
    out = np.zeros(a.shape)
    low, high = (z > 0) & (z < a + 1), z >= a + 1
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if low.any():
            al, zl = a[low], z[low]
            # All terms at once (Σ_n Π_{j≤n} z/(a+j)): a loop with a convergence test costs more in numpy calls than
            # the terms it saves on the few values a reading has.
            total = 1.0 + np.cumprod(zl[:, None] / (al[:, None] + np.arange(1, GAMMA_TERMS)), axis=1).sum(axis=1)
            lead = al * np.log(zl) - zl - np.asarray(_lgamma(al + 1), dtype=np.float64)  # ln(z^a e^{−z} / Γ(a+1))
            out[low] = np.log1p(-np.minimum(np.exp(lead + np.log(total)), 1.0))
        if high.any():
            ah, zh = a[high], z[high]
            tiny = 1e-300
            b = zh + 1 - ah
            d = 1 / b
            c, h = np.full(ah.shape, 1 / tiny), d.copy()
            # Each value stops at its own convergence: run on until the slowest of a batch, a value's h took more
            # factors of about 1 and its last bits depended on the other streams of the daemon's tick.
            done = np.zeros(ah.shape, dtype=bool)
            for i in range(1, GAMMA_TERMS):
                an, b = -i * (i - ah), b + 2
                d = an * d + b
                d = 1 / np.where(np.abs(d) < tiny, tiny, d)
                c = b + an / c
                c = np.where(np.abs(c) < tiny, tiny, c)
                h = np.where(done, h, h * d * c)
                done |= np.abs(d * c - 1) <= 1e-16
                if done.all():
                    break
            lead = ah * np.log(zh) - zh - np.asarray(_lgamma(ah), dtype=np.float64)  # ln(z^a e^{−z} / Γ(a))
            out[high] = lead + np.log(h)
    return out


def _surprise(x: np.ndarray, dof: int) -> np.ndarray:
    if not x.size:
        return np.zeros(x.shape)
    return upper_tail_surprise(x) if dof == 0 else student_upper_tail_surprise(x, dof)


def _best_per_stream(values: np.ndarray, lane_of: np.ndarray, n: int) -> np.ndarray:
    """The largest of each stream's lane ``values`` ``[m]`` → ``[n]`` (NaN where none is finite)."""
    best = np.full(n, -np.inf)
    np.maximum.at(best, lane_of, np.where(np.isfinite(values), values, -np.inf))
    return np.where(np.isfinite(best), best, np.nan)


@dataclass(frozen=True)
class SignalPrior:
    """Mean and variance of each log-signal over a model's calibration data, and the weight a fresh lane gives them.

    Stored in the model card as ``detector_prior`` (``{"signals": [...], "mean": [...], "var": [...], "n": N}``).
    """

    mean: tuple[float, ...]
    var: tuple[float, ...]
    count: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (state configs)."""
        return {"mean": list(self.mean), "var": list(self.var), "count": self.count}

    @classmethod
    def from_card(cls, card_prior: Mapping[str, Any], signals: tuple[str, ...], weight: int) -> SignalPrior | None:
        """The card's prior for ``signals`` with ``weight``; None when it lacks one of them or the weight is 0."""
        names = list(card_prior.get("signals", []))
        if weight <= 0 or not all(s in names for s in signals):
            return None
        pick = [names.index(s) for s in signals]
        mean, var = (tuple(float(card_prior[k][i]) for i in pick) for k in ("mean", "var"))
        return cls(mean, var, int(min(weight, card_prior.get("n", weight))))


def trained_rows(card_prior: Mapping[str, Any] | None) -> int:
    """The rows a stream scored from the start of its model's training data reads before it leaves them: the card
    prior's ``rows`` (written by ``trep-edge export`` when the prior comes from the one series the model trained on,
    from its first row), else 0 (unknown: ``DetectorConfig.in_sample_weight`` never applies)."""
    return int(card_prior.get("rows", 0)) if card_prior else 0


class RepresentationMemory(StreamState):
    """A bounded memory of each lane's earlier representations and the ``novelty`` signal it gives.

    Every ``stride``-th representation is written to a ring of ``memory`` slots (float16: novelty needs the
    neighbourhood, not the last bits). ``novelty`` is the Euclidean distance to the nearest remembered
    representation at least ``exclusion`` readings old, NaN while there is none.
    State: ``ring_`` ``[S, M, F]``, ``written_`` ``[S]`` (representations written), ``phase_`` ``[S]`` (readings
    since the last write).
    """

    def __init__(self, dims: int, memory: int = 128, stride: int = 4, exclusion: int = 32, n_streams: int = 0) -> None:
        self.dims, self.memory, self.stride, self.exclusion = int(dims), int(memory), int(stride), int(exclusion)
        self.skip = -(-self.exclusion // self.stride)  # the newest slots written within the exclusion zone
        super().__init__(n_streams)

    def _fresh(self, n: int) -> dict[str, np.ndarray]:
        return {
            "ring_": np.zeros((n, self.memory, self.dims), dtype=np.float16),
            "written_": np.zeros(n, dtype=np.int64),
            "phase_": np.zeros(n, dtype=np.int64),
        }

    def _config(self) -> dict[str, Any]:
        return {"dims": self.dims, "memory": self.memory, "stride": self.stride, "exclusion": self.exclusion}

    def novelty(self, idx: np.ndarray, z: np.ndarray) -> np.ndarray:
        """Distance of each representation ``z [n, F]`` to its lane's nearest eligible memory (NaN: none yet)."""
        written = self.written_[idx]
        age = (written[:, None] - 1 - np.arange(self.memory)[None, :]) % self.memory
        eligible = (age >= self.skip) & (age < written[:, None])
        diff = self.ring_[idx].astype(np.float32) - z[:, None, :].astype(np.float32)
        dist = np.sqrt(np.einsum("nmf,nmf->nm", diff, diff))
        dist[~eligible] = np.inf
        nearest = dist.min(axis=1) if self.memory else np.full(len(idx), np.inf)
        return np.where(np.isfinite(nearest), nearest, np.nan).astype(np.float64)

    def remember(self, idx: np.ndarray, z: np.ndarray) -> None:
        """Count one reading for each selected lane; write its representation when its stride comes round."""
        due = self.phase_[idx] % self.stride == 0
        rows = idx[due]
        # A model fed far outside its training range can emit representations beyond float16: kept finite, such a
        # memory stays comparable (an infinite entry made every later distance to it infinite or NaN).
        self.ring_[rows, self.written_[rows] % self.memory] = np.clip(z[due], -F16_MAX, F16_MAX).astype(np.float16)
        self.written_[rows] += 1
        self.phase_[idx] += 1


class StepRecord(StreamState):
    """The largest recent step of each lane's channels, and the bar a reading's step must reach to count in
    ``deviation`` (``DetectorConfig.step_record``).

    The last ``span`` readings are kept as ``STEP_BLOCKS`` blocks of ``ceil(span / STEP_BLOCKS)`` readings, each
    holding its largest step, so the record covers the last ``span − block`` to ``span`` readings at a cost of
    ``C × STEP_BLOCKS`` numbers per lane. A lane's first step has no record to beat and does not count.
    State: ``peak_`` ``[S, C, STEP_BLOCKS]`` (−inf = none), ``seen_`` ``[S]`` (readings recorded).
    """

    def __init__(self, channels: int = 1, span: int = 1000, ratio: float = 1.5, n_streams: int = 0) -> None:
        self.channels, self.span, self.ratio = int(channels), int(span), float(ratio)
        self.block = -(-self.span // STEP_BLOCKS)
        super().__init__(n_streams)

    def _fresh(self, n: int) -> dict[str, np.ndarray]:
        return {"peak_": np.full((n, self.channels, STEP_BLOCKS), -np.inf), "seen_": np.zeros(n, dtype=np.int64)}

    def _config(self) -> dict[str, Any]:
        return {"channels": self.channels, "span": self.span, "ratio": self.ratio}

    def fold(
        self, idx: np.ndarray, parts: np.ndarray, judged: np.ndarray | None = None, keep: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each selected lane's channels' ``deviation`` ``[n, C]`` from its ``window_deviation`` parts ``[n, 2, C]``
        (``fold_step`` against this record), and the same with the levels ``judged`` ``[n, C]`` in place of the parts'
        (the first again when None: ``SeasonalRecord``'s floor); then record their steps, once, where ``keep``
        ``[n]`` holds (all when None: a paused lane's restart is no step of its own)."""
        if parts.shape[1:] != (2, self.channels):
            raise ValueError(f"deviation parts have shape {parts.shape}, expected [n, 2, {self.channels}]")
        peak = self.peak_[idx]
        record = peak.max(axis=2)
        bar = np.full(record.shape, np.inf)
        if self.ratio > 0:
            has = np.isfinite(record)
            bar[has] = self.ratio * record[has]
        out = fold_step(parts, bar)
        other = out if judged is None else fold_step(np.stack([judged, parts[:, 1]], axis=1), bar)
        seen = self.seen_[idx]
        slot = (seen // self.block) % STEP_BLOCKS
        rows = np.arange(len(idx))
        # A block's first reading starts it afresh: what it held is now older than the span.
        starts = seen % self.block == 0
        peak[rows[starts], :, slot[starts]] = -np.inf
        step = parts[:, 1] if keep is None else np.where(np.asarray(keep)[:, None], parts[:, 1], -np.inf)
        peak[rows, :, slot] = np.fmax(peak[rows, :, slot], step)
        self.peak_[idx] = peak
        self.seen_[idx] = seen + 1
        return out, other


class StuckRecord(StreamState):
    """Runs of identical readings per lane channel, and the surprise of a run that outlasts the channel's history.

    A frozen sensor or a dropout to a constant repeats its last value. A channel's repeat rate ``p`` (equal pairs of
    consecutive readings among the pairs before its current run, plus one of each) and longest earlier run ``L`` say
    how often it repeats by itself; a current run of ``r`` > ``L`` readings (and at least ``STUCK_MIN_RUN``) has
    surprise ``(r − max(L, 1)) · (−log10 p)``, the chance of that many extra repeats in a row, less ``log10`` of the
    lane's channels. A channel that never repeats reaches the threshold within a few identical readings; a quantised
    channel that often holds its value must hold it longer than it ever has. Runs are judged once the channel has
    ``history`` pairs, or once the whole lane has stopped (``paused``). Once a run has alerted, it does not again. A
    missing reading ends the run. State: ``run_``, ``longest_``, ``pairs_``, ``repeats_`` ``[S, C]`` (int),
    ``alerted_`` ``[S, C]`` (bool), ``waking_`` ``[S]`` (readings a lane stays paused after its last stopped one).
    """

    def __init__(self, channels: int = 1, history: int = 100, stop: int = 0, n_streams: int = 0) -> None:
        self.channels, self.history, self.stop = int(channels), int(history), int(stop)
        super().__init__(n_streams)

    def _fresh(self, n: int) -> dict[str, np.ndarray]:
        zeros = functools.partial(np.zeros, (n, self.channels), dtype=np.int64)
        return {"run_": zeros(), "longest_": zeros(), "pairs_": zeros(), "repeats_": zeros(),
                "alerted_": np.zeros((n, self.channels), dtype=bool), "waking_": np.zeros(n, dtype=np.int64)}  # fmt: skip

    def _config(self) -> dict[str, Any]:
        return {"channels": self.channels, "history": self.history, "stop": self.stop}

    def surprise(self, idx: np.ndarray, repeat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Record one reading's ``window_repeats`` ``[n, C]`` for each selected lane; return the surprise of each
        lane's most surprising run, and of its most surprising run that has not alerted yet ``[n]`` (NaN: none),
        corrected for the lane's channels."""
        repeat = np.asarray(repeat, dtype=np.float64).reshape(len(idx), self.channels)
        run, longest = self.run_[idx], self.longest_[idx]
        same = repeat == 1
        ended = ~same  # a change or a missing value ends the run; its pairs join the history
        # ... unless the run was a stop (``paused``): a machine stopped most of the time would otherwise come to repeat
        # by nature and stop stopping, and each stop would raise the bar the next must beat.
        kept = ended & ~self._stopped(run, self.pairs_[idx], self.repeats_[idx])[:, None]
        pairs = self.pairs_[idx] + np.where(kept, np.maximum(run - 1, 0), 0) + (repeat == 0)
        repeats = self.repeats_[idx] + np.where(kept, np.maximum(run - 1, 0), 0)
        longest = np.where(kept, np.maximum(longest, run), longest)
        run = np.where(same, np.maximum(run, 1) + 1, 1)
        alerted = self.alerted_[idx] & same
        self.run_[idx], self.longest_[idx], self.pairs_[idx], self.repeats_[idx] = run, longest, pairs, repeats
        self.alerted_[idx] = alerted
        channel = self._channel_surprise(run, longest, pairs, repeats)
        return self._best(channel), self._best(np.where(alerted, -np.inf, channel))

    def _channel_surprise(
        self, run: np.ndarray, longest: np.ndarray, pairs: np.ndarray, repeats: np.ndarray
    ) -> np.ndarray:  # fmt: skip
        bar = np.maximum(longest, 1)
        # A stop is judged on whatever history its channels have. One channel holding while its siblings move is not:
        # real signals hold a value now and then for longer than a young channel has shown (the stuck-history round).
        stopped = self._stopped(run, pairs, repeats)[:, None]
        judged = (run >= STUCK_MIN_RUN) & (run > bar) & ((pairs >= self.history) | stopped)
        return np.where(judged, (run - bar) * -np.log10((repeats + 1) / (pairs + 2)), -np.inf)

    def _best(self, channel: np.ndarray) -> np.ndarray:
        best = channel.max(axis=1, initial=-np.inf) - math.log10(self.channels)
        return np.where(np.isfinite(best), best, np.nan)

    def at_rest(self, idx: np.ndarray, span: int) -> np.ndarray:
        """The selected lanes' channels ``[n, C]`` at rest out of a still window, before this reading is recorded:
        the last ``span − 1`` readings are one run, and of the channel's earlier pairs of consecutive readings (at
        least ``history``) a share ``REST_SHARE`` or more repeat."""
        rest = self.run_[idx] >= span - 1
        if rest.any():  # rarely: the history is read only where a window holds still
            pairs, repeats = self.pairs_[idx], self.repeats_[idx]
            rest &= (pairs >= self.history) & ((repeats + 1) / (pairs + 2) >= REST_SHARE)
        return rest

    def _stopped(self, run: np.ndarray, pairs: np.ndarray, repeats: np.ndarray) -> np.ndarray:
        """Whether each lane ``[n]`` is a stop, given its channels' runs, pairs and repeats ``[n, C]``: every channel
        in a run of at least ``stop`` readings, of a lane that has shown that it moves by nature (``_moves``)."""
        stopped = (run >= self.stop).all(axis=1) if self.stop else np.zeros(len(run), dtype=bool)
        if stopped.any():  # rarely: the history is read only where every channel holds that long
            stopped &= self._moves(pairs, repeats).any(axis=1)
        return stopped

    def _moves(self, pairs: np.ndarray, repeats: np.ndarray) -> np.ndarray:
        """Whether each channel has shown that it moves by nature: ``stop`` pairs of readings before its current run,
        fewer than ``REST_SHARE`` of them repeats. A lane still since it started has not (a machine not yet run)."""
        return (pairs >= self.stop) & ((repeats + 1) / (pairs + 2) < REST_SHARE)

    def paused(self, idx: np.ndarray, repeat: np.ndarray) -> np.ndarray:
        """Whether each selected lane's reading is left unjudged and unlearned (``DetectorConfig.stop``), given its
        ``window_repeats`` ``[n, C]``, before ``surprise`` records it: the lane is *stopped* (every channel repeats
        in a run of at least ``stop`` readings with this one) or *waking* (within ``stop`` readings of moving again
        after such a stop, this one included). A lane whose every channel is at rest by nature (a repeat share of
        ``REST_SHARE`` or more of its pairs so far) neither stops nor wakes: its still stretches are its normal; nor
        does one that has yet to show it moves by nature (``_moves``)."""
        repeat = np.asarray(repeat, dtype=np.float64).reshape(len(idx), self.channels)
        # This reading extends each repeating channel's run by one and ends every other channel's.
        stopped = self._stopped(np.where(repeat == 1, self.run_[idx] + 1, 0), self.pairs_[idx], self.repeats_[idx])
        # Readings of wake still owed, this one included: counted from the last stopped reading, so a missing
        # reading as the machine restarts (which ends every run) does not cut the wake short.
        left = np.where(stopped, self.stop, self.waking_[idx])
        self.waking_[idx] = np.where(stopped, self.stop, np.maximum(left - 1, 0))
        return stopped | (left > 0)

    def mark(self, idx: np.ndarray, level: np.ndarray) -> None:
        """The selected lanes' runs whose surprise reached ``level [n]`` have alerted: they do not alert again until
        they end (``surprise`` has recorded this reading)."""
        channel = self._channel_surprise(self.run_[idx], self.longest_[idx], self.pairs_[idx], self.repeats_[idx])
        self.alerted_[idx] |= channel - math.log10(self.channels) >= np.asarray(level)[:, None]


class RestRecord(StreamState):
    """The largest level each lane's channels have read out of a still window while at rest, and the level judged
    for the next one (``DetectorConfig.rest_ratio``).

    A window whose earlier readings are one unbroken run has no spread, so ``robust_location_scale`` gives it 1 % of
    its level (1e-3 at 0) and any change out of it reads as hundreds or thousands of scales. On a channel frozen by a
    fault that is right: its first reading after the freeze is the fault's end. On a channel at rest by nature, whose
    consecutive readings mostly repeat (``StuckRecord.at_rest``: a valve at 0 that opens now and then), every
    opening read as thousands and alerted, and an alerted reading is never learned. At rest, a level under ``ratio``
    times the largest one the channel has read out of a still window is divided by that largest one (an opening like
    the last ones reads about 1); a record reads plainly and becomes the record. Both parts of ``window_deviation``
    are divided alike. State: ``max_`` ``[S, C]`` (0 = none yet).
    """

    def __init__(self, channels: int = 1, ratio: float = 1.5, n_streams: int = 0) -> None:
        self.channels, self.ratio = int(channels), float(ratio)
        super().__init__(n_streams)

    def _fresh(self, n: int) -> dict[str, np.ndarray]:
        return {"max_": np.zeros((n, self.channels))}

    def _config(self) -> dict[str, Any]:
        return {"channels": self.channels, "ratio": self.ratio}

    def relative(self, idx: np.ndarray, parts: np.ndarray, rest: np.ndarray) -> np.ndarray:
        """The selected lanes' ``window_deviation`` parts ``[n, 2, C]`` as judged, given which channels are at rest
        out of a still window ``[n, C]``; then record those channels' levels."""
        ref = self.max_[idx]
        level = parts[:, 0]
        known = rest & np.isfinite(level)
        lower = known & (ref > 0) & (level < self.ratio * ref)
        self.max_[idx] = np.where(known, np.fmax(ref, level), ref)
        return parts * (1.0 / np.where(lower, ref, 1.0))[:, None, :]


def beyond_range(x: np.ndarray, lo: np.ndarray, hi: np.ndarray, margin: np.ndarray) -> np.ndarray:
    """Where readings ``x`` lie more than ``margin`` above ``hi`` or below ``lo`` (NaN anywhere: not beyond); the one
    test of a reading leaving a range (``RangeRecord``)."""
    with np.errstate(invalid="ignore"):
        return (x > hi + margin) | (x < lo - margin)


class RangeRecord(StreamState):
    """The lowest and highest reading of each lane's channels since the lane started, and the readings that leave
    that range by more than a share of it (``DetectorConfig.range_tol``).

    A reading more than ``tol`` times a channel's range (highest less lowest) above its highest reading or below its
    lowest one leaves it. Every reading widens the range, that one included: a stream that climbs step by step never
    leaves it, and a level once reached is inside it the next time. A channel that has not moved yet (range 0) has
    nothing to leave, nor has a lane with fewer than ``least`` readings recorded: a range of a handful of readings
    (a lane restored from a checkpoint that kept none) is left every few readings. State: ``lo_``, ``hi_`` ``[S, C]``
    (+inf and −inf before any reading), ``seen_`` ``[S]`` (readings recorded).
    """

    def __init__(self, channels: int = 1, tol: float = 0.0, least: int = 1, n_streams: int = 0) -> None:
        self.channels, self.tol, self.least = int(channels), float(tol), int(least)
        super().__init__(n_streams)

    def _fresh(self, n: int) -> dict[str, np.ndarray]:
        return {"lo_": np.full((n, self.channels), np.inf), "hi_": np.full((n, self.channels), -np.inf),
                "seen_": np.zeros(n, dtype=np.int64)}  # fmt: skip

    def _config(self) -> dict[str, Any]:
        return {"channels": self.channels, "tol": self.tol, "least": self.least}

    def beyond(self, idx: np.ndarray, reading: np.ndarray) -> np.ndarray:
        """Record the selected lanes' readings ``[n, C]`` (NaN: none) and return which lanes ``[n]`` have a channel
        whose reading left its range before it was recorded."""
        x = np.asarray(reading, dtype=np.float64).reshape(len(idx), self.channels)
        lo, hi = self.lo_[idx], self.hi_[idx]
        span = hi - lo
        known = np.isfinite(span) & (span > 0) & (self.seen_[idx] >= self.least)[:, None]
        out = known & beyond_range(x, lo, hi, self.tol * np.where(known, span, 0.0))
        self.lo_[idx], self.hi_[idx] = np.fmin(lo, x), np.fmax(hi, x)
        self.seen_[idx] += np.isfinite(x).any(axis=1)
        return out.any(axis=1)


class SignalStats(StreamState):
    """Long-run mean/variance and the last ``short`` values of K log-signals per lane; their surprise.

    The statistics are expanding (Welford) for the first ``horizon`` values, then exponential with weight
    ``1/horizon``, so a stream that drifts slowly keeps a current baseline. NaN values are not learned. With a
    ``prior``, a fresh lane starts from its mean and variance as if it had seen ``prior.count`` values. The signals'
    correlations are learned alike, from the readings that give every signal a value (``overlap``).
    State: ``count_``, ``mean_``, ``var_`` ``[S, K]``; ``recent_`` ``[S, K, short]`` (NaN = empty), ``pos_`` ``[S]``;
    ``pairs_`` ``[S]`` and ``comoment_`` ``[S, K, K]``, the mean product of the standardised signals, and
    ``coexceed_`` ``[S, K, K]``, how often two signals stood ``TAIL_LEVEL`` above their means together (the diagonal:
    how often each did), learned alike; ``judged_``
    ``[S]``, the lane's readings given a surprise since it started (its warm-up; ``Detector.step`` counts them).
    """

    def __init__(
        self, k: int, horizon: int = 2000, short: int = 5, prior: SignalPrior | None = None, tail_dof: int = 0,
        n_streams: int = 0,
    ) -> None:  # fmt: skip
        self.k, self.horizon, self.short = int(k), int(horizon), int(short)
        self.prior, self.tail_dof = prior, int(tail_dof)
        super().__init__(n_streams)

    def _fresh(self, n: int) -> dict[str, np.ndarray]:
        p = self.prior
        return {
            "count_": np.full((n, self.k), 0 if p is None else p.count, dtype=np.int64),
            "mean_": np.zeros((n, self.k)) + (0.0 if p is None else np.asarray(p.mean)),
            "var_": np.zeros((n, self.k)) + (0.0 if p is None else np.asarray(p.var)),
            "recent_": np.full((n, self.k, self.short), np.nan),
            "pos_": np.zeros(n, dtype=np.int64),
            "pairs_": np.zeros(n, dtype=np.int64),
            "comoment_": np.zeros((n, self.k, self.k)),
            "coexceed_": np.zeros((n, self.k, self.k)),
            "judged_": np.zeros(n, dtype=np.int64),
        }

    def _config(self) -> dict[str, Any]:
        prior = None if self.prior is None else self.prior.to_dict()
        return {"k": self.k, "horizon": self.horizon, "short": self.short, "prior": prior, "tail_dof": self.tail_dof}

    @classmethod
    def _from_config(cls, config: dict[str, Any]) -> SignalStats:
        prior = config.get("prior")
        # States saved before the Student tail were judged under the Gaussian one (tail_dof 0).
        return cls(config["k"], config["horizon"], config["short"], None if prior is None else SignalPrior(**prior),
                   config.get("tail_dof", 0))  # fmt: skip

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> SignalStats:
        """``StreamState.from_state``; the lanes of a state saved before lanes warmed up on their own (no
        ``judged_``) were judged with their stream's warm-up and count as warm, and those of a state saved before the
        joint tails (no ``coexceed_``) start with their signals' tails apart."""
        stats = super().from_state(state)
        if "judged_" not in state:
            stats.judged_[:] = WARM_LANE
        if "coexceed_" not in state:
            # Its lanes are past TAIL_MIN_VALUES already: from empty rates the first pair of exceedances would read
            # as signals that always stand out together. They start at what independent Gaussian signals show.
            rate = math.erfc(TAIL_LEVEL / math.sqrt(2)) / 2
            stats.coexceed_[:] = rate**2 + (rate - rate**2) * np.eye(stats.k)
        return stats

    def _scale(self, idx: np.ndarray) -> np.ndarray:
        """Each selected lane's standard deviation per signal ``[n, K]``; NaN until two values or while it is 0."""
        std = np.sqrt(self.var_[idx])
        return np.where((self.count_[idx] >= 2) & (std > 0), std, np.nan)

    def surprise(self, idx: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Surprise ``[n, K]`` of log-signals ``x [n, K]`` against each lane's history (NaN: no history or no value).

        The larger of the reading's own tail and, when ``short`` > 1, the tail of the mean of its last ``short``
        values including this one; both measured in units of the single-value standard deviation, which is
        conservative for the mean (signals of overlapping windows are correlated, so σ/√short would over-alert).
        """
        mean = self.mean_[idx]
        deviation = x - mean
        if self.short > 1:
            recent = self.recent_[idx].copy()
            recent[np.arange(len(idx)), :, self.pos_[idx] % self.short] = x
            seen = np.isfinite(recent)
            short_mean = np.where(seen, recent, 0.0).sum(axis=2) / np.maximum(seen.sum(axis=2), 1)
            deviation = np.where(np.isfinite(x), np.fmax(deviation, short_mean - mean), np.nan)
        return _surprise(deviation / self._scale(idx), self.tail_dof)

    def learn(self, idx: np.ndarray, x: np.ndarray, baseline: np.ndarray) -> None:
        """Record one value per signal of each selected lane; only rows with ``baseline`` enter the statistics.

        The short-term ring always advances (it describes the present, anomaly or not); the long-run statistics
        skip NaN values and the rows the alert gate protects, and the correlations also rows without every signal.
        """
        ok = np.isfinite(x) & np.asarray(baseline, dtype=bool)[:, None]
        delta = np.where(ok, x - self.mean_[idx], 0.0)
        u = delta / self._scale(idx)  # standardised by the statistics before this reading, as ``surprise`` does
        together = ok.all(axis=1) & np.isfinite(u).all(axis=1)
        count = np.where(ok, np.minimum(self.count_[idx] + 1, self.horizon), self.count_[idx])
        a = np.where(ok, 1.0 / np.maximum(count, 1), 0.0)
        self.mean_[idx] += a * delta
        self.var_[idx] = (1 - a) * (self.var_[idx] + a * delta**2)
        self.count_[idx] = count
        self.recent_[idx, :, self.pos_[idx] % self.short] = x
        self.pos_[idx] += 1
        rows, u = idx[together], u[together]
        pairs = np.minimum(self.pairs_[rows] + 1, self.horizon)
        w = (1.0 / pairs)[:, None, None]
        self.comoment_[rows] = (1 - w) * self.comoment_[rows] + w * u[:, :, None] * u[:, None, :]
        above = (u > TAIL_LEVEL).astype(np.float64)
        self.coexceed_[rows] = (1 - w) * self.coexceed_[rows] + w * above[:, :, None] * above[:, None, :]
        self.pairs_[rows] = pairs

    def discount(self, idx: np.ndarray, columns: list[int], weight: int) -> None:
        """Let the selected lanes' statistics of signals ``columns`` count for at most ``weight`` values: the next
        value then moves their mean and variance by at least ``1 / (weight + 1)``, and the horizon is reached again
        as values come (``DetectorConfig.in_sample_weight``)."""
        rows, cols = np.ix_(np.asarray(idx, dtype=np.int64), columns)
        self.count_[rows, cols] = np.minimum(self.count_[rows, cols], weight)

    def resume(self, idx: np.ndarray, columns: list[int], least: int) -> None:
        """The selected lanes' windows start again after a gap (``Detector.resume``): the statistics of signals
        ``columns``, and of any other signal learnt from fewer than ``least`` values, start again as a fresh lane's
        (from the prior, if any); every short mean forgets the readings before the gap, and the lanes warm up again
        (``judged_``). The other signals' statistics are kept."""
        idx = self._rows(idx)
        fresh = self._fresh(len(idx))
        again = self.count_[idx] < least
        again[:, columns] = True
        for name in ("count_", "mean_", "var_"):
            getattr(self, name)[idx] = np.where(again, fresh[name], getattr(self, name)[idx])
        self.recent_[idx] = np.nan
        self.judged_[idx] = 0

    def overlap(self, idx: np.ndarray, floor: float, tail_floor: float = 1.0) -> np.ndarray:
        """How far each pair of a lane's signals counts as one ``[n, K, K]``: their correlation ρ on the lane's
        learned readings as ``(ρ − floor) / (1 − floor)``, clipped to [0, 1], for ``floor < 1``; 0 until the lane has
        ``REDUNDANCY_MIN_VALUES`` readings with every signal (``combine_surprise``'s ``overlap``). For ``tail_floor <
        1``, the larger of that and their joint-tail dependence λ as ``(λ − tail_floor) / (1 − tail_floor)``, once the
        lane has ``TAIL_MIN_VALUES`` such readings and both signals have stood out (``DetectorConfig.redundancy_tail``).
        """
        pairs = self.pairs_[idx]
        plain = _overlap_above(self.comoment_[idx], pairs >= REDUNDANCY_MIN_VALUES, floor)
        if tail_floor >= 1:
            return plain
        return np.maximum(plain, _overlap_above(self.coexceed_[idx], pairs >= TAIL_MIN_VALUES, tail_floor))


def _overlap_above(moments: np.ndarray, known: np.ndarray, floor: float) -> np.ndarray:
    """``[n, K, K]`` second moments ``moments`` over the root of their diagonals' products (a correlation; for joint
    exceedances, their dependence), as ``(r − floor) / (1 − floor)`` clipped to [0, 1]; 0 for lanes not ``known``
    ``[n]``, where a diagonal is 0, and everywhere for ``floor >= 1``."""
    if floor >= 1:
        return np.zeros_like(moments)
    d = np.sqrt(np.einsum("nkk->nk", moments))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = moments / (d[:, :, None] * d[:, None, :])
    return np.where(known[:, None, None] & np.isfinite(r), np.clip((r - floor) / (1 - floor), 0.0, 1.0), 0.0)


WARM_LANE = 2**40
"""``SignalStats.judged_`` of a lane restored from a state that did not count: past any warm-up."""

SCHEDULE_MEMORY = 8
"""Alerts per stream whose steps ``AlertGate`` remembers for ``on_schedule``."""


def on_schedule(times: np.ndarray, now: int, after: int, tol: float) -> bool:
    """Whether a reading at step ``now`` continues a progression of ``after`` of the earlier alerts at ``times``
    (steps, −1 = none) spaced alike: for some spacing ``P`` from the newest of them, ``now − P``, ``now − 2P``,
    ... each match an earlier alert to within ``max(2, tol · P)`` steps.

    One missing step ends a progression: a fault that took the place of one recurrence starts it again."""
    past = sorted((int(t) for t in np.asarray(times).tolist() if t >= 0), reverse=True)
    for i, last in enumerate(past):
        spacing = now - last
        if spacing <= 0:
            continue
        slack = max(2.0, tol * spacing)
        chain, expect = 1, last - spacing
        for earlier in past[i + 1 :]:  # not ``last`` itself: within the slack of a short spacing it matched itself
            if abs(earlier - expect) <= slack:
                chain, expect = chain + 1, earlier - spacing
        if chain >= after:
            return True
    return False


class AlertGate(StreamState):
    """The alert decision per stream: threshold, warm-up, refractory period, and which readings may be learned.

    A stream alerts once per run of readings at or above the threshold (when the run reaches ``debounce`` readings,
    or at its first reading after the refractory period), so a lasting anomaly is one alert, not one per reading.
    With ``record_decay`` > 0 the bar is the larger of the threshold and the stream's *record*: the largest score
    of its scored readings outside alerted runs (each at most ``record_cap``; unless ``record_held``, not those at or
    above the threshold that the refractory period holds back), falling by ``record_decay`` per reading. Gaussian
    surprise fits the heavy, stream-specific tails of these signals badly, and a stream whose normal edges recur at
    surprise 6 alerted once per refractory period for its whole life; the record learns that level from the surprises
    the stream produces without alerting, and an anomaly must beat it (docs/detection.md). With ``peaks`` > 0 the
    bar is also the ``peaks``-th largest peak of the stream's recent runs at or above the threshold, alerted ones
    included, each falling by ``peak_decay`` per reading: a surprise level the stream has reached ``peaks`` times
    lately is its normal (beats, daily edges), however high.
    With ``budget_cost`` > 0 a stream that has spent its alert budget (more than ``budget`` recent alerts, counted
    with an exponential decay over ``budget_span`` readings) alerts only where the score also beats the bar by
    ``budget_cost`` per alert beyond it; the bar that decides which readings are hot (and learned) stays as it is.
    With ``quiet`` > 0 a stream also alerts, outside the refractory period and once it has ``quiet_after`` scored
    readings, on a score of at least ``quiet`` (below the threshold) that beats its *best*, the highest score of its
    readings since the ``quiet_start``-th, by ``quiet_margin``: run peaks and the record raise the bar for a stream
    that keeps getting loud, and this lowers it for one that never does, whose subtle fault is its highest surprise
    yet. Such an alert counts against the budget and is not learned, like any other. It judges single readings, so
    with ``debounce`` > 1 (persistence asked for) it is off.
    With ``schedule`` > 0 an alert *on schedule* (``on_schedule``: it continues a progression of ``schedule``
    earlier alerts of the stream, spaced alike to within ``schedule_tol``) is kept back: a surprise that comes on
    time, a daily edge the run peaks have forgotten by the next day, is not news. It is still an alert for the gate
    (its run alerts once and is not learned, and it joins the progression) but not for the budget, and it starts no
    refractory period: nothing was paged, so nothing may hold back the next event (a level shift 146 readings after
    a kept-back spike stayed silent; docs/detection.md, the kept-alert round).
    With ``escalate`` > 0 a new run inside the refractory period (not the alerted run going on) alerts when its score
    reaches ``escalate`` times that of the stream's last alert: the refractory period keeps one event from paging
    again, not a far larger one that follows it.
    State: ``record_`` ``[S]`` (the record, −inf before any), ``scored_`` (scored readings), ``since_``
    (readings since the last alert, capped at ``refractory + 1``), ``hot_`` (readings at or above the bar in a row,
    capped above ``protect`` and ``debounce``), ``alerted_`` (the current run has alerted), ``run_`` (the peak of
    the current run at or above the threshold, −inf outside one), ``peaks_`` ``[S, peaks]`` (remembered run peaks,
    decayed; −inf = none), ``spent_`` (recent alerts, decayed), ``best_`` (the best score, −inf before any),
    ``steps_`` (steps since the stream started or was reset, unscored ones included: the schedule's clock), ``times_``
    ``[S, SCHEDULE_MEMORY]`` (the steps of the latest alerts, raised or kept back; −1 = none), ``last_`` (the score
    of the latest raised alert; inf before any).
    """

    def __init__(
        self, threshold: float, min_count: int, refractory: int, protect: int, debounce: int = 1,
        record_decay: float = 0.0, record_cap: float = math.inf, peaks: int = 0, peak_decay: float = 0.0,
        budget: float = 0.0, budget_span: int = 1, budget_cost: float = 0.0, quiet: float = 0.0,
        quiet_margin: float = 0.0, quiet_after: int = 0, quiet_start: int = 0, stuck: float = 0.0,
        schedule: int = 0, schedule_tol: float = 0.0, record_held: bool = True, escalate: float = 0.0,
        n_streams: int = 0,
    ) -> None:  # fmt: skip
        self.threshold, self.min_count = float(threshold), int(min_count)
        self.refractory, self.protect, self.debounce = int(refractory), int(protect), int(debounce)
        self.record_decay, self.record_cap = float(record_decay), float(record_cap)
        self.peaks, self.peak_decay = int(peaks), float(peak_decay)
        self.budget, self.budget_span, self.budget_cost = float(budget), int(budget_span), float(budget_cost)
        self.quiet, self.quiet_margin = float(quiet), float(quiet_margin)
        self.quiet_after, self.quiet_start = int(quiet_after), int(quiet_start)
        self.stuck = float(stuck)
        self.schedule, self.schedule_tol = int(schedule), float(schedule_tol)
        self.record_held = bool(record_held)
        self.escalate = float(escalate)
        self._keep = math.exp(-1.0 / self.budget_span)  # the recent-alert count's decay per reading
        super().__init__(n_streams)

    def _fresh(self, n: int) -> dict[str, np.ndarray]:
        return {
            "record_": np.full(n, -np.inf),
            "scored_": np.zeros(n, dtype=np.int64),
            "since_": np.full(n, self.refractory + 1, dtype=np.int64),
            "hot_": np.zeros(n, dtype=np.int64),
            "alerted_": np.zeros(n, dtype=bool),
            "run_": np.full(n, -np.inf),
            "peaks_": np.full((n, self.peaks), -np.inf),
            "spent_": np.zeros(n),
            "best_": np.full(n, -np.inf),
            "steps_": np.zeros(n, dtype=np.int64),
            "times_": np.full((n, SCHEDULE_MEMORY), -1, dtype=np.int64),
            "last_": np.full(n, np.inf),
        }

    def _config(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "min_count": self.min_count, "refractory": self.refractory,
                "protect": self.protect, "debounce": self.debounce, "record_decay": self.record_decay,
                "record_cap": self.record_cap, "peaks": self.peaks, "peak_decay": self.peak_decay,
                "budget": self.budget, "budget_span": self.budget_span, "budget_cost": self.budget_cost,
                "quiet": self.quiet, "quiet_margin": self.quiet_margin, "quiet_after": self.quiet_after,
                "quiet_start": self.quiet_start, "stuck": self.stuck, "schedule": self.schedule,
                "schedule_tol": self.schedule_tol, "record_held": self.record_held,
                "escalate": self.escalate}  # fmt: skip

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> AlertGate:
        """``StreamState.from_state``; a state saved before the step clock (``steps_``) continues it from its scored
        readings, the clock its alert times were kept in."""
        gate = super().from_state(state)
        if "steps_" not in state:
            gate.steps_[:] = gate.scored_
        return gate

    def decide(
        self, idx: np.ndarray, score: np.ndarray, stuck: np.ndarray | None = None, beyond: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Return (alert, warming, learn, stuck alert) for one reading per selected stream, and advance the state.

        ``stuck [n]`` is each stream's ``StuckRecord`` surprise (NaN: none); with ``self.stuck`` > 0 a stream whose
        stuck surprise reaches it alerts, outside the refractory period of its anomaly alerts. A stuck alert leaves
        the anomaly path as it was (no refractory period, record, budget or learning of its own): a frozen channel
        must not hold back the anomaly that follows it, and a run alerts once anyway. ``beyond [n]`` (bool) marks the
        streams whose reading left its range (``RangeRecord``): a scored one alerts whatever its score, outside the
        refractory period and an alerted run, and is not learned, like a quiet alert (and like it, not with
        ``debounce`` > 1)."""
        scored = np.isfinite(score)
        count = self.scored_[idx] + scored
        warming = count < self.min_count
        record = self.record_[idx] - self.record_decay
        bar = np.fmax(self.threshold, record) if self.record_decay > 0 else np.full(len(idx), self.threshold)
        peaks = self.peaks_[idx] - self.peak_decay
        if self.peaks:
            bar = np.fmax(bar, peaks.min(axis=1))
        spent = self.spent_[idx] * self._keep
        hot = scored & ~warming & (score >= bar)
        since = np.minimum(self.since_[idx] + 1, self.refractory + 1)
        hot_run = np.where(hot, np.minimum(self.hot_[idx] + 1, max(self.protect, self.debounce) + 1), 0)
        # Once per run of hot readings: its debounce-th reading, or its first one after the refractory period, or
        # inside it when the run escalates (far louder than the last alert: news, not the alerted event going on).
        free = since > self.refractory
        if self.escalate:
            free |= score >= self.escalate * self.last_[idx]
        alert = (hot_run >= self.debounce) & free & ~(self.alerted_[idx] & hot)
        if self.budget_cost:  # over budget, a new alert must also beat the bar by the cost of each alert beyond it
            alert &= score >= bar + self.budget_cost * np.maximum(spent - self.budget, 0.0)
        quiet = np.zeros(len(idx), dtype=bool)
        if self.quiet and self.debounce == 1:  # it judges single readings: no way round a debounce asked for
            best = self.best_[idx]
            quiet = (scored & ~warming & ~alert & ~self.alerted_[idx] & (since > self.refractory)
                     & (count >= self.quiet_after) & (score >= self.quiet) & (score >= best + self.quiet_margin))
            self.best_[idx] = np.where(scored & ~warming & (count >= self.quiet_start), np.fmax(best, score), best)
            alert = alert | quiet
        if beyond is not None and self.debounce == 1:  # a single reading, and not learned: a quiet alert's rules
            ranged = (np.asarray(beyond, dtype=bool) & scored & ~warming & ~alert & ~self.alerted_[idx]
                      & (since > self.refractory))  # fmt: skip
            quiet, alert = quiet | ranged, alert | ranged
        kept = np.zeros(len(idx), dtype=bool)
        # The schedule keeps time in steps, not scored readings: a gap the monitor filled, or a reading it could not
        # score, is still a step of the stream's clock, and a daily edge stays a day of steps apart across it.
        steps = self.steps_[idx] + 1
        self.steps_[idx] = steps
        if self.schedule:
            for row in np.flatnonzero(alert):
                s = idx[row]
                kept[row] = on_schedule(self.times_[s], int(steps[row]), self.schedule, self.schedule_tol)
                self.times_[s] = np.roll(self.times_[s], 1)
                self.times_[s, 0] = steps[row]
        self.alerted_[idx] = hot & (self.alerted_[idx] | alert)
        # A hot reading of a run still short of ``debounce`` is the event's, not the normal: in the record it raised
        # the next reading's bar to its own score, and a run of surprises 4.5–8.2 stopped being hot before it alerted.
        pending = hot & free & (hot_run < self.debounce)
        normal = scored & ~warming & ~self.alerted_[idx] & ~pending
        level = scored & ~warming & (score >= self.threshold)  # in a run at or above the threshold
        if not self.record_held:  # a run the refractory period holds back is the alerted event's, not the normal
            normal &= ~(level & (since <= self.refractory))
        self.record_[idx] = np.where(normal, np.fmax(record, np.fmin(score, self.record_cap)), record)
        self._remember_peaks(idx, level, score, peaks)
        self.scored_[idx] = count
        raised = alert & ~kept  # paged: only these start a refractory period, set the bar to escalate and spend budget
        self.since_[idx] = np.where(raised, 0, since)
        self.last_[idx] = np.where(raised, score, self.last_[idx])
        self.hot_[idx] = hot_run
        self.spent_[idx] = spent + raised
        frozen = np.zeros(len(idx), dtype=bool)
        if self.stuck and stuck is not None:
            with np.errstate(invalid="ignore"):
                frozen = (np.asarray(stuck) >= self.stuck) & ~warming & (since > self.refractory) & ~alert
        return raised | frozen, warming, (~hot | (hot_run > self.protect)) & ~quiet, frozen

    def resume(self, idx: np.ndarray, skipped: np.ndarray) -> None:
        """Carry the selected streams across ``skipped [n]`` missing steps after which their windows start again
        (``DetectorConfig.resume``): their step clock, decays and refractory period run on as over a filled gap, a run
        in progress ends (its peak is remembered, as a missing reading ends it), and each warms up again on its new
        windows; its record, run peaks, budget, best score and schedule are kept."""
        idx = self._rows(idx)
        gap = np.asarray(skipped, dtype=np.int64).reshape(len(idx))
        # The gap's first missing step ends the run (its peak is remembered there), and the others decay every peak.
        first = np.minimum(gap, 1)[:, None]
        none = np.zeros(len(idx), dtype=bool)
        self._remember_peaks(idx, none, np.full(len(idx), np.nan), self.peaks_[idx] - self.peak_decay * first)
        self.peaks_[idx] = self.peaks_[idx] - self.peak_decay * (gap[:, None] - first)
        self.record_[idx] = self.record_[idx] - self.record_decay * gap
        self.spent_[idx] = self.spent_[idx] * self._keep**gap
        self.since_[idx] = np.minimum(self.since_[idx] + gap, self.refractory + 1)
        self.steps_[idx] = self.steps_[idx] + gap
        self.scored_[idx], self.hot_[idx], self.alerted_[idx] = 0, 0, False

    def _remember_peaks(self, idx: np.ndarray, level: np.ndarray, score: np.ndarray, peaks: np.ndarray) -> None:
        """Follow each stream's run at or above the threshold; when it ends, its peak replaces the lowest
        remembered one if higher. ``peaks`` are the stream's remembered peaks after this reading's decay."""
        run = np.where(level, np.fmax(self.run_[idx], score), self.run_[idx])
        ended = ~level & np.isfinite(run)
        if self.peaks:
            low = peaks.argmin(axis=1)
            rows = np.flatnonzero(ended & (run > peaks[np.arange(len(idx)), low]))
            peaks[rows, low[rows]] = run[rows]
        self.peaks_[idx] = peaks
        self.run_[idx] = np.where(ended, -np.inf, run)


@dataclass(frozen=True)
class DetectorStep:
    """One reading per selected stream: score (NaN = none), alert, warming, and the lane that gave the score.

    ``surprise`` is the corrected surprise of every scored reading; ``score`` equals it on the readings that alert
    and is held just below the threshold on the others (the refractory period, the rest of an alerted run), so a
    threshold applied to ``score`` never counts a reading the detector decided not to alert on. An alert below the
    threshold (the quiet, range and stuck paths) scores the threshold, so the committed threshold applied to
    ``score`` counts exactly the alerts. NaN while warming.
    """

    score: np.ndarray  # [n]
    surprise: np.ndarray  # [n]
    alert: np.ndarray  # [n] bool
    warming: np.ndarray  # [n] bool
    lane: np.ndarray  # [n] the lane row (channel) with the largest surprise, -1 when none
    lane_score: np.ndarray  # [m] each lane's own surprise (signals combined; NaN = none or warming), uncorrected
    signals: np.ndarray  # [m, K] each lane's log-signals (NaN = none)
    deviation: np.ndarray  # [m, C] each lane's channels' deviation, steps folded in (NaN = none; explanations)
    stuck: np.ndarray  # [n] bool: the alert is a stuck sensor's (``StuckRecord``), not the anomaly score's
    ranged: np.ndarray  # [n] bool: the alert is the range's (``RangeRecord``): its reading left it, its score is low


class Detector:
    """Signals → surprise → alert for streams made of lanes (module docstring).

    Lanes (``memory``, ``stats``) and streams (``gate``) are numbered separately: a stream of a fixed-channel model
    is one lane, a stream scored channel by channel has one lane per channel. The caller keeps the numbering, adds and
    removes lanes with their streams, and resets a stream with its lanes or a lane alone (which warms up again).
    """

    def __init__(
        self, config: DetectorConfig, dims: int, card_prior: Mapping[str, Any] | None = None, channels: int = 1
    ) -> None:
        """``dims``: representation size; ``channels``: channels of a lane's window (1 when scored channel by
        channel)."""
        self.config, self.dims, self.channels = config, int(dims), int(channels)
        c = config
        prior = SignalPrior.from_card(card_prior, c.signals, c.prior_weight) if card_prior else None
        self.trained_rows = trained_rows(card_prior) if c.in_sample_weight else 0
        self.memory = RepresentationMemory(dims, c.memory, c.stride, c.exclusion)
        self.steps = StepRecord(channels, c.step_span, c.step_record)
        self.stuck = StuckRecord(channels, c.stuck_history, c.stop)
        self.seasons = SeasonalRecord(channels, c.deviation_window, c.seasonal_after if self.seasonal else 0,
                                      c.seasonal_fit, c.seasonal_cycles, c.seasonal_week, c.seasonal_week_fit)
        self.rest = RestRecord(channels, c.rest_ratio)
        self.range = RangeRecord(channels, c.range_tol, c.range_after)
        self.stats = SignalStats(len(c.signals), c.horizon, c.short, prior, c.tail_dof)
        # A prior stands for that many readings of the stream's own warm-up, never for its first min_warmup.
        warmup = c.min_count if prior is None else max(c.min_count - prior.count, min(c.min_warmup, c.min_count))
        self.gate = AlertGate(c.threshold, max(warmup, 1), c.refractory, c.protect, c.debounce, c.record_decay,
                              c.record_cap, c.peaks, c.peak_decay, c.budget, c.budget_span, c.budget_cost, c.quiet,
                              c.quiet_margin, c.quiet_after, c.min_count, c.stuck, c.schedule,
                              c.schedule_tol, c.record_held, c.escalate)  # fmt: skip

    @property
    def _model_columns(self) -> list[int]:
        """The ``SignalStats`` columns of the model's signals (``MODEL_SIGNALS``)."""
        return [k for k, name in enumerate(self.config.signals) if name in MODEL_SIGNALS]

    @property
    def seasonal(self) -> bool:
        """Whether ``deviation`` has a seasonal floor or scheduled channels (``DetectorConfig.seasonal_gain``,
        ``seasonal_fit``): whether the seasonal record is kept."""
        c = self.config
        return (c.seasonal_gain > 0 or c.seasonal_fit > 0) and c.deviation_window > 0 and "deviation" in c.signals

    def parts(self) -> tuple[tuple[str, StreamState, str], ...]:
        """Every part of the detector's state as (name, part, row space): the gate's rows are streams, every other
        part's are lanes. ``state_dict`` prefixes each part's arrays with its name, and the monitor adds, removes and
        saves rows through this one list, so a new part is one entry here. The memory comes first: ``load_state``
        reads the number of lanes from it."""
        return (("memory", self.memory, "lane"), ("stats", self.stats, "lane"), ("gate", self.gate, "stream"),
                ("steps", self.steps, "lane"), ("stuck", self.stuck, "lane"), ("seasons", self.seasons, "lane"),
                ("rest", self.rest, "lane"), ("range", self.range, "lane"))

    def _lane_parts(self) -> tuple[StreamState, ...]:
        return tuple(part for _, part, space in self.parts() if space == "lane")

    def add(self, streams: int, lanes: int) -> None:
        """Append fresh streams and lanes (numbered after the existing ones)."""
        self.gate.add_streams(streams)
        for part in self._lane_parts():
            part.add_streams(lanes)

    def remove(self, streams: np.ndarray, lanes: np.ndarray) -> None:
        """Drop streams and lanes; later ones move down to fill the gaps (``np.delete`` numbering)."""
        self.gate.remove_streams(streams)
        for part in self._lane_parts():
            part.remove_streams(lanes)

    def reset(self, streams: np.ndarray, lanes: np.ndarray) -> None:
        """Return streams and lanes to their initial state, keeping their numbers."""
        self.gate.reset_streams(streams)
        for part in self._lane_parts():
            part.reset_streams(lanes)

    def resume(self, streams: np.ndarray, lanes: np.ndarray, lane_of: np.ndarray, skipped: np.ndarray) -> None:
        """Carry lanes across ``skipped [m]`` missing steps after which their windows start again (a gap longer than
        ``max_gap``, a disconnection; ``DetectorConfig.resume``). ``streams`` are the streams whose every lane
        restarts, whose gates run on over the gap too (``AlertGate.resume``); ``lane_of [m]`` is each lane's position
        in ``streams``, −1 where its stream's other lanes go on.

        The gap is, to the detector, a run of missing steps, as a filled gap is: ``deviation``'s statistics, the step,
        rest and range records, the channels' repeat histories and cycles describe the sensor and are kept; runs of
        identical readings end; the seasonal ring's clock runs on over the gap (``SeasonalRecord.skip``). What is read
        off the model's windows starts again, as at a new stream: the model signals' statistics (from the card's prior,
        if any) and the representation memory, since a window mostly padding is not what they were learnt on (against
        them a channel back from a gap alerted on its padded windows); so do the short means, the warm-ups, and
        ``deviation``'s statistics where they hold fewer than ``min_count`` values, too few to judge by.
        """
        streams = np.asarray(streams, dtype=np.int64)
        lanes, lane_of = np.asarray(lanes, dtype=np.int64), np.asarray(lane_of, dtype=np.int64)
        gap = np.asarray(skipped, dtype=np.int64).reshape(len(lanes))
        if len(streams):
            skip = np.zeros(len(streams), dtype=np.int64)
            whole = lane_of >= 0
            np.maximum.at(skip, lane_of[whole], gap[whole])
            self.gate.resume(streams, skip)
        self.memory.reset_streams(lanes)
        self.stats.resume(lanes, self._model_columns, self.config.min_count)
        self.stuck.surprise(lanes, np.full((len(lanes), self.channels), np.nan))  # a missing reading ends every run
        self.seasons.skip(lanes, gap)

    def step(
        self,
        stream_idx: np.ndarray,
        lanes: np.ndarray,
        lane_of: np.ndarray,
        distance: np.ndarray,
        z: np.ndarray,
        deviation: np.ndarray | None = None,
        repeat: np.ndarray | None = None,
        reading: np.ndarray | None = None,
    ) -> DetectorStep:
        """Score, decide and learn one reading per selected stream.

        ``lanes [m]`` are the lane rows with a value this reading, ``lane_of [m]`` the position in ``stream_idx`` of
        each one's stream, ``distance [m]`` their paper distances (NaN = unscorable), ``z [m, F]`` their unmasked
        last-step representations, ``deviation [m, 2, C]`` their ``window_deviation``, ``repeat [m, C]`` their
        ``window_repeats`` and ``reading [m, C]`` their windows' last readings, missing ones NaN (None: not available;
        without readings there is no seasonal floor). Every step of a lane, scorable or not, brings its reading.
        """
        idx = self.gate._rows(stream_idx)
        lanes = np.asarray(lanes, dtype=np.int64)
        lane_of = np.asarray(lane_of, dtype=np.int64)
        n, m = len(idx), len(lanes)
        # A stopped lane, or one whose windows still hold its stop, is not judged or learned (DetectorConfig.stop).
        paused = np.zeros(m, dtype=bool)
        if self.config.stop and repeat is not None:
            paused = self.stuck.paused(lanes, repeat)
        distance = np.asarray(distance, dtype=np.float64).reshape(m)
        z = np.asarray(z, dtype=np.float32).reshape(m, self.dims)
        valid = np.isfinite(distance)
        channel_deviation = np.full((m, self.channels), np.nan)
        judged_deviation = channel_deviation  # what is judged: the plain deviation, or its seasonal floor
        c = self.config
        parts = None
        if deviation is not None and "deviation" in c.signals:
            parts = np.asarray(deviation, dtype=np.float64).reshape(m, 2, self.channels)
            if c.rest_ratio > 0 and c.deviation_window and c.stuck and repeat is not None:
                rest = self.stuck.at_rest(lanes, c.deviation_window)
                if rest.any():
                    parts = self.rest.relative(lanes, parts, rest)
        seasonal = self._seasonal_levels(lanes, reading, None if parts is None else parts[:, 0])
        if parts is not None:
            if seasonal is not None:  # a new array: the caller's parts stay as they were
                parts = np.stack([self.seasons.scheduled_levels(lanes, parts[:, 0], seasonal), parts[:, 1]], axis=1)
            # A paused lane's levels are not judged, nor counted for or against its cycle (NaN: neither).
            floor = None if seasonal is None or not c.seasonal_gain else self.seasons.judged(
                lanes, np.where(paused[:, None], np.nan, parts[:, 0]), seasonal, c.seasonal_gain, c.seasonal_trust,
                c.seasonal_loud, c.seasonal_ratio, c.seasonal_need)[valid]  # fmt: skip
            plain, judged = self.steps.fold(lanes[valid], parts[valid], floor, ~paused[valid])
            channel_deviation[valid] = plain
            if floor is not None:
                judged_deviation = np.full((m, self.channels), np.nan)
                judged_deviation[valid] = judged
        columns = []
        for name in self.config.signals:
            if name == "distance":
                columns.append(distance)
            elif name == "novelty":
                columns.append(np.where(valid, self.memory.novelty(lanes, z), np.nan))
            else:
                columns.append(np.fmax.reduce(channel_deviation, axis=1))  # a lane's worst channel
        signals = transform_signals(np.stack(columns, axis=1), self.config.signals)  # [m, K], learned
        judged_signals = signals  # [m, K], judged
        if judged_deviation is not channel_deviation:
            columns[self.config.signals.index("deviation")] = np.fmax.reduce(judged_deviation, axis=1)
            judged_signals = transform_signals(np.stack(columns, axis=1), self.config.signals)
        if self.trained_rows:
            # A stream's step ``trained_rows`` (its clock before this reading) is its first reading past the rows its
            # model trained on: the model signals' statistics learnt there now count for in_sample_weight readings.
            leaving = (self.gate.steps_[idx] == self.trained_rows)[lane_of]
            if leaving.any():
                self.stats.discount(lanes[leaving], self._model_columns, self.config.in_sample_weight)
        lane_score = self.combine(lanes, self.stats.surprise(lanes, judged_signals))
        # A lane younger than its stream waits for a warm-up of its own (module docstring). A stream's lanes that
        # started with it are exactly as old as its gate's count says, so for them this changes nothing.
        judged = self.stats.judged_[lanes] + (np.isfinite(lane_score) & ~paused)
        self.stats.judged_[lanes] = judged
        stream_warm = self.gate.scored_[idx] + 1 >= self.gate.min_count
        young = (judged < self.gate.min_count) & stream_warm[lane_of]
        lane_score = np.where(young | paused, np.nan, lane_score)
        per_lane = 1 if self.config.combine == "fisher" else len(columns)
        # Per stream: the best lane, corrected for the number of tests made (lanes with a value, × signals for max).
        tests = np.bincount(lane_of, weights=(valid & ~young & ~paused).astype(np.float64), minlength=n) * per_lane
        best = _best_per_stream(lane_score, lane_of, n)
        has = np.isfinite(best)
        score = np.where(has, best - np.log10(np.maximum(tests, 1)), np.nan)
        winner = np.full(n, -1, dtype=np.int64)
        top = has[lane_of] & (lane_score == best[lane_of])
        winner[lane_of[top]] = lanes[top]
        # A frozen channel (StuckRecord): the surprise of its run, for the episode, and of a run not yet alerted, for
        # the gate; per stream the best lane's, Bonferroni-corrected like the score.
        stuck, fresh = np.full(n, np.nan), None
        if repeat is not None and (self.config.stuck or self.config.stop):  # the runs are what a stop is read from
            lane_stuck, lane_fresh = self.stuck.surprise(lanes, repeat)
            if self.config.stuck:
                correction = np.log10(np.maximum(np.bincount(lane_of, minlength=n), 1))
                stuck, fresh = (_best_per_stream(v, lane_of, n) - correction for v in (lane_stuck, lane_fresh))
        beyond = None
        if self.config.range_tol and reading is not None:
            # Every reading widens its range, a paused lane's (a stop) excepted; a judged one may alert by it.
            x = np.where(paused[:, None], np.nan, np.asarray(reading, dtype=np.float64).reshape(m, self.channels))
            left = self.range.beyond(lanes, x) & np.isfinite(lane_score)
            beyond = np.bincount(lane_of[left], minlength=n) > 0
        alert, warming, learn, frozen = self.gate.decide(idx, score, fresh, beyond)
        if frozen.any():
            mine = frozen[lane_of]
            self.stuck.mark(lanes[mine], (self.config.stuck + correction)[lane_of[mine]])
            named = mine & (lane_fresh - correction[lane_of] == fresh[lane_of])  # the frozen lane names the channel
            winner[lane_of[named]] = lanes[named]
        baseline = learn[lane_of] & valid & ~paused
        self.stats.learn(lanes[valid], signals[valid], baseline[valid])
        remembered = (valid & ~paused) if self.config.memory_alerts else baseline
        self.memory.remember(lanes[remembered], z[remembered])
        total = np.fmax(score, stuck)  # a stuck run's surprise holds its episode open while the run lasts
        # The score says what the gate decided: an alert below the threshold (quiet, range, stuck) is raised to it,
        # or a threshold swept over the scores would miss those alerts and still feel their refractory periods.
        threshold = self.config.threshold
        held = np.where(alert, np.fmax(total, threshold), np.fmin(total, np.nextafter(threshold, -np.inf)))
        # Named by the range only where the score stays below the threshold: a loud reading is the score's alert.
        ranged = alert & ~frozen & (False if beyond is None else beyond) & ~(score >= threshold)
        return DetectorStep(np.where(warming, np.nan, held), total, alert, warming, winner, lane_score,
                            judged_signals, judged_deviation, frozen, ranged)  # fmt: skip

    def _seasonal_levels(
        self, lanes: np.ndarray, reading: np.ndarray | None, plain: np.ndarray | None,
    ) -> np.ndarray | None:
        """Write the lanes' readings to the seasonal record and return their channels' seasonal levels ``[m, C]``
        (NaN: no cycle, too few differences yet, or not read given the plain levels ``[m, C]``:
        ``SeasonalRecord.unused``); None without a floor or without readings. A lane with a channel this reading
        schedules (``SeasonalRecord.settled``: its cycles found, or looked at again once a week of it is kept) has its
        ``deviation`` statistics relearnt (``_relearn_deviation``)."""
        if not self.seasonal or reading is None:
            return None
        c = self.config
        # Without plain levels nothing is judged: the readings are only written.
        skip = np.ones((len(lanes), self.channels), dtype=bool) if plain is None else self.seasons.unused(
            lanes, plain, c.seasonal_trust, c.seasonal_loud, c.seasonal_need, c.seasonal_gain > 0)  # fmt: skip
        rows, channels, differences = self.seasons.push(lanes, reading, skip)
        # Lanes scheduled at their cycles' finding or their second look, each from all of its readings so far.
        settled = self.seasons.settled
        for n in np.unique(self.seasons.seen_[settled]).tolist():
            self._relearn_deviation(settled[self.seasons.seen_[settled] == n], n)
        levels = np.full((len(lanes), self.channels), np.nan)
        least = self.seasons.least_[lanes[rows], channels]  # a scheduled channel's least scale, else 0
        levels[rows, channels] = window_deviation(differences[:, :, None], least=least[:, None])[:, 0, 0]
        return levels

    def _relearn_deviation(self, lanes: np.ndarray, n: int) -> None:
        """Relearn the ``deviation`` statistics of ``lanes``, whose cycles have just been found with a scheduled
        channel among them (in their first ``n`` readings: ``seasonal_after``, or the seasonal record's size when it
        first holds a week), from the levels of every ``RELEARN_STRIDE``-th of their first ``seasonal_after`` readings
        (as sparsely in ``n``) as they would have been had the cycles been known: seasonal on the scheduled channels,
        plain on the others
        (``SeasonalRecord.history``; a step folded in and a channel at rest are left out, and the seasonal floor is
        judged, not learned). A scheduled channel's level changes its meaning, and the statistics learned on plain
        levels (a cycle's edges, far out against the window) made a fault's seasonal level of 68 read as a surprise of
        6.7 a thousand readings later (docs/detection.md, the echo round). A lane with fewer than
        ``RELEARN_MIN_VALUES`` levels keeps its statistics."""
        c = self.config
        span, k = c.deviation_window, c.signals.index("deviation")
        # Evenly spaced windows, ending at the last reading; each channel's windows without a missing value. A longer
        # history is read as sparsely, so that a relearn costs what the first did.
        stride = max(RELEARN_STRIDE, RELEARN_STRIDE * n // self.seasons.after)
        ends = np.arange(n - 1, span - 2, -stride)[::-1]
        at = ends[:, None] - np.arange(span)[::-1]
        values = np.full((len(lanes), len(ends)), np.nan)
        for row, lane in enumerate(lanes.tolist()):
            readings, differences = self.seasons.history(lane, n)
            scheduled = self.seasons.scheduled_[lane]
            for channel, series in enumerate(np.where(scheduled[:, None], differences, readings)):
                windows = series[at]  # [n, W]
                full = np.isfinite(windows).all(axis=1)
                least = np.full((int(full.sum()), 1), self.seasons.least_[lane, channel])
                level = window_deviation(windows[full][:, :, None], least=least)[:, 0, 0]
                values[row, full] = np.fmax(values[row, full], level)  # a lane's worst channel
        scratch = SignalStats(1, c.horizon, 1, None, c.tail_dof, len(lanes))
        for t in range(values.shape[1]):
            scratch.learn(np.arange(len(lanes)), values[:, t : t + 1], np.ones(len(lanes), dtype=bool))
        rows = np.flatnonzero(scratch.count_[:, 0] >= RELEARN_MIN_VALUES)
        s = self.stats
        for part in ("count_", "mean_", "var_"):
            getattr(s, part)[lanes[rows], k] = getattr(scratch, part)[rows, 0]
        s.recent_[lanes[rows], k] = np.nan  # the last plain levels are not this signal's present

    def combine(self, lanes: np.ndarray, surprise: np.ndarray) -> np.ndarray:
        """One surprise per lane from its signal surprises ``[m, K]`` (``DetectorConfig.combine``): Fisher's method,
        counting signals that the lane has shown to be near-duplicates or to stand out together as partly one
        (``redundancy``, ``redundancy_tail``), or the
        largest. NaN where no signal has a value."""
        if self.config.combine == "fisher":
            c = self.config
            counted = c.redundancy < 1 or c.redundancy_tail < 1
            overlap = self.stats.overlap(lanes, c.redundancy, c.redundancy_tail) if counted else None
            return combine_surprise(surprise, overlap)
        return np.fmax.reduce(surprise, axis=1)

    def for_model(self, dims: int, card_prior: Mapping[str, Any] | None) -> Detector:
        """This detector's successor for another model with the same inputs (a hot swap): no stream warms up again.

        The alert gate (record, scored-reading count, refractory period, hot run), the ``deviation`` statistics and the
        step, stuck, seasonal, rest and range records describe the streams, not the model: they carry over unchanged,
        and so do, until ``relearn`` replaces them, the ``MODEL_SIGNALS`` statistics (exact for a model with the same
        outputs, a re-export). The representation memory starts empty: the old representations are another model's.
        """
        new = Detector(self.config, dims, card_prior, self.channels)
        # Same detector settings: only the gate's warm-up length and the statistics' prior depend on the card. A
        # stream that may alert keeps alerting, whatever warm-up the new card's prior asks of new streams.
        active = self.gate.scored_ >= self.gate.min_count
        new.gate = new.gate.with_arrays(self.gate.state_dict())
        new.gate.scored_[active] = np.maximum(new.gate.scored_[active], new.gate.min_count)
        new.stats = new.stats.with_arrays(self.stats.state_dict())
        warm = self.stats.judged_ >= self.gate.min_count
        new.stats.judged_[warm] = np.maximum(new.stats.judged_[warm], new.gate.min_count)
        # The signals' correlations are partly the old model's: relearned from the new model's readings.
        new.stats.pairs_[:], new.stats.comoment_[:], new.stats.coexceed_[:] = 0, 0.0, 0.0
        # Every other part is a record of the sensor (step, stuck, seasonal, rest, range): carried over as it is.
        for name, part, _ in self.parts():
            if name not in ("memory", "stats", "gate"):
                setattr(new, name, getattr(new, name).with_arrays(part.state_dict()))
        new.memory.add_streams(new.stats.n_streams)
        return new

    def relearn(self, lanes: np.ndarray, distance: np.ndarray, z: np.ndarray) -> None:
        """Relearn the model signals and memory of ``lanes`` (just handed over by ``for_model``) from their recent
        readings as the new model scores them: ``distance [m, T]`` (NaN: no scorable reading) and ``z [m, T, F]``,
        oldest first; from the new card's prior, if it has one.

        A signal relearnt from fewer than ``RELEARN_MIN_VALUES`` values (no prior, few scorable steps; novelty, which
        needs ``exclusion`` older readings) keeps the old model's statistics: a variance read off a handful of values
        turns every later value into an alert. The alert gate is not stepped: these readings were judged when they
        arrived.
        """
        lanes = self.stats._rows(lanes)
        valid = np.isfinite(distance)
        s = self.stats
        scratch = SignalStats(s.k, s.horizon, s.short, s.prior, s.tail_dof, len(lanes))
        # The relearnt short-term ring ends where the kept one writes next, so that the two rotate as one.
        scratch.pos_[:] = (s.pos_[lanes] - valid.sum(axis=1)) % s.short
        signals = self.config.signals
        for t in range(distance.shape[1]):
            rows = np.flatnonzero(valid[:, t])
            zt = z[rows, t]
            values = {"distance": distance[rows, t], "novelty": self.memory.novelty(lanes[rows], zt),
                      "deviation": np.full(len(rows), np.nan)}  # fmt: skip
            scratch.learn(rows, transform_signals(np.stack([values[n] for n in signals], axis=1), signals),
                          np.ones(len(rows), dtype=bool))  # fmt: skip
            self.memory.remember(lanes[rows], zt)
        for k in self._model_columns:
            rows = np.flatnonzero(scratch.count_[:, k] >= RELEARN_MIN_VALUES)
            for part in ("count_", "mean_", "var_", "recent_"):
                getattr(s, part)[lanes[rows], k] = getattr(scratch, part)[rows, k]

    def state_dict(self) -> dict[str, np.ndarray]:
        """Every part's state as one flat dict of arrays (``memory/``, ``stats/``, ``gate/``, ``steps/``, ``stuck/``,
        ``seasons/``, ``rest/``, ``range/`` prefixes)."""
        state: dict[str, np.ndarray] = {}
        for prefix, part, _ in self.parts():
            state.update({f"{prefix}/{k}": v for k, v in part.state_dict().items()})
        return state

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore ``state_dict`` output saved by a detector with the same config and dims.

        Each part keeps this detector's configuration: a state saved before a setting existed (an earlier version's
        checkpoint) has no value for it, and its arrays for the setting start fresh; a state saved before the step
        record, the stuck record, the seasonal record, the rest record or the range record gives every lane a fresh
        one. A seasonal record kept at another size (by a version that compared a scheduled channel with one cycle
        only, a stream-scaled model's saved before ``seasonal_fit``, or a detector that now keeps none) is laid into
        this one's (``SeasonalRecord.adopted``). A representation memory of other dims (another model's, handed over)
        starts empty."""
        for prefix, part, _ in self.parts():
            sub = {k.split("/", 1)[1]: v for k, v in state.items() if k.startswith(prefix + "/")}
            if prefix == "seasons" and "ring_" in sub and np.shape(sub["ring_"])[2:] != (self.seasons.size,):
                self.seasons = self.seasons.adopted(sub)
                continue
            fresh = not sub
            lanes = self.stats.n_streams
            if prefix == "memory" and sub:  # loaded first: its lanes are its own rows
                fresh, lanes = np.shape(sub["ring_"])[2:] != (self.dims,), len(sub["written_"])
            if prefix not in ("stats", "gate") and fresh:  # every checkpoint holds those two
                setattr(self, prefix, type(part)(**part._config(), n_streams=lanes))
            else:
                setattr(self, prefix, part.with_arrays(sub))
