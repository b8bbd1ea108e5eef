"""Where zkcoord keeps what it builds or fetches once per machine: the
Spark source's jar where the package's directory is read-only, and the jars
fetched from Maven Central for benchmarks and tests. ``$XDG_CACHE_HOME``,
else ``~/.cache``, as the XDG base directory specification says.
"""

from __future__ import annotations

import os
from pathlib import Path


def user_cache() -> Path:
    """zkcoord's directory in the user's cache (not created here)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "zkcoord"
