"""What the ledger's tables are built from: their metadata (apart from ``SQLModel.metadata``),
their base class, the column types that keep times in UTC, enums as text and JSON as JSONB on
PostgreSQL, and the fields several tables share. ``agentledger.ledger.tables`` holds the
tables."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, BigInteger, Column, DateTime, MetaData
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import registry
from sqlalchemy.types import TypeDecorator, TypeEngine
from sqlmodel import Field, SQLModel
from sqlmodel.sql.sqltypes import AutoString

from ._columns import EnumValues, sqlite_time, utc_time

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)
"""The ledger's own metadata, apart from ``SQLModel.metadata``, so an application's tables and
ours never mix in one migration environment."""


class LedgerTable(SQLModel, registry=registry(metadata=metadata)):
    """Base of the ledger's tables."""


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp stored in UTC (``timestamptz`` on PostgreSQL, ISO text on SQLite) and
    always read back as a timezone-aware datetime."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: the ledger stores aware UTC times")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else utc_time(value)

    # SQLite keeps the time as text: there, one step each way instead of two (the same text as
    # SQLAlchemy's own DATETIME writes, ``YYYY-MM-DD HH:MM:SS.ffffff``, read as it reads it).

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)

        def process(value: datetime | None) -> str | None:
            return None if value is None else sqlite_time(value)

        return process

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        if dialect.name != "sqlite":
            return super().result_processor(dialect, coltype)

        def process(value: str | None) -> datetime | None:
            return None if value is None else utc_time(value)

        return process


class EnumText(TypeDecorator[StrEnum]):
    """A column of an enum's values: text in the database (the same DDL as a ``str`` column),
    the enum in Python. A value that is not one of the enum's is a ``ValueError`` either way
    (read back: a damaged row).

    Both directions are one dictionary lookup (rows are read and written by the thousand on
    the hot path); a ``StrEnum`` member and its text are the same key."""

    impl = AutoString
    cache_ok = True

    def __init__(self, enum: type[StrEnum]) -> None:
        super().__init__()
        self.enum = enum
        self._members = EnumValues(enum)
        self._texts = EnumValues(enum, {m.value: m.value for m in enum})

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        text: str | None = self._texts[value]
        return text

    def process_result_value(self, value: Any, dialect: Dialect) -> StrEnum | None:
        member: StrEnum | None = self._members[value]
        return member

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any]:
        return self._texts.__getitem__

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any]:
        return self._members.__getitem__


class JSONColumn(TypeDecorator[Any]):
    """JSON, with Python ``None`` stored as SQL ``NULL`` (not the JSON text ``null``): JSONB on
    PostgreSQL, whose dialect loads only for a PostgreSQL ledger (a SQLite ledger loads
    SQLAlchemy's SQLite dialect alone)."""

    impl = JSON(none_as_null=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import JSONB

            return dialect.type_descriptor(JSONB(none_as_null=True))
        return dialect.type_descriptor(JSON(none_as_null=True))


JSONType = JSONColumn()
"""The ledger's JSON columns' type (the migrations that add such a column use it too)."""


def json_field(name: str, *, nullable: bool = True) -> Any:
    return Field(default=None, sa_column=Column(name, JSONType, nullable=nullable))


def checksum_field() -> Any:
    """A CRC-32 of the row's columns (``agentledger.ledger.checksums``); NULL for runs still
    running."""
    return Field(default=None, sa_type=BigInteger, nullable=True)


def tenant_field(*, index: bool = False) -> Any:
    """``tenant_id``: the app's tenant the row belongs to, a copy of its conversation's on every
    table but ``conversations`` (revision 0010; last, as it was added). ``NULL``: no tenant."""
    return Field(default=None, nullable=True, index=index)


def time_field(*, nullable: bool = False, index: bool = False) -> Any:
    return Field(default=None, sa_type=UTCDateTime, nullable=nullable, index=index)
