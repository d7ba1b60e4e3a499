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

import json
import random
import zlib
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timezone
from itertools import chain, islice
from typing import Callable, Iterator

from faker import Faker

from ..model import ContextState, ContextUnit, Fact, ToolEnvelope, content_hash
from .scenarios import MIX_TYPES, Scenario
from ..tokens import DEFAULT_FORMAT, REPLY_PRIMING, count_lines, count_tokens, message_overhead
from ..transcripts import DURABILITY_BY_TOOL

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
EPOCH = datetime(2026, 1, 12, 9, 0, tzinfo=timezone.utc).timestamp()
#: the fixed end of the weekday draw (Faker's own default end is the current time)
WEEKDAY_END = datetime(2026, 1, 12, tzinfo=timezone.utc)
PRIORITY_AREAS = ("To Do List",)

COMPONENTS = (
    "billing", "auth", "scheduler", "export", "search", "notifications", "payments", "reporting",
    "ingestion", "cache", "webhooks", "inventory", "accounts", "audit", "gateway",
)
FEATURES = (
    "retry handling for failed webhooks", "CSV export of monthly invoices", "cursor pagination for the orders endpoint",
    "rate limiting per API key", "audit logging for admin actions", "bulk import of customer records",
    "timezone-aware scheduling", "soft deletion of projects", "idempotency keys for payments",
    "incremental search indexing", "email digests for notifications", "a health-check endpoint",
)
SYMPTOMS = (
    "returns a 500 when the payload is empty", "times out under load", "drops the last page of results",
    "double-counts refunds", "ignores the configured timezone", "leaks database connections",
    "writes duplicate rows on retry", "fails on non-ASCII names", "rounds amounts the wrong way",
    "logs a stack trace on every request",
)
FINDINGS = (
    "does not handle an empty list", "compares naive and aware datetimes", "retries without any backoff",
    "builds the SQL query by string concatenation", "swallows the original exception",
    "reads the whole file into memory", "uses a mutable default argument", "never closes the HTTP session",
)
CHANGES = (
    "validate the input before the database call", "wrap both writes in one transaction",
    "pass the timezone explicitly", "return early on empty input", "reuse a single HTTP session",
    "move the parsing into a helper", "add exponential backoff with jitter",
)
NEXT_STEPS = (
    "add a regression test", "run the full test suite", "update the To Do List", "check the staging logs",
    "clean up the helper functions", "look at the remaining failures", "write a short note for the reviewer",
)
VERBS = ("load", "parse", "build", "sync", "render", "validate", "fetch", "apply", "merge", "compute", "resolve", "export")
TYPES = ("str", "int", "float", "dict[str, Any]", "list[str]", "bool")
RULES = (
    "never delete production data", "always run the linter before committing", "never push directly to main",
    "always add a test for every bug fix", "never log customer email addresses", "always use UTC timestamps in logs",
    "never commit secrets to the repository", "always ask before adding a new dependency",
    "never disable a failing test to make CI pass", "always keep public function signatures backward compatible",
    "never run migrations without a backup", "always write commit messages in the imperative mood",
)
RULE_SENTENCES = (
    "One rule for the rest of this session: {v}.",
    "Please remember: {v}. This is not negotiable.",
    "Keep this in mind from now on: {v}.",
    "Team policy, and I mean it: {v}.",
)
SUMMARY_TEMPLATE = (
    "[Context Summary - Turns {first}-{last}]{depth}\n"
    "## Primary Intent\n{intent}\n"
    "## Files & Code\n{files}\n"
    "## Decisions Made\n{decisions}\n"
    "## Current State\n{state}\n"
    "## Rules & Constraints\n{rules}\n"
    "## Next Steps\n{next}"
)


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


def _fill(pieces: Iterator[str], size: int, sep: str = "\n") -> str:
    """Join pieces while their tokens stay closest to ``size`` (at least one piece).

    Each piece is counted once; the unit holding the joined text is counted from
    those counts where that is exact (:func:`~ctxsim.tokens.count_lines`)."""
    out: list[str] = []
    tokens = 0
    for piece in pieces:
        cost = count_tokens(piece) + 1
        if out and tokens + cost / 2 > size:
            break
        out.append(piece)
        tokens += cost
        if tokens >= size:
            break
    return sep.join(out)


