"""The observation function shared by the environment and the deployable policy."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from pydantic import ValidationError

from ctxsim.model import UNIT_TYPES, ContextState, ContextUnit, ToolEnvelope
from ctxsim.observe import (
    MAX_USAGE,
    OBSERVATION_VERSION,
    ObservationConfig,
    feature_names,
    observation_bounds,
    observe,
)
from ctxsim.lab.contexts import build_context
from ctxsim.lab.scenarios import DEFAULT_SUITE, find_scenario

ACTIONS = ("summarize_old", "prioritize_recent", "dedupe_tool_results", "fresh_start")
CONFIG = ObservationConfig(actions=ACTIONS, max_steps=3)


def msg(uid: str, text: str, **kw) -> ContextUnit:
    return ContextUnit(id=uid, type=kw.pop("type", "message"), content=text, **kw)


def tool(uid: str, name: str, args: str, text: str, *, outcome: str = "success", turn: int = 0, target=None) -> ContextUnit:
    envelope = ToolEnvelope(tool_name=name, call_id=f"call-{uid}", arguments=args, outcome=outcome, target=target)
    return ContextUnit(id=uid, type="tool_result", role="tool", content=text, tool=envelope, turn=turn)


def make_state(units, *, limit=200, history=(), task="fix the parser bug") -> ContextState:
    return ContextState(units=tuple(units), limit=limit, min_limit=50, task=task, history=tuple(history))


def feats(state: ContextState, config: ObservationConfig = CONFIG) -> dict[str, float]:
    return dict(zip(feature_names(config), observe(state, config).tolist()))


def share(state: ContextState, ids: set[str]) -> float:
    total = state.tokens_of(state.units)
    return state.tokens_of(u for u in state.units if u.id in ids) / total


def test_vector_matches_names_bounds_and_dtype():
    state = build_context(find_scenario("tool-dupes", DEFAULT_SUITE), 0)
    vec = observe(state, CONFIG)
    names = feature_names(CONFIG)
    low, high = observation_bounds(CONFIG)
    assert vec.dtype == np.float32 and vec.shape == (len(names),) == low.shape == high.shape
    assert len(set(names)) == len(names)
    assert np.all(np.isfinite(vec)) and np.all(vec >= low) and np.all(vec <= high)
    assert isinstance(OBSERVATION_VERSION, int) and OBSERVATION_VERSION >= 1
    assert [n for n in names if n.startswith("applied_")] == [f"applied_{a}" for a in ACTIONS]


def test_bounds_are_built_once_per_config_and_handed_out_as_new_arrays(monkeypatch):
    import ctxsim.observe as observe_module

    config = ObservationConfig(actions=("summarize_old", "fresh_start"), max_steps=9)  # no other test's config
    built = []
    features = observe_module._features
    monkeypatch.setattr(observe_module, "_features", lambda c: built.append(c) or features(c))
    state = make_state([msg("a", "fix the parser bug in parse.py"), msg("b", "the weather is nice")])
    assert np.array_equal(observe(state, config), observe(state, config))
    low, high = observation_bounds(config)
    low[:] = 7.0  # the caller's copy
    assert len(built) == 1 and not np.any(observation_bounds(config)[0] == 7.0)


def test_observe_is_a_pure_function():
    state = build_context(find_scenario("chat-10k", DEFAULT_SUITE), 1)
    again = build_context(find_scenario("chat-10k", DEFAULT_SUITE), 1)
    first = observe(state, CONFIG)
    np.testing.assert_array_equal(first, observe(again, CONFIG))
    first[:] = -5  # the caller owns the array: mutating it changes nothing
    np.testing.assert_array_equal(observe(state, CONFIG), observe(again, CONFIG))


def test_usage_overflow_and_target():
    state = make_state([msg("a", "word " * 150), msg("b", "other text " * 40)], limit=200)
    f = feats(state)
    assert f["usage"] == pytest.approx(state.total_tokens / 200, rel=1e-6)
    assert f["overflow"] == pytest.approx(state.total_tokens / 200 - 1, rel=1e-6)
    assert f["target_share"] == 1.0
    assert f["log_tokens"] == pytest.approx(math.log10(1 + state.total_tokens) / 7, rel=1e-6)
    warning = feats(state, ObservationConfig(actions=ACTIONS, target="warning"))
    assert warning["target_share"] == pytest.approx(0.8)
    assert warning["overflow"] == pytest.approx(state.total_tokens / state.warning_tokens - 1, rel=1e-6)


def test_huge_overflow_is_clipped_to_the_box():
    state = make_state([msg("a", "lorem ipsum " * 2000)], limit=60)
    f = feats(state)
    assert f["usage"] == MAX_USAGE and f["overflow"] == MAX_USAGE


def test_type_priority_and_pinned_shares():
    units = [
        msg("a", "def parse(x):\n    return x\n" * 5, type="code", priority=1),
        msg("b", "The plan: step one, step two.", type="plan_ref", priority=1, pinned=True),
        msg("c", "ERROR timeout at line 4\n" * 4, type="log", priority=3),
        msg("d", "Sure, I will look at the parser.", role="assistant"),
    ]
    state = make_state(units)
    f = feats(state)
    assert sum(f[f"type_{t}"] for t in UNIT_TYPES) == pytest.approx(1, abs=1e-5)
    assert f["type_code"] == pytest.approx(share(state, {"a"}), abs=1e-6)
    assert f["type_tool_result"] == 0
    assert f["priority_p1"] == pytest.approx(share(state, {"a", "b"}), abs=1e-6)
    assert f["priority_p3"] == pytest.approx(share(state, {"c"}), abs=1e-6)
    assert f["pinned_share"] == pytest.approx(share(state, {"b"}), abs=1e-6)
    assert f["log_units"] == pytest.approx(math.log10(5) / 4, abs=1e-6)
    assert f["log_p1_units"] == pytest.approx(math.log10(3) / 4, abs=1e-6)


def test_what_must_be_kept_against_the_target():
    """P1 and pinned tokens over the target say whether keeping them can fit at all;
    the largest unit's share says whether one unit dominates."""
    units = [
        msg("a", "def parse(x):\n    return x\n" * 12, type="code", priority=1),
        msg("b", "The plan: step one, step two.", type="plan_ref", priority=1, pinned=True),
        msg("c", "ERROR timeout at line 4\n" * 4, type="log", priority=3),
    ]
    for limit in (60, 400):
        state = make_state(units, limit=limit)
        f = feats(state)
        tokens = {u.id: state.tokens_of([u]) for u in units}
        assert f["p1_over_target"] == pytest.approx(min((tokens["a"] + tokens["b"]) / limit, MAX_USAGE), abs=1e-5)
        assert f["pinned_over_target"] == pytest.approx(tokens["b"] / limit, abs=1e-5)
        assert f["largest_unit_share"] == pytest.approx(max(tokens.values()) / sum(tokens.values()), abs=1e-5)
    assert feats(make_state(units, limit=60))["p1_over_target"] > 1 > feats(make_state(units, limit=400))["p1_over_target"]
    warning = ObservationConfig(actions=ACTIONS, max_steps=3, target="warning")
    state = make_state(units, limit=400)
    assert feats(state, warning)["p1_over_target"] == pytest.approx(
        (state.tokens_of(units[:2])) / state.warning_tokens, abs=1e-5)


