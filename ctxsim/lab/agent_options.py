"""What an ``agent_loop`` scenario asks of its session beyond its size, and how the session does it.

:class:`SessionOptions` reads the scenario's keys (:mod:`ctxsim.lab.scenarios`); every
default is the fitted session of :mod:`ctxsim.lab.agent_session`. The kinds of step
(:func:`message_kind`, :func:`step_kind`) name what a message of a session is — a file
view (``code``), a run (``log``), a search (``tool_result``), a plan update
(``plan_ref``), an analysis or a user's message (``message``), a config file shown
(``other``) — and :func:`step_mix` measures a context's share of tokens per kind.

The session model calls: :func:`next_kind` and :func:`steered_step` for the later steps
of a session with a ``mix`` or ``unit_tokens``; :func:`planted_events` and
:func:`run_event` for planted material spread over the session by token position
(exact re-reads of unchanged views, failed commands, commands showing a recall fact,
helper scripts written and later shown again, pinned instructions and follow-up
requests); :func:`demonstration` and :func:`prior_summary` for the messages around the
task; :func:`shape_units` for P1 placement, pinning, mislabelling and the unit types of
the finished session. Each takes the session being written (``agent_session._Session``)
and draws from its generator only, so a seed gives the same text in every process.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..cuts import DEMONSTRATION_END, DEMONSTRATION_MARK
from ..model import ContextState, ContextUnit
from ..tokens import count_joined, count_tokens
from .session_text import SUMMARY_TEMPLATE

if TYPE_CHECKING:
    from .scenarios import Scenario

#: the session being written, ``agent_session._Session`` (not imported: that module
#: imports this one, and the package has no import cycle)
_Session = Any

#: kinds of step a scenario's ``mix`` weighs (the generated-scenario mix types)
STEP_KINDS = ("message", "code", "plan_ref", "log", "tool_result", "other")
#: how often a session without ``mix`` but with ``unit_tokens`` takes each kind of step (its
#: late steps' kinds in the fitted model: views, searches, runs)
DEFAULT_STEP_WEIGHTS = {"code": 0.36, "tool_result": 0.26, "log": 0.38}
_CONFIG_SUFFIXES = (".cfg", ".ini", ".toml", ".json", ".yaml", ".yml")


@dataclass(frozen=True)
class SessionOptions:
    """What an ``agent_loop`` scenario asks of its session beyond its size (see
    :mod:`ctxsim.lab.scenarios`); every default is the fitted session."""

    mix: dict[str, float] | None = None
    p1_ratio: float | None = None
    p1_placement: str = "task"
    facts: int | None = None
    rules: int = 2
    duplicates: int = 0
    superseded_writes: int = 0
    errors: int = 0
    pinned: int = 0
    misclassified: float = 0.0
    prior_summaries: int = 0
    unit_tokens: tuple[int, int] | None = None
    user_turns: int | None = None
    worked_example: bool = False

    @classmethod
    def of(cls, scenario: Scenario) -> SessionOptions:
        given = scenario.model_fields_set
        facts = scenario.facts if "facts" in given else None
        return cls(
            mix={k: v for k, v in scenario.mix.items() if v > 0} if scenario.mix else None,
            p1_ratio=scenario.p1_ratio,
            p1_placement=scenario.p1_placement or ("spread" if scenario.p1_ratio is not None else "task"),
            facts=facts, rules=scenario.rule_count if facts is not None else 2,
            duplicates=scenario.duplicates, superseded_writes=scenario.superseded_writes, errors=scenario.errors,
            pinned=scenario.pinned, misclassified=scenario.misclassified, prior_summaries=scenario.prior_summaries,
            unit_tokens=(scenario.unit_tokens.min, scenario.unit_tokens.max) if scenario.unit_tokens else None,
            user_turns=scenario.user_turns, worked_example=scenario.worked_example,
        )


    @property
    def steered(self) -> bool:
        """Whether the late steps follow a mix or sizes instead of the fitted exploration."""
        return self.mix is not None or self.unit_tokens is not None


def _command_path(command: str) -> str | None:
    """The file a viewing command prints (its last argument before any pipe), else None."""
    words = command.split("|")[0].split()
    return words[-1] if len(words) > 1 else None


def message_kind(role: str, command: str | None = None, *, plan: bool = False) -> str:
    """The kind of step (:data:`STEP_KINDS`) a session message is: a tool output by its
    command (a file view: ``code`` for Python, ``other`` for config and data; a run of
    python, pip or pytest: ``log``; a search, listing or git: ``tool_result``); an
    assistant message by its call (writing a file or a Python edit: ``code``) or as a
    plan update (``plan_ref``), else ``message``; a user message: ``message``."""
    command = (command or "").strip()
    writes = command.startswith(("cat >", "python - <<"))
    if role == "assistant":
        return "plan_ref" if plan else "code" if writes else "message"
    if role != "tool":
        return "message"
    if writes:
        return "code"
    first = command.split()[0] if command else ""
    if first in ("python", "python3", "pip", "pytest"):
        return "log"
    path = _command_path(command)
    if first in ("cat", "nl", "sed", "head", "tail") and path and "-i" not in command.split():
        if path.endswith(".py"):
            return "code"
        if path.endswith(_CONFIG_SUFFIXES):
            return "other"
    return "tool_result"


def step_kind(unit: ContextUnit) -> str | None:
    """The kind of step of a unit of an agent-loop context (:func:`message_kind`); None for
    what is not a step: the system prompt, a demonstration, a summary (the task is left
    out by :func:`step_mix`)."""
    kind = unit.meta_dict.get("true_type", unit.type)
    if unit.role == "system" or unit.priority == 3 or kind == "summary":
        return None
    if unit.role == "tool" and unit.tool is not None:
        return message_kind("tool", json.loads(unit.tool.arguments).get("command", ""))
    calls = [json.loads(line.split(" ", 2)[2]) for line in unit.content.splitlines() if line.startswith("[tool_call] bash ")]
    return message_kind(unit.role, calls[0].get("command") if calls else None, plan=kind == "plan_ref")


def step_mix(state: ContextState) -> dict[str, float]:
    """Share of the session's step tokens (content + framing) per kind of step (every
    :data:`STEP_KINDS` a key): the units after the task that :func:`step_kind` names."""
    tokens = dict.fromkeys(STEP_KINDS, 0)
    task = next((u.id for u in state.units if u.role == "user" and u.priority == 1), None)
    seen_task = False
    for unit in state.units:
        if unit.id == task:
            seen_task = True
            continue
        kind = step_kind(unit) if seen_task else None
        if kind is not None:
            tokens[kind] += state.unit_cost(unit)
    total = sum(tokens.values())
    return {kind: (count / total if total else 0.0) for kind, count in tokens.items()}


# ---- steered steps ---------------------------------------------------------------------
def _size(s: _Session) -> int | None:
    """A step's output size drawn from ``unit_tokens`` (tokens; no more than the session's
    room left, :attr:`_Session.room`, when that is larger than 30), None without it."""
    sizes = s.options.unit_tokens
    return None if sizes is None else min(s.rng.randint(*sizes), max(s.room, 30))


def next_kind(s: _Session) -> str:
    """The kind of the next steered step: the mix's kind furthest below its share, else a draw."""
    mix = s.options.mix
    if mix is None:
        kinds = list(DEFAULT_STEP_WEIGHTS)
        return s.rng.choices(kinds, weights=[DEFAULT_STEP_WEIGHTS[k] for k in kinds])[0]
    total = sum(s.kinds.values()) + 1
    return max(mix, key=lambda k: mix[k] * total - s.kinds.get(k, 0))


