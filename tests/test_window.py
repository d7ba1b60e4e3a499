"""The runtime ContextWindow (seed 000): accounting, validation, mapping, build,
compaction by strategy / chain / policy, optimistic commits, snapshots, events."""

from __future__ import annotations

import random
import threading
from dataclasses import replace
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxsim.config import usage_tier
from ctxsim.errors import ContextError, ContextWindowFull, StrategyError
from ctxsim.model import ContextState
from ctxsim.strategies import StrategyContext, get_strategy
from ctxsim.tokens import count_messages, count_tokens
from ctxsim.window import (
    ITEM_TYPES,
    BuildOptions,
    Built,
    Cleared,
    Compacted,
    ContextItem,
    ContextWindow,
    ItemAdded,
    ItemRemoved,
    item_to_unit,
    items_from_state,
    priority_band,
)
from ctxsim.window.build import compose

FRAME = 3  # openai framing per message; the reply priming is 3 too
SEED_000_STRATEGIES = ("remove_oldest", "remove_low_priority", "summarize", "selective")


def text(n: int, word: str = "x") -> str:
    """A content of exactly ``n`` cl100k tokens."""
    out = (" " + word) * n
    assert count_tokens(out) == n
    return out


def prose(k: int, sentences: int = 12) -> str:
    """Varied, summarizable text about topic ``k``."""
    rng = random.Random(k)
    words = ["deploy", "cache", "budget", "schema", "retry", "index", "parser", "token", "queue", "report"]
    return " ".join(
        f"Step {k}.{s}: the {rng.choice(words)} handles the {rng.choice(words)} for the {rng.choice(words)} service."
        for s in range(sentences)
    )


def recount(window: ContextWindow) -> int:
    """Window tokens recomputed from the items' contents."""
    items = window.items()
    return sum(count_tokens(i.content) + FRAME for i in items) + (FRAME if items else 0)


def filled(max_tokens: int = 3000, **kwargs) -> ContextWindow:
    """A window over 70 % with every type, two pinned items and varied priorities."""
    window = ContextWindow(max_tokens, compaction_threshold=100.0, task="fix the deploy cache budget", **kwargs)
    window.add(ContextItem("You are a coding agent. Never delete production data.", "system_prompt", 90, pinned=True, id="sys"))
    for k in range(14):
        kind = ITEM_TYPES[k % len(ITEM_TYPES)]
        window.add(ContextItem(prose(k), kind, priority=(k * 37) % 101, id=f"i{k:02d}", pinned=k == 5))
    assert window.usage_percent > 70
    return window


class StrategyPolicy:
    """A deployable-policy stand-in: always decides one ctxsim strategy."""

    def __init__(self, strategy_id: str):
        self.strategy_id = strategy_id

    def decide(self, state: ContextState) -> str:
        return self.strategy_id

    def break_context(self, state: ContextState, target_tokens: int | None = None):
        ctx = StrategyContext(target_tokens=target_tokens)
        return get_strategy(self.decide(state)).apply(state, ctx)


# ---- accounting and mapping ----------------------------------------------------------
def test_current_tokens_count_content_framing_and_priming():
    window = ContextWindow(4096)
    assert window.current_tokens == 0 and window.usage_tier == "safe"
    window.add(ContextItem(text(10), "user_message"))
    assert window.current_tokens == 10 + FRAME + FRAME
    window.add(ContextItem(text(20), "assistant_message"))
    assert window.current_tokens == 30 + 2 * FRAME + FRAME == recount(window)
    assert window.to_state().total_tokens == window.current_tokens
    assert window.available_tokens == 4096 - window.current_tokens
    assert window.usage_percent == pytest.approx(window.current_tokens / 4096 * 100)


def test_plain_format_has_no_framing():
    window = ContextWindow(100, message_format="plain")
    window.add(ContextItem(text(7), "other"))
    assert window.current_tokens == 7 == window.to_state().total_tokens


@pytest.mark.parametrize(
    "item_type,unit_type,role",
    [
        ("system_prompt", "message", "system"),
        ("instruction", "plan_ref", "user"),
        ("retrieved_document", "other", "user"),
        ("working_memory", "other", "assistant"),
        ("tool_result", "tool_result", "tool"),
        ("user_message", "message", "user"),
        ("assistant_message", "message", "assistant"),
        ("other", "other", "user"),
    ],
)
def test_item_to_unit_mapping(item_type, unit_type, role):
    item = ContextItem("some content", item_type, priority=75, pinned=True, id="a")
    unit = item_to_unit(item)
    assert (unit.id, unit.type, unit.role, unit.priority, unit.pinned) == ("a", unit_type, role, 1, True)
    assert unit.token_count == item.token_count
    assert dict(unit.meta)["item_priority"] == "75"
    assert item_to_unit(ContextItem("x", item_type, role="tool")).role == "tool"


