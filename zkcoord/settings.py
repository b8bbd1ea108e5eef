"""Settings: every knob defined once, with its default, its check and its help.

A config dataclass declares its knobs with :func:`setting`. From that one
definition come the default (the dataclass field's), the validation
(:func:`check`, called from ``__post_init__``) and the command line
(:func:`add_options` to declare the options, :func:`from_args` to build the
config back from them). A command therefore never repeats a default or a help
text, and a value that is wrong is refused the same way whether it came from
Python or from a flag.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Example:
...     retries: int = setting(4, "how many times to retry", minimum=0)
...     def __post_init__(self):
...         check(self)
>>> Example(retries=-1)
Traceback (most recent call last):
...
zkcoord.errors.ConfigError: retries must be at least 0, not -1
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import re
import typing
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from zkcoord.errors import ConfigError

_SPEC = "zkcoord.setting"
# The namespace attribute mapping each option's dest to its flag, so that an
# error in a config built from the command line names the flag.
_FLAGS = "zkcoord_setting_flags"


@dataclasses.dataclass(frozen=True)
class Spec:
    """What :func:`setting` knows of a knob besides its default."""

    help: str
    minimum: Optional[float] = None
    maximum: Optional[float] = None
    choices: Optional[tuple] = None
    non_empty: bool = False  # strings and tuples: the empty one is refused
    flag: Optional[str] = None  # the option's spelling, when not --field-name
    validate: Optional[Callable[[Any], None]] = None  # a further check; raises ConfigError
    cli: bool = True  # False: settable from Python only


def setting(default: Any = dataclasses.MISSING, help: str = "", *,
            factory: Any = dataclasses.MISSING, secret: bool = False, **spec: Any) -> Any:
    """A dataclass field carrying its :class:`Spec` (``spec``'s keywords).
    Leave ``default`` out for a setting every caller must give; a ``secret``
    (a password) is left out of the config's repr."""
    if not help:
        raise TypeError("every setting needs a help text")
    return dataclasses.field(default=default, default_factory=factory, repr=not secret,
                             metadata={_SPEC: Spec(help, **spec)})


def fields(cls: type) -> list[tuple[dataclasses.Field, Spec, Any]]:
    """Each setting of ``cls``: its field, its spec and its resolved type."""
    hints = typing.get_type_hints(cls)
    return [(f, f.metadata[_SPEC], hints[f.name]) for f in dataclasses.fields(cls) if _SPEC in f.metadata]


def default(cls: type, name: str) -> Any:
    """The default of ``cls``'s setting ``name``, for a setting elsewhere that must agree with it."""
    return default_of(next(f for f in dataclasses.fields(cls) if f.name == name))


def default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


# -- checks shared by several settings -----------------------------------------------------------

INT32_MAX = 2**31 - 1
PORT = {"minimum": 0, "maximum": 65535}  # 0: a free port, picked when bound
NODE_ID = {"minimum": 0, "maximum": INT32_MAX}  # Kafka's broker ids; our server ids


def ip_address(value: str) -> None:
    """An address to bind: a literal IP, so that nothing binds where a name resolves."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ConfigError(f"host must be an IP address to bind, not {value!r}") from None


def bind_address() -> Any:
    """The setting of a server's address: loopback unless told otherwise."""
    return setting("127.0.0.1", "address to bind and advertise", validate=ip_address)


# -- validation ---------------------------------------------------------------------------------


def _optional(kind: Any) -> tuple[bool, Any]:
    """(whether None is allowed, the type without None)."""
    args = typing.get_args(kind)
    if typing.get_origin(kind) is typing.Union and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return True, rest[0]
    return False, kind


def _is_sequence(kind: Any) -> bool:
    return typing.get_origin(kind) is tuple


def _type_name(kind: Any) -> str:
    if _is_sequence(kind):
        item = typing.get_args(kind)[0]
        return "a sequence of " + {int: "integers", str: "strings"}.get(item, _type_name(item))
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false",
            Path: "a path"}.get(kind, getattr(kind, "__name__", str(kind)))


def _has_type(value: Any, kind: Any) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if _is_sequence(kind):
        item = typing.get_args(kind)[0]
        return isinstance(value, tuple) and all(_has_type(v, item) for v in value)
    if isinstance(kind, type):
        return isinstance(value, kind)
    return True  # a type this module does not check (a nested config checks itself)


def check(instance: Any) -> None:
    """Validate every setting of a dataclass instance against its spec.

    A sequence given as a list (or any iterable but a string) is stored as a
    tuple, so that a frozen config stays hashable and immutable."""
    for f, spec, kind in fields(type(instance)):
        value = getattr(instance, f.name)
        may_be_none, kind = _optional(kind)
        if value is None:
            if may_be_none:
                continue
            raise ConfigError(f"{f.name} is required")
        if _is_sequence(kind) and not isinstance(value, (str, bytes, tuple)) and isinstance(value, Iterable):
            value = tuple(value)
            object.__setattr__(instance, f.name, value)
        if not _has_type(value, kind):
            raise ConfigError(f"{f.name} must be {_type_name(kind)}, not {value!r}")
        if spec.non_empty and len(value) == 0:
            raise ConfigError(f"{f.name} must not be empty")
        if spec.choices is not None:
            items = value if _is_sequence(kind) else (value,)
            for item in items:
                if item not in spec.choices:
                    raise ConfigError(f"{f.name} must be one of {spec.choices}, not {item!r}")
        if spec.minimum is not None and value < spec.minimum:
            raise ConfigError(f"{f.name} must be at least {spec.minimum}, not {value!r}")
        if spec.maximum is not None and value > spec.maximum:
            raise ConfigError(f"{f.name} must be at most {spec.maximum}, not {value!r}")
        if spec.validate is not None:
            spec.validate(value)