class _Writer:
    """Text of one project's session: every method returns content of about ``size`` tokens."""

    def __init__(self, fake: Faker, rng: random.Random, task: str | None):
        self.fake, self.rng = fake, rng
        self.company = fake.company()
        self.repo = f"{fake.word()}-{fake.word()}".lower()
        self.package = self.repo.replace("-", "_")
        self.component = rng.choice(COMPONENTS)
        self.feature = rng.choice(FEATURES)
        verb = rng.choice(("Add", "Implement", "Finish"))
        self.task = task or f"{verb} {self.feature} in the {self.component} service of {self.repo}"
        self.todo = [f"P1: {self.task}"] + [f"P{rng.choice((1, 2, 2, 3))}: {s}" for s in self._todo_items(6)]
        self.rules = rng.sample(RULES, len(RULES))
        self.clock = EPOCH

    # ---- small pieces ---------------------------------------------------
    def ident(self) -> str:
        return f"{self.rng.choice(VERBS)}_{self.fake.word()}"

    def day(self) -> str:
        d = self.fake.date_between_dates(date(2026, 1, 5), date(2026, 12, 18))
        return f"{d:%B} {d.day}, {d.year}"

    def weekday(self) -> str:
        # Faker's day_of_week() draws a date between 1970 and *now*, so its answer
        # drifts with the clock; the same single draw against a fixed end does not
        return self.fake.date_time(end_datetime=WEEKDAY_END).strftime("%A")

    def src_path(self, ext: str = "py") -> str:
        return f"src/{self.package}/{self.fake.word()}_{self.fake.word()}.{ext}"

    def test_path(self) -> str:
        return f"tests/test_{self.fake.word()}_{self.fake.word()}.py"

    def url(self) -> str:
        return f"https://api.{self.fake.domain_name()}/v2/{self.fake.word()}s?page={self.rng.randint(1, 40)}"

    def timestamp(self) -> str:
        self.clock += self.rng.uniform(0.01, 4.0)
        return datetime.fromtimestamp(self.clock, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def _todo_items(self, n: int) -> list[str]:
        r = self.rng
        templates = (
            lambda: f"Fix {self.ident()}() in {self.src_path()}: it {r.choice(FINDINGS)}",
            lambda: f"Add tests for the {r.choice(COMPONENTS)} {r.choice(('client', 'worker', 'endpoint', 'model'))}",
            lambda: f"Review {self.fake.name()}'s comments on the {r.choice(COMPONENTS)} change",
            lambda: f"Investigate why the {r.choice(COMPONENTS)} job {r.choice(SYMPTOMS)}",
            lambda: f"Document {r.choice(FEATURES)} in docs/{self.fake.word()}.md",
        )
        return list(islice(self._prose(templates), n))

    # ---- messages ------------------------------------------------------
    def system_prompt(self) -> str:
        return (
            f"You are a coding agent working in the {self.repo} repository of {self.company}. "
            "You can call the tools read_file, write_file, run_tests, search and http_get. "
            "Work in small steps, explain what you change, keep the To Do List up to date "
            "and follow every rule the user gives you."
        )

    def pinned_note(self, number: int) -> str:
        f, r = self.fake, self.rng
        note = r.choice((
            "Target Python 3.11 and keep type hints on every public function.",
            f"Production deploys go through {f.name()}; staging deploys are self-service.",
            f"The main branch of {self.repo} is protected: open pull requests against develop.",
            f"Database migrations live in migrations/{self.component}/ and are generated, not written by hand.",
            f"Secrets come from the vault path kv/{self.repo}/{f.word()}, not from environment files.",
            f"Questions about the {r.choice(COMPONENTS)} API go to {f.first_name()} in #{f.word()}-dev.",
        ))
        return f"Pinned instruction {number}: {note}"

    def fact(self) -> tuple[str, str]:
        """(value, sentence) of a planted fact with an exact, distinctive value."""
        f, r = self.fake, self.rng
        kind = r.randrange(12)
        if kind == 0:
            v = f"${r.randrange(1200, 98000, 50):,}"
            return v, f"The approved budget for the {self.feature} work is {v}."
        if kind == 1:
            v = str(r.randint(20000, 64999))
            return v, f"The staging {self.component} service listens on port {v}."
        if kind == 2:
            v = self.day()
            return v, f"The release freeze for {self.repo} starts on {v}."
        if kind == 3:
            v = f.name()
            return v, f"{v} owns the {self.component} module and reviews every change to it."
        if kind == 4:
            v = f"/etc/{self.repo}/{f.word()}-{f.hexify('^^^^')}.toml"
            return v, f"The production settings file is {v}."
        if kind == 5:
            v = f"{r.randint(1, 9)}.{r.randint(10, 39)}.{r.randint(2, 49)}"
            return v, f"Pin the {f.word()}-client package to version {v}; newer releases break the {self.component} tests."
        if kind == 6:
            v = f"{f.lexify('???').upper()}-{r.randint(1000, 9999)}"
            return v, f"Track this work under ticket {v}."
        if kind == 7:
            v = f"{f.word()}-db-{r.randint(10, 99)}.{f.domain_name()}"
            return v, f"The database primary is {v}."
        if kind == 8:
            v = f.company()
            return v, f"The pilot customer for this feature is {v}."
        if kind == 9:
            v = f"{r.randrange(120, 4800, 10)} requests per minute"
            return v, f"The {self.component} API is limited to {v} per key."
        if kind == 10:
            v = f"{r.randint(0, 23):02d}:{r.choice((0, 15, 30, 45)):02d} UTC"
            return v, f"The nightly deploy window opens at {v}."
        v = f"svc_{f.hexify('^' * 10)}"
        return v, f"CI jobs must use the service account {v}."

    def rule(self, number: int) -> tuple[str, str]:
        """(value, sentence) of user rule number ``number`` (0-based)."""
        if number < len(self.rules):
            value = self.rules[number]
        else:
            value = f"never edit files under src/{self.package}/{self.fake.word()}_{self.fake.word()}/ by hand"
        return value, self.rng.choice(RULE_SENTENCES).format(v=value)

    def task_phrase(self) -> str:
        """The task's distinctive phrase: the task without its leading verb (the whole
        task when it has fewer than four words)."""
        words = self.task.rstrip(".").split(" ")
        return " ".join(words[1:]) if len(words) >= 4 else self.task.rstrip(".")

    def next_step(self) -> tuple[str, str]:
        """(value, sentence) of an open item / next step with an exact, distinctive value."""
        r = self.rng
        value = r.choice((
            lambda: f"make {self.test_path()} pass again by fixing {self.ident()}()",
            lambda: f"{r.choice(CHANGES)} in {self.src_path()}",
            lambda: f"rerun {self.test_path()} once {self.ident()}() is patched",
        ))()
        return value, f"Open item: {value}. That is my next step before anything else."

    def task_message(self, extra: list[str]) -> str:
        lines = [
            f"Hi! Today's task: {self.task}.",
            f"{self.fake.name()} from {self.company} asked for it; the code lives in src/{self.package}/.",
        ]
        return " ".join(lines + extra)

    def _prose(self, templates: tuple[Callable[[], str], ...]) -> Iterator[str]:
        """Sentences from ``templates`` in shuffled rounds (no template twice in a row of a round)."""
        while True:
            for make in self.rng.sample(templates, len(templates)):
                yield make()

    def user_ask(self, size: int, extra: list[str]) -> str:
        f, r = self.fake, self.rng
        templates = (
            lambda: f"Can you look at {self.src_path()}? It {r.choice(SYMPTOMS)}.",
            lambda: f"{f.name()} from {f.company()} reported that the {r.choice(COMPONENTS)} endpoint "
            f"{r.choice(SYMPTOMS)} since {self.day()}.",
            lambda: f"Next step: wire the {self.component} changes into {self.src_path()} and make sure the tests still pass.",
            lambda: f"What is the status of the {r.choice(FEATURES)} work?",
            lambda: f"Please keep the diff small; {f.first_name()} will review it on {self.weekday()}.",
            lambda: f"CI run #{r.randint(1000, 99999)} failed on {self.test_path()}; can you check why?",
            lambda: f"Let's also handle the case where the {f.word()} field is missing.",
            lambda: "Run the tests again after the change and tell me what broke.",
        )
        body = _fill(self._prose(templates), size - sum(count_tokens(e) for e in extra), sep=" ")
        return " ".join([body] + extra)

    def assistant_reply(self, size: int, extra: list[str]) -> str:
        r = self.rng
        templates = (
            lambda: f"I read {self.src_path()} and found that {self.ident()}() {r.choice(FINDINGS)}.",
            lambda: f"I changed {self.ident()}() to {r.choice(CHANGES)}; the {r.choice(COMPONENTS)} tests pass locally "
            f"({r.randint(4, 180)} passed).",
            lambda: f"The failure in {self.test_path()} comes from {self.ident()}(), which {r.choice(FINDINGS)}.",
            lambda: f"Next I'll {r.choice(NEXT_STEPS)}.",
            lambda: f"I kept the public API of {self.ident()}() unchanged and only touched the internals.",
            lambda: f"The {r.choice(COMPONENTS)} client now logs the request id, which makes the "
            f"{self.test_path()} failures easier to trace.",
        )
        body = _fill(self._prose(templates), size - sum(count_tokens(e) for e in extra), sep=" ")
        return " ".join([body] + extra)

    # ---- code, logs, plans, other ---------------------------------------
    def python_source(self, size: int, path: str) -> str:
        """A Python module with comments, docstrings and blank lines (no fences)."""
        f, r = self.fake, self.rng

        def blocks() -> Iterator[str]:
            imports = ["import logging", "from dataclasses import dataclass", "from typing import Any"]
            imports.append(r.choice(("import json", "import os", "from datetime import datetime, timezone")))
            yield (
                f'# {path}\n"""{self.component.title()} helpers for {self.feature}."""\n\n'
                + "\n".join(sorted(imports))
                + "\n\nlogger = logging.getLogger(__name__)\n"
            )
            while True:
                name, arg, other, var = self.ident(), f.word(), f.word(), f.word()
                if r.random() < 0.7:
                    yield (
                        f"\ndef {name}({arg}: {r.choice(TYPES)}, {other}: int = {r.randint(1, 500)}) -> {r.choice(TYPES)}:\n"
                        f'    """{r.choice(("Return", "Compute", "Collect", "Normalise"))} the {f.word()} {f.word()} of ``{arg}``.\n\n'
                        f"    ``{other}`` caps how many {f.word()} entries are kept.\n"
                        f'    """\n'
                        f"    # {r.choice(FINDINGS)} before, so guard it here\n"
                        f"    if not {arg}:\n"
                        f"        return {r.choice(('None', '[]', '{}', '0', 'False'))}\n"
                        f"    {var} = [item for item in {arg} if item is not None][:{other}]\n"
                        f"\n"
                        f"    # keep the log line short: it runs for every request\n"
                        f'    logger.debug("{name}: %d items", len({var}))\n'
                        f"    return {var}\n"
                    )
                else:
                    cls = "".join(w.title() for w in (f.word(), f.word()))
                    yield (
                        f"\n@dataclass\nclass {cls}:\n"
                        f'    """A {f.word()} record of the {self.component} service."""\n\n'
                        f"    {arg}: str\n    {other}: int = {r.randint(0, 100)}\n\n"
                        f"    def {name}(self) -> str:\n"
                        f"        # the key must stay stable across releases\n"
                        f'        return f"{{self.{arg}}}-{{self.{other}}}"\n'
                    )

        return _fill(blocks(), size, sep="")

    def code_block(self, size: int) -> str:
        path = self.src_path()
        return f"```python\n{self.python_source(size - 4, path).rstrip()}\n```"

    def log_block(self, size: int) -> str:
        f, r = self.fake, self.rng
        service = f"{self.package}.{r.choice(COMPONENTS)}"
        hot = [
            f"request completed method={r.choice(('GET', 'POST', 'PUT'))} path=/api/v1/{f.word()}s "
            f"status={r.choice((200, 200, 201, 404, 500))} duration_ms={r.randint(3, 900)}",
            f"retrying connection to {f.ipv4_private()}:5432 (attempt {r.randint(1, 5)}/5)",
            f"cache miss key={f.word()}:{r.randint(1, 9999)}",
            "heartbeat ok",
            f"job {self.ident()} finished in {r.uniform(0.1, 30):.2f}s",
            f"slow query took {r.randint(200, 5000)}ms: SELECT * FROM {f.word()}s WHERE id = $1",
        ]
        levels = ("INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR")

        def lines() -> Iterator[str]:
            yield f"Logs from {service} on {f.hostname()}:"
            while True:
                msg = r.choice(hot) if r.random() < 0.75 else f"worker-{r.randint(1, 16)} started pid={r.randint(100, 65000)}"
                level = "WARN" if msg.startswith("retrying") else r.choice(levels)
                line = f"{self.timestamp()} {level:<5} [{service}] {msg}"
                for _ in range(r.choice((1, 1, 1, 2, 3))):  # bursts of identical messages
                    yield line

        return _fill(lines(), size)

    def plan(self, size: int, extra: list[str]) -> str:
        """The To Do List (design 001's priority area); ``extra`` lines always included."""
        r = self.rng
        if r.random() < 0.4 and len(self.todo) > 2:
            self.todo.pop(r.randrange(1, len(self.todo)))  # an item got done
        self.todo += self._todo_items(r.randint(0, 2))
        head = [f"To Do List (updated {self.day()}):"] + [f"- [ ] Note: {e}" for e in extra]
        items = (f"- [{'x' if r.random() < 0.3 else ' '}] {item}" for item in self.todo)
        notes = iter(lambda: f"  note: {r.choice(NEXT_STEPS)} for {self.src_path()}", None)
        rest = _fill(chain(items, notes), size - sum(count_tokens(h) for h in head))
        return "\n".join(head + [rest])

    def other_block(self, size: int, extra: list[str]) -> str:
        f, r = self.fake, self.rng
        kind = r.choice(("yaml", "csv", "json", "tree"))
        notes = [f"# {e}" for e in extra]
        if kind == "yaml":
            head = f"Here is the current config/{f.word()}.yaml:"
            lines = iter(lambda: f"{f.word()}_{f.word()}: {r.choice((r.randint(1, 900), f.word(), 'true', 'false'))}", None)
        elif kind == "csv":
            head = f"Sample rows from {f.word()}s.csv:\nid,name,email,amount,created"
            lines = iter(
                lambda: f"{r.randint(1, 99999)},{f.name()},{f.email()},{r.randint(1, 5000)}.{r.randint(0, 99):02d},"
                f"{f.date_between_dates(date(2025, 1, 1), date(2025, 12, 31))}",
                None,
            )
        elif kind == "json":
            head = f"The {f.company()} webhook sent this payload:"
            event = lambda: f"{f.word()}.{r.choice(('created', 'updated', 'deleted'))}"  # noqa: E731
            lines = iter(lambda: json.dumps({"event": event(), "id": f.uuid4(), "user": f.user_name()}), None)
        else:
            head = f"Directory listing of src/{self.package}:"
            lines = iter(lambda: f"  {f.word()}_{f.word()}.{r.choice(('py', 'py', 'yaml', 'md'))}  {r.randint(1, 40)} KB", None)
        text = _fill(lines, size - count_tokens(head) - sum(count_tokens(n) for n in notes))
        return "\n".join([head] + notes + [text])

    def summary(self, size: int, depth: int, first: int, last: int) -> str:
        f, r = self.fake, self.rng

        def bullets(make: Callable[[], str], n: int) -> str:
            return "\n".join(f"- {make()}" for _ in range(n))

        n = max(1, size // 60)
        return SUMMARY_TEMPLATE.format(
            first=first, last=last,
            depth=" (summary of earlier summaries)" if depth > 1 else "",
            intent=f"The user wants to {self.task[0].lower() + self.task[1:]}.",
            files=bullets(lambda: f"{self.src_path()}: {self.ident()}() {r.choice(FINDINGS)}", n),
            decisions=bullets(lambda: f"{r.choice(CHANGES).capitalize()} (agreed with {f.first_name()})", n),
            state=f"{r.randint(2, 40)} tests pass, {r.randint(1, 6)} fail in {self.test_path()}.",
            rules=bullets(lambda: f"Keep changes inside src/{self.package}/{f.word()}", 1),
            next=bullets(lambda: r.choice(NEXT_STEPS).capitalize(), max(1, n // 2)),
        )

    # ---- tool results --------------------------------------------------
    def test_run(self, size: int, target: str) -> tuple[str, int, int]:
        """(pytest output, passed, failed)."""
        r = self.rng
        results = iter(lambda: f"{target}::test_{self.ident()} {'PASSED' if r.random() < 0.85 else 'FAILED'}", None)
        body = _fill(results, size - 40)
        lines = body.split("\n")
        fails = [line.removesuffix(" FAILED") for line in lines if line.endswith(" FAILED")]
        passed, failed = len(lines) - len(fails), len(fails)
        tail = [f"FAILED {name} - AssertionError: assert {r.randint(1, 99)} == {r.randint(100, 999)}" for name in fails]
        summary = f"{failed} failed, {passed} passed" if failed else f"{passed} passed"
        out = [
            "============================= test session starts ==============================",
            f"collected {len(lines)} items", body, *tail,
            f"========================= {summary} in {r.uniform(0.2, 9):.2f}s =========================",
        ]
        return "\n".join(out), passed, failed

    def search_result(self, size: int, query: str) -> tuple[str, int]:
        r = self.rng
        hits = iter(lambda: f"{self.src_path()}:{r.randint(1, 900)}:    {query}({self.fake.word()}, {self.fake.word()})", None)
        body = _fill(hits, size - 10)
        matches = body.count("\n") + 1
        return f"{matches} matches for '{query}' in src/:\n{body}", matches

    def http_response(self, size: int, url: str) -> str:
        f, r = self.fake, self.rng
        status = ("active", "pending", "closed")
        records = iter(lambda: "  " + json.dumps({"id": r.randint(1, 10**6), "name": f.name(), "status": r.choice(status)}) + ",", None)
        body = _fill(records, size - 30).rstrip(",")
        return f"HTTP/1.1 200 OK\ncontent-type: application/json\nurl: {url}\n\n{{\"items\": [\n{body}\n]}}"

    def failure(self, tool: str, size: int, target: str) -> tuple[str, str]:
        """(output of a failed call, its error message)."""
        r = self.rng
        error = {
            "read_file": f"FileNotFoundError: [Errno 2] No such file or directory: '{target}'",
            "write_file": f"PermissionError: [Errno 13] Permission denied: '{target}'",
            "run_tests": f"ModuleNotFoundError: No module named '{self.package}.{self.fake.word()}'",
            "search": f"re.error: missing ), unterminated subpattern at position {r.randint(3, 30)}",
            "http_get": f"TimeoutError: GET {target} timed out after {r.randint(5, 60)}s (503 Service Unavailable)",
        }[tool]
        frames = iter(
            lambda: f'  File "/opt/agent/lib/{self.fake.word()}.py", line {r.randint(10, 900)}, in {self.ident()}\n'
            f"    {self.ident()}({self.fake.word()})",
            None,
        )
        body = _fill(frames, size - count_tokens(error) - 8)
        return f"Traceback (most recent call last):\n{body}\n{error}", error


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
        self._w = _Writer(fake, self._rng, scenario.task)
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
