"""The wire in one place: docs/protocol.md names exactly protocol.py's codes, and no other
module of the package defines a code of its own.

A code added to protocol.py without a line in the docs, a code the docs name that protocol.py
does not define (as `INVALID_ACTION` once was), a category or HTTP status that differs, or a
WebSocket close code written as a number outside protocol.py: each fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from openenv.core import protocol
from openenv.core.protocol import (
    CLOSE_CODES,
    ERROR_CATEGORY,
    HTTP_STATUS,
    HarnessErrorCode,
    WSErrorCode,
)

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "protocol.md"
PACKAGE = REPO / "src" / "openenv"
PROTOCOL = PACKAGE / "core" / "protocol.py"
#: Documents that mention close codes in prose (checked against `CLOSE_CODES` too).
CLOSE_CODE_DOCS = (DOC, REPO / "docs" / "security.md", REPO / "README.md")

#: The range of WebSocket close codes a server may send (RFC 6455: 1000-2999 the protocol's,
#: 3000-4999 registered and applications').
CLOSE_RANGE = range(1000, 5000)
_CODE_TOKEN = re.compile(r"`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)`")
_CLOSE_MENTION = re.compile(r"(?i)\bclos(?:e|ed|es|ing)\b[^.;|]{0,40}?\b(\d{4})\b")
ERROR_CODES = {c.value for c in WSErrorCode}
HARNESS_CODES = {c.value for c in HarnessErrorCode}


def _doc() -> str:
    return DOC.read_text(encoding="utf-8")


def _section(text: str, heading: str) -> str:
    """The text under `heading` (a markdown heading line), up to the next heading of its level
    or above."""
    lines = text.splitlines()
    level = heading.split(" ", 1)[0]
    start = lines.index(heading) + 1
    end = next(
        (
            i
            for i in range(start, len(lines))
            if re.match(r"#+ ", lines[i]) and len(lines[i].split(" ", 1)[0]) <= len(level)
        ),
        len(lines),
    )
    return "\n".join(lines[start:end])


def _table(section: str) -> list[list[str]]:
    """The rows of the first markdown table in `section`, cells stripped (header excluded)."""
    rows = [line for line in section.splitlines() if line.startswith("|")]
    assert len(rows) > 2, f"no table in:\n{section[:300]}"
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def _unquote(cell: str) -> str:
    assert cell.startswith("`") and cell.endswith("`"), cell
    return cell[1:-1]


def test_the_error_code_table_is_protocols() -> None:
    rows = _table(_section(_doc(), "### Error codes"))
    documented = {_unquote(code): (category, status) for code, category, status, _ in rows}
    assert len(documented) == len(rows), "a code is listed twice"
    assert set(documented) == ERROR_CODES, (
        f"only in the docs: {sorted(set(documented) - ERROR_CODES)}; "
        f"undocumented: {sorted(ERROR_CODES - set(documented))}"
    )
    for code, (category, status) in documented.items():
        member = WSErrorCode(code)
        assert category == ERROR_CATEGORY[member].value, code
        assert int(status) == HTTP_STATUS[member], code


def test_the_close_code_table_is_protocols() -> None:
    rows = _table(_section(_doc(), "### Close codes"))
    documented = {int(_unquote(code)): _unquote(name) for code, name, _ in rows}
    assert len(documented) == len(rows), "a close code is listed twice"
    assert documented == dict(CLOSE_CODES)
    for code, name in CLOSE_CODES.items():
        assert getattr(protocol, name) == code


def test_every_code_the_docs_name_is_defined() -> None:
    """Every code-like name in backticks is an error code, a harness code or a close code's
    name (environment variables aside)."""
    known = ERROR_CODES | HARNESS_CODES | set(CLOSE_CODES.values())
    named = {t for t in _CODE_TOKEN.findall(_doc()) if not t.startswith("OPENENV_")}
    assert named <= known, f"named in docs/protocol.md, not defined in protocol.py: {named - known}"


def test_the_harness_codes_are_documented() -> None:
    section = _section(_doc(), "## Agent harness `/harness` (production mode)")
    named = set(_CODE_TOKEN.findall(section))
    assert named == HARNESS_CODES, f"harness section names {named}, protocol has {HARNESS_CODES}"


@pytest.mark.parametrize("path", CLOSE_CODE_DOCS, ids=lambda p: p.name)
def test_close_codes_in_prose_are_defined(path: Path) -> None:
    text = " ".join(path.read_text(encoding="utf-8").split())  # across line breaks
    mentioned = {int(n) for n in _CLOSE_MENTION.findall(text)}
    assert mentioned <= set(CLOSE_CODES), f"{path.name}: {sorted(mentioned - set(CLOSE_CODES))}"


def test_the_mention_pattern_finds_close_codes() -> None:
    """The prose check is not vacuous: it reads the ways the docs write close codes."""
    for prose in (
        "closed with code `4002` and",
        "closed after `session_timeout` seconds with close code `4001`",
        "then close 1008 |",
        "then closes WebSockets with 1012 and exits",
    ):
        assert _CLOSE_MENTION.search(prose), prose


def test_close_codes_stay_importable_where_they_were() -> None:
    """Moved to protocol.py, the constants are still importable from their old modules."""
    from openenv.core import env_client
    from openenv.core.env_server import flood, sessions

    assert env_client.CLOSE_SERVICE_RESTART == protocol.CLOSE_RESTART == 1012
    assert flood.CLOSE_POLICY == protocol.CLOSE_POLICY == 1008
    assert sessions.CLOSE_IDLE_TIMEOUT == protocol.CLOSE_IDLE_TIMEOUT == 4001
    assert sessions.CLOSE_TAKEN_OVER == protocol.CLOSE_TAKEN_OVER == 4002
    assert sessions.CLOSE_SHUTDOWN == protocol.CLOSE_SHUTDOWN == 1001
    assert sessions.CLOSE_RESTART == protocol.CLOSE_RESTART


# --- nothing outside protocol.py defines a code ---------------------------------------------


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p != PROTOCOL)


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _names(node: ast.AST) -> str:
    """The names and attributes an expression mentions, lower-cased, for context checks."""
    out = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.append(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.append(sub.attr)
        elif isinstance(sub, ast.keyword) and sub.arg:
            out.append(sub.arg)
    return " ".join(out).lower()


def _close_code_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """Integer literals in the close-code range used where a close code goes: a `code` or
    `ws_code` argument or default, a `"code"` of an ASGI `websocket.close` message, an operand
    next to a `close_code`, a positional argument of a `close...` call, a `*CLOSE*` constant."""
    parents = _parents(tree)
    found = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Constant) and type(node.value) is int and node.value in CLOSE_RANGE
        ):
            continue
        parent = parents.get(node)
        why = None
        if isinstance(parent, ast.keyword) and parent.arg and "code" in parent.arg.lower():
            why = f"{parent.arg}={node.value}"
        elif isinstance(parent, ast.Dict):
            key = parent.keys[parent.values.index(node)] if node in parent.values else None
            values = {v.value for v in parent.values if isinstance(v, ast.Constant)}
            if (
                isinstance(key, ast.Constant)
                and key.value == "code"
                and "websocket.close" in values
            ):
                why = "the code of a websocket.close message"
        elif isinstance(parent, ast.arguments):
            params = parent.posonlyargs + parent.args
            defaults = dict(
                zip(params[len(params) - len(parent.defaults) :], parent.defaults, strict=True)
            )
            defaults.update(
                (arg, d)
                for arg, d in zip(parent.kwonlyargs, parent.kw_defaults, strict=True)
                if d is not None
            )
            for arg, default in defaults.items():
                if default is node and "code" in arg.arg.lower():
                    why = f"default of {arg.arg}"
        elif isinstance(parent, (ast.Compare, ast.BoolOp)) and "close_code" in _names(parent):
            why = "compared with a close_code"
        elif isinstance(parent, ast.Call) and "close" in _names(parent.func):
            why = "an argument of a close call"
        elif isinstance(parent, (ast.Assign, ast.AnnAssign)):
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            if any("close" in _names(t) for t in targets):
                why = "a CLOSE constant"
        if why is not None:
            found.append((node.lineno, why))
    return found


def test_no_module_but_protocol_defines_a_close_code() -> None:
    offenders = [
        f"{path.relative_to(REPO)}:{line}: {why}"
        for path in _sources()
        for line, why in _close_code_literals(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert not offenders, "close codes belong in protocol.py:\n" + "\n".join(offenders)


def test_no_module_but_protocol_defines_an_error_code() -> None:
    """A constant or enum member whose value is a wire error code is a second definition."""
    codes = ERROR_CODES | HARNESS_CODES
    offenders = []
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            if isinstance(value, ast.Constant) and value.value in codes:
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: {value.value}")
    assert not offenders, "error codes belong in protocol.py:\n" + "\n".join(offenders)


@pytest.mark.parametrize(
    "source",
    [
        "CLOSE_X = 4003",
        "async def f(ws):\n    await ws.close(code=1000)",
        "async def f(send):\n    await send({'type': 'websocket.close', 'code': 1011})",
        "def f(ws, code: int = 1000): ...",
        "def f(ws, *, ws_code=4001): ...",
        "def f(ws):\n    return ws.close_code == 1012",
        "def f(up):\n    return up.close_code or 1000",
        "async def f(ws):\n    await close_websocket(ws, 1008, 'flood')",
    ],
)
def test_the_scan_finds_close_code_literals(source: str) -> None:
    assert _close_code_literals(ast.parse(source)), source


def test_the_scan_leaves_other_numbers_alone() -> None:
    source = "LIMIT = 1000\nms = seconds * 1000\ndef f(n=4096): ...\nrange(1000)"
    assert _close_code_literals(ast.parse(source)) == []
