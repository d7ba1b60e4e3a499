"""Bad input, fuzzed: every loader raises only ctxsim errors, on one line, naming the file.

The YAML loaders (context_config, scenarios, env specs, experiments, sweeps), the
chat transcript loader and the transition-log reader get malformed, truncated,
wrongly typed and hostile input: huge numbers, deep nesting, aliases that expand
to 10**9 items, non-UTF-8 bytes, NUL bytes, and YAML tags that would construct
Python objects. None may raise a raw KeyError/TypeError/RecursionError, hang, or
run anything (loading is ``yaml.safe_load``). The CLI turns each of them into one
line on stderr and exit code 2, with nothing written to the output folder.

Hypothesis runs derandomized (tests/conftest.py), so the suite reproduces run to run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ctxsim.lab.cli import main
from ctxsim.config import load_config
from ctxsim.lab.environments.spec import load_env_spec
from ctxsim.errors import CtxsimError, LogFormatError, TranscriptError
from ctxsim.lab.scenarios import load_scenarios
from ctxsim.lab.sweep import load_sweep
from ctxsim.lab.train import load_experiment
from ctxsim.transcripts import load_transcript
from ctxsim.transitions import REQUIRED_KEYS, SCHEMA_VERSION, encode_record, read_transitions

REPO = Path(__file__).resolve().parent.parent
FUZZ = settings(max_examples=30, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
SWEEP = """name: fuzz
policies: [seed-chain, oracle]
scenarios: {names: [mild-overflow]}
seeds: 1
env: envs/default.yaml
env_config: {max_steps: 3}
tolerances: {reward: 0.05}
"""
#: loader name -> (loader, a valid file's text)
LOADERS: dict[str, tuple[Callable[[Path], Any], str]] = {
    "config": (load_config, (REPO / "data" / "context_config.yaml").read_text()),
    "scenarios": (load_scenarios, (REPO / "data" / "scenarios" / "chat-10k.yaml").read_text()),
    "env spec": (load_env_spec, (REPO / "envs" / "pruning-first.yaml").read_text()),
    "experiment": (load_experiment, (REPO / "experiments" / "maskable_ppo_seed001.yaml").read_text()),
    "sweep": (load_sweep, SWEEP),
}


def loads_or_fails_cleanly(loader: Callable[[Path], Any], path: Path, error: type[CtxsimError] = CtxsimError) -> bool:
    """True when ``loader(path)`` loads; else its error must be ``error``: one line naming the
    file (or, for a file it refers to, that file)."""
    try:
        loader(path)
    except CtxsimError as exc:
        assert isinstance(exc, error), repr(exc)
        message = str(exc)
        assert message.strip() and "\n" not in message and "\r" not in message, repr(message)
        named = message.split(": ", 1)[0]  # the file the message is about: this one, or one it names
        assert path.name in message or Path(named).is_absolute(), message
        return False
    return True


# ---- hostile input, one file each -----------------------------------------------------------
def aliases(prefix: str) -> str:
    """YAML whose last alias expands to 10**9 items, placed after ``prefix``."""
    body = "".join(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}" if i else "x"] * 10) + "]\n" for i in range(9))
    return body + prefix + "*l8\n"


HOSTILE: dict[str, bytes] = {
    "python object tag": b"!!python/object/apply:os.system ['touch PWNED']\n",
    "python tag under a key": b"name: !!python/object/apply:os.system ['touch PWNED']\nalgo: PPO\n",
    "python name tag": b"context_config: !!python/name:os.system\n",
    "deep list": b"[" * 3000 + b"]" * 3000,
    "deep mapping": b"a: " + b"{a: " * 3000 + b"1" + b"}" * 3000 + b"\n",
    "huge integer": b"name: x\nlimit: " + b"9" * 5000 + b"\n",
    "huge float": b"context_config: {warning_threshold: 1e999}\nname: x\nlimit: 1e999\n",
    "not a number": b"context_config: {warning_threshold: .nan}\nname: x\nseeds: .nan\n",
    "not UTF-8": b"name: \xff\xfe caf\xe9\n",
    "NUL byte": b"name: a\x00b\n",
    "bad date": b"name: 2001-13-45\n",
    "empty": b"",
    "a list": b"- 1\n- 2\n",
    "alias bomb at the top": aliases("").encode(),
    "alias bomb in a value": aliases("name: x\nid: ctxsim/ContextOverflow-v0\nalgo: PPO\nseeds: 1\ncontext_config: ").encode(),
    "alias bomb as a list": aliases("name: x\nalgo: PPO\npolicies: ").encode(),
    "merge key": b"base: &b {limit: 5000}\nname: {<<: *b}\n",
    "list as a key": b"? [a, b]\n: c\n",
    "binary tag": b"name: !!binary aGVsbG8=\n",
    "set tag": b"name: !!set {a, b}\n",
    "tab indentation": b"name:\n\t- x\n",
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", list(HOSTILE))
@pytest.mark.parametrize("loader", list(LOADERS))
def test_hostile_yaml_raises_a_ctxsim_error(tmp_path, monkeypatch, loader, case):
    monkeypatch.chdir(tmp_path)  # a constructed os.system would create tmp_path/PWNED
    path = tmp_path / "hostile.yaml"
    path.write_bytes(HOSTILE[case])
    assert not loads_or_fails_cleanly(LOADERS[loader][0], path)
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("loader", list(LOADERS))
def test_missing_file_and_folder_raise_a_ctxsim_error(tmp_path, loader):
    function = LOADERS[loader][0]
    assert not loads_or_fails_cleanly(function, tmp_path / "missing.yaml")
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    with pytest.raises(CtxsimError):
        function(folder)


def test_python_tag_message_says_what_is_wrong(tmp_path):
    path = tmp_path / "tag.yaml"
    path.write_bytes(HOSTILE["python object tag"])
    with pytest.raises(CtxsimError, match="invalid YAML.*python/object/apply"):
        load_config(path)


def test_alias_bomb_is_described_briefly(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(aliases("name: x\nalgo: "))
    with pytest.raises(CtxsimError) as exc:
        load_experiment(path)
    assert "algo" in str(exc.value) and len(str(exc.value)) < 400


# ---- generated input --------------------------------------------------------------------------
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=10**18, max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from(["", " ", "../../etc/passwd", "ctxsim/ContextOverflow-v0", "hybrid", "fresh_start", "PPO",
                     "random", "chat-10k", "200K", "1M", "-1", "0"]),
)
KEYS = st.one_of(st.text(max_size=12), st.sampled_from(
    ["name", "limit", "target_tokens", "mix", "actions", "config", "id", "algo", "policies", "seeds", "scenarios",
     "context_config", "env_config", "hyperparams", "per_llm", "transcript", "model", "env", "max_steps"]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
                      max_leaves=12)


def paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path of a parsed document (the root is ``()``)."""
    out = [prefix]
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in items:
        out.extend(paths(child, prefix + (key,)))
    return out


