"""Which way imports run between the project's packages (docs/server.md, "Import directions").

The graph is built from the source with `ast`: every import at any level (module level and
inside functions) counts, except those under `if TYPE_CHECKING:`, which never run."""

from __future__ import annotations

import ast
from pathlib import Path

from app.settings import PROJECT_ROOT

ROOT = PROJECT_ROOT
PACKAGES = ("app", "harness", "question_bank", "lessons")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every module `module` imports when it runs (any depth, TYPE_CHECKING blocks left out)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join([*base, node.module] if node.module else base)
            else:
                prefix = node.module or ""
            found.add(prefix)
            found.update(f"{prefix}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph(packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """module -> the project modules it imports (names that are not modules, like a class
    imported with `from x import Y`, are dropped; importing a.b.c also runs a and a.b)."""
    files = {(_module_name(p)): p for pkg in packages for p in (ROOT / pkg).rglob("*.py")
             if "migrations" not in p.parts}
    known = set(files) | {_module_name(p) for p in ROOT.joinpath("kernels").rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        targets = set()
        for imported in _imports(tree, name, path.name == "__init__.py"):
            if imported in known and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each as a cycle's
    members, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = [0]

    def connect(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return components


def _cycle_path(graph: dict[str, set[str]], members: list[str]) -> str:
    """One concrete circle through the component, for the failure message."""
    inside = set(members)
    start = members[0]
    path, seen = [start], {start}
    node = start
    while True:
        nxt = sorted(w for w in graph[node] if w in inside)
        back = [w for w in nxt if w == start]
        if back and len(path) > 1:
            return " -> ".join([*path, start])
        fresh = [w for w in nxt if w not in seen]
        if not fresh:
            return " -> ".join([*path, nxt[0]]) if nxt else " -> ".join(path)
        node = fresh[0]
        path.append(node)
        seen.add(node)


def test_the_graph_sees_imports_inside_functions_and_skips_type_checking() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from app.engine.runner.session_runner import SessionRunner\n"
        "def f():\n    from app.domain.sessions import get_session\n    import harness.report\n"
        "from . import runner_state\n"
    )
    found = _imports(ast.parse(source), "app.engine.pipeline", is_package=False)
    assert "app.domain.sessions" in found and "harness.report" in found and "app.engine.runner_state" in found
    assert "app.engine.runner.session_runner" not in found
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle_in_app_harness_or_question_bank() -> None:
    graph = import_graph()
    assert len(graph) > 80  # the walk found the packages
    cycles = find_cycles(graph)
    assert not cycles, "import circles:\n" + "\n".join(_cycle_path(graph, c) for c in cycles)


# app/'s layers, bottom to top (docs/server.md, "Layers"), and inside each layer its units (a
# sub-package or a module), bottom to top. A module imports only from its own unit, from units
# listed before its own in its layer, and from lower layers. A new module or folder must be placed here.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("settings", ()),  # app/settings.py: the one settings object
    ("store", ("input_limits", "models", "trace_models", "campaign_models", "database", "migrations", "events")),
    ("domain", ("kernel_names", "lifecycle", "profiles", "steering", "schemas", "sessions", "progress", "bank_actions",
                "forks", "verdicts", "audit", "campaigns", "lessons", "lesson_actions")),
    ("services", ("devices", "evaluation", "distiller", "context")),
    ("engine", ("agents", "runner_state", "tools", "pipeline", "new_session", "fork", "campaigns", "runner",
                "engine")),
    ("faces", ("guesses", "mcp", "web", "commands")),
    ("__main__", ()),  # `python -m app`
)


def place(module: str) -> tuple[int, int]:
    """(layer, unit) of an app module; the package of a layer itself is unit -1."""
    parts = module.split(".")
    names = [name for name, _ in LAYERS]
    if len(parts) < 2 or parts[1] not in names:
        raise LookupError(f"{module} is in no layer of app/: place it in tests/app/test_import_graph.py's LAYERS")
    layer = names.index(parts[1])
    units = LAYERS[layer][1]
    if len(parts) == 2:
        return layer, -1
    if parts[2] not in units:
        raise LookupError(f"{module} is in no unit of app/{parts[1]}/: add it to LAYERS")
    return layer, units.index(parts[2])


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, targets in graph.items():
        if not module.startswith("app.") and module != "app":
            continue
        for target in targets:
            if not target.startswith("app.") or module == "app":
                continue
            (layer, unit), (t_layer, t_unit) = place(module), place(target)
            if t_layer > layer or (t_layer == layer and unit != -1 and t_unit > unit):
                wrong.append(f"{module} imports {target}")
    return sorted(wrong)


def test_app_folders_are_layers_and_imports_run_only_downward() -> None:
    graph = import_graph()
    app_folders = sorted(p.name for p in (ROOT / "app").iterdir() if p.is_dir() and p.name != "__pycache__")
    assert app_folders == sorted(name for name, units in LAYERS if units), "app/'s folders are its layers"
    wrong = upward_imports(graph)
    assert not wrong, "imports running back up app/'s layers (LAYERS above):\n" + "\n".join(wrong)


def test_an_upward_import_is_caught() -> None:
    fake = {"app.domain.sessions": {"app.engine.pipeline"}, "app.engine.tools.base": {"app.engine.pipeline"},
            "app.engine.pipeline": {"app.domain.sessions", "app.engine.tools.base"}}
    assert upward_imports(fake) == ["app.domain.sessions imports app.engine.pipeline",
                                    "app.engine.tools.base imports app.engine.pipeline"]


def test_lower_packages_never_import_app() -> None:
    graph = import_graph()
    wrong = sorted(f"{m} imports {t}" for m, targets in graph.items() for t in targets
                   if (m.startswith("harness") and t.split(".")[0] in ("app", "kernels", "question_bank"))
                   or (m.startswith("question_bank") and t.split(".")[0] in ("app", "lessons"))
                   or (m.startswith("lessons") and t.split(".")[0] == "app"))
    assert not wrong, "\n".join(wrong)


def test_docs_server_md_names_every_module_of_app() -> None:
    text = (ROOT / "docs" / "server.md").read_text()
    table = text[text.index("| module | role |"):text.index("### Import directions")]
    missing = []
    for path in sorted((ROOT / "app").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if path.name in ("__init__.py", "__main__.py") or "/versions/" in rel:
            continue
        folder = rel.rsplit("/", 1)[0] + "/"
        if f"`{rel}`" not in table and not (f"`{path.name}`" in table and folder in table):
            missing.append(rel)
    assert not missing, f"add these modules to docs/server.md's module table: {missing}"
