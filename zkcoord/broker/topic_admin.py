"""CreateTopics and CreatePartitions carried out: admin_apis' plan written
to ZooKeeper, then a wait (up to the request's timeout) until this broker's
metadata shows the change, so that a client may use it at once.

A part of :class:`~zkcoord.broker.server.Broker`, whose ZooKeeper state,
metadata and authorizer it uses.
"""

from __future__ import annotations

import logging
import time

from kazoo.exceptions import KazooException

from zkcoord.broker import admin_apis
from zkcoord.broker.handlers import NONE, REQUEST_TIMED_OUT, TOPIC_AUTHORIZATION_FAILED
from zkcoord.broker.peer import Peer
from zkcoord.errors import ZkcoordError
from zkcoord.security import acl

log = logging.getLogger(__name__)


class TopicAdmin:
    """Topics created and grown on a client's request."""

    def _create_topics(self, request, peer: Peer):
        """Carry out admin_apis' plan in ZooKeeper, then wait (up to the
        request's timeout) until this broker's metadata shows the new topics,
        so that a client may produce to them at once; past the timeout they
        exist but are answered REQUEST_TIMED_OUT, as Kafka answers."""
        outcomes = []
        # As Kafka: Create on the cluster creates any topic; else Create on each.
        anywhere = self.authorize(peer.principal, acl.CREATE, acl.cluster(), peer.host)
        for step in admin_apis.plan_create_topics(request, self.config):
            if isinstance(step, admin_apis.TopicOutcome):
                outcomes.append(step)
                continue
            if not anywhere and not self.authorize(peer.principal, acl.CREATE, acl.topic(step.name), peer.host):
                outcomes.append(admin_apis.TopicOutcome(step.name, TOPIC_AUTHORIZATION_FAILED,
                                                        acl.refusal(peer.principal, acl.CREATE, acl.topic(step.name))))
                continue
            try:
                assignment = self._zkstate.create_topic(step.name, step.partitions, step.assignment,
                                                        step.validate_only)
            except (ZkcoordError, KazooException) as exc:  # ours by their kind; ZooKeeper's as a timeout
                log.info("create topic %s refused: %s", step.name, exc)
                outcomes.append(admin_apis.outcome_of_error(step.name, exc))
                continue
            outcomes.append(admin_apis.TopicOutcome(step.name, NONE, None, assignment))
            if not step.validate_only:
                log.info("broker %d created topic %s (%d partitions)", self.config.broker_id, step.name,
                         len(assignment))
        created = {o.name: len(o.assignment) for o in outcomes
                   if o.error_code == NONE and not getattr(request, "validate_only", False)}
        outcomes = self._await_loaded(request.timeout_ms, created, outcomes,
                                      "the topic was created; brokers had not loaded it by the timeout")
        return admin_apis.create_topics_response(request, outcomes, self.config)

    def _create_partitions(self, request, peer: Peer):
        """Carry out admin_apis' plan in ZooKeeper, then wait (up to the
        request's timeout) until this broker's metadata shows the new counts."""
        outcomes = []
        grown = {}
        for step in admin_apis.plan_create_partitions(request):
            if isinstance(step, admin_apis.TopicOutcome):
                outcomes.append(step)
                continue
            if not self.authorize(peer.principal, acl.ALTER, acl.topic(step.name), peer.host):
                outcomes.append(admin_apis.TopicOutcome(step.name, TOPIC_AUTHORIZATION_FAILED,
                                                        acl.refusal(peer.principal, acl.ALTER, acl.topic(step.name))))
                continue
            try:
                self._zkstate.add_partitions(step.name, step.total, step.validate_only)
            except (ZkcoordError, KazooException) as exc:  # ours by their kind; ZooKeeper's as a timeout
                log.info("adding partitions to topic %s refused: %s", step.name, exc)
                outcomes.append(admin_apis.outcome_of_error(step.name, exc))
                continue
            outcomes.append(admin_apis.TopicOutcome(step.name, NONE, None))
            if not step.validate_only:
                grown[step.name] = step.total
                log.info("broker %d grew topic %s to %d partitions", self.config.broker_id, step.name, step.total)
        outcomes = self._await_loaded(request.timeout_ms, grown, outcomes,
                                      "the partitions were added; brokers had not loaded them by the timeout")
        return admin_apis.create_partitions_response(request, outcomes)

    def _await_loaded(self, timeout_ms: int, counts: dict[str, int], outcomes: list, late_message: str) -> list:
        """Wait up to ``timeout_ms`` until this broker's metadata shows every
        topic of ``counts`` with (at least) its partition count, so that a
        client may use them at once; past the timeout they exist but are
        answered REQUEST_TIMED_OUT, as Kafka answers."""
        def late() -> set[str]:
            return {name for name, count in counts.items()
                    if len(self.metadata_cache.topics.get(name, ())) < count}

        deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        while late() and time.monotonic() < deadline:
            reconciled = self._reconciled
            self._wake.set()
            reconciled.wait(timeout=deadline - time.monotonic())
        if timeout_ms <= 0:
            return outcomes
        behind = late()
        return [o._replace(error_code=REQUEST_TIMED_OUT, error_message=late_message) if o.name in behind else o
                for o in outcomes]
