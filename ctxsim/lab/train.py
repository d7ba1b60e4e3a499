"""Training from an experiment YAML, cleanrl-style: read it top to bottom.

An experiment file (``experiments/<name>.yaml``) names the algorithm and its
hyperparameters, the env spec and its overrides, the train/eval scenario split,
the vectorization and the seed. A run writes, under
``<out>/{env}__{exp}__{seed}__{time}/``:

* ``config.yaml`` — the resolved experiment and the full env config;
* ``checkpoints/`` — periodic model checkpoints;
* ``best_model.zip`` — the best model of a (masked) evaluation callback
  (:mod:`ctxsim.lab.selection`) on the held-out split (on ``validation_scenarios``
  instead when the experiment names them), and ``evaluations.npz`` — its learning
  curve. Every evaluation scores the same ``eval_episodes`` contexts (the split's
  scenarios in turn, context seeds in order:
  :mod:`ctxsim.lab.environments.fixed_contexts`), so the curve and the choice of the
  best model do not ride on which contexts a random draw picked; it scores the policy
  as the run acts (with ``lookahead: true``, looking ahead on the network's ranking);
* ``final_model.zip``, ``tb/`` — TensorBoard logs;
* ``warm_start.json`` — with a ``warm_start`` block (:mod:`ctxsim.lab.warmstart`): the
  teacher, the states it fitted, its final losses, the greedy regret and the seconds it took (the teacher's included);
* ``vecnormalize.pkl`` — with ``normalize_observations: true``: the frozen observation
  statistics (SB3 VecNormalize) every consumer of the run applies.
* ``machine.json`` — the numeric path that trained it (torch's version and CPU
  capability, MKL's reproducibility branch, threads: :mod:`ctxsim.lab.numerics`): runs
  with the same path and seed have the same weights.

Every model file (checkpoints and the callback's best model included) and
``evaluations.npz`` (rewritten at each evaluation) are written atomically.
"""

from __future__ import annotations

import inspect
import io
import json
import math
import os
import pickle
import shutil
import time
import warnings
from dataclasses import replace
from itertools import chain, count
from pathlib import Path
from typing import Annotated, Any, Iterator, Literal

import gymnasium as gym
import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator
from rich.progress import Progress

from ..atomic import atomic_write_bytes, atomic_write_text
from .environments.fixed_contexts import FixedContexts
from .environments.conversation_stream import ConversationStreamEnv
from .environments.overflow import ContextOverflowEnv
from .environments.spec import env_class, load_env_spec
from ..errors import ConfigError, PolicyError, describe_value
from ..policies import get_policy
from ..policies.exported import Normalization, NormalizationSpec
from .policies.sb3 import SB3Policy
from ..paths import ROOT
from .pool import ensure_pool, pool_contexts, pool_dir
from .stream.rollout import is_rollout, rollout_base
from .stream.teacher import cached_rollout_values
from .numerics import kernel_path
from .runs import CONFIG_FILE, MACHINE_FILE, MODEL_FILE, VECNORMALIZE_FILE, algorithm_class, normalization_stats
from .selection import evaluation_callback
from ..validation import MAX_SEED, Bounded, KeyedValueError, load_yaml, validate
from .warmstart import ORACLE, ActionValues, WarmStart, action_values, fit

#: standardized observations are clipped to ± this many standard deviations
NORMALIZATION_CLIP = 10.0
#: least variance a feature is standardized with (std 0.1): a feature (nearly) constant
#: in training — a share that is always 0 there, an action never applied — is scaled
#: up at most 10x, so an unseen value does not turn into a ±10-std input
NORMALIZATION_MIN_VAR = 0.01

ALGORITHMS = ("PPO", "A2C", "DQN", "MaskablePPO")


