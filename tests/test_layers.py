"""The layering of domainpar (docs/design.md, "Layers"), read from the source with ``ast``.

Every module of the package is parsed and every import it can run is
collected: top-level imports, imports inside functions and classes, and the
module names the lazy tables give to ``importlib`` as strings (``cli.main``,
``train``, ``inference``). The checks:

* no import cycle between modules (a loop hidden inside a function is a loop);
* no import that runs back up the layers: a module imports its own layer and
  the layers below;
* ``domainpar/model`` never reaches ``torch.distributed``, not even through the
  modules it imports, so the same model runs on one process;
* one seam turns a part into what a rank runs: only ``domainpar/parallel``
  (and ``comm`` itself) imports the halo exchange.

The last tests inject a loop, a back-import and a ``torch.distributed`` into a
copy of the package and see each check fail.
"""

from __future__ import annotations

import ast
import shutil
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pytest

import domainpar

PACKAGE = "domainpar"
SOURCE_ROOT = Path(domainpar.__file__).resolve().parent.parent

#: The layers, top first: a module may import modules of its own layer and of the layers below it.
#: Names are the top-level modules and packages of domainpar. ``sim`` sits above ``data`` (nothing in data
#: depends on the simulator); ``launch`` starts the ranks that train, inference and verification run, and
#: sits above the seam and the communication it sets up.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__main__", "cli"),
    ("pipeline",),
    ("train", "inference", "export", "verification"),
    ("launch",),
    ("parallel",),
    ("model", "comm"),
    ("partition", "tracks", "filter"),
    ("sim",),
    ("data",),
    ("kernels", "arrays", "optim", "heap", "workers", "progress", "parsing", "errors", "atomic", "signals", "npzfile", "output_paths", "domains", "caches", "__init__"),
)
LAYER_OF = {name: depth for depth, names in enumerate(LAYERS) for name in names}
NO_DISTRIBUTED = ("model",)
#: Modules that only the seam (and their own package) may import: a rank's exchange is built in one place.
SEAM_ONLY = {"domainpar.comm.halo": ("parallel", "comm")}


@dataclass(frozen=True)
class Import:
    """One import a module can run."""

    target: str
    """The imported module (``domainpar.x.y``, or an outside module such as ``torch.distributed``)."""
    line: int
    """Where, in the importing module's file."""


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules(root: Path) -> dict[str, Path]:
    """Every module of the package under ``root`` (the directory that holds ``domainpar/``)."""
    return {module_name(p, root): p for p in sorted((root / PACKAGE).rglob("*.py"))}


def _imports_in(tree: ast.Module, name: str, is_package: bool, modules: dict[str, Path]) -> list[Import]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module
            for alias in node.names:
                # ``from a import b`` imports the module a.b when there is one, else a name of a.
                candidate = f"{prefix}.{alias.name}"
                found.append(Import(candidate if candidate in modules else prefix, node.lineno))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in modules:
            found.append(Import(node.value, node.lineno))  # a module imported by name (importlib)
        elif isinstance(node, ast.Attribute) and node.attr == "distributed":
            if isinstance(node.value, ast.Name) and node.value.id == "torch":
                found.append(Import("torch.distributed", node.lineno))  # used without an import of its own
    return found


@lru_cache(maxsize=4)
def import_graph(root: Path) -> tuple[dict[str, Path], dict[str, list[Import]]]:
    """The package's modules, and every import each of them can run (read once per source tree)."""
    modules = package_modules(root)
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        graph[name] = _imports_in(tree, name, path.name == "__init__.py", modules)
    return modules, graph


