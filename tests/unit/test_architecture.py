"""The layers of `openenv` import downward only.

The module-level import graph of src/openenv (imports in function bodies and under
`if TYPE_CHECKING:` left out) is collapsed to the units of `LAYERS`; a unit may import its own
modules and the units of lower layers, and the units must form no cycle. Imports deferred into
function bodies may reach up only where `DEFERRED_UPWARD` says why. No module imports another
module's private name (`from openenv.x import _name`), nor a private module (`openenv.x._m`)
from outside the package that holds it.

And a served environment imports no provider: building and stepping an MCP environment's app
loads nothing of `openenv.providers` (whose modules register fork-server exit hooks).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import openenv

SRC = Path(openenv.__file__).resolve().parent

#: Bottom to top. A module belongs to the unit that is the longest prefix of its name ("openenv"
#: is the package's own `__init__` only). The package's private helper modules (`openenv._lazy`
#: and the like) are each a unit of the foundation.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Import no other unit of openenv at module level.
    ("foundation", ("openenv.core.protocol", "openenv.core.errors", "openenv.settings")),
    # OS isolation: bubblewrap, namespaces, cgroups, spawning, limits.
    ("isolation", ("openenv.isolation",)),
    # Untrusted commands in a private workspace (MCP code mode and the agents run on it).
    ("sandbox", ("openenv.sandbox",)),
    # The protocol, the clients, the server stack, the harness, the rubrics.
    ("core", ("openenv.core",)),
    # Starting environments: local processes, sandboxes, containers, clusters.
    ("providers", ("openenv.providers",)),
    ("services", ("openenv.auto", "openenv.fleet", "openenv.models", "openenv.integrations")),
    ("applications", ("openenv", "openenv.cli", "openenv.evals", "openenv.testing")),
)

#: (importing module, imported unit) -> why a function body there imports a higher layer.
DEFERRED_UPWARD: dict[tuple[str, str], str] = {
    ("openenv.core.owner", "openenv.providers"): (
        "EnvClient.from_env / from_docker_image (OpenEnv's API puts these factories on the "
        "client) hand the start of an environment to the providers; core defines the "
        "EnvironmentOwner contract the providers implement"
    ),
    ("openenv.providers.spec", "openenv.auto"): (
        "an environment named by the user ('echo') is found by auto's discovery"
    ),
    ("openenv.providers.launch", "openenv.auto"): (
        "an environment named by the user maps to the image `openenv build` gives it"
    ),
    ("openenv.providers.uv", "openenv.cli"): (
        "the uv provider builds an environment's wheels as `openenv build` does"
    ),
    ("openenv._install", "openenv"): "where the running openenv package is installed",
}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the module imported from (or imported)
    names: tuple[str, ...]  # the names of `from target import ...`; () for `import target`
    line: int
    deferred: bool  # inside a function body
    type_checking: bool  # under `if TYPE_CHECKING:`

    def __str__(self) -> str:
        what = f"from {self.target} import {', '.join(self.names)}" if self.names else self.target
        return f"{self.module}:{self.line}: {what}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Collector(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool) -> None:
        self.module = module
        self.package = module if is_package else module.rpartition(".")[0]
        self.imports: list[Import] = []
        self._functions = 0
        self._type_checking = 0

    def _add(self, target: str, names: tuple[str, ...], line: int) -> None:
        if target == "openenv" or target.startswith("openenv."):
            self.imports.append(
                Import(
                    self.module,
                    target,
                    names,
                    line,
                    self._functions > 0,
                    self._type_checking > 0,
                )
            )

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._functions += 1
        self.generic_visit(node)
        self._functions -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        self._type_checking += 1
        for statement in node.body:
            self.visit(statement)
        self._type_checking -= 1
        for statement in node.orelse:
            self.visit(statement)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, (), node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            base = base[: len(base) - (node.level - 1)]
            target = ".".join([*base, *([node.module] if node.module else [])])
        else:
            target = node.module or ""
        self._add(target, tuple(alias.name for alias in node.names), node.lineno)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _collect() -> tuple[set[str], list[Import]]:
    modules: set[str] = set()
    imports: list[Import] = []
    for path in sorted(SRC.rglob("*.py")):
        name = _module_name(path)
        modules.add(name)
        collector = _Collector(name, path.name == "__init__.py")
        collector.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        imports.extend(collector.imports)
    return modules, imports


MODULES, IMPORTS = _collect()
_LAYER_OF = {unit: index for index, (_, units) in enumerate(LAYERS) for unit in units}
_LAYER_OF.update({m: 0 for m in MODULES if m.count(".") == 1 and _private(m.split(".")[1])})


def _unit(module: str) -> str:
    if module == "openenv":
        return "openenv"
    parts = module.split(".")
    for end in range(len(parts), 1, -1):
        prefix = ".".join(parts[:end])
        if prefix in _LAYER_OF:
            return prefix
    raise AssertionError(f"{module} is in no unit: give its package a place in LAYERS")


def _resolved(imp: Import) -> list[str]:
    """The modules an import loads: `from pkg import submodule` names the submodule."""
    found = [f"{imp.target}.{name}" for name in imp.names if f"{imp.target}.{name}" in MODULES]
    return found or [imp.target]


def _edges(*, deferred: bool) -> list[tuple[Import, str, str]]:
    """(import, importing unit, imported unit) across units."""
    edges = []
    for imp in IMPORTS:
        if imp.type_checking or imp.deferred != deferred:
            continue
        for target in _resolved(imp):
            source_unit, target_unit = _unit(imp.module), _unit(target)
            if source_unit != target_unit:
                edges.append((imp, source_unit, target_unit))
    return edges


def test_the_import_graph_is_read() -> None:
    # The walk sees what it should: a known module-level edge, a deferred one, a TYPE_CHECKING one.
    found = {(imp.module, imp.target, imp.deferred, imp.type_checking) for imp in IMPORTS}
    assert ("openenv.sandbox.sandbox", "openenv.isolation.bubblewrap", False, False) in found
    assert ("openenv.core.owner", "openenv.providers.launch", True, False) in found
    assert ("openenv.core.env_client", "openenv.core.sync_client", False, True) in found
    assert {_unit(module) for module in MODULES} == set(_LAYER_OF)


def test_module_level_imports_point_downward() -> None:
    upward = [
        f"{imp} ({source} is in layer {LAYERS[_LAYER_OF[source]][0]}, {target} in "
        f"{LAYERS[_LAYER_OF[target]][0]})"
        for imp, source, target in _edges(deferred=False)
        if _LAYER_OF[target] > _LAYER_OF[source]
    ]
    assert upward == []


def test_no_import_cycle_between_units() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for _, source, target in _edges(deferred=False):
        graph[source].add(target)
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(unit: str) -> None:
        state[unit] = 1
        path.append(unit)
        for target in sorted(graph[unit]):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[unit] = 2

    for unit in sorted(graph):
        if unit not in state:
            visit(unit)
    assert cycles == []


def test_deferred_imports_reach_up_only_where_listed() -> None:
    unlisted = [
        str(imp)
        for imp, source, target in _edges(deferred=True)
        if _LAYER_OF[target] > _LAYER_OF[source] and (imp.module, target) not in DEFERRED_UPWARD
    ]
    assert unlisted == []


def test_core_imports_no_provider_fleet_or_auto_at_import_time() -> None:
    above = ("openenv.providers", "openenv.fleet", "openenv.auto")
    found = [
        str(imp)
        for imp, source, target in _edges(deferred=False)
        if _LAYER_OF[source] <= _LAYER_OF["openenv.core"] and target.startswith(above)
    ]
    assert found == []


def test_no_module_imports_another_modules_private_names() -> None:
    found = []
    for imp in IMPORTS:
        for name in imp.names:
            if _private(name) and f"{imp.target}.{name}" not in MODULES:
                if imp.target != imp.module:
                    found.append(f"{imp} ({name})")
    assert found == []


def test_private_modules_are_imported_only_inside_their_package() -> None:
    found = []
    for imp in IMPORTS:
        for target in _resolved(imp):
            parts = target.split(".")
            for index, part in enumerate(parts):
                package = ".".join(parts[:index])
                inside = imp.module == package or imp.module.startswith(package + ".")
                if _private(part) and not inside:
                    found.append(f"{imp} ({'.'.join(parts[: index + 1])} is private to {package})")
    assert found == []


def test_the_checks_catch_a_private_import_and_an_upward_import() -> None:
    source = "from openenv.core.llm_client import _x\ndef f():\n    import openenv.fleet\n"
    collector = _Collector("openenv.core.something", False)
    collector.visit(ast.parse(source))
    first, second = collector.imports
    assert (first.target, first.names, first.deferred) == (
        "openenv.core.llm_client",
        ("_x",),
        False,
    )
    assert (second.target, second.deferred) == ("openenv.fleet", True)
    assert _LAYER_OF[_unit(second.target)] > _LAYER_OF[_unit(second.module)]


SERVE_AN_MCP_ENVIRONMENT = """
import atexit, json, sys

