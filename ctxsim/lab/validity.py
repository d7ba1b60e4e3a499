"""Is the coherence measure valid, and is there anything to learn?

``python -m ctxsim.lab.validity --out reports/metric_validity.md`` (``make validity``)
writes the report and its figure (``<out>.png``, beside it). It compares the two
coherence measures of :mod:`ctxsim.coherence` — ``centroid`` (the old one) and
``recall`` (the default) — in four parts:

1. *Drop curves* (:func:`drop_curves`): every generated scenario of the shipped
   suite (not the transcripts), context seeds 0–4, with the oldest (or random)
   ``k`` % of the non-pinned units removed, ``k`` = 0, 10, …, 90, scored by
   :func:`ctxsim.metrics.outcome` under both measures: coherence, facts retained,
   P1 preserved, probes answered. A valid measure falls as what matters falls.
2. *Correlations* (:func:`correlations`): Spearman's rank correlation of coherence
   with facts retained and with the probe score across the evaluation episodes of
   the shipped non-learned policies (:func:`compared_policies`) on
   :data:`ISSUE_SCENARIOS` × 5 seeds, all episodes and successful ones.
3. *Rankings* (:func:`ranking_table`): those policies by mean reward (95 %
   stratified bootstrap CI) under each measure and reward profile, beside what each
   kept (probes, P1 units, rules, facts), its reduction and success.
4. *Adaptivity gap* (:func:`gap_table`): mean reward of ``oracle`` minus
   ``best-fixed:maskable_ppo_seed001`` on that experiment's held-out split
   (:data:`GAP_SEEDS` seeds per scenario), paired 95 % bootstrap CI.

The evaluations run as independent jobs (one per measure × profile × split, and
the drop curves) on :func:`ctxsim.lab.parallel.process_map` workers; results do not
depend on the number of workers. The best-fixed fits are stored beside the context
pools (:mod:`ctxsim.lab.policies.best_fixed`), so a second run skips them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from ..atomic import atomic_write_bytes, atomic_write_text, check_output
from ..episode import EpisodeSettings
from ..errors import ConfigError, CtxsimError
from ..metrics import outcome
from ..model import ContextState
from ..paths import EXPERIMENTS_DIR
from ..policies import get_policy, list_policies
from ..policies.baselines import NOT_ACTIONS
from ..reward import compute_reward
from .contexts import build_context
from .environments.spec import env_class
from .evaluate import evaluate, paired_differences, settings_from_env_spec, summarize
from .machine import machine
from .parallel import default_workers, process_map
from .report import _figure, _png, _style, markdown_table
from .scenarios import DEFAULT_SUITE, Scenario, load_scenarios
from .stats import spearman
from .train import env_configs, load_experiment

#: the coherence measures compared: old first
MEASURES = ("centroid", "recall")
#: the reward profiles compared, each on design 001's environment (envs/seed001.yaml)
PROFILES = ("seed001", "grounded")
#: shares of the non-pinned units dropped (%)
DROP_SHARES = tuple(range(0, 100, 10))
DROP_SEEDS = 5
#: the scenarios of the correlations and rankings (issue 22's measurements)
ISSUE_SCENARIOS = ("gpt4-6000", "fragmented", "tool-dupes", "transcript-marshmallow", "fact-dense", "code-heavy",
                   "chat-10k")
EVAL_SEEDS = 5
#: the experiment whose training split fits best-fixed and whose held-out split measures the gap
GAP_EXPERIMENT = "maskable_ppo_seed001"
GAP_SEEDS = 10
BASE_POLICIES = ("seed-chain", "random", "greedy", "oracle")
#: the outcome columns a drop curve records (per measure: coherence_<measure>)
CURVE_COLUMNS = ("facts_retained", "p1_preserved", "probe_score")


# ---- 1. drop curves ------------------------------------------------------------------
def generated_scenarios(suite: str | Path = DEFAULT_SUITE) -> list[Scenario]:
    """The generated (not transcript) scenarios of ``suite``, in file order."""
    return [s for s in load_scenarios(suite) if not s.is_transcript]


def dropped(state: ContextState, share: float, order: str = "oldest", seed: int = 0) -> ContextState:
    """``state`` without ``floor(share × n)`` of its ``n`` non-pinned units: the oldest
    (``order`` "oldest") or the first of a random permutation drawn from ``seed``
    (``order`` "random"; one seed gives nested drops as the share grows)."""
    others = [u.id for u in state.units if not u.pinned]
    count = int(np.floor(share * len(others) + 1e-9))
    if order == "random":
        others = [others[i] for i in np.random.default_rng(seed).permutation(len(others))]
    elif order != "oldest":
        raise ValueError(f"unknown drop order {order!r}; known: oldest, random")
    gone = set(others[:count])
    return state.with_units([u for u in state.units if u.id not in gone])


def drop_curves(
    scenarios: Sequence[Scenario], seeds: Sequence[int], shares: Sequence[int] = DROP_SHARES,
    orders: Sequence[str] = ("oldest", "random"),
) -> pd.DataFrame:
    """One row per (order, scenario, seed, share %): ``coherence_<measure>`` for each
    of :data:`MEASURES`, ``reward_<measure>`` (the ``seed001`` reward the dropped
    context would get if it fit the limit: the reward *given success*) and the
    :data:`CURVE_COLUMNS` of the dropped context (default embedder). Random drops
    permute with seed ``1000 × seed + scenario index``."""
    rows = []
    for order in orders:
        for si, scenario in enumerate(scenarios):
            for seed in seeds:
                state = build_context(scenario, seed)
                for share in shares:
                    final = dropped(state, share / 100, order, seed * 1000 + si)
                    scored = {m: outcome(state, final, coherence_measure=m) for m in MEASURES}
                    first = scored[MEASURES[0]]
                    rows.append({"order": order, "scenario": scenario.name, "seed": seed, "share": share,
                                 **{f"coherence_{m}": o.coherence for m, o in scored.items()},
                                 **{f"reward_{m}": compute_reward(replace(o, success=True)) for m, o in scored.items()},
                                 **{c: getattr(first, c) for c in CURVE_COLUMNS}})
    return pd.DataFrame(rows)


def curve_means(curves: pd.DataFrame) -> pd.DataFrame:
    """Mean of every scored column per (order, share), oldest first."""
    columns = [f"{kind}_{m}" for kind in ("coherence", "reward") for m in MEASURES] + list(CURVE_COLUMNS)
    return curves.groupby(["order", "share"], sort=True)[columns].mean().reset_index()


# ---- 2-4. evaluations ---------------------------------------------------------------
def settings_for(measure: str, profile: str) -> EpisodeSettings:
    """Design 001's environment's episode settings (``envs/seed001.yaml``) with
    ``coherence: measure`` under the reward ``profile`` (one of :data:`PROFILES`)."""
    return settings_from_env_spec("seed001", {"coherence": measure, "reward": {"profile": profile}})[0]


def compared_policies(settings: EpisodeSettings) -> list[str]:
    """The shipped non-learned policies: :data:`BASE_POLICIES`, every peer (those
    whose extra is missing are skipped by :func:`ctxsim.lab.evaluate.evaluate` with a
    note) and ``only:<id>`` of each of the settings' actions."""
    peers = [p for p in list_policies() if p.startswith("peer:")]
    return [*BASE_POLICIES, *peers, *(f"only:{a}" for a in settings.actions if a not in NOT_ACTIONS)]