class ExperimentConfig(BaseModel):
    """One training experiment (``experiments/<name>.yaml``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="experiment name, used in the run directory name")
    algo: Literal["PPO", "A2C", "DQN", "MaskablePPO"] = Field(description="SB3 / sb3-contrib algorithm")
    env: str = Field("envs/default.yaml", description="env spec file (relative to the repo or the experiment file)")
    env_config: Annotated[dict[str, Any], Bounded] = Field(default_factory=dict, description="overrides of the env spec's config")
    train_scenarios: Annotated[list[str], Field(min_length=1)] | None = Field(None, description="scenario names to train on (default: all but the held-out and validation ones)")
    eval_scenarios: list[str] = Field(default_factory=list, description="held-out scenario names: the split results are reported on")
    validation_scenarios: Annotated[list[str], Field(min_length=1)] | None = Field(
        None, description="scenario names the evaluation callback picks the best model on (default: the held-out "
        "ones); with them, neither training nor model selection sees the held-out split",
    )
    timesteps: int = Field(20_000, gt=0, description="total environment steps")
    n_envs: int = Field(2, ge=1, le=64, description="parallel environments")
    vec_env: Literal["dummy", "subproc"] = Field("dummy", description="DummyVecEnv or SubprocVecEnv")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="seeds the algorithm, the envs and torch")
    policy: str = Field("MlpPolicy", description="SB3 policy class name")
    hyperparams: Annotated[dict[str, Any], Bounded] = Field(default_factory=dict, description="keyword arguments of the algorithm")
    eval_freq: int = Field(2_000, gt=0, description="evaluate every this many total steps")
    eval_episodes: int = Field(
        40, gt=0,
        description="episodes per evaluation, on the same contexts each time: scenarios in turn, context seeds in order",
    )
    checkpoint_freq: int = Field(10_000, gt=0, description="checkpoint every this many total steps")
    warm_start: WarmStart | None = Field(None, description="fit the policy to a teacher's action values before RL (ctxsim.lab.warmstart)")
    normalize_observations: bool = Field(
        False, description="standardize observations with the mean and variance of the training contexts' states "
        "(the warm start's states when there is one), frozen (VecNormalize)",
    )
    lookahead: bool = Field(
        False, description="the trained policy acts looking ahead with its own ranking (ctxsim.policies.lookahead): "
        "the first action that is not a recovery mode and whose continuation ends under the target, else a recovery "
        "the policy chooses (ranked, or where its continuation ends) rather than a forced one; where the P1 and "
        "pinned units alone exceed the target, no search: the first ranked action that may shrink P1 units; a first "
        "pass keeps the break within the reward's free latency where a clean break can (each step priced before its "
        "LLM calls, a call that would pass it declined); the steps it tries and does not take count in the break's "
        "latency; the evaluation callback scores each candidate "
        "model acting so (ctxsim.lab.selection)",
    )
    source: str | None = Field(None, description="file the experiment came from (set by the loader)")

    @model_validator(mode="after")
    def _warm_start_needs_an_actor_critic(self) -> ExperimentConfig:
        if self.warm_start is not None and self.algo == "DQN":
            raise KeyedValueError("warm_start", self.warm_start.model_dump(), "needs an actor-critic algorithm (PPO, A2C, MaskablePPO), not DQN")
        return self


#: the loader's own key (not an ExperimentConfig field): experiments share hyperparameters through it
EXTENDS_KEY = (
    "extends", "another experiment file (relative to this one) whose keys this file starts from: its own keys "
    "replace them, `hyperparams` are merged key by key",
)


def load_experiment(path: str | Path) -> ExperimentConfig:
    """An experiment file, validated; ``extends`` (:data:`EXTENDS_KEY`) resolved first,
    so experiments share one block of hyperparameters."""
    path = Path(path)
    return validate(ExperimentConfig, {**_experiment_data(path, ()), "source": str(path)}, path, ConfigError)


def _experiment_data(path: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
    """The keys of an experiment file with its ``extends`` chain resolved."""
    data = load_yaml(path, ConfigError)
    if not isinstance(data, dict):
        raise ConfigError("an experiment file must be a mapping", source=path)
    base_ref = data.pop("extends", None)
    if base_ref is None:
        return data
    if not isinstance(base_ref, str) or not base_ref:
        raise ConfigError(f"must name an experiment file, got {describe_value(base_ref)}", source=path, key="extends")
    base_path = (path.parent / base_ref).resolve()
    if base_path in seen or base_path == path.resolve():
        raise ConfigError(f"extends itself through {base_ref}", source=path, key="extends")
    if not base_path.is_file():
        raise ConfigError(f"file not found: {base_ref}", source=path, key="extends")
    base = _experiment_data(base_path, seen + (path.resolve(),))
    hyperparams = data.get("hyperparams", {})
    if isinstance(hyperparams, dict) and isinstance(base.get("hyperparams"), dict):
        data["hyperparams"] = {**base["hyperparams"], **hyperparams}
    return {**base, **data}


def resolve_path(ref: str, experiment: ExperimentConfig) -> Path:
    """A path named in an experiment: as given, next to the experiment, or in the repo."""
    candidates = [Path(ref)]
    if experiment.source:
        candidates.append(Path(experiment.source).parent / ref)
    candidates.append(ROOT / ref)
    for c in candidates:
        if c.exists():
            return c
    raise ConfigError(f"file not found: {ref}", source=experiment.source, key="env")


def env_configs(experiment: ExperimentConfig) -> tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(env id, train, eval (held-out) and selection env configs) with the scenario
    split applied: training gets every scenario not held out nor used for validation
    (unless ``train_scenarios`` names them); the evaluation callback selects on the
    validation scenarios, else on the held-out ones."""
    spec = load_env_spec(resolve_path(experiment.env, experiment))
    # the spec's own config was checked when it loaded: what fails here is the experiment's env_config
    checked = env_class(spec.id).checked_config({**spec.config, **experiment.env_config}, source=experiment.source,
                                                key_prefix="env_config")
    base = checked.model_dump(mode="json")
    names = [s.name for s in checked.suite]
    validation = experiment.validation_scenarios or []
    for key, listed in (("train_scenarios", experiment.train_scenarios or []), ("eval_scenarios", experiment.eval_scenarios),
                        ("validation_scenarios", validation)):
        unknown = [n for n in listed if n not in names]
        if unknown:
            raise ConfigError(f"unknown scenario names {unknown}; known: {names}", source=experiment.source, key=key)
    overlap = sorted(set(validation) & (set(experiment.eval_scenarios) | set(experiment.train_scenarios or [])))
    if overlap:
        raise ConfigError(f"{overlap} are validation scenarios and also held out or trained on", source=experiment.source,
                          key="validation_scenarios")
    train = experiment.train_scenarios or [n for n in names if n not in experiment.eval_scenarios and n not in validation]
    evaluation = experiment.eval_scenarios or train
    selection = validation or evaluation
    return (spec.id, {**base, "scenario_names": train}, {**base, "scenario_names": evaluation},
            {**base, "scenario_names": selection})


