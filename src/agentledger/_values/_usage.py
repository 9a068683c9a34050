"""Token usage of one inference, a step, a run or a whole run tree."""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, NonNegativeInt


class Usage(BaseModel):
    """Tokens spent, normalized across providers.

    ``input_tokens`` counts every prompt token, including those read from or written to a
    prompt cache; ``cache_read_tokens`` and ``cache_write_tokens`` say how many of them were.
    ``cache_write_1h_tokens`` is the part of ``cache_write_tokens`` written to a one-hour
    cache (Anthropic's ``ttl: "1h"``), which costs more than the five-minute default.
    ``reasoning_tokens`` likewise is the part of ``output_tokens`` the model spent thinking.
    Usages add up with ``+`` and ``sum()``.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    input_tokens: NonNegativeInt = 0
    output_tokens: NonNegativeInt = 0
    cache_read_tokens: NonNegativeInt = 0
    cache_write_tokens: NonNegativeInt = 0
    reasoning_tokens: NonNegativeInt = 0
    cache_write_1h_tokens: NonNegativeInt = 0

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens: what token limits are measured in."""
        return self.input_tokens + self.output_tokens

    def is_zero(self) -> bool:
        return self == _ZERO

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage.model_construct(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            cache_write_1h_tokens=self.cache_write_1h_tokens + other.cache_write_1h_tokens,
        )

    def __radd__(self, other: object) -> Self:
        """Lets ``sum(usages)`` start from ``0``."""
        if other == 0:
            return self
        return NotImplemented


_ZERO = Usage.model_construct()


class Spend(BaseModel):
    """What a run, or a subtree of runs, spent: tokens, money and steps.

    ``cost_usd`` is ``None`` when no step's cost is known; ``fully_priced`` is false when some
    step that called a model has no known cost.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    usage: Usage = _ZERO
    cost_usd: float | None = None
    steps: NonNegativeInt = 0
    fully_priced: bool = True

    def __add__(self, other: Spend) -> Spend:
        if not isinstance(other, Spend):
            return NotImplemented
        costs = [c for c in (self.cost_usd, other.cost_usd) if c is not None]
        return Spend.model_construct(
            usage=self.usage + other.usage,
            cost_usd=sum(costs) if costs else None,
            steps=self.steps + other.steps,
            fully_priced=self.fully_priced and other.fully_priced,
        )


UNPRICED = "unpriced"
"""What every view says for a cost nobody knows: the ledger stores NULL for it, never zero."""


def money(value: float) -> str:
    """US dollars to the hundredth of a cent; smaller amounts to the millionth of a dollar."""
    return f"${value:,.4f}" if abs(value) >= 0.0001 or value == 0 else f"${value:.6f}"


def cost_text(cost_usd: float | None, *, fully_priced: bool) -> str:
    """A cost as it is known, in the one wording the command line, the demo and the report
    share: ``$0.0012``; ``unpriced`` when no step that called a model had a price;
    ``$0.0012 + unpriced`` when some had one and some had none (the known part is a floor,
    never the whole); a dash when no model was called at all.

    ``cost_usd`` is what the priced steps cost (``None``: none was priced), ``fully_priced``
    whether every step that called a model was priced (``Spend.fully_priced``, the column
    ``agent_runs.fully_priced``, or no ``unpriced_steps`` in the analytics)."""
    if cost_usd is None:
        return "–" if fully_priced else UNPRICED
    return money(cost_usd) if fully_priced else f"{money(cost_usd)} + {UNPRICED}"