def of(cls: type, config: Any, settings: Mapping[str, Any]) -> Any:
    """``config`` (an instance of ``cls``) with ``settings`` replaced, or a
    new ``cls`` of ``settings`` alone: for constructors that take either."""
    if config is None:
        return cls(**settings)
    if not isinstance(config, cls):
        raise TypeError(f"expected a {cls.__name__}, got {config!r}")
    return dataclasses.replace(config, **settings) if settings else config


# -- the command line -------------------------------------------------------------------------


def flag_of(f: dataclasses.Field, spec: Spec) -> str:
    return spec.flag or "--" + f.name.replace("_", "-")


def help_of(spec: Spec, default: Any) -> str:
    """The option's help: the setting's, with its default where it has one."""
    if default is dataclasses.MISSING or default is None or default == ():
        return spec.help
    shown = ", ".join(map(str, default)) if isinstance(default, tuple) else default
    return f"{spec.help} (default {shown})"


def add_options(parser: argparse.ArgumentParser, cls: type, *, only: Optional[Sequence[str]] = None,
                exclude: Sequence[str] = (), flags: Optional[Mapping[str, str]] = None,
                defaults: Optional[Mapping[str, Any]] = None, optional: Sequence[str] = ()) -> None:
    """Declare an option for each setting of ``cls`` (those in ``only`` if
    given, less ``exclude``). ``flags`` respells options for this command;
    ``defaults`` are this command's own defaults where it differs from a
    program's (the standalone broker listens on Kafka's port); ``optional``
    are options a command may do without although their setting has no
    default (the command then needs no such config, or says why).

    Each option remembers the setting it stands for (``action.setting``), so
    that :func:`from_args` and the tests can find it again."""
    chosen = [(f, spec, kind) for f, spec, kind in fields(cls)
              if spec.cli and f.name not in exclude and (only is None or f.name in only)]
    if only is not None and len(chosen) != len(only):
        raise TypeError(f"{cls.__name__} has no CLI settings {sorted(set(only) - {f.name for f, *_ in chosen})}")
    for f, spec, kind in chosen:
        default = (defaults or {}).get(f.name, default_of(f))
        flag = (flags or {}).get(f.name) or flag_of(f, spec)
        _, kind = _optional(kind)
        options: dict[str, Any] = {"dest": f"{cls.__name__}.{f.name}", "help": help_of(spec, default)}
        if kind is not bool and spec.choices is None:
            options["metavar"] = flag.lstrip("-").upper().replace("-", "_")
        if kind is bool:
            options.update(action=argparse.BooleanOptionalAction, default=default)
        elif _is_sequence(kind):
            # Repeated, and the setting's default only when never given.
            options.update(action="append", type=typing.get_args(kind)[0], default=None)
        else:
            options.update(type=kind, default=None if default is dataclasses.MISSING else default)
        if spec.choices is not None:
            options["choices"] = spec.choices
        if default is dataclasses.MISSING and f.name not in optional:
            options["required"] = True
        action = parser.add_argument(flag, **options)
        action.setting = (cls, f.name)
        known = dict(parser.get_default(_FLAGS) or {})
        known[options["dest"]] = flag
        parser.set_defaults(**{_FLAGS: known})


def from_args(cls: type, args: argparse.Namespace, **fixed: Any) -> Any:
    """``cls`` built from the options :func:`add_options` declared for it,
    plus ``fixed`` values (settings the command sets itself)."""
    values = dict(fixed)
    for f, spec, kind in fields(cls):
        dest = f"{cls.__name__}.{f.name}"
        if f.name in values or not hasattr(args, dest):
            continue
        value = getattr(args, dest)
        if value is None and _is_sequence(_optional(kind)[1]):
            continue  # an append option never given: the setting's default
        values[f.name] = value
    try:
        return cls(**values)
    except ConfigError as exc:
        # Name the flag the user typed, not the field behind it.
        text = original = str(exc)
        for dest, flag in (getattr(args, _FLAGS, None) or {}).items():
            name = dest.partition(".")[2]
            if not dest.startswith(cls.__name__ + "."):
                continue
            if text.startswith(name + " "):
                text = flag + text[len(name):]
            if "_" in name:  # unmistakably a field's name wherever it stands
                text = re.sub(rf"\b{name}\b", flag, text)
        if text == original:
            raise
        raise ConfigError(text) from None


__all__ = ["INT32_MAX", "NODE_ID", "PORT", "Spec", "bind_address", "ip_address", "add_options", "check", "default", "default_of", "fields", "flag_of", "from_args", "help_of", "of", "setting"]
