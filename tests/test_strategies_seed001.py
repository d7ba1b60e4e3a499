"""Seed 001's five strategies: summarize_old, prioritize_recent, content_type_chunking,
discard_low_rel, hybrid; the code minifier and log compressor behind chunking."""

from __future__ import annotations

import ast
import io
import math
import random
import re
import tokenize

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxsim import sentences
from ctxsim.errors import StrategyError
from strategy_contract import apply_with_contract

from ctxsim.lab.contexts import build_context
from ctxsim.minify import collapse_repeats, compress_log, minify_code
from ctxsim.model import ContextState, ContextUnit, ToolEnvelope
from ctxsim.lab.scenarios import find_scenario
from ctxsim.strategies import StrategyContext, get_strategy
from ctxsim.strategies.common import relevance_scores
from ctxsim.strategies.seed001 import BRIEF_PLACEHOLDER
from ctxsim.summarize import rules
from ctxsim.summarize.rules import must_keep_sentences
from ctxsim.tokens import count_messages, count_tokens

SEED001_IDS = ("summarize_old", "prioritize_recent", "content_type_chunking", "discard_low_rel", "hybrid")
ORDINARY_SCENARIOS = ("mild-overflow", "code-heavy", "chat-10k", "fact-dense", "log-heavy", "severe-overflow")

VOCAB = (
    "deploy database schema migration rollback index query latency cache budget invoice meeting "
    "calendar travel recipe garden weather football concert novel painting lecture exam"
).split()
TASK = "Finish the database schema migration and plan the rollback."
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def prose(seed: int, words: int) -> str:
    """Deterministic lowercase prose (no digits, no names) in sentences of eight words."""
    out = []
    for i in range(words):
        word = VOCAB[(seed * 7 + i * (seed % 5 + 1)) % len(VOCAB)]
        out.append(word.capitalize() if i % 8 == 0 else word)
        if i % 8 == 7:
            out[-1] += "."
    return " ".join(out) + "."


def unit(i: int, *, type: str = "message", priority: int = 2, pinned: bool = False, content: str | None = None,
         words: int = 40, role: str | None = None, **kw) -> ContextUnit:
    return ContextUnit(
        id=f"u{i}", type=type, role=role or ("user" if i % 2 == 0 else "assistant"),
        content=content or prose(i, words), turn=i, timestamp=float(i), priority=priority, pinned=pinned, **kw,
    )


def state_of(units, *, limit: int, task: str = TASK, **kw) -> ContextState:
    return ContextState(units=tuple(units), limit=limit, min_limit=10, task=task, **kw)


def fitted(units, share: float, **kw) -> ContextState:
    """A state whose limit is ``share`` of its size."""
    return state_of(units, limit=max(10, int(state_of(units, limit=10**7).total_tokens * share)), **kw)


# ---- content builders -------------------------------------------------------------------------

NAMES = "load_user parse_row build_index sync_cache render_page total_count items result row key value".split()


@st.composite
def python_code(draw) -> str:
    """Python whose comments and docstrings only use words that are identifiers of the code,
    with string literals holding '#' and '//' (which are not comments)."""
    lines = []
    for f in range(draw(st.integers(1, 4))):
        name, arg = draw(st.sampled_from(NAMES)) + f"_{f}", draw(st.sampled_from(NAMES))
        lines.append(f"def {name}({arg}):")
        if draw(st.booleans()):
            lines.append(f'    """{name} {arg}."""')
        for k in range(draw(st.integers(1, 3))):
            var = draw(st.sampled_from(NAMES))
            tail = f"  # {var}_{k} {arg}" if draw(st.booleans()) else ""
            lines.append(f"    {var}_{k} = {arg} // {k + 1}{tail}")
            if draw(st.booleans()):
                lines.append(f"    # {name}")
            if draw(st.booleans()):
                lines.append("   " if draw(st.booleans()) else "")
        lines.append(f'    return "{name} # not a comment // nor this"')
        lines.append("")
    if draw(st.booleans()):  # a module docstring naming the first function
        lines = [f'"""{lines[0][4:].split("(")[0]}."""', ""] + lines
    return "\n".join(lines)


