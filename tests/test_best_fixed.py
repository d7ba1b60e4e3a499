"""best-fixed: the best fixed chain on training contexts, brute-forced here through
the public episode API, never scored where it was chosen, never above the oracle."""

from __future__ import annotations

import itertools
import json

import pytest

from ctxsim.episode import EpisodeSettings, OverflowEpisode
from ctxsim.errors import PolicyError
from ctxsim.policies import get_policy, list_policies, run_episode, search
from ctxsim.policies.baselines import fallback_action
from ctxsim.lab.policies.best_fixed import (
    FIT_SEEDS,
    BestFixedPolicy,
    _stored_fit,
    experiment_contexts,
    fit,
    fixed_chains,
    training_experiments,
)
from ctxsim.lab.contexts import build_context
from ctxsim.lab.pool import pool_dir
from ctxsim.lab.scenarios import find_scenario

ACTIONS = ("prioritize_recent", "discard_low_rel", "summarize_old", "fresh_start")
SETTINGS = EpisodeSettings(actions=ACTIONS, max_steps=2)


def contexts(name, seeds):
    scenario = find_scenario(name)
    return [build_context(scenario, seed) for seed in seeds]


@pytest.fixture(scope="module")
def train():
    return contexts("mild-overflow", range(3)) + contexts("local-14b-floor", range(2))


@pytest.fixture(scope="module")
def held_out():
    return contexts("mild-overflow", range(3, 6)) + contexts("code-heavy", range(2))


def play(chain, state, settings):
    """The fixed-chain rule, step by step: each id in turn, skipped for good when
    not valid at its turn, then the fallback action."""
    episode, position = OverflowEpisode(state, settings), 0
    while not episode.done:
        valid = episode.valid_actions()
        while position < len(chain) and chain[position] not in valid:
            position += 1
        if position < len(chain):
            episode.step(chain[position])
            position += 1
        else:
            episode.step(fallback_action(episode))
    return episode.reward


def test_the_candidates_are_every_sequence_of_max_steps_actions():
    chains = fixed_chains(SETTINGS)
    assert len(chains) == len(ACTIONS) ** 2 == len(set(chains))
    assert chains[0] == ("prioritize_recent", "prioritize_recent") and chains[-1] == ("fresh_start", "fresh_start")


def test_best_fixed_picks_the_truly_best_fixed_chain(train):
    means = {chain: sum(play(chain, s, SETTINGS) for s in train) / len(train)
             for chain in itertools.product(ACTIONS, repeat=2)}
    best = max(means.values())
    expected = next(chain for chain in means if means[chain] == best)  # ties: the first in action order
    chosen = fit(train, SETTINGS)
    assert chosen.chain == expected and chosen.mean_reward == pytest.approx(best, abs=1e-12)
    assert (chosen.contexts, chosen.chains_tried) == (len(train), len(means))
    assert len(set(means.values())) > 1  # the choice mattered


def test_best_fixed_plays_its_chain_and_stays_at_or_below_the_oracle(train, held_out):
    policy = BestFixedPolicy("hand", contexts=train)
    for state in held_out:
        episode = run_episode(policy, state, SETTINGS, 0)
        assert episode.reward == pytest.approx(play(policy.fitted.chain, state, SETTINGS), abs=1e-12)
        assert episode.reward <= search(state, SETTINGS).reward + 1e-12
    assert policy.name == "best-fixed:hand" and "->" in policy.fitted.describe()


def test_best_fixed_refuses_the_contexts_it_was_chosen_on(train, held_out):
    policy = BestFixedPolicy("hand", contexts=train)
    run_episode(policy, held_out[0], SETTINGS, 0)
    with pytest.raises(PolicyError, match="chose its chain on this context"):
        run_episode(policy, train[1], SETTINGS, 0)


