"""Sentence splitting, structured summaries, the extractive and the LLM summarizers."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from faker import Faker
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxsim.config import RetryPolicy
from ctxsim.errors import ConfigError, StrategyError
from ctxsim.model import ContextUnit, ToolEnvelope
from ctxsim.summarize import (
    ArtifactRef,
    ExtractiveSummarizer,
    LLMSummarizer,
    StructuredSummary,
    SummarySpan,
    ToolOutcome,
    get_summarizer,
    parse_summary,
    split_sentences,
)
from ctxsim.summarize.llm import parse_reply
from ctxsim.sentences import segments
from ctxsim.tokens import count_tokens

RULE = "Never delete production data."
BUDGET = "The budget is $1,250 for the quarter."


# ---- helpers ------------------------------------------------------------------------
def faker_units(seed: int, n: int = 24, sentences: int = 4) -> list[ContextUnit]:
    fake = Faker("en_US")
    fake.seed_instance(seed)
    units = []
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        units.append(ContextUnit(f"u{i}", "message", fake.paragraph(nb_sentences=sentences), role=role, turn=i))
    return units


def planted_units(seed: int = 1) -> list[ContextUnit]:
    units = faker_units(seed, n=20)
    units[3] = ContextUnit("u3", "message", f"Thanks for the quick update. {RULE} {BUDGET}", role="user", turn=3)
    units[8] = ContextUnit(
        "u8", "message", "The config lives in /srv/app.py and the release is on 2024-03-05.", role="assistant", turn=8
    )
    units[12] = ContextUnit(
        "u12", "message", "We decided to go with PostgreSQL 16.2 for billing.", role="assistant", turn=12
    )
    return units


def summary_unit(uid: str, text: str, turn: int) -> ContextUnit:
    """A summary unit as the strategies make them: their header line, then our rendering."""
    return ContextUnit(uid, "summary", f"[Context Summary - Turns 0-{turn}]\n{text}", role="assistant", turn=turn)


def text_items(summary: StructuredSummary) -> list[str]:
    return [i for name in ("rules", "facts", "decisions", "open_items", "notes") for i in getattr(summary, name)]


def assembled_from(out: str, sentences: list[str]) -> bool:
    """True when ``out`` is input sentences (at most one cut at a word boundary) joined by whitespace."""
    pos, partials = 0, 0
    by_length = sorted(set(sentences), key=len, reverse=True)
    while pos < len(out):
        whole = next((s for s in by_length if out.startswith(s, pos)), None)
        if whole is not None:
            pos += len(whole)
        else:
            cut = 0
            for s in by_length:
                k = 0
                while pos + k < len(out) and k < len(s) and out[pos + k] == s[k]:
                    k += 1
                while k > 0 and not (k < len(s) and s[k].isspace() and (pos + k == len(out) or out[pos + k].isspace())):
                    k -= 1
                cut = max(cut, k)
            if not cut:
                return False
            partials += 1
            pos += cut
        while pos < len(out) and out[pos].isspace():
            pos += 1
    return partials <= 1


# ---- sentences -------------------------------------------------------------------------
def test_split_keeps_abbreviations_amounts_versions_paths_and_urls_intact():
    text = (
        "Mr. Smith paid $1,250.00 on 2024-03-05, e.g. by card. We ship v3.2.1 from /srv/app.py today! "
        "Docs: https://example.com/docs/v2.html. Is it done? J. R. Tolkien wrote i.e. books. The U.S. Army won."
    )
    assert split_sentences(text) == [
        "Mr. Smith paid $1,250.00 on 2024-03-05, e.g. by card.",
        "We ship v3.2.1 from /srv/app.py today!",
        "Docs: https://example.com/docs/v2.html.",
        "Is it done?",
        "J. R. Tolkien wrote i.e. books.",
        "The U.S. Army won.",
    ]


def test_split_handles_lists_wrapped_prose_code_and_logs():
    text = (
        "Plan for today\n"
        "- First bullet. Two sentences here.\n"
        "- [ ] write tests\n"
        "1. Step one.\n"
        "2) Step two\n"
        "This prose line is wrapped\n"
        "across two lines. Then ends.\n"
        "Run this:\n"
        "    pip install ctxsim\n"
        "```python\n"
        "def f(x):\n"
        "    return x.y  # not. split\n"
        "```\n"
        "2024-01-01 12:00:00 ERROR timeout. Retrying\n"
        "ValueError: bad value. Really.\n"
    )
    assert split_sentences(text) == [
        "Plan for today",
        "- First bullet.",
        "Two sentences here.",
        "- [ ] write tests",
        "1. Step one.",
        "2) Step two",
        "This prose line is wrapped\nacross two lines.",
        "Then ends.",
        "Run this:",
        "pip install ctxsim",
        "```python",
        "def f(x):",
        "return x.y  # not. split",
        "```",
        "2024-01-01 12:00:00 ERROR timeout. Retrying",
        "ValueError: bad value. Really.",
    ]
    assert [code for _, _, code in segments(text)][-7:] == [True] * 7
    assert split_sentences("a. B. c\nd", by_line=True) == ["a. B. c", "d"]


_PIECES_LINES = st.sampled_from(["a", " ", "\t", "\n", "\r\n", "\x0c", "\u2028", "x;", "{", "\u00a0", "- b"])


@pytest.mark.parametrize("line, code", [
    ("x = f(y);", True), ("if (ready) {  ", True), ("a; b", False), ("Ends with a brace {\t", True),
    ("The end: {", True), ("semicolons; mid sentence. Fine.", False), ("  const x = 1", True), ("Plain prose.", False),
])
def test_a_line_ending_in_a_brace_or_semicolon_is_code(line, code):
    assert [code for _, _, code in segments(line)] == [code] * len(segments(line)) and segments(line)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_PIECES_LINES, st.text(max_size=8)), max_size=30).map("".join))
def test_by_line_gives_every_nonblank_line_stripped(text):
    assert split_sentences(text, by_line=True) == [line.strip() for line in text.splitlines() if line.strip()]
    assert all(code for _, _, code in segments(text, by_line=True))


_PIECES = st.sampled_from(
    [
        "Word",
        "word",
        "e.g.",
        "Mr.",
        "$1,250.00",
        "v3.2.1",
        "/srv/app.py",
        "J.",
        "3.",
        "x?",
        "y!",
        "…",
        "\n",
        "\n\n",
        "- ",
        "1. ",
        "    ",
        "```",
        "def",
        "ERROR",
        "2024-01-01 10:00:00",
        '"',
        ")",
        "(",
        "é",
        "\t",
        "\r\n",
        "\u2028",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_PIECES, st.text(max_size=8)), max_size=40).map(" ".join))
def test_sentences_are_ordered_substrings_covering_every_visible_character(text):
    segs = segments(text)
    previous_end = 0
    for start, end, _ in segs:
        sentence = text[start:end]
        assert start >= previous_end and sentence and sentence == sentence.strip()
        previous_end = end
    visible = "".join(text.split())
    assert "".join("".join(text[start:end].split()) for start, end, _ in segs) == visible


# ---- structured summaries --------------------------------------------------------------
def sample_summary() -> StructuredSummary:
    return StructuredSummary(
        span=SummarySpan("u3", "u17", 2, 9),
        current_task=("Ship the billing fix",),
        rules=(RULE,),
        facts=(BUDGET, "Line one\nline two"),
        tool_outcomes=(ToolOutcome("read_file", "failure", (("path", "/srv/app.py"),), "permission denied"),),
        artifacts=(ArtifactRef("art-1", "build log", 'read_artifact("art-1")'),),
    )


def test_render_is_versioned_ordered_and_omits_empty_sections():
    assert sample_summary().render() == (
        "[Summary v1 | units u3..u17 | turns 2-9]\n"
        "Current task:\n- Ship the billing fix\n"
        "Rules & Constraints:\n- Never delete production data.\n"
        "Facts:\n- The budget is $1,250 for the quarter.\n- Line one\n  line two\n"
        "Tool outcomes:\n"
        '- read_file [failure] {"path": "/srv/app.py"} error: "permission denied"\n'
        "Artifacts:\n"
        '- art-1: build log (rehydrate: read_artifact("art-1"))'
    )
    one = StructuredSummary(span=SummarySpan("u1", "u1", 4, 4), depth=2, notes=("x",))
    assert one.render() == "[Summary v1 | units u1 | turns 4 | depth 2]\nContext:\n- x"


def test_parse_reads_a_rendering_back_after_a_strategy_header():
    summary = sample_summary()
    assert parse_summary(summary.render()) == summary
    assert parse_summary("[Context Summary - Turns 2-9]\n" + summary.render() + "\n\nuser: more") == summary
    assert parse_summary("no summary here") is None
    assert parse_summary("[Summary v0 | units a | turns 1]\nFacts:\n- x") is None


_ITEM = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30).map(str.strip).filter(bool)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(_ITEM, max_size=3),
    st.lists(_ITEM, max_size=3),
    st.lists(
        st.tuples(
            st.from_regex(r"[a-z_]{1,8}", fullmatch=True),
            st.sampled_from(["success", "failure", "partial"]),
            st.dictionaries(_ITEM, _ITEM, max_size=2),
            st.none() | _ITEM,
        ),
        max_size=2,
    ),
    st.integers(0, 5),
)
def test_render_then_parse_round_trips(rules, notes, tools, depth):
    summary = StructuredSummary(
        span=SummarySpan("a", "b", 1, 2),
        depth=depth,
        rules=tuple(rules),
        notes=tuple(notes),
        tool_outcomes=tuple(ToolOutcome(t, o, tuple(sorted(k.items())), e) for t, o, k, e in tools),
    )
    assert parse_summary(summary.render()) == summary


# ---- extractive: text --------------------------------------------------------------------
def test_summarize_text_under_the_target_returns_the_text():
    result = ExtractiveSummarizer().summarize_text(BUDGET, 100)
    assert result.text == BUDGET and result.structured is None and result.token_count == result.input_tokens


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.1, 0.7), st.sampled_from(["", "billing database migration"]))
def test_summarize_text_fills_95_percent_of_the_budget_with_verbatim_sentences(seed, ratio, task):
    fake = Faker()
    fake.seed_instance(seed)
    text = "\n\n".join(fake.paragraph(nb_sentences=6) for _ in range(6))
    target = max(80, int(count_tokens(text) * ratio))
    result = ExtractiveSummarizer().summarize_text(text, target, task=task)
    assert 0.95 * target <= result.token_count <= target
    assert result.token_count == count_tokens(result.text)
    assert assembled_from(result.text, split_sentences(text))


def test_text_with_no_sentence_within_the_budget_is_cut_to_it():
    blob = "x" * 5000  # one 'sentence' far over the budget, no word boundary either
    result = ExtractiveSummarizer().summarize_text(blob, 40)
    assert 0 < result.token_count <= 40 and blob.startswith(result.text)
    words = "alpha beta gamma delta " * 300  # no sentence end: cut at a word boundary
    cut = ExtractiveSummarizer().summarize_text(words, 30).text
    assert 0 < count_tokens(cut) <= 30 and words.startswith(cut) and not cut.endswith(" ")


def test_summarize_text_keeps_sentence_order():
    sentences = [f"Sentence number {i} talks about billing item {i}." for i in range(40)]
    out = ExtractiveSummarizer().summarize_text(" ".join(sentences), 120).text
    positions = [sentences.index(s) for s in split_sentences(out) if s in sentences]
    assert positions == sorted(positions) and len(positions) >= 5


# ---- extractive: units -----------------------------------------------------------------------
def test_rules_verbatim_and_facts_first_under_a_tight_budget():
    units = planted_units()
    result = ExtractiveSummarizer().summarize_units(units, 150, task="billing migration")
    summary = result.structured
    assert summary is not None and result.token_count <= 150
    assert summary.rules[0] == RULE
    for value in ("$1,250", "/srv/app.py", "2024-03-05", "PostgreSQL 16.2"):
        assert value in result.text
    assert "PostgreSQL" in " ".join(summary.decisions)
    assert summary.current_task == ("billing migration",)
    everything = "\n".join(u.content for u in units)
    assert all(item in everything for item in text_items(summary))


def test_tool_outcomes_artifacts_and_plan_items_are_kept():
    units = faker_units(5, n=8) + [
        ContextUnit(
            "t1",
            "tool_result",
            "Found 3 matches in /srv/app.py",
            role="tool",
            turn=9,
            tool=ToolEnvelope("grep", "c1", key_fields=(("path", "/srv/app.py"), ("matches", "3"))),
        ),
        ContextUnit(
            "t2",
            "tool_result",
            "Traceback (most recent call last):\nKeyError: 'id'",
            role="tool",
            turn=10,
            tool=ToolEnvelope("run_tests", "c2", outcome="failure", error_message="KeyError: 'id'"),
        ),
        ContextUnit("p1", "plan_ref", "- [ ] migrate the billing table\n- add an index", role="assistant", turn=11),
        ContextUnit(
            "a1",
            "placeholder",
            "[Externalized build log: see art-7]",
            role="assistant",
            turn=12,
            meta=(("artifact_id", "art-7"), ("description", "full build log of run 42")),
        ),
    ]
    summary = ExtractiveSummarizer().summarize_units(units, 400).structured
    assert ToolOutcome("grep", "success", (("matches", "3"), ("path", "/srv/app.py"))) in summary.tool_outcomes
    assert ToolOutcome("run_tests", "failure", (), "KeyError: 'id'") in summary.tool_outcomes
    assert ArtifactRef("art-7", "full build log of run 42", 'read_artifact("art-7")') in summary.artifacts
    assert {"[ ] migrate the billing table", "add an index"} <= set(summary.open_items)
    assert summary.span == SummarySpan("u0", "a1", 0, 12)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.08, 0.6))
def test_unit_summaries_fill_95_percent_of_the_budget_and_never_exceed_it(seed, ratio):
    units = faker_units(seed, n=16)
    target = max(100, int(sum(u.token_count for u in units) * ratio))
    result = ExtractiveSummarizer().summarize_units(units, target, task="quarterly report")
    assert 0.95 * target <= result.token_count <= target
    assert result.token_count == count_tokens(result.text)
    assert parse_summary(result.text) == result.structured
    everything = "\n".join(u.content for u in units)
    assert all(item in everything for item in text_items(result.structured))


def test_input_under_the_target_gives_a_summary_no_larger():
    units = faker_units(3, n=3, sentences=2)
    result = ExtractiveSummarizer().summarize_units(units, 10_000)
    assert result.token_count <= result.input_tokens == sum(u.token_count for u in units)


def test_a_budget_below_the_header_gives_plain_text_within_it():
    result = ExtractiveSummarizer().summarize_units(planted_units(), 12)
    assert result.structured is None and 0 < result.token_count <= 12
    assert result.text in "\n".join(u.content for u in planted_units()) or result.text.startswith("Never")


def test_summaries_are_cached_and_byte_identical_across_processes():
    units = planted_units(seed=11)
    first = ExtractiveSummarizer().summarize_units(units, 200, task="cache probe 11")
    again = ExtractiveSummarizer().summarize_units(units, 200, task="cache probe 11")
    assert not first.cache_hit and again.cache_hit and again.text == first.text
    code = (
        "import hashlib, sys; sys.path.insert(0, 'tests'); from test_summarize import planted_units; "
        "from ctxsim.summarize import ExtractiveSummarizer; "
        "r = ExtractiveSummarizer().summarize_units(planted_units(seed=11), 200, task='cache probe 11'); "
        "print(hashlib.sha256(r.text.encode()).hexdigest())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == hashlib.sha256(first.text.encode()).hexdigest()


def test_five_summaries_of_summaries_keep_rules_and_fact_values():
    """Seed 002's drift test: the constraint and the budget survive repeated summaries."""
    summarizer = ExtractiveSummarizer()
    units = faker_units(21, n=10)
    units[2] = ContextUnit("u2", "message", "Never delete production data. The budget is $1000.", role="user", turn=2)
    for round_ in range(5):
        result = summarizer.summarize_units(units, 160, task="finish the report", depth=round_)
        assert "Never delete production data." in result.structured.rules
        assert "$1000" in result.text
        fresh = faker_units(100 + round_, n=6)
        units = [summary_unit(f"s{round_}", result.text, turn=10 * (round_ + 1))] + [
            ContextUnit(f"r{round_}-{u.id}", u.type, u.content, role=u.role, turn=10 * (round_ + 1) + u.turn)
            for u in fresh
        ]
    assert result.structured.depth == 4


