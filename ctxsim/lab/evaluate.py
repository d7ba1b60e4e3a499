"""Evaluation: every policy on every (scenario, seed) context, scored against the oracle.

:func:`evaluate` returns one row per (policy, scenario, seed) — and per run when a
policy is a folder of trained runs, e.g. one experiment's seeds — with the columns
of :data:`ctxsim.lab.results.COLUMNS` and the reward normalized rliable-style between a random policy
and the exhaustive-search oracle on the same context::

    normalized_score = (R − R_random) / (R_oracle − R_random)

``R_random`` is the random policy's expected reward, exact over every chain, and
``R_oracle`` the oracle's best reward over the settings' actions (one search of the
chain tree gives both: :mod:`ctxsim.policies.oracle`); the score is 1
where the oracle gains nothing over random. The oracle scores 1; a peer system,
which uses its own strategy outside the action set, may score above 1, and so may
``only:<id>`` with a strategy outside the action set. Where the
oracle gains little over random, the score amplifies small reward differences:
aggregate it with the IQM, as :func:`summarize` does.

:func:`summarize` aggregates per policy: the interquartile mean of the normalized
score and the mean reward with 95 % stratified bootstrap confidence intervals over
the (seeds × runs × scenarios) scores (:func:`score_tensor`; contexts resampled
within each scenario, runs drawn once per resample for every scenario), and the
mean outcome metrics.

Each context is built once and shared by every policy; policies get deterministic
seeds (:func:`episode_seed`), so the rows are identical from run to run.
"""

from __future__ import annotations

import math
import os
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
from rich.progress import Progress

from ..atomic import remove_stale
from .contexts import build_context
from .environments.overflow import ContextOverflowEnv
from .environments.spec import env_class, load_env_spec
from ..episode import EpisodeSettings, OverflowEpisode, Step
from ..errors import PolicyError
from ..observe import ObservationConfig, observe
from ..policies import get_policy, run_episode, search, trained_policies_in
from ..policies.peers import peer_available
from ..probes import SCORE_COLUMNS
from .results import COLUMNS, with_runs
from .scenarios import Scenario
from .stats import iqm, normalized_score, paired_difference_ci, stratified_bootstrap_ci
from ..transitions import PendingAppend, TransitionWriter

#: most seeds per scenario one evaluation or sweep runs
MAX_SEEDS = 100_000


def episode_seed(scenario: str, seed: int) -> int:
    """The seed a policy's ``reset`` gets on one context."""
    return zlib.crc32(f"{scenario}/{seed}/0".encode())


def _row(policy: str, scenario: str, seed: int, episode: OverflowEpisode) -> dict:
    o = episode.outcome
    return {
        "policy": policy,
        "scenario": scenario,
        "seed": seed,
        "reward": episode.reward,
        "success": o.success,
        "used_recovery": o.used_recovery,
        "forced_recovery": episode.forced_recovery,
        "tokens_before": o.original_tokens,
        "tokens_after": o.final_tokens,
        "reduction_pct": 100.0 * o.reduction,
        "coherence": o.coherence,
        "p1_preserved": o.p1_preserved,
        "facts_retained": o.facts_retained,
        "rules_retained": o.rules_retained,
        "probe_score": o.probe_score,
        **{SCORE_COLUMNS[kind]: score for kind, score in o.probe_scores.items()},
        "reward_profile": episode.settings.reward.profile,
        "latency_ms": episode.total_ms,
        "chain": ">".join(episode.chain),
        "steps": episode.steps_taken,
    }


def load_policies(names: Sequence[str], note: Callable[[str], None]) -> dict[str, tuple[tuple[str, Any], ...]]:
    """name -> its ``(run, policy)`` members, in order: one member, run ``""``, for a
    policy name or a trained policy; one per trained policy for a folder of them
    (:func:`ctxsim.policies.trained_policies_in`, e.g. one experiment trained with
    several seeds), run = its folder or file name. Peers whose optional extra is
    missing are skipped with a note. Unknown names raise PolicyError (before any
    context is built)."""
    policies = {}
    for name in dict.fromkeys(str(n) for n in names):
        prefix, _, member = name.partition(":")
        if prefix == "peer" and member and not peer_available(member):
            note(f"skipping policy '{name}': its optional extra is not installed (pip install 'ctxsim[peers]')")
            continue
        runs = trained_policies_in(name)
        if runs:
            note(f"'{name}': {len(runs)} trained policies evaluated as one policy (column 'run' names each)")
            policies[name] = tuple((run.name, get_policy(str(run))) for run in runs)
        else:
            policies[name] = (("", get_policy(name)),)
    return policies


