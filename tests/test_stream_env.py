"""ctxsim/ConversationStream-v0: the Gymnasium contract, determinism, pickling, config,
transfer with ContextOverflow-v0, and evaluate_stream."""

from __future__ import annotations

import pickle
import warnings

import gymnasium
import numpy as np
import pytest

from ctxsim.lab.environments.overflow import ContextOverflowEnv
from ctxsim.lab.environments.conversation_stream import ENV_ID, ONE_DEPTH, ConversationStreamEnv
from ctxsim.errors import ConfigError, ScenarioError
from ctxsim.model import ContextUnit
from ctxsim.observe import ObservationConfig, observe
from ctxsim.lab.stream import Conversation
from ctxsim.validation import load_yaml

#: small and fast: 30-turn conversations of two scenarios, two seeds each
SMALL = {"scenario_names": ["gpt4-6000", "tool-dupes"], "contexts_per_scenario": 2, "turns": 30,
         "probes": {"turns": [12, 20, 28], "min_age_turns": 5}}


#: the environment as it was before break depths and session features, and as it is by default
CONFIGS = pytest.mark.parametrize("variant", [ONE_DEPTH, {}], ids=["one-depth", "default"])


def registered() -> bool:
    """True once ctxsim.lab.environments registers ConversationStream-v0 (the lead's one line)."""
    from ctxsim.lab.environments import env_ids

    return ENV_ID in env_ids()


def make(**overrides) -> ConversationStreamEnv:
    return ConversationStreamEnv({**SMALL, **overrides})


def rollout(env: ConversationStreamEnv, seed: int, pick=lambda mask, i: int(np.flatnonzero(mask)[i % mask.sum()])):
    """(obs, reward, terminated, info summary) per step of one episode."""
    obs, info = env.reset(seed=seed)
    trace = [(obs, 0.0, False, info["scenario"], info["seed"], info["turn"])]
    for i in range(10_000):
        obs, reward, terminated, truncated, info = env.step(pick(env.action_masks(), i))
        assert not truncated
        trace.append((obs, reward, terminated, info["action"], info["turn"], info["stream"]["tokens_sent"]))
        if terminated:
            return trace, info
    raise AssertionError("episode did not end")


@CONFIGS
def test_gymnasium_and_sb3_env_checkers_pass_with_warnings_as_errors(variant):
    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    one = {**SMALL, "scenario_names": ["gpt4-6000"], **variant}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if registered():  # through gymnasium.make: the render modes are checked too
            check_env(gymnasium.make(ENV_ID, config=one, render_mode="ansi").unwrapped)
        else:
            check_env(ConversationStreamEnv(one), skip_render_check=True)
        sb3_check_env(ConversationStreamEnv(one))
        env = make(scenario_names=["gpt4-6000"])
        env.render_mode = "ansi"
        env.reset(seed=0)
        assert "ConversationStream-v0" in env.render() and "Probes" in env.render()


@CONFIGS
def test_same_seed_gives_the_same_episode_step_by_step(variant):
    (a, info_a), (b, info_b) = rollout(make(**variant), 3), rollout(make(**variant), 3)
    assert len(a) == len(b) > 2
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x[0], y[0])
        assert x[1:] == y[1:]
    assert info_a["stream"] == info_b["stream"] and info_a["events"] == info_b["events"]


@CONFIGS
def test_episode_plays_the_whole_conversation_and_rewards_sum_their_terms(variant):
    env = make(**variant)
    obs, info = env.reset(seed=1)
    assert env.observation_space.contains(obs) and info["stream"]["overflow_events"] == 1
    assert info["tokens"] > info["target_tokens"] == int(0.8 * info["limit"])
    total = 0.0
    while True:
        obs, reward, terminated, _, info = env.step(int(np.flatnonzero(env.action_masks())[0]))
        assert env.observation_space.contains(obs)
        assert reward == pytest.approx(sum(info["rewards"].values()))
        total += reward
        if terminated:
            break
    s = info["stream"]
    assert info["turn"] == info["turns"] - 1 == 29
    assert s["overflow_events"] == len(info["events"]) >= 2 and s["calls"] == 30
    assert s["probes_asked"] == 3 and 0 <= s["probes_answered"] <= 3
    assert info["rewards"]["probes"] == pytest.approx(5.0 * s["probe_share"])
    assert sum(e["reward"] for e in info["events"]) == pytest.approx(s["event_reward"])
    assert 0 < s["cache_hit_rate"] < 1 and s["cost_usd"] > 0 and s["tokens_sent"] > s["cached_tokens"]
    with pytest.raises(gymnasium.error.ResetNeeded):
        env.step(0)


