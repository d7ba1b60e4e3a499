import copy
import pickle

import pytest

from ctxsim.errors import ContextError
from ctxsim.model import Artifact, ContextState, ContextUnit, DroppedSpan, Fact, ToolEnvelope
from ctxsim.serialize import dumps_state, state_from_dict
from ctxsim.tokens import count_messages, count_tokens


def unit(uid="u1", **kw):
    kw.setdefault("type", "message")
    kw.setdefault("content", "The budget is $1,250 for the migration.")
    return ContextUnit(id=uid, **kw)


def test_unit_counts_its_tokens():
    u = unit()
    assert u.token_count == count_tokens(u.content)


@pytest.mark.parametrize(
    "field,value",
    [("content", ""), ("content", "   "), ("priority", 0), ("priority", 4), ("priority", True), ("type", "video"), ("role", "robot"), ("id", "")],
)
def test_bad_unit_values_name_the_field(field, value):
    with pytest.raises(ContextError) as exc:
        unit(**({"uid": value} if field == "id" else {field: value}))
    assert field in str(exc.value)


@pytest.mark.parametrize(
    "field,value",
    [("pinned", "false"), ("pinned", 1), ("turn", "3"), ("turn", 2.5), ("token_count", "5"), ("summary_depth", -1),
     ("summary_depth", "1"), ("summary_depth", True), ("timestamp", "noon"), ("timestamp", float("nan")),
     ("tool", "bash"), ("meta", {"a": "b"}), ("fact_ids", ["f1"]), ("source_ids", "u0")],
)
def test_a_field_of_another_type_is_refused_naming_it(field, value):
    """A pinned of "false" read as pinned, a token_count of text failed every sum later,
    a negative summary depth or a dict of meta were taken: each is refused when the unit
    is made, naming the field (the key) and the value."""
    with pytest.raises(ContextError) as exc:
        unit(**{field: value})
    assert exc.value.key == field and f"ContextUnit 'u1'.{field} must be" in str(exc.value)


@pytest.mark.parametrize(
    "field,value",
    [("units", None), ("units", "abc"), ("task", None), ("task", 5), ("scenario", 5), ("seed", "1"),
     ("warning_threshold", "0.8"), ("fact_table", None), ("fact_table", ["f1"]), ("history", "summarize"),
     ("artifacts", "x"), ("dropped", None), ("priority_areas", "To Do List")],
)
def test_a_state_field_of_another_type_is_refused_naming_it(field, value):
    """None as the units raised TypeError, a warning threshold of text TypeError; a task
    of None, a history of text or a list of facts were taken and failed later."""
    with pytest.raises(ContextError) as exc:
        ContextState(**{"units": (unit(),), "limit": 4000, field: value})
    assert exc.value.key == field and f"ContextState.{field} must be" in str(exc.value)


def test_numpy_numbers_are_taken_as_the_plain_ones():
    """A researcher's arrays give numpy integers and floats: a turn, timestamp, summary
    depth, seed or threshold of numpy's is the plain number (the same unit, the same
    fingerprint); a numpy 2.5 turn is still refused."""
    import numpy as np

    plain = unit(turn=3, timestamp=2.0, summary_depth=1)
    drawn = unit(turn=np.int64(3), timestamp=np.float64(2.0), summary_depth=np.int32(1))
    assert (type(drawn.turn), type(drawn.timestamp), type(drawn.summary_depth)) == (int, float, int)
    assert drawn == plain and drawn.fingerprint == plain.fingerprint
    state = ContextState((drawn,), limit=np.int64(4000), min_limit=np.int32(100), seed=np.int64(4),
                         warning_threshold=np.float64(0.8))
    assert [type(getattr(state, f)) for f in ("limit", "min_limit", "seed", "warning_threshold")] == [int, int, int, float]
    for limit in (np.float64(4000.0), True):
        with pytest.raises(ContextError, match="limit must be a positive integer"):
            ContextState((drawn,), limit=limit)
    with pytest.raises(ContextError, match="turn must be a whole number"):
        unit(turn=np.float64(2.5))