def held_out_scenarios(experiment: str = GAP_EXPERIMENT) -> list[Scenario]:
    """The held-out scenarios of ``experiments/<experiment>.yaml``."""
    env_id, _, held_out, _ = env_configs(load_experiment(EXPERIMENTS_DIR / f"{experiment}.yaml"))
    return list(env_class(env_id).checked_config(held_out).suite)


@dataclass(frozen=True)
class Job:
    """One unit of work: ``kind`` "drops", or "issue" / "held-out" (an evaluation
    under ``measure`` and ``profile``)."""

    kind: str
    measure: str = ""
    profile: str = ""
    seeds: int = 0


def run_job(job: Job) -> pd.DataFrame:
    """The rows of one :class:`Job` (module-level so that workers can run it)."""
    if job.kind == "drops":
        return drop_curves(generated_scenarios(), range(job.seeds))
    settings = settings_for(job.measure, job.profile)
    if job.kind == "issue":
        suite = {s.name: s for s in load_scenarios(DEFAULT_SUITE)}
        scenarios = [suite[name] for name in ISSUE_SCENARIOS]
        policies = compared_policies(settings)
    else:
        scenarios = held_out_scenarios()
        policies = ["oracle", f"best-fixed:{GAP_EXPERIMENT}"]
    df = evaluate(policies, scenarios, job.seeds, settings, note=lambda text: None)
    return df.assign(measure=job.measure)


