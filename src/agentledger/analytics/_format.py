"""How the report writes numbers, money, times and durations, for the terminal and the HTML
page alike."""

from __future__ import annotations

from datetime import datetime


def count(value: int | None) -> str:
    return "–" if value is None else f"{value:,}"


def number(value: float | None) -> str:
    return "–" if value is None else f"{value:,.2f}".rstrip("0").rstrip(".")


def money_axis(value: float) -> str:
    """An axis label in US dollars: $0.02, $1.5, $1,200."""
    return f"${value:,.4g}"


def plural(amount: int, word: str) -> str:
    return f"{amount:,} {word}{'' if amount == 1 else 's'}"


def ms_text(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:,.1f}" if value >= 1 else f"{value:.3f}"


def percent(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def time_text(value: datetime | None) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def compact(value: float) -> str:
    """An axis label: 1.5k, 2M."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value:.3g}"