@CONFIGS
def test_a_finished_conversation_masks_every_action_as_step_refuses_them(variant):
    """Once the conversation is over ``step`` raises ResetNeeded for every action, so the
    mask (the last step's info and ``action_masks()``) allows none, as ContextOverflow-v0's."""
    env = make(**variant, scenario_names=["gpt4-6000"])
    env.reset(seed=0)
    terminated = False
    while not terminated:
        _, _, terminated, _, info = env.step(int(np.flatnonzero(env.action_masks())[0]))
    for mask in (info["action_mask"], env.action_masks()):
        assert mask.dtype == bool and mask.shape == (env.action_space.n,) and not mask.any()
    for action in range(env.action_space.n):
        with pytest.raises(gymnasium.error.ResetNeeded, match="the conversation is over"):
            env.step(action)


@CONFIGS
def test_pickled_env_continues_identically(variant):
    env = make(**variant)
    env.reset(seed=2)
    env.step(int(np.flatnonzero(env.action_masks())[0]))
    twin = pickle.loads(pickle.dumps(env))
    for _ in range(200):
        action = int(np.flatnonzero(env.action_masks())[-1])
        a, b = env.step(action), twin.step(action)
        np.testing.assert_array_equal(a[0], b[0])
        assert a[1:3] == b[1:3] and a[4]["stream"] == b[4]["stream"]
        if a[2]:
            break
    assert env.session.done and twin.session.done


def test_one_depth_has_the_same_actions_masks_and_observation_as_context_overflow():
    stream = make(**ONE_DEPTH)
    overflow = ContextOverflowEnv({"target": "warning", "actions": list(stream.actions), "max_steps": 3})
    assert stream.actions == overflow.actions
    assert stream.observation_space == overflow.observation_space
    assert stream.feature_names == overflow.feature_names
    obs, _ = stream.reset(seed=4)
    event = stream.session.episode
    np.testing.assert_array_equal(obs, observe(event.state, ObservationConfig.of(stream.config)))
    np.testing.assert_array_equal(stream.action_masks(), event.action_mask())
    assert event.settings.target == "warning" and event.state.history == ()


def test_config_defaults_validation_and_spec_file(repo_root):
    defaults = ConversationStreamEnv.default_config()
    assert set(ContextOverflowEnv.default_config()) < set(defaults) and defaults["target"] == "warning"
    assert ConversationStreamEnv.resolve_config() == ConversationStreamEnv.resolve_config(defaults)
    for bad, key in [({"turnz": 5}, "config.turnz"), ({"probes": {"turns": [70]}}, "config.probes.turns[0]"),
                     ({"rehydration": {"cooldown": 2}}, "config.rehydration.cooldown"), ({"target": "limit"}, "config.target"),
                     ({"actions": ["summarize_old", "nope"]}, "config.actions[1]"), ({"turns": 10**8}, "config.turns")]:
        with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
            ConversationStreamEnv.resolve_config(bad, source="envs/x.yaml", key_prefix="config")
    with pytest.raises(ConfigError):
        ConversationStreamEnv({"turns": 1})
    spec = load_yaml(repo_root / "envs" / "stream.yaml", ConfigError)
    assert spec["id"] == ENV_ID
    ConversationStreamEnv.resolve_config(spec["config"])
    if registered():  # once registered, the spec loads like every other
        from ctxsim.lab.environments.spec import load_env_spec

        assert load_env_spec(repo_root / "envs" / "stream.yaml").id == ENV_ID


