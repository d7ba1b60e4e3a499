"""The work of one cold extractive summary: the fit prices only candidates that may
fit, a plain sentence's line is priced from the sentence's own count (not encoded
again), and a sentence's patterns are searched at most once, a keyword pattern only
when the sentence may hold one of its keywords. The shortcuts decide nothing: their
bounds and counts hold on every sentence of the shipped scenarios."""

from __future__ import annotations

import random
import string
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxsim.lab.contexts import build_context
from ctxsim.model import ContextUnit
from ctxsim.lab.scenarios import DEFAULT_SUITE, find_scenario, load_scenarios
from ctxsim.sentences import segments
from ctxsim.summarize import extractive, rules, structured
from ctxsim.summarize.structured import ArtifactRef, ToolOutcome
from ctxsim.tokens import count_tokens


class CountingPattern:
    """A compiled pattern that counts the sentences it searches."""

    def __init__(self, pattern):
        self.pattern, self.searched = pattern, Counter()

    def search(self, text):
        self.searched[text] += 1
        return self.pattern.search(text)


def _cold():
    for memo in (extractive._unit_items, extractive._unit_columns, extractive.classify, structured._line_cost,
                 structured.line_words):
        memo.cache_clear()
    structured.SUMMARY_CACHE.clear()


def _sentences() -> list[str]:
    """Every sentence of the shipped scenarios' contexts (seed 0)."""
    out: list[str] = []
    for scenario in load_scenarios(DEFAULT_SUITE):
        for unit in build_context(scenario, 0).units:
            out += [unit.content[start:end] for start, end, _ in segments(unit.content)]
    return list(dict.fromkeys(out))


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    return _sentences()


def test_a_cold_summary_prices_only_the_candidates_that_may_fit(monkeypatch):
    state = build_context(find_scenario("chat-10k"), 3)
    units = state.units[:40]
    _cold()
    priced: Counter = Counter()
    line_cost = structured._line_cost

    def counting_line_cost(item):
        priced[item] += 1
        return line_cost(item)

    monkeypatch.setattr(structured, "_line_cost", counting_line_cost)
    result = extractive.ExtractiveSummarizer().summarize_units(units, 200, task=state.task)
    candidates = extractive.candidate_table(units).candidates
    assert result.token_count <= 200 and len(candidates) > 100
    assert len(priced) < len(candidates) / 2  # most cannot fit by their word count alone
    chosen = [item for section, _ in structured.SECTIONS for item in getattr(result.structured, section)]
    assert all(item in priced for item in chosen if item != state.task.strip())


def test_each_sentence_is_searched_once_per_pattern(monkeypatch):
    state = build_context(find_scenario("chat-10k"), 4)
    decided = ContextUnit(id="d1", type="message", role="assistant",
                          content="We decided to use Postgres 16. Going with tabs. Next: migrate the tables.")
    units = (*state.units, decided)
    _cold()
    homes = {"VALUE": (rules, "_VALUE_SCAN"), "DECISION": (extractive, "DECISION"), "OPEN_ITEM": (extractive, "OPEN_ITEM")}
    patterns = {name: CountingPattern(getattr(*home)) for name, home in homes.items()}
    for name, pattern in patterns.items():
        monkeypatch.setattr(*homes[name], pattern)
    table = extractive.candidate_table(units)
    classified = extractive.classify.cache_info().misses
    assert classified > 100
    for name, pattern in patterns.items():
        assert max(pattern.searched.values()) == 1, name  # the value pattern was searched twice per fact
    assert len(patterns["DECISION"].searched) < classified / 2  # most hold no decision word
    assert len(patterns["OPEN_ITEM"].searched) < classified / 2
    sections = {t: c.section for c, t in zip(table.candidates, table.texts)}
    assert sections["We decided to use Postgres 16."] == sections["Going with tabs."] == "decisions"
    assert sections["Next: migrate the tables."] == "open_items"


def test_may_hold_is_true_wherever_its_pattern_matches(sentences):
    cases = [
        (extractive.DECISION_WORDS, extractive.DECISION),
        (extractive.OPEN_ITEM_WORDS, extractive.OPEN_ITEM),
        (rules._RULE_STEMS, rules._RULE_WORDS),
        (rules._INSTRUCTION_WORDS, rules._INSTRUCTION),
    ]
    odd = ["We choſe Postgres.", "Never use the \u212aelvin scale.", "DECİDED to ship", "Don’t push.", "TODO: fix",
           "- [ ] write docs", "We SETTLED ON tabs.", "Do\tnot push.", "You  need\nto ask.", "Make  sure it runs."]
    for words, pattern in cases:
        matched = [s for s in sentences + odd if pattern.search(s)]
        assert len(matched) > 2
        assert all(rules.may_hold(words, s) for s in matched)
        assert not all(rules.may_hold(words, s) for s in sentences)  # it does rule sentences out


def test_the_word_bound_never_exceeds_the_line_cost(sentences):
    items = sentences + [
        "a\x1cb c\x1fd", "x\u00a0y\u2003z", "tab\tseparated  words", "line one\nline two", "数字 1234567 ok",
        ToolOutcome("read_file", "success", (("path", "/srv/app.py"),)), ArtifactRef("art-1", "build log", "read it"),
    ]
    for item in items:
        assert structured.line_words(item) <= structured._line_cost(item), item
    assert sum(structured.line_words(s) == structured._line_cost(s) for s in sentences) > 0  # the bound is tight


