"""The coordinator protocol's conformance vectors (wire/vectors.json) as
messages of this package, and the tool that writes their bytes.

A vector's ``fields`` are what its message carries in its version, as JSON:
integers, strings, booleans, null (an absent optional tail), arrays, and
objects for array entries (NodeAddress, TopicPartition, TopicPartitionOffset,
told apart by their keys). The committed file is the contract:
tests/unit/test_wire_vectors.py checks this package against it. When a
vector is added, the tool fills in its ``type`` and ``frame`` from the rest:

    python -m zkcoord.wire.vectors wire/vectors.json

and prints the vectors whose bytes it wrote, to be checked by hand against
wire/README.md before they are committed.
"""

import argparse
import dataclasses
import json
import sys
from enum import IntEnum
from pathlib import Path

from zkcoord.wire.codec import encode
from zkcoord.wire.fields import Implied
from zkcoord.wire.messages import ENDPOINT, MEMBER, REGISTRY, TP, TPO

MESSAGES = {cls.__name__: cls for cls in REGISTRY.values()}
# An array entry's class, by the names of its fields.
ENTRIES = {frozenset(entry.names): entry.cls for entry in (ENDPOINT, MEMBER, TP, TPO)}
# The order of a valid vector's keys in the file.
VALID_KEYS = ("name", "message", "type", "version", "correlation_id", "fields", "frame", "note")


def carried_fields(cls, version):
    """The fields of ``cls`` that ``version`` puts on the wire, in order,
    itself or derived (version 0's topic_count from topics and pattern): the
    keys of a vector's ``fields``. A field the version fixes (Implied) or
    lacks is not carried."""
    return tuple(sub.name for sub in cls.LAYOUTS[version].subcons
                 if sub.name in cls.__dataclass_fields__
                 and not isinstance(sub.subcon, Implied))


def to_json(value):
    """A field's value as a vector holds it."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, IntEnum):
        return int(value)
    if isinstance(value, int):
        return value
    # An entry may be a NamedTuple (TopicPartition): tell it from an array by its fields.
    names = getattr(value, "_fields", None)
    if names is None and dataclasses.is_dataclass(value):
        names = [f.name for f in dataclasses.fields(value)]
    if names is not None:
        return {name: to_json(getattr(value, name)) for name in names}
    return [to_json(item) for item in value]


def from_json(value):
    """A vector's field value as this package's."""
    if isinstance(value, list):
        return tuple(from_json(item) for item in value)
    if isinstance(value, dict):
        cls = ENTRIES.get(frozenset(value))
        if cls is None:
            raise ValueError(f"no array entry has the fields {sorted(value)}")
        return cls(**{name: from_json(item) for name, item in value.items()})
    return value


def fields_of(message, version):
    """``message``'s fields as a vector of ``version`` holds them."""
    return {name: to_json(getattr(message, name))
            for name in carried_fields(type(message), version)}


def message_of(name, fields):
    """The message a vector names, with its fields (the others default)."""
    return MESSAGES[name](**{key: from_json(value) for key, value in fields.items()})


def fill(doc):
    """Set ``type`` and ``frame`` of every valid vector from its message,
    version, correlation id and fields; the names of those that changed."""
    changed = []
    for i, vector in enumerate(doc["valid"]):
        cls = MESSAGES[vector["message"]]
        frame = encode(message_of(vector["message"], vector["fields"]),
                       vector["correlation_id"], vector["version"]).hex()
        if (vector.get("type"), vector.get("frame")) != (int(cls.TYPE), frame):
            vector["type"], vector["frame"] = int(cls.TYPE), frame
            changed.append(vector["name"])
        ordered = {key: vector[key] for key in VALID_KEYS if key in vector}
        doc["valid"][i] = {**ordered, **vector}
    return changed


def render(doc):
    """The file's text: one key of a vector a line, its value on that line."""
    lines = ["{"]
    for i, (key, value) in enumerate(doc.items()):
        comma = "," if i < len(doc) - 1 else ""
        if isinstance(value, list) and value and isinstance(value[0], dict):
            lines.append(f"  {json.dumps(key)}: [")
            for j, item in enumerate(value):
                lines.append("    {")
                entries = [f"      {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}"
                           for k, v in item.items()]
                lines.append(",\n".join(entries))
                lines.append("    }" + ("," if j < len(value) - 1 else ""))
            lines.append("  ]" + comma)
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m zkcoord.wire.vectors",
        description="Fill in the type and frame of every valid vector in a vectors file.")
    parser.add_argument("path", type=Path, help="the vectors file, e.g. wire/vectors.json")
    args = parser.parse_args(argv)
    doc = json.loads(args.path.read_text(encoding="utf-8"))
    changed = fill(doc)
    args.path.write_text(render(doc), encoding="utf-8")
    for name in changed:
        print(f"bytes written: {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
