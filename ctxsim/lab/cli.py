"""The ``ctxsim`` command line.

Every subcommand is one function ``cmd_<name>(args)`` registered in :func:`build_parser`.
Bad input (a ctxsim error, a missing or unreadable file) prints one line on stderr
and exits with code 2; no traceback, and no half-written output file.

Output paths (``--out``, ``--log``, ``--markdown``) mean what they say: ``a/../b`` is
``b`` (normalized before use, so no folder ``a`` is created on the way). Names read
from input files (scenario, experiment, sweep, tune names) are single path
components, so files named after them stay inside the output folder.

The command line starts without the optional extras: the modules that need the
``lab`` extra (rich, pandas, gymnasium, faker, ...) or the ``train`` extra are
imported in the command that uses them, so a command whose extra is missing says
which in one line (:func:`main`) and ``ctxsim --help`` stays quick.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

from ..atomic import atomic_write_text, check_output
from .corpus import DEFAULT_CORPUS, corpus_files
from ..episode import EpisodeSettings
from ..errors import ConfigError, CtxsimError, ScenarioError
from ..plan import plan_of
from ..probes import PROBE_KINDS
from ..reward import PROFILE_PROBE_WEIGHTS
from .scenarios import DEFAULT_SUITE, find_scenario, load_scenarios
from ..serialize import dumps_state
from ..strategies import describe_strategies, get_strategy
from ..validation import MAX_SEED


#: columns of output to a file or pipe (no terminal width to respect): wide enough
#: that a table with a trained run's path as a policy name keeps every column readable
PIPE_WIDTH = 400


def _console():
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, PIPE_WIDTH)
    return console


def _notes(console):
    """A ``note`` callback that prints to ``console``; the text is not rich markup
    (an install hint's ``ctxsim[peers]`` stays as written)."""
    from rich.markup import escape

    return lambda text: console.print(f"[yellow]note:[/yellow] {escape(text)}", soft_wrap=True)


def _table(title: str, columns: list[str], rows: list[list[object]]):
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for i, col in enumerate(columns):
        table.add_column(col, overflow="fold", no_wrap=i == 0)  # names stay whole and greppable
    for row in rows:
        table.add_row(*[str(c) for c in row])
    return table


def _check_option(name: str, value: int | None, low: int, high: int | None = None) -> None:
    """ConfigError when the integer option ``--name``, if given, is outside ``low..high``."""
    if value is None or (value >= low and (high is None or value <= high)):
        return
    bound = f">= {low}" if high is None else f"in {low}..{high}"
    raise ConfigError(f"--{name} must be {bound}, got {value}", key=name)


# ---- scenarios / generate ------------------------------------------------------------
def cmd_scenarios_list(args: argparse.Namespace) -> int:
    suite = Path(args.suite) if args.suite else DEFAULT_SUITE
    rows = []
    for sc in load_scenarios(suite):
        if sc.is_family:
            limit = "drawn per seed"
        else:
            limit = f"{sc.resolved_limit:,}" if sc.resolved_limit is not None else "its size"
        if sc.corpus is not None:
            target = f"{len(corpus_files(sc.corpus_path, sc.split))} sessions of {Path(sc.corpus).name} ({sc.split or 'all'})"
        elif sc.is_transcript:
            if not sc.transcript_path.is_file():  # listed or not, the suite cannot build it
                raise ScenarioError(f"transcript file not found: {sc.transcript_path}", source=sc.source, key="transcript")
            target = f"transcript {Path(sc.transcript).name}"
        else:
            target = "drawn per seed" if sc.is_family else f"{sc.resolved_target:,}"
        rows.append([sc.name, limit, target, sc.description or ""])
    _console().print(_table(f"Scenarios in {suite}", ["name", "limit", "target tokens", "description"], rows))
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from .contexts import build_context

    _check_option("seed", args.seed, 0, MAX_SEED)
    scenario = find_scenario(args.scenario, args.suite)
    state = build_context(scenario, args.seed)
    text = dumps_state(state)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        atomic_write_text(args.out, text)
        _console().print(
            f"{scenario.name} seed {args.seed}: {len(state.units)} units, {state.total_tokens:,} tokens "
            f"(limit {state.limit:,}), {len(state.fact_table)} probes -> {args.out}"
        )
    return 0


def cmd_realism(args: argparse.Namespace) -> int:
    from .realism import DEFAULT_FAMILY, run

    _check_option("contexts", args.contexts, 1, 10_000)
    table = run(Path(args.family or DEFAULT_FAMILY), args.contexts, Path(args.corpus or DEFAULT_CORPUS), args.split,
                Path(args.out), args.rank)
    inside = int(table["inside"].sum())
    _console().print(f"{inside} of {len(table)} statistics inside the corpus's 10-90 % range -> {args.out}")
    return 0


def cmd_strategies(args: argparse.Namespace) -> int:
    rows = [
        [r["id"], r["rank"], r["priority"], "" if r["max_tokens"] is None else f"{r['max_tokens']:,}", r["seed"],
         "yes" if r["keeps_p1"] else "", r["summary"], ", ".join(f"{k}={v}" for k, v in r["params"].items())]
        for r in describe_strategies()
    ]
    header = ["id", "rank", "priority", "max tokens", "seed", "keeps P1", "what it does", "parameters"]
    _console().print(_table("Strategies (ladder order)", header, rows))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    """Print the compaction plan of each strategy step applied to a scenario's context."""
    from .contexts import build_context

    _check_option("seed", args.seed, 0, MAX_SEED)
    steps = [get_strategy(sid) for sid in args.strategy]  # unknown ids fail before any work
    state = build_context(find_scenario(args.scenario, args.suite), args.seed)
    print(f"{args.scenario} seed {args.seed}: {len(state.units)} units, {state.total_tokens:,} tokens (limit {state.limit:,})")
    for strategy in steps:
        result = strategy.apply(state)
        print(plan_of(state, result.state, strategy.id).describe())
        state = result.state
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from .train import load_experiment, train

    experiment = load_experiment(args.experiment)
    for seed in args.seed or []:
        _check_option("seed", seed, 0, MAX_SEED)
    _check_option("timesteps", args.timesteps, 1)
    for seed in dict.fromkeys(args.seed) if args.seed else [None]:
        run_dir = train(experiment, timesteps=args.timesteps, seed=seed, out=args.out, progress=not args.quiet)
        print(f"run directory: {run_dir}", flush=True)
    return 0


def cmd_pool(args: argparse.Namespace) -> int:
    """Build (or find) the context pools of an env spec or of an experiment's splits."""
    from .environments.overflow import ContextOverflowEnv
    from .environments.spec import env_class, load_env_spec
    from .train import env_configs, load_experiment, prepare_pools

    _check_option("workers", args.workers, 1)
    if args.experiment:
        env_id, *configs = env_configs(load_experiment(args.experiment))
        source = args.experiment
    else:
        spec = load_env_spec(args.env)
        env_id, configs, source = spec.id, [spec.config], spec.source or args.env
    if not issubclass(env_class(env_id), ContextOverflowEnv):
        raise ConfigError(f"{env_id} has no context pool: its conversations grow turn by turn", source=source, key="id")
    pooled = [{**config, "pool": True} for config in configs]
    for pool, path, built, scenarios in prepare_pools(env_id, *pooled, source=source, workers=args.workers, rebuild=args.rebuild,
                                                         progress=not args.quiet):
        stats = pool.stats()
        how = f"built in {pool.build_seconds:,.1f} s" if built else "already built"
        print(f"{path} ({path.stat().st_size / 1e6:,.0f} MB, {how}): {stats['contexts']} contexts of "
              f"{scenarios} scenarios, {stats['states']:,} states, {stats['transitions']:,} transitions")
    return 0


def _summary_table(summary, title: str):
    """The evaluation summary: one row per policy, CIs in brackets."""
    from rich import box
    from rich.table import Table

    table = Table(title=f"Evaluation: {title}", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("policy", no_wrap=True)
    for col in ("IQM norm", "95% CI", "reward", "95% CI", "success", "recov", "cut %", "P1", "facts", "probes", "coh", "ms"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in summary.itertuples():
        table.add_row(
            r.policy, f"{r.iqm_normalized:.2f}", f"{r.iqm_ci_low:.2f}..{r.iqm_ci_high:.2f}", f"{r.mean_reward:+.2f}",
            f"{r.reward_ci_low:+.2f}..{r.reward_ci_high:+.2f}", f"{r.success_rate:.0%}", f"{r.recovery_rate:.0%}",
            f"{r.reduction_pct:.0f}", f"{r.p1_preserved:.2f}", f"{r.facts_retained:.2f}", f"{r.probe_score:.2f}",
            f"{r.coherence:.2f}",
            f"{r.latency_ms:.0f}",
        )
    return table


def cmd_evaluate(args: argparse.Namespace) -> int:
    if args.from_log:
        if args.policy or args.out or args.log:
            raise ConfigError("--from-log summarizes a log; it takes no --policy, --out or --log", key="from-log")
        return _summarize_log(args.from_log)
    if not args.policy or not args.out:
        raise ConfigError("--policy and --out are required (or --from-log FILE.jsonl)", key="policy")
    from .evaluate import MAX_SEEDS, evaluate, settings_from_env_spec, summarize
    from .report import policy_table

    if not 1 <= args.seeds <= MAX_SEEDS:
        raise ConfigError(f"--seeds must be in 1..{MAX_SEEDS:,}, got {args.seeds}", key="seeds")
    last_first = MAX_SEED + 1 - args.seeds  # the seeds end at MAX_SEED at most
    if not 0 <= args.first_seed <= last_first:
        raise ConfigError(f"--first-seed must be in 0..{last_first} (seeds end below 2**32), got {args.first_seed}",
                          key="first-seed")
    _check_option("workers", args.workers, 1)
    if args.reward is not None and args.reward not in PROFILE_PROBE_WEIGHTS:
        raise ConfigError(f"--reward must be one of {', '.join(PROFILE_PROBE_WEIGHTS)}, got {args.reward!r}", key="reward")
    if args.split and not args.experiment:
        raise ConfigError("--split needs --experiment FILE", key="split")
    if args.experiment:
        settings, env_config, scenarios = _experiment_split(args)
    else:
        settings, env_config = settings_from_env_spec(args.env, _reward_override(args))
        scenarios = load_scenarios(args.scenarios or DEFAULT_SUITE)
    if args.names:
        known = {s.name for s in scenarios}
        unknown = [n for n in args.names if n not in known]
        if unknown:
            raise ConfigError(f"unknown scenario names {unknown}; known: {sorted(known)}", key="names")
        scenarios = [s for s in scenarios if s.name in args.names]
    console = _console()
    if args.compare and args.compare not in args.policy:
        raise ConfigError(f"--compare {args.compare!r} is not one of the --policy names", key="compare")
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    if "turns" in env_config:  # a ConversationStream-v0 spec: whole conversations
        if args.log or args.overwrite:
            raise ConfigError("--log records the transitions of overflow events; a stream evaluation writes no log",
                              key="log" if args.log else "overwrite")
        return _evaluate_stream(args, env_config, scenarios, seeds, console)
    if args.workers is not None:
        raise ConfigError("--workers shares a stream evaluation's conversations among processes; an evaluation of "
                          "overflow events runs in this process", key="workers")
    from .stream.rollout import is_rollout

    rollouts = [name for name in args.policy if is_rollout(name)]
    if rollouts:
        raise ConfigError(f"{rollouts[0]!r} plays whole conversations: evaluate it with a ConversationStream-v0 spec "
                          "(--env envs/stream.yaml); on one overflow event, use 'oracle'", key="policy")
    df = evaluate(
        args.policy, scenarios, seeds, settings, log=args.log, overwrite=args.overwrite, progress=not args.quiet,
        note=_notes(console),
    )
    atomic_write_text(args.out, df.to_csv(index=False))
    summary = summarize(df)
    console.print(_summary_table(summary, f"{len(scenarios)} scenarios x {args.seeds} seeds -> {args.out}"))
    _few_seeds_note(args.seeds, console)
    return _comparisons(args, df, [policy_table(summary)], console)


#: below this many seeds per scenario a bootstrap interval is too narrow to trust
FEW_SEEDS = 5


def _few_seeds_note(seeds: int, console) -> None:
    if seeds < FEW_SEEDS:
        console.print(f"[yellow]note:[/yellow] {seeds} seed(s) per scenario: the bootstrap resamples too few contexts "
                      f"per scenario for its 95 % intervals to hold their coverage; use {FEW_SEEDS} or more to compare "
                      "policies", soft_wrap=True)


def _comparisons(args: argparse.Namespace, df, sections: list[str], console) -> int:
    """``evaluate``'s optional tables after the summary: ``--by-scenario`` and
    ``--compare`` printed, and with ``--markdown`` written after ``sections``."""
    from .evaluate import reward_by_scenario
    from .report import markdown_table

    if args.by_scenario:
        table = reward_by_scenario(df)
        columns = ["scenario"] + list(table.columns)
        rows = [[name] + [f"{v:+.4f}" for v in values] for name, values in zip(table.index, table.to_numpy())]
        console.print(_table("mean reward by scenario", columns, rows))
        sections.append(markdown_table(columns, rows))
    if args.compare:
        if args.compare not in set(df.policy):
            raise ConfigError(f"--compare {args.compare!r} is not one of the evaluated policies", key="compare")
        columns, rows = _comparison_rows(df, args.compare)
        console.print(_table(f"{args.compare} − policy, paired over the same contexts, 95 % stratified bootstrap CI",
                             columns, rows))
        sections.append(markdown_table(columns, rows))
        gap = _gap_line(df, args.compare)
        if gap:
            console.print(gap, soft_wrap=True)
            sections.append(gap)
    if args.markdown:
        atomic_write_text(args.markdown, "\n\n".join(sections) + "\n")
    return 0


#: ``--compare``'s columns beside the reward: (results column, heading, format); a stream
#: evaluation's CSV has ``probe_share`` (per conversation) where a single-event one has ``probe_score``
COMPARED = (("probe_score", "probes answered", "+.3f"), ("probe_share", "probes answered", "+.3f"),
            ("reduction_pct", "tokens cut, points", "+.1f"))


def _comparison_rows(df, reference: str) -> tuple[list[str], list[list[str]]]:
    """``--compare``: per other policy, the reference's paired difference in reward
    (and whether its interval is above zero), probes answered and tokens cut."""
    from .evaluate import paired_differences

    compared = [(column, heading, fmt) for column, heading, fmt in COMPARED
                if column in df.columns and df[column].notna().all()]
    tables = [paired_differences(df, reference, column).set_index("policy") for column, _, _ in compared]
    columns = ["policy", f"reward({reference}) − reward(policy) [95% CI]", "above zero",
               *(f"{heading} (difference) [95% CI]" for _, heading, _ in compared)]
    rows = []
    for r in paired_differences(df, reference).itertuples():
        row = [r.policy, f"{r.mean_difference:+.4f} [{r.ci_low:+.4f}, {r.ci_high:+.4f}]", "yes" if r.beats else "no"]
        for table, (_, _, fmt) in zip(tables, compared):
            d = table.loc[r.policy]
            row.append(f"{d.mean_difference:{fmt}} [{d.ci_low:{fmt}}, {d.ci_high:{fmt}}]")
        rows.append(row)
    return columns, rows


def _gap_line(df, reference: str) -> str:
    """With ``oracle`` and one ``best-fixed:`` policy evaluated: the share of the
    adaptivity gap the reference captures (:func:`ctxsim.lab.evaluate.gap_captured`)."""
    from .evaluate import gap_captured

    fixed = sorted(p for p in set(df.policy) if p.startswith("best-fixed:"))
    if "oracle" not in set(df.policy) or len(fixed) != 1 or reference in ("oracle", fixed[0]):
        return ""
    try:
        g = gap_captured(df, reference, fixed[0])
    except ValueError as exc:
        return f"Adaptivity gap: {exc}."
    return (f"Share of the adaptivity gap {reference} captures, (R − R_best-fixed) / (R_oracle − R_best-fixed) per "
            f"episode: IQM {g.iqm:.3f} [{g.ci_low:.3f}, {g.ci_high:.3f}], median {g.median:.3f}, over {g.episodes} "
            f"episodes ({g.ties} left out: the oracle and {fixed[0]} tie there).")


def _reward_override(args: argparse.Namespace) -> dict:
    """``--reward PROFILE``: the env config's ``reward`` replaced by that profile (its
    weights with it), so one trained policy is scored under another reward."""
    return {"reward": {"profile": args.reward}} if args.reward else {}


def _experiment_split(args: argparse.Namespace):
    """(settings, env config, scenarios) of one split of an experiment: its env spec
    with its ``env_config``, and the scenarios training (``train``), the held-out
    report (``eval``) or model selection (``validation``) use."""
    from .environments.spec import env_class
    from .train import env_configs, load_experiment

    given = [flag for flag, value in (("--env", args.env), ("--scenarios", args.scenarios)) if value]
    if given:  # --names still picks among the split's scenarios
        raise ConfigError(f"--experiment sets the env and the scenarios; drop {' '.join(given)}", key="experiment")
    experiment = load_experiment(args.experiment)
    env_id, train, held_out, selection = env_configs(experiment)
    config = {"train": train, "eval": held_out, "validation": selection}[args.split or "eval"]  # resolved already
    config = {**config, **_reward_override(args)}
    checked = env_class(env_id).checked_config(config, args.experiment)  # once more only for the split's scenarios
    return EpisodeSettings.of(checked), config, list(checked.suite)


STREAM_SUMMARY = {
    "reward": "mean", "probe_share": "mean", **{f"probe_share_{kind}": "mean" for kind in PROBE_KINDS},
    "facts_retained": "mean", "rules_retained": "mean", "p1_preserved": "mean", "cache_hit_rate": "mean", "tokens_sent": "mean",
    "cost_usd": "mean", "overflow_events": "mean", "over_hit_fresh_starts": "mean", "break_depth": "mean", "max_summary_depth": "max",
    "max_summary_tokens": "max", "rehydrations": "sum", "rehydration_loops": "sum",
}


def _evaluate_stream(args: argparse.Namespace, env_config: dict, scenarios, seeds: range, console) -> int:
    """``evaluate --env <stream spec>``: policies over whole conversations."""
    from .report import markdown_table
    from .stream.evaluate_stream import evaluate_stream

    config = {**env_config, "scenarios": [str(s.source) for s in scenarios], "scenario_names": None}
    df = evaluate_stream(args.policy, [s.name for s in scenarios], list(seeds), config=config,
                         note=_notes(console), workers=args.workers)
    atomic_write_text(args.out, df.to_csv(index=False))
    columns = [c for c in STREAM_SUMMARY if c in df.columns]
    summary = df.groupby("policy", sort=False).agg({c: STREAM_SUMMARY[c] for c in columns}).reset_index()
    rows = [[r["policy"]] + [f"{r[c]:,.3f}" if isinstance(r[c], float) else f"{r[c]:,}" for c in columns] for _, r in summary.iterrows()]
    console.print(_table(f"ConversationStream-v0: {len(scenarios)} scenarios x {args.seeds} seeds -> {args.out}", ["policy"] + columns, rows))
    return _comparisons(args, df, [markdown_table(["policy"] + columns, rows)], console)


def _summarize_log(path: str) -> int:
    """``evaluate --from-log``: episodes, rates, mean reward and chains of a JSONL log."""
    from .export import summarize_log

    log = summarize_log(path)
    console = _console()
    note = f", {log.unfinished} unfinished" if log.unfinished else ""
    console.print(f"{path}: {log.records} records, {len(log.episodes)} finished episodes{note}", soft_wrap=True)
    if not log.episodes:  # nothing to rate: no table of zeros
        return 0

    def rows(stats):
        return [[s.name, s.episodes, f"{s.success_rate:.0%}", f"{s.recovery_rate:.0%}", f"{s.mean_reward:+.3f}",
                 "–" if math.isnan(s.mean_probe_score) else f"{s.mean_probe_score:.2f}"] for s in stats]

    columns = ["", "episodes", "success", "recovery", "mean reward", "probes answered"]
    groups = [("all", [log.overall])] + [(a, log.by(a)) for a in ("run_id", "scenario")]
    for attribute, stats in groups:
        if attribute == "all" or len(stats) > 1 or (attribute == "scenario" and stats and stats[0].name):
            console.print(_table(f"By {attribute}" if attribute != "all" else "Episodes", columns, rows(stats)))
    chains = [[" > ".join(chain) or "(none)", count, f"{count / len(log.episodes):.0%}"] for chain, count in log.chains]
    console.print(_table("Chains", ["chain", "episodes", "share"], chains))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from .export import DEFAULT_SEEDS, export_run

    result = export_run(args.run, args.out, seeds=DEFAULT_SEEDS if args.seeds is None else args.seeds)
    print(
        f"exported the {result.algorithm} policy of {args.run} -> {result.out}: chain_order "
        f"{' > '.join(result.chain)} ({result.share:.0%} of {result.episodes} selection episodes), "
        f"{len(result.rules)} learned rule(s)"
    )
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    from .compact import compact_file

    _check_option("limit", args.limit, 1, 10**9)
    done = compact_file(args.export, args.file, args.limit, args.out, form=args.form, log=args.log, artifacts=args.artifacts,
                        keep_newest=not args.break_newest)
    moved = f"; {done.artifacts} artifact(s) -> {done.artifacts_file}" if done.artifacts else ""
    print(f"{args.file}: {done.messages_before} -> {done.messages_after} {'items' if args.form == 'responses' else 'messages'}, "
          f"{done.tokens_before:,} -> {done.tokens_after:,} tokens (limit {args.limit:,}) -> {args.out}{moved}")
    return 0


# ---- sweep / report / tune ---------------------------------------------------------
def cmd_sweep(args: argparse.Namespace) -> int:
    """Exit 1 when a policy regressed against --baseline beyond tolerance, else 0."""
    from .sweep import load_sweep, run_sweep

    console = _console()
    sweep = load_sweep(args.sweep)
    for note in sweep.notes:
        _notes(console)(note)
    result = run_sweep(
        sweep, out=args.out, backend=args.backend, workers=args.workers, baseline=args.baseline, progress=not args.quiet
    )
    units = len(sweep.scenarios) * len(sweep.seeds)
    if not args.quiet:
        console.print(_summary_table(result.summary, f"sweep {sweep.name}: {len(sweep.scenarios)} scenarios x {len(sweep.seeds)} seeds"))
        _few_seeds_note(len(sweep.seeds), console)
    console.print(
        f"{result.episodes} episodes ({units} contexts) in {result.seconds:.1f} s = "
        f"{result.episodes / max(result.seconds, 1e-9):.1f} episodes/s -> {result.out}", soft_wrap=True
    )
    if result.regressions is None:
        return 0
    compared, only_results, only_baseline = result.coverage
    console.print(
        f"baseline {args.baseline}: {compared} (policy, scenario) pairs compared"
        + (f", {only_results} with no matching (seed, run) row in the baseline" if only_results else "")
        + (f", {only_baseline} of the baseline with none in this sweep" if only_baseline else ""), soft_wrap=True
    )
    if result.regressions.empty:
        console.print("[green]no regression[/green]: every policy is within tolerance of the baseline", soft_wrap=True)
        return 0
    rows = [[r.policy, r.scenario, r.metric, f"{r.baseline:.3f}", f"{r.current:.3f}", f"{r.delta:+.3f}", f"{r.tolerance:g}"]
            for r in result.regressions.itertuples()]
    console.print(_table(f"Regressions ({len(rows)}) -> {result.out / 'regressions.csv'}",
                         ["policy", "scenario", "metric", "baseline", "current", "delta", "tolerance"], rows))
    return 1


def cmd_report(args: argparse.Namespace) -> int:
    from .report import write_report

    path = write_report(args.results, args.out, runs=args.run or ())
    print(f"report: {path}")
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from .tune import load_tune, params_text, run_tune

    _check_option("workers", args.workers, 1)
    spec = load_tune(args.tune)
    console = _console()
    for note in spec.notes:
        _notes(console)(note)
    result = run_tune(spec, out=args.out, workers=args.workers, verbose=not args.quiet)
    for line in result.failed:
        _notes(console)(line)
    columns = [c for c in result.table.columns if c != "run_dir"]
    rows = [[f"{v:.4g}" if isinstance(v, float) else v for v in row] for row in result.table[columns].itertuples(index=False)]
    title = f"Tune results (best first) -> {result.out / 'tune_results.md'}"
    console.print(_table(title, [c.removeprefix("param.") for c in columns], rows))
    print("best: " + params_text(result.best))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    _check_option("timesteps", args.timesteps, 1)
    return run_demo(args)


# ---- parser -----------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """argparse with the project's error form: one line, exit 2 (subcommands too)."""

    def error(self, message: str):
        self.exit(2, f"ctxsim: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ctxsim", description="Context-overflow RL harness.")
    sub = parser.add_subparsers(dest="command", required=True)

    sc = sub.add_parser("scenarios", help="scenario suites")
    sc_sub = sc.add_subparsers(dest="scenarios_command", required=True)
    sc_list = sc_sub.add_parser("list", help="list the scenarios of a suite")
    sc_list.add_argument("--suite", help="scenario file or folder (default: the shipped suite)")
    sc_list.set_defaults(func=cmd_scenarios_list)

    gen = sub.add_parser("generate", help="generate one overflowing context as JSON")
    gen.add_argument("--scenario", required=True, help="scenario name in the suite, or a scenario YAML file")
    gen.add_argument("--suite", help="scenario suite to look the name up in")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--out", required=True, help="output JSON file ('-' for stdout)")
    gen.set_defaults(func=cmd_generate)

    re_ = sub.add_parser("realism", help="statistics of generated contexts against a corpus of real sessions")
    re_.add_argument("--family", help="a scenario or family file (default: agent sessions)")
    re_.add_argument("--contexts", type=int, default=20, help="generated contexts (seeds 0..N-1)")
    re_.add_argument("--corpus", help="a folder of chat JSONL sessions with splits.yaml (default: data/transcripts/mini-swe-agent)")
    re_.add_argument("--split", choices=("train", "validation", "held_out"), help="only the sessions of one split")
    re_.add_argument("--rank", action="store_true", help="also the strategies' rank agreement (minutes)")
    re_.add_argument("--out", default="reports/realism.md", help="the report (a .png figure beside it)")
    re_.set_defaults(func=cmd_realism)
    st = sub.add_parser("strategies", help="list the registered strategies")
    st.set_defaults(func=cmd_strategies)

    pl = sub.add_parser("plan", help="print the compaction plan of each strategy step on a scenario's context")
    pl.add_argument("--scenario", required=True, help="scenario name in the suite, or a scenario YAML file")
    pl.add_argument("--suite", help="scenario suite to look the name up in")
    pl.add_argument("--seed", type=int, default=0)
    pl.add_argument("--strategy", action="append", required=True, help="strategy id; repeat for a chain")
    pl.set_defaults(func=cmd_plan)

    tr = sub.add_parser("train", help="train a policy from an experiment YAML")
    tr.add_argument("experiment", help="experiments/<name>.yaml")
    tr.add_argument("--timesteps", type=int, help="override the experiment's timesteps")
    tr.add_argument("--seed", type=int, nargs="+", metavar="N",
                    help="override the experiment's seed; several seeds train one run each, in turn")
    tr.add_argument("--out", default="runs", help="folder for run directories (default: runs)")
    tr.add_argument("--quiet", action="store_true", help="no progress bar")
    tr.set_defaults(func=cmd_train)

    ev = sub.add_parser("evaluate", help="evaluate policies against the oracle and random on scenarios")
    ev.add_argument("--policy", action="append",
                    help="policy name (random, seed-chain, greedy, oracle, only:<strategy>, peer:<system>) "
                         "or a trained run directory / model zip; repeatable")
    ev.add_argument("--scenarios", help="scenario YAML file or folder (default: the shipped suite)")
    ev.add_argument("--names", nargs="+", metavar="NAME", help="only these scenarios of the suite (or of the --split)")
    ev.add_argument("--experiment", metavar="FILE",
                    help="instead of --env/--scenarios/--names: an experiment's env and the scenarios of one --split")
    ev.add_argument("--split", choices=("train", "eval", "validation"),
                    help="with --experiment: its training, held-out (default) or model-selection scenarios")
    ev.add_argument("--seeds", type=int, default=3, help="seeds per scenario: 0..N-1 (default 3)")
    ev.add_argument("--first-seed", type=int, default=0, metavar="K",
                    help="start the seeds at K: K..K+N-1 (e.g. contexts a family never trained on)")
    ev.add_argument("--out", help="output CSV, one row per (policy, scenario, seed)")
    ev.add_argument("--log", help="JSONL file of every transition (appended to; see --overwrite); overflow events only, "
                                "not with a ConversationStream-v0 --env")
    ev.add_argument("--overwrite", action="store_true", help="truncate an existing --log instead of appending to it")
    ev.add_argument("--env", help="env spec YAML whose episode settings to use (default: the default settings)")
    ev.add_argument("--reward", metavar="PROFILE",
                    help="score under this reward profile instead of the env's (e.g. seed001, grounded); "
                         "best-fixed fits its chain under it")
    ev.add_argument("--workers", type=int,
                    help="processes a ConversationStream-v0 evaluation shares its conversations among (default: the machine's cores)")
    ev.add_argument("--quiet", action="store_true", help="no progress bar")
    ev.add_argument("--markdown", metavar="FILE.md", help="also write the printed tables as markdown to FILE.md")
    ev.add_argument("--by-scenario", action="store_true", help="also the mean reward of every policy (and the oracle, on overflow events) per scenario")
    ev.add_argument("--compare", metavar="POLICY", help="paired reward differences of POLICY against every other policy")
    ev.add_argument("--from-log", metavar="FILE.jsonl",
                    help="instead: summarize a transition log (episodes, success, recovery, reward, chains)")
    ev.set_defaults(func=cmd_evaluate)

    po = sub.add_parser("pool", help="precompute the context pool of an env spec or of an experiment's splits")
    what = po.add_mutually_exclusive_group()
    what.add_argument("--env", default="envs/default.yaml", help="env spec (default envs/default.yaml)")
    what.add_argument("--experiment", help="experiment YAML: the pools of its train and eval splits")
    po.add_argument("--workers", type=int, help="processes (default: the machine's cores)")
    po.add_argument("--rebuild", action="store_true", help="build again even when the pool is on disk")
    po.add_argument("--quiet", action="store_true", help="no progress bar while a pool is built")
    po.set_defaults(func=cmd_pool)

    ex = sub.add_parser("export", help="export a trained run: chain config + numpy-only policy")
    ex.add_argument("run", help="training run directory (best_model.zip) or a model zip of one")
    ex.add_argument("--out", required=True, help="export folder (replaced whole if it holds an earlier export)")
    ex.add_argument("--seeds", type=int, help="context seeds per held-out scenario (default 8)")
    ex.set_defaults(func=cmd_export)

    co = sub.add_parser("compact", help="compact an agent's session file with an exported policy, in the form it came in")
    co.add_argument("export", help="an export folder (ctxsim export RUN --out DIR)")
    co.add_argument("file", help="the session: chat JSON Lines (chat), or a request JSON object (anthropic, responses)")
    co.add_argument("--limit", type=int, required=True, help="tokens the session may take (its system prompt included, and kept)")
    co.add_argument("--out", required=True, help="the compacted session, in the form it came in")
    co.add_argument("--form", choices=["chat", "anthropic", "responses"], default="chat",
                    help="chat: OpenAI-style messages, one a line (default); anthropic: a Messages API request "
                         "(messages, system); responses: a Responses API request (input, instructions)")
    co.add_argument("--log", help="JSONL log of the policy's decisions (appended to)")
    co.add_argument("--artifacts", help="where content moved behind read_artifact pointers goes (JSON; default "
                                        "OUT.artifacts.json, written only when the break moved any)")
    co.add_argument("--break-newest", action="store_true",
                    help="let the break take the newest turn too (by default it is held back whole, or cut to half "
                         "the limit when it takes more, and the break fits the rest into what it leaves)")
    co.set_defaults(func=cmd_compact)

    sw = sub.add_parser("sweep", help="regression sweep: policies x scenarios x seeds, checked against a baseline")
    sw.add_argument("sweep", help="experiments/<sweep>.yaml")
    sw.add_argument("--backend", choices=["local", "ray"], help="override the sweep file's backend")
    sw.add_argument("--workers", type=int,
                    help="local: worker processes (default: the sweep file's, else the machine's cores); "
                         "ray: CPUs of a local Ray instance")
    sw.add_argument("--baseline", help="results CSV to check against (exit 1 on a regression beyond tolerance)")
    sw.add_argument("--out", help="output folder (default: reports/sweeps/<name>)")
    sw.add_argument("--quiet", action="store_true", help="no progress bar and no summary table (for CI)")
    sw.set_defaults(func=cmd_sweep)

    rp = sub.add_parser("report", help="report.md and figures from a sweep's results")
    rp.add_argument("results", help="a sweep output folder (with results.csv) or a results CSV")
    rp.add_argument("--run", action="append", help="training run folder with evaluations.npz (or a folder of them); repeatable")
    rp.add_argument("--out", required=True, help="output folder")
    rp.set_defaults(func=cmd_report)

    tu = sub.add_parser("tune", help="hyperparameter search of training with Ray Tune (extra 'ray')")
    tu.add_argument("tune", help="experiments/<tune>.yaml")
    tu.add_argument("--out", help="output folder (default: reports/tune/<name>)")
    tu.add_argument("--workers", type=int, help="CPUs of a local Ray instance (default: the file's ray.num_cpus)")
    tu.add_argument("--quiet", action="store_true", help="no Ray Tune progress output")
    tu.set_defaults(func=cmd_tune)

    demo = sub.add_parser("demo", help="the end-to-end demo (what `make demo` runs)")
    demo.add_argument("--out", default="runs/demo",
                      help="output folder (default runs/demo, ignored by git; `make demo-report` writes reports/demo)")
    demo.add_argument("--quick", action="store_true", help="shortened budgets (4,000 training steps, 1 seed)")
    demo.add_argument("--timesteps", type=int, help="training steps (default: the experiment's)")
    demo.add_argument("--quiet", action="store_true", help="no progress bars")
    demo.set_defaults(func=cmd_demo)
    return parser


#: options that name an output file or folder
OUTPUT_OPTIONS = ("out", "log", "markdown", "artifacts")
#: top-level modules of the optional extras ``lab`` and ``train`` (pyproject.toml); the core install lacks them
EXTRA_MODULES = {
    "lab": ("faker", "rich", "gymnasium", "pandas", "matplotlib", "threadpoolctl", "scipy"),
    "train": ("stable_baselines3", "sb3_contrib", "torch", "tqdm", "tensorboard"),
}
#: the output options that name a file (elsewhere ``--out`` is a folder), per command
FILE_OUTPUTS = {"evaluate": ("out", "log", "markdown"), "generate": ("out",), "realism": ("out",),
                "compact": ("out", "log", "artifacts")}
#: the arguments that name an input file, per command: no output may replace one
FILE_INPUTS = {"compact": ("file",), "generate": ("scenario", "suite"), "realism": ("family",),
               "evaluate": ("scenarios", "env", "experiment")}


def check_file_outputs(args: argparse.Namespace) -> None:
    """Before any work: every output of the command can be written (an existing one is
    a regular file, or a folder where the command writes a folder: never a FIFO,
    socket or device; no name too long for the file system), no two options name
    the same file (one would overwrite the other), and none names an input file of
    the command (writing it would lose the input)."""
    files = FILE_OUTPUTS.get(args.command, ())
    for name in OUTPUT_OPTIONS:
        value = getattr(args, name, None)
        if name not in files and isinstance(value, str):
            check_output(value, folder=True, key=name)
    seen: dict[str, str] = {}
    for name in FILE_INPUTS.get(args.command, ()):
        value = getattr(args, name, None)
        if isinstance(value, str) and os.path.isfile(value):
            seen[os.path.realpath(value)] = "the input file" if name == "file" else "--" + name
    for name in files:
        value = getattr(args, name, None)
        if not isinstance(value, str) or value == "-":
            continue
        option = "--" + name
        if os.path.isdir(value):
            raise ConfigError(f"{option} names a folder, not a file: {value}", key=name)
        check_output(value, key=name)
        real = os.path.realpath(value)
        if real in seen:
            raise ConfigError(f"{option} and {seen[real]} name the same file: {value}", key=name)
        seen[real] = option
        parent = os.path.dirname(real)
        while not os.path.exists(parent):
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
            raise ConfigError(f"{option} cannot be written: {parent} is not a writable folder", key=name)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in OUTPUT_OPTIONS:
        value = getattr(args, name, None)
        if isinstance(value, str) and value != "-":
            setattr(args, name, os.path.normpath(value))
    try:
        check_file_outputs(args)
        return int(args.func(args) or 0)
    except CtxsimError as exc:
        print(f"ctxsim: error: {exc}", file=sys.stderr)
        return 2
    except (FileNotFoundError, FileExistsError, IsADirectoryError, PermissionError, NotADirectoryError) as exc:
        print(f"ctxsim: error: {exc.strerror or exc}: {exc.filename}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        extra = next((e for e, names in EXTRA_MODULES.items() if (exc.name or "").partition(".")[0] in names), None)
        if extra is None:
            raise
        print(f"ctxsim: error: 'ctxsim {args.command}' needs the optional extra '{extra}', which is not installed "
              f"(no module {exc.name!r}): pip install 'ctxsim[{extra}]'", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ctxsim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
