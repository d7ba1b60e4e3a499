"""Deterministic latency cost model (ms) for strategies.

By default every strategy's latency is *modeled*, not measured, so runs reproduce
exactly. A strategy reports what it did as a :class:`Cost` (LLM summary calls and
their input/output tokens, units embedded for relevance, tokens counted, units
touched, artifacts written); :meth:`LatencyModel.ms` prices it. The defaults price
a summary as a call to a hosted LLM, which is what deployments of the seeds do:

==========================  ======================================================
operation                   default cost
==========================  ======================================================
LLM summary call            150 ms overhead + 60 ms / 1k input + 600 ms / 1k output
                            (2,000 tokens -> 300: 450 ms, inside design 001's 500 ms)
embedding (relevance)       1 ms per unit (hashed TF-IDF); ``embed_ms_per_unit``
                            ~16 for MiniLM
token counting              0.5 ms per 1k tokens
bookkeeping                 0.05 ms per unit touched
artifact write              5 ms per artifact
==========================  ======================================================

``measured=True`` replaces the model by the strategy's wall time.

:meth:`LatencyModel.bound_ms` prices a step *before* its LLM calls: each call at its
input and at the most it may write (its limit, ``Cost.llm_output_limit``), which a
deployed agent knows before it sends the request (the input is in hand, the output is
capped by the summary budget). :meth:`LatencyModel.local_ms` prices the rest, the work
done before a call is sent. The look-ahead (:mod:`ctxsim.policies.lookahead`) uses them
to decline a call that would take the break over the reward's free latency.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from pydantic import BaseModel, ConfigDict, Field


@dataclass(frozen=True)
class Cost:
    """What a strategy did, in countable operations.

    ``llm_output_limit`` is the most the LLM calls could have written (their budgets
    and the template text around them), known before the calls: at least
    ``llm_output_tokens``; a call that states no limit counts what it wrote.
    """

    llm_calls: int = 0
    llm_input_tokens: int = 0
    llm_output_tokens: int = 0
    llm_output_limit: int = 0
    embedded_units: int = 0
    counted_tokens: int = 0
    units_touched: int = 0
    artifact_writes: int = 0

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @staticmethod
    def summary(input_tokens: int, output_tokens: int, unused_budget: int = 0) -> "Cost":
        """One LLM summary call reading ``input_tokens`` and writing ``output_tokens``;
        ``unused_budget``: the tokens of its budget it did not write (its limit is
        ``output_tokens + max(0, unused_budget)``)."""
        return Cost(llm_calls=1, llm_input_tokens=input_tokens, llm_output_tokens=output_tokens,
                    llm_output_limit=output_tokens + max(0, unused_budget))


class LatencyModel(BaseModel):
    """Prices a :class:`Cost` in milliseconds (see the module table)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    llm_overhead_ms: float = Field(150.0, ge=0)
    llm_input_ms_per_1k: float = Field(60.0, ge=0)
    llm_output_ms_per_1k: float = Field(600.0, ge=0)
    embed_ms_per_unit: float = Field(1.0, ge=0)
    count_ms_per_1k: float = Field(0.5, ge=0)
    per_unit_ms: float = Field(0.05, ge=0)
    artifact_write_ms: float = Field(5.0, ge=0)
    measured: bool = False

    def ms(self, cost: Cost) -> float:
        return round(
            cost.llm_calls * self.llm_overhead_ms
            + cost.llm_input_tokens / 1000 * self.llm_input_ms_per_1k
            + cost.llm_output_tokens / 1000 * self.llm_output_ms_per_1k
            + cost.embedded_units * self.embed_ms_per_unit
            + cost.counted_tokens / 1000 * self.count_ms_per_1k
            + cost.units_touched * self.per_unit_ms
            + cost.artifact_writes * self.artifact_write_ms,
            3,
        )

    def bound_ms(self, cost: Cost) -> float:
        """What ``cost`` is priced at before its LLM calls are sent: each call writing
        its limit (at least :meth:`ms`)."""
        return self.ms(replace(cost, llm_output_tokens=max(cost.llm_output_tokens, cost.llm_output_limit)))

    def local_ms(self, cost: Cost) -> float:
        """``cost`` without its LLM calls: the work done before a call is sent."""
        return self.ms(replace(cost, llm_calls=0, llm_input_tokens=0, llm_output_tokens=0, llm_output_limit=0))
