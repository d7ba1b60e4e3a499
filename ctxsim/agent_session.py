"""The agent-loop session model: a bash-only coding agent fixing a bug in a fake repository.

Fitted to the real sessions in ``data/transcripts/mini-swe-agent`` (``ctxsim realism``
compares the two): a one-line system prompt; the task message (an issue statement, then
the instructions with the tool documentation and the user's rules, P1, as the corpus
has them); then turns of one assistant message (a short thought and one ``bash`` tool
call) and one tool message (``<returncode>`` and ``<output>``). The commands follow an
agent's work on a :class:`~ctxsim.fake_repo.FakeRepo` drawn from the context seed:
find → grep → numbered and plain file views → a reproduce script → its traceback into
the repository (after a ``pip install`` with its progress lines when a module is
missing) → an edit echoing the changed window (sometimes a failed ``sed`` first) → the
script again → the test runner → views again (a re-read of an unchanged window is an
exact copy, of an edited one a changed view) → edge-case scripts → ``git diff`` and the
patch. Outputs longer than the agent's limit carry the truncation notice; some commands
time out. 0-2 later user messages are the harness's format reminders.

Ground truth (``state.fact_table``): the user's rules (``rule``, P1, in the task); per
file the session created or edited, its path and a line only its latest version holds
(``artifact``); the issue title and the open item the agent states before its patch
(``continuation``); the error and
the test tally the session relied on (``fact``). Each value occurs verbatim in the unit
named by the fact.

A scenario's options (:class:`SessionOptions`, the ``agent_loop`` keys of
:mod:`ctxsim.scenarios`) shape the session: after the fixed opening (find, grep, view,
reproduce, edit, run, tests), planted events are spread over the rest by token position
(exact re-reads of unchanged views, failed commands, commands showing a recall fact,
helper scripts written then shown again, pinned instructions and follow-up requests from
the user); a ``mix`` or ``unit_tokens`` steers the later steps by kind and size
(:func:`message_kind`, :func:`step_mix`); summaries of earlier turns follow the task, a
worked example (P3) precedes it; P1 placement, pinning and mislabelling are applied to
the finished units. Planted material a small target has no room for still comes, after it.

Same scenario and seed give the same text in every process: all draws come from one
``random.Random`` (scenario name xor seed) and a Faker seeded from it.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field, replace

from faker import Faker

from .fake_repo import FakeRepo
from .model import ContextState, ContextUnit, Fact
from .scenarios import Scenario
from .tokens import DEFAULT_FORMAT, REPLY_PRIMING, count_tokens, message_overhead
from .transcripts import DEMONSTRATION_MARK, messages_to_units

SYSTEM_PROMPT = "You are a helpful assistant that can interact with a computer shell to solve programming tasks."
#: tool outputs longer than this many characters are shown as head and tail with a notice
OUTPUT_LIMIT_CHARS = 10_000
TRUNCATION_NOTICE = (
    "<warning>\nThe output of your last command was too long.\nPlease try a different command that produces less output.\n"
    "If you're looking at a file you can try use head, tail or sed to view a smaller number of lines selectively.\n"
    "If you're using grep or find and it produced too much output, you can use a more selective search pattern.\n</warning>"
)
FORMAT_REMINDER = (
    "Tool call error:\n\n<error>\nNo tool calls found in the response. Every response MUST include at least one tool call.\n</error>\n\n"
    "Here is general guidance on how to submit correct toolcalls:\n\nEvery response needs to use the 'bash' tool at least once to "
    "execute commands.\n\nCall the bash tool with your command as the argument:\n- Tool: bash\n- Arguments: "
    '{"command": "your_command_here"}\n\nIf you have completed your assignment, please consult the first message about how to\n'
    "submit your solution (you will not be able to continue working on this task after that)."
)
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt"
_VIEWERS = ("sed", "sed", "nl", "cat -n", "head")
#: kinds of step a scenario's ``mix`` weighs (the generated-scenario mix types)
STEP_KINDS = ("message", "code", "plan_ref", "log", "tool_result", "other")
#: how often a session without ``mix`` but with ``unit_tokens`` takes each kind of step (its
#: late steps' kinds in the fitted model: views, searches, runs)
DEFAULT_STEP_WEIGHTS = {"code": 0.36, "tool_result": 0.26, "log": 0.38}
#: with less room than this left before the closing steps (tokens), a session's next step is a small grep
SMALL_ROOM = 500
#: with ``unit_tokens``, the harness's output limit is this many characters per token of its max
CHARS_PER_TOKEN_LIMIT = 6
_CONFIG_SUFFIXES = (".cfg", ".ini", ".toml", ".json", ".yaml", ".yml")


@dataclass(frozen=True)
class SessionOptions:
    """What an ``agent_loop`` scenario asks of its session beyond its size (see
    :mod:`ctxsim.scenarios`); every default is the fitted session."""

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
    def output_limit(self) -> int:
        """The harness's output limit (characters)."""
        extra = CHARS_PER_TOKEN_LIMIT * self.unit_tokens[1] if self.unit_tokens else 0
        return max(OUTPUT_LIMIT_CHARS, extra)

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