def test_a_tool_result_that_names_its_tool_is_a_unit_with_its_call():
    """metadata tool_name, arguments (a dict or the call's JSON text) and call_id give the
    unit the envelope a transcript's tool result gets; without a tool name there is none."""
    from ctxsim.model import ToolEnvelope

    output = "Traceback (most recent call last):\nValueError: bad cache key k42"
    item = ContextItem(output, "tool_result", id="t1",
                       metadata={"tool_name": "run_tests", "arguments": {"path": "tests/test_cache.py"}, "call_id": "c7"})
    tool = item_to_unit(item).tool
    assert (tool.tool_name, tool.call_id, tool.durability, tool.outcome) == ("run_tests", "c7", "ephemeral", "failure")
    assert tool.arguments == ToolEnvelope.canonical_arguments({"path": "tests/test_cache.py"})
    assert tool.target == "tests/test_cache.py" and tool.error_message == "Traceback (most recent call last):"
    as_text = ContextItem(output, "tool_result", id="t1",
                          metadata={"tool_name": "run_tests", "arguments": '{"path": "tests/test_cache.py"}', "call_id": "c7"})
    assert item_to_unit(as_text).tool == tool
    assert item_to_unit(ContextItem("ok", "tool_result", id="t2", metadata={"tool_name": "ls"})).tool.call_id == "call-t2"
    assert item_to_unit(ContextItem("ok", "tool_result")).tool is None
    assert item_to_unit(ContextItem("ok", "user_message", metadata={"tool_name": "ls"})).tool is None
    with pytest.raises(ContextError, match=r"'t3': metadata\['arguments'\] must be a dict or JSON text, got 3"):
        item_to_unit(ContextItem("ok", "tool_result", id="t3", metadata={"tool_name": "ls", "arguments": 3}))


def test_a_window_deduplicates_a_tool_call_it_ran_twice():
    window = ContextWindow(4000, compaction_threshold=100.0, task="fix the deploy cache")
    listing = "\n".join(f"/srv/app/module_{i}.py  {i * 311} bytes" for i in range(120))
    for k in range(2):
        window.add(ContextItem(f"[tool_call] ls {{\"path\": \"/srv/app\"}} (try {k})", "assistant_message", id=f"a{k}"))
        window.add(ContextItem(listing, "tool_result", id=f"ls{k}", metadata={"tool_name": "ls", "arguments": {"path": "/srv/app"}}))
    window.add(ContextItem("The module list is long.", "assistant_message", id="note"))
    assert get_strategy("dedupe_tool_results").applicable(window.to_state())
    assert window.compact("dedupe_tool_results", 50) > 0
    assert "ls0" not in window and window.get("ls1").content == listing  # the newer run kept, the older gone


@pytest.mark.parametrize("priority,band", [(0, 3), (30, 3), (31, 2), (50, 2), (70, 2), (71, 1), (100, 1)])
def test_priority_bands(priority, band):
    assert priority_band(priority) == band


def test_items_from_state_keeps_items_and_makes_synthetic_ones():
    window = filled()
    before = {i.id: i for i in window.items()}
    state = window.to_state()
    assert items_from_state(before, state, lambda: 10**6) == sorted(before.values(), key=lambda i: i.added_at)

    result = get_strategy("summarize").apply(state, StrategyContext(target_tokens=int(0.7 * window.max_tokens)))
    assert result.summarized
    items = items_from_state(before, result.state, lambda: 10**6)
    synthetic = [i for i in items if i.id not in before]
    assert len(synthetic) == 1
    summary = synthetic[0]
    assert (summary.type, summary.role, summary.pinned) == ("working_memory", "assistant", False)
    assert set(summary.metadata["replaces"]) == set(result.summarized)
    assert summary.priority == min(before[i].priority for i in result.summarized)
    assert summary.added_at == min(before[i].added_at for i in result.summarized)
    assert summary.metadata["summary_depth"] == 1
    again = item_to_unit(summary)
    assert (again.type, again.role, again.summary_depth) == ("summary", "assistant", 1)
    assert item_to_unit(ContextItem("x", "other", metadata={"unit_type": "bogus"})).type == "other"
    assert hash(summary) == hash(summary)


# ---- ordering and validation -------------------------------------------------------------
def test_items_ordered_by_type_then_priority_then_insertion():
    window = ContextWindow(8000)
    rng = random.Random(3)
    for k in range(40):
        window.add(ContextItem(f"item {k}", rng.choice(ITEM_TYPES), priority=rng.choice([10, 50, 90]), id=f"k{k}"))
    ranks = {t: r for r, t in enumerate(ITEM_TYPES)}
    keys = [(ranks[i.type], -i.priority, i.added_at) for i in window.items()]
    assert keys == sorted(keys)
    assert all(i.type == "tool_result" for i in window.items("tool_result"))
    assert len(window.items("tool_result")) == sum(i.type == "tool_result" for i in window.items())
    with pytest.raises(ContextError, match="type"):
        window.items("sidebar")