def test_an_experiments_fit_uses_its_training_split_only():
    from ctxsim.paths import EXPERIMENTS_DIR
    from ctxsim.lab.train import load_experiment

    assert "best-fixed:maskable_ppo_seed001" in list_policies()
    assert "regression" not in training_experiments()  # a sweep file trains nothing
    assert "maskable_ppo_full_actions" in training_experiments()  # its algo comes through `extends`
    experiment = load_experiment(EXPERIMENTS_DIR / "maskable_ppo_seed001.yaml")
    fitted_on = experiment_contexts("maskable_ppo_seed001")
    scenarios = {s.scenario for s in fitted_on}
    assert scenarios and not scenarios & set(experiment.eval_scenarios)
    assert all(s.seed is None or s.seed < FIT_SEEDS for s in fitted_on)
    assert len({s.fingerprint for s in fitted_on}) == len(fitted_on)
    assert isinstance(get_policy("best-fixed:maskable_ppo_seed001"), BestFixedPolicy)


def test_a_fit_is_kept_on_disk_and_read_back(train):
    first = _stored_fit(train, SETTINGS)
    [path] = [p for p in pool_dir().glob("best-fixed-*.json") if json.loads(p.read_text())["chain"] == list(first.chain)]
    other = [c for c in fixed_chains(SETTINGS) if c != first.chain][0]
    path.write_text(json.dumps({**json.loads(path.read_text()), "chain": list(other)}))
    assert _stored_fit(train, SETTINGS).chain == other  # the stored fit is what a later process reads


def test_check_fits_before_any_episode(train, held_out):
    policy = BestFixedPolicy("hand", contexts=train)
    assert policy.fitted is None
    policy.check(SETTINGS)  # what evaluate and sweep call in the parent, before any worker starts
    assert policy.fitted == fit(train, SETTINGS)
    assert run_episode(policy, held_out[0], SETTINGS, 0).reward == pytest.approx(
        play(policy.fitted.chain, held_out[0], SETTINGS), abs=1e-12)


def test_a_fit_made_on_a_pools_values_chooses_as_a_fit_from_scratch(train):
    from ctxsim.lab.pool import expand

    order = tuple(reversed(ACTIONS))  # settings no other test fits under (fits are cached)
    pooled = EpisodeSettings(actions=order, max_steps=2, cache_size=1_000_000)
    for state in train:
        expand(state, pooled, {})  # what a context pool holds for these contexts
    caller = EpisodeSettings(actions=order, max_steps=2)
    chosen = _stored_fit(train, caller, lambda: pooled.memo_entries())
    assert chosen == fit(train, EpisodeSettings(actions=order, max_steps=2))
    assert caller.memo_entries() == {}  # the fit ran on a copy: the pool's values stay out of the caller's settings


def test_a_fit_reads_no_pool_built_under_other_settings_and_builds_none(tmp_path, monkeypatch):
    from ctxsim.lab.environments.spec import env_class
    from ctxsim.lab.policies.best_fixed import training_pool_memo
    from ctxsim.lab.train import env_configs, load_experiment
    from ctxsim.paths import EXPERIMENTS_DIR

    monkeypatch.setenv("CTXSIM_POOL_DIR", str(tmp_path))  # no pool on disk here
    env_id, train, _, _ = env_configs(load_experiment(EXPERIMENTS_DIR / "maskable_ppo_seed001.yaml"))
    own = EpisodeSettings.from_env_config(env_class(env_id).checked_config(train).model_dump(mode="json"))
    grounded = EpisodeSettings.from_mapping({"actions": list(SETTINGS.actions), "reward": {"profile": "grounded"}})
    assert training_pool_memo("maskable_ppo_default", grounded) == {}  # not the experiment's settings
    assert training_pool_memo("maskable_ppo_seed001", SETTINGS) == {}
    assert training_pool_memo("maskable_ppo_seed001", own) == {}  # its settings, but its pool is not built
    assert list(tmp_path.iterdir()) == []  # and a fit builds none
