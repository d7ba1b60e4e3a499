"""ContextWindow under concurrency: 8 threads adding, pinning, building, removing and
compacting (10,000 operations) leave consistent token totals and events."""

from __future__ import annotations

import random
import threading

from ctxsim.errors import ContextWindowFull
from ctxsim.tokens import count_tokens
from ctxsim.window import BuildOptions, ContextItem, ContextWindow

THREADS = 8
OPERATIONS = 10_000
WORDS = ("alpha", "deploy", "cache", "budget", "token", "queue", "parser", "schema")


def worker(window: ContextWindow, tid: int, errors: list, built: list) -> None:
    rng = random.Random(tid)
    mine: list[str] = []
    options = BuildOptions(reserve_for_response=300, max_history_items=20)
    for k in range(OPERATIONS // THREADS):
        op = rng.random()
        try:
            if op < 0.45:
                words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 60)))
                item = ContextItem(
                    f"t{tid} #{k}: {words}", rng.choice(("user_message", "tool_result", "retrieved_document")),
                    priority=rng.randint(0, 100), id=f"t{tid}-{k}", role=rng.choice((None, "user", "tool")),
                )
                window.add(item)
                mine.append(item.id)
            elif op < 0.65 and mine:
                target = rng.choice(mine)
                (window.pin if rng.random() < 0.5 else window.unpin)(target)
            elif op < 0.85:
                result = window.build_structured(options)
                built.append(count_tokens(result.content) <= result.total_tokens <= window.max_tokens - 300)
            elif op < 0.95 and mine:
                window.remove(mine.pop(rng.randrange(len(mine))))
            else:
                window.compact(rng.choice(("summarize", "selective", None)), target_percent=rng.choice((40.0, 60.0)))
        except ContextWindowFull:
            continue
        except Exception as exc:  # anything else is a failure of the test
            errors.append(exc)


def test_concurrent_operations_keep_totals_consistent():
    window = ContextWindow(3000, default_strategy="remove_oldest")
    counts = {"added": 0, "removed": 0}
    counter_lock = threading.Lock()

    def count(event):
        with counter_lock:
            counts[event.name] += 1

    window.on("added", count)
    window.on("removed", count)
    errors: list = []
    built: list = []
    threads = [threading.Thread(target=worker, args=(window, tid, errors, built)) for tid in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    items = window.items()
    recount = sum(count_tokens(i.content) + 3 for i in items) + (3 if items else 0)
    assert window.current_tokens == recount == window.to_state().total_tokens
    assert window.current_tokens <= window.max_tokens
    assert counts["added"] - counts["removed"] == len(window)
    assert built and all(built)
    stats = window.stats()
    assert stats.compaction_count > 0 and stats.total_items == len(items)
    assert len({i.id for i in items}) == len(items)
