"""What a run has shown its caller, kept so that a cancel loses none of it.

The consumer of a run's stream notes each text delta as it hands it over (:meth:`Shown.took`):
that text, and no more, is what the user was shown of the step in flight. While the step
streams, it is made durable at a bounded interval (:class:`PartialFlush`) as the run's partial
output, in a worker thread, never on the consumer's thread or event loop. When the run ends
early, :meth:`RunWatch.interrupted` gives the text to commit, with the step in flight as far as
it came (its model's answer, its tool calls that started and returned), to be recorded with it.

Recording a step *seals* it: a flush of that step still in flight is waited for, and none
starts after, so the partial output a step's record clears is never written back.
"""

from __future__ import annotations

import contextvars
import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

from .._logs import library_logger
from .._recording import Recorder, RunResult, interrupted_step
from .._values import AgentStep, Clock, Event, StepExecution, TextDelta, ToolExecution
from ..errors import ConfigurationError
from ._runtime import EventSink, listener, submit

logger = library_logger(__name__)


@dataclass(frozen=True)
class PartialFlush:
    """How often what a streaming step has shown is made durable: every ``seconds`` or every
    ``characters`` shown, whichever comes first (``AgentBuilder.with_partial_flush``)."""

    seconds: float = 0.5
    characters: int = 2000

    def __post_init__(self) -> None:
        if self.seconds <= 0 or self.characters < 1:
            raise ConfigurationError(
                "a partial-output flush needs seconds > 0 and characters >= 1, got "
                f"seconds={self.seconds}, characters={self.characters}"
            )


@dataclass(frozen=True)
class Interruption:
    """What a run that ends early keeps: the text shown of its step in flight, and that step
    as far as it came (None when it came to nothing anyone saw)."""

    text: str = ""
    step: StepExecution | None = None


@dataclass
class _StepInFlight:
    """What the step being taken has come to: when it began, the step as its model answered
    it (before its tools ran), and its tool calls that started and returned, by call id."""

    index: int
    began: datetime | None = None
    answered: AgentStep | None = None
    started: dict[str, datetime] = field(default_factory=dict)
    returned: dict[str, ToolExecution] = field(default_factory=dict)


