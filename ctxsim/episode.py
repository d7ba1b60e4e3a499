"""One overflow event, broken step by step: the logic every consumer shares.

The Gymnasium environment, the evaluation loop, the oracle and the deployable
policy all run an :class:`OverflowEpisode`, so "success", "forced recovery" and the
reward mean the same thing everywhere. No gymnasium import here.

Semantics (design 001, MISSION.md): each step applies one strategy. The episode ends
when the context fits the target (success), when a recovery action ran, or when
``max_steps`` strategies ran and it is still over the target — then the configured
``recovery_mode`` is applied and the outcome counts as a failure that used
recovery (mode ``error``: a failure without recovery, the state left as it was).
The reward (design 001's formula) is paid once, on the last step.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .episode_config import EpisodeConfig
from .errors import RecoveryError, StrategyError
from .latency import Cost, LatencyModel
from .metrics import BreakingOutcome, outcome
from .model import ContextState
from .reward import RewardWeights, compute_reward, reward_terms
from .strategies import ContextBudget, Strategy, StrategyContext, StrategyResult, get_strategy

#: the defaults of every field below (EpisodeConfig's; no validation needed)
_DEFAULT = EpisodeConfig.model_construct()


@dataclass(frozen=True)
class EpisodeSettings:
    """Everything that decides how an overflow event is broken and scored, ready to
    run: the strategies built once and a bounded memo of their (pure) results.

    Build it from a validated :class:`~ctxsim.episode_config.EpisodeConfig` with
    :meth:`of` (an env's config is one), or from plain data with :meth:`from_mapping`
    (validated there); nothing is checked again here. The fields and their defaults
    are the config's, in runtime form (``strategy_params`` as sorted tuples, ``budget``
    as a :class:`~ctxsim.strategies.ContextBudget`).
    """

    actions: tuple[str, ...] = _DEFAULT.actions
    max_steps: int = _DEFAULT.max_steps
    mask_overflowing_last_step: bool = _DEFAULT.mask_overflowing_last_step
    target: str = _DEFAULT.target
    recovery_mode: str = _DEFAULT.recovery_mode
    reward: RewardWeights = _DEFAULT.reward
    latency: LatencyModel = _DEFAULT.latency
    embedder: str = _DEFAULT.embedder
    coherence: str = _DEFAULT.coherence
    strategy_params: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    budget: ContextBudget = field(default_factory=ContextBudget)
    cache_size: int = _DEFAULT.cache_size

    def __post_init__(self) -> None:
        object.__setattr__(self, "_strategies", {})
        object.__setattr__(self, "_cache", OrderedDict())
        object.__setattr__(self, "_preloaded", {})

    @classmethod
    def of(cls, config: EpisodeConfig, **extra: Any) -> EpisodeSettings:
        """The settings of a validated config (``extra``: fields of a subclass)."""
        return cls(
            actions=tuple(config.actions), max_steps=config.max_steps,
            mask_overflowing_last_step=config.mask_overflowing_last_step, target=config.target,
            recovery_mode=config.recovery_mode, reward=config.reward, latency=config.latency, embedder=config.embedder,
            coherence=config.coherence,
            strategy_params=tuple(sorted((k, tuple(sorted(v.items()))) for k, v in config.strategy_params.items())),
            budget=ContextBudget(required=config.budget.required, excluded=config.budget.excluded),
            cache_size=config.cache_size, **extra,
        )

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> EpisodeSettings:
        """Settings from plain data (:class:`~ctxsim.episode_config.EpisodeConfig` keys,
        validated: ConfigError naming the key and value)."""
        return cls.of(EpisodeConfig.checked(data))

    @classmethod
    def from_env_config(cls, config: dict[str, Any]) -> EpisodeSettings:
        """Settings from a resolved env config: its keys that are settings fields."""
        return cls.from_mapping(settings_subset(config))

    @property
    def key(self) -> str:
        """Stable hash of the settings that change transitions (cache key)."""
        parts = [self.actions, self.target, self.recovery_mode, self.latency.model_dump(), self.embedder,
                 self.strategy_params, self.budget.excluded]
        if self.budget.required:  # hybrid runs its required steps (keys without any stay as they were)
            parts.append(self.budget.required)
        blob = json.dumps(parts, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def params_for(self, strategy_id: str) -> dict[str, Any]:
        return dict(dict(self.strategy_params).get(strategy_id, ()))

    def strategy(self, strategy_id: str) -> Strategy:
        cache = self._strategies
        if strategy_id not in cache:
            cache[strategy_id] = get_strategy(strategy_id, **self.params_for(strategy_id))
        return cache[strategy_id]

    def target_tokens(self, state: ContextState) -> int:
        return state.warning_tokens if self.target == "warning" else state.limit

    def context(self, state: ContextState) -> StrategyContext:
        return StrategyContext(
            embedder_id=self.embedder, latency=self.latency, target_tokens=self.target_tokens(state), budget=self.budget,
            steps=self,
        )

    # ---- memoized pure functions ---------------------------------------------
    def memo_entries(self) -> dict[tuple, Any]:
        """The memoized results computed so far (what a context pool stores)."""
        return dict(self._cache)

    def preload(self, entries: dict[tuple, Any]) -> None:
        """Answer from ``entries`` (a context pool's memo) before computing: they are
        held apart from the bounded memo and never evicted."""
        self._preloaded.update(entries)

    def _memo(self, key: tuple, compute):
        hit = self._preloaded.get(key)
        if hit is not None:
            return hit
        cache: OrderedDict = self._cache
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
        value = compute()
        cache[key] = value
        if len(cache) > self.cache_size:
            cache.popitem(last=False)
        return value

    def apply(self, strategy_id: str, state: ContextState) -> StrategyResult:
        """The strategy's result on ``state`` (memoized: strategies are pure)."""
        if self.latency.measured:
            return self.strategy(strategy_id).apply(state, self.context(state))
        return self._memo(
            ("apply", state.fingerprint, strategy_id),
            lambda: self.strategy(strategy_id).apply(state, self.context(state)),
        )

    def apply_step(self, strategy: Strategy, state: ContextState, ctx: StrategyContext) -> StrategyResult:
        """``strategy.apply(state, ctx)`` for a step of a composite strategy (``hybrid``,
        a fallback): from the memo of :meth:`apply` when it is that computation."""
        if self._same_step(strategy, state, ctx):
            return self.apply(strategy.id, state)
        return strategy.apply(state, ctx)

    def step_applicable(self, strategy: Strategy, state: ContextState, ctx: StrategyContext) -> bool:
        """``strategy.applicable(state, ctx)`` for a step of a composite strategy: from the
        memo of :meth:`valid` when it is that computation."""
        if self._same_step(strategy, state, ctx):
            return self._applicable(strategy, state, ctx)
        return strategy.applicable(state, ctx)

    def _applicable(self, strategy: Strategy, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        """``strategy.applicable(state, ctx)`` through the memo; ``ctx`` is this episode's
        context for ``state`` (built only on a miss when not given)."""
        return self._memo(("valid", state.fingerprint, strategy.id),
                          lambda: strategy.applicable(state, self.context(state) if ctx is None else ctx))

    def _same_step(self, strategy: Strategy, state: ContextState, ctx: StrategyContext) -> bool:
        """Whether ``strategy`` on ``state`` with ``ctx`` is what this episode's action of
        the same id computes (same class and parameters, the context it gives ``state``)."""
        if self.latency.measured or strategy.recovery:
            return False
        try:
            own = self.strategy(strategy.id)
        except StrategyError:  # a strategy outside the registry (a peer's own): never memoized
            return False
        return type(own) is type(strategy) and own.params == strategy.params and ctx == self.context(state)

    def noop(self, strategy_id: str, state: ContextState) -> StrategyResult:
        """The result of an action that cannot run on ``state``: nothing changes."""
        return StrategyResult(strategy_id, state, state.total_tokens, state.total_tokens, (), (), (), Cost(), 0.0, (),
                              note="invalid action: nothing changed")

    def recorded(self, strategy_id: str, state: ContextState) -> ContextState:
        """``state`` with ``strategy_id`` appended to its history (memoized, so the
        same transition always yields the same state object)."""
        return self._memo(("recorded", state.fingerprint, strategy_id), lambda: state.with_units(state.units, applied=strategy_id))

    def outcome(self, original: ContextState, final: ContextState, time_ms: float) -> BreakingOutcome:
        """Outcome metrics of a break (memoized: coherence embeds both contexts)."""
        return self._memo(
            ("outcome", original.fingerprint, final.fingerprint, time_ms),
            lambda: outcome(original, final, time_ms=time_ms, target_tokens=self.target_tokens(original),
                            embedder_id=self.embedder, coherence_measure=self.coherence),
        )

    def valid(self, strategy_id: str, state: ContextState, *, by_fingerprint: bool = True) -> bool:
        """Can the action run on ``state``? (recovery actions always can)

        The answer is memoized by the state's fingerprint (equal states share it, a pool
        keeps it), or with ``by_fingerprint=False`` on the state object alone: a state
        never seen then costs no fingerprint (a deployed policy deciding on an agent's
        new context)."""
        if self.budget.is_excluded(strategy_id):
            return False
        strategy = self.strategy(strategy_id)
        if strategy.recovery:
            return True
        if by_fingerprint:
            return self._applicable(strategy, state)
        # keyed by this object's id: the entry holds the object, so no other settings get that id
        return state.derived(("valid", id(self), strategy_id),
                             lambda: (self, strategy.applicable(state, self.context(state))))[1]

    def mask(self, state: ContextState, steps_taken: int = 0) -> np.ndarray:
        """Valid actions on ``state`` after ``steps_taken`` steps (never all False:
        when nothing is valid, the recovery actions, else every action). On the last
        step with ``mask_overflowing_last_step``, only the valid actions that fit the
        target (:meth:`fits`), when there is one."""
        mask = np.array([self.valid(sid, state) for sid in self.actions], dtype=bool)
        if not mask.any():  # never an all-False mask: recovery stays possible
            mask[:] = [self.strategy(sid).recovery for sid in self.actions]
            if not mask.any():
                mask[:] = True
        elif self.mask_overflowing_last_step and steps_taken >= self.max_steps - 1:
            fitting = mask & [self.fits(sid, state) for sid in self.actions]
            if fitting.any():
                return fitting
        return mask

    def fits(self, strategy_id: str, state: ContextState) -> bool:
        """Does the action end the episode without a forced recovery: a recovery action,
        or a result within the target (of ``state``'s limit: strategies keep it)?"""
        if self.strategy(strategy_id).recovery:
            return True
        return self.apply(strategy_id, state).state.total_tokens <= self.target_tokens(state)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_strategies"], state["_cache"], state["_preloaded"] = {}, OrderedDict(), {}
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)


def settings_subset(config: dict[str, Any]) -> dict[str, Any]:
    """The keys of an env config that decide how an overflow is broken and scored
    (:class:`~ctxsim.episode_config.EpisodeConfig`'s)."""
    return {k: v for k, v in config.items() if k in EpisodeConfig.model_fields}


@dataclass(frozen=True)
class Step:
    """One applied action and what it did."""

    action: str
    before: ContextState
    after: ContextState
    result: StrategyResult | None
    forced_recovery: str | None
    done: bool
    reward: float
    latency_ms: float
    ran: bool = True  # False: the action could not run here (a wasted step)


class OverflowEpisode:
    """The state of one overflow event being broken (cheap to copy for search).

    ``latency_ms`` is what the chain taken cost (its steps and a forced recovery).
    A policy that tries steps before it takes one (:mod:`ctxsim.policies.lookahead`)
    pays for them too: it charges the episode (:meth:`charge`) with the steps it ran on
    copies, and the outcome's latency (:attr:`total_ms`) adds those the chain did not take
    (:attr:`search_ms`; each distinct step once: a tried step the chain takes later is
    paid by the chain). The reference searches (``oracle``, ``greedy``) charge
    nothing: they bound what a break can reach, they are not deployed.
    """

    def __init__(self, original: ContextState, settings: EpisodeSettings | None = None):
        self.settings = settings or EpisodeSettings()
        self.original = original
        self.state = original
        self.chain: tuple[str, ...] = ()
        self.latency_ms = 0.0
        #: the chain's steps as (state fingerprint, action), and the steps a search tried
        #: on this episode's behalf with what each cost (ms); both rebound, never
        #: changed in place, so a copy shares them safely
        self.taken: tuple[tuple[str, str], ...] = ()
        self.tried: dict[tuple[str, str], float] = {}
        self.done = original.total_tokens <= self.settings.target_tokens(original)
        self.forced_recovery = False
        self._outcome: BreakingOutcome | None = None

    def copy(self) -> "OverflowEpisode":
        other = object.__new__(OverflowEpisode)
        other.__dict__.update(self.__dict__)
        return other

    @property
    def steps_taken(self) -> int:
        return len(self.chain)

    @property
    def target_tokens(self) -> int:
        return self.settings.target_tokens(self.original)

    def action_mask(self) -> np.ndarray:
        """The valid actions now (:meth:`EpisodeSettings.mask` of the state after the steps
        taken); all False once the episode is over: no action can run, and none is checked."""
        if self.done:
            return np.zeros(len(self.settings.actions), dtype=bool)
        return self.settings.mask(self.state, self.steps_taken)

    def valid_actions(self) -> list[str]:
        return [sid for sid, ok in zip(self.settings.actions, self.action_mask()) if ok]

    def step(self, action: str | int | Strategy) -> Step:
        """Apply one action: an id, an index into ``settings.actions``, or any
        :class:`Strategy` object (peers use their own strategies this way)."""
        if self.done:
            raise RecoveryError("the episode is over; reset it")
        before = self.state
        ran = True
        if isinstance(action, Strategy):
            sid = action.id
            result = action.apply(before, self.settings.context(before))
        else:
            sid = self.settings.actions[action] if isinstance(action, (int, np.integer)) else action
            ran = self.settings.valid(sid, before)
            if ran:
                result = self.settings.apply(sid, before)
            else:  # an unmasked learner picked an invalid action: a wasted step
                result = self.settings.noop(sid, before)
        if result.state.history == before.history:
            result = replace(result, state=self.settings.recorded(sid, result.state))
        self.state = result.state
        self.chain += (sid,)
        self.taken += ((before.fingerprint, sid),)
        self.latency_ms += result.latency_ms
        forced = None
        if result.recovery or self.state.total_tokens <= self.target_tokens:
            self.done = True
        elif self.steps_taken >= self.settings.max_steps:
            forced = self.settings.recovery_mode
            self._force_recovery(forced)
        reward = self.reward if self.done else 0.0
        return Step(sid, before, self.state, result, forced, self.done, reward, result.latency_ms, ran)

    def _force_recovery(self, mode: str) -> None:
        self.done = True
        self.forced_recovery = True
        if mode == "error":
            return
        result = self.settings.apply(mode, self.state)
        self.state = result.state
        self.latency_ms += result.latency_ms

    def charge(self, tried: dict[tuple[str, str], float]) -> None:
        """Record steps a search ran on this episode's behalf: (fingerprint of the state
        it ran on, action) -> what the step cost (ms)."""
        if self.done:
            raise RecoveryError("the episode is over; its latency is final")
        self.tried = {**tried, **self.tried}

    @property
    def search_ms(self) -> float:
        """What the tried steps the chain did not take cost (ms)."""
        if not self.tried:
            return 0.0
        taken = set(self.taken)
        return sum(ms for step, ms in self.tried.items() if step not in taken)

    @property
    def total_ms(self) -> float:
        """The break's latency: the chain's (:attr:`latency_ms`) and the search's (:attr:`search_ms`)."""
        return self.latency_ms + self.search_ms

    @property
    def outcome(self) -> BreakingOutcome:
        if self._outcome is None or not self.done:
            o = self.settings.outcome(self.original, self.state, self.total_ms)
            if self.forced_recovery:
                o = replace(o, success=False, used_recovery=self.settings.recovery_mode != "error")
            if not self.done:
                return o
            self._outcome = o
        return self._outcome

    @property
    def reward_terms(self) -> dict[str, float]:
        return reward_terms(self.outcome, self.settings.reward)

    @property
    def reward(self) -> float:
        return compute_reward(self.outcome, self.settings.reward)
