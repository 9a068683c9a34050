"""Recording one turn of an agent: agentledger against plain ``sqlite3`` and against its peers.

A turn is a user message, three tool-calling steps each making one ``lookup`` call with a
~1 KB result, and a final answer, from a scripted model: recording only, no real model. A step
is one of its four inferences, so the cost per step is the turn's / 4. Every system records
that turn in a SQLite file:

- ``agentledger Agent.run``: the whole loop, a ``ScriptedLLM`` and ``lookup``, on
  ``Ledger.open(path, synchronous=...)``;
- ``agentledger recorder alone``: the same rows through the Recorder API only:
  ``load_conversation``, ``begin_run``, ``record_step`` x4, ``commit_run``, with the states of
  an in-memory run of the same agent prepared before the clock starts (``bench/_turns.py``);
- ``raw sqlite3``: :class:`bench._raw.RawLedger`, the same rows in the same six transactions;
- LangGraph's ``SqliteSaver`` and the OpenAI Agents SDK's ``SQLiteSession``, when installed
  (``bench/_peers.py`` says what each does).

agentledger and raw run with ``synchronous=NORMAL`` and ``FULL``; LangGraph with ``NORMAL``
(its connection is ours to set); the SDK's session at SQLite's default (it opens its own
connections), which is ``FULL``.

Each system, at each history length, lives in a worker process of its own
(``bench/_workers.py``) that opens its database once and builds the conversation's history
(untimed, all workers in parallel); then the parent asks each worker for one timed turn in
turn, the order rotating, several repetitions, and takes medians. Then loading the
conversation back for the next inference, at the longest history, and the file size per turn.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from . import _peers, _turn_profile
from . import _raw_messages as raw_messages
from ._common import Sizes
from ._raw import check_same_rows, row_profile
from ._recording_plan import (
    AGENT,
    COLD,
    PLANS,
    RAW,
    RAW_LOAD,
    RAW_MESSAGES,
    RECORDER,
    WARM,
    Measured,
    Plan,
    System,
    key,
    systems,
)
from ._recording_report import report
from ._report import Section
from ._turns import MESSAGES_PER_TURN, Loads
from ._workers import Worker, gather, interleaved_calls


def measure(plan: Plan, tmp: Path) -> Measured:
    chosen, skipped = systems(plan, tmp)
    with ExitStack() as stack:
        print(f"  starting {len(chosen) * len(plan.histories)} workers ...", file=sys.stderr)
        workers, paths = _start(chosen, plan, tmp, stack)
        build_seconds = _build(workers, plan, skipped)
        for name in [k for k, (system, _) in workers.items() if system.label in skipped]:
            workers.pop(name)[1].close()
        chosen = [s for s in chosen if s.label not in skipped]
        _check_rows(plan, paths, extra=0)
        peers = {k: w for k, (system, w) in workers.items() if system.is_peer}
        stored = {k: w.call("stored") for k, w in peers.items()}
        _check_peers(stored)
        synchronous = {workers[k][0].label: int(w.call("synchronous")) for k, w in peers.items()}
        handles = {k: w for k, (_, w) in workers.items()}
        sizes = {k: int(w.call("size")) for k, w in handles.items()}
        print(f"  {plan.reps} timed turns on each ...", file=sys.stderr, flush=True)
        samples = interleaved_calls(handles, "turn", plan.reps)
        _check_rows(plan, paths, extra=plan.reps)
        measured = Measured(
            plan, chosen, samples, paths, sizes, build_seconds, stored, skipped, synchronous
        )
        loaded = key(System(AGENT, plan.modes[0]), plan.histories[-1])
        conversation_id = handles[loaded].call("conversation_id")
        _measure_loads(measured, paths[loaded], conversation_id, stack)
        measured.profile = _profile_turns(tmp, plan.modes[0], stack)
    return measured


def _profile_turns(tmp: Path, mode: str, stack: ExitStack) -> dict[str, float]:
    """Where an ``Agent.run`` turn's time goes (``bench/_turn_profile.py``), in a worker."""
    print(f"  profiling {_turn_profile.TURNS} turns of Agent.run ...", file=sys.stderr)
    path = tmp / f"recording-profile-{mode.lower()}.db"
    worker = Worker("profile", _turn_profile.TurnProfile, path=str(path), synchronous=mode)
    stack.callback(worker.close)
    return {str(k): float(v) for k, v in worker.call("shares").items()}


Workers = dict[str, tuple[System, Worker]]