def log_text(seed: int, lines: int) -> str:
    rng = random.Random(seed)
    out = []
    for i in range(lines):
        level = rng.choice(["INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR"])
        msg = {"ERROR": "failed to connect to the primary database", "WARN": "retrying the cache refresh"}.get(
            level, rng.choice(["polling the job queue", "request served", "cache refreshed"]))
        for _ in range(rng.choice([1, 1, 4])):
            out.append(f"2026-01-12 09:{i % 60:02d}:{rng.randrange(60):02d} {level} scheduler: {msg}")
    return "\n".join(out)


def plan_text(seed: int) -> str:
    return "To Do List:\n" + "\n".join(f"- [ ] step {k}: {prose(seed + k, 6)}" for k in range(4))


@st.composite
def states(draw) -> ContextState:
    """Random mixed contexts: every unit type, P1/P2/P3, some pinned, 40-130 % of the limit."""
    n = draw(st.integers(1, 16))
    units = []
    for i in range(n):
        kind = draw(st.sampled_from(("message", "message", "code", "log", "plan_ref", "tool_result", "other", "summary")))
        content = {
            "code": lambda: draw(python_code()),
            "log": lambda: log_text(i, draw(st.integers(3, 30))),
            "plan_ref": lambda: plan_text(i),
            "summary": lambda: f"[Context Summary - Turns 0-{i}]\n" + prose(i + 50, 60),
        }.get(kind, lambda: prose(i, draw(st.integers(3, 160))))()
        tool = ToolEnvelope("read_file", f"c{i}", target=f"/srv/f{i}.py") if kind == "tool_result" else None
        units.append(unit(i, type=kind, priority=draw(st.sampled_from((1, 2, 3))), content=content, tool=tool,
                          pinned=draw(st.booleans()) and i % 4 == 0, role="tool" if tool else None))
    return fitted(units, draw(st.floats(0.4, 1.3)))


SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- the contract, on random states ----------------------------------------------------------


@pytest.mark.parametrize("sid", SEED001_IDS)
@SETTINGS
@given(state=states(), warning=st.booleans())
def test_contract(sid, state, warning):
    ctx = StrategyContext(target_tokens=state.warning_tokens if warning else None)
    _, result = apply_with_contract(sid, state, ctx)
    new = result.state
    assert new.total_tokens == count_messages(new.render_messages())
    if result.tokens_after <= ctx.target(state):
        assert count_messages(new.render_messages()) <= ctx.target(state)


@pytest.mark.parametrize("name", ORDINARY_SCENARIOS)
def test_no_fallback_and_masks_agree_on_generated_contexts(name):
    state = build_context(find_scenario(name), 1)
    for sid in SEED001_IDS:
        strategy = get_strategy(sid)
        result = strategy.apply(state)
        assert result.fallback is None, (sid, result.note)
        assert strategy.applicable(state) == result.changed
        assert result.tokens_after < result.tokens_before


def test_seed_config_parameters_are_accepted():
    from ctxsim.config import ContextConfig
    from ctxsim.strategies import strategy_from_config

    config = ContextConfig()
    for sid in SEED001_IDS:
        strategy = strategy_from_config(sid, config)
        for key, value in config.strategy_params(sid).items():
            got = getattr(strategy.params, key)
            assert got == value or (isinstance(value, dict) and value.items() <= got.items())


# ---- summarize_old ---------------------------------------------------------------------------


def old_span_state(limit_share: float = 0.6) -> ContextState:
    units = [unit(0, pinned=True, content="Never delete production data.")]
    units += [unit(1, priority=1, content="Rule: always keep the rollback script next to every schema migration. "
                                          + prose(1, 80))]
    units += [unit(i, priority=(2, 3)[i % 2], words=120) for i in range(2, 12)]
    units += [unit(i, words=30) for i in range(12, 20)]
    return fitted(units, limit_share)


def test_summarize_old_folds_old_p2_p3_into_one_summary_of_summary_length():
    state = old_span_state()
    result = get_strategy("summarize_old").apply(state)
    new = result.state
    split = math.floor(len(state.units) * 0.6)
    folded = [u.id for u in state.units[:split] if not u.pinned and u.priority != 1]
    assert set(result.summarized) == set(folded)
    (summary,) = [u for u in new.units if u.id not in state]
    assert summary.type == "summary" and summary.role == "assistant" and summary.source_ids == tuple(folded)
    assert new.position(summary.id) == state.position(folded[0])  # where the first folded unit was
    body = summary.content.split("\n", 1)[1]
    assert 0.8 * 300 <= count_tokens(body) <= 300
    assert all(u.id in new and new.unit(u.id) == u for u in state.units[split:]), "recent units untouched"
    assert "always keep the rollback script" in new.render() and "Never delete production data." in new.render()
    assert result.cost.llm_calls == 1 and result.fallback is None