def run_base_name(env_id: str, experiment: ExperimentConfig, seed: int) -> str:
    """A run folder's name before any ``__2``, ``__3``, ...: ``{env}__{experiment}__{seed}``."""
    return f"{env_id.split('/')[-1]}__{experiment.name}__{seed}"


def run_name(env_id: str, experiment: ExperimentConfig, seed: int, out: str | Path) -> str:
    """The run folder's name: ``{env}__{experiment}__{seed}``, or with ``__2``, ``__3``, ...
    after it when ``out`` already holds that name (as SB3 numbers its logs). The name
    never holds the time, so an evaluation's ``run`` column reproduces byte for byte."""
    base = run_base_name(env_id, experiment, seed)
    names = chain([base], (f"{base}__{n}" for n in count(2)))
    return next(name for name in names if not (Path(out) / name).exists())


def _make_env(env_id: str, config: dict[str, Any], seed: int, rank: int, masked: bool, fixed: bool = False):
    """A thunk making one monitored env (``fixed``: on the fixed evaluation set,
    :class:`~ctxsim.lab.environments.fixed_contexts.FixedContexts`)."""
    pools = str(pool_dir())  # the trainer's pool folder, also in worker processes

    def thunk():  # runs in a worker process too: it registers the env ids there
        from stable_baselines3.common.monitor import Monitor

        import ctxsim.lab.environments  # noqa: F401  (registers the env ids)

        os.environ["CTXSIM_POOL_DIR"] = pools

        env = gym.make(env_id, config=config)
        if fixed:
            env = FixedContexts(env)
        env = Monitor(env)
        env.reset(seed=seed + rank)
        env.action_space.seed(seed + rank)
        return env

    return thunk


