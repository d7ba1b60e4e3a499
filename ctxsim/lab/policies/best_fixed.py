"""``best-fixed:<experiment>``: the one fixed chain with the best mean reward on an
experiment's training contexts, chosen there and then applied unchanged.

A *fixed chain* is a sequence of ``max_steps`` action ids played by
:class:`~ctxsim.policies.baselines.FixedChainPolicy`'s rule: each id in turn, one
per step, an id that is not valid when its turn comes skipped for good, then
:func:`~ctxsim.policies.baselines.fallback_action`. The candidates are every such
sequence over the settings' actions (without ``error``): ``|A|^max_steps`` chains
(216 for design 001's six actions and 3 steps). They cover what one fixed choice can
do: ``only:<id>`` is ``(id, id, id)``, a chain the oracle follows on one context is
one of them (padded with any ids).

:func:`fit` runs every candidate on every training context under the evaluation's
episode settings (so the chain is best for the reward being reported) and keeps the
one with the highest mean reward; ties go to the first in the order of
:func:`~ctxsim.policies.baselines.fixed_chains` (the settings' action order). Steps are memoized by the
settings, so a fit costs about one oracle search per context; when the
experiment's training pool is on disk, built under the same settings, the fit
reads its values first (:func:`training_pool_memo`; the same values, no search).

The training contexts of ``best-fixed:<experiment>`` (``experiments/<experiment>.yaml``,
a training experiment): the first :data:`FIT_SEEDS` context seeds of each scenario of
its training split (a transcript that builds one context whatever the seed, once) (:func:`ctxsim.lab.train.env_configs`: every scenario that is neither
held out nor a validation one, unless ``train_scenarios`` names them). The policy
refuses to act on a context it was fitted on (PolicyError), so it is never scored
where it was chosen. Fits are cached in the process and on disk, beside the context
pools (:func:`ctxsim.lab.pool.pool_dir`, ``best-fixed-<digest>.json``), keyed by the
code (the pools' source digest, this module and the chain rule's), the settings and
the training contexts' fingerprints; ``BestFixedPolicy.fitted``
names the chosen chain.

On ConversationStream-v0 the same name plays the one (break depth, chain) best on
the experiment's whole training conversations instead
(:mod:`ctxsim.lab.stream.best_fixed`).

``adaptivity gap`` = mean reward of ``oracle`` minus ``best-fixed`` on held-out
contexts: what choosing a chain per context adds over the best single choice
(``ctxsim evaluate --policy oracle --policy best-fixed:<experiment> --compare oracle``
gives it with its 95 % paired bootstrap CI).

This module registers its policy when ``ctxsim.lab`` is imported, which the command
line does before it knows whether the lab extra (faker, gymnasium, ...) is
installed; so the lab modules that need it (contexts, environments, training,
pools) are imported in the functions that use them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ...atomic import read_or_make
from ...episode import EpisodeSettings, OverflowEpisode
from ...errors import ConfigError, PolicyError
from ...model import ContextState
from ...paths import EXPERIMENTS_DIR
from ...policies import baselines
from ...policies.baselines import FixedChainPolicy, fixed_chains
from ...policies.registry import Policy, register_family, run_episode

#: context seeds per training scenario a fit uses
FIT_SEEDS = 5
_FITS: dict[str, "FixedFit"] = {}


@dataclass(frozen=True)
class FixedFit:
    """The chosen chain, its mean reward on the ``contexts`` training contexts, and how
    many candidate chains were tried."""

    chain: tuple[str, ...]
    mean_reward: float
    contexts: int
    chains_tried: int

    def describe(self) -> str:
        return (f"{' -> '.join(self.chain)} (mean reward {self.mean_reward:.4f} on {self.contexts} training contexts, "
                f"best of {self.chains_tried} fixed chains)")


def chain_reward(chain: tuple[str, ...], state: ContextState, settings: EpisodeSettings) -> float:
    """The final reward of playing ``chain`` (the fixed-chain rule) on ``state``."""
    return run_episode(FixedChainPolicy(chain), state, settings, 0).reward


def fit(contexts: Sequence[ContextState], settings: EpisodeSettings) -> FixedFit:
    """The fixed chain with the best mean reward on ``contexts`` (cached in the process)."""
    if not contexts:
        raise PolicyError("best-fixed needs at least one training context", key="contexts")
    key = fit_key(contexts, settings)
    if key not in _FITS:
        candidates = fixed_chains(settings)
        best, best_mean = candidates[0], -float("inf")
        for chain in candidates:
            mean = sum(chain_reward(chain, state, settings) for state in contexts) / len(contexts)
            if mean > best_mean:
                best, best_mean = chain, mean
        _FITS[key] = FixedFit(best, best_mean, len(contexts), len(candidates))
    return _FITS[key]


def fit_key(contexts: Sequence[ContextState], settings: EpisodeSettings) -> str:
    """Digest of what a fit depends on: the settings and the contexts' fingerprints."""
    def plain(value: Any) -> Any:
        if hasattr(value, "model_dump"):
            return value.model_dump()
        if dataclasses.is_dataclass(value):
            return dataclasses.asdict(value)
        return str(value)

    described = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings) if f.name != "cache_size"}
    blob = json.dumps([described, [s.fingerprint for s in contexts]], sort_keys=True, default=plain)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def training_config(experiment: str) -> Any:
    """The checked env config of the training split of ``experiments/<experiment>.yaml``
    (:func:`ctxsim.lab.train.env_configs`; its ``suite`` is the training scenarios)."""
    from ..environments.spec import env_class  # the lab extra (module docstring)
    from ..train import env_configs, load_experiment

    env_id, train, _, _ = env_configs(load_experiment(EXPERIMENTS_DIR / f"{experiment}.yaml"))
    return env_class(env_id).checked_config(train)


