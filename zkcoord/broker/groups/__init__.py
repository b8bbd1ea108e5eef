"""Kafka's group APIs on the broker, bridged into the zkcoord coordinator:
``classic`` decides what a stock client's JoinGroup, SyncGroup, Heartbeat and
OffsetCommit get (pure); ``bridge`` registers each such client with the
group's coordinator and serves the requests."""

from zkcoord.broker.groups.bridge import GroupBridge

__all__ = ["GroupBridge"]
