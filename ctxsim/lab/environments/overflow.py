"""``ctxsim/ContextOverflow-v0``: one overflow event, broken one strategy per step."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import gymnasium as gym
import numpy as np
from pydantic import Field, PrivateAttr, StrictBool, StrictStr, model_validator

from ...cache import LRUCache
from ..contexts import build_context
from ...episode import EpisodeSettings, OverflowEpisode, Step
from ...episode_config import FULL_ACTIONS, ActionIds, EpisodeConfig, StepCount
from ...errors import ConfigError, ScenarioError, describe_value
from ...metrics import BreakingOutcome
from ...model import MAX_CONTEXTS, ContextState
from ...observe import current_break, observe
from ...paths import ROOT
from ..pool import Pool, ensure_pool, scenario_digest
from ...reward import reward_terms
from ..scenarios import DEFAULT_SUITE, Scenario, load_scenarios
from ...strategies import BREAKER_FAILED, ProgressEvent
from ...validation import KeyedValueError
from .base import ConfiguredEnv, discrete_action, reset_options

ENV_ID = "ctxsim/ContextOverflow-v0"
#: random draws of (scenario, seed) tried before giving up on finding an overflow
MAX_DRAWS = 1000


class OverflowConfig(EpisodeConfig):
    """ContextOverflow-v0's config: the episode's parameters (:class:`~ctxsim.episode_config.EpisodeConfig`,
    their defaults and checks) and where the contexts come from. Every key has its
    default here; ``ContextOverflowEnv.default_config()`` is this model's defaults as data."""

    actions: ActionIds = FULL_ACTIONS
    """Strategy ids of the action space, in order (default: every strategy of the design
    documents and the recovery modes but ``error``; ``envs/seed001.yaml`` has design 001's six)."""
    max_steps: StepCount = 2
    """Strategies per episode before the recovery is forced (default 2: on every strategy the
    oracle's third step is almost never worth it; design 001 has 3, ``envs/seed001.yaml``)."""

    scenarios: StrictStr | Annotated[list[StrictStr], Field(min_length=1)] = str(DEFAULT_SUITE)
    """A scenario file or folder, or a list of them (default: the shipped suite)."""
    scenario_names: list[StrictStr] | None = None
    """The subset of the scenarios to draw from (null: all)."""
    contexts_per_scenario: Annotated[int, Field(ge=1, le=MAX_CONTEXTS)] = 64
    """Context seeds drawn from ``range(n)`` (a scenario's own ``contexts`` key overrides it)."""
    scenario_contexts: dict[StrictStr, Annotated[int, Field(ge=1, le=MAX_CONTEXTS)]] = Field(default_factory=dict)
    """``{scenario name: n}``, the contexts of those scenarios (overrides both: e.g. fewer
    draws of a 400-context family in one experiment)."""
    cache_size: Annotated[int, Field(ge=0)] = 20_000
    """Entries of the process caches of contexts, views and strategy results (0: no caching)."""
    pool: StrictBool = False
    """Answer from the context pool of this configuration, built on first use and kept
    on disk (:mod:`ctxsim.lab.pool`): every context and every masked transition
    precomputed, so steps cost lookups. Same results."""

    _suite: list[Scenario] = PrivateAttr(default_factory=list)

    @model_validator(mode="after")
    def _loaded(self) -> OverflowConfig:
        self._suite = self._load_suite()
        return self

    def _load_suite(self) -> list[Scenario]:
        sources = [self.scenarios] if isinstance(self.scenarios, str) else self.scenarios
        suite: list[Scenario] = []
        for i, src in enumerate(sources):
            key = "scenarios" if isinstance(self.scenarios, str) else f"scenarios[{i}]"
            try:
                suite.extend(load_scenarios(_resolve_path(src)))
            except ScenarioError as exc:
                raise KeyedValueError(key, src, str(exc)) from None
        names = [s.name for s in suite]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise KeyedValueError("scenarios", self.scenarios, f"scenario names defined twice: {twice}")
        for name, count in self.scenario_contexts.items():
            if name not in names:
                raise KeyedValueError(f"scenario_contexts.{name}", count, f"unknown scenario; known: {sorted(names)}")
        suite = [s.model_copy(update={"contexts": self.scenario_contexts[s.name]}) if s.name in self.scenario_contexts
                 else s for s in suite]
        if self.scenario_names is None:
            return suite
        if not self.scenario_names:
            raise KeyedValueError("scenario_names", [], "must name at least one scenario (or be null for all)")
        by_name = {s.name: s for s in suite}
        for i, name in enumerate(self.scenario_names):
            if name not in by_name:
                raise KeyedValueError(f"scenario_names[{i}]", name, f"unknown scenario; known: {sorted(by_name)}")
        return [by_name[n] for n in dict.fromkeys(self.scenario_names)]

    @property
    def suite(self) -> list[Scenario]:
        """The scenarios episodes are drawn from, in order."""
        return self._suite


