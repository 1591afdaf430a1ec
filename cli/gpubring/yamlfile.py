"""Reading YAML, and the Problem every reader reports: a leaf module that imports nothing from gpubring.

`read(path, file)` and `load(text, file)` return the data of one YAML document or raise YamlError
carrying one Problem that names the file (as the caller shows it), where in it (`file` or
`line L, column C`) and what was expected. Besides malformed YAML they refuse input that would
hurt the process or hide a mistake:

- a file over MAX_BYTES (checked before reading it);
- nesting deeper than MAX_DEPTH collections, counted while composing from the parser's event stream,
  before any deeper node exists (libyaml's own composer recurses in C and a 100,000-deep list
  kills the process with SIGSEGV; PyYAML's Python composer hits RecursionError), aliases included;
- aliases that together stand for more than MAX_ALIAS_NODES nodes (billion laughs fails at once);
- a key given twice in one mapping (PyYAML keeps the last silently; Ansible warns).

The loader is PyYAML's safe loader (libyaml's parser when present) with Ansible's `!vault` and
`!unsafe` read as Opaque strings.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

__all__ = [
    "MAX_ALIAS_NODES",
    "MAX_BYTES",
    "MAX_DEPTH",
    "Opaque",
    "Problem",
    "SafeLoader",
    "YamlError",
    "did_you_mean",
    "load",
    "read",
    "read_text",
]

MAX_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 100
MAX_ALIAS_NODES = 1_000_000
_MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong with the input: the file, the key path in it and what was expected."""

    file: str
    key: str
    expected: str

    def __str__(self) -> str:
        return f"{self.file}: {self.key}: {self.expected}"


def did_you_mean(word: str, pool: Iterable[str]) -> str:
    """`; did you mean X?` for the closest word of the pool, or nothing."""
    close = difflib.get_close_matches(word, list(pool), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


class YamlError(Exception):
    """A file that could not be read as YAML; `problem` says where and what was expected."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))
        self.problem = problem


class Opaque(str):
    """A value only Ansible can read (`!vault` ciphertext, `!unsafe` text): never type-checked."""

    __slots__ = ("tag",)
    tag: str


class _Refused(Exception):
    """Raised inside the loader; `load` turns it into a Problem at the mark's line."""

    def __init__(self, mark: Any, expected: str) -> None:
        super().__init__(expected)
        self.mark = mark
        self.expected = expected


class _Guard(Composer, SafeConstructor):
    """Composer with depth and alias-size limits, constructor that refuses duplicate keys."""

    _depth = 0  # collections open around the node being composed
    _alias_nodes = 0  # nodes the aliases so far stand for
    _open: set[str]  # anchors of the collections being composed
    _sizes: dict[Node, tuple[int, int]]  # anchored node: (nodes in it, collections deep), aliases expanded
    check_event: Callable[..., bool]  # the parser's, below in the loader's bases
    peek_event: Callable[[], Any]

    def get_single_node(self) -> Node | None:
        self._sizes, self._open, self._depth, self._alias_nodes = {}, set(), 0, 0
        node: Node | None = super().get_single_node()
        return node

    def _size(self, node: Node) -> tuple[int, int]:
        """(nodes, collections deep) of a node with its aliases expanded; only aliases pay for it."""
        if node in self._sizes:
            return self._sizes[node]
        children: list[Node] = []
        if isinstance(node, SequenceNode):
            children = list(node.value)
        elif isinstance(node, MappingNode):
            children = [n for pair in node.value for n in pair]
        sizes = [self._size(c) for c in children]
        collection = isinstance(node, SequenceNode | MappingNode)
        size = (1 + sum(s for s, _ in sizes), int(collection) + max((h for _, h in sizes), default=0))
        self._sizes[node] = size
        return size

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        depth = self._depth
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            if event.anchor in self._open:
                expected = f"expected an alias to a complete node, *{event.anchor} is inside it"
                raise _Refused(event.start_mark, expected)
            node = super().compose_node(parent, index)
            if node is None:
                return None
            size, height = self._size(node)
            self._alias_nodes += size
            if self._alias_nodes > MAX_ALIAS_NODES:
                expected = f"expected aliases to stand for at most {MAX_ALIAS_NODES} nodes"
                raise _Refused(event.start_mark, expected)
            if depth + height > MAX_DEPTH:
                expected = f"expected nesting at most {MAX_DEPTH} deep, *{event.anchor} goes deeper"
                raise _Refused(event.start_mark, expected)
            return node
        if not isinstance(event, SequenceStartEvent | MappingStartEvent):
            return super().compose_node(parent, index)
        if depth >= MAX_DEPTH:
            raise _Refused(event.start_mark, f"expected nesting at most {MAX_DEPTH} deep")
        anchor = event.anchor
        if anchor is not None:
            self._open.add(anchor)
        self._depth = depth + 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth = depth
            self._open.discard(anchor or "")

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node)
            if not isinstance(key, Hashable):
                continue
            if key in seen:
                raise _Refused(
                    key_node.start_mark,
                    f"expected each key once in a mapping, {key} is also at line {seen[key]}",
                )
            seen[key] = key_node.start_mark.line + 1
        self._refuse_shadowing(node, seen)
        result: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return result

    def _refuse_shadowing(self, node: MappingNode, explicit: dict[Any, int]) -> None:
        """A key a merge (`<<: *anchor`) brings in must not also be given here or by another merged
        mapping: which one wins is a YAML 1.1 rule a reader of the file easily gets wrong."""
        merged: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag != _MERGE_TAG:
                continue
            sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
            for source in sources:
                if not isinstance(source, MappingNode):
                    continue
                for merged_key_node, _ in source.value:
                    if not isinstance(merged_key_node, ScalarNode) or merged_key_node.tag == _MERGE_TAG:
                        continue
                    key = self.construct_object(merged_key_node)
                    if not isinstance(key, Hashable):
                        continue
                    line = explicit.get(key) or merged.get(key)
                    if line is not None:
                        raise _Refused(
                            key_node.start_mark,
                            f"expected a merge key (<<) that shadows nothing, {key} is also set "
                            f"at line {line}",
                        )
                    merged[key] = merged_key_node.start_mark.line + 1


