"""Faker-driven generator of overflowing agent sessions (design 001's sim generator, grown up).

:class:`SessionGenerator` streams the turns of a realistic coding-agent session on one
software task: user asks and assistant replies, Python code, timestamped logs, To Do
List updates (plan references), tool results in :class:`~ctxsim.model.ToolEnvelope`
(read_file, write_file, run_tests, search, http_get) and pasted configs or data
(``other``). :func:`generate` consumes it until the context reaches the scenario's
target size (tokens) and returns the :class:`~ctxsim.model.ContextState`.

Determinism: everything is drawn from ``random.Random(seed ^ crc32(name))`` and a
Faker instance seeded from it, never from global state or the clock, so the same
scenario and seed give byte-identical :func:`~ctxsim.serialize.dumps_state` output
in every process.

Ground truth planted in the context (and nowhere else by accident), one probe each
(:mod:`ctxsim.probes`), recorded in ``state.fact_table`` and in the holding unit's
``fact_ids``:

- facts (recall) and rules (decision) with exact values; each value occurs exactly
  once in the whole context; rules sit in P1 user messages;
- continuation: the task (its distinctive phrase, the task without its leading
  verb, first in the task message and repeated by plans and summaries) and, once
  per cycle late in it (75-95 % of the cycle's tokens), the open item / next step
  an assistant reply states ("Open item: <value>."), a value that occurs once;
- artifacts: every file the session wrote (each successful write_file: ordinary
  writes, superseded writes and ``scenario.resolved_writes`` planted writes per
  cycle) gives two probes in its write unit: the path, and a distinctive line of
  the written content (a ``def``/``class`` line when there is one) that no earlier
  unit holds. Written paths are never written twice, so that content is the file's
  latest version (a superseded write's read-back shows the same text);
- ``meta ("planted", "duplicate")`` on the older of two identical read_file calls
  (same tool, canonical arguments and content); every other tool call has unique
  arguments;
- ``meta ("planted", "superseded")`` on a write_file whose path is read later; no
  other written path is ever read;
- ``meta ("planted", "error")`` on failed tool calls (``outcome="failure"``); no
  other call fails;
- ``meta ("true_type", t)`` on misclassified units, whose ``type`` label is wrong.

Sizes are tokens including each message's framing (:func:`ctxsim.tokens.message_overhead`).
The share of tokens per true type follows ``scenario.mix`` (see :func:`token_mix`),
except that the system prompt, the task message and the messages that carry rules and
facts are messages whatever the mix (about 100 tokens plus 25 per fact). The total
ends a few percent above the target (at most 5 % on the shipped suite; a small
context dense with planted items can end up to about 8 % above).
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field, replace
from typing import Callable

from faker import Faker

from ..model import ContextState, ContextUnit, Fact, ToolEnvelope, content_hash
from .scenarios import MIX_TYPES, Scenario
from ..tokens import DEFAULT_FORMAT, REPLY_PRIMING, count_lines, message_overhead
from ..transcripts import DURABILITY_BY_TOOL
from .session_text import SessionWriter

#: typical content size per unit type (tokens) when a scenario sets no unit_tokens
DEFAULT_UNIT_TOKENS: dict[str, tuple[int, int]] = {
    "message": (30, 220),
    "code": (120, 520),
    "plan_ref": (60, 240),
    "log": (120, 460),
    "tool_result": (80, 520),
    "other": (60, 260),
    "summary": (150, 360),
}
#: smallest content a generated unit gets (tokens)
MIN_UNIT_TOKENS = 8
ID_PREFIX = {
    "message": "msg", "code": "code", "plan_ref": "plan-ref", "log": "log",
    "tool_result": "tool", "other": "other", "summary": "summary",
}
#: share of ordinary tool calls per tool (durability classes: transcripts.DURABILITY_BY_TOOL)
TOOL_WEIGHTS = {"read_file": 35, "run_tests": 20, "search": 20, "write_file": 15, "http_get": 10}
PRIORITY_AREAS = ("To Do List",)



def stable_seed(name: str, seed: int) -> int:
    """The generator's random seed: ``seed`` xor the crc32 of the scenario name."""
    return seed ^ zlib.crc32(name.encode("utf-8"))


