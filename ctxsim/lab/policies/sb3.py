"""A trained Stable-Baselines3 model as a policy (imports SB3 and torch lazily).

``get_policy(path)`` loads, for a training run directory (``best_model.zip`` and
``config.yaml`` written by :func:`ctxsim.lab.train.train`) or a model zip inside one,
the algorithm the run's resolved config names (MaskablePPO from sb3-contrib; PPO,
A2C or DQN from stable-baselines3). The policy acts greedily with the episode's
action mask: the action with the highest logit (PPO, A2C, MaskablePPO) or
Q-value (DQN) among the valid ones; ties go to the lower index. A run whose
experiment says ``lookahead: true`` acts by
:func:`ctxsim.policies.lookahead.look_ahead` on that ranking instead.

The observation is :func:`ctxsim.observe.observe` of the episode's state with an
:class:`~ctxsim.observe.ObservationConfig` taken from the episode's settings
(actions, max_steps, target, embedder), standardized with the run's frozen
VecNormalize statistics when it has them (``vecnormalize.pkl``); the settings must
have the actions the model was trained with, or acting raises PolicyError.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from ...episode import EpisodeSettings, OverflowEpisode
from ...errors import PolicyError
from ...observe import ObservationConfig, current_break, feature_names, observe
from ..runs import CONFIG_FILE, MODEL_FILE, algorithm_class, read_normalization, run_config
from ...policies.exported import Normalization, NormalizationSpec
from ...policies.lookahead import look_ahead, ranked_actions
from ...policies.registry import Policy, register_loader


def recognizes(path: Path) -> bool:
    """A run directory (its best model or its config), or a model zip."""
    return (path.is_dir() and any((path / name).is_file() for name in (MODEL_FILE, CONFIG_FILE))) or (
        path.is_file() and path.suffix == ".zip")


class SB3Policy(Policy):
    """A loaded SB3 model acting greedily under the action mask (module docstring)."""

    def __init__(
        self, model, algo: str, trained_actions: tuple[str, ...] | None, name: str, normalization=None, lookahead: bool = False
    ) -> None:
        self.model, self.algo, self.trained_actions, self.name = model, algo, trained_actions, name
        self.normalization = normalization  # a policies.exported.Normalization, or None
        self.lookahead = lookahead  # act with ctxsim.policies.lookahead.look_ahead

    def scores(self, obs: np.ndarray) -> np.ndarray:
        """The network's logits (PPO, A2C, MaskablePPO) or Q-values (DQN) for one raw
        observation, standardized first when the run has statistics (as
        :meth:`ctxsim.policies.exported.ExportedPolicy.scores`)."""
        import torch

        if self.normalization is not None:
            obs = self.normalization(obs)
        policy = self.model.policy
        tensor, _ = policy.obs_to_tensor(obs)
        with torch.no_grad():
            if self.algo == "DQN":
                return policy.q_net(tensor)[0].cpu().numpy()
            return policy.get_distribution(tensor).distribution.logits[0].cpu().numpy()

    def check(self, settings: EpisodeSettings) -> None:
        if self.trained_actions is not None and tuple(self.trained_actions) != settings.actions:
            raise PolicyError(
                f"policy '{self.name}' was trained with the actions {list(self.trained_actions)}, "
                f"the episode has {list(settings.actions)}",
                key="actions",
            )
        expected = self.model.observation_space.shape
        shape = (len(feature_names(ObservationConfig.of(settings))),)
        if shape != expected:
            raise PolicyError(f"policy '{self.name}' expects observations of shape {expected}, got {shape}")

    def ranked(self, episode: OverflowEpisode) -> list[str]:
        """The episode's valid actions, highest score first (ties: lower index first)."""
        settings = episode.settings
        obs = observe(current_break(episode.state, episode.steps_taken), ObservationConfig.of(settings))
        return ranked_actions(settings.actions, episode.action_mask(), self.scores(obs))

    def act(self, episode: OverflowEpisode) -> str:
        self.check(episode.settings)
        if self.lookahead:
            return look_ahead(episode, self.ranked)
        return self.ranked(episode)[0]


def _load_failure(exc: Exception) -> str:
    """One line saying why SB3 could not load a model zip (torch's messages span lines)."""
    if isinstance(exc, pickle.UnpicklingError):
        return "a torch member (e.g. policy.pth) of the zip is corrupt"
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    reason = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return reason if len(reason) <= 200 else reason[:197] + "..."


def load_sb3_policy(path: str | Path) -> SB3Policy:
    """The SB3 policy of a run directory or of a model zip inside one."""
    path = Path(path)
    run_dir, model_file = (path, path / MODEL_FILE) if path.is_dir() else (path.parent, path)
    config = run_config(run_dir)
    if not model_file.is_file():  # a run folder whose training never saved a best model, or lost it
        raise PolicyError(f"no {MODEL_FILE} in this training run folder", source=run_dir)
    algo = config["experiment"]["algo"]
    cls = algorithm_class(algo, run_dir / CONFIG_FILE)
    try:
        model = cls.load(str(model_file), device="cpu")
    except Exception as exc:  # noqa: BLE001 - any damage to the user's zip (bad JSON, corrupt .pth, ...) is bad input
        raise PolicyError(f"cannot load the {algo} model: {_load_failure(exc)}", source=model_file) from None
    stats = read_normalization(run_dir)
    normalization = None if stats is None else Normalization.of(NormalizationSpec(**stats))
    actions = (config.get("env_config") or {}).get("actions")
    lookahead = bool(config["experiment"].get("lookahead", False))
    return SB3Policy(model, algo, tuple(actions) if actions else None, str(path), normalization, lookahead)


register_loader(recognizes, load_sb3_policy)
