"""Sampled futures on ConversationStream-v0: ``with_future_of`` (the same past, the later
turns of another seed) and the ``rollout-futures:`` policy that scores candidates over them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ctxsim.errors import PolicyError, ScenarioError
from ctxsim.lab.environments.conversation_stream import build_conversation, make_session
from ctxsim.lab.stream.conversation import with_future_of
from ctxsim.lab.stream.play import play
from ctxsim.lab.stream.rollout import FuturesRollout, Rollout, is_rollout
from ctxsim.policies.oracle import chains
from future_contract import assert_a_future_of

@pytest.fixture(scope="module")
def small(small_stream):
    return small_stream


def conversation(checked, name, seed):
    (scenario,) = [s for s in checked.suite if s.name == name]
    return build_conversation(scenario, seed, checked)


def test_a_future_keeps_the_past_and_takes_the_other_seeds_later_turns(small):
    own, other = conversation(small, "chat-10k", 0), conversation(small, "chat-10k", 7)
    turn = 20
    future = with_future_of(own, other, turn, "f0-", small.probes)
    assert_a_future_of(own, future, turn, "f0-", small.probes.turns)
    for mine, theirs in zip(future.turns[turn + 1:], other.turns[turn + 1:]):
        assert [u.id for u in mine] == ["f0-" + u.id for u in theirs] and [u.content for u in mine] == [u.content for u in theirs]
    assert with_future_of(own, other, turn, "f0-", small.probes) == future  # deterministic
    assert with_future_of(own, other, len(own.turns) - 1, "f0-", small.probes) is own  # nothing after the last turn
    last = len(other.turns) - 1
    shorter = replace(other, turns=other.turns[:last], probes=(),
                      facts=tuple(f for f in other.facts if other.planted_turn[f.id] < last))
    with pytest.raises(ScenarioError, match="39 turns, a future of chat-10k needs 40"):
        with_future_of(own, shorter, turn, "f0-", small.probes)


def test_a_futures_rollout_scores_each_candidate_by_its_mean_over_the_sampled_futures(small):
    rollout = Rollout.named("rollout-futures:only:prioritize_recent", small)
    assert isinstance(rollout, FuturesRollout) and is_rollout("rollout-futures:only:prioritize_recent")
    session = make_session(conversation(small, "tool-dupes", 0), small)
    real = session.conversation
    futures = rollout.worlds(session)
    assert len(futures) == rollout.draws and all(f.conversation is not session.conversation for f in futures)
    assert {f.conversation.turns[session.turn + 1][0].id.split("-")[0] for f in futures} == {f"future{k}" for k in range(4)}
    base, found = rollout.candidates(session, "tool-dupes", 0)
    assert base == pytest.approx(sum(play(rollout.base, f.copy(), "tool-dupes", 0) for f in futures) / len(futures))
    depth, chain, value = found[0]
    assert value == pytest.approx(sum(rollout.value(f, chain, "tool-dupes", 0, depth) for f in futures) / len(futures))
    assert len(found) == sum(len(list(chains(session.event_at(d).original, session.event_at(d).settings)))
                             for d in range(session.depth_count))
    assert session.conversation is real  # the real conversation is untouched


def test_a_futures_rollout_plays_whole_conversations_repeatably(small):
    totals = []
    for _ in range(2):
        rollout = Rollout.named("rollout-futures:only:prioritize_recent", small)
        session = make_session(conversation(small, "tool-dupes", 1), small)
        totals.append((play(rollout, session, "tool-dupes", 1), [e.chain for e in session.events]))
    assert totals[0] == totals[1] and totals[0][1]
    with pytest.raises(PolicyError, match="cannot be a rollout"):
        Rollout.named("rollout-futures:rollout:only:prioritize_recent", small)


def test_an_experiment_may_name_a_futures_rollout_as_its_teacher(tmp_path, repo_root, capsys):
    from ctxsim.lab.cli import main
    from ctxsim.lab.train import load_experiment

    text = (repo_root / "experiments" / "maskable_ppo_stream_warm.yaml").read_text()
    (tmp_path / "base.yaml").write_text((repo_root / "experiments" / "maskable_ppo_stream.yaml").read_text().replace(
        "extends: maskable_ppo_seed001.yaml", f"extends: {repo_root / 'experiments' / 'maskable_ppo_seed001.yaml'}"))
    futures = text.replace("extends: maskable_ppo_stream.yaml", "extends: base.yaml").replace(
        "teacher: rollout:seed-chain", "teacher: rollout-futures:seed-chain")
    (tmp_path / "futures.yaml").write_text(futures)
    assert load_experiment(tmp_path / "futures.yaml").warm_start.teacher == "rollout-futures:seed-chain"
    (tmp_path / "bad.yaml").write_text(futures.replace("rollout-futures:seed-chain", "rollout-futures:no-such-policy"))
    assert main(["train", str(tmp_path / "bad.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "warm_start.teacher" in err and "no-such-policy" in err
