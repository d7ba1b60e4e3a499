"""ctxsim/ContextOverflow-v0: API checks, determinism, pickling, masks, recovery, reward.

Parametrized over every registered ctxsim env id and every spec in envs/ (Minigrid's
pattern), on a small suite so the file runs in well under a minute.
"""

from __future__ import annotations

import pickle
import warnings
from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from ctxsim.episode import EpisodeSettings
from ctxsim.episode_config import SEED001_ACTIONS, EpisodeConfig
from ctxsim.lab.environments import env_ids, register_envs
from ctxsim.lab.environments.conversation_stream import ConversationStreamEnv
from ctxsim.lab.environments.overflow import ContextOverflowEnv, OverflowConfig
from ctxsim.lab.environments.recorder import TransitionRecorder
from ctxsim.lab.environments.spec import list_env_specs, load_env_spec
from ctxsim.errors import ConfigError, ScenarioError
from ctxsim.metrics import BreakingOutcome
from ctxsim.model import ContextState, ContextUnit
from ctxsim.observe import feature_names
from ctxsim.reward import RewardWeights, compute_reward, reward_terms
from ctxsim.strategies import get_strategy, list_strategies
from ctxsim.transitions import read_transitions

SMALL = {"scenario_names": ["mild-overflow", "tool-dupes"], "contexts_per_scenario": 2}
SPECS = [load_env_spec(p) for p in list_env_specs()]
TARGETS = [pytest.param(env_id, {}, id=env_id) for env_id in env_ids()] + [
    pytest.param(spec.id, spec.config, id=f"envs/{spec.name}") for spec in SPECS
]
FULL_ACTIONS = [sid for sid in list_strategies() if sid != "error"]


def make(env_id: str, config: dict, **kwargs) -> gym.Env:
    return gym.make(env_id, config={**config, **SMALL, **kwargs.pop("extra", {})}, **kwargs)


def rollout(env: gym.Env, steps: int, action_seed: int) -> list[tuple]:
    """Random masked actions; checks the per-step invariants and returns the trace."""
    rng = np.random.default_rng(action_seed)
    obs, info = env.reset(seed=123)
    trace: list[tuple] = [("reset", obs, info["scenario"], info["seed"])]
    core = env.unwrapped
    one_event = isinstance(core, ContextOverflowEnv)  # the stream env pays per event, not once
    for _ in range(steps):
        mask = core.action_masks()
        np.testing.assert_array_equal(mask, info["action_mask"])
        assert mask.any()
        action = int(rng.choice(np.flatnonzero(mask)))
        obs, reward, terminated, truncated, info = env.step(action)
        assert env.observation_space.contains(obs) and obs.dtype == np.float32
        assert sum(info["rewards"].values()) == pytest.approx(reward, abs=1e-9)
        if one_event:
            assert not truncated and len(info["chain"]) <= core.config["max_steps"]
            assert -2 <= reward <= 2 and (terminated or reward == 0)
        trace.append((action, obs, reward, terminated, truncated, info.get("outcome"), info["chain"]))
        if terminated or truncated:
            obs, info = env.reset()
            trace.append(("reset", obs, info["scenario"], info["seed"]))
    return trace


def assert_same_trace(a: list[tuple], b: list[tuple]) -> None:
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert len(x) == len(y), i
        for u, v in zip(x, y):
            if isinstance(u, np.ndarray):
                np.testing.assert_array_equal(u, v, err_msg=f"step {i}")
            else:
                assert u == v, f"step {i}: {u!r} != {v!r}"


def units(n: int, *, text: str = "Notes on the parser refactor and its tests. ", repeat: int = 8, **kw) -> list[ContextUnit]:
    return [ContextUnit(id=f"u{i}", type="message", content=f"{i}: " + text * repeat, turn=i, **kw) for i in range(n)]


def hand_state(unit_list, limit: int = 300) -> ContextState:
    return ContextState(units=tuple(unit_list), limit=limit, min_limit=50, task="refactor the parser", scenario="hand")


# ---- API conformance --------------------------------------------------------------