def test_state_totals_equal_request_tokens():
    s = ContextState((unit("a"), unit("b", role="assistant", content="Sure, I will keep it under budget.")), limit=4000)
    assert s.total_tokens == count_messages(s.render_messages())
    assert sum(s.tokens_by_type.values()) + 3 == s.total_tokens


@pytest.mark.parametrize(
    "kw,key", [({"limit": -5}, "limit"), ({"limit": 1000}, "limit"), ({"limit": 5000, "warning_threshold": 1.5}, "warning_threshold")]
)
def test_bad_state_values(kw, key):
    with pytest.raises(ContextError) as exc:
        ContextState((unit(),), **kw)
    assert key in str(exc.value)


def test_limit_under_floor_allowed_when_floor_lowered():
    assert ContextState((unit(),), limit=1000, min_limit=500).limit == 1000


def test_duplicate_ids_rejected():
    with pytest.raises(ContextError, match="duplicate"):
        ContextState((unit("a"), unit("a")), limit=4000)


def test_state_is_immutable_and_derivations_return_new_states():
    s = ContextState((unit("a"),), limit=4000)
    with pytest.raises(AttributeError):
        s.limit = 10
    t = s.with_units((unit("a"), unit("b")), applied="remove_oldest")
    assert len(s.units) == 1 and len(t.units) == 2 and t.history == ("remove_oldest",)


def test_json_and_pickle_round_trip():
    env = ToolEnvelope("read_file", "c1", '{"path":"a.py"}', key_fields=(("path", "a.py"),), durability="replayable")
    s = ContextState(
        (unit("a", priority=1, pinned=True), unit("b", type="tool_result", role="tool", tool=env)),
        limit=4000,
        fact_table=(Fact("f1", "$1,250", "a", 1, "fact", "The budget is $1,250."),),
        task="migrate",
    )
    assert state_from_dict(__import__("json").loads(dumps_state(s))) == s
    assert pickle.loads(pickle.dumps(s)) == s
    assert s.facts["f1"].unit_id == "a"
    with pytest.raises(TypeError):
        s.facts["f2"] = None


def test_tool_placeholder_keeps_key_fields():
    env = ToolEnvelope("http_get", "c9", outcome="failure", key_fields=(("order_id", "A-17"),), error_message="503")
    text = env.placeholder()
    assert "A-17" in text and "503" in text and "failure" in text


def _plain_fingerprint(u: ContextUnit) -> str:
    """The unit fingerprint's definition: the ``str`` of every field, joined by NUL."""
    from ctxsim.model import content_hash

    fields = (u.id, u.type, u.role, u.turn, u.timestamp, u.priority, u.pinned, u.tool, u.fact_ids, u.source_ids,
              u.summary_depth, u.meta, u.content)
    return content_hash("\x00".join(map(str, fields)))


def test_unit_fingerprints_equal_their_definition_on_real_and_odd_units():
    from ctxsim.lab.contexts import build_context
    from ctxsim.lab.scenarios import find_scenario

    units = [u for name in ("chat-10k", "code-heavy", "transcript-marshmallow") for u in build_context(find_scenario(name), 1).units]
    tool = ToolEnvelope("bash", "c1", '{"command": "ls"}', outcome="failure", key_fields=(("status", "1"),), target="a\x00b",
                        error_message="boom {}")
    units += [
        unit("odd", content="{x}\x00 ünïcode \ud800 text", role="user", turn=3, timestamp=1.5e-7, priority=1, pinned=True,
             tool=tool, fact_ids=("f1", "f{2}"), source_ids=("s",), summary_depth=2, meta=(("k", "v\x00"), ("n", "1"))),
        unit("plain"),
    ]
    assert any(u.tool is not None for u in units)
    assert [u.fingerprint for u in units] == [_plain_fingerprint(u) for u in units]


