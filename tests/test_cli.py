"""CLI-wide checks: bad input to any subcommand is one line on stderr and exit code 2,
with no traceback and no partial output; names read from files never lead a write
outside the output folder the user named; the benchmark command runs.

Decided here: an ``--out`` path is the user's own choice and is honoured as given
(``a/../b`` is the folder ``b``); a name that comes from an input (a scenario,
experiment or sweep name) is a single path component, so the files named after
it stay inside that folder.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ctxsim.lab.cli import main

REPO = Path(__file__).resolve().parent.parent
SCENARIO = REPO / "data" / "scenarios" / "mild-overflow.yaml"
EXPERIMENT = """name: {name}
algo: MaskablePPO
env: {env}
train_scenarios: [mild-overflow]
eval_scenarios: [chat-10k]
timesteps: 64
n_envs: 1
hyperparams: {hyperparams}
"""
TINY_SWEEP = f"""name: tiny
policies: [seed-chain]
scenarios: {{suite: {SCENARIO}}}
seeds: 1
"""


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A scratch folder as the working directory, with a few bad inputs in it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    (tmp_path / "not_a_log.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    (tmp_path / "no_columns.csv").write_text("policy,scenario\nrandom,chat-10k\n")
    (tmp_path / "bad.yaml").write_text("name: [unclosed\n")
    (tmp_path / "stray.zip").write_bytes(b"not a model")  # a model zip outside any run folder
    run = tmp_path / "run_without_model"  # a run folder whose best model is gone
    run.mkdir()
    (run / "config.yaml").write_text("experiment: {algo: MaskablePPO}\n")
    (run / "final_model.zip").write_bytes(b"not a model")
    env = REPO / "envs" / "default.yaml"
    for name, body in {
        "escape": EXPERIMENT.format(name="../escape", env=env, hyperparams="{}"),
        "hyper": EXPERIMENT.format(name="hyper", env=env, hyperparams="{n_stepz: 8}"),
        "hyper_seed": EXPERIMENT.format(name="x", env=env, hyperparams="{seed: 3}"),
        "negative_rate": EXPERIMENT.format(name="x", env=env, hyperparams="{learning_rate: -0.001}"),
        "no_train": EXPERIMENT.format(name="x", env=env, hyperparams="{}").replace("[mild-overflow]", "[]"),
        "policy_kwargs": EXPERIMENT.format(name="pk", env=env, hyperparams="{policy_kwargs: {net_arch: wide}}"),
        "unknown_scenario": EXPERIMENT.format(name="x", env=env, hyperparams="{}").replace("chat-10k", "no-such"),
        # wrong values SB3 accepts at construction and fails on only once training runs
        "ent_auto": EXPERIMENT.format(name="x", env=env, hyperparams="{ent_coef: auto}"),
        "clip_text": EXPERIMENT.format(name="x", env=env, hyperparams="{clip_range: wide}"),
        "no_epochs": EXPERIMENT.format(name="x", env=env, hyperparams="{n_epochs: 0}"),
        "foo_policy": EXPERIMENT.format(name="x", env=env, hyperparams="{}") + "policy: FooPolicy\n",
        "env_bogus": EXPERIMENT.format(name="x", env=env, hyperparams="{}") + "env_config: {bogus: 1}\n",
        "text_steps": EXPERIMENT.format(name="x", env=env, hyperparams="{}").replace("timesteps: 64", "timesteps: '64'"),
        "huge_seed": EXPERIMENT.format(name="x", env=env, hyperparams="{}") + "seed: 4294967296\n",
        "nan_gamma": EXPERIMENT.format(name="x", env=env, hyperparams="{gamma: .nan}"),
        "gamma_over_one": EXPERIMENT.format(name="x", env=env, hyperparams="{gamma: 5}"),
        "negative_vf": EXPERIMENT.format(name="x", env=env, hyperparams="{vf_coef: -0.5}"),
        "inf_entropy": EXPERIMENT.format(name="x", env=env, hyperparams="{ent_coef: .inf}"),
        "negative_layer": EXPERIMENT.format(name="x", env=env, hyperparams="{policy_kwargs: {net_arch: {pi: [64], vf: [-1]}}}"),
        "wide_layers": EXPERIMENT.format(name="x", env=env, hyperparams="{policy_kwargs: {net_arch: [100000, 100000]}}"),
        "huge_buffer": EXPERIMENT.format(name="x", env=env, hyperparams="{buffer_size: 1000000000000}").replace(
            "algo: MaskablePPO", "algo: DQN"),
        "diverges": EXPERIMENT.format(name="x", env=env, hyperparams="{n_steps: 32, batch_size: 32, vf_coef: 1.0e+300}"),
        "warm_text": EXPERIMENT.format(name="x", env=env, hyperparams="{}") + "warm_start: {epochs: '20'}\n",
        "warm_inf": EXPERIMENT.format(name="x", env=env, hyperparams="{}") + "warm_start: {learning_rate: .inf}\n",
        "warm_teacher": EXPERIMENT.format(name="x", env=env, hyperparams="{}") + "warm_start: {teacher: 'rollout:seed-chain'}\n",
        "sweep_escape": TINY_SWEEP.replace("name: tiny", "name: ../escape"),
        "sweep_unknown_policy": TINY_SWEEP.replace("seed-chain", "no-such-policy"),
    }.items():
        (tmp_path / f"{name}.yaml").write_text(body)
    return tmp_path


#: (case id, argv, text the error line must hold)
BAD_INPUT = [
    ("scenarios: missing suite", ["scenarios", "list", "--suite", "missing.yaml"], "missing.yaml"),
    ("scenarios: empty folder", ["scenarios", "list", "--suite", "empty"], "no *.yaml"),
    ("scenarios: bad YAML", ["scenarios", "list", "--suite", "bad.yaml"], "invalid YAML"),
    ("generate: path as a name", ["generate", "--scenario", "../../etc/x", "--out", "out/c.json"], "unknown scenario"),
    ("plan: unknown strategy", ["plan", "--scenario", "chat-10k", "--strategy", "nope"], "unknown strategy 'nope'"),
    ("generate: missing suite", ["generate", "--scenario", "chat-10k", "--suite", "missing", "--out", "out/c.json"], "missing"),
    ("generate: out is a folder", ["generate", "--scenario", str(SCENARIO), "--out", "out"], "--out names a folder"),
    ("generate: negative seed", ["generate", "--scenario", str(SCENARIO), "--seed", "-1", "--out", "out/c.json"], "--seed"),
    ("generate: seed beyond numpy's", ["generate", "--scenario", str(SCENARIO), "--seed", str(2**32), "--out", "out/c.json"],
     "--seed must be in 0..4294967295"),
    ("realism: bad family YAML", ["realism", "--family", "bad.yaml", "--contexts", "1", "--out", "out/r.md"], "invalid YAML"),
    ("realism: empty corpus", ["realism", "--corpus", "empty", "--contexts", "1", "--out", "out/r.md"], "no *.jsonl"),
    ("realism: no contexts", ["realism", "--contexts", "0", "--out", "out/r.md"], "--contexts"),
    ("train: missing file", ["train", "missing.yaml", "--out", "out"], "missing.yaml"),
    ("train: bad YAML", ["train", "bad.yaml", "--out", "out"], "invalid YAML"),
    ("train: name with a path", ["train", "escape.yaml", "--out", "out"], "name"),
    ("train: unknown hyperparameter", ["train", "hyper.yaml", "--out", "out", "--quiet"],
     "key 'hyperparams.n_stepz': MaskablePPO has no hyperparameter 'n_stepz'"),
    ("train: a hyperparameter training sets", ["train", "hyper_seed.yaml", "--out", "out", "--quiet"],
     "key 'hyperparams.seed': is set by training itself"),
    ("train: negative learning rate", ["train", "negative_rate.yaml", "--out", "out", "--quiet"],
     "key 'hyperparams.learning_rate': must be >= 0 (got -0.001)"),
    ("train: no training scenarios", ["train", "no_train.yaml", "--out", "out", "--quiet"],
     "key 'train_scenarios': needs at least 1 item(s) (got [])"),
    ("train: bad policy_kwargs", ["train", "policy_kwargs.yaml", "--out", "out", "--quiet"], "hyperparams"),
    ("train: unknown eval scenario", ["train", "unknown_scenario.yaml", "--out", "out"], "no-such"),
    ("train: ent_coef auto", ["train", "ent_auto.yaml", "--out", "out", "--quiet"], "key 'hyperparams.ent_coef'"),
    ("train: clip_range text", ["train", "clip_text.yaml", "--out", "out", "--quiet"], "key 'hyperparams.clip_range'"),
    ("train: zero epochs", ["train", "no_epochs.yaml", "--out", "out", "--quiet"], "key 'hyperparams.n_epochs': must be >= 1"),
    ("train: unknown policy class", ["train", "foo_policy.yaml", "--out", "out", "--quiet"], "key 'policy'"),
    ("train: unknown env_config key", ["train", "env_bogus.yaml", "--out", "out"], "key 'env_config.bogus'"),
    ("train: timesteps as text", ["train", "text_steps.yaml", "--out", "out"], "key 'timesteps'"),
    ("train: seed beyond numpy's", ["train", "huge_seed.yaml", "--out", "out"], "key 'seed'"),
    ("train: NaN gamma", ["train", "nan_gamma.yaml", "--out", "out", "--quiet"], "key 'hyperparams.gamma': must be a finite"),
    ("train: gamma above 1", ["train", "gamma_over_one.yaml", "--out", "out", "--quiet"], "key 'hyperparams.gamma': must be in [0, 1]"),
    ("train: negative vf_coef", ["train", "negative_vf.yaml", "--out", "out", "--quiet"], "key 'hyperparams.vf_coef': must be >= 0"),
    ("train: infinite ent_coef", ["train", "inf_entropy.yaml", "--out", "out", "--quiet"], "key 'hyperparams.ent_coef'"),
    ("train: negative layer", ["train", "negative_layer.yaml", "--out", "out", "--quiet"],
     "key 'hyperparams.policy_kwargs.net_arch.vf[0]': a layer width"),
    ("train: layers too wide", ["train", "wide_layers.yaml", "--out", "out", "--quiet"], "net_arch[0]': a layer width"),
    ("train: replay buffer beyond memory", ["train", "huge_buffer.yaml", "--out", "out", "--quiet"],
     "DQN rejects the hyperparams/policy"),
    ("train: training diverges", ["train", "diverges.yaml", "--out", "out", "--quiet"], "training diverged after 32 steps"),
    ("train: warm start epochs as text", ["train", "warm_text.yaml", "--out", "out", "--quiet"], "key 'warm_start.epochs'"),
    ("train: infinite warm start rate", ["train", "warm_inf.yaml", "--out", "out", "--quiet"], "key 'warm_start.learning_rate'"),
    ("train: a rollout teacher off the stream", ["train", "warm_teacher.yaml", "--out", "out", "--quiet"],
     "key 'warm_start.teacher': warm_start.teacher 'rollout:seed-chain' needs ConversationStream-v0"),
    ("train: zero timesteps", ["train", "hyper.yaml", "--timesteps", "0", "--out", "out"], "--timesteps must be >= 1"),
    ("demo: zero timesteps", ["demo", "--quick", "--timesteps", "0", "--out", "out/demo", "--quiet"], "--timesteps must be >= 1"),
    ("demo: negative timesteps", ["demo", "--timesteps", "-5", "--out", "out/demo", "--quiet"], "--timesteps must be >= 1"),
    ("evaluate: unknown policy", ["evaluate", "--policy", "nope", "--out", "out/r.csv"], "unknown policy 'nope'"),
    ("evaluate: zero seeds", ["evaluate", "--policy", "random", "--seeds", "0", "--out", "out/r.csv"], "--seeds"),
    ("evaluate: negative first seed", ["evaluate", "--policy", "random", "--first-seed", "-1", "--out", "out/r.csv"], "--first-seed"),
    ("evaluate: seeds beyond any range", ["evaluate", "--policy", "random", "--seeds", str(10**20), "--out", "out/r.csv"],
     "--seeds must be in 1..100,000"),
    ("evaluate: markdown is a folder", ["evaluate", "--policy", "random", "--out", "out/r.csv", "--markdown", "empty"],
     "--markdown names a folder"),
    ("evaluate: log and out the same file", ["evaluate", "--policy", "random", "--out", "out/r.csv", "--log", "out/r.csv"],
     "name the same file"),
    ("evaluate: missing env spec", ["evaluate", "--policy", "random", "--env", "missing.yaml", "--out", "out/r.csv"], "missing.yaml"),
    ("evaluate: empty suite", ["evaluate", "--policy", "random", "--scenarios", "empty", "--out", "out/r.csv"], "no *.yaml"),
    ("evaluate: not a log", ["evaluate", "--from-log", "not_a_log.jsonl"], "not_a_log.jsonl"),
    ("evaluate: no out", ["evaluate", "--policy", "random"], "--out"),
    ("evaluate: split without experiment", ["evaluate", "--policy", "random", "--split", "train", "--out", "out/r.csv"],
     "--split needs --experiment"),
    ("evaluate: unknown reward profile", ["evaluate", "--policy", "random", "--reward", "nope", "--out", "out/r.csv"],
     "ctxsim: error: key 'reward': --reward must be one of seed001, grounded, got 'nope'"),
    ("evaluate: unknown reward profile on an experiment", ["evaluate", "--policy", "random", "--experiment", "hyper.yaml",
                                                           "--reward", "nope", "--out", "out/r.csv"],
     "ctxsim: error: key 'reward': --reward must be one of seed001, grounded, got 'nope'"),
    ("evaluate: a run folder without its model", ["evaluate", "--policy", "run_without_model", "--out", "out/r.csv"],
     "run_without_model: no best_model.zip in this training run folder"),
    ("evaluate: a model zip outside a run", ["evaluate", "--policy", "stray.zip", "--out", "out/r.csv"],
     "config.yaml: not found: the model is not in a ctxsim training run folder"),
    ("evaluate: experiment and env", ["evaluate", "--policy", "random", "--experiment", "hyper.yaml",
                                      "--env", "envs/default.yaml", "--out", "out/r.csv"], "drop --env"),
    ("evaluate: a name outside the split", ["evaluate", "--policy", "random", "--experiment", "hyper.yaml",
                                            "--names", "mild-overflow", "--out", "out/r.csv"], "unknown scenario names"),
    ("evaluate: experiment's unknown scenario", ["evaluate", "--policy", "random", "--experiment", "unknown_scenario.yaml",
                                                 "--out", "out/r.csv"], "no-such"),
    ("export: no run", ["export", "missing", "--out", "out/export"], "missing"),
    ("export: not a run", ["export", "empty", "--out", "out/export"], "not a training run"),
    ("sweep: missing file", ["sweep", "missing.yaml", "--out", "out"], "missing.yaml"),
    ("sweep: bad YAML", ["sweep", "bad.yaml", "--out", "out"], "invalid YAML"),
    ("sweep: name with a path", ["sweep", "sweep_escape.yaml", "--out", "out"], "name"),
    ("sweep: unknown policy", ["sweep", "sweep_unknown_policy.yaml", "--out", "out"], "no-such-policy"),
    ("sweep: zero workers", ["sweep", str(REPO / "experiments" / "regression.yaml"), "--workers", "0", "--out", "out"], "workers"),
    ("sweep: bad baseline", ["sweep", str(REPO / "experiments" / "regression.yaml"), "--baseline", "no_columns.csv",
                             "--out", "out"], "missing columns"),
    ("report: missing results", ["report", "missing", "--out", "out"], "missing"),
    ("report: bad results", ["report", "no_columns.csv", "--out", "out"], "no_columns.csv"),
    ("pool: missing env spec", ["pool", "--env", "missing.yaml"], "missing.yaml"),
    ("pool: bad YAML", ["pool", "--env", "bad.yaml"], "invalid YAML"),
    ("pool: unknown experiment scenario", ["pool", "--experiment", "unknown_scenario.yaml"], "no-such"),
    ("pool: zero workers", ["pool", "--workers", "0"], "workers"),
    ("compact: no export", ["compact", "missing", "not_a_log.jsonl", "--limit", "100", "--out", "out/c.jsonl"], "missing"),
    ("compact: not an export", ["compact", "empty", "not_a_log.jsonl", "--limit", "100", "--out", "out/c.jsonl"],
     "no policy/policy.json here"),
    ("compact: zero limit", ["compact", "empty", "not_a_log.jsonl", "--limit", "0", "--out", "out/c.jsonl"],
     "--limit must be in 1..1000000000, got 0"),
    ("compact: out is a folder", ["compact", "empty", "not_a_log.jsonl", "--limit", "100", "--out", "empty"],
     "--out names a folder"),
    ("compact: artifacts and out the same file", ["compact", "empty", "not_a_log.jsonl", "--limit", "100",
                                                  "--out", "out/c.json", "--artifacts", "out/c.json"], "name the same file"),
    ("tune: missing file", ["tune", "missing.yaml", "--out", "out"], "missing.yaml"),
    ("tune: bad YAML", ["tune", "bad.yaml", "--out", "out"], "invalid YAML"),
    ("tune: negative workers", ["tune", str(REPO / "experiments" / "tune_maskable_ppo.yaml"), "--workers", "-1", "--out", "out"],
     "key 'workers': --workers must be >= 1, got -1"),
]


@pytest.mark.parametrize("argv,needle", [case[1:] for case in BAD_INPUT], ids=[case[0] for case in BAD_INPUT])
def test_bad_input_is_one_line_exit_2_and_no_output(work, capsys, argv, needle):
    (work / "out").mkdir()  # an empty output folder: it must stay empty
    capsys.readouterr()
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("ctxsim: error: "), captured.err
    assert needle in captured.err and "Traceback" not in captured.err
    assert not any((work / "out").rglob("*")), sorted((work / "out").rglob("*"))
    assert not (work.parent / "escape").exists()
    inputs = {"empty", "not_a_log.jsonl", "no_columns.csv", "bad.yaml", "stray.zip", "run_without_model", "out"} | {
        p.name for p in work.glob("*.yaml")}
    assert {p.name for p in work.iterdir()} <= inputs  # nothing written beside the inputs either


def test_an_output_never_replaces_an_input_file(work, capsys):
    """An output option that names the command's input file is refused before any
    work, and the input stays as it was."""
    (work / "mild.yaml").write_bytes(SCENARIO.read_bytes())
    for argv, needle in (
        (["generate", "--scenario", "mild.yaml", "--out", "./mild.yaml"], "key 'out': --out and --scenario name the same file: mild.yaml"),
        (["compact", "empty", "not_a_log.jsonl", "--limit", "100", "--out", "not_a_log.jsonl"],
         "key 'out': --out and the input file name the same file: not_a_log.jsonl"),
        (["compact", "empty", "not_a_log.jsonl", "--limit", "100", "--out", "c.jsonl", "--artifacts", "not_a_log.jsonl"],
         "key 'artifacts': --artifacts and the input file name the same file: not_a_log.jsonl"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("ctxsim: error: ") and needle in err, err
    assert (work / "mild.yaml").read_bytes() == SCENARIO.read_bytes()
    assert (work / "not_a_log.jsonl").read_text() == '{"step": 1}\n{"step": 2}\n'
    assert not (work / "c.jsonl").exists()


def test_train_refuses_a_negative_seed_before_training_any(tmp_path, capsys):
    code = main(["train", str(REPO / "experiments" / "maskable_ppo_seed001.yaml"), "--seed", "3", "-1", "--out", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"--seed must be in 0..{2**32 - 1}, got -1" in err
    assert not (tmp_path / "runs").exists()


def test_every_subcommand_is_covered():
    from ctxsim.lab.cli import build_parser

    commands = set(build_parser()._subparsers._group_actions[0].choices)
    covered = {case[1][0] for case in BAD_INPUT} | {"strategies", "demo"}  # these two read no input file
    assert commands <= covered, commands - covered


@pytest.mark.parametrize("argv", [["evaluate", "--seeds", "abc"], ["generate", "--out", "x.json"], ["no-such-command"]])
def test_usage_errors_exit_2_without_traceback(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("ctxsim")


def run_cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ctxsim", *argv], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_real_process_prints_one_line_and_exits_2(tmp_path):
    (tmp_path / "tag.yaml").write_text("!!python/object/apply:os.system ['touch PWNED']\n")
    for argv in (["train", "tag.yaml", "--out", "out"], ["evaluate", "--policy", "random", "--env", "tag.yaml", "--out", "out/r.csv"],
                 ["generate", "--scenario", "tag.yaml", "--out", "out/c.json"]):
        proc = run_cli(*argv, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("ctxsim: error: tag.yaml: invalid YAML"), proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tag.yaml"]


# ---- where outputs go ------------------------------------------------------------------------
def test_out_with_dot_dot_parts_is_the_folder_it_names(work, capsys):
    (work / "tiny.yaml").write_text(TINY_SWEEP)
    assert main(["sweep", "tiny.yaml", "--out", "a/../b", "--quiet", "--workers", "1"]) == 0
    assert sorted(p.name for p in (work / "b").iterdir()) == ["results.csv", "summary.md", "sweep.yaml", "transitions.jsonl"]
    assert not (work / "a").exists() and not list(work.glob(".*"))  # no scratch folder left behind
    assert main(["evaluate", "--policy", "seed-chain", "--scenarios", str(SCENARIO), "--seeds", "1",
                 "--out", "c/../r.csv", "--quiet"]) == 0
    assert len(pd.read_csv(work / "r.csv")) == 1 and not (work / "c").exists()
    assert main(["evaluate", "--policy", "seed-chain", "--scenarios", str(SCENARIO), "--seeds", "2", "--first-seed", "5",
                 "--out", "later.csv", "--quiet"]) == 0
    assert list(pd.read_csv(work / "later.csv").seed) == [5, 6]
    capsys.readouterr()


def test_evaluate_runs_the_scenarios_of_an_experiments_split(work, capsys):
    (work / "split.yaml").write_text(EXPERIMENT.format(name="split", env=REPO / "envs" / "default.yaml", hyperparams="{}"))
    for split, expected in ((None, ["chat-10k"]), ("train", ["mild-overflow"]), ("validation", ["chat-10k"])):
        argv = ["evaluate", "--policy", "seed-chain", "--experiment", "split.yaml", "--seeds", "1", "--out", "r.csv", "--quiet"]
        assert main(argv + (["--split", split] if split else [])) == 0
        assert list(pd.read_csv(work / "r.csv").scenario) == expected, split
    argv = ["evaluate", "--policy", "seed-chain", "--experiment", "split.yaml", "--split", "train", "--names", "mild-overflow",
            "--seeds", "1", "--out", "r.csv", "--quiet"]
    assert main(argv) == 0 and list(pd.read_csv(work / "r.csv").scenario) == ["mild-overflow"]
    capsys.readouterr()


def test_evaluate_scores_under_the_reward_profile_it_is_given(work, capsys):
    """``--reward`` replaces the env's reward (with or without ``--experiment``): the
    same policy on the same contexts, another profile and, probes weighted, another reward."""
    (work / "split.yaml").write_text(EXPERIMENT.format(name="split", env=REPO / "envs" / "default.yaml", hyperparams="{}"))
    frames = {}
    for profile in (None, "grounded"):
        for how in (["--experiment", "split.yaml"], ["--scenarios", str(SCENARIO)]):
            argv = ["evaluate", "--policy", "seed-chain", *how, "--seeds", "2", "--out", "r.csv", "--quiet"]
            assert main(argv + (["--reward", profile] if profile else [])) == 0
            frames[profile, how[0]] = pd.read_csv(work / "r.csv")
    for how in ("--experiment", "--scenarios"):
        default, grounded = frames[None, how], frames["grounded", how]
        assert set(default.reward_profile) == {"seed001"} and set(grounded.reward_profile) == {"grounded"}
        assert list(default.tokens_after) == list(grounded.tokens_after)  # the same breaks
        assert list(default.reward) != list(grounded.reward)
    capsys.readouterr()


def test_evaluate_compare_pairs_reward_probes_and_tokens_cut(work, capsys):
    argv = ["evaluate", "--policy", "seed-chain", "--policy", "only:drop", "--scenarios", str(SCENARIO), "--seeds", "3",
            "--out", "r.csv", "--quiet", "--compare", "seed-chain", "--markdown", "r.md"]
    assert main(argv) == 0
    df = pd.read_csv(work / "r.csv").groupby("policy")[["reward", "probe_score", "reduction_pct"]].mean()
    row = next(line for line in (work / "r.md").read_text().splitlines() if line.startswith("| only:drop |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    for cell, column, digits in zip((cells[1], cells[3], cells[4]), ("reward", "probe_score", "reduction_pct"), (4, 3, 1)):
        assert cell.startswith(f"{df.loc['seed-chain', column] - df.loc['only:drop', column]:+.{digits}f} [")
    capsys.readouterr()


def test_generate_to_stdout_writes_no_file(work, capsys):
    assert main(["generate", "--scenario", str(SCENARIO), "--out", "-"]) == 0
    assert capsys.readouterr().out.startswith("{")
    assert not (work / "-").exists()


def test_experiment_names_are_one_path_component():
    from ctxsim.lab.train import ExperimentConfig

    with pytest.raises(Exception, match="name"):
        ExperimentConfig(name="a/b", algo="PPO")
    assert ExperimentConfig(name="run.v2_final-1", algo="PPO").name == "run.v2_final-1"


# ---- the benchmark command ----------------------------------------------------------------------
def test_bench_quick_writes_a_table_with_ratios(tmp_path, capsys):
    from benchmarks.bench import main as bench

    out = tmp_path / "bench.md"
    assert bench(["--quick", "--only", "tokens", "--only", "window", "--out", str(out)]) == 0
    text = out.read_text()
    assert "| CPU |" in text and "| numpy |" in text and "| torch |" in text
    assert "Generated by `python -m benchmarks --quick --only tokens --only window` in" in text
    rows = [line for line in text.splitlines() if line.startswith("| tokens |") or line.startswith("| window |")]
    assert len(rows) == 5 and all(line.split("|")[5].strip().endswith("x") for line in rows)
    assert "window" in capsys.readouterr().out


def test_bench_rejects_unknown_names_and_bad_steps(capsys):
    from benchmarks.bench import main as bench

    for argv in (["--only", "nope"], ["--only", "soak", "--steps", "0"]):
        with pytest.raises(SystemExit) as exc:
            bench(argv)
        assert exc.value.code == 2


def test_readme_lists_every_command_and_the_registry_strategy_table():
    """README.md stays true: a row per CLI command naming every one of its options,
    and the strategy table's ids, order, ranks, seeds, P1 promises and descriptions
    are the registry's."""
    import argparse
    import re

    from ctxsim.lab.cli import build_parser
    from ctxsim.strategies import describe_strategies

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    subparsers = build_parser()._subparsers._group_actions[0].choices
    documented = set(re.findall(r"^\| `ctxsim ([a-z]+)", readme, flags=re.MULTILINE))
    assert documented == set(subparsers)
    for command, parser in subparsers.items():
        rows = " ".join(re.findall(rf"^\| `ctxsim {command}\b(.*?)` \|", readme, flags=re.MULTILINE))
        nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        actions = [a for sub in nested for p in sub.choices.values() for a in p._actions] + parser._actions
        options = {o for a in actions for o in a.option_strings if o.startswith("--") and o != "--help"}
        missing = sorted(o for o in options if not re.search(rf"{o}(?![-a-z])", rows))
        assert not missing, f"README's ctxsim {command} rows leave out {missing}"
    rows = re.findall(
        r"^\| `([a-z_]+)` \| (\d) \| (\d+) \| ([\d,]*) ?\| (\d{3}) \| (yes)? ?\| (.+?) \| .+ \|$", readme, flags=re.MULTILINE
    )
    assert rows == [
        (r["id"], str(r["rank"]), str(r["priority"]), "" if r["max_tokens"] is None else f"{r['max_tokens']:,}",
         r["seed"], "yes" if r["keeps_p1"] else "", r["summary"])
        for r in describe_strategies()
    ]


