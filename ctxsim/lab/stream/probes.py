"""Probes: later user turns that ask about planted ground truth (the long-horizon probes).

A probe is a user message added at the end of a turn ("Before we go on: …"),
phrased from the planted item's sentence with its value masked, so the question
itself never holds the answer. It asks one of the four probe kinds of
:mod:`ctxsim.probes` — recall (a fact), artifact (a written file's path or latest
content), continuation (the task, the next step), decision (a user rule) — and
counts as *answered* when the exact value is in the prompt sent on that turn (the
compacted context plus any rehydrated content), the answering rule of
:mod:`ctxsim.probes`. Probes are part of a conversation: every policy evaluated on
it is asked the same questions at the same turns.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass
from typing import Annotated, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ...model import ContextUnit, Fact
from ...probes import PROBE_KINDS, probe_kind

#: what stands for the value in a probe's question
MASK = "…"


class ProbeConfig(BaseModel):
    """When probes are asked.

    ``turns``: turn indices (0 = the opening turn) at whose end a probe is asked
    (turns past the conversation's end are not asked); ``min_age_turns``: a fact
    is probed only if planted at least this many turns before the probe.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    turns: Annotated[tuple[Annotated[int, Field(ge=1)], ...], Field(strict=False)] = (15, 25, 35, 45, 55)
    min_age_turns: Annotated[int, Field(ge=1)] = 5

    @field_validator("turns")
    @classmethod
    def _increasing(cls, turns: tuple[int, ...]) -> tuple[int, ...]:
        if list(turns) != sorted(set(turns)):
            raise ValueError("must be strictly increasing")
        return turns


@dataclass(frozen=True)
class Probe:
    """A question asked at the end of turn ``turn`` about the fact ``fact_id``."""

    turn: int
    fact_id: str
    question: str

    @property
    def unit_id(self) -> str:
        return f"probe-{self.turn}"

    def unit(self, timestamp: float) -> ContextUnit:
        """The user message that asks it (P2, simulated ``timestamp`` in seconds)."""
        return ContextUnit(
            id=self.unit_id, type="message", role="user", content=self.question, turn=self.turn,
            timestamp=timestamp, priority=2,
        )


def probe_question(fact: Fact) -> str:
    """The question about ``fact``, from its sentence with the value masked (never holds the value)."""
    masked = fact.text.replace(fact.value, MASK).strip() if fact.value in fact.text else ""
    if fact.kind == "rule":
        question = f"Before we go on: remind me of the rule I gave you earlier ({masked})" if masked else (
            "Before we go on: remind me of the rule I gave you earlier.")
    elif fact.kind == "artifact" and masked:
        question = f'Before we go on, about the files you wrote: "{masked}" What exactly?'
    elif fact.kind == "continuation" and masked:
        question = f'Before we go on: "{masked}" Remind me where we stand.'
    elif masked:
        question = f'Before we go on: "{masked}" What was it again?'
    else:
        question = f"Before we go on: what was {fact.id} again?"
    if fact.value in question:  # a value that is also a word of the sentence frame
        question = f"Before we go on: what was {fact.id} again?"
    return question


def make_probe(turn: int, fact: Fact) -> Probe:
    return Probe(turn, fact.id, probe_question(fact))


def schedule_probes(
    facts: Sequence[Fact], planted_turn: dict[str, int], n_turns: int, config: ProbeConfig, key: str
) -> tuple[Probe, ...]:
    """Probes at ``config.turns`` (those inside the conversation's ``n_turns``).

    At each probe turn, among the facts planted at least ``min_age_turns`` earlier,
    the probe kind asked least so far (ties: :data:`~ctxsim.probes.PROBE_KINDS` order)
    is chosen, then a fact of that kind among its least-probed ones, by a
    ``random.Random`` seeded from ``key`` (the conversation's scenario and seed), so
    the kinds take turns and the schedule is the same in every process. A probe turn
    with no old-enough fact asks nothing.
    """
    rng = random.Random(zlib.crc32(key.encode("utf-8")))
    asked: dict[str, int] = {}
    kinds_asked = dict.fromkeys(PROBE_KINDS, 0)
    probes = []
    for turn in config.turns:
        if turn >= n_turns:
            break
        eligible = [f for f in facts if planted_turn[f.id] <= turn - config.min_age_turns]
        if not eligible:
            continue
        kind = min({probe_kind(f) for f in eligible}, key=lambda k: (kinds_asked[k], PROBE_KINDS.index(k)))
        kinds_asked[kind] += 1
        eligible = [f for f in eligible if probe_kind(f) == kind]
        fewest = min(asked.get(f.id, 0) for f in eligible)
        fact = rng.choice([f for f in eligible if asked.get(f.id, 0) == fewest])
        asked[fact.id] = asked.get(fact.id, 0) + 1
        probes.append(make_probe(turn, fact))
    return tuple(probes)