def test_a_tool_envelopes_repr_is_the_dataclass_repr_of_every_field():
    import dataclasses

    for tool in (ToolEnvelope("bash", "c1"), ToolEnvelope("w", "c'2", '{"a": "\\u00e9"}', "failure", (("k", "v"),), "replayable",
                                                            "h", "a/b.py", "boom\n")):
        fields = ", ".join(f"{f.name}={getattr(tool, f.name)!r}" for f in dataclasses.fields(tool))
        assert repr(tool) == str(tool) == f"ToolEnvelope({fields})"


def test_computed_once_computes_on_the_first_read_only_and_survives_pickling():
    from ctxsim.model import computed_once

    calls = []

    class Box:
        def __init__(self, n):
            self.n = n

        @computed_once
        def square(self):
            """The square."""
            calls.append(self.n)
            return self.n * self.n

    box, other = Box(3), Box(4)
    assert (box.square, box.square, other.square) == (9, 9, 16) and calls == [3, 4]
    assert isinstance(Box.square, computed_once) and Box.square.__doc__ == "The square."
    u = unit()
    assert pickle.loads(pickle.dumps(u)).fingerprint == u.fingerprint == _plain_fingerprint(u)


def test_derived_values_are_computed_once_per_state_object_and_never_pickled():
    from dataclasses import replace

    state = ContextState(units=(ContextUnit(id="u1", type="message", content="hello there"),), limit=4000)
    calls = []

    def compute():
        calls.append(1)
        return ["value"]

    assert state.derived("key", compute) == ["value"]
    assert state.derived("key", compute) is state.derived("key", compute) and len(calls) == 1
    assert state.derived("other", compute) == ["value"] and len(calls) == 2
    copy = pickle.loads(pickle.dumps(state))
    assert copy == state and "_derived" not in copy.__dict__ and copy.fingerprint == state.fingerprint
    assert replace(state, limit=5000).derived("key", compute) == ["value"] and len(calls) == 3


def test_a_pickled_state_leaves_its_unit_and_fact_tables_out_and_builds_them_when_asked():
    facts = (Fact("f1", "$1,250", "u2"), Fact("f2", "never delete data", "u1", kind="rule"))
    state = ContextState(units=(unit("u1"), unit("u2", content="Deploy on Friday."), unit("u3", content="Done.")),
                         limit=4000, fact_table=facts)
    assert state.position("u2") == 1 and state.facts["f1"].value == "$1,250"
    blob = pickle.dumps(state)
    assert b"_index" not in blob and b"_facts" not in blob
    copy = pickle.loads(blob)
    assert "_index" not in copy.__dict__ and "_facts" not in copy.__dict__
    assert [copy.position(u.id) for u in state.units] == [0, 1, 2] and copy.unit("u3") == state.unit("u3")
    assert "u2" in copy and "u9" not in copy
    assert dict(copy.facts) == dict(state.facts) and copy == state and copy.fingerprint == state.fingerprint
    assert "_index" in copy.__dict__ and "_facts" in copy.__dict__  # built once, kept


def test_copies_of_the_frozen_values_are_the_values_themselves_memos_included():
    env = ToolEnvelope("read_file", "c1", '{"path":"a.py"}', key_fields=(("path", "a.py"),))
    state = ContextState(
        (unit("a"), unit("b", type="tool_result", role="tool", tool=env)), limit=4000,
        fact_table=(Fact("f1", "$1,250", "a"),), artifacts=(Artifact("art1", "body", ("b",)),),
        dropped=(DroppedSpan(("c",), ("budget",), "a note", "drop"),),
    )
    state.derived("key", lambda: ["value"])
    values = (state, *state.units, env, *state.fact_table, *state.artifacts, *state.dropped)
    for value in values:
        assert copy.copy(value) is value and copy.deepcopy(value) is value
    holder = {"states": [state], "count": 1}
    held = copy.deepcopy(holder)
    assert held == holder and held["states"] is not holder["states"] and held["states"][0] is state
    assert held["states"][0].derived("key", lambda: ["recomputed"]) == ["value"]
