"""``ctxsim/ConversationStream-v0``: a whole conversation whose context overflows again and again."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import gymnasium as gym
import numpy as np
from pydantic import Field, model_validator

from ...cache import LRUCache
from ...episode_config import SEED001_ACTIONS, ActionIds, StepCount
from ...errors import ConfigError, ScenarioError, describe_value
from ...model import MAX_TOKENS, ContextState
from ..scenarios import Scenario
from ..stream import (
    Conversation,
    ProbeConfig,
    PromptCacheModel,
    RecoveryTriggers,
    RehydrationConfig,
    StreamRewardWeights,
    StreamSession,
    StreamStep,
    conversation_for,
    stream_settings,
)
from ..stream.actions import action_names, depth_mask, step_flat
from ..stream.features import SESSION_FEATURES, stream_observation
from ..stream.session import TRIGGERED_RECOVERY
from ..pool import scenario_digest
from ...validation import KeyedValueError
from .base import ConfiguredEnv, discrete_action, reset_options
from .overflow import OverflowConfig

ENV_ID = "ctxsim/ConversationStream-v0"
#: random draws of (scenario, seed) tried before giving up on finding a conversation that overflows
MAX_DRAWS = 200
#: the default break depths (shares of the limit): design 001's warning threshold, then deeper
DEFAULT_BREAK_DEPTHS = (0.8, 0.6, 0.4)
#: one depth and no session features: the environment as it was before either (ContextOverflow-v0's
#: actions, masks and observation on every event)
ONE_DEPTH = {"break_depths": [DEFAULT_BREAK_DEPTHS[0]], "session_features": False}


class StreamConfig(OverflowConfig):
    """ConversationStream-v0's config: ContextOverflow-v0's keys (same meaning and
    checks; ``contexts_per_scenario`` counts conversation seeds, ``cache_size`` also
    bounds the cache of conversations) with ``target`` fixed to ``warning`` and no
    pool, plus the long-horizon keys."""

    actions: ActionIds = SEED001_ACTIONS
    """Strategy ids of each depth's block of actions (default: design 001's five and ``fresh_start``)."""
    max_steps: StepCount = 3
    """Strategies per event before the recovery is forced (design 001: 3)."""
    target: Literal["warning"] = "warning"
    """Always ``warning``: an overflow event is a crossing of the warning threshold."""
    pool: Literal[False] = False
    """Always false: conversations grow turn by turn, nothing to precompute."""
    turns: Annotated[int, Field(ge=2, le=10_000)] = 60
    """Turns per conversation."""
    limit: Annotated[int, Field(gt=0, le=MAX_TOKENS)] | None = None
    """Context limit in tokens (null: the scenario's)."""
    probes: ProbeConfig = Field(default_factory=ProbeConfig)
    """When probes are asked (:class:`~ctxsim.lab.stream.ProbeConfig`)."""
    rehydration: RehydrationConfig = Field(default_factory=RehydrationConfig)
    """Design 002's rehydration limits (null: 8 % / 4 % of the limit, design 002 scaled)."""
    recovery_triggers: RecoveryTriggers = Field(default_factory=RecoveryTriggers)
    """Design 001's fresh-start triggers (over-hits in a window, milestones)."""
    prompt_cache: PromptCacheModel = Field(default_factory=PromptCacheModel)
    """Prices and rules of the prompt cache."""
    stream_reward: StreamRewardWeights = Field(default_factory=StreamRewardWeights)
    """Weights of the stream's reward terms (overflow events, probes, cache hits)."""
    break_depths: Annotated[
        tuple[Annotated[float, Field(gt=0, le=1)], ...], Field(min_length=1, max_length=8, strict=False)
    ] = DEFAULT_BREAK_DEPTHS
    """How deep an event may be broken: shares of the limit, strictly decreasing; an event is
    broken to the lower of the warning threshold and the chosen share × limit, so a share at
    or above the threshold (0.8 by default) is the threshold itself. Each adds a block of
    ``actions`` to the action space; ``[0.8]`` is one depth, the threshold."""
    session_features: bool = True
    """Append the session features (:mod:`ctxsim.lab.stream.features`) to the observation."""

    @model_validator(mode="after")
    def _stream_consistent(self) -> StreamConfig:
        for i in range(1, len(self.break_depths)):
            if self.break_depths[i] >= self.break_depths[i - 1]:
                raise KeyedValueError(f"break_depths[{i}]", self.break_depths[i],
                                      f"must be below break_depths[{i - 1}] ({self.break_depths[i - 1]}): depths go deeper")
        for i, turn in enumerate(self.probes.turns):
            if turn >= self.turns:
                raise KeyedValueError(f"probes.turns[{i}]", turn, f"must be under turns ({self.turns})")
        if TRIGGERED_RECOVERY in self.budget.excluded and (
            self.recovery_triggers.max_over_hits is not None or self.recovery_triggers.milestone_fresh_start
        ):
            raise KeyedValueError("budget.excluded", list(self.budget.excluded),
                                  f"the recovery triggers need '{TRIGGERED_RECOVERY}'; turn them off to exclude it")
        if self.limit is not None:
            for s in self.suite:
                if self.limit < s.min_limit:
                    raise KeyedValueError("limit", self.limit, f"under the min_limit {s.min_limit} of scenario {s.name!r}")
        return self


# ---- process-level caches (module globals: never pickled with an env) -------------
#: (scenario digest, seed, turns, limit, probes) -> the conversation
_CONVERSATIONS: LRUCache[tuple, Conversation] = LRUCache(1)


def build_conversation(scenario: Scenario, seed: int, config: StreamConfig) -> Conversation:
    """The conversation of (scenario, seed) under a validated config (process cache when ``cache_size`` > 0)."""
    if config.cache_size == 0:
        return conversation_for(scenario, seed, config.turns, config.probes, config.limit)
    key = (scenario_digest(scenario), seed, config.turns, config.limit, config.probes.model_dump_json())
    conv = _CONVERSATIONS.get(key)
    if conv is None:
        conv = conversation_for(scenario, seed, config.turns, config.probes, config.limit)
        _CONVERSATIONS.put(key, conv)
    return conv


def make_session(conversation: Conversation, config: StreamConfig) -> StreamSession:
    """A session of ``conversation`` under a validated config (settings shared per
    process), one settings pair per break depth."""
    (settings, skip), *deeper = depth_settings(config)
    return StreamSession(
        conversation, settings, skip, deeper=tuple(deeper), rehydration=config.rehydration, triggers=config.recovery_triggers,
        cache=config.prompt_cache, weights=config.stream_reward,
    )


def depth_settings(config: StreamConfig) -> list[tuple]:
    """The (normal, skip-aggressive) settings of each of the config's break depths, in order."""
    return [stream_settings(config, depth) for depth in config.break_depths]


NO_TERMS = {"event": 0.0, "triggered": 0.0, "overflow": 0.0, "probes": 0.0, "cache": 0.0}


class ConversationStreamEnv(ConfiguredEnv):
    """A whole generated conversation arriving turn by turn; every overflow is one event to break.

    ### Description

    Each episode is one conversation (:class:`ctxsim.lab.stream.Conversation`): a scenario
    of the configured suite and a seed in ``range(contexts_per_scenario)`` (or the
    scenario's own ``contexts``; both from
    ``self.np_random``), streamed for ``turns`` turns by the generator (transcript
    scenarios: their own turns). ``reset(options={"scenario": name, "context_seed": n})``
    chooses them, ``options={"conversation": Conversation}`` plays a hand-built one.
    The environment advances the conversation by itself (the logic is
    :class:`ctxsim.lab.stream.StreamSession`, shared with :func:`ctxsim.lab.stream.evaluate_stream.evaluate_stream`);
    ``reset`` and ``step`` return when the context crosses the warning threshold
    (design 001: 80 % of the limit): an *overflow event*, one
    :class:`~ctxsim.episode.OverflowEpisode` with target ``warning``. The agent
    applies strategies until the context is back under the threshold (or
    ``max_steps`` strategies ran: forced ``recovery_mode``), then the conversation
    goes on to the next event. Along the way (see :mod:`ctxsim.lab.stream.session`):

    - facts, rules, written files and the task state are planted and *probed* later
      (``probes.turns``; the four kinds recall, decision, artifact, continuation in
      turn): a probe is answered iff its value is in the prompt of that turn;
    - a turn that references externalized content (its artifact id, or the same file
      or URL) gets it back *ephemerally* from a reserved budget (design 002:
      ``rehydration``); on such a turn the aggressive strategies (externalize, drop)
      do nothing and are masked; repeated rehydrations of one subject are loops;
    - design 001's triggers: the third over-hit within an hour of simulated time (unit
      timestamps) is a forced fresh start; optionally, completing a P1 To Do item too;
    - each turn is a provider call: the prompt's unchanged prefix since the previous
      call is the cache hit (``prompt_cache`` prices it).

    ### Action Space

    ``Discrete(K × D)``: a strategy of ``config["actions"]`` (``K``, ContextOverflow-v0's
    ids in its order) and a break depth of ``config["break_depths"]`` (``D``; shares
    of the limit, default 0.8, 0.6, 0.4). Action ``a`` is strategy ``a % K`` at depth
    ``a // K`` (:mod:`ctxsim.lab.stream.actions`; ``env.action_names`` spells them
    ``<id>@<depth>``). An event is broken to the lower of the warning threshold and
    depth × limit: the first depth, 0.8, is design 001's threshold, as on
    ContextOverflow-v0; deeper ones leave more room before the next overflow and ask
    more of the chain (success, and ``max_steps``' forced recovery, are measured
    against the depth's target). With the defaults:

    | Num      | Strategy id           | Num       | Strategy id     |
    |----------|-----------------------|-----------|-----------------|
    | 0, 6, 12 | summarize_old         | 3, 9, 15  | discard_low_rel |
    | 1, 7, 13 | prioritize_recent     | 4, 10, 16 | hybrid          |
    | 2, 8, 14 | content_type_chunking | 5, 11, 17 | fresh_start     |

    (0–5 at 0.8, 6–11 at 0.6, 12–17 at 0.4.) ``action_masks()`` (also
    ``info["action_mask"]``): before an event's first step, each depth's block is
    the event's mask at that depth (valid iff not excluded by the budget and
    ``applicable`` toward that target — on a turn that rehydrated, strategies see
    ``skip_aggressive`` (design 002), so externalize and drop are masked; a recovery
    action is always valid); the first step fixes the event's depth, and later
    steps allow only that block (an unmasked learner's action of another block runs
    its strategy at the event's depth). Once the conversation is over the mask is
    all False: no action can run (``step`` raises ``ResetNeeded``). With
    ``break_depths: [0.8]`` and ``session_features: false`` (``ONE_DEPTH``) the
    actions, masks and observation are exactly ContextOverflow-v0's, so policies
    transfer between the two.

    ### Observation

    :func:`ctxsim.observe.observe` of the event's current context with
    ContextOverflow-v0's :class:`~ctxsim.observe.ObservationConfig` for target
    ``warning`` (version ``OBSERVATION_VERSION``; feature table in
    :class:`~ctxsim.lab.environments.overflow.ContextOverflowEnv`), then, with
    ``session_features`` (default), seven features of the session in [0, 1]
    (:mod:`ctxsim.lab.stream.features`: over-hits toward the fresh-start trigger and
    when the oldest leaves its window, share of the conversation to come, turns
    since the last event, tokens a turn brings, the last and this event's depths).
    Each event starts with an empty strategy history, so the step features count this
    event's steps. Other stream signals are in ``info``. After the last step: the
    final context.

    ### Rewards

    Sum of named terms (``info["rewards"]``), all 0 until an event ends: ``event`` —
    design 001's reward of the event this step ended (``OverflowEpisode.reward``, config
    ``reward``); ``triggered`` — the seed rewards of the events the environment then
    resolved itself (forced fresh starts) before the next decision; ``overflow`` —
    ``stream_reward.overflow_event`` (−1.5) per event among those (an overflow is a
    cost: every successful break has a positive seed reward of at most 1.5, so with
    a smaller cost a policy would earn by overflowing often); and on the step that
    ends the conversation ``probes`` = ``stream_reward.probes`` (5.0) × share of
    probes answered (1 when none was asked) and ``cache`` = ``stream_reward.cache``
    (0.0) × prompt-cache hit rate.

    ### Termination

    ``terminated`` when the conversation's last turn has been played (after the last
    event). ``truncated`` is always False. A drawn conversation with no overflow event
    is redrawn (a given one raises ScenarioError).

    ### Info

    Every step: ``scenario``, ``seed``, ``turn``, ``turns``, ``tokens``, ``limit``,
    ``target_tokens`` and ``depth`` (the pending event's), ``chain`` (this event's), ``action_mask``,
    ``skip_aggressive``, ``rehydrated`` (artifacts injected this turn), ``stream``
    (running totals: overflow_events, over_hit_fresh_starts, forced_recoveries,
    compactions, probes_asked / probes_answered / probe_share, probe_share_<kind>
    per probe kind, facts_retained, break_depth (mean target / limit of the events),
    max_summary_depth, max_summary_tokens, rehydrations, rehydration_loops, …,
    cache_hit_rate, tokens_sent, cached_tokens, cost_usd), ``rewards``; after an
    action also ``action``, ``valid_action``, ``latency_ms``, ``forced_recovery``;
    when an event ends ``outcome`` (its :class:`~ctxsim.metrics.BreakingOutcome`);
    at the end ``events`` (one record per event).

    ### Registered Configurations

    - ``ctxsim/ConversationStream-v0``; ``envs/stream.yaml`` is its spec file.
    """

    env_id = ENV_ID
    config_model = StreamConfig

    def __init__(self, config: dict[str, Any] | None = None, render_mode: str | None = None):
        super().__init__(config, render_mode)
        self.session: StreamSession | None = None
        self.scenario: str = ""
        self.context_seed: int | None = None
        self._last: StreamStep | None = None

    # ---- configuration (StreamConfig holds every parameter) ---------------------------------
    def configure(self, config: dict[str, Any] | None) -> None:
        super().configure(config)
        wanted = min(self.config["cache_size"], self.context_count)
        _CONVERSATIONS.maxsize = max(_CONVERSATIONS.maxsize, wanted)
        self.action_space = gym.spaces.Discrete(len(self.actions) * len(self.depths))
        if self.config["session_features"]:
            box = self.observation_space
            extra = len(SESSION_FEATURES)
            self.observation_space = gym.spaces.Box(
                np.concatenate([box.low, np.zeros(extra, np.float32)]), np.concatenate([box.high, np.ones(extra, np.float32)]),
                dtype=np.float32,
            )

    @property
    def depths(self) -> tuple[float, ...]:
        """The break depths (shares of the limit), shallowest first."""
        return tuple(self.config["break_depths"])

    @property
    def action_names(self) -> list[str]:
        """``<strategy id>@<depth>`` for every action, in index order (:mod:`ctxsim.lab.stream.actions`)."""
        return action_names(self.actions, self.depths)

    @property
    def feature_names(self) -> list[str]:
        own = list(SESSION_FEATURES) if self.config["session_features"] else []
        return super().feature_names + own

    # ---- conversations ------------------------------------------------------------------
    def _draw(self, options: dict[str, Any]) -> tuple[str, int | None, StreamSession]:
        if "conversation" in options:
            conv = options["conversation"]
            if not isinstance(conv, Conversation):
                raise ConfigError(f"expected a Conversation, got {describe_value(conv)}", key="options.conversation")
            return conv.scenario, conv.seed, self._overflowing(make_session(conv, self._checked), "options.conversation")
        by_name = {s.name: s for s in self._suite}
        name, seed = options.get("scenario"), options.get("context_seed")
        if name is not None and name not in by_name:
            raise ScenarioError(f"unknown scenario {name!r}; this env draws from {sorted(by_name)}", key="options.scenario")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
            raise ConfigError(f"context_seed must be a non-negative integer, got {describe_value(seed)}", key="options.context_seed")
        for _ in range(MAX_DRAWS):
            scenario = by_name[name] if name is not None else self._suite[int(self.np_random.integers(len(self._suite)))]
            conv_seed = int(seed) if seed is not None else int(self.np_random.integers(scenario.context_count(self.config["contexts_per_scenario"])))
            session = make_session(build_conversation(scenario, conv_seed, self._checked), self._checked)
            if session.episode is not None:
                return scenario.name, conv_seed, session
            if seed is not None:
                self._overflowing(session, "options.context_seed")
        raise ScenarioError(f"no conversation with an overflow event in {MAX_DRAWS} draws", key="scenarios")

    @staticmethod
    def _overflowing(session: StreamSession, key: str) -> StreamSession:
        if session.episode is None:
            c = session.conversation
            raise ScenarioError(
                f"conversation {c.scenario or '(built)'} seed {c.seed} never crosses the warning threshold "
                f"({session.state.warning_tokens} tokens) in {len(c.turns)} turns; nothing to break", key=key,
            )
        return session

    # ---- gymnasium API --------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.scenario, self.context_seed, self.session = self._draw(reset_options(options, ("scenario", "context_seed", "conversation")))
        self._last = None
        return self._observe(), self._info()

    def step(self, action):
        if self.session is None or self.session.done:
            raise gym.error.ResetNeeded(
                "call reset() before step()" if self.session is None else "the conversation is over; call reset()")
        index = discrete_action(action, self.action_space.n)
        out = step_flat(self.session, index)
        self._last = out
        info = self._info(out, out.step.ran)
        return self._observe(), float(out.reward), out.done, False, info

    def action_masks(self) -> np.ndarray:
        """Valid actions of the pending event (sb3-contrib's MaskablePPO protocol);
        all False once the conversation is over: no action can run (``step`` raises
        ResetNeeded)."""
        if self.session is None:
            raise gym.error.ResetNeeded("call reset() before action_masks()")
        if self.session.done:
            return np.zeros(self.action_space.n, dtype=bool)
        return depth_mask(self.session)

    # ---- helpers ------------------------------------------------------------------------------
    @property
    def state(self) -> ContextState:
        """The current context: the pending event's, else the conversation's."""
        if self.session is None:
            raise gym.error.ResetNeeded("call reset() first")
        return self.session.episode.state if self.session.episode is not None else self.session.state

    def _observe(self) -> np.ndarray:
        return stream_observation(self.session, self.obs_config, self.config["session_features"])

    def _info(self, out: StreamStep | None = None, valid: bool = True) -> dict[str, Any]:
        session = self.session
        episode = session.episode
        info: dict[str, Any] = {
            "scenario": self.scenario,
            "seed": self.context_seed,
            "turn": session.turn,
            "turns": len(session.conversation.turns),
            "tokens": self.state.total_tokens,
            "limit": self.state.limit,
            "target_tokens": episode.target_tokens if episode is not None else self.state.warning_tokens,
            "depth": self.depths[session.event_depth] if episode is not None else None,
            "chain": list(episode.chain) if episode is not None else [],
            "action_mask": self.action_masks(),
            "skip_aggressive": session.skip_aggressive,
            "rehydrated": len(session.rehydrated),
            "stream": session.metrics(),
            "rewards": dict(NO_TERMS) if out is None else dict(out.terms),
        }
        if out is None:
            return info
        step = out.step
        info.update(action=step.action, valid_action=valid, latency_ms=step.latency_ms, forced_recovery=step.forced_recovery)
        if out.event_done:
            info["outcome"] = out.outcome.to_dict()
        if out.done:
            info["events"] = session.event_dicts()
        return info

    def _render_text(self) -> str:
        session = self.session
        if session is None:
            return "(not reset)"
        state, m = self.state, session.metrics()
        width = 30
        usage = state.total_tokens / state.limit
        filled = min(width, round(usage * width))
        episode = session.episode
        lines = [
            f"{ENV_ID}  scenario={self.scenario} seed={self.context_seed}  turn {session.turn + 1}/{m['turns']}  "
            f"event {m['overflow_events']}",
            f"Tokens: {state.total_tokens:,} / {state.limit:,} (warning {state.warning_tokens:,})",
            f"[{'█' * filled}{'░' * (width - filled)}] {usage:.0%}",
        ]
        if episode is not None:
            lines.append(f"Event chain (to {episode.target_tokens:,} tokens): {' > '.join(episode.chain) or '(none yet)'}"
                         + ("  [rehydration turn: externalize/drop masked]" if session.skip_aggressive else ""))
        lines.append(
            f"Probes {m['probes_answered']}/{m['probes_asked']}  cache hit {m['cache_hit_rate']:.0%}  "
            f"sent {m['tokens_sent']:,} tokens (${m['cost_usd']:.4f})  summary depth {m['max_summary_depth']}  "
            f"rehydrations {m['rehydrations']} (loops {m['rehydration_loops']})  fresh starts {m['over_hit_fresh_starts']}"
        )
        if session.done:
            lines.append("Conversation over.")
        return "\n".join(lines)

    # ---- pickling: process caches are not part of an env ------------------------------------
    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        session = self.session
        if session is not None:
            (session.settings, session.skip_settings), *deeper = depth_settings(self._checked)
            session.deeper = tuple(deeper)
            if session.episode is not None:
                skip = session.episode.settings.skip_aggressive
                session.episode.settings = session.depth_settings(session.event_depth, skip)
