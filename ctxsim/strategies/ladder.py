"""Design 002's compaction ladder: externalize, clear tool results, drop.

(Design 002's summarize rung is ``summarize_old`` in :mod:`.seed001` and the generic
summarizers of the other families.) The rungs, least to most aggressive:

* ``externalize`` moves large spans to the state's artifact store and leaves a
  pointer with a short structured summary (``read_artifact`` gives them back);
* ``clear_tool_results`` replaces old tool results by their envelope's placeholder,
  following the durability rules (non-replayable results are externalized, never
  cleared);
* ``drop`` removes the oldest units and indexes what it dropped.

Every rung keeps the most recent units (for ``clear_tool_results``: the most
recent tool results), never touches pinned or P1 units, and stops as soon as the
state fits the target. ``externalize`` and ``drop`` are the
aggressive rungs design 002 skips on a turn that rehydrated (``ctx.skip_aggressive``).
All sizes are cl100k tokens.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from typing import Iterator, Sequence

from pydantic import Field

from ..latency import Cost
from ..model import SENSITIVITIES, Artifact, ContextState, ContextUnit, DroppedSpan, content_hash
from ..relevance.hashed import tokenize
from ..sentences import split_sentences
from ..tokens import message_overhead
from .base import (
    RANK_CLEAR,
    RANK_DROP,
    RANK_EXTERNALIZE,
    Outcome,
    Params,
    Strategy,
    StrategyContext,
    any_unprotected,
    is_protected,
    unchanged,
)
from .common import fewer_tokens, remove_until, replace_span, source_ids_of, synthetic_id, truncate_paragraphs
from .registry import register

#: unit types a contiguous run of which may be externalized together
BULK_TYPES = ("tool_result", "code", "log")
#: tokens of the summary inside an externalization pointer
POINTER_SUMMARY_TOKENS = 100


def _render(span: Sequence[ContextUnit]) -> str:
    """The span as the renderer shows it (``ContextState.render``'s form)."""
    return "\n\n".join(f"{u.role}: {u.content}" for u in span)


def artifact_id(span: Sequence[ContextUnit]) -> str:
    """Deterministic id of the artifact holding ``span`` ("art-" + 12 hex digits)."""
    return "art-" + content_hash("\x00".join(u.id for u in span) + "\x01" + _render(span))[:12]


def rehydrate_hint(span: Sequence[ContextUnit]) -> str:
    """When the agent should read the artifact back (design 002's rehydrate_hint)."""
    calls = [f"{u.tool.tool_name}({u.tool.target})" if u.tool.target else u.tool.tool_name for u in span if u.tool]
    if calls:
        shown = ", ".join(dict.fromkeys(calls[:3]))
        return f"read if you need the full output of {shown}" + (" and more" if len(calls) > 3 else "")
    kinds = ", ".join(dict.fromkeys(u.type for u in span))
    first, last = min(u.turn for u in span), max(u.turn for u in span)
    return f"read if you need the full {kinds} of turns {first}-{last}"


def _pointer_text(art_id: str, summary: str, hint: str) -> str:
    """Design 002's externalization format, plus the rehydrate hint."""
    return (
        f"[Externalized Content - artifact:{art_id}]\n"
        f"Summary: {summary}\n"
        f'To retrieve full content, call: read_artifact("{art_id}")\n'
        f"Rehydrate hint: {hint}"
    )


def pointer_saves(state: ContextState, span: Sequence[ContextUnit], summary_tokens: int) -> bool:
    """True when a pointer (with a summary of at most ``summary_tokens``) costs less
    than the span it replaces (cheap: no summary is made)."""
    skeleton = _pointer_text(artifact_id(span), "", rehydrate_hint(span))
    # the pointer unit costs its text's tokens plus the message framing
    return fewer_tokens(skeleton, state.tokens_of(span) - summary_tokens - message_overhead(state.message_format))


def sensitivity_of(span: Sequence[ContextUnit]) -> str:
    """The most sensitive level among the units' ``meta["sensitivity"]`` (default "internal")."""
    levels = [u.meta_dict.get("sensitivity", "internal") for u in span]
    return max(levels, key=lambda s: SENSITIVITIES.index(s) if s in SENSITIVITIES else len(SENSITIVITIES))


def externalize_span(
    span: Sequence[ContextUnit], ctx: StrategyContext, summary_tokens: int
) -> tuple[ContextUnit, Artifact, Cost]:
    """The pointer unit and the artifact for ``span``, and what making them cost.

    The artifact holds the span exactly as rendered (``role: content`` blocks
    joined by blank lines); the pointer (role assistant, type placeholder) holds a
    structured summary of at most ``summary_tokens`` tokens, lists the span's
    original ids in ``source_ids`` and carries the artifact id, description and
    rehydrate hint in ``meta`` (so a summary that folds the pointer keeps the
    artifact reference).
    """
    art_id = artifact_id(span)
    depth = max(u.summary_depth for u in span)
    # no task: a pointer describes its own content (the task line would repeat in every pointer)
    result = ctx.summarizer.summarize_units(span, summary_tokens, task="", depth=depth)
    hint = rehydrate_hint(span)
    ids = source_ids_of(span)
    kinds = ", ".join(dict.fromkeys(u.type for u in span))
    description = f"{len(span)} unit(s): {kinds}, turns {span[0].turn}-{span[-1].turn}"
    pointer = ContextUnit(
        id=synthetic_id("ext", span),
        type="placeholder",
        role="assistant",
        content=_pointer_text(art_id, result.text, hint),
        turn=span[0].turn,
        timestamp=span[-1].timestamp,
        priority=min(u.priority for u in span),
        source_ids=ids,
        summary_depth=depth + 1,
        # read by the summarizer: a pointer folded into a summary becomes an artifact reference
        meta=(("artifact_id", art_id), ("description", description), ("rehydrate_hint", hint)),
    )
    artifact = Artifact(id=art_id, content=_render(span), source_ids=ids, description=description,
                        sensitivity=sensitivity_of(span))
    cost = Cost.summary(result.input_tokens, result.token_count, summary_tokens - result.token_count)
    cost += Cost(artifact_writes=1, units_touched=len(span))
    return pointer, artifact, cost


def _externalizable(unit: ContextUnit) -> bool:
    return not unit.pinned and unit.priority != 1 and unit.type != "placeholder"


def _non_replayable(unit: ContextUnit) -> bool:
    return unit.tool is not None and unit.tool.durability == "non_replayable"


# ---- externalize ----------------------------------------------------------------------


class ExternalizeParams(Params):
    threshold_tokens: int = Field(1000, gt=0)
    min_span_tokens: int = Field(1000, gt=0)
    preserve_recent: int = Field(3, ge=0)
    summary_tokens: int = Field(POINTER_SUMMARY_TOKENS, gt=0)


@register
class Externalize(Strategy):
    """Externalize (design 002, first rung): large content to the artifact store.

    Candidate spans, outside the last ``preserve_recent`` (3) units and never
    pinned, P1 or placeholder units:

    * one unit of at least ``threshold_tokens`` (1000; design 002's
      ``externalize_threshold_tokens``);
    * a contiguous run of two or more tool_result/code/log units holding together
      at least ``min_span_tokens`` (1000: a pointer costs ~150 tokens, so a span
      this size saves ~85%);
    * any non-replayable tool result (design 002: "must externalize or keep").

    Non-replayable results go first, then the largest spans, until the state
    fits the target; a span whose pointer would not be smaller is skipped. Each
    span becomes an :class:`~ctxsim.model.Artifact` in ``state.artifacts`` and a
    pointer unit (role assistant, type placeholder) where its first unit was::

        [Externalized Content - artifact:art-…]
        Summary: <structured summary of at most summary_tokens (100) tokens>
        To retrieve full content, call: read_artifact("art-…")
        Rehydrate hint: read if you need the full output of read_file(/srv/app.py)

    ``state.read_artifact(id)`` returns the span exactly as rendered. Nothing
    happens on a turn that rehydrated (``ctx.skip_aggressive``).
    """

    id = "externalize"
    display_name = "Externalizing large content"
    rank = RANK_EXTERNALIZE
    phase = "externalize"
    seed = "002"
    summary = "Move large spans (≥1000 tokens) and non-replayable tool results to artifacts behind pointers (`read_artifact` returns the original)."
    keeps_p1 = True
    Params = ExternalizeParams

    def _candidates(self, state: ContextState) -> list[list[ContextUnit]]:
        """Candidate spans before their pointers are priced, in the order of their units."""
        p = self.params
        spans: list[list[ContextUnit]] = []

        def single(unit: ContextUnit) -> None:
            if unit.token_count >= p.threshold_tokens or _non_replayable(unit):
                spans.append([unit])

        def flush(run: list[ContextUnit]) -> None:
            if len(run) >= 2 and sum(u.token_count for u in run) >= p.min_span_tokens:
                spans.append(list(run))
            else:
                for unit in run:
                    single(unit)
            run.clear()

        run: list[ContextUnit] = []
        for unit in state.units[: max(0, len(state.units) - p.preserve_recent)]:
            if _externalizable(unit) and unit.type in BULK_TYPES:
                run.append(unit)
                continue
            flush(run)
            if _externalizable(unit):
                single(unit)
        flush(run)
        return spans

    def spans(self, state: ContextState) -> list[list[ContextUnit]]:
        """Candidate spans whose pointer saves tokens, in the order they are externalized (cheap)."""
        spans = [s for s in self._candidates(state) if pointer_saves(state, s, self.params.summary_tokens)]
        spans.sort(key=lambda s: (not any(map(_non_replayable, s)), -state.tokens_of(s), state.position(s[0].id)))
        return spans

    def applicable(self, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        # bool(self.spans(state)), stopping at the first span that saves
        ctx = ctx or StrategyContext()
        return (not ctx.skip_aggressive and not state.fits(ctx.target(state))
                and any(pointer_saves(state, s, self.params.summary_tokens) for s in self._candidates(state)))

    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:
        if ctx.skip_aggressive:
            return unchanged(state, "rehydration this turn: no aggressive compaction")
        target = ctx.target(state)
        current, cost = state, Cost()
        for span in self.spans(state):
            if current.fits(target):
                break
            pointer, artifact, c = externalize_span(span, ctx, self.params.summary_tokens)
            current = current.with_units(
                replace_span(current.units, {u.id for u in span}, pointer), artifacts=current.artifacts + (artifact,)
            )
            cost += c
        if current is state:
            return unchanged(state, "nothing to externalize" if not state.fits(target) else "already fits")
        new = state.with_units(current.units, applied=self.id, artifacts=current.artifacts)
        return Outcome(new, cost, None, f"{len(new.artifacts) - len(state.artifacts)} artifact(s) written")


# ---- clear_tool_results ---------------------------------------------------------------


class ClearToolResultsParams(Params):
    keep_recent: int = Field(3, ge=0)
    summary_tokens: int = Field(POINTER_SUMMARY_TOKENS, gt=0)


def replay_still_valid(state: ContextState, unit: ContextUnit) -> bool:
    """Design 002's determinism check for a replayable result.

    Valid when the result has a target and a determinism hash and every later tool
    result on the same target (a write, or a read) carries the same hash. Without a
    target or hash it cannot be verified, which counts as changed (fail safe).
    """
    tool = unit.tool
    if tool is None or not tool.target or not tool.determinism_hash:
        return False
    later = state.units[state.position(unit.id) + 1 :]
    same_target = [u.tool for u in later if u.tool and u.tool.target == tool.target]
    return all(other.determinism_hash == tool.determinism_hash for other in same_target)


@register
class ClearToolResults(Strategy):
    """Clear tool results (design 002, third rung) by their durability class.

    Old tool results (units with a tool envelope; the last ``keep_recent`` (3) tool
    results, pinned and P1 units are kept) are handled oldest first until the state
    fits the target:

    * ephemeral: cleared to the envelope's placeholder (``[tool: outcome]``);
    * anchoring: cleared to the same placeholder, which keeps the key fields and
      the error message;
    * replayable: cleared only while :func:`replay_still_valid` (no later write or
      read of the same target with another determinism hash); otherwise handled as
      non-replayable;
    * non-replayable: never cleared; externalized like ``externalize`` does (an
      artifact plus a pointer with a summary of at most ``summary_tokens``), except
      on a turn that rehydrated (``ctx.skip_aggressive``), when it is kept.

    A cleared unit keeps its id (compressed in place); a result whose placeholder
    or pointer would not be smaller is left as it is.
    """

    id = "clear_tool_results"
    display_name = "Clearing old tool results"
    rank = RANK_CLEAR
    phase = "clear_tool_results"
    seed = "002"
    summary = "Replace old tool results with placeholders by durability (ephemeral, anchoring with key fields, replayable while unchanged); externalize non-replayable ones."
    keeps_p1 = True
    Params = ClearToolResultsParams

    def _actions(self, state: ContextState, ctx: StrategyContext) -> Iterator[tuple[str, ContextUnit]]:
        """("clear" | "externalize", unit) for every result that can be reduced, oldest first
        (found lazily: ``applicable`` stops at the first)."""
        results = [u for u in state.units if u.tool is not None and u.type != "placeholder"]
        old = results[: max(0, len(results) - self.params.keep_recent)]
        for unit in old:
            if unit.pinned or unit.priority == 1:
                continue
            durability = unit.tool.durability
            if durability == "replayable" and not replay_still_valid(state, unit):
                durability = "non_replayable"
            if durability != "non_replayable":
                if fewer_tokens(unit.tool.placeholder(), unit.token_count):
                    yield "clear", unit
            elif not ctx.skip_aggressive and pointer_saves(state, [unit], self.params.summary_tokens):
                yield "externalize", unit

    def applicable(self, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        ctx = ctx or StrategyContext()
        return not state.fits(ctx.target(state)) and next(self._actions(state, ctx), None) is not None

    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:
        target = ctx.target(state)
        current, cost, cleared = state, Cost(), 0
        for action, unit in self._actions(state, ctx):
            if current.fits(target):
                break
            if action == "clear":
                new = unit.with_content(unit.tool.placeholder())
                current = current.with_units(new if u.id == unit.id else u for u in current.units)
                cost += Cost(units_touched=1)
                cleared += 1
            else:
                pointer, artifact, c = externalize_span([unit], ctx, self.params.summary_tokens)
                current = current.with_units(
                    replace_span(current.units, {unit.id}, pointer), artifacts=current.artifacts + (artifact,)
                )
                cost += c
        if current is state:
            return unchanged(state, "no tool result to clear" if not state.fits(target) else "already fits")
        new = state.with_units(current.units, applied=self.id, artifacts=current.artifacts)
        note = f"cleared {cleared}, externalized {len(new.artifacts) - len(state.artifacts)}"
        return Outcome(new, cost, None, note)


# ---- drop -------------------------------------------------------------------------------


class DropParams(Params):
    drop_p1: bool = False
    preserve_recent: int = Field(3, ge=0)
    keywords: int = Field(8, ge=1)


def keywords(text: str, n: int) -> tuple[str, ...]:
    """The ``n`` most frequent non-stop-words of ``text`` (ties: first seen first)."""
    return _most_frequent(tokenize(text), n)


@lru_cache(maxsize=16_384)
def _words(content: str) -> tuple[str, ...]:
    """:func:`~ctxsim.relevance.hashed.tokenize` of one unit's content (a unit is dropped
    in many states of a context, in runs with different neighbours)."""
    return tuple(tokenize(content))


def _most_frequent(words: Sequence[str], n: int) -> tuple[str, ...]:
    """The ``n`` most frequent of ``words`` (ties: first seen first)."""
    counts = Counter(words)
    first = {w: i for i, w in reversed(list(enumerate(words)))}
    return tuple(sorted(counts, key=lambda w: (-counts[w], first[w]))[:n])


def first_sentence(text: str, max_tokens: int = 60) -> str:
    """The first sentence of ``text``, cut to ``max_tokens`` tokens at a word boundary."""
    sentences = split_sentences(text)
    return truncate_paragraphs(sentences[0], max_tokens) if sentences else ""


def dropped_span(run: Sequence[ContextUnit], n_keywords: int, strategy: str) -> DroppedSpan:
    """Design 002's dropped-span index entry for a run of dropped units."""
    # the keywords of the run's text, its units joined by blank lines: no word spans a
    # blank line, so its words are the units' own, one unit after the other
    return DroppedSpan(
        source_ids=source_ids_of(run),
        keywords=_most_frequent([word for unit in run for word in _words(unit.content)], n_keywords),
        summary=first_sentence(run[0].content),
        strategy=strategy,
    )


@register
class Drop(Strategy):
    """Drop (design 002, last rung): remove units from the prompt entirely.

    Removes the oldest non-pinned units, every P3 unit before any P2 unit (and P1
    units only with ``drop_p1``, last), keeping the last ``preserve_recent`` (3)
    units and every unit that states a user rule, until the state fits the target. Each run of adjacent dropped units is
    recorded in ``state.dropped`` as one :class:`~ctxsim.model.DroppedSpan` (seed
    002's dropped-span index: original ids, the ``keywords`` (8) most frequent
    non-stop-words, the first sentence as summary, strategy "drop") so that recall
    can be added later. Nothing happens on a turn that rehydrated
    (``ctx.skip_aggressive``). ``keeps_p1`` holds for the default ``drop_p1=False``.
    """

    id = "drop"
    display_name = "Dropping oldest context"
    rank = RANK_DROP
    phase = "drop"
    seed = "002"
    summary = "Last resort: remove the oldest P3 then P2 units (user rules stay) until it fits, indexing what was dropped."
    keeps_p1 = True
    Params = DropParams

    def _pool(self, state: ContextState) -> tuple[ContextUnit, ...]:
        """The units before the ``preserve_recent`` last ones."""
        return state.units[: max(0, len(state.units) - self.params.preserve_recent)]

    def _order(self, state: ContextState) -> list[ContextUnit]:
        keep_p1 = not self.params.drop_p1
        order = [u for u in self._pool(state) if not is_protected(u, keep_p1=keep_p1, keep_rules=True)]
        return sorted(order, key=lambda u: (-u.priority, state.position(u.id)))

    def applicable(self, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        # bool(self._order(state)), without the sort and reading rules last
        ctx = ctx or StrategyContext()
        return (not ctx.skip_aggressive and not state.fits(ctx.target(state))
                and any_unprotected(self._pool(state), keep_p1=not self.params.drop_p1))

    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:
        if ctx.skip_aggressive:
            return unchanged(state, "rehydration this turn: no aggressive compaction")
        target = ctx.target(state)
        if state.fits(target):
            return unchanged(state, "already fits")
        kept, removed = remove_until(state, self._order(state), target)
        if not removed:
            return unchanged(state, "nothing to drop")
        positions = sorted(state.position(u.id) for u in removed)
        runs: list[list[ContextUnit]] = []
        for pos in positions:
            if runs and state.position(runs[-1][-1].id) == pos - 1:
                runs[-1].append(state.units[pos])
            else:
                runs.append([state.units[pos]])
        spans = tuple(dropped_span(run, self.params.keywords, self.id) for run in runs)
        new = state.with_units(kept, applied=self.id, dropped=state.dropped + spans)
        note = f"dropped {len(removed)} units in {len(runs)} span(s)"
        return Outcome(new, Cost(units_touched=len(removed)), None, note)
