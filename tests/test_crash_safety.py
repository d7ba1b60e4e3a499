"""Data safety: JSONL logs survive SIGKILL, logs are appended to, outputs are atomic.

A writer process is killed mid-run; every complete line is still readable, a torn
last line is reported and skipped, and a new writer appends after it. Atomic
outputs are either the old or the new file, never half of one, even when the
writing process is killed. Every file writer in ctxsim/ goes through
ctxsim.atomic unless it is listed below with the reason.
"""

from __future__ import annotations

import ast
import logging
import os
import signal
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest

from ctxsim.atomic import atomic_write_bytes, read_or_make
from ctxsim.lab.cli import main
from ctxsim.transitions import REQUIRED_KEYS, SCHEMA_VERSION, TransitionWriter, encode_record, read_transitions

PACKAGE = Path(__file__).resolve().parent.parent / "ctxsim"

#: a writer that logs records until it is killed; ``torn`` ends with half a line
WRITER = textwrap.dedent(
    """
    import sys, time
    from ctxsim.transitions import TransitionWriter, encode_record

    path, mode = sys.argv[1], sys.argv[2]
    writer = TransitionWriter(path, "crash")

    def record(step):
        return {"schema_version": 1, "run_id": "crash", "episode": 0, "step": step, "scenario": "s", "seed": 0,
                "stateBefore": {"pad": "x" * 50_000}, "action": "hybrid", "reward": 0.5, "stateAfter": {},
                "terminated": False, "truncated": False, "outcome": None}

    step = 0
    while True:
        if mode == "torn" and step == 20:
            line = encode_record(record(step))
            writer._fh.write(line[: len(line) // 2])  # the process dies inside this record
            writer._fh.flush()
            print("ready", flush=True)
            time.sleep(600)
        writer.write(record(step))
        step += 1
        if mode == "loop" and step == 20:
            print("ready", flush=True)
    """
)


def record(step: int, run_id: str = "after") -> dict:
    base = dict.fromkeys(REQUIRED_KEYS)
    base.update(schema_version=SCHEMA_VERSION, run_id=run_id, episode=1, step=step, scenario="s", seed=0,
                stateBefore={}, action="hybrid", reward=1.0, stateAfter={}, terminated=True, truncated=False)
    return base


