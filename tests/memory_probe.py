"""What slokit's exporter holds inside the vLLM API server, read over HTTP: for the soak smoke test and bench/soak.py.

vLLM loads it with `--middleware tests.memory_probe.MemoryProbe` (tests/fixtures_vllm.py, bench/soak.py). Requests
to `/slokit-test/memory?action=...` are answered here, in the API server process where the exporter lives; every
other request passes straight through, so the engine serves as before.

* `action=start`: start tracemalloc (one frame per allocation) if it is not running. Only allocations made from
  then on are traced, so growth is what the figures show.
* `action=sample` (the default): a JSON object with
  - `slokit_traced_bytes`/`slokit_traced_blocks`: live memory allocated by a line of slokit's own package (the
    innermost Python frame is in slokit/), from a tracemalloc snapshot; `top`: the largest such lines;
  - `traced_bytes`: all live traced memory of the process (vLLM, FastAPI, slokit: the whole Python heap since start);
  - `graph_objects`/`graph_refs`/`graph_bytes`: the objects reachable from slokit's modules (their globals, the
    exporter's attributes), walking through containers and slokit's own objects and counting what they point at
    (vLLM's objects are counted, not entered), and the references those hold, so a list that keeps every request
    shows up whatever its items are;
  - `tracked`: the exporter's live per-request bookkeeping (admitted without a first token, decoding, by id);
  - `collector_series`: label sets the exporter's collector exposes; `rss_kib`: this process's resident memory;
  - `frontend_requests_alive`: slokit's per-HTTP-request objects still alive anywhere in the process (the probe's
    own request is one). A finished request's object outlives it while something else holds the context it ran
    in: uvicorn's keep-alive timer handle (5 s) copies the request task's context, which carries the object. Such
    objects are allocated by slokit's lines but held by the server, so a reading taken while they linger is not
    comparable with one taken after they are gone.
  Every figure is absent or zero where slokit's plugin is not loaded (vLLM alone).
* `action=stop`: stop tracemalloc.

A sample runs `gc.collect()` and a snapshot on the event loop (tens to hundreds of milliseconds); its own duration
is in the answer (`seconds`). The walk is bounded (MAX_OBJECTS) and says when it stopped early.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
import time
import tracemalloc
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from types import CellType, FunctionType, ModuleType
from typing import Any
from urllib.parse import parse_qs

PATH = "/slokit-test/memory"
MAX_OBJECTS = 2_000_000  # bound on the object walk
TOP_LINES = 8

Scope = MutableMapping[str, Any]
App = Callable[[Scope, Any, Any], Awaitable[None]]
_CONTAINERS = (dict, list, tuple, set, frozenset, deque)
_NUMBERS = (int, float, complex)


def _is_slokit(obj: object) -> bool:
    module = getattr(type(obj), "__module__", "") or ""
    return module == "slokit" or module.startswith("slokit.")


def _walk() -> dict[str, Any]:
    """Objects reachable from slokit's modules, entering only containers, slokit's objects and slokit's functions.

    `graph_objects` counts distinct objects other than numbers (a histogram cell's float is replaced at every
    observation, and cells start out sharing one 0.0, so their identities say nothing); `graph_refs` counts the
    references held by the containers and objects entered, so a list that keeps every request grows it by one per
    request whatever the items are.
    """
    roots: list[object] = []
    for name, module in list(sys.modules.items()):
        if (name == "slokit" or name.startswith("slokit.")) and isinstance(module, ModuleType):
            roots.extend(v for k, v in vars(module).items() if not k.startswith("__"))
    seen: set[int] = set()
    stack = list(roots)
    objects = refs = total_bytes = 0
    truncated = False
    while stack:
        obj = stack.pop()
        if isinstance(obj, _NUMBERS) or obj is None:
            continue
        if id(obj) in seen:
            continue
        if len(seen) >= MAX_OBJECTS:
            truncated = True
            break
        seen.add(id(obj))
        if isinstance(obj, ModuleType | type):
            if isinstance(obj, type) and (obj.__module__ or "").startswith("slokit"):
                stack.extend(v for k, v in vars(obj).items() if not k.startswith("__"))  # class-level state
            continue  # other modules and classes are vLLM's, Python's: not slokit's state
        objects += 1
        with contextlib.suppress(TypeError):
            total_bytes += sys.getsizeof(obj)
        inner: list[object] = []
        if isinstance(obj, FunctionType):
            if (obj.__module__ or "").startswith("slokit"):
                inner.extend(c.cell_contents for c in obj.__closure__ or () if _cell_set(c))
                inner.extend(obj.__defaults__ or ())
                inner.extend((obj.__kwdefaults__ or {}).values())
        elif isinstance(obj, _CONTAINERS) or _is_slokit(obj):
            inner.extend(r for r in gc.get_referents(obj) if not isinstance(r, ModuleType | type))
        refs += len(inner)
        stack.extend(inner)
    return {"graph_objects": objects, "graph_refs": refs, "graph_bytes": total_bytes, "graph_truncated": truncated}


def _cell_set(cell: CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _exporter_state() -> dict[str, Any]:
    module = sys.modules.get("slokit.exporters.vllm")
    active = getattr(module, "_ACTIVE", None)
    if active is None:
        return {"plugin": False}
    engines = list(active._engines.values())
    tracked = {
        "pending": len(active._pending),
        "decoding": sum(len(e.decoding) for e in engines),
        "by_external": sum(len(v) for v in list(active._by_external.values())),
    }
    series = sum(len(f.children) for f in active.store.families)
    request_type = getattr(sys.modules.get("slokit.exporters.classes"), "FrontendRequest", None)
    alive = sum(1 for o in gc.get_objects() if type(o) is request_type) if request_type is not None else 0
    return {"plugin": True, "tracked": tracked, "collector_series": series, "frontend_requests_alive": alive}


def _slokit_traced() -> dict[str, Any]:
    if not tracemalloc.is_tracing():
        return {"tracing": False}
    snapshot = tracemalloc.take_snapshot()
    package = sys.modules.get("slokit")
    out: dict[str, Any] = {"tracing": True, "traced_bytes": tracemalloc.get_traced_memory()[0]}
    if package is None or not getattr(package, "__file__", None):
        return {**out, "slokit_traced_bytes": 0, "slokit_traced_blocks": 0, "top": []}
    root = str(Path(package.__file__ or "").resolve().parent)
    mine = snapshot.filter_traces([tracemalloc.Filter(True, os.path.join(root, "*"))])
    stats = mine.statistics("lineno")
    return {
        **out,
        "slokit_traced_bytes": sum(s.size for s in stats),
        "slokit_traced_blocks": sum(s.count for s in stats),
        "top": [
            f"{Path(s.traceback[0].filename).relative_to(root)}:{s.traceback[0].lineno} {s.size} B in {s.count}"
            for s in stats[:TOP_LINES]
        ],
    }


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def sample() -> dict[str, Any]:
    """Everything `action=sample` answers (also callable in-process)."""
    started = time.perf_counter()
    gc.collect()
    out: dict[str, Any] = {**_exporter_state(), **_slokit_traced(), **_walk(), "rss_kib": _rss_kib()}
    out["seconds"] = round(time.perf_counter() - started, 4)
    return out


class MemoryProbe:
    """Pure ASGI middleware: answer `/slokit-test/memory`, pass everything else on."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or scope.get("path") != PATH:
            await self.app(scope, receive, send)
            return
        query = parse_qs(bytes(scope.get("query_string") or b"").decode("latin-1"))
        action = (query.get("action") or ["sample"])[0]
        status = 200
        if action == "start":
            if not tracemalloc.is_tracing():
                tracemalloc.start(1)
            body: dict[str, Any] = {"tracing": True}
        elif action == "stop":
            tracemalloc.stop()
            body = {"tracing": False}
        elif action == "sample":
            body = sample()
        else:
            status, body = 400, {"error": f"unknown action {action!r}"}
        data = json.dumps(body).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})