class RunWatch:
    """One run's shown text and step in flight, and the flushes of its partial output."""

    def __init__(self, run_id: str, recorder: Recorder, policy: PartialFlush, clock: Clock) -> None:
        self.run_id = run_id
        self.result: RunResult | None = None
        """The run's result once it has ended (committed, failed or interrupted), whether or
        not its caller was still there to be told."""
        self._recorder = recorder
        self._policy = policy
        self._clock = clock
        self._state = threading.Lock()  # held briefly, by the consumer too
        self._writing = threading.Lock()  # held across a flush's write, and by a seal
        self._sealed = -1  # steps up to this index are recorded (or the run has ended)
        self._step = -1
        self._pieces: list[str] = []  # shown: handed to the consumer
        self._told: list[str] = []  # told: sent to the consumer, who will be shown it
        self._told_step = -1
        self._unflushed = 0
        self._flushed_at = 0.0
        self._flush_at: float | None = None  # when the next flush is scheduled
        self._flight: _StepInFlight | None = None
        self._late: set[str] = set()  # the calls still running when the run was interrupted
        self._late_results: dict[str, ToolExecution] = {}  # ... that have returned since

    def shown(self, step_index: int, text: str) -> None:
        """The consumer handed over ``text`` of step ``step_index``."""
        now = time.monotonic()
        with self._state:
            if step_index <= self._sealed:
                return
            if step_index != self._step:
                self._step, self._pieces, self._unflushed = step_index, [], 0
                self._flushed_at = now
            self._pieces.append(text)
            self._unflushed += len(text)
            if self._unflushed >= self._policy.characters:
                at = now
            else:
                at = self._flushed_at + self._policy.seconds
            if self._flush_at is not None and self._flush_at <= at:
                return  # a flush soon enough is already scheduled
            self._flush_at = at
        _TIMER.at(at, self._flush)

    def told(self, step_index: int, text: str) -> None:
        """The run sent ``text`` of step ``step_index`` to its consumer."""
        with self._state:
            if step_index != self._told_step:
                self._told_step, self._told = step_index, []
            self._told.append(text)

    def step_began(self, step_index: int, at: datetime) -> None:
        """Step ``step_index`` began ``at``."""
        with self._state:
            if step_index > self._sealed:
                self._flight = _StepInFlight(step_index, began=at)

    def tool_step(self, step_index: int, answered: AgentStep) -> None:
        """Step ``step_index``'s model answered with tool calls (``answered``, before its tools
        run); none of them is answered until the step is recorded."""
        with self._state:
            if step_index <= self._sealed:
                return
            began = (
                self._flight.began if self._flight and self._flight.index == step_index else None
            )
            self._flight = _StepInFlight(step_index, began=began, answered=answered)

    def tool_started(self, call_id: str, at: datetime) -> None:
        """Call ``call_id`` of the step in flight started ``at``."""
        with self._state:
            if self._flight is not None:
                self._flight.started[call_id] = at

    def tool_result(self, execution: ToolExecution) -> None:
        """A call returned (``execution``): kept for an interrupt, or, when the run was
        interrupted while it ran (a sync tool, in its thread), recorded as a late result."""
        call_id = execution.tool_call.id
        with self._state:
            if call_id in self._late:
                self._late.discard(call_id)
                self._late_results[call_id] = execution
            elif self._flight is not None:
                self._flight.returned[call_id] = execution
        self._record_late()

    def ended(self, result: RunResult) -> None:
        """The run ended with ``result``."""
        with self._state:
            self.result = result
        self._record_late()

    @property
    def awaits_late_results(self) -> bool:
        with self._state:
            return bool(self._late or self._late_results)

    def _record_late(self) -> None:
        with self._state:
            if self.result is None or not self._late_results:
                return
            late, self._late_results = self._late_results, {}

        def record() -> None:
            for call_id, execution in late.items():
                try:
                    self._recorder.record_late_tool_result(self.run_id, execution)
                except Exception as exc:  # nothing acts on it: losing it loses no decision
                    logger.warning(
                        "run %s: could not record the late result of %s (%s)",
                        self.run_id,
                        call_id,
                        exc,
                    )

        submit(record)

    def _flush(self) -> None:
        with self._writing:
            with self._state:
                self._flush_at = None
                if self._step <= self._sealed or not self._unflushed:
                    return
                step, text = self._step, "".join(self._pieces)
                self._unflushed, self._flushed_at = 0, time.monotonic()
            try:
                self._recorder.record_partial_output(self.run_id, step, text)
            except Exception as exc:  # the next flush, or the end of the run, writes it
                logger.warning("run %s: could not flush its partial output (%s)", self.run_id, exc)

    def seal(self, step_index: int) -> str:
        """Step ``step_index`` is about to be recorded: no flush of it runs from now on. The
        text it told the consumer (who goes on reading it: it will all be shown)."""
        with self._writing, self._state:
            self._sealed = max(self._sealed, step_index)
            text = "".join(self._told) if self._told_step == step_index else ""
            if self._step <= step_index:
                self._pieces, self._unflushed = [], 0
            if self._flight is not None and self._flight.index <= step_index:
                self._flight = None
            return text

    def sealed(self, step_index: int, record: Callable[[], object]) -> str:
        """:meth:`seal` step ``step_index``, then ``record()`` it; the text it told. Sealed in
        the same call as the record, so a record that never runs (its run cancelled first)
        seals nothing."""
        told = self.seal(step_index)
        record()
        return told

    def interrupted(self, error: str | None = None) -> Interruption:
        """The run ends early, cancelled (or failing with ``error`` after text was shown):
        what to keep of its step in flight. No flush runs after; the calls still running are
        recorded when they return, as late results."""
        with self._writing, self._state:
            shown = "".join(self._pieces) if self._step > self._sealed else ""
            flight = self._flight if self._flight and self._flight.index > self._sealed else None
            self._sealed = 1 << 62
            if flight is None:
                flight = _StepInFlight(self._step)  # a step that streamed, unannounced
            self._late = set(flight.started) - set(flight.returned)
            step = interrupted_step(
                flight.index,
                answered=flight.answered,
                shown=shown if self._step == flight.index else "",
                began=flight.began,
                started=flight.started,
                returned=flight.returned,
                at=self._clock(),
                error=error,
            )
            return Interruption(shown, step)


