"""The report of the recording benchmark (``bench/recording.py``): the turn, load and size
sections, their targets and what the figures mean."""

from __future__ import annotations

import os

from . import _peers, _turn_profile
from ._common import ms, us
from ._recording_plan import (
    AGENT,
    COLD,
    LANGGRAPH,
    LIKE_FOR_LIKE,
    MODES,
    OURS,
    RAW,
    RAW_LOAD,
    RAW_MESSAGES,
    RECORDER,
    TARGET_AGENT,
    TARGET_FLAT,
    TARGET_LOAD,
    TARGET_RECORDER,
    WARM,
    Measured,
    System,
    key,
)
from ._report import Row, Section
from ._turns import STEPS_PER_TURN


def report(measured: Measured, *, quick: bool = False) -> list[Section]:
    view = View(measured)
    return [turn_section(view, quick=quick), load_section(view), size_section(view)]


def _x(value: float) -> str:
    return f"{value:.2f}x"


def _per_turn(seconds: float) -> str:
    return f"{ms(seconds)} a turn, {us(seconds / STEPS_PER_TURN)} a step"


class View:
    """Medians and ratios of one measurement, by system and history length."""

    def __init__(self, measured: Measured) -> None:
        self.m = measured
        self.plan = measured.plan
        self.histories = measured.plan.histories
        self.small, self.large = self.histories[0], self.histories[-1]

    def system(self, label: str, mode: str) -> System:
        return next(s for s in self.m.systems if s.label == label and s.mode == mode)

    def ours(self, mode: str) -> tuple[System, System, System, System]:
        agent, recorder, raw, floor = (self.system(label, mode) for label in OURS)
        return agent, recorder, raw, floor

    def peers(self) -> list[System]:
        return [s for s in self.m.systems if s.is_peer]

    def turn(self, system: System, turns: int) -> float:
        return self.m.samples.median(key(system, turns))

    def ratio(self, top: System, bottom: System, turns: int) -> float:
        return self.turn(top, turns) / self.turn(bottom, turns)

    def flat(self, system: System) -> float:
        return self.turn(system, self.large) / self.turn(system, self.small)

    def against(self, peer: System) -> System:
        """The agentledger system held against ``peer``: its like, at the peer's
        ``synchronous`` (or at this run's first mode, when that one was not measured)."""
        mode = peer.mode if peer.mode in self.plan.modes else self.plan.modes[0]
        return self.system(LIKE_FOR_LIKE[peer.label], mode)


def turn_section(view: View, *, quick: bool = False) -> Section:
    rows: list[Row] = []
    for turns in view.histories:
        rows += _rows_at(view, turns, headline=turns == view.large)
    rows += _flatness_rows(view)
    notes = turn_targets(view)
    if quick:
        notes.append(
            f"Quick mode: {view.large} turns of history at most (run without --quick for 1000)."
        )
    notes += _turn_facts(view)
    return Section(
        title="6. Recording a turn: agentledger against raw sqlite3 and its peers",
        about=(
            "One turn (a user message, 3 tool-calling steps of one `lookup` call with a ~1 KB "
            "result, an answer; scripted, no real model) recorded on a conversation already "
            f"holding {', '.join(map(str, view.histories))} turns, in a SQLite file (WAL). "
            f"Per step = the turn's time / {STEPS_PER_TURN} (its model calls: 3 tool-calling "
            "steps and the answer). Each system at each history length runs in a process of "
            "its own; one turn each in turn, the order rotating, "
            f"{view.plan.reps} repetitions, medians (the histories grow by that many turns "
            "while measured). `Agent.run`: the whole loop on a ledger. Recorder alone: "
            "`load_conversation`, `begin_run`, `record_step` x4, `commit_run`, replaying the "
            "states of an in-memory run of the same agent made before the clock starts. Raw: "
            "`bench/_raw.py`, the same rows in the same 6 transactions, loading nothing "
            "(checked: equal row counts and JSON lengths per table, before and after the timed "
            "turns). Raw messages: `bench/_raw_messages.py`, the floor of any agent store, the "
            "turn's logical messages alone: 8 messages and 4 usage rows (one per model call) "
            "in 5 transactions, in two plain tables, loading nothing (checked: 8 and 4 a turn). "
            "The peers: see the notes."
        ),
        rows=rows,
        notes=notes,
    )


