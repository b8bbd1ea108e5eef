"""Finding the JDK's programs (java, javac): the one under $JAVA_HOME if it
is set and has them, else the one on PATH, as the JDK's own scripts do."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Optional


def java_tool(name: str) -> Optional[str]:
    """The path of the JDK program ``name``, or None if there is none."""
    home = os.environ.get("JAVA_HOME")
    candidates = [Path(home) / "bin" / name] if home else []
    found = shutil.which(name)
    if found:
        candidates.append(Path(found))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None
