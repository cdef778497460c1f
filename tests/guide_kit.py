"""The commands the README and the guides show, read from their fenced blocks, and the checks both
guide-test tiers make of them (``tests/unit/test_guides.py`` parses each, ``tests/e2e/test_guides_e2e.py``
runs the quick ones).

A fenced block's commands are its lines that start with ``tfprof-towers`` or ``make`` (after an optional
``$ `` prompt, a ``.venv/bin/`` or a YAML ``run:``); a command goes on over a trailing backslash and
over a quoted string that spans lines.  A ``$ `` command's output is the lines after it, up to the next
``$ ``; a block of exactly one command followed (after blank lines only) by a block with no command is
shown with that block as its output.  A short HTML comment on the line before a block tells the tests
about all of its commands::

    <!-- guide-test: slow -->       takes minutes (a full preset, a projection of the seed sizes, a cluster):
                                    parsed, not run
    <!-- guide-test: yours -->      needs what only the reader has (their files, a cluster): parsed, not run
    <!-- guide-test: synopsis -->   a usage synopsis with placeholders: each flag it names must exist

A shown output is matched against the real one by what does not depend on the machine's speed: each
shown line must be a line of the real output (box drawing and runs of spaces ignored; a time, a
percentage or a speed-up ratio stands for any such figure; ``...`` inside a line for anything, a
``<placeholder>`` such as ``<date>`` for one name, and a line that starts with ``...`` is a gap), and
the first shown line must be the first real line: so the column headers, the findings and every byte
and FLOP count must be as shown.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MARKS: frozenset[str] = frozenset({"slow", "yours", "synopsis"})
PROGRAMS: dict[str, str] = {"tfprof-towers": "tfprof-towers", ".venv/bin/tfprof-towers": "tfprof-towers",
                            "make": "make"}

_OPEN = re.compile(r"^(\s*)```\s*([\w-]*)")
_CLOSE = re.compile(r"^\s*```\s*$")
_CODE = frozenset({"python", "py", "sh", "bash", "shell", "yaml", "toml"})
_MARK = re.compile(r"<!--\s*guide-test:\s*([\w-]+)\s*-->")
_PREFIX = re.compile(r"^(?:-\s*)?(?:run:\s*)?(?:\$\s+)?")


@dataclass(frozen=True)
class Fence:
    """One fenced block of a document: where it opens (1-based), its language, lines and guide-test mark."""

    doc: Path
    line: int
    lang: str
    lines: tuple[str, ...]
    mark: str | None


@dataclass(frozen=True)
class Command:
    """A command a document shows: the program, its arguments (as the shell splits them), the mark of its
    block, the output shown for it (None where none is) and the file its stdout is redirected to."""

    doc: Path
    line: int
    program: str
    argv: tuple[str, ...]
    text: str
    mark: str | None
    output: tuple[str, ...] | None
    stdout_to: str | None = None

    @property
    def where(self) -> str:
        return f"{self.doc.name}:{self.line}"

    @property
    def runs(self) -> bool:
        """Whether the e2e tier runs it: a tfprof-towers command in a block with no mark."""
        return self.program == "tfprof-towers" and self.mark is None


def guides(repo: Path = REPO) -> list[Path]:
    """The README and every guide in docs/."""
    return [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]


def fences(doc: Path) -> list[Fence]:
    """The fenced blocks of ``doc``, each with the guide-test mark of the line before it (blank lines
    skipped)."""
    out: list[Fence] = []
    lines = doc.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and not _CLOSE.match(lines[i]):
            body.append(lines[i])
            i += 1
        before = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        mark = _MARK.search(before)
        out.append(Fence(doc, start + 1, m.group(2), tuple(body), mark.group(1) if mark else None))
        i += 1
    return out


def marks(doc: Path) -> list[tuple[int, str]]:
    """Every guide-test mark written in ``doc``: (line, word)."""
    return [(n, m.group(1)) for n, line in enumerate(doc.read_text().splitlines(), 1)
            for m in _MARK.finditer(line)]


def _program(line: str) -> tuple[str, str] | None:
    """(program, the line from the program on) where ``line`` starts a command, else None."""
    rest = _PREFIX.sub("", line.strip(), count=1)
    first = rest.split(maxsplit=1)[0] if rest.split() else ""
    return (PROGRAMS[first], rest) if first in PROGRAMS else None


def _split(text: str) -> list[str] | None:
    """The shell's words of ``text`` (comments dropped), None while a quote is still open."""
    try:
        return shlex.split(text, comments=True)
    except ValueError:
        return None


