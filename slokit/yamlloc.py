"""Safe YAML loading that remembers where every value came from.

PyYAML's plain `safe_load` forgets line numbers and silently keeps the last of two duplicate keys. Spec errors
must name file, line and column, so this composes the node tree and records a location per path instead.

Aliases are bounded: a document whose values, with every alias written out, number more than MAX_EXPANDED_NODES
(a "billion laughs" alias bomb) is refused before anything walks it, so a hostile file cannot hang a reader.
Every YAML file slokit reads goes through `load_yaml` (specs, incident files) or `safe_load_all_bounded`
(`slokit import`, web-configs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import yaml

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Location:
    """A 1-based line and column in a file."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


class YamlLocationError(Exception):
    """The text is not YAML slokit can read; carries where and why."""

    def __init__(self, location: Location, message: str) -> None:
        super().__init__(message)
        self.location = location
        self.message = message


@dataclass(frozen=True)
class LoadedYaml:
    """Plain Python data plus a location for each path (mapping keys and sequence indexes)."""

    data: Any
    locations: dict[Path, Location]
    key_locations: dict[Path, Location]

    def locate(self, path: Path) -> Location:
        """The location of `path`, or of its nearest ancestor that has one."""
        probe = path
        while probe:
            if probe in self.locations:
                return self.locations[probe]
            probe = probe[:-1]
        return self.locations.get((), Location("<unknown>", 1, 1))

    def locate_key(self, path: Path) -> Location:
        """Where the key of `path` is written (for unknown keys), else the value's location."""
        return self.key_locations.get(path) or self.locate(path)


def _mark(file: str, mark: yaml.Mark | None) -> Location:
    if mark is None:
        return Location(file, 1, 1)
    return Location(file, mark.line + 1, mark.column + 1)


_MAX_DEPTH = 64
# Values in a document with every alias expanded. A spec has a few hundred; a generous bound that an alias bomb
# (ten aliases of ten aliases of ...) passes within a few levels, long before expanding it takes noticeable time.
MAX_EXPANDED_NODES: Final = 100_000


def check_expansion(node: yaml.Node, file: str, limit: int = MAX_EXPANDED_NODES) -> None:
    """Raise YamlLocationError if `node` with every alias written out has more than `limit` values.

    Counts each distinct node once (memoised), so the check itself is linear in the text whatever the aliases.
    An alias of a collection that contains itself counts as over the limit.
    """
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(current: yaml.Node, depth: int) -> int:
        key = id(current)
        if key in sizes:
            return sizes[key]
        if key in active:  # a collection that contains itself expands without end
            return limit + 1
        if depth > _MAX_DEPTH or not isinstance(current, yaml.MappingNode | yaml.SequenceNode):
            return 1  # scalars; too-deep nesting is reported by the reader with its own message
        active.add(key)
        total = 1
        children: list[yaml.Node] = []
        if isinstance(current, yaml.MappingNode):
            for key_node, value_node in current.value:
                children += (key_node, value_node)
        else:
            children = list(current.value)
        for child in children:
            total += size(child, depth + 1)
            if total > limit:
                break
        active.discard(key)
        sizes[key] = total
        if total > limit:
            raise YamlLocationError(
                _mark(file, current.start_mark),
                f"YAML aliases expand this document to more than {limit} values (an alias bomb?); a slokit file "
                "has a few hundred: write the repeated part out, or nest fewer aliases of aliases",
            )
        return total

    size(node, 0)


def safe_load_all_bounded(text: str, file: str) -> list[Any]:
    """`yaml.safe_load_all` for every document, refusing alias bombs (YamlLocationError) before constructing.

    YAML syntax errors propagate as PyYAML's own `yaml.YAMLError`, as from `safe_load_all`; nesting deeper than
    Python's recursion allows is reported as a YamlLocationError.
    """
    loader = yaml.SafeLoader(text)
    try:
        documents: list[Any] = []
        while loader.check_node():
            try:
                node = loader.get_node()
            except RecursionError:
                raise YamlLocationError(Location(file, 1, 1), "YAML nested too deeply") from None
            if node is None:
                documents.append(None)
                continue
            check_expansion(node, file)
            try:
                documents.append(loader.construct_document(node))
            except RecursionError:
                raise YamlLocationError(_mark(file, node.start_mark), "YAML nested too deeply") from None
        return documents
    finally:
        loader.dispose()


