"""JSONL transition logs: writer, reader, torn lines and state summaries."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from ctxsim.errors import LogFormatError
from ctxsim.model import ContextState, ContextUnit, Fact
from ctxsim.transitions import (
    REQUIRED_KEYS,
    SCHEMA_VERSION,
    TransitionWriter,
    encode_record,
    read_transitions,
    state_summary,
)


def make_state(*, history=()) -> ContextState:
    units = (
        ContextUnit(id="a", type="message", content="The budget is $1,250 for this sprint.", priority=1),
        ContextUnit(id="b", type="message", content="Let us refactor the parser.", role="assistant"),
    )
    facts = (
        Fact(id="f1", value="$1,250", unit_id="a"),
        Fact(id="f2", value="never delete production data", unit_id="gone", kind="rule"),
    )
    return ContextState(units=units, limit=100, min_limit=50, fact_table=facts, history=tuple(history))


def write_episode(writer: TransitionWriter, episode: int = 0) -> None:
    before, after = make_state(), make_state(history=("summarize_old",))
    obs_before = np.array([0.1234567891, 1.0], dtype=np.float32)
    obs_after = np.array([1 / 3, 0.0], dtype=np.float32)
    writer.write_transition(
        episode=episode, step=0, scenario="chat-10k", seed=np.int64(3), state_before=before,
        observation_before=obs_before, action="summarize_old", reward=np.float64(0.0), state_after=after,
        observation_after=obs_after, terminated=False, truncated=False,
    )
    writer.write_transition(
        episode=episode, step=1, scenario="chat-10k", seed=3, state_before=after, observation_before=obs_after,
        action="hybrid", reward=1.2345678912, state_after=after, observation_after=obs_after, terminated=np.bool_(True),
        truncated=False, outcome={"success": True, "coherence": 0.87654321},
    )


def test_records_follow_the_schema(tmp_path):
    path = tmp_path / "log.jsonl"
    with TransitionWriter(path, "run-1") as writer:
        write_episode(writer)
    records = read_transitions(path)
    assert len(records) == 2
    first, last = records
    assert set(first) == set(REQUIRED_KEYS)
    assert first["schema_version"] == SCHEMA_VERSION and first["run_id"] == "run-1"
    assert (first["episode"], first["step"], first["seed"], first["action"]) == (0, 0, 3, "summarize_old")
    assert first["outcome"] is None and last["outcome"] == {"success": True, "coherence": 0.876543}
    assert last["reward"] == 1.234568 and last["terminated"] is True
    assert first["stateBefore"]["observation"] == [0.123457, 1.0]
    assert first["stateAfter"]["history"] == ["summarize_old"]
    for line in path.read_text(encoding="utf-8").splitlines():
        assert list(json.loads(line)) == sorted(json.loads(line))  # keys sorted


def test_state_summary():
    state = make_state()
    summary = state_summary(state)
    assert summary == {
        "total_tokens": state.total_tokens, "limit": 100, "units": 2, "p1_units": 1, "facts_present": 0.5,
        "probes_present": 0.5, "history": [],
    }
    assert "text" not in summary and "observation" not in summary
    full = state_summary(state, np.zeros(3), full_text=True)
    assert full["text"] == state.render() and full["observation"] == [0.0, 0.0, 0.0]


def test_full_text_option(tmp_path):
    path = tmp_path / "full.jsonl"
    with TransitionWriter(path, "r", full_text=True) as writer:
        write_episode(writer)
    assert "budget is $1,250" in read_transitions(path)[0]["stateBefore"]["text"]


def test_one_write_and_flush_per_line(tmp_path):
    calls = []

    class Recording:
        def __init__(self, fh):
            self.fh = fh

        def write(self, data):
            calls.append(("write", data))
            return self.fh.write(data)

        def flush(self):
            calls.append(("flush", None))
            self.fh.flush()

        def close(self):
            self.fh.close()

        @property
        def closed(self):
            return self.fh.closed

    writer = TransitionWriter(tmp_path / "log.jsonl", "r")
    writer._fh = Recording(writer._fh)
    write_episode(writer)
    writer.close()
    assert [kind for kind, _ in calls] == ["write", "flush", "write", "flush"]
    assert all(data.endswith(b"\n") and data.count(b"\n") == 1 for kind, data in calls if kind == "write")


def test_same_records_give_identical_bytes(tmp_path):
    paths = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    for path in paths:
        with TransitionWriter(path, "same-run") as writer:
            write_episode(writer)
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert encode_record({"b": -0.0000001, "a": 1}) == b'{"a":1,"b":0.0}\n'


def test_append_by_default_overwrite_on_request(tmp_path):
    path = tmp_path / "log.jsonl"
    with TransitionWriter(path, "r") as writer:
        write_episode(writer, episode=0)
    with TransitionWriter(path, "r") as writer:
        write_episode(writer, episode=1)
    assert [r["episode"] for r in read_transitions(path)] == [0, 0, 1, 1]
    with TransitionWriter(path, "r", overwrite=True) as writer:
        write_episode(writer, episode=7)
    assert [r["episode"] for r in read_transitions(path)] == [7, 7]


def test_torn_last_line_is_skipped_with_one_warning(tmp_path, caplog):
    path = tmp_path / "log.jsonl"
    with TransitionWriter(path, "r") as writer:
        write_episode(writer)
    good = path.read_bytes()
    for torn in (good + b'{"schema_version": 1, "run', good + b"{not json\n"):
        path.write_bytes(torn)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="ctxsim.transitions"):
            records = read_transitions(path)
        assert len(records) == 2
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "line 3" in warnings[0].getMessage()


def test_appending_writers_number_episodes_on_from_the_log(tmp_path):
    path = tmp_path / "log.jsonl"
    with TransitionWriter(path, "r") as writer:
        assert writer.first_episode == 0
        write_episode(writer, episode=writer.first_episode)
        write_episode(writer, episode=writer.first_episode + 4)
    with TransitionWriter(path, "r") as writer:
        assert writer.first_episode == 5
    with open(path, "ab") as fh:
        fh.write(b"{not json\n")  # what the reader skips as torn is cut before appending
    with TransitionWriter(path, "r") as writer:
        assert writer.first_episode == 5
        write_episode(writer, episode=writer.first_episode)
    assert [r["episode"] for r in read_transitions(path)] == [0, 0, 4, 4, 5, 5]
    other = tmp_path / "other.jsonl"
    other.write_text('{"episode": "one"}\n')
    with pytest.raises(LogFormatError, match="not a transition record"):
        TransitionWriter(other, "r")
    assert other.read_text() == '{"episode": "one"}\n'


def test_writer_cuts_a_torn_tail_before_appending(tmp_path, caplog):
    path = tmp_path / "log.jsonl"
    with TransitionWriter(path, "r") as writer:
        write_episode(writer, episode=0)
    with open(path, "ab") as fh:
        fh.write(b'{"schema_version": 1, "ep')  # a crash in the middle of a write
    with caplog.at_level(logging.WARNING, logger="ctxsim.transitions"):
        with TransitionWriter(path, "r") as writer:
            write_episode(writer, episode=1)
    assert any("torn" in r.getMessage() for r in caplog.records)
    assert [r["episode"] for r in read_transitions(path)] == [0, 0, 1, 1]


def test_bad_line_in_the_middle_raises_with_file_and_line(tmp_path):
    path = tmp_path / "log.jsonl"
    with TransitionWriter(path, "r") as writer:
        write_episode(writer)
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join([lines[0], b"{broken", lines[1], b""]))
    with pytest.raises(LogFormatError) as err:
        read_transitions(path)
    assert str(path) in str(err.value) and "line 2" in str(err.value)


def test_a_key_written_twice_is_refused_not_taken_for_a_torn_line(tmp_path):
    path = tmp_path / "log.jsonl"
    with TransitionWriter(path, "r") as writer:
        write_episode(writer)
    lines = path.read_bytes().split(b"\n")[:-1]
    twice = lines[-1][:-1] + b',"reward":99}'  # the last record with its reward written again
    for body in (lines[:-1] + [twice, lines[0]], lines[:-1] + [twice]):
        path.write_bytes(b"\n".join(body) + b"\n")
        with pytest.raises(LogFormatError, match=f"line {len(lines)}: key 'reward' appears twice"):
            read_transitions(path)
    before = path.read_bytes()
    with pytest.raises(LogFormatError, match="the last line: key 'reward' appears twice"):
        TransitionWriter(path, "r")
    assert path.read_bytes() == before  # neither cut as torn nor appended to


def test_missing_keys_and_unknown_schema_raise(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"schema_version": 1, "run_id": "r"}\n', encoding="utf-8")
    with pytest.raises(LogFormatError, match="line 1.*misses the keys"):
        read_transitions(path)
    record = {k: 0 for k in REQUIRED_KEYS} | {"schema_version": 99}
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    with pytest.raises(LogFormatError, match="schema_version 99"):
        read_transitions(path)
    with pytest.raises(LogFormatError, match="cannot read"):
        read_transitions(tmp_path / "missing.jsonl")


def test_non_finite_numbers_are_rejected(tmp_path):
    with TransitionWriter(tmp_path / "log.jsonl", "r") as writer:
        with pytest.raises(LogFormatError, match="non-finite"):
            writer.write({"reward": float("nan")})