def _resolve_path(path: str) -> Path:
    """A suite path as given, else relative to the repository root."""
    p = Path(path)
    return p if p.exists() or p.is_absolute() else ROOT / p


# ---- process-level caches (module globals: never pickled with an env) -------------
#: (scenario digest, seed) -> the built original context
_CONTEXTS: LRUCache[tuple[str, int], ContextState] = LRUCache(1)
#: settings key -> the one EpisodeSettings (and its memo of strategy results) per config
_SETTINGS: LRUCache[str, EpisodeSettings] = LRUCache(16)
#: (settings key, id(state)) -> (state, observation, action mask); the state is kept in
#: the entry and compared by identity, so a reused id() never hits
_VIEWS: LRUCache[tuple[str, int], tuple[ContextState, np.ndarray, np.ndarray]] = LRUCache(1)


def _shared_settings(config: OverflowConfig) -> tuple[str, EpisodeSettings]:
    """(key, the process's EpisodeSettings) for this validated config, so envs share
    strategy results; pooled envs share their own (a live env's memo never holds a pool's)."""
    key = hashlib.sha256(f"{config.episode_json()} pool={config.pool}".encode()).hexdigest()
    settings = _SETTINGS.get(key)
    if settings is None:
        settings = EpisodeSettings.of(config)
        _SETTINGS.put(key, settings)
    return key, settings


def _event_dict(event: ProgressEvent) -> dict[str, Any]:
    return {
        "phase": event.phase, "message": event.message, "tokens": event.tokens, "limit": event.limit,
        "code": event.code, "progress": event.progress,
    }


_ZERO_OUTCOME = BreakingOutcome(
    success=False, used_recovery=False, coherence=1.0, coherence_delta=0.0, tokens_reduced=0, original_tokens=0,
    final_tokens=0, target_tokens=0, p1_preserved=1.0, facts_retained=1.0, rules_retained=1.0, time_ms=0.0,
)
#: every named reward term at 0 (intermediate steps pay nothing)
NO_REWARD = {**dict.fromkeys(reward_terms(_ZERO_OUTCOME), 0.0), "clamp": 0.0}