@dataclass
class _Session:
    """The messages of one session as they are written, with the repository they act on."""

    rng: random.Random
    fake: Faker
    repo: FakeRepo
    messages: list[dict] = field(default_factory=list)
    tokens: int = REPLY_PRIMING[DEFAULT_FORMAT]
    facts: list[Fact] = field(default_factory=list)
    fixed: bool = False
    installed: bool = False
    test_style: str = "pytest"
    script: str = "reproduce_issue.py"
    views: dict[str, str] = field(default_factory=dict)
    options: SessionOptions = field(default_factory=SessionOptions)
    #: tokens per kind of step (see :func:`message_kind`), the session's steps only
    kinds: dict[str, int] = field(default_factory=dict)
    #: message indices the scenario options reshape: plan updates, summaries, pinned instructions
    plans: list[int] = field(default_factory=list)
    summaries: list[int] = field(default_factory=list)
    pinned: list[int] = field(default_factory=list)
    values: set[str] = field(default_factory=set)
    #: tokens the session may still add before its closing steps
    room: int = 0

    # ---- writing messages ---------------------------------------------
    def _add(self, message: dict, counted: str, kind: str | None = None) -> int:
        self.messages.append(message)
        cost = count_tokens(counted) + message_overhead(DEFAULT_FORMAT)
        self.tokens += cost
        if kind is not None:
            self.kinds[kind] = self.kinds.get(kind, 0) + cost
        return len(self.messages) - 1

    def say(self, role: str, content: str, kind: str | None = None) -> int:
        return self._add({"role": role, "content": content}, content, kind)

    def run(self, thought: str, command: str, output: str, returncode: int = 0, *, timeout: bool = False,
            plan: bool = False) -> tuple[int, int]:
        """One assistant turn (thought + bash call) and its observation; (assistant index, tool index).
        ``plan``: the thought is a plan update."""
        call_id = f"call_{len(self.messages):02d}_{self.rng.getrandbits(64):016x}"
        arguments = json.dumps({"command": command})
        counted = "\n".join(([thought] if thought else []) + [f"[tool_call] bash {arguments}"])
        a = self._add({"role": "assistant", "content": thought,
                       "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "bash", "arguments": arguments}}]},
                      counted, message_kind("assistant", command, plan=plan))
        if plan:
            self.plans.append(a)
        observation = _observation(command, output, returncode, timeout, self.options.output_limit)
        t = self._add({"role": "tool", "content": observation, "tool_call_id": call_id}, observation, message_kind("tool", command))
        return a, t

    def fact(self, kind: str, value: str, index: int, priority: int = 2) -> None:
        self.facts.append(Fact(id=f"{kind}-{len(self.facts)}", value=value, unit_id=f"line-{index + 1}", priority=priority, kind=kind))

    # ---- what the agent does -------------------------------------------
    def thought(self, *sentences: str) -> str:
        """A short reasoning text: the given sentences, sometimes with a longer analysis."""
        if self.rng.random() < 0.12:
            return ""
        text = " ".join(s for s in sentences if s)
        if self.rng.random() < 0.5:
            text = self.remark() + " " + text
        if self.rng.random() < 0.12:
            points = [f"{i}. {self.remark()}" for i in range(1, self.rng.randint(3, 7))]
            text += "\n\n" + "\n".join(points)
        return text

    def remark(self) -> str:
        """One sentence about the work: what the last output showed, mostly in the repository's own names."""
        bug, rng = self.repo.bug, self.rng
        path, function = self.repo.some_function()
        tests = [p for p in self.repo.tree if p.startswith("tests/")]
        remarks = (
            f"The traceback ends in `{bug.function.qualname}` in `{bug.path}`.",
            f"`{bug.subject}` comes straight from the caller, so it can be None here.",
            f"`{bug.function.name}` is the only place that uses `{bug.subject}` without checking it.",
            f"The tests for this code seem to be in `{rng.choice(tests)}`.",
            f"`{function.qualname}` in `{path}` follows the same pattern.",
            "That matches what the issue describes.",
            "The output looks right now." if self.fixed else "So the problem is reproducible.",
            f"Nothing else in the package depends on how `{bug.function.name}` fails.",
            f"I need to see how `{function.name}` handles the same case.",
            "This is more output than I need; I will narrow it down.",
            self.fake.sentence(nb_words=rng.randint(6, 14)),
        )
        return rng.choice(remarks)

    def find(self) -> None:
        bug = self.repo.bug
        word = bug.path.rsplit("/", 1)[-1][:-3].split("_")[0] if not self.messages[3:] else self.rng.choice(self.repo.words)[:5]
        hits = [p for p in self.repo.tree if word in p] + self.rng.sample(self.repo.tree, min(10, len(self.repo.tree)))
        hits = list(dict.fromkeys(hits))[:20]
        self.run(self.thought(f"Let me look for the files related to `{word}` in the repository."),
                 f'find . -type f -name "*.py" | grep -i {word} | head -20', "\n".join(f"./{p}" for p in hits))

    def ls(self) -> None:
        directory = self.rng.choice(sorted({p.rsplit("/", 1)[0] for p in self.repo.tree if "/" in p}))
        entries = sorted({p[len(directory) + 1 :].split("/")[0] for p in self.repo.tree if p.startswith(directory + "/")})
        lines = [f"total {4 * (len(entries) + 2)}", "drwxr-xr-x  2 root root 4096 Oct 24 12:02 .", "drwxr-xr-x  9 root root 4096 Oct 24 12:02 .."]
        lines += [f"-rw-r--r--  1 root root {self.rng.randint(200, 60000):5d} Oct 24 12:02 {e}" for e in entries]
        self.run(self.thought("Let me see what else is in this package."), f"ls -la {directory}", "\n".join(lines))

    def grep(self, symbol: str | None = None) -> None:
        path, function = self.repo.some_function() if symbol is None else (None, None)
        symbol = symbol or function.name
        hits = self.repo.grep(symbol)[:20]
        out = "\n".join(f"./{p}:{n}:{t}" for p, n, t in hits)
        self.run(self.thought(f"Let me find where `{symbol}` is defined and used."),
                 f'grep -rn "{symbol}" --include="*.py" . | head -20', out, 0 if hits else 1)

    def view(self, path: str, first: int | None = None, last: int | None = None, viewer: str | None = None) -> tuple[int, int]:
        """Show lines ``first..last`` of ``path`` (the whole file when not given) the way ``viewer`` prints them."""
        lines = self.repo.lines(path)
        whole = first is None
        first, last = (1, len(lines)) if whole else (max(1, first), last)  # sed and head stop at the end of the file
        viewer = "cat" if whole else (viewer or self.rng.choice(_VIEWERS))
        if viewer == "cat":
            command, numbered = f"cat {path}", False
        elif viewer == "sed":
            command, numbered = f"sed -n '{first},{last}p' {path}", False
        elif viewer == "head":
            first, command, numbered = 1, f"head -n {last} {path}", False
        else:
            command, numbered = f"{viewer if viewer == 'cat -n' else 'nl -ba'} {path} | sed -n '{first},{last}p'", True
        shown = lines[first - 1 : last]
        out = "\n".join(f"{n:6d}\t{t}" for n, t in enumerate(shown, start=first)) if numbered else "\n".join(shown)
        self.views[command] = out
        what = "the whole file" if whole else f"lines {first}-{last}"
        return self.run(self.thought(f"Let me look at {what} of `{path}`."), command, out)

    def reread(self) -> None:
        """Run an earlier view command again: the same text when the file is unchanged since."""
        command = self.rng.choice(sorted(self.views))
        path = command.split("|")[0].split()[-1]
        if path not in self.repo.files:
            return
        viewer = "cat" if command.startswith("cat ") and "|" not in command else None
        if viewer:
            self.view(path)
            return
        numbers = [int(x) for x in command.rsplit("'", 2)[-2].rstrip("p").split(",")] if "sed -n" in command else [1, int(command.split()[2])]
        kind = "sed" if command.startswith("sed") else "head" if command.startswith("head") else "cat -n" if command.startswith("cat -n") else "nl"
        self.view(path, numbers[0], numbers[-1], kind)

    def write_script(self, name: str, lines: list[str], purpose: str) -> int:
        body = "\n".join(lines)
        self.repo.write(name, lines)
        a, _ = self.run(self.thought(purpose), f"cat > {name} << 'EOF'\n{body}\nEOF", "")
        return a

    def reproduce_script(self, cases: int | None = None) -> list[str]:
        """A script calling the buggy function with ``cases`` arguments (else 3-14)."""
        bug = self.repo.bug
        module = bug.path[:-3].replace("/", ".")
        name = bug.function.cls or bug.function.name
        call = f"{name}().{bug.function.name}" if bug.function.cls else name
        lines = ["#!/usr/bin/env python", f'"""{self.fake.sentence(nb_words=8)}"""', "import sys", "",
                 "sys.path.insert(0, '/testbed')", "", f"from {module} import {name}", "", ""]
        for i in range(cases or self.rng.randint(3, 14)):
            arg = self.rng.choice(("None", "{}", "[]", repr(self.rng.choice(self.repo.words)), str(self.rng.randint(0, 99))))
            label = self.fake.sentence(nb_words=self.rng.randint(3, 7)).rstrip(".").lower()
            lines += [f"# Test {i + 1}: {label}", f"print({f'Test {i + 1}: {label}'!r})", "try:",
                      f"    result = {call}({arg})", "    print(f'  Result: {result!r}')", "except Exception as e:",
                      "    print(f'  {type(e).__name__}: {e}')", ""]
        return lines

    def traceback(self, test: str | None = None) -> str:
        """The bug's traceback from the reproduce script (or from ``test``, a ``path::name`` test) into the repository."""
        bug, repo = self.repo.bug, self.repo
        if test is None:
            script = repo.history[self.script][-1]
            n = next(i for i, line in enumerate(script, start=1) if line.startswith("    result = "))
            frames = [f'  File "/testbed/{self.script}", line {n}, in <module>', f"    {script[n - 1].strip()}"]
        else:
            path, name = test.split("::")
            call = f"{bug.function.cls}().{bug.function.name}" if bug.function.cls else bug.function.name
            frames = [f'  File "/testbed/{path}", line {self.rng.randint(12, 400)}, in {name}', f"    result = {call}(None)"]
        for _ in range(self.rng.randint(0, 3)):
            path, function = repo.some_function(exclude=bug.path)
            n = self.rng.randint(function.start + 1, function.end)
            frames += [f'  File "/testbed/{path}", line {n}, in {function.name}', f"    {repo.lines(path)[n - 1].strip()}"]
        n = repo.line_of(bug.path, bug.text)
        frames += [f'  File "/testbed/{bug.path}", line {n}, in {bug.function.name}', f"    {bug.text.strip()}"]
        return "\n".join(["Traceback (most recent call last):", *frames, f"{bug.error}: {bug.message}"])

    def script_output(self, script: str) -> str:
        """What a script written by :meth:`reproduce_script` prints once the bug is fixed."""
        out = []
        for line in self.repo.history[script][-1]:
            if line.startswith("print('Test "):
                out += [line[7:-2], f"  Result: {self.rng.choice(('None', '{}', '[]', repr(self.rng.choice(self.repo.words))))}"]
        return "\n".join(out)

    def run_script(self) -> None:
        if not self.installed and self.rng.random() < 0.5:
            missing = self.rng.choice(("pytz", "wrapt", "lazy_object_proxy", "pyerfa", "packaging", "attrs"))
            self.run(self.thought("Let me run the script to reproduce the issue."), f"python {self.script}",
                     "Traceback (most recent call last):\n"
                     f'  File "/testbed/{self.script}", line 1, in <module>\n    {self.repo.history[self.script][-1][0]}\n'
                     f'  File "/testbed/{self.repo.package}/__init__.py", line {self.rng.randint(3, 40)}, in <module>\n'
                     f"    import {missing}\nModuleNotFoundError: No module named '{missing}'", 1)
            self.install(missing.replace("_", "-"))
        if self.fixed:
            self.run(self.thought("Let me run the reproduce script again to check the fix."), f"python {self.script}",
                     self.script_output(self.script))
            return
        out = self.traceback()
        _, t = self.run(self.thought("Now let me run the script to reproduce the issue."), f"python {self.script}", out, 1)
        if not any(f.kind == "fact" for f in self.facts):
            self.fact("fact", f"{self.repo.bug.error}: {self.repo.bug.message}", t)

    def install(self, package: str) -> None:
        self.installed = True
        if self.rng.random() < 0.15:
            self.run(self.thought(f"The module `{package}` is missing; let me install it."), f"pip install {package} -q", "", -1, timeout=True)
        version = f"{self.rng.randint(1, 24)}.{self.rng.randint(0, 12)}.{self.rng.randint(0, 9)}"
        lines = [f"Collecting {package}", f"  Downloading {package}-{version}-py3-none-any.whl ({self.rng.randint(20, 900)} kB)",
                 f"Installing collected packages: {package}", f"Successfully installed {package}-{version}",
                 "WARNING: Running pip as the 'root' user can result in broken permissions and conflicting behaviour with the "
                 "system package manager. It is recommended to use a virtual environment instead: https://pip.pypa.io/warnings/venv"]
        self.run(self.thought(f"Let me install `{package}` first."), f"pip install {package}", "\n".join(lines))

    def edit(self) -> None:
        bug, repo = self.repo.bug, self.repo
        n = repo.line_of(bug.path, bug.text)
        old = bug.text.strip()
        if self.rng.random() < 0.3:  # a sed expression that breaks on the code's own characters
            command = f"sed -i 's/{old}/if {bug.subject} is None: return/' {bug.path}"
            char = len(command) - len(bug.path) - 10
            self.run(self.thought("Let me fix the line with sed."), command, f"sed: -e expression #1, char {char}: unknown option to `s'", 1)
        fix = "\n".join(bug.fix)
        script = (f"python - <<'EOF'\nfrom pathlib import Path\np = Path({bug.path!r})\ns = p.read_text()\n"
                  f"s = s.replace({bug.text!r}, {fix!r}, 1)\np.write_text(s)\nEOF\nsed -n '{n - 3},{n + 5}p' {bug.path}")
        repo.replace_line(bug.path, bug.text, bug.fix)
        self.fixed = True
        window = "\n".join(repo.lines(bug.path)[max(0, n - 4) : n + 5])
        self.run(self.thought(f"I'll guard `{bug.subject}` against None in `{bug.function.qualname}` before it is used."),
                        script, window)

    def tests(self, final: bool = False, count: int | None = None) -> int:
        """Run a test module (``count`` tests, else 4-30); returns the tool message's index."""
        tests = sorted(p for p in self.repo.tree if p.startswith("tests/"))
        target = self.rng.choice(tests)
        names = [f"test_{self.repo.rng.choice(self.repo.words)}_{self.repo.rng.choice(self.repo.words)}"
                 for _ in range(count or self.rng.randint(4, 30))]
        failed = set() if self.fixed else {self.rng.choice(names)}
        if self.test_style == "django":
            module = target[6:-3]
            lines = [f"Testing against {self.repo.package} installed in '/testbed/{self.repo.package}' with up to 8 processes",
                     f"Found {len(names)} test(s).", "System check identified no issues (0 silenced)."]
            cls = "".join(w.capitalize() for w in self.repo.rng.sample(self.repo.words, 2)) + "Tests"
            lines += [f"{n} ({module}.{cls}.{n}) ... {'FAIL' if n in failed else 'ok'}" for n in names]
            lines += ["", "-" * 70, f"Ran {len(names)} tests in {self.rng.uniform(0.01, 4):.3f}s", "",
                      f"FAILED (failures={len(failed)})" if failed else "OK"]
            command, tally = f"python tests/runtests.py {module} -v 2", f"Ran {len(names)} tests"
        else:
            lines = ["=" * 29 + " test session starts " + "=" * 30, "platform linux -- Python 3.9.20, pytest-7.4.0, pluggy-1.3.0",
                     "rootdir: /testbed", "configfile: setup.cfg", f"collected {len(names)} items", ""]
            lines += [f"{target}::{n} {'FAILED' if n in failed else 'PASSED'} [{100 * (i + 1) // len(names):3d}%]" for i, n in enumerate(names)]
            tally = f"{len(names) - len(failed)} passed" + (f", {len(failed)} failed" if failed else "")
            if failed:
                test = f"{target}::{next(iter(failed))}"
                lines += ["", "=" * 30 + " FAILURES " + "=" * 30, self.traceback(test)]
            lines += ["", "=" * 20 + f" {tally} in {self.rng.uniform(0.05, 9):.2f}s " + "=" * 20]
            command = f"python -m pytest {target} -v 2>&1 | tail -{len(lines) + 5}"
        _, t = self.run(self.thought("Let me run the existing tests for this module."), command, "\n".join(lines), 1 if failed else 0)
        if final:
            self.fact("fact", tally, t)
        return t


def _observation(command: str, output: str, returncode: int, timeout: bool, limit: int = OUTPUT_LIMIT_CHARS) -> str:
    """A tool message as the harness writes it: return code and output (head and tail with a
    notice when longer than ``limit`` characters)."""
    if timeout:
        return (f"<exception>An error occurred while executing the command: Command 'bash -c {command!r}' timed out after "
                f"60 seconds</exception>\n<returncode>-1</returncode>\n<output>\n</output>")
    if len(output) > limit:
        head, tail = output[: limit // 2], output[-limit // 2 :]
        elided = len(output) - len(head) - len(tail)
        return (f"<returncode>{returncode}</returncode>\n{TRUNCATION_NOTICE}<output_head>\n{head}\n</output_head>\n"
                f"<elided_chars>\n{elided} characters elided\n</elided_chars>\n<output_tail>\n{tail}\n</output_tail>")
    return f"<returncode>{returncode}</returncode>\n<output>\n{output}\n</output>" if output else \
        f"<returncode>{returncode}</returncode>\n<output>\n</output>"


def _task_message(session: _Session, title: str, rules: list[str]) -> str:
    bug, fake, rng = session.repo.bug, session.fake, session.rng
    name = bug.function.qualname
    story = [rng.choice((f"Calling {name} without a {bug.subject} fails instead of falling back to the default.",
                         f"Since the last release {name} no longer accepts an empty {bug.subject}.",
                         f"When {bug.subject} is missing, {name} raises {bug.error} deep inside {bug.path}."))]
    story += [fake.paragraph(nb_sentences=rng.randint(3, 6)) for _ in range(rng.randint(1, 3))]
    function = bug.function
    source = session.repo.history[bug.path][0][function.start - 1 : min(function.end, function.start + 24)]
    snippet = ["The code in question:", "", "```python", *source, "```", "", "Steps to reproduce:", "", f">>> from {bug.path[:-3].replace('/', '.')} import {bug.function.cls or bug.function.name}",
               f">>> {bug.function.cls or bug.function.name}(None)", "Traceback (most recent call last):", "  ...",
               f"{bug.error}: {bug.message}"]
    return "\n".join([
        "<pr_description>", "Consider the following PR description:", title, "Description", "", *story, "", *snippet,
        "</pr_description>", "", "<instructions>", "# Task Instructions", "", "## Overview", "",
        "You are a software engineer working in a shell on the repository in /testbed. Make the changes to non-test "
        "files that resolve the issue in the PR description, in a way that is general and fits the codebase.",
        "Work in small steps: think, run one command, read its result, then decide on the next command.", "",
        "## Rules", "", *(f"- {rule}" for rule in rules), "",
        "## Recommended workflow", "", "1. Find and read the code the issue is about",
        "2. Write a script that reproduces the issue and run it", "3. Edit the source code to resolve it",
        "4. Run the script again to confirm the fix, then the existing tests", "5. Try edge cases", "",
        "## The bash tool", "",
        "Every response holds your reasoning and exactly one call of the `bash` tool: "
        '`{"command": "<shell command>"}`. Each command runs in a fresh subshell from /testbed: `cd` and exported variables do '
        "not persist, so chain them (`cd src && python run.py`) or write them to a file. The result comes back as "
        "`<returncode>` and `<output>`; an output longer than 10,000 characters is cut to its head and tail with a warning, "
        "and a command running longer than 60 seconds is killed.", "",
        "- Use non-interactive flags (-y, -q) and no interactive tools (vi, nano, less)",
        "- Read files with `cat`, `nl -ba FILE | sed -n 'A,Bp'` or `grep -n`; edit them with `sed -i` or a short Python script",
        "- Install what is missing with pip",
        "- Write helper scripts to files and run them; they do not belong in the patch", "",
        "## A good response", "",
        "A good response first says in a few sentences what you learned from the last output and what you will do "
        "next, then makes the call. For example: the traceback ends in the parser's `read_header`, so the header "
        "line is parsed before the delimiter is known; let me print the lines around that call.", "",
        "## Environment", "",
        "- A full Linux shell with Python 3 and git; the repository is installed in development mode",
        "- The network is available for pip, but a slow install can hit the 60-second limit",
        "- Files you create in /testbed stay there between commands", "",
        "## Submission", "",
        "When the work is done, write the patch with `git diff -- FILE ... > patch.txt` listing only the source files you "
        "changed, check it with `cat patch.txt`, then submit with exactly this command, on its own:", "", f"    {SUBMIT}", "",
        "Nothing can be changed after the submission.", "</instructions>",
    ])


def generate_session(scenario: Scenario, seed: int) -> ContextState:
    """The context of an ``agent_loop`` scenario for ``seed``: a whole session of at least
    ``scenario.resolved_target`` tokens (a few hundred over; a minimum session of about
    4,000 tokens whatever the target) at the scenario's limit, shaped by the scenario's
    options (:class:`SessionOptions`; planted material a small target has no room for
    still comes, after it)."""
    from .generator import stable_seed  # the generator imports scenarios, which imports this module lazily

    options = SessionOptions.of(scenario)
    rng = random.Random(stable_seed(scenario.name, seed))
    fake = Faker("en_US")
    fake.seed_instance(rng.getrandbits(64))
    repo = FakeRepo.build(random.Random(rng.getrandbits(64)), fake, modules=rng.randint(6, 16))
    s = _Session(rng, fake, repo, test_style=rng.choice(("pytest", "django")),
                 script=rng.choice(("reproduce_issue.py", "reproduce.py", "test_reproduce.py", f"test_{repo.bug.subject}.py")),
                 options=options)
    bug = repo.bug
    title = rng.choice((f"{bug.function.qualname}() raises {bug.error} when {bug.subject} is None",
                        f"{bug.error} in {bug.function.qualname} when {bug.subject} is not given",
                        f"{bug.function.qualname} crashes with {bug.error}: {bug.message}"))
    rules = _rules(s, options.rules)
    s.say("system", SYSTEM_PROMPT)
    if options.worked_example:
        s.say("user", _demonstration(s))
    task = s.say("user", _task_message(s, title, rules))
    for rule in rules:
        s.fact("rule", rule, task, priority=1)
    s.fact("continuation", title, task, priority=1)
    for k in range(options.prior_summaries):
        first = 1 + 12 * k
        s.summaries.append(s.say("user", _summary(s, 1 if k == 0 and options.prior_summaries > 1 else first, first + 11,
                                                  2 if k == 0 and options.prior_summaries > 1 else 1)))
    target = scenario.resolved_target
    reminders = rng.choices((0, 1, 2), weights=(0.85, 0.1, 0.05))[0] if options.user_turns is None else 0

    s.find()
    s.grep(bug.function.name)
    first_view = (bug.path, bug.line - rng.randint(10, 40), bug.line + rng.randint(5, 30), "nl")
    s.view(*first_view)
    s.write_script(s.script, s.reproduce_script(), "Let me write a script that reproduces the issue.")
    s.run_script()
    for _ in range(rng.randint(1, 4)):
        if s.tokens < target / 2:  # a small target has no room for more
            _explore(s)
    s.edit()
    s.run_script()
    if rng.random() < 0.5 and s.tokens < target / 2:
        s.view(*first_view)  # the same view again: it shows the edit
    if s.tokens < target / 2:
        s.tests()
    final = [p for p in repo.changed_paths() if p in repo.tree]  # the patch: edited source files, not scripts
    reserve = 2 * count_tokens(repo.diff(final, index=False)) + 700  # what the closing steps add (tokens)
    events = _events(s, s.tokens, target - reserve)
    while True:
        while s.tokens < target - reserve or events:
            if events and (events[0][0] <= s.tokens or s.tokens >= target - reserve):
                _event(s, events.pop(0)[1])
                continue
            if reminders and rng.random() < 0.05:
                s.say("assistant", s.thought("The fix works; let me think about what else could break.") or "Let me think about the edge cases.")
                s.say("user", FORMAT_REMINDER)
                reminders -= 1
                continue
            s.room = target - reserve - s.tokens
            if s.room < SMALL_ROOM:  # the last step before the closing: a small one, so the session ends near its target
                s.grep()
            elif options.steered:
                _step(s, _next_kind(s))
            else:
                _explore(s, late=True)
        before = (len(s.messages), s.tokens, dict(s.kinds), len(s.facts))
        _close(s, final)
        if s.tokens >= target:
            break
        reserve = s.tokens - before[1]  # short of the target: take the closing back, work on, close again
        del s.messages[before[0] :], s.facts[before[3] :]
        s.tokens, s.kinds = before[1], before[2]
    _artifact_facts(s)
    holders: dict[str, list[str]] = {}
    for f in s.facts:
        holders.setdefault(f.unit_id, []).append(f.id)
    units = _shape([replace(u, fact_ids=tuple(holders.get(u.id, ()))) for u in messages_to_units(s.messages)], s)
    priority = {u.id: u.priority for u in units}
    facts = tuple(replace(f, priority=priority[f.unit_id]) for f in s.facts)
    state = ContextState(units=tuple(units), limit=10**12, min_limit=1, task=title, fact_table=facts,
                         scenario=scenario.name, seed=seed)
    limit = scenario.resolved_limit
    return replace(state, limit=limit, min_limit=min(scenario.min_limit, limit), warning_threshold=scenario.warning_threshold)


def _close(s: _Session, final: list[str]) -> None:
    """The session's last steps: the tests, the open item and the diff, the patch file, the patch."""
    repo = s.repo
    s.tests(final=True)
    path, function = repo.some_function(exclude=repo.bug.path)
    open_item = f"Still open: `{function.qualname}` in `{path}` may need the same guard"
    review, _ = s.run(f"{open_item}; I will check it after the patch. Let me review the whole change.", "git diff", repo.diff(final))
    s.fact("continuation", open_item, review)
    s.run(s.thought("Now let me create the patch file."), "git diff -- " + " ".join(final) + " > patch.txt", "")
    s.run(s.thought("Let me check the patch."), "cat patch.txt", repo.diff(final))


#: the user's rules beyond the two every task states ({qualname}, {package}, {path}: the bug's)
MORE_RULES = (
    "Do not add new dependencies",
    "Make sure {package} stays importable on Python 3.8",
    "Do not change the return type of {qualname}",
    "Do not add new modules to {package}",
    "Make sure the change stays under 20 changed lines",
    "Do not rename anything in {path}",
    "Never print from library code",
    "Do not touch the docs folder",
    "Do not change the public __all__ of {package}",
    "Do not catch bare exceptions",
)


def _rules(s: _Session, n: int) -> list[str]:
    """The task's ``n`` rules: the two of every session, then :data:`MORE_RULES`, then one per file not to modify."""
    bug = s.repo.bug
    rules = ["DO NOT MODIFY: tests and configuration files (setup.cfg, tox.ini, pyproject.toml)",
             f"You must keep the public signature of {bug.function.qualname} unchanged"]
    rules += [r.format(qualname=bug.function.qualname, package=s.repo.package, path=bug.path) for r in MORE_RULES]
    rules += [f"Do not modify {p}" for p in s.repo.tree if p != bug.path]
    return rules[:n]


def _explore(s: _Session, late: bool = False) -> None:
    """One step of investigation: a view, a grep, a listing, a re-read, an edge-case script or a test run."""
    rng, repo, bug = s.rng, s.repo, s.repo.bug
    choice = rng.random()
    if choice < 0.36:
        path, function = repo.some_function() if rng.random() < 0.6 else (bug.path, bug.function)
        if rng.random() < 0.05 and f"cat {path}" not in s.views:  # a file is read whole once
            s.view(path)
        else:
            start = repo.lines(path).index(next(t for t in repo.lines(path) if f"def {function.name}(" in t)) + 1
            s.view(path, start - rng.randint(0, 10), start + int(rng.lognormvariate(2.8, 0.6)))
    elif choice < 0.50:
        s.grep()
    elif choice < 0.58:
        s.find()
    elif choice < 0.61:
        s.ls()
    elif choice < 0.62 and s.views:
        s.reread()
    elif choice < 0.92 and late:
        name = f"test_{rng.choice(repo.words)}_{rng.choice(('edge_cases', 'fix', 'comprehensive', 'regression'))}.py"
        s.write_script(name, s.reproduce_script(), "Let me test a few edge cases.")
        s.run(s.thought("Let me run it."), f"python {name}", s.script_output(name))
    elif late:
        s.tests()
    else:
        s.grep(bug.subject if rng.random() < 0.5 else None)


def _artifact_facts(s: _Session) -> None:
    """Per created or edited file: its path and a line only its latest version holds (in no
    earlier version and no other file), in the last unit showing each."""
    for path in s.repo.changed_paths():
        versions = s.repo.history[path]
        earlier = {line.strip() for version in versions[:-1] for line in version}
        earlier |= {line.strip() for other, vs in s.repo.history.items() if other != path for version in vs for line in version}
        fresh = [line.strip() for line in versions[-1] if line.strip() not in earlier and len(line.strip()) > 12]
        for value in [path] + fresh[:1]:
            holder = max((i for i, m in enumerate(s.messages) if value in _text(m)), default=None)
            if holder is not None:
                s.fact("artifact", value, holder)


def _text(message: dict) -> str:
    """What a message's unit holds: its content and, for an assistant, its tool call line."""
    calls = message.get("tool_calls") or []
    return "\n".join([message["content"]] + [f"[tool_call] bash {c['function']['arguments']}" for c in calls])


# ---- scenario options: steered steps, planted events, reshaped units ----------------
def _size(s: _Session) -> int | None:
    """A step's output size drawn from ``unit_tokens`` (tokens; no more than the session's
    room left, :attr:`_Session.room`, when that is larger than 30), None without it."""
    sizes = s.options.unit_tokens
    return None if sizes is None else min(s.rng.randint(*sizes), max(s.room, 30))


def _next_kind(s: _Session) -> str:
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


def _step(s: _Session, kind: str) -> None:
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
        target = rng.choice(sorted(p for p in repo.tree if p.startswith("tests/")))
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
    for p, n, t in hits[rng.randrange(max(1, len(hits) // 2)) :]:
        out.append(f"./{p}:{n}:{t}")
        if count_tokens("\n".join(out)) >= size:
            break
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
    while count_tokens(" ".join(text)) < target:
        text.append(rng.choice((s.remark(), s.fake.paragraph(nb_sentences=rng.randint(2, 4)))))
    path, _ = s.repo.some_function()
    s.run("\n\n".join(text), f"wc -l {path}", f"{len(s.repo.lines(path))} {path}")


def _config_step(s: _Session, size: int | None) -> None:
    """A config or data file shown whole (materialized on its first view)."""
    rng, repo = s.rng, s.repo
    path = rng.choice(("setup.cfg", "tox.ini", "pyproject.toml", f"tests/data/{rng.choice(repo.words)}.json"))
    if path not in repo.files:
        repo.add_config(path, size or rng.randint(80, 400))
    s.view(path)


# ---- planted events -----------------------------------------------------------------
def _events(s: _Session, start: int, end: int) -> list[tuple[float, str]]:
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


def _event(s: _Session, name: str) -> None:
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
        target = rng.choice(sorted(p for p in repo.tree if p.startswith("tests/")))
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
            value = f"{rng.getrandbits(28):07x} {s.fake.sentence(nb_words=rng.randint(4, 8)).rstrip('.')}"
            more = [f"{rng.getrandbits(28):07x} {s.fake.sentence(nb_words=6).rstrip('.')}" for _ in range(2)]
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
    names = {"test": rng.choice(sorted(p for p in repo.tree if p.startswith("tests/"))), "other": other,
             "function": function.qualname, "qualname": bug.function.qualname, "package": repo.package, "subject": bug.subject}
    if pinned:
        note = PINNED_NOTES[len(s.pinned) % len(PINNED_NOTES)].format(**names)
        s.pinned.append(s.say("user", f"Pinned instruction {len(s.pinned) - 1}: {note}", "message"))
        return
    text = rng.choice(FOLLOW_UPS).format(**names)
    if rng.random() < 0.5:
        text += " " + s.fake.paragraph(nb_sentences=rng.randint(1, 4))
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


def _demonstration(s: _Session) -> str:
    """A worked example of another task (P3): a few thought-command-output steps."""
    rng, fake = s.rng, s.fake
    module = f"{rng.choice(s.repo.words)}/{rng.choice(s.repo.words)}.py"
    steps = [("Let me find the function the issue names.", f"grep -n 'def parse_' {module}",
              f"{rng.randint(10, 90)}:def parse_{rng.choice(s.repo.words)}(text):"),
             ("The parser splits before stripping; let me see it.", f"sed -n '40,52p' {module}",
              "\n".join(f"    {fake.word()} = {fake.word()}.split(',')" for _ in range(rng.randint(4, 10)))),
             ("Strip first, then split.", f"sed -i 's/.split(/.strip().split(/' {module}", ""),
             ("Now the tests.", "python -m pytest tests -q 2>&1 | tail -1", f"{rng.randint(20, 90)} passed in 1.2s")]
    body = [f"THOUGHT: {t}\n\n```bash\n{c}\n```\n\n<returncode>0</returncode>\n<output>\n{o}\n</output>" for t, c, o in steps]
    return "\n".join(["Here is a demonstration of how to solve a task with the bash tool.", DEMONSTRATION_MARK, "",
                      f"Issue: {fake.sentence(nb_words=10)}", "", *body, "", "--- END OF DEMONSTRATION ---"])


def _summary(s: _Session, first: int, last: int, depth: int) -> str:
    """A structured summary of earlier turns of the session (the format of prior compactions)."""
    from .generator import SUMMARY_TEMPLATE  # the generator imports scenarios, which imports this module lazily

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


def _shape(units: list[ContextUnit], s: _Session) -> list[ContextUnit]:
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
