"""zkcoord.wire against the protocol's contract in wire/: every valid vector
parsed and built, every invalid frame refused with its code, every
inexpressible message refused; and the contract covering the implementation:
a vector and a documented example for every message and version, errors.json
and the document's table equal to the error codes."""

import json
import re
from pathlib import Path

import pytest

from zkcoord import wire
from zkcoord.wire import ErrorCode, FrameDecoder, decode, encode
from zkcoord.wire.vectors import fields_of, message_of

ROOT = Path(__file__).resolve().parents[2]
WIRE = ROOT / "wire"
VECTORS = json.loads((WIRE / "vectors.json").read_text(encoding="utf-8"))
ERRORS = json.loads((WIRE / "errors.json").read_text(encoding="utf-8"))["codes"]
DOCUMENT = (WIRE / "README.md").read_text(encoding="utf-8")
VALID, INVALID, INEXPRESSIBLE = VECTORS["valid"], VECTORS["invalid"], VECTORS["inexpressible"]
MESSAGES_AND_VERSIONS = {(cls.__name__, version) for cls in wire.REGISTRY.values() for version in cls.LAYOUTS}


def by_name(vectors):
    return pytest.mark.parametrize("vector", vectors, ids=[v["name"] for v in vectors])


def test_vector_names_are_unique():
    names = [v["name"] for v in VALID + INVALID + INEXPRESSIBLE]
    assert len(names) == len(set(names))


@by_name(VALID)
def test_parse(vector):
    data = bytes.fromhex(vector["frame"])
    assert int.from_bytes(data[:4], "big", signed=True) == len(data) - 4
    frame = decode(data[4:])
    assert (frame.type, frame.version, frame.correlation_id) == (
        vector["type"], vector["version"], vector["correlation_id"])
    assert type(frame.message).__name__ == vector["message"]
    # As JSON text, so that order and types count (true is not 1).
    assert json.dumps(fields_of(frame.message, frame.version)) == json.dumps(vector["fields"])
    # And the fields the version does not carry have their defaults.
    assert frame.message == message_of(vector["message"], vector["fields"])


@by_name(VALID)
def test_build(vector):
    message = message_of(vector["message"], vector["fields"])
    assert encode(message, vector["correlation_id"], vector["version"]).hex() == vector["frame"]


@by_name(INVALID)
def test_invalid_frames_are_refused_with_their_code(vector):
    decoder = FrameDecoder(max_frame_size=VECTORS["max_frame_size"])
    with pytest.raises(wire.WireError) as refused:
        decoder.feed(bytes.fromhex(vector["frame"]))
    assert refused.value.code == vector["error_code"]
    assert ErrorCode(vector["error_code"]).name == vector["error"]
    assert (refused.value.correlation_id or 0) == vector["correlation_id"]  # what the ErrorResponse carries
    assert refused.value.frames == []
    assert decoder.buffered == 0


@by_name(INEXPRESSIBLE)
def test_inexpressible_messages_are_refused(vector):
    assert (vector["error_code"], vector["error"]) == (ErrorCode.UNSUPPORTED_VERSION, "UNSUPPORTED_VERSION")
    message = message_of(vector["message"], vector["fields"])
    with pytest.raises(wire.UnsupportedVersion):
        encode(message, 1, vector["version"])


def test_every_message_and_version_has_a_vector():
    covered = {(v["message"], v["version"]) for v in VALID}
    missing = sorted(MESSAGES_AND_VERSIONS - covered)
    assert not missing, ("no vector in wire/vectors.json for these (wire/README.md says how to add one): "
                         f"{missing}")
    assert covered <= MESSAGES_AND_VERSIONS


def test_errors_json_is_the_error_codes():
    assert [(e["code"], e["name"]) for e in ERRORS] == sorted((int(c), c.name) for c in ErrorCode)
    for entry in ERRORS:
        assert set(entry) == {"code", "name", "retriable", "meaning"} and entry["meaning"]
        if entry["code"] == ErrorCode.NONE:
            assert entry["retriable"] is False
        else:
            assert wire.error_for(entry["code"]).retriable is entry["retriable"], entry["name"]


def test_the_documents_error_table_is_errors_json():
    section = DOCUMENT.split("\n## Error codes\n")[1].split("\n## ")[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in section.splitlines() if re.match(r"\| -?\d+ \|", line)]
    assert rows == [[str(e["code"]), e["name"], "yes" if e["retriable"] else "no", e["meaning"]] for e in ERRORS]


EXAMPLE = re.compile(r"^Example: vector `(?P<name>[^`]+)`:\n\n```\n(?P<dump>.*?)```", re.M | re.S)


def document_examples():
    """(vector name, the example's bytes as hex): each dump line's bytes come
    before its first double space."""
    return [(m["name"], "".join(line.split("  ")[0].replace(" ", "") for line in m["dump"].splitlines()))
            for m in EXAMPLE.finditer(DOCUMENT)]


def test_the_documents_examples_are_vectors():
    frames = {v["name"]: v for v in VALID}
    examples = document_examples()
    for name, dump in examples:
        assert dump == frames[name]["frame"], name
    shown = {(frames[name]["message"], frames[name]["version"]) for name, _ in examples}
    assert shown == MESSAGES_AND_VERSIONS


def test_the_contract_is_no_python_package():
    # Beside zkcoord/ and never installed: no module in it, and none imports it.
    assert not list(WIRE.rglob("*.py"))
    importing = re.compile(r"^\s*(import wire\b|from wire\b)", re.M)
    offenders = [str(path.relative_to(ROOT)) for top in ("zkcoord", "tests", "bench")
                 for path in (ROOT / top).rglob("*.py") if importing.search(path.read_text(encoding="utf-8"))]
    assert offenders == []
