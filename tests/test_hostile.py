"""Hostile paths and files, and runs killed halfway (issue 24).

Each case is what a user (or an attacker) can hand the command line: an output that
is a FIFO or a socket, a name longer than the file system allows, inputs of hundreds
of megabytes, a notes file passed as ``--log``, a YAML alias bomb under free-form
keys, a run killed with SIGKILL and run again, an exported policy whose weights hold
a pickle, a missing optional extra. The command must refuse before any work with one
line and exit code 2, never modify what it does not own, and leave outputs an
uninterrupted run would have left.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from ctxsim.lab.cli import main
from ctxsim.errors import PolicyError
from ctxsim.transitions import read_transitions
from ctxsim.validation import INPUT_LIMITS, MAX_VALUES

EVALUATE = ["evaluate", "--policy", "random", "--policy", "seed-chain", "--names", "chat-10k", "mild-overflow",
            "--seeds", "2", "--quiet"]


def fails_cleanly(argv: list[str], capsys, *needles: str) -> str:
    """Run the CLI: exit 2, one line on stderr holding every needle; that line."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("ctxsim: error:"), err
    for needle in needles:
        assert needle in err, err
    return err


# ---- outputs that are not regular files ----------------------------------------------------
def test_output_fifo_is_refused_and_kept(tmp_path, capsys):
    fifo = tmp_path / "out.csv"
    os.mkfifo(fifo)
    fails_cleanly(["generate", "--scenario", "chat-10k", "--out", str(fifo)], capsys, "FIFO", "out.csv")
    fails_cleanly([*EVALUATE, "--out", str(fifo)], capsys, "FIFO")
    assert fifo.is_fifo()


