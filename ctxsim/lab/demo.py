"""The end-to-end demo behind ``make demo``.

1. describe the shipped scenario suite (one generated context each);
2. train the default experiment, ``experiments/maskable_ppo_default.yaml`` (``--timesteps``
   shortens it);
3. export the learned policy and its chain config;
4. sweep the shipped scenarios on contexts no policy was trained, selected or fitted
   on (:func:`demo_selection`) with the learned (exported) policy, the experiment's
   ``best-fixed``, ``seed-chain``, ``oracle``, ``random``, ``greedy`` and every peer,
   under the experiment's episode settings (its action set, steps per break and
   reward);
5. write the report and print the headline table and where everything is.

Everything goes under ``--out`` (default ``runs/demo``, which git ignores; the
committed ``reports/demo`` is regenerated on purpose by ``make demo-report``). A demo
replaces the previous demo's outputs there, its training run included: the new run
takes the first run's folder name once it has trained (:func:`_keep_as_first_run`), so
the report names the same run folder every time.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import yaml

from ..atomic import atomic_write_text
from ..episode import settings_subset
from ..paths import EXPERIMENTS_DIR
from ..policies import list_policies
from ..policies.peers import NEEDS_EXTRA, peer_available
from .contexts import build_context
from .export import export_run
from .report import markdown_table, write_report
from .scenarios import DEFAULT_SUITE, load_scenarios
from .sweep import load_sweep, run_sweep
from .train import ExperimentConfig, env_configs, load_experiment, resolve_path, run_base_name, train

DEMO_EXPERIMENT = EXPERIMENTS_DIR / "maskable_ppo_default.yaml"
DEMO_BASELINES = [f"best-fixed:{DEMO_EXPERIMENT.stem}", "seed-chain", "oracle", "random", "greedy"]
#: the demo's context seeds: above every seed an experiment trains, selects or fits on
#: (training draws seeds below a scenario's context count, best-fixed below 5)
DEMO_SEEDS = (1000, 1001, 1002, 1003, 1004)
#: folder (under --out) of the exported policy, and its label in the sweep
LEARNED = "learned"
HEADLINE_COLUMNS = ("policy", "IQM normalized [95% CI]", "mean reward [95% CI]", "success", "recovery", "tokens cut",
                    "probes", "P1 kept", "rules kept", "facts kept")


def _headline_rows(summary) -> list[list[str]]:
    ordered = summary.sort_values(["iqm_normalized", "policy"], ascending=[False, True], kind="stable")
    return [
        [r.policy, f"{r.iqm_normalized:.3f} [{r.iqm_ci_low:.3f}, {r.iqm_ci_high:.3f}]",
         f"{r.mean_reward:+.3f} [{r.reward_ci_low:+.3f}, {r.reward_ci_high:+.3f}]", f"{r.success_rate:.0%}",
         f"{r.recovery_rate:.0%}", f"{r.reduction_pct:.0f}%", f"{r.probe_score:.2f}", f"{r.p1_preserved:.2f}",
         f"{r.rules_retained:.2f}", f"{r.facts_retained:.2f}"]
        for r in ordered.itertuples()
    ]


def headline_markdown(summary) -> str:
    """The demo's headline table (per policy, best IQM first) as markdown."""
    return markdown_table(HEADLINE_COLUMNS, _headline_rows(summary))


def _headline_table(summary, title: str):
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for i, col in enumerate(HEADLINE_COLUMNS):
        table.add_column(col, no_wrap=i == 0)
    for row in _headline_rows(summary):
        table.add_row(*row)
    return table


def describe_suite(seed: int = 0) -> list[dict]:
    rows = []
    for sc in load_scenarios(DEFAULT_SUITE):
        started = time.perf_counter()
        state = build_context(sc, seed)
        ms = (time.perf_counter() - started) * 1000
        top = sorted(state.tokens_by_type.items(), key=lambda kv: -kv[1])[:3]
        rows.append(
            {
                "scenario": sc.name,
                "units": len(state.units),
                "tokens": state.total_tokens,
                "limit": state.limit,
                "overflow": state.total_tokens / state.limit,
                "mix": ", ".join(f"{t} {v / state.total_tokens:.0%}" for t, v in top),
                "facts": len(state.fact_table),
                "p1_units": sum(u.priority == 1 for u in state.units),
                "generate_ms": ms,
            }
        )
    return rows


def _suite_table(rows: list[dict]):
    from rich.table import Table

    table = Table(title="Scenario suite (seed 0)", title_justify="left")
    for col in ("scenario", "units", "tokens", "limit", "overflow", "top types", "facts", "P1 units", "gen ms"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["scenario"], str(r["units"]), f"{r['tokens']:,}", f"{r['limit']:,}", f"{r['overflow']:.2f}×",
            r["mix"], str(r["facts"]), str(r["p1_units"]), f"{r['generate_ms']:.0f}",
        )
    return table


