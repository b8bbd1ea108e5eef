"""deploy/ stays true: the systemd unit's command line, filled in from
server.env.example, is one `zkcoord server` accepts, with every setting checked."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from zkcoord import settings
from zkcoord.cli import build_parser
from zkcoord.security.config import SecurityConfig, TlsConfig
from zkcoord.zk.security import ZkSecurity

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def environment() -> dict[str, str]:
    values = {}
    for line in (DEPLOY / "server.env.example").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            values[name] = value
    return values


def exec_start() -> list[str]:
    unit = (DEPLOY / "zkcoord-server.service").read_text()
    command = re.search(r"^ExecStart=(.*?[^\\])$", unit, re.S | re.M).group(1).replace("\\\n", " ")
    env = environment()
    words = []
    for word in shlex.split(command):
        braced = re.fullmatch(r"\$\{(\w+)\}", word)
        if braced:
            words.append(env[braced[1]])  # systemd: one word
        elif word.startswith("$"):
            words.extend(env[word[1:]].split())  # systemd: split on white space
        else:
            words.append(word)
    return words


def test_the_unit_and_its_environment_make_a_command_zkcoord_server_accepts():
    argv = exec_start()
    assert argv[:2] == ["/usr/local/bin/zkcoord", "server"]
    args = build_parser().parse_args(argv[1:])
    tls = settings.from_args(TlsConfig, args)
    assert tls.serves and tls.speaks
    zk = settings.from_args(ZkSecurity, args)
    assert zk.zk_auth == "sasl" and zk.zk_ca_file is not None
    security = settings.from_args(SecurityConfig, args, bridge_password="checked elsewhere")
    assert security.authentication_required and security.authorizing
    assert f"User:{security.bridge_user}" in security.super_users  # the server's own user is a super user
