"""Transcript cuts: the context is a conversation's first messages, its probes what the rest uses again."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxsim.lab.contexts import build_context
from ctxsim.cuts import cut_index, future_probes
from ctxsim.errors import ScenarioError, TranscriptError
from ctxsim.metrics import outcome
from ctxsim.model import ContextUnit
from ctxsim.probes import PROBE_KINDS, answered, probe_kind, probe_scores
from ctxsim.lab.scenarios import DEFAULT_SUITE, Scenario, load_scenarios
from ctxsim.strategies import StrategyContext
from ctxsim.strategies.ladder import externalize_span
from ctxsim.lab.stream.rehydration import RehydrationConfig, Rehydrator
from ctxsim.transcripts import _read_messages, _units, load_transcript

TRANSCRIPTS = sorted((DEFAULT_SUITE.parent / "transcripts").glob("*.jsonl"))

MESSAGES = [
    {"role": "system", "content": "You are an agent. Tools: search_dir, open_file. Answer briefly."},
    {"role": "user", "content": "ISSUE:\nHeaderParser drops charset parameters\nPlease fix it. It should work."},
    {"role": "assistant", "content": 'Let me look. (Open file: /repo/app)\n[tool_call] open_file {"path": "src/mail/header_parser.py"}'},
    {"role": "tool", "content": "[File: src/mail/header_parser.py (120 lines total)]\n"
                                "41: def parse_charset(value):\n42:     return value.split(';')[0]\n"
                                "Traceback (most recent call last):\nKeyError: 'charset_alias'\n(Open file: /repo/app)"},
    {"role": "assistant", "content": "The bug is in parse_charset at line 4242 of header_parser.py; abc grep should "
                                     "check the charset_alias table. Also see unused_helper and 98765.\n(Open file: /repo/app)"},
    {"role": "tool", "content": "Summary so far: nothing else.\n(Open file: /repo/app)"},  # a cut ends after a tool result
    # the future
    {"role": "assistant", "content": '[tool_call] edit_file {"path": "src/mail/header_parser.py", "start_line": 41}'},
    {"role": "tool", "content": "Edited parse_charset; KeyError: 'charset_alias' is gone. Line 4242 now returns the "
                                "charset parameters. grep abc should search_dir (Open file: /repo/app)"},
]
CUT = 6 / 8


@pytest.fixture
def transcript(tmp_path: Path) -> Path:
    path = tmp_path / "session.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in MESSAGES), encoding="utf-8")
    return path


def test_probes_are_context_strings_the_future_uses_again(transcript):
    state = load_transcript(transcript, cut=CUT)
    assert len(state.units) == 6 and state.task == "HeaderParser drops charset parameters"
    probes = {f.value: f for f in state.fact_table}
    assert {v: probe_kind(f) for v, f in probes.items()} == {
        "HeaderParser drops charset parameters": "continuation",  # the task line (cuts.task_probe)
        "charset": "continuation",  # task terms
        "parameters": "continuation",
        "src/mail/header_parser.py": "artifact",  # a path (header_parser.py alone: the future names only the path)
        "parse_charset": "recall",  # identifiers, numbers, error lines
        "charset_alias": "recall",
        "KeyError": "recall",
        "KeyError: 'charset_alias'": "recall",
        "4242": "recall",
    }
    # each probe sits in the context unit where it first occurs, with that unit's line as its text
    for fact in state.fact_table:
        unit = state.unit(fact.unit_id)
        assert fact.value in unit.content and fact.value in fact.text
        assert not any(fact.value in u.content for u in state.units[: state.position(unit.id)])
    assert probes["charset"].unit_id == "line-2" and probes["parse_charset"].unit_id == "line-4"


def test_trivial_and_unused_strings_are_no_probes(transcript):
    values = {f.value for f in load_transcript(transcript, cut=CUT).fact_table}
    # short (abc), stop and shell words (should, grep), the system prompt's tool names (search_dir),
    # a tool call's argument names (path, start_line), everywhere (/repo/app: 4 of 6 units),
    # and what the future never uses (unused_helper, 98765, "drops", HeaderParser), names inside a path (header_parser)
    for trivial in ("abc", "should", "grep", "search_dir", "path", "start_line", "/repo/app", "unused_helper", "98765", "drops",
                    "HeaderParser", "header_parser", "header_parser.py"):
        assert trivial not in values


def test_without_a_cut_a_transcript_has_no_probes_and_cut_index_keeps_a_future(transcript):
    assert load_transcript(transcript).fact_table == ()
    assert [cut_index([False] * 8, c) for c in (0.01, 0.5, 0.99)] == [1, 4, 7]  # no tool result: round(cut * n)
    results = [False, False, False, True, False, False, True, False]
    assert [cut_index(results, c) for c in (0.3, 0.6, 0.8, 0.99)] == [2, 4, 4, 7]  # back to just after a tool result
    one = transcript.parent / "one.jsonl"
    one.write_text(json.dumps(MESSAGES[1]) + "\n")
    with pytest.raises(TranscriptError, match="at least two messages"):
        load_transcript(one, cut=0.5)


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.stem)
@pytest.mark.parametrize("cut", [0.3, 0.5, 0.8])
def test_shipped_cuts_probe_only_what_their_future_says_again(path, cut):
    units = _units(_read_messages(path))
    k = cut_index([u.tool is not None for u in units], cut)
    state = load_transcript(path, cut=cut)
    assert state.unit_ids == tuple(u.id for u in units[:k])
    future = "\n".join(u.content for u in units[k:])
    context = state.render()
    reused = tuple(f for f in state.fact_table if f.id != "cut-task")
    assert future_probes(units[:k], units[k:], state.task) == reused
    task = [f for f in state.fact_table if f.id == "cut-task"]  # the task line, said again or not
    assert [f.value for f in task] == [state.task] and state.task in context
    for fact in reused:
        assert fact.value in context and fact.value in future
        assert (len(fact.value) >= 4 or sum(c.isdigit() for c in fact.value) >= 3) and probe_kind(fact) != "decision"


def test_answering_rules_on_a_cut(transcript):
    state = load_transcript(transcript, cut=CUT)
    assert outcome(state, state).probe_scores == dict.fromkeys(PROBE_KINDS, 1.0)
    tool = state.unit("line-4")
    # dropped: the probes only it holds are lost
    dropped = state.with_units([u for u in state.units if u.id != tool.id], applied="drop")
    lost = {f.value for f in state.fact_table if not answered(f, dropped.render())}
    assert lost == {"KeyError: 'charset_alias'", "KeyError"} and probe_scores(state, dropped)["recall"] == 0.6
    # summarized with the value: answered
    summary = ContextUnit(id="s", type="summary", role="assistant", summary_depth=1, source_ids=(tool.id,),
                          content="[Context Summary]\n## Errors\n- KeyError: 'charset_alias' in header_parser.py")
    summarized = state.with_units([summary if u.id == tool.id else u for u in state.units], applied="summarize_old")
    assert probe_scores(state, summarized)["recall"] == 1.0
    # externalized: the error line is out of the prompt until rehydrated
    pointer, artifact, _ = externalize_span([tool], StrategyContext(), 20)
    externalized = state.with_units([pointer if u.id == tool.id else u for u in state.units], applied="externalize",
                                    artifacts=(artifact,))
    error = next(f for f in state.fact_table if f.value == "KeyError: 'charset_alias'")
    assert not answered(error, externalized.render()) and error.value in artifact.content
    ask = ContextUnit(id="ask", type="message", role="user", content=f"Open {artifact.id} again.")
    asked = externalized.with_units(externalized.units + (ask,))
    (back,) = Rehydrator(RehydrationConfig(), 10_000).inject([ask], asked, {u.id: u for u in state.units}, 1)
    assert answered(error, asked.with_units(asked.units + (back.unit,)).render())


# ---- scenarios and families -------------------------------------------------------------

def test_a_cut_scenario_and_a_cut_family(transcript):
    fixed = Scenario.model_validate({"name": "c", "transcript": str(transcript), "cut": CUT})
    state = build_context(fixed, 0)
    assert len(state.units) == 6 and state.limit == state.total_tokens and state.fact_table
    family = Scenario.model_validate({"name": "f", "transcript": str(transcript), "cut": {"min": 0.3, "max": 0.8},
                                      "sample": {"overflow": {"min": 1.5, "max": 1.5}}})
    states = [build_context(family, seed) for seed in range(8)]
    assert len({len(s.units) for s in states}) > 1  # the cut is drawn per seed
    for seed, s in enumerate(states):
        assert 0.3 <= family.draw(seed).cut <= 0.8
        assert s.total_tokens / s.limit == pytest.approx(1.5, rel=0.02)  # overflow of the cut context
    # a family without a cut draws exactly what it drew before cuts existed
    whole = Scenario.model_validate({"name": "w", "transcript": str(transcript), "sample": {"overflow": {"min": 1.1, "max": 2.5}}})
    assert whole.draw(3).cut is None and not build_context(whole, 3).fact_table


@pytest.mark.parametrize(("data", "needle"), [
    ({"name": "g", "limit": 4000, "overflow": 1.5, "p1_ratio": 0.1, "mix": {"message": 1.0}, "cut": 0.5}, "only a transcript"),
    ({"name": "t", "transcript": "x.jsonl", "cut": {"min": 0.2, "max": 0.5}}, "transcript family"),
    ({"name": "t", "transcript": "x.jsonl", "cut": {"min": 0.0, "max": 0.5}, "sample": {"overflow": {"min": 1.1, "max": 2}}},
     "within (0, 1)"),
    ({"name": "t", "transcript": "x.jsonl", "cut": 1.0}, "cut"),
])
def test_a_bad_cut_names_the_key_and_value(tmp_path, data, needle):
    import yaml

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ScenarioError) as err:
        load_scenarios(path)
    assert needle in str(err.value) and "cut" in str(err.value) and "bad.yaml" in str(err.value)


def test_every_shipped_cut_family_gives_probes_its_future_uses(repo_root: Path):
    families = [s for s in load_scenarios(repo_root / "data" / "families" / "transcripts.yaml") if s.cut is not None]
    assert len(families) == len(TRANSCRIPTS)
    for family in families:
        for seed in range(3):
            state = build_context(family, seed)
            assert state.fact_table and state.total_tokens > state.limit


def test_a_cut_and_a_continuation_context_are_the_same_bytes_in_every_process(repo_root: Path):
    """A cut's probes (their order and ids) must not follow the process's string hashing:
    the task terms a unit holds are taken in order of occurrence, not in a set's order."""
    code = (
        "import sys, hashlib\n"
        "from ctxsim.lab.contexts import build_context\n"
        "from ctxsim.lab.scenarios import find_scenario\n"
        "from ctxsim.serialize import dumps_state\n"
        "for suite, name in zip(sys.argv[1::2], sys.argv[2::2]):\n"
        "    for seed in (3, 5):\n"
        "        print(hashlib.sha256(dumps_state(build_context(find_scenario(name, suite), seed)).encode()).hexdigest())\n"
    )
    families = repo_root / "data" / "families"
    args = [str(families / "swe_corpus.yaml"), "swe-validation",
            str(families / "agent_sessions_continuation.yaml"), "agent-sessions-continuation"]
    runs = [subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2", "3")]
    assert runs[0] == runs[1] == runs[2] and len(runs[0].split()) == 4


def _held_terms_plainly(text: str, terms: frozenset[str]) -> tuple[str, ...]:
    """The definition :func:`ctxsim.cuts.held_terms` implements: each term searched alone."""
    held = []
    for term in terms:
        match = re.search(rf"(?<![\w]){re.escape(term)}(?![\w])", text)
        if match is not None:
            held.append((match.start(), term))
    return tuple(term for _, term in sorted(held))


_TERM_WORDS = ["parse", "parser", "parse-error", "error", "data", "data-set", "set", "Node_2", "node", "é", "x1"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from([*_TERM_WORDS, " ", "-", "_", ".", "\n", "é", "(", "a", "1"]), max_size=40),
       st.frozensets(st.sampled_from(_TERM_WORDS), max_size=8))
def test_held_terms_are_the_terms_searched_one_by_one(pieces, terms):
    from ctxsim.cuts import held_terms

    text = "".join(pieces)
    assert held_terms(text, terms) == _held_terms_plainly(text, terms)


def test_held_terms_on_the_shipped_transcripts(repo_root: Path):
    from ctxsim.cuts import held_terms, task_terms

    for path in TRANSCRIPTS:
        texts = [unit.content for unit in _units(_read_messages(path))]
        terms = frozenset(task_terms(" ".join(texts[:2])))
        assert terms
        for text in texts:
            assert held_terms(text, terms) == _held_terms_plainly(text, terms)


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet="abcxyzABCXYZ019_", min_size=1, max_size=12))
def test_an_identifier_is_a_token_with_an_underscore_a_digit_or_an_inner_capital(token):
    from ctxsim.cuts import _IDENT, _is_identifier

    if _IDENT.fullmatch(token):
        plain = "_" in token or any(c.isdigit() for c in token) or any(c.isupper() for c in token[1:])
        assert _is_identifier(token) == plain
