"""Export of trained runs: chain config, learned rules, the numpy policy, its agreement
with SB3, decision logs, ``evaluate --from-log`` and the ContextWindow integration."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml
from api_forms import native_chat

from ctxsim.lab.cli import main
from ctxsim.config import load_config
from ctxsim.lab.contexts import build_context
from ctxsim.episode import OverflowEpisode
from ctxsim.errors import LogFormatError, PolicyError
from ctxsim.lab.export import Rollout, export_run, learned_rules, situation, summarize_log
from ctxsim.observe import OBSERVATION_VERSION, feature_names, observe
from ctxsim.policies import ExportedPolicy, get_policy, load, run_episode
from ctxsim.lab.scenarios import find_scenario
from ctxsim.transitions import read_transitions

#: cheap, mostly partial cuts: episodes last several steps, so states vary
ACTIONS = ["purge_errors", "dedupe_tool_results", "supersede_writes", "clear_tool_results", "externalize",
           "discard_low_rel", "fresh_start"]
#: held-out scenarios, in suite order (the order the export rolls out in, which breaks ties)
EVAL = ["error-heavy", "superseded-writes", "tool-dupes"]
ALGOS = ("MaskablePPO", "PPO", "A2C", "DQN")
HYPERPARAMS = {
    "MaskablePPO": {"n_steps": 32, "batch_size": 32, "n_epochs": 2},
    "PPO": {"n_steps": 32, "batch_size": 32, "n_epochs": 2},
    "A2C": {"n_steps": 8},
    "DQN": {"learning_starts": 16, "buffer_size": 256, "batch_size": 16, "train_freq": 4},
}
SEEDS = 3


def experiment(algo: str, **changes):
    from ctxsim.lab.train import ExperimentConfig

    fields = dict(
        name=f"export_{algo.lower()}", algo=algo, env_config={"actions": ACTIONS, "max_steps": 8, "target": "warning"},
        train_scenarios=["mild-overflow", "chat-10k"], eval_scenarios=EVAL, timesteps=64, n_envs=1, seed=0,
        hyperparams={**HYPERPARAMS[algo], "policy_kwargs": {"net_arch": [32, 32]}}, eval_freq=10**6, checkpoint_freq=10**6,
    )
    return ExperimentConfig(**{**fields, **changes})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Tiny training runs (64 steps) of every algorithm, as ``ctxsim train`` writes them."""
    from ctxsim.lab.train import train

    out = tmp_path_factory.mktemp("runs")
    return {algo: train(experiment(algo), out=out, progress=False) for algo in ALGOS}


