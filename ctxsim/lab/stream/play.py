"""Playing a policy through a conversation: one overflow event after another.

:func:`play` runs a policy on every event of a :class:`~ctxsim.lab.stream.StreamSession`
until the conversation ends; :func:`play_event` breaks one event with
:func:`ctxsim.policies.run_episode`, the policy reset with :func:`event_seed` so
every play is repeatable. The stream evaluation (:mod:`ctxsim.lab.stream.evaluate_stream`) and
the rollout reference (:mod:`ctxsim.lab.stream.rollout`) both play through here.
"""

from __future__ import annotations

import zlib
from typing import Protocol

from ...policies import Policy, run_episode
from .session import StreamSession


class EventPlayer(Protocol):
    """Something that breaks each event its own way (a rollout, a depth search, a
    trained stream policy: :mod:`.players`)."""

    def play_event(self, session: StreamSession, scenario: str, seed: int) -> float: ...


def event_seed(scenario: str, seed: int, event: int) -> int:
    """The seed a policy's ``reset`` gets at the start of event number ``event``."""
    return zlib.crc32(f"{scenario}/{seed}/event/{event}".encode())


def play(policy: Policy | EventPlayer, session: StreamSession, scenario: str, seed: int) -> float:
    """Run ``policy`` on every event of ``session`` until the conversation ends; the
    total reward (what the environment would pay over the episode). An
    :class:`EventPlayer` breaks each event its own way: its ``play_event``."""
    if session.episode is None:  # never overflowed: only the end-of-conversation terms
        return sum(session.final_terms().values())
    total = 0.0
    while not session.done:
        total += break_event(policy, session, scenario, seed)
    return total


def break_event(policy: Policy | EventPlayer, session: StreamSession, scenario: str, seed: int) -> float:
    """Break the pending event of ``session`` with ``policy`` (its own ``play_event``
    when it has one, else :func:`play_event`); the reward then paid."""
    own = getattr(policy, "play_event", None)
    return own(session, scenario, seed) if own is not None else play_event(policy, session, scenario, seed)


def play_event(policy: Policy, session: StreamSession, scenario: str, seed: int) -> float:
    """Let ``policy`` break the pending event of ``session``; the reward then paid."""
    pending = session.episode
    finished = run_episode(
        policy, pending.original, pending.settings, event_seed(scenario, seed, len(session.events)),
        on_step=lambda _episode, step: session.record_step(step),
    )
    return session.resolve(finished).reward
