"""What a spec reads from Prometheus, and the "no data" answer when none of it is there.

`slokit report` and `slokit backtest` read the spec's raw series through the selectors `slokit.generate.queries`
builds (the spec's `selector:` scope, the source's metric names, the model label over the spec's models). A wrong
URL or a wrong selector does not fail a query: it returns nothing, and every figure would read "no traffic" or
"0 pages/week". Both commands check what they found against this list, and stop with `NoDataError` (exit 3,
`EXIT_NO_DATA`) when none of it exists, naming every selector looked for and where.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from slokit.generate.queries import Queries
from slokit.spec import Spec

SHOWN: Final = 12  # selectors listed in a message before "and N more"


class NoDataError(Exception):
    """None of the series the spec reads exists where it was looked for (exit 3)."""


@dataclass(frozen=True)
class Read:
    """One raw selector the spec reads, what it is for, and the models it covers."""

    what: str
    selector: str
    models: tuple[str, ...]


def spec_reads(spec: Spec) -> list[Read]:
    """Every raw selector the spec's rules and report read: latency histograms per class and SLI, engine series."""
    queries = Queries(spec)
    out: dict[str, Read] = {}
    for rc in spec.classes:
        for sli in rc.slos:
            for term in queries.histogram_terms(rc, sli, "_bucket"):
                out.setdefault(term.selector, Read(f"{rc.name} {sli.value} histogram", term.selector, term.models))
    m = spec.metrics
    models = [model.name for model in spec.models if spec.classes_on(model.name)]
    engine = (m.requests_running, m.requests_waiting, m.kv_cache_usage, m.generation_tokens, m.requests_finished)
    for metric in (name for name in engine if name is not None):
        for term in queries.raw_terms(metric, models):
            out.setdefault(term.selector, Read("engine series", term.selector, term.models))
    return list(out.values())


def _listed(reads: Sequence[Read]) -> str:
    shown = [f"{r.selector} ({r.what})" for r in reads[:SHOWN]]
    more = f"; and {len(reads) - SHOWN} more" if len(reads) > SHOWN else ""
    return "; ".join(shown) + more


def no_data(spec: Spec, reads: Sequence[Read], where: str, period: str) -> NoDataError:
    """The error for none of `reads` found at `where` over `period`."""
    scope = ", ".join(f'{k}="{v}"' for k, v in spec.selector.items())
    return NoDataError(
        f"no data: none of the {len(reads)} series selectors spec {spec.path or spec.service} reads has a sample at "
        f"{where} {period}. Looked for: {_listed(reads)}. Check the URL (or file), the spec's `source:` "
        f"({spec.source.name}) and its `selector:` ({scope or 'none'}), and the models' names"
    )


def missing_warnings(reads: Iterable[Read], found: set[str], where: str) -> list[str]:
    """One warning per selector with no series when some others have them (a model or class not scraped)."""
    return [
        f"no series at {where} match {r.selector} ({r.what} of {', '.join(r.models)}): its figures read as no traffic"
        for r in reads
        if r.selector not in found
    ]
