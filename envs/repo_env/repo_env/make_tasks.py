"""Generate `data/tasks.json`: for each vendored project, inject bugs and record the tests that
catch them. Deterministic: the same seed, projects and Python give the same file, byte for byte.

    python -m repo_env.make_tasks            # rewrite data/tasks.json
    python -m repo_env.make_tasks --check    # exit 1 if data/tasks.json is not what it makes

Each bug is one small mutation (a swapped operator, an off-by-one constant, a flipped return, a
negated condition, a removed branch) inside one function of the project's code. Mutations are
listed in source order, shuffled with a seeded generator, and tried in turn: one is kept when the
project's suite (run in a sandbox, as the environment runs it) then has failing tests (these are
FAIL_TO_PASS) but no more than half of them, and no collection error. One task per function.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import random
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openenv.sandbox import Sandbox

from .tasks import TASKS_FILE, project_files
from .testrun import TEST_LIMITS, run_pytest

#: (name, version on PyPI, licence, folders of the project's own code, tasks to make), vendored
#: unchanged under data/projects/<name> (tests moved under tests/, a pytest.ini added). roman
#: has few functions, hence fewer tasks.
PROJECTS: tuple[tuple[str, str, str, tuple[str, ...], int], ...] = (
    ("inflection", "0.5.1", "MIT", ("inflection",), 5),
    ("roman", "5.2", "ZPL-2.1", ("src",), 3),
    ("webcolors", "24.11.1", "BSD-3-Clause", ("src",), 4),
)
SEED = 13
#: Failing tests listed in an instruction; the rest are counted.
LISTED_TESTS = 10
#: Far above a suite's run time even on a loaded machine, so that only a mutation that loops
#: forever times out (and is skipped): a slow machine must not change which tasks are made.
GENERATOR_LIMITS = TEST_LIMITS.model_copy(update={"wall_time_s": 90.0, "cpu_time_s": 90.0})


@dataclass(frozen=True, order=True)
class Mutation:
    path: str
    start: int  # byte offsets in the file
    end: int
    replacement: bytes
    kind: str
    function: str
    description: str

    def apply(self, source: bytes) -> bytes:
        return source[: self.start] + self.replacement + source[self.end :]


_COMPARISONS: dict[type, tuple[str, str]] = {
    ast.Lt: ("<", "<="),
    ast.LtE: ("<=", "<"),
    ast.Gt: (">", ">="),
    ast.GtE: (">=", ">"),
    ast.Eq: ("==", "!="),
    ast.NotEq: ("!=", "=="),
    ast.In: ("in", "not in"),
    ast.NotIn: ("not in", "in"),
    ast.Is: ("is", "is not"),
    ast.IsNot: ("is not", "is"),
}
_ARITHMETIC: dict[type, tuple[str, str]] = {ast.Add: ("+", "-"), ast.Sub: ("-", "+")}
_BOOLEAN: dict[type, tuple[str, str]] = {ast.And: ("and", "or"), ast.Or: ("or", "and")}


class _MutationFinder(ast.NodeVisitor):
    """Every mutation inside a function of one file, with exact byte spans, so that applying
    one changes only the text it mutates (a one-line diff, the file's formatting kept)."""

    def __init__(self, path: str, source: bytes) -> None:
        self.path = path
        self.source = source
        self.line_starts = [0]
        for line in source.splitlines(keepends=True):
            self.line_starts.append(self.line_starts[-1] + len(line))
        self.names: list[str] = []
        self.function_depth = 0
        self.found: list[Mutation] = []

    # -- positions (ast columns are UTF-8 byte offsets) ----------------------------------

    def _offset(self, line: int, column: int) -> int:
        return self.line_starts[line - 1] + column

    def _start(self, node: Any) -> int:
        return self._offset(node.lineno, node.col_offset)

    def _end(self, node: Any) -> int:
        return self._offset(node.end_lineno, node.end_col_offset)

    def _text(self, start: int, end: int) -> str:
        return self.source[start:end].decode("utf-8")

    def _add(self, node: ast.AST, start: int, end: int, new: str, kind: str, what: str) -> None:
        if self.function_depth == 0:
            return
        line = getattr(node, "lineno", 0)
        self.found.append(
            Mutation(
                path=self.path,
                start=start,
                end=end,
                replacement=new.encode("utf-8"),
                kind=kind,
                function=".".join(self.names),
                description=f"{kind}: {what} (line {line})",
            )
        )

    def _swap_operator(
        self, node: ast.AST, left: Any, right: Any, old: str, new: str, kind: str
    ) -> None:
        """Replace the operator written between `left` and `right` (brackets may surround it)."""
        low, high = self._end(left), self._start(right)
        segment = self._text(low, high)
        words = r"\s+".join(re.escape(word) for word in old.split())
        pattern = rf"(?<![\w<>=!]){words}(?![\w<>=])"
        matches = list(re.finditer(pattern, segment))
        if len(matches) != 1:
            return
        found = matches[0]
        start = low + len(segment[: found.start()].encode("utf-8"))
        end = low + len(segment[: found.end()].encode("utf-8"))
        self._add(node, start, end, new, kind, f"`{old}` became `{new}`")

    # -- scopes --------------------------------------------------------------------------

    def _scope(self, node: Any, is_function: bool) -> None:
        self.names.append(node.name)
        self.function_depth += is_function
        self.generic_visit(node)
        self.function_depth -= is_function
        self.names.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._scope(node, True)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._scope(node, True)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scope(node, False)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        return  # positions inside f-strings differ between Python versions: leave them alone

    # -- mutations -----------------------------------------------------------------------

    def visit_Compare(self, node: ast.Compare) -> None:
        swap = _COMPARISONS.get(type(node.ops[0]))
        if len(node.ops) == 1 and swap:
            self._swap_operator(node, node.left, node.comparators[0], *swap, "comparison")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        swap = _ARITHMETIC.get(type(node.op))
        texts = [
            side
            for side in (node.left, node.right)
            if isinstance(side, ast.JoinedStr)
            or (isinstance(side, ast.Constant) and isinstance(side.value, str))
        ]
        if swap and not texts:  # `"a" - "b"` is a crash, not a bug worth finding
            self._swap_operator(node, node.left, node.right, *swap, "arithmetic")
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        swap = _BOOLEAN.get(type(node.op))
        if swap and len(node.values) == 2:
            self._swap_operator(node, node.values[0], node.values[1], *swap, "boolean")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if type(node.value) is int:
            start, end = self._start(node), self._end(node)
            if re.fullmatch(r"\d+", self._text(start, end)):
                n = node.value
                self._add(node, start, end, str(n + 1), "off_by_one", f"{n} became {n + 1}")
                if n > 0:
                    self._add(node, start, end, str(n - 1), "off_by_one", f"{n} became {n - 1}")

    def visit_Return(self, node: ast.Return) -> None:
        value = node.value
        if isinstance(value, ast.Constant) and type(value.value) is bool:
            flipped = str(not value.value)
            what = f"`return {value.value}` became `return {flipped}`"
            self._add(node, self._start(value), self._end(value), flipped, "flipped_return", what)
        self.generic_visit(node)

    def visit_If(self, node: ast.If) -> None:
        start, end = self._start(node.test), self._end(node.test)
        test = self._text(start, end)
        self._add(node, start, end, f"not ({test})", "negated_condition", f"`if {test}` negated")
        body = node.body
        first, last = body[0], body[-1]
        last_line = last.end_lineno or last.lineno
        trailing = self.source[self._end(last) : self.line_starts[last_line]]
        if (
            first.lineno > (node.test.end_lineno or node.test.lineno)
            and not (len(body) == 1 and isinstance(first, ast.Pass))
            and re.fullmatch(rb"\s*(#[^\n]*)?\n?", trailing)
        ):
            line = self.source[self.line_starts[first.lineno - 1] : self._start(first)]
            indent = line.decode("utf-8")
            if not indent.strip():
                self._add(
                    node,
                    self.line_starts[first.lineno - 1],
                    self.line_starts[last_line],
                    f"{indent}pass\n",
                    "removed_branch",
                    f"the body of `if {test}` removed",
                )
        self.generic_visit(node)


def find_mutations(path: str, source: bytes) -> list[Mutation]:
    finder = _MutationFinder(path, source)
    finder.visit(ast.parse(source))
    return sorted(finder.found)


def instruction(name: str, version: str, source_dirs: Sequence[str], failing: list[str]) -> str:
    listed = "\n".join(f"  {test}" for test in failing[:LISTED_TESTS])
    if len(failing) > LISTED_TESTS:
        listed += f"\n  ... and {len(failing) - LISTED_TESTS} more"
    count = "1 test fails" if len(failing) == 1 else f"{len(failing)} tests fail"
    return (
        f"The repository in your workspace is {name} {version}, and it has a bug: {count}.\n"
        f"{listed}\n\n"
        f"Fix the project's code (under {', '.join(source_dirs)}/) so that these tests pass and "
        "the other tests keep passing. Test files are restored before grading, so changing "
        "them does not help. Check your fix with run_tests, then call submit."
    )


def make_project_tasks(
    name: str, version: str, source_dirs: tuple[str, ...], seed: int, count: int
) -> tuple[list[str], list[dict[str, Any]]]:
    """(every test of the project, its tasks)."""
    files = project_files(name)
    with Sandbox() as box:
        for path, content in files.items():
            box.write_file(path, content)
        baseline = run_pytest(box, limits=GENERATOR_LIMITS)
        tests = sorted(baseline.outcomes)
        if not tests or not all(baseline.passed(t) for t in tests):
            raise RuntimeError(f"{name}: the unmodified suite does not pass:\n{baseline.output}")
        sources = [p for p in files if p.endswith(".py") and p.startswith(source_dirs)]
        candidates = [m for p in sources for m in find_mutations(p, files[p])]
        random.Random(f"repo_env/{seed}/{name}").shuffle(candidates)
        used: set[tuple[str, str]] = set()
        tasks: list[dict[str, Any]] = []
        for mutation in candidates:
            if len(tasks) == count:
                break
            if (mutation.path, mutation.function) in used:
                continue
            original = files[mutation.path]
            mutated = mutation.apply(original)
            try:
                ast.parse(mutated)
            except SyntaxError:
                continue
            box.write_file(mutation.path, mutated)
            run = run_pytest(box, limits=GENERATOR_LIMITS)
            box.write_file(mutation.path, original)
            failing = [t for t in tests if not run.passed(t)]
            if (
                not failing
                or 2 * len(failing) > len(tests)
                or run.collection_errors
                or set(run.outcomes) != set(tests)
            ):
                continue
            used.add((mutation.path, mutation.function))
            patch = "".join(
                difflib.unified_diff(
                    original.decode("utf-8").splitlines(keepends=True),
                    mutated.decode("utf-8").splitlines(keepends=True),
                    f"a/{mutation.path}",
                    f"b/{mutation.path}",
                )
            )
            tasks.append(
                {
                    "task_id": f"{name}-{len(tasks) + 1}",
                    "project": name,
                    "path": mutation.path,
                    "function": mutation.function,
                    "mutation": mutation.description,
                    "patch": patch,
                    "fail_to_pass": failing,
                    "instruction": instruction(name, version, source_dirs, failing),
                }
            )
    if len(tasks) < count:
        raise RuntimeError(f"{name}: only {len(tasks)} of {count} tasks found")
    return tests, tasks


def make_catalog(seed: int = SEED) -> str:
    """The text of tasks.json."""
    projects: list[dict[str, Any]] = []
    tasks: list[dict[str, Any]] = []
    for name, version, licence, source_dirs, count in PROJECTS:
        tests, made = make_project_tasks(name, version, source_dirs, seed, count)
        projects.append(
            {
                "name": name,
                "version": version,
                "license": licence,
                "source_dirs": list(source_dirs),
                "tests": tests,
            }
        )
        tasks.extend(made)
    catalog = {"seed": seed, "projects": projects, "tasks": tasks}
    return json.dumps(catalog, indent=1, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m repo_env.make_tasks", description=__doc__)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--output", type=Path, default=TASKS_FILE)
    parser.add_argument("--check", action="store_true", help="compare with --output; write nothing")
    args = parser.parse_args(argv)
    text = make_catalog(args.seed)
    if args.check:
        same = args.output.is_file() and args.output.read_text(encoding="utf-8") == text
        print(f"{args.output}: {'up to date' if same else 'DIFFERS from what the generator makes'}")
        return 0 if same else 1
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
