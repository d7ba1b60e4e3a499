"""The exhaustive-search oracle: brute force agreement, maximality, ties, determinism."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ctxsim.lab.contexts import build_context
from ctxsim.episode import EpisodeSettings, OverflowEpisode
from ctxsim.model import ContextState, ContextUnit
from ctxsim.policies import best_chain, get_policy, list_policies, run_episode, search
from ctxsim.lab.scenarios import find_scenario

SMALL = ("dedupe_tool_results", "remove_oldest", "summarize_old", "truncate", "fresh_start")


@pytest.fixture(scope="module")
def contexts(scenario_suite):
    by_name = {s.name: s for s in scenario_suite}
    return [build_context(by_name["local-14b-floor"], 0), build_context(by_name["mild-overflow"], 1)]


def brute_force(state: ContextState, settings: EpisodeSettings) -> float:
    """Best final reward over every action sequence, each replayed in a fresh episode."""
    best = float("-inf")
    for sequence in itertools.product(settings.actions, repeat=settings.max_steps):
        episode = OverflowEpisode(state, settings)
        for sid in sequence:
            if episode.done:
                break
            if sid not in episode.valid_actions():
                episode = None
                break
            episode.step(sid)
        if episode is not None and episode.done:
            best = max(best, episode.reward)
    return best


@pytest.mark.parametrize("max_steps", [1, 2, 3])
def test_oracle_equals_brute_force(contexts, max_steps):
    settings = EpisodeSettings(actions=SMALL, max_steps=max_steps)
    for state in contexts:
        reward, chain = best_chain(state, settings)
        assert reward == brute_force(state, settings)
        replay = OverflowEpisode(state, settings)
        for sid in chain:
            replay.step(sid)
        assert replay.done and replay.reward == reward
        result = search(state, settings)
        assert 0 < result.leaves <= result.nodes_expanded <= sum(len(SMALL) ** k for k in range(1, max_steps + 1))


def expected_random(episode: OverflowEpisode) -> float:
    """The random policy's expected final reward, by recursion over fresh replays."""
    if episode.done:
        return episode.reward
    actions = [sid for sid in episode.valid_actions() if sid != "error"]
    total = 0.0
    for sid in actions:
        child = OverflowEpisode(episode.original, episode.settings)
        for taken in (*episode.chain, sid):
            child.step(taken)
        total += expected_random(child)
    return total / len(actions)


@pytest.mark.parametrize("max_steps", [1, 2, 3])
def test_random_reward_is_the_random_policys_exact_expectation(contexts, max_steps):
    settings = EpisodeSettings(actions=SMALL, max_steps=max_steps)
    for state in contexts:
        result = search(state, settings)
        assert result.random_reward == pytest.approx(expected_random(OverflowEpisode(state, settings)), abs=1e-12)
        assert result.random_reward < result.reward


def test_random_policy_rollouts_average_to_random_reward(contexts):
    settings = EpisodeSettings(max_steps=2)
    policy = get_policy("random")
    for state in contexts:
        rewards = [run_episode(policy, state, settings, seed).reward for seed in range(400)]
        error = max(float(np.std(rewards)) / np.sqrt(len(rewards)), 1e-6)
        assert abs(np.mean(rewards) - search(state, settings).random_reward) < 4 * error


def test_random_reward_of_a_fitting_context_is_its_reward():
    state = ContextState(units=(_unit(1),), limit=5000, min_limit=10)
    settings = EpisodeSettings()
    result = search(state, settings)
    assert result.leaves == 1 and result.random_reward == result.reward == OverflowEpisode(state, settings).reward


def test_oracle_is_the_max_of_every_policy_inside_the_action_set(contexts):
    settings = EpisodeSettings(max_steps=2)
    names = ["random", "seed-chain", "greedy", "oracle"] + [n for n in list_policies() if n.startswith("only:")]
    for state in contexts:
        best, chain = best_chain(state, settings)
        for name in names:
            if name.startswith("only:") and name[5:] not in settings.actions:
                continue
            for seed in range(2 if name == "random" else 1):
                assert run_episode(get_policy(name), state, settings, seed).reward <= best, name
        oracle = run_episode(get_policy("oracle"), state, settings, 0)
        assert oracle.chain == chain and oracle.reward == best


