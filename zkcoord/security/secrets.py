"""Where a command gets a password: a file's first line, standard input or an
environment variable, never its command line (which every user of the
machine can read in the process list); and the one check every reader of a
password or private key file makes: that no user but its owner can read it
(:func:`check_private`).

A secret file that others can read is refused, as ssh refuses such a key,
rather than used with a warning: the secret is exposed from the moment the
file was written, a warning in a server's log is read (if ever) after the
harm, and the fix (``chmod 600``) takes a second. Where others reading it is
deliberate (a container's secret mounted 0444, a key shared with a service
group), ``ZKCOORD_ALLOW_READABLE_SECRETS=1`` lets the process use it, and it
says so in its log.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
from pathlib import Path
from typing import Optional, Union

from zkcoord.errors import ConfigError

log = logging.getLogger(__name__)

PASSWORD_ENV = "ZKCOORD_PASSWORD"
BRIDGE_PASSWORD_ENV = "ZKCOORD_BRIDGE_PASSWORD"
# "1": use password and key files that users other than their owner can read
# (logged), instead of refusing them.
ALLOW_READABLE_ENV = "ZKCOORD_ALLOW_READABLE_SECRETS"


class ReadableSecret(ConfigError):
    """A password or private key in a file that users other than its owner may read."""


def _readers(mode: int) -> Optional[str]:
    """Who besides the owner may read a file of ``mode``, in words (None: nobody)."""
    group, others = bool(mode & stat.S_IRGRP), bool(mode & stat.S_IROTH)
    if group and others:
        return "its group and every other user"
    if group:
        return "its group"
    if others:
        return "every other user"
    return None


def check_private(path: Union[str, Path], what: str) -> None:
    """Raise :class:`ReadableSecret` if users other than its owner may read
    the secret file ``path`` (``what`` names it: the option that gave it),
    unless ``$ZKCOORD_ALLOW_READABLE_SECRETS`` is 1 (then it is logged).
    A file that cannot be stat'ed passes: its reader says why it cannot
    read it. Only regular files are judged: a pipe or a terminal (standard
    input, a shell's ``<(...)``) keeps nothing on disk for others to read."""
    try:
        status = os.stat(path)
    except OSError:
        return
    if not stat.S_ISREG(status.st_mode):
        return
    readers = _readers(status.st_mode)
    if readers is None:
        return
    exposed = f"{what} {path} can be read by {readers} (mode {stat.S_IMODE(status.st_mode):04o})"
    if os.environ.get(ALLOW_READABLE_ENV) == "1":
        log.warning("%s: used anyway, as %s=1 allows", exposed, ALLOW_READABLE_ENV)
        return
    raise ReadableSecret(f"{exposed}, and whoever reads it can use it: refused. Make it its owner's alone "
                         f"(chmod 600 {path}), or set {ALLOW_READABLE_ENV}=1 to use it anyway")


def write_private(path: Union[str, Path], data: Union[str, bytes]) -> None:
    """Write ``data`` to ``path``, readable and writable by its owner alone
    from the first byte on (a write then a chmod leaves a moment in which
    others may open it), whatever the umask and whatever mode a file already
    there had."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # O_CREAT's mode applies only to a file it creates
        with os.fdopen(fd, "wb", closefd=False) as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
    finally:
        os.close(fd)


def read_password(path: Optional[str], what: str = "--password-file") -> str:
    """The first line of ``path`` ('-' or None: standard input), without its
    line end; a file others may read is refused (:func:`check_private`)."""
    source = "standard input" if path in (None, "-") else path
    if path not in (None, "-"):
        check_private(path, what)
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
