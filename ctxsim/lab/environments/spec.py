"""Environment spec files (``envs/*.yaml``): a registered env id plus a config override.

A spec file has three keys::

    id: ctxsim/ContextOverflow-v0      # a registered ctxsim env id
    description: one line on what the variant is for
    config: {max_steps: 3, ...}        # overrides of the env's default_config()

A variant is just a config override (HighwayEnv's pattern). :func:`load_env_spec`
checks the config against the env class (its ``resolve_config``), so an unknown
key, an unknown strategy id or a bad value fails at load time with a ConfigError
naming the file and the key (``config.actions[2]``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import gymnasium
from gymnasium.envs.registration import load_env_creator
from pydantic import BaseModel, ConfigDict, Field, StrictStr

from ...errors import ConfigError
from ...paths import ENVS_DIR
from ...validation import Bounded, load_yaml, validate
from . import env_ids, register_envs


class _SpecFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    id: StrictStr
    description: StrictStr = ""
    config: Annotated[dict[StrictStr, Any], Bounded] = Field(default_factory=dict)


@dataclass(frozen=True)
class EnvSpecFile:
    """A loaded spec: the env ``id``, its ``config`` overrides (checked), where it came from."""

    id: str
    description: str
    config: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    source: Path | None = None

    def make(self, **kwargs: Any) -> gymnasium.Env:
        """``gymnasium.make(id, config=config, **kwargs)``."""
        return gymnasium.make(self.id, config=dict(self.config), **kwargs)


def list_env_specs(folder: str | Path = ENVS_DIR) -> list[Path]:
    """The spec files of a folder (``*.yaml``), sorted by name."""
    return sorted(Path(folder).glob("*.yaml"))


def env_class(env_id: str) -> type:
    """The class registered under a ctxsim env id."""
    register_envs()
    return load_env_creator(gymnasium.spec(env_id).entry_point)


def load_env_spec(path_or_name: str | Path) -> EnvSpecFile:
    """Read a spec file, or ``envs/<name>.yaml`` when given a bare name.

    Raises ConfigError (file, key, value; one line) for an unreadable file, an
    unknown key, an id that is not a ctxsim env, or an invalid config.
    """
    path = Path(path_or_name)
    if not path.exists() and path.suffix == "" and (ENVS_DIR / f"{path}.yaml").exists():
        path = ENVS_DIR / f"{path}.yaml"
    data = load_yaml(path, ConfigError)
    spec = validate(_SpecFile, data, path, ConfigError)
    if spec.id not in env_ids():
        raise ConfigError(f"not a ctxsim environment id (known: {env_ids()}) (got {spec.id!r})", source=path, key="id")
    cls = env_class(spec.id)
    resolve = getattr(cls, "resolve_config", None)
    if resolve is not None:
        resolve(spec.config, source=path, key_prefix="config")
    return EnvSpecFile(spec.id, spec.description, dict(spec.config), path.stem, path)


def make_env(path_or_name: str | Path, **kwargs: Any) -> gymnasium.Env:
    """The environment a spec file describes (keyword arguments go to ``gymnasium.make``)."""
    return load_env_spec(path_or_name).make(**kwargs)