def check_policies(loaded: dict[str, tuple[tuple[str, Any], ...]], settings: EpisodeSettings) -> None:
    """Raise PolicyError for the first loaded policy that cannot act under ``settings``
    (before anything is evaluated or written)."""
    for members in loaded.values():
        for _, policy in members:
            policy.check(settings)


def transcript_note(scenarios: Sequence[Scenario], seeds: int) -> str | None:
    """What to tell when transcript scenarios that are not families (one context
    whatever the seed) are evaluated with several seeds; None otherwise."""
    fixed = [s.name for s in scenarios if not s.varies_by_seed]
    if not fixed or seeds <= 1:
        return None
    return (f"transcript scenarios build one context whatever the seed: {', '.join(fixed)} "
            f"{'is' if len(fixed) == 1 else 'are'} {seeds} episodes of the same context each "
            f"(a transcript family draws a limit per seed: data/families/transcripts.yaml)")


def evaluate(
    policies: Sequence[str],
    scenarios: Sequence[Scenario],
    seeds: Sequence[int] | int,
    settings: EpisodeSettings,
    log: str | Path | None = None,
    progress: bool = False,
    note: Callable[[str], None] | None = None,
    overwrite: bool = False,
    oracle: bool = True,
) -> pd.DataFrame:
    """One row per (policy, run, scenario, seed), ordered by policy (as given),
    scenario (as given), seed and run; ``seeds`` is a list or a count
    (``range(seeds)``). ``run`` is ``""`` but for a folder of trained policies
    (:func:`load_policies`), whose every member gets its rows.

    ``log``: a JSONL file of every transition (the evaluated policies' steps),
    appended to (an existing log is never truncated) unless ``overwrite``.
    ``note``: where notes go (default: stderr): skipped peers, transcript scenarios
    evaluated with several seeds. ``oracle=False`` skips the search of each context
    (``oracle_reward``, ``random_reward`` and ``normalized_score`` are then NaN) for a
    caller that reads the policies' own columns only.
    """
    note = note or (lambda text: print(f"note: {text}", file=sys.stderr))
    seeds = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    told: list[str] = []  # told once a policy is left (otherwise the error alone says it)
    loaded = load_policies(policies, told.append)
    if not loaded:  # before any context is built or output written
        raise PolicyError(f"no policy left to evaluate: {', '.join(map(str, policies))} need(s) an optional extra that "
                          "is not installed (pip install 'ctxsim[peers]')", key="policy")
    for text in told:
        note(text)
    check_policies(loaded, settings)
    repeated = transcript_note(scenarios, len(seeds))
    if repeated:
        note(repeated)
    command = repr((list(loaded), [(s.name, str(s.source)) for s in scenarios], seeds, settings))
    transitions = None if log is None else _TransitionLog(log, settings, overwrite, command)
    rows: dict[tuple[int, int, int, int], dict] = {}
    completed = False
    try:
        with _progress(progress, len(scenarios) * len(seeds)) as advance:
            for si, scenario in enumerate(scenarios):
                for ki, seed in enumerate(seeds):
                    state = build_context(scenario, seed)
                    searched = search(state, settings) if oracle else None
                    best, baseline = (searched.reward, searched.random_reward) if searched else (math.nan, math.nan)
                    number = si * len(seeds) + ki
                    for pi, (name, members) in enumerate(loaded.items()):
                        for ri, (run, policy) in enumerate(members):
                            label = f"{name}/{run}" if run else name
                            recorder = None if transitions is None else transitions.recorder(label, number, scenario.name, seed)
                            episode = run_episode(policy, state, settings, episode_seed(scenario.name, seed), recorder)
                            row = _row(name, scenario.name, seed, episode)
                            row.update(run=run, oracle_reward=best, random_reward=baseline)
                            row["normalized_score"] = float(normalized_score(row["reward"], baseline, best)) if searched else math.nan
                            rows[(pi, si, ki, ri)] = row
                    advance()
        completed = True
    finally:
        if transitions is not None:
            transitions.close(keep=completed)
    return pd.DataFrame([rows[k] for k in sorted(rows)], columns=list(COLUMNS))


