"""Rollout: a long-horizon reference for ConversationStream-v0.

The per-event oracle (``oracle``) finds the best chain for one overflow event, blind
to what the chain does to later turns. ``rollout:<base>`` looks ahead to the end of
the conversation instead: at every overflow event it tries each break depth and each
chain of valid actions at it (the oracle's candidates,
:func:`ctxsim.policies.oracle.chains`) on a copy of the session, lets the ``base``
policy play the rest of the conversation, and applies the (depth, chain) whose total reward — this event's payment and every later one,
the end-of-conversation terms included — is highest. The base policy's own way of
breaking the event is a candidate too, and it wins ties, so a peer acting with its
own strategies can be a base. This is the rollout algorithm of approximate dynamic
programming: the session is deterministic and the base policy is reset with the same
seed for the same event, so the rollout's total is never below the base policy's; by
how much it exceeds it measures what long-horizon choices are worth on a
conversation.

Cost: per event, one session copy and one rest-of-conversation play per candidate
(at most 258 chains per depth with six actions and three steps, plus the base's own).

``rollout-futures:<base>`` (:class:`FuturesRollout`) does not see the conversation's
own future: it scores each candidate by its mean total over :data:`FUTURE_DRAWS`
conversations that share the past and take the later turns from other seeds of the
same scenario (:func:`~.conversation.with_future_of`). It knows the present and the
scenario's process, as a per-event policy with a model of the scenario could; its
total can fall below the base's.

``rollout-past:<base>`` (:class:`PastRollout`) knows less: its futures are the
conversation's own past turns drawn again (:func:`~.conversation.with_future_from_past`),
so it needs nothing a deployed agent does not have at the event — what it has seen, and
the session's rules (limits, the fresh-start trigger, the reward) to play them by.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import PolicyError
from ...policies import Policy, get_policy
from ...policies.oracle import chains
from ..environments.conversation_stream import build_conversation
from .conversation import Conversation, with_future_from_past, with_future_of
from .play import EventPlayer, break_event, play
from .players import stream_player
from .session import StreamSession

if TYPE_CHECKING:
    from ..environments.conversation_stream import StreamConfig

#: prefix of the rollout policies' names: ``rollout:<base policy name or path>``
PREFIX = "rollout:"
#: prefix of the rollouts over sampled futures: ``rollout-futures:<base>``
FUTURES_PREFIX = "rollout-futures:"
#: prefix of the rollouts over futures drawn from the conversation's past: ``rollout-past:<base>``
PAST_PREFIX = "rollout-past:"
#: how many sampled futures a ``rollout-futures:`` candidate is scored over
FUTURE_DRAWS = 4
#: totals closer than this are ties (the same play summed in another order differs in
#: the last bits, and must not count as an improvement)
TIE = 1e-9
#: one candidate break of an event: (depth index, chain of action ids, total reward to the end of the conversation)
Candidate = tuple[int, tuple[str, ...], float]


def _prefix(name: str) -> str | None:
    """The rollout prefix ``name`` starts with (:data:`PREFIX`, :data:`FUTURES_PREFIX`, :data:`PAST_PREFIX`), or None."""
    return next((p for p in (PREFIX, FUTURES_PREFIX, PAST_PREFIX) if str(name).startswith(p)), None)


def rollout_base(name: str) -> str:
    """The base policy's name of a ``rollout:``, ``rollout-futures:`` or ``rollout-past:`` name."""
    return str(name)[len(_prefix(name) or PREFIX):]


def is_rollout(name: str) -> bool:
    """True for a ``rollout:<base>``, ``rollout-futures:<base>`` or ``rollout-past:<base>`` policy name."""
    return _prefix(name) is not None


