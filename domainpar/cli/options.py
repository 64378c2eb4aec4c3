"""Click options generated from frozen config dataclasses: one edit (a field and its docstring) adds a flag.

A field's help text is its docstring (the string literal under it in the class
body), its type gives the click type (``bool`` becomes ``--x/--no-x``,
``X | None`` accepts the literal ``none`` and is shown as ``INTEGER|none``),
its default is shown in ``--help`` even where the option itself defaults to
"not given" (so a config file's value is not overridden), a field with a fixed
set of values shows them (``[domain|sectors|single]``), and its value is
collected under a destination that names the field, so a command turns the
given flags back into field overrides without a hand-written table.
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
from typing import Any, Callable, Iterable, Mapping

import click

from domainpar.cli.checks import DomainFloat, DomainInt, FiniteFloat
from domainpar.domains import Domain

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


class OptionalValue(click.ParamType):
    """An ``X | None`` field's option: a value of the base type, or the literal ``none`` (passed on as text, so a
    command line can clear a value its config file sets; the config layer turns it into None)."""

    def __init__(self, base: click.ParamType) -> None:
        self.base = base
        self.name = f"{base.name}|none"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:  # noqa: D102 - click's protocol
        return f"{self.base.name.upper()}|none"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:  # noqa: D102
        if isinstance(value, str) and value.strip().lower() in ("none", "null"):
            return "none"
        return self.base.convert(value, param, ctx)


class ShownChoices(click.ParamType):
    """Text whose allowed values are shown in ``--help`` (``[a|b|c]``); the config layer checks them, with the
    same one-line message for a flag and a config file."""

    name = "choice"

    def __init__(self, choices: Iterable[str]) -> None:
        self.choices = tuple(choices)

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:  # noqa: D102
        return "[" + "|".join(self.choices) + "]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:  # noqa: D102
        return value


class FieldOption(click.Option):
    """An option whose ``--help`` shows its field's default as ``[default: 64]``, also when the option itself
    defaults to "not given" (click prints a text default in parentheses: ``[default: (64)]``)."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:  # noqa: D102 - click's protocol
        record = super().get_help_record(ctx)
        if record is None or not isinstance(self.show_default, str):
            return record
        return record[0], record[1].replace(f"default: ({self.show_default})", f"default: {self.show_default}")


_BASE_TYPES = {int: click.INT, float: click.FLOAT, str: click.STRING}


def _click_type(annotation: Any, choices: Iterable[str] | None = None, domain: Domain | None = None) -> Any:
    base, optional = _base_type(annotation)
    if base is bool:
        return bool
    if base is dict:
        return dict
    if base is Path:
        kind = click.Path(path_type=Path)
    elif choices is not None:
        kind = ShownChoices(choices)
    elif base is float:
        # Finite always (--lr inf, --timeout nan); in the field's domain when it has one (--lr 1e300, --eps -1).
        kind = DomainFloat(domain) if domain is not None else FiniteFloat()
    elif base is int and domain is not None:
        kind = DomainInt(domain)
    else:
        kind = _BASE_TYPES.get(base, click.STRING)
    return OptionalValue(kind) if optional else kind


def _default_text(value: Any, flag: str, kind: Any) -> str:
    """How ``--help`` shows a field's default: ``none``, the bool flag that is on, or the value."""
    if value is None:
        return "none"
    if kind is bool:
        return flag[2:] if value else "no-" + flag[2:]
    return str(value)


def dataclass_options(
    cls: type,
    *,
    section: str | None = None,
    flag_name: Callable[[str], str] | None = None,
    exclude: Iterable[str] = (),
    use_defaults: bool = False,
    choices: Mapping[str, Iterable[str]] | None = None,
    domains: Mapping[str, Domain] | None = None,
) -> Callable[[Callable], Callable]:
    """A decorator adding one click option per field of ``cls``.

    Args:
        cls: a dataclass whose fields carry docstrings.
        section: prefix of the destinations (``section__field``) and of the dotted names given to ``flag_name``.
        flag_name: ``dotted name → "--flag"`` (default: ``--field-name``).
        exclude: field names that get no option.
        use_defaults: give each option the field's default; otherwise options default to None, meaning "not
            given" (for overriding a config file). ``--help`` shows the field's default either way.
        choices: field name → its allowed values, shown in ``--help``.
        domains: field name → its numeric :class:`~domainpar.domains.Domain`, checked while the command line is
            parsed (as the dataclass checks it for a config file).
    """
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    skipped = set(exclude)
    choices = dict(choices or {})
    domains = dict(domains or {})

    def decorate(function: Callable) -> Callable:
        for field in reversed(dataclasses.fields(cls)):
            if field.name in skipped:
                continue
            dotted = f"{section}.{field.name}" if section else field.name
            flag = flag_name(dotted) if flag_name else "--" + field.name.replace("_", "-")
            dest = f"{section}{_SEP}{field.name}" if section else field.name
            kind = _click_type(hints[field.name], choices.get(field.name), domains.get(field.name))
            help_text = docs.get(field.name, "")
            has_default = field.default is not dataclasses.MISSING
            default = field.default if use_defaults and has_default else None
            shown = _default_text(field.default, flag, kind) if has_default and field.default != "" else False
            if kind is bool:
                decl, extra = f"{flag}/--no-{flag[2:]}", {"default": default, "show_default": shown}
            elif kind is dict:
                # A mapping field: one KEY=VALUE per use of the flag (the config layer reads each VALUE as YAML).
                decl, extra = flag, {"multiple": True, "metavar": "KEY=VALUE", "show_default": "none"}
            else:
                decl, extra = flag, {"type": kind, "default": default, "show_default": shown}
            function = click.option(decl, dest, help=help_text, cls=FieldOption, **extra)(function)
        return function

    return decorate


def given_fields(options: dict[str, Any]) -> dict[str, Any]:
    """The options a user gave (not None), keyed by dotted field name (``section.field``)."""
    # A mapping flag never given is an empty tuple, not None.
    return {name.replace(_SEP, ".", 1): value for name, value in options.items() if value is not None and value != ()}
