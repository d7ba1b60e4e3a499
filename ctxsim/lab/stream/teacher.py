"""The rollout's action values on ConversationStream-v0: what the warm start fits a stream policy to.

A ``rollout:<base>`` teacher (:mod:`.rollout`) plays each training conversation. At
every overflow event it values every (depth, chain) to the end of the conversation;
from those totals follow the values of the environment's flat actions
(:mod:`.actions`) at each decision step of the event:

* before the first step, ``Q(s, d·K + k)`` is the best total of the chains at depth
  ``d`` that begin with strategy ``k``;
* after the steps ``p`` at depth ``d``, ``Q(s, d·K + k)`` is the best total of the
  chains at ``d`` that begin with ``p`` then ``k`` (every other block is masked).

Rows are kept for the event's first state and for the states reached through an
action within ``margin`` of the best at its parent, as
:func:`ctxsim.lab.warmstart.action_values` keeps the oracle's. The teacher then
breaks the event as the rollout does and the conversation goes on, so the rows are
the states a teacher-like policy meets. Observations and masks are the environment's
(:func:`~.features.stream_observation`, :func:`~.actions.depth_mask`).

Cost: one rollout per event (every chain at every depth played to the end by the
base), seconds to a minute per conversation (a few minutes for ``rollout-futures:``),
the conversations shared among the machine's cores; :func:`cached_rollout_values` keeps the
rows in the pool folder (:func:`ctxsim.lab.pool.pool_dir`), keyed by the config, the
teacher, the margin and the package's code.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ...atomic import read_or_make
from ...observe import ObservationConfig
from ..export import npz_bytes
from ..parallel import default_workers, process_map
from ..environments.conversation_stream import ConversationStreamEnv, build_conversation, make_session
from ..warmstart import ActionValues
from .actions import depth_mask, split
from .features import stream_observation
from .rollout import Candidate, Rollout
from .session import StreamSession
from .stored import cache_file

#: bumped when the rows' meaning changes (the cache key holds it)
TEACHER_FORMAT = 1


def rollout_values(config: dict[str, Any], teacher: str, margin: float = math.inf,
                   note: Callable[[str], None] | None = None, workers: int | None = None) -> ActionValues:
    """The rows (module docstring) of every conversation a ConversationStream-v0 with
    ``config`` draws from (each scenario of its suite, seeds in
    ``range(contexts_per_scenario)``; those that never overflow give none), played by
    the ``rollout:<base>`` policy ``teacher``, one conversation per work item on
    ``workers`` processes (default: every core; the rows come in the same order
    whatever their number). ``note`` hears one line per conversation."""
    checked = ConversationStreamEnv.checked_config(config)
    text = json.dumps(checked.model_dump(mode="json"), sort_keys=True)
    _teacher(teacher, text)  # here first: a bad name fails before any conversation, a base's fit is made once
    items = [(text, teacher, scenario.name, seed, margin) for scenario in checked.suite
             for seed in range(scenario.context_count(checked.contexts_per_scenario))]
    played = process_map(_conversation_rows, items, workers or default_workers(),
                         preload=["ctxsim.lab.stream.teacher"])
    rows: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for (_, _, name, seed, _), (events, found) in zip(items, played):
        rows.extend(found)
        if note is not None:
            note(f"{name} seed {seed}: {events} events, {len(found)} states")
    if not rows:
        raise ValueError("no training conversation overflows: the teacher has no state to value")
    obs, masks, q = (np.array(col) for col in zip(*rows))
    return ActionValues(obs.astype(np.float32), masks.astype(bool), q)


@lru_cache(maxsize=1)
def _teacher(teacher: str, config: str) -> Rollout:
    """The rollout ``teacher`` under the StreamConfig of the JSON ``config``, built once
    per process (the caller's conversations played in-process share the caller's)."""
    rollout = Rollout.named(teacher, ConversationStreamEnv.checked_config(json.loads(config)))
    if hasattr(rollout.base, "for_training"):  # a fitted fixed choice refuses its fitting conversations; training data may use them
        rollout.base = rollout.base.for_training()
    return rollout


def _conversation_rows(item: tuple[str, str, str, int, float]) -> tuple[int, list]:
    """(events, rows) of one conversation (a worker's item: the config as JSON, teacher,
    scenario name, seed, margin)."""
    config, teacher, name, seed, margin = item
    checked = ConversationStreamEnv.checked_config(json.loads(config))
    scenario = next(s for s in checked.suite if s.name == name)
    session = make_session(build_conversation(scenario, seed, checked), checked)
    rows = conversation_rows(_teacher(teacher, config), session, name, seed, ObservationConfig.of(checked),
                             checked.session_features, margin)
    return len(session.events), rows


def conversation_rows(rollout: Rollout, session: StreamSession, scenario: str, seed: int, obs_config: ObservationConfig,
                      with_session: bool, margin: float) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Play ``session`` to its end with ``rollout``; the rows of every event on the way."""
    rows = []
    while not session.done:
        base_value, found = rollout.candidates(session, scenario, seed)
        rows.extend(event_rows(session, found, obs_config, with_session, margin))
        rollout.apply(session, Rollout.pick(base_value, found, session.settings.actions), scenario, seed)
    return rows


