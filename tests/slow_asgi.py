"""A slow ASGI layer for the session engine: stands in for an API server starved of CPU.

vLLM loads it with `--middleware tests.slow_asgi.SlowAsgiLayer` (tests/fixtures_vllm.py). A request carrying
`x-slokit-test-delay-ms: N` blocks the API server's event loop for N ms before vLLM's app sees it, as a CPU-starved
API server does (nothing else on that loop runs meanwhile); the engine core, a separate process, is not slowed.
Requests without the header pass straight through, so other tests see the engine as before.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

DELAY_HEADER = "x-slokit-test-delay-ms"
_KEY = DELAY_HEADER.encode("latin-1")
MAX_DELAY_MS = 2000.0  # a bound, so a mistyped header cannot hang the session engine

Scope = MutableMapping[str, Any]
App = Callable[[Scope, Any, Any], Awaitable[None]]


class SlowAsgiLayer:
    """Pure ASGI middleware: block the loop for the requested delay, then pass the request on."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            for key, value in scope.get("headers") or ():
                if bytes(key).lower() == _KEY:
                    time.sleep(min(float(bytes(value).decode("ascii")), MAX_DELAY_MS) / 1000.0)
                    break
        await self.app(scope, receive, send)
