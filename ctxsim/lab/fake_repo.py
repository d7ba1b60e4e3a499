"""A stateful fake repository: the Python project an agent session works on.

:class:`FakeRepo` holds real text per file (modules of classes and functions with
docstrings, imports, comments and line numbers that stay true), a file tree with many
more paths than are materialized, one planted bug (a line that raises a given error
when reached through a call chain) and every file's history of versions. A session
(:mod:`ctxsim.lab.agent_session`) reads it as a shell would show it — ``find``, ``grep -n``,
``cat``, ``nl -ba | sed -n``, tracebacks whose frames name real lines — and changes it
with edits, so a view taken after an edit differs from the one before, and ``git diff``
shows exactly what changed since the start.

Everything is drawn from the ``random.Random`` and the seeded Faker given, so a seed
gives the same repository in every process; the Faker's lorem text is drawn through
:func:`~ctxsim.lab.fast_lorem.lorem_for`, which draws and returns what Faker would.
"""

from __future__ import annotations

import builtins
import difflib
import keyword
import random
from dataclasses import dataclass, field

from faker import Faker

from .fast_lorem import FastLorem, lorem_for

STDLIB = ("os", "re", "sys", "json", "logging", "warnings", "functools", "itertools", "collections", "copy",
          "inspect", "operator", "datetime", "decimal", "pathlib", "typing", "contextlib", "weakref", "enum")
#: (error class, message template, failing expression) of a planted bug; ``{x}`` is the
#: operand that is None (or empty) when it fails, ``{attr}`` a name
ERRORS = (
    ("AttributeError", "'NoneType' object has no attribute '{attr}'", "{x}.{attr}()"),
    ("TypeError", "unsupported operand type(s) for +: 'NoneType' and 'int'", "{x} + 1"),
    ("KeyError", "'{attr}'", "{x}['{attr}']"),
    ("ValueError", "invalid literal for int() with base 10: ''", "int({x})"),
    ("TypeError", "'NoneType' object is not iterable", "list({x})"),
    ("IndexError", "list index out of range", "{x}[0]"),
)
_RESERVED = set(keyword.kwlist) | set(keyword.softkwlist) | set(dir(builtins)) | {"self", "cls"}
_SUFFIXES = ("_value", "_name", "_options", "_fields", "_node", "_items", "_key", "_config", "_result", "_data")


@dataclass
class Function:
    """A function or method of a file: its name, class (or None) and the line span it
    occupies in the file's *original* version (1-based, inclusive)."""

    name: str
    cls: str | None
    start: int
    end: int

    @property
    def qualname(self) -> str:
        return f"{self.cls}.{self.name}" if self.cls else self.name


@dataclass
class Bug:
    """The planted bug: the file, function, the failing line's text and number
    (original version), the error it raises, the replacement lines of the fix and the
    operand (``subject``) that is None when it fails."""

    path: str
    function: Function
    line: int
    text: str
    error: str
    message: str
    fix: list[str]
    subject: str


