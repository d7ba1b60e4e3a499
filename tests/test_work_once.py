"""No work repeats within a context: one pool expansion (every chain of valid
actions on one context, as :func:`ctxsim.lab.pool.expand` runs it) computes each
embedding row, each document vector, each minified or compressed text, each
summarizer classification (of a unit, of a sentence), each unit's candidate
columns (texts and token counts), each summary, each sentence split, each token
count, each tool call's arguments, the sentence data of the original context and
each strategy application (direct, or a step of ``hybrid`` or a fallback) once per
distinct input."""

from __future__ import annotations

from collections import Counter

import pytest

import ctxsim.relevance as relevance
from ctxsim import coherence, minify, sentences
from ctxsim.lab.contexts import build_context
from ctxsim.episode import EpisodeSettings
from ctxsim.strategies import Strategy, ladder, pruning
from ctxsim.tokens import count_tokens
from ctxsim.summarize import extractive, rules, structured
from ctxsim.lab.pool import expand
from ctxsim.relevance import get_embedder
from ctxsim.lab.scenarios import find_scenario


@pytest.fixture
def counted(monkeypatch):
    """Inputs of each computation during the test, with every cache emptied first."""
    seen: dict[str, Counter] = {"rows": Counter(), "documents": Counter(), "applications": Counter(),
                                "summaries": Counter(), "originals": Counter()}
    embedder = get_embedder()
    embedder.clear_cache()
    for memo in MEMOS:
        memo.cache_clear()
    for cache in (structured.SUMMARY_CACHE, coherence.ORIGINALS):  # results of earlier tests' summaries and scores
        cache.clear()
    compute, document_vector, apply = type(embedder)._compute, relevance._document_vector, Strategy.apply
    summarized, original_sentences = structured.cached, coherence.original_sentences

    def counting_compute(self, texts):
        seen["rows"].update(texts)
        return compute(self, texts)

    def counting_document_vector(emb, texts, weights):
        seen["documents"][(tuple(texts), tuple(weights.tolist()))] += 1
        return document_vector(emb, texts, weights)

    def counting_apply(self, state, ctx=None):
        seen["applications"][(type(self), repr(self.params), state.fingerprint)] += 1
        return apply(self, state, ctx)

    def counting_cached(key, compute):
        def counted_compute():
            seen["summaries"][key] += 1
            return compute()

        return summarized(key, counted_compute)

    def counting_original_sentences(original, embedder_id):
        if coherence.ORIGINALS.get((original.fingerprint, embedder_id)) is None:
            seen["originals"][(original.fingerprint, embedder_id)] += 1
        return original_sentences(original, embedder_id)

    monkeypatch.setattr(extractive, "cached", counting_cached)
    monkeypatch.setattr(coherence, "original_sentences", counting_original_sentences)
    monkeypatch.setattr(type(embedder), "_compute", counting_compute)
    monkeypatch.setattr(relevance, "_document_vector", counting_document_vector)
    monkeypatch.setattr(Strategy, "apply", counting_apply)
    return seen


#: memoized pure functions, each computing once per distinct input
MEMOS = (minify._minified, minify._compressed_log, extractive._unit_items, extractive._unit_columns, extractive.classify,
         extractive._keep_tokens, rules._rule_sentences, rules._must_keep, sentences.segments, structured._line_cost,
         structured.line_words, count_tokens, pruning._call_fields, pruning._shell_file_command, ladder._words)


@pytest.mark.parametrize("scenario", ["code-heavy", "log-heavy"])
def test_one_expansion_computes_each_distinct_input_once(counted, scenario):
    state = build_context(find_scenario(scenario), 0)
    settings = EpisodeSettings()
    assert state.total_tokens > settings.target_tokens(state)
    views: dict = {}
    expand(state, settings, views)
    assert len(views) > 10  # the expansion reached many states
    for kind in ("rows", "documents", "applications", "summaries", "originals"):
        assert counted[kind], kind
        assert max(counted[kind].values()) == 1, [k for k, n in counted[kind].items() if n > 1][:3]
    for memo in MEMOS:
        info = memo.cache_info()
        assert info.misses == info.currsize, memo  # every miss a new input, none evicted
    for memo in (extractive._unit_columns, extractive.classify):
        assert memo.cache_info().hits > 0  # units and sentences recur across states
    shrunk = minify._minified if scenario == "code-heavy" else minify._compressed_log
    assert shrunk.cache_info().hits > 0  # the strategy asked for the same input again
    assert list(counted["originals"].values()) == [1]  # every outcome is scored against the one original
    assert sentences.segments.cache_info().hits > 0 and count_tokens.cache_info().hits > 0
    assert pruning._shell_file_command.cache_info().hits > 0  # every state's selection reads the same calls


def test_the_action_mask_of_a_new_context_splits_no_text_for_must_keep_sentences():
    """A cold ``decide`` computes the action mask of a new context: content_type_chunking is
    answered from the sizes of units that can have no must-keep sentence, so no unit's text is
    split for them (a large P1 message was split on every new context)."""
    state = build_context(find_scenario("chat-10k"), 7)
    state = state.with_units(state.units[:50])
    rules._must_keep.cache_clear()
    settings = EpisodeSettings()
    mask = settings.mask(state)
    assert mask[settings.actions.index("content_type_chunking")]
    assert rules._must_keep.cache_info().misses == 0
