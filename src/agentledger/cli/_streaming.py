"""A run printed as it streams, for ``agentledger chat`` and the demo alike: its text as it
comes, each tool call as it starts and ends, each subagent's run indented by its depth.

Text goes out as plain writes to the console's file, flushed, with no cursor movement, so the
output reads the same on a terminal, in a pipe and in a log file. Stopping a stream on Ctrl-C
is here too (:func:`stop`): the chat and the demo have one way of showing a run.

Nothing here prints through rich's own buffer: Ctrl-C during its flush leaves the text in the
buffer, and rich's next print writes it a second time. Lines are rendered by rich (styled on
a terminal) and written by :func:`write`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from rich.console import Console

from .._values import (
    Event,
    RunFinished,
    RunStarted,
    TextDelta,
    ToolCall,
    ToolCallFinished,
    ToolCallStarted,
    terminal_text,
)
from ..errors import UsageError
from ._render import error_text, preview

if TYPE_CHECKING:
    from .._loop import RunStream
    from .._recording import RunResult

LINE = 100
"""How much of a tool call or a tool result is printed at most: one line, shorter when the
console is narrower."""
LEAD = len("  → ")
"""What comes before a tool call or a tool result on its line."""
INDENT = "  "
"""What a subagent's run is indented by, per level of depth."""
STOPPING_NOTICE_AFTER = 0.5
"""Seconds a stop may take before the user is told it is under way (a long sync tool)."""


def say(console: Console, text: str, style: str | None = None) -> None:
    """One line of plain text: no markup read in it (tool output may hold brackets), styled
    only on a terminal (rich drops styles elsewhere), never hard-wrapped; its control
    characters are written as escapes (model and tool output may hold terminal sequences)."""
    with console.capture() as line:
        console.print(
            terminal_text(text), style=style, markup=False, highlight=False, soft_wrap=True
        )
    write(console, line.get())


def write(console: Console, text: str) -> None:
    """``text`` on the console's file, flushed: once, even when Ctrl-C comes as it goes out
    (what is left in the file's buffer goes out with the next flush)."""
    console.file.write(text)
    console.file.flush()


def call_line(call: ToolCall, limit: int | None = LINE) -> str:
    """``  → name(arguments)`` on one line, cut to ``limit`` characters after the arrow
    (``None``: whole)."""
    return f"  → {_cut(call_text(call), limit)}"


def call_text(call: ToolCall) -> str:
    """``name(arguments)``, each argument as ``name=JSON`` (the model's own text when its
    arguments were not JSON)."""
    if call.raw_arguments is not None:
        arguments = call.raw_arguments
    else:
        arguments = ", ".join(
            f"{name}={json.dumps(value, ensure_ascii=False)}"
            for name, value in call.arguments.items()
        )
    return f"{call.name}({arguments})"


def result_line(result: str, *, is_error: bool, limit: int | None = LINE) -> str:
    """``  ← result`` on one line, marked when the tool failed, cut to ``limit`` characters
    after the arrow (``None``: whole)."""
    shown = f"error: {error_text(result)}" if is_error else result
    return f"  ← {_cut(shown, limit)}"


def _cut(text: str, limit: int | None) -> str:
    return text if limit is None else preview(text, limit)


class StreamPrinter:
    """Prints the events of one stream (a run and its subagents' runs) as they arrive.

    It remembers the text it printed of each run's latest step, so that after a stop the
    answer the ledger kept can be checked against what the user saw (:meth:`catch_up`)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._depths: dict[str, int] = {}
        self._open: tuple[str, int] | None = None  # the (run, step) whose text ends the output
        self._printed: dict[str, tuple[int, list[str]]] = {}

    def show(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self._text(event.run_id, event.step_index, event.text)
        elif isinstance(event, ToolCallStarted):
            self._line(event.run_id, call_line(event.call, self._room(event.run_id)), "dim")
        elif isinstance(event, ToolCallFinished):
            limit = self._room(event.run_id)
            line = result_line(event.result, is_error=event.is_error, limit=limit)
            self._line(event.run_id, line, "red" if event.is_error else "dim")
        elif isinstance(event, RunStarted):
            self._started(event)
        elif isinstance(event, RunFinished):
            self.end_line()

    def print_run(self, stream: RunStream) -> RunResult:
        """Print ``stream``'s events as they come; its run's result, once it is exhausted."""
        for event in stream:
            self.show(event)
        self.catch_up(stream.result)
        return stream.result

    def printed(self, run_id: str) -> str:
        """The text printed of run ``run_id``'s latest step."""
        return "".join(self._printed.get(run_id, (0, []))[1])

    def catch_up(self, result: RunResult) -> None:
        """Print what ``result``'s answer holds beyond what was printed of it: the rest of a
        delta handed over as Ctrl-C came, or a whole answer that was not streamed. The answer
        is then on screen exactly as the ledger keeps it."""
        if result.answer is None:
            self.end_line()
            return
        answer, printed = result.answer, self.printed(result.run_id)
        if answer.startswith(printed):
            step = self._printed.get(result.run_id, (0, []))[0]
            self._text(result.run_id, step, answer[len(printed) :])
        else:
            self.end_line()
            self._text(result.run_id, -1, answer)
        self.end_line()

    def end_line(self) -> None:
        """End the line the text is on, if any (before a line of another kind)."""
        if self._open is not None:
            self._open = None
            write(self.console, "\n")

    def _started(self, event: RunStarted) -> None:
        self._depths[event.run_id] = event.depth
        if event.depth:  # under the call that spawned it, at its parent's depth
            self._line(event.parent_run_id, f"  ↳ {event.agent_name}", "dim")

    def _line(self, run_id: str | None, text: str, style: str) -> None:
        self.end_line()
        say(self.console, self._indent(run_id) + text, style)

    def _indent(self, run_id: str | None) -> str:
        return INDENT * self._depths.get(run_id or "", 0)

    def _room(self, run_id: str) -> int:
        """How much of a tool call or result fits on a line of the console after its arrow
        (a narrow console cuts the line sooner, down to a few words)."""
        return max(20, min(LINE, self.console.width - len(self._indent(run_id)) - LEAD))

    def _text(self, run_id: str, step_index: int, text: str) -> None:
        if not text:
            return
        printed = self._printed.get(run_id)
        if printed is None or printed[0] != step_index:
            printed = self._printed[run_id] = (step_index, [])
        indent = self._indent(run_id)
        out = text.replace("\n", "\n" + indent) if indent else text
        if self._open != (run_id, step_index):
            self.end_line()
            self._open = (run_id, step_index)
            out = indent + out
        try:
            write(self.console, terminal_text(out))
        finally:  # handed to the terminal, even when Ctrl-C came as it went out
            printed[1].append(text)


def stop(stream: RunStream, console: Console) -> RunResult | None:
    """Stop ``stream``'s run (Ctrl-C came while it streamed) and wait until it is recorded:
    ``stopping...`` is said once if that takes a while (a sync tool holds the run until it
    returns). The run's result; None if it ended before it began. A second Ctrl-C while the
    stop is recorded raises ``KeyboardInterrupt``."""
    if not stream.close(timeout=STOPPING_NOTICE_AFTER):
        say(console, "stopping...", "dim")
        stream.close()
    for _ in stream:  # what the run told after the user stopped looking: not shown
        pass
    try:
        return stream.result
    except UsageError:  # the run was stopped before it began: no result to show
        return None
