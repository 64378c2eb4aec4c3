"""The model factory: every model domainpar trains, runs, exports or verifies is built here, by name.

:func:`build_model` is the one place a model is constructed — training,
inference, export, the exactness check and the benchmarks all call it with a
:class:`~domainpar.model.config.ModelConfig`. ``config.name`` is a built-in
(:data:`BUILTINS`) or a user's class by import path, ``package.module:Class``
or ``path/to/file.py:Class``, implementing the protocol of docs/models.md
(``__init__(config)``, ``forward(graph, exchange)`` giving one logit per local
edge, optional ``options_class``, ``settings``, ``description`` and ``deploy()``)
and keeping to what it must not do there.

Built-ins are named by import path too and imported on first use: a run of the
Interaction Network should not pay for importing PyG.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import math
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from domainpar.errors import DomainparError, FieldError, MachineFault, fault_parts, one_line, shorten
from domainpar.model.config import OPTIONAL_SETTINGS, ModelConfig

#: Built-in models: name → import path of the class.
BUILTINS = {
    "interaction_network": "domainpar.model.interaction_network:InteractionNetwork",
    "interaction_gnn": "domainpar.model.interaction_gnn:InteractionGNN",
    "pyg_gnn": "domainpar.model.pyg_gnn:PygEdgeClassifier",
}


def is_builtin(name: str) -> bool:
    """Whether ``name`` is a built-in model, by name or by its import path: proven exact (local) by the test suite."""
    return BUILTINS.get(name, name) in BUILTINS.values()


@dataclass(frozen=True)
class ModelSource:
    """A user's model by the content of the file that defines its class."""

    digest: str
    """sha256 of the file, hex: what ranks compare."""
    shown: str
    """The file's name and the start of its digest, e.g. ``my_model.py (sha256 0123456789ab)``."""


def model_source(name: str) -> ModelSource | None:
    """The source file of a user's model (None for a built-in, or a module with no file).

    Two nodes with two versions of ``my_model.py`` run two models under one name: ranks compare this digest.
    """
    if is_builtin(name):
        return None
    module, _, _ = name.rpartition(":")
    if module.endswith(".py"):
        source = Path(module)
    else:
        spec = importlib.util.find_spec(module)
        source = Path(spec.origin) if spec is not None and spec.origin else None
    if source is None or not source.is_file():
        return None
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    return ModelSource(digest, f"{source.name} (sha256 {digest[:12]})")


@dataclass(frozen=True)
class ModelSpec:
    """A resolved model name: the class and what it accepts."""

    name: str
    """The name as configured (a built-in, or an import path)."""
    cls: type
    """The model class."""
    options_class: type | None
    """Dataclass of the model's own settings (``config.options``), or None when it has none."""
    settings: frozenset[str]
    """Optional :class:`ModelConfig` settings it honours (see :data:`~domainpar.model.config.OPTIONAL_SETTINGS`)."""
    description: str
    """One line on what it is."""


def _import_path(name: str) -> type:
    """The class named by ``package.module:Class`` or ``path/to/file.py:Class``."""
    module_name, _, attribute = name.rpartition(":")
    if not module_name or not attribute.isidentifier():
        raise FieldError(
            "name",
            f"must be one of {', '.join(BUILTINS)} or an import path package.module:Class (got {shorten(name)})",
        )
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise FieldError("name", f"{shorten(name)}: file {module_name} not found")
            key = "domainpar_user_model_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
            module = sys.modules.get(key)
            if module is None:
                spec = importlib.util.spec_from_file_location(key, path)
                module = importlib.util.module_from_spec(spec)
                sys.modules[key] = module
                try:
                    spec.loader.exec_module(module)
                except BaseException:
                    sys.modules.pop(key, None)
                    raise
        else:
            module = importlib.import_module(module_name)
    except FieldError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the user's module raises while importing, name it in one line
        if name in BUILTINS.values():
            # Our own module: what fails in it (a dependency, numba's cache, a damaged file) is the installation's
            # fault, not that of the option that chose it (which the user may not even have given).
            found = fault_parts(exc)
            kind, what = found if found is not None else ("install", f"{type(exc).__name__}: {one_line(exc, limit=160)}")
            raise MachineFault(f"the built-in model {module_name} does not import: {what}", kind=kind) from exc
        raise FieldError("name", f"{shorten(name)}: cannot import {module_name} ({one_line(exc, limit=160)})") from None
    cls = getattr(module, attribute, None)
    if cls is None:
        raise FieldError("name", f"{shorten(name)}: module {module_name} has no attribute {attribute}")
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise FieldError("name", f"{shorten(name)}: must name a torch.nn.Module subclass (got {type(cls).__name__})")
    return cls


