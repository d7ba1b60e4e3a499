"""The training run folder: its file names and the readers of what a run saved.

A run folder (written by :func:`ctxsim.lab.train.train`) holds, among others:

* ``config.yaml`` (:data:`CONFIG_FILE`) — the resolved experiment (``experiment.algo``
  names the algorithm) and the full env config;
* ``best_model.zip`` (:data:`MODEL_FILE`) — the model the SB3 policy adapter and the
  exporter load, with the class :func:`algorithm_class` names;
* ``vecnormalize.pkl`` (:data:`VECNORMALIZE_FILE`) — with ``normalize_observations:
  true``: the frozen observation statistics (SB3 VecNormalize) every consumer applies;
* ``evaluations.npz`` (:data:`EVALUATIONS_FILE`) — the learning curve of the
  evaluation callback (:func:`read_evaluations`) on the split :func:`evaluation_split`
  names, which reports and tuning read.

Training writes these files; the SB3 policy adapter, export, reports and tuning read
them through this module only. SB3 and torch are imported on first use.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, PolicyError
from ..validation import load_yaml

MODEL_FILE = "best_model.zip"
CONFIG_FILE = "config.yaml"
VECNORMALIZE_FILE = "vecnormalize.pkl"
EVALUATIONS_FILE = "evaluations.npz"
#: the numeric path that trained a run (:func:`ctxsim.lab.numerics.kernel_path`)
MACHINE_FILE = "machine.json"


def run_config(run_dir: Path) -> dict[str, Any]:
    """The resolved config (``config.yaml``) of a training run directory, checked to
    name its algorithm; a clear :class:`PolicyError` otherwise."""
    file = run_dir / CONFIG_FILE
    if not file.is_file():
        raise PolicyError("not found: the model is not in a ctxsim training run folder", source=file)
    data = load_yaml(file, PolicyError)
    if not isinstance(data, dict) or not isinstance(data.get("experiment"), dict) or "algo" not in data["experiment"]:
        raise PolicyError("expected the resolved run config with experiment.algo", source=file, key="experiment.algo")
    return data


def algorithm_class(name: str, source: Path | None = None):
    """The SB3 / sb3-contrib class of algorithm ``name`` (MaskablePPO, PPO, A2C or
    DQN; PolicyError naming ``source`` otherwise), imported on first use."""
    if name == "MaskablePPO":
        from sb3_contrib import MaskablePPO

        return MaskablePPO
    import stable_baselines3

    if name not in ("PPO", "A2C", "DQN"):
        expected = "expected MaskablePPO, PPO, A2C or DQN"
        raise PolicyError(f"unknown algorithm {name!r}; {expected}", source=source, key="experiment.algo")
    return getattr(stable_baselines3, name)


def read_normalization(run_dir: Path) -> dict[str, Any] | None:
    """The VecNormalize observation statistics the run saved, if any."""
    file = run_dir / VECNORMALIZE_FILE
    if not file.is_file():
        return None
    try:
        with open(file, "rb") as fh:
            vec = pickle.load(fh)  # SB3's own format (VecNormalize.save); the run is the user's
        return normalization_stats(vec)
    except Exception as exc:  # noqa: BLE001 - a damaged pickle raises any kind of error (ModuleNotFoundError, MemoryError, ...)
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise PolicyError(f"cannot read the VecNormalize statistics ({reason})", source=file) from None


def normalization_stats(vec) -> dict[str, Any] | None:
    """The observation statistics of a VecNormalize (mean, var, epsilon, clip: the
    fields of :class:`~ctxsim.policies.exported.NormalizationSpec`), None when it does
    not normalize observations."""
    if not vec.norm_obs:
        return None
    rms = vec.obs_rms
    return {"mean": [float(x) for x in np.ravel(rms.mean)], "var": [float(x) for x in np.ravel(rms.var)],
            "epsilon": float(vec.epsilon), "clip": float(vec.clip_obs)}


def evaluation_split(run: Path) -> str | None:
    """Which split the run's evaluation callback scored (``evaluations.npz``, the best
    model's choice), read from the scenarios its ``config.yaml`` recorded
    (``selection_env_config``, ctxsim.lab.train): ``"training"`` when they are the
    training scenarios (an experiment with no held-out nor validation split),
    ``"held-out"`` when they are the held-out ones, else ``"validation"``. A run
    written before ``selection_env_config`` was recorded: ``"validation"`` when its
    experiment names ``validation_scenarios``, else ``"held-out"``. None when the run
    has no readable ``config.yaml``."""
    try:
        config = run_config(Path(run))
    except PolicyError:
        return None

    def names(key: str):
        section = config.get(key)
        return section.get("scenario_names") if isinstance(section, dict) else None

    selection = names("selection_env_config")
    if selection is None:
        return "validation" if config["experiment"].get("validation_scenarios") else "held-out"
    if selection == names("env_config"):
        return "training"
    return "held-out" if selection == names("eval_env_config") else "validation"


def read_evaluations(run: Path) -> tuple[np.ndarray, np.ndarray]:
    """A run's ``evaluations.npz`` (SB3's layout): ``timesteps`` (n) and ``results``
    as an n × episodes array of rewards; ConfigError naming the file and the array
    when it is not that."""
    path = Path(run) / EVALUATIONS_FILE
    arrays: dict[str, np.ndarray] = {}
    name = None  # the array being read
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):  # a lone .npy array
            raise ValueError("not an archive")
        with data:
            for name in ("timesteps", "results"):
                if name not in data.files:
                    raise ConfigError(f"missing array (has {sorted(data.files)})", source=path, key=name)
                arrays[name] = np.asarray(data[name], dtype=float)
    except OSError as exc:
        raise ConfigError(f"cannot read file ({exc.strerror or exc})", source=path) from None
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - a damaged archive: zipfile and zlib raise a dozen kinds
        if name is None:
            raise ConfigError("not a NumPy .npz archive", source=path) from None
        raise ConfigError(f"expected an array of numbers ({' '.join(str(exc).split())[:100]})", source=path,
                          key=name) from None
    steps, results = arrays["timesteps"], arrays["results"]
    if steps.ndim != 1 or not steps.size or not np.isfinite(steps).all():
        raise ConfigError(f"expected a non-empty list of finite numbers (got shape {steps.shape})", source=path,
                          key="timesteps")
    if not results.size or results.shape[:1] != steps.shape or not np.isfinite(results).all():
        raise ConfigError(f"expected finite rewards, one row per timestep (got shape {results.shape} for "
                          f"{len(steps)} timesteps)", source=path, key="results")
    return steps, results.reshape(len(steps), -1)