def correlations(results: pd.DataFrame) -> pd.DataFrame:
    """Spearman's rho of coherence with facts retained and with the probe score, per
    (measure, profile), over all episodes and over the successful ones (NaN where a
    column is constant)."""
    rows = []
    for (measure, profile), group in results.groupby(["measure", "reward_profile"], sort=False):
        for subset, episodes in (("all", group), ("successful", group[group.success.astype(bool)])):
            rows.append({"measure": measure, "profile": profile, "episodes": subset, "n": len(episodes),
                         "facts": spearman(episodes.coherence, episodes.facts_retained),
                         "probes": spearman(episodes.coherence, episodes.probe_score)})
    return pd.DataFrame(rows)


RANKING_COLUMNS = ["policy", "mean reward [95% CI]", "probes", "P1 preserved", "rules", "facts", "tokens reduced %",
                   "success", "coherence"]


def ranking_rows(summary: pd.DataFrame) -> list[list[str]]:
    """Rows of :data:`RANKING_COLUMNS`, best mean reward first."""
    ordered = summary.sort_values(["mean_reward", "policy"], ascending=[False, True], kind="stable")
    return [[f"`{r.policy}`", f"{r.mean_reward:+.4f} [{r.reward_ci_low:+.4f}, {r.reward_ci_high:+.4f}]",
             f"{r.probe_score:.2f}", f"{r.p1_preserved:.2f}", f"{r.rules_retained:.2f}", f"{r.facts_retained:.2f}",
             f"{r.reduction_pct:.1f}", f"{r.success_rate:.0%}", f"{r.coherence:.3f}"]
            for r in ordered.itertuples()]


def ranking_table(results: pd.DataFrame) -> str:
    """:func:`ranking_rows` of ``results`` (one measure and profile) as markdown."""
    return markdown_table(RANKING_COLUMNS, ranking_rows(summarize(results)))


@dataclass(frozen=True)
class Gap:
    """The adaptivity gap under one measure and profile: ``oracle`` minus
    ``best-fixed`` mean reward on the held-out contexts, its 95 % CI, the chain
    best-fixed was fitted to (``fitted``) and the one its episodes play most often
    (``chain``: a prefix of it where the context fits early)."""

    measure: str
    profile: str
    oracle: float
    best_fixed: float
    gap: float
    ci_low: float
    ci_high: float
    chain: str
    fitted: str


def adaptivity_gap(results: pd.DataFrame, measure: str, profile: str, fixed: str = f"best-fixed:{GAP_EXPERIMENT}") -> Gap:
    """:class:`Gap` of one held-out evaluation of ``oracle`` and the ``fixed`` policy."""
    diff = paired_differences(results, "oracle").set_index("policy").loc[fixed]
    means = results.groupby("policy").reward.mean()
    chains = results[results.policy == fixed].chain.value_counts()
    return Gap(measure, profile, float(means["oracle"]), float(means[fixed]), float(diff.mean_difference),
               float(diff.ci_low), float(diff.ci_high), str(chains.index[0]) if len(chains) else "",
               fitted_chain(fixed, settings_for(measure, profile)))


def fitted_chain(policy: str, settings: EpisodeSettings) -> str:
    """The chain a ``best-fixed:`` policy was fitted to under ``settings`` (the stored fit
    its evaluation made), its steps joined by ``>``; "" for any other policy."""
    if not policy.startswith("best-fixed:"):
        return ""
    return ">".join(get_policy(policy).fit_for(settings)[0].chain)


GAP_COLUMNS = ["measure", "profile", "oracle", "best-fixed", "gap (oracle − best-fixed)", "95% CI", "best-fixed's chain",
               "played most often"]


def gap_table(gaps: Sequence[Gap]) -> str:
    rows = [[f"`{g.measure}`", f"`{g.profile}`", f"{g.oracle:+.4f}", f"{g.best_fixed:+.4f}", f"{g.gap:+.4f}",
             f"[{g.ci_low:+.4f}, {g.ci_high:+.4f}]", f"`{g.fitted}`" if g.fitted else "–", f"`{g.chain}`"] for g in gaps]
    return markdown_table(GAP_COLUMNS, rows)


