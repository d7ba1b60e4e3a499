"""Hyperparameter search of training with Ray Tune (optional extra ``ray``).

A tune file (``experiments/tune_<name>.yaml``, :class:`TuneConfig`)::

    name: tune_maskable_ppo
    experiment: experiments/maskable_ppo_seed001.yaml   # the training experiment
    overrides: {eval_freq: 1000, eval_episodes: 20}     # fields of that experiment
    timesteps: 6000                                      # per trial
    num_samples: 6                                       # trials
    seed: 0                                              # sampling and training seed
    resources: {cpu: 1}                                  # per trial
    max_concurrent_trials: null
    param_space:                                         # algorithm hyperparameters
      learning_rate: {loguniform: [0.0001, 0.001]}
      ent_coef: {choice: [0.0, 0.01]}
      n_epochs: {randint: [5, 11]}                       # low inclusive, high exclusive
    ray: {address: null, num_cpus: 2}

Each trial calls :func:`ctxsim.lab.train.train` with the sampled values merged into the
experiment's ``hyperparams`` and reports the best (and the last) evaluation mean
reward of the run's ``evaluations.npz``: the scores of the experiment's selection
split (its ``validation_scenarios``, which the shipped tune file names so that the
held-out split stays unseen; without them the held-out scenarios, with a note that
the best score is then optimistic). The trials' run folders and Ray Tune's own
files go under the output folder (default ``reports/tune/<name>/``), with the result
table ``tune_results.csv`` and ``tune_results.md`` (best trial first), written atomically;
a trial that fails is reported in one line (its hyperparameters and its own error,
:attr:`TuneResult.failed`) and its run folder removed, and a search whose every trial
fails removes the output folder again when it created it. Quiet, Ray prints nothing of
its own. Ray is imported inside :func:`run_tune` only.
"""

from __future__ import annotations

import logging
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Iterator

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, StrictStr, model_validator

from ..atomic import atomic_write_text, output_folder
from ..errors import ConfigError, CtxsimError, describe_value
from ..validation import MAX_SEED, Bounded, KeyedValueError, load_yaml, validate
from .report import markdown_table
from .runs import EVALUATIONS_FILE, algorithm_class, read_evaluations
from .sweep import RayConfig, import_ray, ray_session, resolve_path
from .train import ExperimentConfig, check_hyperparams, env_configs, load_experiment, train

METRIC = "best_mean_reward"
Pair = Annotated[list[float], Field(min_length=2, max_length=2)]  # [low, high]


