"""The agent-loop session model: a bash-only coding agent fixing a bug in a fake repository.

Fitted to the real sessions in ``data/transcripts/mini-swe-agent`` (``ctxsim realism``
compares the two): a one-line system prompt; the task message (an issue statement, then
the instructions with the tool documentation and the user's rules, P1, as the corpus
has them); then turns of one assistant message (a short thought and one ``bash`` tool
call) and one tool message (``<returncode>`` and ``<output>``). The commands follow an
agent's work on a :class:`~ctxsim.lab.fake_repo.FakeRepo` drawn from the context seed:
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

A scenario's options (:mod:`ctxsim.lab.agent_options`, the ``agent_loop`` keys of
:mod:`ctxsim.lab.scenarios`) shape the session: after the fixed opening (find, grep, view,
reproduce, edit, run, tests), planted events are spread over the rest by token position
(exact re-reads of unchanged views, failed commands, commands showing a recall fact,
helper scripts written then shown again, pinned instructions and follow-up requests from
the user); a ``mix`` or ``unit_tokens`` steers the later steps by kind and size
(:func:`~ctxsim.lab.agent_options.step_mix` measures it); summaries of earlier turns follow the task, a
worked example (P3) precedes it; P1 placement, pinning and mislabelling are applied to
the finished units. Planted material a small target has no room for still comes, after it.

Same scenario and seed give the same text in every process: all draws come from one
``random.Random`` (scenario name xor seed; a :class:`~ctxsim.lab.fast_random.FastRandom`,
which draws alike at less cost) and a Faker seeded from it (its lorem text drawn through
:mod:`ctxsim.lab.fast_lorem`, alike at less cost).
"""

from __future__ import annotations

import json
import random
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from itertools import chain

from faker import Faker

from .agent_options import (
    SessionOptions, demonstration, message_kind, next_kind, planted_events, prior_summary, run_event, shape_units,
    steered_step,
)
from .fake_repo import FakeRepo
from .fast_lorem import FastLorem
from .fast_random import FastRandom
from .generator import stable_seed
from ..model import ContextState, ContextUnit, Fact
from .scenarios import Scenario
from ..tokens import DEFAULT_FORMAT, REPLY_PRIMING, count_tokens, message_overhead
from ..transcripts import messages_to_units

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
#: with less room than this left before the closing steps (tokens), a session's next step is a small grep
SMALL_ROOM = 500
#: with ``unit_tokens``, the harness's output limit is this many characters per token of its max
CHARS_PER_TOKEN_LIMIT = 6
@dataclass
class _Session:
    """The messages of one session as they are written, with the repository they act on."""

    rng: random.Random
    repo: FakeRepo  # its Faker's lorem text: ``lorem``
    messages: list[dict] = field(default_factory=list)
    tokens: int = REPLY_PRIMING[DEFAULT_FORMAT]
    facts: list[Fact] = field(default_factory=list)
    fixed: bool = False
    installed: bool = False
    test_style: str = "pytest"
    script: str = "reproduce_issue.py"
    views: dict[str, str] = field(default_factory=dict)
    options: SessionOptions = field(default_factory=SessionOptions)
    #: tokens per kind of step (see :func:`~ctxsim.lab.agent_options.message_kind`), the session's steps only
    kinds: dict[str, int] = field(default_factory=dict)
    #: message indices the scenario options reshape: plan updates, summaries, pinned instructions
    plans: list[int] = field(default_factory=list)
    summaries: list[int] = field(default_factory=list)
    pinned: list[int] = field(default_factory=list)
    values: set[str] = field(default_factory=set)
    #: tokens the session may still add before its closing steps
    room: int = 0

    @property
    def lorem(self) -> FastLorem | Faker:
        """The Faker's lorem text, drawn alike at less cost (the repository's: they share the Faker)."""
        return self.repo.lorem

    @property
    def output_limit(self) -> int:
        """The harness's output limit (characters): larger with the scenario's ``unit_tokens``."""
        sizes = self.options.unit_tokens
        return max(OUTPUT_LIMIT_CHARS, CHARS_PER_TOKEN_LIMIT * sizes[1]) if sizes else OUTPUT_LIMIT_CHARS

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
        observation = _observation(command, output, returncode, timeout, self.output_limit)
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
        tests = self.repo.test_paths()
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
            self.lorem.sentence(nb_words=rng.randint(6, 14)),
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
        lines = ["#!/usr/bin/env python", f'"""{self.lorem.sentence(nb_words=8)}"""', "import sys", "",
                 "sys.path.insert(0, '/testbed')", "", f"from {module} import {name}", "", ""]
        for i in range(cases or self.rng.randint(3, 14)):
            arg = self.rng.choice(("None", "{}", "[]", repr(self.rng.choice(self.repo.words)), str(self.rng.randint(0, 99))))
            label = self.lorem.sentence(nb_words=self.rng.randint(3, 7)).rstrip(".").lower()
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
        target = self.rng.choice(self.repo.test_paths())
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
    bug, lorem, rng = session.repo.bug, session.lorem, session.rng
    name = bug.function.qualname
    story = [rng.choice((f"Calling {name} without a {bug.subject} fails instead of falling back to the default.",
                         f"Since the last release {name} no longer accepts an empty {bug.subject}.",
                         f"When {bug.subject} is missing, {name} raises {bug.error} deep inside {bug.path}."))]
    story += [lorem.paragraph(nb_sentences=rng.randint(3, 6)) for _ in range(rng.randint(1, 3))]
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