def test_bad_arguments_raise_ctxsim_errors():
    summarizer = ExtractiveSummarizer()
    with pytest.raises(StrategyError, match="target_tokens"):
        summarizer.summarize_units(faker_units(1, n=2), 0)
    with pytest.raises(StrategyError, match="at least one unit"):
        summarizer.summarize_units([], 100)
    with pytest.raises(StrategyError, match="mmr_lambda"):
        ExtractiveSummarizer(mmr_lambda=2.0)
    with pytest.raises(ConfigError, match="unknown summarizer 'gpt'"):
        get_summarizer("gpt")
    with pytest.raises(ConfigError, match="bad options"):
        get_summarizer("extractive", colour="red")
    assert isinstance(get_summarizer(), ExtractiveSummarizer)


# ---- LLM summarizer against a local HTTP server ------------------------------------------
REPLY = """## Facts
- The budget is $1,250 for the quarter.
- Config in /srv/app.py
**Decisions:**
1. Use PostgreSQL 16.2
Next steps:
- migrate the billing table
"""


class _ChatServer(ThreadingHTTPServer):
    def __init__(self, failures: int, status: int = 503, reply: str = REPLY):
        super().__init__(("127.0.0.1", 0), _ChatHandler)
        self.failures, self.status, self.reply = failures, status, reply
        self.requests: list[tuple[str, dict, dict]] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _ChatHandler(BaseHTTPRequestHandler):
    server: _ChatServer

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((self.path, dict(self.headers), body))
        if len(self.server.requests) <= self.server.failures:
            payload, status = b'{"error": "busy"}', self.server.status
        else:
            message = {"role": "assistant", "content": self.server.reply}
            payload, status = json.dumps({"choices": [{"message": message}]}).encode(), 200
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def chat_server(request):
    failures, status = getattr(request, "param", (2, 503))
    server = _ChatServer(failures, status)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_llm_retries_with_backoff_then_parses_the_reply(chat_server, monkeypatch):
    monkeypatch.setenv("CTXSIM_TEST_KEY", "sk-test")
    sleeps: list[float] = []
    llm = LLMSummarizer(chat_server.base_url, "tiny-model", api_key_env="CTXSIM_TEST_KEY", sleep=sleeps.append)
    units = planted_units(seed=31)
    result = llm.summarize_units(units, 200, task="billing migration")
    assert sleeps == [5.0, 10.0] and len(chat_server.requests) == 3
    path, headers, body = chat_server.requests[-1]
    assert path == "/v1/chat/completions" and headers["Authorization"] == "Bearer sk-test"
    assert body["model"] == "tiny-model" and body["max_tokens"] == 200
    assert RULE in body["messages"][1]["content"]
    summary = result.structured
    assert summary.rules[0] == RULE  # detected in the input, kept verbatim though the model dropped it
    assert "The budget is $1,250 for the quarter." in summary.facts
    assert summary.decisions == ("Use PostgreSQL 16.2",)
    assert summary.open_items == ("migrate the billing table",)
    assert result.token_count <= 200 and not result.cache_hit
    assert llm.summarize_units(units, 200, task="billing migration").cache_hit
    assert len(chat_server.requests) == 3