class ParamSpec(BaseModel):
    """One search dimension: exactly one of ``choice`` (values), ``uniform`` /
    ``loguniform`` ([low, high]) or ``randint`` ([low, high), integers)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    choice: Annotated[list[Any], Field(min_length=1), Bounded] | None = None
    uniform: Pair | None = None
    loguniform: Annotated[list[Annotated[float, Field(gt=0)]], Field(min_length=2, max_length=2)] | None = None
    randint: Annotated[list[int], Field(min_length=2, max_length=2)] | None = None

    @model_validator(mode="after")
    def _one(self) -> ParamSpec:
        given = [k for k in ("choice", "uniform", "loguniform", "randint") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of choice, uniform, loguniform, randint, not {given or 'none'}")
        kind = given[0]
        if kind != "choice" and not getattr(self, kind)[0] < getattr(self, kind)[1]:
            raise KeyedValueError(kind, list(getattr(self, kind)), "needs low < high")
        return self

    def sampler(self):
        """The Ray Tune search-space object."""
        from ray import tune

        if self.choice is not None:
            return tune.choice(self.choice)
        if self.uniform is not None:
            return tune.uniform(*self.uniform)
        if self.loguniform is not None:
            return tune.loguniform(*self.loguniform)
        return tune.randint(*self.randint)


class Resources(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    cpu: Annotated[float, Field(gt=0)] = 1


class TuneConfig(BaseModel):
    """One tune file (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
    description: StrictStr = ""
    experiment: StrictStr
    overrides: Annotated[dict[StrictStr, Any], Bounded] = Field(default_factory=dict)
    timesteps: Annotated[int, Field(gt=0, strict=True)]
    num_samples: Annotated[int, Field(ge=1, strict=True)] = 4
    seed: Annotated[int, Field(ge=0, le=MAX_SEED, strict=True)] = 0
    resources: Resources = Field(default_factory=Resources)
    max_concurrent_trials: Annotated[int, Field(ge=1, strict=True)] | None = None
    param_space: Annotated[dict[StrictStr, ParamSpec], Field(min_length=1)]
    ray: RayConfig = Field(default_factory=RayConfig)


@dataclass(frozen=True)
class TuneSpec:
    """A loaded tune file with its experiment (overrides applied, checked)."""

    config: TuneConfig
    source: Path
    experiment: ExperimentConfig

    @cached_property
    def selection(self) -> tuple[str, list[str]]:
        """(split name, scenario names) the trials are scored on: the selection split
        of :func:`ctxsim.lab.train.env_configs` (validation, else held-out, else training
        scenarios)."""
        e = self.experiment
        split = "validation" if e.validation_scenarios else "held-out" if e.eval_scenarios else "training"
        return split, env_configs(e)[3]["scenario_names"]

    @property
    def notes(self) -> list[str]:
        """What the user should know before trusting the search's numbers."""
        split = self.selection[0]
        if split == "validation":
            return []
        return [f"the trials are scored on the experiment's {split} scenarios: the best trial's score is chosen on "
                f"the {'test' if split == 'held-out' else 'training'} split and is optimistic; name "
                "validation_scenarios in the overrides to select on a split of its own"]


def load_tune(path: str | Path) -> TuneSpec:
    """Read and check a tune file and the experiment it names (ConfigError, one line)."""
    source = Path(path)
    data = load_yaml(source, ConfigError)
    if not isinstance(data, dict):
        raise ConfigError(f"a tune file must be a mapping (got {describe_value(data)})", source=source)
    config = validate(TuneConfig, data, source, ConfigError)
    base = load_experiment(resolve_path(config.experiment, source, "experiment"))
    for key in ("name", "source", "hyperparams"):
        if key in config.overrides:
            raise ConfigError(f"'{key}' cannot be overridden here (use param_space for hyperparameters)",
                              source=source, key=f"overrides.{key}")
    experiment = validate(ExperimentConfig, {**base.model_dump(), **config.overrides}, source, ConfigError, "overrides")
    _check_space(config, experiment, source)
    if experiment.eval_freq > config.timesteps:
        raise ConfigError(
            f"eval_freq {experiment.eval_freq} exceeds timesteps {config.timesteps}: no evaluation would run",
            source=source, key="overrides.eval_freq",
        )
    return TuneSpec(config, source, experiment)


def _check_space(config: TuneConfig, experiment: ExperimentConfig, source: Path) -> None:
    """Check every dimension's extreme values as hyperparameters of the experiment's
    algorithm (:func:`ctxsim.lab.train.check_hyperparams`) before any trial starts."""
    algo_cls = algorithm_class(experiment.algo)
    for name, spec in config.param_space.items():
        values = spec.choice or spec.uniform or spec.loguniform or [spec.randint[0], spec.randint[1] - 1]
        for value in values:
            trial = experiment.model_copy(update={"hyperparams": {**experiment.hyperparams, name: value}})
            try:
                check_hyperparams(algo_cls, trial)
            except ConfigError as exc:
                raise ConfigError(exc.message, source=source, key=f"param_space.{name}") from None


def eval_rewards(run_dir: Path) -> tuple[float, float]:
    """(best, last) evaluation mean reward of a run's ``evaluations.npz``."""
    path = Path(run_dir) / EVALUATIONS_FILE
    if not path.is_file():
        raise ConfigError("no evaluations.npz: the run never evaluated (eval_freq > timesteps?)", source=run_dir)
    _, results = read_evaluations(run_dir)
    means = results.mean(axis=1)
    return float(means.max()), float(means[-1])


def _trial(params: dict[str, Any], *, experiment: dict[str, Any], timesteps: int, seed: int, runs: str) -> None:
    """One Ray Tune trial: train with ``params`` merged into the hyperparameters."""
    from ray import tune

    config = ExperimentConfig.model_validate({**experiment, "hyperparams": {**experiment["hyperparams"], **params}})
    # the trial's folder goes again when it fails (``runs`` exists before any trial starts,
    # so a failing trial removes its own folder only)
    with output_folder(Path(runs) / _trial_name(tune.get_context().get_trial_id())) as folder:
        run_dir = train(config, timesteps=timesteps, seed=seed, out=folder, progress=False)
    best, last = eval_rewards(run_dir)
    tune.report({METRIC: best, "final_mean_reward": last, "run_dir": str(run_dir)})


def _trial_error(error: BaseException) -> str:
    """One line on why a trial failed: the ctxsim error it raised (which Ray wraps as
    the ``cause`` of its task error), else the start of Ray's own report."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, CtxsimError):
        return " ".join(str(cause).split())
    return " ".join(str(error).split())[:300]


def _trial_name(trial_id: str) -> str:
    """``trial_00003`` from Ray's ``<random>_00003``: the sampling order, stable across runs."""
    return f"trial_{trial_id.rsplit('_', 1)[-1]}"


def _failed_trial_name(path: str) -> str:
    """:func:`_trial_name` of a trial that reported nothing, read from its folder's name
    (Ray names it ``<trainable>_<random>_<00003>_<index>_<parameters>``); "a trial" when
    the name does not read so."""
    found = re.search(r"_[0-9a-f]+_(\d{5})_\d+_", Path(path).name)
    return f"trial_{found.group(1)}" if found else "a trial"


def params_text(params: dict[str, Any]) -> str:
    """Hyperparameters as one line, ``name=value`` in the given order (floats to 4
    significant digits)."""
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())


