"""Plugins (``ctxsim.plugins`` entry points): loaded at the first registry lookup,
seen by the command line and worker processes, failing in one line, and part of the
context pools' digest.

Each test "installs" a plugin as pip would leave it, without pip: a module under
``tmp_path / "site"`` and a ``<name>-<version>.dist-info`` folder with METADATA and
entry_points.txt, with that folder on PYTHONPATH. Registries are process-global, so
everything that loads a plugin runs in a subprocess: this process's registries (and
those of the other tests, under pytest-xdist too) never see one.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ctxsim.plugins import GROUP

MODULE = "ctxsim_test_plugin"
ENTRY = "test-plugin"
DISTRIBUTION = "ctxsim-test-plugin"

#: one strategy, one policy, one embedder
PLUGIN = '''
"""A ctxsim plugin for the tests."""
import numpy as np
from pydantic import Field

from ctxsim.latency import Cost
from ctxsim.policies import Policy, register_policy
from ctxsim.relevance import register_embedder
from ctxsim.strategies import Outcome, Strategy, register
from ctxsim.strategies.base import RANK_SELECT, Params


class KeepLastParams(Params):
    keep: int = Field(4, ge=1)


@register
class KeepLast(Strategy):
    id = "plugin_keep_last"
    display_name = "Keep last"
    rank = RANK_SELECT
    summary = "Keep pinned units and the last N others."
    Params = KeepLastParams

    def run(self, state, ctx):
        others = [u for u in state.units if not u.pinned]
        gone = {u.id for u in others[: -self.params.keep]}
        kept = [u for u in state.units if u.id not in gone]
        return Outcome(state.with_units(kept, applied=self.id), Cost(units_touched=len(gone)))


@register_policy("plugin-first-valid")
class FirstValid(Policy):
    def act(self, episode):
        return episode.valid_actions()[0]


class ConstantEmbedder:
    """Every text is the same unit vector: coherence is always 1."""

    id, dim = "plugin-constant", 2

    def embed(self, texts):
        return np.tile(np.array([1.0, 0.0], dtype=np.float32), (len(texts), 1))


register_embedder("plugin-constant", ConstantEmbedder)
'''

#: every registry lookup and listing, each of which must load the plugins first
LOOKUPS = {
    "list_strategies": "from ctxsim.strategies import list_strategies; list_strategies()",
    "strategy_class": "from ctxsim.strategies import strategy_class; strategy_class('plugin_keep_last')",
    "get_strategy": "from ctxsim.strategies import get_strategy; get_strategy('plugin_keep_last', keep=2)",
    "get_policy": "from ctxsim.policies import get_policy; get_policy('plugin-first-valid')",
    "list_policies": "from ctxsim.policies import list_policies; list_policies()",
    "is_trained_policy": "from ctxsim.policies import is_trained_policy; is_trained_policy('.')",
    "get_embedder": "from ctxsim.relevance import get_embedder; get_embedder('plugin-constant')",
    "list_embedders": "from ctxsim.relevance import list_embedders; list_embedders()",
}


def install(site: Path, files: dict[str, str], entry_value: str = MODULE, version: str = "0.1") -> None:
    """Write ``files`` (path under ``site`` -> source) and the dist-info of a
    distribution declaring the entry point ``ENTRY = entry_value`` in ``GROUP``."""
    for name, source in files.items():
        path = site / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    info = site / f"{DISTRIBUTION.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\n{ENTRY} = {entry_value}\n")


def run(site: Path | None, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python *args`` in a fresh process with ``site`` (if any) on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site) if site else "", env.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def run_json(site: Path | None, code: str, cwd: Path) -> dict:
    done = run(site, "-c", textwrap.dedent(code), cwd=cwd)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A folder holding the test plugin as an installed distribution."""
    folder = tmp_path / "site"
    install(folder, {f"{MODULE}.py": PLUGIN})
    return folder


def test_importing_ctxsim_loads_no_plugin_and_each_lookup_loads_them_all(site, tmp_path):
    """One process imports ctxsim and the modules its commands use (no plugin is loaded),
    then forks a child per lookup of :data:`LOOKUPS`, each from that state: the child's
    lookup loads the plugins, all of them (a process per lookup, at the cost of one import)."""
    got = run_json(site, f"""
        import json, os, sys
        import ctxsim, ctxsim.lab.cli, ctxsim.lab.evaluate, ctxsim.lab.sweep, ctxsim.lab.pool, ctxsim.lab.environments.overflow, ctxsim.window
        import ctxsim.policies, ctxsim.relevance, ctxsim.strategies

        def after(lookup):
            exec(lookup)
            after_lookup = {MODULE!r} in sys.modules
            from ctxsim.plugins import load_plugins
            from ctxsim.policies import list_policies
            from ctxsim.relevance import get_embedder, list_embedders
            from ctxsim.strategies import list_strategies
            return {{
                "after_lookup": after_lookup,
                "plugins": [[p.name, p.module, p.distribution, p.version] for p in load_plugins()],
                "strategies": list_strategies(), "policies": list_policies(), "embedders": list_embedders(),
                "embedding": get_embedder("plugin-constant").embed(["a", "b"]).tolist(),
            }}

        at_import, children = {MODULE!r} in sys.modules, {{}}
        for name, lookup in {LOOKUPS!r}.items():
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: one lookup, its findings down the pipe
                os.close(read)
                os.write(write, json.dumps(after(lookup)).encode())
                os._exit(0)
            os.close(write)
            with os.fdopen(read, "rb") as pipe:
                children[name] = json.loads(pipe.read() or b"null")
            os.waitpid(pid, 0)
        print(json.dumps({{"at_import": at_import, "children": children}}))
        """, tmp_path)
    assert not got["at_import"]
    assert sorted(got["children"]) == sorted(LOOKUPS)
    for lookup, child in got["children"].items():
        assert child is not None, lookup
        assert child["after_lookup"], lookup
        assert child["plugins"] == [[ENTRY, MODULE, DISTRIBUTION, "0.1"]], lookup
        assert "plugin_keep_last" in child["strategies"], lookup
        assert {"plugin-first-valid", "only:plugin_keep_last"} <= set(child["policies"]), lookup
        assert "plugin-constant" in child["embedders"], lookup
        assert child["embedding"] == [[1.0, 0.0], [1.0, 0.0]], lookup