def _short_thought(s: _Session, text: str) -> str:
    """The agent's words before a small step: none at all for most tiny units."""
    small = s.options.unit_tokens is not None and s.options.unit_tokens[1] < 60
    return "" if small and s.rng.random() < 0.7 else text


def steered_step(s: _Session, kind: str) -> None:
    """One steered step of ``kind`` (:data:`STEP_KINDS`), its output near a drawn size
    (``unit_tokens``), else near what the mix still wants of the kind (60-900 tokens)."""
    size = _size(s)
    if size is None and s.options.mix is not None:
        want = s.options.mix[kind] * (sum(s.kinds.values()) + s.room) - s.kinds.get(kind, 0)
        size = int(min(900, max(60, want, 0), max(60, s.room)))
    {"code": _code_step, "log": _log_step, "tool_result": _search_step, "plan_ref": _plan_step,
     "message": _analysis_step, "other": _config_step}[kind](s, size)


def _lines_up_to(lines: list[str], start: int, size: int) -> int:
    """The last line (1-based) of a window from ``start`` holding about ``size`` tokens."""
    used, end = 0, start - 1
    while end < len(lines) and used < size:
        used += count_tokens(lines[end]) + 1
        end += 1
    return max(start, end)


def _code_step(s: _Session, size: int | None) -> None:
    repo, rng = s.repo, s.rng
    path, function = repo.some_function()
    if size is None:
        start = max(1, function.start - rng.randint(0, 10))
        s.view(path, start, start + int(rng.lognormvariate(2.8, 0.6)))
        return
    whole = count_tokens("\n".join(repo.lines(path)))
    if size > whole:  # several whole files at once
        paths = [path]
        while whole < size and len(paths) < len(repo.functions):
            other, _ = repo.some_function(exclude=None)
            if other not in paths:
                paths.append(other)
                whole += count_tokens("\n".join(repo.lines(other)))
        lines = [line for p in paths for line in repo.lines(p)]
        end = _lines_up_to(lines, 1, size)
        s.run(_short_thought(s, "Let me read these modules."), f"cat {' '.join(paths)} | head -n {end}", "\n".join(lines[:end]))
        return
    lines = repo.lines(path)
    start = max(1, min(function.start, len(lines)) - (0 if size < 60 else rng.randint(0, 5)))
    end = _lines_up_to(lines, start, size)
    if size < 60:
        shown = "\n".join(lines[start - 1 : end])
        command = f"sed -n '{start},{end}p' {path}"
        s.views[command] = shown
        s.run(_short_thought(s, f"Line {start} of `{path}`."), command, shown)
        return
    s.view(path, start, end)


