"""The text of a generated session: its vocabularies and :class:`SessionWriter`.

:class:`~ctxsim.lab.generator.SessionGenerator` decides what a session holds and
when (turns, tool calls, planted ground truth, sizes); the writer words it: user
asks and assistant replies, Python code, timestamped logs, plans, tool results,
configs and tracebacks about one project, each about a requested number of tokens.
Every draw comes from the Faker instance and ``random.Random`` it is given, never
from global state or the clock (the generator's determinism).
"""

from __future__ import annotations

import json
import random
from datetime import date, datetime, timezone
from itertools import chain, islice
from typing import Callable, Iterator

from faker import Faker

from ..tokens import count_tokens

EPOCH = datetime(2026, 1, 12, 9, 0, tzinfo=timezone.utc).timestamp()
#: the fixed end of the weekday draw (Faker's own default end is the current time)
WEEKDAY_END = datetime(2026, 1, 12, tzinfo=timezone.utc)

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


class SessionWriter:
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

