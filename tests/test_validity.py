"""reports/metric_validity.md: the drop curves see loss under the new measure and
hardly under the old one, the report has its sections, a bad --out is refused."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from ctxsim.lab.contexts import build_context
from ctxsim.lab.evaluate import evaluate
from ctxsim.lab.scenarios import find_scenario
from ctxsim.lab.validity import (
    DROP_SHARES,
    Gap,
    Results,
    adaptivity_gap,
    correlations,
    curve_means,
    dropped,
    drop_curves,
    fitted_chain,
    gap_table,
    generated_scenarios,
    main,
    render,
    settings_for,
)


@pytest.fixture(scope="module")
def curves():
    scenarios = [find_scenario("chat-10k"), find_scenario("fact-dense")]
    return drop_curves(scenarios, [0])


def test_the_drop_curves_use_only_generated_scenarios():
    scenarios = generated_scenarios()
    assert scenarios and not any(s.is_transcript for s in scenarios)
    assert "chat-10k" in {s.name for s in scenarios} and "transcript-marshmallow" not in {s.name for s in scenarios}


def test_dropping_removes_the_oldest_or_a_nested_random_share_of_the_non_pinned_units():
    state = build_context(find_scenario("pinned-instructions"), 0)
    others = [u.id for u in state.units if not u.pinned]
    half = dropped(state, 0.5)
    assert [u.id for u in half.units if not u.pinned] == others[len(others) // 2:]
    assert all(u.id in half for u in state.units if u.pinned)
    small, large = (dropped(state, share, "random", seed=3) for share in (0.2, 0.6))
    assert {u.id for u in large.units} < {u.id for u in small.units}  # the same permutation: nested
    assert [u.id for u in small.units] != [u.id for u in dropped(state, 0.2).units]


def test_new_coherence_falls_strictly_with_the_share_dropped_and_the_old_one_hardly(curves):
    oldest = curves[curves.order == "oldest"]
    assert sorted(oldest.share.unique()) == list(DROP_SHARES)
    for _, context in oldest.groupby(["scenario", "seed"]):
        context = context.sort_values("share")
        recall, centroid = context.coherence_recall.to_numpy(), context.coherence_centroid.to_numpy()
        assert recall[0] == centroid[0] == 1.0
        assert np.all(np.diff(recall) < 0), recall
        half = context.share.to_list().index(50)
        assert 1 - recall[half] > 3 * (1 - centroid[half])  # the old measure is much flatter
        assert recall[half] <= 0.7 and centroid[half] >= 0.85  # 0.88-0.97 on these agent sessions
        # the reward given success: the old measure pays for dropping more, the new one does not
        assert np.all(np.diff(context.reward_recall.to_numpy()) < 0)
        assert context.reward_centroid.iloc[half] > context.reward_centroid.iloc[1]
    means = curve_means(curves)
    random = means[means.order == "random"].sort_values("share").coherence_recall.to_numpy()
    assert random[0] == 1.0 and random[-1] < 0.5 and np.all(np.diff(random) <= 0)


@pytest.fixture(scope="module")
def small_results(curves):
    scenario = [find_scenario("mild-overflow")]
    issue, held = [], []
    for measure in ("centroid", "recall"):
        settings = settings_for(measure, "seed001")
        issue.append(evaluate(["seed-chain", "only:prioritize_recent"], scenario, 2, settings, note=lambda t: None)
                     .assign(measure=measure))
        held.append(evaluate(["oracle", "only:summarize_old"], scenario, 2, settings, note=lambda t: None)
                    .assign(measure=measure))
    gaps = [adaptivity_gap(df, df.measure.iloc[0], "seed001", fixed="only:summarize_old") for df in held]
    return Results(curves, pd_concat(issue), gaps, pd_concat(held))


def pd_concat(frames):
    import pandas as pd

    return pd.concat(frames, ignore_index=True)


def test_the_gap_is_the_oracle_minus_the_fixed_policy(small_results):
    for gap, (_, df) in zip(small_results.gaps, small_results.held_out.groupby("measure", sort=False)):
        means = df.groupby("policy").reward.mean()
        assert gap.gap == pytest.approx(means["oracle"] - means["only:summarize_old"])
        assert gap.gap >= 0 and gap.ci_low <= gap.gap <= gap.ci_high
        assert gap.chain.startswith("summarize_old") and gap.fitted == ""  # only best-fixed is fitted


def test_the_gap_table_names_the_fitted_chain_beside_the_one_played_most():
    # best-fixed's fit and the prefix its episodes stop at are two columns: a chain
    # whose first step fits most contexts plays that step alone
    text = gap_table([Gap("recall", "seed001", 1.2, 1.1, 0.1, 0.05, 0.15, "hybrid", "hybrid>summarize"),
                      Gap("recall", "grounded", 1.2, 1.1, 0.1, 0.05, 0.15, "summarize_old", "")])
    assert "| `hybrid>summarize` | `hybrid` |" in text and "| – | `summarize_old` |" in text
    assert fitted_chain("only:summarize_old", settings_for("recall", "seed001")) == ""


def test_correlations_cover_each_measure_over_all_and_successful_episodes(small_results):
    table = correlations(small_results.issue)
    assert list(table.measure) == ["centroid", "centroid", "recall", "recall"]
    assert list(table.episodes) == ["all", "successful"] * 2
    assert (table.n[table.episodes == "all"] == 4).all()


def test_the_report_has_every_section(small_results):
    text = render(small_results, figure="metric_validity.png", command="python -m ctxsim.lab.validity --out x.md",
                  info={"CPU": "test"}, seconds=61.0)
    sections = ["## Reading", "## 1. Drop curves", "## 2. Correlations", "## 3. Rankings", "## 4. Adaptivity gap"]
    positions = [text.index(s) for s in sections]
    assert positions == sorted(positions)
    assert "![drop curves](metric_validity.png)" in text and "`python -m ctxsim.lab.validity --out x.md`" in text
    for measure in ("centroid", "recall"):
        assert f"### `{measure}` coherence, `seed001` reward" in text
        assert f"Adaptivity gap** under `{measure}` / `seed001`" in text
    assert "`only:prioritize_recent`" in text and "| 50 |" in text


@pytest.mark.parametrize("out, needle", [
    ("report.txt", "must name a .md file"),
    ("folder.md", "names a folder"),
    ("a-file/r.md", "cannot be written"),
])
def test_a_bad_out_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, out, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder.md").mkdir()
    (tmp_path / "a-file").write_text("")
    assert main(["--out", out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ctxsim.lab.validity: error:") and needle in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "folder.md"]


def test_the_command_exits_2_in_a_real_process(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ctxsim.lab.validity", "--out", str(tmp_path)], capture_output=True,
                          text=True, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "ctxsim.lab.validity: error:" in proc.stderr, proc.stderr
