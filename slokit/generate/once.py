"""Each spec's alerts, rule groups and dashboards are built once per run, however many renderers read them.

The rule file, the PrometheusRule object, the promtool tests, the runbook, the mutation check, the backtest and the
demo all read the same alerts and groups, and the runbook links to the dashboards' panels. Building them is pure
but not free (a spec's promtool tests alone walk every alert several times), so the results are kept per spec
object: keyed by identity, held by a strong reference so an id is never reused while its entry lives, and bounded.
Callers get fresh sequences of the same frozen rules, so nothing they do to a list reaches another reader.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Final, TypeVar

from slokit.spec import Spec

T = TypeVar("T")
KEEP: Final = 16  # specs remembered at once (a run generates a few; tests build many)
_built: OrderedDict[tuple[int, str, Hashable], tuple[Spec, Any]] = OrderedDict()


def once(spec: Spec, what: str, key: Hashable, build: Callable[[], T]) -> T:
    """`build()` the first time (spec, what, key) is asked for; the same result after that."""
    slot = (id(spec), what, key)
    found = _built.get(slot)
    if found is not None and found[0] is spec:
        _built.move_to_end(slot)
        value: T = found[1]
        return value
    value = build()
    _built[slot] = (spec, value)
    while len(_built) > KEEP * 4:
        _built.popitem(last=False)
    return value