def kill_writer(path: Path, mode: str) -> None:
    """Start the writer, wait until it has written 20 records, SIGKILL it."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), mode], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("mode", ["loop", "torn"])
def test_killed_writer_loses_no_complete_line_and_a_new_writer_appends(tmp_path, caplog, mode):
    log = tmp_path / "t.jsonl"
    kill_writer(log, mode)
    data = log.read_bytes()
    complete = data[: data.rfind(b"\n") + 1].count(b"\n")
    torn = not data.endswith(b"\n")
    assert complete >= 20
    if mode == "torn":
        assert torn

    with caplog.at_level(logging.WARNING, logger="ctxsim.transitions"):
        records = read_transitions(log)
    assert [r["step"] for r in records] == list(range(complete))  # nothing earlier lost, in order
    assert ("torn" in caplog.text) == torn  # a torn last line is reported (and skipped)

    with TransitionWriter(log, "after") as writer:  # cuts the torn tail, then appends
        writer.write(record(0))
        writer.write(record(1))
    again = read_transitions(log)
    assert [r["run_id"] for r in again] == ["crash"] * complete + ["after", "after"]
    assert again[:complete] == records
    assert log.read_bytes().startswith(data[: data.rfind(b"\n") + 1])


def test_existing_log_is_appended_to_unless_overwrite(tmp_path):
    log = tmp_path / "t.jsonl"
    log.write_bytes(encode_record(record(0, "old")))
    with TransitionWriter(log, "new") as writer:
        writer.write(record(1, "new"))
    assert [r["run_id"] for r in read_transitions(log)] == ["old", "new"]
    with TransitionWriter(log, "new", overwrite=True) as writer:
        writer.write(record(2, "new"))
    assert [r["step"] for r in read_transitions(log)] == [2]


def test_evaluate_log_appends_by_default_and_truncates_with_overwrite(tmp_path, capsys):
    log = tmp_path / "out" / "t.jsonl"
    suite = PACKAGE.parent / "data" / "scenarios" / "mild-overflow.yaml"
    args = ["evaluate", "--policy", "seed-chain", "--scenarios", str(suite), "--seeds", "1",
            "--out", str(tmp_path / "out" / "r.csv"), "--log", str(log), "--quiet"]
    assert main(args) == 0
    once = read_transitions(log)
    assert once and main(args) == 0
    shift = max(r["episode"] for r in once) + 1  # appended, never truncated; episodes numbered on
    assert read_transitions(log) == once + [{**r, "episode": r["episode"] + shift} for r in once]
    assert main(args + ["--overwrite"]) == 0
    assert read_transitions(log) == once
    capsys.readouterr()


ATOMIC_LOOP = textwrap.dedent(
    """
    import sys
    from ctxsim.atomic import atomic_write_bytes, read_or_make

    path = sys.argv[1]
    version = 0
    while True:
        atomic_write_bytes(path, bytes([version % 256]) * 4_000_000)
        version += 1
        if version == 3:
            print("ready", flush=True)
    """
)


def test_killed_atomic_writer_leaves_a_whole_file(tmp_path):
    target = tmp_path / "out.bin"
    proc = subprocess.Popen([sys.executable, "-c", ATOMIC_LOOP, str(target)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    data = target.read_bytes()
    assert len(data) == 4_000_000 and data == data[:1] * len(data)  # one whole version, old or new


def test_failed_atomic_write_keeps_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "results.csv"
    target.write_text("old\n")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        atomic_write_bytes(target, b"new\n")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv"]


# ---- every writer goes through ctxsim.atomic --------------------------------------------
#: (module, function) -> why writing there without ctxsim.atomic is right
RAW_WRITERS_ALLOWED = {
    ("atomic.py", "atomic_write_bytes"): "the atomic writer itself",
    ("transitions.py", "TransitionWriter.__init__"): "append-only JSONL: one write + flush per line, torn tails cut",
    ("transitions.py", "_cut_torn_tail"): "cuts a torn last line before appending",
    ("export.py", "export_run"): "writes inside atomic_directory's temporary folder",
    ("export.py", "npz_bytes"): "a zip archive in a BytesIO",
    ("report.py", "_png"): "savefig into a BytesIO",
    ("train.py", "_saved_bytes"): "the algorithm's save into a BytesIO (save_model renames it into place)",
    ("pool.py", "_code_of_text"): "ast.dump returns a string; nothing is written",
    ("bench.py", "bench_sweep"): "the sweep benchmark's input, in its temporary folder",
}
WRITE_METHODS = {"write_text", "write_bytes", "savefig", "savez", "savez_compressed", "save", "dump", "to_csv",
                 "to_parquet", "to_json", "to_pickle"}


def raw_writers(path: Path) -> list[tuple[str, int, str]]:
    """(function, line, call) of every call in ``path`` that may write a file directly."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[str, int, str]] = []

    def visit(node: ast.AST, scope: list[str]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope = scope + [node.name]
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            writes = False
            if name == "open":
                modes = [a for a in node.args[1:2]] + [k.value for k in node.keywords if k.arg == "mode"]
                writes = any(not isinstance(m, ast.Constant) or set(str(m.value)) & set("wax+") for m in modes)
            elif name in WRITE_METHODS and isinstance(func, ast.Attribute):
                writes = name != "to_csv" or bool(node.args) or any(k.arg == "path_or_buf" for k in node.keywords)
            if writes:
                found.append((".".join(c for c in scope if not c.startswith("<")), node.lineno, ast.unparse(node)[:80]))
        for child in ast.iter_child_nodes(node):
            visit(child, scope)

    visit(tree, [])
    return found


def test_a_kept_result_is_read_when_whole_and_made_again_when_missing_or_torn(tmp_path):
    """read_or_make (the pool folder's fits and teacher rows): made once and kept, then
    read without making; a torn file (a crash of an older writer, an older format) is
    made again and replaced, never raised."""
    made = []

    def make():
        made.append(1)
        return {"value": len(made)}

    def read(path):
        import json
        return json.loads(path.read_text())

    def dump(value):
        import json
        return json.dumps(value).encode()

    path = tmp_path / "fits" / "fit.json"
    assert read_or_make(path, read, make, dump) == ({"value": 1}, True) and path.read_text() == '{"value": 1}'
    assert read_or_make(path, read, make, dump) == ({"value": 1}, False) and len(made) == 1
    path.write_text('{"val')  # torn
    assert read_or_make(path, read, make, dump) == ({"value": 2}, True) and path.read_text() == '{"value": 2}'
    assert [p.name for p in path.parent.iterdir()] == ["fit.json"]  # no temporary left


def test_a_kept_archive_with_damaged_bytes_is_made_again(tmp_path):
    """A teacher's rows are kept as a compressed .npz; damaged bytes in one make zlib
    (not zipfile) raise on reading: the rows are made again, never raised."""
    import io

    def dump(value):
        buffer = io.BytesIO()
        np.savez_compressed(buffer, values=value)
        return buffer.getvalue()

    def read(path):
        with np.load(path) as kept:
            return kept["values"]

    path = tmp_path / "rows.npz"
    rows = np.arange(4000, dtype=np.float64).reshape(40, 100) % 7
    atomic_write_bytes(path, dump(rows))
    data = bytearray(path.read_bytes())
    for i in range(100, len(data) - 200, 5):
        data[i] ^= 0x33
    path.write_bytes(bytes(data))
    with pytest.raises(zlib.error):
        read(path)
    value, made = read_or_make(path, read, lambda: rows + 1, dump)
    assert made and np.array_equal(value, rows + 1) and np.array_equal(read(path), rows + 1)


def test_every_file_writer_is_atomic_or_listed():
    unlisted = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for function, line, call in raw_writers(path):
            if (path.name, function) not in RAW_WRITERS_ALLOWED:
                unlisted.append(f"{path.relative_to(PACKAGE.parent)}:{line} in {function or '<module>'}: {call}")
    assert not unlisted, "write through ctxsim.atomic (or list the writer with its reason):\n" + "\n".join(unlisted)
