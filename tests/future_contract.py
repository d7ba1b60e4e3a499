"""What every spliced future of a ConversationStream-v0 conversation must hold
(``with_future_of``, ``with_future_from_past``): the past as it was, later turns that
follow on in time, later facts under the future's tag, the past probes, and later
probes that ask only facts the future holds."""

from __future__ import annotations


def assert_a_future_of(own, future, turn: int, tag: str, probe_turns) -> None:
    assert len(future.turns) == len(own.turns)
    assert all(a is b for a, b in zip(future.turns[:turn + 1], own.turns[:turn + 1]))  # the past, the same objects
    stamps = [u.timestamp for units in future.turns for u in units]
    assert stamps == sorted(stamps)  # the later turns follow on
    planted = future.planted_turn
    assert {f.id for f in future.facts if planted[f.id] <= turn} == {f.id for f in own.facts if own.planted_turn[f.id] <= turn}
    later = [f for f in future.facts if planted[f.id] > turn]
    assert later and all(f.id.startswith(tag) for f in later)
    assert [p for p in future.probes if p.turn <= turn] == [p for p in own.probes if p.turn <= turn]
    assert [p.turn for p in future.probes if p.turn > turn] == [t for t in probe_turns if t > turn]
    held = {f.id for f in future.facts}
    assert all(p.fact_id in held for p in future.probes)  # every later probe asks a fact the future holds