def _goes_on(fence: Fence, line: str) -> bool:
    """Whether ``line`` continues a synopsis's command (indented, an option group or a flag)."""
    return fence.mark == "synopsis" and line[:1].isspace() and line.lstrip()[:1] in ("[", "-")


def _commands_of(fence: Fence) -> list[tuple[int, str, str, list[str], list[str] | None]]:
    """(line, program, text, words, output) of each command in a block; output for ``$ `` commands."""
    found = []
    i, lines = 0, fence.lines
    while i < len(lines):
        hit = _program(lines[i])
        if hit is None:
            i += 1
            continue
        line_no, prompt = fence.line + 1 + i, lines[i].lstrip().startswith("$ ")
        program, text = hit
        words = _split(text)
        while i + 1 < len(lines) and (text.endswith("\\") or words is None or _goes_on(fence, lines[i + 1])):
            i += 1
            text = (text[:-1] if text.endswith("\\") else text + "\n") + lines[i].strip()
            words = _split(text)
        i += 1
        output = None
        if prompt:
            output = []
            while i < len(lines) and not lines[i].lstrip().startswith("$ "):
                output.append(lines[i])
                i += 1
        words = [w for w in (words or []) if w != "&"]
        found.append((line_no, program, text, words[1:], output))
    return found


def _redirect(argv: list[str]) -> tuple[list[str], str | None]:
    """``argv`` without a trailing ``> FILE``, and FILE."""
    if ">" in argv[:-1]:
        at = argv.index(">")
        return argv[:at], argv[at + 1]
    return argv, None


def commands(doc: Path) -> list[Command]:
    """Every command ``doc`` shows in its fenced blocks, in order."""
    out: list[Command] = []
    blocks = fences(doc)
    text_lines = doc.read_text().splitlines()
    for k, fence in enumerate(blocks):
        found = _commands_of(fence)
        following = _output_block(blocks, k, text_lines) if len(found) == 1 and found[0][4] is None else None
        for line, program, text, words, output in found:
            shown = output if output is not None else following
            argv, stdout_to = _redirect(words)
            out.append(Command(doc, line, program, tuple(argv), text, fence.mark,
                               tuple(shown) if shown is not None else None, stdout_to))
    return out


def _output_block(blocks: Sequence[Fence], k: int, text_lines: Sequence[str]) -> list[str] | None:
    """The block after block ``k`` where only blank lines lie between them, it holds no command and it is
    not code (Python, shell, YAML, TOML)."""
    if k + 1 >= len(blocks):
        return None
    this, nxt = blocks[k], blocks[k + 1]
    between = text_lines[this.line + len(this.lines) + 1:nxt.line - 1]
    if any(line.strip() for line in between) or _commands_of(nxt) or nxt.lang in _CODE:
        return None
    return list(nxt.lines)


def all_commands(repo: Path = REPO) -> list[Command]:
    """Every command of the README and the guides."""
    return [c for doc in guides(repo) for c in commands(doc)]


# --- the parse checks (the fast tier) ---------------------------------------------------------------

def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each subcommand's parser, by name."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def options(parser: argparse.ArgumentParser) -> set[str]:
    """The long options a parser takes and shows in its help (``--help`` and hidden ones left out)."""
    return {s for a in parser._actions for s in a.option_strings
            if s.startswith("--") and s != "--help" and a.help != argparse.SUPPRESS}


