"""Futures drawn from the conversation's own past on ConversationStream-v0:
``with_future_from_past`` and the ``rollout-past:`` policy that scores candidates over
them (what a deployed agent could assume of the rest of its session: more of the same)."""

from __future__ import annotations

import pytest

from ctxsim.lab.environments.conversation_stream import build_conversation, make_session
from ctxsim.lab.stream.conversation import with_future_from_past
from ctxsim.lab.stream.play import play
from ctxsim.lab.stream.rollout import PastRollout, Rollout, is_rollout, rollout_base
from ctxsim.lab.warmstart import WarmStart
from future_contract import assert_a_future_of


def conversation(checked, name, seed):
    (scenario,) = [s for s in checked.suite if s.name == name]
    return build_conversation(scenario, seed, checked)


def test_a_future_from_the_past_repeats_past_turns_and_nothing_later(small_stream):
    own = conversation(small_stream, "chat-10k", 0)
    turn = 20
    future = with_future_from_past(own, turn, "p0-", small_stream.probes)
    assert_a_future_of(own, future, turn, "p0-", small_stream.probes.turns)
    past = {tuple(u.content for u in units) for units in own.turns[1:turn + 1]}
    later = [tuple(u.content for u in units) for units in future.turns[turn + 1:]]
    assert all(contents in past for contents in later)  # every later turn is a past turn again
    unseen = {u.content for units in own.turns[turn + 1:] for u in units} - {u.content for units in own.turns[:turn + 1] for u in units}
    assert unseen and not unseen & {c for contents in later for c in contents}  # nothing of the real future
    assert len(set(later)) > 1  # drawn, not one turn repeated
    for position, units in enumerate(future.turns[turn + 1:], start=turn + 1):
        assert all(u.id.startswith(f"p0-{position}-") for u in units)
    copies = [f for f in future.facts if future.planted_turn[f.id] > turn]
    values = {f.value for f in own.facts if own.planted_turn[f.id] <= turn}
    assert {f.value for f in copies} <= values  # a copied fact is a past fact again
    assert with_future_from_past(own, turn, "p0-", small_stream.probes) == future  # deterministic
    assert with_future_from_past(own, turn, "p1-", small_stream.probes) != future  # another draw
    assert with_future_from_past(own, len(own.turns) - 1, "p0-", small_stream.probes) is own


def test_a_past_rollout_scores_candidates_over_futures_of_its_own_past(small_stream):
    name = "rollout-past:only:prioritize_recent"
    rollout = Rollout.named(name, small_stream)
    assert isinstance(rollout, PastRollout) and is_rollout(name) and rollout_base(name) == "only:prioritize_recent"
    session = make_session(conversation(small_stream, "tool-dupes", 0), small_stream)
    real = session.conversation
    worlds = rollout.worlds(session)
    assert len(worlds) == rollout.draws
    assert {w.conversation.turns[session.turn + 1][0].id.split("-")[0] for w in worlds} == {f"past{k}" for k in range(4)}
    base, found = rollout.candidates(session, "tool-dupes", 0)
    assert base == pytest.approx(sum(play(rollout.base, w.copy(), "tool-dupes", 0) for w in worlds) / len(worlds))
    depth, chain, value = found[-1]
    assert value == pytest.approx(sum(rollout.value(w, chain, "tool-dupes", 0, depth) for w in worlds) / len(worlds))
    assert session.conversation is real
    totals = [play(Rollout.named(name, small_stream), make_session(conversation(small_stream, "tool-dupes", 1), small_stream),
                   "tool-dupes", 1) for _ in range(2)]
    assert totals[0] == totals[1]  # repeatable
    assert WarmStart(teacher="rollout-past:seed-chain").teacher == "rollout-past:seed-chain"
