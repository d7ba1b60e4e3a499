"""Scenario families: one scenario whose generator parameters are drawn per context seed.

A generated scenario fixes its limit, overflow, unit-type mix, P1 share, unit sizes and
planted material, so every context seed is the same *kind* of context. A family (the
``sample`` key of a scenario file, :class:`SampleRanges`) draws those parameters anew
for every seed — domain randomization — so a policy trained on it meets thousands of
kinds of context instead of a handful. :meth:`ctxsim.lab.scenarios.Scenario.draw` turns
(family, seed) into the concrete scenario the generator builds.

A *transcript family* (``transcript`` beside ``sample``) keeps one real conversation
and draws only its limit per seed: ``sample: {overflow: {min, max}}`` (the
transcript's tokens over the limit; ``{}`` takes the default range) or ``sample:
{limit: {min, max}}`` — the same conversation at many severities of overflow.

Each range is ``{min, max}`` (inclusive; ``log: true`` draws uniformly in log space).
Count keys (``limit``, ``mix_types``, ``unit_tokens_min``, ``facts``, ``duplicates``,
``superseded_writes``, ``errors``, ``pinned``, ``prior_summaries``) are drawn as
integers (a count range must hold a whole number). The defaults span the generated
scenarios of ``data/scenarios`` (all but severe-overflow's 5x overflow).

The planted tool calls (duplicates, superseded writes, errors) are drawn apart from the
``tool_result`` share and each adds a tool unit, so a context whose drawn share is
small overshoots: of ``data/families/sampled.yaml``'s 500 contexts, 10 end more than
5 % over their drawn target and the largest 21 % (a generated scenario stays within 5 %).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..model import MAX_TOKENS
from ..validation import KeyedValueError

#: the largest overflow (target / limit) of a scenario or a family: 20x the suite's
#: largest (severe-overflow, 5x); a bigger ratio only makes generation take very long
MAX_OVERFLOW = 100.0
#: keys drawn as whole numbers
COUNT_KEYS = frozenset(
    {"limit", "mix_types", "unit_tokens_min", "facts", "duplicates", "superseded_writes", "errors", "pinned", "prior_summaries"}
)
#: planted tool calls: drawn only when the mix has a tool_result share
TOOL_KEYS = ("duplicates", "superseded_writes", "errors")
#: what a transcript family (``transcript`` + ``sample``) may draw: its limit, directly
#: or as the transcript's size over an overflow ratio (the default: ``overflow``)
TRANSCRIPT_SAMPLE_KEYS = ("overflow", "limit")
#: a chat JSONL file given where scenarios are expected is read as this transcript
#: family (the shipped data/families/transcripts.yaml uses the same values)
TRANSCRIPT_FILE_SAMPLE = {"overflow": {"min": 1.1, "max": 2.5}}
TRANSCRIPT_FILE_CONTEXTS = 32
#: ... and, in its cut family, the share of its messages that form the context
#: (data/families/transcripts.yaml's cut families use the same range)
TRANSCRIPT_FILE_CUT = {"min": 0.3, "max": 0.8}
#: mixes a family draws from (design 001's unit types)
FAMILY_MIX_TYPES = ("message", "code", "plan_ref", "log", "tool_result", "other")


def draw_rng(seed: int) -> np.random.Generator:
    """The generator a family's draws for context ``seed`` come from (deterministic per seed)."""
    return np.random.default_rng([seed, 0xFA7])


