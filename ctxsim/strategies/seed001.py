"""Design 001's five breaking strategies (Context Management System v3.6).

``summarize_old``, ``prioritize_recent``, ``content_type_chunking``,
``discard_low_rel`` and ``hybrid`` (their chain). Parameter names and defaults are
design 001's ``context_config.breaking_strategy``; parameters the seed does not name
(``p1_ratio``, ``min_similarity``, ``min_coherence``, ``min_tokens``, ...) are
ctxsim's and documented on each class. All sizes are cl100k tokens.

Where the seed's sketch returns ``null`` because the result is still over the limit,
ctxsim keeps the partial progress: the next step of a chain (or the environment's
next action) starts from it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace
from typing import Annotated, Literal

import numpy as np
from pydantic import Field, field_validator

from ..errors import StrategyError
from ..latency import Cost
from ..coherence import centroid
from ..minify import compress_log, minify_code
from ..model import ContextState, ContextUnit
from ..summarize.extractive import must_carry
from ..summarize.rules import may_keep_sentences, may_state_rule, must_keep_sentences
from ..summarize.structured import item_lines
from ..tokens import count_tokens
from .base import (
    RANK_COMPRESS,
    RANK_SELECT,
    RANK_SUMMARIZE,
    Outcome,
    Params,
    Strategy,
    StrategyContext,
    is_protected,
    unchanged,
)
from .common import (
    relevance_scores,
    remove_until,
    replace_span,
    source_ids_of,
    summarize_units,
    summary_unit,
    synthetic_id,
    truncate_paragraphs,
)
from .registry import get_strategy, register, strategy_class
from .window_compaction import summary_floor

#: a share in (0, 1]
Share = Annotated[float, Field(gt=0, le=1)]


def _old_count(state: ContextState, old_threshold: float) -> int:
    return math.floor(len(state.units) * old_threshold)


def _shrinks(unit: ContextUnit, ratio: float, min_tokens: int, ctx: StrategyContext) -> bool:
    """Whether compressing ``unit`` to ``ratio`` of its tokens is worth a summary call
    and can shrink it once its must-keep sentences are kept (:func:`_compress_text`)."""
    if unit.token_count < min_tokens or math.floor(unit.token_count * ratio) >= unit.token_count:
        return False
    keep = must_keep_sentences(unit)
    return not keep or ctx.summarizer.keep_tokens(unit.content, keep) < count_tokens(unit.content)


def _compress_text(
    unit: ContextUnit, ratio: float, state: ContextState, ctx: StrategyContext
) -> tuple[ContextUnit, Cost]:
    """``unit`` with its content summarized to ``ratio`` of its tokens (same id).

    The unit's user rules, and a P1 unit's sentences carrying values, are kept
    verbatim (:func:`~ctxsim.summarize.rules.must_keep_sentences`): the budget grows
    to hold them, so such a unit may stay at its size.
    """
    return _compress_texts([unit], [ratio], state, ctx)[0]


def _compress_texts(
    units: list[ContextUnit], ratios: list[float], state: ContextState, ctx: StrategyContext
) -> list[tuple[ContextUnit, Cost]]:
    """:func:`_compress_text` of each unit at its ratio, in order, with the same results;
    the summarizer sees them together (:meth:`~ctxsim.summarize.ExtractiveSummarizer.summarize_texts`)."""
    targets = [max(1, math.floor(u.token_count * r)) for u, r in zip(units, ratios)]
    task = ctx.query_for(state)
    results = ctx.summarizer.summarize_texts([(u.content, t, task, must_keep_sentences(u)) for u, t in zip(units, targets)])
    return [_compressed(u, t, result.text) for u, t, result in zip(units, targets, results)]


def _compressed(unit: ContextUnit, target: int, text: str) -> tuple[ContextUnit, Cost]:
    """``unit`` with ``text`` in place of its content, and the cost, when the text is
    shorter and not blank; else ``unit`` unchanged at no cost."""
    written = count_tokens(text)
    if not text.strip() or written >= unit.token_count:
        return unit, Cost()
    new = unit.with_content(text)
    return new, Cost.summary(unit.token_count, new.token_count, target - written) + Cost(units_touched=1)


def _kept_whole(unit: ContextUnit, drop_p1: bool = False) -> bool:
    """Units a selecting strategy of design 001 never drops: pinned, stating a user
    rule, or (unless ``drop_p1``) P1."""
    return is_protected(unit, keep_p1=not drop_p1, keep_rules=True)


def _truncated_body(fold: list[ContextUnit], tokens: int) -> str:
    """summarize_old's fallback body of about ``tokens`` tokens: what a summary of
    ``fold`` must carry (rules, earlier summaries' items; :func:`must_carry`) one item
    a line, then the most recent whole paragraphs of the span that fit the rest."""
    carried = "\n".join(item_lines(item) for items in must_carry(fold).values() for item in items)
    room = tokens - (count_tokens(carried + "\n\n") if carried else 0)
    cut = truncate_paragraphs("\n\n".join(u.content for u in fold), room, keep="tail") if room > 0 else ""
    return "\n\n".join(part for part in (carried, cut) if part.strip())


def _allowed(strategy_id: str, ctx: StrategyContext) -> bool:
    """False when the context's budget (design 003) excludes the strategy."""
    return ctx.budget is None or not ctx.budget.is_excluded(strategy_id)


def _required(strategy_id: str, ctx: StrategyContext) -> bool:
    """True when the context's budget (design 003) requires the strategy to run."""
    return ctx.budget is not None and ctx.budget.is_required(strategy_id)


def _with_history(new: ContextState, old: ContextState, strategy_id: str) -> ContextState:
    """``new`` with the history of ``old`` plus ``strategy_id`` (for composite strategies)."""
    return replace(new, history=old.history + (strategy_id,))


# ---- summarize_old ----------------------------------------------------------------


class SummarizeOldParams(Params):
    old_threshold: Share = 0.6
    summary_length: int = Field(300, gt=0)
    p1_ratio: Share = 0.7
    min_similarity: float = Field(0.7, ge=0, le=1)
    min_tokens: int = Field(40, ge=1)


@register
class SummarizeOld(Strategy):
    """Summarize old context (design 001, strategy 1): temporal compression.

    The first ``old_threshold`` (0.6) of the units, by count, are "old". Their
    non-pinned P2/P3 units (pointers and placeholders excepted: they are already
    small and carry artifact ids) are folded into ONE structured summary unit of
    about ``summary_length`` (300) tokens, placed where the first of them was; the
    summary is larger when the user rules of the span and what earlier summaries in
    it carried need more room (design 002: a summary of summaries carries forward
    what the previous one carried, so facts do not drift over cycles). Old
    P1 units are summarized less aggressively (seed: "summarizes non-P1 more
    aggressively"): each is compressed in place to ``p1_ratio`` (0.7) of its tokens,
    oldest first, only while the state is still over the target, and only when
    it has at least ``min_tokens`` (40) tokens; its user rules and its sentences
    carrying values are kept verbatim. Pinned units are never touched.

    The fold happens whenever the old P2/P3 units hold more than the summary would
    (seed semantics: the whole old span is summarized, even when less would fit).

    Fallback (seed's weird case, "if summary incoherent (similarity < 0.7)"): when the
    similarity of the context with the summary (design 001's check, the centroid
    measure :func:`ctxsim.coherence.centroid`: embedding cosine of the result vs
    the input, units weighted by tokens)
    is below ``min_similarity`` (0.7), the old span is truncated instead — the rules
    and carried items the summary had to hold, then its most recent whole
    paragraphs up to the summary's size (design 003's paragraph-boundary
    truncation) — and ``fallback`` is ``"truncate"``. (Comparing the summary with
    the span alone does not work with the default hashed TF-IDF embedder: a summary
    ~10x shorter than its span scores 0.3-0.7 on every generated scenario, so the
    fallback would replace nearly every summary. In context it scores 0.75-0.99,
    and drops under 0.7 when a large old span of unrelated content cannot be
    represented in ``summary_length`` tokens.)

    Unlike the seed's sketch, which returns null when the result is still over the
    limit, the partial progress is kept.
    """

    id = "summarize_old"
    display_name = "Summarizing old context"
    rank = RANK_SUMMARIZE
    phase = "summarize_old"
    seed = "001"
    summary = "Fold the old 60 % of units (P2/P3) into one ~300-token structured summary; old P1 compressed in place; truncate if the result is incoherent (< 0.7)."
    keeps_p1 = True
    Params = SummarizeOldParams

    def _fold(self, state: ContextState, ctx: StrategyContext) -> tuple[list[ContextUnit], int]:
        """(old units to fold, summary body tokens)."""
        p = self.params
        old = state.units[: _old_count(state, p.old_threshold)]
        fold = [u for u in old if not u.pinned and u.priority != 1 and u.type != "placeholder"]
        if not fold:
            return fold, p.summary_length
        # fold only when the summary (its header + body) is smaller than the span;
        # the header is measured on a one-token body ("x"); the body is at least
        # summary_length, so a span no larger than that needs no floor
        span, header = state.tokens_of(fold), state.unit_cost(summary_unit(fold, "x")) - 1
        if span <= header + p.summary_length:
            return [], p.summary_length
        length = max(p.summary_length, summary_floor(fold, ctx.query_for(state), 1))
        return (fold if span > header + length else []), length

    def _p1(self, state: ContextState, ctx: StrategyContext) -> list[ContextUnit]:
        """Old P1 units that may be compressed in place."""
        p = self.params
        old = state.units[: _old_count(state, p.old_threshold)]
        return [u for u in old if not u.pinned and u.priority == 1 and _shrinks(u, p.p1_ratio, p.min_tokens, ctx)]

    def applicable(self, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        ctx = ctx or StrategyContext()
        if self._fold(state, ctx)[0]:
            return True
        return not state.fits(ctx.target(state)) and bool(self._p1(state, ctx))

    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:
        p = self.params
        (fold, length), p1 = self._fold(state, ctx), self._p1(state, ctx)
        target = ctx.target(state)
        if not fold and (not p1 or state.fits(target)):
            return unchanged(state, "nothing old to summarize")
        units = list(state.units)
        cost, fallback, notes = Cost(), None, []
        if fold:
            summary, cost = summarize_units(state, fold, length, ctx)
            span = {u.id for u in fold}
            coh = centroid(state, state.with_units(replace_span(units, span, summary)), ctx.embedder_id)
            cost += Cost(embedded_units=len(state.units) + 1)
            notes.append(f"coherence with the summary {coh:.2f}")
            if coh < p.min_similarity:
                truncated = _truncated_body(fold, count_tokens(summary.content.split("\n", 1)[1]))
                if truncated.strip():
                    summary, fallback = summary_unit(fold, truncated, prefix="truncated"), "truncate"
            units = replace_span(units, span, summary)
        for unit in p1:
            if state.with_units(units).fits(target):
                break
            new, c = _compress_text(unit, p.p1_ratio, state, ctx)
            units = [new if u.id == unit.id else u for u in units]
            cost += c
        return Outcome(state.with_units(units, applied=self.id), cost, fallback, "; ".join(notes))


# ---- prioritize_recent --------------------------------------------------------------


class PrioritizeRecentParams(Params):
    rel_threshold: float = Field(0.5, ge=0)
    recent_bias: float = Field(0.2, ge=0, le=1)
    priority_boost: float = Field(1.5, ge=1)
    drop_p1: bool = False


@register
class PrioritizeRecent(Strategy):
    """Prioritize recent & key units (design 001, strategy 2): relevance-focused pruning.

    Every unit is scored by relevance to the current task (cosine to the task,
    max-normalized so the most relevant unit scores 1; P1 units multiplied by
    ``priority_boost``, 1.5). The last ``recent_bias`` (0.2) share of the units
    (rounded up) and pinned units are always kept, and so is every unit scoring at
    least ``rel_threshold`` (0.5). The others are dropped, least relevant first,
    until the state fits the target: ctxsim stops as soon as it fits, where the seed
    drops every unit under the threshold. P1 units are never dropped (design 001: the
    strategy "ensures P1 stays intact"); with ``drop_p1: true`` they are protected
    only by their boost, as in the seed's sketch (one that scores under the
    threshold even boosted can go). Units stating a user rule are never dropped.

    Weird case (seed: "if all units high-rel, force fresh start"): when no unit is
    under the threshold, the state is returned unchanged with the note
    "all units high-relevance: fresh start advised" (``applicable`` is then False).
    """

    id = "prioritize_recent"
    display_name = "Prioritizing P1 units & recent messages"
    rank = RANK_SELECT
    phase = "prioritize_recent"
    seed = "001"
    summary = "Drop units under 0.5 relevance to the task, least relevant first; keep P1, user rules and the last 20 %."
    keeps_p1 = True
    Params = PrioritizeRecentParams

    def _droppable(self, state: ContextState, ctx: StrategyContext) -> tuple[np.ndarray, Iterator[int], Cost]:
        """(the relevance scores; the positions of the droppable units, oldest first, found
        lazily; the scoring cost)."""
        p = self.params
        n = len(state.units)
        scores, cost = relevance_scores(state, state.units, ctx, p.priority_boost)
        pool = range(n - math.ceil(n * p.recent_bias))
        low = (i for i in pool if scores[i] < p.rel_threshold and not _kept_whole(state.units[i], p.drop_p1))
        return scores, low, cost

    def _candidates(self, state: ContextState, ctx: StrategyContext) -> tuple[list[ContextUnit], Cost]:
        """Droppable units, least relevant first (ties: oldest first), and the scoring cost."""
        scores, low, cost = self._droppable(state, ctx)
        return [state.units[i] for i in sorted(low, key=lambda i: (scores[i], i))], cost

    def applicable(self, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        # needs the relevance scores (embeddings are cached per text) and one droppable unit
        ctx = ctx or StrategyContext()
        return not state.fits(ctx.target(state)) and next(self._droppable(state, ctx)[1], None) is not None

    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:
        target = ctx.target(state)
        if state.fits(target):
            return unchanged(state, "already fits")
        candidates, cost = self._candidates(state, ctx)
        if not candidates:
            return Outcome(state, cost, None, "all units high-relevance: fresh start advised")
        kept, removed = remove_until(state, candidates, target)
        cost += Cost(units_touched=len(removed))
        note = f"dropped {len(removed)} low-relevance units"
        return Outcome(state.with_units(kept, applied=self.id), cost, None, note)


# ---- content_type_chunking -----------------------------------------------------------

#: compression class of each unit type; summaries and placeholders are never compressed
TYPE_CLASS = {
    "message": "text", "code": "code", "log": "log", "plan_ref": "plan_ref", "tool_result": "other", "other": "other",
}
DEFAULT_COMPRESS_RATIOS = {"code": 0.7, "text": 0.5, "log": 0.4, "plan_ref": 1.0, "other": 0.6}


class ContentTypeChunkingParams(Params):
    compress_ratios: dict[str, Share] = Field(dict(DEFAULT_COMPRESS_RATIOS), validate_default=True)
    min_tokens: int = Field(40, ge=1)

    @field_validator("compress_ratios")
    @classmethod
    def _known_classes(cls, ratios: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(ratios) - set(DEFAULT_COMPRESS_RATIOS))
        if unknown:
            raise ValueError(f"unknown content class {unknown}; valid: {sorted(DEFAULT_COMPRESS_RATIOS)}")
        return {**DEFAULT_COMPRESS_RATIOS, **ratios}


@register
class ContentTypeChunking(Strategy):
    """Content-type specific chunking (design 001, strategy 3): compress by type, in place.

    Each non-pinned unit is compressed according to its type's ratio in
    ``compress_ratios`` (code 0.7, text 0.5, log 0.4, plan_ref 1.0, other 0.6; a
    partial mapping is merged into these defaults). "text" is message units,
    "other" is tool results and other units; summaries and placeholders are left
    alone, and a ratio of 1.0 (plan_ref) keeps the type verbatim. Units keep their
    ids (compressed in place), so every P1 unit survives.

    * code: minified (:func:`minify_code`: comments, docstrings, blank lines and
      trailing spaces removed; strings and identifiers intact), never summarized;
      P1 code only loses comments, blank lines and trailing spaces;
    * log: repeated lines collapsed, then whole lines kept by severity (ERROR, then
      WARN, then the rest) up to ratio × tokens (:func:`compress_log`);
    * text and other: summarized to ratio × tokens by the extractive summarizer.

    P1 text and logs are compressed less: their ratio moves halfway to 1. Units under
    ``min_tokens`` (40) tokens are not summarized. Seed semantics: every unit is
    compressed, even when fewer would make the state fit.
    """

    id = "content_type_chunking"
    display_name = "Chunking code & plan references"
    rank = RANK_COMPRESS
    phase = "content_chunking"
    seed = "001"
    summary = "Compress each unit in place by type: minify code, keep plan refs verbatim, cut logs and text."
    keeps_p1 = True
    Params = ContentTypeChunkingParams

    def _ratio(self, unit: ContextUnit) -> float:
        ratio = self.params.compress_ratios[TYPE_CLASS[unit.type]]
        return (ratio + 1) / 2 if unit.priority == 1 and TYPE_CLASS[unit.type] != "code" else ratio

    def _cheap(self, unit: ContextUnit) -> str | None:
        """New content of a code or log unit (no summarizer needed), or None."""
        kind = TYPE_CLASS[unit.type]
        if kind == "code":
            return minify_code(unit.content, strip_docstrings=unit.priority != 1)
        if unit.token_count < self.params.min_tokens:
            return None
        return compress_log(unit.content, max(1, math.floor(unit.token_count * self._ratio(unit))))

    def _eligible(self, state: ContextState) -> list[ContextUnit]:
        return [u for u in state.units if not u.pinned and u.type in TYPE_CLASS and self._ratio(u) < 1]

    def _compresses(self, unit: ContextUnit, ctx: StrategyContext) -> bool:
        """Whether :meth:`run` changes ``unit`` (for text and other: whether it tries)."""
        if TYPE_CLASS[unit.type] in ("code", "log"):
            new = self._cheap(unit)
            return new is not None and count_tokens(new) < unit.token_count
        return _shrinks(unit, self._ratio(unit), self.params.min_tokens, ctx)

    def applicable(self, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        ctx = ctx or StrategyContext()
        # any unit that compresses; the answer is the same in any order, so the units
        # decided by their size alone (prose without must-keep sentences) go first and
        # a cold context's text is read only when none of them compresses
        by_size: list[ContextUnit] = []
        read: list[ContextUnit] = []
        for unit in self._eligible(state):
            prose = TYPE_CLASS[unit.type] not in ("code", "log")
            (by_size if prose and not may_keep_sentences(unit) else read).append(unit)
        return any(self._compresses(u, ctx) for u in by_size) or any(self._compresses(u, ctx) for u in read)

    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:
        changed: dict[str, ContextUnit] = {}
        cost = Cost()
        eligible = self._eligible(state)
        cheap = [TYPE_CLASS[u.type] in ("code", "log") for u in eligible]
        texts = [u for u, c in zip(eligible, cheap) if not c and _shrinks(u, self._ratio(u), self.params.min_tokens, ctx)]
        summaries = dict(zip((u.id for u in texts), _compress_texts(texts, [self._ratio(u) for u in texts], state, ctx)))
        for unit, is_cheap in zip(eligible, cheap):
            if is_cheap:
                text = self._cheap(unit)
                if text is not None and count_tokens(text) < unit.token_count:
                    changed[unit.id] = unit.with_content(text)
                    cost += Cost(counted_tokens=unit.token_count, units_touched=1)
            elif unit.id in summaries:
                new, c = summaries[unit.id]
                if new is not unit:
                    changed[unit.id] = new
                    cost += c
        if not changed:
            return unchanged(state, "nothing to compress")
        units = [changed.get(u.id, u) for u in state.units]
        return Outcome(state.with_units(units, applied=self.id), cost, None, f"compressed {len(changed)} units")


# ---- discard_low_rel ----------------------------------------------------------------

BRIEF_PLACEHOLDER = "[Omitted low-relevance prior context]"


class DiscardLowRelParams(Params):
    discard_percent: float = Field(0.3, ge=0, lt=1)
    placeholder_detail: Literal["brief", "linked"] = "brief"
    priority_boost: float = Field(1.5, ge=1)
    min_coherence: float = Field(0.6, ge=0, le=1)
    drop_p1: bool = False


@register
class DiscardLowRel(Strategy):
    """Discard low-relevance units (design 001, strategy 4): aggressive pruning.

    The bottom ``discard_percent`` (0.3) of the droppable units by relevance to
    the task are removed: ``n - ceil(n × 0.7)`` of the n droppable units (with the
    default share none when n < 4: ``applicable`` is then False). Pinned units and
    units stating a user rule are not droppable, nor are P1 units (design 001: P1 is
    "must keep"; "breaking prioritizes P1 units") unless ``drop_p1: true``: then, as
    in the seed's sketch, P1 scores are multiplied by ``priority_boost`` (1.5, seed
    001's ``computeRelevance``) and P1 units can be discarded.
    Seed semantics: the whole share goes, even when less would fit. ONE
    placeholder unit (type placeholder, role assistant) takes the place of the
    first discarded unit: its text is
    "[Omitted low-relevance prior context]" (``placeholder_detail: brief``) or
    "[Omitted – see archive: <ids>]" listing the original ids (``linked``). The
    placeholder is left out when it would cost more tokens than what it replaces.

    Fallback (seed's weird case): when the similarity of the result with the input
    (the centroid measure :func:`ctxsim.coherence.centroid`, units weighted by tokens) is below
    ``min_coherence`` (0.6), the discard is undone and ``summarize_old`` (default
    parameters) is applied to the input instead; ``fallback`` is "summarize_old".
    When summarize_old cannot run (or the budget excludes it), the discard is kept
    (with a note).
    """

    id = "discard_low_rel"
    display_name = "Removing low-relevance units"
    rank = RANK_SELECT
    phase = "discard_low_rel"
    seed = "001"
    summary = "Discard the 30 % least relevant units (never P1 or user rules) behind one placeholder; undo and summarize if coherence < 0.6."
    keeps_p1 = True
    Params = DiscardLowRelParams

    def _discarded(self, droppable: int) -> int:
        """How many of ``droppable`` units go (never fewer for more units)."""
        return droppable - math.ceil(droppable * (1 - self.params.discard_percent))

    def _count(self, state: ContextState) -> int:
        return self._discarded(sum(not _kept_whole(u, self.params.drop_p1) for u in state.units))

    def applicable(self, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        # _count(state) > 0: as the count discarded never falls when droppable units are
        # added, counting stops once it is positive; the units that cannot state a user
        # rule are counted first, so rules are read only when they do not suffice
        droppable = 0
        for unit in sorted(state.units, key=may_state_rule):
            if not _kept_whole(unit, self.params.drop_p1):
                droppable += 1
                if self._discarded(droppable) > 0:
                    return True
        return False

    def _placeholder(self, discarded: list[ContextUnit]) -> ContextUnit:
        ids = source_ids_of(discarded)
        brief = self.params.placeholder_detail == "brief"
        text = BRIEF_PLACEHOLDER if brief else f"[Omitted – see archive: {', '.join(ids)}]"
        return ContextUnit(
            id=synthetic_id("omitted", discarded),
            type="placeholder",
            role="assistant",
            content=text,
            turn=discarded[0].turn,
            timestamp=discarded[-1].timestamp,
            priority=3,
            source_ids=ids,
        )

    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:
        k = self._count(state)
        if k <= 0:
            return unchanged(state, "too few units to discard")
        pool = [u for u in state.units if not _kept_whole(u, self.params.drop_p1)]
        scores, cost = relevance_scores(state, pool, ctx, self.params.priority_boost)
        order = sorted(range(len(pool)), key=lambda i: (scores[i], i))[:k]
        discarded = [pool[i] for i in sorted(order)]
        placeholder = self._placeholder(discarded)
        if state.unit_cost(placeholder) >= state.tokens_of(discarded):
            placeholder = None
        new = state.with_units(replace_span(state.units, {u.id for u in discarded}, placeholder), applied=self.id)
        coh = centroid(state, new, ctx.embedder_id)
        cost += Cost(embedded_units=1, units_touched=k)
        note = f"discarded {k} units; coherence {coh:.2f}"
        if coh < self.params.min_coherence:
            fallback = SummarizeOld()
            if _allowed(fallback.id, ctx) and ctx.step_applicable(fallback, state):
                out = ctx.apply_step(fallback, state)
                undone = _with_history(out.state, state, self.id)
                return Outcome(undone, cost + out.cost, "summarize_old", note + "; undone")
            note += " (low, but summarize_old cannot run or is excluded: discard kept)"
        return Outcome(new, cost, None, note)


# ---- hybrid ---------------------------------------------------------------------------

SEED_HYBRID_CHAIN = ("summarize_old", "prioritize_recent", "content_type_chunking", "discard_low_rel")


class HybridParams(Params):
    chain: tuple[str, ...] = Field(SEED_HYBRID_CHAIN, min_length=1)
    max_iterations: int = Field(3, ge=1)

    @field_validator("chain")
    @classmethod
    def _registered(cls, chain: tuple[str, ...]) -> tuple[str, ...]:
        for sid in chain:
            try:
                strategy_cls = strategy_class(sid)
            except StrategyError as exc:
                raise ValueError(str(exc)) from None
            if sid == Hybrid.id or strategy_cls.recovery:
                raise ValueError(f"'{sid}' cannot be part of the hybrid chain (recovery or hybrid itself)")
        return chain


@register
class Hybrid(Strategy):
    """Hybrid (design 001, strategy 5): the breaking chain as one composite action.

    Applies the strategies of ``chain`` (default: summarize_old, prioritize_recent,
    content_type_chunking, discard_low_rel, each with its default parameters) in
    order, each to the result of the previous one, skipping those not applicable,
    running at most ``max_iterations`` (3) of them and stopping as soon as the
    state fits the target (so nothing runs when it already fits). Steps the
    context's budget excludes (design 003) are skipped too; strategies it requires are
    never skipped: each runs when applicable, even once the state fits or
    ``max_iterations`` steps have run (design 003's ``RequiredStrategies``); required
    strategies the chain does not name run after it, highest ``priority`` first
    (recovery modes and hybrid itself excepted). The chain may name
    any registered strategy except recovery modes and hybrid itself. The cost is
    the sum of the steps' costs; the history gets one entry, "hybrid", and the note
    lists the steps. Partial progress is kept when the chain ends over the target
    (the seed's ``breakContext`` then hands over to recovery).
    """

    id = "hybrid"
    display_name = "Applying hybrid compression"
    rank = RANK_SUMMARIZE
    phase = "hybrid"
    seed = "001"
    summary = "Seed 001's chain (summarize, prioritize, chunk, discard) until it fits, at most 3 steps."
    keeps_p1 = False
    Params = HybridParams

    def __init__(self, **params):
        super().__init__(**params)
        self.steps = tuple(get_strategy(sid) for sid in self.params.chain)

    def _steps(self, ctx: StrategyContext) -> tuple[Strategy, ...]:
        """The chain, then the budget's required strategies it does not name (by priority)."""
        if ctx.budget is None:
            return self.steps
        extra = [strategy_class(sid) for sid in ctx.budget.required if sid not in self.params.chain]
        extra = [cls for cls in extra if not cls.recovery and cls.id != self.id]
        return self.steps + tuple(cls() for cls in sorted(extra, key=lambda c: (-c.priority, c.id)))

    def applicable(self, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        ctx = ctx or StrategyContext()
        return any(
            _allowed(s.id, ctx) and (_required(s.id, ctx) or not state.fits(ctx.target(state)))
            and ctx.step_applicable(s, state)
            for s in self._steps(ctx)
        )

    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:
        target = ctx.target(state)
        current, cost, ran, fallbacks = state, Cost(), [], []
        for step in self._steps(ctx):
            done = current.fits(target) or len(ran) >= self.params.max_iterations
            if done and not _required(step.id, ctx):
                continue
            if not _allowed(step.id, ctx) or not ctx.step_applicable(step, current):
                continue
            result = ctx.apply_step(step, current)
            current, cost = result.state, cost + result.cost
            ran.append(step.id)
            if result.fallback:
                fallbacks.append(f"{step.id}: {result.fallback}")
        if current is state:
            return unchanged(state, "no step of the chain applies" if not state.fits(target) else "already fits")
        note = " → ".join(ran)
        return Outcome(_with_history(current, state, self.id), cost, "; ".join(fallbacks) or None, note)
