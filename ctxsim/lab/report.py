"""Reports of evaluation results: markdown tables and PNG figures, rliable style.

:func:`write_report` reads a results table (a sweep folder's ``results.csv``, one
row per policy × scenario × seed, the columns of :mod:`ctxsim.lab.evaluate`) and writes
into an output folder ``report.md`` and these figures (matplotlib's Agg canvas, no
pyplot state; matplotlib is imported inside the figure functions only):

- ``reward_by_scenario.png`` — mean reward per scenario per policy, 95 % bootstrap CI over seeds;
- ``pareto.png`` — mean reduction (%) against mean facts retained, one point per policy
  with 95 % stratified bootstrap CIs on both axes, the Pareto front drawn;
- ``strategy_usage*.png`` — share of each action per scenario, from the ``chain``
  column: one heatmap per learned policy (a policy given as a path), or one for all
  policies pooled when none is learned;
- ``learning_curves.png`` — evaluation mean reward (± std) against timesteps from the
  ``evaluations.npz`` of training run folders (``--run``, learned policies' folders,
  or run folders inside the results folder), when there are any;
- ``iqm.png`` — IQM of the normalized score per policy with 95 % stratified bootstrap CIs;
- ``performance_profile.png`` — share of (scenario, seed) runs whose normalized score
  exceeds τ, for τ in [0, 1].

Every figure is titled, its axes labelled with units, about 8 × 5 in at 110 dpi with
fonts of at least 9 pt. Everything is written atomically.
"""

from __future__ import annotations

import io
import itertools
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from ..atomic import atomic_write_bytes, atomic_write_text, output_folder
from ..errors import ConfigError
from ..policies import is_learned, trained_policies_in
from .evaluate import score_tensor, summarize
from .results import policy_paths, read_results
from .runs import EVALUATIONS_FILE, evaluation_split, read_evaluations
from .stats import stratified_bootstrap_ci

FIGSIZE = (8.0, 5.0)  # inches
DPI = 110
RC = {"font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "xtick.labelsize": 9, "ytick.labelsize": 9,
      "legend.fontsize": 9, "figure.dpi": DPI, "savefig.dpi": DPI}
MARKERS = "osD^vP*Xhp<>"
#: the results columns the report reads, besides policy, scenario and seed
REPORT_COLUMNS = ("reward", "success", "used_recovery", "reduction_pct", "p1_preserved", "facts_retained",
                  "rules_retained", "coherence", "latency_ms", "normalized_score", "chain")