def load_yaml(text: str, file: str) -> LoadedYaml:
    """Parse one YAML document; raises YamlLocationError for anything that is not plain safe YAML."""
    try:
        loader = yaml.SafeLoader(text)
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        raise YamlLocationError(
            Location(file, line, column), f"character {exc.character!r} is not allowed in YAML ({exc.reason})"
        ) from None
    try:
        try:
            root = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            problem = exc.problem or exc.context or "invalid YAML"
            raise YamlLocationError(_mark(file, mark), f"YAML syntax error: {problem}") from None
        except yaml.YAMLError as exc:
            raise YamlLocationError(Location(file, 1, 1), f"YAML error: {exc}") from None
        except RecursionError:
            raise YamlLocationError(
                Location(file, 1, 1), f"YAML nested too deeply (more than {_MAX_DEPTH} levels)"
            ) from None
        locations: dict[Path, Location] = {}
        key_locations: dict[Path, Location] = {}
        if root is None:
            return LoadedYaml(None, {(): Location(file, 1, 1)}, {})
        check_expansion(root, file)
        data = _convert(loader, root, (), file, locations, key_locations, depth=0)
        return LoadedYaml(data, locations, key_locations)
    finally:
        loader.dispose()


_PLAIN_TAGS = frozenset({"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:omap"})


def _convert(
    loader: yaml.SafeLoader,
    node: yaml.Node,
    path: Path,
    file: str,
    locations: dict[Path, Location],
    key_locations: dict[Path, Location],
    depth: int,
) -> Any:
    locations[path] = _mark(file, node.start_mark)
    if depth > _MAX_DEPTH:
        raise YamlLocationError(locations[path], "YAML nested too deeply")
    if isinstance(node, yaml.MappingNode | yaml.SequenceNode) and node.tag not in _PLAIN_TAGS:
        raise YamlLocationError(locations[path], f"YAML tag {node.tag!r} is not allowed in a spec")
    if isinstance(node, yaml.MappingNode):
        try:
            loader.flatten_mapping(node)
        except yaml.MarkedYAMLError as exc:
            raise YamlLocationError(_mark(file, exc.problem_mark), f"YAML error: {exc.problem}") from None
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = _scalar(loader, key_node, file)
            key_loc = _mark(file, key_node.start_mark)
            if not isinstance(key, str):
                raise YamlLocationError(key_loc, f"mapping key {key!r} must be a string")
            if key in result:
                first = key_locations[(*path, key)]
                raise YamlLocationError(key_loc, f"duplicate key {key!r} (first given at line {first.line})")
            key_locations[(*path, key)] = key_loc
            result[key] = _convert(loader, value_node, (*path, key), file, locations, key_locations, depth + 1)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [
            _convert(loader, item, (*path, index), file, locations, key_locations, depth + 1)
            for index, item in enumerate(node.value)
        ]
    return _scalar(loader, node, file)


def _scalar(loader: yaml.SafeLoader, node: yaml.Node, file: str) -> Any:
    if not isinstance(node, yaml.ScalarNode):
        raise YamlLocationError(_mark(file, node.start_mark), "a mapping key must be a plain value")
    try:
        return loader.construct_object(node, deep=True)
    except yaml.MarkedYAMLError as exc:
        problem = exc.problem or "value cannot be read"
        raise YamlLocationError(_mark(file, node.start_mark), f"YAML error: {problem}") from None
    except (ValueError, TypeError, OverflowError) as exc:
        raise YamlLocationError(_mark(file, node.start_mark), f"YAML value cannot be read: {exc}") from None
