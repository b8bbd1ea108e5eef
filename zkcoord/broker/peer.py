"""What the broker knows of one client connection: where it comes from, who
it has proved to be (``principal``: ANONYMOUS until SASL or a TLS client
certificate says otherwise), its SASL exchange, and at a gateway's relay
the Kafka broker its requests go on to."""

from __future__ import annotations

import dataclasses
import socket
from typing import Optional

from zkcoord.broker.sasl import SaslSession
from zkcoord.security.principal import ANONYMOUS, Principal


@dataclasses.dataclass
class Peer:
    host: str
    sasl: Optional[SaslSession] = None
    principal: Principal = ANONYMOUS
    closing: bool = False  # answer the request in hand, then close (a failed authentication)
    # At a gateway's relay: the Kafka broker it stands for, and the connection to it.
    relay_to: Optional[int] = None
    upstream: Optional[socket.socket] = None

    @property
    def authenticated(self) -> bool:
        return self.principal != ANONYMOUS
