import numpy as np
import pytest

from ctxsim.metrics import BreakingOutcome
from ctxsim.reward import RewardWeights, compute_reward, reward_terms
from ctxsim.lab.stats import iqm, normalized_score, paired_difference_ci, stratified_bootstrap_ci


def make(success=True, recovery=False, coherence=0.9, reduced=5000, original=10000, p1=1.0, ms=0.0):
    return BreakingOutcome(success, recovery, coherence, coherence - 1, reduced, original, original - reduced, 5000, p1, 1.0, 1.0, ms)


def test_seed_formula_success():
    o = make(ms=600)
    assert compute_reward(o) == pytest.approx(1 + 0.5 * -0.1 + 0.3 * 0.5 + 0.2 * 1.0 - 0.06)


def test_latency_free_under_500ms():
    assert reward_terms(make(ms=500))["latency"] == 0
    assert reward_terms(make(ms=501))["latency"] == pytest.approx(-0.0501)


def test_failure_and_recovery():
    assert compute_reward(make(success=False, recovery=True)) == pytest.approx(-1.7)
    assert compute_reward(make(success=True, recovery=True, coherence=1.0, reduced=0, p1=0)) == pytest.approx(0.3)


def test_clamped():
    assert compute_reward(make(success=False, recovery=True, ms=10_000)) == -2.0
    assert compute_reward(make(), RewardWeights(success=5)) == 2.0


NON_FINITE = [
    ("ContextOverflow-v0", "reward: {success: .nan}", "config.reward.success", "nan"),
    ("ContextOverflow-v0", "reward: {clamp: .inf}", "config.reward.clamp", "inf"),
    ("ContextOverflow-v0", "latency: {llm_overhead_ms: .inf}", "config.latency.llm_overhead_ms", "inf"),
    ("ConversationStream-v0", "stream_reward: {probes: .inf}", "config.stream_reward.probes", "inf"),
    ("ConversationStream-v0", "recovery_triggers: {window_seconds: .inf}", "config.recovery_triggers.window_seconds", "inf"),
]


@pytest.mark.parametrize("env, config, key, value", NON_FINITE, ids=[case[2] for case in NON_FINITE])
def test_env_spec_weights_must_be_finite(tmp_path, capsys, env, config, key, value):
    from ctxsim.lab.cli import main

    spec, out = tmp_path / "spec.yaml", tmp_path / "x.csv"
    spec.write_text(f"id: ctxsim/{env}\nconfig: {{{config}}}\n")
    assert main(["evaluate", "--env", str(spec), "--policy", "random", "--names", "gpt4-6000", "--seeds", "1", "--out", str(out)]) == 2
    assert capsys.readouterr().err == f"ctxsim: error: {spec}: key '{key}': Input should be a finite number (got {value})\n"
    assert not out.exists()


def test_terms_sum_to_unclamped_reward():
    o = make(ms=900)
    assert sum(reward_terms(o).values()) == pytest.approx(compute_reward(o))


def test_iqm_and_bootstrap():
    x = np.array([0, 1, 2, 3, 4, 5, 6, 100.0])
    assert iqm(x) == pytest.approx(np.mean([2, 3, 4, 5]))
    scores = np.random.default_rng(1).normal(0.5, 0.1, size=(10, 17))
    lo, hi = stratified_bootstrap_ci(scores, reps=300)
    assert lo < iqm(scores) < hi and hi - lo < 0.1
    mean, lo, hi = paired_difference_ci(scores + 0.2, scores, reps=300)
    assert mean == pytest.approx(0.2) and lo == pytest.approx(0.2) and hi == pytest.approx(0.2)


def test_bootstrap_over_training_runs_is_two_level():
    """contexts × runs × tasks: one run draws exactly what the matrix does; identical
    runs add no evidence (same interval); runs that disagree widen it."""
    rng = np.random.default_rng(2)
    scores = rng.normal(0.5, 0.1, size=(10, 4))
    single = stratified_bootstrap_ci(scores, np.mean, reps=400)
    assert stratified_bootstrap_ci(scores[:, None, :], np.mean, reps=400) == single
    assert stratified_bootstrap_ci(np.repeat(scores[:, None, :], 5, axis=1), np.mean, reps=400) == single
    offsets = np.array([-0.2, -0.1, 0.0, 0.1, 0.2])[None, :, None]  # runs that learned different things
    lo, hi = stratified_bootstrap_ci(scores[:, None, :] + offsets, np.mean, reps=400)
    assert lo < single[0] and hi > single[1] and lo < np.mean(scores) < hi


def test_a_run_is_drawn_once_for_every_task():
    """A run is one policy on all scenarios: its effect is shared across tasks, so the
    bootstrap must not average it away by drawing runs per task."""
    offsets = np.array([-0.2, -0.1, 0.0, 0.1, 0.2])[None, :, None]
    scores = np.zeros((10, 1, 8)) + offsets  # no context noise: all uncertainty is in the runs
    lo, hi = stratified_bootstrap_ci(scores, np.mean, reps=2000)
    run_means = np.random.default_rng(0).choice(offsets.ravel(), size=(20000, 5)).mean(axis=1)
    expected = np.quantile(run_means, [0.025, 0.975])
    assert (lo, hi) == pytest.approx(tuple(expected), abs=0.02)  # drawing per task would give about a third of the width


def test_paired_differences_resample_each_sides_runs_on_their_own():
    rng = np.random.default_rng(3)
    contexts = rng.normal(1.0, 0.1, size=(10, 4))
    b = contexts - 0.1
    single = paired_difference_ci(contexts, b, reps=500)
    assert single[0] == pytest.approx(0.1)
    same_runs = paired_difference_ci(np.repeat(contexts[:, None, :], 5, axis=1), b[:, None, :], reps=500)
    assert same_runs == pytest.approx(single)  # five runs that act alike are one run's evidence
    spread = np.array([-0.1, -0.05, 0.0, 0.05, 0.1])[None, :, None]
    both = paired_difference_ci(contexts[:, None, :] + spread, b[:, None, :] + spread[:, ::-1][:, :3], reps=500)
    assert both[0] == pytest.approx(0.1 - 0.05)  # each side's mean over its own runs
    assert both[2] - both[1] > 0.1 > single[2] - single[1]  # run-to-run spread on each side widens it
    with pytest.raises(ValueError, match="same contexts"):
        paired_difference_ci(contexts, b[:5])


def test_normalized_score():
    out = normalized_score(np.array([0.5, 1.0, 0.0]), np.array([0.0, 0.0, 0.0]), np.array([1.0, 1.0, 0.0]))
    assert out.tolist() == [0.5, 1.0, 1.0]
