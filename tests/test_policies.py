"""The policy registry and the fixed baselines: random, seed-chain, only:*, greedy."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from ctxsim.lab.contexts import build_context
from ctxsim.episode import EpisodeSettings, OverflowEpisode
from ctxsim.episode_config import SEED_CHAIN
from ctxsim.errors import PolicyError
from ctxsim.model import ContextState, ContextUnit
from ctxsim.policies import Policy, fallback_action, get_policy, list_policies, run_episode
from ctxsim.policies.baselines import NOT_ACTIONS, SeedChainPolicy
from ctxsim.strategies import list_strategies
from ctxsim.strategies.peers import PEERS

#: cheap actions (no LLM-priced summaries but fresh_start) for fast episodes
CHEAP = ("dedupe_tool_results", "remove_oldest", "remove_low_priority", "truncate", "fresh_start")


@pytest.fixture(scope="module")
def contexts(scenario_suite):
    by_name = {s.name: s for s in scenario_suite}
    return [build_context(by_name[name], 0) for name in ("local-14b-floor", "mild-overflow", "pinned-instructions")]


def note(i: int, words: int = 60, **kw) -> ContextUnit:
    text = " ".join(f"word{(i * 7 + k) % 50}" for k in range(words))
    return ContextUnit(id=f"u{i}", type="message", role=kw.pop("role", "user"), content=f"Note {i}: {text}.", turn=i, **kw)


def test_registry_names():
    names = list_policies()
    assert names[:6] == ["random", "seed-chain", "greedy", "greedy-without-probes", "oracle", "oracle-without-probes"]
    assert [n for n in names if n.startswith("only:")] == [f"only:{s}" for s in list_strategies() if s not in NOT_ACTIONS]
    assert [n for n in names if n.startswith("peer:")] == [f"peer:{p}" for p in PEERS]
    a, b = get_policy("random"), get_policy("random")
    assert a is not b and a.name == "random" and isinstance(a, Policy)
    assert get_policy("only:truncate").name == "only:truncate"


def test_is_learned_is_not_being_a_registered_name():
    """``is_learned`` asks only the family a name's prefix names; its answer is still
    "not in list_policies()" for every registered name and for names that are not."""
    from ctxsim.policies import is_learned

    names = list_policies()
    assert any(n.startswith("best-fixed:") for n in names)  # the lab's family is registered here
    assert not any(map(is_learned, names))
    others = ["runs/default", "nope", "only:nope", "peer:nope", "best-fixed:nope", "peer", "peer:", ":letta",
              "ORACLE", "only:truncate:x", "peer:letta "]
    assert all(map(is_learned, others)) and not set(others) & set(names)


@pytest.mark.parametrize("bad", ["nope", "only:nope", "peer:nope", "ORACLE"])
def test_unknown_policy_lists_valid_names(bad):
    with pytest.raises(PolicyError) as err:
        get_policy(bad)
    message = str(err.value)
    assert "\n" not in message and f"'{bad}'" in message
    assert ("only:truncate" if bad.startswith("only") else "peer:letta" if bad.startswith("peer") else "seed-chain") in message


def test_random_is_seeded_and_uniform(contexts):
    settings = EpisodeSettings(actions=CHEAP, max_steps=2)
    state = contexts[0]
    policy = get_policy("random")
    chains = [run_episode(policy, state, settings, seed).chain for seed in range(30)]
    assert chains[:10] == [run_episode(policy, state, settings, seed).chain for seed in range(10)]
    episode = OverflowEpisode(state, settings)
    valid = episode.valid_actions()
    policy.reset(7)
    picks = [policy.act(episode) for _ in range(400)]
    counts = {sid: picks.count(sid) for sid in valid}
    assert set(picks) == set(valid)
    assert min(counts.values()) > 400 / len(valid) * 0.6  # uniform, not skewed
    assert len({c[0] for c in chains}) > 1


def test_seed_chain_follows_seed_order_among_valid_actions(contexts):
    settings = EpisodeSettings(max_steps=4)
    for state in contexts:
        replay = OverflowEpisode(state, settings)
        episode = run_episode(get_policy("seed-chain"), state, settings, 0)
        position = 0
        for sid in episode.chain:
            valid = replay.valid_actions()
            if sid in SeedChainPolicy.CHAIN:
                skipped = SeedChainPolicy.CHAIN[position : SeedChainPolicy.CHAIN.index(sid)]
                assert not set(skipped) & set(valid), "a valid chain strategy was skipped"
                position = SeedChainPolicy.CHAIN.index(sid) + 1
            else:
                assert sid == fallback_action(replay) and all(s not in valid for s in SeedChainPolicy.CHAIN[position:])
            replay.step(sid)
        assert replay.state.fingerprint == episode.state.fingerprint
        assert episode.chain[0] == next(s for s in SEED_CHAIN if s in OverflowEpisode(state, settings).valid_actions())


def test_seed_chain_falls_back_to_recovery_when_the_chain_is_used_up():
    # a pinned instruction bigger than the limit: nothing but recovery can help
    units = [note(0, 400, role="system", pinned=True)] + [note(i, 40, role=("user", "assistant")[i % 2]) for i in range(1, 9)]
    limit = ContextState(units=tuple(units[:1]), limit=10**6, min_limit=10).total_tokens - 20
    state = ContextState(units=tuple(units), limit=limit, min_limit=10, task="word3 word10")
    settings = EpisodeSettings(max_steps=6)
    episode = run_episode(get_policy("seed-chain"), state, settings, 0)
    assert episode.chain[-1] == "fresh_start" and not episode.forced_recovery
    assert all(s in SeedChainPolicy.CHAIN for s in episode.chain[:-1])
    assert list(episode.chain[:-1]) == sorted(episode.chain[:-1], key=SeedChainPolicy.CHAIN.index)


def test_seed_chain_needs_its_actions(contexts):
    with pytest.raises(PolicyError, match="needs the actions"):
        run_episode(get_policy("seed-chain"), contexts[0], EpisodeSettings(actions=CHEAP), 0)


@pytest.mark.parametrize("sid", [s for s in list_strategies() if s not in NOT_ACTIONS])
def test_only_repeats_one_strategy_then_falls_back(contexts, sid):
    state = contexts[1]
    settings = EpisodeSettings(actions=CHEAP, max_steps=2)
    episode = run_episode(get_policy(f"only:{sid}"), state, settings, 0)
    replay = OverflowEpisode(state, settings)
    for step_id in episode.chain:
        if settings.valid(sid, replay.state):
            assert step_id == sid
            replay.step(sid if sid in settings.actions else settings.strategy(sid))
        else:
            assert step_id == fallback_action(replay)
            replay.step(step_id)
    assert replay.done and replay.reward == episode.reward


def test_fallback_action_prefers_the_recovery_mode(contexts):
    state = contexts[0]
    assert fallback_action(OverflowEpisode(state, EpisodeSettings())) == "fresh_start"
    truncating = EpisodeSettings(actions=CHEAP, recovery_mode="truncate")
    assert fallback_action(OverflowEpisode(state, truncating)) == "truncate"
    no_recovery = EpisodeSettings(actions=("remove_oldest", "dedupe_tool_results"))
    assert fallback_action(OverflowEpisode(state, no_recovery)) == "remove_oldest"


def test_greedy_takes_the_best_ending_action_else_the_biggest_cut(contexts):
    settings = EpisodeSettings(actions=CHEAP, max_steps=3)
    for state in contexts:
        episode = OverflowEpisode(state, settings)
        choice = get_policy("greedy").act(episode)
        ends, cuts = {}, {}
        for sid in episode.valid_actions():
            child = episode.copy()
            child.step(sid)
            if child.done:
                ends[sid] = child.reward
            else:
                cuts[sid] = state.total_tokens - child.state.total_tokens
        scores = ends or cuts
        assert scores[choice] == max(scores.values())
        assert choice == next(s for s in episode.valid_actions() if scores.get(s) == max(scores.values()))


def test_greedy_without_probes_scores_its_lookahead_without_the_probe_term(scenario_suite):
    """Under grounded: the ending action with the best reward without the probe term;
    on error-heavy (seed 0) that is not greedy's choice. Under seed001 the two agree."""
    from ctxsim.reward import RewardWeights, compute_reward

    grounded = EpisodeSettings(reward=RewardWeights(profile="grounded"))
    without = grounded.reward.without_probes()
    state = build_context(next(s for s in scenario_suite if s.name == "error-heavy"), 0)
    episode = OverflowEpisode(state, grounded)
    scores = {}
    for sid in episode.valid_actions():
        child = episode.copy()
        child.step(sid)
        if child.done:
            scores[sid] = compute_reward(child.outcome, without)
    choice = get_policy("greedy-without-probes").act(episode)
    assert scores[choice] == max(scores.values())
    assert choice != get_policy("greedy").act(episode)
    seed001 = OverflowEpisode(state, EpisodeSettings())
    assert get_policy("greedy-without-probes").act(seed001) == get_policy("greedy").act(seed001)