def true_type(unit: ContextUnit) -> str:
    """A unit's real type: its ``meta`` ``true_type`` when misclassified, else its label."""
    return unit.meta_dict.get("true_type", unit.type)


def token_mix(state: ContextState) -> dict[str, float]:
    """Share of tokens (content + framing) per true type among the units whose true type
    is a mix type (summaries and placeholders excluded); every mix type is a key."""
    tokens = dict.fromkeys(MIX_TYPES, 0)
    for unit in state.units:
        kind = true_type(unit)
        if kind in tokens:
            tokens[kind] += state.unit_cost(unit)
    total = sum(tokens.values())
    return {kind: (count / total if total else 0.0) for kind, count in tokens.items()}


def planted(state: ContextState, kind: str) -> list[ContextUnit]:
    """Units marked ``("planted", kind)`` (kind: duplicate, superseded or error)."""
    return [u for u in state.units if u.meta_dict.get("planted") == kind]


def _file_text(content: str) -> str:
    """The file text of a read_file or write_file result (after its header line)."""
    return content.split("\n", 1)[1]



@dataclass(order=True)
class _Event:
    """Something to plant once the session reaches ``due`` tokens."""

    due: int
    seq: int
    kind: str = field(compare=False)  # rule, fact, next_step, duplicate, copy, superseded, read_back, write, error
    payload: dict = field(compare=False, default_factory=dict)


_Planted = tuple[str, str, str]  # (fact id, value, sentence)
#: tool units each planted event kind still adds to the context (a pair's first half brings its second)
_UNITS_OF = {"duplicate": 2, "superseded": 2, "copy": 1, "read_back": 1, "write": 1, "error": 1}
#: fact id prefix of each planted message event, and the fact kind of each prefix
_ID_PREFIX = {"fact": "fact", "rule": "rule", "next_step": "next-step"}
_KIND_OF_PREFIX = {"fact": "fact", "rule": "rule", "next-step": "continuation"}
#: smallest content of a planted write (tokens): enough for a function whose def line is distinctive
MIN_WRITE_TOKENS = 100