class Shown:
    """The runs a stream (or a run without one) watches, by run id: its own and its
    subagents'."""

    def __init__(self) -> None:
        self._runs: dict[str, RunWatch] = {}
        self.first: RunWatch | None = None
        """The first run started under it: the one the stream was opened for."""

    def took(self, event: Event) -> None:
        """The consumer is handed ``event``."""
        if isinstance(event, TextDelta):
            watch = self._runs.get(event.run_id)
            if watch is not None:
                watch.shown(event.step_index, event.text)

    def get(self, run_id: str | None) -> RunWatch | None:
        return self._runs.get(run_id or "")

    def add(self, watch: RunWatch) -> None:
        self._runs[watch.run_id] = watch
        if self.first is None:
            self.first = watch

    def discard(self, watch: RunWatch) -> None:
        if self._runs.get(watch.run_id) is watch:
            del self._runs[watch.run_id]


_SHOWN: contextvars.ContextVar[Shown | None] = contextvars.ContextVar(
    "agentledger_shown", default=None
)


@contextmanager
def showing(shown: Shown) -> Iterator[None]:
    """Watch the runs started inside in ``shown``."""
    token = _SHOWN.set(shown)
    try:
        yield
    finally:
        _SHOWN.reset(token)


@contextmanager
def watching(
    run_id: str, recorder: Recorder, policy: PartialFlush, clock: Clock
) -> Iterator[RunWatch]:
    """Watch run ``run_id`` while it is driven (in the stream's :class:`Shown`, if any)."""
    shown = _SHOWN.get() or Shown()
    watch = RunWatch(run_id, recorder, policy, clock)
    shown.add(watch)
    token = _SHOWN.set(shown)
    try:
        yield watch
    finally:
        _SHOWN.reset(token)
        if not watch.awaits_late_results:  # else the tools' threads still find it
            shown.discard(watch)


def _watch_of(run_id: str | None) -> RunWatch | None:
    shown = _SHOWN.get()
    return shown.get(run_id) if shown is not None else None


def note_step_began(run_id: str | None, step_index: int, at: datetime) -> None:
    """Step ``step_index`` of run ``run_id`` began ``at``."""
    watch = _watch_of(run_id)
    if watch is not None:
        watch.step_began(step_index, at)


def note_tool_step(run_id: str | None, step_index: int, answered: AgentStep) -> None:
    """Step ``step_index`` of run ``run_id`` is ``answered``: its model's response, whose tool
    calls are about to run (what an interrupt records, answering each)."""
    watch = _watch_of(run_id)
    if watch is not None and answered.has_tool_calls():
        watch.tool_step(step_index, answered)


def step_events(run_id: str | None) -> EventSink | None:
    """Where the events of a step of run ``run_id`` go: the listener of the run (None when
    nobody listens), each text delta of the run noted first as told to the consumer of its
    stream (what a cancel keeps, once it is shown)."""
    sink = listener()
    watch = _watch_of(run_id)
    if sink is None or watch is None:
        return sink

    def told_then_sent(event: Event) -> None:
        if isinstance(event, TextDelta) and event.run_id == run_id:
            watch.told(event.step_index, event.text)
        sink(event)

    return told_then_sent


def note_tool_started(run_id: str | None, call_id: str, at: datetime) -> None:
    """Call ``call_id`` of run ``run_id`` started ``at``."""
    watch = _watch_of(run_id)
    if watch is not None:
        watch.tool_started(call_id, at)


def note_tool_result(run_id: str | None, execution: ToolExecution) -> None:
    """A call of run ``run_id`` returned (``execution``): kept if the run is interrupted before
    its step is recorded."""
    watch = _watch_of(run_id)
    if watch is not None:
        watch.tool_result(execution)


class _Timer:
    """One thread that starts what is due (the flushes of every streaming run) in the worker
    pool: no thread sleeps per run, and nothing waits on a consumer's event loop."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def at(self, when: float, work: Callable[[], None]) -> None:
        with self._wake:
            heapq.heappush(self._due, (when, next(self._order), work))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="agentledger-flush", daemon=True
                )
                self._thread.start()
            self._wake.notify()

    def _serve(self) -> None:
        while True:
            with self._wake:
                while not self._due or self._due[0][0] > time.monotonic():
                    wait = self._due[0][0] - time.monotonic() if self._due else None
                    self._wake.wait(wait)
                work = heapq.heappop(self._due)[2]
            try:
                submit(work)
            except RuntimeError:  # the interpreter is shutting down: nothing more runs
                return


_TIMER = _Timer()
