"""The reshard package's modules import each other without a circle, and
none reaches into another's private names.

Every import is read from the source with ast, also those inside
functions (a circle hidden in a function is still a circle). A private
name (`_x`) may only come from a package-internal module (`_lib`,
`_placeholder`, ...), which exists to be shared inside the package."""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "python" / "reshard"


def _modules():
    return {p.stem: ast.parse(p.read_text(), str(p))
            for p in sorted(PKG.glob("*.py"))}


def _package_imports(tree, modules):
    """[(module, name or None, line)]: the package modules a module uses,
    with the name it takes from each (`from .m import x`, `from . import
    m` then `m.x`), at any depth of the file."""
    out, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            for a in node.names:
                if node.module is None and a.name in modules:
                    out.append((a.name, None, node.lineno))
                    aliases[a.asname or a.name] = a.name
                elif node.module in modules:
                    out.append((node.module, a.name, node.lineno))
        elif isinstance(node, ast.ImportFrom) and node.module and \
                node.module.startswith("reshard"):
            mod = node.module.partition(".")[2]
            for a in node.names:
                if not mod and a.name in modules:
                    out.append((a.name, None, node.lineno))
                    aliases[a.asname or a.name] = a.name
                elif mod in modules:
                    out.append((mod, a.name, node.lineno))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and \
                isinstance(node.value, ast.Name) and \
                node.value.id in aliases:
            out.append((aliases[node.value.id], node.attr, node.lineno))
    return out


def _graph():
    modules = _modules()
    return {m: _package_imports(t, modules) for m, t in modules.items()}


def _cycle(edges):
    """One circle of the graph {module: {module it imports}} as a list of
    modules, or None."""
    state = {}

    def visit(m, path):
        state[m] = "open"
        for n in sorted(edges[m]):
            if state.get(n) == "open":
                return path[path.index(n):] + [n]
            if n not in state:
                found = visit(n, path + [n])
                if found:
                    return found
        state[m] = "done"
        return None
    for m in sorted(edges):
        if m not in state:
            found = visit(m, [m])
            if found:
                return found
    return None


def test_no_import_circle():
    graph = _graph()
    edges = {m: {n for n, _, _ in uses if n != m and n != "__init__"}
             for m, uses in graph.items()}
    assert _cycle(edges) is None, \
        f"import circle: {' -> '.join(_cycle(edges))}"


def test_no_private_name_from_a_public_module():
    bad = [f"{m}.py:{line} uses {n}.{name}"
           for m, uses in _graph().items() for n, name, line in uses
           if name and name.startswith("_") and not name.startswith("__")
           and not n.startswith("_") and n != m]
    assert bad == []


def test_the_checks_see_a_planted_circle_and_private_name():
    """The checks themselves: a circle through a function-level import
    and a private name are found in made-up modules."""
    src = {"a": "from . import b\n",
           "b": "def f():\n    from . import a\n    return a._x\n"}
    trees = {m: ast.parse(s) for m, s in src.items()}
    uses = {m: _package_imports(t, trees) for m, t in trees.items()}
    edges = {m: {n for n, _, _ in u} for m, u in uses.items()}
    assert _cycle(edges) == ["a", "b", "a"]
    assert ("a", "_x", 3) in uses["b"]