class Rollout:
    """Plays whole conversations by rollout over ``base`` (module docstring)."""

    def __init__(self, base: Policy | EventPlayer, name: str):
        self.base, self.name = base, name

    @classmethod
    def named(cls, name: str, config: StreamConfig) -> Rollout:
        """The rollout policy of a ``rollout:<base>`` name (the base loaded by
        :func:`ctxsim.policies.get_policy`, playing as :func:`~ctxsim.lab.stream.players.stream_player`
        makes it under the validated StreamConfig ``config``)."""
        prefix = _prefix(name)
        base = rollout_base(name)
        if not base:
            raise PolicyError(f"'{name}' names no base policy; e.g. rollout:seed-chain")
        if is_rollout(base):
            raise PolicyError(f"'{name}': the base of a rollout cannot be a rollout")
        player = stream_player(get_policy(base), config)
        if prefix == FUTURES_PREFIX:
            return FuturesRollout(player, str(name), config)
        if prefix == PAST_PREFIX:
            return PastRollout(player, str(name), config)
        return cls(player, str(name))

    def play_event(self, session: StreamSession, scenario: str, seed: int) -> float:
        """Break the pending event of ``session`` with the best candidate; the reward then
        paid (:func:`~ctxsim.lab.stream.evaluate_stream.play` calls it for every event)."""
        return self.apply(session, self.best_chain(session, scenario, seed), scenario, seed)

    def apply(self, session: StreamSession, best: tuple[int, tuple[str, ...]] | None, scenario: str, seed: int) -> float:
        """Break the pending event with ``best`` (a :meth:`best_chain` answer: None lets
        ``base`` break it); the reward then paid."""
        if best is None:
            return break_event(self.base, session, scenario, seed)
        depth, chain = best
        session.choose_depth(depth)
        return sum(session.step(sid).reward for sid in chain)

    def best_chain(self, session: StreamSession, scenario: str, seed: int) -> tuple[int, tuple[str, ...]] | None:
        """(depth index, chain) for the pending event with the highest total reward to
        the end of the conversation when ``base`` plays every later event; None when no
        candidate beats letting ``base`` break this event too (:meth:`pick`)."""
        return self.pick(*self.candidates(session, scenario, seed), session.settings.actions)

    def candidates(self, session: StreamSession, scenario: str, seed: int) -> tuple[float, list[Candidate]]:
        """(total reward to the end when ``base`` breaks the pending event too, and a
        :data:`Candidate` for every depth and every chain of valid actions at it —
        depths in order, chains in :func:`~ctxsim.policies.oracle.chains`' order); each
        total the mean over :meth:`worlds` (here the session alone)."""
        worlds = self.worlds(session)
        found = []
        for depth in range(session.depth_count):
            start = session.event_at(depth)
            for finished in chains(start.original, start.settings):
                values = [self.value(world, finished.chain, scenario, seed, depth) for world in worlds]
                found.append((depth, finished.chain, sum(values) / len(values)))
        base = [play(self.base, world.copy(), scenario, seed) for world in worlds]
        return sum(base) / len(base), found

    def worlds(self, session: StreamSession) -> list[StreamSession]:
        """The sessions a candidate is played on from here: ``session`` itself (its real
        future)."""
        return [session]

    @staticmethod
    def pick(base_value: float, candidates: list[Candidate], actions: tuple[str, ...]) -> tuple[int, tuple[str, ...]] | None:
        """The (depth, chain) of the candidate with the highest total, or None when none
        beats ``base_value`` (ties keep the base's choice, then go to the shallower depth
        and the first chain in the order of ``actions``, the settings' action ids)."""
        order = {sid: i for i, sid in enumerate(actions)}
        best, best_value, best_key = None, base_value, ()
        for depth, chain, value in candidates:
            key = (depth, tuple(order[sid] for sid in chain))
            better = value > best_value + TIE
            tied = abs(value - best_value) <= TIE and best is not None and key < best_key
            if better or tied:
                best, best_value, best_key = (depth, chain), max(value, best_value), key
        return best

    def value(self, session: StreamSession, chain: tuple[str, ...], scenario: str, seed: int, depth: int = 0) -> float:
        """Total reward from here when ``chain`` breaks the pending event at depth index
        ``depth`` and ``base`` plays the rest (``session`` is left as it was)."""
        trial = session.copy()
        trial.choose_depth(depth)
        total = sum(trial.step(sid).reward for sid in chain)
        return total if trial.done else total + play(self.base, trial, scenario, seed)


class _FuturesOf(Rollout):
    """A rollout whose candidates are scored over ``draws`` futures of the conversation
    (:meth:`future`, the ``k``-th of them), the base playing the rest."""

    def __init__(self, base: Policy | EventPlayer, name: str, config: StreamConfig, draws: int = FUTURE_DRAWS):
        super().__init__(base, name)
        self.config, self.draws = config, draws

    def worlds(self, session: StreamSession) -> list[StreamSession]:
        """Copies of ``session`` whose conversation keeps the turns played so far and
        takes the later ones from :meth:`future`."""
        copies = []
        for k in range(self.draws):
            copy = session.copy()
            copy.conversation = self.future(session, k)
            copies.append(copy)
        return copies

    def future(self, session: StreamSession, k: int) -> Conversation:
        raise NotImplementedError


class FuturesRollout(_FuturesOf):
    """``rollout-futures:<base>`` (module docstring): each candidate scored over
    ``draws`` sampled futures of the conversation, the base playing the rest."""

    def __init__(self, base: Policy | EventPlayer, name: str, config: StreamConfig, draws: int = FUTURE_DRAWS):
        super().__init__(base, name, config, draws)
        self._others: list[Conversation] = []
        self._others_of: tuple[str, int | None] | None = None  # the conversation they are futures of

    def future(self, session: StreamSession, k: int) -> Conversation:
        """The conversation with its turns after the current one taken from seed
        ``10,000 + 97·k + seed`` of the same scenario (those conversations built once per
        conversation: the last one played is kept); tag ``future{k}-``."""
        conversation = session.conversation
        key = (conversation.scenario, conversation.seed)
        if self._others_of != key:
            scenario = next(s for s in self.config.suite if s.name == conversation.scenario)
            self._others = [build_conversation(scenario, 10_000 + 97 * j + (conversation.seed or 0), self.config)
                            for j in range(self.draws)]
            self._others_of = key
        return with_future_of(conversation, self._others[k], session.turn, f"future{k}-", self.config.probes)


class PastRollout(_FuturesOf):
    """``rollout-past:<base>`` (module docstring): each candidate scored over ``draws``
    futures drawn from the conversation's own past turns, the base playing the rest."""

    def future(self, session: StreamSession, k: int) -> Conversation:
        """The conversation with its later turns drawn from its turns so far
        (:func:`~.conversation.with_future_from_past`, tag ``past{k}-``)."""
        return with_future_from_past(session.conversation, session.turn, f"past{k}-", self.config.probes)
