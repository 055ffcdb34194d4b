"""How many queued messages the daemon takes in before its next scoring tick.

Intake and scoring share one thread, so a flood of messages must not delay the tick (``/healthz`` and every
stream's scores wait for it). ``TickBudget`` measures the seconds of intake plus scoring per message, smoothed
over ticks, and lets the next tick take in as many messages as fit ``[monitor] tick_budget_ms`` (at most
``tick_max_messages``); the rest wait in the queue and are reported as the backlog (``trep_edge_tick_backlog``,
``/healthz`` "degraded").
"""
from __future__ import annotations

from trep_edge.runtime.service.config import MonitorSettings


class TickBudget:
    """The intake allowance of the current tick, what was taken of it, and the backlog after the last tick."""

    def __init__(self, settings: MonitorSettings) -> None:
        self.allowance, self.taken, self.backlog = settings.tick_max_messages, 0, 0
        self._cost: float | None = None  # seconds of intake + scoring per message, smoothed over ticks
        self._busy = 0.0  # seconds spent taking in messages since the last tick (the idle wait is not work)

    @property
    def room(self) -> int:
        """How many more messages this tick may take in."""
        return self.allowance - self.taken

    def took(self, count: int, seconds: float) -> None:
        """``count`` messages were taken in, in ``seconds`` of work."""
        self.taken += count
        self._busy += seconds

    def ticked(self, settings: MonitorSettings, seconds: float, queued: int) -> None:
        """A tick took ``seconds`` of scoring with ``queued`` messages waiting: size the next tick's allowance."""
        taken, self.taken = self.taken, 0
        # Work only: counting the wait between ticks made a quiet tick look slow per message, and the allowance
        # shrank tick after tick (halving at tick_interval 1 s) until the daemon took in one message per tick.
        spent, self._busy = self._busy + seconds, 0.0
        if taken:
            # Seconds per message, smoothed: one slow tick (a reload, a checkpoint) must not starve the next ones.
            cost = spent / taken
            self._cost = cost if self._cost is None else 0.7 * self._cost + 0.3 * cost
        most = settings.tick_max_messages
        fit = most if self._cost is None else int(settings.tick_budget_ms / 1000 / max(self._cost, 1e-7))
        self.allowance = max(1, min(most, fit))
        self.backlog = queued if taken >= self.allowance or queued > self.allowance else 0