if getattr(yaml, "__with_libyaml__", False):
    from yaml._yaml import CParser

    class SafeLoader(_Guard, CParser, Resolver):
        """PyYAML's safe loader on libyaml's parser, with the limits above, `!vault` and `!unsafe`."""

        def __init__(self, stream: str | bytes) -> None:
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

else:  # pragma: no cover - PyYAML without libyaml

    class SafeLoader(_Guard, yaml.SafeLoader):  # type: ignore[no-redef]
        """PyYAML's safe loader, with the limits above, `!vault` and `!unsafe`."""


def _opaque(loader: SafeLoader, node: Node) -> Opaque:
    value = Opaque(loader.construct_scalar(node) if isinstance(node, ScalarNode) else "")
    value.tag = node.tag
    return value


for _tag in ("!vault", "!unsafe"):
    SafeLoader.add_constructor(_tag, _opaque)  # type: ignore[type-var]


def _at(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "file"


def load(text: str, file: str) -> Any:
    """The data of one YAML document; YamlError names `file`, the line and what was expected."""
    if len(text) > MAX_BYTES:
        raise YamlError(Problem(file, "file", f"expected at most {MAX_BYTES // 2**20} MiB of YAML"))
    try:
        loader = SafeLoader(text)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except _Refused as exc:
        raise YamlError(Problem(file, _at(exc.mark), exc.expected)) from None
    except yaml.MarkedYAMLError as exc:
        expected = f"expected valid YAML ({exc.problem or exc})"
        raise YamlError(Problem(file, _at(exc.problem_mark), expected)) from None
    except yaml.YAMLError as exc:
        raise YamlError(Problem(file, "file", f"expected valid YAML ({exc})")) from None


def read_text(path: Path, file: str) -> str:
    """The text of a YAML file (UTF-8, at most MAX_BYTES); YamlError says why it cannot be read."""
    try:
        if path.stat().st_size > MAX_BYTES:
            raise YamlError(Problem(file, "file", f"expected at most {MAX_BYTES // 2**20} MiB of YAML"))
        return path.read_text(encoding="utf-8")
    except IsADirectoryError:
        raise YamlError(Problem(file, "file", "expected a file, found a folder")) from None
    except UnicodeDecodeError:
        raise YamlError(Problem(file, "file", "expected UTF-8 text, the file cannot be decoded")) from None
    except OSError as exc:
        raise YamlError(Problem(file, "file", f"expected a readable file ({exc.strerror or exc})")) from None


def read(path: Path, file: str) -> Any:
    """The data of the YAML file at `path`, shown as `file` in a problem."""
    return load(read_text(path, file), file)