def test_experiment_file_names_the_stream_spec(repo_root):
    from ctxsim.lab.train import load_experiment

    experiment = load_experiment(repo_root / "experiments" / "maskable_ppo_stream.yaml")
    assert experiment.algo == "MaskablePPO" and experiment.env == "envs/stream.yaml"
    config = ConversationStreamEnv.checked_config({**experiment.env_config})
    assert set(experiment.eval_scenarios) <= {s.name for s in config.suite}
    # trained on the conversations it is evaluated on (the spec's), its model picked on training-suite scenarios
    spec = load_yaml(repo_root / "envs" / "stream.yaml", ConfigError)
    assert config.turns == ConversationStreamEnv.checked_config(spec["config"]).turns == 60
    assert len(config.break_depths) > 1 and config.session_features
    assert experiment.validation_scenarios and not set(experiment.validation_scenarios) & set(experiment.eval_scenarios)


def test_reset_options_play_a_built_conversation_or_refuse():
    turns = tuple((ContextUnit(id=f"m{t}", type="message", content=f"turn {t} " + "budget figures " * 120,
                               turn=t, timestamp=60.0 * t),) for t in range(8))
    env = make()
    obs, info = env.reset(seed=0, options={"conversation": Conversation(turns=turns, limit=1500, min_limit=500)})
    assert info["turns"] == 8 and env.session.episode is not None
    quiet = Conversation(turns=turns[:2], limit=100_000, min_limit=500)
    with pytest.raises(ScenarioError, match="never crosses the warning threshold"):
        env.reset(options={"conversation": quiet})
    with pytest.raises(ConfigError, match="options.colour"):
        env.reset(options={"colour": 1})
    obs, info = env.reset(options={"scenario": "tool-dupes", "context_seed": 1})
    assert (info["scenario"], info["seed"]) == ("tool-dupes", 1)


def test_evaluate_stream_compares_policies_deterministically():
    from ctxsim.lab.stream.evaluate_stream import COLUMNS, evaluate_stream

    config = {**SMALL, "turns": 24, "probes": {"turns": [12, 20], "min_age_turns": 5}}
    policies = ["seed-chain", "only:remove_oldest", "peer:codex"]
    df = evaluate_stream(policies, ["gpt4-6000"], [0], config)
    assert list(df.columns) == list(COLUMNS) and list(df["policy"]) == policies
    assert (df["overflow_events"] >= 1).all() and (df["probes_asked"] == 2).all()
    assert df["reward"].notna().all() and ((df["cache_hit_rate"] > 0) & (df["cache_hit_rate"] < 1)).all()
    again = evaluate_stream(policies, ["gpt4-6000"], [0], config)
    assert df.equals(again)
    # the environment pays the same total as the evaluation when it takes the same actions
    env = ConversationStreamEnv(config)
    env.reset(options={"scenario": "gpt4-6000", "context_seed": 0})
    total, done = 0.0, False
    while not done:
        _, reward, done, _, _ = env.step(env.actions.index("summarize_old") if env.action_masks()[0] else 5)
        total += reward
    only = evaluate_stream(["only:summarize_old"], ["gpt4-6000"], [0], config)
    assert total == pytest.approx(only["reward"].iloc[0])


def test_the_stream_rows_say_what_the_breaks_kept_rules_and_p1():
    """rules_retained is the share of the rules planted so far still in the final context
    (dropping the oldest units loses gpt4-6000's rule, seed-chain keeps it); p1_preserved
    the mean over the events of each break's P1 preserved (a summary of everything, as
    aider's, folds the P1 units away)."""
    from ctxsim.lab.environments.conversation_stream import build_conversation, make_session
    from ctxsim.lab.stream.evaluate_stream import evaluate_stream
    from ctxsim.lab.stream.play import play
    from ctxsim.lab.stream.players import stream_player
    from ctxsim.policies import get_policy

    config = {"turns": 30, "probes": {"turns": [12, 20], "min_age_turns": 5}}
    df = evaluate_stream(["seed-chain", "only:remove_oldest", "peer:aider"], ["gpt4-6000"], [0], config, workers=1)
    by = df.set_index("policy")
    assert by.loc["seed-chain", "rules_retained"] == 1.0 and by.loc["only:remove_oldest", "rules_retained"] == 0.0
    assert by.loc["peer:aider", "p1_preserved"] < by.loc["seed-chain", "p1_preserved"] < 1.0
    # the column is the mean of the events' own P1 preserved
    checked = ConversationStreamEnv.checked_config(config)
    scenario = next(s for s in checked.suite if s.name == "gpt4-6000")
    session = make_session(build_conversation(scenario, 0, checked), checked)
    play(stream_player(get_policy("seed-chain"), checked), session, "gpt4-6000", 0)
    p1 = [event.p1_preserved for event in session.events]
    assert len(p1) == by.loc["seed-chain", "overflow_events"] and by.loc["seed-chain", "p1_preserved"] == pytest.approx(sum(p1) / len(p1))