def parse_problem(parser: argparse.ArgumentParser, argv: Sequence[str]) -> str | None:
    """Why ``argv`` does not parse (argparse's own message), or None where it does.  Nothing is run."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(list(argv))
    except SystemExit as exc:
        return err.getvalue().strip() or f"exit {exc.code}"
    return None


def synopsis_problems(parser: argparse.ArgumentParser, command: Command) -> list[str]:
    """The flags a synopsis line names that its subcommand does not take."""
    subs = subparsers(parser)
    if not command.argv or command.argv[0] not in subs:
        return [f"no subcommand {command.argv[:1]}"]
    known = options(subs[command.argv[0]])
    return [f"{command.argv[0]} has no {flag}"
            for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", command.text) if flag not in known]


def make_targets(makefile: Path = REPO / "Makefile") -> tuple[set[str], set[str]]:
    """The Makefile's targets and the variables it sets."""
    text = makefile.read_text()
    targets = set(re.findall(r"^([a-zA-Z][\w-]*)\s*:(?!=)", text, re.M))
    variables = set(re.findall(r"^([A-Z][A-Z0-9_]*)\s*[?:]?=", text, re.M))
    return targets, variables


def make_problems(command: Command, parser: argparse.ArgumentParser, makefile: Path = REPO / "Makefile"
                  ) -> list[str]:
    """What a shown ``make ...`` names that the Makefile lacks; ``make profile ARGS=...``'s ARGS are
    parsed as `profile`'s."""
    targets, variables = make_targets(makefile)
    problems, asked, args = [], [], None
    for word in command.argv:
        name, eq, value = word.partition("=")
        if eq:
            if name not in variables:
                problems.append(f"the Makefile sets no {name}")
            if name == "ARGS":
                args = shlex.split(value)
        elif not word.startswith("-"):
            asked.append(word)
            if word not in targets:
                problems.append(f"no make target {word}")
    if args is not None and asked == ["profile"]:
        why = parse_problem(parser, ["profile", *args])
        if why:
            problems.append(why)
    return problems


# --- the shown output against the real one (the e2e tier) --------------------------------------------

_BOX = re.compile(r"[\u2500-\u257f]")
_PLACEHOLDER = re.compile(r"<[a-z][a-z_-]*>")
_SPEED = re.compile(r"(?<![\w.])[+-]?(?:\d+(?:\.\d+)?\s?(?:ns|us|µs|ms|s|min)|\d+(?:\.\d+)?%|\d+(?:\.\d+)?x)"
                    r"(?![\w/])")


def _plain(line: str) -> str:
    return " ".join(_BOX.sub(" ", line).replace("|", " ").split())


def _pattern(shown: str) -> re.Pattern[str]:
    """A shown line as a pattern for a real one: a speed figure stands for any figure, ``...`` for anything
    and a ``<placeholder>`` (``<date>``, ``<host>``) for one name (no spaces or slashes); a table's rule
    (``-----``) for a rule of any width."""
    parts = re.split(r"(\.\.\.|" + _PLACEHOLDER.pattern + "|" + _SPEED.pattern + ")", _plain(shown))
    out = []
    for part in parts:
        if part is None or part == "":
            continue
        if part == "...":
            out.append(".*?")
        elif _PLACEHOLDER.fullmatch(part):
            out.append(r"[^\s/]+")
        elif _SPEED.fullmatch(part):
            out.append(r"\S+(?: \S+)?" if " " in part else r"\S+")
        else:  # a rule under a table's header is as wide as the column's widest figure: any width
            out.extend("-+" if re.fullmatch(r"-{3,}", bit) else re.escape(bit)
                       for bit in re.split(r"(-{3,})", part) if bit)
    return re.compile("".join(out))


def output_problems(shown: Sequence[str], real: str) -> list[str]:
    """How a real output departs from the one a guide shows (see the module's docstring), one line each."""
    real_lines = [_plain(line) for line in real.splitlines() if line.strip()]
    problems = []
    first = True
    for line in shown:
        text = line.strip()
        if not text:
            continue
        if text.startswith("..."):
            first = False
            continue
        pattern = _pattern(text)
        if first and not (real_lines and pattern.fullmatch(real_lines[0])):
            problems.append(f"the first line is not {text!r} (it is {real_lines[:1]})")
        elif not any(pattern.fullmatch(r) for r in real_lines):
            problems.append(f"no line like {text!r}")
        first = False
    return problems