# ---- the report ----------------------------------------------------------------------
def curve_figure(means: pd.DataFrame) -> bytes:
    """PNG: the mean drop curves (share dropped → score)."""
    fig = _figure()
    ax = fig.add_subplot()
    oldest, random = means[means.order == "oldest"], means[means.order == "random"]
    lines = [(oldest, "coherence_centroid", "centroid coherence (old), oldest dropped"),
             (oldest, "coherence_recall", "recall coherence (new), oldest dropped"),
             (random, "coherence_recall", "recall coherence (new), random dropped"),
             (oldest, "facts_retained", "facts retained, oldest dropped"),
             (oldest, "p1_preserved", "P1 preserved, oldest dropped"),
             (oldest, "probe_score", "probes answered, oldest dropped")]
    for i, (data, column, label) in enumerate(lines):
        ax.plot(data.share, data[column], label=label, linestyle="--" if "random" in label else "-", **_style(i))
    ax.set_xlabel("non-pinned units dropped (%)")
    ax.set_ylabel("mean over generated scenarios × seeds")
    ax.set_ylim(0, 1.05)
    ax.set_title("What a measure sees when units leave")
    ax.legend(loc="lower left")
    ax.grid(alpha=0.3)
    return _png(fig)


def curve_rows(means: pd.DataFrame) -> list[list[str]]:
    rows = []
    random = means[means.order == "random"].set_index("share")
    for r in means[means.order == "oldest"].itertuples():
        rows.append([f"{r.share}", f"{r.coherence_centroid:.3f}", f"{r.coherence_recall:.3f}",
                     f"{random.loc[r.share, 'coherence_recall']:.3f}", f"{r.facts_retained:.2f}",
                     f"{r.p1_preserved:.2f}", f"{r.probe_score:.2f}", f"{r.reward_centroid:+.3f}",
                     f"{r.reward_recall:+.3f}"])
    return rows


CURVE_HEADER = ["dropped %", "centroid (old)", "recall (new)", "recall, random drops", "facts", "P1", "probes",
                "reward given success, centroid", "reward given success, recall"]


@dataclass
class Results:
    """Everything the report shows: drop curves, the issue evaluations (all measures
    and profiles, column ``measure``), the adaptivity gaps."""

    curves: pd.DataFrame
    issue: pd.DataFrame
    gaps: list[Gap]
    held_out: pd.DataFrame


def reading(results: Results) -> list[str]:
    """The findings, stated from the numbers."""
    means = curve_means(results.curves)
    oldest = means[means.order == "oldest"].set_index("share")
    at = {k: oldest.loc[k] for k in (10, 50, 90) if k in oldest.index}
    lines = []
    if at:
        parts = [f"{k} %: centroid {row.coherence_centroid:.3f}, recall {row.coherence_recall:.3f}, facts "
                 f"{row.facts_retained:.2f}, P1 {row.p1_preserved:.2f}, probes {row.probe_score:.2f}"
                 for k, row in at.items()]
        recall = oldest.coherence_recall.to_numpy()
        monotone = "strictly decreasing" if np.all(np.diff(recall) < 0) else "not strictly decreasing"
        lines.append(f"- **Drop curves** (oldest units dropped; {'; '.join(parts)}). The new measure is {monotone} "
                     f"from 0 to {oldest.index.max()} %; the old one loses "
                     f"{1 - oldest.coherence_centroid.iloc[-1]:.2f} over the whole range.")
        peak = {m: int(oldest[f"reward_{m}"].idxmax()) for m in MEASURES}
        lines.append("- **Reward given success** (seed001) peaks at " + ", ".join(
            f"{peak[m]} % dropped under `{m}` ({oldest.loc[peak[m], f'reward_{m}']:+.3f})" for m in MEASURES)
            + " (means over the contexts): up to its peak, a measure pays for cutting more than needed.")
    corr = correlations(results.issue)
    seed = corr[corr.profile == "seed001"].set_index(["measure", "episodes"])
    if not seed.empty:
        cells = [f"{m}: {seed.loc[(m, 'all'), 'facts']:+.2f} all, {seed.loc[(m, 'successful'), 'facts']:+.2f} successful"
                 for m in MEASURES if (m, "all") in seed.index]
        lines.append(f"- **Spearman(coherence, facts retained)** over the `seed001` evaluation episodes — {'; '.join(cells)}.")
    for measure in MEASURES:
        for profile in PROFILES:
            part = results.issue[(results.issue.measure == measure) & (results.issue.reward_profile == profile)]
            if part.empty:
                continue
            ranked = summarize(part, reps=200).sort_values("mean_reward", ascending=False)
            ranked = ranked[ranked.policy != "oracle"]
            peers = ranked[ranked.policy.str.startswith("peer:")]
            best = ranked.iloc[0]
            if best.policy.startswith("peer:"):
                named = [("best policy but the oracle, a peer:", best)]
            else:
                named = [("best policy but the oracle", best)] + ([("best peer", peers.iloc[0])] if len(peers) else [])
            lines.append(f"- **Under `{measure}` / `{profile}`**: " + "; ".join(
                f"{label} `{r.policy}` (mean reward {r.mean_reward:+.4f}, keeping probes {r.probe_score:.2f}, "
                f"P1 {r.p1_preserved:.2f}, facts {r.facts_retained:.2f}, rules {r.rules_retained:.2f})"
                for label, r in named) + ".")
    for g in results.gaps:
        near = "its interval holds 0" if g.ci_low <= 0 <= g.ci_high else "its interval excludes 0"
        share = f"{g.gap / abs(g.oracle):.1%} of the oracle's mean reward" if g.oracle else "the oracle's mean reward is 0"
        lines.append(f"- **Adaptivity gap** under `{g.measure}` / `{g.profile}`: {g.gap:+.4f} "
                     f"[{g.ci_low:+.4f}, {g.ci_high:+.4f}] ({share}; {near}; "
                     + (f"best-fixed's chain `{g.fitted}`, " if g.fitted else "") + f"played most often `{g.chain}`).")
    return lines