@st.composite
def mutated(draw, text: str) -> str:
    """``text`` (YAML) with 1-3 values replaced, keys deleted or keys added, as YAML."""
    doc = yaml.safe_load(text)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths(doc)))
        op = draw(st.sampled_from(["replace", "delete", "add"]))
        if not path:
            doc = draw(VALUES) if op == "replace" else doc
            continue
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        target = parent[path[-1]]
        if op == "replace":
            parent[path[-1]] = draw(VALUES)
        elif op == "delete":
            del parent[path[-1]]
        elif isinstance(target, dict):
            target[draw(KEYS)] = draw(VALUES)
        elif isinstance(target, list):
            target.append(draw(VALUES))
        else:
            parent[path[-1]] = [target, draw(VALUES)]
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)


@pytest.mark.parametrize("loader", list(LOADERS))
@FUZZ
@given(data=st.data())
def test_mutated_files_load_or_raise_a_ctxsim_error(tmp_path, loader, data):
    function, text = LOADERS[loader]
    path = tmp_path / "mutated.yaml"
    path.write_text(data.draw(mutated(text)), encoding="utf-8")
    loads_or_fails_cleanly(function, path)


@pytest.mark.parametrize("loader", list(LOADERS))
@FUZZ
@given(data=st.data())
def test_truncated_files_load_or_raise_a_ctxsim_error(tmp_path, loader, data):
    function, text = LOADERS[loader]
    raw = text.encode()
    path = tmp_path / "truncated.yaml"
    path.write_bytes(raw[: data.draw(st.integers(0, len(raw) - 1))])
    loads_or_fails_cleanly(function, path)


