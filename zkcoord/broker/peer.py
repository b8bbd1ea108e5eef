"""What the broker knows of one client connection: where it comes from, who
it has proved to be (``principal``: ANONYMOUS until SASL or a TLS client
certificate says otherwise) and its SASL exchange."""

from __future__ import annotations

import dataclasses
from typing import Optional

from zkcoord.broker.sasl import SaslSession
from zkcoord.security.principal import ANONYMOUS, Principal


@dataclasses.dataclass
class Peer:
    host: str
    sasl: Optional[SaslSession] = None
    principal: Principal = ANONYMOUS
    closing: bool = False  # answer the request in hand, then close (a failed authentication)

    @property
    def authenticated(self) -> bool:
        return self.principal != ANONYMOUS