@pytest.mark.parametrize(
    "kwargs,key",
    [
        ({"content": ""}, "content"),
        ({"content": "   \n"}, "content"),
        ({"priority": 101}, "priority"),
        ({"priority": -1}, "priority"),
        ({"priority": True}, "priority"),
        ({"type": "sidebar"}, "type"),
        ({"role": "narrator"}, "role"),
        ({"id": ""}, "id"),
        ({"pinned": "false"}, "pinned"),  # bool("false") would pin it
        ({"pinned": None}, "pinned"),
        ({"metadata": ["tool_name"]}, "metadata"),
        ({"source_ref": 7}, "source_ref"),
        # refused when the item is made, not at the window's every later compaction
        ({"type": "tool_result", "metadata": {"tool_name": "grep", "arguments": 5}}, "metadata.arguments"),
    ],
)
def test_item_validation_names_the_field(kwargs, key):
    fields = {"content": "ok", "type": "user_message", **kwargs}
    with pytest.raises(ContextError) as err:
        ContextWindow(100).add(ContextItem(**fields))
    assert err.value.key == key and key in str(err.value)


def test_the_1001st_item_is_refused():
    window = ContextWindow(100_000)
    assert window.add_range(ContextItem(f"n{k}", "other", id=f"n{k}") for k in range(1000)) == 1000
    with pytest.raises(ContextError) as err:
        window.add(ContextItem("one more", "other"))
    assert err.value.key == "max_items" and len(window) == 1000


def test_duplicate_ids_and_bad_settings_are_refused():
    window = ContextWindow(1000)
    window.add(ContextItem("a", "other", id="same"))
    with pytest.raises(ContextError, match="already"):
        window.add(ContextItem("b", "other", id="same"))
    with pytest.raises(ContextError, match="priority"):
        window.update_priority("same", 101)
    for bad in ({"max_tokens": 0}, {"max_tokens": 100, "compaction_threshold": 120}, {"max_tokens": 100, "message_format": "xml"}):
        with pytest.raises(ContextError):
            ContextWindow(**bad)
    with pytest.raises(StrategyError, match="valid ids"):
        ContextWindow(1000, default_strategy="remove_everything")
    with pytest.raises(StrategyError):
        ContextWindow(1000, chain=["remove_oldest", "nope"])
    with pytest.raises(ContextError, match="break_context"):
        ContextWindow(1000, policy=object())


def test_context_window_full_carries_current_max_requested():
    window = ContextWindow(500)
    window.add(ContextItem(text(294), "system_prompt", pinned=True))  # 300 tokens
    big = ContextItem(text(247), "user_message")  # 250 tokens: cannot fit beside the pinned item
    with pytest.raises(ContextWindowFull) as err:
        window.add(big)
    assert (err.value.current, err.value.maximum, err.value.requested) == (300, 500, 250)
    assert "current=300" in str(err.value) and len(window) == 1

    # summarize cannot fold P1 items: the threshold compaction frees nothing, the add fails
    window = ContextWindow(500, default_strategy="summarize")
    window.add(ContextItem(text(394), "tool_result", priority=90))  # 400 tokens
    with pytest.raises(ContextWindowFull) as err:
        window.add(ContextItem(text(147), "tool_result", priority=90))
    assert (err.value.current, err.value.maximum, err.value.requested) == (400, 500, 150)


def test_threshold_compaction_makes_room_for_a_large_item():
    """Seed 000's target (threshold - 15 % = 80 %) keeps 800 of 1,000 tokens: an item
    of 500 needs the content cut further, and the window does that instead of refusing it."""
    window = ContextWindow(1000, compaction_threshold=95.0)
    for k in range(9):
        window.add(ContextItem(text(97), "user_message", id=f"n{k}"))  # 100 tokens each (framing included)
    assert window.current_tokens == 903 and window.stats().compaction_count == 0  # + the reply priming
    stored = window.add(ContextItem(text(497), "user_message", id="big"))  # 500 tokens
    assert stored.id in window and 500 < window.current_tokens <= 1000


@pytest.mark.parametrize("used,tier", [(740, "safe"), (750, "warning"), (900, "critical"), (950, "exceeded"), (1000, "exceeded")])
def test_usage_tiers_through_the_window(used, tier):
    window = ContextWindow(1000, compaction_threshold=100.0)
    window.add(ContextItem(text(used - 2 * FRAME), "user_message"))
    assert window.current_tokens == used
    assert window.usage_tier == tier == usage_tier(used, 1000) == window.stats().usage_tier


# ---- changing items ---------------------------------------------------------------------
def test_remove_priority_pin_unpin_and_version():
    window = ContextWindow(1000)
    item = window.add(ContextItem("hello", "user_message", priority=40, id="h"))
    assert item.added_at >= 0 and window.version == 1
    assert window.update_priority("h", 90) and window.get("h").priority == 90 and window.version == 2
    assert window.pin("h") and window.get("h").pinned and window.version == 3
    assert window.pin("h") and window.version == 3  # no change, no new version
    assert window.pinned_items() == [window.get("h")]
    assert window.unpin("h") and not window.get("h").pinned and window.version == 4
    assert not window.pin("missing") and not window.update_priority("missing", 1) and not window.remove("missing")
    assert window.remove("h") and "h" not in window and window.current_tokens == 0 and window.version == 5