def _rows_at(view: View, turns: int, *, headline: bool) -> list[Row]:
    rows: list[Row] = []
    for mode in view.plan.modes:
        agent, recorder, raw, floor = view.ours(mode)
        rows += [
            Row(f"@ {turns}: {s.name}", _per_turn(view.turn(s, turns)))
            for s in (agent, recorder, raw, floor)
        ]
        rows += [
            Row(
                f"@ {turns}, {mode}: recorder alone / raw (target ≤ {TARGET_RECORDER}x)",
                "",
                _x(view.ratio(recorder, raw, turns)),
                headline=headline and mode == MODES[0],
            ),
            Row(f"@ {turns}, {mode}: Agent.run / raw", "", _x(view.ratio(agent, raw, turns))),
            Row(
                f"@ {turns}, {mode}: Agent.run / raw messages (target ≤ {TARGET_AGENT:.0f}x)",
                "",
                _x(view.ratio(agent, floor, turns)),
                headline=headline,
            ),
        ]
    for peer in view.peers():
        ours = view.against(peer)
        rows += [
            Row(f"@ {turns}: {peer.name}", _per_turn(view.turn(peer, turns))),
            Row(
                f"@ {turns}: {peer.label} / {ours.name} (target > 1x: agentledger faster)",
                "",
                _x(view.ratio(peer, ours, turns)),
                headline=headline,
            ),
        ]
    return rows


def _flatness_rows(view: View) -> list[Row]:
    rows: list[Row] = []
    for mode in view.plan.modes:
        for system in view.ours(mode):
            ours = system.label not in (RAW, RAW_MESSAGES)
            target = f" (target ≤ {TARGET_FLAT}x)" if ours else ""
            rows.append(
                Row(
                    f"{system.name}: turn @ {view.large} / turn @ {view.small}{target}",
                    "",
                    _x(view.flat(system)),
                    headline=ours and mode == MODES[0],
                )
            )
    rows += [
        Row(f"{peer.name}: turn @ {view.large} / turn @ {view.small}", "", _x(view.flat(peer)))
        for peer in view.peers()
    ]
    return rows


def _verdict(what: str, worst: float, target: float, where: str, *, at_most: bool) -> str:
    """``Target met`` or ``missed``, with by how much, for the worst case ``worst``."""
    sign = "≤" if at_most else ">"
    met = worst <= target if at_most else worst > target
    if met:
        return f"Target met: {what} is {worst:.3g}x at worst ({where}), {sign} {target:g}x."
    by = worst / target if at_most else target / worst
    return (
        f"Target missed: {what} is {worst:.3g}x at worst ({where}), not {sign} {target:g}x "
        f"({'over' if at_most else 'short'} by a factor of {by:.2f})."
    )


WHY_RECORDING = (
    "Why the recording costs more than raw: per turn the ledger seals each of the 17 rows it "
    "writes with a CRC-32 of the row's canonical text form (computed in Python, so that a "
    "damaged file gives an error, never a different answer), maps the loop's pydantic values "
    "to rows, and runs the fence and heartbeat UPDATEs of every step (which raw leaves out; "
    "raw issuing them too is about 1.1x raw). The statements are compiled once and sent on "
    "the driver's cursor, and SQLite connections stay open between transactions: what is left "
    "is Python work per row (about a fifth of it the checksums). Reaching 1.5x would take "
    "that work out of Python (a compiled extension) or out of the recording; dropping the "
    "checksums or the fence would weaken what is recorded, so neither was done."
)
WHY_LOOP = (
    "Why Agent.run costs more than writing the messages alone: it records more than the "
    "messages (a run row, a step row per model call with its usage and timing, a tool "
    "execution per call, the buffer rows of a run in flight, the lease and heartbeat that "
    "keep two writers off one conversation, a checksum on every row), in 6 transactions, not "
    "5, and it runs the loop (the processor chain, the continuation criteria, immutable state "
    "updates, the text checks of every model response and tool result; section 1 measures it "
    "without a database). The profile below says how the time divides."
)
WHY_LOAD = (
    "Why a cold load costs more than raw: every row read is checked against its checksum and "
    "its position in the conversation, and becomes a `Message` (raw makes dicts and checks "
    "nothing). On SQLite the check is formed from the stored values as they are read (the "
    "canonical text of a row from its stored text, one CRC-32 in C), not from decoded values, "
    "and the message is built from the same values without validating it again; what remains "
    "is Python per row: the check's text (about a third of the load) and the message (about "
    "as much). A per-row CRC-32 over the raw row's text alone costs about half of raw's whole "
    "load in this interpreter, so a checked load cannot reach 1.5x without leaving Python. A "
    "handle that loaded the conversation before reads only the rows added since (warm), which is "
    "what a process serving a conversation does after its first turn."
)