def test_redundancy_is_detected_from_tool_envelopes():
    read_args = '{"path":"src/app.py"}'
    units = [
        tool("r1", "read_file", read_args, "contents v1 " * 20, turn=1),
        tool("w1", "write_file", read_args, "wrote the new parser " * 10, turn=2, target="src/app.py"),
        tool("e1", "run_tests", "{}", "Traceback: AssertionError in test_parse " * 5, outcome="failure", turn=3),
        tool("r2", "read_file", read_args, "contents v1 " * 20, turn=4),
        msg("m", "Looks good now.", turn=9),
    ]
    state = make_state(units)
    f = feats(state)
    assert f["duplicate_share"] == pytest.approx(share(state, {"r1"}), abs=1e-6)
    assert f["superseded_share"] == pytest.approx(share(state, {"w1"}), abs=1e-6)
    assert f["error_share"] == pytest.approx(share(state, {"e1"}), abs=1e-6)
    plain = feats(make_state([msg("m", "no tools here at all")]))
    assert plain["duplicate_share"] == plain["superseded_share"] == plain["error_share"] == 0


def test_age_and_summary_features():
    units = [msg(f"u{i}", f"message number {i} " * (i + 1)) for i in range(5)]
    units.append(msg("s", "[Context Summary] earlier work", type="summary", role="assistant", summary_depth=2))
    state = make_state(units)
    f = feats(state)
    assert f["old_share"] == pytest.approx(share(state, {"u0", "u1", "u2"}), abs=1e-6)  # floor(6 * 0.6) = 3
    assert f["summarized_share"] == pytest.approx(share(state, {"s"}), abs=1e-6)
    assert f["summary_depth"] == pytest.approx(0.5)