@pytest.mark.parametrize("loader", list(LOADERS))
@FUZZ
@given(raw=st.binary(max_size=300) | st.text(max_size=200).map(str.encode))
def test_arbitrary_bytes_raise_a_ctxsim_error(tmp_path, loader, raw):
    path = tmp_path / "bytes.yaml"
    path.write_bytes(raw)
    loads_or_fails_cleanly(LOADERS[loader][0], path)


def test_valid_samples_load(tmp_path):
    for name, (function, text) in LOADERS.items():
        path = tmp_path / f"{name.replace(' ', '_')}.yaml"
        path.write_text(text)
        assert loads_or_fails_cleanly(function, path), name


# ---- transcripts ----------------------------------------------------------------------------------
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"]) | SCALARS, "content": st.text(max_size=80) | SCALARS},
    optional={"name": SCALARS},
)
LINE = st.one_of(
    MESSAGE.map(lambda m: json.dumps(m, allow_nan=True)),
    VALUES.map(lambda v: json.dumps(v, allow_nan=True)),
    st.text(max_size=60),
    st.sampled_from(["[" * 5000 + "]" * 5000, '{"role": "user", "content": "x", "name": ' + "9" * 5000 + "}",
                     '{"role": "user", "content": NaN}', '{"role": "user", "content": "x"']),
)


@FUZZ
@given(lines=st.lists(LINE, max_size=6), tail=st.sampled_from([b"", b"\n", b"\xff\xfe", b"\x00"]))
def test_fuzzed_transcripts_raise_a_transcript_error(tmp_path, lines, tail):
    path = tmp_path / "chat.jsonl"
    path.write_bytes("\n".join(lines).encode("utf-8", "surrogatepass") + tail)
    loads_or_fails_cleanly(load_transcript, path, TranscriptError)


@pytest.mark.parametrize("line", [b"[" * 100_000 + b"]" * 100_000, b'{"role": "user", "content": ' + b"1" * 5000 + b"}"])
def test_deep_or_huge_json_in_a_transcript(tmp_path, line):
    path = tmp_path / "chat.jsonl"
    path.write_bytes(b'{"role": "user", "content": "fix the bug"}\n' + line + b"\n")
    with pytest.raises(TranscriptError, match="line 2: bad JSON"):
        load_transcript(path)


# ---- transition logs -------------------------------------------------------------------------------
def log_record(step: int) -> dict:
    record = dict.fromkeys(REQUIRED_KEYS)
    record.update(schema_version=SCHEMA_VERSION, run_id="fuzz", episode=step // 3, step=step % 3, scenario="s", seed=1,
                  stateBefore={"total_tokens": 9000 + step, "observation": [0.5, step]}, action="hybrid",
                  reward=0.25 * step, stateAfter={"text": "é ✓ \u2028"}, terminated=step % 3 == 2, truncated=False)
    return record


LOG = [log_record(i) for i in range(9)]
LOG_BYTES = b"".join(encode_record(r) for r in LOG)


@FUZZ
@given(cut=st.integers(0, len(LOG_BYTES)))
def test_truncated_log_keeps_every_complete_line(tmp_path, cut):
    path = tmp_path / "t.jsonl"
    path.write_bytes(LOG_BYTES[:cut])
    complete = LOG_BYTES[:cut].count(b"\n")
    assert read_transitions(path) == json.loads(json.dumps(LOG[:complete]))