def turn_targets(view: View) -> list[str]:
    """Each target, met or missed, judged on its worst history length and mode."""
    notes: list[str] = []
    for label, floor, target, why in (
        (RECORDER, RAW, TARGET_RECORDER, WHY_RECORDING),
        (AGENT, RAW_MESSAGES, TARGET_AGENT, WHY_LOOP),
    ):
        cases = [
            (view.ratio(view.system(label, mode), view.system(floor, mode), turns), mode, turns)
            for mode in view.plan.modes
            for turns in view.histories
        ]
        worst, mode, turns = max(cases)
        what = f"{label} / {floor}, per turn"
        notes.append(_verdict(what, worst, target, f"{mode}, @ {turns}", at_most=True))
        if worst > target:
            notes.append(why)
        if label == AGENT and view.m.profile:
            notes.append(_profile_note(view))
    flat = [
        (view.flat(view.system(label, mode)), label, mode)
        for mode in view.plan.modes
        for label in (AGENT, RECORDER)
    ]
    worst_flat, label, mode = max(flat)
    notes.append(
        _verdict(
            f"turn @ {view.large} / turn @ {view.small} (flatness)",
            worst_flat,
            TARGET_FLAT,
            f"{label} {mode}",
            at_most=True,
        )
    )
    for peer in view.peers():
        ours = view.against(peer)
        worst, turns = min((view.ratio(peer, ours, t), t) for t in view.histories)
        notes.append(
            _verdict(
                f"{peer.label} / {ours.name} (agentledger faster at every history length)",
                worst,
                1.0,
                f"@ {turns}",
                at_most=False,
            )
        )
    return notes


def _turn_facts(view: View) -> list[str]:
    m = view.m
    notes = [f"{peer}: skipped, {why}." for peer, why in m.skipped.items()]
    for peer in view.peers():
        notes += [_peer_note(view, peer), _other_pairing(view, peer)]
    built = ", ".join(f"{s.name} {m.build_seconds[key(s, view.large)]:.1f} s" for s in m.systems)
    notes.append(
        f"Building the histories (untimed, all at once on {os.cpu_count()} CPUs) took, at "
        f"{view.large} turns: {built}."
    )
    return notes


def _other_pairing(view: View, peer: System) -> str:
    """The peer against the other agentledger system, for the record."""
    like = LIKE_FOR_LIKE[peer.label]
    other = view.system(RECORDER if like == AGENT else AGENT, view.against(peer).mode)
    ratios = ", ".join(f"{_x(view.ratio(peer, other, t))} @ {t}" for t in view.histories)
    return f"{peer.label} / {other.name}, for the record: {ratios}."


def _peer_note(view: View, peer: System) -> str:
    m = view.m
    found = _peers.versions(peer.label)
    versions = ", ".join(f"{p} {v}" for p, v in found.items())
    level = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(
        m.peer_synchronous.get(peer.label, -1), "?"
    )
    ours = view.against(peer)
    if peer.label == LANGGRAPH:
        stored = m.stored.get(key(peer, view.large), {})
        what = (
            "a `StateGraph` of `messages` (`add_messages`), a scripted model node and the "
            "prebuilt `ToolNode` running `lookup`, `tools_condition` between them, compiled "
            "with `SqliteSaver` on a `sqlite3` connection we open (`synchronous` set on it: "
            f"{level}; the saver sets WAL); one `invoke` per turn on one `thread_id`, "
            "LangGraph's default durability (`async`: a checkpoint per super-step, each holding "
            f"the whole message list). After {view.large} turns it held "
            f"{stored.get('checkpoints', 0):,} checkpoints and {stored.get('writes', 0):,} "
            "writes"
        )
    else:
        what = (
            "`SQLiteSession` on a file, given what the SDK's `Runner` gives it for the turn: "
            "`get_items()` when the turn starts (the whole history, the next model input), "
            "then 5 `add_items` calls (the user message; each tool call with its output; the "
            "answer), 8 items a turn; no model and no `Runner`. It opens its own connections "
            f"and offers no way to set `synchronous`: it ran at SQLite's default, {level}"
        )
    return f"{peer.label} ({versions}): {what}. Held against {ours.name}."