def experiment_contexts(experiment: str) -> list[ContextState]:
    """The training contexts of ``experiments/<experiment>.yaml`` (module docstring)."""
    from ..contexts import build_context  # the lab extra (module docstring)

    checked = training_config(experiment)
    per_scenario = checked.contexts_per_scenario
    built = [build_context(s, seed) for s in checked.suite
             for seed in range(min(FIT_SEEDS, s.context_count(per_scenario)))]
    return list({state.fingerprint: state for state in built}.values())  # a transcript's one context counts once


def training_pool_memo(experiment: str, settings: EpisodeSettings) -> dict[tuple, Any]:
    """The memo of the experiment's training context pool (its transitions, masks and
    outcomes) when that pool is already on disk and was built under ``settings``
    (``cache_size`` aside), so a fit reads the values instead of computing them again
    (they are the same values); empty otherwise: a fit never builds a pool."""
    from ..pool import ensure_pool, pool_key, pool_path

    checked = training_config(experiment)
    if not checked.pool:
        return {}
    resolved = checked.model_dump(mode="json")
    pooled = EpisodeSettings.from_env_config(resolved)
    if type(settings) is not EpisodeSettings or _memo_free(pooled) != _memo_free(settings):
        return {}
    if not pool_path(pool_key(resolved, checked.suite)).exists():
        return {}
    return ensure_pool(resolved, checked.suite)[0].memo


def _memo_free(settings: EpisodeSettings) -> EpisodeSettings:
    """``settings`` with the memo size left out (settings that differ only there give the same values)."""
    return dataclasses.replace(settings, cache_size=0)


def training_experiments() -> list[str]:
    """The experiments of ``experiments/`` that train a policy: the files that load as
    an experiment (``extends`` resolved, so one that inherits its ``algo`` counts)."""
    from ..train import load_experiment  # the lab extra (module docstring)

    names = []
    for path in sorted(Path(EXPERIMENTS_DIR).glob("*.yaml")):
        try:
            load_experiment(path)
        except ConfigError:
            continue
        names.append(path.stem)
    return names


