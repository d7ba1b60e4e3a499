"""The policy protocol, one registry of policies keyed by name, and the episode loop.

A policy chooses the next action of an :class:`~ctxsim.episode.OverflowEpisode`:

* ``name`` — the name it is registered under (``"random"``, ``"peer:letta"``, ...);
* ``reset(seed)`` — called once at the start of every episode with a deterministic
  seed (all of a policy's randomness comes from it);
* ``act(episode)`` — an action id among ``episode.valid_actions()``, or a
  :class:`~ctxsim.strategies.Strategy` object of the policy's own (peers);
* ``check(settings)`` — raise PolicyError when the policy cannot act under these
  episode settings (a trained policy's other action set); evaluations call it
  before they run or write anything. The default accepts any settings.

Names are fixed names (``random``, ``seed-chain``, ``greedy``, ``oracle``), members of
a family (``only:<strategy id>``, ``peer:<system>``), or the path of a policy
directory that a registered loader recognizes (an SB3 run directory or model zip;
the exported numpy policy registers its loader too). Adding a policy is one class
plus one :func:`register_policy` line; outside ctxsim, in the module of a
``ctxsim.plugins`` entry point (:mod:`ctxsim.plugins`), which the lookups and
listings load first.

No heavy imports here: this package must import with numpy alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..episode import EpisodeSettings, OverflowEpisode, Step
from ..errors import PolicyError
from ..model import ContextState
from ..plugins import load_plugins
from ..strategies import Strategy


class Policy:
    """Base of every policy (see the module docstring for the protocol)."""

    name: str = ""

    def reset(self, seed: int) -> None:
        """Start a new episode; ``seed`` seeds whatever randomness the policy has."""

    def act(self, episode: OverflowEpisode) -> str | Strategy:  # pragma: no cover - abstract
        raise NotImplementedError

    def check(self, settings: EpisodeSettings) -> None:
        """Raise PolicyError when the policy cannot act under ``settings`` (a trained
        policy's action set or observation differs); evaluations call it before
        they write anything."""

    def __repr__(self) -> str:
        return f"<policy {self.name}>"


@dataclass(frozen=True)
class _Family:
    """Policies named ``<prefix>:<member>``: the members and the factory of one."""

    members: Callable[[], list[str]]
    build: Callable[..., Policy]


_POLICIES: dict[str, Callable[..., Policy]] = {}
_FAMILIES: dict[str, _Family] = {}
#: (recognizes(path), load(path, **kwargs)) pairs, tried in registration order
_LOADERS: list[tuple[Callable[[Path], bool], Callable[..., Policy]]] = []


def register_policy(name: str) -> Callable[[type[Policy]], type[Policy]]:
    """Class decorator: make a policy available under a fixed ``name``."""

    def decorate(cls: type[Policy]) -> type[Policy]:
        if name in _POLICIES:
            raise PolicyError(f"policy name '{name}' registered twice")
        cls.name = name
        _POLICIES[name] = cls
        return cls

    return decorate


def register_family(prefix: str, members: Callable[[], list[str]], build: Callable[..., Policy]) -> None:
    """Policies ``<prefix>:<member>``; ``build(member, **kwargs)`` makes one."""
    if prefix in _FAMILIES:
        raise PolicyError(f"policy family '{prefix}' registered twice")
    _FAMILIES[prefix] = _Family(members, build)


def register_loader(recognizes: Callable[[Path], bool], load: Callable[..., Policy]) -> None:
    """A loader of policies stored on disk: ``load(path, **kwargs)`` for the paths it
    ``recognizes``."""
    _LOADERS.append((recognizes, load))


def is_trained_policy(path: str | Path) -> bool:
    """True when a registered loader recognizes ``path`` (a run directory, a model
    file, an export directory)."""
    load_plugins()
    path = Path(path)
    return path.exists() and any(recognizes(path) for recognizes, _ in _LOADERS)


def trained_policies_in(folder: str | Path) -> list[Path]:
    """The trained policies directly inside ``folder`` (sorted by name) when it is a
    folder that is not one itself — e.g. the runs of one experiment trained with
    several seeds; [] otherwise."""
    folder = Path(folder)
    if not folder.is_dir() or is_trained_policy(folder):
        return []
    return sorted(p for p in folder.iterdir() if not p.name.startswith(".") and is_trained_policy(p))


def list_policies() -> list[str]:
    """Every policy name: the fixed names, then each family's members (sorted)."""
    load_plugins()
    names = list(_POLICIES)
    for prefix, family in _FAMILIES.items():
        names.extend(f"{prefix}:{m}" for m in family.members())
    return names


def is_learned(policy: str) -> bool:
    """True for a policy given as a path (a trained model), not a registered name
    (not in :func:`list_policies`). Read as :func:`get_policy` reads a name: only the
    family its prefix names is asked for its members (listing every family's would
    read, e.g., every experiment file for ``best-fixed``'s, once per policy of a sweep)."""
    load_plugins()
    if policy in _POLICIES:
        return False
    prefix, sep, member = policy.partition(":")
    return not (sep and prefix in _FAMILIES and member in _FAMILIES[prefix].members())


def get_policy(name_or_path: str | Path, **kwargs: Any) -> Policy:
    """A fresh policy by name, or loaded from a policy directory / model file.

    ``kwargs`` go to the policy's constructor (e.g. a peer's parameters). Unknown
    names raise :class:`~ctxsim.errors.PolicyError` listing the valid ones.
    """
    load_plugins()
    name = str(name_or_path)
    if name in _POLICIES:
        return _POLICIES[name](**kwargs)
    prefix, sep, member = name.partition(":")
    if sep and prefix in _FAMILIES:
        family = _FAMILIES[prefix]
        valid = family.members()
        if member not in valid:
            names = ", ".join(f"{prefix}:{m}" for m in valid)
            raise PolicyError(f"unknown policy '{name}'; valid {prefix}:<...> names: {names}")
        return family.build(member, **kwargs)
    path = Path(name)
    if path.exists():
        for recognizes, load in _LOADERS:
            if recognizes(path):
                return load(path, **kwargs)
        inside = trained_policies_in(path)
        if inside:
            raise PolicyError(
                f"'{name}' is a folder of {len(inside)} trained policies ({', '.join(p.name for p in inside[:3])}"
                f"{', ...' if len(inside) > 3 else ''}); load one of them (ctxsim evaluate and sweeps take the "
                "folder as one policy)"
            )
        raise PolicyError(f"'{name}' is not a policy directory or model file that ctxsim can load")
    raise PolicyError(
        f"unknown policy '{name}'; valid names: {', '.join(list_policies())}, or the path of a trained policy"
    )


def run_episode(
    policy: Policy,
    state: ContextState,
    settings: EpisodeSettings,
    seed: int,
    on_step: Callable[[OverflowEpisode, Step], None] | None = None,
) -> OverflowEpisode:
    """Run ``policy`` on one overflow of ``state`` until the episode is over.

    Calls ``policy.reset(seed)`` first and ``on_step(episode, step)`` after every
    step. An action id that is not among the episode's valid actions is a policy
    bug and raises :class:`~ctxsim.errors.PolicyError`. A context that already fits
    needs no step (``act`` is never called). Returns the finished episode.
    """
    episode = OverflowEpisode(state, settings)
    policy.reset(seed)
    while not episode.done:
        action = policy.act(episode)
        if isinstance(action, (int, np.integer)):
            action = settings.actions[int(action)]
        if not isinstance(action, Strategy):
            valid = episode.valid_actions()
            if action not in valid:
                choices = ", ".join(valid)
                raise PolicyError(f"policy '{policy.name}' chose '{action}', not a valid action here ({choices})")
        step = episode.step(action)
        if on_step is not None:
            on_step(episode, step)
    return episode
