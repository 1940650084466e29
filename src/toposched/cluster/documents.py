"""YAML and JSON files read within the limits, with the line of every value for error messages.

`read_text` refuses what is not a readable UTF-8 file within MAX_FILE_BYTES; `parse_documents`
refuses invalid syntax and alias expansion past the limit, and keeps each document's parsed
nodes so that an error found later in a value can name the line where it was written
(`Document.locate`). Lines cost nothing until an error asks for one.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from toposched.cluster.errors import InputError, join_fields
from toposched.cluster.limits import MAX_ALIAS_FACTOR, MAX_ALIAS_NODES, MAX_FILE_BYTES

__all__ = ["Document", "FieldPath", "field_path", "parse_documents", "read_text"]

FieldPath = tuple[str | int, ...]

# libyaml's parser when PyYAML was built with it (as its wheels are): the same documents, read
# several times faster than by the pure-Python parser.
_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# JSON is located by reading it again as YAML (JSON is nearly a subset), when small enough.
_MAX_JSON_TO_LOCATE = 4 << 20
_INDEX = re.compile(r"\[(\d+)\]")


def read_text(path: Path, what: str) -> str:
    """The text of the file at `path`; an InputError naming `what` (e.g. "cluster file") when
    it is missing, a directory, unreadable, larger than MAX_FILE_BYTES or not UTF-8 text."""
    try:
        if path.is_dir():
            raise InputError(what, path, "is a directory; give a file")
        with path.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)  # no more, whatever the file claims its size is
        if len(data) > MAX_FILE_BYTES:
            raise InputError(what, path, f"is larger than {MAX_FILE_BYTES:,} bytes")
    except FileNotFoundError:
        raise InputError(what, path, "file not found") from None
    except OSError as error:
        raise InputError(what, path, f"cannot be read: {error.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(
            what,
            path,
            f"is not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start})",
        ) from None


@dataclass
class Document:
    """One parsed document: its value, and what finds the line of any value in it."""

    data: Any
    file: str | None
    node: yaml.Node | None = None
    """The parsed YAML nodes, with their positions; None for JSON until an error needs them."""
    text: str | None = field(default=None, repr=False)
    """JSON text, read again as YAML to locate an error."""

    def line(self, path: FieldPath) -> int | None:
        """The line (from 1) of the value at `path`, or of the nearest enclosing one written."""
        if self.node is None and self.text is not None and len(self.text) <= _MAX_JSON_TO_LOCATE:
            try:
                self.node = yaml.compose(self.text, Loader=_Loader)
            except (yaml.YAMLError, ValueError, RecursionError):
                pass
            self.text = None
        if self.node is None:
            return None
        return _node_line(self.node, path)

    def locate(
        self, error: InputError, path: FieldPath = (), prefix: str = "", root: str = ""
    ) -> InputError:
        """`error`, whose field is relative to the value at `path`, with this file and line.

        The field is named below `prefix` (e.g. `jobs[2]`); `root` is the field name of the
        whole value (e.g. "job"), used when the error is about all of it.
        """
        relative = "" if error.field == root else error.field
        return InputError(
            join_fields(prefix, relative) or root or "document",
            error.value,
            error.rule,
            file=self.file,
            line=self.line((*path, *field_path(relative))),
            also=tuple(
                other if other.file is not None else self.locate(other, path, prefix, root)
                for other in error.also
            ),
            more=error.more,
        )

    def check_no_duplicate_keys(self) -> None:
        """Refuse a key written twice in one mapping: plain YAML keeps the last of two equal
        keys, which would silently drop what the first one said. JSON text is read as it was
        parsed, keeping the last, and is not checked."""
        if self.node is not None:
            _check_no_duplicate_keys(self.file, self.node, ())


def _check_no_duplicate_keys(file: str | None, node: yaml.Node, path: FieldPath) -> None:
    if isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _check_no_duplicate_keys(file, item, (*path, index))
    if not isinstance(node, yaml.MappingNode):
        return
    first_line: dict[str, int] = {}
    for key, value in node.value:
        if not isinstance(key, yaml.ScalarNode):
            continue
        line = key.start_mark.line + 1
        if key.value in first_line:
            raise InputError(
                ".".join(str(part) for part in (*path, key.value)).replace(".[", "["),
                key.value,
                f"duplicate key; already given at line {first_line[key.value]} of the same mapping",
                file=file,
                line=line,
            )
        first_line[key.value] = line
        _check_no_duplicate_keys(file, value, (*path, key.value))


def field_path(field_name: str) -> FieldPath:
    """ "topology.slices[0].pods" -> ("topology", "slices", 0, "pods")."""
    parts: list[str | int] = []
    for piece in field_name.split("."):
        name, *indices = _INDEX.split(piece)
        if name:
            parts.append(name)
        parts.extend(int(index) for index in indices[0::2])
    return tuple(parts)


def _node_line(root: yaml.Node, path: FieldPath) -> int:
    node = root
    line: int = root.start_mark.line + 1
    for part in path:
        if isinstance(node, yaml.MappingNode):
            found = None
            for key, value in node.value:  # the last of repeated keys is the one read
                if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                    found = (key, value)
            if found is None:
                break
            line = found[0].start_mark.line + 1
            node = found[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if not 0 <= part < len(node.value):
                break
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


# --- parsing ----------------------------------------------------------------------------------


def parse_documents(text: str, file: str | None, json_text: bool = False) -> list[Document]:
    """The documents in `text`: one for JSON, one per `---` section for YAML (empty ones left
    out). Syntax errors name the file and line; aliases may not expand past the limits."""
    if json_text:
        return [Document(_parse_json(text, file), file, text=text)]
    loader = _Loader(text)
    documents: list[Document] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            _check_expansion(node, text, file)
            data = loader.construct_document(node)
            if data is not None:
                documents.append(Document(data, file, node))
    except InputError:
        raise
    except yaml.YAMLError as error:
        raise _syntax_error(error, text, file) from None
    except RecursionError:
        raise InputError("text", _first_line(text), "nests too deeply", file=file) from None
    except ValueError as error:  # e.g. an integer of more digits than Python reads
        raise InputError("text", _first_line(text), _unreadable(error), file=file) from None
    finally:
        loader.dispose()
    return documents


def _parse_json(text: str, file: str | None) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(
            "text",
            _line_text(text, error.lineno - 1),
            f"is not valid JSON: {error.msg} (column {error.colno})",
            file=file,
            line=error.lineno,
        ) from None
    except RecursionError:
        raise InputError("text", _first_line(text), "nests too deeply", file=file) from None
    except ValueError as error:  # an integer of more digits than Python reads
        raise InputError("text", _first_line(text), _unreadable(error), file=file) from None


def _unreadable(error: ValueError) -> str:
    if "digits" in str(error):
        return f"cannot be read: a number has more than {sys.get_int_max_str_digits():,} digits"
    return f"cannot be read: {error}"


def _syntax_error(error: yaml.YAMLError, text: str, file: str | None) -> InputError:
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    problem = getattr(error, "problem", None) or getattr(error, "reason", None) or "cannot be read"
    if mark is None:
        return InputError("text", _first_line(text), f"is not valid YAML: {problem}", file=file)
    return InputError(
        "text",
        _line_text(text, mark.line),
        f"is not valid YAML: {problem} (column {mark.column + 1})",
        file=file,
        line=mark.line + 1,
    )


def _line_text(text: str, index: int) -> str:
    """Line `index` (from 0) of `text`, read no further than that line."""
    start = 0
    for _ in range(index):
        start = text.find("\n", start) + 1
        if start == 0:
            return ""
    end = text.find("\n", start)
    return text[start : end if end >= 0 else len(text)]


def _first_line(text: str) -> str:
    return _line_text(text, 0)


def _children(node: yaml.Node) -> Iterator[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield key
            yield value
    elif isinstance(node, yaml.SequenceNode):
        yield from node.value


def _check_expansion(root: yaml.Node, text: str, file: str | None) -> None:
    """Refuse a document whose aliases expand it past the limit, or make it contain itself.

    Written once, a node is one object however many aliases name it; expanded, it counts once
    per path to it. Sizes are summed bottom-up, each distinct node visited once.
    """
    if "&" not in text:  # no anchor, so no alias
        return
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise InputError(
                "text",
                _line_text(text, node.start_mark.line),
                "a YAML alias refers to a value that contains it",
                file=file,
                line=node.start_mark.line + 1,
            )
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)
    written = len(sizes)
    allowed = max(MAX_ALIAS_NODES, MAX_ALIAS_FACTOR * written)
    if sizes[id(root)] > allowed:
        raise InputError(
            "text",
            _line_text(text, root.start_mark.line),
            f"YAML aliases expand {written:,} values written to {sizes[id(root)]:,}; "
            f"the limit is {allowed:,}",
            file=file,
            line=root.start_mark.line + 1,
        )
