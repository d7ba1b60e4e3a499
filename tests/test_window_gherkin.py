"""Seed 000 §10's Gherkin scenarios, one test each, through the runtime ContextWindow."""

from __future__ import annotations

from ctxsim.tokens import count_tokens
from ctxsim.window import BuildOptions, ContextItem, ContextWindow

FRAME = 3  # openai framing per message, and the reply priming once per request


def text(n: int, word: str = "x") -> str:
    """A content of exactly ``n`` cl100k tokens."""
    out = (" " + word) * n
    assert count_tokens(out) == n
    return out


def test_add_items_and_verify_ordering():
    window = ContextWindow(4096)
    window.add(ContextItem("You are a careful assistant.", "system_prompt", priority=50, id="system"))
    window.add(ContextItem("Please fix the failing build.", "user_message", priority=80, id="user-80"))
    window.add(ContextItem("Also, what time is it?", "user_message", priority=30, id="user-30"))

    ids = [i.id for i in window.items()]
    assert ids[0] == "system"
    assert ids.index("user-80") < ids.index("user-30")


def test_automatic_compaction_on_threshold():
    window = ContextWindow(1000, compaction_threshold=85.0)
    contents = [text(206), text(206), text(206), text(207)]  # 825 content + 4 framings + priming = 840
    for k, (content, priority) in enumerate(zip(contents, (20, 60, 80, 90))):
        window.add(ContextItem(content, "user_message", priority=priority, id=f"old-{k}"))
    assert window.usage_percent == 84.0
    compactions = []
    window.on("compacted", compactions.append)

    new = ContextItem(text(57), "user_message", id="new")  # 57 + 3 = 60 tokens: 900 = 90 % projected
    window.add(new)

    assert len(compactions) == 1 and compactions[0].reason == "threshold"
    assert window.stats().compaction_count == 1
    assert "new" in window
    assert "old-0" not in window  # the P3 item went first
    assert window.current_tokens <= 1000


def test_pinned_items_survive_compaction():
    window = ContextWindow(2000, compaction_threshold=100.0)
    for k in range(8):
        pinned = k in (0, 3, 6)
        window.add(ContextItem(text(150, "pin" if pinned else "free"), "tool_result", priority=5 + k, pinned=pinned, id=f"i{k}"))
    pinned_before = {i.id: i for i in window.pinned_items()}
    unpinned_before = {i.id for i in window.items() if not i.pinned}

    window.compact("remove_low_priority", target_percent=40.0)

    remaining = {i.id: i for i in window.items()}
    assert all(remaining.get(pid) == item for pid, item in pinned_before.items())
    removed = (set(pinned_before) | unpinned_before) - set(remaining)
    assert removed and removed <= unpinned_before
    assert window.current_tokens <= 800


def test_build_context_respects_token_budget():
    window = ContextWindow(1000)
    priorities = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    items = [ContextItem(text(147), "user_message", priority=p, id=f"p{p}", role="user") for p in priorities]
    assert sum(i.token_count + FRAME for i in items) == 1500
    assert window.add_range(items) == 10

    built = window.build_structured(BuildOptions(reserve_for_response=200))

    assert built.total_tokens <= 800
    assert count_tokens(built.content) <= 800
    included = {int(i[1:]) for i in built.included_ids}
    excluded = set(priorities) - included
    assert included and excluded
    assert max(excluded) < min(included)  # the lower-priority items are the ones left out


def test_context_snapshot_and_restore():
    window = ContextWindow(4096)
    for k, kind in enumerate(("system_prompt", "instruction", "user_message", "assistant_message", "tool_result")):
        window.add(ContextItem(f"item {k} of kind {kind}", kind, priority=20 * k, id=f"item-{k}"))
    before = window.items()

    snapshot = window.snapshot()
    window.clear()
    assert len(window) == 0
    window.restore(snapshot)

    assert len(window) == 5
    assert window.items() == before
