"""``best-fixed`` on ConversationStream-v0 (ctxsim.lab.stream.best_fixed): the one
(break depth, fixed chain) best on whole training conversations."""

from __future__ import annotations

import itertools

import pytest

from ctxsim.errors import PolicyError
from ctxsim.lab.environments.conversation_stream import ConversationStreamEnv, build_conversation, make_session
from ctxsim.lab.stream import best_fixed
from ctxsim.lab.stream.best_fixed import FixedAtDepth, cached_fit, fit, fitting_config
from ctxsim.lab.stream.evaluate_stream import evaluate_stream
from ctxsim.lab.stream.play import play

@pytest.fixture(scope="module")
def small(small_stream):
    return small_stream


@pytest.fixture(scope="module")
def fitted(small):
    return fit(small, workers=1)


def total(checked, depth, chain, name, seed):
    (scenario,) = [s for s in checked.suite if s.name == name]
    return play(FixedAtDepth(depth, chain), make_session(build_conversation(scenario, seed, checked), checked), name, seed)


def test_the_fit_is_the_pair_with_the_best_mean_total_over_whole_conversations(small, fitted):
    conversations = [(name, seed) for name in ("chat-10k", "tool-dupes") for seed in range(best_fixed.FIT_CONVERSATIONS)]
    assert fitted.conversations == tuple(conversations)
    means = {}
    for depth in range(3):
        for chain in itertools.product(("prioritize_recent", "summarize_old", "fresh_start"), repeat=2):
            means[depth, chain] = sum(total(small, depth, chain, n, s) for n, s in conversations) / len(conversations)
    assert fitted.candidates_tried == len(means) == 27
    assert fitted.mean_reward == max(means.values())
    assert means[fitted.depth, fitted.chain] == fitted.mean_reward
    # here the best fixed pair does not break at the warning threshold: a choice of
    # depth is part of what one fixed choice can do on a conversation
    assert fitted.depth > 0 and fitted.mean_reward > max(v for (d, _), v in means.items() if d == 0)


def test_the_fit_does_not_depend_on_the_number_of_workers(small, fitted):
    assert fit(small, workers=2) == fitted


def test_the_fit_is_kept_in_the_pool_folder(small, tmp_path, monkeypatch):
    monkeypatch.setenv("CTXSIM_POOL_DIR", str(tmp_path))
    heard = []
    first, path, computed = cached_fit(small, workers=1, note=heard.append)
    assert computed and path.parent == tmp_path and path.is_file() and len(heard) == 1
    again, same_path, computed_again = cached_fit(small, workers=1, note=heard.append)
    assert (again, same_path, computed_again) == (first, path, False) and len(heard) == 1


def test_it_refuses_a_conversation_it_was_fitted_on(small):
    (scenario,) = [s for s in small.suite if s.name == "chat-10k"]
    player = FixedAtDepth(1, ("prioritize_recent",), "best-fixed:x", frozenset({("chat-10k", 0)}))
    with pytest.raises(PolicyError, match=r"chose its depth and chain on this conversation \(chat-10k, seed 0\)"):
        play(player, make_session(build_conversation(scenario, 0, small), small), "chat-10k", 0)


def test_a_context_overflow_experiment_is_refused_on_the_stream(small_stream_config):
    with pytest.raises(PolicyError, match="best-fixed:maskable_ppo_default trains on .*ContextOverflow-v0"):
        evaluate_stream(["best-fixed:maskable_ppo_default"], ["tool-dupes"], [0], small_stream_config)


def test_the_fitting_conversations_are_the_experiments_training_scenarios_under_the_evaluations_config(small, small_stream_config):
    held_out = ConversationStreamEnv.checked_config({**small_stream_config, "scenario_names": ["gpt4-6000"]})
    fitting = fitting_config("maskable_ppo_stream_warm", held_out)
    names = {s.name for s in fitting.suite}
    assert "chat-10k" not in names and "gpt4-6000" not in names and "tool-dupes" not in names  # validation, held out
    assert "code-heavy" in names and len(names) == 18
    assert (fitting.turns, fitting.actions, fitting.max_steps) == (40, held_out.actions, 2)


def test_a_teachers_copy_plays_the_fitted_conversations_as_the_pair_does(small):
    """A teacher's rollout over the pair plays the training conversations it was fitted on."""
    (scenario,) = [s for s in small.suite if s.name == "chat-10k"]
    fitted = FixedAtDepth(2, ("prioritize_recent", "summarize_old"), "best-fixed:x", frozenset({("chat-10k", 0)}))
    copy = fitted.for_training()
    conversation = build_conversation(scenario, 0, small)
    assert play(copy, make_session(conversation, small), "chat-10k", 0) == \
        play(FixedAtDepth(2, ("prioritize_recent", "summarize_old")), make_session(conversation, small), "chat-10k", 0)
    with pytest.raises(PolicyError):
        play(fitted, make_session(conversation, small), "chat-10k", 0)