class _TransitionLog:
    """Writes the evaluated episodes' transitions to JSONL (:mod:`ctxsim.transitions`):
    ``run_id`` is ``evaluate:<policy>``, episodes are numbered by context in row
    order (on from an appended log's last), observations are
    :func:`ctxsim.observe.observe` under the settings.

    All or nothing: an overwritten log is written beside the old one and replaces it
    when the evaluation completes; an appended log is cut back to its size before
    the evaluation (a torn tail aside), or removed if it is new, when the evaluation
    fails or is interrupted. A SIGKILL skips that: the append's marker
    (:class:`ctxsim.transitions.PendingAppend`, keyed by ``command``) lets the same
    evaluation resume, writing only the episodes the killed one did not complete."""

    def __init__(self, path: str | Path, settings: EpisodeSettings, overwrite: bool = False, command: str = ""):
        self.path = Path(path)
        remove_stale(self.path)  # an overwrite's temporary left by a killed run
        self.temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp") if overwrite else None
        self.created = not self.path.exists()
        self.pending = None if overwrite else PendingAppend(self.path, command)
        first, self.done = self.pending.resume() if self.pending else (None, set())
        self.writer = TransitionWriter(self.temporary or self.path, "evaluate", overwrite=overwrite)
        if first is not None:
            self.writer.first_episode = first
        self.size = None if overwrite else self.writer.path.stat().st_size  # after a torn tail was cut
        if self.pending is not None:
            self.pending.start(self.size, self.writer.first_episode)
            self.size = self.pending.size
        self.config = ObservationConfig.of(settings)

    def recorder(self, policy: str, number: int, scenario: str, seed: int) -> Callable[[OverflowEpisode, Step], None]:
        def on_step(episode: OverflowEpisode, step: Step) -> None:
            self.writer.run_id = f"evaluate:{policy}"
            if (self.writer.run_id, self.writer.first_episode + number) in self.done:
                return  # written by the killed run this one resumes
            self.writer.write_step(
                step,
                episode=self.writer.first_episode + number,
                index=episode.steps_taken - 1,
                scenario=scenario,
                seed=seed,
                observe=lambda state: observe(state, self.config),
                outcome=episode.outcome.to_dict() if step.done else None,
            )

        return on_step

    def close(self, keep: bool = True) -> None:
        """Close the log; ``keep``: the evaluation completed (else undo its records)."""
        self.writer.close()
        if self.temporary is not None:
            if keep:
                os.replace(self.temporary, self.path)
            else:
                self.temporary.unlink(missing_ok=True)
        elif not keep and self.created:
            self.path.unlink(missing_ok=True)
        elif not keep:
            os.truncate(self.path, self.size)
        if self.pending is not None:
            self.pending.finish()


class _progress:
    """A rich progress bar over contexts when ``enabled`` (a no-op otherwise)."""

    def __init__(self, enabled: bool, total: int):
        self.enabled, self.total, self.bar = enabled, total, None

    def __enter__(self) -> Callable[[], None]:
        if not self.enabled:
            return lambda: None
        self.bar = Progress(transient=True)
        self.bar.start()
        task = self.bar.add_task("evaluating contexts", total=self.total)
        return lambda: self.bar.advance(task)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()


def score_tensor(group: pd.DataFrame, column: str) -> np.ndarray:
    """(seeds × runs × scenarios) array of one policy's ``column`` for
    :func:`ctxsim.lab.stats.stratified_bootstrap_ci`, which resamples the contexts within
    each scenario and the runs (of a folder of trained policies; one run otherwise).
    Every run needs every (scenario, seed) context, with the same seeds in every
    scenario, and a value in ``column`` on each: ValueError otherwise."""
    missing = int(group[column].isna().sum())
    if missing:
        raise ValueError(f"'{column}': {missing} of {len(group)} values are missing (NaN)")
    table = with_runs(group).pivot(index="seed", columns=["run", "scenario"], values=column)
    table = table.sort_index(axis=1, level=["run", "scenario"])  # run-major, scenarios sorted within a run
    n_scenarios = table.columns.get_level_values("scenario").nunique()
    values = table.to_numpy(dtype=float)
    if np.isnan(values).any():
        raise ValueError(f"'{column}': not every run has every (scenario, seed) context")
    return values.reshape(len(table), -1, n_scenarios)


def reward_by_scenario(df: pd.DataFrame) -> pd.DataFrame:
    """Mean reward per scenario (rows) and policy (columns), both in order of first
    appearance, with the oracle's mean reward on the same contexts as a last column
    when ``df`` has one (``oracle_reward``: overflow events, not whole conversations)."""
    scenarios = list(dict.fromkeys(df["scenario"]))
    table = df.pivot_table(index="scenario", columns="policy", values="reward", aggfunc="mean", sort=False)
    table = table.reindex(index=scenarios, columns=list(dict.fromkeys(df["policy"])))
    if "oracle_reward" in df.columns:
        first = df.drop_duplicates(["scenario", "seed"])  # one oracle value per context
        table = table.drop(columns="oracle", errors="ignore")  # an evaluated `oracle` policy: the same values
        table["oracle"] = first.groupby("scenario", sort=False)["oracle_reward"].mean().reindex(scenarios)
    table.columns.name = None
    return table


