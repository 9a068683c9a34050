"""Text the ledger can store: valid Unicode without NUL, the same rule on every backend.

PostgreSQL refuses a NUL character (``\\x00``) in text and JSON; no backend can encode a lone
surrogate (U+D800..U+DFFF, which a Python ``str`` can hold) as UTF-8. Refusing both everywhere,
before anything is written, keeps a ledger movable between SQLite and PostgreSQL and keeps raw
driver errors from surfacing halfway through a run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel

from ..errors import UnstorableTextError

STORABLE_TEXT_RULE = (
    "text must be valid Unicode without NUL characters: strip or escape them, "
    "or send binary data as base64"
)
"""What to do about unstorable text, for error messages."""

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class Unstorable:
    """Where the first unstorable character of a value is.

    ``path`` leads to the string that holds it (``tool_calls[0].arguments['box']``; empty for
    the value itself), ``in_key`` says that string is a mapping's key rather than its value.
    """

    character: str
    offset: int
    path: str = ""
    in_key: bool = False

    def __str__(self) -> str:
        where = f"the key {self.path}" if self.in_key else self.path
        return f"{_describe(self.character)} at offset {self.offset}" + (
            f" of {where}" if where else ""
        )


def _describe(character: str) -> str:
    if character == "\x00":
        return "a NUL character"
    return f"a lone surrogate (U+{ord(character):04X})"


def find_unstorable(value: object, path: str = "") -> Unstorable | None:
    """The first NUL character or lone surrogate in ``value`` (a string, or mappings, lists,
    tuples and pydantic models holding strings, keys included), or None.

    ``path`` is the name of ``value`` itself, the start of every path reported.
    """
    # Nearly every value is clean: look first without building the paths.
    return _find(value, path) if _holds_unstorable(value) else None


def _holds_unstorable(value: object) -> bool:
    if isinstance(value, str):
        return _UNSTORABLE.search(value) is not None
    if isinstance(value, Mapping):
        return any(
            (isinstance(key, str) and _UNSTORABLE.search(key) is not None)
            or _holds_unstorable(item)
            for key, item in value.items()
        )
    if isinstance(value, list | tuple):
        return any(_holds_unstorable(item) for item in value)
    if isinstance(value, BaseModel):
        return any(_holds_unstorable(getattr(value, name)) for name in type(value).model_fields)
    return False


def _find(value: object, path: str) -> Unstorable | None:
    if isinstance(value, str):
        match = _UNSTORABLE.search(value)
        return None if match is None else Unstorable(match.group(), match.start(), path)
    if isinstance(value, Mapping):
        return _in_mapping(value, path)
    if isinstance(value, list | tuple):
        return _in_sequence(value, path)
    if isinstance(value, BaseModel):
        return _in_model(value, path)
    return None


def _in_mapping(value: Mapping[object, object], path: str) -> Unstorable | None:
    for key, item in value.items():
        inner = f"{path}[{key!r}]"  # repr escapes NUL and surrogates
        if isinstance(key, str) and (match := _UNSTORABLE.search(key)) is not None:
            return Unstorable(match.group(), match.start(), inner, in_key=True)
        found = _find(item, inner)
        if found is not None:
            return found
    return None


def _in_sequence(value: list[object] | tuple[object, ...], path: str) -> Unstorable | None:
    for index, item in enumerate(value):
        found = _find(item, f"{path}[{index}]")
        if found is not None:
            return found
    return None


def _in_model(value: BaseModel, path: str) -> Unstorable | None:
    for name in type(value).model_fields:
        found = _find(getattr(value, name), f"{path}.{name}" if path else name)
        if found is not None:
            return found
    return None


def check_storable(value: object, what: str, *, what_to_do: str = STORABLE_TEXT_RULE) -> None:
    """Raise :class:`UnstorableTextError` when ``value`` holds a NUL character or a lone
    surrogate; ``what`` names the value in the message (``"the user message"``)."""
    found = find_unstorable(value)
    if found is not None:
        raise UnstorableTextError(f"{what} holds {found}; {what_to_do}.")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with NUL characters and lone surrogates written as backslash escapes
    (``\\x00``, ``\\ud800``), everything else unchanged: for diagnostic text only, such as an
    error message built from an exception, never for data."""
    if _UNSTORABLE.search(text) is None:
        return text
    return _UNSTORABLE.sub(_escaped, text)


_TERMINAL_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Control characters other than newline and tab: ESC starts the sequences a terminal obeys
(colours, cursor moves, clearing the screen, its title, hyperlinks), CR and backspace
overwrite what was printed, and the C1 range holds single-byte forms of the same."""


def _escaped_control(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def terminal_text(text: str) -> str:
    """``text`` with every control character a terminal would act on (all but newline and
    tab) written as a backslash escape (``\\x1b``): what a terminal shows of data, which
    must not recolour, move, clear or retitle it."""
    if _TERMINAL_CONTROL.search(text) is None:
        return text
    return _TERMINAL_CONTROL.sub(_escaped_control, text)