@dataclass
class TuneResult:
    out: Path
    table: pd.DataFrame  # one row per trial, best first
    best: dict[str, Any]  # the best trial's hyperparameters
    failed: list[str] = field(default_factory=list)  # one line per failed trial: its hyperparameters and error


@contextmanager
def _ray_tune_output(quiet: bool) -> Iterator[None]:
    """When ``quiet``, Ray Tune prints nothing while it runs: neither its progress
    output (its newer output engine prints a configuration box and each trial's end even
    at verbosity 0, so the older one is chosen, by the ``RAY_AIR_NEW_OUTPUT`` variable
    Ray reads when the search starts) nor a failed trial's traceback (the search reports
    each failure in one line of its own, :attr:`TuneResult.failed`)."""
    if not quiet:
        yield
        return
    logger, variable = logging.getLogger("ray.tune"), "RAY_AIR_NEW_OUTPUT"
    level, before = logger.level, os.environ.get(variable)
    logger.setLevel(logging.CRITICAL)
    os.environ[variable] = "0"
    try:
        yield
    finally:
        logger.setLevel(level)
        if before is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = before


def run_tune(spec: TuneSpec, *, out: str | Path | None = None, workers: int | None = None, verbose: bool = False) -> TuneResult:
    """Run the search; write ``tune_results.csv`` / ``.md`` into ``out`` (default
    ``reports/tune/<name>/``). ``workers``: CPUs of a local Ray (default: the file's)."""
    import_ray("ctxsim tune")
    out = (Path(out) if out is not None else Path("reports") / "tune" / spec.config.name).resolve()
    with output_folder(out):  # removed again if this search created it and every trial fails
        return _search(spec, out, workers, verbose)


def _search(spec: TuneSpec, out: Path, workers: int | None, verbose: bool) -> TuneResult:
    """The body of :func:`run_tune`: the trials in ``out`` (which exists), then the result table."""
    from ray import tune
    from ray.tune.search import BasicVariantGenerator

    config = spec.config
    (out / "runs").mkdir(exist_ok=True)
    trainable = tune.with_parameters(
        _trial, experiment=spec.experiment.model_dump(), timesteps=config.timesteps, seed=config.seed, runs=str(out / "runs")
    )
    with ray_session(config.ray, workers):
        tuner = tune.Tuner(
            tune.with_resources(trainable, {"cpu": config.resources.cpu}),
            param_space={name: p.sampler() for name, p in config.param_space.items()},
            tune_config=tune.TuneConfig(
                metric=METRIC, mode="max", num_samples=config.num_samples,
                search_alg=BasicVariantGenerator(random_state=config.seed),
                max_concurrent_trials=config.max_concurrent_trials,
            ),
            run_config=tune.RunConfig(name=config.name, storage_path=str(out / "ray"), verbose=1 if verbose else 0),
        )
        with _ray_tune_output(quiet=not verbose):
            grid = tuner.fit()
    rows, errors, failed = [], [], []
    for result in grid:
        if result.error is not None:
            errors.append(_trial_error(result.error))
            failed.append(f"{_failed_trial_name(result.path)} ({params_text(dict(sorted(result.config.items())))}) "
                          f"failed: {errors[-1]}")
            continue
        m = result.metrics
        rows.append({
            "trial": _trial_name(m["trial_id"]), **{f"param.{k}": v for k, v in sorted(result.config.items())},
            METRIC: m[METRIC], "final_mean_reward": m["final_mean_reward"],
            "run_dir": str(Path(m["run_dir"]).relative_to(out)),
        })
    if not rows:
        raise CtxsimError(f"every trial failed; first error: {errors[0] if errors else 'unknown'}", source=spec.source)
    table = pd.DataFrame(rows).sort_values([METRIC, "trial"], ascending=[False, True], kind="stable").reset_index(drop=True)
    best = {k.removeprefix("param."): getattr(v, "item", lambda: v)() for k, v in table.iloc[0].items() if k.startswith("param.")}
    atomic_write_text(out / "tune_results.csv", table.to_csv(index=False, lineterminator="\n"))
    atomic_write_text(out / "tune_results.md", _markdown(spec, table, best, len(errors)))
    return TuneResult(out, table, best, failed)


def _markdown(spec: TuneSpec, table: pd.DataFrame, best: dict[str, Any], failed: int) -> str:
    c = spec.config
    split, names = spec.selection
    lines = [
        f"# Tune `{c.name}`\n",
        f"{spec.experiment.algo} from `{c.experiment}`, {len(table)} trials of {c.timesteps:,} timesteps "
        f"(seed {c.seed}){f', {failed} failed' if failed else ''}. Metric: the best evaluation mean reward "
        f"of each run's `evaluations.npz`, on the {split} scenarios ({', '.join(names)}).\n",
        *(f"Note: {note}.\n" for note in spec.notes),
        "Best hyperparameters: " + ", ".join(f"`{k}={v}`" for k, v in best.items()) + "\n",
        markdown_table(list(table.columns), [[f"{v:.4g}" if isinstance(v, float) else v for v in row]
                                             for row in table.itertuples(index=False)]),
    ]
    return "\n".join(lines)