def render(results: Results, *, figure: str, command: str, info: dict[str, str], seconds: float) -> str:
    """The markdown report."""
    means = curve_means(results.curves)
    generated = results.curves.scenario.nunique()
    seeds = results.curves.seed.nunique()
    parts = [
        "# Is the coherence measure valid, and is there anything to learn?", "",
        f"Generated by `{command}` in {seconds / 60:.1f} min (wall time).", "",
        markdown_table(["machine", ""], list(info.items())),
        "Two coherence measures (`ctxsim/coherence.py`): `centroid`, the cosine of the two contexts' token-weighted "
        "mean unit embeddings (the old one), and `recall`, chance-rescaled token-weighted sentence recall (the "
        "default). Default embedder (`hashed-tfidf`).", "",
        "## Reading", "", *reading(results), "",
        "## 1. Drop curves", "",
        f"Every generated scenario of `data/scenarios` ({generated}) × context seeds 0–{seeds - 1}: the oldest "
        "(or, in one column, random) k % of the non-pinned units removed (`state.with_units`), scored by "
        "`ctxsim.metrics.outcome`. Means over the contexts. The last two columns: the `seed001` reward the dropped "
        "context would get if it fit its limit (the reward given success: where it rises with the share dropped, "
        "the reward pays for cutting more than needed).", "",
        f"![drop curves]({figure})", "",
        markdown_table(CURVE_HEADER, curve_rows(means)),
        "## 2. Correlations", "",
        f"Spearman's rho across the evaluation episodes of the policies below on {len(ISSUE_SCENARIOS)} scenarios "
        f"({', '.join(ISSUE_SCENARIOS)}) × {EVAL_SEEDS} seeds, evaluated under each measure and profile "
        "(greedy, oracle and the chains they pick depend on the reward; `transcript-marshmallow` is one context, "
        "played once per seed).", "",
        markdown_table(["measure", "profile", "episodes", "n", "ρ(coherence, facts retained)", "ρ(coherence, probe score)"],
                       [[f"`{r.measure}`", f"`{r.profile}`", r.episodes, r.n, _signed(r.facts), _signed(r.probes)]
                        for r in correlations(results.issue).itertuples()]),
        "## 3. Rankings", "",
        "Mean reward with its 95 % stratified bootstrap CI, and what each policy kept (means: probes answered, P1 "
        "units preserved, rules and facts retained, tokens reduced, success, coherence under the table's measure). "
        f"`best-fixed:{GAP_EXPERIMENT}` refuses the contexts it was fitted on (three of these scenarios are in its "
        "training split): it is ranked on the held-out split in section 4.", "",
    ]
    for measure in MEASURES:
        for profile in PROFILES:
            part = results.issue[(results.issue.measure == measure) & (results.issue.reward_profile == profile)]
            if not part.empty:
                parts += [f"### `{measure}` coherence, `{profile}` reward", "", ranking_table(part)]
    held = held_out_scenarios()
    parts += [
        "## 4. Adaptivity gap", "",
        f"Mean reward of `oracle` (the best chain per context) minus `best-fixed:{GAP_EXPERIMENT}` (the one fixed chain "
        f"with the best mean reward on the experiment's training contexts, fitted under the same measure and profile) "
        f"on its held-out split ({', '.join(s.name for s in held)}) × {GAP_SEEDS} seeds; paired 95 % stratified "
        "bootstrap CI (a transcript builds one context whatever the seed).", "",
        gap_table(results.gaps),
    ]
    for measure in MEASURES:
        for profile in PROFILES:
            part = results.held_out[(results.held_out.measure == measure) & (results.held_out.reward_profile == profile)]
            if not part.empty:
                parts += [f"### Held-out split, `{measure}` coherence, `{profile}` reward", "", ranking_table(part)]
    return "\n".join(parts)


