"""A Gymnasium wrapper that logs every transition to JSONL (:mod:`ctxsim.transitions`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from ...transitions import TransitionWriter


class TransitionRecorder(gym.Wrapper):
    """Writes one :mod:`ctxsim.transitions` record per step of the wrapped env.

    The wrapped env's unwrapped object must expose ``state`` (the current
    :class:`~ctxsim.model.ContextState`) and put ``scenario`` / ``seed`` in its reset
    info, the applied strategy id as ``action`` in every step's info and ``outcome``
    in the info of an episode's last step, as ``ContextOverflowEnv`` does. Episodes are
    numbered on from the log's last (0 for a new log), steps from 0 per episode;
    with ``overwrite=False`` an existing log is appended to.
    """

    def __init__(self, env: gym.Env, path: str | Path, run_id: str, *, overwrite: bool = False, full_text: bool = False):
        super().__init__(env)
        self.writer = TransitionWriter(path, run_id, overwrite=overwrite, full_text=full_text)
        self.episode = self.writer.first_episode - 1
        self._step = 0
        self._obs: np.ndarray | None = None
        self._where: tuple[str, int | None] = ("", None)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self.episode += 1
        self._step = 0
        self._obs = obs
        self._where = (info.get("scenario", ""), info.get("seed"))
        return obs, info

    def step(self, action):
        if self._obs is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        core = self.env.unwrapped
        before = core.state
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.writer.write_transition(
            episode=self.episode,
            step=self._step,
            scenario=self._where[0],
            seed=self._where[1],
            state_before=before,
            observation_before=self._obs,
            action=info["action"],  # the strategy id applied (a stream action also names a depth)
            reward=reward,
            state_after=core.state,
            observation_after=obs,
            terminated=terminated,
            truncated=truncated,
            outcome=info.get("outcome"),
        )
        self._step += 1
        self._obs = obs
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        self.writer.close()
        super().close()