def resolve(name: str) -> ModelSpec:
    """The :class:`ModelSpec` of a model name.

    Raises:
        FieldError: (field ``name``) an unknown name, an import that fails, or something that is not a module class.
        MachineFault: a built-in model that does not import (a fault of the installation, not of the name).
    """
    cls = _import_path(BUILTINS.get(name, name))
    options_class = getattr(cls, "options_class", None)
    if options_class is not None and not dataclasses.is_dataclass(options_class):
        raise FieldError("name", f"{shorten(name)}: options_class must be a dataclass (got {options_class!r:.60})")
    settings = frozenset(getattr(cls, "settings", frozenset()))
    unknown = sorted(settings - set(OPTIONAL_SETTINGS))
    if unknown:
        raise FieldError("name", f"{shorten(name)}: settings names {unknown}, which are not ModelConfig settings")
    doc = (cls.__doc__ or "").strip().splitlines()
    return ModelSpec(name, cls, options_class, settings, getattr(cls, "description", doc[0] if doc else cls.__name__))


#: Scalar option types: whether a value fits, and what the message says is expected.
_SCALARS = {
    bool: (lambda v: isinstance(v, bool), "true or false"),
    int: (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    float: (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v), "a finite number"),
    str: (lambda v: isinstance(v, str), "a string"),
}


def _option_value(value: Any, annotation: Any, key: str) -> Any:
    """``value`` as the option's declared type (bool, int, float, str, tuple of those, or ``X | None``)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        if value is None and type(None) in args:
            return None
        annotation = next(a for a in args if a is not type(None))
        origin = typing.get_origin(annotation)
    if origin is tuple:
        item = typing.get_args(annotation)[0]
        items = [value] if isinstance(value, (str, int, float)) else value
        if not isinstance(items, (list, tuple)):
            raise FieldError(f"options.{key}", f"must be a list (got {shorten(value)})")
        return tuple(_option_value(v, item, key) for v in items)
    if annotation not in _SCALARS:
        return value
    fits, expected = _SCALARS[annotation]
    if not fits(value):
        raise FieldError(f"options.{key}", f"must be {expected} (got {shorten(value)})")
    return float(value) if annotation is float else value


def model_options(spec: ModelSpec, given: dict[str, Any]) -> Any:
    """The model's options dataclass built from ``given`` (None for a model without options).

    Raises:
        FieldError: (field ``options.<key>``) an unknown key, a value of the wrong type, or one the dataclass refuses.
    """
    if spec.options_class is None:
        if given:
            raise FieldError(f"options.{sorted(given)[0]}", f"is not an option of model {spec.name} (it has none)")
        return None
    hints = typing.get_type_hints(spec.options_class)
    known = [f.name for f in dataclasses.fields(spec.options_class)]
    values = {}
    for key, value in given.items():
        if key not in known:
            raise FieldError(f"options.{key}", f"is not an option of model {spec.name} (expected one of {', '.join(known)})")
        values[key] = _option_value(value, hints[key], key)
    try:
        return spec.options_class(**values)
    except FieldError as exc:
        raise FieldError(f"options.{exc.field}", exc.message) from None
    except (TypeError, ValueError) as exc:
        raise FieldError("options", f"of model {spec.name} are not valid ({one_line(exc, limit=160)})") from None


def _plain(value: Any) -> Any:
    """Tuples as lists, recursively (YAML, JSON and checkpoints take lists)."""
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def check_config(config: ModelConfig) -> ModelConfig:
    """Validate ``config`` against its model and return it with every option written out (defaults filled in).

    Raises:
        FieldError: naming the key: an unknown model, a shared setting the model does not honour set to anything
            but its default, or a bad option.
    """
    spec = resolve(config.name)
    defaults = ModelConfig()
    for name in OPTIONAL_SETTINGS:
        if name not in spec.settings and getattr(config, name) != getattr(defaults, name):
            honoured = ", ".join(sorted(spec.settings)) or "none of them"
            raise FieldError(
                name, f"is not a setting of model {config.name} (got {shorten(getattr(config, name))}; it honours {honoured})"
            )
    options = model_options(spec, config.options)
    complete = {} if options is None else {f.name: _plain(getattr(options, f.name)) for f in dataclasses.fields(options)}
    return dataclasses.replace(config, options=complete)


def build_model(config: ModelConfig) -> nn.Module:
    """The model of ``config``: the one constructor of every domainpar model.

    Raises:
        DomainparError: an invalid config (one line naming ``model.<key>``), or a class that fails to construct.
    """
    try:
        complete = check_config(config)
    except FieldError as exc:
        raise DomainparError(f"model.{exc.field} {exc.message}") from None
    spec = resolve(complete.name)
    try:
        model = spec.cls(complete)
    except FieldError as exc:
        raise DomainparError(f"model.{exc.field} {exc.message}") from None
    except DomainparError:
        raise
    except Exception as exc:  # noqa: BLE001 - a user's constructor: name it in one line, its traceback is theirs
        raise DomainparError(f"model.name {shorten(complete.name)}: constructing the model failed ({one_line(exc, limit=200)})") from exc
    if not isinstance(model, nn.Module):
        raise DomainparError(f"model.name {shorten(complete.name)}: must construct a torch.nn.Module (got {type(model).__name__})")
    return model


__all__ = [
    "BUILTINS", "ModelSource", "ModelSpec", "build_model", "check_config", "is_builtin", "model_options",
    "model_source", "resolve",
]
