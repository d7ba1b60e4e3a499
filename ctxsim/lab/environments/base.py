"""What every ctxsim environment shares: a validated config (HighwayEnv's pattern),
the observation and action spaces that follow from it, and text rendering."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import gymnasium as gym
import numpy as np

from ...episode_config import EpisodeConfig
from ...errors import ConfigError, describe_value
from ...observe import OBSERVATION_VERSION, ObservationConfig, feature_names, observation_bounds
from ...validation import validate

if TYPE_CHECKING:
    from ..scenarios import Scenario


class RenderModeError(ConfigError, TypeError):
    """An unsupported ``render_mode``. Also a TypeError, as an unexpected keyword is,
    so that makers which try a render mode and fall back without one on TypeError
    (SB3's ``make_vec_env`` tries ``"rgb_array"``) work."""


def checked_render_mode(env: gym.Env, render_mode: str | None) -> str | None:
    """``render_mode`` if the env supports it (or None); a RenderModeError otherwise."""
    if render_mode is not None and render_mode not in env.metadata["render_modes"]:
        raise RenderModeError(f"render_mode must be one of {env.metadata['render_modes']}, got {describe_value(render_mode)}",
                              key="render_mode")
    return render_mode


def discrete_action(action: Any, n: int) -> int:
    """The index an action of ``Discrete(n)`` names: an integer (a numpy scalar or a
    one-element integer array as vectorized envs pass it) in 0..n-1; anything else
    (a float, a longer array, out of range) raises gymnasium's InvalidAction."""
    value = np.asarray(action)
    if value.size != 1 or not np.issubdtype(value.dtype, np.integer) or not 0 <= int(value.reshape(())) < n:
        raise gym.error.InvalidAction(f"action {describe_value(action)} is not in Discrete({n})")
    return int(value.reshape(()))


class ConfiguredEnv(gym.Env):
    """A ctxsim env: ``config_model`` (a pydantic model extending
    :class:`~ctxsim.episode_config.EpisodeConfig`) declares every parameter with its
    default and checks, ``default_config()`` is its defaults as plain data, and the
    spaces follow the resolved config (``Discrete`` over ``config["actions"]``, the
    shared observation of :mod:`ctxsim.observe`).

    Subclasses set ``env_id`` and ``config_model``, define ``_render_text``, and extend
    :meth:`configure` for what else follows the config.
    """

    env_id: ClassVar[str]
    config_model: ClassVar[type[EpisodeConfig]]
    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, config: dict[str, Any] | None = None, render_mode: str | None = None):
        super().__init__()
        self.render_mode = checked_render_mode(self, render_mode)
        self.config = self.default_config()
        self.configure(config)

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """Every parameter with its default (``config_model``'s fields say what each means), as plain data."""
        return cls.config_model.model_construct().model_dump(mode="json")

    @classmethod
    def resolve_config(
        cls, config: dict[str, Any] | None = None, *, source: str | Path | None = None, key_prefix: str = ""
    ) -> dict[str, Any]:
        """The full, validated configuration: defaults overridden by ``config`` (plain data).

        Raises ConfigError naming ``source`` (default: the env id), the key and the
        value for an unknown key, an unknown strategy id or scenario, or a bad value.
        """
        return cls.checked_config(config, source, key_prefix).model_dump(mode="json")

    @classmethod
    def checked_config(cls, config: dict[str, Any] | None = None, source: str | Path | None = None, key_prefix: str = ""):
        """The validated config model (its ``suite`` holds the loaded scenarios)."""
        source = cls.env_id if source is None else source
        if config is not None and not isinstance(config, dict):
            raise ConfigError(f"config must be a mapping, got {describe_value(config)}", source=str(source), key=key_prefix or None)
        return validate(cls.config_model, config or {}, source, ConfigError, key_prefix)

    def configure(self, config: dict[str, Any] | None) -> None:
        """Override parameters (checked); call before ``reset``: the spaces follow it."""
        self._checked = self.checked_config({**self.config, **(config or {})}, self.env_id, "config")
        self.config = self._checked.model_dump(mode="json")
        self._suite = self._checked.suite
        self.obs_config = ObservationConfig.of(self.config)
        low, high = observation_bounds(self.obs_config)
        self.observation_space = gym.spaces.Box(low, high, dtype=np.float32)
        self.action_space = gym.spaces.Discrete(len(self.config["actions"]))

    @property
    def suite(self) -> tuple[Scenario, ...]:
        """The configured scenarios (loaded and validated), in suite order."""
        return tuple(self._suite)

    @property
    def context_count(self) -> int:
        """Distinct (scenario, seed) contexts the suite offers (each scenario's
        ``contexts``, else ``contexts_per_scenario``)."""
        return sum(s.context_count(self.config["contexts_per_scenario"]) for s in self._suite)

    @property
    def feature_names(self) -> list[str]:
        return feature_names(self.obs_config)

    @property
    def observation_version(self) -> int:
        return OBSERVATION_VERSION

    @property
    def actions(self) -> tuple[str, ...]:
        return tuple(self.config["actions"])

    def render(self) -> str | None:
        if self.render_mode is None:
            gym.logger.warn("render() without a render_mode; make the env with render_mode='ansi'")
            return None
        return self._render_text()

    def _render_text(self) -> str:
        raise NotImplementedError


def reset_options(options: Any, valid: tuple[str, ...]) -> dict[str, Any]:
    """``reset(options=)`` checked: a mapping of ``valid`` keys whose ``scenario``,
    when given, is a name; ConfigError naming the option otherwise."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ConfigError(f"reset options must be a mapping, got {describe_value(options)}", key="options")
    unknown = sorted(str(k) for k in set(options) - set(valid))
    if unknown:
        raise ConfigError(f"unknown reset option (valid: {', '.join(valid)})", key=f"options.{unknown[0]}")
    if "scenario" in options and options["scenario"] is not None and not isinstance(options["scenario"], str):
        raise ConfigError(f"expected a scenario name, got {describe_value(options['scenario'])}", key="options.scenario")
    return dict(options)

