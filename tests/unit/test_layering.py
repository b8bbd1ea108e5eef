"""Imports point down only: every import in zkcoord/ against the map at the top of docs/DESIGN.md.

The map gives each package (or top-level module) of ``zkcoord`` a layer; a
package imports only packages of a lower layer (the base modules of layer 0
only one another), and a package's ``cli.py`` is a front door of the top
layer. Imports inside functions count as much as those at the top: they
bind the same modules. An import that must point up for a while is listed
below, with the issue that removes it; one that goes away must leave the
list, so the list always says what is left (today nothing).
"""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "zkcoord"
DESIGN = ROOT / "docs" / "DESIGN.md"
ROW = re.compile(r"^\| (\d+) \| `([a-z_]+)` \|", re.MULTILINE)

# (importing module, imported package): imports that point up today, each
# with a comment naming the issue that removes it. None is left.
KNOWN_UPWARD: set[tuple[str, str]] = set()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


@functools.cache
def imports_of(module: str) -> frozenset[str]:
    """The zkcoord modules ``module`` imports, anywhere in it (a name
    imported from a package is its submodule if it has one, else the package)."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            targets = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in MODULES else node.module
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            # Importing a module runs its packages' __init__ first: that is no import of them.
            if target.startswith("zkcoord") and target != module and not module.startswith(target + "."):
                found.add(target)
    return frozenset(found)


def package_of(module: str) -> str:
    """The map's name for where ``module`` lives: its package, or the top-level module."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layers() -> dict[str, int]:
    """The map at the top of docs/DESIGN.md: package -> layer."""
    return {name: int(layer) for layer, name in ROW.findall(DESIGN.read_text())}


def layer_of(module: str, layer: dict[str, int]) -> int:
    if module.rpartition(".")[2] == "cli":  # a command's front door
        return max(layer.values())
    return layer[package_of(module)]


def upward_imports() -> set[tuple[str, str]]:
    layer = layers()
    found = set()
    for module in MODULES:
        for target in imports_of(module):
            here, there = package_of(module), package_of(target)
            if here == there:
                continue
            mine, theirs = layer_of(module, layer), layer[there]
            if theirs > mine or (theirs == mine and mine > 0):
                found.add((module, there))
    return found


def test_the_map_names_every_package_once():
    names = ROW.findall(DESIGN.read_text())
    assert len(names) == len({name for _, name in names}), "a package is on the map twice"
    assert {package_of(module) for module in MODULES} == {name for _, name in names}


def test_imports_point_down_but_for_the_known_ones_which_are_all_still_there():
    found = upward_imports()
    assert found - KNOWN_UPWARD == set(), "imports pointing up (docs/DESIGN.md, the map)"
    assert KNOWN_UPWARD - found == set(), "no longer imported: take them off KNOWN_UPWARD"


def test_no_two_modules_import_each_other_by_any_path():
    graph = {module: imports_of(module) for module in MODULES}
    # Tarjan's strongly connected components, without recursion.
    index, low, on_stack, stack, cycles = {}, {}, set(), [], []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    assert cycles == []


def test_the_parser_finds_the_imports_the_checks_judge():
    # The checks above would pass over nothing if the parsing found no imports.
    edges = defaultdict(set)
    for module in MODULES:
        for target in imports_of(module):
            edges[package_of(module)].add(package_of(target))
    assert "zk" in edges["coordinator"] and "errors" in edges["zk"]
    layer = layers()
    assert layer["coordinator"] > layer["zk"] > layer["errors"] == 0