def test_concurrent_first_lookups_all_wait_for_the_plugins(tmp_path):
    site = tmp_path / "site"
    install(site, {f"{MODULE}.py": "import time\ntime.sleep(0.5)\n" + PLUGIN})
    got = run_json(site, """
        import json, threading
        from ctxsim.strategies import list_strategies
        barrier = threading.Barrier(8)
        seen = []
        def look():
            barrier.wait()
            seen.append("plugin_keep_last" in list_strategies())
        threads = [threading.Thread(target=look) for _ in range(8)]
        for t in threads: t.start()
        for t in threads: t.join()
        print(json.dumps(seen))
        """, tmp_path)
    assert got == [True] * 8


def test_a_plugin_strategy_and_embedder_work_in_an_env_config(site, tmp_path):
    got = run_json(site, """
        import json
        import gymnasium as gym
        import ctxsim
        env = gym.make("ctxsim/ContextOverflow-v0", config={
            "actions": ["plugin_keep_last", "fresh_start"], "strategy_params": {"plugin_keep_last": {"keep": 3}},
            "embedder": "plugin-constant", "scenario_names": ["mild-overflow"], "contexts_per_scenario": 1})
        obs, info = env.reset(seed=0)
        before = info["tokens"]
        mask = info["action_mask"].tolist()
        obs, reward, terminated, truncated, info = env.step(0)
        state = env.unwrapped.state
        print(json.dumps({"mask": mask, "chain": info["chain"], "before": before, "after": info["tokens"],
                          "limit": info["limit"], "terminated": terminated, "reward": reward,
                          "unpinned": sum(not u.pinned for u in state.units), "coherence": info["outcome"]["coherence"]}))
        """, tmp_path)
    assert got["mask"] == [True, True]
    assert got["chain"] == ["plugin_keep_last"]
    assert got["after"] < got["before"] and got["after"] <= got["limit"]
    assert got["unpinned"] == 3  # the strategy_params reached the plugin's Params
    assert got["terminated"] and got["reward"] > 0
    assert got["coherence"] == pytest.approx(1.0)  # the plugin's embedder scored it