def test_readme_documents_every_experiment_key():
    import re

    from ctxsim.lab.train import EXTENDS_KEY, ExperimentConfig

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Experiment files"):readme.index("## Strategies")]
    documented = re.findall(r"^\| `([a-z_]+)` \| .+? \| (.+) \|$", section, flags=re.MULTILINE)
    fields = {name: f.description for name, f in ExperimentConfig.model_fields.items() if name != "source"}
    assert dict(documented) == dict([EXTENDS_KEY], **fields)


@pytest.mark.parametrize("argv,needle", [
    (["train", "--seed", "abc", "x.yaml"], "invalid int value: 'abc'"),
    (["evaluate", "--split", "foo"], "invalid choice: 'foo'"),
    (["no-such-command"], "invalid choice: 'no-such-command'"),
    ([], "required: command"),
    (["pool", "--env", "a.yaml", "--experiment", "b.yaml"], "not allowed with argument --env"),
])
def test_command_line_errors_are_one_line_exit_2(capsys, argv, needle):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and err.startswith("ctxsim: error: ") and needle in err



def test_from_log_of_an_empty_log_says_so_without_a_table_of_zeros(tmp_path, capsys):
    log = tmp_path / "empty.jsonl"
    log.write_bytes(b"")
    assert main(["evaluate", "--from-log", str(log)]) == 0
    out = capsys.readouterr().out
    assert "0 records, 0 finished episodes" in out and "mean reward" not in out


def test_scenarios_list_names_a_missing_transcript_file(tmp_path, capsys):
    (tmp_path / "t.yaml").write_text("name: t\ntranscript: nope.jsonl\nlimit: 4000\n")
    assert main(["scenarios", "list", "--suite", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "key 'transcript'" in err and "nope.jsonl" in err


def test_evaluate_notes_when_too_few_seeds_make_intervals_unreliable(tmp_path, capsys):
    argv = ["evaluate", "--policy", "seed-chain", "--scenarios", str(SCENARIO), "--out", str(tmp_path / "r.csv"), "--quiet"]
    assert main(argv + ["--seeds", "2"]) == 0
    assert "2 seed(s) per scenario" in capsys.readouterr().out
    assert main(argv + ["--seeds", "5"]) == 0
    assert "seed(s) per scenario" not in capsys.readouterr().out