@dataclass
class FakeRepo:
    """A project's files (path -> lines), their history and its bug (see the module docstring)."""

    rng: random.Random
    fake: Faker
    package: str = ""
    files: dict[str, list[str]] = field(default_factory=dict)
    history: dict[str, list[list[str]]] = field(default_factory=dict)
    functions: dict[str, list[Function]] = field(default_factory=dict)
    tree: list[str] = field(default_factory=list)
    words: list[str] = field(default_factory=list)
    bug: Bug | None = None
    _tests: tuple[list[str] | None, tuple[str, ...]] = field(default=(None, ()), repr=False, compare=False)
    #: the Faker's lorem text, drawn alike at less cost (made once ``fake`` is seeded)
    lorem: FastLorem | Faker = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.lorem = lorem_for(self.fake)

    @classmethod
    def build(cls, rng: random.Random, fake: Faker, modules: int) -> "FakeRepo":
        """A project of ``modules`` source modules (plus tests and a tree of unread paths) with one bug."""
        repo = cls(rng, fake)
        repo.words = sorted({w.lower() for w in repo.lorem.words(nb=160, unique=True)
                             if w.isalpha() and len(w) > 3 and w.lower() not in _RESERVED})
        repo.package = rng.choice(repo.words)
        subpackages = rng.sample(repo.words, 4)
        for i in range(modules):
            sub = rng.choice(subpackages + [""])
            path = "/".join(p for p in (repo.package, sub, f"{repo._ident()}.py") if p)
            if path not in repo.files:
                repo._write_module(path)
        repo.tree = sorted(set(repo.files) | repo._decoys(subpackages))
        repo._plant_bug()
        for path, lines in repo.files.items():
            repo.history[path] = [list(lines)]
        return repo

    # ---- names and text ------------------------------------------------
    def _ident(self, parts: int = 0) -> str:
        """``parts`` distinct words (1-3 drawn when not given) joined by underscores; one word
        is a ``choice``, which draws as a ``sample`` of one does (a single ``randbelow``)."""
        rng = self.rng
        parts = parts or rng.choice((1, 2, 2, 3))
        return rng.choice(self.words) if parts == 1 else "_".join(rng.sample(self.words, parts))

    def _class_name(self) -> str:
        return "".join(w.capitalize() for w in self.rng.sample(self.words, self.rng.choice((1, 2, 2))))

    def _comment(self) -> str:
        return "# " + self.lorem.sentence(nb_words=self.rng.randint(4, 12)).rstrip(".")

    def _docstring(self, indent: str) -> list[str]:
        first = self.lorem.sentence(nb_words=self.rng.randint(4, 10))
        if self.rng.random() < 0.5:
            return [f'{indent}"""{first}"""']
        body = [f"{indent}{line}" for line in self.lorem.paragraph(nb_sentences=self.rng.randint(1, 3)).split(". ")]
        params = [f"{indent}{p} : {self.rng.choice(('str', 'int', 'dict', 'list', 'bool', 'Node'))}"
                  for p in self.rng.sample(self.words, self.rng.randint(1, 3))]
        return [f'{indent}"""{first}', "", *body, "", f"{indent}Parameters", f"{indent}----------", *params, f'{indent}"""']

    def _statement(self, indent: str, names: list[str], depth: int) -> list[str]:
        """One statement (possibly a small block) using the local ``names``."""
        r = self.rng
        a, b = r.choice(names), r.choice(names)
        new = r.choice(self.words) + r.choice(_SUFFIXES)  # self._ident(1) + a suffix
        kind = r.randrange(10 if depth < 2 else 6)
        if kind == 0:
            names.append(new)
            return [f"{indent}{new} = {a}.get({r.choice(self.words)!r}, {b})"]
        if kind == 1:
            names.append(new)
            item = r.choice(("item", "entry", "value", "node", "part", "key"))
            return [f"{indent}{new} = [{item} for {item} in {a} if {item}]"]
        if kind == 2:
            return [f"{indent}{self._comment()}"]
        if kind == 3:
            names.append(new)
            return [f"{indent}{new} = {self._ident()}({a}, {r.choice(self.words)}={b})"]
        if kind == 4:
            return [f"{indent}if {a} is None:", f"{indent}    {a} = {r.choice(('{}', '[]', 'None', '0', repr(r.choice(self.words))))}"]
        if kind == 5:
            return [f"{indent}{a}.{self._ident(1)}({b})"]
        if kind == 6:
            return [f"{indent}for {self._ident(1)} in {a}:", *self._block(indent + "    ", names, depth, r.randint(1, 3))]
        if kind == 7:
            body = self._block(indent + "    ", names, depth, r.randint(1, 3))
            return [f"{indent}if isinstance({a}, {self._class_name()}):", *body, f"{indent}else:", *self._block(indent + "    ", names, depth, 1)]
        if kind == 8:
            return [f"{indent}try:", *self._block(indent + "    ", names, depth, 1), f"{indent}except ({r.choice(('KeyError', 'ValueError', 'TypeError'))}, AttributeError):",
                    f"{indent}    raise {self._class_name()}Error(", f"{indent}        \"{self.lorem.sentence(nb_words=6).rstrip('.')}: %r\" % ({a},)",
                    f"{indent}    )"]
        body = self._block(indent + "    ", names, depth, r.randint(1, 2))
        return [f"{indent}while {a} and len({a}) > {r.randint(0, 5)}:", *body, f"{indent}    break"]

    def _block(self, indent: str, names: list[str], depth: int, count: int) -> list[str]:
        """The body of a compound statement: ``count`` statements, at least one of them not a comment."""
        lines = [line for _ in range(count) for line in self._statement(indent, names, depth + 1)]
        if all(line.strip().startswith("#") for line in lines):
            lines.append(f"{indent}{self.rng.choice(names)}.{self._ident(1)}()")
        return lines

    def _function(self, indent: str, cls: str | None) -> tuple[str, list[str]]:
        name = ("_" if self.rng.random() < 0.3 else "") + self._ident()
        params = self.rng.sample(self.words, self.rng.randint(0, 3))
        args = ", ".join((["self"] if cls else []) + params + (["**kwargs"] if self.rng.random() < 0.2 else []))
        lines = [f"{indent}def {name}({args}):", *self._docstring(indent + "    ")]
        names = list(params) or (["self"] if cls else [])
        if not names:
            local = self._ident(1) + self.rng.choice(_SUFFIXES)
            lines.append(f"{indent}    {local} = {self._ident()}()")
            names = [local]
        for _ in range(self.rng.randint(2, 9)):
            lines += self._statement(indent + "    ", names, 0)
        lines.append(f"{indent}    return {self.rng.choice(names)}")
        return name, lines

    def _write_module(self, path: str) -> None:
        r = self.rng
        lines = [f'"""{self.lorem.sentence(nb_words=r.randint(5, 11))}"""', ""]
        lines += sorted(f"import {m}" for m in r.sample(STDLIB, r.randint(1, 5)))
        if self.files:
            other = r.choice(sorted(self.files))[:-3].replace("/", ".")
            lines += ["", f"from {other} import {self._ident()}"]
        lines += ["", ""]
        if r.random() < 0.5:
            lines += [f"{self._ident(2).upper()} = {r.choice((repr(r.choice(self.words)), str(r.randint(2, 4096)), '()'))}", "", ""]
        functions: list[Function] = []
        for _ in range(r.randint(1, 6)):
            if r.random() < 0.45:
                cls = self._class_name()
                base = r.choice(("object", "Exception", self._class_name(), "dict"))
                lines += [f"class {cls}({base}):", *self._docstring("    "), ""]
                for _ in range(r.randint(1, 5)):
                    name, body = self._function("    ", cls)
                    functions.append(Function(name, cls, len(lines) + 1, len(lines) + len(body)))
                    lines += body + [""]
                lines += [""]
            else:
                name, body = self._function("", None)
                functions.append(Function(name, None, len(lines) + 1, len(lines) + len(body)))
                lines += body + ["", ""]
        self.files[path] = lines[:-1]
        self.functions[path] = functions

    def _decoys(self, subpackages: list[str]) -> set[str]:
        paths = {f"tests/test_{self._ident()}.py" for _ in range(self.rng.randint(20, 60))}
        for sub in subpackages:
            paths |= {f"{self.package}/{sub}/{self._ident()}.py" for _ in range(self.rng.randint(6, 20))}
            paths.add(f"{self.package}/{sub}/__init__.py")
        return paths | {f"{self.package}/__init__.py", "setup.py", "setup.cfg", "tox.ini", "README.rst", "docs/conf.py"}

    def _plant_bug(self) -> None:
        path = self.rng.choice(sorted(p for p, fs in self.functions.items() if fs))
        function = self.rng.choice(self.functions[path])
        lines = self.files[path]
        indent = " " * (8 if function.cls else 4)
        subject = self._ident(1) + self.rng.choice(_SUFFIXES)
        attr = self.rng.choice(self.words)
        error, template, expression = self.rng.choice(ERRORS)
        body = "\n".join(lines[function.start - 1 : function.end])
        operand = next((w for w in self.rng.sample(self.words, len(self.words)) if f"{w}," in body or f"{w})" in body),
                       self._ident(1) + self.rng.choice(_SUFFIXES))
        text = f"{indent}{subject} = {expression.format(x=operand, attr=attr)}"
        line = function.end  # the failing line goes just before the function's return
        lines.insert(line - 1, text)
        function.end += 1
        for f in self.functions[path]:
            if f.start > function.start:
                f.start, f.end = f.start + 1, f.end + 1
        fallback = self.rng.choice(("None", "{}", "[]", "0", repr(attr)))
        fix = [f"{indent}if {operand} is None:", f"{indent}    # {operand} is optional: return early instead of raising {error}",
               f"{indent}    return {fallback}", text]
        self.bug = Bug(path, function, line, text, error, template.format(attr=attr), fix, operand)

    # ---- reading -------------------------------------------------------
    def lines(self, path: str) -> list[str]:
        return self.files[path]

    def grep(self, needle: str, paths: list[str] | None = None) -> list[tuple[str, int, str]]:
        """(path, line number, line) of every current line containing ``needle``. A file
        whose joined text lacks ``needle`` has no such line and is not read line by line."""
        return [(p, i, t) for p in (paths or sorted(self.files)) if needle in "\n".join(self.files[p])
                for i, t in enumerate(self.files[p], start=1) if needle in t]

    def test_paths(self) -> tuple[str, ...]:
        """The paths of the tree under ``tests/``, sorted (found once per tree: the tree is
        replaced, never changed in place, when a file joins it)."""
        if self._tests[0] is not self.tree:
            self._tests = (self.tree, tuple(sorted(p for p in self.tree if p.startswith("tests/"))))
        return self._tests[1]

    def some_function(self, exclude: str | None = None) -> tuple[str, Function]:
        path = self.rng.choice(sorted(p for p, fs in self.functions.items() if fs and p != exclude) or sorted(self.functions))
        return path, self.rng.choice(self.functions[path])

    def line_of(self, path: str, text: str) -> int:
        """The current line number of the first line equal to ``text`` (1-based)."""
        return self.files[path].index(text) + 1

    def add_config(self, path: str, size: int) -> None:
        """Materialize a config or data file of about ``size`` tokens (``setup.cfg``, ``tox.ini``,
        ``pyproject.toml``, ``*.json``) as part of the original project (not a change)."""
        r, words = self.rng, self.words
        lines: list[str] = []
        if path.endswith(".json"):
            lines.append("{")
            while len(lines) * 9 < size:
                lines.append(f'  "{r.choice(words)}_{r.choice(words)}": {r.choice((str(r.randint(0, 9999)), "null", "true", repr(r.choice(words)).replace(chr(39), chr(34))))},')
            lines[-1] = lines[-1].rstrip(",")
            lines.append("}")
        else:
            while len(lines) * 7 < size:
                section = r.choice(("metadata", "options", f"tool:{r.choice(words)}", f"{self.package}.{r.choice(words)}"))
                lines += [f"[{section}]"] + [f"{r.choice(words)}_{r.choice(words)} = {r.choice((str(r.randint(0, 500)), r.choice(words), 'true', 'false'))}"
                                             for _ in range(r.randint(2, 8))] + [""]
        self.files[path] = lines
        self.history[path] = [list(lines)]
        if path not in self.tree:
            self.tree = sorted({*self.tree, path})

    # ---- writing -------------------------------------------------------
    def write(self, path: str, lines: list[str]) -> None:
        """Replace (or create) a file's content; its history keeps every version."""
        self.files[path] = list(lines)
        self.history.setdefault(path, []).append(list(lines))

    def replace_line(self, path: str, old: str, new: list[str]) -> bool:
        """Replace the first line equal to ``old`` by ``new``; False (nothing written) when there is none."""
        lines = self.files[path]
        if old not in lines:
            return False
        i = lines.index(old)
        self.write(path, lines[:i] + new + lines[i + 1 :])
        return True

    def changed_paths(self) -> list[str]:
        """Files whose current content differs from their first version (created files included)."""
        return [p for p in sorted(self.history) if self.history[p][0] != self.files[p] or len(self.history[p]) == 1 and p not in self.tree]

    def diff(self, paths: list[str], index: bool = True) -> str:
        """``git diff`` of ``paths`` against their first version (``index``: with the
        ``index`` lines of blob hashes, drawn from the repository's generator)."""
        out = []
        for path in paths:
            before, after = self.history[path][0], self.files[path]
            body = list(difflib.unified_diff(before, after, f"a/{path}", f"b/{path}", lineterm="", n=3))
            hashes = [f"index {self.rng.getrandbits(40):010x}..{self.rng.getrandbits(40):010x} 100644"] if index else []
            out += [f"diff --git a/{path} b/{path}", *hashes, *body]
        return "\n".join(out)