class Range(BaseModel):
    """An inclusive range ``[min, max]`` of finite numbers; ``log`` draws uniformly in
    log space (min > 0)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    min: float = Field(ge=0)
    max: float = Field(ge=0)
    log: bool = False

    @model_validator(mode="after")
    def _ordered(self) -> Range:
        if self.min > self.max:
            raise KeyedValueError("min", self.min, f"must not exceed max ({self.max})")
        if self.log and self.min <= 0:
            raise KeyedValueError("min", self.min, "must be > 0 with log: true")
        return self

    def draw(self, rng: np.random.Generator, whole: bool) -> float | int:
        """One value (an int when ``whole``)."""
        if self.log:
            value = math.exp(rng.uniform(math.log(self.min), math.log(self.max)))
            return max(math.ceil(self.min), min(math.floor(self.max), round(value))) if whole else value
        if whole:
            return int(rng.integers(math.ceil(self.min), math.floor(self.max) + 1))
        return float(rng.uniform(self.min, self.max))


def _r(lo: float, hi: float, log: bool = False) -> Any:
    return Field(default_factory=lambda: Range(min=lo, max=hi, log=log))


class SampleRanges(BaseModel):
    """What a family draws per context seed (defaults span the generated scenarios,
    severe-overflow's 5x excepted).

    ``limit``: context limit (tokens); ``overflow``: generated tokens / limit;
    ``mix_types``: how many of the six unit types get a share (the types and their
    Dirichlet(1) shares are drawn); ``unit_tokens_min`` and ``unit_tokens_spread``: a
    unit's typical size is ``min`` to ``min × spread`` tokens (capped at the limit);
    the rest are the scenario keys of the same name.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    limit: Range = _r(3500, 12000)
    overflow: Range = _r(1.05, 3.0)
    p1_ratio: Range = _r(0.0, 0.95)
    mix_types: Range = _r(2, 6)
    unit_tokens_min: Range = _r(8, 1500, log=True)
    unit_tokens_spread: Range = _r(1.5, 6.0)
    facts: Range = _r(0, 24)
    duplicates: Range = _r(0, 8)
    superseded_writes: Range = _r(0, 6)
    errors: Range = _r(0, 8)
    pinned: Range = _r(0, 6)
    misclassified: Range = _r(0.0, 0.3)
    prior_summaries: Range = _r(0, 4)

    @model_validator(mode="after")
    def _within(self) -> SampleRanges:
        checks = {
            "mix_types": (1, len(FAMILY_MIX_TYPES)), "p1_ratio": (0, 1), "misclassified": (0, 0.99),
            "overflow": (1e-9, math.inf), "unit_tokens_min": (1, math.inf), "unit_tokens_spread": (1, math.inf),
        }
        for key, (lo, hi) in checks.items():
            r = getattr(self, key)
            if r.min < lo or r.max > hi:
                raise KeyedValueError(key, {"min": r.min, "max": r.max}, f"must lie within [{lo:g}, {hi:g}]")
        if self.overflow.max > MAX_OVERFLOW:  # bounded like a scenario's ``overflow``
            raise KeyedValueError("overflow.max", self.overflow.max, f"must be at most {MAX_OVERFLOW:g}")
        if self.limit.max > MAX_TOKENS:  # bounded like a scenario's ``limit``
            raise KeyedValueError("limit.max", self.limit.max, f"must be at most {MAX_TOKENS:,} tokens")
        for key in sorted(COUNT_KEYS & set(type(self).model_fields)):
            r = getattr(self, key)
            if math.ceil(r.min) > math.floor(r.max):
                raise KeyedValueError(key, {"min": r.min, "max": r.max}, "is drawn as a whole number: the range holds none")
        return self

    def draw(self, seed: int) -> dict[str, Any]:
        """The generated-scenario keys of context ``seed`` (deterministic per seed)."""
        rng = draw_rng(seed)
        v = {key: getattr(self, key).draw(rng, key in COUNT_KEYS) for key in type(self).model_fields}
        types = [FAMILY_MIX_TYPES[i] for i in sorted(rng.choice(len(FAMILY_MIX_TYPES), v.pop("mix_types"), replace=False))]
        shares = rng.dirichlet(np.ones(len(types)))
        mix = {t: float(s) for t, s in zip(types, shares)}
        mix[types[0]] = max(0.0, 1.0 - sum(mix[t] for t in types[1:]))  # sums to 1 within float error
        if "tool_result" not in mix:
            v.update(dict.fromkeys(TOOL_KEYS, 0))
        low = v.pop("unit_tokens_min")
        spread = v.pop("unit_tokens_spread")
        low = min(low, v["limit"])
        v["unit_tokens"] = {"min": low, "max": max(low, min(v["limit"], round(low * spread)))}
        return {**v, "mix": mix}