def test_run_episode_rejects_invalid_actions_and_skips_fitting_contexts(contexts):
    class Bad(Policy):
        name = "bad"

        def act(self, episode):
            return "nope"

    class Never(Policy):
        name = "never"

        def act(self, episode):  # pragma: no cover - must not be called
            raise AssertionError("act called on a finished episode")

    with pytest.raises(PolicyError, match="'nope', not a valid action"):
        run_episode(Bad(), contexts[0], EpisodeSettings(actions=CHEAP), 0)
    small = ContextState(units=(note(1),), limit=4000, min_limit=10)
    episode = run_episode(Never(), small, EpisodeSettings(actions=CHEAP), 0)
    assert episode.done and episode.chain == () and episode.outcome.success


def test_run_episode_reports_every_step(contexts):
    steps = []
    episode = run_episode(get_policy("random"), contexts[2], EpisodeSettings(actions=CHEAP), 3, lambda e, s: steps.append(s))
    assert tuple(s.action for s in steps) == episode.chain and steps[-1].done and steps[-1].reward == episode.reward


def test_policies_import_with_numpy_alone():
    code = textwrap.dedent(
        """
        import sys
        for name in ("torch", "stable_baselines3", "sb3_contrib", "gymnasium", "pandas", "matplotlib"):
            sys.modules[name] = None  # any import of them raises ImportError
        from ctxsim.lab.contexts import build_context
        from ctxsim.episode import EpisodeSettings
        from ctxsim.policies import get_policy, run_episode
        from ctxsim.lab.scenarios import find_scenario
        state = build_context(find_scenario("mild-overflow"), 0)
        settings = EpisodeSettings(max_steps=2)
        for name in ("random", "seed-chain", "oracle"):
            episode = run_episode(get_policy(name), state, settings, 0)
            print(name, ">".join(episode.chain), round(episode.reward, 3))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == ["random", "seed-chain", "oracle"]
    assert float(lines[2].split()[2]) >= max(float(line.split()[2]) for line in lines)


@pytest.fixture(scope="module")
def trained_runs(tmp_path_factory):
    """Run directories as ctxsim.lab.train writes them (untrained models: the adapter is under test)."""
    import yaml
    from sb3_contrib import MaskablePPO
    from stable_baselines3 import DQN

    from ctxsim.lab.environments.overflow import ContextOverflowEnv

    env = ContextOverflowEnv({"actions": list(CHEAP), "max_steps": 2})
    runs = {}
    for algo, model in (("MaskablePPO", MaskablePPO("MlpPolicy", env, n_steps=16, batch_size=16, seed=0, device="cpu")),
                        ("DQN", DQN("MlpPolicy", env, buffer_size=64, learning_starts=0, seed=0, device="cpu"))):
        run = tmp_path_factory.mktemp(algo)
        model.save(run / "best_model")
        (run / "config.yaml").write_text(yaml.safe_dump({"experiment": {"algo": algo}, "env_config": env.config}))
        runs[algo] = (run, model)
    return runs


@pytest.mark.parametrize("algo", ["MaskablePPO", "DQN"])
def test_sb3_run_directories_act_greedily_under_the_mask(trained_runs, contexts, algo):
    import torch

    from ctxsim.observe import ObservationConfig, observe

    run, model = trained_runs[algo]
    settings = EpisodeSettings(actions=CHEAP, max_steps=2)
    policy = get_policy(str(run))
    assert get_policy(str(run / "best_model.zip")).algo == algo
    for state in contexts:
        episode = OverflowEpisode(state, settings)
        obs = observe(state, ObservationConfig(actions=CHEAP, max_steps=2))
        tensor, _ = model.policy.obs_to_tensor(obs)
        with torch.no_grad():
            raw = model.q_net(tensor)[0] if algo == "DQN" else model.policy.get_distribution(tensor).distribution.logits[0]
        scores = [float(v) if ok else float("-inf") for v, ok in zip(raw.tolist(), episode.action_mask())]
        assert policy.act(episode) == CHEAP[scores.index(max(scores))]
        assert run_episode(policy, state, settings, 0).chain == run_episode(policy, state, settings, 1).chain
    with pytest.raises(PolicyError, match="was trained with the actions"):
        run_episode(policy, contexts[0], EpisodeSettings(actions=CHEAP[::-1]), 0)


def test_a_folder_without_a_model_is_not_a_policy(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(PolicyError, match="not a policy directory"):
        get_policy(str(tmp_path))
    (tmp_path / "model.zip").write_bytes(b"not a zip")
    with pytest.raises(PolicyError, match="config.yaml"):
        get_policy(str(tmp_path / "model.zip"))


def damaged_copy(run, out, members: dict[str, bytes]):
    """A copy of the run directory ``run`` whose best_model.zip has ``members`` replaced."""
    import shutil
    import zipfile

    shutil.copytree(run, out)
    with zipfile.ZipFile(run / "best_model.zip") as src, zipfile.ZipFile(out / "best_model.zip", "w") as dst:
        for name in src.namelist():
            dst.writestr(name, members.get(name, src.read(name)))
    return out


@pytest.mark.parametrize("members, reason", [({"policy.pth": b"garbage bytes"}, "policy.pth"),
                                              ({"data": b"[1, 2]"}, "AttributeError")])
def test_a_damaged_model_zip_is_a_policy_error(trained_runs, tmp_path, capsys, members, reason):
    from ctxsim.lab.cli import main

    run = damaged_copy(trained_runs["MaskablePPO"][0], tmp_path / "run", members)
    with pytest.raises(PolicyError, match=f"cannot load the MaskablePPO model: .*{reason}") as err:
        get_policy(str(run))
    assert str(err.value).startswith(f"{run / 'best_model.zip'}: ") and "\n" not in str(err.value)
    out = tmp_path / "x.csv"
    assert main(["evaluate", "--policy", str(run), "--names", "gpt4-6000", "--seeds", "1", "--out", str(out)]) == 2
    assert capsys.readouterr().err == f"ctxsim: error: {err.value}\n"
    assert not out.exists()
