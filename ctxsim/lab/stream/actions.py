"""ConversationStream-v0's action space: a strategy and how deep to break.

One flat ``Discrete(D × K)`` over the ``K`` strategy ids of ``actions`` and the ``D``
``break_depths``: action ``a`` applies strategy ``a % K`` with depth ``a // K``, so
the first ``K`` actions are ContextOverflow-v0's (the first depth) and each further
block of ``K`` repeats them one depth deeper. The depth of an event is set by its
first action (:meth:`~ctxsim.lab.stream.StreamSession.choose_depth`); on its later
steps the mask allows only that depth's block, and an unmasked learner's action of
another block runs its strategy at the event's depth.

:func:`depth_mask` and :func:`step_flat` are what the environment and the evaluation
of a trained stream policy both call.
"""

from __future__ import annotations

import numpy as np

from .session import StreamSession, StreamStep


def action_names(actions: tuple[str, ...], depths: tuple[float, ...]) -> list[str]:
    """``<strategy id>@<depth>`` for every flat action, in index order."""
    return [f"{sid}@{depth:g}" for depth in depths for sid in actions]


def split(index: int, strategies: int) -> tuple[int, int]:
    """(depth index, strategy index) of flat action ``index``."""
    return divmod(index, strategies)


def depth_mask(session: StreamSession) -> np.ndarray:
    """Valid flat actions of the pending event: before its first step, each depth's
    block is that depth's mask (:meth:`~ctxsim.episode.OverflowEpisode.action_mask`
    of the event broken to it); after, only the event's depth block. Every action once
    the conversation is over."""
    k = len(session.settings.actions)
    episode = session.episode
    if episode is None:
        return np.ones(session.depth_count * k, dtype=bool)
    if episode.steps_taken == 0:
        return np.concatenate([session.event_at(i).action_mask() for i in range(session.depth_count)])
    mask = np.zeros(session.depth_count * k, dtype=bool)
    at = session.event_depth * k
    mask[at:at + k] = episode.action_mask()
    return mask


def step_flat(session: StreamSession, index: int) -> StreamStep:
    """Apply flat action ``index``: choose its depth when the event has not started,
    then step its strategy."""
    depth, strategy = split(index, len(session.settings.actions))
    if session.episode is not None and session.episode.steps_taken == 0:
        session.choose_depth(depth)
    return session.step(strategy)
