"""Model prices: a versioned, dated table shipped as data, and what a usage costs under it."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from datetime import date
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, ValidationError

from ..errors import ConfigurationError
from ._usage import Usage

_PER_TOKEN = 1_000_000
_SNAPSHOT = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8}|latest)$")


class Price(BaseModel):
    """US dollars per million tokens.

    ``cache_read`` and ``cache_write`` price the prompt tokens read from or written to a
    prompt cache; when one is ``None`` those tokens cost the ``input`` price.
    ``cache_write_1h`` prices the writes to a one-hour cache (``Usage.cache_write_1h_tokens``);
    ``None`` is twice the ``input`` price, as Anthropic charges them. Five-minute writes keep
    the ``cache_write`` price.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    input: NonNegativeFloat
    output: NonNegativeFloat
    cache_read: NonNegativeFloat | None = None
    cache_write: NonNegativeFloat | None = None
    cache_write_1h: NonNegativeFloat | None = None

    def cost(self, usage: Usage) -> float:
        """What ``usage`` costs, in US dollars (``input_tokens`` include the cached ones)."""
        cached = usage.cache_read_tokens + usage.cache_write_tokens
        uncached = max(0, usage.input_tokens - cached)
        read = self.input if self.cache_read is None else self.cache_read
        write = self.input if self.cache_write is None else self.cache_write
        write_1h = 2 * self.input if self.cache_write_1h is None else self.cache_write_1h
        hour = min(usage.cache_write_1h_tokens, usage.cache_write_tokens)
        dollars = (
            uncached * self.input
            + usage.cache_read_tokens * read
            + (usage.cache_write_tokens - hour) * write
            + hour * write_1h
            + usage.output_tokens * self.output
        )
        return dollars / _PER_TOKEN


class PriceTable(BaseModel):
    """Prices by model name, with the version and the date they were taken on.

    The table shipped with agentledger is :meth:`default`; prices change, so override or add
    models with :meth:`with_prices`, or load a table of your own with :meth:`load` (the same
    JSON shape as the shipped ``prices.json``). A model is found by its exact name, else by
    its name without a provider prefix (``openai/gpt-4o``) or a snapshot suffix
    (``-2024-08-06``, ``-20250929``, ``-latest``). A model with no price costs ``None``
    (unknown), never zero.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    version: str
    as_of: date
    currency: str = "USD"
    models: dict[str, Price] = Field(default_factory=dict)

    @classmethod
    def default(cls) -> PriceTable:
        """The table shipped with this version of agentledger."""
        return _shipped()

    @classmethod
    def load(cls, path: str | Path) -> PriceTable:
        """A table from a JSON file shaped like the shipped ``prices.json``."""
        try:
            return cls.model_validate_json(Path(path).read_bytes())
        except OSError as exc:
            raise ConfigurationError(f"cannot read the price table {path}: {exc}") from exc
        except ValidationError as exc:
            raise ConfigurationError(
                f"{path} is not a price table: {exc.error_count()} problem(s), first: "
                f"{exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}. See agentledger's "
                "prices.json for the expected shape."
            ) from exc

    def with_prices(
        self, prices: Mapping[str, Price | Mapping[str, float]], *, version: str | None = None
    ) -> PriceTable:
        """This table with ``prices`` added or replacing the listed models' prices."""
        added = {name: Price.model_validate(price) for name, price in prices.items()}
        return self.model_copy(
            update={
                "models": {**self.models, **added},
                "version": version or f"{self.version}+custom",
            }
        )

    def price_for(self, model: str | None) -> Price | None:
        if not model:
            return None
        for name in _candidates(model):
            price = self.models.get(name)
            if price is not None:
                return price
        return None

    def cost(self, model: str | None, usage: Usage) -> float | None:
        """What ``usage`` of ``model`` costs, or ``None`` when the model has no price."""
        price = self.price_for(model)
        return price.cost(usage) if price is not None else None


def _candidates(model: str) -> list[str]:
    bare = model.rsplit("/", 1)[-1]
    names = [model, bare, _SNAPSHOT.sub("", bare)]
    return list(dict.fromkeys(names))


@functools.cache
def _shipped() -> PriceTable:
    data = resources.files(__package__).joinpath("prices.json").read_bytes()
    return PriceTable.model_validate_json(data)