def summarize(df: pd.DataFrame, *, reps: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per policy (in order of first appearance): IQM of the normalized score and mean
    reward, each with its 95 % stratified bootstrap CI over seeds × runs × scenarios
    (:func:`score_tensor`; ``reps`` resamples drawn from ``seed``), and
    the mean success, recovery, reduction (%), P1 preserved, facts and rules
    retained, probe score (all probes and per kind), coherence and latency (ms).
    Results without probe columns (written before probes existed) summarize with
    those means as NaN."""
    out = []
    for policy, group in df.groupby("policy", sort=False):
        scores, rewards = score_tensor(group, "normalized_score"), score_tensor(group, "reward")
        lo, hi = stratified_bootstrap_ci(scores, iqm, reps=reps, seed=seed)
        rlo, rhi = stratified_bootstrap_ci(rewards, lambda m: float(np.mean(m)), reps=reps, seed=seed)
        out.append(
            {
                "policy": policy,
                "episodes": len(group),
                "iqm_normalized": iqm(scores),
                "iqm_ci_low": lo,
                "iqm_ci_high": hi,
                "mean_reward": float(rewards.mean()),
                "reward_ci_low": rlo,
                "reward_ci_high": rhi,
                "success_rate": float(group["success"].mean()),
                "recovery_rate": float(group["used_recovery"].mean()),
                "reduction_pct": float(group["reduction_pct"].mean()),
                "p1_preserved": float(group["p1_preserved"].mean()),
                "facts_retained": float(group["facts_retained"].mean()),
                "rules_retained": float(group["rules_retained"].mean()),
                **{col: _mean(group, col) for col in ("probe_score", *SCORE_COLUMNS.values())},
                "coherence": float(group["coherence"].mean()),
                "latency_ms": float(group["latency_ms"].mean()),
            }
        )
    return pd.DataFrame(out)


def _mean(group: pd.DataFrame, column: str) -> float:
    """Mean of a column, NaN when the results lack it."""
    return float(group[column].mean()) if column in group.columns else float("nan")


def paired_differences(
    df: pd.DataFrame, reference: str, column: str = "reward", *, reps: int = 2000, seed: int = 0
) -> pd.DataFrame:
    """Per other policy: mean of ``column(reference) − column(other)`` (the reward by
    default; the probe score, the reduction, ...) over the same (scenario, seed)
    contexts, with its 95 % stratified bootstrap CI; ``beats`` is True when the whole
    interval is above zero. With several runs on a side (a folder of trained
    policies), each side's mean is over its runs, and the bootstrap resamples each
    side's runs on its own (:func:`ctxsim.lab.stats.paired_difference_ci`).

    The contexts are those both policies have: a whole scenario or seed that only
    one side has is left out of the mean and the interval (nothing says so); a gap
    that leaves the common contexts ragged (one (scenario, seed) missing on a side,
    or on one of its runs) or a missing value raises ValueError. On one context with
    one run a side, or a difference that is the same on every context, the interval
    has zero width (``beats`` then only says the difference is above zero)."""
    df = with_runs(df)
    keys = ["scenario", "seed"]
    ref = df[df.policy == reference]
    if ref.empty:
        raise ValueError(f"paired_differences: the reference {reference!r} is not in the results")
    rows = []
    for policy, group in df.groupby("policy", sort=False):
        if policy == reference:
            continue
        common = ref[keys].drop_duplicates().merge(group[keys].drop_duplicates(), on=keys)
        sides = [side.merge(common, on=keys) for side in (ref, group)]
        mean, lo, hi = paired_difference_ci(*(score_tensor(side, column) for side in sides), reps=reps, seed=seed)
        rows.append({"policy": policy, "mean_difference": mean, "ci_low": lo, "ci_high": hi, "beats": lo > 0})
    return pd.DataFrame(rows, columns=["policy", "mean_difference", "ci_low", "ci_high", "beats"])


@dataclass(frozen=True)
class GapCaptured:
    """How much of the adaptivity gap a policy captures (:func:`gap_captured`)."""

    iqm: float
    ci_low: float
    ci_high: float
    median: float
    episodes: int  # the episodes where the oracle beats best-fixed (the ratio's denominator is not 0)
    ties: int  # the episodes left out: the oracle earns no more than best-fixed (within 1e-9)


def gap_captured(
    df: pd.DataFrame, policy: str, best_fixed: str, oracle: str = "oracle", *, reps: int = 2000, seed: int = 0
) -> GapCaptured:
    """Share of the adaptivity gap ``policy`` captures: per episode (scenario, seed and,
    for a folder of trained policies, run), ``(R − R_best-fixed) / (R_oracle −
    R_best-fixed)`` on the same context, over the episodes where the oracle earns more
    than best-fixed by over 1e-9 (1: the oracle's reward, 0: best-fixed's; the others,
    including any where best-fixed earns more, are ``ties``); its IQM (robust to the
    contexts with a tiny gap, where the ratio is large either way) with a 95 %
    percentile bootstrap CI, and the median; nan where the policy has a nan reward.

    The CI resamples as :func:`summarize` and :func:`paired_differences` do: the
    contexts within each scenario, and the runs of a folder of trained policies once per
    resample (:func:`~ctxsim.lab.stats.stratified_bootstrap_ci`), the statistic taken
    over the episodes of a resample that have a gap; so runs that act alike do not
    narrow it. Contexts without a best-fixed or oracle reward are left out (counted
    neither in ``episodes`` nor in ``ties``); several rows of either on one context are
    averaged. A scenario's contexts are its seeds in order; a scenario with fewer
    contexts than another, or a run without one, leaves those cells empty."""
    keys = ["scenario", "seed"]
    others = {name: df[df.policy == name].groupby(keys)["reward"].mean() for name in (best_fixed, oracle)}
    mine = with_runs(df[df.policy == policy])
    if mine.empty or any(v.empty for v in others.values()):
        raise ValueError(f"gap_captured needs {policy!r}, {best_fixed!r} and {oracle!r} in the results")
    joined = mine.join(others[best_fixed].rename("fixed"), on=keys).join(others[oracle].rename("best"), on=keys)
    joined = joined.dropna(subset=["fixed", "best"])
    gap = joined["best"] - joined["fixed"]
    open_ = gap > 1e-9
    ratio = (joined["reward"] - joined["fixed"]) / gap
    ratios = ratio[open_].to_numpy(dtype=float)
    if not ratios.size:
        raise ValueError(f"{oracle!r} never beats {best_fixed!r} here: there is no gap to capture")
    if np.isnan(ratios).any():  # a nan reward: no interval either
        lo = hi = float("nan")
    else:
        lo, hi = stratified_bootstrap_ci(_ratio_tensor(joined.assign(ratio=ratio.where(open_))), _iqm_of_present,
                                         reps=reps, seed=seed)
    return GapCaptured(iqm(ratios), lo, hi, float(np.median(ratios)),
                       int(open_.sum()), int((~open_).sum()))


def _ratio_tensor(joined: pd.DataFrame) -> np.ndarray:
    """(contexts × runs × scenarios) array of the ``ratio`` column, a scenario's contexts
    in the order of its seeds; nan where an episode has no gap or no row."""
    rows = joined.assign(context=joined.groupby("scenario")["seed"].rank(method="dense").astype(int) - 1)
    table = rows.pivot(index="context", columns=["run", "scenario"], values="ratio")
    runs, scenarios = sorted(set(rows["run"])), sorted(set(rows["scenario"]))
    table = table.reindex(columns=pd.MultiIndex.from_product([runs, scenarios], names=["run", "scenario"]))
    return table.to_numpy(dtype=float).reshape(len(table), len(runs), len(scenarios))


def _iqm_of_present(values: np.ndarray) -> float:
    """:func:`~ctxsim.lab.stats.iqm` of the values that are not nan (episodes with a gap)."""
    return iqm(values[~np.isnan(values)])


def settings_from_env_spec(
    path: str | Path | None, overrides: dict[str, Any] | None = None, *, source: str | Path | None = None,
    key_prefix: str = "config",
) -> tuple[EpisodeSettings, dict[str, Any]]:
    """(episode settings, full env config) of an env spec YAML or ``envs/<name>``
    with ``overrides`` (None: the default overflow env).

    The spec's config is resolved against its environment's defaults (errors name
    ``source`` and ``<key_prefix>.<key>``); the keys that decide how an overflow is
    broken and scored become the settings.
    """
    if path is None:
        checked = ContextOverflowEnv.checked_config(dict(overrides or {}), source, key_prefix)
    else:
        spec = load_env_spec(path)
        checked = env_class(spec.id).checked_config({**spec.config, **(overrides or {})}, source or spec.source or path, key_prefix)
    return EpisodeSettings.of(checked), checked.model_dump(mode="json")
