"""Bounded reading of job sources: size, encoding, YAML aliases, nesting and duplicate keys.

Every job source (a file, standard input, text, a mapping built in code) passes through here
before anything else looks at it, so hostile input costs bounded time and memory and ends as an
`InvalidJobError` problem, never a traceback:

- at most `MAX_SOURCE_BYTES` of input (the Kubernetes API server's limit for one request),
  read from a file or stream without ever holding more;
- UTF-8 only (a byte-order mark is allowed), reported with the offset of the first bad byte;
- at most `MAX_NODES` values and `MAX_DEPTH` levels of nesting. Both are enforced while the YAML
  events arrive, before a document is built, and aliases count once per use: a "billion laughs"
  file is refused after reading a few hundred bytes of it;
- a key may appear once per mapping (YAML's own rule, which PyYAML does not enforce: the last
  value would silently win); keys are strings, as in JSON;
- timestamps stay strings, as Kubernetes reads them.

Every limit here is trainop's own, enforced by trainop whatever the YAML library does: the text is
scanned and parsed by PyYAML's pure-Python scanner and parser (the same language on every machine,
with or without libyaml, whichever PyYAML the index serves) and the nodes are composed here. libyaml
is not used: it reads a flow collection ahead of its events and, from libyaml 0.2.6 (PyYAML 6.0.4),
refuses nesting past its own limit of 1000 levels before the composer could apply this one; and
its own composer recurses in C. `benchmarks/reader.py` measures what that costs.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.error import Mark
from yaml.events import AliasEvent, CollectionStartEvent
from yaml.nodes import MappingNode, Node, ScalarNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from trainop_core.errors import InvalidJobError, Problem

MAX_SOURCE_BYTES = 3 * 1024 * 1024  # kube-apiserver refuses larger request bodies
MAX_NODES = 250_000  # values in one source, aliases expanded (a real job has a few thousand)
MAX_DEPTH = 64  # mappings and lists inside each other (a pod template needs about 15)

_MAX_INT_BITS = 3322  # 1000 decimal digits: far beyond any field, well within what JSON can write
_MERGE_TAG = "tag:yaml.org,2002:merge"
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


def size_message(limit: int = MAX_SOURCE_BYTES) -> str:
    return f"is larger than {limit // (1024 * 1024)} MiB, the most a job source may hold"


# --- bytes and text -------------------------------------------------------------------------------


def read_file(path: Path) -> str:
    """A job file's text; InvalidJobError (source = the path) if unreadable, too large or not
    UTF-8. Never reads more than MAX_SOURCE_BYTES + 1 bytes (`/dev/zero` is refused at once)."""
    try:
        with path.open("rb") as handle:
            data = read_bounded(handle, str(path))
    except OSError as err:
        raise InvalidJobError([Problem("", os_message(err))], source=str(path)) from None
    except ValueError:  # a NUL byte in the name
        message = "cannot read: a file name cannot contain a NUL byte"
        raise InvalidJobError([Problem("", message)], source=repr(str(path))) from None
    return decode(data, str(path))


def read_bounded(stream: IO[bytes], origin: str) -> bytes:
    """At most MAX_SOURCE_BYTES from a binary stream; more is an InvalidJobError."""
    data = stream.read(MAX_SOURCE_BYTES + 1)
    if len(data) > MAX_SOURCE_BYTES:
        raise InvalidJobError([Problem("", size_message())], source=origin)
    return data


def read_stream(stream: IO[Any] | None, origin: str) -> str:
    """A job from an open stream (standard input): binary if it has a buffer, else text; the
    same limits as a file. A closed or unreadable stream is an InvalidJobError."""
    try:
        if stream is None:
            raise OSError("closed")
        buffer = getattr(stream, "buffer", None)
        if buffer is not None:
            return decode(read_bounded(buffer, origin), origin)
        text = stream.read(MAX_SOURCE_BYTES + 1)
    except (OSError, ValueError) as err:  # ValueError: "I/O operation on closed file"
        reason = getattr(err, "strerror", None) or str(err)
        raise InvalidJobError([Problem("", f"cannot be read: {reason}")], source=origin) from None
    if not isinstance(text, str):
        return decode(bytes(text), origin)
    check_text(text, origin)
    return text


def decode(data: bytes, origin: str) -> str:
    """Strict UTF-8 (an initial byte-order mark is dropped); the first bad byte is named."""
    try:
        return codecs.decode(data, "utf-8-sig")
    except UnicodeDecodeError as err:
        bad = data[err.start : err.start + 1].hex()
        message = f"is not UTF-8 text: byte 0x{bad} at offset {err.start} cannot be decoded"
        raise InvalidJobError([Problem("", message)], source=origin) from None


def check_text(text: str, origin: str) -> None:
    """A job given as text obeys the same limits as a file: size (in UTF-8) and encodability."""
    if len(text) > MAX_SOURCE_BYTES:
        raise InvalidJobError([Problem("", size_message())], source=origin)
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as err:
        message = f"is not valid Unicode text: a lone surrogate at position {err.start}"
        raise InvalidJobError([Problem("", message)], source=origin) from None
    if size > MAX_SOURCE_BYTES:
        raise InvalidJobError([Problem("", size_message())], source=origin)


def os_message(err: OSError) -> str:
    if isinstance(err, FileNotFoundError):
        return "no such file"
    if isinstance(err, IsADirectoryError):
        return "is a directory, expected a YAML or JSON file"
    return f"cannot read: {err.strerror or err}"


# --- YAML -----------------------------------------------------------------------------------------


def parse_yaml(text: str, origin: str) -> list[Any]:
    """Every document of a YAML (or JSON) stream, within the limits above.

    Raises InvalidJobError naming the line and column of the first problem."""
    check_text(text, origin)
    loader = None
    try:
        loader = _BoundedLoader(text)  # refuses characters YAML does not allow, at once
        return list(_documents(loader))
    except yaml.reader.ReaderError as err:
        raise InvalidJobError([Problem("", reader_message(err, text))], source=origin) from None
    except yaml.YAMLError as err:
        raise InvalidJobError([Problem("", yaml_message(err))], source=origin) from None
    except (ValueError, OverflowError) as err:
        # A scalar Python cannot build: an integer of more than 4300 digits, a timestamp
        # tagged explicitly with a year 0, ...
        reason = str(err).split(";")[0]
        message = f"not valid YAML or JSON: a value cannot be read: {reason}"
        raise InvalidJobError([Problem("", message)], source=origin) from None
    finally:
        if loader is not None:
            loader.dispose()


def _documents(loader: Any) -> Iterator[Any]:
    while loader.check_data():
        yield loader.get_data()


def yaml_message(err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    if isinstance(err, LimitError):
        return f"{problem}{where}"
    return f"not valid YAML or JSON: {problem}{where}"


def reader_message(err: yaml.reader.ReaderError, text: str) -> str:
    """A character YAML does not allow, named with its line and column (the reader gives only
    an offset)."""
    position = int(err.position)
    breaks = list(_LINE_BREAK.finditer(text, 0, position))
    column = position - (breaks[-1].end() if breaks else 0)
    where = f" (line {len(breaks) + 1}, column {column + 1})"
    return f"not valid YAML or JSON: {err.reason}: #x{int(err.character):04x}{where}"


_LINE_BREAK = re.compile("\r\n|[\n\r\x85\u2028\u2029]")  # YAML's line breaks


class LimitError(yaml.composer.ComposerError):
    """Valid YAML beyond what a job source may hold (values, nesting)."""


def _depth_message() -> str:
    return f"mappings and lists are nested more than {MAX_DEPTH} levels deep"


class _BoundedScanner(Scanner):
    """PyYAML's scanner, refusing a flow collection (`[`, `{`) opened deeper than MAX_DEPTH.

    The scanner reads up to 1024 characters ahead of the events it releases (a flow collection
    may turn out to be a mapping key), so without this check the composer would meet a deep
    `[[[[...` only after the scanner had opened hundreds of levels. Open block collections
    (`indents`) plus flow levels never exceed the depth the composer counts, so this refuses
    nothing the composer would accept."""

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:  # PyYAML's parameter name
        if len(self.indents) + self.flow_level >= MAX_DEPTH:
            mark = self.get_mark()  # type: ignore[attr-defined]  # reason: the reader base provides it
            raise _limit(_depth_message(), mark)
        super().fetch_flow_collection_start(TokenClass)


class _BoundedComposer(Composer):
    """PyYAML's composer, counting values (an alias counts as everything it stands for) and
    nesting as the events arrive, and refusing recursive aliases."""

    def __init__(self) -> None:
        super().__init__()
        self._values = 0  # over the whole stream: documents do not reset it
        self._depth = 0
        self._open: set[str] = set()  # anchors whose node is still being composed
        self._weights: dict[str, int] = {}  # anchor -> values it stands for

    def compose_document(self) -> Node | None:
        node: Node | None = super().compose_document()
        self._weights.clear()  # anchors do not cross documents (Composer resets its own too)
        return node

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event: Any = self.peek_event()  # type: ignore[attr-defined]  # reason: the parser base provides it
        if isinstance(event, AliasEvent):
            if event.anchor in self._open:
                raise _error("an alias refers to a value that contains it", event.start_mark)
            self._count(self._weights.get(str(event.anchor), 1), event.start_mark)
            found: Node | None = super().compose_node(parent, index)  # undefined: an error
            return found
        if self._depth >= MAX_DEPTH and isinstance(event, CollectionStartEvent):
            raise _limit(_depth_message(), event.start_mark)
        anchor, before = event.anchor, self._values
        self._count(1, event.start_mark)
        self._depth += 1
        if anchor is not None:
            self._open.add(anchor)
        try:
            node: Node | None = super().compose_node(parent, index)
        finally:
            self._depth -= 1
            self._open.discard(anchor or "")
        if anchor is not None:
            self._weights[anchor] = self._values - before
        return node

    def _count(self, values: int, mark: Any) -> None:
        self._values += values
        if self._values > MAX_NODES:
            problem = f"more than {MAX_NODES} values once aliases are expanded"
            raise _limit(f"{problem}, the most a job source may hold", mark)


def _error(problem: str, mark: Any) -> yaml.composer.ComposerError:
    return yaml.composer.ComposerError(None, None, problem, mark)


def _limit(problem: str, mark: Any) -> LimitError:
    return LimitError(None, None, problem, mark)


class _StrictConstructor(SafeConstructor):
    """Duplicate keys are an error and keys are strings, as in JSON (`1: x` gives "1")."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        if not isinstance(node, MappingNode):
            raise ConstructorError(
                None, None, f"expected a mapping, found {node.id}", node.start_mark
            )
        seen: dict[str, Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue  # `<<: *base` may be overridden by the keys written next to it
            key = self._key(key_node)
            if key in seen:
                first = seen[key].line + 1
                message = f"duplicate key {key!r} (first written on line {first})"
                raise ConstructorError(None, None, message, key_node.start_mark)
            seen[key] = key_node.start_mark
        self.flatten_mapping(node)
        return {
            self._key(key_node): self.construct_object(value_node, deep=deep)
            for key_node, value_node in node.value
        }

    def _key(self, node: Node) -> str:
        if not isinstance(node, ScalarNode):
            raise ConstructorError(
                None, None, "a mapping key must be a string, not a list or mapping",
                node.start_mark,
            )  # fmt: skip
        key = self.construct_object(node)
        return key if isinstance(key, str) else str(node.value)


class _JsonLikeResolver(Resolver):
    """YAML 1.1's implicit types minus timestamps: Kubernetes keeps `2024-01-01` a string."""


_JsonLikeResolver.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP_TAG]
    for first, resolvers in Resolver.yaml_implicit_resolvers.items()
}