def test_clear_keeps_pinned_unless_asked():
    window = ContextWindow(1000)
    window.add_range([ContextItem("a", "other", id="a"), ContextItem("b", "other", id="b", pinned=True), ContextItem("c", "other", id="c")])
    assert window.clear() == 2 and [i.id for i in window.items()] == ["b"]
    assert window.current_tokens == recount(window)
    assert window.clear(include_pinned=True) == 1 and len(window) == 0 and window.current_tokens == 0


def test_add_range_skips_what_does_not_fit():
    window = ContextWindow(200)
    window.add(ContextItem(text(94), "system_prompt", pinned=True))
    items = [ContextItem(text(20), "user_message"), ContextItem(text(150), "user_message"), ContextItem(text(20), "user_message")]
    assert window.add_range(items) == 2
    assert [i.token_count for i in window.items("user_message")] == [20, 20]


def test_snapshot_restore_keeps_settings_and_refuses_what_does_not_fit():
    window = filled(default_strategy="remove_oldest")
    window.compaction_threshold = 90.0
    snap = window.snapshot()
    other = ContextWindow(5000)
    other.restore(snap)
    assert other.items() == window.items() and other.compaction_threshold == 90.0 and other.default_strategy == "remove_oldest"
    assert other.add(ContextItem("later", "other")).added_at > max(i.added_at for i in snap.items)
    with pytest.raises(ContextWindowFull):
        ContextWindow(500).restore(snap)


def test_snapshot_restore_keeps_the_default_strategys_parameters():
    """A default strategy with its own parameters comes back from a snapshot with
    them, not with the strategy's defaults."""
    window = filled(default_strategy=get_strategy("summarize", summary_ratio=0.5))
    snap = window.snapshot()
    assert snap.strategy_params["summary_ratio"] == 0.5
    other = ContextWindow(5000)
    other.restore(snap)
    window.restore(snap)
    for restored in (window, other):
        assert restored.default_strategy == "summarize" and restored._default.params.summary_ratio == 0.5
    assert other.snapshot().strategy_params == snap.strategy_params


def test_stats():
    window = filled()
    stats = window.stats()
    assert stats.total_items == len(window) == 15 and stats.pinned_items == 2
    assert stats.current_tokens == window.current_tokens and stats.available_tokens == 3000 - stats.current_tokens
    assert sum(stats.items_by_type.values()) == 15
    assert sum(stats.tokens_by_type.values()) + FRAME == stats.current_tokens
    assert stats.compaction_count == 0 and stats.version == window.version
    freed = window.compact()
    assert window.stats().compaction_count == 1 and window.stats().total_tokens_freed == freed > 0


# ---- build ----------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 120), min_size=1, max_size=25),
    reserve=st.integers(0, 900),
    seed=st.integers(0, 1000),
)
def test_build_never_exceeds_the_budget(sizes, reserve, seed):
    rng = random.Random(seed)
    window = ContextWindow(1000, compaction_threshold=100.0)
    for k, n in enumerate(sizes):
        role = rng.choice([None, "user", "assistant", "tool", "system"])
        item = ContextItem(text(n, rng.choice(["x", "code", "data"])), rng.choice(ITEM_TYPES), rng.randint(0, 100), role=role, pinned=rng.random() < 0.2)
        try:
            window.add(item)
        except ContextWindowFull:
            pass
    before = {i.id for i in window.items()}
    options = BuildOptions(reserve_for_response=reserve, max_history_items=rng.randint(0, 12))
    budget = 1000 - reserve
    try:
        built = window.build_structured(options)
    except ContextError as err:  # only when the pinned items alone are over the budget
        pinned = options.section_separator.join(options.render(i) for i in window.items() if i.pinned)
        assert "pinned item(s) need" in str(err) and count_messages([{"role": "system", "content": pinned}]) > budget
        return
    assert count_tokens(built.content) <= built.total_tokens <= budget
    assert built.total_tokens == (count_messages([{"role": "system", "content": built.content}]) if built.content else 0)
    assert set(built.included_ids) | set(built.excluded_ids) == before | {i.id for i in window.items()}
    assert not set(built.included_ids) & set(built.excluded_ids)
    assert {i.id for i in window.items() if i.pinned} <= set(built.included_ids)  # pinned items are never left out


def test_build_renders_roles_order_and_pinned_first():
    window = ContextWindow(4000)
    window.add(ContextItem("rules", "system_prompt", id="s"))
    window.add(ContextItem("question", "user_message", 60, role="user", id="q"))
    window.add(ContextItem("old doc", "retrieved_document", 10, pinned=True, id="d"))
    assert window.build(BuildOptions(reserve_for_response=0)) == "rules\n\n---\n\nold doc\n\n---\n\n[user]: question"
    items = window.items()
    # a budget with room for one item takes the pinned one, though it ranks lower
    budget = count_messages([{"role": "system", "content": "old doc"}])
    content, included = compose(items, BuildOptions(), budget, "openai")
    assert (content, included) == ("old doc", ("d",))