@FUZZ
@given(data=st.data())
def test_corrupted_log_reads_or_raises_a_log_format_error(tmp_path, data):
    raw = bytearray(LOG_BYTES)
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    path = tmp_path / "t.jsonl"
    path.write_bytes(bytes(raw))
    try:
        records = read_transitions(path)
    except LogFormatError as exc:
        assert "\n" not in str(exc) and path.name in str(exc) and "line" in str(exc)
    else:
        assert len(records) <= len(LOG)


@pytest.mark.parametrize("bad", [b"[" * 100_000 + b"]" * 100_000, b'{"x": ' + b"9" * 5000 + b"}", b"NaN", b"\xff\xfe"])
def test_hostile_line_in_the_middle_names_the_line(tmp_path, bad):
    path = tmp_path / "t.jsonl"
    path.write_bytes(encode_record(LOG[0]) + bad + b"\n" + encode_record(LOG[1]))
    with pytest.raises(LogFormatError, match="line 2"):
        read_transitions(path)


# ---- the CLI -----------------------------------------------------------------------------------
def cli_fails_cleanly(argv: list[str], capsys, out: Path) -> None:
    """``ctxsim argv`` exits 2 with one line on stderr and writes nothing into ``out``."""
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ctxsim: error: ") and "Traceback" not in err, err
    assert not out.exists() or not any(out.iterdir()), sorted(out.iterdir())


#: loader -> argv of the command that reads such a file (``{file}``, ``{out}``)
COMMANDS = {
    "scenarios": ["generate", "--scenario", "{file}", "--out", "{out}/context.json"],
    "env spec": ["evaluate", "--policy", "seed-chain", "--env", "{file}", "--seeds", "1", "--out", "{out}/r.csv",
                 "--log", "{out}/t.jsonl", "--quiet"],
    "experiment": ["train", "{file}", "--out", "{out}", "--quiet"],
    "sweep": ["sweep", "{file}", "--out", "{out}", "--quiet"],
}


@pytest.mark.parametrize("loader", list(COMMANDS))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_cli_bad_file_is_one_line_exit_2_and_no_output(tmp_path, capsys, loader, data):
    function, text = LOADERS[loader]
    path = tmp_path / "input.yaml"
    choice = data.draw(st.sampled_from(["mutated", "hostile"]))
    if choice == "mutated":
        path.write_text(data.draw(mutated(text)), encoding="utf-8")
    else:
        path.write_bytes(HOSTILE[data.draw(st.sampled_from(sorted(HOSTILE)))])
    assume(not loads_or_fails_cleanly(function, path))  # valid files would start real work
    out = tmp_path / "out"
    cli_fails_cleanly([a.format(file=path, out=out) for a in COMMANDS[loader]], capsys, out)


@FUZZ
@given(lines=st.lists(LINE, min_size=1, max_size=4))
def test_cli_bad_transcript_is_one_line_exit_2(tmp_path, capsys, lines):
    (tmp_path / "chat.jsonl").write_bytes("\n".join(lines).encode("utf-8", "surrogatepass"))
    assume(not loads_or_fails_cleanly(load_transcript, tmp_path / "chat.jsonl", TranscriptError))
    scenario = tmp_path / "transcript.yaml"
    scenario.write_text("name: fuzzed\ntranscript: chat.jsonl\nlimit: 5000\n")
    out = tmp_path / "out"
    cli_fails_cleanly(["generate", "--scenario", str(scenario), "--out", str(out / "c.json")], capsys, out)


@pytest.mark.parametrize("suite", ["hostile", "alias bomb in a value", "not UTF-8"])
def test_cli_hostile_scenario_suite(tmp_path, capsys, suite):
    path = tmp_path / "suite.yaml"
    path.write_bytes(HOSTILE["python object tag"] if suite == "hostile" else HOSTILE[suite])
    out = tmp_path / "out"
    cli_fails_cleanly(["evaluate", "--policy", "random", "--scenarios", str(path), "--out", str(out / "r.csv")], capsys, out)
    cli_fails_cleanly(["scenarios", "list", "--suite", str(path)], capsys, out)

