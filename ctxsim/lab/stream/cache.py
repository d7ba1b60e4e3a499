"""The provider's prompt cache, as a long-horizon cost: every rewrite of a prompt's
beginning throws the cached prefix away.

Each turn is one provider call. The cache hit of a call is the longest prefix of
its messages that is unchanged since the previous call (compared message by
message: same role and content), in request tokens (content plus message
framing); a prefix shorter than ``min_prefix_tokens`` is not cached (providers
cache only prompts of at least 1,024 tokens). Cost in US dollars: uncached input
tokens at ``price_per_mtok`` per million, cached ones at ``cached_price_ratio`` of
that price.
"""

from __future__ import annotations

from typing import Annotated, Sequence

from pydantic import BaseModel, ConfigDict, Field


class PromptCacheModel(BaseModel):
    """Prices and rules of the prompt cache (defaults: a $3 / 1M-token model, cached
    tokens billed at 10 %, 1,024-token minimum cacheable prefix)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    price_per_mtok: Annotated[float, Field(ge=0)] = 3.0
    cached_price_ratio: Annotated[float, Field(ge=0, le=1)] = 0.1
    min_prefix_tokens: Annotated[int, Field(ge=0)] = 1024

    def cost(self, input_tokens: int, cached_tokens: int) -> float:
        """Dollars for one call of ``input_tokens`` of which ``cached_tokens`` hit the cache."""
        missed = input_tokens - cached_tokens
        return (missed + cached_tokens * self.cached_price_ratio) * self.price_per_mtok / 1e6


class PromptCache:
    """Running totals of the calls of one conversation (see the module docstring)."""

    def __init__(self, model: PromptCacheModel | None = None):
        self.model = model or PromptCacheModel()
        self._previous: tuple[tuple[str, str], ...] = ()
        self.calls = 0
        self.input_tokens = 0
        self.cached_tokens = 0
        self.cost = 0.0
        self.history: list[tuple[int, int]] = []  # (input tokens, cached tokens) per call

    def call(self, messages: Sequence[tuple[str, str]], costs: Sequence[int], input_tokens: int) -> int:
        """Account one call: ``messages`` as (role, content), their request tokens
        ``costs``, the call's total ``input_tokens``. Returns the cached tokens."""
        messages = tuple(messages)
        hit = 0
        for old, new, cost in zip(self._previous, messages, costs):
            if old != new:
                break
            hit += cost
        if hit < self.model.min_prefix_tokens:
            hit = 0
        self._previous = messages
        self.calls += 1
        self.input_tokens += input_tokens
        self.cached_tokens += hit
        self.cost += self.model.cost(input_tokens, hit)
        self.history.append((input_tokens, hit))
        return hit

    @property
    def hit_rate(self) -> float:
        """Cached tokens / input tokens over every call (0 before the first call)."""
        return self.cached_tokens / self.input_tokens if self.input_tokens else 0.0