def test_steps_and_applied_strategies_follow_the_history():
    units = [msg("a", "some context " * 50)]
    fresh = feats(make_state(units))
    assert fresh["steps_taken"] == 0 and fresh["steps_remaining"] == 1
    assert all(fresh[f"applied_{a}"] == 0 for a in ACTIONS)
    later = feats(make_state(units, history=("summarize_old", "hybrid")))
    assert later["steps_taken"] == pytest.approx(2 / 3) and later["steps_remaining"] == pytest.approx(1 / 3)
    assert later["applied_summarize_old"] == 1 and later["applied_prioritize_recent"] == 0
    over = feats(make_state(units, history=("summarize_old",) * 5))
    assert over["steps_taken"] == 1 and over["steps_remaining"] == 0


def test_relevance_features():
    units = [
        msg("on", "fix the parser bug in the parser module"),
        msg("off", "weekend picnic plans with sandwiches and lemonade " * 3),
    ]
    state = make_state(units)
    f = feats(state)
    assert 0 < f["relevance_max"] <= 1
    assert f["relevance_min"] == pytest.approx(0, abs=1e-6)  # no shared words with the task
    assert f["relevance_low_share"] == pytest.approx(share(state, {"off"}), abs=1e-6)
    assert f["relevance_mean"] == pytest.approx(share(state, {"on"}), abs=1e-6)  # scores 1 and 0, token-weighted


def test_empty_context_is_finite():
    vec = observe(make_state([]), CONFIG)
    assert np.all(np.isfinite(vec))
    assert vec[feature_names(CONFIG).index("usage")] == 0


def test_observation_config_is_validated():
    with pytest.raises(ValidationError):
        ObservationConfig(actions=("a", "a"))
    with pytest.raises(ValidationError):
        ObservationConfig(actions=())
    with pytest.raises(ValidationError):
        ObservationConfig(actions=("a",), max_steps=0)
    with pytest.raises(ValidationError):
        ObservationConfig(actions=("a",), unknown=1)


def test_observe_needs_no_training_stack():
    """The deployable policy imports observe without gymnasium, torch, pandas, matplotlib."""
    code = (
        "import sys\n"
        "for name in ('gymnasium', 'torch', 'pandas', 'matplotlib', 'stable_baselines3', 'sb3_contrib'):\n"
        "    sys.modules[name] = None\n"
        "from ctxsim.observe import ObservationConfig, observe\n"
        "from ctxsim.transitions import state_summary\n"
        "from ctxsim.lab.contexts import build_context\nfrom ctxsim.lab.scenarios import find_scenario\n"
        "state = build_context(find_scenario('mild-overflow'), 0)\n"
        "vec = observe(state, ObservationConfig(actions=('summarize_old',)))\n"
        "print(vec.dtype, state_summary(state, vec)['units'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("float32 ")


def test_the_observation_defaults_are_the_episodes():
    from ctxsim.episode_config import EpisodeConfig

    defaults = EpisodeConfig.model_construct()
    config = ObservationConfig(actions=("drop",))
    assert (config.max_steps, config.target, config.embedder) == (defaults.max_steps, defaults.target, defaults.embedder)
