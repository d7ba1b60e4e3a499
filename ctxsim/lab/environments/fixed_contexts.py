"""A fixed evaluation set: the same contexts, in the same order, at every evaluation.

Training's evaluation callback (``ctxsim.lab.train``) wraps its evaluation env in
:class:`FixedContexts`, so every evaluation (and with it the choice of the best
model) scores the policy on the same contexts instead of a new random draw. The
order is :func:`evaluation_order`: the scenarios of the split in turn, each one's
context seeds in order — for four scenarios and 40 episodes, context seeds 0–9 of
each, exactly the contexts of ``ctxsim evaluate --names <the four> --seeds 10``.
Contexts that already fit the target are skipped (there is nothing to break).

Works with every ctxsim env whose ``reset`` takes ``options={"scenario": name,
"context_seed": n}`` and raises ScenarioError for a context that fits.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import count
from typing import Any

import gymnasium as gym

from ...errors import ScenarioError
from ..scenarios import Scenario


def evaluation_order(suite: Sequence[Scenario], contexts_per_scenario: int) -> Iterator[tuple[str, int]]:
    """(scenario name, context seed), endlessly: round ``k`` takes every scenario in
    suite order with context seed ``k`` (modulo the scenario's number of distinct
    contexts, :meth:`~ctxsim.lab.scenarios.Scenario.context_count`)."""
    for k in count():
        for scenario in suite:
            yield scenario.name, k % scenario.context_count(contexts_per_scenario)


class FixedContexts(gym.Wrapper):
    """Resets without options draw the next context of :func:`evaluation_order`;
    :meth:`rewind` starts the order again (the evaluation callback calls it before each
    evaluation). Resets with options pass through unchanged."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        base = env.unwrapped
        self._suite: tuple[Scenario, ...] = base.suite
        self._per_scenario: int = base.config["contexts_per_scenario"]
        # draws until every distinct context has come once: a longer search finds nothing new
        self._attempts = len(self._suite) * max(s.context_count(self._per_scenario) for s in self._suite)
        self.rewind()

    def rewind(self) -> None:
        """The next reset draws the first context of the order again."""
        self._order = evaluation_order(self._suite, self._per_scenario)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if options:
            return self.env.reset(seed=seed, options=options)
        for _ in range(self._attempts):
            name, context_seed = next(self._order)
            try:
                return self.env.reset(seed=seed, options={"scenario": name, "context_seed": context_seed})
            except ScenarioError:  # this context fits the target: the next one
                seed = None
        raise ScenarioError(f"no context of {[s.name for s in self._suite]} overflows the target", key="scenarios")
