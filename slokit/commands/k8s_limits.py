"""Size limits Kubernetes puts on what `slokit generate` writes, checked at `validate` and `generate` time.

The spec as written travels in a ConfigMap (`exporters/<service>-configmap.yaml`, for slokit's exporter inside
vLLM). The API server refuses a ConfigMap whose values add up to more than 1 MiB, so a spec with a 20 MB
`description` validated, generated, and then failed at `kubectl apply`, far from the field that caused it. Here it
is refused where it is written, naming the largest value in the file. Between 256 KiB and 1 MiB the object is
valid, but client-side `kubectl apply` copies it into its last-applied annotation, which may hold 256 KiB: a warning.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

import yaml

from slokit.spec import Spec, SpecError, SpecIssue, format_path
from slokit.yamlloc import Location

# Kubernetes validation (pkg/apis/core/validation, ValidateConfigMap): the values of `data` and `binaryData`
# together at most core.MaxSecretSize bytes.
CONFIGMAP_MAX_BYTES: Final = 1024 * 1024
# apimachinery TotalAnnotationSizeLimitB: what `kubectl apply`'s last-applied-configuration annotation may hold.
ANNOTATIONS_MAX_BYTES: Final = 256 * 1024


def _configmaps(spec: Spec) -> list[tuple[str, int]]:
    """(file, data bytes) of every ConfigMap `slokit generate` writes for `spec`, as the API server counts them."""
    from slokit.generate import k8s  # pure and light: no grafanalib or jinja2

    found = []
    for relative, obj in k8s.files(spec).items():
        if isinstance(obj, Mapping) and obj.get("kind") == "ConfigMap":
            values = [*(obj.get("data") or {}).values(), *(obj.get("binaryData") or {}).values()]
            found.append((relative, sum(len(str(v).encode("utf-8")) for v in values)))
    return found


def _largest_value(spec: Spec) -> tuple[str, Location, int]:
    """The dotted field, location and size in bytes of the longest scalar in the spec's text: what to shorten."""
    best: tuple[str, Location, int] = ("", Location(spec.path, 1, 1), 0)
    try:
        root = yaml.compose(spec.text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # C: 40x on 20 MB
    except yaml.YAMLError:
        return best
    stack: list[tuple[yaml.Node, tuple[str | int, ...]]] = [(root, ())] if root is not None else []
    while stack:
        node, path = stack.pop()
        if isinstance(node, yaml.MappingNode):
            stack.extend((value, (*path, str(key.value))) for key, value in node.value)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((value, (*path, index)) for index, value in enumerate(node.value))
        elif isinstance(node, yaml.ScalarNode):
            size = len(str(node.value).encode("utf-8"))
            if size > best[2]:
                mark = node.start_mark
                best = (format_path(path), Location(spec.path, mark.line + 1, mark.column + 1), size)
    return best


def _mib(size: int) -> str:
    return f"{size / 1024 / 1024:.1f} MiB" if size >= 1024 * 1024 else f"{size / 1024:.0f} KiB"


def configmap_issues(spec: Spec) -> tuple[list[SpecIssue], list[str]]:
    """Problems (a ConfigMap Kubernetes refuses) and warnings (one client-side `kubectl apply` refuses)."""
    issues: list[SpecIssue] = []
    warnings: list[str] = []
    for relative, size in _configmaps(spec):
        if size <= ANNOTATIONS_MAX_BYTES:
            continue
        field, location, largest = _largest_value(spec)
        if size > CONFIGMAP_MAX_BYTES:
            issues.append(
                SpecIssue(
                    location,
                    field,
                    f"this value is {_mib(largest)}, and the spec ({_mib(size)}) goes whole into the ConfigMap "
                    f"{relative}, which Kubernetes refuses over 1 MiB: shorten it to keep the spec under 1 MiB "
                    "(a description can link to a document instead)",
                )
            )
        else:
            warnings.append(
                f"the spec ({_mib(size)}) goes whole into the ConfigMap {relative}: over 256 KiB, client-side "
                f"`kubectl apply` cannot store it in its last-applied annotation; apply it with --server-side or "
                f"shorten {field or 'the spec'} ({_mib(largest)}, line {location.line})"
            )
    return issues, warnings


def check_sizes_or_exit(specs: Iterable[Spec]) -> None:
    """Print the size warnings of every spec; report every size problem as `file:line:col: field: ...`, exit 2."""
    import typer

    from slokit.commands.common import EXIT_USAGE, report_spec_error

    problems: list[SpecIssue] = []
    for spec in specs:
        issues, warnings = configmap_issues(spec)
        problems += issues
        for line in warnings:
            typer.echo(f"{spec.path}: warning: {line}", err=True)
    if problems:
        report_spec_error(SpecError(problems))
        raise typer.Exit(EXIT_USAGE)


def print_scrape_warnings(specs: Iterable[Spec]) -> None:
    """Warn (stderr) about `selector:` labels the generated PodMonitors cannot give the series the rules read."""
    import typer

    from slokit.generate import k8s

    for spec in specs:
        for line in k8s.scrape_warnings(spec):
            typer.echo(f"{spec.path}: warning: {line}", err=True)