def _owner(target: str, modules: dict[str, Path]) -> str | None:
    """The package module an imported name belongs to (``domainpar.a.b.c`` -> the module ``domainpar.a.b``)."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def internal_edges(modules, graph) -> dict[str, dict[str, int]]:
    """module -> {imported package module: first line importing it}."""
    edges: dict[str, dict[str, int]] = {}
    for name, imports in graph.items():
        for imp in imports:
            if imp.target == PACKAGE or imp.target.startswith(PACKAGE + "."):
                target = _owner(imp.target, modules)
                if target is not None and target != name:
                    lines = edges.setdefault(name, {})
                    lines[target] = min(lines.get(target, imp.line), imp.line)
    return edges


def top_level(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, {}))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, {})))))
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
                    found.append(sorted(component))
    return found


def _where(module: str, modules: dict[str, Path], line: int, root: Path) -> str:
    return f"{modules[module].relative_to(root)}:{line}"


def loop_problems(root: Path) -> list[str]:
    modules, graph = import_graph(root)
    edges = internal_edges(modules, graph)
    problems = []
    for component in cycles(edges):
        members = set(component)
        links = [
            f"{_where(a, modules, line, root)} imports {b}"
            for a in component
            for b, line in sorted(edges.get(a, {}).items())
            if b in members
        ]
        problems.append(f"import loop between {', '.join(component)}: " + "; ".join(links))
    return problems


def layer_problems(root: Path) -> list[str]:
    modules, graph = import_graph(root)
    unplaced = sorted({top_level(m) for m in modules} - set(LAYER_OF))
    problems = [f"{PACKAGE}.{name}: not in any layer of LAYERS" for name in unplaced]
    for name, targets in sorted(internal_edges(modules, graph).items()):
        own = top_level(name)
        for target, line in sorted(targets.items()):
            other = top_level(target)
            if own in LAYER_OF and other in LAYER_OF and LAYER_OF[other] < LAYER_OF[own]:
                problems.append(f"{_where(name, modules, line, root)} imports {target}: {other} is above {own}")
    return problems


def distributed_problems(root: Path) -> list[str]:
    """Modules of NO_DISTRIBUTED packages that reach torch.distributed, directly or through package modules."""
    modules, graph = import_graph(root)
    edges = internal_edges(modules, graph)
    problems = []
    for start in sorted(m for m in modules if top_level(m) in NO_DISTRIBUTED):
        path, seen, todo = {start: [start]}, {start}, [start]
        while todo:
            name = todo.pop()
            for imp in graph[name]:
                if imp.target == "torch.distributed" or imp.target.startswith("torch.distributed."):
                    chain = " -> ".join(path[name])
                    where = _where(name, modules, imp.line, root)
                    problems.append(f"{start} reaches torch.distributed: {chain} ({where})")
                    todo.clear()
                    break
            else:
                for target in sorted(edges.get(name, {})):
                    if target not in seen:
                        seen.add(target)
                        path[target] = path[name] + [target]
                        todo.append(target)
    return problems


def seam_problems(root: Path) -> list[str]:
    modules, graph = import_graph(root)
    problems = []
    for name, targets in sorted(internal_edges(modules, graph).items()):
        for target, line in sorted(targets.items()):
            if target in SEAM_ONLY and top_level(name) not in SEAM_ONLY[target]:
                allowed = "/".join(SEAM_ONLY[target])
                problems.append(f"{_where(name, modules, line, root)} imports {target}: only {allowed} may")
    return problems


def test_every_module_is_parsed():
    modules, graph = import_graph(SOURCE_ROOT)
    assert {"domainpar.sim.event", "domainpar.launch.ranks", "domainpar.data.graph_files"} <= set(modules)
    # Imports inside functions count: cli.main loads the commands lazily, by name.
    assert "domainpar.cli.train" in internal_edges(modules, graph)["domainpar.cli.main"]


def test_no_import_loops():
    assert loop_problems(SOURCE_ROOT) == []


def test_no_import_runs_back_up_the_layers():
    assert layer_problems(SOURCE_ROOT) == []


def test_model_never_reaches_torch_distributed():
    assert distributed_problems(SOURCE_ROOT) == []


def test_only_the_seam_builds_a_ranks_exchange():
    assert seam_problems(SOURCE_ROOT) == []


# --- the checks can fail --------------------------------------------------------------------------


@pytest.fixture
def package_copy(tmp_path) -> Path:
    shutil.copytree(SOURCE_ROOT / PACKAGE, tmp_path / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _append(root: Path, relative: str, text: str) -> None:
    path = root / PACKAGE / relative
    path.write_text(path.read_text() + text)


def _function(name: str, module: str, attr: str) -> str:
    """A function that imports ``module`` inside its body, as the hidden loops did."""
    return f"\n\ndef {name}():\n    from {module} import {attr}\n\n    return {attr}\n"


def test_a_loop_hidden_in_a_function_is_found(package_copy):
    # event_graph <-> pyg_files, the loop that data had before graph_files routed between the formats.
    _append(package_copy, "data/event_graph.py", _function("_pyg", "domainpar.data.pyg_files", "is_pyg_file"))
    problems = loop_problems(package_copy)
    assert len(problems) == 1
    assert problems[0].startswith("import loop between domainpar.data.event_graph, domainpar.data.pyg_files: ")
    assert "domainpar/data/event_graph.py:" in problems[0] and "imports domainpar.data.pyg_files" in problems[0]


def test_an_import_back_up_is_found(package_copy):
    _append(package_copy, "data/trackml.py", _function("_simulated", "domainpar.sim.config", "SimulationConfig"))
    problems = layer_problems(package_copy)
    assert len(problems) == 1 and "domainpar/data/trackml.py:" in problems[0]
    assert problems[0].endswith("imports domainpar.sim.config: sim is above data")


def test_a_package_outside_the_layers_is_named(package_copy):
    (package_copy / PACKAGE / "extras").mkdir()
    (package_copy / PACKAGE / "extras" / "__init__.py").write_text("")
    assert layer_problems(package_copy) == ["domainpar.extras: not in any layer of LAYERS"]


@pytest.mark.parametrize(
    "relative, text",
    [
        ("model/loss.py", "\nimport torch.distributed as dist\n"),
        ("model/lean.py", "\n\ndef _world():\n    return torch.distributed.get_world_size()\n"),
        # Through another module: the kernels the model uses.
        ("kernels/rownorm.py", "\n\ndef _sum(t):\n    from torch.distributed import all_reduce\n\n    all_reduce(t)\n"),
    ],
)
def test_torch_distributed_in_the_model_is_found(package_copy, relative, text):
    _append(package_copy, relative, text)
    problems = distributed_problems(package_copy)
    assert problems and all("reaches torch.distributed" in p for p in problems)
    assert all(relative in p for p in problems)


def test_an_exchange_built_outside_the_seam_is_found(package_copy):
    _append(package_copy, "train/step.py", _function("_exchange", "domainpar.comm.halo", "HaloExchange"))
    problems = seam_problems(package_copy)
    assert len(problems) == 1 and problems[0].startswith("domainpar/train/step.py:")
    assert problems[0].endswith("imports domainpar.comm.halo: only parallel/comm may")
