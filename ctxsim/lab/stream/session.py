"""One conversation played turn by turn, with every overflow event broken as an
:class:`~ctxsim.episode.OverflowEpisode` (the long-horizon logic; no gymnasium here).

Each turn ``t`` of the :class:`~ctxsim.lab.stream.conversation.Conversation`:

1. its units (and the probe asked at ``t``, if any) are appended to the compacted
   context; the facts they plant join its fact table;
2. design 002's rehydration (:mod:`.rehydration`) injects the externalized artifacts
   the turn references, ephemerally, from the reserved budget;
3. if the context (rehydrated content excluded: it uses the reserve) is over the
   warning threshold (design 001: 80 % of the limit), an *overflow event* starts: an
   ``OverflowEpisode`` with target ``warning``, whose strategies the agent chooses
   until it is under the threshold or ``max_steps`` forced recovery. Before its first
   step the agent may choose a deeper *break depth* (:meth:`StreamSession.choose_depth`):
   the event is then broken to that share of the limit instead. On a turn
   that rehydrated, the event runs with ``skip_aggressive`` settings (design 002:
   externalize and drop do nothing and are masked). Design 001's trigger: when this is
   the third over-hit within ``window_seconds`` of simulated time (more than
   ``max_over_hits`` = 2 in an hour), the event is a forced fresh start instead, and
   the over-hit count starts again;
4. the provider call: the prompt is the context with the rehydrated units placed
   before the turn's own units; the prompt cache (:mod:`.cache`) accounts it, and a
   probe is answered iff its fact's value is in that prompt;
5. a milestone (a To Do item ``- [x] P1: …`` checked off for the first time) is
   counted, and with ``milestone_fresh_start`` the context is replaced by a fresh
   start (design 001's milestone trigger).

Rewards (:class:`StreamRewardWeights`), paid on the agent's steps: the step that ends
an event pays that event's seed reward (``OverflowEpisode.reward``), the seed rewards
of the events the session then resolved by itself (forced fresh starts), and
``overflow_event`` per event among them; the step that ends the conversation adds
``probes`` × share of probes answered (1 when none was asked) and ``cache`` × cache
hit rate.
"""

from __future__ import annotations

import copy
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from ...cache import LRUCache
from ...episode import EpisodeSettings, OverflowEpisode, Step
from ...episode_config import EpisodeConfig
from ...errors import RecoveryError
from ...metrics import BreakingOutcome
from ...model import STATED_KINDS, ContextState, ContextUnit
from ...probes import PROBE_KINDS, probe_kind, share_answered
from ...strategies import StrategyContext
from .cache import PromptCache, PromptCacheModel
from .conversation import Conversation
from .probes import Probe
from .rehydration import Rehydrated, RehydrationConfig, Rehydrator

#: the recovery design 001's triggers (over-hits, milestones) force
TRIGGERED_RECOVERY = "fresh_start"
#: a To Do item checked off with priority 1 (design 001's "P1 complete" milestone)
P1_DONE = re.compile(r"^\s*- \[x\] (P1: .+)$", re.MULTILINE)


