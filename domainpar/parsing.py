"""Reading JSON and YAML that a user can hand us: bounded in size and nesting, one line naming the file.

Parsers recurse: a document ten thousand levels deep ends in ``RecursionError``, and a modest but deep one breaks
every consumer that walks it recursively later. Nothing this package reads is more than a few levels deep, so
documents are refused beyond :data:`MAX_DEPTH` levels, and beyond a size that no legitimate one reaches.

:func:`load_json` / :func:`load_yaml` read a file; :func:`parse_json` / :func:`parse_yaml` parse text already
read; :func:`check_depth` bounds a value from anywhere else (a torch checkpoint). These raise
:class:`~domainpar.errors.DomainparError` only for size and nesting; syntax errors stay the caller's to word.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from domainpar.errors import DomainparError, shorten

#: Most levels of nested containers accepted in any document.
MAX_DEPTH = 32
#: Largest JSON or YAML file read, in bytes (a training config is ~2 kB, a manifest of 1000 parts ~150 kB).
MAX_BYTES = 64 * 2**20


def _too_deep(source: str, what: str, limit: int) -> DomainparError:
    return DomainparError(f"{source}: expected {what}, found containers nested deeper than {limit} levels")


def check_depth(value: Any, source: str, what: str, limit: int = MAX_DEPTH) -> Any:
    """Refuse ``value`` when its dicts, lists and tuples nest deeper than ``limit`` levels (walked without recursion).

    Returns:
        ``value``.

    Raises:
        DomainparError: naming ``source`` and what was expected.
    """
    stack = [(value, 1)]
    seen: set[int] = set()
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = list(item.keys()) + list(item.values())
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > limit:
            raise _too_deep(source, what, limit)
        if id(item) in seen:
            continue  # a YAML alias shares a container: its depth was counted where it was first met
        seen.add(id(item))
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list, tuple)))
    return value


def _read_text(path: Path, what: str, limit: int) -> str:
    size = path.stat().st_size
    if size > limit:
        raise DomainparError(f"{path}: expected {what} of at most {limit:,} bytes (got {size:,})")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DomainparError(
            f"{path}: expected {what} in UTF-8 (found byte 0x{exc.object[exc.start]:02x} at position {exc.start}, not UTF-8 text)"
        ) from None


def parse_json(text: str | bytes, source: str, what: str, limit: int = MAX_DEPTH) -> Any:
    """``json.loads(text)`` bounded in nesting.

    Raises:
        DomainparError: nested deeper than ``limit`` (naming ``source``).
        ValueError: not JSON (``json.JSONDecodeError``), for the caller to word.
    """
    try:
        value = json.loads(text)
    except RecursionError:
        raise _too_deep(source, what, limit) from None
    return check_depth(value, source, what, limit)


def load_json(path: str | os.PathLike, what: str, limit: int = MAX_DEPTH, max_bytes: int = MAX_BYTES) -> Any:
    """Read and parse a JSON file bounded in size and nesting (see :func:`parse_json`)."""
    path = Path(path)
    return parse_json(_read_text(path, what, max_bytes), str(path), what, limit)


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing documents nested deeper than its ``limit`` while composing them, and mappings
    that name a key twice (PyYAML keeps the last silently: a section written twice would lose the first's settings)."""

    limit = MAX_DEPTH
    _depth = 0

    def compose_node(self, parent, index):  # noqa: D102 - PyYAML's hook
        self._depth += 1
        try:
            if self._depth > self.limit:
                raise _Deep()
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):  # noqa: D102 - PyYAML's hook
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                # A merge (<<) brings keys an explicit one may override, as YAML means it; only written keys count.
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node)
                if key in seen:
                    raise _Duplicate(key, seen[key], key_node.start_mark.line + 1)
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


class _Deep(Exception):
    pass


class _Duplicate(Exception):
    def __init__(self, key, first: int, again: int) -> None:
        super().__init__(key)
        self.key, self.first, self.again = key, first, again


def parse_yaml(text: str, source: str, what: str, limit: int = MAX_DEPTH) -> Any:
    """``yaml.safe_load(text)`` bounded in nesting (no Python tags, no recursion beyond ``limit``).

    Raises:
        DomainparError: nested deeper than ``limit``, or a mapping naming a key twice (naming ``source``).
        yaml.YAMLError: not YAML, for the caller to word.
    """
    loader = _BoundedLoader(text)
    loader.limit = limit
    try:
        value = loader.get_single_data()
    except (_Deep, RecursionError):
        raise _too_deep(source, what, limit) from None
    except _Duplicate as exc:
        raise DomainparError(
            f"{source}: expected {what} that names each key of a mapping once (found {shorten(exc.key)} on line "
            f"{exc.first} and again on line {exc.again}: the first would be lost)"
        ) from None
    finally:
        loader.dispose()
    return check_depth(value, source, what, limit)


def load_yaml(path: str | os.PathLike, what: str, limit: int = MAX_DEPTH, max_bytes: int = MAX_BYTES) -> Any:
    """Read and parse a YAML file bounded in size and nesting (see :func:`parse_yaml`)."""
    path = Path(path)
    return parse_yaml(_read_text(path, what, max_bytes), str(path), what, limit)


__all__ = ["MAX_BYTES", "MAX_DEPTH", "check_depth", "load_json", "load_yaml", "parse_json", "parse_yaml"]
