"""The shape of the source tree, read with `ast` (nothing is imported): no import cycle between the
project's modules, and a command line that holds no measurement or engine code."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "specscale_cli", "presets")
# what measuring and running models is made of; the command line reaches them only through core
MEASUREMENT_IMPORTS = ("torch", "transformers", "numpy", "core.engine")
# (module, function) allowed one of them: a device check that asks torch whether CUDA is there
MEASUREMENT_ALLOWED = {("specscale_cli.options", "check_device")}


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package's ``__init__``) of every module under :data:`PACKAGES`."""
    found = {}
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _imports(name: str, path: Path, is_package: bool, modules) -> list[tuple[str, str | None, int]]:
    """``(imported module, enclosing top-level function or None, line)`` of every import in the
    file, at module level or inside any function, relative imports resolved against the module's
    package. ``from X import y`` imports ``X.y`` when that is a module of ``modules``, else ``X``."""
    package = name if is_package else name.rpartition(".")[0]
    found = []

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, child.name if function is None else function)
                continue
            if isinstance(child, ast.Import):
                found.extend((alias.name, function, child.lineno) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                target = child.module
                if child.level:
                    parts = package.split(".")
                    base = parts[:len(parts) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                for alias in child.names:
                    sub = f"{target}.{alias.name}"
                    found.append((sub if sub in modules else target, function, child.lineno))
            visit(child, function)

    visit(ast.parse(path.read_text(encoding="utf-8")), None)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports, at module level or in a function. Importing
    ``a.b.c`` runs the ``__init__`` of ``a`` and ``a.b`` first, as every import of a submodule
    does; that is not counted as an import of those packages (only naming them is)."""
    modules = _modules()
    return {name: {target for target, _, _ in _imports(name, path, is_package, modules)
                   if target in modules and target != name}
            for name, (path, is_package) in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or None when the graph has none (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_graph_sees_function_level_and_relative_imports():
    graph = import_graph()
    # main registers the bench group inside a function; a backend imports the plan relatively
    assert "specscale_cli.bench" in graph["specscale_cli.main"]
    assert "core.engine.backends.plan" in graph["core.engine.backends.torch_backend"]
    # `from .backends import AttentionPlan` is an import of the package itself
    assert "core.engine.backends" in graph["core.engine.model_runner"]
    # inside a function, absolute
    assert "core.solver" in graph["specscale_cli.bench_args"]
    assert len(graph) > 90


def test_find_cycle_names_the_modules_of_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"x": {"x"}}) == ["x", "x"]


def test_no_import_cycle_in_the_tree():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_command_line_imports_no_torch_transformers_or_engine():
    """specscale_cli parses flags, calls core and prints: what measures or runs a model (torch,
    transformers, numpy, core.engine) is imported in core only, at any level."""
    found = []
    modules = _modules()
    for name, (path, is_package) in modules.items():
        if not name.startswith("specscale_cli"):
            continue
        for target, function, line in _imports(name, path, is_package, modules):
            if any(target == m or target.startswith(m + ".") for m in MEASUREMENT_IMPORTS) \
                    and (name, function) not in MEASUREMENT_ALLOWED:
                found.append(f"{path.relative_to(ROOT)}:{line} ({function or 'module level'}) imports {target}")
    assert not found, "\n".join(dict.fromkeys(found))


# The solve path: the code that carries one run from `solve`'s flags to its exit code, through the
# run plan (specscale_cli/run_plan.py). Left out, because solve calls them with values already taken
# from the plan and they have callers and tests of their own: the readers of problem files and
# datasets (core/io/problems.py, core/io/dataset_source.py), the search and engine (core/search,
# core/engine: SearchDriver takes the runtime's parts and the run's callbacks), the replica pool
# (core/distributed), the display (specscale_cli/dashboard.py, core/metrics.py) and the thread
# governor (core/cpu_load.py).
SOLVE_PATH = ("specscale_cli/solve.py", "specscale_cli/run_plan.py", "specscale_cli/inputs.py",
              "specscale_cli/run_dir.py", "specscale_cli/options.py", "specscale_cli/signals.py",
              "core/solver.py", "core/io/output_folder.py", "core/io/resume.py", "core/io/writers.py")
MAX_PARAMETERS = 6


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """Positional (incl. positional-only) and keyword-only parameters, and ``*args``/``**kwargs``
    as one each, without ``self``/``cls``."""
    a = fn.args
    names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
    if a.vararg is not None:
        names.append(f"*{a.vararg.arg}")
    if a.kwarg is not None:
        names.append(f"**{a.kwarg.arg}")
    return [n for n in names if n not in ("self", "cls")]


def test_no_function_in_the_solve_path_takes_more_than_six_parameters():
    """What a run is reads in one place, the :class:`specscale_cli.run_plan.RunPlan`: the functions
    of :data:`SOLVE_PATH` (module level, methods and nested functions alike) take the plan and the
    live objects (signals, cleanup, progress), not loose values. `solve` itself takes its flags as
    one ``**flags`` (one keyword per click option above it) and turns them into the plan at once."""
    wide = []
    for rel in SOLVE_PATH:
        path = ROOT / rel
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                params = _parameters(node)
                if len(params) > MAX_PARAMETERS:
                    wide.append(f"{rel}:{node.lineno} {node.name}({', '.join(params)})")
    assert not wide, f"more than {MAX_PARAMETERS} parameters:\n" + "\n".join(wide)
