"""A deterministic clock for tests (the ``clock`` and ``make_clock`` fixtures build on it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


class FakeClock:
    """A clock for ``AgentBuilder.with_clock``: every reading is ``tick`` later than the last."""

    def __init__(self, start: datetime = START, tick: timedelta = timedelta(seconds=1)) -> None:
        self.start = start
        self.tick = tick
        self.now = start
        self.readings = 0

    def __call__(self) -> datetime:
        reading = self.now
        self.now += self.tick
        self.readings += 1
        return reading
