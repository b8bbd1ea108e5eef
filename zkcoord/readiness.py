"""Readiness files: how a zkcoord process tells whoever started it that it serves.

A server started with ``--port-file PATH`` (and port 0, so the kernel picks a
free port and nobody races for one) writes the ports it bound as one JSON
object, atomically, once it accepts connections. A supervisor or the test
harness waits for the file instead of probing ports.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Union


def write_port_file(path: Union[str, Path], **ports: int) -> None:
    """Write ``ports`` (name -> port) to ``path`` in one step (write, then rename)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(ports, sort_keys=True))
    os.replace(tmp, path)


def read_port_file(path: Union[str, Path]) -> dict[str, int]:
    """The ports a process wrote; raises OSError or ValueError while it has not."""
    value = json.loads(Path(path).read_text())
    if isinstance(value, int):  # a bare port number: one port, called "port"
        return {"port": value}
    if not isinstance(value, dict):
        raise ValueError(f"{path} holds no ports")
    return {str(k): int(v) for k, v in value.items()}