def _start(
    chosen: list[System], plan: Plan, tmp: Path, stack: ExitStack
) -> tuple[Workers, dict[str, Path]]:
    workers: Workers = {}
    paths: dict[str, Path] = {}
    # The longest histories first: they take longest to build (LangGraph's most of all).
    for turns in sorted(plan.histories, reverse=True):
        for system in chosen:
            name = key(system, turns)
            slug = "-".join(system.name.lower().replace(".", " ").split())
            paths[name] = tmp / f"recording-{slug}-{turns}.db"
            worker = system.worker(paths[name])
            stack.callback(worker.close)
            workers[name] = (system, worker)
    return workers, paths


def _turns_of(name: str) -> int:
    return int(name.rsplit(" @ ", 1)[1])


def _build(workers: Workers, plan: Plan, skipped: dict[str, str]) -> dict[str, float]:
    """Every history built at once (untimed); a peer that fails is skipped, with why."""
    print(
        f"  building the histories in parallel (LangGraph's at {plan.histories[-1]} turns "
        "takes longest: every checkpoint holds the whole thread) ...",
        file=sys.stderr,
        flush=True,
    )
    for name, (_, worker) in workers.items():
        worker.send("grow", _turns_of(name))
    started = time.perf_counter()

    def arrived(name: str, seconds: float) -> None:
        print(
            f"    {name} turns built in {seconds:.1f} s "
            f"({time.perf_counter() - started:.0f} s since the start)",
            file=sys.stderr,
            flush=True,
        )

    failed: dict[str, str] = {}
    built = gather({k: w for k, (_, w) in workers.items()}, arrived, failed=failed)
    # The histories' dirty pages (gigabytes of LangGraph checkpoints) go to disk now, not
    # during the timed turns.
    os.sync()
    for name, error in failed.items():
        system = workers[name][0]
        if not system.is_peer:
            raise AssertionError(f"building {name} failed: {error}")
        last = error.strip().splitlines()[-1]
        skipped[system.label] = f"failed while building its history: {last}"
    return {k: float(v) for k, v in built.items()}


def _check_rows(plan: Plan, paths: dict[str, Path], *, extra: int) -> None:
    """agentledger's two systems and raw wrote the same rows (row counts and JSON lengths per
    table), the conversation holds two messages a turn, and the raw messages writer eight
    messages and four usage rows a turn."""
    for mode in plan.modes:
        for turns in plan.histories:
            raw = paths[key(System(RAW, mode), turns)]
            for label in (AGENT, RECORDER):
                check_same_rows(paths[key(System(label, mode), turns)], raw)
            messages = row_profile(raw)["conversation_messages"][0]
            if messages != MESSAGES_PER_TURN * (turns + extra):
                raise AssertionError(
                    f"{raw.name}: {messages} conversation messages after {turns + extra} turns"
                )
            floor = paths[key(System(RAW_MESSAGES, mode), turns)]
            held = raw_messages.counts(floor)
            wanted = (
                raw_messages.MESSAGES_PER_TURN * (turns + extra),
                raw_messages.USAGE_PER_TURN * (turns + extra),
            )
            if held != wanted:
                raise AssertionError(
                    f"{floor.name}: {held} messages and usage rows after {turns + extra} turns, "
                    f"not {wanted}"
                )


def _check_peers(stored: dict[str, dict[str, int]]) -> None:
    """Each peer holds every message of every turn."""
    for name, counts in stored.items():
        turns = _turns_of(name)
        held = counts.get("messages", counts.get("items"))
        if held != _peers.ITEMS_PER_TURN * turns:
            raise AssertionError(
                f"{name}: {held} messages after {turns} turns, not "
                f"{_peers.ITEMS_PER_TURN * turns} (it holds {counts})"
            )


def _measure_loads(measured: Measured, path: Path, conversation_id: str, stack: ExitStack) -> None:
    plan = measured.plan
    print(f"  loading the conversation, {plan.load_reps} times each ...", file=sys.stderr)
    loaders = {
        kind: Worker(
            f"load {kind}", Loads, path=str(path), conversation_id=conversation_id, kind=kind
        )
        for kind in (COLD, WARM, RAW_LOAD)
    }
    for loader in loaders.values():
        stack.callback(loader.close)
    counts = {kind: int(loader.call("count")) for kind, loader in loaders.items()}
    expected = MESSAGES_PER_TURN * (plan.histories[-1] + plan.reps)
    if set(counts.values()) != {expected}:
        raise AssertionError(f"the loads read {counts} messages, not {expected} each")
    measured.loads = interleaved_calls(loaders, "load", plan.load_reps)
    measured.loaded_messages = expected


def run(sizes: Sizes, tmp: Path) -> list[Section]:
    plan = PLANS[sizes.name]
    print(
        f"recording a turn at {', '.join(map(str, plan.histories))} turns of history ...",
        file=sys.stderr,
        flush=True,
    )
    return report(measure(plan, tmp), quick=sizes.name == "quick")
