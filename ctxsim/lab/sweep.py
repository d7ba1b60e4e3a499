"""Regression sweeps: policies × scenarios × seeds, in parallel, checked against a baseline.

A sweep file (``experiments/<name>.yaml``, :class:`SweepConfig`)::

    name: regression
    policies: [seed-chain, greedy, oracle, peer:letta, runs/my-run]   # names or paths
    scenarios: {suite: data/scenarios, names: null}   # default: every shipped scenario
    seeds: 2                                           # N -> 0..N-1, or a list
    env: envs/default.yaml                             # env spec: its episode settings
    env_config: {max_steps: 3}                         # overrides of the spec's config
    tolerances: {reward: 0.05, success_rate: 0.05, facts_retained: 0.05, probe_score: 0.05}
    backend: local                                     # local | ray
    workers: null                                      # local processes (default: the machine's cores)
    ray: {address: null, num_cpus: 2}                  # the Ray backend's CPUs (--workers overrides them)

Paths (suite, env, policy paths) are taken as given, else relative to the sweep
file, else to the repository. The work unit is one (scenario, seed):
:func:`run_unit` calls :func:`ctxsim.lab.evaluate.evaluate` on it for every policy, so
the context and the oracle search (best and random-policy rewards) are computed once per unit.
Units run in-process (1 worker), in a process pool (``forkserver``/``spawn``) or as
Ray tasks; every result is computed from explicit seeds, so ``results.csv`` has the
same bytes whatever the backend or the number of workers.

Outputs, all written atomically into the output folder (nothing outside it):
``results.csv`` (the evaluate columns, sorted by policy, scenario, seed; floats
rounded to 6 decimals), ``transitions.jsonl`` (every step, in unit order: scenario
as configured, then seed), ``summary.md``, ``sweep.yaml`` (the resolved sweep) and,
with a baseline, ``regressions.csv``. A sweep that fails removes the output folder
if it created it.

Regression check (:func:`compare`): on the (policy, scenario, seed) rows present in
both the results and the baseline, the mean reward, success rate and facts retained
of each (policy, scenario) must not fall below the baseline's by more than the
absolute tolerance of that metric. It compares point estimates on fixed contexts:
for the deterministic policies (every baseline, peer and exported policy) any
change beyond the tolerance is real; a policy trained again is another sample, and
run-to-run noise alone can exceed a tolerance of 0.05 — compare retrained runs with
``ctxsim evaluate --compare`` (paired bootstrap CI) instead.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Iterator, Literal

import pandas as pd
import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictStr, field_validator

from ..atomic import atomic_write_bytes, atomic_write_text, output_folder, remove_stale, temp_prefix
from ..episode import EpisodeSettings
from ..errors import ConfigError, PolicyError, describe_value
from ..paths import ROOT
from ..policies import is_learned, list_policies
from ..transitions import encode_record
from ..validation import MAX_SEED, Bounded, join_key, load_yaml, validate
from .evaluate import (
    MAX_SEEDS,
    check_policies,
    evaluate,
    load_policies,
    settings_from_env_spec,
    summarize,
    transcript_note,
)
from .parallel import default_workers, process_map
from .report import summary_markdown
from .results import FLOAT_DECIMALS, METRICS, OPTIONAL_METRICS, SORT_KEYS, read_results, results_csv, with_runs
from .scenarios import DEFAULT_SUITE, Scenario, load_scenarios

DEFAULT_ENV = "envs/default.yaml"
REGRESSION_COLUMNS = ["policy", "scenario", "metric", "baseline", "current", "delta", "tolerance"]


# ---- configuration ---------------------------------------------------------------
def _no_repeats(value):
    """A list validator: no item twice."""
    if isinstance(value, list) and len(set(value)) != len(value):
        raise ValueError(f"lists an item twice: {sorted({v for v in value if value.count(v) > 1})}")
    return value


class ScenarioSelection(BaseModel):
    """Which scenarios: a suite (file or folder) and an optional subset of its names."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    suite: StrictStr | None = Field(None, description="scenario file or folder (default: the shipped suite)")
    names: Annotated[list[StrictStr], Field(min_length=1)] | None = Field(None, description="subset, in this order")

    @field_validator("names")
    @classmethod
    def _unique(cls, value):
        return _no_repeats(value)