@pytest.fixture(scope="module")
def exports(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("exports")
    return {algo: export_run(run, out / algo, seeds=SEEDS) for algo, run in runs.items()}


@pytest.fixture(scope="module")
def held_out():
    """The held-out contexts the export rolls out on (seeds 0..SEEDS-1)."""
    return [(name, seed, build_context(find_scenario(name), seed)) for name in EVAL for seed in range(SEEDS)]


def sb3_model(run: Path, algo: str):
    return get_policy(str(run)).model


# ---- the files ----------------------------------------------------------------------------------
def test_export_writes_a_chain_config_of_the_policys_most_frequent_chain(runs, exports, held_out):
    result = exports["MaskablePPO"]
    out = result.out
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == [
        "chain_config.yaml", "learned_rules.yaml", "policy.json", "weights.npz"]
    policy = load(out)
    settings = policy.settings
    chains = [run_episode(policy, state, settings, 0).chain for _, _, state in held_out]
    counts = Counter(chains).most_common()
    assert result.chain == counts[0][0] and result.episodes == len(held_out) and result.chains == tuple(counts)

    config = load_config(out / "chain_config.yaml")
    assert config.breaking_strategy.chain_order == result.chain
    assert config.recovery_mode == settings.recovery_mode == "fresh_start"
    assert config.reward == settings.reward and config.reward.profile == "seed001"  # the reward it was chosen under
    for sid in result.chain:
        assert config.strategy_params(sid) == settings.strategy(sid).params.model_dump(mode="json")

    rules = yaml.safe_load((out / "learned_rules.yaml").read_text())["learned_rules"]
    assert rules["default"] == {"chain": list(result.chain), "share": round(counts[0][1] / len(held_out), 3),
                                "support": len(held_out)}
    assert [(tuple(c["chain"]), c["count"]) for c in rules["chains"]] == counts
    situations = [situation(state, settings.target_tokens(state)) for _, _, state in held_out]
    for rule in rules["rules"]:  # every reported share and support is what the policy did
        group = [c for c, s in zip(chains, situations) if _matches(rule["when"], dict(s))]
        assert rule["support"] == len(group) and rule["share"] == round(group.count(tuple(rule["chain"])) / len(group), 3)


def _matches(when: dict, features: dict) -> bool:
    band = features["overflow_ratio"]
    wanted = when.get("overflow_ratio")
    return (wanted is None or (wanted["above"], wanted.get("at_most")) == band) and when.get(
        "dominant_type", features["dominant_type"]) == features["dominant_type"]


def test_policy_json_describes_the_network_and_the_observation(runs, exports):
    for algo, result in exports.items():
        spec = json.loads((result.out / "policy" / "policy.json").read_text())
        assert spec["format_version"] == 1 and spec["algorithm"] == algo and spec["actions"] == ACTIONS
        obs = spec["observation"]
        assert obs["version"] == OBSERVATION_VERSION and obs["features"] == feature_names(load(result.out).observation_config)
        assert obs["config"] == {"actions": ACTIONS, "max_steps": 8, "target": "warning", "embedder": "hashed-tfidf"}
        assert spec["settings"]["max_steps"] == 8 and spec["settings"]["recovery_mode"] == "fresh_start"
        assert set(spec["settings"]) == {"actions", "max_steps", "mask_overflowing_last_step", "target", "recovery_mode",
                                         "reward", "latency", "embedder", "coherence", "strategy_params", "budget"}
        assert spec["normalization"] is None
        net = spec["network"]
        assert net["kind"] == ("q_values" if algo == "DQN" else "logits") and net["hidden"] == [32, 32]
        assert net["activation"] == ("relu" if algo == "DQN" else "tanh")
        assert [(l["inputs"], l["outputs"]) for l in net["layers"]] == [(len(obs["features"]), 32), (32, 32), (32, len(ACTIONS))]
        with np.load(result.out / "policy" / "weights.npz") as npz:
            assert sorted(npz.files) == sorted(f"layers.{i}.{p}" for i in range(3) for p in ("weight", "bias"))


def test_export_is_reproducible_and_atomic(runs, exports, tmp_path, monkeypatch):
    import ctxsim.lab.export

    first = exports["DQN"].out
    again = tmp_path / "again"
    export_run(runs["DQN"], again, seeds=SEEDS)
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert all((first / f).read_bytes() == (again / f).read_bytes() for f in files)

    def crash(*args, **kwargs):
        raise RuntimeError("crash in the middle of an export")

    before = {f: (again / f).read_bytes() for f in files}
    monkeypatch.setattr(ctxsim.lab.export, "selection_rollouts", crash)
    with pytest.raises(RuntimeError, match="crash"):
        export_run(runs["PPO"], again, seeds=SEEDS)
    assert {f: (again / f).read_bytes() for f in files} == before  # the earlier export is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again"]  # and no temporary folder is left


def test_a_model_zip_of_the_run_exports_too(runs, exports, tmp_path):
    out = export_run(runs["A2C"] / "final_model.zip", tmp_path / "zip", seeds=SEEDS).out
    assert json.loads((out / "policy" / "policy.json").read_text())["source"]["model"] == "final_model.zip"
    # no evaluation ran in 64 steps, so the best model is the final one
    assert (out / "policy" / "weights.npz").read_bytes() == (exports["A2C"].out / "policy" / "weights.npz").read_bytes()


def test_export_refuses_bad_sources_and_outputs(runs, tmp_path):
    with pytest.raises(PolicyError, match="not a training run directory"):
        export_run(tmp_path / "nope", tmp_path / "out")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    with pytest.raises(PolicyError, match="not an export directory"):
        export_run(runs["PPO"], tmp_path / "notes")
    assert (tmp_path / "notes" / "keep.txt").read_text() == "mine"
    with pytest.raises(PolicyError, match="seeds"):
        export_run(runs["PPO"], tmp_path / "out", seeds=0)


def test_export_of_a_damaged_model_zip_is_one_error_line(runs, tmp_path, capsys):
    import zipfile

    model = tmp_path / "best_model.zip"
    with zipfile.ZipFile(runs["PPO"] / "best_model.zip") as src, zipfile.ZipFile(model, "w") as dst:
        for name in src.namelist():
            dst.writestr(name, b"garbage bytes" if name == "policy.pth" else src.read(name))
    shutil.copy(runs["PPO"] / "config.yaml", tmp_path / "config.yaml")
    for source in (tmp_path, model):
        with pytest.raises(PolicyError, match="cannot load the PPO model: .*policy.pth"):
            export_run(source, tmp_path / "out")
        assert main(["export", str(source), "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"ctxsim: error: {model}: cannot load the PPO model") and err.count("\n") == 1
        assert not (tmp_path / "out").exists()


def test_loading_rejects_a_stale_or_damaged_export(exports, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(exports["PPO"].out, copy)
    spec_file = copy / "policy" / "policy.json"
    spec = json.loads(spec_file.read_text())
    spec_file.write_text(json.dumps({**spec, "observation": {**spec["observation"], "version": OBSERVATION_VERSION + 1}}))
    with pytest.raises(PolicyError, match="observation version") as err:
        load(copy)
    assert "observation.version" in str(err.value) and "\n" not in str(err.value)
    layers = spec["network"]["layers"]
    spec_file.write_text(json.dumps({**spec, "network": {**spec["network"], "layers": layers[1:]}}))
    with pytest.raises(PolicyError, match="takes 32 inputs"):
        get_policy(str(copy / "policy"))
    spec_file.write_text("{not json")
    with pytest.raises(PolicyError, match="not JSON"):
        load(copy)


def test_learned_rules_follow_the_policys_choices_per_situation():
    low, high = ((1.0, 1.5), "message"), ((3.0, None), "tool_result")

    def rollouts(n: int, chain: tuple[str, ...], band, kind) -> list[Rollout]:
        return [Rollout("s", i, chain, (("overflow_ratio", band), ("dominant_type", kind)), 0.0) for i in range(n)]

    default, fresh = ("summarize_old",), ("fresh_start",)
    data = rollouts(6, default, *low) + rollouts(4, fresh, *high) + rollouts(1, default, *high)
    rules = learned_rules(data, default)
    assert rules[0] == {"when": {"overflow_ratio": {"above": 3.0}}, "chain": ["fresh_start"], "share": 0.8, "support": 5}
    assert rules[1]["when"] == {"dominant_type": "tool_result"} and len(rules) == 2
    # a pair that goes against its single-feature rule becomes a (first) exception
    data = rollouts(6, default, *low) + rollouts(8, fresh, *high) + rollouts(3, default, (3.0, None), "code")
    assert learned_rules(data, default) == [
        {"when": {"overflow_ratio": {"above": 3.0}, "dominant_type": "code"}, "chain": list(default), "share": 1.0, "support": 3},
        {"when": {"overflow_ratio": {"above": 3.0}}, "chain": list(fresh), "share": 0.727, "support": 11},
        {"when": {"dominant_type": "tool_result"}, "chain": list(fresh), "share": 1.0, "support": 8},
    ]
    # a tie with the chain that applies anyway is no rule; nor is a group under MIN_SUPPORT
    tie = rollouts(3, default, *low) + rollouts(3, ("fresh_start",), *low) + rollouts(2, ("fresh_start",), *high)
    assert learned_rules(tie, default) == []


# ---- agreement with SB3 -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def decision_points(exports, held_out):
    """1,000 decision points with distinct (observation, mask) on the held-out contexts,
    reached by mixed rollouts: the exported policy, uniform over valid actions, uniform
    over every action (unmasked learners waste steps), and ε-mixtures of them."""
    policy = load(exports["MaskablePPO"].out)
    contexts = [build_context(find_scenario(name), seed) for name in EVAL for seed in range(12)]
    points, k = {}, 0
    while len(points) < 1000:
        rng = np.random.default_rng(k)
        eps, masked = (0.0, 0.5, 1.0)[k % 3], k % 4 != 3
        episode = OverflowEpisode(contexts[k % len(contexts)], policy.settings)
        while not episode.done and len(points) < 1000:
            mask = episode.action_mask()
            obs = observe(episode.state, policy.observation_config)
            points.setdefault((obs.tobytes(), mask.tobytes()), episode.copy())
            if rng.random() < eps:
                action = int(rng.choice(np.flatnonzero(mask) if masked else np.arange(len(mask))))
            else:
                action = policy.actions.index(policy.act(episode))
            episode.step(action)
        k += 1
    return list(points.values())


@pytest.mark.parametrize("algo", ALGOS)
def test_exported_network_acts_as_the_sb3_model(runs, exports, decision_points, algo):
    model = sb3_model(runs[algo], algo)
    policy, adapter = load(exports[algo].out), get_policy(str(runs[algo]))
    assert isinstance(policy, ExportedPolicy) and policy.algorithm == algo
    assert Counter(e.steps_taken for e in decision_points).keys() >= {0, 1, 2, 3}
    obs = np.stack([observe(e.state, policy.observation_config) for e in decision_points])
    masks = np.stack([e.action_mask() for e in decision_points])
    assert len({o.tobytes() for o in obs}) > 900
    if algo == "MaskablePPO":  # the masked distribution's mode
        expected, _ = model.predict(obs, action_masks=masks, deterministic=True)
        got = [policy.decide(e.state, mask=m) for e, m in zip(decision_points, masks)]
    else:  # the unmasked greedy action
        expected, _ = model.predict(obs, deterministic=True)
        everything = np.ones(len(ACTIONS), dtype=bool)
        got = [policy.decide(e.state, mask=everything) for e in decision_points]
    assert got == [ACTIONS[i] for i in expected]
    sample = decision_points[::10]  # the SB3 adapter's masked argmax too
    assert [policy.act(e) for e in sample] == [adapter.act(e) for e in sample]


def test_vecnormalize_statistics_are_exported_and_applied(runs, tmp_path, held_out):
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from ctxsim.lab.environments.overflow import ContextOverflowEnv

    run = tmp_path / "run"
    shutil.copytree(runs["PPO"], run)
    config = yaml.safe_load((run / "config.yaml").read_text())
    vec = VecNormalize(DummyVecEnv([lambda: ContextOverflowEnv(config["env_config"])]), clip_obs=3.0)
    rng = np.random.default_rng(0)
    vec.obs_rms.mean = rng.normal(0, 0.3, vec.obs_rms.mean.shape)
    vec.obs_rms.var = rng.uniform(0.01, 2.0, vec.obs_rms.var.shape)
    vec.save(str(run / "vecnormalize.pkl"))
    policy = load(export_run(run, tmp_path / "export", seeds=1).out)
    assert policy.normalization is not None and policy.spec.normalization.clip == 3.0
    model = sb3_model(run, "PPO")
    everything = np.ones(len(ACTIONS), dtype=bool)
    for _, _, state in held_out:
        action, _ = model.predict(vec.normalize_obs(observe(state, policy.observation_config)), deterministic=True)
        assert policy.decide(state, mask=everything) == ACTIONS[int(action)]


# ---- breaking and logging ---------------------------------------------------------------------------
def test_break_context_runs_an_episode_and_logs_each_decision(exports, held_out, tmp_path):
    from ctxsim.lab.environments.overflow import ContextOverflowEnv

    policy = load(exports["MaskablePPO"].out)
    log = tmp_path / "decisions.jsonl"
    _, _, state = held_out[0]
    result = policy.break_context(state, log=log)
    episode = run_episode(policy, state, policy.settings, 0)
    assert result.chain == episode.chain and result.reward == episode.reward and result.state == episode.state
    assert result.success == (result.state.total_tokens <= result.target_tokens == policy.settings.target_tokens(state))
    # design 001's progress messages of the steps taken, for the agent's status line: the
    # length check once, then each step's phase, and on a clean break one success last
    clean = 0
    for _, _, context in held_out:
        broken = policy.break_context(context)
        phases = [e.phase for e in broken.events]
        assert phases[0] == "detection" and phases.count("detection") == 1 and len(phases) > len(broken.chain)
        if broken.success and not broken.used_recovery:
            clean += 1
            assert phases[-1] == "success" and phases.count("success") == 1
            assert f"{broken.state.total_tokens:,}" in broken.events[-1].message
    assert clean

    records = read_transitions(log)
    assert [r["action"] for r in records] == list(result.chain) and [r["step"] for r in records] == list(range(len(records)))
    assert {r["run_id"] for r in records} == {f"exported:{policy.spec.name}"} and records[0]["scenario"] == EVAL[0]
    assert records[0]["stateBefore"]["observation"] == pytest.approx(observe(state, policy.observation_config).tolist(), abs=1e-6)
    assert [r["outcome"] is None for r in records] == [True] * (len(records) - 1) + [False]
    assert records[-1]["outcome"]["success"] == result.success and records[-1]["terminated"]
    # the same reward as the environment's for the same actions
    env = ContextOverflowEnv({**policy.spec.settings, "scenario_names": EVAL})
    env.reset(seed=0, options={"state": state})
    rewards = [env.step(ACTIONS.index(a))[1] for a in result.chain]
    assert [r["reward"] for r in records] == pytest.approx(rewards, abs=1e-6)

    tight = state.warning_tokens // 2
    second = policy.break_context(state, target_tokens=tight, log=log)
    assert second.target_tokens == tight and second.outcome.target_tokens == tight
    assert second.state.limit == state.limit and (not second.success or second.state.total_tokens <= tight)
    records = read_transitions(log)
    assert [r["episode"] for r in records] == [0] * len(result.chain) + [1] * len(second.chain)

    summary = summarize_log(log)
    assert [e.chain for e in summary.episodes] == [result.chain, second.chain] and summary.unfinished == 0
    assert summary.overall.mean_reward == pytest.approx((result.reward + second.reward) / 2, abs=1e-6)


@pytest.mark.parametrize("form", ["jsonl", "native"])
def test_an_exported_policy_compacts_an_agents_chat_messages_in_one_call(exports, repo_root, tmp_path, form):
    from copy import deepcopy

    from ctxsim.transcripts import context_from_messages

    policy = load(exports["MaskablePPO"].out)
    shipped = repo_root / "data" / "transcripts" / "swe-marshmallow-1867-fc.jsonl"
    messages = [json.loads(line) for line in shipped.read_text().splitlines()]
    messages = native_chat(messages) if form == "native" else messages
    before, log, limit, store = deepcopy(messages), tmp_path / "decisions.jsonl", 4000, {}
    out = policy.compact_messages(messages, limit, log=log, artifacts=store)
    assert messages == before  # the caller's list is never modified
    pointers = {m for message in out for m in re.findall(r'read_artifact\("(art-[0-9a-f]+)"\)', message["content"] or "")}
    assert pointers == set(store)  # what the break moved out is the caller's to read back
    assert context_from_messages(out, limit=limit, min_limit=1).total_tokens <= limit < context_from_messages(messages).total_tokens
    assert out[0] == messages[0] and out[1] == messages[1]  # system prompt and task kept as they came
    assert all(m in messages or m["content"] for m in out)  # new messages carry text
    records = read_transitions(log)
    assert records and records[-1]["outcome"]["success"]
    # valid for a chat API: every tool result answers a preceding call, every call is answered
    calls = [c["id"] for m in out for c in m.get("tool_calls", [])]
    results = [m["tool_call_id"] for m in out if m["role"] == "tool" and "tool_call_id" in m]
    assert sorted(calls) == sorted(results) and (form == "jsonl" or results)
    assert policy.compact_messages(messages, 10**6, log=tmp_path / "none.jsonl") == messages  # fits: copies back
    assert not (tmp_path / "none.jsonl").exists()


def test_an_exported_policy_compacts_an_anthropic_request_in_one_call(exports, repo_root, tmp_path):
    """The shipped session as a Messages API request (system prompt, turns of text,
    tool_use and tool_result blocks): one call breaks it with the learned chain, logs the
    decisions and returns a request the API takes, within the limit."""
    from copy import deepcopy

    from api_forms import anthropic_request, blocks_of, check_api_rules

    from ctxsim.anthropic_messages import to_chat
    from ctxsim.transcripts import context_from_messages

    policy = load(exports["MaskablePPO"].out)
    shipped = repo_root / "data" / "transcripts" / "swe-marshmallow-1867-fc.jsonl"
    system, turns = anthropic_request([json.loads(line) for line in shipped.read_text().splitlines()])
    before, log, limit, store = deepcopy(turns), tmp_path / "decisions.jsonl", 4000, {}
    out = policy.compact_anthropic_messages(turns, limit, system=system, log=log, artifacts=store)
    assert turns == before and out["system"] == system and out["messages"][0] == turns[0]  # the task kept as it came
    check_api_rules(out["messages"])
    counted = context_from_messages(to_chat(out["messages"], out["system"]).messages).total_tokens
    assert counted <= limit < context_from_messages(to_chat(turns, system).messages).total_tokens
    texts = [b.get("text") or json.dumps(b.get("content")) for t in out["messages"] for b in blocks_of(t)]
    assert {a for text in texts for a in re.findall(r'read_artifact\("(art-[0-9a-f]+)"\)', text)} == set(store)
    records = read_transitions(log)
    assert records and records[-1]["outcome"]["success"]


def test_an_exported_policy_compacts_a_responses_api_input_in_one_call(exports, repo_root, tmp_path):
    """The shipped session as OpenAI Responses API input items (reasoning items included):
    one call breaks it with the learned chain, logs the decisions and returns input the
    API takes, within the limit."""
    from copy import deepcopy

    from api_forms import check_responses_rules, responses_input

    from ctxsim.openai_responses import to_chat
    from ctxsim.transcripts import context_from_messages

    policy = load(exports["MaskablePPO"].out)
    shipped = repo_root / "data" / "transcripts" / "swe-marshmallow-1867-fc.jsonl"
    instructions, items = responses_input([json.loads(line) for line in shipped.read_text().splitlines()], reasoning=True)
    before, log, limit, store = deepcopy(items), tmp_path / "decisions.jsonl", 4000, {}
    out = policy.compact_response_items(items, limit, instructions=instructions, log=log, artifacts=store)
    assert items == before and out["instructions"] == instructions and out["input"][0] == items[0]  # the task as it came
    check_responses_rules(out["input"])
    counted = context_from_messages(to_chat(out["input"], out["instructions"]).messages).total_tokens
    assert counted <= limit < context_from_messages(to_chat(items, instructions).messages).total_tokens
    texts = [i.get("content", i.get("output", "")) for i in out["input"]]  # kept messages' parts hold no pointer
    assert {a for text in texts if isinstance(text, str) for a in re.findall(r'read_artifact\("(art-[0-9a-f]+)"\)', text)} == set(store)
    records = read_transitions(log)
    assert records and records[-1]["outcome"]["success"]


def test_the_compact_command_writes_each_form_back_in_its_form(exports, repo_root, tmp_path, capsys):
    """``ctxsim compact``: a chat JSONL session, an Anthropic request and a Responses
    request, each compacted by the exported policy and written in the form it came in
    (a request's other keys kept), within the limit, what moved out in the artifacts file."""
    from api_forms import anthropic_request, check_api_rules, check_responses_rules, responses_input

    from ctxsim.anthropic_messages import to_chat as anthropic_chat
    from ctxsim.openai_responses import to_chat as responses_chat
    from ctxsim.transcripts import context_from_messages

    export, limit = str(exports["MaskablePPO"].out), 4000
    session = repo_root / "data" / "transcripts" / "swe-marshmallow-1867-fc.jsonl"
    chat = [json.loads(line) for line in session.read_text().splitlines()]
    system, turns = anthropic_request(chat)
    instructions, items = responses_input(chat, reasoning=True)
    requests = {"anthropic": {"model": "m", "max_tokens": 512, "system": system, "messages": turns},
                "responses": {"model": "m", "instructions": instructions, "input": items}}
    for form, request in requests.items():
        (tmp_path / f"{form}.json").write_text(json.dumps(request))
    outs = {}
    for form, source in (("chat", session), ("anthropic", tmp_path / "anthropic.json"), ("responses", tmp_path / "responses.json")):
        outs[form] = tmp_path / f"{form}.out"
        assert main(["compact", export, str(source), "--limit", str(limit), "--form", form, "--out", str(outs[form])]) == 0
        assert f"-> {outs[form]}" in capsys.readouterr().out
    written = [json.loads(line) for line in outs["chat"].read_text().splitlines()]
    assert context_from_messages(written).total_tokens <= limit < context_from_messages(chat).total_tokens
    assert written[-2:] == chat[-2:]  # the newest turn, the agent's last call and its result, as they came
    flat = tmp_path / "flat.out"  # --break-newest: the break takes every message, as the policy was evaluated
    assert main(["compact", export, str(session), "--limit", str(limit), "--break-newest", "--out", str(flat)]) == 0
    assert [json.loads(line) for line in flat.read_text().splitlines()] == load(export).compact_messages(
        chat, limit, artifacts={}, keep_newest=False)
    anthropic = json.loads(outs["anthropic"].read_text())
    assert (anthropic["model"], anthropic["max_tokens"]) == ("m", 512)
    check_api_rules(anthropic["messages"])
    assert context_from_messages(anthropic_chat(anthropic["messages"], anthropic["system"]).messages).total_tokens <= limit
    responses = json.loads(outs["responses"].read_text())
    assert responses["model"] == "m"
    check_responses_rules(responses["input"])
    assert context_from_messages(responses_chat(responses["input"], responses["instructions"]).messages).total_tokens <= limit
    for form, out in outs.items():  # every pointer resolves in the artifacts file beside the output
        pointers = set(re.findall(r'read_artifact\(\\?"(art-[0-9a-f]+)\\?"\)', out.read_text()))
        stored = tmp_path / f"{form}.out.artifacts.json"
        assert pointers == (set(json.loads(stored.read_text())) if stored.exists() else set())


def test_an_agent_loop_that_compacts_whenever_it_passes_the_limit_keeps_its_newest_result(exports):
    """Two real coding-agent sessions replayed message by message, the agent compacting
    its own list with the exported policy whenever a tool result takes it over the limit
    and going on from the compacted list (summaries of summaries, pointers kept across
    calls): every compaction fits, ends with the result just received, keeps each tool
    result right after its call, and every pointer resolves in the one store."""
    import gzip

    from ctxsim.lab.corpus import corpus_files
    from ctxsim.transcripts import context_from_messages

    policy, limit, compactions, cuts = load(exports["MaskablePPO"].out), 4000, 0, 0
    for path in corpus_files(split="train")[:2]:
        session = [json.loads(line) for line in gzip.open(path, "rt", encoding="utf-8")]
        sent, store = [], {}
        for message in session:
            sent.append(message)
            if message["role"] != "tool" or context_from_messages(sent).total_tokens <= limit:
                continue
            sent = policy.compact_messages(sent, limit, artifacts=store)
            compactions += 1
            assert context_from_messages(sent).total_tokens <= limit
            got, given = sent[-1]["content"], message["content"]  # as it came, or cut to half the limit
            cut = re.split(r"\n\[… [\d,]+ tokens of this message cut here …\]\n", got)
            assert got == given or (len(cut) == 2 and given.startswith(cut[0]) and given.endswith(cut[1]))
            cuts += got != given
            for k, m in enumerate(sent):
                if m["role"] == "tool":
                    call = next(x for x in reversed(sent[:k]) if x["role"] != "tool")
                    assert m["tool_call_id"] in {c["id"] for c in call.get("tool_calls") or ()}
            pointers = re.findall(r'read_artifact\("(art-[0-9a-f]+)"\)', "".join(m.get("content") or "" for m in sent))
            assert set(pointers) <= set(store)
    assert compactions > 20 and 0 < cuts < compactions


def test_the_compact_command_refuses_bad_input_in_one_line(exports, repo_root, tmp_path, capsys):
    export = str(exports["MaskablePPO"].out)
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"model": "m", "messages": [{"role": "user", "content": "Fix it."}]}))
    session = repo_root / "data" / "transcripts" / "swe-marshmallow-1867-fc.jsonl"
    cases = [
        ([str(request)], "line 1 is a request object, not a chat message: give --form anthropic"),
        ([str(request), "--form", "responses"], "key 'input': expected a JSON object with 'input' a list"),
        ([str(session), "--form", "anthropic"], "bad JSON"),
        ([str(tmp_path / "missing.jsonl")], "missing.jsonl"),
        ([str(session), "--limit", "0"], "--limit must be in 1..1000000000, got 0"),
    ]
    for argv, needle in cases:
        out = tmp_path / "out.json"
        limit = [] if "--limit" in argv else ["--limit", "4000"]
        assert main(["compact", export, *argv, *limit, "--out", str(out)]) == 2, argv
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and needle in err, (argv, err)
        assert not out.exists()


def test_an_exported_policy_compacts_langchain_messages_in_one_call(exports, repo_root, tmp_path):
    """The shipped session as LangChain messages: one call breaks them with the learned
    chain, logs the decisions and returns messages a chat model takes, within the limit."""
    pytest.importorskip("langchain_core")
    from api_forms import langchain_session
    from langchain_core.messages import AIMessage, ToolMessage, convert_to_openai_messages

    from ctxsim.transcripts import context_from_messages

    policy = load(exports["MaskablePPO"].out)
    messages, log, limit = langchain_session(repo_root), tmp_path / "decisions.jsonl", 4000
    out = policy.compact_langchain_messages(messages, limit, log=log, artifacts={})
    assert out[:2] == messages[:2]  # the system prompt and the task, as they came
    assert context_from_messages(convert_to_openai_messages(out)).total_tokens <= limit
    called = [c["id"] for m in out if isinstance(m, AIMessage) for c in m.tool_calls]
    assert sorted(called) == sorted(m.tool_call_id for m in out if isinstance(m, ToolMessage))
    records = read_transitions(log)
    assert records and records[-1]["outcome"]["success"]


def test_policies_sharing_a_log_never_share_or_interleave_an_episode(exports, held_out, tmp_path):
    import threading

    log = tmp_path / "shared.jsonl"
    policies = [load(exports["MaskablePPO"].out, log=log) for _ in range(3)]
    states = [state for _, _, state in held_out]
    start = threading.Barrier(len(policies))
    chains: list[tuple[str, ...]] = []

    def work(policy):
        start.wait()
        for state in states:
            chains.append(policy.break_context(state, target_tokens=state.total_tokens // 4).chain)

    threads = [threading.Thread(target=work, args=(p,)) for p in policies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = read_transitions(log)
    episodes = [r["episode"] for r in records]
    assert episodes == sorted(episodes) and sorted(set(episodes)) == list(range(len(chains)))  # contiguous, numbered in order
    logged = [tuple(r["action"] for r in records if r["episode"] == e) for e in range(len(chains))]
    assert sorted(logged) == sorted(chains) and max(map(len, chains)) > 1
    assert all([r["step"] for r in records if r["episode"] == e] == list(range(len(logged[e]))) for e in range(len(chains)))
    assert summarize_log(log).unfinished == 0


def test_decide_checks_its_arguments(exports, held_out):
    policy = load(exports["A2C"].out)
    _, _, state = held_out[0]
    assert policy.decide(state) == policy.decide(state, mask=policy.settings.mask(state))
    only = np.zeros(len(ACTIONS), dtype=bool)
    only[ACTIONS.index("fresh_start")] = True
    assert policy.decide(state, mask=only) == "fresh_start"
    for bad in (np.zeros(len(ACTIONS), dtype=bool), np.ones(3, dtype=bool), [1] * len(ACTIONS)):
        with pytest.raises(PolicyError, match="mask"):
            policy.decide(state, mask=bad)
    with pytest.raises(PolicyError, match="steps_taken"):
        policy.decide(state, steps_taken=1)
    with pytest.raises(PolicyError, match="target_tokens"):
        policy.break_context(state, target_tokens=0)


@pytest.mark.parametrize("algo", ["MaskablePPO", "DQN"])
def test_decide_checks_validity_best_score_first_and_picks_as_the_whole_mask_does(exports, decision_points, algo, monkeypatch):
    from ctxsim.episode import EpisodeSettings

    lazy, whole = load(exports[algo].out), load(exports[algo].out)  # separate memos: lazy reads nothing twice
    checked: list[str] = []
    valid = EpisodeSettings.valid
    monkeypatch.setattr(EpisodeSettings, "valid", lambda self, sid, state, **how: (checked.append(sid) if self is lazy.settings else None)
                        or valid(self, sid, state, **how))
    counts = []
    for episode in decision_points:
        state, steps = episode.state, episode.steps_taken
        checked.clear()
        chosen = lazy.decide(state, steps_taken=steps)
        counts.append(len(checked))
        assert chosen == whole.decide(state, mask=whole.settings.mask(state, steps), steps_taken=steps)
    assert min(counts) == 1 and np.mean(counts) < len(ACTIONS) / 2
    # a score that is not finite (on the lowest-scored valid action): np.argmax picks it, and so does decide
    state = next(e.state for e in decision_points if e.steps_taken == len(e.state.history) and lazy.settings.mask(e.state).sum() >= 2)
    scores = lazy.scores(lazy.observation(state)).astype(np.float64)
    mask = lazy.settings.mask(state)
    worst = int(np.argmin(np.where(mask, scores, np.inf)))
    scores[worst] = np.nan
    monkeypatch.setattr(type(lazy), "scores", lambda self, observation: scores)
    assert lazy.decide(state) == ACTIONS[worst] == ACTIONS[int(np.argmax(np.where(mask, scores, -np.inf)))]


def test_decide_masks_overflowing_actions_on_the_last_step_when_the_settings_say_so(exports, held_out):
    policy = load(exports["A2C"].out)
    policy.settings = replace(policy.settings, max_steps=2, mask_overflowing_last_step=True)
    settings = policy.settings
    for _, _, state in held_out:
        first = next((sid for sid, ok in zip(ACTIONS, settings.mask(state)) if ok and not settings.fits(sid, state)), None)
        if first is None:
            continue
        after = settings.recorded(first, settings.apply(first, state).state)  # one step of two taken
        fitting, plain = settings.mask(after, 1), settings.mask(after, 0)
        if np.array_equal(fitting, plain):
            continue
        chosen = policy.decide(after)
        assert chosen == policy.decide(after, mask=fitting) and settings.fits(chosen, after)
        assert policy.decide(after, steps_taken=0) == policy.decide(after, mask=plain)
        return
    pytest.fail("no held-out context where the last step's mask takes an action away")


def test_a_run_trained_to_look_ahead_acts_so_and_its_export_too(exports, tmp_path, held_out):
    from ctxsim.lab.train import train
    from ctxsim.policies.lookahead import look_ahead

    config = experiment("MaskablePPO", name="export_ahead", lookahead=True,
                        env_config={"actions": ACTIONS, "max_steps": 2, "target": "warning"})
    run = train(config, out=tmp_path / "runs", progress=False)
    trained = get_policy(str(run))
    exported = load(export_run(run, tmp_path / "export", seeds=1).out)
    assert trained.lookahead and exported.spec.lookahead
    for _, _, state in held_out:
        episode = OverflowEpisode(state, exported.settings)
        if episode.done:
            continue
        top = exported.decide(state, mask=episode.action_mask(), steps_taken=0)
        assert exported.ranked(episode)[0] == top and trained.ranked(episode)[0] == top
        assert exported.act(episode) == trained.act(episode) == look_ahead(episode, exported.ranked)
        assert exported.break_context(state).chain == run_episode(trained, state, exported.settings, 0).chain
    plain = load(exports["MaskablePPO"].out)  # trained without look-ahead: the top action, always
    assert not plain.spec.lookahead
    for _, _, state in held_out:
        episode = OverflowEpisode(state, plain.settings)
        if not episode.done:
            assert plain.act(episode) == plain.ranked(episode)[0] == plain.decide(state, mask=episode.action_mask())


def test_steps_taken_counts_only_the_current_break(exports, held_out):
    policy = load(exports["MaskablePPO"].out)
    _, _, state = held_out[1]
    broken = policy.break_context(state).state  # a state that already carries a history
    assert broken.history
    fresh = replace(broken, history=())
    assert np.array_equal(policy.observation(broken, steps_taken=0), observe(fresh, policy.observation_config))
    assert not np.array_equal(policy.observation(broken), policy.observation(fresh))


def test_a_context_with_an_earlier_history_is_observed_alike_everywhere(runs, exports, held_out):
    """The env, the SB3 adapter and the export all observe only the break under way:
    strategies applied before the overflow do not count toward its max_steps."""
    from ctxsim.episode import OverflowEpisode
    from ctxsim.policies.registry import run_episode

    from ctxsim.lab.environments.overflow import ContextOverflowEnv

    exported, trained = load(exports["MaskablePPO"].out), get_policy(str(runs["MaskablePPO"]))
    env = ContextOverflowEnv(yaml.safe_load((runs["MaskablePPO"] / "config.yaml").read_text())["env_config"])
    checked = 0
    for _, _, state in held_out:
        earlier = exported.settings.recorded("externalize", state)  # as if externalized before this overflow
        if earlier.total_tokens <= exported.settings.target_tokens(earlier):
            continue
        obs, _ = env.reset(options={"state": earlier})
        assert np.array_equal(obs, observe(replace(earlier, history=()), exported.observation_config))
        episode = OverflowEpisode(earlier, exported.settings)
        assert trained.act(episode) == exported.act(episode)
        ours = run_episode(trained, earlier, exported.settings, 0)
        theirs = run_episode(exported, earlier, exported.settings, 0)
        assert ours.chain == theirs.chain
        checked += 1
    assert checked >= 3


# ---- the command line ------------------------------------------------------------------------------
#: seed 001-style cheap actions and 2 steps: the oracle of ``evaluate`` stays small
CHEAP = {"actions": ["dedupe_tool_results", "remove_oldest", "remove_low_priority", "truncate", "fresh_start"], "max_steps": 2}


def test_cli_export_evaluate_and_from_log(tmp_path, capsys):
    from ctxsim.lab.train import train

    run = train(experiment("MaskablePPO", name="export_cli", env_config=CHEAP), out=tmp_path / "runs", progress=False)
    out = tmp_path / "export"
    assert main(["export", str(run), "--out", str(out), "--seeds", "2"]) == 0
    assert f"-> {out}: chain_order " in capsys.readouterr().out
    env = tmp_path / "cheap.yaml"
    env.write_text(yaml.safe_dump({"id": "ctxsim/ContextOverflow-v0", "config": CHEAP}))
    log, csv = tmp_path / "eval.jsonl", tmp_path / "eval.csv"
    scenarios = str(find_scenario(EVAL[0]).source)
    assert main(["evaluate", "--policy", str(run), "--policy", str(out), "--scenarios", scenarios, "--seeds", "2",
                 "--env", str(env), "--out", str(csv), "--log", str(log), "--quiet"]) == 0
    import pandas as pd

    rows = pd.read_csv(csv)
    sb3_rows, exported_rows = (rows[rows.policy == p].reset_index(drop=True) for p in (str(run), str(out)))
    assert len(sb3_rows) == 2 and list(sb3_rows.chain) == list(exported_rows.chain)
    assert np.allclose(sb3_rows.normalized_score, exported_rows.normalized_score)
    capsys.readouterr()

    assert main(["evaluate", "--from-log", str(log)]) == 0
    text = capsys.readouterr().out
    assert "4 finished episodes" in text and f"evaluate:{out}" in text and EVAL[0] in text
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"not": "a record"}\n{"also": 1}\n')
    assert main(["evaluate", "--from-log", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "line 1" in err
    record = json.loads(log.read_text().splitlines()[0])
    bad.write_text(json.dumps({**record, "reward": "high"}) + "\n")
    with pytest.raises(LogFormatError, match="line 1: reward"):
        summarize_log(bad)
    bad.write_text(json.dumps({**record, "reward": 10**400}) + "\n")
    with pytest.raises(LogFormatError, match="line 1: reward is inf, expected a finite number"):
        summarize_log(bad)
    assert main(["evaluate", "--from-log", str(log), "--policy", "random"]) == 2
    capsys.readouterr()

    # another action set: refused before anything is evaluated, the log and the CSV untouched
    before, csv_before = log.read_bytes(), csv.read_bytes()
    for policy in (run, out):
        for extra in ([], ["--overwrite"]):
            code = main(["evaluate", "--policy", "seed-chain", "--policy", str(policy), "--scenarios", scenarios,
                         "--seeds", "1", "--out", str(csv), "--log", str(log), "--quiet", *extra])
            err = capsys.readouterr().err
            assert code == 2 and err.count("\n") == 1 and "key 'actions'" in err and "the episode has" in err
            assert log.read_bytes() == before and csv.read_bytes() == csv_before
    sweep = tmp_path / "mismatch.yaml"
    sweep.write_text(yaml.safe_dump({"name": "mismatch", "policies": ["seed-chain", str(out)], "scenarios": {"names": [EVAL[0]]},
                                     "seeds": 1}))
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "sweep"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "key 'policies[1]'" in err and not (tmp_path / "sweep").exists()


# ---- the runtime window --------------------------------------------------------------------------------
def test_context_window_auto_compacts_through_the_exported_policy(exports):
    from ctxsim.window import Compacted, ContextItem, ContextWindow

    policy = load(exports["MaskablePPO"].out)
    calls = []

    class Spy:
        """Delegates to the exported policy and records what the window asked."""

        def break_context(self, state, target_tokens=None):
            result = policy.break_context(state, target_tokens=target_tokens)
            calls.append((state, target_tokens, result))
            return result

    window = ContextWindow(2000, compaction_threshold=85.0, policy=Spy(), task="fix the deploy cache")
    events = []
    window.on("compacted", events.append)
    window.add(ContextItem("You are a coding agent. Never delete production data.", "system_prompt", 90, pinned=True, id="sys"))
    for k in range(40):
        words = " ".join(f"deploy{k} cache budget schema retry index parser token queue report" for _ in range(6))
        window.add(ContextItem(f"Note {k}: {words}", "assistant_message" if k % 2 else "user_message", priority=40, id=f"n{k}"))
    assert events and calls and all(isinstance(e, Compacted) and e.strategy == "policy" for e in events)
    for event, (state, target, result) in zip(events, calls):
        assert event.applied[: len(result.chain)] == result.chain and result.state.total_tokens <= target
    assert "sys" in window and window.current_tokens <= 2000


def test_a_policy_loaded_with_a_log_logs_every_window_compaction(exports, tmp_path):
    from ctxsim.transitions import read_transitions
    from ctxsim.window import ContextItem, ContextWindow

    log = tmp_path / "decisions.jsonl"
    window = ContextWindow(2000, compaction_threshold=85.0, policy=load(exports["MaskablePPO"].out, log=log), task="fix the cache")
    compactions = []
    window.on("compacted", compactions.append)
    for k in range(40):
        words = " ".join(f"deploy{k} cache budget schema retry index parser token queue report" for _ in range(6))
        window.add(ContextItem(f"Note {k}: {words}", "user_message", priority=40, id=f"n{k}"))
    records = read_transitions(log)
    episodes = sorted({r["episode"] for r in records})
    assert compactions and episodes == list(range(len(compactions)))
    assert [tuple(r["action"] for r in records if r["episode"] == e) for e in episodes] == \
        [c.applied[: len(tuple(r for r in records if r["episode"] == e))] for e, c in zip(episodes, compactions)]


def test_a_log_that_cannot_be_appended_to_fails_before_the_break(exports, held_out, tmp_path):
    from ctxsim.errors import LogFormatError

    policy = load(exports["MaskablePPO"].out)
    log = tmp_path / "not_a_log.jsonl"
    log.write_text('{"note": "some other JSON file"}\n')
    with pytest.raises(LogFormatError, match="not a transition record"):
        policy.break_context(held_out[0][2], log=log)
    assert log.read_text() == '{"note": "some other JSON file"}\n'


@pytest.mark.parametrize("place", ["under a file", "a directory"])
def test_a_log_that_cannot_be_written_is_one_error_naming_it_before_the_break(exports, held_out, tmp_path, place):
    """A log under a path that is a file (its folder cannot be made) or that is a
    directory: a LogFormatError naming the path, not the OSError of mkdir or open."""
    from ctxsim.errors import LogFormatError

    policy = load(exports["MaskablePPO"].out)
    (tmp_path / "notes.txt").write_text("mine\n")
    log = tmp_path / "notes.txt" / "decisions.jsonl" if place == "under a file" else tmp_path
    with pytest.raises(LogFormatError, match=r"cannot (write|read) the log") as err:
        policy.break_context(held_out[0][2], log=log)
    assert err.value.source == str(log)
    assert (tmp_path / "notes.txt").read_text() == "mine\n"


@pytest.mark.parametrize(("limit", "artifacts", "key"), [
    ("3000", None, "limit"), (None, None, "limit"), ([3000], None, "limit"), (3000, [], "artifacts"),
])
def test_compact_messages_refuses_a_limit_or_artifacts_of_another_type(exports, repo_root, limit, artifacts, key):
    """A limit of text, None or a list failed with TypeError inside; a list as the
    artifacts store was taken (and would fail once the break moved content out)."""
    from ctxsim.errors import TranscriptError

    policy = load(exports["MaskablePPO"].out)
    chat = [json.loads(line) for line in (repo_root / "data" / "transcripts" / "swe-marshmallow-1867-fc.jsonl").read_text().splitlines()]
    with pytest.raises(TranscriptError) as err:
        policy.compact_messages(chat, limit, artifacts=artifacts)
    assert err.value.key == key and err.value.source == "messages"


def test_export_refuses_a_network_it_misreads(runs, tmp_path, monkeypatch):
    """The exported network is checked against the SB3 model on every held-out decision."""
    import ctxsim.lab.export as export

    original = export._network

    def misread(model, algo, source):
        kind, layers = original(model, algo, source)
        weight, bias, activation, param = layers[-1]
        bias = bias.copy()
        bias[0] += 0.5  # one action's output off: not a constant shift
        return kind, [*layers[:-1], (weight, bias, activation, param)]

    monkeypatch.setattr(export, "_network", misread)
    with pytest.raises(PolicyError, match="differs from the trained model by 0.4"):
        export_run(runs["MaskablePPO"], tmp_path / "out", seeds=1)
    assert not (tmp_path / "out").exists()
    monkeypatch.setattr(export, "_network", original)
    assert export_run(runs["MaskablePPO"], tmp_path / "out", seeds=1).out.exists()


def test_a_plugin_that_fails_to_load_is_named_when_an_export_loads(exports, tmp_path):
    """The deployment path (``ctxsim.policies.load``) reports a broken ``ctxsim.plugins``
    entry point as itself, not as invalid settings of the export."""
    import os
    import subprocess
    import sys

    site = tmp_path / "site"
    info = site / "broken_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[ctxsim.plugins]\nbroken = broken_plugin\n")
    (site / "broken_plugin.py").write_text("raise RuntimeError('boom')\n")
    code = ("from ctxsim.errors import PluginError\nfrom ctxsim.policies import load\n"
            f"try:\n    load({str(exports['MaskablePPO'].out)!r})\nexcept PluginError as exc:\n    print('PluginError:', exc)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(site), os.environ.get("PYTHONPATH"))))}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("PluginError: plugin 'broken'") and "RuntimeError: boom" in done.stdout
    assert "invalid episode settings" not in done.stdout


def test_the_compact_vs_trim_example_compares_both_on_held_out_sessions(exports, repo_root, capsys, tmp_path):
    """``examples/compact_vs_trim.py``: both methods fit the limit on real held-out
    sessions, and the table reports what each kept."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("compact_vs_trim", repo_root / "examples" / "compact_vs_trim.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert example.main([str(exports["MaskablePPO"].out), "--sessions", "2", "--fraction", "0.5"]) == 0
    rows = {line.split("|")[1].strip(): line.split("|")[2:7] for line in capsys.readouterr().out.splitlines()
            if line.startswith("| `")}
    assert set(rows) == {"`compact_messages`", "`compact_messages(keep_newest=False)`", "`trim_messages`"}
    for messages, tokens, probes, task, newest in rows.values():
        assert float(messages) > 0 and int(tokens.replace(",", "")) > 0 and 0 <= float(probes) <= 1
        assert task.strip().endswith("/2") and newest.strip().endswith("/2")
    # the default holds the newest turn back, and trim_messages keeps the newest messages
    assert rows["`compact_messages`"][4].strip() == rows["`trim_messages`"][4].strip() == "2/2"
    # what trim_messages keeps fits the limit as ctxsim counts tokens
    path = example.corpus_files(split="held_out")[0]
    messages = example.read_messages(path)[:40]
    limit = example.tokens_of(messages) // 2
    assert 0 < example.tokens_of(example.trimmed(messages, limit)) <= limit
    # a folder that is no export: one line, exit 2
    assert example.main([str(tmp_path / "no-export")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "no-export: no policy/policy.json here" in err


def test_a_run_with_a_validation_split_chooses_its_chain_there_not_on_the_held_out_split(tmp_path):
    """The chain config is chosen where the run chose its model (the validation split when
    the experiment names one): the held-out split stays the test."""
    from ctxsim.lab.train import train

    run = train(experiment("MaskablePPO", train_scenarios=["chat-10k"], validation_scenarios=["mild-overflow"]),
                out=tmp_path / "runs", progress=False)
    result = export_run(run, tmp_path / "export", seeds=SEEDS)
    provenance = (result.out / "chain_config.yaml").read_text()
    assert "on mild-overflow;" in provenance and not any(name in provenance for name in EVAL)
    policy = load(result.out)
    states = [build_context(find_scenario("mild-overflow"), seed) for seed in range(SEEDS)]
    chains = [run_episode(policy, s, policy.settings, 0).chain for s in states
              if s.total_tokens > policy.settings.target_tokens(s)]
    assert result.episodes == len(chains) > 0 and result.chain == Counter(chains).most_common()[0][0]
