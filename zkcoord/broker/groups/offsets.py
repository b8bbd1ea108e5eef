"""OffsetCommit, OffsetFetch and OffsetDelete: a group's offsets, for stock clients.

Committed offsets stay where thin consumers keep them: a member's
OffsetCommit is taken for the partitions it holds and reported to the
coordinator on its next Ping (and with every Stop and leave); a commit from
outside the group (an admin client's) is sent to the group's coordinator as
an offset reset. OffsetFetch answers from what this broker's members
committed, then from what the coordinator handed out, then from ZooKeeper.

A part of :class:`~zkcoord.broker.groups.bridge.GroupBridge`, whose members it serves.
"""

from __future__ import annotations

import logging

from kafka.protocol.consumer import OffsetCommitResponse, OffsetDeleteResponse, OffsetFetchResponse

from zkcoord import wire
from zkcoord.broker.groups.answers import (
    COORDINATOR_NOT_AVAILABLE, GROUP_AUTHORIZATION_FAILED, GROUP_ID_NOT_FOUND, INVALID_GROUP_ID, NONE,
    OFFSET_OUT_OF_RANGE, TOPIC_AUTHORIZATION_FAILED, beyond_log_end, offset_delete_error, reset_refusal,
)
from zkcoord.errors import ZkcoordError
from zkcoord.records import TopicPartition
from zkcoord.security import acl
from zkcoord.security.principal import ANONYMOUS, Principal
from zkcoord.zk import layout
from zkcoord.zk.nodes import read_offsets, read_servers

log = logging.getLogger(__name__)

# How long a commit from outside the group waits for the coordinator to write it.
OUTSIDE_COMMIT_WAIT_S = 15.0