_FAKERS = threading.local()


def _seeded_faker(seed: int) -> Faker:
    """This thread's en_US Faker, seeded with ``seed``: it draws as a new instance seeded so
    would (``seed_instance`` reseeds its one random generator; its providers keep no other
    state), without the millisecond of building one per session. A session draws all its
    text within :func:`generate_session`, so no two sessions of a thread share it."""
    fake = getattr(_FAKERS, "fake", None)
    if fake is None:
        fake = _FAKERS.fake = Faker("en_US")
    fake.seed_instance(seed)
    return fake


def generate_session(scenario: Scenario, seed: int) -> ContextState:
    """The context of an ``agent_loop`` scenario for ``seed``: a whole session of at least
    ``scenario.resolved_target`` tokens (a few hundred over; a minimum session of about
    4,000 tokens whatever the target) at the scenario's limit, shaped by the scenario's
    options (:class:`~ctxsim.lab.agent_options.SessionOptions`; planted material a small target has no room for
    still comes, after it)."""
    options = SessionOptions.of(scenario)
    rng = FastRandom(stable_seed(scenario.name, seed))
    fake = _seeded_faker(rng.getrandbits(64))
    repo = FakeRepo.build(FastRandom(rng.getrandbits(64)), fake, modules=rng.randint(6, 16))
    s = _Session(rng, repo, test_style=rng.choice(("pytest", "django")),
                 script=rng.choice(("reproduce_issue.py", "reproduce.py", "test_reproduce.py", f"test_{repo.bug.subject}.py")),
                 options=options)
    bug = repo.bug
    title = rng.choice((f"{bug.function.qualname}() raises {bug.error} when {bug.subject} is None",
                        f"{bug.error} in {bug.function.qualname} when {bug.subject} is not given",
                        f"{bug.function.qualname} crashes with {bug.error}: {bug.message}"))
    rules = _rules(s, options.rules)
    s.say("system", SYSTEM_PROMPT)
    if options.worked_example:
        s.say("user", demonstration(s))
    task = s.say("user", _task_message(s, title, rules))
    for rule in rules:
        s.fact("rule", rule, task, priority=1)
    s.fact("continuation", title, task, priority=1)
    for k in range(options.prior_summaries):
        first = 1 + 12 * k
        s.summaries.append(s.say("user", prior_summary(s, 1 if k == 0 and options.prior_summaries > 1 else first, first + 11,
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
    events = planted_events(s, s.tokens, target - reserve)
    while True:
        while s.tokens < target - reserve or events:
            if events and (events[0][0] <= s.tokens or s.tokens >= target - reserve):
                run_event(s, events.pop(0)[1])
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
                steered_step(s, next_kind(s))
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
    units = shape_units(holding(messages_to_units(s.messages), s.facts), s)
    priority = {u.id: u.priority for u in units}
    facts = tuple(replace(f, priority=priority[f.unit_id]) for f in s.facts)
    state = ContextState(units=tuple(units), limit=10**12, min_limit=1, task=title, fact_table=facts,
                         scenario=scenario.name, seed=seed)
    limit = scenario.resolved_limit
    return replace(state, limit=limit, min_limit=min(scenario.min_limit, limit), warning_threshold=scenario.warning_threshold)


def holding(units: Iterable[ContextUnit], facts: Iterable[Fact]) -> list[ContextUnit]:
    """``units`` with each one's ``fact_ids`` set to the ids of the ``facts`` it holds, in order."""
    holders: dict[str, list[str]] = {}
    for fact in facts:
        holders.setdefault(fact.unit_id, []).append(fact.id)
    out = []
    for unit in units:
        ids = tuple(holders.get(unit.id, ()))
        out.append(unit if unit.fact_ids == ids else replace(unit, fact_ids=ids))  # replace would copy it
    return out


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
    history, strip = s.repo.history, str.strip
    # the stripped lines of every version of each file, and in how many files each line occurs
    lines_of = {path: set(map(strip, chain.from_iterable(versions))) for path, versions in history.items()}
    files_with = Counter(chain.from_iterable(lines_of.values()))
    texts = [_text(m) for m in s.messages]
    for path in s.repo.changed_paths():
        versions = history[path]
        earlier = set(map(strip, chain.from_iterable(versions[:-1])))
        # the first line of the latest version in no other file (this file is the one holding it)
        fresh = next((line for line in map(strip, versions[-1])
                      if len(line) > 12 and line not in earlier and files_with[line] == 1), None)
        for value in [path] + ([] if fresh is None else [fresh]):
            holder = next((i for i in range(len(texts) - 1, -1, -1) if value in texts[i]), None)  # the last one
            if holder is not None:
                s.fact("artifact", value, holder)


def _text(message: dict) -> str:
    """What a message's unit holds: its content and, for an assistant, its tool call line."""
    calls = message.get("tool_calls") or []
    return "\n".join([message["content"]] + [f"[tool_call] bash {c['function']['arguments']}" for c in calls])