def test_output_socket_is_refused_and_kept(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a short relative path: AF_UNIX addresses are at most 107 bytes
    server = socket.socket(socket.AF_UNIX)
    server.bind("log.jsonl")
    try:
        fails_cleanly([*EVALUATE, "--out", "r.csv", "--log", "log.jsonl"], capsys, "socket", "log.jsonl")
        fails_cleanly(["report", "results", "--out", "log.jsonl"], capsys, "socket", "not a folder")
        assert Path("log.jsonl").is_socket() and not Path("r.csv").exists()
    finally:
        server.close()


def test_output_name_too_long_is_refused_before_work(tmp_path, capsys):
    long_name = tmp_path / ("r" * 300 + ".csv")
    fails_cleanly([*EVALUATE, "--out", str(long_name)], capsys, "304 bytes long", "allows 255")
    assert list(tmp_path.iterdir()) == []
    fails_cleanly(["train", "experiments/maskable_ppo_seed001.yaml", "--out", str(tmp_path / ("d" * 300))], capsys, "bytes long")


def test_a_name_near_the_limit_still_writes_atomically(tmp_path, capsys):
    out = tmp_path / ("c" * 250 + ".json")  # its temporary would be longer than 255 bytes if it kept the whole name
    assert main(["generate", "--scenario", "chat-10k", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["units"]


# ---- inputs beyond their limit ----------------------------------------------------------------
def sparse(path: Path, size: int) -> Path:
    """A file of ``size`` bytes that takes no disk space (and no time to write)."""
    with open(path, "wb") as fh:
        fh.truncate(size)
    return path


def test_a_200_mb_transcript_is_refused_before_it_is_read(tmp_path, capsys):
    sparse(tmp_path / "chat.jsonl", 200 * 1024 * 1024)
    (tmp_path / "big.yaml").write_text("name: big\ntranscript: chat.jsonl\nlimit: 5000\n")
    out = tmp_path / "c.json"
    fails_cleanly(["generate", "--scenario", str(tmp_path / "big.yaml"), "--out", str(out)], capsys,
                  "chat.jsonl", "over the limit for a transcript", f"{INPUT_LIMITS['transcript']:,}")
    assert not out.exists()


def test_a_200_mb_scenario_yaml_is_refused_before_it_is_parsed(tmp_path, capsys):
    suite = sparse(tmp_path / "suite.yaml", 200 * 1024 * 1024)
    fails_cleanly(["scenarios", "list", "--suite", str(suite)], capsys, "suite.yaml", "over the limit for a YAML file")
    fails_cleanly([*EVALUATE[:3], "--scenarios", str(suite), "--out", str(tmp_path / "r.csv")], capsys, "YAML file")


def test_an_input_fifo_is_refused_not_read(tmp_path, capsys):
    os.mkfifo(tmp_path / "suite.yaml")  # reading it would block for ever
    fails_cleanly(["scenarios", "list", "--suite", str(tmp_path / "suite.yaml")], capsys, "not a regular file")


def test_a_huge_log_is_refused_before_it_is_read(tmp_path, capsys):
    log = sparse(tmp_path / "big.jsonl", INPUT_LIMITS["transition log"] + 1)
    fails_cleanly(["evaluate", "--from-log", str(log)], capsys, "over the limit for a transition log")


def alias_bomb(indent: str) -> str:
    """YAML lines (indented) whose last alias, ``*l8``, expands to 10**9 values."""
    return "".join(f"{indent}l{i}: &l{i} [" + ", ".join([f"*l{i - 1}" if i else "x"] * 10) + "]\n" for i in range(9))


@pytest.mark.timeout(60)
def test_an_alias_bomb_under_hyperparams_is_refused(tmp_path, capsys):
    experiment = tmp_path / "bomb.yaml"
    experiment.write_text("name: bomb\nalgo: PPO\nhyperparams:\n" + alias_bomb("  ") + "  policy_kwargs: *l8\n")
    fails_cleanly(["train", str(experiment), "--timesteps", "8", "--out", str(tmp_path / "runs")], capsys,
                  "bomb.yaml", "hyperparams", f"more than {MAX_VALUES:,} values")
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(60)
def test_an_alias_bomb_under_an_env_spec_config_is_refused(tmp_path, capsys):
    spec = tmp_path / "env.yaml"
    spec.write_text("id: ctxsim/ContextOverflow-v0\nconfig:\n  bombs:\n" + alias_bomb("    ") + "    use: *l8\n")
    fails_cleanly([*EVALUATE[:3], "--env", str(spec), "--out", str(tmp_path / "r.csv")], capsys, "env.yaml", "config")


# ---- logs: never modify a foreign file; a killed run resumes ---------------------------------
def test_a_notes_file_given_as_log_is_never_modified(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"my notes\nthe last line, no newline")
    before = notes.read_bytes()
    fails_cleanly([*EVALUATE, "--out", str(tmp_path / "r.csv"), "--log", str(notes)], capsys,
                  "notes.txt", "not a ctxsim transition log")
    assert notes.read_bytes() == before and not (tmp_path / "r.csv").exists()


KILLER = textwrap.dedent("""
    import os, signal, sys
    import ctxsim.transitions as transitions
    from ctxsim.lab.cli import main

    written, limit = [], int(sys.argv[1])
    write = transitions.TransitionWriter.write

    def write_then_die(self, record):
        if len(written) == limit:  # half a line on disk, then SIGKILL: no cleanup runs
            self._fh.write(transitions.encode_record(record)[:30])
            self._fh.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        written.append(record)
        write(self, record)

    transitions.TransitionWriter.write = write_then_die
    main(sys.argv[2:])
""")


def killed(tmp_path: Path, after: int, argv: list[str]) -> None:
    """Run the CLI in a process that SIGKILLs itself while writing record ``after`` + 1."""
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    done = subprocess.run([sys.executable, str(script), str(after), *argv], cwd=tmp_path, capture_output=True)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()


def test_a_process_the_tests_start_imports_this_checkout(tmp_path, repo_root):
    """The killed runs above must run the code under test, also in a second checkout
    that shares the virtual environment (whose editable install points elsewhere)."""
    done = subprocess.run([sys.executable, "-c", "import ctxsim; print(ctxsim.__file__)"], cwd=tmp_path,
                          capture_output=True, text=True, check=True)
    assert Path(done.stdout.strip()).resolve() == repo_root / "ctxsim" / "__init__.py"


def test_a_rerun_after_sigkill_resumes_and_counts_each_episode_once(tmp_path, capsys):
    whole, log = tmp_path / "whole.jsonl", tmp_path / "log.jsonl"
    assert main([*EVALUATE, "--out", str(tmp_path / "w.csv"), "--log", str(whole)]) == 0
    records = len(read_transitions(whole))
    argv = [*EVALUATE, "--out", str(tmp_path / "r.csv"), "--log", str(log)]
    killed(tmp_path, records // 2, argv)
    assert 0 < len(read_transitions(log)) < records  # the killed run's records, a torn line after them

    assert main(argv) == 0
    capsys.readouterr()
    assert log.read_bytes() == whole.read_bytes()  # as if the run had never been killed
    assert main(["evaluate", "--from-log", str(log)]) == 0
    assert main(["evaluate", "--from-log", str(whole)]) == 0
    resumed, uninterrupted = capsys.readouterr().out.split("\n" + str(whole))
    assert f"{records} records, 8 finished episodes" in resumed
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no marker, no temporary left


def test_a_rerun_after_sigkill_with_another_command_is_refused(tmp_path, capsys):
    log = tmp_path / "log.jsonl"
    killed(tmp_path, 3, [*EVALUATE, "--out", str(tmp_path / "r.csv"), "--log", str(log)])
    before = log.read_bytes()
    fails_cleanly(["evaluate", "--policy", "greedy", "--names", "chat-10k", "--out", str(tmp_path / "g.csv"),
                   "--log", str(log), "--quiet"], capsys, "log.jsonl", "killed before it finished")
    assert log.read_bytes() == before


def test_an_overwrite_killed_halfway_leaves_no_temporary_on_the_next_run(tmp_path, capsys):
    log = tmp_path / "log.jsonl"
    argv = [*EVALUATE, "--out", str(tmp_path / "r.csv"), "--log", str(log), "--overwrite"]
    killed(tmp_path, 3, argv)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # what the kill left
    assert main(argv) == 0
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


# ---- the export format never unpickles -------------------------------------------------------
class Planted:
    """Unpickling this creates a file: proof that a pickle was loaded."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return open, (self.path, "w")


def hand_made_export(folder: Path, weight: np.ndarray) -> Path:
    """A minimal export directory (one identity layer) around ``weight``."""
    from ctxsim.episode import EpisodeSettings
    from ctxsim.observe import OBSERVATION_VERSION, ObservationConfig, feature_names

    settings = EpisodeSettings()
    config = ObservationConfig.of(settings)
    features = feature_names(config)
    policy = folder / "policy"
    policy.mkdir(parents=True)
    spec = {
        "format": "ctxsim-exported-policy", "format_version": 1, "name": "hand-made", "algorithm": "PPO", "source": {},
        "observation": {"version": OBSERVATION_VERSION, "config": config.model_dump(mode="json"), "features": features},
        "actions": list(settings.actions), "settings": {}, "normalization": None,
        "network": {"kind": "logits", "hidden": [], "activation": "identity",
                    "layers": [{"weight": "w0", "bias": "b0", "inputs": len(features), "outputs": len(settings.actions),
                                "activation": "identity"}]},
    }
    (policy / "policy.json").write_text(json.dumps(spec))
    np.savez(policy / "weights.npz", w0=weight, b0=np.zeros(len(settings.actions), dtype=np.float32))
    return folder


def test_policies_load_never_unpickles(tmp_path):
    from ctxsim.episode import EpisodeSettings
    from ctxsim.observe import ObservationConfig, feature_names
    from ctxsim.policies import load

    shape = (len(EpisodeSettings().actions), len(feature_names(ObservationConfig.of(EpisodeSettings()))))
    assert load(hand_made_export(tmp_path / "plain", np.zeros(shape, dtype=np.float32))).name  # the format loads
    planted = tmp_path / "PWNED"
    weight = np.empty(shape, dtype=object)
    weight[...] = Planted(str(planted))
    with pytest.raises(PolicyError, match="weights"):
        load(hand_made_export(tmp_path / "pickled", weight))
    assert not planted.exists()


def _damaged_weights(policy: Path, damage: str) -> None:
    """Damage the ``weights.npz`` of an export's ``policy/`` folder as a disk, a copy or a hand would."""
    file = policy / "weights.npz"
    good = file.read_bytes()
    if damage == "empty":
        file.write_bytes(b"")
    elif damage == "cut short":
        file.write_bytes(good[: len(good) // 2])
    elif damage == "flipped bytes":
        data = bytearray(good)
        for i in range(100, len(data) - 100, 7):
            data[i] ^= 0x5A
        file.write_bytes(bytes(data))
    elif damage == "flipped bytes, compressed":
        with np.load(file) as npz:
            arrays = {name: npz[name] for name in npz.files}
        np.savez_compressed(file, **arrays)
        data = bytearray(file.read_bytes())
        for i in range(100, len(data) - 200, 5):
            data[i] ^= 0x33
        file.write_bytes(bytes(data))
    elif damage == "one array":
        with file.open("wb") as fh:
            np.save(fh, np.zeros(3, dtype=np.float32))
    else:  # an array of another kind of value under the weight's name
        with np.load(file) as npz:
            arrays = {name: npz[name] for name in npz.files}
        arrays["w0"] = np.full(arrays["w0"].shape, {"text": "x", "bool": True, "complex": 1j}[damage])
        np.savez(file, **arrays)


@pytest.mark.parametrize("damage", ["empty", "cut short", "flipped bytes", "flipped bytes, compressed", "one array",
                                    "text", "bool", "complex"])
def test_a_damaged_weights_file_is_a_policy_error_naming_it(tmp_path, damage):
    from ctxsim.episode import EpisodeSettings
    from ctxsim.observe import ObservationConfig, feature_names
    from ctxsim.policies import load

    shape = (len(EpisodeSettings().actions), len(feature_names(ObservationConfig.of(EpisodeSettings()))))
    folder = hand_made_export(tmp_path / "export", np.zeros(shape, dtype=np.float32))
    _damaged_weights(folder / "policy", damage)
    with pytest.raises(PolicyError) as err:
        load(folder)
    assert err.value.source == str(folder / "policy" / "weights.npz")
    message = str(err.value)
    if damage in ("text", "bool", "complex"):
        assert err.value.key == "network.layers[0]" and "array 'w0' holds" in message and "expected floats" in message
    else:
        assert "cannot read the weights (" in message


def test_an_export_with_bad_settings_names_the_key_and_value(tmp_path):
    from ctxsim.episode import EpisodeSettings
    from ctxsim.observe import ObservationConfig, feature_names
    from ctxsim.policies import load

    shape = (len(EpisodeSettings().actions), len(feature_names(ObservationConfig.of(EpisodeSettings()))))
    folder = hand_made_export(tmp_path / "bad", np.zeros(shape, dtype=np.float32))
    spec_file = folder / "policy" / "policy.json"
    for settings, key, value in [({"max_steps": 0}, "settings.max_steps", "0"),
                                 ({"recovery_mode": "reboot"}, "settings.recovery_mode", "reboot"),
                                 ({"strategy_params": {"nope": {}}}, "settings.strategy_params.nope", "nope")]:
        spec_file.write_text(json.dumps({**json.loads(spec_file.read_text()), "settings": settings}))
        with pytest.raises(PolicyError) as err:
            load(folder)
        assert err.value.key == key and value in str(err.value) and err.value.source == str(spec_file)


@pytest.mark.parametrize("data", [b"cno_such_module_of_ctxsim\nThing\n.", b"\x80\x04X\x02\x00\x00\x00\xff\xfe.",
                                  b"\x80\x04\x95", b""], ids=["unknown-module", "bad-utf8", "cut-short", "empty"])
def test_a_damaged_vecnormalize_file_is_a_policy_error_naming_it(tmp_path, data):
    """A run's vecnormalize.pkl (SB3's pickle) that is damaged: whatever unpickling raises
    (ModuleNotFoundError, UnicodeDecodeError, ...) is one PolicyError naming the file."""
    from ctxsim.lab.runs import read_normalization

    (tmp_path / "vecnormalize.pkl").write_bytes(data)
    with pytest.raises(PolicyError, match="cannot read the VecNormalize statistics") as err:
        read_normalization(tmp_path)
    assert err.value.source == str(tmp_path / "vecnormalize.pkl")


# ---- optional extras ---------------------------------------------------------------------------
#: runs ``ctxsim`` (argv[1:]) in a process where langchain-core (the extra ``peers``) cannot be imported
WITHOUT_LANGCHAIN = "import sys; sys.modules['langchain_core'] = None; from ctxsim.lab.cli import main; sys.exit(main(sys.argv[1:]))"


def test_a_peer_without_its_extra_is_one_line_naming_the_install_and_writes_nothing(tmp_path):
    out = tmp_path / "r.csv"
    argv = ["evaluate", "--names", "mild-overflow", "--seeds", "1", "--out", str(out), "--quiet"]
    alone = subprocess.run([sys.executable, "-c", WITHOUT_LANGCHAIN, *argv, "--policy", "peer:langchain-trim"],
                           capture_output=True, text=True, timeout=300)
    assert alone.returncode == 2 and alone.stdout == "" and not out.exists()
    assert len(alone.stderr.splitlines()) == 1 and "pip install 'ctxsim[peers]'" in alone.stderr
    # beside a policy that runs, the peer is left out with a note and the others evaluated
    both = subprocess.run([sys.executable, "-c", WITHOUT_LANGCHAIN, *argv, "--policy", "peer:langchain-trim",
                           "--policy", "seed-chain"], capture_output=True, text=True, timeout=300)
    assert both.returncode == 0, both.stderr
    assert "skipping policy 'peer:langchain-trim'" in both.stdout + both.stderr and out.is_file()
    assert "seed-chain" in out.read_text() and "langchain" not in out.read_text()


# ---- the runtime path ----------------------------------------------------------------------------
def test_import_ctxsim_imports_no_gymnasium_and_envs_still_register():
    code = ("import sys, ctxsim; assert 'gymnasium' not in sys.modules, 'gymnasium imported';"
            "import gymnasium; env = gymnasium.make('ctxsim.lab.environments:ctxsim/ContextOverflow-v0',"
            " config={'scenario_names': ['mild-overflow'], 'contexts_per_scenario': 1});"
            "print(env.spec.entry_point)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ctxsim.lab.environments.overflow:ContextOverflowEnv"
    code = "import gymnasium, ctxsim; print('ctxsim/ConversationStream-v0' in gymnasium.registry)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "True"


# ---- reproducibility ---------------------------------------------------------------------------
def test_the_installed_dependencies_are_the_pinned_ones(repo_root):
    """Every package constraints.txt pins is installed at that version (a local label
    like torch's ``+cpu`` aside), and every installed package but ctxsim is pinned,
    except what the one extra outside ``[dev]`` (minilm) brings when it is installed."""
    from importlib.metadata import distributions

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pinned = {}
    for line in (repo_root / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pinned[canonicalize_name(name)] = version
    installed = {canonicalize_name(d.metadata["Name"]): d.version.split("+", 1)[0] for d in distributions()}
    installed = {name: v for name, v in installed.items() if name not in ("ctxsim", "pip", "setuptools", "wheel")}
    requires = {canonicalize_name(d.metadata["Name"]): d.requires or [] for d in distributions()}
    minilm = [r for r in map(Requirement, requires["ctxsim"]) if r.marker and r.marker.evaluate({"extra": "minilm"})
              and not r.marker.evaluate({"extra": ""})]
    assert minilm, "ctxsim's metadata names the minilm extra's requirements"
    extras, todo = set(), [canonicalize_name(r.name) for r in minilm]
    while todo:  # the installed dependency closure of the minilm extra: not pinned
        name = todo.pop()
        if name in requires and name not in extras:
            extras.add(name)
            todo += [canonicalize_name(r.name) for r in map(Requirement, requires[name])
                     if r.marker is None or r.marker.evaluate({"extra": ""})]
    assert {n: v for n, v in pinned.items() if installed.get(n) != v} == {}
    assert sorted(set(installed) - set(pinned) - extras) == []


# ---- a newcomer's first runs -------------------------------------------------------------------
def test_a_run_shorter_than_eval_freq_still_evaluates_and_reports(tmp_path, capsys):
    (tmp_path / "short.yaml").write_text(
        "name: short\nalgo: MaskablePPO\nenv: envs/default.yaml\nenv_config: {contexts_per_scenario: 2}\n"
        "train_scenarios: [chat-10k]\neval_scenarios: [gpt4-6000]\ntimesteps: 64\nn_envs: 1\n"
        "hyperparams: {n_steps: 32, batch_size: 32, n_epochs: 1, policy_kwargs: {net_arch: [8]}}\n"
        "eval_freq: 2000\neval_episodes: 2\ncheckpoint_freq: 1000000\n"
    )
    assert main(["train", str(tmp_path / "short.yaml"), "--out", str(tmp_path / "runs"), "--quiet"]) == 0
    (run,) = (tmp_path / "runs").iterdir()
    assert list(np.load(run / "evaluations.npz")["timesteps"]) == [64]
    assert main(["evaluate", "--policy", "seed-chain", "--names", "gpt4-6000", "--seeds", "1", "--quiet",
                 "--out", str(tmp_path / "r.csv")]) == 0
    assert main(["report", str(tmp_path / "r.csv"), "--run", str(run), "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "report.md").is_file()


def test_make_demo_writes_an_ignored_folder_and_demo_report_the_committed_one(repo_root, tmp_path):
    import shutil

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    (tmp_path / "installed").touch()
    later = time.time() + 3600
    os.utime(tmp_path / "installed", (later, later))
    stamp = [f"STAMP={tmp_path / 'installed'}"]  # newer than its prerequisites: no install in a dry run
    demo = subprocess.run(["make", "-n", "-C", str(repo_root), "demo", *stamp], capture_output=True, text=True)
    report = subprocess.run(["make", "-n", "-C", str(repo_root), "demo-report", *stamp], capture_output=True, text=True)
    assert "ctxsim demo --out runs/demo" in demo.stdout and "ctxsim demo --out reports/demo" in report.stdout
    ignored = subprocess.run(["git", "-C", str(repo_root), "check-ignore", "-q", "runs/demo/report/report.md"])
    assert ignored.returncode == 0
    from ctxsim.lab.cli import build_parser

    assert build_parser().parse_args(["demo"]).out == "runs/demo"


def test_a_pool_build_advances_once_per_context_it_counts(tmp_path):
    from ctxsim.lab.environments.overflow import ContextOverflowEnv
    from ctxsim.lab.pool import ensure_pool, pool_contexts

    checked = ContextOverflowEnv.checked_config({"scenario_names": ["chat-10k"], "contexts_per_scenario": 2,
                                                 "pool": True}, "test", "config")
    config = checked.model_dump(mode="json")
    steps = []
    ensure_pool(config, checked.suite, workers=1, rebuild=True, advance=lambda: steps.append(1))
    assert len(steps) == pool_contexts(config, checked.suite) == 2


# ---- killed sweeps ----------------------------------------------------------------------------------
def descendants(pid: int) -> set[int]:
    """The live processes below ``pid`` (from /proc; zombies count as gone)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, ppid = stat.read_text().rsplit(")", 1)[1].split()[:2]
        except (OSError, IndexError):
            continue
        if state != "Z":
            children.setdefault(int(ppid), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pids: set[int]) -> set[int]:
    def running(pid: int) -> bool:
        try:
            return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False

    return {pid for pid in pids if running(pid)}


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
@pytest.mark.timeout(240)
def test_a_killed_sweep_leaves_no_worker_and_the_next_run_removes_its_scratch(tmp_path, repo_root):
    env = str(repo_root / "envs" / "default.yaml")
    (tmp_path / "long.yaml").write_text(f"name: long\npolicies: [oracle, greedy]\nseeds: 40\nenv: {env}\n")
    out = tmp_path / "out"
    sweep = subprocess.Popen([sys.executable, "-m", "ctxsim", "sweep", str(tmp_path / "long.yaml"), "--workers", "2",
                              "--out", str(out), "--quiet"], cwd=tmp_path, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while not list(out.glob(".sweep*/unit-*")) and sweep.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)  # until a worker runs a unit
        below = descendants(sweep.pid)
        assert sweep.poll() is None and len(below) >= 2, "the sweep ended or never started its workers"
    finally:
        sweep.kill()
        sweep.wait()
    deadline = time.monotonic() + 60
    while alive(below) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(below)
    assert [p.name for p in out.iterdir() if p.name.startswith(".sweep")]  # what the kill left

    (tmp_path / "short.yaml").write_text(f"name: short\npolicies: [seed-chain]\nscenarios: {{names: [chat-10k]}}\n"
                                         f"seeds: 1\nenv: {env}\n")
    assert main(["sweep", str(tmp_path / "short.yaml"), "--workers", "1", "--out", str(out), "--quiet"]) == 0
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]


def test_a_huge_results_csv_is_refused_before_it_is_read(tmp_path, capsys):
    results = sparse(tmp_path / "results.csv", INPUT_LIMITS["results CSV"] + 1)
    fails_cleanly(["report", str(results), "--out", str(tmp_path / "report")], capsys, "over the limit for a results CSV")
    assert not (tmp_path / "report").exists()


@pytest.mark.timeout(60)
def test_an_alias_bomb_in_a_tune_choice_is_refused(tmp_path, repo_root):
    from ctxsim.errors import ConfigError
    from ctxsim.lab.tune import load_tune

    text = (repo_root / "experiments" / "tune_maskable_ppo.yaml").read_text()
    text = text.replace("experiment: experiments/", f"experiment: {repo_root}/experiments/")
    bomb = ", ".join(f"&l{i} [" + ", ".join([f"*l{i - 1}" if i else "1"] * 10) + "]" for i in range(9))
    text = text.replace("  n_steps: {choice: [256, 512]}", f"  n_steps: {{choice: [{bomb}]}}")
    (tmp_path / "tune.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"param_space\.n_steps\.choice.*more than 1,000,000 values"):
        load_tune(tmp_path / "tune.yaml")
