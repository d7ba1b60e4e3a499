"""How a training run chooses its model: the evaluation callback.

:func:`evaluation_callback` is SB3's EvalCallback (or sb3-contrib's masked one) as
:func:`ctxsim.lab.train.train` uses it: every ``eval_freq`` steps it scores the policy
on the same fixed contexts of the selection split and keeps the best evaluation as the
run's ``best_model.zip``; ``evaluations.npz`` is its learning curve.

SB3's callback scores the network's top action (``model.predict``). A run whose
experiment says ``lookahead: true`` does not act so: it acts by
:func:`ctxsim.policies.lookahead.look_ahead` on the network's ranking
(:class:`~ctxsim.lab.policies.sb3.SB3Policy`). For such a run the callback is given an
``acting`` function (the run's policy acting on an episode) and scores each evaluation
by it (:class:`ActingModel`), so the model kept is the one that acts best, and the
curve is the reward the run would get: the steps the look-ahead tries are charged to
the episode and count in its reward, as in ``ctxsim evaluate``.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np

from ..episode import OverflowEpisode

#: a policy acting on an episode: the name of the action it takes
Acting = Callable[[OverflowEpisode], str]


class ActingModel:
    """A model whose ``predict`` is ``acting`` on the evaluation env's episode (its one
    env; the observation passed in is ignored), otherwise the model itself (``save``,
    ``logger``, ``get_vec_normalize_env`` and the rest are the wrapped model's)."""

    def __init__(self, model, eval_env, acting: Acting) -> None:
        self.model, self.eval_env, self.acting = model, eval_env, acting

    def predict(self, observation, state=None, episode_start=None, deterministic: bool = True, action_masks=None):
        (episode,) = self.eval_env.get_attr("episode")
        return np.array([episode.settings.actions.index(self.acting(episode))]), state

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


def evaluation_callback(callback_cls):
    """``callback_cls`` (SB3's EvalCallback or sb3-contrib's masked one) as training
    uses it, with these changes:

    * before each evaluation it rewinds an eval env on the fixed evaluation set
      (:class:`~ctxsim.lab.environments.fixed_contexts.FixedContexts`), so every
      evaluation scores the same contexts;
    * with ``acting`` (set after construction; the eval env must be one overflow env)
      each evaluation scores the policy acting so instead of the network's top action
      (:class:`ActingModel`);
    * it writes ``evaluations.npz`` atomically: SB3 saves it in place at every
      evaluation, so here it goes to a hidden sibling first, then is renamed over
      the file;
    * with ``at_start`` (set after construction) it also evaluates before the first
      step, at timestep 0: after a warm start the fitted policy itself is a candidate
      for the best model, so RL steps that make it worse are never chosen;
    * :meth:`evaluate_if_never` evaluates once after a run shorter than one
      ``eval_freq``, so every run folder has its evaluations and best model."""

    class TrainingEvaluations(callback_cls):
        at_start = False
        acting: Acting | None = None

        def _on_training_start(self) -> None:
            super()._on_training_start()
            if self.at_start:
                self._on_step()  # n_calls is 0: a multiple of every eval_freq

        def evaluate_if_never(self) -> None:
            """Evaluate once at the end of a run shorter than ``eval_freq`` (which
            would otherwise end with no evaluations.npz, or none after its start, and
            no model selected from its steps)."""
            if self.n_calls and not any(self.evaluations_timesteps):
                every, self.eval_freq = self.eval_freq, self.n_calls
                try:
                    self._on_step()
                finally:
                    self.eval_freq = every

        def _on_step(self) -> bool:
            due = self.eval_freq > 0 and self.n_calls % self.eval_freq == 0
            if due and self.eval_env.has_attr("rewind"):
                self.eval_env.env_method("rewind")
            model, final = self.model, self.log_path
            if due and self.acting is not None:
                self.model = ActingModel(model, self.eval_env, self.acting)
            scratch = None if final is None else os.path.join(os.path.dirname(final), f".{os.path.basename(final)}.tmp")
            self.log_path = scratch
            try:
                return super()._on_step()
            finally:
                self.model, self.log_path = model, final
                if scratch is not None and os.path.exists(scratch + ".npz"):
                    os.replace(scratch + ".npz", final + ".npz")

    TrainingEvaluations.__name__ = TrainingEvaluations.__qualname__ = f"Training{callback_cls.__name__}"
    return TrainingEvaluations
