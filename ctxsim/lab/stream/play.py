"""Playing a policy through a conversation: one overflow event after another.

:func:`play` runs a policy on every event of a :class:`~ctxsim.lab.stream.StreamSession`
until the conversation ends; :func:`play_event` breaks one event with
:func:`ctxsim.policies.run_episode`, the policy reset with :func:`event_seed` so
every play is repeatable. The stream evaluation (:mod:`ctxsim.lab.stream.evaluate_stream`) and
the rollout reference (:mod:`ctxsim.lab.stream.rollout`) both play through here.
"""

from __future__ import annotations

import zlib
from functools import partial
from typing import Protocol

from ...policies import Policy, run_episode
from .session import StreamSession


class EventPlayer(Protocol):
    """Something that breaks each event its own way (a rollout)."""

    def play_event(self, session: StreamSession, scenario: str, seed: int) -> float: ...


def event_seed(scenario: str, seed: int, event: int) -> int:
    """The seed a policy's ``reset`` gets at the start of event number ``event``."""
    return zlib.crc32(f"{scenario}/{seed}/event/{event}".encode())


def play(policy: Policy | EventPlayer, session: StreamSession, scenario: str, seed: int) -> float:
    """Run ``policy`` on every event of ``session`` until the conversation ends; the
    total reward (what the environment would pay over the episode). A rollout
    (:mod:`.rollout`) breaks each event its own way: its ``play_event``."""
    if session.episode is None:  # never overflowed: only the end-of-conversation terms
        return sum(session.final_terms().values())
    event = getattr(policy, "play_event", None) or partial(play_event, policy)
    total = 0.0
    while not session.done:
        total += event(session, scenario, seed)
    return total


def play_event(policy: Policy, session: StreamSession, scenario: str, seed: int) -> float:
    """Let ``policy`` break the pending event of ``session``; the reward then paid."""
    pending = session.episode
    finished = run_episode(
        policy, pending.original, pending.settings, event_seed(scenario, seed, len(session.events)),
        on_step=lambda _episode, step: session.record_step(step),
    )
    return session.resolve(finished).reward
