"""A whole conversation as it arrives, turn by turn: the canonical log of design 002.

A :class:`Conversation` holds the turns (each a tuple of units; turn 0 is the
opening), the facts planted in them, the probes asked about them and the limits
of the agent that receives them. Nothing mutates it: the long-horizon session
compacts its own view of the context, never the log.

Sources: :func:`generated_conversation` streams :class:`~ctxsim.lab.generator.SessionGenerator`
turns, :func:`agent_conversation` groups an agent-loop session's units by turn,
:func:`transcript_conversation` a chat transcript's, and tests build one by hand from
unit lists.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, replace
from itertools import groupby

from ...errors import ScenarioError
from ...model import DEFAULT_MIN_LIMIT, DEFAULT_WARNING_THRESHOLD, ContextUnit, Fact
from ..contexts import build_context
from ..generator import SessionGenerator
from ..scenarios import Scenario
from .probes import Probe, ProbeConfig, schedule_probes


@dataclass(frozen=True)
class Conversation:
    """Turns of units in arrival order, their planted facts and the probes about them.

    ``limit`` and ``min_limit`` are tokens, ``warning_threshold`` a share of the
    limit; unit timestamps are simulated seconds. Every unit id is unique, every
    fact's ``unit_id`` is a unit of some turn, and every probe asks, after its
    turn, about a fact planted in that turn or earlier.
    """

    turns: tuple[tuple[ContextUnit, ...], ...]
    limit: int
    facts: tuple[Fact, ...] = ()
    probes: tuple[Probe, ...] = ()
    min_limit: int = DEFAULT_MIN_LIMIT
    warning_threshold: float = DEFAULT_WARNING_THRESHOLD
    task: str = ""
    scenario: str = ""
    seed: int | None = None

    def __post_init__(self) -> None:
        turns = tuple(tuple(t) for t in self.turns)
        object.__setattr__(self, "turns", turns)
        where = f"conversation {self.scenario or '(built)'}"
        if not turns or any(not t for t in turns):
            raise ScenarioError(f"{where}: needs at least one turn and no empty turn", key="turns")
        turn_of: dict[str, int] = {}
        for i, turn in enumerate(turns):
            for unit in turn:
                if unit.id in turn_of:
                    raise ScenarioError(f"{where}: unit id {unit.id!r} occurs twice", key=f"turns[{i}]")
                turn_of[unit.id] = i
        planted = {}
        for fact in self.facts:
            if fact.unit_id not in turn_of:
                raise ScenarioError(f"{where}: fact {fact.id!r} names unknown unit {fact.unit_id!r}", key="facts")
            planted[fact.id] = turn_of[fact.unit_id]
        for probe in self.probes:
            if probe.fact_id not in planted:
                raise ScenarioError(f"{where}: probe at turn {probe.turn} asks about unknown fact {probe.fact_id!r}", key="probes")
            if not planted[probe.fact_id] <= probe.turn < len(turns):
                raise ScenarioError(
                    f"{where}: probe at turn {probe.turn} must come after the fact's turn "
                    f"{planted[probe.fact_id]} and before the end ({len(turns)} turns)", key="probes",
                )
        if len({p.turn for p in self.probes}) != len(self.probes):
            raise ScenarioError(f"{where}: at most one probe per turn", key="probes")
        taken = [p.unit_id for p in self.probes if p.unit_id in turn_of]
        if taken:
            raise ScenarioError(f"{where}: unit id {taken[0]!r} is reserved for the probe of its turn", key="probes")
        object.__setattr__(self, "_turn_of", turn_of)
        object.__setattr__(self, "_planted", planted)

    @property
    def planted_turn(self) -> dict[str, int]:
        """Fact id -> index of the turn that plants it."""
        return dict(self._planted)

    def probe_at(self, turn: int) -> Probe | None:
        return next((p for p in self.probes if p.turn == turn), None)

    def fact(self, fact_id: str) -> Fact:
        return next(f for f in self.facts if f.id == fact_id)

    def with_scheduled_probes(self, config: ProbeConfig) -> "Conversation":
        """This conversation with probes at ``config.turns`` (see :func:`schedule_probes`)."""
        key = f"{self.scenario}/{self.seed}"
        return replace(self, probes=schedule_probes(self.facts, self._planted, len(self.turns), config, key))


def with_future_of(conversation: Conversation, other: Conversation, turn: int, tag: str, config: ProbeConfig) -> Conversation:
    """A future ``conversation`` might have had: its turns up to ``turn`` (included, the
    same objects), then ``other``'s turns after ``turn`` (the same scenario's process, an
    other seed), their unit and fact ids prefixed with ``tag`` and their timestamps
    shifted so that they follow on; the facts planted up to ``turn`` and ``other``'s
    planted later; its probes up to ``turn``, then probes at ``config.turns`` drawn over
    those facts (:func:`schedule_probes`, keyed by ``tag``). ``conversation`` itself when
    it has no turn after ``turn``; ``other`` must have as many turns."""
    if turn + 1 >= len(conversation.turns):
        return conversation
    if len(other.turns) != len(conversation.turns):
        raise ScenarioError(f"conversation {other.scenario or '(built)'} seed {other.seed}: {len(other.turns)} turns, "
                            f"a future of {conversation.scenario or '(built)'} needs {len(conversation.turns)}", key="turns")
    shift = conversation.turns[turn + 1][0].timestamp - other.turns[turn + 1][0].timestamp
    future = tuple(tuple(replace(u, id=tag + u.id, timestamp=u.timestamp + shift) for u in units)
                   for units in other.turns[turn + 1:])
    planted_other = other.planted_turn
    later = tuple(replace(f, id=tag + f.id, unit_id=tag + f.unit_id) for f in other.facts if planted_other[f.id] > turn)
    return _spliced(conversation, turn, future, later, tag, config)


def with_future_from_past(conversation: Conversation, turn: int, tag: str, config: ProbeConfig) -> Conversation:
    """A future ``conversation`` might have had, drawn from its own past only: its turns
    up to ``turn`` (included, the same objects), then copies of its turns 1..``turn``
    (the opening, turn 0, when there is no other) drawn with replacement by a
    ``random.Random`` keyed by the conversation, ``turn`` and ``tag``; each copy's unit
    and fact ids prefixed with ``tag`` and its position, its units' timestamps moved so
    that it follows the previous turn after the gap that preceded its source turn; the
    facts planted up to ``turn`` and the copies' facts; its probes up to ``turn``, then
    probes at ``config.turns`` drawn over those facts (:func:`schedule_probes`). What a
    deployed policy could assume of the rest of a conversation it has seen so far: more
    of the same. ``conversation`` itself when it has no turn after ``turn``."""
    if turn + 1 >= len(conversation.turns):
        return conversation
    sources = list(range(1, turn + 1)) or [0]
    rng = random.Random(zlib.crc32(f"{conversation.scenario}/{conversation.seed}/{turn}/{tag}".encode("utf-8")))
    planted = conversation.planted_turn
    facts_of: dict[int, list[Fact]] = {}
    for fact in conversation.facts:
        facts_of.setdefault(planted[fact.id], []).append(fact)

    def start(i: int) -> float:
        return conversation.turns[i][0].timestamp

    previous = start(turn)
    future: list[tuple[ContextUnit, ...]] = []
    copied: list[Fact] = []
    for position in range(turn + 1, len(conversation.turns)):
        source = rng.choice(sources)
        gap = start(source) - start(source - 1) if source else 0.0
        prefix = f"{tag}{position}-"
        shift = previous + gap - start(source)
        future.append(tuple(replace(u, id=prefix + u.id, timestamp=u.timestamp + shift) for u in conversation.turns[source]))
        copied += [replace(f, id=prefix + f.id, unit_id=prefix + f.unit_id) for f in facts_of.get(source, ())]
        previous += gap
    return _spliced(conversation, turn, tuple(future), tuple(copied), tag, config)


def _spliced(conversation: Conversation, turn: int, future: tuple[tuple[ContextUnit, ...], ...], later: tuple[Fact, ...],
             tag: str, config: ProbeConfig) -> Conversation:
    """``conversation``'s turns up to ``turn`` then ``future``; the facts planted up to
    ``turn`` then ``later`` (the future's); its probes up to ``turn``, then probes at
    ``config.turns`` drawn over those facts (:func:`schedule_probes`, keyed by ``tag``)."""
    planted = conversation.planted_turn
    facts = tuple(f for f in conversation.facts if planted[f.id] <= turn) + later
    spliced = replace(conversation, turns=conversation.turns[:turn + 1] + future, facts=facts, probes=())
    drawn = schedule_probes(spliced.facts, spliced.planted_turn, len(spliced.turns), config,
                            f"{conversation.scenario}/{conversation.seed}/{tag}")
    return replace(spliced, probes=tuple(p for p in conversation.probes if p.turn <= turn) + tuple(p for p in drawn if p.turn > turn))


def generated_conversation(scenario: Scenario, seed: int, turns: int) -> Conversation:
    """``turns`` turns of the scenario's :class:`~ctxsim.lab.generator.SessionGenerator` stream."""
    session = SessionGenerator(scenario, seed)
    units = [tuple(session.next_turn()) for _ in range(turns)]
    state = session.state()
    return Conversation(
        turns=tuple(units), limit=state.limit, facts=state.fact_table, min_limit=state.min_limit,
        warning_threshold=state.warning_threshold, task=state.task, scenario=scenario.name, seed=seed,
    )


def transcript_conversation(scenario: Scenario, turns: int, seed: int = 0) -> Conversation:
    """A transcript's units grouped by their ``turn`` (at most ``turns`` turns; no facts);
    ``seed`` draws a transcript family's limit. A transcript has no clock: its units'
    timestamps are their line numbers, so its whole session falls within one hour of
    simulated time and design 001's over-hit trigger forces every third overflow into a
    fresh start."""
    state = build_context(scenario, seed)
    grouped = [tuple(group) for _, group in groupby(state.units, key=lambda u: u.turn)]
    return Conversation(
        turns=tuple(grouped[:turns]), limit=state.limit, facts=state.fact_table, min_limit=state.min_limit,
        warning_threshold=state.warning_threshold, task=state.task, scenario=scenario.name, seed=state.seed,
    )


def agent_conversation(scenario: Scenario, seed: int, turns: int) -> Conversation:
    """``turns`` turns of an ``agent_loop`` scenario's session (:mod:`ctxsim.lab.agent_session`),
    grouped by turn as a transcript's are; a session with fewer turns is drawn again at a
    larger target (same name and seed, so the same repository and task) until it has them."""
    state = build_context(scenario, seed)
    for _ in range(8):
        grouped = [tuple(group) for _, group in groupby(state.units, key=lambda u: u.turn)]
        if len(grouped) >= turns:
            break
        values = scenario.model_dump(exclude_unset=True, exclude={"overflow", "target_tokens"})
        bigger = Scenario.model_validate({**values, "target_tokens": round(state.total_tokens * 1.2 * turns / len(grouped))})
        state = build_context(bigger, seed)
    units = {u.id for group in grouped[:turns] for u in group}
    return Conversation(
        turns=tuple(grouped[:turns]), limit=state.limit, facts=tuple(f for f in state.fact_table if f.unit_id in units),
        min_limit=state.min_limit, warning_threshold=state.warning_threshold, task=state.task, scenario=scenario.name, seed=seed,
    )


def conversation_for(scenario: Scenario, seed: int, turns: int, probes: ProbeConfig, limit: int | None = None) -> Conversation:
    """The conversation of (scenario, seed) with its probes; ``limit`` overrides the scenario's (tokens)."""
    if scenario.is_transcript:
        conv = transcript_conversation(scenario, turns, seed)
    elif scenario.session == "agent_loop":
        conv = agent_conversation(scenario.draw(seed), seed, turns)
    else:
        conv = generated_conversation(scenario.draw(seed), seed, turns)
    if limit is not None:
        if limit < conv.min_limit:
            raise ScenarioError(f"limit {limit} is under the scenario's min_limit {conv.min_limit}", key="limit")
        conv = replace(conv, limit=limit)
    return conv.with_scheduled_probes(probes)