@pytest.mark.parametrize("env_id,config", TARGETS)
def test_check_env_without_warnings(env_id, config):
    env = make(env_id, config, render_mode="ansi")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gym_check_env(env.unwrapped)
        sb3_check_env(env.unwrapped)
    env.close()


@pytest.mark.parametrize("env_id", env_ids())
def test_actions_options_and_steps_past_the_end_are_checked_alike(env_id):
    env = make(env_id, {}, extra={"turns": 12, "probes": {"turns": [8], "min_age_turns": 3}} if "Stream" in env_id else {})
    env.reset(seed=0)
    for action in (1.7, [0, 1], True, -1, env.action_space.n):
        with pytest.raises(gym.error.InvalidAction):
            env.step(action)
    for options, key in (("x", "options"), ({"scenario": ["a"]}, "options.scenario"), ({"nope": 1}, "options.nope")):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            env.reset(options=options)
    env.reset(seed=0)
    done = False
    while not done:
        mask = env.unwrapped.action_masks()
        _, _, done, _, _ = env.step(np.int64(np.flatnonzero(mask)[-1]))  # a numpy scalar, as vectorized envs pass
    with pytest.raises(gym.error.ResetNeeded):
        env.step(0)


@pytest.mark.filterwarnings("ignore:.*render_mode=.rgb_array.")
def test_sb3_make_vec_env_falls_back_from_rgb_array():
    """SB3's make_vec_env asks for render_mode 'rgb_array' and retries without it on a TypeError."""
    from stable_baselines3.common.env_util import make_vec_env

    from ctxsim.lab.environments.base import RenderModeError

    with pytest.raises(RenderModeError, match="render_mode") as err:
        make(env_ids()[0], {}, render_mode="rgb_array")
    assert isinstance(err.value, TypeError) and isinstance(err.value, ConfigError)
    vec = make_vec_env(env_ids()[0], n_envs=2, seed=0, env_kwargs={"config": dict(SMALL)})
    assert vec.reset().shape[0] == 2
    vec.close()


@pytest.mark.parametrize("env_id,config", TARGETS)
def test_same_seed_same_rollout_and_identical_logs(env_id, config, tmp_path):
    traces, logs = [], []
    for run, cache_size in enumerate((0, 5000)):  # uncached and cached computations agree
        path = tmp_path / f"run{run}.jsonl"
        env = TransitionRecorder(make(env_id, config, extra={"cache_size": cache_size}), path, run_id="det")
        traces.append(rollout(env, steps=10, action_seed=7))
        env.close()
        logs.append(path.read_bytes())
    assert_same_trace(*traces)
    assert logs[0] == logs[1]
    records = read_transitions(tmp_path / "run0.jsonl")
    assert len(records) == 10 and records[0]["episode"] == 0 and records[0]["step"] == 0
    assert all(r["outcome"] is not None for r in records if r["terminated"])


@pytest.mark.parametrize("env_id,config", TARGETS)
def test_env_pickles_and_continues_identically(env_id, config):
    env = make(env_id, config).unwrapped
    env.reset(seed=3)
    clone = pickle.loads(pickle.dumps(env))
    action = int(np.flatnonzero(env.action_masks())[0])
    a, b = env.step(action), clone.step(action)
    np.testing.assert_array_equal(a[0], b[0])
    assert a[1:4] == b[1:4] and a[4].get("outcome") == b[4].get("outcome")
    np.testing.assert_array_equal(env.reset(seed=9)[0], clone.reset(seed=9)[0])


def test_register_envs_is_idempotent_and_leaves_max_episode_steps_unset():
    register_envs()
    register_envs()
    assert "ctxsim/ContextOverflow-v0" in env_ids()
    for env_id in env_ids():
        assert gym.spec(env_id).max_episode_steps is None


# ---- configuration -------------------------------------------------------------------


def test_default_config_holds_every_parameter():
    assert set(ContextOverflowEnv.default_config()) == set(OverflowConfig.model_fields)
    resolved = ContextOverflowEnv.resolve_config({"max_steps": 2})
    assert resolved["max_steps"] == 2 and resolved["reward"]["recovery"] == -0.7