def test_evaluate_stream_gives_the_same_rows_on_one_process_or_several():
    """Four conversations (two scenarios × two seeds), each a work item: played here or
    on two workers, every row is the same and in the same order (policy, scenario,
    seed, run)."""
    from ctxsim.lab.stream.evaluate_stream import evaluate_stream

    config = {**SMALL, "turns": 24, "probes": {"turns": [12, 20], "min_age_turns": 5}}
    policies = ["only:remove_oldest", "seed-chain"]
    alone = evaluate_stream(policies, ["tool-dupes", "gpt4-6000"], [1, 0], config, workers=1)
    shared = evaluate_stream(policies, ["tool-dupes", "gpt4-6000"], [1, 0], config, workers=2)
    assert alone.equals(shared)
    assert list(zip(shared["policy"], shared["scenario"], shared["seed"]))[:4] == [
        ("only:remove_oldest", "tool-dupes", 1), ("only:remove_oldest", "tool-dupes", 0),
        ("only:remove_oldest", "gpt4-6000", 1), ("only:remove_oldest", "gpt4-6000", 0)]


def test_cli_stream_evaluation_takes_first_seed_by_scenario_and_compare(tmp_path, capsys):
    import pandas as pd
    import yaml

    from ctxsim.lab.cli import main
    from ctxsim.lab.stream.evaluate_stream import evaluate_stream

    config = {**SMALL, "turns": 24, "probes": {"turns": [12, 20], "min_age_turns": 5}}
    spec = tmp_path / "stream-short.yaml"
    spec.write_text(yaml.safe_dump({"id": ENV_ID, "config": config}))
    out, md = tmp_path / "r.csv", tmp_path / "r.md"
    argv = ["evaluate", "--env", str(spec), "--policy", "seed-chain", "--policy", "only:remove_oldest",
            "--names", "gpt4-6000", "tool-dupes", "--seeds", "2", "--first-seed", "3", "--out", str(out)]
    assert main(argv + ["--by-scenario", "--compare", "seed-chain", "--markdown", str(md)]) == 0
    df = pd.read_csv(out)
    assert sorted(set(df["seed"])) == [3, 4]
    direct = evaluate_stream(["seed-chain", "only:remove_oldest"], ["gpt4-6000", "tool-dupes"], [3, 4], config)
    assert list(df["reward"]) == pytest.approx(list(direct["reward"]))
    printed, text = capsys.readouterr().out, md.read_text()
    assert "mean reward by scenario" in printed and "reward(seed-chain) − reward(policy)" in text
    assert "probes answered (difference) [95% CI]" in text  # the stream's probe_share, paired as the reward
    by_scenario = direct.groupby(["scenario", "policy"])["reward"].mean()
    assert f"| tool-dupes | {by_scenario['tool-dupes', 'seed-chain']:+.4f} | {by_scenario['tool-dupes', 'only:remove_oldest']:+.4f} |\n" in text
    # --workers: the same rows from one process
    assert main(argv + ["--workers", "1"]) == 0
    assert pd.read_csv(out).equals(df)
    capsys.readouterr()
    # refused before any conversation is played: a log, an unknown --compare, no worker
    for extra, key in ((["--log", str(tmp_path / "t.jsonl")], "--log"), (["--compare", "peer:letta"], "--compare"),
                       (["--workers", "0"], "--workers")):
        out.unlink(missing_ok=True)
        assert main(argv + extra) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and key.strip("-") in err and not out.exists()
    # an evaluation of overflow events has no workers to share: refused, naming the option
    assert main(["evaluate", "--policy", "seed-chain", "--names", "gpt4-6000", "--seeds", "1", "--out", str(out),
                 "--workers", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--workers" in err and not out.exists()
