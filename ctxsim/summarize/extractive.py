"""The default summarizer: extractive, structured, deterministic, no model call.

Every item of a summary is a verbatim sentence of the input (or a prefix of one,
cut at a word boundary, to fill the budget), so planted values survive intact.

How ``summarize_units`` builds a :class:`StructuredSummary`:

1. Candidates. Each unit's text is split into sentences
   (:func:`~ctxsim.sentences.segments`; code and log units line by
   line; a leading bullet marker is dropped) and each sentence gets a section:
   *rules* (a sentence of a user or system message, or of a summary, that
   speaks of a rule: :func:`~ctxsim.summarize.rules.mentions_rule`, design 004),
   *decisions* (decided/chose/will use/agreed/going with), *open items*
   (TODO/``[ ]``/next/pending/blocked, and every sentence of a ``plan_ref``
   unit), *facts* (prose holding a number, amount, date, path, file name, URL,
   version, id, quoted string or name), else *notes* ("Context"). A unit with a
   :class:`~ctxsim.model.ToolEnvelope` adds a tool outcome; a pointer unit (meta
   ``artifact_id``; optional ``description``, ``rehydrate_hint``) adds an artifact
   instead of its text. A summary unit is parsed and its items are carried into
   the same sections, so rules and facts survive summaries of summaries. A unit's
   candidates, with their texts, token counts and line word bounds
   (:class:`UnitColumns`), are worked out once per distinct content, type, role,
   tool envelope and meta
   (:func:`unit_items`), each sentence is classified once (:func:`classify`, each
   pattern searched at most once, a keyword pattern only when one of its words is
   there): the same unit seen in many states costs one lookup.
2. Scores. ``0.6·centrality + 0.4·relevance to task + 0.1·recency``, where
   centrality is the cosine to the token-weighted centroid of all candidates
   (embedder similarities), times the unit's priority weight (P1 or pinned 1.5,
   P3 0.75).
3. Order. Rules first (instructions, :func:`~ctxsim.summarize.rules.is_user_rule`,
   none from a quoted demonstration,
   and every rule an earlier summary carried, before the others), then the
   structured items an earlier summary carried (design 002: a summary of summaries
   carries forward what the previous one carried), then every candidate holding a
   fact marker (facts, and decisions, open items, tool outcomes and artifacts
   with values), then the rest; within each tier by maximal marginal relevance
   (``λ·score − (1−λ)·max similarity to those ranked before``), which keeps
   near-duplicates out (the similarities among a tier's few hundred candidates come
   from one join, :data:`GRAM_MEMBERS`). :func:`must_carry` lists what a summary needs room for
   so that nothing of the first two tiers is cut (strategies size their budget
   with it).
4. Budget. :func:`~ctxsim.summarize.structured.fit_summary` takes the ranked
   candidates greedily under ``target_tokens`` and fills the remainder with a
   partial sentence; the rendering never exceeds the target and, when the input
   holds enough material, reaches 95 % of it. The growing summary is counted from
   the memoized counts of its lines, never re-encoded
   (:func:`~ctxsim.summarize.structured.summary_tokens`), and so is the result; a
   candidate whose word count cannot fit is not priced, nor even built: the fit
   reads the word bounds (an array) first, and a :class:`Candidate` is made only
   for those that may fit (:class:`RankedCandidates`). A plain
   sentence's line is priced from the sentence's own count (ranking counted it),
   not encoded again, and so is a sentence after a space in a text summary
   (:func:`~ctxsim.tokens.count_spaced`).

Results are cached (see :mod:`ctxsim.summarize.structured`) under a sha256 of the
units and every parameter and version that shapes the output.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from functools import lru_cache, partial
from itertools import repeat
from typing import NamedTuple

import numpy as np

from ..errors import StrategyError, describe_value
from ..model import ContextUnit, ToolEnvelope
from ..relevance import DEFAULT_EMBEDDER, Embedder, RowSimilarity, embed_blocks, embed_sparse, get_embedder
from ..tokens import count_joined, count_spaced, count_tokens
from .small_mmr import SMALL_GROUP, small_mmr
from .rules import has_value, in_spans, is_user_rule, may_hold, mentions_rule, quoted
from ..sentences import is_fence_line, segments
from .structured import (
    SUMMARY_CACHE,
    SUMMARY_RENDER_VERSION,
    ArtifactRef,
    Candidate,
    StructuredSummary,
    SummaryResult,
    SummarySpan,
    ToolOutcome,
    line_words,
    cache_key,
    cached,
    cut_within,
    fit_candidates,
    fit_summary,
    parse_summary,
    prefix_within,
    rendered_tokens,
)

SUMMARIZER_VERSION = "extractive-2"
FILL_RATIO = 0.95
PRIORITY_WEIGHT = {1: 1.5, 2: 1.0, 3: 0.75}
#: rank tier of the structured items an earlier summary carried (after rules, before new facts)
CARRIED_TIER = 0.75
#: MMR gets the similarities among a tier's candidates in one join before ranking them
#: when they are at most GRAM_MEMBERS and the tokens left to rank are expected to pick
#: at least 1/PICKED_SHARE of them (never the pairs across tiers, which MMR does not
#: read, nor a tier the budget does not reach); otherwise one row per pick. Either way
#: the numbers (and the summary) are the same (:meth:`~ctxsim.relevance.RowSimilarity.among`).
GRAM_MEMBERS = 256
PICKED_SHARE = 4
#: sections a summary of summaries carries forward whole (design 002's core sections; not the task, not notes)
CARRIED_SECTIONS = ("rules", "facts", "decisions", "open_items", "tool_outcomes", "artifacts")

DECISION_WORDS = ("decided", "decide to", "chose", "chosen", "choose to", "will use", "agreed", "going with", "opted",
                  "settled on")
#: a heading: markdown ``#``, or a line wholly in bold
HEADING = re.compile(r"\s*(?:#{1,6}\s|\*\*[^*]+\*\*\s*$|__[^_]+__\s*$)")
#: the colon that ends a lead-in (and the emphasis after it)
LEAD_IN = re.compile(r":[*_\s]*$")
DECISION = re.compile(rf"\b(?:{'|'.join(DECISION_WORDS)})\b", re.I)
OPEN_ITEM = re.compile(r"\bTODO\b|\bFIXME\b|\[ \]|\b(?:next|pending|blocked)\b", re.IGNORECASE)
#: every match of ``OPEN_ITEM`` holds one of these (in some case)
OPEN_ITEM_WORDS = ("todo", "fixme", "[ ]", "next", "pending", "blocked")

_BULLET_MARKS = "-*•+"
_BULLET = re.compile(rf"^[{_BULLET_MARKS}]\s+")


class ExtractiveSummarizer:
    """Structured extractive summaries under an exact token budget (see module doc).

    ``embedder_id`` names the embedder used for centrality, relevance to the task
    and redundancy; ``mmr_lambda`` trades score against redundancy (1 = none).
    """

    kind = "extractive"

    def __init__(self, embedder_id: str = DEFAULT_EMBEDDER, *, mmr_lambda: float = 0.7):
        if not 0.0 <= mmr_lambda <= 1.0:
            raise StrategyError(f"mmr_lambda must be in [0, 1], got {describe_value(mmr_lambda)}", key="mmr_lambda")
        self.embedder_id = embedder_id
        self.mmr_lambda = mmr_lambda
        self._params = (SUMMARIZER_VERSION, SUMMARY_RENDER_VERSION, embedder_id, mmr_lambda)

    @property
    def embedder(self) -> Embedder:
        return get_embedder(self.embedder_id)

    # ---- public API -----------------------------------------------------------
    def summarize_units(
        self, units: Sequence[ContextUnit], target_tokens: int, *, task: str = "", depth: int = 0
    ) -> SummaryResult:
        """A structured summary of ``units`` of at most ``target_tokens`` tokens.

        ``task`` is the current task (rendered, and used for relevance); ``depth``
        the summary depth of the input (rendered in the header when > 0). When the
        input is smaller than the target the summary is no larger than the input.
        """
        check_target(target_tokens)
        units = tuple(units)
        if not units:
            raise StrategyError("summarize_units needs at least one unit", key="units")
        # a unit by its fingerprint: every field, hashed once per unit object (its text is not read again)
        key = cache_key("units", *self._params, target_tokens, task, depth, *(u.fingerprint for u in units))
        return cached(key, lambda: self._summarize_units(units, target_tokens, task, depth))

    def summarize_text(
        self, text: str, target_tokens: int, *, task: str = "", keep: Sequence[str] = ()
    ) -> SummaryResult:
        """The most central sentences of ``text`` (in original order) within the budget.

        ``keep`` lists sentences of ``text`` that must come out verbatim (user rules,
        a P1 unit's values): they rank first, and when they need more room than
        ``target_tokens`` the budget grows to hold them (never beyond the input).
        A text already within the budget is returned unchanged.
        """
        return self.summarize_texts([(text, target_tokens, task, keep)])[0]

    def summarize_texts(self, requests: Sequence[tuple[str, int, str, Sequence[str]]]) -> list[SummaryResult]:
        """:meth:`summarize_text` of each ``(text, target_tokens, task, keep)``, in order, with
        the same results. The sentences of the texts not summarized before are embedded
        together first (the embedder keeps rows by content), so a strategy that compresses
        many units in place runs the embedder's array work once, not once a unit."""
        calls = []
        for text, target, task, keep in requests:
            check_target(target)
            keep = tuple(keep)
            calls.append((cache_key("text", *self._params, target, task, text, *keep), (text, target, task, keep)))
        new = [args[0] for key, args in calls if key not in SUMMARY_CACHE]
        if len(new) > 1:
            sentences = [s for text in dict.fromkeys(new) for s in _text_pieces(text)[0] if not is_fence_line(s)]
            embed_sparse(self.embedder, list(dict.fromkeys(sentences)))
        return [cached(key, partial(self._summarize_text, *args)) for key, args in calls]

    def keep_tokens(self, text: str, keep: Sequence[str]) -> int:
        """The budget ``summarize_text(text, ..., keep=keep)`` needs at least (tokens):
        so a text of no more tokens than this comes back unchanged."""
        return _keep_tokens(text, tuple(keep)) if keep else 0

    # ---- units ----------------------------------------------------------------
    def _summarize_units(
        self, units: tuple[ContextUnit, ...], target_tokens: int, task: str, depth: int
    ) -> SummaryResult:
        input_tokens = sum(u.token_count for u in units)
        budget = min(target_tokens, input_tokens)
        base = StructuredSummary(
            span=SummarySpan(units[0].id, units[-1].id, min(u.turn for u in units), max(u.turn for u in units)),
            depth=depth,
        )
        table = candidate_table(units)
        scored = self._scores(table.texts, table.sizes, table.units, table.weights, task, len(units), table.blocks)
        head = [Candidate("current_task", task.strip())] if task.strip() else []
        ranked = RankedCandidates(head, table, self._rank(table.texts, scored, table.tiers, budget))
        summary = fit_summary(base, ranked, budget, fill_ratio=FILL_RATIO, floors=ranked.floors())
        if summary is None:  # the budget cannot even hold the header: plain best text
            text = prefix_within("\n".join(_text_of(c.payload) for c in ranked), budget)
            return SummaryResult(text, None, count_tokens(text), input_tokens)
        return SummaryResult(summary.render(), summary, rendered_tokens(summary), input_tokens)

    # ---- text -----------------------------------------------------------------
    def _summarize_text(self, text: str, target_tokens: int, task: str, keep: tuple[str, ...]) -> SummaryResult:
        input_tokens = count_tokens(text)
        if input_tokens <= target_tokens:
            return SummaryResult(text, None, input_tokens, input_tokens)
        sentences, separators = _text_pieces(text)
        # a fence marker line carries no content, and kept without its pair (or joined to the
        # prose after it) it would turn the rest of the extract into code: never a candidate
        candidates = [Candidate("text", sentences[i], (i, 0)) for i in range(len(sentences))
                      if not is_fence_line(sentences[i])]

        def marginal(c: Candidate, _opened: set[str] | None = None) -> int:
            return _piece_tokens(separators[c.position[0]], c.payload)

        wanted = set(keep)
        texts = [c.payload for c in candidates]
        tiers = [0.0 if sentence in wanted else 1.0 for sentence in texts]
        target_tokens = max(target_tokens, self.keep_tokens(text, keep))
        if input_tokens <= target_tokens:
            return SummaryResult(text, None, input_tokens, input_tokens)
        sizes = np.array([count_tokens(t) for t in texts], dtype=np.float64)
        positions = np.array([c.position[0] for c in candidates], dtype=np.int64)
        scored = self._scores(texts, sizes, positions, [1.0] * len(texts), task, len(sentences))
        order = self._rank(texts, scored, tiers, target_tokens)
        ranked = [candidates[i] for i in order]

        chosen = fit_candidates(
            ranked,
            target_tokens,
            fixed_cost=0,
            marginal=marginal,
            tokens=lambda chosen: text_rendering_tokens(separators, chosen),
            least=lambda c, _opened: count_tokens(c.payload),  # counted for ``sizes``: a lookup
            fill_ratio=FILL_RATIO,
            floors=sizes[order],
        )
        out = text_rendering(separators, chosen or [])
        if not out.strip():  # not even one sentence fits: the text's own opening, cut to the budget
            out = cut_within(text, target_tokens)
        return SummaryResult(out, None, count_tokens(out), input_tokens)

    # ---- scoring and ranking ---------------------------------------------------
    def _scores(
        self, texts: list[str], sizes: np.ndarray, positions: np.ndarray, weights: list[float], task: str,
        n_positions: int, blocks: Sequence[tuple[str, ...]] | None = None,
    ) -> tuple[np.ndarray, RowSimilarity, np.ndarray]:
        """(score, similarity index, token count) of the texts, given their token counts
        (``sizes``) and the input position (unit or sentence index) of each; see the
        module docstring. ``blocks``, when given, are ``texts`` cut into the units'
        candidate texts (:attr:`CandidateTable.blocks`), embedded block by block. The task
        is embedded in the texts' batch (a new input's rows are computed in one call)."""
        embedder = self.embedder
        n = len(texts)
        batch = embed_sparse(embedder, [*texts, task]) if blocks is None else embed_blocks(embedder, [*blocks, (task,)])
        vectors, task_row = batch.split(n)
        query = np.zeros(batch.shape[1])
        query[task_row.cols] = task_row.values  # the task's row as float64
        # SparseRows.weighted_sum and .dot, the rows' values widened once
        values = vectors.values.astype(np.float64)
        centroid = np.bincount(vectors.cols, weights=values * sizes[vectors.rows], minlength=vectors.shape[1])
        norm = math.sqrt(centroid.dot(centroid))  # np.linalg.norm of a vector
        central = np.bincount(vectors.rows, weights=values * (centroid / norm)[vectors.cols], minlength=n) if norm > 0 \
            else np.zeros(n)
        relevance = np.bincount(vectors.rows, weights=values * query[vectors.cols], minlength=n)
        recency = np.asarray(positions, dtype=np.float64) / max(n_positions - 1, 1)
        base = 0.6 * np.clip(central, 0, 1) + 0.4 * np.clip(relevance, 0, 1) + 0.1 * recency
        return base * np.asarray(weights, dtype=np.float64), RowSimilarity(vectors), sizes

    def _rank(
        self,
        texts: list[str],
        scored: tuple[np.ndarray, RowSimilarity, np.ndarray],
        tiers: Sequence[float],
        budget: int,
    ) -> list[int]:
        """Candidate indices best first: by tier, then maximal marginal relevance.

        MMR orders candidates until twice ``budget`` tokens are ranked; the rest
        (which can only serve as filler) follow by score.
        """
        scores, similarity, sizes = scored
        order: list[int] = []
        seen: set[str] = set()
        ranked_tokens = 0.0
        size_of = sizes.tolist()
        tier_of = np.asarray(tiers, dtype=np.float64)
        for tier in sorted(set(tiers)):
            group = np.flatnonzero(tier_of == tier)
            for i in self._mmr(group, scores, similarity, sizes, 2 * budget - ranked_tokens):
                if texts[i] not in seen:  # exact repeats (re-run tools, carried items) once
                    seen.add(texts[i])
                    order.append(i)
                    ranked_tokens += size_of[i]
        return order

    def _mmr(
        self, members: np.ndarray, scores: np.ndarray, similarity: RowSimilarity, sizes: np.ndarray, tokens: float,
        gram: np.ndarray | None = None,
    ) -> list[int]:
        """The candidates ``members`` (indices, ascending) by MMR until ``tokens`` are
        ranked, then the rest by score (ties: input order). ``gram``, when given, holds
        the similarities among all candidates (:meth:`RowSimilarity.among`). A group of at
        most :data:`~ctxsim.summarize.small_mmr.SMALL_GROUP` is ranked by
        :func:`~ctxsim.summarize.small_mmr.small_mmr` (the same numbers)."""
        if len(members) <= SMALL_GROUP:  # a handful: the same floats in plain Python
            ranked = small_mmr(members, scores, similarity.batch, sizes, tokens, self.mmr_lambda)
            if ranked is not None:
                return ranked
        s = scores[members]
        by_score = np.argsort(-s, kind="stable")  # positions in ``members``
        if len(members) < 2 or self.mmr_lambda >= 1.0 or tokens <= 0:
            return members[by_score].tolist()
        top = s.max()
        rel = s / top if top > 0 else s
        lam = self.mmr_lambda
        gain, penalty = lam * rel, 1 - lam  # penalty > 0 here
        # the MMR value of each candidate, gain − penalty·(largest similarity to those
        # picked, 0 before any): rounding is monotone, so taking the smaller of the value
        # and gain − penalty·(a picked row) is that formula to the bit. −inf once picked,
        # so argmax (first maximum) only ever takes a free one
        value = gain.copy()
        member_list = members.tolist()
        member_sizes = sizes[members].tolist()
        picked: list[int] = []
        ks: list[int] = []
        drop = None  # row k: gain − penalty·(similarities to member k), once a second pick needs them
        rows = gram is None and not _gram_pays(sizes[members], tokens)  # few picked of many: row by row
        while len(picked) < len(members) and tokens > 0:
            k = int(value.argmax())
            picked.append(member_list[k])
            ks.append(k)
            tokens -= member_sizes[k]
            if len(picked) >= len(members) - 1 or tokens <= 0:
                break  # the one left (if any) comes next either way: no similarity read
            if rows:
                row = gain - penalty * similarity.to_row(member_list[k])[members]
            else:
                if drop is None:  # most of the group is picked: all its similarities in one join
                    among = gram[np.ix_(members, members)] if gram is not None else similarity.among(members)
                    drop = gain - penalty * among
                row = drop[k]
            np.minimum(value, row, out=value)
            value[k] = -np.inf
        free = np.ones(len(members), dtype=bool)
        free[ks] = False
        return picked + members[by_score[free[by_score]]].tolist()  # the rest (not picked) by score


def _gram_pays(sizes: np.ndarray, tokens: float) -> bool:
    """Whether MMR over candidates of token counts ``sizes``, ranking ``tokens``, gets
    their similarities in one join (see :data:`GRAM_MEMBERS`)."""
    expected_picks = tokens / max(float(sizes.mean()), 1.0) if len(sizes) else 0.0
    return len(sizes) <= GRAM_MEMBERS and expected_picks * PICKED_SHARE >= len(sizes)


# ---- candidates ------------------------------------------------------------------
#: how many distinct inputs (units, sentences, texts) each memo of this module holds
MEMO_SIZE = 16_384


class UnitColumns(NamedTuple):
    """The candidates of one unit (:func:`unit_items`) as columns: the section, payload,
    tier, text, token count (float64) and word bound of the rendered line (float64,
    :func:`~ctxsim.summarize.structured.line_words`) of each."""

    sections: tuple[str, ...]
    payloads: tuple[str | ToolOutcome | ArtifactRef, ...]
    tiers: tuple[float, ...]
    texts: tuple[str, ...]
    sizes: np.ndarray
    words: np.ndarray


class CandidateTable(NamedTuple):
    """The candidates of a sequence of units in input order, as columns: the section,
    payload, tier, priority weight, text, token count (float64), word bound of the
    rendered line (float64), unit index (int64) and index within its unit of each;
    ``blocks`` holds the texts of each unit with candidates, a tuple per unit in order
    (``texts`` is their concatenation: the embedder keeps a block's rows together).
    :meth:`candidate` builds one :class:`Candidate` (a long input has thousands and a
    summary reads few of them)."""

    sections: list[str]
    payloads: list[str | ToolOutcome | ArtifactRef]
    tiers: list[float]
    weights: list[float]
    texts: list[str]
    sizes: np.ndarray
    words: np.ndarray
    units: np.ndarray
    owners: list[int]
    offsets: list[int]
    blocks: list[tuple[str, ...]]

    def candidate(self, i: int) -> Candidate:
        """Candidate ``i``: its section, payload and position (unit index, index within the unit)."""
        return Candidate(self.sections[i], self.payloads[i], (self.owners[i], self.offsets[i]))

    @property
    def candidates(self) -> list[Candidate]:
        """Every candidate, in input order."""
        # tuple.__new__ builds each Candidate in C (its own __new__ is a Python function)
        return list(map(tuple.__new__, repeat(Candidate), zip(self.sections, self.payloads, zip(self.owners, self.offsets))))


def candidate_table(units: Sequence[ContextUnit]) -> CandidateTable:
    """The :class:`CandidateTable` of ``units``, assembled from each unit's memoized
    :class:`UnitColumns` (a unit seen in many states costs one lookup)."""
    sections: list[str] = []
    payloads: list = []
    tiers: list[float] = []
    weights: list[float] = []
    texts: list[str] = []
    sizes: list[np.ndarray] = []
    words: list[np.ndarray] = []
    owners: list[int] = []
    offsets: list[int] = []
    blocks: list[tuple[str, ...]] = []
    for index, unit in enumerate(units):
        columns = _unit_columns(unit.content, unit.type, unit.role, unit.tool, unit.meta)
        n = len(columns.sections)
        if n:
            sections += columns.sections
            payloads += columns.payloads
            tiers += columns.tiers
            weights += repeat(PRIORITY_WEIGHT[1 if unit.pinned else unit.priority], n)
            texts += columns.texts
            blocks.append(columns.texts)
            sizes.append(columns.sizes)
            words.append(columns.words)
            owners += repeat(index, n)
            offsets += range(n)
    return CandidateTable(sections, payloads, tiers, weights, texts,
                          np.concatenate(sizes) if sizes else np.zeros(0), np.concatenate(words) if words else np.zeros(0),
                          np.array(owners, dtype=np.int64), owners, offsets, blocks)


class RankedCandidates(Sequence):
    """Candidates best first: ``head`` (built by the caller), then the candidates of
    ``table`` in ``order`` (indices), each built when it is read."""

    def __init__(self, head: list[Candidate], table: CandidateTable, order: list[int]):
        self.head, self.table, self.order = head, table, order

    def __len__(self) -> int:
        return len(self.head) + len(self.order)

    def __getitem__(self, j):
        if isinstance(j, slice):
            return [self[k] for k in range(*j.indices(len(self)))]
        if j < 0:
            j += len(self)
        if j < len(self.head):
            return self.head[j]
        return self.table.candidate(self.order[j - len(self.head)])

    def floors(self) -> np.ndarray:
        """The word bound of each candidate's line, in rank order (float64)."""
        head = np.array([line_words(c.payload) for c in self.head], dtype=np.float64)
        return np.concatenate([head, self.table.words[self.order]])


def unit_candidates(units: Sequence[ContextUnit]) -> tuple[list[Candidate], list[float], list[float]]:
    """(candidates, tier of each, priority weight of each) in input order."""
    table = candidate_table(units)
    return table.candidates, table.tiers, table.weights


def unit_items(unit: ContextUnit) -> tuple[tuple[str, str | ToolOutcome | ArtifactRef, float], ...]:
    """(section, payload, tier) of each candidate of ``unit``, in order; computed once
    per distinct content, type, role, tool envelope and meta (see the module doc)."""
    return _unit_items(unit.content, unit.type, unit.role, unit.tool, unit.meta)


@lru_cache(maxsize=MEMO_SIZE)
def _unit_columns(content: str, type_: str, role: str, tool: ToolEnvelope | None, meta: tuple[tuple[str, str], ...]):
    """The :class:`UnitColumns` of a unit's items (:func:`unit_items`), once per distinct input."""
    items = _unit_items(content, type_, role, tool, meta)
    if not items:
        return UnitColumns((), (), (), (), np.zeros(0), np.zeros(0))
    sections, payloads, tiers = zip(*items)
    texts = tuple(map(_text_of, payloads))
    n = len(texts)
    return UnitColumns(sections, payloads, tiers, texts, np.fromiter(map(count_tokens, texts), np.float64, n),
                       np.fromiter(map(line_words, payloads), np.float64, n))


@lru_cache(maxsize=MEMO_SIZE)
def _unit_items(content: str, type_: str, role: str, tool: ToolEnvelope | None, meta: tuple[tuple[str, str], ...]):
    meta_dict = dict(meta)
    if "artifact_id" in meta_dict:
        art = meta_dict["artifact_id"]
        description = meta_dict.get("description") or content.strip().split("\n", 1)[0]
        hint = meta_dict.get("rehydrate_hint") or f'read_artifact("{art}")'
        return (("artifacts", ArtifactRef(art, description, hint), 1.0),)
    items: list[tuple[str, str | ToolOutcome | ArtifactRef, float]] = []
    if tool is not None:
        outcome = ToolOutcome(tool.tool_name, tool.outcome, tuple(sorted(tool.key_fields)), tool.error_message)
        items.append(("tool_outcomes", outcome, 1.0))
    carried = parse_summary(content) if type_ == "summary" else None
    if carried is not None:
        for section in ("rules", "facts", "decisions", "open_items", "tool_outcomes", "artifacts", "notes"):
            tier = 0.0 if section == "rules" else 2.0 if section == "notes" else CARRIED_TIER
            items.extend((section, item, tier) for item in getattr(carried, section))
        return tuple(items)
    rule_role = _rule_role(role, type_)
    spans = quoted(content) if rule_role else ()
    plan = type_ == "plan_ref"
    for start, end, code in segments(content, by_line=type_ in ("code", "log")):
        sentence = content[start:end]
        if sentence[0] in _BULLET_MARKS:
            sentence = _BULLET.sub("", sentence, count=1)
        if sentence:
            items.append(classify(sentence, code, rule_role and not (spans and in_spans(start, spans)), plan))
    return tuple(items)


def must_carry(units: Sequence[ContextUnit]) -> dict[str, tuple]:
    """What a summary of ``units`` must hold whole, by section, once each and in
    input order: every rule, and every item of :data:`CARRIED_SECTIONS` an earlier
    summary among ``units`` carried (design 002's drift invariant). Only a user or
    system message or a summary can hold either: the other units are not read."""
    out: dict[str, dict] = {}
    for unit in units:
        if not _rule_role(unit.role, unit.type):
            continue
        for section, payload, tier in unit_items(unit):
            if section == "rules" or tier == CARRIED_TIER:
                out.setdefault(section, {})[payload] = None
    return {section: tuple(items) for section, items in out.items()}


@lru_cache(maxsize=MEMO_SIZE)
def classify(sentence: str, code: bool, rule_role: bool, plan: bool) -> tuple[str, str, float]:
    """(section, sentence, tier) of one sentence of a unit: a code or log line
    (``code``), of a user or system message or a summary (``rule_role``), of a
    ``plan_ref`` unit (``plan``). Computed once per distinct input; each pattern is
    searched at most once, and a keyword pattern only when the sentence may hold
    one of its words (:func:`~ctxsim.summarize.rules.may_hold`)."""
    if code:
        section = "open_items" if plan or _open_item(sentence) else "notes"
    elif rule_role and (tier := _rule_tier(sentence)) is not None:
        return "rules", sentence, tier
    elif may_hold(DECISION_WORDS, sentence) and DECISION.search(sentence):
        section = "decisions"
    elif plan or _open_item(sentence):
        section = "open_items"
    else:
        section = "facts"  # when it holds a value (below), else notes
    if section == "notes":
        return section, sentence, 2.0
    if has_value(sentence):
        return section, sentence, 1.0
    return "notes" if section == "facts" else section, sentence, 2.0


def _rule_tier(sentence: str) -> float | None:
    """A sentence of a user or system message as a rule: tier 0 for an instruction
    (:func:`~ctxsim.summarize.rules.is_user_rule`), 0.5 for a sentence that speaks of a
    rule, None for neither. A heading or a lead-in ending in a colon names or introduces
    what follows ("## Command Execution Rules", "Each response should include:"): it is a
    rule only when, its colon taken off, it still instructs ("Do not change these files:")."""
    if HEADING.match(sentence) or LEAD_IN.search(sentence):
        return 0.0 if is_user_rule(LEAD_IN.sub("", sentence)) else None
    if is_user_rule(sentence):
        return 0.0
    return 0.5 if mentions_rule(sentence) else None


def _open_item(sentence: str) -> bool:
    return may_hold(OPEN_ITEM_WORDS, sentence) and OPEN_ITEM.search(sentence) is not None


def _rule_role(role: str, type_: str) -> bool:
    """Whether a unit's sentences can be rules: a user or system message, or a summary."""
    return role in ("user", "system") or type_ == "summary"


def _text_pieces(text: str) -> tuple[list[str], list[str]]:
    """(sentences of ``text``, the separator before each: newline or space)."""
    sentences, separators, previous_end = [], [], 0
    for start, end, _ in segments(text):
        sentences.append(text[start:end])
        separators.append("\n" if "\n" in text[previous_end:start] else " ")
        previous_end = end
    return sentences, separators


def text_rendering(separators: Sequence[str], chosen: Sequence[Candidate]) -> str:
    """The chosen sentences of a text summary in input order, each after its
    separator (``separators[i]`` precedes sentence ``i``), the first without."""
    ordered = sorted(chosen, key=lambda c: c.position)
    return "".join((separators[c.position[0]] if k else "") + c.payload for k, c in enumerate(ordered))


def text_rendering_tokens(separators: Sequence[str], chosen: Sequence[Candidate]) -> int:
    """Exact tokens of :func:`text_rendering` from memoized counts of its pieces, cut
    before each space separator and after each newline one (:func:`~ctxsim.tokens.count_joined`;
    sentences are stripped, else the rendering is counted whole)."""
    ordered = sorted(chosen, key=lambda c: c.position)
    if any(not c.payload or c.payload[0].isspace() or c.payload[-1].isspace() for c in ordered):
        return count_tokens(text_rendering(separators, chosen))
    seps = [separators[c.position[0]] if k else "" for k, c in enumerate(ordered)] + [""]
    return count_joined(
        [(" " if seps[k] == " " else "") + c.payload + ("\n" if seps[k + 1] == "\n" else "") for k, c in enumerate(ordered)]
    )


@lru_cache(maxsize=MEMO_SIZE)
def _keep_tokens(text: str, keep: tuple[str, ...]) -> int:
    """:meth:`ExtractiveSummarizer.keep_tokens`, once per distinct text and sentences."""
    wanted = set(keep)
    sentences, separators = _text_pieces(text)
    return sum(_piece_tokens(sep, s) for s, sep in zip(sentences, separators) if s in wanted)


def _piece_tokens(separator: str, sentence: str) -> int:
    """Tokens one sentence adds to a text summary. The first sentence goes without its
    separator, which can cost more ("Produce" is 2 tokens, " Produce" 1): priced both ways.
    A line break before a sentence (stripped: it starts with a character that is not
    whitespace) is a token of its own (:func:`~ctxsim.tokens.count_joined`); a space
    before it is priced from the sentence's own count (:func:`~ctxsim.tokens.count_spaced`)."""
    if separator == "\n" and sentence and not sentence[0].isspace():
        return count_joined([separator, sentence])
    spaced = count_spaced(sentence) if separator == " " else count_tokens(separator + sentence)
    return max(spaced, count_tokens(sentence))


def _text_of(payload: str | ToolOutcome | ArtifactRef) -> str:
    return payload if isinstance(payload, str) else payload.line()


def check_target(target_tokens: int) -> None:
    if isinstance(target_tokens, bool) or not isinstance(target_tokens, int) or target_tokens < 1:
        raise StrategyError(
            f"target_tokens must be a positive integer, got {describe_value(target_tokens)}", key="target_tokens"
        )