def _stored_fit(contexts: list[ContextState], settings: EpisodeSettings,
                memo: Callable[[], dict[tuple, Any]] = dict) -> FixedFit:
    """:func:`fit`, read from / written to the pool folder (keyed by the code too); a
    fit made here runs on a copy of ``settings`` answering from ``memo()`` first (a
    training pool's values: :func:`training_pool_memo`)."""
    from ..pool import code_of, pool_dir, source_digest  # the lab extra (module docstring)

    h = hashlib.sha256(f"{source_digest()} {fit_key(contexts, settings)}".encode())
    for module in (__file__, baselines.__file__):  # policies/ is not in source_digest: the chain rule is here
        h.update(code_of(Path(module)))
    key = h.hexdigest()[:32]

    def read(path: Path) -> FixedFit:
        data = json.loads(path.read_text())
        return FixedFit(tuple(data["chain"]), float(data["mean_reward"]), int(data["contexts"]), int(data["chains_tried"]))

    def make() -> FixedFit:
        fitting = dataclasses.replace(settings)  # a memo of its own: the pool's values stay out of the caller's settings
        fitting.preload(memo())
        return fit(contexts, fitting)

    return read_or_make(pool_dir() / f"best-fixed-{key}.json", read, make,
                        lambda fitted: json.dumps(dataclasses.asdict(fitted)).encode())[0]


class BestFixedPolicy(Policy):
    """``best-fixed:<experiment>``: fits at its first ``act`` under that episode's
    settings, then plays the chosen chain (module docstring). ``contexts`` replaces
    the experiment's training contexts (fitted in the process only)."""

    def __init__(self, experiment: str, contexts: Sequence[ContextState] | None = None) -> None:
        self.name = f"best-fixed:{experiment}"
        self.experiment = experiment
        self._contexts = list(contexts) if contexts is not None else None
        # id(settings) -> (settings, fit, fingerprints of its training contexts)
        self._fitted: dict[int, tuple[EpisodeSettings, FixedFit, frozenset[str]]] = {}
        self._player: FixedChainPolicy | None = None

    @property
    def fitted(self) -> FixedFit | None:
        """The last fit this policy made (None before its first ``act``)."""
        return next(reversed(self._fitted.values()))[1] if self._fitted else None

    def fit_for(self, settings: EpisodeSettings) -> tuple[FixedFit, frozenset[str]]:
        """(the fit under ``settings``, the fingerprints of its training contexts)."""
        if id(settings) not in self._fitted:
            stored = self._contexts is None
            contexts = experiment_contexts(self.experiment) if stored else self._contexts
            chosen = (_stored_fit(contexts, settings, lambda: training_pool_memo(self.experiment, settings)) if stored
                      else fit(contexts, settings))
            self._fitted[id(settings)] = (settings, chosen, frozenset(s.fingerprint for s in contexts))
        return self._fitted[id(settings)][1:]

    def check(self, settings: EpisodeSettings) -> None:
        """Fit (or read the stored fit) under ``settings`` now, before any episode:
        a fit that cannot be made fails before anything is written, and the workers
        of a parallel evaluation read the stored fit instead of each fitting again."""
        self.fit_for(settings)

    def reset(self, seed: int) -> None:
        self._player = None

    def stream_player(self, config: Any) -> Any:
        """How this policy plays ConversationStream-v0 under the validated StreamConfig
        ``config``: the one (depth, chain) best on the experiment's whole training
        conversations (:func:`ctxsim.lab.stream.best_fixed.stream_best_fixed`)."""
        from ..stream.best_fixed import stream_best_fixed

        return stream_best_fixed(self.experiment, config)

    def act(self, episode: OverflowEpisode) -> str:
        if self._player is None:
            chosen, trained_on = self.fit_for(episode.settings)
            if episode.original.fingerprint in trained_on:
                raise PolicyError(
                    f"{self.name} chose its chain on this context ({episode.original.scenario}, seed "
                    f"{episode.original.seed}): evaluate it outside its training split (e.g. the held-out scenarios)"
                )
            self._player = FixedChainPolicy(chosen.chain)
            self._player.name = self.name
        return self._player.act(episode)


register_family("best-fixed", training_experiments, BestFixedPolicy)
