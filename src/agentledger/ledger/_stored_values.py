"""Rows checked against their checksums from SQLite's stored values, not decoded first.

The general check (:func:`~agentledger.ledger.checksums.check_row`) forms a row's canonical
text from its decoded values: each JSON value walked in Python and encoded again. On SQLite the
stored values are nearly that canonical form already: text and integers as they are, JSON in
its canonical text (the engine's serializer is
:func:`~agentledger.ledger.checksums.canonical_json`; an integral float is read back as an
integer, as the checksum covers it), times as ISO text. So :class:`RowCheck`
forms the canonical text from the stored values themselves (string operations, nothing decoded)
and compares its CRC-32 with the row's checksum.

Nothing is accepted that the general check would refuse: a row matches here only when the text
formed from its stored values is the canonical text its checksum was computed over, which (but
for a CRC-32 collision, as on the general path) means the stored values decode to the values
written. A row whose canonical text cannot be formed from what is stored (JSON written before
the serializer was canonical, JSON with an escaped quote, a float column's integral value, a
value of a type its column does not hold, a row written by hand without a checksum) does not
match, and goes through the general check, which raises
:class:`~agentledger.errors.LedgerCorruptError` if it is damaged.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable, Sequence
from decimal import Decimal
from operator import itemgetter
from typing import Any

from pydantic_core import from_json
from sqlalchemy import JSON, Boolean, DateTime, Float, Integer, Table
from sqlalchemy.types import TypeEngine

from ._statements import Compiled, Sent
from .checksums import ADDED, CHECKSUM, COVERED, check_row

__all__ = [
    "UTC_OFFSET",
    "RowCheck",
    "check_values",
    "checked_values",
    "stored_json",
    "stored_values",
]


def _text(value: str) -> str:
    return "s" + value


def _integer(value: int) -> str:
    return f"i{value:d}"


def _float(value: float) -> str:
    if value.is_integer():
        raise ValueError("an integral float: the general check forms it")
    return f"f{value!r}"


_INTEGRAL = re.compile(r"\.0(?=[,}\]])|e\+")
"""Where canonical JSON text may hold an integral float: a fraction of one zero ending a value
(``0.0``), or a positive exponent (``1e+16``; every float from there on is integral). Python
writes an integral float in no other form, and text not in canonical form fails the check
anyway. Found as literals, this is a fast scan: a pattern that tries each digit of the text's
times and ids costs ten times as much."""
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_IN_NUMBER = frozenset("0123456789.-+eE")


def _json(value: str) -> str:
    """Stored JSON text in its canonical form, with its integral floats as the integers they
    read back as (``0.0`` is ``0``): each a number where a value begins (after a colon, a
    comma or a bracket); one inside a string (an odd number of quotes before it) is text, kept.
    Text with an escaped quote is left to the general check."""
    found = _INTEGRAL.search(value)
    if found is None:
        return "j" + value
    if '\\"' in value:
        raise ValueError("an escaped quote: the general check forms it")
    pieces, kept = ["j"], 0
    for match in _INTEGRAL.finditer(value, found.start()):
        start = match.start()
        while start > kept and value[start - 1] in _IN_NUMBER:
            start -= 1
        number = _NUMBER.match(value, start)
        if (
            number is not None
            and number.end() >= match.end()
            and value[start - 1 : start] in (":", ",", "[")
            and value.count('"', 0, start) % 2 == 0
        ):
            pieces += (value[kept:start], _read_back(number.group()))
            kept = number.end()
    pieces.append(value[kept:])
    return "".join(pieces)


def _read_back(token: str) -> str:
    """A float of JSON text as it reads back: integral, the integer its decimal form names."""
    number = float(token)
    if not number.is_integer():
        return token
    return str(int(number)) if abs(number) < _EXACT else str(int(Decimal(token)))


_EXACT = 2.0**53
"""Below it, an integral float is the integer its decimal form names."""


UTC_OFFSET = "+00:00"
"""The offset of every stored time, which is stored in UTC without it."""


def _time(value: str) -> str:
    """A time as stored (``2026-01-02 03:04:05.678901``, UTC) in its canonical form, the UTC
    ISO form, which leaves out a zero fraction."""
    if value.endswith(".000000"):
        value = value[:-7]
    return "t" + value.replace(" ", "T", 1) + UTC_OFFSET


def _form_of(kind: TypeEngine[Any]) -> Callable[[Any], str]:
    """The canonical form of a stored value of a column of type ``kind``."""
    impl = getattr(kind, "impl", kind)
    if isinstance(impl, JSON):
        return _json
    if isinstance(impl, DateTime):
        return _time
    if isinstance(impl, Boolean | Integer):
        return _integer
    if isinstance(impl, Float):
        return _float
    return _text


_MATCHED: set[int] = set()
"""Hashes of the stored values of rows that matched their checksums in this process (with the
table and the columns of their select): see :meth:`RowCheck.__call__`."""
_MATCHED_MOST = 200_000
"""Hashes kept at most (about 10 MB); then they are let go, and each row is checked again."""


class RowCheck:
    """Whether the canonical text formed from a row's stored values (rows of a select whose
    columns ``at`` names) has the row's checksum."""

    def __init__(self, table: Table, at: dict[str, int]) -> None:
        covered = COVERED[table.name]
        self.covered = itemgetter(*(at[name] for name in covered))
        self.forms = [_form_of(table.c[name].type) for name in covered]
        self.added = [
            (at[name], name, _form_of(table.c[name].type), default)
            for name, default in ADDED.get(table.name, {}).items()
        ]
        self.stored = at[CHECKSUM]
        self.shape = f"{table.name}({','.join(sorted(at, key=at.__getitem__))})"

    def __call__(self, values: Sequence[Any]) -> bool:
        """Whether the row matches. The verdict is a function of the stored values alone, so a
        row read again with the values it had (a conversation loaded at each turn) is known by
        a hash of them, which costs a tenth of forming its text. A 64-bit hash, keyed at random
        for each process, mistakes another row for one that matched far less often than a
        CRC-32 checksum misses a change: the check finds damage as surely as before."""
        try:
            key: int | None = hash((self.shape, values))
        except TypeError:  # a value that has no hash: checked each time
            key = None
        if key in _MATCHED:
            return True
        matched = self._matches(values)
        if matched and key is not None:
            if len(_MATCHED) >= _MATCHED_MOST:
                _MATCHED.clear()
            _MATCHED.add(key)
        return matched

    def _matches(self, values: Sequence[Any]) -> bool:
        checksum = values[self.stored]
        if checksum is None:
            return False  # written by hand: the general check sees it
        try:
            parts = [
                "~" if value is None else form(value)
                for form, value in zip(self.forms, self.covered(values), strict=True)
            ]
            for i, name, form, default in self.added:
                if (value := values[i]) != default:
                    parts.append(f"{name}={'~' if value is None else form(value)}")
            text = "\x1f".join(parts)
        except (TypeError, ValueError, AttributeError):
            return False  # a value of a type its column does not hold
        return bool(zlib.crc32(text.encode("utf-8", "surrogatepass")) == checksum)


