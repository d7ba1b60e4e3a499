"""The evaluation callback scores the policy as the run acts (ctxsim.lab.selection)."""

from pathlib import Path

import numpy as np
import pytest

from ctxsim.episode import EpisodeSettings
from ctxsim.errors import ConfigError
from ctxsim.lab.evaluate import evaluate
from ctxsim.lab.scenarios import find_scenario
from ctxsim.lab.train import ExperimentConfig, env_configs, train

REPO = Path(__file__).resolve().parent.parent
SELECTION = "gpt4-6000"  # its first four contexts overflow the target


def rewards_of(policy: str, config: dict, n: int) -> list[float]:
    """``policy``'s rewards on the first ``n`` contexts of the selection scenario, as
    ``ctxsim evaluate`` plays them under the env config ``config``."""
    df = evaluate([policy], [find_scenario(SELECTION)], n, EpisodeSettings.from_env_config(config))
    assert (df["steps"] > 0).all()  # every one overflows: the callback's fixed contexts are these
    return list(df["reward"])


def tiny(**changes) -> ExperimentConfig:
    fields = dict(
        name="tiny_select", algo="MaskablePPO", env_config={"contexts_per_scenario": 4, "max_steps": 2, "target": "warning"},
        train_scenarios=["chat-10k"], eval_scenarios=["tool-dupes"], validation_scenarios=[SELECTION], timesteps=64,
        n_envs=1, seed=0, hyperparams={"n_steps": 32, "batch_size": 32, "n_epochs": 1, "policy_kwargs": {"net_arch": [8]}},
        eval_freq=64, eval_episodes=4, checkpoint_freq=10**6, source=str(REPO / "experiments" / "tiny_select.yaml"),
    )
    return ExperimentConfig(**{**fields, **changes})


def test_an_acting_callback_scores_the_acting_policy_not_the_networks_top_action(tmp_path):
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.callbacks import MaskableEvalCallback
    from stable_baselines3.common.vec_env import DummyVecEnv

    from ctxsim.lab.selection import evaluation_callback
    from ctxsim.lab.train import _make_env
    from ctxsim.policies import get_policy

    env_id, train_cfg, _, selection_cfg = env_configs(tiny())
    model = MaskablePPO("MlpPolicy", DummyVecEnv([_make_env(env_id, train_cfg, 0, 0, True)]), n_steps=32, batch_size=32,
                        n_epochs=1, policy_kwargs={"net_arch": [8]}, seed=0, device="cpu")
    runs = {}
    for acting in (None, "greedy"):
        eval_env = DummyVecEnv([_make_env(env_id, selection_cfg, 10_000, 0, True, fixed=True)])
        callback = evaluation_callback(MaskableEvalCallback)(eval_env, log_path=str(tmp_path / str(acting)), eval_freq=1,
                                                             n_eval_episodes=4)
        callback.at_start, callback.acting = True, acting and get_policy(acting).act
        model.learn(0, callback=callback)  # the evaluation at the start only: the same weights both times
        runs[acting] = list(np.load(tmp_path / str(acting) / "evaluations.npz")["results"][0])
    greedy = rewards_of("greedy", selection_cfg, 4)
    assert runs["greedy"] == pytest.approx(greedy, abs=1e-6)  # Monitor rounds an episode's reward to 6 decimals
    assert runs[None] != pytest.approx(greedy, abs=1e-6)  # the untrained network's top actions do worse


def test_a_run_that_looks_ahead_selects_its_model_acting_so(tmp_path):
    run = train(tiny(lookahead=True, normalize_observations=True), out=tmp_path, progress=False)
    curve = np.load(run / "evaluations.npz")
    assert list(curve["timesteps"]) == [64]  # one evaluation: the best model is the model it scored
    _, _, _, selection_cfg = env_configs(tiny())
    assert list(curve["results"][0]) == pytest.approx(rewards_of(str(run), selection_cfg, 4), abs=1e-6)


def test_looking_ahead_needs_the_overflow_env(tmp_path):
    with pytest.raises(ConfigError, match="not an overflow env") as err:
        train(tiny(lookahead=True, env="envs/stream.yaml"), out=tmp_path, progress=False)
    assert err.value.key == "lookahead" and not any(tmp_path.iterdir())
