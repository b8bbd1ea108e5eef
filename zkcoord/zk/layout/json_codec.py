"""JSON node contents: reading them with typed field access, writing them as Kafka does.

A node is read as one JSON object (:func:`_load`) and its fields through
:class:`_Fields`, whose every failure is a LayoutError naming the node and the
field. Writing is compact UTF-8 JSON (:func:`encode_json`) whose key order, for
the nodes Kafka builds from Scala hash maps, comes from :func:`_scala_map_order`.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Mapping

from zkcoord.zk.layout.names import _INT32_MAX, _INT32_MIN, LayoutError, _is_int


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _load(data: object, where: str) -> dict[str, Any]:
    """Parse a node's bytes as one JSON object."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise LayoutError(f"{where}: expected bytes, got {type(data).__name__}")
    try:
        text = bytes(data).decode("utf-8")
        obj = json.loads(text, parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise LayoutError(f"{where}: not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise LayoutError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    return obj


def encode_json(obj: Mapping[str, Any]) -> bytes:
    """Compact UTF-8 JSON, key order as given: the way Kafka's Jackson writes it."""
    try:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise LayoutError(f"cannot encode as JSON: {exc}") from None


class _Fields:
    """Typed access to one decoded JSON object; every failure names the node and field."""

    def __init__(self, obj: Mapping[str, Any], where: str):
        self.obj = obj
        self.where = where

    def fail(self, key: str, problem: str) -> LayoutError:
        return LayoutError(f"{self.where}: field {key!r} {problem}")

    def has(self, key: str) -> bool:
        return key in self.obj

    def get(self, key: str) -> Any:
        if key not in self.obj:
            raise self.fail(key, "is missing")
        return self.obj[key]

    def integer(self, key: str, low: int = _INT32_MIN, high: int = _INT32_MAX) -> int:
        value = self.get(key)
        if not _is_int(value) or not low <= value <= high:
            raise self.fail(key, f"must be an integer in [{low}, {high}], got {value!r}")
        return value

    def string(self, key: str, nullable: bool = False) -> str | None:
        value = self.get(key)
        if value is None and nullable:
            return None
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string, got {value!r}")
        return value

    def mapping(self, key: str) -> dict[str, Any]:
        value = self.get(key)
        if not isinstance(value, dict):
            raise self.fail(key, f"must be a JSON object, got {value!r}")
        return value

    def ints(self, key: str, value: Any = None, low: int = 0) -> tuple[int, ...]:
        value = self.get(key) if value is None else value
        if not isinstance(value, list) or not all(
            _is_int(v) and low <= v <= _INT32_MAX for v in value
        ):
            raise self.fail(key, f"must be a list of integers in [{low}, {_INT32_MAX}], got {value!r}")
        return tuple(value)

    def version(self, known: int) -> int:
        version = self.integer("version")
        if not 1 <= version <= known:
            raise self.fail("version", f"is {version}; versions 1 to {known} are known")
        return version


@contextmanager
def _prefix_errors(where: str) -> Iterator[None]:
    """Put ``where`` (the node, perhaps a field) in front of a LayoutError raised
    inside: the checks of a value built from a node's fields do not know the node."""
    try:
        yield
    except LayoutError as exc:
        raise LayoutError(f"{where}: {exc}") from None


# Kafka builds its nodes' JSON objects from Scala hash maps, so the key order Jackson
# writes is the map's iteration order. Kafka 3.x (built for Scala 2.13, the
# distribution Kafka recommends) uses mutable.HashMap: a table of 2**k buckets,
# bucket index = spread(hash) & (size - 1), each bucket sorted by spread hash.
# Reproducing that order is what makes our bytes equal Kafka's.


def _java_string_hash(text: str) -> int:
    units = text.encode("utf-16-be")  # Java hashes UTF-16 code units
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h


def _spread(key: str) -> int:
    h = _java_string_hash(key)
    h ^= h >> 16
    return h - 2**32 if h >= 2**31 else h  # compared as a signed Java int


def _scala_map_order(initial: Iterable[str], added: Iterable[str] = ()) -> list[str]:
    """Iteration order of ``mutable.HashMap(initial...)`` after ``+= added`` (Scala 2.13)."""
    initial = list(initial)
    keys = initial + list(added)
    if initial:
        size = 1 << max(2, (int((len(initial) + 1) / 0.75) - 1).bit_length())
    else:
        size = 16
    count = 0
    for _ in keys:
        if count + 1 >= int(size * 0.75):
            size *= 2
        count += 1
    return sorted(keys, key=lambda k: (_spread(k) & (size - 1), _spread(k)))
