"""No work repeats within a context: one pool expansion (every chain of valid
actions on one context, as :func:`ctxsim.lab.pool.expand` runs it) computes each
embedding row, each document vector and each minified or compressed text once per
distinct input."""

from __future__ import annotations

from collections import Counter

import pytest

import ctxsim.relevance as relevance
from ctxsim import minify
from ctxsim.lab.contexts import build_context
from ctxsim.episode import EpisodeSettings
from ctxsim.lab.pool import expand
from ctxsim.relevance import get_embedder
from ctxsim.lab.scenarios import find_scenario


@pytest.fixture
def counted(monkeypatch):
    """Inputs of each computation during the test, with every cache emptied first."""
    seen: dict[str, Counter] = {"rows": Counter(), "documents": Counter()}
    embedder = get_embedder()
    embedder.clear_cache()
    minify._minified.cache_clear()
    minify._compressed_log.cache_clear()
    compute, document_vector = type(embedder)._compute, relevance._document_vector

    def counting_compute(self, texts):
        seen["rows"].update(texts)
        return compute(self, texts)

    def counting_document_vector(emb, texts, weights):
        seen["documents"][(tuple(texts), tuple(weights.tolist()))] += 1
        return document_vector(emb, texts, weights)

    monkeypatch.setattr(type(embedder), "_compute", counting_compute)
    monkeypatch.setattr(relevance, "_document_vector", counting_document_vector)
    return seen


@pytest.mark.parametrize("scenario", ["code-heavy", "log-heavy"])
def test_one_expansion_computes_each_distinct_input_once(counted, scenario):
    state = build_context(find_scenario(scenario), 0)
    settings = EpisodeSettings()
    assert state.total_tokens > settings.target_tokens(state)
    views: dict = {}
    expand(state, settings, views)
    assert len(views) > 10  # the expansion reached many states
    for kind in ("rows", "documents"):
        assert counted[kind], kind
        assert max(counted[kind].values()) == 1, [k for k, n in counted[kind].items() if n > 1][:3]
    for memo in (minify._minified, minify._compressed_log):
        info = memo.cache_info()
        assert info.misses == info.currsize  # every miss a new input, none evicted
    shrunk = minify._minified if scenario == "code-heavy" else minify._compressed_log
    assert shrunk.cache_info().hits > 0  # the strategy asked for the same input again
