"""Seed 002's ladder: externalize, clear_tool_results (durability classes), drop."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strategy_contract import apply_with_contract

from ctxsim.lab.contexts import build_context
from ctxsim.model import ContextState, ContextUnit, ToolEnvelope
from ctxsim.lab.scenarios import find_scenario
from ctxsim.serialize import dumps_state, state_from_dict
from ctxsim.strategies import StrategyContext, get_strategy
from ctxsim.strategies.ladder import dropped_span, keywords
from ctxsim.tokens import count_messages

LADDER_IDS = ("externalize", "clear_tool_results", "drop")
VOCAB = (
    "deploy database schema migration rollback index query latency cache budget invoice meeting "
    "calendar travel recipe garden weather football concert novel painting lecture exam"
).split()
POINTER = re.compile(
    r'^\[Externalized Content - artifact:(art-[0-9a-f]{12})\]\nSummary: .+\n'
    r'To retrieve full content, call: read_artifact\("\1"\)\nRehydrate hint: read if you need the full .+$',
    re.S,
)


def prose(seed: int, words: int) -> str:
    """Deterministic prose in sentences of eight words."""
    out = [VOCAB[(seed * 7 + i * (seed % 5 + 1)) % len(VOCAB)] for i in range(words)]
    return " ".join((w.capitalize() if i % 8 == 0 else w) + ("." if i % 8 == 7 else "") for i, w in enumerate(out)) + "."


def unit(i: int, *, type: str = "message", words: int = 40, priority: int = 2, pinned: bool = False,
         content: str | None = None, tool: ToolEnvelope | None = None) -> ContextUnit:
    role = "tool" if tool else ("user" if i % 2 == 0 else "assistant")
    return ContextUnit(id=f"u{i}", type=type, role=role, content=content or prose(i, words), turn=i,
                       timestamp=float(i), priority=priority, pinned=pinned, tool=tool)


def tool_unit(i: int, durability: str, *, words: int = 300, tool: str = "read_file", target: str | None = None,
              det: str | None = None, key_fields: tuple = (), **kw) -> ContextUnit:
    env = ToolEnvelope(tool, f"call-{i}", arguments=json.dumps({"path": target}), durability=durability,
                       determinism_hash=det, target=target, key_fields=key_fields)
    return unit(i, type="tool_result", words=words, tool=env, **kw)


def state_of(units, *, limit: int = 100_000) -> ContextState:
    return ContextState(units=tuple(units), limit=limit, min_limit=10, task="Finish the database migration.")


def ctx(target: int | None = None, skip: bool = False) -> StrategyContext:
    return StrategyContext(target_tokens=target, skip_aggressive=skip)


def new_units(before: ContextState, after: ContextState) -> list[ContextUnit]:
    return [u for u in after.units if u.id not in before]


# ---- the contract, on random states ----------------------------------------------------------


@st.composite
def states(draw) -> ContextState:
    """Random contexts with tool results of every durability, runs of bulk units, big units,
    P1 and pinned units; 30-120 % of the limit."""
    n = draw(st.integers(1, 14))
    units = []
    for i in range(n):
        kind = draw(st.sampled_from(("message", "code", "log", "tool", "tool", "tool")))
        words = draw(st.sampled_from((5, 60, 250, 900)))
        extra = dict(priority=draw(st.sampled_from((1, 2, 2, 3))), pinned=draw(st.booleans()) and i % 5 == 0)
        if kind == "tool":
            durability = draw(st.sampled_from(("ephemeral", "anchoring", "replayable", "non_replayable")))
            target = draw(st.sampled_from((None, "/a.py", "/b.py")))
            det = draw(st.sampled_from((None, "h1", "h2")))
            fields = (("id", str(i)),) if draw(st.booleans()) else ()
            units.append(tool_unit(i, durability, words=words, target=target, det=det, key_fields=fields, **extra))
        else:
            units.append(unit(i, type=kind, words=words, **extra))
    total = state_of(units).total_tokens
    return state_of(units, limit=max(10, int(total * draw(st.floats(0.3, 1.2)))))


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("sid", LADDER_IDS)
@SETTINGS
@given(state=states(), skip=st.booleans())
def test_contract(sid, state, skip):
    c = ctx(skip=skip)
    _, result = apply_with_contract(sid, state, c)
    new = result.state
    for u in state.units:
        if u.pinned or u.priority == 1:  # every rung keeps P1 (drop with its default drop_p1=False)
            assert new.unit(u.id) == u
        if u in state.units[-3:] and sid != "clear_tool_results":
            assert new.unit(u.id) == u, "the most recent units are preserved"
    assert new.total_tokens == count_messages(new.render_messages())
    if result.tokens_after <= c.target(state):
        assert count_messages(new.render_messages()) <= c.target(state)
    if skip and sid != "clear_tool_results":
        assert not result.changed, "no aggressive rung on a turn that rehydrated"
    for art in new.artifacts[len(state.artifacts):]:
        span = [state.unit(uid) for uid in art.source_ids]
        assert new.read_artifact(art.id) == "\n\n".join(f"{u.role}: {u.content}" for u in span)
    assert state_from_dict(json.loads(dumps_state(new))) == new, "JSON round trip"


@pytest.mark.parametrize("name", ("severe-overflow", "huge-units", "log-heavy", "tool-dupes"))
def test_masks_agree_on_generated_contexts(name):
    state = build_context(find_scenario(name), 2)
    for sid in LADDER_IDS:
        strategy = get_strategy(sid)
        assert strategy.applicable(state) == strategy.apply(state).changed


# ---- externalize -----------------------------------------------------------------------------


def test_externalize_round_trip_and_pointer_format():
    big = unit(1, words=900, type="other")
    units = [unit(0), big] + [unit(i) for i in range(2, 6)]
    state = state_of(units, limit=600)
    result = get_strategy("externalize").apply(state)
    new = result.state
    assert result.summarized == ("u1",) and new.fits()
    (pointer,) = new_units(state, new)
    m = POINTER.match(pointer.content)
    assert m, pointer.content
    art_id = m.group(1)
    assert new.read_artifact(art_id) == f"{big.role}: {big.content}"
    assert pointer.type == "placeholder" and pointer.role == "assistant" and pointer.source_ids == ("u1",)
    assert new.position(pointer.id) == 1 and pointer.meta_dict["artifact_id"] == art_id
    assert [a.id for a in new.artifacts] == [art_id] and new.artifacts[0].source_ids == ("u1",)
    assert result.cost.artifact_writes == 1 and result.cost.llm_calls == 1
    summary = pointer.content.split("\n")[1]
    assert summary.startswith("Summary: [Summary v1 | units u1")


def test_externalize_a_run_of_small_bulk_units_as_one_artifact():
    run = [tool_unit(1, "ephemeral", words=300), unit(2, type="log", words=300), unit(3, type="code", words=300)]
    units = [unit(0)] + run + [unit(4, words=400)] + [unit(i) for i in range(5, 8)]
    state = state_of(units, limit=700)
    new = get_strategy("externalize").apply(state).state
    (pointer,) = new_units(state, new)
    assert pointer.source_ids == ("u1", "u2", "u3")
    art = new.artifacts[0]
    assert new.read_artifact(art.id) == "\n\n".join(f"{u.role}: {u.content}" for u in run)
    assert "u4" in new, "a message is never part of a run and is under the threshold"
    assert get_strategy("externalize", min_span_tokens=5000).applicable(state) is False


def test_externalize_takes_non_replayable_first_then_the_largest_and_stops_when_it_fits():
    units = [unit(0, words=900), tool_unit(1, "non_replayable", words=250, tool="http_get"), unit(2, words=1200)]
    units += [unit(i) for i in range(3, 6)]
    state = state_of(units)
    first = get_strategy("externalize").apply(state, ctx(state.total_tokens - 50))
    assert first.summarized == ("u1",)
    second = get_strategy("externalize").apply(state, ctx(state.total_tokens - 500))
    assert set(second.summarized) == {"u1", "u2"}, "then the largest"
    everything = get_strategy("externalize").apply(state, ctx(10))
    assert set(everything.summarized) == {"u0", "u1", "u2"} and len(everything.state.artifacts) == 3


def test_externalize_keeps_recent_p1_and_pinned_units_and_skips_on_rehydration():
    units = [unit(0, words=900, priority=1), unit(1, words=900, pinned=True), unit(2), unit(3, words=900)]
    units += [unit(4), unit(5)]
    state = state_of(units, limit=50)
    strategy = get_strategy("externalize")
    assert not strategy.applicable(state) and not strategy.apply(state).changed
    assert strategy.applicable(state_of(units + [unit(6)], limit=50)), "u3 is no longer among the last 3"
    assert get_strategy("externalize", preserve_recent=0).applicable(state)
    skip = ctx(skip=True)
    assert not get_strategy("externalize", preserve_recent=0).applicable(state, skip)
    assert not get_strategy("externalize", preserve_recent=0).apply(state, skip).changed


# ---- clear_tool_results ----------------------------------------------------------------------


def durability_state() -> ContextState:
    units = [
        unit(0, words=20),
        tool_unit(1, "ephemeral", tool="run_tests"),
        tool_unit(2, "anchoring", tool="create_order", key_fields=(("order_id", "A-17"), ("total", "$40"))),
        tool_unit(3, "replayable", target="/a.py", det="h1"),
        tool_unit(4, "replayable", target="/b.py", det="h1"),
        tool_unit(5, "replayable", target="/c.py"),  # no determinism hash: cannot be verified
        tool_unit(6, "non_replayable", tool="http_get", target="https://x.io"),
        tool_unit(7, "anchoring", tool="write_file", target="/b.py", det="h2", words=20),
        tool_unit(8, "replayable", target="/a.py", det="h1", words=20),
        tool_unit(9, "ephemeral", tool="search", words=20),
    ]
    return state_of(units, limit=100)


def test_clear_respects_each_durability_class():
    state = durability_state()
    result = get_strategy("clear_tool_results").apply(state)
    new = result.state
    assert new.unit("u1").content == "[run_tests: success]"
    assert new.unit("u2").content == '[create_order: success]\nKey data: {"order_id": "A-17", "total": "$40"}'
    assert new.unit("u3").content == "[read_file: success]", "replayable and unchanged: cleared"
    assert set(result.compressed) == {"u1", "u2", "u3"}
    assert set(result.summarized) == {"u4", "u5", "u6"}, "changed, unverifiable or non-replayable: externalized"
    for uid in ("u4", "u5", "u6"):
        (pointer,) = [u for u in new.units if u.source_ids == (uid,)]
        art_id = POINTER.match(pointer.content).group(1)
        assert new.read_artifact(art_id) == f"tool: {state.unit(uid).content}"
    for uid in ("u0", "u7", "u8", "u9"):
        assert new.unit(uid) == state.unit(uid), "messages and the last 3 tool results are kept"


def test_clear_handles_oldest_first_and_stops_when_it_fits():
    state = durability_state()
    result = get_strategy("clear_tool_results").apply(state, ctx(state.total_tokens - 100))
    assert result.compressed == ("u1",) and result.summarized == ()
    assert get_strategy("clear_tool_results", keep_recent=8).apply(state).compressed == ("u1",)


def test_clear_keeps_non_replayable_results_on_a_rehydration_turn():
    state = durability_state()
    result = get_strategy("clear_tool_results").apply(state, ctx(skip=True))
    assert set(result.compressed) == {"u1", "u2", "u3"} and result.summarized == ()
    assert not result.state.artifacts


def test_clear_never_touches_p1_pinned_or_already_cleared_results():
    units = [tool_unit(1, "ephemeral", priority=1), tool_unit(2, "ephemeral", pinned=True)]
    units += [tool_unit(i, "ephemeral", words=5) for i in range(3, 6)]
    state = state_of(units, limit=10)
    strategy = get_strategy("clear_tool_results")
    assert not strategy.applicable(state) and not strategy.apply(state).changed
    cleared = strategy.apply(durability_state()).state
    assert not cleared.fits() and not strategy.applicable(cleared), "cleared results and pointers stay as they are"


# ---- drop ------------------------------------------------------------------------------------


def test_drop_removes_p3_before_p2_oldest_first_and_indexes_the_spans():
    priorities = [2, 3, 3, 2, 1, 3, 2, 2, 2, 2]
    units = [unit(i, priority=p, words=60) for i, p in enumerate(priorities)]
    state = state_of(units)
    three_p3 = state.tokens_of(u for u in units if u.priority == 3)
    result = get_strategy("drop").apply(state, ctx(state.total_tokens - three_p3 - 5))
    assert set(result.removed) == {"u1", "u2", "u5", "u0"}, "every P3, then the oldest P2"
    spans = result.state.dropped
    assert [s.source_ids for s in spans] == [("u0", "u1", "u2"), ("u5",)], "one span per run of adjacent units"
    assert all(s.strategy == "drop" and len(s.keywords) == 8 for s in spans)
    assert spans[0].summary == state.unit("u0").content.split(". ")[0] + "."
    assert set(spans[0].keywords) <= set(" ".join(u.content for u in units[:3]).lower().replace(".", "").split())
    assert spans[1].keywords == keywords(state.unit("u5").content, 8)


def test_drop_keeps_p1_and_recent_units_unless_asked():
    units = [unit(0, priority=1, words=80)] + [unit(i, priority=3, words=80) for i in range(1, 5)]
    state = state_of(units, limit=50)
    result = get_strategy("drop").apply(state)
    assert result.removed == ("u1",) and not result.state.fits()
    assert set(get_strategy("drop", drop_p1=True).apply(state).removed) == {"u1", "u0"}, "P1 last"
    assert get_strategy("drop", preserve_recent=0).apply(state).state.unit_ids == ("u0",)
    assert not get_strategy("drop").applicable(state, ctx(skip=True))
    assert not get_strategy("drop").apply(state, ctx(skip=True)).changed


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(st.sampled_from("ab cd_eF 1.2,x'y\n\t-"), min_size=1, max_size=40).filter(str.strip),
                min_size=1, max_size=4))
def test_a_dropped_runs_keywords_are_those_of_its_joined_text(contents):
    """The keywords of a run come from its units' words, one unit after the other: the
    same as those of the units' contents joined by blank lines."""
    run = [ContextUnit(id=f"u{i}", type="message", content=text) for i, text in enumerate(contents)]
    assert dropped_span(run, 3, "drop").keywords == keywords("\n\n".join(contents), 3)


def test_keywords_are_the_most_frequent_non_stop_words():
    text = "The cache and the cache index. The index of the cache is slow; the budget is fine."
    assert keywords(text, 3) == ("cache", "index", "slow")
