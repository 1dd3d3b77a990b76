"""The package's layering, read from every import statement in the source (lazy imports inside
functions included): data flows one way, model definition -> compiler -> artifact -> runtime
-> server, and no two subpackages import each other, directly or around a longer loop.

Why a test: the layering held by convention only, and a lazy import in the wrong place (the
runtime compiling on first use, a model definition importing kernels) went unnoticed until
someone tried to ship the runtime without the compiler.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from vllm_tvm.compiler.source_digest import PACKAGE_ROOT, imported_modules, module_name

ALLOWED: dict[str, set[str]] = {
    "checkpoints": set(),
    "model_defs": {"checkpoints"},
    "schedules": {"checkpoints"},
    "extensions": set(),
    "artifacts": {"checkpoints"},
    "compiler": {"checkpoints", "model_defs", "schedules", "extensions", "artifacts"},
    "runtime": {"checkpoints", "artifacts", "extensions"},
    "server": {"runtime", "checkpoints", "artifacts"},
    "artifact_registry": {"artifacts", "checkpoints"},
    "entrypoints": {"compiler", "runtime", "checkpoints", "artifacts", "artifact_registry"},
    "benchmarking": {"entrypoints", "artifact_registry", "runtime", "checkpoints", "artifacts"},
    "native_bundle": {"entrypoints", "runtime", "checkpoints", "artifacts"},
    "cli": {
        "entrypoints",
        "benchmarking",
        "native_bundle",
        "server",
        "runtime",
        "compiler",
        "artifacts",
        "checkpoints",
        "model_defs",
        "artifact_registry",
    },
}
"""Which subpackages each one may import. Everything not listed is refused."""

RUNTIME_ROOMS: dict[str, set[str]] = {
    "devices": set(),
    "tvm_runtime": set(),
    "tokenization": set(),
    "structured_output": {"tokenization"},
    "sampling": set(),
    "requests": {"sampling"},
    "weights": {"devices", "tvm_runtime"},
    "kv": {"requests"},
    "model": {"devices", "tvm_runtime", "weights", "kv", "sampling", "requests"},
    "speculative": {"tokenization", "weights", "kv", "sampling", "requests", "model"},
    "engine": {
        "devices",
        "tokenization",
        "weights",
        "kv",
        "sampling",
        "requests",
        "model",
        "speculative",
        "multimodal",
    },
    "multimodal": set(),
}
"""Which rooms of the runtime (its subpackages and top-level modules) each one may import,
bottom up: the shared request and sequence types sit in `requests/`, below the rooms that
move sequences around, so none of them reaches up to the engine."""

SUBPACKAGES = {p.name for p in PACKAGE_ROOT.iterdir() if (p / "__init__.py").exists()}

NEVER_BELOW_COMPILER = {"compiler", "schedules", "model_defs"}
"""What a serving install lacks: the runtime and the server must never reach these."""


def _subpackage(module: str) -> str | None:
    """`vllm_tvm.runtime.engine.scheduler` -> `runtime`; the root package -> None."""
    parts = module.split(".")
    if parts[0] != "vllm_tvm" or len(parts) < 2:
        return None
    return parts[1]


def _package_edges() -> dict[tuple[str, str], list[str]]:
    """(importer subpackage, imported subpackage) -> the import lines that make the edge."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        source = _subpackage(module_name(path))
        if source is None:
            continue
        for target_module in imported_modules(path):
            target = _subpackage(target_module)
            if target in SUBPACKAGES and target != source:
                edges[(source, target)].append(f"{module_name(path)} -> {target_module}")
    return edges


def _runtime_room(module: str) -> str | None:
    """`vllm_tvm.runtime.engine.scheduler` -> `engine`; `vllm_tvm.runtime.devices` ->
    `devices`; outside the runtime (or the runtime package itself) -> None."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["vllm_tvm", "runtime"] and len(parts) > 2 else None


def _runtime_room_edges() -> dict[tuple[str, str], list[str]]:
    """(importer room, imported room) -> the import lines that make the edge."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted((PACKAGE_ROOT / "runtime").rglob("*.py")):
        source = _runtime_room(module_name(path))
        for target_module in imported_modules(path):
            target = _runtime_room(target_module)
            if source is not None and target is not None and target != source:
                edges[(source, target)].append(f"{module_name(path)} -> {target_module}")
    return edges


def test_every_runtime_room_has_a_rule() -> None:
    runtime = PACKAGE_ROOT / "runtime"
    rooms = {p.name for p in runtime.iterdir() if (p / "__init__.py").exists()}
    rooms |= {p.stem for p in runtime.glob("*.py") if p.name != "__init__.py"}
    assert set(RUNTIME_ROOMS) == rooms, "add the new room to RUNTIME_ROOMS with what it may use"


def test_no_two_runtime_rooms_may_import_each_other() -> None:
    """RUNTIME_ROOMS orders the rooms: none may import another that may import it, directly
    or around a longer loop (each room is placed after every room it may import)."""
    placed: list[str] = []
    while len(placed) < len(RUNTIME_ROOMS):
        ready = [
            room
            for room, allowed in RUNTIME_ROOMS.items()
            if room not in placed and allowed <= set(placed)
        ]
        assert ready, (
            f"RUNTIME_ROOMS lets these rooms import each other: {set(RUNTIME_ROOMS) - set(placed)}"
        )
        placed.extend(sorted(ready))


def test_runtime_rooms_import_only_what_their_rule_allows() -> None:
    bad = {
        edge: lines
        for edge, lines in _runtime_room_edges().items()
        if edge[1] not in RUNTIME_ROOMS.get(edge[0], set())
    }
    assert not bad, f"imports between runtime rooms that RUNTIME_ROOMS does not permit: {bad}"


def test_every_subpackage_has_a_rule() -> None:
    assert set(ALLOWED) == SUBPACKAGES, "add the new subpackage to ALLOWED with what it may import"


def test_runtime_and_server_never_reach_the_compiler() -> None:
    bad = {
        edge: lines
        for edge, lines in _package_edges().items()
        if edge[0] in {"runtime", "server"} and edge[1] in NEVER_BELOW_COMPILER
    }
    assert not bad, f"serving code imports compile-time code: {bad}"


def test_imports_follow_the_allowed_layers() -> None:
    bad = {
        edge: lines
        for edge, lines in _package_edges().items()
        if edge[1] not in ALLOWED.get(edge[0], set())
    }
    assert not bad, f"imports across layers that ALLOWED does not permit: {bad}"


def test_subpackages_form_no_cycle() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for source, target in _package_edges():
        graph[source].add(target)
    state: dict[str, str] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for successor in sorted(graph[node]):
            if state.get(successor) == "open":
                loop = [*trail[trail.index(successor) :], successor] if successor in trail else []
                pytest.fail(f"subpackages import each other in a loop: {' -> '.join(loop)}")
            if successor not in state:
                visit(successor, [*trail, successor])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def test_the_reader_sees_lazy_and_relative_imports() -> None:
    """The rules above are only as good as the import reader: it must see an import inside
    a function body and resolve a relative one."""
    module = PACKAGE_ROOT / "runtime" / "engine" / "llm_engine.py"
    imported = imported_modules(module)
    assert any(name.startswith("vllm_tvm.runtime.kv") for name in imported)
    entry = imported_modules(PACKAGE_ROOT / "entrypoints" / "resolve.py")
    assert any(name.startswith("vllm_tvm.compiler") for name in entry), (
        "the lazy compiler import in the entry layer must be visible"
    )