def test_the_command_line_lists_and_evaluates_plugin_ids_from_an_env_spec(site, tmp_path):
    listed = run(site, "-m", "ctxsim", "strategies", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "plugin_keep_last" in listed.stdout
    spec = tmp_path / "plugin-env.yaml"
    spec.write_text("id: ctxsim/ContextOverflow-v0\nconfig:\n  actions: [plugin_keep_last, summarize_old, fresh_start]\n")
    out = tmp_path / "out.csv"
    done = run(site, "-m", "ctxsim", "evaluate", "--env", str(spec), "--policy", "only:plugin_keep_last",
               "--policy", "plugin-first-valid", "--names", "mild-overflow", "--seeds", "1", "--out", str(out),
               "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = {r["policy"]: r for r in csv.DictReader(out.open())}
    assert set(rows) == {"only:plugin_keep_last", "plugin-first-valid"}
    assert rows["only:plugin_keep_last"]["chain"] == "plugin_keep_last"
    assert rows["plugin-first-valid"]["chain"].split(">")[0] == "plugin_keep_last"  # its first valid action


def test_sweep_and_process_pool_workers_load_the_plugins(site, tmp_path):
    (site / "probe.py").write_text(textwrap.dedent("""
        import os
        from ctxsim.strategies import list_strategies

        def registry(_):
            return os.getpid(), "plugin_keep_last" in list_strategies()
        """))
    got = run_json(site, f"""
        import json, os, sys
        from ctxsim.lab.parallel import process_map
        from probe import registry
        if __name__ == "__main__":
            out = process_map(registry, [0, 1, 2, 3], 2)
            print(json.dumps({{"parent_loaded": {MODULE!r} in sys.modules, "parent": os.getpid(), "workers": out}}))
        """, tmp_path)
    assert not got["parent_loaded"]  # the workers loaded the plugin themselves
    assert got["parent"] not in {pid for pid, _ in got["workers"]}
    assert [seen for _, seen in got["workers"]] == [True] * 4

    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(textwrap.dedent("""
        name: plugin
        policies: [only:plugin_keep_last, plugin-first-valid]
        scenarios: {names: [mild-overflow, local-14b-floor]}
        seeds: 1
        env_config: {actions: [plugin_keep_last, summarize_old, fresh_start]}
        """))
    done = run(site, "-m", "ctxsim", "sweep", str(sweep), "--workers", "2", "--out", str(tmp_path / "sweep"), "--quiet",
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader((tmp_path / "sweep" / "results.csv").open()))
    assert sorted((r["policy"], r["scenario"]) for r in rows) == [
        ("only:plugin_keep_last", "local-14b-floor"), ("only:plugin_keep_last", "mild-overflow"),
        ("plugin-first-valid", "local-14b-floor"), ("plugin-first-valid", "mild-overflow"),
    ]
    assert all(r["chain"].split(">")[0] == "plugin_keep_last" for r in rows)


BROKEN = {
    "import error": ("raise RuntimeError('boom in the plugin')\n", "RuntimeError: boom in the plugin"),
    "strategy id taken": (PLUGIN.replace('id = "plugin_keep_last"', 'id = "summarize"'),
                          "strategy id 'summarize' registered twice"),
    "policy name taken": (PLUGIN.replace('register_policy("plugin-first-valid")', 'register_policy("random")'),
                          "policy name 'random' registered twice"),
    "embedder id taken": (PLUGIN.replace('register_embedder("plugin-constant"', 'register_embedder("hashed-tfidf"'),
                          "embedder 'hashed-tfidf' is already registered"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_plugin_is_one_line_naming_it_and_exit_2(tmp_path, case):
    source, cause = BROKEN[case]
    site = tmp_path / "site"
    install(site, {f"{MODULE}.py": source})
    out = tmp_path / "out.csv"
    for command in (["strategies"], ["evaluate", "--policy", "random", "--names", "mild-overflow", "--out", str(out)]):
        done = run(site, "-m", "ctxsim", *command, cwd=tmp_path)
        assert done.returncode == 2, command
        assert done.stdout == ""
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith("ctxsim: error: plugin 'test-plugin'"), command  # not a config key's error
        assert f"module {MODULE}" in lines[0] and f"distribution {DISTRIBUTION} 0.1" in lines[0]
        assert cause in lines[0]
    assert not out.exists()


def test_a_broken_plugin_fails_every_later_lookup_too(tmp_path):
    site = tmp_path / "site"
    install(site, {f"{MODULE}.py": BROKEN["import error"][0]})
    got = run_json(site, """
        import json
        from ctxsim.errors import PluginError
        from ctxsim.relevance import get_embedder
        from ctxsim.strategies import list_strategies
        failures = []
        for lookup in (list_strategies, get_embedder, list_strategies):
            try:
                lookup()
            except PluginError as exc:
                failures.append(str(exc))
        print(json.dumps(failures))
        """, tmp_path)
    assert len(got) == 3 and len(set(got)) == 1
    assert "boom in the plugin" in got[0]


def test_the_pool_digest_covers_the_plugins_code_and_version(tmp_path):
    """A plugin as a package: the entry point names one module, the strategy lives in
    a sibling module; editing either's code changes the digest, a comment does not."""
    site = tmp_path / "site"
    package = {
        "ctxsim_test_pkg/__init__.py": "",
        "ctxsim_test_pkg/plugin.py": "from . import strategies  # noqa: F401  (registers)\n",
        "ctxsim_test_pkg/strategies.py": PLUGIN,
    }
    install(site, package, entry_value="ctxsim_test_pkg.plugin")

    def digest() -> str:
        return run_json(site, "import json\nfrom ctxsim.lab.pool import source_digest\nprint(json.dumps(source_digest()))",
                        tmp_path)

    original = digest()
    strategies = site / "ctxsim_test_pkg" / "strategies.py"
    strategies.write_text(strategies.read_text().replace("A ctxsim plugin for the tests.", "Another docstring.") + "# a comment\n")
    assert digest() == original  # syntax trees: comments and layout do not count
    strategies.write_text(strategies.read_text().replace("Field(4, ge=1)", "Field(5, ge=1)"))
    edited = digest()
    assert edited != original
    install(site, package | {"ctxsim_test_pkg/strategies.py": strategies.read_text()}, entry_value="ctxsim_test_pkg.plugin",
            version="0.2")
    upgraded = digest()
    assert upgraded not in (original, edited)
    without = run_json(None, "import json\nfrom ctxsim.lab.pool import source_digest\nprint(json.dumps(source_digest()))",
                       tmp_path)
    assert without not in (original, edited)

    # a file of the package that is no Python this interpreter parses counts by its bytes
    template = site / "ctxsim_test_pkg" / "template.py"
    template.write_text("{{ strategy_name }} = 1\n")
    with_template = digest()
    assert with_template != upgraded
    template.write_text("{{ other_name }} = 1\n")
    assert digest() != with_template