class SessionGenerator:
    """A stream of turns of one generated session.

    The first :meth:`next_turn` returns the opening (system prompt, pinned
    instructions, prior summaries, the user's task message); each later call returns
    one more turn. Planted facts, rules and redundancy follow a schedule per cycle of
    ``scenario.resolved_target`` tokens, so a long stream keeps planting them;
    :attr:`facts` lists those planted so far. Token shares per type follow
    ``scenario.mix`` over each cycle.
    """

    def __init__(self, scenario: Scenario, seed: int):
        if scenario.is_transcript:
            raise ValueError(f"scenario {scenario.name!r} is a transcript scenario; use load_transcript")
        self.scenario, self.seed = scenario, seed
        self.target = scenario.resolved_target
        self.mix = {k: v for k, v in scenario.mix.items() if v > 0}
        self._rng = random.Random(stable_seed(scenario.name, seed))
        fake = Faker("en_US")
        fake.seed_instance(self._rng.getrandbits(64))
        self._w = SessionWriter(fake, self._rng, scenario.task)
        self._overhead = message_overhead(DEFAULT_FORMAT)
        self._units: list[ContextUnit] = []
        self._facts: list[Fact] = []
        self._values: dict[str, str] = {}  # planted value -> fact id (also values drawn, not yet placed)
        self._tokens = dict.fromkeys(MIX_TYPES, 0)  # tokens per true mix type
        self._outside_mix = 0  # tokens of summaries
        self._total = 0
        self._p1 = self._mislabelled = self._calls = self._seq = 0
        self._counts = {"fact": 0, "rule": 0, "next_step": 0, "artifact": 0}
        self._turn = 0
        self._budget = 0
        self._used: set[str] = set()  # tool targets (paths, queries, URLs) already used
        self._queue: list[_Event] = []
        self._inflight: list[_Event] = []  # planted tool events of the current turn, not placed yet
        self._cycle = 0
        self._schedule(0)

    # ---- public --------------------------------------------------------
    @property
    def task(self) -> str:
        return self._w.task

    @property
    def units(self) -> tuple[ContextUnit, ...]:
        return tuple(self._units)

    @property
    def facts(self) -> tuple[Fact, ...]:
        """Ground truth planted so far (facts, rules, artifacts, continuation)."""
        return tuple(self._facts)

    @property
    def total_tokens(self) -> int:
        """Tokens of the session so far (equal to ``ContextState.total_tokens``)."""
        return self._total + (REPLY_PRIMING[DEFAULT_FORMAT] if self._units else 0)

    @property
    def pending(self) -> bool:
        """True while planted items of the current cycle wait to be placed."""
        return bool(self._queue)

    def next_turn(self, max_tokens: int | None = None) -> list[ContextUnit]:
        """The units of one more turn (at least one).

        ``max_tokens`` caps the tokens of the turn's optional units; planted items
        that are due are placed anyway, at their smallest size when over the cap.
        """
        start = len(self._units)
        self._budget = max_tokens if max_tokens is not None else 10**9
        if not self._units:
            self._opening()
            return self._units[start:]
        if self.total_tokens >= (self._cycle + 1) * self.target and not self._queue:
            self._cycle += 1
            self._schedule(self._cycle)
        self._turn += 1
        r = self._rng
        if self._queue and self._pick_type() is None and self._queue[0].due > self.total_tokens:
            self._queue[0].due = self.total_tokens  # nothing else is wanted: bring the next planted item forward
        due = self._due()
        carriers: dict[str, list[_Event]] = {
            "user": [e for e in due if e.kind == "rule"], "reply": [e for e in due if e.kind == "next_step"],
            "plan_ref": [], "other": [],
        }
        for event in due:
            if event.kind == "fact":
                options = ["user", "reply"] + [k for k in ("plan_ref", "other") if k in self.mix]
                carriers[r.choice(options)].append(event)
        if carriers["user"] or (self._wants("message") and r.random() < 0.6):
            self._message("user", carriers["user"])
        self._inflight = [e for e in due if e.kind not in ("rule", "fact", "next_step")]
        while self._inflight:
            self._tool_call(self._inflight.pop(0))
        for kind in ("plan_ref", "other"):
            if carriers[kind]:
                self._work_unit(kind, carriers[kind])
        for _ in range(r.randint(1, 3)):
            kind = self._pick_type()
            if kind is None or self._budget < MIN_UNIT_TOKENS + self._overhead:
                break
            self._work_unit(kind, [])
        if carriers["reply"] or (self._wants("message") and r.random() < 0.5):
            self._message("assistant", carriers["reply"])
        if len(self._units) == start:
            self._work_unit(max(self.mix, key=self._deficit), [])
        return self._units[start:]

    def state(self, limit: int | None = None) -> ContextState:
        """The session so far as a context (the scenario's limit unless given, tokens)."""
        s = self.scenario
        return ContextState(
            units=tuple(self._units),
            limit=limit if limit is not None else s.resolved_limit,
            min_limit=s.min_limit,
            warning_threshold=s.warning_threshold,
            priority_areas=PRIORITY_AREAS,
            task=self.task,
            fact_table=tuple(self._facts),
            scenario=s.name,
            seed=self.seed,
        )

    # ---- schedule ------------------------------------------------------
    def _schedule(self, cycle: int) -> None:
        """Queue the planted items of one cycle at token positions within it."""
        s, r, base = self.scenario, self._rng, cycle * self.target

        def at(lo: float, hi: float) -> int:
            return base + int(r.uniform(lo, hi) * self.target)

        for _ in range(s.rule_count):
            self._push("rule", at(0.0, 0.45))
        for _ in range(s.facts - s.rule_count):
            self._push("fact", at(0.0, 0.5) if r.random() < 0.75 else at(0.5, 0.8))
        for _ in range(s.duplicates):
            self._push("duplicate", at(0.05, 0.6))
        for _ in range(s.superseded_writes):
            self._push("superseded", at(0.05, 0.6))
        for _ in range(s.errors):
            self._push("error", at(0.05, 0.8))
        for _ in range(s.resolved_writes):
            self._push("write", at(0.05, 0.8))
        self._push("next_step", at(0.75, 0.95))

    def _push(self, kind: str, due: int, **payload) -> None:
        self._seq += 1
        self._queue.append(_Event(due, self._seq, kind, payload))
        self._queue.sort()

    def _due(self, kinds: tuple[str, ...] | None = None) -> list[_Event]:
        """Remove and return the queued events (of ``kinds``, default all) that are due."""
        now = self.total_tokens
        due = [e for e in self._queue if e.due <= now and (kinds is None or e.kind in kinds)]
        self._queue = [e for e in self._queue if e not in due]
        return due

    def _later(self) -> int:
        """A due position for the second half of a planted pair: a little later, within
        the first 90 % of the current cycle when possible."""
        later = self.total_tokens + int(self._rng.uniform(0.05, 0.2) * self.target)
        return min(later, int((self._cycle + 0.9) * self.target))

    # ---- sizes -----------------------------------------------------------
    def _typical(self, kind: str) -> tuple[int, int]:
        """(min, max) content tokens of a unit of ``kind``."""
        ut = self.scenario.unit_tokens
        return (ut.min, ut.max) if ut and kind != "summary" else DEFAULT_UNIT_TOKENS[kind]

    def _planted_units(self) -> int:
        """Planted tool units still to come in this cycle."""
        return sum(_UNITS_OF.get(e.kind, 0) for e in self._queue + self._inflight)

    def _reserved(self) -> int:
        """Tokens the planted tool units still to come will take: the known size of a
        pair's second half, a typical size for the others."""
        lo, hi = self._typical("tool_result")
        typical = (lo + hi) // 2 + self._overhead
        return sum(e.payload.get("tokens", typical * _UNITS_OF.get(e.kind, 0)) for e in self._queue + self._inflight)

    def _deficit(self, kind: str, *, free: bool = False) -> int:
        """Tokens of ``kind`` the current cycle still wants; ``free``: minus the typical
        size of the planted tool units still to come (what ordinary units may use)."""
        horizon = (self._cycle + 1) * self.target - self._outside_mix
        deficit = int(self.mix.get(kind, 0) * horizon) - self._tokens[kind]
        if free and kind == "tool_result":
            deficit -= self._reserved()
        return deficit

    def _wants(self, kind: str) -> bool:
        return min(self._deficit(kind, free=True), self._budget) > self._overhead + MIN_UNIT_TOKENS

    def _pick_type(self) -> str | None:
        """A mix type drawn in proportion to its free deficit; None when no type wants
        more than a minimal unit."""
        weights = [max(self._deficit(k, free=True) - self._overhead - MIN_UNIT_TOKENS, 0) for k in self.mix]
        if not any(weights):
            return None
        return self._rng.choices(list(self.mix), weights=weights)[0]

    def _size(self, kind: str, planted: str | None = None) -> int:
        """Content tokens of the next unit of ``kind``: a typical size, capped by the
        type's free deficit and by the turn's budget. A ``planted`` tool unit (an event
        kind) shares the deficit with the planted tool units still to come."""
        lo, hi = self._typical(kind)
        size = self._rng.randint(lo, hi)
        if kind in MIX_TYPES:
            if planted:
                cap = self._deficit(kind) // (_UNITS_OF[planted] + self._planted_units())
            else:
                cap = self._deficit(kind, free=True)
            size = min(size, cap - self._overhead)
        size = min(size, self._budget - self._overhead)
        return max(size, MIN_UNIT_TOKENS)

    # ---- planted facts -----------------------------------------------------
    def _draw(self, events: list[_Event]) -> list[_Planted]:
        """A new value and sentence for each fact, rule or next-step event; values occur nowhere yet."""
        out = []
        draw = {"rule": lambda: self._w.rule(self._counts["rule"]), "fact": self._w.fact, "next_step": self._w.next_step}
        for event in events:
            kind = event.kind
            for _ in range(200):
                value, sentence = draw[kind]()
                if self._unused(value):
                    break
            else:
                raise RuntimeError(f"could not draw a {kind} value that occurs nowhere in the context")
            self._counts[kind] += 1
            fact_id = f"{_ID_PREFIX[kind]}-{self._counts[kind]}"
            self._values[value] = fact_id
            out.append((fact_id, value, sentence))
        return out

    def _unused(self, value: str) -> bool:
        if any(value in v or v in value for v in self._values):
            return False
        return not any(value in u.content for u in self._units)

    def _clean(self, content: str, own: list[str]) -> bool:
        """Each planted value occurs in ``content`` exactly once if it is one of ``own``, else never."""
        return all(content.count(v) == (1 if v in own else 0) for v in self._values)

    # ---- units -----------------------------------------------------------
    def _emit(
        self,
        kind: str,
        role: str,
        build: Callable[[], str | tuple[str, ToolEnvelope]],
        *,
        facts: list[_Planted] = (),
        p1: bool = False,
        pinned: bool = False,
        meta: tuple[tuple[str, str], ...] = (),
        summary_depth: int = 0,
        relabel: bool = True,
    ) -> ContextUnit:
        """Build, label, prioritise and append one unit (``kind`` is its true type).

        ``build`` returns the content, or (content, tool envelope) for a tool result;
        it is called again while the content holds a planted value it must not hold.
        """
        own = [value for _, value, _ in facts]
        for _ in range(50):
            built = build()
            content, tool = built if isinstance(built, tuple) else (built, None)
            if self._clean(content, own):
                break
        else:
            raise RuntimeError("could not generate content free of other planted values")
        r, s, n = self._rng, self.scenario, len(self._units)
        if p1 or pinned or self._p1 + r.random() < s.p1_ratio * (n + 1):
            priority = 1
            self._p1 += 1
        else:
            priority = r.choice((2, 3))
        label, meta = kind, list(meta)
        if relabel and not meta and s.misclassified and self._mislabelled + r.random() < s.misclassified * (n + 1):
            label = r.choice([t for t in ("message", "code", "plan_ref", "log", "other") if t != kind])
            meta.append(("true_type", kind))
            self._mislabelled += 1
        self._w.clock += r.uniform(3, 90)
        unit = ContextUnit(
            id=f"{ID_PREFIX[label]}-{n}", type=label, content=content, role=role, turn=self._turn,
            timestamp=round(self._w.clock, 3), priority=priority, pinned=pinned, token_count=count_lines(content),
            tool=tool, fact_ids=tuple(fid for fid, _, _ in facts),
            summary_depth=summary_depth, meta=tuple(sorted(meta)),
        )
        self._units.append(unit)
        cost = unit.token_count + self._overhead
        self._total += cost
        self._budget -= cost
        if kind in self._tokens:
            self._tokens[kind] += cost
        else:
            self._outside_mix += cost
        for fact_id, value, sentence in facts:
            kind_of = _KIND_OF_PREFIX[fact_id.rsplit("-", 1)[0]]
            self._facts.append(Fact(fact_id, value, unit.id, priority=priority, kind=kind_of, text=sentence))
        return unit

    def _attach(self, unit: ContextUnit, probes: list[tuple[str, str, str, str]]) -> None:
        """Record derived probes (id, kind, value, sentence) held by ``unit``, the last
        unit emitted (whose ``fact_ids`` gain their ids)."""
        for fact_id, kind, value, sentence in probes:
            self._facts.append(Fact(fact_id, value, unit.id, priority=unit.priority, kind=kind, text=sentence))
        self._units[-1] = replace(unit, fact_ids=unit.fact_ids + tuple(p[0] for p in probes))

    def _plant_artifact(self, unit: ContextUnit, path: str) -> None:
        """The two artifact probes of a file written by ``unit``: its path and a
        distinctive line of the written text (a def/class line when one is new)."""
        lines = [line.strip() for line in _file_text(unit.content).splitlines()]
        earlier = [u.content for u in self._units[:-1]]
        fresh = [line for line in lines if len(line) >= 12 and not any(line in text for text in earlier)]
        code = [line for line in fresh if line.startswith(("def ", "class "))]
        line = (code or fresh or [path])[0]
        self._counts["artifact"] += 1
        n = self._counts["artifact"]
        self._attach(unit, [
            (f"artifact-{n}-path", "artifact", path, f"The session wrote {path}."),
            (f"artifact-{n}-line", "artifact", line, f"The latest version of {path} contains: {line}"),
        ])

    def _opening(self) -> None:
        w, s = self._w, self.scenario
        self._emit("message", "system", w.system_prompt, p1=True, relabel=False)
        for i in range(s.pinned):
            self._emit("message", "system", lambda: w.pinned_note(i + 1), pinned=True, relabel=False)
        last = 0
        for i in range(s.prior_summaries):
            depth = 2 if i < s.prior_summaries // 3 else 1
            first, last = last + 1, last + self._rng.randint(4, 12)
            size = self._size("summary")
            self._emit("summary", "assistant", lambda: w.summary(size, depth, first, last), summary_depth=depth, relabel=False)
        self._turn = last + 1
        facts = self._draw(self._due(("rule", "fact")))
        task = self._emit("message", "user", lambda: w.task_message([t for _, _, t in facts]), facts=facts, p1=True, relabel=False)
        self._attach(task, [("task", "continuation", w.task_phrase(), f"Today's task: {w.task}.")])

    def _message(self, role: str, events: list[_Event]) -> None:
        """A user ask or an assistant reply carrying the given facts and rules (rules make it P1)."""
        facts = self._draw(events)
        size = self._size("message")
        extra = [t for _, _, t in facts]
        write = self._w.user_ask if role == "user" else self._w.assistant_reply
        is_rule = any(e.kind == "rule" for e in events)
        self._emit("message", role, lambda: write(size, extra), facts=facts, p1=is_rule, relabel=not is_rule)

    def _work_unit(self, kind: str, events: list[_Event]) -> None:
        if kind == "message":
            self._message("assistant", events)
            return
        if kind == "tool_result":
            self._tool_call(_Event(0, 0, "call"))
            return
        facts = self._draw(events)
        size = self._size(kind)
        extra = [t for _, _, t in facts]
        w = self._w
        build, role = {
            "code": (lambda: w.code_block(size), "assistant"),
            "log": (lambda: w.log_block(size), "user"),
            "plan_ref": (lambda: w.plan(size, extra), "assistant"),
            "other": (lambda: w.other_block(size, extra), "user"),
        }[kind]
        self._emit(kind, role, build, facts=facts)

    # ---- tool calls --------------------------------------------------------
    def _fresh(self, make: Callable[[], str]) -> str:
        """A tool target (path, query, URL) no earlier call used."""
        while True:
            value = make()
            if value not in self._used:
                self._used.add(value)
                return value

    def _pick_tool(self) -> str:
        return self._rng.choices(list(TOOL_WEIGHTS), weights=list(TOOL_WEIGHTS.values()))[0]

    def _tool_call(self, event: _Event) -> None:
        """One tool result: an ordinary call (event kind "call") or a planted one."""
        w, kind, payload = self._w, event.kind, event.payload
        size = self._size("tool_result", planted=None if kind == "call" else kind)
        if kind in ("copy", "read_back"):  # a second identical read / the read that supersedes a write
            self._read(payload["path"], lambda: payload["text"])
        elif kind == "duplicate":
            path = self._fresh(w.src_path)
            unit = self._read(path, lambda: w.python_source(size - 8, path), meta=(("planted", "duplicate"),))
            self._push("copy", self._later(), path=path, text=_file_text(unit.content), tokens=unit.token_count + self._overhead)
        elif kind == "superseded":
            path = self._fresh(w.src_path)
            unit = self._write(path, size, meta=(("planted", "superseded"),))
            self._push("read_back", self._later(), path=path, text=_file_text(unit.content), tokens=unit.token_count + self._overhead)
        elif kind == "error":
            self._failed_call(self._pick_tool(), size)
        elif kind == "write":
            self._write(self._fresh(w.src_path), max(size, MIN_WRITE_TOKENS))
        else:
            self._ordinary_call(self._pick_tool(), size)

    def _ordinary_call(self, tool: str, size: int) -> None:
        w = self._w
        if tool == "read_file":
            path = self._fresh(w.src_path)
            self._read(path, lambda: w.python_source(size - 8, path))
        elif tool == "write_file":
            self._write(self._fresh(w.src_path), size)
        elif tool == "run_tests":
            target = self._fresh(w.test_path)

            def run() -> tuple[str, dict]:
                text, passed, failed = w.test_run(size, target)
                return text, {"target": target, "passed": passed, "failed": failed, "status": "failed" if failed else "passed"}

            self._tool_unit("run_tests", {"target": target}, target, run)
        elif tool == "search":
            query = self._fresh(w.ident)

            def run() -> tuple[str, dict]:
                text, matches = w.search_result(size, query)
                return text, {"query": query, "matches": matches, "status": "ok"}

            self._tool_unit("search", {"path": "src/", "query": query}, None, run)
        else:
            url = self._fresh(w.url)
            self._tool_unit("http_get", {"url": url}, url, lambda: (w.http_response(size, url), {"url": url, "status": 200}))

    def _read(self, path: str, text: Callable[[], str], meta: tuple = ()) -> ContextUnit:
        def run() -> tuple[str, dict]:
            body = text()
            lines = body.count("\n") + 1
            return f"File: {path} ({lines} lines)\n{body}", {"path": path, "lines": lines, "status": "ok"}

        return self._tool_unit("read_file", {"path": path}, path, run, meta=meta)

    def _write(self, path: str, size: int, meta: tuple = ()) -> ContextUnit:
        def run() -> tuple[str, dict]:
            body = self._w.python_source(size - 12, path)
            lines, size_bytes = body.count("\n") + 1, len(body.encode())
            fields = {"path": path, "lines": lines, "bytes": size_bytes, "status": "ok"}
            return f"Wrote {lines} lines ({size_bytes} bytes) to {path}:\n{body}", fields

        unit = self._tool_unit("write_file", {"path": path}, path, run, meta=meta)
        self._plant_artifact(unit, path)
        return self._units[-1]

    def _failed_call(self, tool: str, size: int) -> None:
        w = self._w
        make_target = {"read_file": w.src_path, "write_file": w.src_path, "run_tests": w.test_path,
                       "search": lambda: w.ident() + "(", "http_get": w.url}[tool]
        target = self._fresh(make_target)
        key = {"run_tests": "target", "search": "query", "http_get": "url"}.get(tool, "path")
        args = {key: target, **({"path": "src/"} if tool == "search" else {})}

        def run() -> tuple[str, dict]:
            text, error = w.failure(tool, size, target)
            return text, {key: target, "status": "error", "error": error}

        self._tool_unit(tool, args, None if tool == "search" else target, run, meta=(("planted", "error"),), failed=True)

    def _tool_unit(self, name: str, args: dict, target: str | None, run: Callable[[], tuple[str, dict]],
                   *, meta: tuple = (), failed: bool = False) -> ContextUnit:
        """A tool result unit; ``run`` returns (content, key fields). A failed call's
        key field ``error`` becomes the envelope's error message."""
        self._calls += 1
        call_id = f"call_{self._calls:04d}"

        def build() -> tuple[str, ToolEnvelope]:
            content, fields = run()
            error = fields.pop("error", None)
            envelope = ToolEnvelope(
                tool_name=name, call_id=call_id, arguments=ToolEnvelope.canonical_arguments(args),
                outcome="failure" if failed else "success",
                key_fields=tuple(sorted((k, str(v)) for k, v in fields.items())),
                durability=DURABILITY_BY_TOOL[name],
                determinism_hash=content_hash(_file_text(content)) if name == "read_file" and not failed else None,
                target=target, error_message=error,
            )
            return content, envelope

        return self._emit("tool_result", "tool", build, meta=meta)


def generate(scenario: Scenario, seed: int) -> ContextState:
    """The overflowing context of a generated scenario (deterministic in scenario and seed).

    Consumes :class:`SessionGenerator` turns until the context holds at least
    ``scenario.resolved_target`` tokens and every planted item is placed; the total
    ends within a few percent above the target.
    """
    session = SessionGenerator(scenario, seed)
    while session.total_tokens < session.target or session.pending:
        session.next_turn(max_tokens=session.target - session.total_tokens)
    return session.state()