def test_summarize_old_compresses_old_p1_in_place_only_while_over_the_target():
    state = old_span_state()
    p1 = state.unit("u1")
    relaxed = get_strategy("summarize_old").apply(state).state
    assert relaxed.unit("u1") == p1, "the fold was enough: P1 untouched"
    tight = get_strategy("summarize_old").apply(state, StrategyContext(target_tokens=400))
    compressed = tight.state.unit("u1")
    assert "u1" in tight.compressed and compressed.priority == 1
    assert compressed.token_count <= math.floor(0.7 * p1.token_count)
    assert tight.cost.llm_calls == 2


def test_summarize_old_is_not_applicable_without_old_unprotected_units():
    units = [unit(0, pinned=True, words=200), unit(1, priority=1, words=20)] + [unit(i, words=80) for i in range(2, 5)]
    state = fitted(units, 0.5)
    strategy = get_strategy("summarize_old")
    assert not strategy.applicable(state)
    assert not strategy.apply(state).changed
    small = fitted([unit(i, words=10) for i in range(6)], 0.5)  # old span smaller than a summary
    assert not strategy.applicable(small) and not strategy.apply(small).changed


def unrelated_paragraphs(seed: int, count: int, words: int = 60) -> str:
    """Paragraphs with disjoint made-up vocabularies: mutually unrelated for any embedder."""
    rng = random.Random(seed)
    syllables = "ba ko ri mu te lo sa vi ne du pa fo gi ha je ku".split()
    paragraphs = []
    for _ in range(count):
        vocab = ["".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(12)]
        sentences = [" ".join(rng.choice(vocab) for _ in range(10)).capitalize() + "." for _ in range(words // 10)]
        paragraphs.append(" ".join(sentences))
    return "\n\n".join(paragraphs)


def test_summarize_old_falls_back_to_truncation_when_the_summary_is_incoherent():
    units = [unit(i, content=unrelated_paragraphs(i, 6)) for i in range(6)]
    units += [unit(i, content=unrelated_paragraphs(i, 1, 20)) for i in range(6, 10)]
    state = state_of(units, limit=3000)
    result = get_strategy("summarize_old").apply(state, StrategyContext(target_tokens=1000))
    assert result.fallback == "truncate"
    (cut,) = [u for u in result.state.units if u.id not in state]
    body = cut.content.split("\n", 1)[1]
    assert count_tokens(body) <= 300
    tail = units[5].content.split("\n\n")[-1]
    assert body.endswith(tail), "the most recent whole paragraphs are kept"
    assert get_strategy("summarize_old", min_similarity=0.0).apply(state).fallback is None


def test_critical_facts_survive_five_summarize_cycles():
    """Seed 002: test_facts_preserved_after_compaction, on a growing context."""
    units = [unit(0, content="The user prefers Python for every script in this project."),
             unit(1, content="The budget is $1000 for the whole migration.")]
    state = state_of(units, limit=10_000)
    next_id = 2
    for _ in range(5):
        units = list(state.units) + [unit(next_id + k, words=90) for k in range(8)]
        next_id += 8
        state = fitted(units, 0.7)
        result = get_strategy("summarize_old").apply(state)
        assert result.changed
        state = result.state
        rendered = state.render()
        assert "prefers Python" in rendered and "$1000" in rendered
    assert max(u.summary_depth for u in state.units) >= 3, "summaries of summaries were made"


def test_pinned_constraint_survives_ten_summarize_cycles():
    """Seed 002: test_no_summary_drift ('Never delete production data')."""
    pinned = unit(0, pinned=True, content="Never delete production data.")
    user_rule = unit(1, content="Always run the linter before committing any change.", role="user")
    state = state_of([pinned, user_rule], limit=10_000)
    for cycle in range(10):
        units = list(state.units) + [unit(10 + cycle * 6 + k, words=90) for k in range(6)]
        state = get_strategy("summarize_old").apply(fitted(units, 0.7)).state
        assert state.unit("u0") == pinned
        assert "Never delete production data." in state.render()
        assert "Always run the linter before committing any change." in state.render(), "a rule carried by summaries"


# ---- prioritize_recent -----------------------------------------------------------------------


def relevance_state() -> ContextState:
    topical = [unit(i, content=f"The database schema migration needs an index and a rollback plan, part {i}.") for i in range(0, 12, 2)]
    off = [unit(i, content="Bake the bread, water the garden and watch the football concert tonight.") for i in range(1, 12, 2)]
    return fitted(sorted(topical + off, key=lambda u: u.turn), 0.8)


def test_prioritize_recent_drops_least_relevant_first_and_stops_when_it_fits():
    state = relevance_state()
    result = get_strategy("prioritize_recent").apply(state)
    off_topic = [u.id for u in state.units if "bread" in u.content]
    recent = state.unit_ids[-math.ceil(len(state.units) * 0.2):]
    assert result.removed and set(result.removed) <= set(off_topic) - set(recent)
    assert result.state.fits()
    assert len(result.removed) < len(set(off_topic) - set(recent)), "stopped as soon as it fit"
    assert all(uid in result.state for uid in recent)


def test_prioritize_recent_boosts_p1_when_p1_may_be_dropped():
    mid = "Plan the rollback, bake the bread, water the garden and watch the concert."
    for priority, boost, survives in ((2, 1.5, False), (1, 1.5, True), (1, 1.0, False)):
        state = state_of([unit(99, content=mid, priority=priority)] + list(relevance_state().units), limit=50)
        raw, _ = relevance_scores(state, state.units, StrategyContext())
        assert 0.5 / 1.5 <= raw[0] < 0.5, "the fixture needs a unit the boost lifts over the threshold"
        result = get_strategy("prioritize_recent", priority_boost=boost, drop_p1=True).apply(state)
        assert ("u99" in result.state) == survives
        kept = get_strategy("prioritize_recent", priority_boost=boost).apply(state)
        assert ("u99" in kept.state) == (priority == 1 or survives), "seed 001: prioritize_recent keeps P1 intact"


def test_prioritize_recent_all_high_relevance_advises_fresh_start():
    units = [unit(i, content="The database schema migration needs an index and a rollback plan.") for i in range(8)]
    state = fitted(units, 0.5)
    strategy = get_strategy("prioritize_recent")
    result = strategy.apply(state)
    assert not result.changed and result.note == "all units high-relevance: fresh start advised"
    assert not strategy.applicable(state)


# ---- content_type_chunking -------------------------------------------------------------------


def names_of(code: str) -> set[str]:
    return {t.string for t in tokenize.generate_tokens(io.StringIO(code).readline) if t.type == tokenize.NAME}


@settings(max_examples=60, deadline=None)
@given(code=python_code(), p1=st.booleans())
def test_minified_code_keeps_every_identifier_and_stays_valid(code, p1):
    out = minify_code(code, strip_docstrings=not p1)
    assert set(IDENTIFIER.findall(code)) <= set(IDENTIFIER.findall(out))
    assert names_of(code) == names_of(out)
    ast.parse(out)
    assert out.count("# not a comment // nor this") == code.count("# not a comment // nor this")
    assert count_tokens(out) <= count_tokens(code)
    if "  # " in code or "    # " in code or (not p1 and '"""' in code):
        assert count_tokens(out) < count_tokens(code), "comments (and docstrings) removed"
    assert not any(line.strip() == "" or line != line.rstrip() for line in out.split("\n"))


def test_minify_code_removes_comments_docstrings_and_blank_lines():
    code = '''"""Module doc."""
import os  # os


def area(width, height):
    """Area of a box."""

    # multiply
    return width * height  
'''
    assert minify_code(code) == "import os\ndef area(width, height):\n    return width * height"
    assert minify_code(code, strip_docstrings=False) == (
        '"""Module doc."""\nimport os\ndef area(width, height):\n    """Area of a box."""\n    return width * height'
    )
    assert minify_code('def f():\n    """Only a docstring."""\n') == "def f():\n    ..."


def test_minify_code_other_languages_and_fences():
    js = 'function add(a, b) { // sum\n  /* block\n     comment */\n  return a + b; }\nconst u = "http://x.io//p"; // tail\n'
    assert minify_code(js) == 'function add(a, b) {\n  return a + b; }\nconst u = "http://x.io//p";'
    c = "#include <stdio.h>\nint main() { return 0; } /* done */\n"
    assert minify_code(c) == "#include <stdio.h>\nint main() { return 0; }"
    shell = "```bash\n# install\npip install ctxsim  # quietly\n\necho '# kept'\n```\nSome prose.  \n"
    assert minify_code(shell) == "```bash\npip install ctxsim\necho '# kept'\n```\nSome prose.  \n"
    fragment = "    def method(self, x):  # fragment\n        return x // 2\n"  # does not parse: '#' comments only
    assert minify_code(fragment) == "    def method(self, x):\n        return x // 2"


def test_minify_code_never_loses_text_that_only_looks_like_a_comment():
    shell = "cp src/*.py build/\nrm -rf tmp\necho done\n"  # an unclosed /* is not a comment
    assert minify_code(shell) == shell.rstrip("\n")
    assert minify_code("GET /api/v1/* returned 404\nretrying\n") == "GET /api/v1/* returned 404\nretrying"
    css = "```css\nbody { background: url(//cdn.example.com/hero.png); color: red; } /* theme */\n```"
    assert minify_code(css) == "```css\nbody { background: url(//cdn.example.com/hero.png); color: red; }\n```"
    prose = "Step one: copy the files.\n\n\nStep two: run it.   \n"  # no comment syntax at all
    assert minify_code(prose) == "Step one: copy the files.\nStep two: run it."
    # bare \r line breaks (old Mac files): tokenize splits on them, so must the minifier
    assert minify_code("import os\r# load settings\rdef load(path):\r    return path\r") == (
        "import os\ndef load(path):\n    return path")
    deep = "x = " + "-" * 3000 + "1"  # deep enough to exhaust the parser: returned as it was
    assert minify_code(deep) == deep
    code = unit(0, type="code", content="QUERY = (" + " +\n".join(f'"a{i}"' for i in range(3000)) + ")\n")
    state = state_of([code, unit(1, content=prose)], limit=100)
    strategy = get_strategy("content_type_chunking")
    assert strategy.applicable(state) is not None  # no RecursionError
    strategy.apply(state)


@settings(max_examples=60, deadline=None)
@given(code=python_code())
def test_minified_python_fragment_keeps_floor_division_and_identifiers(code):
    fragment = code + '\nsizes = {\n    "half": total // 2,'  # cut off mid-dict: does not parse
    out = minify_code(fragment)
    assert out.count("//") == fragment.count("//"), "Python's // is floor division, never a comment"
    assert set(IDENTIFIER.findall(fragment)) <= set(IDENTIFIER.findall(out))


def test_minify_code_keeps_floor_division_in_untagged_python_fragments():
    # a cut-off fragment (does not parse) whose '{' and '//' once made it C: '// size' was deleted
    cut = 'def page_count(total, size):\n    pages = total // size\n    return {\n        "last": total // size * size,\n'
    assert minify_code(cut) == cut.rstrip("\n")
    # real '#' comments and floor division: the comments go, the divisions stay
    commented = (
        "    # whole pages first\n    pages = len(items) // size\n    # then the rest\n    sizes = {\n"
        '        "full": pages * size,  # all full pages\n        "rest": len(items) // size,\n'
    )
    assert minify_code(commented) == (
        '    pages = len(items) // size\n    sizes = {\n        "full": pages * size,\n        "rest": len(items) // size,'
    )


def test_minify_code_strips_real_double_slash_comments_and_keeps_ambiguous_ones():
    c = "int total = 0; // running sum\nfor (int i = 0; i < n; i++) {\n    // add the next value\n    total += values[i];\n}\n"
    assert minify_code(c) == "int total = 0;\nfor (int i = 0; i < n; i++) {\n    total += values[i];\n}"
    java = "```java\nint half = total // rounded down\n    / 2;\n```"  # tagged: every // is a comment
    assert minify_code(java) == "```java\nint half = total\n    / 2;\n```"
    # untagged, a '//' after an operand may be floor division: kept (deleting code is the worse error)
    mixed = "let n = items.length; // count\nlet half = n // 2\nconst rest = {\n"
    assert minify_code(mixed) == "let n = items.length;\nlet half = n // 2\nconst rest = {"


def test_text_without_spaces_is_still_compressed_so_applicable_means_a_change():
    import base64

    blob = base64.b64encode(bytes(range(256)) * 4).decode()  # ~990 tokens, not one space
    state = state_of([unit(0, content=blob, type="other"), unit(1, content=prose(1, 40))], limit=400)
    strategy = get_strategy("content_type_chunking")
    assert strategy.applicable(state)
    new = strategy.apply(state).state
    assert new.unit("u0").token_count <= 0.6 * state.unit("u0").token_count and blob.startswith(new.unit("u0").content)


def test_collapse_repeats_and_compress_log_keep_errors():
    lines = [f"09:00:{i:02d} INFO polling the job queue" for i in range(12)]
    assert collapse_repeats(lines + ["ERROR boom"]) == ["09:00:00 INFO polling the job queue [×12]", "ERROR boom"]
    text = log_text(3, 80)
    budget = count_tokens(text) // 5
    out = compress_log(text, budget)
    assert count_tokens(out) <= budget
    collapsed = collapse_repeats(text.split("\n"))
    kept = set(out.split("\n")[:-1])
    assert kept <= set(collapsed), "whole (collapsed) lines, nothing rewritten"
    assert out.split("\n")[-1] == f"[{len(collapsed) - len(kept)} log lines omitted]"

    def share(level: str) -> float:
        lines = [ln for ln in collapsed if f" {level} " in ln]
        return sum(ln in kept for ln in lines) / len(lines)

    assert share("ERROR") >= share("WARN") >= share("INFO") and share("ERROR") > 0.5 > share("INFO"), "severe first"


def test_content_type_chunking_compresses_each_type_by_its_ratio():
    code = "\n".join(["def build_index(rows):", "    # walk the rows", "", "    return sorted(rows)  # stable"] * 3)
    units = [
        unit(0, content=prose(0, 200)),
        unit(1, priority=1, content=prose(1, 200)),
        unit(2, type="code", content=code),
        unit(3, type="code", priority=1, content='def f(x):\n    """Doc."""\n    # note\n\n    return x\n'),
        unit(4, type="plan_ref", content=plan_text(4)),
        unit(5, type="log", content=log_text(5, 60)),
        unit(6, type="summary", content="[Context Summary - Turns 0-3]\n" + prose(6, 100)),
        unit(7, type="placeholder", role="assistant", content=BRIEF_PLACEHOLDER),
        unit(8, pinned=True, content=prose(8, 200)),
        unit(9, type="tool_result", role="tool", content=prose(9, 200)),
    ]
    state = state_of(units, limit=100_000)  # it already fits: seed semantics compress every unit anyway
    result = get_strategy("content_type_chunking").apply(state)
    new = result.state
    assert new.unit_ids == state.unit_ids and result.removed == () and result.summarized == ()
    t = {u.id: u.token_count for u in state.units}
    assert new.unit("u0").token_count <= 0.5 * t["u0"]
    assert 0.5 * t["u1"] < new.unit("u1").token_count <= 0.75 * t["u1"], "P1 text: ratio halfway to 1"
    assert new.unit("u2").content == minify_code(code)
    assert new.unit("u3").content == 'def f(x):\n    """Doc."""\n    return x', "P1 code keeps docstrings"
    for uid in ("u4", "u6", "u7", "u8"):
        assert new.unit(uid) == state.unit(uid), f"{uid} verbatim"
    assert new.unit("u5").token_count <= 0.4 * t["u5"] and " ERROR " in new.unit("u5").content
    assert new.unit("u9").token_count <= 0.6 * t["u9"]
    assert result.cost.llm_calls == 3, "one summary per text/other unit; code and logs need none"


def test_content_type_chunking_ratios_merge_and_validate():
    strategy = get_strategy("content_type_chunking", compress_ratios={"code": 1.0, "text": 0.5})
    assert strategy.params.compress_ratios == {"code": 1.0, "text": 0.5, "log": 0.4, "plan_ref": 1.0, "other": 0.6}
    code_only = state_of([unit(0, type="code", content="x = 1  # one\n\ny = 2\n")], limit=10)
    assert not strategy.applicable(code_only) and not strategy.apply(code_only).changed
    with pytest.raises(StrategyError, match="compress_ratios"):
        get_strategy("content_type_chunking", compress_ratios={"video": 0.5})
    with pytest.raises(StrategyError, match="compress_ratios"):
        get_strategy("content_type_chunking", compress_ratios={"code": 0})


def test_content_type_chunking_applicable_splits_no_text_when_a_unit_compresses_by_its_size():
    # a large P1 user message first (its must-keep sentences need a sentence split), then an
    # assistant message whose compression needs no must-keep sentence: the answer reads no text
    p1 = unit(0, priority=1, role="user", content=prose(0, 400) + " Never push to main.")
    chatty = unit(1, role="assistant", content=prose(1, 200))
    strategy = get_strategy("content_type_chunking")
    sentences.segments.cache_clear()
    assert must_keep_sentences(chatty) == () and sentences.segments.cache_info().misses == 0
    assert strategy.applicable(state_of([p1, chatty], limit=100))
    assert sentences.segments.cache_info().misses == 0, "no sentence split on the way to the answer"
    # the same answer as a scan in unit order: the P1 message alone compresses (its rule is kept) ...
    assert strategy.applicable(state_of([p1], limit=100)) and sentences.segments.cache_info().misses > 0
    assert "Never push to main." in must_keep_sentences(p1)
    # ... and units that compress neither by size nor by content leave it inapplicable
    small = [unit(2, role="assistant", words=10), unit(3, priority=1, role="user", words=10)]
    assert not strategy.applicable(state_of(small, limit=10))


# ---- discard_low_rel -------------------------------------------------------------------------


def test_discard_low_rel_replaces_the_bottom_share_with_one_placeholder():
    state = relevance_state()
    result = get_strategy("discard_low_rel").apply(state)
    n = len(state.units)
    k = n - math.ceil(n * 0.7)
    assert len(result.summarized) == k and result.removed == ()
    off_topic = {u.id for u in state.units if "bread" in u.content}
    assert set(result.summarized) <= off_topic
    (placeholder,) = [u for u in result.state.units if u.id not in state]
    assert placeholder.content == BRIEF_PLACEHOLDER and placeholder.type == "placeholder" and placeholder.role == "assistant"
    first = min(state.position(uid) for uid in result.summarized)
    assert result.state.position(placeholder.id) == first
    linked = get_strategy("discard_low_rel", placeholder_detail="linked").apply(state).state
    (placeholder,) = [u for u in linked.units if u.id not in state]
    assert placeholder.content == f"[Omitted – see archive: {', '.join(placeholder.source_ids)}]"
    assert set(placeholder.source_ids) == set(result.summarized)


def test_discard_low_rel_needs_four_unpinned_units():
    strategy = get_strategy("discard_low_rel")
    three = state_of([unit(i) for i in range(3)] + [unit(3, pinned=True)], limit=10)
    assert not strategy.applicable(three) and not strategy.apply(three).changed
    assert strategy.applicable(state_of([unit(i) for i in range(4)], limit=10))


def test_discard_low_rel_applicable_reads_rules_only_when_the_other_units_do_not_suffice():
    strategy = get_strategy("discard_low_rel")
    ruled = [unit(i, role="user", content=f"Never drop table {i} of the schema.") for i in range(0, 8, 2)]
    plain = [unit(i, role="assistant") for i in range(1, 9, 2)]
    rules._rule_sentences.cache_clear()
    assert strategy.applicable(state_of([*ruled, *plain], limit=10))  # four droppable assistant units suffice
    assert rules._rule_sentences.cache_info().misses == 0, "no user message read for its rules"
    # the same answer as counting every droppable unit: three assistant units need a fourth droppable one,
    # which a user message stating a rule is not and one without a rule is
    for users, expected in ((ruled, False), ([unit(0, role="user")], True)):
        state = state_of([*users, *plain[:3]], limit=10)
        assert strategy.applicable(state) is expected is (strategy._count(state) > 0)


def login_state() -> ContextState:
    """Seven short on-task units and three huge unrelated ones that hold most tokens."""
    units = []
    for i in range(10):
        if i in (1, 3, 5):
            units.append(unit(i, content=unrelated_paragraphs(i, 12)))
        else:
            units.append(unit(i, content=f"The login session timeout bug {i} breaks the login page after a minute."))
    return state_of(units, limit=3000, task="Fix the login session timeout bug on the login page.")


def test_discard_low_rel_undoes_and_summarizes_when_coherence_breaks():
    state = login_state()
    result = get_strategy("discard_low_rel").apply(state)
    assert result.fallback == "summarize_old"
    assert result.state.history == ("discard_low_rel",)
    expected = get_strategy("summarize_old").apply(state).state
    assert result.state.units == expected.units
    assert get_strategy("discard_low_rel", min_coherence=0.0).apply(state).fallback is None


# ---- hybrid ----------------------------------------------------------------------------------


def test_hybrid_stops_as_soon_as_it_fits():
    state = old_span_state(0.6)
    alone = get_strategy("summarize_old").apply(state)
    assert alone.state.fits()
    result = get_strategy("hybrid").apply(state)
    assert result.note == "summarize_old" and result.state.units == alone.state.units
    assert result.cost == alone.cost and result.state.history == ("hybrid",)
    roomy = fitted(state.units, 1.1)
    assert not get_strategy("hybrid").applicable(roomy) and not get_strategy("hybrid").apply(roomy).changed


@pytest.mark.parametrize("max_iterations", [1, 2, 3])
def test_hybrid_never_exceeds_max_iterations(max_iterations):
    state = build_context(find_scenario("severe-overflow"), 0)
    ctx = StrategyContext(target_tokens=500)
    result = get_strategy("hybrid", max_iterations=max_iterations).apply(state, ctx)
    steps = result.note.split(" → ")
    assert len(steps) == max_iterations and not result.state.fits(500)
    assert steps == [sid for sid in ("summarize_old", "prioritize_recent", "content_type_chunking", "discard_low_rel")][:max_iterations]


def test_hybrid_chain_is_checked_and_can_name_any_strategy():
    state = build_context(find_scenario("severe-overflow"), 0)
    result = get_strategy("hybrid", chain=["drop", "summarize_old"]).apply(state)
    assert result.note.startswith("drop")
    for bad, match in ((["nope"], "unknown strategy"), (["fresh_start"], "cannot be part"), (["hybrid"], "cannot be part")):
        with pytest.raises(StrategyError, match=match):
            get_strategy("hybrid", chain=bad)
    with pytest.raises(StrategyError, match="max_iterations"):
        get_strategy("hybrid", max_iterations=0)


def test_hybrid_and_discard_fallback_respect_the_budget():
    from ctxsim.strategies import ContextBudget

    state = old_span_state(0.6)
    ctx = StrategyContext(budget=ContextBudget(excluded=("summarize_old",)))
    result = get_strategy("hybrid").apply(state, ctx)
    assert result.changed and "summarize_old" not in result.note
    only_excluded = get_strategy("hybrid", chain=["summarize_old"])
    assert not only_excluded.applicable(state, ctx) and not only_excluded.apply(state, ctx).changed
    kept = get_strategy("discard_low_rel").apply(login_state(), ctx)
    assert kept.fallback is None and len(kept.summarized) == 3 and "discard kept" in kept.note


def test_prioritize_recent_is_applicable_exactly_when_it_has_candidates_and_reads_units_up_to_the_first(monkeypatch):
    from ctxsim.strategies import seed001

    strategy = get_strategy("prioritize_recent")
    read: list[str] = []
    kept_whole = seed001._kept_whole

    def counting(unit, drop_p1=False):
        read.append(unit.id)
        return kept_whole(unit, drop_p1)

    for name in ("chat-10k", "code-heavy", "pinned-instructions", "mostly-p1", "transcript-marshmallow"):
        for seed in range(2):
            state = build_context(find_scenario(name), seed)
            ctx = StrategyContext(target_tokens=state.limit // 3)
            candidates, _ = strategy._candidates(state, ctx)
            monkeypatch.setattr(seed001, "_kept_whole", counting)
            read.clear()
            applicable = strategy.applicable(state, ctx)
            monkeypatch.setattr(seed001, "_kept_whole", kept_whole)
            assert applicable == bool(candidates)
            if candidates:  # the units read end at the oldest candidate
                oldest = min(state.position(u.id) for u in candidates)
                assert read and read[-1] == state.units[oldest].id