def _log_step(s: _Session, size: int | None) -> None:
    rng, repo = s.rng, s.repo
    if size is not None and size < 60:
        target = rng.choice(repo.test_paths())
        n = rng.randint(3, 60)
        tally = f"{n} passed" if s.fixed else f"1 failed, {n - 1} passed"
        s.run(_short_thought(s, "Quick test run."), f"python -m pytest {target} -q 2>&1 | tail -1",
              f"{tally} in {rng.uniform(0.05, 3):.2f}s", 0 if s.fixed else 1)
        return
    if not s.installed and rng.random() < 0.2:
        s.install(rng.choice(("pytest-xdist", "hypothesis", "numpy", "pyyaml", "docutils")))
        return
    if rng.random() < 0.3:
        s.run_script()
        return
    s.tests(count=max(4, size // 20))


def _search_step(s: _Session, size: int | None) -> None:
    rng, repo = s.rng, s.repo
    if size is None:
        rng.choice((s.grep, s.grep, s.find, s.ls))()
        return
    if size < 60:
        path, function = repo.some_function()
        count = sum(function.name in line for line in repo.lines(path))
        s.run(_short_thought(s, f"How often is `{function.name}` used there?"), f'grep -c "{function.name}" {path}', str(count))
        return
    needle = rng.choice(("return", "self", "if ", "import", "def "))
    hits, out = s.repo.grep(needle), []
    broken: list[str] = []  # the lines so far, each with its line break
    for p, n, t in hits[rng.randrange(max(1, len(hits) // 2)) :]:
        out.append(f"./{p}:{n}:{t}")
        # the tokens of "\n".join(out), from each line's count: every line starts with "./"
        if count_joined([*broken, out[-1]]) >= size:
            break
        broken.append(out[-1] + "\n")
    s.run(_short_thought(s, f"Let me see where `{needle.strip()}` occurs across the package."),
          f'grep -rn "{needle}" --include="*.py" . | head -{len(out)}', "\n".join(out))


def _plan_step(s: _Session, size: int | None) -> None:
    """A plan update (the assistant's message, a plan reference) and a ``git status``."""
    rng, repo, bug = s.rng, s.repo, s.repo.bug
    items = [f"Reproduce the {bug.error} of `{bug.function.qualname}` with `{s.script}`",
             f"Read `{bug.function.qualname}` in `{bug.path}`",
             f"Guard `{bug.subject}` against None before line {bug.line}",
             "Run the reproduce script again", "Run the existing tests"]
    for _ in range(rng.randint(2, 6) if size is None else max(1, size // 18 - len(items))):
        path, function = repo.some_function()
        items.append(rng.choice((f"Check whether `{function.qualname}` in `{path}` needs the same guard",
                                 f"Look at how `{function.name}` handles an empty `{bug.subject}`",
                                 f"Add an edge case for `{function.name}` to the script",
                                 f"Read the tests of `{path.rsplit('/', 1)[-1][:-3]}`")))
    done = rng.randint(1, len(items) - 1) if not s.fixed else max(4, rng.randint(1, len(items)))
    plan = "\n".join(f"{i}. [{'x' if i <= done else ' '}] {item}" for i, item in enumerate(items, start=1))
    changed = repo.changed_paths()
    status = ["On branch main", "Changes not staged for commit:"] + [f"\tmodified:   {p}" for p in changed if p in repo.tree]
    status += ["", "Untracked files:"] + [f"\t{p}" for p in changed if p not in repo.tree]
    s.run(f"Plan so far:\n\n{plan}\n\nNext: item {min(done + 1, len(items))}.", "git status", "\n".join(status), plan=True)


def _analysis_step(s: _Session, size: int | None) -> None:
    """A longer analysis by the agent, then a small check."""
    rng = s.rng
    target = size if size is not None else rng.randint(60, 300)
    text = [s.remark()]
    while _spaced_tokens(text) < target:
        text.append(rng.choice((s.remark(), s.lorem.paragraph(nb_sentences=rng.randint(2, 4)))))
    path, _ = s.repo.some_function()
    s.run("\n\n".join(text), f"wc -l {path}", f"{len(s.repo.lines(path))} {path}")


def _spaced_tokens(texts: list[str]) -> int:
    """Tokens of ``" ".join(texts)``, from the counts of the texts (each but the first
    with its space) when every text but the last ends with a character that is not
    whitespace (:func:`~ctxsim.tokens.count_joined`), else of the joined text."""
    if all(t and not t[-1].isspace() for t in texts[:-1]):
        return count_joined([texts[0], *(" " + t for t in texts[1:])])
    return count_tokens(" ".join(texts))


def _config_step(s: _Session, size: int | None) -> None:
    """A config or data file shown whole (materialized on its first view)."""
    rng, repo = s.rng, s.repo
    path = rng.choice(("setup.cfg", "tox.ini", "pyproject.toml", f"tests/data/{rng.choice(repo.words)}.json"))
    if path not in repo.files:
        repo.add_config(path, size or rng.randint(80, 400))
    s.view(path)


# ---- planted events -----------------------------------------------------------------
def planted_events(s: _Session, start: int, end: int) -> list[tuple[float, str]]:
    """(due tokens, event) of the scenario's planted material, spread over ``start..end``."""
    o, rng = s.options, s.rng
    names = ["duplicate"] * o.duplicates + ["error"] * o.errors + ["fact"] * max(0, (o.facts or 0) - o.rules - 2)
    names += ["pinned"] * max(0, o.pinned - 2) + ["user"] * (o.user_turns or 0)
    rng.shuffle(names)
    span = max(1, end - start)
    events = [(start + span * (i + 1) / (len(names) + 1), name) for i, name in enumerate(names)]
    for i in range(o.superseded_writes):  # written in the first half, shown again in the second
        events += [(start + span * (i + 0.5) / (2 * o.superseded_writes), f"write:{i}"),
                   (start + span * (0.5 + (i + 0.5) / (2 * o.superseded_writes)), f"readback:{i}")]
    return sorted(events)


def run_event(s: _Session, name: str) -> None:
    if name == "duplicate":
        _exact_reread(s)
    elif name == "error":
        _failure(s)
    elif name == "fact":
        _fact_step(s)
    elif name in ("pinned", "user"):
        _follow_up(s, pinned=name == "pinned")
    elif name.startswith("write:"):
        _helper_write(s, int(name[6:]))
    else:
        _readback(s, int(name.split(":")[1]))


def _exact_reread(s: _Session) -> None:
    """Run a view again whose file is unchanged since: the same command, the same text."""
    current = [c for c, out in s.views.items() if _command_path(c) in s.repo.files and _current_view(s, c) == out]
    if not current:
        _code_step(s, None)
        current = [c for c, out in s.views.items() if _command_path(c) in s.repo.files and _current_view(s, c) == out]
    command = s.rng.choice(sorted(current))
    s.run(s.thought(f"Let me look at `{_command_path(command)}` again."), command, s.views[command])


def _current_view(s: _Session, command: str) -> str | None:
    """What a recorded view command would print now (None when it is not a plain line view)."""
    path = _command_path(command)
    lines = s.repo.lines(path)
    if command == f"cat {path}":
        return "\n".join(lines)
    if command.startswith("sed -n '"):
        first, last = (int(x) for x in command.split("'")[1].rstrip("p").split(","))
        return "\n".join(lines[first - 1 : last])
    if command.startswith(("nl -ba ", "cat -n ")):
        first, last = (int(x) for x in command.split("'")[1].rstrip("p").split(","))
        return "\n".join(f"{n:6d}\t{t}" for n, t in enumerate(lines[first - 1 : last], start=first))
    if command.startswith("head -n "):
        return "\n".join(lines[: int(command.split()[2])])
    return None


def _failure(s: _Session) -> None:
    """A failed command: an import that does not exist, a missing file, an unknown test."""
    rng, repo, bug = s.rng, s.repo, s.repo.bug
    module = bug.path[:-3].replace("/", ".")
    name = f"{rng.choice(repo.words)}_{rng.choice(repo.words)}"
    choice = rng.randrange(3)
    if choice == 0:
        s.run(s.thought(f"Let me check whether `{name}` is exported."), f'python -c "from {module} import {name}"',
              f'Traceback (most recent call last):\n  File "<string>", line 1, in <module>\n'
              f"ImportError: cannot import name '{name}' from '{module}' (/testbed/{bug.path})", 1)
    elif choice == 1:
        path = f"{repo.package}/{name}.py"
        s.run(s.thought(f"Maybe the helper lives in `{path}`."), f"cat {path}", f"cat: {path}: No such file or directory", 1)
    else:
        target = rng.choice(repo.test_paths())
        s.run(s.thought("Let me run just that test."), f"python -m pytest {target}::test_{name} -q",
              f"ERROR: not found: /testbed/{target}::test_{name}\n(no name '/testbed/{target}::test_{name}' in any of "
              f"[<Module {target.rsplit('/', 1)[-1]}>])\n\nno tests ran in {rng.uniform(0.05, 0.9):.2f}s", 4)


def _fact_step(s: _Session) -> None:
    """A command whose output shows a value the session relies on (a recall fact)."""
    rng, repo = s.rng, s.repo
    while True:
        choice = rng.randrange(4)
        if choice == 0:
            value = f"{rng.randint(1, 9)}.{rng.randint(0, 30)}.dev{rng.randint(1, 999)}+g{rng.getrandbits(28):07x}"
            command, output = f'python -c "import {repo.package}; print({repo.package}.__version__)"', value
        elif choice == 1:
            value = f"{rng.getrandbits(28):07x} {s.lorem.sentence(nb_words=rng.randint(4, 8)).rstrip('.')}"
            more = [f"{rng.getrandbits(28):07x} {s.lorem.sentence(nb_words=6).rstrip('.')}" for _ in range(2)]
            command, output = "git log --oneline -3", "\n".join([value, *more])
        elif choice == 2:
            key = f"{rng.choice(repo.words)}_{rng.choice(('timeout', 'limit', 'retries', 'depth', 'workers'))}"
            value = f"{key} = {rng.randint(2, 9999)}"
            command, output = f'grep -n "{key}" setup.cfg', f"{rng.randint(3, 80)}:{value}"
        else:
            dep = rng.choice(("numpy", "attrs", "packaging", "pyparsing", "docutils", "jinja2"))
            value = f"{dep} {rng.randint(1, 30)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}"
            command, output = f"pip list 2>/dev/null | grep -i {dep}", value.replace(" ", " " * rng.randint(2, 12), 1)
            value = output
        if value not in s.values:
            break
    s.values.add(value)
    _, t = s.run(s.thought("Let me note the environment details for the report."), command, output)
    s.fact("fact", value, t)


PINNED_NOTES = (
    "Run `python -m pytest {test}` before you submit.",
    "Do not change `{other}`: another pull request rewrites it.",
    "Keep `{qualname}` working on Python 3.8.",
    "Library code in {package} logs through the `logging` module; never print().",
    "The patch must not add dependencies to setup.cfg.",
    "Comments in the fix explain why, not what.",
    "Prefer returning early over nesting the whole function body.",
    "Leave the public docstrings of {package} as they are.",
)
FOLLOW_UPS = (
    "Please also check whether `{function}` in `{other}` needs the same guard.",
    "The maintainers prefer a fallback value over raising here; keep that in mind.",
    "Could you add a short comment above the fix explaining why `{subject}` may be None?",
    "When you are done, run the tests in `{test}` too.",
    "Please don't reformat unrelated lines; the diff should stay small.",
    "Is `{qualname}` called anywhere with a keyword argument? That would change the fix.",
)


def _follow_up(s: _Session, pinned: bool) -> None:
    """A message from the user in the middle of the session: a pinned instruction or a request."""
    rng, repo, bug = s.rng, s.repo, s.repo.bug
    other, function = repo.some_function(exclude=bug.path)
    names = {"test": rng.choice(repo.test_paths()), "other": other,
             "function": function.qualname, "qualname": bug.function.qualname, "package": repo.package, "subject": bug.subject}
    if pinned:
        note = PINNED_NOTES[len(s.pinned) % len(PINNED_NOTES)].format(**names)
        s.pinned.append(s.say("user", f"Pinned instruction {len(s.pinned) - 1}: {note}", "message"))
        return
    text = rng.choice(FOLLOW_UPS).format(**names)
    if rng.random() < 0.5:
        text += " " + s.lorem.paragraph(nb_sentences=rng.randint(1, 4))
    s.say("user", text, "message")


def _helper_name(s: _Session, i: int) -> str:
    return f"check_{s.repo.bug.subject}_{i + 1}.py"


def _helper_write(s: _Session, i: int) -> None:
    """A helper script written with a heredoc (read back later by :func:`_readback`)."""
    s.write_script(_helper_name(s, i), s.reproduce_script(cases=s.rng.randint(1, 3)), "Let me write a helper script for this case.")


def _readback(s: _Session, i: int) -> None:
    """The helper script shown again with ``cat``: the text written earlier."""
    name = _helper_name(s, i)
    s.run(s.thought(f"Let me check what `{name}` does before running it again."), f"cat {name}",
          "\n".join(s.repo.lines(name)))


def demonstration(s: _Session) -> str:
    """A worked example of another task (P3): a few thought-command-output steps."""
    rng, lorem = s.rng, s.lorem
    module = f"{rng.choice(s.repo.words)}/{rng.choice(s.repo.words)}.py"
    steps = [("Let me find the function the issue names.", f"grep -n 'def parse_' {module}",
              f"{rng.randint(10, 90)}:def parse_{rng.choice(s.repo.words)}(text):"),
             ("The parser splits before stripping; let me see it.", f"sed -n '40,52p' {module}",
              "\n".join(f"    {lorem.word()} = {lorem.word()}.split(',')" for _ in range(rng.randint(4, 10)))),
             ("Strip first, then split.", f"sed -i 's/.split(/.strip().split(/' {module}", ""),
             ("Now the tests.", "python -m pytest tests -q 2>&1 | tail -1", f"{rng.randint(20, 90)} passed in 1.2s")]
    body = [f"THOUGHT: {t}\n\n```bash\n{c}\n```\n\n<returncode>0</returncode>\n<output>\n{o}\n</output>" for t, c, o in steps]
    return "\n".join(["Here is a demonstration of how to solve a task with the bash tool.", DEMONSTRATION_MARK, "",
                      f"Issue: {lorem.sentence(nb_words=10)}", "", *body, "", DEMONSTRATION_END])


def prior_summary(s: _Session, first: int, last: int, depth: int) -> str:
    """A structured summary of earlier turns of the session (the format of prior compactions)."""
    rng, repo, bug = s.rng, s.repo, s.repo.bug
    picks = [repo.some_function() for _ in range(rng.randint(2, 5))]
    return SUMMARY_TEMPLATE.format(
        first=first, last=last, depth=" (summary of earlier summaries)" if depth > 1 else "",
        intent=f"Fix {bug.error} in `{bug.function.qualname}` (`{bug.path}`) when `{bug.subject}` is None.",
        files="\n".join(f"- {p}: read `{f.qualname}` (lines {f.start}-{f.end})" for p, f in picks),
        decisions=f"- Reproduce with `{s.script}` before editing\n- Guard `{bug.subject}` in place; no new helper",
        state=f"- `python {s.script}` fails with {bug.error}: {bug.message}",
        rules="- Do not modify tests or configuration files",
        next=f"- Read `{bug.function.qualname}` around line {bug.line}\n- Write the guard, then run the tests",
    )


def shape_units(units: list[ContextUnit], s: _Session) -> list[ContextUnit]:
    """The units as the scenario options want them: plan updates and summaries typed (with a
    ``mix``, tool outputs too: file views ``code``, runs ``log``, config files ``other``), pinned
    instructions pinned (and P1), P1 spread or recent up to ``p1_ratio``, some units mislabelled."""
    o, rng = s.options, s.rng
    units = list(units)
    for i in s.plans:
        units[i] = replace(units[i], type="plan_ref")
    if o.mix is not None:  # a mix weighs unit types: a tool output is typed by its kind of step
        task = next(i for i, u in enumerate(units) if u.role == "user" and u.priority == 1)
        for i, unit in enumerate(units[task + 1 :], start=task + 1):
            if unit.role == "tool" and (kind := step_kind(unit)) in ("code", "log", "other"):
                units[i] = replace(unit, type=kind)
    for k, i in enumerate(s.summaries):
        units[i] = replace(units[i], type="summary", summary_depth=2 if k == 0 and len(s.summaries) > 1 else 1)
    task = next(i for i, u in enumerate(units) if u.role == "user" and u.priority == 1)
    for i in ([0, task][: o.pinned] + s.pinned)[: max(o.pinned, 0)]:
        units[i] = replace(units[i], pinned=True, priority=1)
    if o.p1_ratio is not None:
        others = [i for i, u in enumerate(units) if u.priority != 1]
        extra = max(0, min(len(others), round(o.p1_ratio * len(units)) - (len(units) - len(others))))
        if o.p1_placement == "recent":
            chosen = others[len(others) - extra :]
        else:
            chosen = [others[round(k * (len(others) - 1) / max(1, extra - 1))] for k in range(extra)] if extra > 1 else others[:extra]
        for i in chosen:
            units[i] = replace(units[i], priority=1)
    if o.misclassified:
        candidates = [i for i, u in enumerate(units) if u.role != "system" and not u.pinned and u.type not in ("summary",)]
        for i in rng.sample(candidates, min(len(candidates), round(o.misclassified * len(units)))):
            kind = units[i].type
            label = rng.choice([t for t in ("message", "code", "plan_ref", "log", "other") if t != kind])
            units[i] = replace(units[i], type=label, meta=tuple(sorted((*units[i].meta, ("true_type", kind)))))
    return units