def test_build_options_filter_items():
    window = ContextWindow(8000)
    window.add(ContextItem("rules", "system_prompt", id="s"))
    window.add(ContextItem("do it", "instruction", id="ins"))
    window.add(ContextItem("doc", "retrieved_document", id="doc"))
    for k in range(5):
        window.add(ContextItem(f"turn {k}", "user_message", id=f"t{k}"))
    built = window.build_structured(
        BuildOptions(include_instructions=False, include_relevant_memory=False, max_history_items=2, exclude_ids={"s"})
    )
    assert set(built.included_ids) == {"t3", "t4"}
    assert set(built.excluded_ids) == {"s", "ins", "doc", "t0", "t1", "t2"}
    assert window.build_structured(BuildOptions(include_ids={"doc", "t0"})).included_ids == ("doc", "t0")
    with pytest.raises(ContextError, match="reserve_for_response"):
        window.build(BuildOptions(reserve_for_response=8000))
    with pytest.raises(ContextError, match="message_format"):
        BuildOptions(message_format="{role} only")


def test_build_compacts_when_over_budget():
    window = filled()
    events = []
    window.on("compacted", events.append)
    before = window.current_tokens
    assert before > 3000 - 1000
    built = window.build_structured()
    assert built.was_compacted and built.tokens_freed == before - window.current_tokens > 0
    assert events[0].reason == "build" and window.current_tokens <= 0.7 * 3000
    assert {i.id for i in window.pinned_items()} == {"sys", "i05"}
    assert built.total_tokens <= 2000


# ---- compaction -----------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy_id", SEED_000_STRATEGIES)
def test_compaction_with_each_seed_000_strategy(strategy_id):
    window = filled()
    pinned = window.pinned_items()
    before = window.current_tokens
    freed = window.compact(strategy_id, target_percent=70.0)
    assert freed == before - window.current_tokens > 0
    assert window.current_tokens == recount(window) == window.to_state().total_tokens
    assert window.current_tokens <= 0.7 * 3000
    assert all(window.get(p.id) == p for p in pinned)
    if strategy_id == "summarize":
        summaries = window.items("working_memory")
        assert any(i.metadata.get("replaces") for i in summaries)


def test_remove_low_priority_follows_the_item_priority_within_a_band():
    """Seed 000 orders RemoveLowPriority by the 0-100 priority, then added first:
    priorities 65 and 35 are both band P2, yet the 35 goes before the older 65."""
    window = ContextWindow(1000, compaction_threshold=100.0, message_format="plain")
    window.add(ContextItem(text(300), "user_message", priority=65, id="older-65"))
    window.add(ContextItem(text(300), "user_message", priority=35, id="newer-35"))
    window.add(ContextItem(text(300), "user_message", priority=90, id="newest-90"))
    window.compact("remove_low_priority", target_percent=70.0)
    assert [i.id for i in window.items()] == ["newest-90", "older-65"]
    window.add(ContextItem(text(300), "user_message", priority=65, id="newer-65"))
    window.compact("remove_low_priority", target_percent=70.0)  # equal priorities: added first goes first
    assert [i.id for i in window.items()] == ["newest-90", "newer-65"]


def test_compaction_with_a_chain_and_precedence():
    window = filled(chain=["summarize", "remove_oldest"])
    events = []
    window.on("compacted", events.append)
    window.compact(target_percent=30.0)
    assert events[0].strategy == "summarize+remove_oldest"
    assert events[0].applied[0] == "summarize" and set(events[0].applied) <= {"summarize", "remove_oldest"}
    assert window.current_tokens <= 0.3 * 3000

    # an explicit strategy overrides the chain; the policy overrides chain and default
    window = filled(chain=["summarize"])
    assert window.plan_compaction("remove_oldest").strategy == "remove_oldest"
    window = filled(chain=["summarize"], policy=StrategyPolicy("remove_oldest"))
    proposal = window.plan_compaction()
    assert (proposal.strategy, proposal.applied) == ("policy", ("remove_oldest",))
    oldest = [i.id for i in sorted(window.items(), key=lambda i: i.added_at) if not i.pinned]
    assert [i.id for i in proposal.removed] == oldest[: len(proposal.removed)]


def test_policy_that_breaks_pinned_items_is_refused():
    class KeepLastOnly:
        def break_context(self, state, target_tokens=None):
            return SimpleNamespace(state=state.with_units(state.units[-1:], applied="keep_last"))

    class NotAState:
        def break_context(self, state, target_tokens=None):
            return SimpleNamespace(state=[u.content for u in state.units])

    window = filled(policy=KeepLastOnly())
    with pytest.raises(StrategyError, match="pinned"):
        window.compact()
    assert len(window) == 15
    with pytest.raises(StrategyError, match="instead of a ContextState"):
        filled(policy=NotAState()).compact()


def test_compact_when_under_target_changes_nothing():
    window = ContextWindow(4000)
    window.add(ContextItem("small", "user_message"))
    version = window.version
    assert window.compact() == 0 and window.version == version and window.stats().compaction_count == 0