def event_rows(session: StreamSession, found: list[Candidate], obs_config: ObservationConfig, with_session: bool,
               margin: float) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The rows of the pending event of ``session`` (left as it is) from the rollout's
    ``found`` candidates: its first state, then the states within ``margin``."""
    actions = session.settings.actions
    k = len(actions)
    index = {sid: i for i, sid in enumerate(actions)}
    best: dict[tuple[int, tuple[int, ...]], float] = {}  # (depth, first steps) -> best total of the chains through them
    for depth, chain, value in found:
        steps = tuple(index[sid] for sid in chain)
        for n in range(1, len(steps) + 1):
            best[depth, steps[:n]] = max(best.get((depth, steps[:n]), -math.inf), value)
    rows = []

    def visit(state: StreamSession, depth: int | None, prefix: tuple[int, ...]) -> None:
        q = np.full(session.depth_count * k, -math.inf)
        for (d, steps), value in best.items():
            if len(steps) == len(prefix) + 1 and steps[:-1] == prefix and (depth is None or d == depth):
                q[d * k + steps[-1]] = value
        mask = depth_mask(state) & np.isfinite(q)
        q[~mask] = -math.inf
        rows.append((stream_observation(state, obs_config, with_session), mask, q))
        top = q.max()
        for action in np.flatnonzero(mask):
            d, strategy = split(int(action), k)
            below = prefix + (strategy,)
            if q[action] >= top - margin and any(len(s) > len(below) and d == dd and s[:len(below)] == below
                                                 for dd, s in best):
                child = state.copy()
                if depth is None:
                    child.choose_depth(d)
                child.step(actions[strategy])
                visit(child, d, below)

    visit(session, None, ())
    return rows


def teacher_file(config: dict[str, Any], teacher: str, margin: float = math.inf) -> Path:
    """Where the rows of (config, teacher, margin) are kept in the pool folder
    (:func:`cache_file`)."""
    checked = ConversationStreamEnv.checked_config(config)
    return cache_file("teacher", checked, {"format": TEACHER_FORMAT, "teacher": teacher,
                                           "margin": margin if math.isfinite(margin) else "inf"}, ".npz")


def cached_rollout_values(config: dict[str, Any], teacher: str, margin: float = math.inf,
                          note: Callable[[str], None] | None = None) -> tuple[ActionValues, Path, bool]:
    """:func:`rollout_values`, read from the pool folder when an earlier call computed
    them with the same config, teacher, margin and code; (rows, their file, computed now)."""
    path = teacher_file(config, teacher, margin)

    def read(path: Path) -> ActionValues:
        with np.load(path) as saved:
            return ActionValues(saved["observations"], saved["masks"], saved["values"])

    data, made = read_or_make(path, read, lambda: rollout_values(config, teacher, margin, note), lambda data: npz_bytes(
        {"observations": data.observations, "masks": data.masks, "values": data.values}))
    return data, path, made