def prepare_pools(
    env_id: str, *configs: dict[str, Any], source: str | Path | None = None, workers: int | None = None,
    rebuild: bool = False, progress: bool = False,
) -> list[tuple[Any, Path, bool, int]]:
    """Load or build here the context pools of the configs that ask for one (``pool:
    true``), before worker processes start: they then read the files instead of each
    building them. Returns (pool, its file, built now, scenarios) per pooled config.
    ``progress``: a rich progress bar over the contexts while a pool is built."""
    pools = []
    for config in [c for i, c in enumerate(configs) if c not in configs[:i]]:  # each pool once
        if config.get("pool"):
            checked = env_class(env_id).checked_config(config, source, "config")
            resolved = checked.model_dump(mode="json")
            with Progress(transient=True, disable=not progress) as bar:
                task = bar.add_task(f"context pool ({len(checked.suite)} scenarios; built once, then read from disk)",
                                    total=pool_contexts(resolved, checked.suite))
                pool, path, built = ensure_pool(resolved, checked.suite, workers=workers, rebuild=rebuild,
                                                advance=lambda: bar.advance(task))
            pools.append((pool, path, built, len(checked.suite)))
    return pools


def train(
    experiment: ExperimentConfig,
    *,
    timesteps: int | None = None,
    seed: int | None = None,
    out: str | Path = "runs",
    progress: bool = True,
) -> Path:
    """Train one experiment; returns the run directory."""
    import torch
    from sb3_contrib.common.maskable.callbacks import MaskableEvalCallback
    from stable_baselines3.common.callbacks import CallbackList, CheckpointCallback, EvalCallback
    from stable_baselines3.common.utils import set_random_seed
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    seed = experiment.seed if seed is None else seed
    timesteps = experiment.timesteps if timesteps is None else timesteps
    env_id, train_cfg, eval_cfg, selection_cfg = env_configs(experiment)
    needs_states = experiment.warm_start is not None or experiment.normalize_observations
    check_teacher(experiment, env_id)
    if experiment.lookahead and not issubclass(env_class(env_id), ContextOverflowEnv):
        raise ConfigError(f"acts on breaks of one context; {env_id} is not an overflow env", source=experiment.source, key="lookahead")
    algo_cls = algorithm_class(experiment.algo)
    check_hyperparams(algo_cls, experiment)
    run_dir = Path(out) / run_name(env_id, experiment, seed, out)
    resolved = yaml.safe_dump(  # before the algorithm sees (and SB3 may extend) the hyperparams
        {
            "experiment": experiment.model_dump(mode="json"),
            "overrides": {"timesteps": timesteps, "seed": seed},
            "env_id": env_id,
            "env_config": train_cfg,
            "eval_env_config": eval_cfg,
            "selection_env_config": selection_cfg,
        },
        sort_keys=True,
    )

    set_random_seed(seed)
    torch.manual_seed(seed)
    np.random.seed(seed)
    torch.set_num_threads(1)
    masked = experiment.algo == "MaskablePPO"
    prepare_pools(env_id, train_cfg, eval_cfg, selection_cfg, progress=progress)
    vec_cls = SubprocVecEnv if experiment.vec_env == "subproc" and experiment.n_envs > 1 else DummyVecEnv
    train_env = vec_cls([_make_env(env_id, train_cfg, seed, i, masked) for i in range(experiment.n_envs)])
    eval_env = DummyVecEnv([_make_env(env_id, selection_cfg, seed + 10_000, 0, masked, fixed=True)])
    states, states_seconds = None, 0.0
    if needs_states:
        start = time.perf_counter()
        states = training_states(env_id, train_cfg, experiment.warm_start, progress)
        states_seconds = time.perf_counter() - start
    if experiment.normalize_observations:
        train_env, eval_env = (frozen_normalization(env, states.observations) for env in (train_env, eval_env))

    try:
        model = algo_cls(
            experiment.policy, train_env, seed=seed, verbose=0, device="cpu",
            tensorboard_log=str(run_dir / "tb"), **experiment.hyperparams,
        )
    except (TypeError, ValueError, AssertionError, RuntimeError, MemoryError) as exc:  # a bad hyperparameter or policy,
        # or one the machine cannot hold (a replay buffer or network too large to allocate)
        train_env.close()
        eval_env.close()
        message = " ".join(str(exc).split()) or type(exc).__name__
        raise ConfigError(f"{experiment.algo} rejects the hyperparams/policy: {message}", source=experiment.source, key="hyperparams") from None
    atomic_saves(model)  # best model and checkpoints included
    run_dir.mkdir(parents=True, exist_ok=False)  # only now: bad input leaves no run directory behind
    atomic_write_text(run_dir / CONFIG_FILE, resolved)
    atomic_write_text(run_dir / MACHINE_FILE, json.dumps(kernel_path(), indent=2, sort_keys=True) + "\n")
    try:
        if experiment.normalize_observations:  # what VecNormalize.save writes (it pickles itself without the envs), atomically
            atomic_write_bytes(run_dir / VECNORMALIZE_FILE, pickle.dumps(train_env))
        if experiment.warm_start is not None:
            if experiment.normalize_observations:
                states = replace(states, observations=train_env.normalize_obs(states.observations))
            start = time.perf_counter()
            stats = fit(model.policy, states, experiment.warm_start, seed)
            stats["seconds"] = round(time.perf_counter() - start + states_seconds, 1)
            stats["teacher"] = experiment.warm_start.teacher
            atomic_write_text(run_dir / "warm_start.json", json.dumps(stats, indent=2, sort_keys=True) + "\n")

        per_env = max(1, experiment.n_envs)
        evaluations = evaluation_callback(MaskableEvalCallback if masked else EvalCallback)(
            eval_env, best_model_save_path=str(run_dir), log_path=str(run_dir),
            eval_freq=max(1, experiment.eval_freq // per_env), n_eval_episodes=experiment.eval_episodes,
            deterministic=True, verbose=0,
        )
        evaluations.at_start = experiment.warm_start is not None  # the warm-started policy is a candidate
        if experiment.lookahead:  # score each evaluation as the run will act
            evaluations.acting = acting_policy(model, experiment.algo, eval_env).act
        callbacks = CallbackList(
            [evaluations, CheckpointCallback(max(1, experiment.checkpoint_freq // per_env), str(run_dir / "checkpoints"), name_prefix="model")]
        )
        with warnings.catch_warnings():
            # SB3 warns when the eval env's VecEnv class differs from training's (DummyVecEnv
            # for evaluation beside SubprocVecEnv for training): harmless, the spaces agree.
            warnings.filterwarnings("ignore", message="Training and eval env are not of the same type")
            model.learn(total_timesteps=timesteps, callback=callbacks, progress_bar=progress, tb_log_name="run")
            evaluations.evaluate_if_never()
        save_model(model, run_dir / "final_model.zip")
        if not (run_dir / MODEL_FILE).exists():
            save_model(model, run_dir / MODEL_FILE)
    except (ValueError, RuntimeError, FloatingPointError) as exc:
        if not diverged(model):
            raise
        train_env.close()
        eval_env.close()
        shutil.rmtree(run_dir, ignore_errors=True)
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__  # not the tensor dump
        raise ConfigError(
            f"training diverged after {model.num_timesteps:,} steps: the network's weights are no longer finite "
            f"({message}); the run folder was removed",
            source=experiment.source, key="hyperparams",
        ) from None
    train_env.close()
    eval_env.close()
    return run_dir


#: hyperparameters SB3 takes as counts but does not check (0 or less fails mid-training)
POSITIVE_HYPERPARAMS = ("n_steps", "batch_size", "n_epochs", "buffer_size")
#: numeric hyperparameters SB3 does not range-check (or only once it builds its
#: optimizer, as torch does the learning rate): (lowest, highest) allowed, inclusive
HYPERPARAM_RANGES: dict[str, tuple[float, float]] = {
    "learning_rate": (0.0, math.inf),
    "gamma": (0.0, 1.0), "gae_lambda": (0.0, 1.0), "tau": (0.0, 1.0), "exploration_fraction": (0.0, 1.0),
    "exploration_initial_eps": (0.0, 1.0), "exploration_final_eps": (0.0, 1.0),
    "ent_coef": (0.0, math.inf), "vf_coef": (0.0, math.inf), "max_grad_norm": (0.0, math.inf), "clip_range": (0.0, math.inf),
}
#: keyword arguments of the algorithm that training sets itself, from the experiment or the run
RESERVED_HYPERPARAMS = ("policy", "env", "seed", "verbose", "device", "tensorboard_log")
#: widest hidden layer a policy network may ask for (a 2-layer net of this width holds ~270M weights)
MAX_LAYER_WIDTH = 16_384


def check_hyperparams(algo_cls, experiment: ExperimentConfig) -> None:
    """Check ``policy`` and every ``hyperparams`` value against the algorithm's own
    signature (its type annotations, strictly: ``"0.1"`` is not a float) before any
    run directory exists: SB3 accepts some wrong values at construction and fails
    only once training runs. A key the signature lacks, or one training sets itself
    (:data:`RESERVED_HYPERPARAMS`), is refused; keys the signature does not annotate
    are left to it."""
    if experiment.policy not in algo_cls.policy_aliases:
        raise ConfigError(f"{experiment.algo} has no policy {experiment.policy!r}; known: {sorted(algo_cls.policy_aliases)}",
                          source=experiment.source, key="policy")
    parameters = inspect.signature(algo_cls.__init__).parameters
    for key in experiment.hyperparams:
        if key in RESERVED_HYPERPARAMS:
            raise ConfigError("is set by training itself (from the experiment or the run), not a hyperparameter",
                              source=experiment.source, key=f"hyperparams.{key}")
        if key not in parameters or key == "self":
            raise ConfigError(f"{experiment.algo} has no hyperparameter {key!r}", source=experiment.source,
                              key=f"hyperparams.{key}")
    hints = {name: p.annotation for name, p in parameters.items()
             if p.annotation is not inspect.Parameter.empty and not isinstance(p.annotation, str)}
    strict = ConfigDict(strict=True, arbitrary_types_allowed=True)
    for path, value in _numbers(experiment.hyperparams, "hyperparams"):
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"must be a finite number (got {value})", source=experiment.source, key=path)
    layers = experiment.hyperparams.get("policy_kwargs", {})
    layers = layers.get("net_arch") if isinstance(layers, dict) else None
    for path, value in _numbers(layers if layers is not None else [], "hyperparams.policy_kwargs.net_arch"):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LAYER_WIDTH:
            raise ConfigError(f"a layer width must be an integer in 1..{MAX_LAYER_WIDTH:,} (got {describe_value(value)})",
                              source=experiment.source, key=path)
    for key, value in experiment.hyperparams.items():
        problem = None
        if key in POSITIVE_HYPERPARAMS and isinstance(value, int) and value < 1:
            problem = "must be >= 1"
        elif key in HYPERPARAM_RANGES and isinstance(value, (int, float)) and not isinstance(value, bool) and not (
            HYPERPARAM_RANGES[key][0] <= value <= HYPERPARAM_RANGES[key][1]
        ):
            low, high = HYPERPARAM_RANGES[key]
            problem = f"must be in [{low:g}, {high:g}]" if math.isfinite(high) else f"must be >= {low:g}"
        elif key in hints:
            try:
                TypeAdapter(hints[key], config=strict).validate_python(value)
            except ValidationError as exc:
                problem = f"{experiment.algo} expects {_type_name(hints[key])} ({exc.errors()[0]['msg']})"
            except Exception:  # a type pydantic cannot check: the algorithm will
                continue
        if problem:
            raise ConfigError(f"{problem} (got {describe_value(value)})", source=experiment.source, key=f"hyperparams.{key}")


def diverged(model) -> bool:
    """Whether a model's network weights hold NaN or infinity (training diverged)."""
    import torch

    return any(not torch.isfinite(p).all() for p in model.policy.parameters())


def _numbers(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every leaf under ``value``: mappings by key, lists by index."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _numbers(item, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _numbers(item, f"{path}[{i}]")
    else:
        yield path, value


def _type_name(hint) -> str:
    return str(hint).replace("typing.", "").replace("<class '", "").replace("'>", "")


def check_teacher(experiment: ExperimentConfig, env_id: str) -> None:
    """ConfigError unless the experiment's env suits its warm-start teacher (the oracle:
    a ContextOverflow env; ``rollout:<base>``: ConversationStream-v0) and its
    ``normalize_observations`` (a ContextOverflow env)."""
    cls = env_class(env_id)
    overflow, stream = issubclass(cls, ContextOverflowEnv), issubclass(cls, ConversationStreamEnv)
    if experiment.normalize_observations and not overflow:
        raise ConfigError(f"normalize_observations needs a ContextOverflow env, not {env_id}", source=experiment.source,
                          key="normalize_observations")
    warm = experiment.warm_start
    if warm is None:
        return
    if warm.teacher == ORACLE and not overflow:
        raise ConfigError(f"warm_start.teacher 'oracle' needs a ContextOverflow env, not {env_id} (on ConversationStream-v0 "
                          "the teacher is a rollout, e.g. 'rollout:seed-chain')", source=experiment.source, key="warm_start.teacher")
    if is_rollout(warm.teacher):
        if not stream:
            raise ConfigError(f"warm_start.teacher {warm.teacher!r} needs ConversationStream-v0, not {env_id} (on "
                              "ContextOverflow-v0 the teacher is 'oracle')", source=experiment.source, key="warm_start.teacher")
        try:
            get_policy(rollout_base(warm.teacher))
        except PolicyError as exc:
            raise ConfigError(f"warm_start.teacher {warm.teacher!r}: {exc}", source=experiment.source,
                              key="warm_start.teacher") from None


def training_states(env_id: str, config: dict[str, Any], warm_start: WarmStart | None, progress: bool = False) -> ActionValues:
    """The states (and the teacher's action values) of the training contexts of
    ``config`` — at most ``warm_start.contexts_per_scenario`` per scenario when set:
    the oracle's (:func:`ctxsim.lab.warmstart.action_values`; from the pool when the
    config has one) or a rollout's on ConversationStream-v0
    (:func:`ctxsim.lab.stream.teacher.cached_rollout_values`). Without a warm start:
    every state of every chain (for ``normalize_observations``)."""
    margin = warm_start.margin if warm_start is not None else math.inf
    if warm_start is not None and warm_start.contexts_per_scenario is not None:
        config = {**config, "contexts_per_scenario": warm_start.contexts_per_scenario}
    if warm_start is not None and is_rollout(warm_start.teacher):
        note = (lambda text: print(f"teacher: {text}", flush=True)) if progress else None
        return cached_rollout_values(config, warm_start.teacher, margin, note)[0]
    env = env_class(env_id)(config)
    try:
        return action_values(env, margin)
    finally:
        env.close()


def frozen_normalization(venv, observations):
    """``venv`` wrapped in a VecNormalize that standardizes observations with the mean
    and variance (at least NORMALIZATION_MIN_VAR) of ``observations`` and never
    updates them (rewards untouched)."""
    from stable_baselines3.common.vec_env import VecNormalize

    wrapped = VecNormalize(venv, training=False, norm_obs=True, norm_reward=False, clip_obs=NORMALIZATION_CLIP)
    wrapped.obs_rms.mean = observations.mean(axis=0).astype(np.float64)
    wrapped.obs_rms.var = np.maximum(observations.var(axis=0).astype(np.float64), NORMALIZATION_MIN_VAR)
    wrapped.obs_rms.count = float(len(observations))
    return wrapped


def _saved_bytes(model, exclude=None, include=None) -> bytes:
    """What the algorithm's own ``save`` writes, built in memory (never the
    ``save`` that :func:`atomic_saves` puts on the instance)."""
    buffer = io.BytesIO()
    type(model).save(model, buffer, exclude=["save", *(exclude or ())], include=include)
    return buffer.getvalue()


def save_model(model, path: str | Path, exclude=None, include=None) -> Path:
    """``model.save(path)`` written atomically: the zip is built in memory, then
    renamed into place, so a crash never leaves a torn model. Like SB3, a path
    without a suffix gets ``.zip``."""
    path = Path(path)
    if path.suffix == "":
        path = path.with_name(path.name + ".zip")
    return atomic_write_bytes(path, _saved_bytes(model, exclude, include))


def acting_policy(model, algo: str, eval_env) -> SB3Policy:
    """The live ``model`` as a trained run acting with look-ahead
    (:class:`~ctxsim.lab.policies.sb3.SB3Policy`), with the observation statistics of
    ``eval_env`` when it is a VecNormalize (as the saved run's ``vecnormalize.pkl`` gives them)."""
    stats = normalization_stats(eval_env) if hasattr(eval_env, "norm_obs") else None
    normalization = None if stats is None else Normalization.of(NormalizationSpec(**stats))
    return SB3Policy(model, algo, None, "the model in training", normalization, lookahead=True)


def atomic_saves(model):
    """``model`` with every ``save`` to a path atomic (:func:`save_model`) — the saves
    of SB3's checkpoint and evaluation callbacks included; saves to a file object
    are SB3's own."""

    def save(path, exclude=None, include=None):
        if isinstance(path, (str, Path)):
            return save_model(model, path, exclude, include)
        path.write(_saved_bytes(model, exclude, include))

    model.save = save
    return model
