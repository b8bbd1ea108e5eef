"""Where a command gets a password: a file's first line, standard input or an
environment variable, never its command line (which every user of the
machine can read in the process list)."""

from __future__ import annotations

import os
import sys
from typing import Optional

from zkcoord.errors import ConfigError

PASSWORD_ENV = "ZKCOORD_PASSWORD"
BRIDGE_PASSWORD_ENV = "ZKCOORD_BRIDGE_PASSWORD"


def read_password(path: Optional[str], what: str = "--password-file") -> str:
    """The first line of ``path`` ('-' or None: standard input), without its line end."""
    source = "standard input" if path in (None, "-") else path
    try:
        if path in (None, "-"):
            text = sys.stdin.readline()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.readline()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the password from {what} {path}: {exc}") from None
    password = text.rstrip("\r\n")
    if not password:
        raise ConfigError(f"no password: the first line of {source} is empty")
    return password


def password_for(user: Optional[str], path: Optional[str], user_flag: str = "--user",
                 file_flag: str = "--password-file", env: str = PASSWORD_ENV) -> Optional[str]:
    """The password of a command's ``user_flag``: from ``file_flag``, else
    from ``$env``; None without a user."""
    if user is None:
        if path is not None:
            raise ConfigError(f"{file_flag} without {user_flag}")
        return None
    if path is not None:
        return read_password(path, file_flag)
    password = os.environ.get(env)
    if not password:
        raise ConfigError(f"{user_flag} {user} needs a password: {file_flag} PATH or ${env}")
    return password


class PasswordWithoutTls(ConfigError):
    """A client would send a password readable, over a connection without
    TLS, and was not told it may."""


def refuse_password_without_tls(user: Optional[str], tls: bool, allowed: bool, where: str, allow: str) -> None:
    """Raise :class:`PasswordWithoutTls` if ``user``'s password would cross
    ``where`` in the clear: no TLS there, and ``allowed`` (the ``allow``
    option) not given. A coordinator's RegisterConsumer and ResetOffsets carry
    the password itself, as SASL/PLAIN does; anyone on the path could read it."""
    if user is not None and not tls and not allowed:
        raise PasswordWithoutTls(f"user {user!r}'s password would cross {where} readable, without TLS: "
                                 f"refused (give a CA to speak TLS, or allow it with {allow})")