@pytest.mark.parametrize("chat_server", [(10, 503)], indirect=True)
def test_llm_gives_up_after_the_last_attempt_with_capped_delays(chat_server):
    sleeps: list[float] = []
    retry = RetryPolicy(max_attempts=4, backoff_base_seconds=40, max_delay_seconds=60)
    llm = LLMSummarizer(chat_server.base_url, "m", retry=retry, sleep=sleeps.append)
    with pytest.raises(StrategyError, match="after 4 attempts.*HTTP 503"):
        llm.summarize_text("word " * 400, 50)
    assert sleeps == [40.0, 60.0, 60.0] and len(chat_server.requests) == 4


@pytest.mark.parametrize("chat_server", [(1, 400)], indirect=True)
def test_llm_does_not_retry_a_client_error(chat_server):
    sleeps: list[float] = []
    llm = LLMSummarizer(chat_server.base_url, "m", sleep=sleeps.append)
    with pytest.raises(StrategyError, match="HTTP 400"):
        llm.summarize_text("word " * 400, 50)
    assert sleeps == [] and len(chat_server.requests) == 1


@pytest.mark.parametrize("chat_server", [(0, 200)], indirect=True)
def test_llm_text_summary_is_cut_to_the_budget(chat_server):
    llm = LLMSummarizer(chat_server.base_url, "m", sleep=lambda s: None)
    result = llm.summarize_text("alpha beta gamma. " * 100, 12)
    assert 0 < result.token_count <= 12 and REPLY.strip().startswith(result.text)