# ---- set up by a context_config ---------------------------------------------------------------
#: a chain config as ``ctxsim export`` writes it (the demo's learned policy chose this chain),
#: its sections the seed example's
CHAIN_CONFIG = """\
context_config:
  min_limit: 3500
  default_limit: 5000
  warning_threshold: 0.8
  per_llm:
  - {type: local_14b, limit: 3500, follow_default: true}
  - {type: gpt4, limit: 6000, follow_default: true}
  per_agent: {Verification: 4000}
  breaking_strategy:
    chain_order: [prioritize_recent]
    prioritize_recent: {rel_threshold: 0.5, recent_bias: 0.2, priority_boost: 1.5, drop_p1: false}
  recovery_mode: fresh_start
"""


@pytest.fixture
def chain_config(tmp_path):
    path = tmp_path / "chain_config.yaml"
    path.write_text(CHAIN_CONFIG)
    return path


def test_a_window_from_a_chain_config_takes_its_limit_threshold_and_chain(chain_config):
    """A chain config sets up a window: the limit per model and agent priority, the
    warning threshold, the chain with its parameters, the recovery; and the window
    compacts with that chain."""
    window = ContextWindow.from_config(chain_config, task="rotate the TLS certificates")
    assert (window.max_tokens, window.compaction_threshold, window.recovery) == (5000, 80.0, "fresh_start")
    assert ContextWindow.from_config(chain_config, llm_type="gpt4").max_tokens == 6000
    assert ContextWindow.from_config(chain_config, agent_priority=1).max_tokens == 6000  # P1 agents: +20 %
    verifier = ContextWindow.from_config(chain_config, agent_id="Verification", llm_type="gpt4")
    assert (verifier.max_tokens, verifier.agent_id) == (4000, "Verification")  # its own limit, under the model's
    compacted = []
    window.on("compacted", compacted.append)
    for k in range(40):
        window.add(ContextItem(prose(k), "user_message" if k % 2 else "tool_result", priority=40, id=f"i{k}"))
    assert compacted and {(e.strategy, e.reason) for e in compacted} == {("prioritize_recent", "threshold")}
    assert window.usage_percent <= 80.0


def test_a_window_runs_its_recovery_when_compaction_leaves_no_room(chain_config):
    """Against a task every item speaks to, the chain (``prioritize_recent``) finds
    nothing to drop: a window without a recovery is full, one set up by the chain config
    runs its ``recovery_mode`` (``fresh_start``) and takes the item."""
    items = [ContextItem(prose(k), "user_message" if k % 2 else "tool_result", priority=40, id=f"i{k}") for k in range(40)]
    bare = ContextWindow.from_config(chain_config, task="fix the deploy cache budget", recovery=None)
    with pytest.raises(ContextWindowFull):
        for item in items:
            bare.add(item)
    window = ContextWindow.from_config(chain_config, task="fix the deploy cache budget")
    compacted = []
    window.on("compacted", compacted.append)
    for item in items:
        window.add(item)
    assert "i39" in window and window.current_tokens <= window.max_tokens
    assert ("fresh_start", "recovery") in {(e.strategy, e.reason) for e in compacted}
    with pytest.raises(ContextError, match="recovery must be one of"):
        ContextWindow(4000, recovery="error")


def test_a_bad_context_config_for_a_window_names_the_file_and_key(tmp_path):
    from ctxsim.errors import ConfigError

    with pytest.raises(ConfigError, match="missing.yaml"):
        ContextWindow.from_config(tmp_path / "missing.yaml")
    low = tmp_path / "low.yaml"
    low.write_text("context_config:\n  warning_threshold: 0.1\n")
    with pytest.raises(ConfigError, match=r"low.yaml: key 'context_config.warning_threshold'"):
        ContextWindow.from_config(low)
    bad = tmp_path / "bad.yaml"
    bad.write_text("context_config:\n  breaking_strategy:\n    chain_order: [drop]\n    drop: {no_such_option: 1}\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: key 'context_config\..*no_such_option"):
        ContextWindow.from_config(bad)


# ---- optimistic concurrency (seed 002) ------------------------------------------------------------
def test_stale_commit_is_refused():
    window = filled()
    proposal = window.plan_compaction("remove_oldest")
    assert proposal.changed and proposal.expected_version == window.version
    window.add(ContextItem("a late item", "user_message", id="late"))
    items = window.items()
    assert window.commit(proposal) is False
    assert window.items() == items and "late" in window

    fresh = window.plan_compaction("remove_oldest")
    assert window.commit(fresh) is True
    assert window.commit(fresh) is False  # the version moved with the first commit
    assert window.current_tokens == fresh.tokens_after


def test_proposal_of_another_window_is_refused():
    a, b = filled(), filled()
    assert a.version == b.version
    assert b.commit(a.plan_compaction()) is False