def _signed(value: float) -> str:
    return "–" if np.isnan(value) else f"{value:+.3f}"


def jobs() -> list[Job]:
    """The report's work, the longest first."""
    held = [Job("held-out", m, p, GAP_SEEDS) for m in MEASURES for p in PROFILES]
    issue = [Job("issue", m, p, EVAL_SEEDS) for m in MEASURES for p in PROFILES]
    return [*held, *issue, Job("drops", seeds=DROP_SEEDS)]


def collect(done: Sequence[pd.DataFrame], work: Sequence[Job]) -> Results:
    """:class:`Results` of the finished :func:`jobs`."""
    issue = [df for job, df in zip(work, done) if job.kind == "issue"]
    held = [(job, df) for job, df in zip(work, done) if job.kind == "held-out"]
    curves = next(df for job, df in zip(work, done) if job.kind == "drops")
    gaps = [adaptivity_gap(df, job.measure, job.profile) for job, df in held]
    return Results(curves, pd.concat(issue, ignore_index=True), gaps, pd.concat([df for _, df in held], ignore_index=True))


def writable_folder(path: Path, key: str) -> None:
    """Raise ConfigError unless the nearest existing folder of ``path`` is writable
    (checked before the run, not after it)."""
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot be written: {parent} is not a writable folder", source=path, key=key)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ctxsim.lab.validity",
                                     description="Drop curves, correlations, rankings and the adaptivity gap of "
                                                 "the old and new coherence measures (reports/metric_validity.md).")
    parser.add_argument("--out", required=True, help="markdown report (the figure goes beside it, same name, .png)")
    parser.add_argument("--workers", type=int, default=None, help="worker processes (default: the usable cores)")
    args = parser.parse_args(argv)
    try:
        out = Path(args.out)
        if out.suffix != ".md":
            raise ConfigError(f"--out must name a .md file, got {args.out!r}", key="out")
        if out.is_dir():
            raise ConfigError(f"--out names a folder, not a file: {args.out}", key="out")
        figure = out.with_suffix(".png")
        for path in (out, figure):
            check_output(path, key="out")
        writable_folder(out, "out")
        workers = default_workers() if args.workers is None else args.workers
        if workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {workers}", key="workers")
        info = machine()
        start = time.perf_counter()
        work = jobs()
        results = collect(process_map(run_job, work, workers), work)
        seconds = time.perf_counter() - start
        info["workers"] = str(workers)
        command = f"python -m ctxsim.lab.validity --out {args.out}"
        atomic_write_bytes(figure, curve_figure(curve_means(results.curves)))
        atomic_write_text(out, render(results, figure=figure.name, command=command, info=info, seconds=seconds))
    except CtxsimError as exc:
        print(f"ctxsim.lab.validity: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"ctxsim.lab.validity: error: {exc.strerror or exc}: {exc.filename}", file=sys.stderr)
        return 2
    print(f"written: {out} and {figure} ({seconds / 60:.1f} min)", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    from ctxsim.lab.validity import main as run_main  # the importable module, so that workers unpickle its jobs

    sys.exit(run_main())