def demo_peers() -> tuple[list[str], list[str]]:
    """(the peers the demo runs, the hints for those it skips: their extra is missing)."""
    peers, skipped = [], []
    for policy in (p for p in list_policies() if p.startswith("peer:")):
        name = policy.removeprefix("peer:")
        if peer_available(name):
            peers.append(policy)
        else:
            skipped.append(f"{policy} skipped: it needs the extra '{NEEDS_EXTRA[name][1]}' (pip install 'ctxsim[{NEEDS_EXTRA[name][1]}]')")
    return peers, skipped


def demo_selection(experiment: ExperimentConfig, quick: bool = False) -> tuple[list[str], list[int]]:
    """(scenario names, context seeds) of the demo's sweep: every shipped scenario but
    the transcripts of the experiment's training split that build one context whatever
    the seed (the policy trained on that very context), at :data:`DEMO_SEEDS` (the
    first only with ``quick``), so no row is scored where a policy learned or chose."""
    trained = set(env_configs(experiment)[1]["scenario_names"])
    names = [s.name for s in load_scenarios(DEFAULT_SUITE) if s.varies_by_seed or s.name not in trained]
    return names, list(DEMO_SEEDS[:1] if quick else DEMO_SEEDS)


def demo_policies(learned: str) -> list[str]:
    """The demo's sweep: the learned policy, the baselines and every available peer."""
    return [learned] + DEMO_BASELINES + demo_peers()[0]


def _keep_as_first_run(run_dir: Path, experiment: ExperimentConfig) -> Path:
    """The demo's new training run under the first run's name (``{env}__{experiment}__{seed}``):
    the earlier demo runs of that experiment and seed beside it (that name and its
    ``__2``, ``__3``, ...) are removed, then the new run takes the name. Called once the
    run has trained, so a failed demo leaves the previous one's run in place."""
    first = run_dir.parent / run_base_name(env_configs(experiment)[0], experiment, experiment.seed)
    if run_dir == first:
        return run_dir
    for old in [first, *first.parent.glob(f"{first.name}__*")]:
        if old != run_dir and old.is_dir():
            shutil.rmtree(old)
    return run_dir.rename(first)


def run_demo(args: argparse.Namespace) -> int:
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # a log file has no width to respect
        console.width = max(console.width, 140)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    console.print(_suite_table(describe_suite()))

    experiment = load_experiment(DEMO_EXPERIMENT)
    timesteps = args.timesteps if args.timesteps is not None else (4_000 if args.quick else experiment.timesteps)
    console.print(f"[bold]1/4 train[/] {DEMO_EXPERIMENT} for {timesteps:,} steps")
    run_dir = _keep_as_first_run(train(experiment, timesteps=timesteps, out=out / "runs", progress=not args.quiet),
                                 experiment)

    console.print(f"[bold]2/4 export[/] {run_dir} -> {out / LEARNED}")
    exported = export_run(run_dir, out / LEARNED)
    console.print(f"  learned chain: {' > '.join(exported.chain)} ({exported.share:.0%} of the validation episodes)")

    sweep_file = out / "demo_sweep.yaml"
    names, seeds = demo_selection(experiment, args.quick)
    atomic_write_text(
        sweep_file,
        yaml.safe_dump(
            {
                "name": "demo",
                "description": "the demo: learned policy vs baselines, oracle and peers on every shipped scenario",
                "policies": demo_policies(LEARNED),  # the export, next to this sweep file
                "scenarios": {"names": names},
                "seeds": seeds,
                "env": str(resolve_path(experiment.env, experiment)),
                "env_config": settings_subset(experiment.env_config),  # its actions, steps and reward
            },
            sort_keys=False,
        ),
    )
    console.print(f"[bold]3/4 sweep[/] {len(names)} shipped scenarios × context seeds {seeds} (none trained or fitted on)")
    for hint in demo_peers()[1]:
        console.print(f"  {hint}", markup=False)  # "[peers]" is text, not rich markup
    result = run_sweep(load_sweep(sweep_file), out=out / "sweep", progress=not args.quiet)

    console.print(f"[bold]4/4 report[/] -> {out / 'report'}")
    report = write_report(out / "sweep", out / "report", runs=[run_dir])

    headline = headline_markdown(result.summary)
    atomic_write_text(out / "headline.md", headline + "\n")
    console.print(_headline_table(result.summary, f"Headline: {result.episodes} episodes, {len(seeds)} seed(s) per scenario"))
    console.print(
        f"report: {report}\nheadline: {out / 'headline.md'}\nresults: {out / 'sweep' / 'results.csv'}\n"
        f"export: {out / LEARNED}\n"
        f"run: {run_dir}\ntotal time: {time.perf_counter() - started:.0f} s"
    )
    return 0
