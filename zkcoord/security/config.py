"""The authentication and authorization settings a server (its coordinator
and its broker) and a standalone broker share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from zkcoord.errors import ConfigError
from zkcoord.security import scram
from zkcoord.security.principal import Principal
from zkcoord.settings import check, setting


def _principals(values) -> None:
    for value in values:
        if ":" not in value:
            raise ConfigError(f"super_users: {value!r} is not TYPE:NAME (User:admin)")
        Principal.parse(value)


@dataclass(frozen=True)
class SecurityConfig:
    sasl_mechanisms: tuple[str, ...] = setting((), "a SASL mechanism the broker offers (repeatable; "
                                                   "none: no SASL, or all when authentication is "
                                                   "required)",
                                               choices=scram.MECHANISMS, flag="--sasl-mechanism")
    authentication_required: bool = setting(False, "refuse every request of a client that has not "
                                                   "authenticated (broker: SASL; coordinator: a credential "
                                                   "in RegisterConsumer)")
    authorizer: str = setting("off", "off: everyone may do everything; on: only what an ACL in "
                                     "ZooKeeper (zkcoord acls) allows, or a super user",
                              choices=("off", "on"))
    super_users: tuple[str, ...] = setting((), "a principal (User:admin) the authorizer lets do anything "
                                               "(repeatable)", flag="--super-user", validate=_principals)

    # The broker's own credential with the coordinators: it registers each stock
    # client's member on behalf of the principal that client authenticated as.
    bridge_user: Optional[str] = setting(None, "the user (a super user) the broker registers stock clients' "
                                               "members with, on their behalf", non_empty=True)
    bridge_password: Optional[str] = setting(None, "bridge_user's password", non_empty=True, cli=False,
                                             secret=True)

    def __post_init__(self) -> None:
        check(self)
        if (self.bridge_user is None) != (self.bridge_password is None):
            raise ConfigError("the bridge's credential needs both a user and a password")
        if self.authentication_required and self.sasl_mechanisms == ():
            # Only the broker reads sasl_mechanisms; the coordinator checks its
            # credential whatever they are, so this is no refusal but a default.
            object.__setattr__(self, "sasl_mechanisms", scram.MECHANISMS)

    @property
    def authorizing(self) -> bool:
        return self.authorizer == "on"

    @property
    def super_principals(self) -> frozenset:
        return frozenset(Principal.parse(p) for p in self.super_users)


def add_options(parser) -> None:
    """The security options of a command that runs a broker or a server."""
    from zkcoord import settings

    settings.add_options(parser, SecurityConfig)
    parser.add_argument("--bridge-password-file", default=None, metavar="PATH",
                        help="file whose first line is --bridge-user's password "
                             "(default: $ZKCOORD_BRIDGE_PASSWORD)")


def from_args(args) -> SecurityConfig:
    from zkcoord import settings
    from zkcoord.security.secrets import BRIDGE_PASSWORD_ENV, password_for

    password = password_for(getattr(args, "SecurityConfig.bridge_user", None), args.bridge_password_file,
                            "--bridge-user", "--bridge-password-file", BRIDGE_PASSWORD_ENV)
    return settings.from_args(SecurityConfig, args, bridge_password=password)
