"""Helpers shared by the strategy families: relevance, summary units, truncation."""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from ..latency import Cost
from ..model import ContextState, ContextUnit, content_hash
from ..relevance import cosine_to_query
from ..tokens import count_tokens, fitting_count
from .base import StrategyContext

SUMMARY_PREFIX = "[Context Summary - Turns {first}-{last}]"


def relevance_scores(
    state: ContextState, units: Sequence[ContextUnit], ctx: StrategyContext, p1_boost: float = 1.0
) -> tuple[np.ndarray, Cost]:
    """Relevance of each unit to the current task, in [0, 1] before the P1 boost.

    Cosine similarity to the task (design 001's ``computeRelevance``), divided by the
    largest score in the state so that the most relevant unit scores 1 (a fixed
    ``rel_threshold`` then means the same thing for every embedder), then P1 units
    multiplied by ``p1_boost``.
    """
    if not units:
        return np.zeros(0), Cost()
    raw = cosine_to_query([u.content for u in units], ctx.query_for(state), ctx.embedder)
    top = float(raw.max())
    scores = raw / top if top > 0 else raw.astype(float)
    if p1_boost != 1.0:
        scores = scores * np.where([u.priority == 1 for u in units], p1_boost, 1.0)
    return scores, Cost(embedded_units=len(units) + 1)


def fewer_tokens(text: str, tokens: int) -> bool:
    """``count_tokens(text) < tokens``, without tokenizing ``text`` when its UTF-8 length
    already says so: a cl100k token spans at least one byte (and the characters/4
    estimate of :func:`~ctxsim.tokens.count_tokens` stays under the length too)."""
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    return size < tokens or count_tokens(text) < tokens


def source_ids_of(units: Iterable[ContextUnit]) -> tuple[str, ...]:
    """Original unit ids a set of units stands for (flattening earlier summaries)."""
    out: list[str] = []
    for u in units:
        out.extend(u.source_ids or (u.id,))
    return tuple(dict.fromkeys(out))


def synthetic_id(prefix: str, units: Sequence[ContextUnit]) -> str:
    """Deterministic id of a unit that replaces ``units``."""
    return f"{prefix}-{content_hash('|'.join(u.id for u in units))[:10]}"


def summary_unit(units: Sequence[ContextUnit], body: str, *, prefix: str = "summary") -> ContextUnit:
    """A summary unit replacing ``units`` (design 002: role assistant, stable header)."""
    first, last = units[0], units[-1]
    header = SUMMARY_PREFIX.format(first=min(u.turn for u in units), last=max(u.turn for u in units))
    return ContextUnit(
        id=synthetic_id(prefix, units),
        type="summary",
        role="assistant",
        content=f"{header}\n{body}",
        turn=first.turn,
        timestamp=last.timestamp,
        priority=min(u.priority for u in units),
        source_ids=source_ids_of(units),
        summary_depth=max(u.summary_depth for u in units) + 1,
    )


def summarize_units(
    state: ContextState, units: Sequence[ContextUnit], target_tokens: int, ctx: StrategyContext, *, prefix: str = "summary"
) -> tuple[ContextUnit, Cost]:
    """Summarize ``units`` into one summary unit of about ``target_tokens`` tokens."""
    depth = max(u.summary_depth for u in units)
    budget = max(1, target_tokens)
    result = ctx.summarizer.summarize_units(units, budget, task=ctx.query_for(state), depth=depth)
    unit = summary_unit(units, result.text, prefix=prefix)
    input_tokens = sum(u.token_count for u in units)
    cost = Cost.summary(input_tokens, unit.token_count, budget - result.token_count)
    return unit, cost + Cost(units_touched=len(units))


def replace_span(units: Sequence[ContextUnit], span_ids: set[str], replacement: ContextUnit | None) -> list[ContextUnit]:
    """Units with those of ``span_ids`` removed and ``replacement`` put where the first was."""
    out: list[ContextUnit] = []
    placed = replacement is None
    for u in units:
        if u.id in span_ids:
            if not placed:
                out.append(replacement)
                placed = True
            continue
        out.append(u)
    return out


def truncate_paragraphs(text: str, max_tokens: int, *, keep: str = "head") -> str:
    """Design 003's smart truncation: whole paragraphs up to ``max_tokens``.

    ``keep="head"`` keeps the first paragraphs, ``"tail"`` the last ones. When not
    even one paragraph fits, its lines are used the same way, then its words.
    Returns "" when nothing fits.
    """
    if count_tokens(text) <= max_tokens:
        return text
    for sep in ("\n\n", "\n", " "):
        pieces = [p for p in text.split(sep) if p.strip()]
        # the pieces added one at a time (from the end for "tail") until the next would not fit
        kept = fitting_count(pieces, sep, max_tokens, from_end=keep == "tail")
        if kept:
            return sep.join(pieces[-kept:] if keep == "tail" else pieces[:kept])
    return ""


def remove_until(
    state: ContextState, order: Sequence[ContextUnit], target: int
) -> tuple[list[ContextUnit], list[ContextUnit]]:
    """Remove units in ``order`` until the state fits ``target``; (kept, removed)."""
    excess = state.total_tokens - target
    removed: list[ContextUnit] = []
    for u in order:
        if excess <= 0:
            break
        removed.append(u)
        excess -= state.unit_cost(u)
    gone = {u.id for u in removed}
    return [u for u in state.units if u.id not in gone], removed