class ContextOverflowEnv(ConfiguredEnv):
    """One context-window overflow event, broken one strategy per step.

    ### Description

    Each episode is one overflowing context: a scenario drawn from the configured
    suite and a context seed drawn from ``range(contexts_per_scenario)`` (or the
    scenario's own ``contexts``; both from
    ``self.np_random``; ``reset(options={"scenario": name, "context_seed": n})``
    chooses them, ``options={"state": ContextState}`` runs a given context). Only
    contexts over the target are drawn. Each step applies one breaking strategy
    (design 001's chain and every other registered strategy the config lists) to the
    current context. The episode logic is :class:`ctxsim.episode.OverflowEpisode`,
    shared with the evaluation loop, the oracle and the deployable policy.

    ### Configuration

    :class:`OverflowConfig` declares every key with its default and meaning (the
    episode's from :class:`~ctxsim.episode_config.EpisodeConfig`); ``config=``
    overrides any of them and is validated once, with an error naming the key and
    value; ``env.config`` is the resolved config as plain data.

    ### Action Space

    ``Discrete(K)`` over ``config["actions"]``; by default every strategy of the design
    documents and the recovery modes but ``error`` (:data:`~ctxsim.episode_config.FULL_ACTIONS`,
    K = 18, in ladder order):

    | Num | Strategy id             | Num | Strategy id             | Num | Strategy id          |
    |-----|-------------------------|-----|-------------------------|-----|----------------------|
    | 0   | dedupe_tool_results     | 6   | hybrid                  | 12  | remove_low_priority  |
    | 1   | purge_errors            | 7   | summarize               | 13  | remove_oldest        |
    | 2   | supersede_writes        | 8   | summarize_old           | 14  | selective            |
    | 3   | externalize             | 9   | clear_tool_results      | 15  | drop                 |
    | 4   | content_type_chunking   | 10  | discard_low_rel         | 16  | fresh_start          |
    | 5   | compact_keep_recent     | 11  | prioritize_recent       | 17  | truncate             |

    ``ctxsim strategies`` says what each does and which design it comes from.
    ``envs/seed001.yaml`` is design 001's environment: its five strategies
    (summarize_old, prioritize_recent, content_type_chunking, discard_low_rel, hybrid)
    plus fresh_start, 3 steps.
    Action masks (sb3-contrib's ``action_masks()``, also ``info["action_mask"]`` on
    reset and every step): an action is valid iff it is not excluded by the
    budget and its strategy is ``applicable`` to the current context; a recovery
    action is valid unless excluded. While the episode runs the mask is never all
    False: when no action is valid, it allows the recovery actions (excluded or
    not), else every action, so that a masked learner can act — such a step runs
    nothing (a wasted step, as
    an invalid action of an unmasked learner is: ``info["valid_action"]`` False) and
    counts toward ``max_steps``. With ``mask_overflowing_last_step: true`` the last
    of ``max_steps`` also masks the valid actions whose result would still be over
    the target, when any action fits (so no allowed action forces the recovery).
    Once the episode is over the mask is all False: no action can run (``step``
    raises ``ResetNeeded``), and none is worked out.

    ### Observation

    ``Box(float32)`` of ``33 + K`` features, computed by
    :func:`ctxsim.observe.observe` (version ``OBSERVATION_VERSION`` = 3), the same
    function the deployable policy calls. "Tokens" are request tokens (content plus
    message framing); shares are of the units' tokens.

    | Feature             | Range   | Meaning                                                   |
    |---------------------|---------|-----------------------------------------------------------|
    | usage               | [0, 4]  | total tokens / limit                                      |
    | overflow            | [-1, 4] | total tokens / target - 1 (> 0: still over the target)    |
    | log_tokens          | [0, 1]  | log10(1 + total tokens) / 7                               |
    | target_share        | [0, 1]  | target / limit (1, or the warning threshold)              |
    | type_<t>            | [0, 1]  | token share of each unit type (message, code, plan_ref,   |
    |                     |         | log, tool_result, summary, placeholder, other)            |
    | priority_p1..p3     | [0, 1]  | token share of P1, P2, P3 units                           |
    | pinned_share        | [0, 1]  | token share of pinned units                               |
    | log_units           | [0, 1]  | log10(1 + units) / 4                                      |
    | log_p1_units        | [0, 1]  | log10(1 + P1 units) / 4                                   |
    | p1_over_target      | [0, 4]  | P1 tokens / target (> 1: keeping every P1 unit cannot fit)|
    | pinned_over_target  | [0, 4]  | pinned tokens / target                                    |
    | largest_unit_share  | [0, 1]  | the largest unit's share of the tokens                    |
    | relevance_mean      | [0, 1]  | token-weighted mean relevance to the task (max-normalized)|
    | relevance_min       | [0, 1]  | lowest max-normalized relevance                           |
    | relevance_max       | [0, 1]  | highest raw cosine similarity to the task                 |
    | relevance_low_share | [0, 1]  | token share of units under 0.5 normalized relevance       |
    | old_share           | [0, 1]  | token share of the oldest 60 % of units                   |
    | duplicate_share     | [0, 1]  | token share of older copies of identical tool calls       |
    | superseded_share    | [0, 1]  | token share of units holding file writes read back or     |
    |                     |         | written again later (write results, shell-write calls)    |
    | error_share         | [0, 1]  | token share of failed tool calls                          |
    | summarized_share    | [0, 1]  | token share of summaries (summary_depth > 0)              |
    | summary_depth       | [0, 1]  | deepest summary_depth / 4                                 |
    | steps_taken         | [0, 1]  | strategies applied in this episode / max_steps            |
    | applied_<id>        | {0, 1}  | one per action: this episode applied that strategy        |
    | steps_remaining     | [0, 1]  | (max_steps - steps taken) / max_steps                     |

    ### Rewards

    Design 001's ``computeRLReward`` (:mod:`ctxsim.reward`, weights ``config["reward"]``),
    paid once on the last step (0 before): success +1 + 0.5·coherence_delta +
    0.3·tokens_reduced/original + 0.2·P1_preserved; failure −1; recovery used −0.7;
    latency over 500 ms −0.1 per second of the episode's total latency; clamped to
    [−2, 2]. That is the default profile ``seed001``; ``reward: {profile: grounded}``
    adds, given success, ``probes · (probe_score − 1)`` (weight 1.5 unless ``probes``
    is set; ``envs/grounded.yaml``). ``info["rewards"]`` holds each named term (``clamp`` is what the clamp
    removed), summing to the reward; ``info["outcome"]`` the full
    :class:`~ctxsim.metrics.BreakingOutcome` (coherence, P1 preserved, facts and
    rules retained, probe score overall and per kind, time_ms = the steps' modeled latencies, or wall time with
    ``latency.measured``).

    ### Termination

    The episode terminates when the context fits the target (``target``: the limit,
    or the warning threshold), when a recovery action ran, or when ``max_steps``
    strategies ran and it is still over the target: then ``recovery_mode`` is
    applied (fresh_start | truncate) and the outcome is a failure that used
    recovery (mode ``error``: a failure without recovery, context unchanged).
    ``truncated`` is always False: episodes end by themselves within max_steps + 1
    strategy runs.

    ### Info

    On reset and every step: ``scenario`` and ``seed`` (the drawn context's, or those a
    context given as ``options["state"]`` carries), ``tokens`` (the current context's),
    ``limit``, ``target_tokens``, ``chain`` (the strategy ids stepped so far),
    ``events`` (design 001's progress messages of the last step, each a dict of phase,
    message, tokens, limit, code and progress; on reset the length check), ``time_ms``
    (the episode's latency so far) and ``action_mask``. After a step also ``action``
    (the strategy id stepped), ``valid_action`` (the strategy was valid on the context
    and ran; False: a wasted step, nothing ran — a valid action that
    ``mask_overflowing_last_step`` leaves out of the mask still runs), ``latency_ms``
    (the stepped strategy's), ``forced_recovery`` (the ``recovery_mode`` that
    ``max_steps`` forced on this step, else None; its latency counts in ``time_ms``) and
    ``rewards`` (the named terms, all 0 before the last step); on the last step
    ``outcome``. Once an episode ends the mask is all False (no action can run): a
    Gymnasium vector env that resets its finished envs on the next step (its default
    autoreset mode) reports that mask in between, so a caller that samples from
    ``info["action_mask"]`` there makes the env with ``autoreset_mode=SAME_STEP``
    (SB3's vector envs reset before they ask for masks).

    ### Rendering

    ``render_mode="ansi"``: design 001's sidebar as text (the last step's phase
    messages, tokens before → after / limit, a progress bar, the P1 badge).

    ### Registered Configurations

    - ``ctxsim/ContextOverflow-v0``; variants are config overrides in ``envs/*.yaml``
      (``default``, ``seed001``, ``full-actions``, ``warning-target``, ...).
    """

    env_id = ENV_ID
    config_model = OverflowConfig

    def __init__(self, config: dict[str, Any] | None = None, render_mode: str | None = None):
        super().__init__(config, render_mode)
        self.episode: OverflowEpisode | None = None
        self.scenario: str = ""
        self.context_seed: int | None = None
        self._last: Step | None = None
        self._events: tuple[ProgressEvent, ...] = ()

    # ---- configuration (HighwayEnv's pattern: OverflowConfig holds every parameter) ----
    def configure(self, config: dict[str, Any] | None) -> None:
        super().configure(config)
        self._digests = {s.name: scenario_digest(s) for s in self._suite}
        self._settings_key, self._settings = _shared_settings(self._checked)
        self._pool = self._attach_pool()
        wanted = min(self.config["cache_size"], self.context_count)
        _CONTEXTS.maxsize = max(_CONTEXTS.maxsize, wanted)
        _VIEWS.maxsize = max(_VIEWS.maxsize, self.config["cache_size"])

    # ---- contexts -----------------------------------------------------------
    def _attach_pool(self) -> Pool | None:
        """The context pool of this config (loaded or built) answering the settings' memo."""
        if not self.config["pool"]:
            return None
        # built in this process when missing (safe anywhere: no worker processes);
        # `ctxsim pool` and `ctxsim train` build it with every core beforehand
        pool = ensure_pool(self.config, self._suite, workers=1)[0]
        self._settings.preload(pool.memo)
        return pool

    def _context(self, scenario: Scenario, seed: int) -> ContextState:
        """The original context of (scenario, seed), from the pool or the process cache when there."""
        key = (self._digests[scenario.name], seed)
        if self._pool is not None and key in self._pool.contexts:
            return self._pool.contexts[key]
        if self.config["cache_size"] == 0:
            return build_context(scenario, seed)
        state = _CONTEXTS.get(key)
        if state is None:
            state = build_context(scenario, seed)
            _CONTEXTS.put(key, state)
        return state

    @property
    def episode_settings(self) -> EpisodeSettings:
        """The episode settings of this env's config (shared by envs of the same config;
        their memo holds the pool's transitions when the env has one)."""
        return self._settings

    def contexts(self) -> Iterator[ContextState]:
        """Every context this env draws from (each scenario's context seeds, pooled
        ones from the pool) that overflows the target, in suite and seed order."""
        for scenario in self._suite:
            for seed in range(scenario.context_count(self.config["contexts_per_scenario"])):
                state = self._context(scenario, seed)
                if self._overflows(state):
                    yield state

    def observation_of(self, state: ContextState) -> np.ndarray:
        """The observation of any context under this env's config (pooled when held)."""
        pooled = self._pool.views.get(state.fingerprint) if self._pool is not None else None
        return pooled[0].copy() if pooled is not None else observe(state, self.obs_config)

    def _overflows(self, state: ContextState) -> bool:
        return state.total_tokens > self._settings.target_tokens(state)

    def _draw(self, options: dict[str, Any]) -> tuple[str, int | None, ContextState]:
        if "state" in options:
            state = options["state"]
            if not isinstance(state, ContextState):
                raise ConfigError(f"expected a ContextState, got {describe_value(state)}", key="options.state")
            if not self._overflows(state):
                raise ScenarioError(
                    f"the given context fits the target ({state.total_tokens} <= "
                    f"{self._settings.target_tokens(state)} tokens); nothing to break", key="options.state",
                )
            return state.scenario, state.seed, state
        by_name = {s.name: s for s in self._suite}
        name, seed = options.get("scenario"), options.get("context_seed")
        if name is not None and name not in by_name:
            raise ScenarioError(f"unknown scenario {name!r}; this env draws from {sorted(by_name)}", key="options.scenario")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
            raise ConfigError(f"context_seed must be a non-negative integer, got {describe_value(seed)}", key="options.context_seed")
        for _ in range(MAX_DRAWS):
            scenario = by_name[name] if name is not None else self._suite[int(self.np_random.integers(len(self._suite)))]
            ctx_seed = int(seed) if seed is not None else int(self.np_random.integers(scenario.context_count(self.config["contexts_per_scenario"])))
            state = self._context(scenario, ctx_seed)
            if self._overflows(state):
                return scenario.name, ctx_seed, state
            if seed is not None:
                raise ScenarioError(
                    f"context {scenario.name!r} seed {ctx_seed} fits the target "
                    f"({state.total_tokens} <= {self._settings.target_tokens(state)} tokens); nothing to break",
                    key="options.context_seed",
                )
        raise ScenarioError(f"no overflowing context in {MAX_DRAWS} draws from {[s.name for s in self._suite] if name is None else [name]}", key="scenarios")

    # ---- gymnasium API ------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.scenario, self.context_seed, original = self._draw(reset_options(options, ("scenario", "context_seed", "state")))
        self.episode = OverflowEpisode(original, self._settings)
        self._last = None
        self._events = (
            ProgressEvent("detection", "Checking context length…", original.total_tokens, original.limit, "TOKEN_LIMIT_EXCEEDED"),
        )
        return self._observe(), self._info()

    def step(self, action):
        if self.episode is None or self.episode.done:
            raise gym.error.ResetNeeded("call reset() before step()" if self.episode is None else "the episode is over; call reset()")
        index = discrete_action(action, len(self.actions))
        step = self.episode.step(index)
        self._last = step
        self._events = self._step_events(step)
        info = self._info(step, step.ran)
        return self._observe(), float(step.reward), step.done, False, info

    def action_masks(self) -> np.ndarray:
        """Valid actions of the current context (sb3-contrib's MaskablePPO protocol)."""
        if self.episode is None:
            raise gym.error.ResetNeeded("call reset() before action_masks()")
        return self._view()[1].copy()

    # ---- helpers -----------------------------------------------------------------
    @property
    def state(self) -> ContextState:
        """The current context."""
        if self.episode is None:
            raise gym.error.ResetNeeded("call reset() first")
        return self.episode.state

    def _view(self) -> tuple[np.ndarray, np.ndarray]:
        """(observation, action mask) of the current state; memoized (both are pure)."""
        state, steps = self.episode.state, self.episode.steps_taken
        if self._pool is not None and steps == len(state.history):  # pooled views observe the whole history
            pooled = self._pool.views.get(state.fingerprint)
            if pooled is not None:
                return pooled
        key = (self._settings_key, id(state), steps)
        hit = _VIEWS.get(key) if self.config["cache_size"] else None
        if hit is not None and hit[0] is state:
            return hit[1], hit[2]
        view = (state, observe(current_break(state, steps), self.obs_config), self.episode.action_mask())
        if self.config["cache_size"]:
            _VIEWS.put(key, view)
        return view[1], view[2]

    def _observe(self) -> np.ndarray:
        return self._view()[0].copy()

    def _step_events(self, step: Step) -> tuple[ProgressEvent, ...]:
        events = step.result.events if step.result is not None else ()
        if step.forced_recovery == "error":
            before = step.result.state
            events += (ProgressEvent("recovery", f"{BREAKER_FAILED}: breaking failed, recovery_mode is 'error'", before.total_tokens, before.limit, BREAKER_FAILED),)
        elif step.forced_recovery:
            events += self._settings.apply(step.forced_recovery, step.result.state).events  # memoized
        return events

    def _info(self, step: Step | None = None, valid: bool = True) -> dict[str, Any]:
        episode = self.episode
        info: dict[str, Any] = {
            "scenario": self.scenario,
            "seed": self.context_seed,
            "tokens": episode.state.total_tokens,
            "limit": episode.state.limit,
            "target_tokens": episode.target_tokens,
            "chain": list(episode.chain),
            "events": [_event_dict(e) for e in self._events],
            "time_ms": episode.latency_ms,
            "action_mask": self._view()[1].copy(),
        }
        if step is None:
            return info
        info.update(action=step.action, valid_action=valid, latency_ms=step.latency_ms, forced_recovery=step.forced_recovery)
        if step.done:
            terms = episode.reward_terms
            terms["clamp"] = step.reward - sum(terms.values())
            info["rewards"] = terms
            info["outcome"] = episode.outcome.to_dict()
        else:
            info["rewards"] = dict(NO_REWARD)
        return info

    def _render_text(self) -> str:
        episode = self.episode
        if episode is None:
            return "(not reset)"
        state, original = episode.state, episode.original
        width = 30
        usage = state.total_tokens / state.limit
        filled = min(width, round(usage * width))
        lines = [
            f"{ENV_ID}  scenario={self.scenario} seed={self.context_seed}  step {episode.steps_taken}/{self._settings.max_steps}",
            *(f"  {e.message}" for e in self._events),
            f"Tokens: {original.total_tokens:,} → {state.total_tokens:,} / {state.limit:,} (target {episode.target_tokens:,})",
            f"[{'█' * filled}{'░' * (width - filled)}] {usage:.0%}",
        ]
        if any(u.priority == 1 for u in state.units) and state.priority_areas:
            lines.append(f"P1: {state.priority_areas[0]}")
        if episode.done:
            o = episode.outcome
            lines.append(
                f"Done: {'success' if o.success else 'failure'}{' (recovery)' if o.used_recovery else ''}, "
                f"coherence {o.coherence:.2f}, P1 {o.p1_preserved:.0%}, facts {o.facts_retained:.0%}, {o.time_ms:.0f} ms"
            )
        return "\n".join(lines)

    # ---- pickling: process caches (and the pool) are not part of an env ------------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_pool"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._settings_key, self._settings = _shared_settings(self._checked)
        self._pool = self._attach_pool()
        if self.episode is not None:
            self.episode.settings = self._settings
