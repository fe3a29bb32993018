"""The house rules that keep the package walkable: no import circles, docs/ small enough to clone."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
DOCS_LIMIT = 1_000_000  # bytes: docs/ holds the summaries the pages cite, not raw runs


def module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    package = parts[-1] == "__init__"
    if package:
        parts = parts[:-1]
    return ".".join(parts), package


def imports(path: Path, modules: set[str], top_level_only: bool) -> set[str]:
    """The specdecode modules a file imports (a name imported from a package counts as its module
    when it is one)."""
    name, package = module_name(path)
    base = name.split(".") if package else name.split(".")[:-1]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                origin = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            for alias in node.names:
                sub = f"{origin}.{alias.name}"
                found.add(sub if sub in modules else origin)
    return {m for m in found if m in modules and m != name}


def graph(top_level_only: bool) -> dict[str, set[str]]:
    files = sorted(SRC.rglob("*.py"))
    modules = {module_name(f)[0] for f in files}
    return {module_name(f)[0]: imports(f, modules, top_level_only) for f in files}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def without_package_inits(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """A package's __init__ re-exports its children; a child importing a sibling through the package
    is not a circle of logic, so edges into an __init__ are followed to nothing."""
    inits = {f"{module_name(p)[0]}" for p in SRC.rglob("__init__.py")}
    return {m: {d for d in deps if d not in inits} for m, deps in edges.items()}


def test_the_cycle_finder_finds_a_planted_circle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_between_modules():
    # Lazy imports inside functions count too: a circle hidden in a function is still a circle.
    assert cycles(without_package_inits(graph(top_level_only=False))) == []


def test_docs_stay_under_a_megabyte():
    size = sum(p.stat().st_size for p in (ROOT / "docs").rglob("*") if p.is_file())
    assert size <= DOCS_LIMIT, f"docs/ is {size:,} bytes; keep summaries, move raw runs out"
