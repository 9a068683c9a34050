"""Fixtures shared by the suite: a deterministic clock and a couple of ready-made tools."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agentledger import FunctionTool, tool

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


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"22C and sunny in {city}"


@tool
def add(a: int, b: int = 0) -> int:
    """Add two integers."""
    return a + b


@pytest.fixture
def weather_tool() -> FunctionTool:
    return get_weather


@pytest.fixture
def add_tool() -> FunctionTool:
    return add


@pytest.fixture
def make_clock() -> type[FakeClock]:
    """For tests that need more than one fresh clock."""
    return FakeClock