@pytest.mark.parametrize("env_cls", [ContextOverflowEnv, ConversationStreamEnv])
def test_the_config_model_is_the_one_source_of_every_default(env_cls):
    """``default_config()`` is the model's defaults as data: they validate to themselves,
    and a field whose default changes in the model changes the env's default with it."""
    model = env_cls.config_model
    assert issubclass(model, EpisodeConfig)
    defaults = env_cls.default_config()
    assert defaults == model().model_dump(mode="json") == env_cls.resolve_config()
    assert defaults["max_steps"] == model.model_fields["max_steps"].default
    assert defaults["actions"] == list(model.model_fields["actions"].default)
    changed = type("Changed", (model,), {"__annotations__": {"max_steps": int}, "max_steps": 9})
    assert type("Env", (env_cls,), {"config_model": changed}).default_config()["max_steps"] == 9


def test_the_stream_config_extends_the_overflow_config_without_repeating_a_key():
    own = set(ConversationStreamEnv.config_model.__annotations__)
    # narrowed: warning only, no pool; design 001's actions and steps (the overflow env's are every strategy, 2)
    assert own & set(OverflowConfig.model_fields) == {"target", "pool", "actions", "max_steps"}
    # a larger cache; every strategy, two steps
    assert set(OverflowConfig.__annotations__) & set(EpisodeConfig.model_fields) == {"cache_size", "actions", "max_steps"}


def test_the_default_env_has_every_strategy_and_seed001_is_a_named_spec():
    defaults = ContextOverflowEnv.default_config()
    assert defaults["actions"] == FULL_ACTIONS and defaults["max_steps"] == 2
    assert load_env_spec("default").config == {}
    seed001 = ContextOverflowEnv.resolve_config(load_env_spec("seed001").config)
    assert tuple(seed001["actions"]) == SEED001_ACTIONS and seed001["max_steps"] == 3
    assert tuple(ConversationStreamEnv.default_config()["actions"]) == SEED001_ACTIONS


def test_episode_settings_are_the_validated_config_in_runtime_form():
    env = ContextOverflowEnv({"actions": ["remove_oldest", "truncate", "fresh_start"], "max_steps": 2,
                              "strategy_params": {"remove_oldest": {"target_percent": 60.0}},
                              "budget": {"excluded": ["truncate"]}, "scenario_names": ["mild-overflow"]})
    settings = env.episode_settings
    assert settings == EpisodeSettings.of(env.config_model.model_validate(env.config))
    assert settings.actions == ("remove_oldest", "truncate", "fresh_start") and settings.max_steps == 2
    assert settings.strategy_params == (("remove_oldest", (("target_percent", 60.0),)),)
    assert settings.budget.excluded == ("truncate",) and settings.cache_size == env.config["cache_size"]
    assert EpisodeSettings() == EpisodeSettings.of(EpisodeConfig())  # the same defaults


@pytest.mark.parametrize("data,key", [({"actions": ["summarize_old", "error"]}, "actions[1]"),
                                      ({"max_steps": 0}, "max_steps"), ({"coherence": "cosine"}, "coherence"),
                                      ({"budget": {"required": ["truncate"]}}, "budget.required[0]")])
def test_settings_from_plain_data_fail_like_the_env_config(data, key):
    with pytest.raises(ConfigError) as err:
        EpisodeSettings.from_mapping(data)
    assert err.value.key == key


@pytest.mark.parametrize(
    "override,key",
    [
        ({"max_stepz": 3}, "config.max_stepz"),
        ({"actions": ["summarize_old", "no_such_strategy"]}, "config.actions[1]"),
        ({"actions": ["summarize_old", "error"]}, "config.actions[1]"),
        ({"target": "half"}, "config.target"),
        ({"reward": {"coherence": "high"}}, "config.reward.coherence"),
        ({"latency": {"unknown_ms": 1}}, "config.latency.unknown_ms"),
        ({"strategy_params": {"summarize_old": {"old_threshold": 7}}}, "config.strategy_params.summarize_old"),
        ({"budget": {"excluded": ["nope"]}}, "config.budget.excluded[0]"),
        ({"scenario_names": ["no-such-scenario"]}, "config.scenario_names[0]"),
        ({"embedder": "word2vec"}, "config.embedder"),
        ({"contexts_per_scenario": 10**12}, "config.contexts_per_scenario"),
        ({"scenario_contexts": {"no-such-scenario": 4}}, "config.scenario_contexts.no-such-scenario"),
        ({"scenario_contexts": {"code-heavy": 0}}, "config.scenario_contexts.code-heavy"),
    ],
)
def test_bad_config_raises_config_error_naming_the_key(override, key):
    with pytest.raises(ConfigError) as err:
        gym.make("ctxsim/ContextOverflow-v0", config=override)
    assert err.value.key == key