# ---- markdown --------------------------------------------------------------------
def markdown_table(columns: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub-flavoured markdown table (``|`` in cells escaped)."""

    def cell(value: object) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(c) for c in columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def policy_table(summary: pd.DataFrame) -> str:
    """Per policy (best IQM first): IQM normalized score and mean reward with 95 % CIs,
    success, recovery, reduction (%), P1 preserved, facts and user rules retained,
    probe score (all probes; "–" for results without probes), coherence, latency (ms)."""
    columns = ["policy", "episodes", "IQM normalized [95% CI]", "mean reward [95% CI]", "success", "recovery",
               "reduction %", "P1 preserved", "facts retained", "rules retained", "probes answered", "coherence",
               "latency ms"]
    ordered = summary.sort_values(["iqm_normalized", "policy"], ascending=[False, True], kind="stable")
    rows = [
        [f"`{r.policy}`", r.episodes, f"{r.iqm_normalized:.3f} [{r.iqm_ci_low:.3f}, {r.iqm_ci_high:.3f}]",
         f"{r.mean_reward:+.3f} [{r.reward_ci_low:+.3f}, {r.reward_ci_high:+.3f}]", f"{r.success_rate:.0%}",
         f"{r.recovery_rate:.0%}", f"{r.reduction_pct:.1f}", f"{r.p1_preserved:.2f}", f"{r.facts_retained:.2f}",
         f"{r.rules_retained:.2f}", "–" if np.isnan(r.probe_score) else f"{r.probe_score:.2f}", f"{r.coherence:.2f}", f"{r.latency_ms:,.0f}"]
        for r in ordered.itertuples()
    ]
    return markdown_table(columns, rows)


def scenario_table(results: pd.DataFrame, column: str, fmt: str) -> str:
    """Mean of ``column`` per scenario (rows) and policy (columns)."""
    table = results.pivot_table(index="scenario", columns="policy", values=column, aggfunc="mean", sort=True)
    table = table.astype(float)
    rows = [[f"`{scenario}`", *(format(v, fmt) for v in row)] for scenario, row in zip(table.index, table.to_numpy())]
    return markdown_table(["scenario", *(f"`{p}`" for p in table.columns)], rows)


def probe_lines(results: pd.DataFrame) -> list[str]:
    """The reward profile(s) of the results and the probe score per scenario and
    policy (nothing for results written before probes existed)."""
    if "probe_score" not in results.columns:
        return []
    profiles = ", ".join(f"`{p}`" for p in sorted(results["reward_profile"].unique())) if "reward_profile" in results else "`seed001`"
    return [
        "## Probes answered per scenario\n",
        f"Share of the context's probes (recall, artifact, continuation, decision) the result answers; "
        f"reward profile {profiles} (`grounded` adds a probe term to seed 001's reward).\n",
        scenario_table(results, "probe_score", ".2f"),
    ]


def summary_markdown(
    results: pd.DataFrame, summary: pd.DataFrame, *, title: str, regressions: pd.DataFrame | None = None
) -> str:
    """A sweep's ``summary.md``: the policy table, per-scenario mean reward and success
    rate, and the regressions when a baseline was checked."""
    parts = [
        f"# {title}\n",
        f"{results['policy'].nunique()} policies × {results['scenario'].nunique()} scenarios × "
        f"{results['seed'].nunique()} seeds = {len(results)} episodes. Normalized score = "
        "(R − R_random) / (R_oracle − R_random): 0 = the random policy's expected reward, 1 = the exhaustive-search oracle; "
        "CIs are 95 % stratified bootstrap intervals over seeds × scenarios.\n",
        "## Policies\n",
        policy_table(summary),
        "## Mean reward per scenario\n",
        scenario_table(results, "reward", "+.3f"),
        "## Success rate per scenario\n",
        scenario_table(results.assign(success=results["success"].astype(float)), "success", ".0%"),
        *probe_lines(results),
    ]
    if regressions is not None:
        parts.append("## Regressions against the baseline\n")
        if regressions.empty:
            parts.append("None: every (policy, scenario) is within tolerance.\n")
        else:
            parts.append(markdown_table(list(regressions.columns), regressions.round(4).itertuples(index=False)))
    return "\n".join(parts)


# ---- figures ---------------------------------------------------------------------
def _figure(height: float = FIGSIZE[1], width: float = FIGSIZE[0]):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def _style(i: int) -> dict:
    from matplotlib import colormaps

    tab20 = colormaps["tab20"].colors
    colors = tab20[0::2] + tab20[1::2]  # the ten tab10 colours first, then their light variants
    return {"color": colors[i % len(colors)], "marker": MARKERS[i % len(MARKERS)]}


def _mean_ci(values: np.ndarray) -> tuple[float, float, float]:
    """Mean and its 95 % bootstrap CI (seeds × runs × scenarios, as :func:`ctxsim.lab.evaluate.score_tensor`)."""
    values = np.asarray(values, dtype=float)
    lo, hi = stratified_bootstrap_ci(values, lambda m: float(np.mean(m)), reps=1000)
    return float(values.mean()), lo, hi


def fig_reward_by_scenario(results: pd.DataFrame):
    """Mean reward per scenario (rows) per policy (markers), 95 % CI over seeds (and runs)."""
    fig = _figure(height=max(FIGSIZE[1], 0.42 * results["scenario"].nunique() + 1.5), width=9.0)
    ax = fig.add_subplot()
    scenarios = sorted(results["scenario"].unique())
    policies = sorted(results["policy"].unique())
    band = 0.8 / max(1, len(policies))
    for i, policy in enumerate(policies):
        group = results[results["policy"] == policy]
        ys, means, errs = [], [], [[], []]
        for j, scenario in enumerate(scenarios):
            rows = group[group["scenario"] == scenario]
            if rows.empty:
                continue
            mean, lo, hi = _mean_ci(score_tensor(rows, "reward"))  # runs resampled as runs, not as more seeds
            ys.append(j - 0.4 + band * (i + 0.5))
            means.append(mean)
            errs[0].append(mean - lo)
            errs[1].append(hi - mean)
        style = _style(i)
        ax.errorbar(means, ys, xerr=errs, fmt=style["marker"], color=style["color"], ms=4, elinewidth=1,
                    capsize=0, label=policy)
    ax.set_yticks(range(len(scenarios)), scenarios)
    ax.invert_yaxis()
    for j in range(1, len(scenarios)):
        ax.axhline(j - 0.5, color="0.9", lw=0.6, zorder=0)
    ax.axvline(0, color="0.5", lw=0.8, ls=":")
    ax.set_xlabel("mean episode reward (seed 001 reward, range −2 … 2)")
    ax.set_ylabel("scenario")
    ax.set_title("Mean reward per scenario and policy (95 % bootstrap CI over seeds)")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False, title="policy")
    return fig


def fig_pareto(results: pd.DataFrame):
    """Mean reduction (%) against mean facts retained per policy, CIs on both axes."""
    fig = _figure()
    ax = fig.add_subplot()
    points = []
    for i, (policy, group) in enumerate(sorted(results.groupby("policy"), key=lambda kv: kv[0])):
        x, xlo, xhi = _mean_ci(score_tensor(group, "reduction_pct"))
        y, ylo, yhi = _mean_ci(score_tensor(group, "facts_retained") * 100)
        style = _style(i)
        ax.errorbar([x], [y], xerr=[[x - xlo], [xhi - x]], yerr=[[y - ylo], [yhi - y]], fmt=style["marker"],
                    color=style["color"], ms=6, elinewidth=1, capsize=2, label=policy)
        points.append((x, y, policy))
    front = _pareto_front(points)
    for x, y, policy in front:  # name the non-dominated policies (the legend names every one)
        ax.annotate(policy, (x, y), xytext=(5, 5), textcoords="offset points", fontsize=9)
    if len(front) > 1:
        ax.plot([p[0] for p in front], [p[1] for p in front], color="0.4", lw=1, ls="--", zorder=0, label="Pareto front")
    ax.set_xlabel("tokens removed (% of the original context)")
    ax.set_ylabel("planted facts retained (%)")
    ax.set_title("Reduction against facts retained per policy (means, 95 % CIs)")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return fig


def _pareto_front(points: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """(x, y, name) points that no other point beats on both x and y (higher is
    better on both; ties do not dominate), sorted by x."""
    def dominated(p) -> bool:
        return any(q[0] >= p[0] and q[1] >= p[1] and (q[0], q[1]) != (p[0], p[1]) for q in points)

    return sorted(p for p in points if not dominated(p))


def action_shares(results: pd.DataFrame) -> pd.DataFrame:
    """Share of each action among all steps (``chain`` column) per scenario; columns
    ordered by overall use."""
    steps = results[["scenario", "chain"]].assign(action=results["chain"].fillna("").astype(str).str.split(">"))
    steps = steps.explode("action")
    steps = steps[steps["action"] != ""]
    counts = pd.crosstab(steps["scenario"], steps["action"])
    counts = counts[counts.sum().sort_values(ascending=False, kind="stable").index]
    return counts.div(counts.sum(axis=1), axis=0)


def fig_strategy_usage(results: pd.DataFrame, label: str):
    """Heatmap of action shares per scenario (rows) from the chain column."""
    shares = action_shares(results)
    fig = _figure(height=max(FIGSIZE[1], 0.32 * len(shares) + 2.2), width=max(FIGSIZE[0], 0.55 * shares.shape[1] + 3.5))
    ax = fig.add_subplot()
    image = ax.imshow(shares.to_numpy(), cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(shares.shape[1]), shares.columns, rotation=40, ha="right")
    ax.set_yticks(range(len(shares)), shares.index)
    for (r, c), value in np.ndenumerate(shares.to_numpy()):
        if value >= 0.005:
            ax.text(c, r, f"{value:.0%}", ha="center", va="center", fontsize=9, color="white" if value < 0.6 else "black")
    ax.set_xlabel("action (strategy id)")
    ax.set_ylabel("scenario")
    ax.set_title(f"Strategy usage per scenario: {label}")
    fig.colorbar(image, ax=ax, label="share of the steps taken (0–1)")
    return fig


def fig_learning_curves(
    runs: Sequence[Path], split: str | None = None, curves: Sequence[tuple[np.ndarray, np.ndarray]] | None = None
):
    """Evaluation mean reward (± std over episodes) against timesteps, one line per run;
    ``split`` names the split the curves are on (default: read from the runs, :func:`_curve_split`);
    ``curves`` holds each run's (timesteps, rewards) when the caller has read them
    (default: :func:`~ctxsim.lab.runs.read_evaluations` here)."""
    fig = _figure()
    ax = fig.add_subplot()
    for i, (run, (steps, rewards)) in enumerate(zip(runs, curves if curves is not None else map(read_evaluations, runs))):
        mean, std = rewards.mean(axis=1), rewards.std(axis=1)
        color = _style(i)["color"]
        ax.plot(steps, mean, color=color, marker="o", ms=3, label=run.name)
        ax.fill_between(steps, mean - std, mean + std, color=color, alpha=0.2)
    ax.set_xlabel("training timesteps (environment steps)")
    ax.set_ylabel("evaluation mean episode reward")
    ax.set_title(f"Learning curves ({split or _curve_split(runs)} evaluation, mean ± std over episodes)")
    ax.legend(loc="lower right", frameon=False)
    return fig


def _curve_split(runs: Sequence[Path]) -> str:
    """The split the runs' evaluation callbacks scored (:func:`~ctxsim.lab.runs.evaluation_split`):
    "validation", "held-out", "training", or each named when they differ ("evaluation" when no run says)."""
    splits = sorted({split for split in map(evaluation_split, runs) if split is not None})
    return " / ".join(splits) or "evaluation"


def fig_iqm(summary: pd.DataFrame):
    """IQM of the normalized score per policy, 95 % CIs, horizontal bars (rliable)."""
    ordered = summary.sort_values(["iqm_normalized", "policy"], ascending=[True, False], kind="stable")
    fig = _figure(height=max(FIGSIZE[1], 0.35 * len(ordered) + 1.5))
    ax = fig.add_subplot()
    y = np.arange(len(ordered))
    values = ordered["iqm_normalized"].to_numpy()
    err = [values - ordered["iqm_ci_low"].to_numpy(), ordered["iqm_ci_high"].to_numpy() - values]
    names = sorted(summary["policy"])  # the colour order of every other figure
    ax.barh(y, values, xerr=err, color=[_style(names.index(p))["color"] for p in ordered["policy"]], alpha=0.85,
            error_kw={"elinewidth": 1.2, "capsize": 3})
    ax.set_yticks(y, ordered["policy"])
    ax.axvline(0, color="0.3", lw=0.8)
    ax.axvline(1, color="0.3", lw=0.8, ls="--")
    ax.set_xlabel("IQM of the normalized score (0 = random, 1 = oracle)")
    ax.set_ylabel("policy")
    ax.set_title("Aggregate performance: interquartile mean with 95 % stratified bootstrap CI")
    return fig


def performance_profile(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """Share of ``scores`` strictly above each τ."""
    scores = np.asarray(scores, dtype=float).ravel()
    return (scores[None, :] > np.asarray(taus, dtype=float)[:, None]).mean(axis=1)


def fig_performance_profile(results: pd.DataFrame):
    """Fraction of (scenario, seed) runs with normalized score > τ, τ in [0, 1]."""
    taus = np.linspace(0, 1, 101)
    fig = _figure()
    ax = fig.add_subplot()
    for i, (policy, group) in enumerate(sorted(results.groupby("policy"), key=lambda kv: kv[0])):
        style = _style(i)
        ax.plot(taus, performance_profile(group["normalized_score"], taus), color=style["color"],
                ls=("-", "--", ":", "-.")[i // 10 % 4], lw=1.6, label=policy)
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("normalized score threshold τ (0 = random, 1 = oracle)")
    ax.set_ylabel("fraction of runs with score > τ")
    ax.set_title("Performance profiles over (scenario, seed) runs")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return fig


# ---- the report ------------------------------------------------------------------
def check_complete(results: pd.DataFrame, source: str | Path) -> None:
    """ConfigError unless each policy (and each of its runs) has a row for every
    scenario × seed it has at all: the bootstrap CIs resample that full grid."""
    for policy, group in results.groupby("policy", sort=True):
        have = set(zip(group["run"], group["scenario"], group["seed"]))
        grid = itertools.product(*(sorted(group[c].unique()) for c in ("run", "scenario", "seed")))
        for run, scenario, seed in grid:
            if (run, scenario, seed) not in have:
                raise ConfigError(f"policy {policy!r}{f', run {run!r},' if run else ''} has no row for scenario "
                                  f"{scenario!r}, seed {seed} (every policy needs each scenario × seed it has)",
                                  source=source)


def find_runs(results_dir: Path, policies: Iterable[str], runs: Sequence[str | Path] = ()) -> list[Path]:
    """Training run folders with an ``evaluations.npz``: ``runs`` (each must have one,
    or be a folder of such runs), learned policies' folders (a run folder, a model
    zip's folder, or each run of a folder of runs) and run folders inside
    ``results_dir``; in that order, without repeats."""

    def members(path: Path) -> list[Path]:
        folder = path if path.is_dir() else path.parent
        if (folder / EVALUATIONS_FILE).is_file():
            return [folder]
        return [run for run in trained_policies_in(folder) if (run / EVALUATIONS_FILE).is_file()]

    found: list[Path] = []
    for run in runs:
        inside = members(Path(run)) if Path(run).is_dir() else []
        if not inside:
            raise ConfigError("not a training run folder (nor a folder of them): it has no evaluations.npz", source=run)
        found.extend(inside)
    for policy in policies:
        if is_learned(policy):
            found.extend(members(Path(policy)))
    if results_dir.is_dir():
        found.extend(p.parent for p in sorted(results_dir.rglob(EVALUATIONS_FILE)))
    return list(dict.fromkeys(p.resolve() for p in found))


def write_report(results_path: str | Path, out: str | Path, runs: Sequence[str | Path] = ()) -> Path:
    """Write ``report.md`` and the figures into ``out``; returns the report's path.

    ``results_path``: a results CSV or a folder holding ``results.csv``. Every input
    is checked and every figure made before anything is written; a report that fails
    removes the output folder if it created it.
    """
    import matplotlib

    results_path = Path(results_path)
    results = read_results(results_path, REPORT_COLUMNS)
    check_complete(results, results_path / "results.csv" if results_path.is_dir() else results_path)
    results_dir = results_path if results_path.is_dir() else results_path.parent
    out = Path(out)
    paths = policy_paths(results_dir)  # a sweep's labels may be relative to its sweep file
    learned = [p for p in sorted(results["policy"].unique()) if is_learned(p)]
    run_dirs = find_runs(results_dir, [paths.get(p, p) for p in learned], runs)
    curves = [read_evaluations(run) for run in run_dirs]  # a bad file fails here, before the bootstrap and the figures

    summary = summarize(results)
    figures: list[tuple[str, bytes, str, str]] = []  # (file, PNG, heading, caption): all made before any is written

    def add(name: str, fig, heading: str, caption: str) -> None:
        figures.append((name, _png(fig), heading, caption))

    with matplotlib.rc_context(RC):
        add("iqm.png", fig_iqm(summary), "Aggregate IQM of the normalized score",
            "Interquartile mean over all (scenario, seed) runs; bars are 95 % stratified bootstrap CIs.")
        add("performance_profile.png", fig_performance_profile(results), "Performance profiles",
            "Fraction of runs whose normalized score exceeds τ; a curve above another dominates it.")
        add("reward_by_scenario.png", fig_reward_by_scenario(results), "Mean reward per scenario",
            "Mean reward (seed 001's formula; its profile: the probes table) of each policy on each scenario, "
            "95 % bootstrap CI over seeds.")
        add("pareto.png", fig_pareto(results), "Reduction against facts retained",
            "Each point is a policy (means over all runs, 95 % CIs); the dashed line joins the non-dominated ones.")
        if learned:
            slugs = ["".join(c if c.isalnum() or c in "-_" else "_" for c in Path(p).name) or "policy" for p in learned]
            for i, (policy, slug) in enumerate(zip(learned, slugs)):
                slug = slug if slugs.count(slug) == 1 else f"{slug}_{i}"  # e.g. two runs' best_model.zip
                add(f"strategy_usage_{slug}.png", fig_strategy_usage(results[results["policy"] == policy], f"`{policy}`"),
                    f"Strategy usage of `{policy}`", "Share of each action among the policy's steps, per scenario.")
        else:
            label = f"all {results['policy'].nunique()} policies pooled"
            add("strategy_usage.png", fig_strategy_usage(results, label), "Strategy usage",
                "Share of each action among all steps of all policies, per scenario (no learned policy in the results).")
        if run_dirs:
            split = _curve_split(run_dirs)
            add("learning_curves.png", fig_learning_curves(run_dirs, split, curves), "Learning curves",
                f"Mean reward of the evaluation callback during training on the {split} split "
                "(the split the best model is chosen on; ± std over evaluation episodes), from "
                + ", ".join(f"`{r.name}`" for r in run_dirs) + ".")

    parts = [
        "# ctxsim report\n",
        f"Results: `{results_path}` — {results['policy'].nunique()} policies × {results['scenario'].nunique()} "
        f"scenarios × {results['seed'].nunique()} seeds = {len(results)} episodes. Normalized score = "
        "(R − R_random) / (R_oracle − R_random): 0 = the random policy's expected reward, 1 = the exhaustive-search oracle.\n",
        "## Summary\n",
        policy_table(summary),
        "## Figures\n",
    ]
    for name, _, heading, caption in figures:
        parts.append(f"### {heading}\n\n![{heading}]({name})\n\n{caption}\n")
    parts += ["## Mean reward per scenario\n", scenario_table(results, "reward", "+.3f"), *probe_lines(results)]
    with output_folder(out):  # removed again if this report created it and a write fails
        for name, png, _, _ in figures:
            atomic_write_bytes(out / name, png)
        return atomic_write_text(out / "report.md", "\n".join(parts))