registered = []
_register = atexit.register


def register(fn, *args, **kwargs):
    registered.append(getattr(fn, "__module__", "?"))
    return _register(fn, *args, **kwargs)


atexit.register = register

import openenv.core.env_server.mcp_environment
after_import = sorted(m for m in sys.modules if m.startswith("openenv."))

from fastapi.testclient import TestClient
from echo_env.server.app import app

with TestClient(app) as http:
    assert http.get("/health").status_code == 200
    assert http.post("/reset", json={}).status_code == 200
    call = {"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": "hi"}}
    step = http.post("/step", json={"action": call})
    assert step.status_code == 200, step.text
    code = {"type": "execute_code", "code": "result = echo_message(message='in code')"}
    ran = http.post("/step", json={"action": code})
    assert ran.status_code == 200, ran.text
    result = ran.json()["observation"]

print(json.dumps({
    "after_import": after_import,
    "after_serving": sorted(m for m in sys.modules if m.startswith("openenv.")),
    "atexit": registered,
    "code_result": result.get("result"),
    "code_error": result.get("error"),
}))
"""


def test_an_mcp_environment_imports_no_provider_and_registers_no_provider_exit_hook() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SERVE_AN_MCP_ENVIRONMENT],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert "openenv.core.env_server.mcp_environment" in report["after_import"]
    assert (report["code_result"], report["code_error"]) == ("in code", None)
    for when in ("after_import", "after_serving"):
        loaded = [m for m in report[when] if m.startswith(("openenv.providers", "openenv.fleet"))]
        assert loaded == [], when
    assert [m for m in report["atexit"] if m.startswith("openenv.providers")] == []


def test_importing_mcp_environment_alone_loads_no_provider() -> None:
    code = (
        "import openenv.core.env_server.mcp_environment, sys; "
        "assert not any(m.startswith('openenv.providers') for m in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


DOCS_ROOT = SRC.parents[1]


def test_docs_architecture_lists_the_layers_in_order() -> None:
    """docs/architecture.md's layer table is LAYERS: same names, same order."""
    text = (DOCS_ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    documented = [row.split("|")[1].strip() for row in rows[1:]]
    assert documented == [name for name, _ in LAYERS]


def test_the_readme_layout_names_every_package() -> None:
    """README's Layout section names every package and top-level module of src/openenv."""
    readme = (DOCS_ROOT / "README.md").read_text(encoding="utf-8")
    layout = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    names = [
        p.name
        for p in SRC.iterdir()
        if not p.name.startswith("_") and (p / "__init__.py").is_file()
    ] + [p.name for p in SRC.glob("*.py") if not p.name.startswith("_")]
    missing = [name for name in sorted(names) if f"`{name}`" not in layout]
    assert not missing, f"README's Layout does not name {missing}"