class Tolerances(BaseModel):
    """How far (absolute) a (policy, scenario) mean may fall below the baseline."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    reward: Annotated[float, Field(ge=0)] = 0.05
    success_rate: Annotated[float, Field(ge=0)] = 0.05
    facts_retained: Annotated[float, Field(ge=0)] = 0.05
    probe_score: Annotated[float, Field(ge=0)] = 0.05


class RayConfig(BaseModel):
    """Where the ray backend runs: a cluster ``address`` (else RAY_ADDRESS, else a
    local Ray with ``num_cpus``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    address: StrictStr | None = None
    num_cpus: Annotated[int, Field(ge=1)] = 2


class SweepConfig(BaseModel):
    """One sweep file (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
    description: StrictStr = ""
    policies: Annotated[list[StrictStr], Field(min_length=1)]
    scenarios: ScenarioSelection = Field(default_factory=ScenarioSelection)
    seeds: int | list[int] = Field(description="N (seeds 0..N-1, N >= 1) or a list of distinct seeds >= 0")
    env: StrictStr = DEFAULT_ENV
    env_config: Annotated[dict[StrictStr, Any], Bounded] = Field(default_factory=dict)
    tolerances: Tolerances = Field(default_factory=Tolerances)
    backend: Literal["local", "ray"] = "local"
    workers: Annotated[int, Field(ge=1, strict=True)] | None = None
    ray: RayConfig = Field(default_factory=RayConfig)

    @field_validator("seeds", mode="before")
    @classmethod
    def _seeds(cls, value):
        def is_int(v) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        if is_int(value):
            if not 1 <= value <= MAX_SEEDS:
                raise ValueError(f"a seed count must be in 1..{MAX_SEEDS:,}")
        elif not isinstance(value, list) or not value or not all(is_int(v) and 0 <= v <= MAX_SEED for v in value):
            raise ValueError(f"expected a seed count >= 1 or a non-empty list of integer seeds in 0..{MAX_SEED}")
        return value

    @field_validator("policies", "seeds")
    @classmethod
    def _unique(cls, value):
        return _no_repeats(value)

    @property
    def seed_list(self) -> list[int]:
        return list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)


@dataclass(frozen=True)
class Sweep:
    """A loaded sweep: the config, and everything it names, resolved and checked."""

    config: SweepConfig
    source: Path
    policies: dict[str, str]  # label (as written) -> what evaluate loads (a name or an absolute path)
    scenarios: list[Scenario]
    seeds: list[int]
    settings: EpisodeSettings
    env_config: dict[str, Any]  # the full, validated env config
    notes: tuple[str, ...] = ()  # policies skipped because their optional extra is missing
    suite: Path = DEFAULT_SUITE  # where the scenarios were loaded from

    @property
    def name(self) -> str:
        return self.config.name


def resolve_path(ref: str, source: Path, key: str) -> Path:
    """A path named in a sweep or tune file: as given, next to that file, or in the repo
    (absolute); ConfigError naming ``source`` and ``key`` when none exists."""
    for candidate in (Path(ref), source.parent / ref, ROOT / ref):
        if candidate.exists():
            return candidate.resolve()
    raise ConfigError(f"file not found (got {describe_value(ref)})", source=source, key=key)


def load_sweep(path: str | Path) -> Sweep:
    """Read and check a sweep file: every policy, scenario and env setting it names.

    Raises ConfigError (file, key path, value; one line) for a bad file, an unknown
    policy or scenario name or a bad env override; ScenarioError for a bad suite;
    PolicyError for a policy path that does not load. Policies whose optional extra
    is missing are dropped, with a note in ``Sweep.notes``.
    """
    source = Path(path)
    data = load_yaml(source, ConfigError)
    if not isinstance(data, dict):
        raise ConfigError(f"a sweep file must be a mapping (got {describe_value(data)})", source=source)
    config = validate(SweepConfig, data, source, ConfigError)

    policies: dict[str, str] = {}
    for i, label in enumerate(config.policies):
        key = join_key("policies", i)
        if not is_learned(label):
            policies[label] = label
            continue
        try:
            target = str(resolve_path(label, source, key))
        except ConfigError:
            raise ConfigError(
                f"unknown policy {label!r}: neither a policy name ({', '.join(list_policies())}) nor an existing path",
                source=source, key=key,
            ) from None
        twin = next((other for other, path in policies.items() if path == target), None)
        if twin is not None:
            raise ConfigError(f"{label!r} is the same policy as {twin!r} ({target})", source=source, key=key)
        policies[label] = target
    suite = resolve_path(config.scenarios.suite, source, "scenarios.suite") if config.scenarios.suite else DEFAULT_SUITE
    scenarios = load_scenarios(suite)
    if config.scenarios.names is not None:
        by_name = {s.name: s for s in scenarios}
        for i, name in enumerate(config.scenarios.names):
            if name not in by_name:
                raise ConfigError(
                    f"unknown scenario (got {name!r}); known: {', '.join(sorted(by_name))}",
                    source=source, key=join_key("scenarios", "names", i),
                )
        scenarios = [by_name[n] for n in config.scenarios.names]
    settings, env_config = settings_from_env_spec(
        resolve_path(config.env, source, "env"), config.env_config, source=source, key_prefix="env_config"
    )
    notes: list[str] = []
    loaded = load_policies(list(policies.values()), notes.append)  # every policy loads before any work starts
    policies = {label: target for label, target in policies.items() if target in loaded}
    if not policies:
        raise ConfigError(f"no policy can run here ({'; '.join(notes)})", source=source, key="policies")
    for i, label in enumerate(config.policies):
        if label not in policies:  # skipped: its optional extra is missing
            continue
        try:
            check_policies({label: loaded[policies[label]]}, settings)
        except PolicyError as exc:
            raise ConfigError(exc.message, source=source, key=join_key("policies", i)) from None
    repeated = transcript_note(scenarios, len(config.seed_list))
    if repeated:
        notes.append(repeated)
    return Sweep(config, source, policies, scenarios, config.seed_list, settings, env_config, tuple(notes), Path(suite))


# ---- work units -------------------------------------------------------------------
@dataclass(frozen=True)
class WorkUnit:
    """One (scenario, seed) context, evaluated for every policy."""

    scenario: Scenario
    seed: int
    policies: tuple[str, ...]
    settings: EpisodeSettings
    scratch: str | None = None  # folder for the unit's transition log (None or absent here: system temp)


def run_unit(unit: WorkUnit) -> tuple[pd.DataFrame, bytes]:
    """Evaluate every policy on one context: (its rows, its transition log bytes)."""
    scratch = unit.scratch if unit.scratch and Path(unit.scratch).is_dir() else None
    with tempfile.TemporaryDirectory(prefix="unit-", dir=scratch) as folder:
        log = Path(folder) / "transitions.jsonl"
        df = evaluate(list(unit.policies), [unit.scenario], [unit.seed], unit.settings, log=log,
                      note=lambda _: None)  # the sweep's notes are load_sweep's, said once
        transitions = log.read_bytes() if log.exists() else b""
    return df, transitions


def numbered(transitions: bytes, context: int) -> bytes:
    """One unit's transition log with its episodes numbered by the sweep's context
    number (each unit's log starts at 0), so (run_id, episode) names one episode in
    the joined log."""
    if not context or not transitions:
        return transitions
    out = []
    for line in transitions.splitlines():
        record = json.loads(line)
        out.append(encode_record({**record, "episode": record["episode"] + context}))
    return b"".join(out)


def _largest_first(units: list[WorkUnit]) -> list[int]:
    """Unit indices, the biggest contexts first (rough tokens), so no big one runs last."""
    def tokens(unit: WorkUnit) -> int:
        if unit.scenario.is_transcript:
            return unit.scenario.session_file(unit.seed).stat().st_size // 4
        return unit.scenario.draw(unit.seed).resolved_target  # a family: this seed's draw

    return sorted(range(len(units)), key=lambda i: (-tokens(units[i]), i))


def import_ray(purpose: str = "the ray backend"):
    """The ``ray`` module, or ConfigError saying how to install the optional extra."""
    try:
        import ray
    except ImportError:
        raise ConfigError(f"{purpose} needs Ray, which is not installed: pip install 'ctxsim[ray]'") from None
    return ray


#: the logger of Ray's notice, at each local start, that token authentication is on
RAY_AUTH_NOTICE_LOGGER = "ray._private.authentication.authentication_token_setup"


@contextmanager
def ray_session(config: RayConfig, num_cpus: int | None = None) -> Iterator[Any]:
    """Ray, initialized for the duration: connected to ``config.address`` (else
    RAY_ADDRESS) when given, else a local instance with ``num_cpus`` (default
    ``config.num_cpus``); an already initialized Ray is used as it is. A local
    instance keeps the token authentication Ray turns on by default; the notice Ray
    logs about it at each start (:data:`RAY_AUTH_NOTICE_LOGGER`) is not printed, since
    the instance lives only as long as the command."""
    ray = import_ray()
    started = not ray.is_initialized()
    if started:
        address = config.address or os.environ.get("RAY_ADDRESS")
        quiet = {"logging_level": logging.WARNING, "log_to_driver": False}
        if address:
            ray.init(address=address, **quiet)
        else:
            notice = logging.getLogger(RAY_AUTH_NOTICE_LOGGER)
            level = notice.level
            notice.setLevel(logging.ERROR)
            try:
                ray.init(num_cpus=num_cpus or config.num_cpus, include_dashboard=False, **quiet)
            finally:
                notice.setLevel(level)
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


def _run_ray(units: list[WorkUnit], sweep: Sweep, workers: int | None, advance: Callable[[], None]):
    with ray_session(sweep.config.ray, workers) as ray:
        task = ray.remote(num_cpus=1)(run_unit)
        refs = {task.remote(units[i]): i for i in _largest_first(units)}
        results: list[Any] = [None] * len(units)
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                try:
                    results[refs[ref]] = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    raise exc.cause from None
                advance()
        return results


class _Progress:
    """A rich progress bar over work units (a no-op when disabled)."""

    def __init__(self, enabled: bool, total: int, label: str):
        self.enabled, self.total, self.label, self.bar = enabled, total, label, None

    def __enter__(self) -> Callable[[], None]:
        if not self.enabled:
            return lambda: None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        self.bar.start()
        task = self.bar.add_task(self.label, total=self.total)
        return lambda: self.bar.advance(task)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


# ---- the sweep --------------------------------------------------------------------
@dataclass
class SweepResult:
    """What a sweep produced (the files are in ``out``)."""

    out: Path
    results: pd.DataFrame
    summary: pd.DataFrame
    regressions: pd.DataFrame | None
    coverage: tuple[int, int, int] | None  # see :func:`coverage` (None without a baseline)
    seconds: float  # wall time of the work units (not written to any output)

    @property
    def episodes(self) -> int:
        return len(self.results)


def run_sweep(
    sweep: Sweep,
    *,
    out: str | Path | None = None,
    backend: str | None = None,
    workers: int | None = None,
    baseline: str | Path | None = None,
    progress: bool = False,
) -> SweepResult:
    """Run every (scenario, seed) unit, write the outputs into ``out`` (default
    ``reports/sweeps/<name>/``) and, with ``baseline`` (a results CSV), check for
    regressions. ``backend`` and ``workers`` override the sweep file's.

    With more than one local worker, units run in ``forkserver``/``spawn`` processes,
    which re-import the caller's main module: call this from a function guarded by
    ``if __name__ == "__main__":`` (the ``ctxsim`` command is).
    """
    backend = backend or sweep.config.backend
    if backend not in ("local", "ray"):
        raise ConfigError(f"backend must be 'local' or 'ray' (got {describe_value(backend)})", key="backend")
    if workers is not None and workers < 1:
        raise ConfigError(f"workers must be >= 1 (got {workers})", key="workers")
    if backend == "ray":
        import_ray()  # fail before any work or output
    baseline_df = read_results(baseline) if baseline is not None else None
    out = Path(out) if out is not None else Path("reports") / "sweeps" / sweep.name
    if out.exists() and not out.is_dir():
        raise ConfigError("--out names a file, not a folder", source=out, key="out")
    blocked = [name for name in OUTPUT_FILES if (out / name).is_dir()]
    if blocked:  # checked before any work, so a run never stops halfway through writing its outputs
        raise ConfigError(f"{blocked[0]} is a folder here; remove it or pick another --out", source=out, key="out")
    with output_folder(out):  # removed again if this run created it and fails
        remove_stale(out / SCRATCH)  # what a killed sweep left
        scratch = Path(tempfile.mkdtemp(prefix=temp_prefix(out / SCRATCH), dir=out))
        try:
            units = [
                WorkUnit(scenario, seed, tuple(sweep.policies.values()), sweep.settings, str(scratch))
                for scenario in sweep.scenarios
                for seed in sweep.seeds
            ]
            start = time.perf_counter()
            with _Progress(progress, len(units), f"sweep {sweep.name}") as advance:
                if backend == "ray":
                    parts = _run_ray(units, sweep, workers, advance)
                else:
                    count = min(workers or sweep.config.workers or default_workers(), len(units))
                    parts = process_map(run_unit, units, count, order=_largest_first(units),
                                        preload=["ctxsim.lab.evaluate"], advance=advance)
            seconds = time.perf_counter() - start
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

        labels = {target: label for label, target in sweep.policies.items()}
        results = pd.concat([df for df, _ in parts], ignore_index=True)
        results["policy"] = results["policy"].map(lambda p: labels.get(p, p))
        # rounded as written, so a check against these very results finds no difference at all
        results = results.sort_values(SORT_KEYS, kind="stable").reset_index(drop=True).round(FLOAT_DECIMALS)
        summary = summarize(results)
        regressions = covered = None
        if baseline_df is not None:
            regressions = compare(results, baseline_df, sweep.config.tolerances, baseline)
            covered = coverage(results, baseline_df)

        markdown = summary_markdown(results, summary, title=f"Sweep `{sweep.name}`", regressions=regressions)
        atomic_write_text(out / "results.csv", results_csv(results))
        atomic_write_bytes(out / "transitions.jsonl", b"".join(numbered(t, i) for i, (_, t) in enumerate(parts)))
        atomic_write_text(out / "sweep.yaml", resolved_yaml(sweep))
        atomic_write_text(out / "summary.md", markdown)
        if regressions is not None:
            atomic_write_text(out / "regressions.csv", regressions.to_csv(index=False, lineterminator="\n"))
        else:
            (out / "regressions.csv").unlink(missing_ok=True)  # a previous run's check does not apply
        return SweepResult(out, results, summary, regressions, covered, seconds)


#: the files a sweep writes into its output folder
#: the hidden scratch folder of a sweep's unit logs in its output folder
#: (``.sweep.<pid>.<random>``; a killed sweep's is removed by the next one)
SCRATCH = "sweep"
OUTPUT_FILES = ("results.csv", "transitions.jsonl", "sweep.yaml", "summary.md", "regressions.csv")


def resolved_yaml(sweep: Sweep) -> str:
    """The sweep as run: policies (with the folder each trained one was loaded from),
    the suite and scenario names, seeds and the env config (its ``scenarios`` is the
    suite's: a sweep loads its own)."""
    data = {
        "name": sweep.name,
        "description": sweep.config.description,
        "policies": list(sweep.policies),
        "policy_paths": {label: target for label, target in sweep.policies.items() if target != label},
        "suite": str(sweep.suite),
        "scenarios": [s.name for s in sweep.scenarios],
        "seeds": sweep.seeds,
        "env_config": {**sweep.env_config, "scenarios": str(sweep.suite)},
        "tolerances": sweep.config.tolerances.model_dump(),
    }
    return yaml.safe_dump(data, sort_keys=False)


# ---- regression check --------------------------------------------------------------
def compare(
    results: pd.DataFrame, baseline: pd.DataFrame, tolerances: Tolerances, source: str | Path | None = None
) -> pd.DataFrame:
    """The regressions of ``results`` against ``baseline`` (:data:`REGRESSION_COLUMNS`,
    sorted by policy, scenario, metric; empty when none).

    Only (policy, scenario, seed, run) rows present in both are compared; ConfigError
    when there are none. An optional metric (:data:`OPTIONAL_METRICS`) is compared only
    when both sides have its column.
    """
    results, baseline = with_runs(results), with_runs(baseline)
    metrics = {m: c for m, c in METRICS.items()
               if m not in OPTIONAL_METRICS or (c in results.columns and c in baseline.columns)}
    columns = list(dict.fromkeys(metrics.values()))
    merged = results[SORT_KEYS + columns].merge(baseline[SORT_KEYS + columns], on=SORT_KEYS, suffixes=("", "_baseline"))
    if merged.empty:
        raise ConfigError("the baseline shares no (policy, scenario, seed, run) row with the results", source=source)
    for col in columns:
        merged[col] = merged[col].astype(float)
        merged[f"{col}_baseline"] = merged[f"{col}_baseline"].astype(float)
    means = merged.groupby(["policy", "scenario"], sort=True).mean(numeric_only=True)
    rows = []
    for (policy, scenario), row in means.iterrows():
        for metric, col in metrics.items():
            tol = getattr(tolerances, metric)
            delta = row[col] - row[f"{col}_baseline"]
            if delta < -tol - 1e-9:
                rows.append([policy, scenario, metric, row[f"{col}_baseline"], row[col], delta, tol])
    return pd.DataFrame(rows, columns=REGRESSION_COLUMNS).round(FLOAT_DECIMALS)


def coverage(results: pd.DataFrame, baseline: pd.DataFrame) -> tuple[int, int, int]:
    """(compared, only in results, only in baseline) counts of (policy, scenario)
    pairs, as :func:`compare` matches them: a pair is compared when at least one of its
    (seed, run) rows is in both; a retrained policy whose runs have new names is not."""
    results, baseline = with_runs(results), with_runs(baseline)
    matched = results[SORT_KEYS].merge(baseline[SORT_KEYS], on=SORT_KEYS)
    both = set(map(tuple, matched[["policy", "scenario"]].drop_duplicates().to_numpy()))
    mine = set(map(tuple, results[["policy", "scenario"]].drop_duplicates().to_numpy()))
    theirs = set(map(tuple, baseline[["policy", "scenario"]].drop_duplicates().to_numpy()))
    return len(both), len(mine - both), len(theirs - both)
