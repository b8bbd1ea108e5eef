"""Who a broker's client is and what it may do: SASL on the Kafka protocol
(its handshake, its tokens, bare or framed) and the authorizer's answers
over the cluster's ACLs, as the request handlers ask them.

A part of :class:`~zkcoord.broker.server.Broker`, whose configuration,
logins and ACLs it reads; the decisions are ``sasl.py``'s and
``zkcoord.security.acl``'s.
"""

from __future__ import annotations

import logging
from typing import Optional

from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from zkcoord.broker import sasl as sasl_codes
from zkcoord.broker.peer import Peer
from zkcoord.broker.sasl import SaslSession
from zkcoord.limits import REFUSED_AUTHENTICATION, REFUSED_AUTHORIZATION, abuse_log
from zkcoord.security import acl
from zkcoord.security.checks import PeerLogins

log = logging.getLogger(__name__)


class PeerAccess:
    """A client's authentication (SASL) and the authorizer's answers for it."""

    def authorize(self, principal, operation: str, resource, host: str) -> bool:
        """The authorizer's answer (everything is allowed while it is off)."""
        if self.acls is None:
            return True
        return acl.authorize(self.acls.acls, principal, operation, resource, host,
                             self.config.security.super_principals)

    def _sasl_session(self, address: str) -> Optional[SaslSession]:
        mechanisms = self.config.security.sasl_mechanisms
        if not mechanisms:
            return None
        return SaslSession(mechanisms, PeerLogins(self.logins, address))

    def _sasl_handshake(self, request, peer: Peer):
        mechanisms = peer.sasl.mechanisms if peer.sasl is not None else ()
        error = peer.sasl.handshake(request.mechanism, request.API_VERSION) if peer.sasl else \
            sasl_codes.UNSUPPORTED_SASL_MECHANISM
        if error:
            abuse_log.log(REFUSED_AUTHENTICATION, logging.INFO, "%s: SASL handshake for %r refused (error %d; "
                          "offered: %s)", peer.host, request.mechanism, error, ", ".join(mechanisms) or "none")
            peer.closing = True
        return SaslHandshakeResponse(version=request.API_VERSION, error_code=error, mechanisms=list(mechanisms))

    def _sasl_authenticate(self, request, peer: Peer):
        if peer.sasl is None:
            step = sasl_codes.Step(error_code=sasl_codes.ILLEGAL_SASL_STATE,
                                   error_message="this broker offers no SASL mechanism")
        elif peer.sasl.raw:
            step = sasl_codes.Step(error_code=sasl_codes.ILLEGAL_SASL_STATE,
                                   error_message="SaslAuthenticate after a version 0 SaslHandshake, which "
                                                 "announced bare tokens")
        else:
            step = peer.sasl.authenticate(request.auth_bytes)
        self._after_sasl(step, peer)
        return SaslAuthenticateResponse(version=request.API_VERSION, error_code=step.error_code,
                                        error_message=step.error_message, auth_bytes=step.reply,
                                        session_lifetime_ms=0)

    def _sasl_token(self, frame: bytes, peer: Peer) -> list:
        """A bare token after a version 0 handshake: answered bare; a failure
        closes the connection unanswered, as Kafka does."""
        step = peer.sasl.authenticate(frame)
        self._after_sasl(step, peer)
        return [] if step.error_code else [len(step.reply).to_bytes(4, "big") + step.reply]

    def _after_sasl(self, step, peer: Peer) -> None:
        if step.error_code:
            # Authentication failed: the connection closes after the answer.
            abuse_log.log(REFUSED_AUTHENTICATION, logging.INFO, "%s: SASL authentication refused: %s", peer.host,
                          step.error_message)
            peer.closing = True
        elif peer.sasl is not None and peer.sasl.authenticated:
            peer.principal = peer.sasl.principal
            log.info("%s: authenticated as %s with %s", peer.host, peer.principal, peer.sasl.mechanism)

    def _authorizer(self, peer: Peer):
        """The authorizer's answers for ``peer``, as a function of (operation, resource)."""
        return lambda operation, resource: self.authorize(peer.principal, operation, resource, peer.host)

    def _may(self, peer: Peer, operation: str, say_refusals: bool = True):
        """Whether ``peer`` may do ``operation`` on a topic, as a function of
        the topic's name. A refusal is logged (at most --abuse-log-lines per
        interval): the client hears only an error code, so the broker's log is
        where an operator learns who was refused what. Once per topic of a
        request: the handlers ask per partition, and a refused Fetch of a
        hundred partitions would fill the log's allowance with one line."""
        said: set[str] = set()

        def may(topic: str) -> bool:
            if self.authorize(peer.principal, operation, acl.topic(topic), peer.host):
                return True
            if say_refusals and topic not in said:
                said.add(topic)
                abuse_log.log(REFUSED_AUTHORIZATION, logging.INFO, "%s: %s", peer.host,
                              acl.refusal(peer.principal, operation, acl.topic(topic)))
            return False
        return may

    def _may_produce_idempotently(self, peer: Peer) -> bool:
        """Kafka's test for an idempotent producer's id: IdempotentWrite on
        the cluster, or (Kafka 3.0, KIP-679) Write on any topic."""
        if self.authorize(peer.principal, acl.IDEMPOTENT_WRITE, acl.cluster(), peer.host):
            return True
        if acl.authorize_any(self.acls.acls, peer.principal, acl.WRITE, acl.TOPIC, peer.host,
                             self.config.security.super_principals):
            return True
        log.info("%s: %s and may Write no topic", peer.host,
                 acl.refusal(peer.principal, acl.IDEMPOTENT_WRITE, acl.cluster()))
        return False

    def _operations(self, peer: Peer, resource) -> frozenset[int]:
        """Kafka's codes of what ``peer`` may do to ``resource``."""
        return acl.authorized_operations(
            resource.kind, lambda operation: self.authorize(peer.principal, operation, resource, peer.host))

    def _cluster_operations(self, peer: Peer) -> frozenset[int]:
        """What ``peer`` may do to the cluster: nothing unless it may Describe it (as Kafka)."""
        if not self.authorize(peer.principal, acl.DESCRIBE, acl.cluster(), peer.host):
            return frozenset()
        return self._operations(peer, acl.cluster())