def test_oracle_is_deterministic(contexts):
    state = contexts[0]
    # two equal settings values share one cache; a different cache size makes a new one
    first = search(state, EpisodeSettings(actions=SMALL, max_steps=2, cache_size=1000))
    second = search(state, EpisodeSettings(actions=SMALL, max_steps=2, cache_size=1001))
    assert first == second


def _unit(i: int) -> ContextUnit:
    text = " ".join(f"item{(i * 3 + k) % 40}" for k in range(50))
    return ContextUnit(id=f"u{i}", type="message", role=("user", "assistant")[i % 2], content=f"{text}.", turn=i)


def test_ties_go_to_the_first_action_in_order():
    # all units share one priority: removing the oldest or the lowest priority is the same cut
    units = tuple(_unit(i) for i in range(8))
    total = ContextState(units=units, limit=10**6, min_limit=10).total_tokens
    state = ContextState(units=units, limit=total - 30, min_limit=10, task="item3 item7")
    forward = EpisodeSettings(actions=("remove_oldest", "remove_low_priority", "fresh_start"), max_steps=2)
    backward = EpisodeSettings(actions=("remove_low_priority", "remove_oldest", "fresh_start"), max_steps=2)
    assert best_chain(state, forward) == (best_chain(state, backward)[0], ("remove_oldest",))
    assert best_chain(state, backward)[1] == ("remove_low_priority",)


def test_a_fitting_context_needs_no_chain():
    state = ContextState(units=(_unit(1),), limit=5000, min_limit=10)
    result = search(state, EpisodeSettings(actions=SMALL))
    assert result.chain == () and result.nodes_expanded == 0
    assert result.reward == OverflowEpisode(state, EpisodeSettings(actions=SMALL)).reward


def test_the_oracle_takes_list_and_dict_strategy_parameters_and_forgets_dead_settings():
    import gc

    from ctxsim.policies import oracle as oracle_module

    settings = EpisodeSettings.from_mapping({"strategy_params": {
        "hybrid": {"chain": ["summarize_old", "discard_low_rel"]},
        "content_type_chunking": {"compress_ratios": {"code": 0.5, "text": 0.5, "log": 0.4, "plan_ref": 1.0, "other": 0.6}},
    }})
    state = build_context(find_scenario("code-heavy"), 0)
    first = oracle_module.search(state, settings)
    assert oracle_module.search(state, settings) is first and first.chain
    key = id(settings)
    assert key in oracle_module._RESULTS
    del settings
    gc.collect()
    assert key not in oracle_module._RESULTS


def test_the_oracle_without_probes_follows_the_best_chain_under_the_reward_without_them():
    """Under grounded, on contexts where knowing the probes changes the best chain and
    one where it does not: the chain maximizes the reward without the probe term over
    every chain (brute force over the finished episodes), and scores no more than
    the oracle under the full reward."""
    from ctxsim.policies.oracle import chains
    from ctxsim.reward import RewardWeights, compute_reward

    grounded = EpisodeSettings(reward=RewardWeights(profile="grounded"))
    without = grounded.reward.without_probes()
    assert without.probe_weight == 0.0 and without.without_probes() is without
    differs = 0
    for name, seed in (("pinned-instructions", 0), ("code-heavy", 1), ("mild-overflow", 0)):
        state = build_context(find_scenario(name), seed)
        best_without = max(compute_reward(finished.outcome, without) for finished in chains(state, grounded))
        result = search(state, grounded, probes=False)
        assert result.reward == best_without
        episode = run_episode(get_policy("oracle-without-probes"), state, grounded, 0)
        assert episode.chain == result.chain
        assert compute_reward(episode.outcome, without) == best_without
        assert episode.reward <= search(state, grounded).reward
        differs += episode.chain != search(state, grounded).chain
    assert differs == 2
    seed001 = EpisodeSettings()  # no probe term: the same search, the same cached result
    assert search(state, seed001, probes=False) is search(state, seed001)