def load_section(view: View) -> Section:
    loads = view.m.loads
    cold, warm, raw = (loads.median(kind) for kind in (COLD, WARM, RAW_LOAD))
    history = view.large + view.plan.reps
    ratio = cold / raw
    return Section(
        title="7. Loading a conversation for the next inference",
        about=(
            f"The conversation of `{AGENT} {view.plan.modes[0]}` after {history} turns "
            f"({view.m.loaded_messages:,} messages), loaded {view.plan.load_reps} times each, "
            "interleaved, each way in a process of its own. Cold: "
            "`Ledger.load_conversation(id)` on a fresh `Ledger` handle each time (opened before "
            "the clock starts; a fresh handle has no cache, as in a new process). Warm: the "
            "same handle every time, after a first load (it reads only the rows added since). "
            "Raw: on a fresh `sqlite3` connection (opened and its schema read before the clock "
            "starts), one `SELECT` of the conversation's message rows ordered by `seq`, each "
            "row made a `dict` of its columns with `tool_calls` and `metadata` decoded by "
            "`json.loads` and `created_at` parsed into a UTC `datetime`, grouped by section; "
            "no checksum or sequence check, no pydantic model."
        ),
        rows=[
            Row("agentledger: load_conversation, fresh handle (cold)", ms(cold)),
            Row("agentledger: load_conversation, same handle (warm)", ms(warm)),
            Row("raw sqlite3: SELECT + decode into dicts", ms(raw)),
            Row(f"cold / raw (target ≤ {TARGET_LOAD}x)", "", _x(ratio), headline=True),
            Row("warm / raw", "", _x(warm / raw)),
        ],
        notes=[
            _verdict("a cold load / raw", ratio, TARGET_LOAD, f"{history} turns", at_most=True),
            *([WHY_LOAD] if ratio > TARGET_LOAD else []),
            "Checked before timing: the three read the same number of messages.",
        ],
    )


def _bytes_per_turn(view: View, system: System, start: int, end: int) -> float:
    grown = view.m.sizes[key(system, end)] - view.m.sizes[key(system, start)]
    return grown / (end - start)


def size_section(view: View) -> Section:
    small, large = view.small, view.large
    mode = view.plan.modes[0]
    raw = view.system(RAW, mode)
    raw_bytes = _bytes_per_turn(view, raw, small, large)
    rows: list[Row] = []
    for system in [*view.ours(mode), *view.peers()]:
        grown = _bytes_per_turn(view, system, small, large)
        ratio = _x(grown / raw_bytes) if raw_bytes > 0 else "n/a"
        rows.append(
            Row(
                f"{system.name}: bytes per turn, {small} → {large} turns (/ raw)",
                f"{grown:,.0f} B",
                ratio,
                headline=system.label in (AGENT, LANGGRAPH),
            )
        )
    for peer in view.peers():
        for start, end in zip(view.histories, view.histories[1:], strict=False):
            if (start, end) != (small, large):
                rows.append(
                    Row(
                        f"{peer.name}: bytes per turn, {start} → {end} turns",
                        f"{_bytes_per_turn(view, peer, start, end):,.0f} B",
                    )
                )
    for system in [*view.ours(mode), *view.peers()]:
        size = view.m.sizes[key(system, large)]
        rows.append(Row(f"{system.name}: file @ {large} turns", f"{size / 1e6:,.2f} MB"))
    return Section(
        title="8. Database size per turn, every system",
        about=(
            "Each file's size after `PRAGMA wal_checkpoint(TRUNCATE)`, once its history was "
            f"built (before the timed turns); per turn = (size @ {large} − size @ {small}) / "
            f"{large - small}, so fixed pages do not count. agentledger and raw at {mode} "
            "(the setting does not change what is stored)."
        ),
        rows=rows,
        notes=[
            "agentledger's rows carry a `checksum` column (CRC-32 of the row) that the raw "
            "writer leaves NULL.",
            *_growth_notes(view),
        ],
    )


def _growth_notes(view: View) -> list[str]:
    if not any(p.label == LANGGRAPH for p in view.peers()):
        return []
    return [
        "LangGraph's bytes per turn grow with the history: each of a turn's nine checkpoints "
        "(one per super-step) stores the thread's whole message list, so its file grows with "
        "the square of the turns."
    ]


def _profile_note(view: View) -> str:
    shares = sorted(view.m.profile.items(), key=lambda item: -item[1])
    parts = "; ".join(f"{area} {share:.0%}" for area, share in shares)
    return (
        f"A profile of {_turn_profile.TURNS} `Agent.run` turns ({view.plan.modes[0]}, on a "
        f"{_turn_profile.HISTORY}-turn history; `bench/_turn_profile.py`), self time by area "
        f"(cProfile adds to every Python call, so read the shares): {parts}."
    )
