"""Rollout over a base policy on ConversationStream-v0 (ctxsim.lab.stream.rollout) and the
session copy it plays on."""

from __future__ import annotations

import pytest

from ctxsim.lab.environments.conversation_stream import ConversationStreamEnv, build_conversation, make_session
from ctxsim.errors import PolicyError
from ctxsim.policies import get_policy
from ctxsim.policies.oracle import chains
from ctxsim.lab.stream.evaluate_stream import evaluate_stream
from ctxsim.lab.stream.play import play
from ctxsim.lab.stream.rollout import Rollout

#: short conversations that still overflow several times
CONFIG = {"turns": 40, "probes": {"turns": [15, 25, 35], "min_age_turns": 5}}


def session_of(scenario: str, seed: int):
    checked = ConversationStreamEnv.checked_config(CONFIG)
    (chosen,) = [s for s in checked.suite if s.name == scenario]
    return make_session(build_conversation(chosen, seed, checked), checked)


def test_a_copy_plays_on_without_touching_the_session():
    session = session_of("gpt4-6000", 2)
    before = session.metrics()
    events = list(session.events)
    copy = session.copy()
    total = play(get_policy("seed-chain"), copy, "gpt4-6000", 2)
    assert copy.done and copy.metrics() != before
    assert session.metrics() == before and session.events == events and not session.done
    assert play(get_policy("seed-chain"), session, "gpt4-6000", 2) == total  # the original plays the same way


def test_a_copy_shares_the_frozen_context_and_copies_what_a_turn_changes():
    session = session_of("tool-dupes", 1)
    copy = session.copy()
    assert copy.state is session.state and copy.episode.original is session.episode.original
    assert copy.log is not session.log and copy.log == session.log and copy.events is not session.events
    assert copy.episode is not session.episode and copy.cache is not session.cache


def test_the_value_of_the_base_policys_own_chain_is_the_base_policys_total():
    session = session_of("tool-dupes", 0)
    base = get_policy("seed-chain")
    rollout = Rollout(base, "rollout:seed-chain")
    pending = session.episode
    own = next(f.chain for f in chains(pending.original, pending.settings) if f.chain == ("summarize_old",))
    assert rollout.value(session, own, "tool-dupes", 0) == pytest.approx(play(base, session.copy(), "tool-dupes", 0))


BASES = ["seed-chain", "only:prioritize_recent", "peer:letta"]


@pytest.fixture(scope="module")
def base_and_rollout_rows():
    """Every base and its rollout on four conversations, in one evaluation (each
    conversation is played by all six policies in one process, sharing its memos)."""
    return evaluate_stream([p for base in BASES for p in (base, f"rollout:{base}")], ["gpt4-6000", "tool-dupes"],
                           [0, 1], CONFIG)


@pytest.mark.parametrize("base", BASES)
def test_rollout_never_scores_below_its_base_and_beats_a_weak_one(base, base_and_rollout_rows):
    df = base_and_rollout_rows
    own = df[df.policy == base].set_index(["scenario", "seed"]).reward
    improved = df[df.policy == f"rollout:{base}"].set_index(["scenario", "seed"]).reward
    assert len(own) == len(improved) == 4 and (improved >= own - 1e-9).all()
    if base == "only:prioritize_recent":
        assert improved.mean() > own.mean() + 0.5  # prioritize_recent at every event is far from the best


def test_rollout_rows_are_deterministic():
    policies = ["rollout:seed-chain"]
    first = evaluate_stream(policies, ["gpt4-6000"], [2], CONFIG)
    assert first.equals(evaluate_stream(policies, ["gpt4-6000"], [2], CONFIG))


@pytest.mark.parametrize("name,match", [
    ("rollout:", "names no base policy"),
    ("rollout:rollout:seed-chain", "cannot be a rollout"),
    ("rollout:no-such-policy", "unknown policy 'no-such-policy'"),
])
def test_bad_rollout_names(name, match):
    with pytest.raises(PolicyError, match=match):
        evaluate_stream([name], ["gpt4-6000"], [0], CONFIG)


def test_cli_refuses_a_rollout_on_single_events_and_names_a_bad_base(tmp_path, capsys):
    from ctxsim.lab.cli import main

    out = tmp_path / "r.csv"
    assert main(["evaluate", "--policy", "rollout:seed-chain", "--names", "gpt4-6000", "--seeds", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "ConversationStream-v0" in err and len(err.strip().splitlines()) == 1
    assert main(["evaluate", "--env", "envs/stream.yaml", "--policy", "rollout:nope", "--names", "gpt4-6000",
                 "--seeds", "1", "--out", str(out)]) == 2
    assert "unknown policy 'nope'" in capsys.readouterr().err and not out.exists()