def test_scenario_contexts_set_how_many_contexts_a_scenario_gives():
    config = {"scenarios": ["data/scenarios", "data/families/transcripts.yaml"], "contexts_per_scenario": 4,
              "scenario_contexts": {"code-heavy": 2, "transcript-ctf-katy-cut-family": 3}}
    env = gym.make("ctxsim/ContextOverflow-v0", config=config).unwrapped
    counts = {s.name: s.context_count(4) for s in env._suite}
    assert counts["code-heavy"] == 2 and counts["transcript-ctf-katy-cut-family"] == 3
    assert counts["fact-dense"] == 4 and counts["transcript-humanevalfix-cut-family"] == 32  # the others keep theirs
    drawn = set()
    for k in range(30):
        env.reset(seed=k, options={"scenario": "code-heavy"})
        drawn.add(env.context_seed)
    assert drawn == {0, 1}


def test_bad_spec_file_names_file_and_key(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("id: ctxsim/ContextOverflow-v0\nconfig:\n  max_steps: 0\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_env_spec(path)
    assert err.value.source == str(path) and err.value.key == "config.max_steps"
    path.write_text("id: ctxsim/Nope-v0\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not a ctxsim environment"):
        load_env_spec(path)


def test_shipped_specs():
    by_name = {spec.name: spec for spec in SPECS}
    assert {"default", "full-actions", "warning-target"} <= set(by_name)
    assert by_name["full-actions"].config["actions"] == FULL_ACTIONS
    assert load_env_spec("warning-target").config == {"target": "warning"}


# ---- episodes --------------------------------------------------------------------------


def test_reset_options_choose_the_context():
    env = make("ctxsim/ContextOverflow-v0", {})
    _, info = env.reset(seed=0, options={"scenario": "tool-dupes", "context_seed": 1})
    assert (info["scenario"], info["seed"]) == ("tool-dupes", 1)
    assert info["tokens"] > info["target_tokens"] and info["chain"] == []
    for seed in range(6):
        _, info = env.reset(seed=seed)
        assert info["scenario"] in SMALL["scenario_names"] and info["seed"] in (0, 1)
    with pytest.raises(ScenarioError):
        env.reset(options={"scenario": "chat-10k"})  # not in scenario_names
    with pytest.raises(ScenarioError, match="nothing to break"):
        env.reset(options={"state": hand_state(units(1, repeat=1), limit=300)})


def test_warning_target():
    env = make("ctxsim/ContextOverflow-v0", {"target": "warning"})
    _, info = env.reset(seed=1)
    assert info["target_tokens"] == env.unwrapped.state.warning_tokens < info["limit"]


def test_forced_recovery_after_max_steps_is_a_failure_that_used_recovery():
    # 25k tokens against a 5k limit: the zero-cost prunings cannot make it fit
    config = {"actions": ["dedupe_tool_results", "purge_errors", "supersede_writes"], "max_steps": 3,
              "scenario_names": ["severe-overflow"]}
    env = gym.make("ctxsim/ContextOverflow-v0", config={**config, "contexts_per_scenario": 1})
    env.reset(seed=0)
    steps = 0
    while True:
        obs, reward, terminated, truncated, info = env.step(int(np.flatnonzero(env.unwrapped.action_masks())[0]))
        steps += 1
        if terminated:
            break
    assert steps == 3 and info["forced_recovery"] == "fresh_start"
    outcome = info["outcome"]
    assert outcome["success"] is False and outcome["used_recovery"] is True
    latency = info["rewards"]["latency"]
    assert latency == pytest.approx(-(outcome["time_ms"] / 1000) * 0.1 if outcome["time_ms"] > 500 else 0.0)
    assert reward == pytest.approx(max(-2.0, -1.7 + latency))
    assert any(e["code"] == "RECOVERY_TRIGGERED" for e in info["events"])


def test_a_recovery_from_an_earlier_break_is_not_this_breaks():
    env = make("ctxsim/ContextOverflow-v0", {})
    env.reset(seed=0, options={"scenario": "tool-dupes", "context_seed": 0})
    fresh = env.unwrapped.state
    rewards = {}
    for history in ((), ("fresh_start", "summarize_old")):
        env.reset(options={"state": replace(fresh, history=history)})
        *_, info = env.step(env.unwrapped.config["actions"].index("prioritize_recent"))
        assert info["outcome"]["success"] is True and info["outcome"]["used_recovery"] is False
        rewards[history] = info["rewards"]["recovery"]
    assert set(rewards.values()) == {0.0}


@pytest.mark.parametrize("mode,used_recovery", [("fresh_start", True), ("truncate", True), ("error", False)])
def test_irreducible_context_recovery_modes(mode, used_recovery):
    pinned = ContextUnit(id="rules", type="plan_ref", content="Never touch prod. " * 80, pinned=True, priority=1)
    state = hand_state([pinned, *units(4, repeat=2)], limit=200)
    env = gym.make("ctxsim/ContextOverflow-v0", config={"actions": ["remove_oldest", "summarize_old"], "max_steps": 3,
                                                        "recovery_mode": mode})
    env.reset(options={"state": state})
    for _ in range(3):
        mask = env.unwrapped.action_masks()
        assert mask.any()  # never all False, even with nothing applicable
        obs, reward, terminated, _, info = env.step(int(np.flatnonzero(mask)[0]))
    assert terminated and info["forced_recovery"] == mode
    assert info["outcome"]["success"] is False and info["outcome"]["used_recovery"] is used_recovery
    assert reward == pytest.approx(-1.7 if used_recovery else -1.0)
    assert "rules" in env.unwrapped.state  # pinned units survive every mode
    if mode == "error":
        assert any(e["code"] == "BREAKER_FAILED" for e in info["events"])


def test_success_pays_the_seed_reward_once_at_the_end():
    env = make("ctxsim/ContextOverflow-v0", {"actions": ["discard_low_rel", "hybrid", "fresh_start"]})
    env.reset(seed=0, options={"scenario": "mild-overflow", "context_seed": 0})
    rewards = []
    while True:
        _, reward, terminated, _, info = env.step(1)  # hybrid, until it fits or recovery
        rewards.append(reward)
        if terminated:
            break
    assert all(r == 0 for r in rewards[:-1])
    weights = RewardWeights()
    outcome = BreakingOutcome(**info["outcome"])
    assert rewards[-1] == pytest.approx(compute_reward(outcome, weights))
    terms = reward_terms(outcome, weights)
    assert {k: v for k, v in info["rewards"].items() if k != "clamp"} == pytest.approx(terms)


# ---- masks ------------------------------------------------------------------------------


def full_env(**config) -> gym.Env:
    return gym.make("ctxsim/ContextOverflow-v0", config={"actions": FULL_ACTIONS, **config})


def mask_of(env: gym.Env, state: ContextState) -> dict[str, bool]:
    _, info = env.reset(options={"state": state})
    np.testing.assert_array_equal(env.unwrapped.action_masks(), info["action_mask"])
    return dict(zip(env.unwrapped.actions, info["action_mask"].tolist()))


def test_masks_on_hand_built_contexts():
    env = full_env()
    mask = mask_of(env, hand_state(units(8)))  # no tool results at all
    for sid in ("dedupe_tool_results", "supersede_writes", "purge_errors", "clear_tool_results"):
        assert mask[sid] is False, sid
    assert mask["fresh_start"] and mask["truncate"] and mask["remove_oldest"]
    one = mask_of(env, hand_state(units(1, repeat=60)))  # a single unit: nothing is "old"
    assert one["summarize_old"] is False and one["fresh_start"]


@pytest.mark.parametrize("pool", [False, True], ids=["live", "pooled"])
def test_a_finished_episode_masks_every_action_and_checks_none(pool, tmp_path, monkeypatch):
    """Once the episode is over no action can run: its mask is all False (the info's and
    ``action_masks()``), and its final state was never asked which actions apply (a pool
    holds no validity entry for it either)."""
    monkeypatch.setenv("CTXSIM_POOL_DIR", str(tmp_path))
    env = full_env(scenario_names=["mild-overflow"], contexts_per_scenario=1, pool=pool)
    core = env.unwrapped
    _, info = env.reset(seed=0)
    assert info["action_mask"].any()
    _, _, terminated, _, info = env.step(core.actions.index("truncate"))  # a recovery: always the last step
    assert terminated
    for mask in (info["action_mask"], core.action_masks()):
        assert mask.dtype == bool and mask.shape == (len(core.actions),) and not mask.any()
    final = core.state.fingerprint
    asked = [key for key in core._settings.memo_entries() if key[0] == "valid" and key[1] == final]
    assert asked == []
    if pool:
        assert not [key for key in core._pool.memo if key[0] == "valid" and key[1] == final]
        assert not core._pool.views[final][1].any()
    with pytest.raises(gym.error.ResetNeeded):
        env.step(core.actions.index("truncate"))


def test_budget_exclusions_are_always_masked():
    env = full_env(budget={"excluded": ["remove_oldest", "fresh_start"]})
    for state in (hand_state(units(8)), hand_state(units(1, repeat=60))):
        mask = mask_of(env, state)
        assert mask["remove_oldest"] is False and mask["fresh_start"] is False
        assert mask["truncate"]  # recovery stays possible


@pytest.mark.parametrize("scenario", ["mild-overflow", "tool-dupes"])
def test_masked_actions_cannot_change_a_built_context(scenario):
    env = full_env(scenario_names=[scenario], contexts_per_scenario=1)
    _, info = env.reset(seed=0)
    core = env.unwrapped
    state = core.state
    for sid, valid in zip(core.actions, info["action_mask"]):
        strategy = get_strategy(sid)
        if not valid and not strategy.recovery:
            result = core._settings.apply(sid, state)
            assert result.state.units == state.units, sid
    if scenario == "tool-dupes":  # it plants repeated identical reads
        assert info["action_mask"][core.actions.index("dedupe_tool_results")]


def test_the_last_step_mask_leaves_only_actions_that_fit():
    """``mask_overflowing_last_step``: the first step's mask is unchanged; on the last
    step the valid actions whose result stays over the target are masked, so no
    allowed action forces the recovery."""
    config = {"scenario_names": ["tool-dupes"], "contexts_per_scenario": 1, "max_steps": 2}
    plain, fitted = full_env(**config), full_env(**config, mask_overflowing_last_step=True)
    _, info = plain.reset(seed=0)
    _, fitted_info = fitted.reset(seed=0)
    np.testing.assert_array_equal(info["action_mask"], fitted_info["action_mask"])
    settings, state = fitted.unwrapped._settings, fitted.unwrapped.state
    first = next(sid for sid, ok in zip(FULL_ACTIONS, info["action_mask"]) if ok and not settings.fits(sid, state))
    plain.step(FULL_ACTIONS.index(first))
    _, _, done, _, info = fitted.step(FULL_ACTIONS.index(first))
    assert not done
    after = fitted.unwrapped.state
    fits = np.array([settings.fits(sid, after) for sid in FULL_ACTIONS])
    valid = plain.unwrapped.action_masks()
    assert (valid & ~fits).any() and (valid & fits).any()  # the mask has something to take away
    np.testing.assert_array_equal(info["action_mask"], valid & fits)
    for action in np.flatnonzero(info["action_mask"]):
        stepped = full_env(**config, mask_overflowing_last_step=True)
        stepped.reset(seed=0)
        stepped.step(FULL_ACTIONS.index(first))
        _, _, done, _, last = stepped.step(int(action))
        assert done and last["forced_recovery"] is None, FULL_ACTIONS[action]


# ---- reward formula (seed 001) ---------------------------------------------------------------


def outcome_of(**kw) -> BreakingOutcome:
    base = dict(
        success=True, used_recovery=False, coherence=0.9, coherence_delta=-0.1, tokens_reduced=500,
        original_tokens=1000, final_tokens=500, target_tokens=600, p1_preserved=1.0, facts_retained=1.0,
        rules_retained=1.0, time_ms=600.0,
    )
    return BreakingOutcome(**{**base, **kw})


def test_reward_matches_seed_formula_on_hand_built_outcomes():
    assert compute_reward(outcome_of()) == pytest.approx(1 + 0.5 * -0.1 + 0.3 * 0.5 + 0.2 - 0.06)
    assert compute_reward(outcome_of(time_ms=400)) == pytest.approx(1 - 0.05 + 0.15 + 0.2)
    assert compute_reward(outcome_of(success=False, used_recovery=True, time_ms=100)) == pytest.approx(-1.7)
    assert compute_reward(outcome_of(success=False, used_recovery=True, time_ms=10_000)) == -2.0
    assert compute_reward(outcome_of(), RewardWeights(success=5)) == 2.0
    assert sum(reward_terms(outcome_of()).values()) == pytest.approx(compute_reward(outcome_of()))


# ---- documentation and rendering -----------------------------------------------------------


def test_docstring_documents_every_feature():
    doc = ContextOverflowEnv.__doc__
    env = make("ctxsim/ContextOverflow-v0", {}).unwrapped
    fixed = env.observation_space.shape[0] - len(env.actions)
    assert f"``{fixed} + K`` features" in doc
    for name in feature_names(env.obs_config):
        if name.startswith("type_"):
            assert "type_<t>" in doc and name.removeprefix("type_") in doc
        elif name.startswith("applied_"):
            assert "applied_<id>" in doc
        elif name.startswith("priority_p"):
            assert "priority_p1..p3" in doc
        else:
            assert f"| {name} " in doc, name


@pytest.mark.parametrize("env_id", env_ids())
def test_docstring_documents_every_info_key(env_id):
    """Each key of the reset info and of the step infos (intermediate, an event's end,
    the episode's end) is named in the class docstring's Info section."""
    env = make(env_id, {}, extra={"turns": 12, "probes": {"turns": [8], "min_age_turns": 3}} if "Stream" in env_id else {})
    core = env.unwrapped
    doc = type(core).__doc__
    assert "### Info" in doc
    section = doc.split("### Info", 1)[1].split("###", 1)[0]
    _, info = env.reset(seed=0)
    keys = set(info)
    for seed in range(3):
        env.reset(seed=seed)
        terminated = False
        while not terminated:
            _, _, terminated, _, info = env.step(int(np.flatnonzero(core.action_masks())[0]))
            keys |= set(info)
    assert {"outcome", "valid_action", "rewards"} <= keys
    assert [key for key in sorted(keys) if f"``{key}``" not in section] == []


def test_ansi_render_shows_the_sidebar():
    env = make("ctxsim/ContextOverflow-v0", {}, render_mode="ansi")
    env.reset(seed=0)
    env.step(int(np.flatnonzero(env.unwrapped.action_masks())[0]))
    text = env.render()
    assert "Tokens:" in text and "/ " in text and "█" in text
    assert ("P1: To Do List" in text) == any(u.priority == 1 for u in env.unwrapped.state.units)


def test_valid_action_reports_what_ran_when_the_mask_falls_back():
    """Every action excluded or inapplicable: the mask still allows one (never all
    False), but stepping it runs nothing, and info says so."""
    env = ContextOverflowEnv({**SMALL, "actions": ["supersede_writes", "fresh_start"], "budget": {"excluded": ["fresh_start"]}})
    env.reset(seed=0, options={"scenario": "mild-overflow"})
    mask = env.action_masks()
    assert mask.tolist() == [False, True]
    tokens = env.unwrapped.state.total_tokens
    _, reward, terminated, _, info = env.step(1)
    assert info["valid_action"] is False and reward == 0.0 and not terminated
    assert env.unwrapped.state.total_tokens == tokens  # nothing ran