class RecoveryTriggers(BaseModel):
    """Design 001's fresh-start triggers besides "all strategies failed".

    ``max_over_hits``: an overflow event that finds more than this many over-hits
    (its own included) within ``window_seconds`` of simulated time is a forced fresh
    start (design 001: "> 2 over-hits in 1 hour"; ``None``: off);
    ``milestone_fresh_start``: fresh start after a turn that completes a P1 item.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    max_over_hits: Annotated[int, Field(ge=1)] | None = 2
    window_seconds: Annotated[float, Field(gt=0, strict=False)] = 3600.0
    milestone_fresh_start: bool = False


class StreamRewardWeights(BaseModel):
    """Weights of the stream's own reward terms (each event also pays design 001's reward).

    ``overflow_event``: paid per overflow event (-1.5: an overflow is a cost, so that a
    policy cannot earn by overflowing often — each seed reward is positive on
    success, even for a forced fresh start, and at most 1.5 with design 001's default
    weights: 1 + 0.3 × reduction + 0.2 × P1 preserved, coherence delta ≤ 0);
    ``probes``: × share of probes answered at the end (5.0: with the default five
    probes, each is worth a successful break's base reward); ``cache``: ×
    prompt-cache hit rate at the end.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    overflow_event: float = -1.5
    probes: float = 5.0
    cache: float = 0.0


@dataclass(frozen=True)
class StreamSettings(EpisodeSettings):
    """Episode settings of one overflow event: its strategies see design 002's
    ``skip_aggressive`` turn flag, and ``depth`` sets how deep it is broken.

    ``depth`` is a share of the limit: the event's target (what strategies aim at and
    what success means) is the lower of the warning threshold and ``depth`` × limit
    (tokens, rounded down); None is the warning threshold itself.
    """

    skip_aggressive: bool = False
    depth: float | None = None

    def target_tokens(self, state: ContextState) -> int:
        warning = super().target_tokens(state)
        return warning if self.depth is None else min(warning, int(self.depth * state.limit))

    def context(self, state: ContextState) -> StrategyContext:
        ctx = super().context(state)
        ctx.skip_aggressive = self.skip_aggressive
        return ctx

    @property
    def key(self) -> str:
        return super().key + ("-skip" if self.skip_aggressive else "") + ("" if self.depth is None else f"-depth{self.depth}")


#: (the episode keys of a config (json), depth) -> (normal, skip-aggressive) settings, shared per process
_SETTINGS: LRUCache[tuple[str, float | None], tuple[StreamSettings, StreamSettings]] = LRUCache(64)


def stream_settings(config: EpisodeConfig, depth: float | None = None) -> tuple[StreamSettings, StreamSettings]:
    """The process's (normal, skip-aggressive) settings of a validated config (a
    StreamConfig is one) at one break ``depth`` (:class:`StreamSettings`), so sessions
    share strategy results."""
    key = (config.episode_json(), depth)
    pair = _SETTINGS.get(key)
    if pair is None:
        pair = (StreamSettings.of(config, depth=depth), StreamSettings.of(config, skip_aggressive=True, depth=depth))
        _SETTINGS.put(key, pair)
    return pair


@dataclass(frozen=True)
class EventRecord:
    """One overflow event: when, who resolved it, how deep, and how it ended (tokens, reward)."""

    turn: int
    time_s: float
    trigger: str  # "agent" or "over_hits"
    skip_aggressive: bool
    chain: tuple[str, ...]
    target_tokens: int  # what the event was broken to (its depth's target)
    tokens_before: int
    tokens_after: int
    reward: float
    success: bool
    used_recovery: bool
    forced_recovery: bool
    p1_preserved: float  # share of the P1 units before it still present after it (:func:`ctxsim.metrics.p1_preserved`)


@dataclass(frozen=True)
class StreamStep:
    """What one agent action did: the episode step, the reward and its named terms
    (and, when it ended the event, that event's outcome)."""

    step: Step | None
    reward: float
    terms: dict[str, float]
    event_done: bool
    done: bool
    outcome: BreakingOutcome | None = None


@dataclass
class _Turn:
    units: tuple[ContextUnit, ...]
    probe: Probe | None
    rehydrated: tuple[Rehydrated, ...]
    time_s: float


@dataclass
class _Counters:
    compactions: int = 0
    strategy_steps: int = 0
    milestones: int = 0
    milestone_fresh_starts: int = 0
    max_summary_depth: int = 0
    max_summary_tokens: int = 0
    probes: list[tuple[Probe, bool]] = field(default_factory=list)


class StreamSession:
    """A conversation being played (module docstring). ``episode`` is the overflow
    event awaiting the agent, or None once ``done``.

    ``settings`` and ``skip_settings`` break an event to the first depth (where every
    event starts); ``deeper`` holds one (normal, skip-aggressive) pair per further
    depth the agent may choose (:meth:`choose_depth`), shallowest first.
    """

    def __init__(
        self,
        conversation: Conversation,
        settings: StreamSettings,
        skip_settings: StreamSettings,
        *,
        deeper: tuple[tuple[StreamSettings, StreamSettings], ...] = (),
        rehydration: RehydrationConfig | None = None,
        triggers: RecoveryTriggers | None = None,
        cache: PromptCacheModel | None = None,
        weights: StreamRewardWeights | None = None,
    ):
        c = conversation
        self.conversation = c
        self.settings, self.skip_settings = settings, skip_settings
        self.deeper = tuple(deeper)
        self.triggers = triggers or RecoveryTriggers()
        self.weights = weights or StreamRewardWeights()
        self.rehydrator = Rehydrator(rehydration or RehydrationConfig(), c.limit)
        self.cache = PromptCache(cache)
        self.state = ContextState(
            units=(), limit=c.limit, min_limit=c.min_limit, warning_threshold=c.warning_threshold, task=c.task,
            scenario=c.scenario, seed=c.seed,
        )
        self.log: dict[str, ContextUnit] = {}
        self.turn = -1
        self.episode: OverflowEpisode | None = None
        self.event_depth = 0  # index of the pending event's depth (0: the first)
        self.done = False
        self.events: list[EventRecord] = []
        self.counters = _Counters()
        self._current: _Turn | None = None
        self._over_hits: list[float] = []
        self._arrived = 0  # tokens of the turns played so far, as they arrived
        self._now = 0.0
        self._checked: set[str] = set()
        self._pending = 0.0  # seed reward of events resolved by the session, not yet paid
        self._pending_events = 0  # events resolved since the last payment
        self._run()

    def copy(self) -> StreamSession:
        """An independent session at the same point (for lookahead: playing the copy
        never changes this one). The conversation, the settings (with their memo of
        strategy outcomes), the reward and trigger parameters and the frozen units and
        states (:class:`~ctxsim.model.Immutable`) are shared, since nothing mutates them;
        everything that a turn or an event changes is copied."""
        deeper = [settings for pair in self.deeper for settings in pair]
        shared = (self.conversation, self.settings, self.skip_settings, *deeper, self.triggers, self.weights)
        return copy.deepcopy(self, {id(obj): obj for obj in shared})

    # ---- the agent's side -----------------------------------------------------------
    @property
    def skip_aggressive(self) -> bool:
        """True when the pending event runs on a turn that rehydrated."""
        return self.episode is not None and self.episode.settings.skip_aggressive

    @property
    def rehydrated(self) -> tuple[Rehydrated, ...]:
        """The injections of the turn being played (empty between turns)."""
        return self._current.rehydrated if self._current is not None else ()

    @property
    def now(self) -> float:
        """Simulated time of the turn played last (s; its latest unit's timestamp)."""
        return self._now

    @property
    def over_hit_times(self) -> tuple[float, ...]:
        """Times of the over-hits counted toward design 001's fresh-start trigger, oldest first."""
        return tuple(self._over_hits)

    @property
    def arrived_tokens(self) -> int:
        """Request tokens of the conversation's units that have arrived so far (before any break)."""
        return self._arrived

    @property
    def depth_count(self) -> int:
        """How many break depths the agent chooses among (1: only the first)."""
        return 1 + len(self.deeper)

    def depth_settings(self, index: int, skip: bool) -> StreamSettings:
        """The settings of depth ``index`` (0: the first), normal or skip-aggressive."""
        pair = (self.settings, self.skip_settings) if index == 0 else self.deeper[index - 1]
        return pair[1] if skip else pair[0]

    def event_at(self, index: int) -> OverflowEpisode:
        """The pending event as it starts when broken to depth ``index`` (the pending
        episode itself at its own depth; a fresh one otherwise, nothing changed)."""
        episode = self.episode
        if episode is None:
            raise RecoveryError("the conversation is over; no overflow event awaits an action")
        if index == self.event_depth:
            return episode
        return OverflowEpisode(episode.original, self.depth_settings(index, episode.settings.skip_aggressive))

    def choose_depth(self, index: int) -> None:
        """Break the pending event to depth ``index`` (0: the first, where every event
        starts). Only before the event's first step: RecoveryError after it, or for an
        index outside ``range(depth_count)``."""
        if not 0 <= index < self.depth_count:
            raise RecoveryError(f"break depth {index} is not one of the {self.depth_count} configured")
        if index == self.event_depth:
            return
        episode = self.event_at(index)
        if self.episode.steps_taken:
            raise RecoveryError("an event's break depth is chosen before its first step")
        self.episode, self.event_depth = episode, index

    def record_step(self, step: Step) -> None:
        """Count one strategy step of an event (called for every step, however run)."""
        self.counters.strategy_steps += 1
        self.counters.compactions += bool(step.result is not None and step.result.changed)
        self.counters.compactions += step.forced_recovery not in (None, "error")

    def step(self, action: Any) -> StreamStep:
        """Apply one action (an id, an index or a Strategy) to the pending event."""
        if self.episode is None:
            raise RecoveryError("the conversation is over; no overflow event awaits an action")
        episode = self.episode
        step = episode.step(action)
        self.record_step(step)
        if not episode.done:
            terms = self._terms()  # pays what is pending (nothing, as the session runs now), so the sum is the reward
            return StreamStep(step, sum(terms.values()), terms, False, False)
        return self._resolved(episode, step)

    def resolve(self, finished: OverflowEpisode) -> StreamStep:
        """Hand back the pending event run to its end elsewhere (e.g. by
        :func:`ctxsim.policies.run_episode` from ``episode.original`` and
        ``episode.settings``, recording steps with :meth:`record_step`)."""
        pending = self.episode
        if pending is None or not finished.done or finished.original is not pending.original:
            raise RecoveryError("resolve() needs the pending event, run to its end")
        return self._resolved(finished, None)

    def _resolved(self, episode: OverflowEpisode, step: Step | None) -> StreamStep:
        self._close(episode, "agent")
        self._pending_events += 1
        self.episode = None
        self._run()
        terms = self._terms(event=episode.reward)
        if self.done:
            terms.update(self.final_terms())
        return StreamStep(step, sum(terms.values()), terms, True, self.done, episode.outcome)

    def _terms(self, event: float = 0.0) -> dict[str, float]:
        """The terms paid now: this event, the events resolved by the session since the
        last payment, and ``overflow_event`` per event resolved."""
        terms = {
            "event": event, "triggered": self._pending, "overflow": self.weights.overflow_event * self._pending_events,
            "probes": 0.0, "cache": 0.0,
        }
        self._pending, self._pending_events = 0.0, 0
        return terms

    def final_terms(self) -> dict[str, float]:
        """The end-of-conversation terms (probes answered, cache hit rate)."""
        return {"probes": self.weights.probes * self.probe_share, "cache": self.weights.cache * self.cache.hit_rate}

    # ---- the conversation's side -----------------------------------------------------
    def _run(self) -> None:
        """Play turns until an event awaits the agent or the conversation ends."""
        while self.episode is None and not self.done:
            if self._current is not None:
                self._end_turn()
            if self.turn + 1 >= len(self.conversation.turns):
                self.done = True
                break
            self.turn += 1
            self._begin_turn()

    def _begin_turn(self) -> None:
        units = self.conversation.turns[self.turn]
        now = self._now = max(u.timestamp for u in units)
        self._arrived += self.state.tokens_of(units)
        probe = self.conversation.probe_at(self.turn)
        if probe is not None:
            units = units + (probe.unit(now + 1.0),)
        self.log.update((u.id, u) for u in units)
        ids = {u.id for u in units}
        facts = tuple(f for f in self.conversation.facts if f.unit_id in ids)
        self.state = self.state.with_units(self.state.units + units, fact_table=self.state.fact_table + facts)
        rehydrated = self.rehydrator.inject(units, self.state, self.log, self.turn)
        self._current = _Turn(units, probe, rehydrated, now)
        if self.state.total_tokens > self.state.warning_tokens:
            self._overflow(now, bool(rehydrated))

    def _overflow(self, now: float, skip: bool) -> None:
        recent = [t for t in self._over_hits if now - t < self.triggers.window_seconds]
        self._over_hits = recent + [now]
        settings = self.skip_settings if skip else self.settings
        episode = OverflowEpisode(replace(self.state, history=()), settings)
        self.event_depth = 0
        limit = self.triggers.max_over_hits
        if limit is not None and len(recent) >= limit:
            self.record_step(episode.step(TRIGGERED_RECOVERY))
            self._over_hits = []
            self._close(episode, "over_hits")
            self._pending += episode.reward
            self._pending_events += 1
            return
        self.episode = episode

    def _close(self, episode: OverflowEpisode, trigger: str) -> None:
        o = episode.outcome
        turn = self._current
        self.events.append(EventRecord(
            turn=self.turn, time_s=turn.time_s, trigger=trigger, skip_aggressive=episode.settings.skip_aggressive,
            chain=episode.chain, target_tokens=episode.target_tokens, tokens_before=o.original_tokens, tokens_after=o.final_tokens, reward=episode.reward,
            success=o.success, used_recovery=o.used_recovery, forced_recovery=episode.forced_recovery,
            p1_preserved=o.p1_preserved,
        ))
        self.state = episode.state

    def prompt_units(self) -> list[ContextUnit]:
        """The messages of the current turn's call: the context, with the rehydrated
        units before the first of the turn's own units still present (design 002)."""
        units = list(self.state.units)
        turn = self._current
        if turn is None or not turn.rehydrated:
            return units
        own = {u.id for u in turn.units}
        at = next((i for i, u in enumerate(units) if u.id in own), len(units))
        return units[:at] + [r.unit for r in turn.rehydrated] + units[at:]

    def _end_turn(self) -> None:
        turn, state = self._current, self.state
        prompt = self.prompt_units()
        costs = [state.unit_cost(u) for u in prompt]
        extra = sum(state.unit_cost(r.unit) for r in turn.rehydrated)
        self.cache.call([(u.role, u.content) for u in prompt], costs, state.total_tokens + extra)
        if turn.probe is not None:
            value = self.conversation.fact(turn.probe.fact_id).value
            self.counters.probes.append((turn.probe, any(value in u.content for u in prompt)))
        new = {item for u in turn.units for item in P1_DONE.findall(u.content)} - self._checked
        if new:
            self._checked |= new
            self.counters.milestones += 1
            if self.triggers.milestone_fresh_start:
                result = self.settings.apply(TRIGGERED_RECOVERY, self.state)
                self.state = result.state
                self.counters.milestone_fresh_starts += 1
                self.counters.compactions += result.changed
        self._track(self.state)
        self._current = None

    def _track(self, state: ContextState) -> None:
        c = self.counters
        for u in state.units:
            c.max_summary_depth = max(c.max_summary_depth, u.summary_depth)
            if u.type == "summary":
                c.max_summary_tokens = max(c.max_summary_tokens, u.token_count)

    # ---- metrics ----------------------------------------------------------------------
    @property
    def probes_asked(self) -> int:
        return len(self.counters.probes)

    @property
    def probes_answered(self) -> int:
        return sum(ok for _, ok in self.counters.probes)

    @property
    def probe_share(self) -> float:
        """Share of the probes asked so far that were answered (1.0 when none was)."""
        return self.probes_answered / self.probes_asked if self.probes_asked else 1.0

    def probe_share_by_kind(self) -> dict[str, float]:
        """Share of the probes asked so far that were answered, per probe kind (recall,
        artifact, continuation, decision; 1.0 for a kind not asked)."""
        out = {}
        for kind in PROBE_KINDS:
            answers = [ok for probe, ok in self.counters.probes if probe_kind(self.conversation.fact(probe.fact_id)) == kind]
            out[kind] = sum(answers) / len(answers) if answers else 1.0
        return out

    def facts_retained(self) -> float:
        """Share of the facts and rules planted so far whose value is in the current context."""
        return share_answered((f for f in self.state.fact_table if f.kind in STATED_KINDS), self.state.render())

    def rules_retained(self) -> float:
        """Share of the user rules planted so far whose value is in the current context (1.0 when none)."""
        return share_answered((f for f in self.state.fact_table if f.kind == "rule"), self.state.render())

    def metrics(self) -> dict[str, Any]:
        """The session's running totals (tokens, dollars, counts)."""
        c, r = self.counters, self.rehydrator
        return {
            "turn": self.turn,
            "turns": len(self.conversation.turns),
            "overflow_events": len(self.events) + (self.episode is not None),
            "over_hit_fresh_starts": sum(e.trigger == "over_hits" for e in self.events),
            "forced_recoveries": sum(e.forced_recovery for e in self.events),
            "milestones": c.milestones,
            "milestone_fresh_starts": c.milestone_fresh_starts,
            "compactions": c.compactions,
            "strategy_steps": c.strategy_steps,
            "event_reward": sum(e.reward for e in self.events),
            "break_depth": sum(e.target_tokens for e in self.events) / len(self.events) / self.state.limit if self.events else 0.0,
            "probes_asked": self.probes_asked,
            "probes_answered": self.probes_answered,
            "probe_share": self.probe_share,
            **{f"probe_share_{kind}": share for kind, share in self.probe_share_by_kind().items()},
            "facts_retained": self.facts_retained(),
            "rules_retained": self.rules_retained(),
            # as on ContextOverflow-v0, per break: the mean over the events (1.0 when nothing was broken)
            "p1_preserved": sum(e.p1_preserved for e in self.events) / len(self.events) if self.events else 1.0,
            "max_summary_depth": c.max_summary_depth,
            "max_summary_tokens": c.max_summary_tokens,
            "artifacts": len(self.state.artifacts),
            "rehydrations": r.rehydrations,
            "rehydrated_tokens": r.tokens,
            "rehydration_turns": r.turns,
            "rehydration_loops": r.loops,
            "rehydrations_truncated": r.truncated,
            "rehydration_cooldown_skips": r.cooldown_skips,
            "rehydration_budget_skips": r.budget_skips,
            "calls": self.cache.calls,
            "tokens_sent": self.cache.input_tokens,
            "cached_tokens": self.cache.cached_tokens,
            "cache_hit_rate": self.cache.hit_rate,
            "cost_usd": self.cache.cost,
        }

    def event_dicts(self) -> list[dict[str, Any]]:
        return [asdict(e) for e in self.events]