class OffsetApis:
    """A group's offsets: commits, fetches and deletes."""

    def offset_commit(self, request, principal: Principal = ANONYMOUS, client_host: str = ""):
        Topic = OffsetCommitResponse.OffsetCommitResponseTopic
        Partition = Topic.OffsetCommitResponsePartition
        group_allowed = self._allowed(principal, acl.READ, acl.group(request.group_id), client_host)
        generation = getattr(request, "generation_id_or_member_epoch", -1)
        member_id = getattr(request, "member_id", "")
        bridged = self._find_own(request.group_id, member_id, principal) if member_id else None
        # Kafka's commit from outside the group (an admin client's
        # alterConsumerGroupOffsets, kafka-consumer-groups --reset-offsets):
        # no member id and no generation.
        from_admin = member_id == "" and generation < 0
        now = self.clock()
        errors: dict[TopicPartition, int] = {}
        outside: dict[TopicPartition, int] = {}
        for topic in request.topics:
            for part in topic.partitions:
                tp = TopicPartition(topic.name, part.partition_index)
                if not group_allowed:
                    errors[tp] = GROUP_AUTHORIZATION_FAILED
                elif not self._allowed(principal, acl.READ, acl.topic(topic.name), client_host):
                    errors[tp] = TOPIC_AUTHORIZATION_FAILED
                elif bridged is None and from_admin:
                    outside[tp] = part.committed_offset
                elif bridged is None:
                    # No member: offsets of a group move only through its
                    # coordinator (its members' commits, or an admin reset).
                    errors[tp] = self._unknown(request.group_id, member_id)
                else:
                    error = bridged.member.commit_error(generation, tp, now)
                    if error == NONE and part.committed_offset >= 0:
                        error = self._within_log(request.group_id, member_id, tp, part.committed_offset)
                    if error == NONE and part.committed_offset >= 0:
                        bridged.member.commit(tp, part.committed_offset)
                    errors[tp] = error
        if outside:
            error = self._commit_from_outside(request.group_id, outside)
            errors.update((tp, error) for tp in outside)
        topics = [Topic(name=topic.name, partitions=[
            Partition(partition_index=part.partition_index,
                      error_code=errors[TopicPartition(topic.name, part.partition_index)])
            for part in topic.partitions]) for topic in request.topics]
        if bridged is None and member_id == "" and not from_admin:
            log.info("group %s: refused a commit from outside the group (no member id)", request.group_id)
        return OffsetCommitResponse(version=request.API_VERSION, throttle_time_ms=0, topics=topics)

    def _commit_from_outside(self, group: str, offsets: dict[TopicPartition, int]) -> int:
        """Commit ``offsets`` for a client outside the group: as an offset
        reset, through the group's coordinator, which holds the offsets not
        yet written and refuses while the group has members (Kafka accepts
        such a commit only for an empty group too). One Kafka error code for
        every partition: the reset is whole or nothing."""
        from zkcoord.admin.groups import group_coordinator
        from zkcoord.admin.reset import send_reset

        try:
            server = group_coordinator(self.zk, group)[2]
            endpoint = read_servers(self.zk).get(server) if server is not None else None
        except ZkcoordError as exc:
            log.warning("group %s: cannot find its coordinator: %s", group, exc)
            endpoint = None
        if endpoint is None:
            return COORDINATOR_NOT_AVAILABLE
        user, password = self._credential or ("", "")
        if password and self._tls_context is None and not self._password_without_tls:
            log.warning("group %s: a commit from outside the group needs the broker's credential sent to the "
                        "coordinator, which is not allowed without TLS", group)
            return COORDINATOR_NOT_AVAILABLE
        request = wire.ResetOffsetsRequest(
            group_id=group, execute=True, force=False, user=user, password=password,
            offsets=tuple(wire.TopicPartitionOffset(t, p, o) for (t, p), o in sorted(offsets.items())))
        try:
            answer = send_reset((endpoint.host, endpoint.port), request, self._tls_context, OUTSIDE_COMMIT_WAIT_S)
        except (ZkcoordError, OSError) as exc:
            log.info("group %s: the coordinator did not take a commit from outside the group: %s", group, exc)
            return COORDINATOR_NOT_AVAILABLE
        error = reset_refusal(answer.error_code)
        log.info("group %s: commit from outside the group of %s: %s", group,
                 ", ".join(f"{t}-{p} at {o}" for (t, p), o in sorted(offsets.items())),
                 "done" if error == NONE else f"refused ({answer.error_message})")
        return error

    def _within_log(self, group: str, member_id: str, tp: TopicPartition, offset: int) -> int:
        """OFFSET_OUT_OF_RANGE for an offset beyond the partition's log end
        (committing it would make the group skip records not yet written)."""
        end = self._log_end(tp) if self._log_end is not None else None
        if beyond_log_end(offset, end):
            log.info("group %s: member %s committed offset %d for %s-%d, beyond the log end %d; refused",
                     group, member_id, offset, tp[0], tp[1], end)
            return OFFSET_OUT_OF_RANGE
        return NONE

    def offset_fetch(self, request, principal: Principal = ANONYMOUS, client_host: str = ""):
        Topic = OffsetFetchResponse.OffsetFetchResponseTopic
        Partition = Topic.OffsetFetchResponsePartition
        group = request.group_id
        if not self._allowed(principal, acl.DESCRIBE, acl.group(group), client_host):
            refused = [Topic(name=t.name, partitions=[
                Partition(partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                          error_code=GROUP_AUTHORIZATION_FAILED) for p in t.partition_indexes])
                for t in request.topics or ()]
            return OffsetFetchResponse(version=request.API_VERSION, throttle_time_ms=0, topics=refused,
                                       error_code=GROUP_AUTHORIZATION_FAILED)
        try:
            layout.group_path(group)
            stored = read_offsets(self.zk, group)
        except (layout.LayoutError, ZkcoordError) as exc:
            log.info("group %s: offsets not readable: %s", group, exc)
            return OffsetFetchResponse(version=request.API_VERSION, throttle_time_ms=0, topics=[],
                                       error_code=INVALID_GROUP_ID if isinstance(exc, layout.LayoutError)
                                       else COORDINATOR_NOT_AVAILABLE)
        known = dict(stored)
        for bridged in self._groups.get(group, {}).values():
            member = bridged.member
            for tp, start in member.assignment.items():
                offset = member.committed.get(tp, start)
                if offset >= 0:
                    known[tp] = offset
        if request.topics is None:
            wanted: dict[str, list[int]] = {}
            for topic, partition in sorted(known):
                wanted.setdefault(topic, []).append(partition)
        else:
            wanted = {t.name: list(t.partition_indexes) for t in request.topics}
        topics = [Topic(name=name, partitions=[
            Partition(partition_index=p, committed_offset=known.get(TopicPartition(name, p), -1),
                      committed_leader_epoch=-1, metadata="", error_code=NONE) for p in partitions])
            for name, partitions in wanted.items()]
        return OffsetFetchResponse(version=request.API_VERSION, throttle_time_ms=0, topics=topics, error_code=NONE)

    def offset_delete(self, request, principal: Principal = ANONYMOUS, client_host: str = ""):
        """Kafka's OffsetDelete, with Kafka's refusals: a group that does not
        exist (GROUP_ID_NOT_FOUND), a topic the group's members consume
        (GROUP_SUBSCRIBED_TO_TOPIC: their partitions are the ones held).
        Where Kafka would delete a committed offset, zkcoord refuses with
        POLICY_VIOLATION: an offset moves only through the group's
        coordinator, which resets offsets but deletes none (`zkcoord groups
        reset-offsets`, or a commit from outside the group, moves one
        instead). A partition with no committed offset has nothing to
        delete, and is answered done, as Kafka answers it."""
        Topic = OffsetDeleteResponse.OffsetDeleteResponseTopic
        Partition = Topic.OffsetDeleteResponsePartition
        group = request.group_id

        def answer(error: int, partition_error=None):
            """A group's error alone (as Kafka answers one), or every partition's."""
            return OffsetDeleteResponse(version=request.API_VERSION, throttle_time_ms=0, error_code=error, topics=[
                Topic(name=t.name, partitions=[
                    Partition(partition_index=p.partition_index,
                              error_code=partition_error(t.name, p.partition_index)) for p in t.partitions])
                for t in request.topics] if partition_error is not None else [])

        try:
            layout.group_path(group)
        except layout.LayoutError:
            return answer(INVALID_GROUP_ID)
        if not self._allowed(principal, acl.DELETE, acl.group(group), client_host):
            return answer(GROUP_AUTHORIZATION_FAILED)
        from zkcoord.admin.groups import DEAD

        state_name, state = self._state_of(group)
        if state_name == DEAD:
            return answer(GROUP_ID_NOT_FOUND)
        try:
            committed = read_offsets(self.zk, group)
        except ZkcoordError as exc:
            log.info("group %s: offsets not readable: %s", group, exc)
            return answer(COORDINATOR_NOT_AVAILABLE)
        consumed = {t for pairs in (state.assignment if state else {}).values() for t, _ in pairs}
        consumed |= {t for b in self._groups.get(group, {}).values() if not b.member.gone for t in b.member.topics}
        readable = {t.name: self._allowed(principal, acl.READ, acl.topic(t.name), client_host)
                    for t in request.topics}

        def partition_error(topic: str, partition: int) -> int:
            return offset_delete_error(TopicPartition(topic, partition), readable=readable[topic], consumed=consumed,
                                       committed=committed)

        return answer(NONE, partition_error)
