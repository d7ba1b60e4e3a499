"""Oracle warm start (ctxsim.lab.warmstart): action values agree with the oracle, the fit lowers the regret, training writes its stats."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ctxsim.lab.environments.overflow import ContextOverflowEnv
from ctxsim.errors import ConfigError
from ctxsim.policies.oracle import search
from ctxsim.paths import ROOT as REPO_ROOT
from ctxsim.lab.train import NORMALIZATION_MIN_VAR, ExperimentConfig, load_experiment, train
from ctxsim.lab.warmstart import WarmStart, action_values, fit, greedy_regret

CONFIG = {"scenario_names": ["mild-overflow", "chat-10k"], "contexts_per_scenario": 2}


@pytest.fixture(scope="module")
def env_and_values():
    env = ContextOverflowEnv(CONFIG)
    return env, action_values(env)


def test_action_values_agree_with_the_oracle_and_the_mask(env_and_values):
    env, data = env_and_values
    assert np.array_equal(np.isfinite(data.values), data.masks)
    roots = list(env.contexts())
    assert len(roots) == 4
    # a root row is the one whose observation is the context's own; its best value is the oracle's reward
    for state in roots:
        obs = env.observation_of(state)
        (row,) = [i for i in range(len(data)) if np.array_equal(data.observations[i], obs)]
        assert data.values[row].max() == pytest.approx(search(state, env.episode_settings).reward, abs=1e-12)
    assert len(data) > len(roots)  # the states after one and two steps too


def test_fit_lowers_the_greedy_regret_and_is_deterministic(env_and_values):
    from sb3_contrib import MaskablePPO

    env, data = env_and_values
    weights = []
    for _ in range(2):
        model = MaskablePPO("MlpPolicy", ContextOverflowEnv(CONFIG), seed=0, device="cpu")
        before = greedy_regret(model.policy, data)
        stats = fit(model.policy, data, WarmStart(epochs=300, weight_decay=0.0), seed=0)
        assert stats["states"] == len(data)
        assert stats["greedy_regret"] == pytest.approx(greedy_regret(model.policy, data))
        weights.append(np.concatenate([p.detach().numpy().ravel() for p in model.policy.parameters()]))
    assert before > 0.005 and stats["greedy_regret"] < 0.25 * before
    assert np.array_equal(weights[0], weights[1])
    # it chooses per state, as the oracle does, not the one action that is best on average
    greedy, _ = model.policy.predict(data.observations, deterministic=True, action_masks=data.masks)
    assert len(set(data.values.argmax(1))) > 1 and len(set(greedy)) > 1


def _experiment(tmp_path, **changes) -> ExperimentConfig:
    base = dict(
        name="ws", algo="MaskablePPO", env=str(REPO_ROOT / "envs" / "default.yaml"), env_config={"contexts_per_scenario": 2},
        train_scenarios=["mild-overflow"], eval_scenarios=["chat-10k"], timesteps=64, n_envs=1,
        hyperparams={"n_steps": 32, "batch_size": 32}, eval_freq=64, eval_episodes=1, warm_start={"epochs": 20},
    )
    return ExperimentConfig.model_validate({**base, **changes})


def test_training_with_a_warm_start_writes_its_stats(tmp_path):
    run = train(_experiment(tmp_path), out=tmp_path, progress=False)
    stats = json.loads((run / "warm_start.json").read_text())
    assert stats["states"] > 0 and stats["greedy_regret"] >= 0 and set(stats) >= {"actor_loss", "critic_loss", "seconds"}
    assert (run / "final_model.zip").exists()
    # the warm-started policy is evaluated before any RL step, then at eval_freq
    assert list(np.load(run / "evaluations.npz")["timesteps"]) == [0, 64]


def test_a_run_without_a_warm_start_is_not_evaluated_before_it_steps(tmp_path):
    run = train(_experiment(tmp_path, warm_start=None), out=tmp_path, progress=False)
    assert list(np.load(run / "evaluations.npz")["timesteps"]) == [64]


def test_warm_start_rejects_dqn_and_the_stream_env(tmp_path):
    path = tmp_path / "dqn.yaml"
    path.write_text("name: d\nalgo: DQN\nwarm_start: {epochs: 5}\n")
    with pytest.raises(ConfigError, match="needs an actor-critic") as err:
        load_experiment(path)
    assert str(path) in str(err.value) and "key 'warm_start'" in str(err.value)
    with pytest.raises(ConfigError, match="warm_start.teacher 'oracle' needs a ContextOverflow env") as err:
        train(_experiment(tmp_path, env=str(REPO_ROOT / "envs" / "stream.yaml"), env_config={}, train_scenarios=None,
                          eval_scenarios=[]), out=tmp_path / "runs", progress=False)
    assert "key 'warm_start.teacher'" in str(err.value)
    assert not (tmp_path / "runs").exists()


    from ctxsim.lab.evaluate import settings_from_env_spec
    from ctxsim.episode import EpisodeSettings
    from ctxsim.lab.export import export_run
    from ctxsim.policies import get_policy
    from ctxsim.lab.evaluate import evaluate
    from ctxsim.lab.scenarios import DEFAULT_SUITE, find_scenario

    run = train(_experiment(tmp_path, normalize_observations=True, timesteps=128), out=tmp_path, progress=False)
    vec = run / "vecnormalize.pkl"
    assert vec.is_file()
    sb3 = get_policy(str(run))
    assert sb3.normalization is not None
    # the statistics are the training states' (mild-overflow only here), frozen: not the eval contexts'
    train_only = action_values(ContextOverflowEnv({**CONFIG, "scenario_names": ["mild-overflow"]}))
    assert np.allclose(sb3.normalization.mean, train_only.observations.mean(0), atol=1e-6)
    assert np.allclose(sb3.normalization.var, np.maximum(train_only.observations.var(0), NORMALIZATION_MIN_VAR), atol=1e-6)
    assert sb3.normalization.var.min() == pytest.approx(NORMALIZATION_MIN_VAR)  # e.g. an action never applied there
    out = export_run(run, tmp_path / "exported").out
    exported = get_policy(str(out))
    assert exported.normalization is not None and np.allclose(exported.normalization.var, sb3.normalization.var)
    scenarios = [find_scenario(name, DEFAULT_SUITE) for name in ("chat-10k", "mild-overflow")]
    rows = evaluate([str(run), str(out)], scenarios, 3, settings_from_env_spec(None)[0])  # the default env's
    chains = rows.pivot(index=["scenario", "seed"], columns="policy", values="chain")
    assert (chains[str(run)] == chains[str(out)]).all()


def test_a_logit_scale_keeps_the_ranking_and_sharpens_the_sampling(env_and_values):
    """``logit_scale`` multiplies the fitted actor's logits: the same greedy action in every
    state (the acting policy and its regret unchanged), a lower entropy to sample from."""
    import torch
    from sb3_contrib import MaskablePPO

    env, data = env_and_values
    policies = {}
    for scale in (1.0, 5.0):
        model = MaskablePPO("MlpPolicy", ContextOverflowEnv(CONFIG), seed=0, device="cpu")
        stats = fit(model.policy, data, WarmStart(epochs=100, logit_scale=scale), seed=0)
        policies[scale] = (model.policy, stats)
    obs, masks = torch.as_tensor(data.observations), data.masks
    (plain, plain_stats), (sharp, sharp_stats) = policies[1.0], policies[5.0]
    assert sharp_stats["greedy_regret"] == plain_stats["greedy_regret"]
    plain_actions, _ = plain.predict(data.observations, deterministic=True, action_masks=masks)
    sharp_actions, _ = sharp.predict(data.observations, deterministic=True, action_masks=masks)
    assert np.array_equal(plain_actions, sharp_actions)
    with torch.no_grad():
        entropy = {k: p.get_distribution(obs, action_masks=masks).entropy().mean().item()
                   for k, (p, _) in policies.items()}
    assert entropy[5.0] < 0.7 * entropy[1.0]
    with pytest.raises(ValueError):
        WarmStart(logit_scale=0)