# ---- events ----------------------------------------------------------------------------------------
def test_events_fire_with_the_right_fields():
    window = ContextWindow(1000, agent_id="agent-7", compaction_threshold=100.0)
    seen = []
    for name in ("added", "removed", "compacted", "cleared", "built"):
        window.on(name, seen.append)

    window.add(ContextItem(text(97), "user_message", priority=10, id="a"))
    window.add(ContextItem(text(397), "tool_result", priority=60, id="b"))
    assert seen[0] == ItemAdded("agent-7", "a", "user_message", 97, 103, seen[0].timestamp)
    assert seen[1] == ItemAdded("agent-7", "b", "tool_result", 397, 503, seen[1].timestamp)

    window.remove("a")
    assert seen[2] == ItemRemoved("agent-7", "a", "user_message", 97, "manual", seen[2].timestamp)

    window.add(ContextItem(text(97), "user_message", priority=10, id="c"))
    seen.clear()
    freed = window.compact("remove_low_priority", target_percent=45.0)
    removed, compacted = seen
    assert removed == ItemRemoved("agent-7", "c", "user_message", 97, "compaction", removed.timestamp)
    assert compacted == Compacted(
        "agent-7", "remove_low_priority", ("remove_low_priority",), 1, 0, freed,
        compacted.usage_before_percent, compacted.usage_after_percent, "manual", compacted.timestamp,
    )
    assert freed == 100
    assert (compacted.usage_before_percent, compacted.usage_after_percent) == pytest.approx((50.3, 40.3))

    window.build(BuildOptions(reserve_for_response=100))
    assert isinstance(seen[-1], Built) and seen[-1].items_included == 1 and seen[-1].items_excluded == 0
    assert seen[-1].was_compacted is False and seen[-1].total_tokens <= 900

    window.clear()
    assert seen[-2].reason == "clear" and seen[-1] == Cleared("agent-7", 1, 403, False, seen[-1].timestamp)
    stamps = [e.timestamp for e in seen]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)


def test_callbacks_run_outside_the_lock_and_can_be_removed():
    window = ContextWindow(1000)
    results = []

    def from_another_thread(event):
        worker = threading.Thread(target=lambda: results.append(window.current_tokens))
        worker.start()
        worker.join(timeout=10)
        results.append(worker.is_alive())

    window.on("added", from_another_thread)
    window.add(ContextItem("hello", "user_message"))
    assert results == [window.current_tokens, False]
    assert window.off("added", from_another_thread) and not window.off("added", from_another_thread)
    window.add(ContextItem("again", "user_message"))
    assert len(results) == 2
    with pytest.raises(ContextError, match="unknown event"):
        window.on("exploded", print)


def test_single_threaded_runs_are_deterministic():
    def run():
        window = filled(default_strategy="summarize")
        seen = []
        for name in ("added", "removed", "compacted", "cleared", "built"):
            window.on(name, seen.append)
        window.add(ContextItem(prose(99, 30), "tool_result", priority=20, id="late"))
        window.build(BuildOptions(reserve_for_response=500))
        window.compact("selective", target_percent=40.0)
        return seen, window.items()

    assert run() == run()


def _filled(strategy: str, max_tokens: int) -> ContextWindow:
    window = ContextWindow(max_tokens, default_strategy=strategy, compaction_threshold=100.0)
    k = 0
    while window.current_tokens <= max_tokens * 0.9:
        window.add(ContextItem(f"msg {k}: the deploy cache failed at step {k} with a parser error", "user_message", id=f"u{k}"))
        k += 1
    return window


def test_a_build_with_a_large_reserve_compacts_to_its_budget_and_keeps_the_newest_turns():
    window = _filled("remove_oldest", 2000)  # the default reserve (1000) leaves a budget under seed 000's 70 %
    newest = [i.id for i in window.items()][-5:]
    built = window.build_structured(BuildOptions(max_history_items=500))
    assert built.was_compacted and built.total_tokens <= 1000
    assert set(newest) <= set(built.included_ids)  # the compaction removed the oldest; the build cut nothing newer
    assert not set(built.excluded_ids) & {i.id for i in window.items()}


def test_excluded_ids_name_items_the_builds_own_compaction_made():
    window = _filled("summarize", 3000)
    before = {i.id for i in window.items()}
    built = window.build_structured(BuildOptions(reserve_for_response=500, include_relevant_memory=False, max_history_items=500))
    made = {i.id for i in window.items()} - before
    assert built.was_compacted and made and made <= set(built.excluded_ids)  # a summary the options filter out
    assert set(built.included_ids) | set(built.excluded_ids) == before | made


def test_pinned_items_over_the_build_budget_are_an_error_not_left_out():
    window = ContextWindow(2000)
    window.add(ContextItem("rule " * 1000, "system_prompt", id="sys", pinned=True))
    window.add(ContextItem("hello", "user_message", id="u"))
    with pytest.raises(ContextError, match="pinned item\\(s\\) need .* over the build budget of 1000"):
        window.build_structured()
    assert "sys" in window.build_structured(BuildOptions(reserve_for_response=0)).included_ids


@pytest.mark.parametrize("key", ["include_ids", "exclude_ids"])
def test_build_options_refuse_one_id_given_as_a_string(key):
    with pytest.raises(ContextError, match=f"BuildOptions.{key} takes a collection of ids"):
        BuildOptions(**{key: "h1"})