def test_llm_configuration_errors():
    with pytest.raises(ConfigError, match="CTXSIM_MISSING_KEY"):
        LLMSummarizer("http://127.0.0.1:9", "m", api_key_env="CTXSIM_MISSING_KEY").summarize_text("word " * 50, 5)
    with pytest.raises(ConfigError, match="retry.max_attempts"):
        get_summarizer("llm", base_url="http://127.0.0.1:9", model="m", retry={"max_attempts": 0})


def test_parse_reply_reads_markdown_sections():
    assert parse_reply(REPLY) == {
        "facts": ["The budget is $1,250 for the quarter.", "Config in /srv/app.py"],
        "decisions": ["Use PostgreSQL 16.2"],
        "open_items": ["migrate the billing table"],
    }


# ---- counting a rendering from its pieces ----------------------------------------------
@pytest.mark.parametrize("scenario", ["prior-summaries", "code-heavy", "tool-dupes", "transcript-marshmallow"])
def test_piecewise_counts_equal_the_rendering_count(scenario):
    """The fitting loop counts a growing summary from memoized line and sentence
    counts; on real contexts the sum equals one count of the whole rendering."""
    import random

    from ctxsim.lab.contexts import build_context
    from ctxsim.lab.scenarios import find_scenario
    from ctxsim.summarize.extractive import _text_pieces, text_rendering, text_rendering_tokens, unit_candidates
    from ctxsim.summarize.structured import Candidate, _assemble, summary_tokens

    state = build_context(find_scenario(scenario), 0)
    candidates, _, _ = unit_candidates(state.units)
    base = StructuredSummary(SummarySpan("u1", "u9", 1, 9))
    rng = random.Random(0)
    for _ in range(60):
        chosen = rng.sample(candidates, rng.randint(0, min(25, len(candidates))))
        assert summary_tokens(base, chosen) == count_tokens(_assemble(base, chosen).render())
    text = "\n\n".join(u.content for u in state.units[:30])
    sentences, separators = _text_pieces(text)
    pieces = [Candidate("text", s, (i, 0)) for i, s in enumerate(sentences)]
    for _ in range(60):
        chosen = rng.sample(pieces, rng.randint(1, min(40, len(pieces))))
        assert text_rendering_tokens(separators, chosen) == count_tokens(text_rendering(separators, chosen))