def test_a_sentence_line_is_counted_from_the_sentence(sentences):
    """``- sentence\\n`` costs what the encoder says, from the sentence's own count: on every
    shipped sentence and on random ASCII text (punctuation runs, spaces, digits) that starts
    with a letter, a digit or marks."""
    rng = random.Random(7)
    alphabet = string.ascii_letters + string.digits + string.punctuation + "     "
    starts = (string.ascii_letters, string.digits, string.punctuation)
    texts = sentences + [rng.choice(starts[k % 3]) + "".join(rng.choices(alphabet, k=rng.randint(0, 30)))
                         for k in range(30_000)]
    texts += ["(see below)", "1 apple", "`x`", "-foo", "('s it", "...Done.", "[ ] todo", "./run.sh --fast", "2."]
    derived = [t for t in texts if structured._sentence_line_cost(t) is not None]
    assert len(derived) > len(texts) * 0.8
    assert {t[0] for t in derived} >= set(string.ascii_letters + string.digits + string.punctuation) - {"'"}
    assert [structured._sentence_line_cost(t) for t in derived] == [count_tokens("- " + t + "\n") for t in derived]
    for text in ("  leading space", "trailing space ", "naïve café", "tab\there", "", "'quoted'", "... ?", "**"):
        assert structured._sentence_line_cost(text) is None  # counted whole instead
        assert structured._line_cost(text) == count_tokens(structured.item_lines(text) + "\n")


@pytest.mark.parametrize("scenario", ["chat-10k", "prior-summaries", "code-heavy", "transcript-marshmallow"])
def test_a_summary_is_counted_from_its_lines(scenario):
    state = build_context(find_scenario(scenario), 1)
    summarizer = extractive.ExtractiveSummarizer()
    for budget in (40, 150, 600):
        for start in range(0, len(state.units), 9):
            result = summarizer.summarize_units(state.units[start : start + 12], budget, task=state.task, depth=start % 2)
            assert result.structured is not None
            assert structured.rendered_tokens(result.structured) == count_tokens(result.text) == result.token_count


def test_a_candidate_table_holds_each_units_items_as_candidates_in_order():
    from ctxsim.summarize.structured import Candidate

    for name in ("chat-10k", "code-heavy", "transcript-marshmallow"):
        units = build_context(find_scenario(name), 1).units
        plain = [Candidate(section, payload, (i, k)) for i, unit in enumerate(units)
                 for k, (section, payload, _) in enumerate(extractive.unit_items(unit))]
        table = extractive.candidate_table(units)
        assert table.candidates == plain and all(type(c) is Candidate for c in table.candidates)
        assert [c.position for c in table.candidates] == [c.position for c in plain]


#: pieces a value test turns on: each alternative's characters and words, and their neighbours
_VALUE_PIECES = ["a", "b", "Z", "Qx", "h", "http", "https", "://", ":", "/", "~", ".", "..", "(", ")", ",", ";", " ",
                 "\n", "\t", "@", "_", "`", '"', "py", "js", "json", "yaml", "yml", "c", "css", "7", "$", "€", "é", "ſ",
                 "İ", "\u00a0", "Name", "x.py", "-", "'"]


@given(st.lists(st.sampled_from(_VALUE_PIECES), max_size=12).map("".join))
@settings(max_examples=3000, deadline=None)
def test_has_value_is_a_search_of_the_value_pattern(text):
    assert rules.has_value(text) == (rules.VALUE.search(text) is not None)


def test_has_value_agrees_with_the_value_pattern_on_every_sentence(sentences):
    odd = ["~/x", "(./a", "..//b", "x ~~/y", "a@b", "@b", "a@", "f.py", ".py", "f.pyc", "f.py_", "x, Bob", "x  Bob",
           "Bob", "see http://a", "`", "``", "`a`", '"ab"', '"a"', "~./x", "(~./x", "/x", "./x", "../x", "...x/y"]
    for text in sentences + odd:
        assert rules.has_value(text) == (rules.VALUE.search(text) is not None), text


def test_summarize_texts_gives_each_texts_summary_embedding_the_new_sentences_together(monkeypatch):
    """``summarize_texts`` returns what ``summarize_text`` returns for each request, and
    embeds the sentences of the texts not summarized before in one batch: the embedder's
    array work runs once for them (and once for the task), not once a text; asked again,
    every result comes from the summary cache."""
    from ctxsim.relevance import get_embedder
    from ctxsim.summarize import get_summarizer
    from ctxsim.summarize.rules import must_keep_sentences
    from ctxsim.summarize.structured import SUMMARY_CACHE

    units = [u for name in ("chat-10k", "code-heavy", "fact-dense") for u in build_context(find_scenario(name), 3).units
             if u.type not in ("code", "log") and u.token_count >= 80][:12]
    task = "Find why the export fails and fix it"
    requests = [(u.content, u.token_count // 2, task, must_keep_sentences(u)) for u in units]
    summarizer, embedder = get_summarizer("extractive"), get_embedder("hashed-tfidf")
    SUMMARY_CACHE.clear()
    embedder.clear_cache()
    one_by_one = [summarizer.summarize_text(text, target, task=t, keep=keep) for text, target, t, keep in requests]

    batches = []
    compute = type(embedder)._compute
    monkeypatch.setattr(type(embedder), "_compute", lambda self, texts: batches.append(len(texts)) or compute(self, texts))
    SUMMARY_CACHE.clear()
    embedder.clear_cache()
    together = summarizer.summarize_texts(requests)
    assert [(r.text, r.token_count, r.input_tokens) for r in together] == \
        [(r.text, r.token_count, r.input_tokens) for r in one_by_one]
    assert sum(r.text != text for r, (text, *_) in zip(together, requests)) >= 8  # most were summarized
    assert len(batches) <= 2 and max(batches) > 100  # the sentences in one batch, the task's row
    batches.clear()
    again = summarizer.summarize_texts(requests)
    assert all(r.cache_hit for r in again) and batches == []
    assert [r.text for r in again] == [r.text for r in together]