def checked_values(
    compiled: Compiled, sent: Sent, table: Table
) -> tuple[dict[str, int], Sequence[Sequence[Any]]]:
    """The rows of ``sent``, the select ``compiled`` of ``table``'s columns (and any more), as
    stored (with where each column is), each checked (:func:`check_values`)."""
    at, fetched = stored_values(sent)
    check_values(compiled, sent, table, fetched)
    return at, fetched


def checked_rows(compiled: Compiled, sent: Sent, table: Table) -> list[dict[str, Any]]:
    """The rows of ``sent``, the select ``compiled`` of ``table``'s columns (and any more), as
    dicts through the result processors, each checked (:func:`check_values`)."""
    assert sent.description is not None
    fetched = sent.fetchall()
    check_values(compiled, sent, table, fetched)
    return compiled.dicts(sent.description, fetched)


def stored_values(sent: Sent) -> tuple[dict[str, int], Sequence[Sequence[Any]]]:
    """The rows of ``sent`` as stored, with where each column is: not checked yet."""
    assert sent.description is not None
    return {column[0]: index for index, column in enumerate(sent.description)}, sent.fetchall()


def check_values(
    compiled: Compiled, sent: Sent, table: Table, fetched: Sequence[Sequence[Any]]
) -> None:
    """Check rows ``fetched`` of ``sent``, the select ``compiled`` of ``table``'s columns,
    against their checksums: from their stored values where they form their canonical text,
    else decoded and checked in full (a damaged row raises)."""
    description = sent.description
    assert description is not None
    check = RowCheck(table, {column[0]: index for index, column in enumerate(description)})
    for values in fetched:
        if not check(values):
            check_row(table, compiled.dicts(description, [values])[0])


def stored_json(stored: Any) -> Any:
    """A JSON column's stored value decoded, as its result processor decodes it (a JSON column
    has numeric affinity in SQLite, so a bare number is stored as one, and read as it is), but
    by pydantic's parser, which takes a third of the time the standard library's does and
    reads floats alike; text it refuses that the standard one reads (an escaped lone
    surrogate, nesting deeper than it goes) is read by the standard one."""
    if not isinstance(stored, str):
        return stored
    try:
        return from_json(stored)
    except ValueError:
        return json.loads(stored)
