"""The extractive summarizer's fast paths against their plain definitions, on the
shipped scenarios' contexts: the candidate table's columns, the fit's skipping by
word floors over candidates built on demand, and MMR over one join of all the
similarities."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxsim.lab.contexts import build_context
from ctxsim.lab.scenarios import find_scenario
from ctxsim.summarize import extractive, structured
from ctxsim.summarize.structured import Candidate, StructuredSummary, SummarySpan
from ctxsim.tokens import count_tokens

SCENARIOS = ["chat-10k", "code-heavy", "prior-summaries", "tool-dupes", "transcript-marshmallow"]


def _ranked(units, task: str, budget: int) -> extractive.RankedCandidates:
    summarizer = extractive.ExtractiveSummarizer()
    table = extractive.candidate_table(units)
    scored = summarizer._scores(table.texts, table.sizes, table.units, table.weights, task, len(units))
    head = [Candidate("current_task", task.strip())] if task.strip() else []
    return extractive.RankedCandidates(head, table, summarizer._rank(table.texts, scored, table.tiers, budget))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_table_columns_are_those_of_each_candidate(scenario):
    units = build_context(find_scenario(scenario), 2).units
    table = extractive.candidate_table(units)
    candidates = table.candidates
    assert len(candidates) > 20
    assert [table.candidate(i) for i in range(len(candidates))] == candidates
    assert all(type(i) is int for c in candidates[:50] for i in c.position)
    assert table.words.tolist() == [structured.line_words(c.payload) for c in candidates]
    assert table.sizes.tolist() == [count_tokens(t) for t in table.texts]
    assert table.units.tolist() == [c.position[0] for c in candidates]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_skipping_by_word_floors_chooses_what_trying_every_candidate_chooses(scenario):
    """The fit given floors, reading candidates on demand, returns the summary of the plain
    fit over a list of every candidate, at budgets from tight to loose."""
    state = build_context(find_scenario(scenario), 0)
    units = state.units
    checked = 0
    for start, size in ((0, len(units)), (0, 12), (len(units) // 2, 20), (len(units) - 8, 8)):
        span = units[start : start + size]
        base = StructuredSummary(span=SummarySpan(span[0].id, span[-1].id, 0, 1))
        for budget in (25, 60, 200, 700, 3000):
            for task in (state.task, ""):
                ranked = _ranked(span, task, budget)
                plain = list(ranked)
                assert len(plain) == len(ranked) and plain[: len(ranked.head)] == ranked.head
                fast = structured.fit_summary(base, ranked, budget, floors=ranked.floors())
                assert fast == structured.fit_summary(base, plain, budget)
                checked += fast is not None
    assert checked > 20


def test_a_summary_builds_only_the_candidates_it_reads(monkeypatch):
    """A summary of a long input under a small budget builds a :class:`Candidate` for few of
    its candidates: the others are skipped by their word floors, unread."""
    state = build_context(find_scenario("chat-10k"), 3)
    units = state.units[:40]
    extractive._unit_columns.cache_clear()
    structured.SUMMARY_CACHE.clear()
    built = []
    candidate = extractive.CandidateTable.candidate

    def counting_candidate(self, i):
        built.append(i)
        return candidate(self, i)

    monkeypatch.setattr(extractive.CandidateTable, "candidate", counting_candidate)
    result = extractive.ExtractiveSummarizer().summarize_units(units, 200, task=state.task)
    assert result.token_count <= 200
    assert len(extractive.candidate_table(units).texts) > 100
    assert 0 < len(set(built)) < len(extractive.candidate_table(units).texts) / 2


def _plain_mmr(members, scores, similarity, sizes, tokens, lam):
    """MMR by its definition: pick the free candidate of largest ``λ·rel − (1−λ)·max sim``
    (first of equals) until ``tokens`` are ranked, then the rest by score."""
    s = scores[members]
    by_score = [int(members[k]) for k in np.argsort(-s, kind="stable")]
    if len(members) < 2 or tokens <= 0:
        return by_score
    top = s.max()
    rel = s / top if top > 0 else s
    picked: list[int] = []
    rows = {}  # each picked candidate's similarities to all, computed once
    while len(picked) < len(members) and tokens > 0:
        best, best_value = None, None
        for k, member in enumerate(members.tolist()):
            if member in picked:
                continue
            nearest = max((rows[p][member] for p in picked), default=0.0)
            value = lam * rel[k] - (1 - lam) * nearest
            if best is None or value > best_value:
                best, best_value = member, value
        picked.append(best)
        rows[best] = similarity.to_row(best)
        tokens -= sizes[best]
    return picked + [i for i in by_score if i not in picked]


@pytest.mark.parametrize("scenario", ["chat-10k", "code-heavy", "prior-summaries"])
def test_mmr_over_one_join_ranks_as_its_definition(scenario):
    state = build_context(find_scenario(scenario), 1)
    summarizer = extractive.ExtractiveSummarizer()
    for units in (state.units[:6], state.units[10:22]):
        table = extractive.candidate_table(units)
        scores, similarity, sizes = summarizer._scores(table.texts, table.sizes, table.units, table.weights,
                                                       state.task, len(units))
        gram = similarity.among(np.arange(len(table.texts)))
        tiers = np.asarray(table.tiers)
        for tier in sorted(set(table.tiers)):
            group = np.flatnonzero(tiers == tier)
            for tokens in (30.0, 150.0, 10_000.0):
                plain = _plain_mmr(group, scores, similarity, sizes, tokens, summarizer.mmr_lambda)
                assert summarizer._mmr(group, scores, similarity, sizes, tokens, gram) == plain
                assert summarizer._mmr(group, scores, similarity, sizes, tokens) == plain


@given(
    data=st.lists(st.lists(st.sampled_from([0.0, 0.0, 0.25, 0.5, 1.0, 2.0]), min_size=6, max_size=6),
                  min_size=2, max_size=14),
    score_steps=st.lists(st.integers(0, 4), min_size=14, max_size=14),
    sizes=st.lists(st.integers(1, 30), min_size=14, max_size=14),
    tokens=st.sampled_from([1.0, 20.0, 60.0, 1000.0]),
    lam=st.sampled_from([0.0, 0.3, 0.7, 0.95]),
    stride=st.integers(1, 3),
)
@settings(max_examples=200, deadline=None)
def test_mmr_ranks_as_its_definition_on_any_similarities(data, score_steps, sizes, tokens, lam, stride):
    """MMR (its values kept as the smaller of gain − penalty·similarity over the picked
    rows) ranks as its definition over random non-negative rows with tied scores and
    tied similarities, given one join, joining the group itself, or row by row, and for
    a small group in plain Python (:mod:`ctxsim.summarize.small_mmr`) or with numpy."""
    from ctxsim.relevance import RowSimilarity, SparseRows

    matrix = np.array(data, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    matrix = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    n = len(matrix)
    similarity = RowSimilarity(SparseRows.from_dense(matrix))
    scores = np.array(score_steps[:n], dtype=np.float64) / 4
    size_of = np.array(sizes[:n], dtype=np.float64)
    members = np.arange(0, n, stride)
    summarizer = extractive.ExtractiveSummarizer(mmr_lambda=lam)
    plain = _plain_mmr(members, scores, similarity, size_of, tokens, lam)
    gram = similarity.among(np.arange(n))
    assert summarizer._mmr(members, scores, similarity, size_of, tokens, gram) == plain
    assert summarizer._mmr(members, scores, similarity, size_of, tokens) == plain
    many_rows, small = extractive.GRAM_MEMBERS, extractive.SMALL_GROUP
    try:  # row by row: the group never joined whole
        extractive.GRAM_MEMBERS = 0
        assert summarizer._mmr(members, scores, similarity, size_of, tokens) == plain
        extractive.SMALL_GROUP = 0  # numpy whatever the group's size
        assert summarizer._mmr(members, scores, similarity, size_of, tokens) == plain
        extractive.GRAM_MEMBERS = many_rows
        assert summarizer._mmr(members, scores, similarity, size_of, tokens, gram) == plain
        assert summarizer._mmr(members, scores, similarity, size_of, tokens) == plain
    finally:
        extractive.GRAM_MEMBERS, extractive.SMALL_GROUP = many_rows, small