class _BoundedLoader(
    Reader, _BoundedScanner, Parser, _BoundedComposer, _StrictConstructor, _JsonLikeResolver
):
    """PyYAML's pure-Python reader, scanner and parser with the bounded scanner and composer, the
    strict constructor and the JSON-like resolver."""

    def __init__(self, text: str) -> None:
        Reader.__init__(self, text)
        _BoundedScanner.__init__(self)
        Parser.__init__(self)
        _BoundedComposer.__init__(self)
        _StrictConstructor.__init__(self)
        _JsonLikeResolver.__init__(self)


# --- data built in code ---------------------------------------------------------------------------


def check_tree(data: Any, origin: str = "") -> None:
    """A mapping given in code obeys the same limits as text: at most MAX_NODES values (a value
    shared by reference counts each time), MAX_DEPTH levels, no value containing itself, and
    keys JSON can hold. Iterative: any shape is examined in bounded time and stack."""
    values = 0
    path_ids: list[int] = []
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        node, depth = stack.pop()
        while len(path_ids) > depth:
            path_ids.pop()
        values += 1
        if values > MAX_NODES:
            _tree_problem(f"has more than {MAX_NODES} values", origin)
        if isinstance(node, int) and node.bit_length() > _MAX_INT_BITS:
            _tree_problem("holds an integer of more than 1000 digits", origin)
        if not isinstance(node, Mapping | list | tuple):
            continue
        if id(node) in path_ids:
            _cycle(data, origin)
        if depth >= MAX_DEPTH:
            _tree_problem(f"is nested more than {MAX_DEPTH} levels deep", origin)
        path_ids.append(id(node))
        children = node.items() if isinstance(node, Mapping) else enumerate(node)
        for key, child in children:
            if isinstance(node, Mapping) and not isinstance(key, str | int | float | bool):
                _tree_problem(f"has a mapping key that is not a string: {key!r:.40}", origin)
            stack.append((child, depth + 1))


def _tree_problem(message: str, origin: str) -> None:
    raise InvalidJobError([Problem("", f"the job {message}")], source=origin)


def _cycle(data: Any, origin: str) -> None:
    """Name the field where `data` contains itself (known to: found without paths, cheaply)."""
    from trainop_core.api.cycles import cycle_problem

    problem = cycle_problem(data) or Problem("", "contains itself")
    raise InvalidJobError([problem], source=origin)