@given(st.lists(st.sampled_from(["a", "b1", ".", "!", " ", "  ", "\n", "\n\n", "\t", "é", "🙂", "'s", "-", "12345", "|"]),
                min_size=1, max_size=16), st.integers(0, 3))
@settings(max_examples=300, deadline=None)
def test_piecewise_counts_hold_for_any_stripped_sentences(parts, seps):
    """Adversarial sentences (punctuation before a line break, digits, emoji, inner
    blank lines): the piecewise count still equals the count of the joined text."""
    from ctxsim.summarize.extractive import text_rendering, text_rendering_tokens
    from ctxsim.summarize.structured import Candidate, _assemble, summary_tokens

    sentences = [w.strip() for w in "".join(parts).split("|") if w.strip()]
    separators = [("\n", " ")[(i + seps) % 2] for i in range(len(sentences))]
    chosen = [Candidate("text", s, (i, 0)) for i, s in enumerate(sentences)]
    base = StructuredSummary(SummarySpan("u1", "u1", 0, 0))
    items = [Candidate(("facts", "notes")[i % 2], s, (i, 0)) for i, s in enumerate(sentences)]
    assert summary_tokens(base, items) == count_tokens(_assemble(base, items).render())
    assert text_rendering_tokens(separators, chosen) == count_tokens(text_rendering(separators, chosen))


@given(st.lists(st.sampled_from(["a", "b1", ".", "!", " ", "\n", "\t", "é", "🙂", "'s", "-", "12345", ")", ":"]),
                min_size=1, max_size=12))
@settings(max_examples=300, deadline=None)
def test_a_sentence_after_a_line_break_costs_its_count_plus_one(parts):
    """A text summary prices a sentence after a line break from the sentence's own
    count (the break is a token of its own): the price is the one counted whole."""
    from ctxsim.summarize.extractive import _piece_tokens

    sentence = "".join(parts).strip()
    if sentence:
        whole = max(count_tokens("\n" + sentence), count_tokens(sentence))
        assert _piece_tokens("\n", sentence) == whole == count_tokens(sentence) + 1