def test_strategy_errors_name_the_setting_and_value():
    """An unknown strategy id, or a value that is no strategy, is one StrategyError
    naming the setting and the value, wherever a strategy is named."""
    window = filled()
    cases = [
        (lambda: ContextWindow(1000, default_strategy="RemoveOldest"), "default_strategy", "RemoveOldest"),
        (lambda: ContextWindow(1000, default_strategy=5), "default_strategy", "5"),
        (lambda: ContextWindow(1000, chain=["remove_oldest", "nope"]), "chain", "nope"),
        (lambda: ContextWindow(1000, chain=5), "chain", "5"),
        (lambda: setattr(window, "default_strategy", "nope"), "default_strategy", "nope"),
        (lambda: window.compact("RemoveLowPriority"), "strategy", "RemoveLowPriority"),
        (lambda: window.plan_compaction(5), "strategy", "5"),
    ]
    for call, key, value in cases:
        with pytest.raises(StrategyError) as err:
            call()
        assert err.value.key == key and f"key '{key}'" in str(err.value) and value in str(err.value)


@pytest.mark.parametrize("used", [0.5, 0.8])
def test_check_usage_refuses_an_unknown_strategy_at_any_tier(used):
    """In the safe tier nothing runs and in the warning tier the compaction runs in a
    thread, where its error would be lost: the strategy is checked before either."""
    window = ContextWindow(1000, compaction_threshold=100.0)
    while window.current_tokens < used * 1000:
        window.add(ContextItem(text(20), "user_message"))
    with pytest.raises(StrategyError, match="nope") as err:
        window.check_usage("nope")
    assert err.value.key == "strategy"


def test_window_methods_refuse_wrong_argument_types_naming_them():
    window = filled()
    snap = window.snapshot()
    cases = [
        (lambda: ContextWindow(1000, task=None), "task"),
        (lambda: ContextWindow(1000, agent_id=7), "agent_id"),
        (lambda: window.add_range(None), "items"),
        (lambda: window.commit(None), "proposal"),
        (lambda: window.restore(None), "snapshot"),
        (lambda: window.restore(replace(snap, items=("not an item",))), "items"),
        (lambda: window.build({"reserve_for_response": 0}), "options"),
        (lambda: BuildOptions(section_separator=5), "section_separator"),
        (lambda: BuildOptions(query_for_memory_retrieval=5), "query_for_memory_retrieval"),
        (lambda: BuildOptions(include_ids=5), "include_ids"),
    ]
    for call, key in cases:
        with pytest.raises(ContextError) as err:
            call()
        assert err.value.key == key and f"key '{key}'" in str(err.value)
    assert window.snapshot().items == snap.items


@pytest.mark.parametrize(("fields", "key"), [
    ({"metadata": {"summary_depth": None}}, "metadata.summary_depth"),
    ({"metadata": {"summary_depth": "deep"}}, "metadata.summary_depth"),
    ({"metadata": {"summary_depth": 1.5}}, "metadata.summary_depth"),
    ({"metadata": {"summary_depth": -1}}, "metadata.summary_depth"),
    ({"metadata": {"summary_depth": True}}, "metadata.summary_depth"),
    ({"metadata": {"tool_name": 5}}, "metadata.tool_name"),
    ({"metadata": {"call_id": {}}}, "metadata.call_id"),
    ({"metadata": {"unit_type": ["summary"]}}, "metadata.unit_type"),
    ({"added_at": "first"}, "added_at"),
    ({"added_at": 2.0}, "added_at"),
])
def test_an_item_with_metadata_the_window_cannot_read_is_refused_when_made(fields, key):
    """A summary_depth of None or text failed the window's next compaction (TypeError,
    ValueError), 1.5 and -1 were taken as 1 and -1, and an added_at of text failed its
    ordering: each is refused when the item is made, naming the item and the key."""
    with pytest.raises(ContextError) as err:
        ContextItem("Notes about the garden.", "tool_result", id="i1", **fields)
    assert err.value.key == key and "'i1'" in str(err.value)
    ContextItem("Notes about the garden.", "tool_result", id="i1",
                metadata={"summary_depth": 2, "tool_name": "bash", "call_id": "c1", "unit_type": "summary"})


def test_every_compaction_reason_is_a_documented_one(chain_config):
    """The recovery, build and manual compactions name their reason, each one of
    :data:`~ctxsim.window.events.COMPACTION_REASONS`."""
    from ctxsim.window.events import COMPACTION_REASONS

    window = ContextWindow.from_config(chain_config, task="fix the deploy cache budget")
    compacted = []
    window.on("compacted", compacted.append)
    for k in range(40):
        window.add(ContextItem(prose(k), "user_message" if k % 2 else "tool_result", priority=40, id=f"i{k}"))
    window.build(BuildOptions(reserve_for_response=window.max_tokens - window.current_tokens + 100))
    window.compact("remove_oldest", 20.0)
    reasons = {e.reason for e in compacted}
    assert {"recovery", "build", "manual"} <= reasons <= set(COMPACTION_REASONS)
