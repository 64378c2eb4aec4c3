"""Click options generated from frozen config dataclasses: one edit (a field and its docstring) adds a flag.

A field's help text is its docstring (the string literal under it in the class
body), its type gives the click type (``bool`` becomes ``--x/--no-x``,
``X | None`` accepts the literal ``none``), and its value is collected under a
destination that names the field, so a command turns the given flags back into
field overrides without a hand-written table.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import textwrap
import types
import typing
from pathlib import Path
from typing import Any, Callable, Iterable

import click

#: Separates section and field in a generated option's destination (click destinations are identifiers).
_SEP = "__"


@functools.lru_cache(maxsize=None)
def field_docs(cls: type) -> dict[str, str]:
    """``{field: docstring}`` of a dataclass whose fields are each followed by a string literal."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body  # type: ignore[attr-defined]
        for node, following in zip(body, body[1:]):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[node.target.id] = " ".join(following.value.value.split())
    return docs


def _base_type(annotation: Any) -> tuple[Any, bool]:
    """(the type without ``None``, whether ``None`` is allowed)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        options = [t for t in typing.get_args(annotation) if t is not type(None)]
        return options[0], len(options) < len(typing.get_args(annotation))
    return annotation, False


def _click_type(annotation: Any) -> Any:
    base, optional = _base_type(annotation)
    if base is bool:
        return bool
    if base is dict:
        return dict
    if optional:
        return str  # "none" must get through to the config layer, which coerces and checks the value
    return {int: int, float: float, str: str, Path: click.Path(path_type=Path)}.get(base, str)


def dataclass_options(
    cls: type,
    *,
    section: str | None = None,
    flag_name: Callable[[str], str] | None = None,
    exclude: Iterable[str] = (),
    use_defaults: bool = False,
) -> Callable[[Callable], Callable]:
    """A decorator adding one click option per field of ``cls``.

    Args:
        cls: a dataclass whose fields carry docstrings.
        section: prefix of the destinations (``section__field``) and of the dotted names given to ``flag_name``.
        flag_name: ``dotted name → "--flag"`` (default: ``--field-name``).
        exclude: field names that get no option.
        use_defaults: give each option the field's default (shown in ``--help``); otherwise options default to
            None, meaning "not given" (for overriding a config file).
    """
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    skipped = set(exclude)

    def decorate(function: Callable) -> Callable:
        for field in reversed(dataclasses.fields(cls)):
            if field.name in skipped:
                continue
            dotted = f"{section}.{field.name}" if section else field.name
            flag = flag_name(dotted) if flag_name else "--" + field.name.replace("_", "-")
            dest = f"{section}{_SEP}{field.name}" if section else field.name
            kind = _click_type(hints[field.name])
            help_text = docs.get(field.name, "")
            default = field.default if use_defaults and field.default is not dataclasses.MISSING else None
            if kind is bool:
                name = flag[2:]
                decl = f"{flag}/--no-{name}"
                function = click.option(decl, dest, default=default, help=help_text, show_default=use_defaults)(function)
            elif kind is dict:
                # A mapping field: one KEY=VALUE per use of the flag (the config layer reads each VALUE as YAML).
                function = click.option(flag, dest, multiple=True, metavar="KEY=VALUE", help=help_text)(function)
            else:
                function = click.option(
                    flag, dest, type=kind, default=default, help=help_text, show_default=use_defaults and default is not None
                )(function)
        return function

    return decorate


def given_fields(options: dict[str, Any]) -> dict[str, Any]:
    """The options a user gave (not None), keyed by dotted field name (``section.field``)."""
    # A mapping flag never given is an empty tuple, not None.
    return {name.replace(_SEP, ".", 1): value for name, value in options.items() if value is not None and value != ()}
