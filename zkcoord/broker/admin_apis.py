"""The admin APIs the broker answers, as decisions without I/O: CreateTopics
(what to create and the answer once the broker has tried), CreatePartitions
(likewise, for topics that grow), DescribeConfigs
(the broker's settings under Kafka's names, kafka_configs),
IncrementalAlterConfigs (refused: those are settings the broker started with) and
DescribeCluster (the brokers, the cluster id and the controller), each with
the ACL Kafka asks (the authorizer's answers are passed in).

CreateTopics writes topics the way ``zkcoord topics create`` does, and
CreatePartitions grows them as ``zkcoord topics add-partitions`` does
(zkcoord/admin/topics.py); the broker carries out what this module plans
(server.py, through zkstate.py) and hands the outcomes back here to be
answered. Error codes and messages follow Kafka 2.8's.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Union

from kafka.protocol.admin import (
    CreatePartitionsResponse, CreateTopicsResponse, DescribeClusterResponse, DescribeConfigsResponse,
    IncrementalAlterConfigsResponse,
)

from zkcoord.admin import topics as topic_admin
from zkcoord.broker import handlers as codes
from zkcoord.broker import kafka_configs
from zkcoord.broker.config import BrokerConfig
from zkcoord.broker.handlers import MetadataCache
from zkcoord.security import acl
from zkcoord.security.principal import ANONYMOUS, Principal
from zkcoord.zk import layout

NO_DEFAULT = -1  # CreateTopics v4+: "the broker's default" count or replication factor


class TopicCreation(NamedTuple):
    """A topic that passed the request's own checks: to be created (or, with
    validate_only, checked against ZooKeeper) by topic_admin.create_topic."""

    name: str
    partitions: Optional[int]
    assignment: Optional[dict[int, list[int]]]
    validate_only: bool


class TopicOutcome(NamedTuple):
    name: str
    error_code: int
    error_message: Optional[str]
    assignment: Optional[dict[int, tuple[int, ...]]] = None


_CREATION_ERRORS = (
    (topic_admin.TopicExistsError, codes.TOPIC_ALREADY_EXISTS),
    (topic_admin.UnknownTopicError, codes.UNKNOWN_TOPIC_OR_PARTITION),
    (topic_admin.InvalidTopicNameError, codes.INVALID_TOPIC_EXCEPTION),
    (topic_admin.InvalidPartitionCountError, codes.INVALID_PARTITIONS),
    (topic_admin.InvalidReplicationFactorError, codes.INVALID_REPLICATION_FACTOR),
    (topic_admin.InvalidAssignmentError, codes.INVALID_REPLICA_ASSIGNMENT),
    # Kafka's answer when there are fewer live brokers than replicas.
    (topic_admin.NoBrokersError, codes.INVALID_REPLICATION_FACTOR),
)


def outcome_of_error(name: str, exc: Exception) -> TopicOutcome:
    """The answer for a creation that raised ``exc``: a TopicAdminError by its
    kind; anything else (ZooKeeper unreachable) as a timeout, which clients retry."""
    code = next((c for cls, c in _CREATION_ERRORS if isinstance(exc, cls)), codes.REQUEST_TIMED_OUT)
    message = str(exc) if code != codes.REQUEST_TIMED_OUT else f"the topic could not be written: {exc!r}"
    return TopicOutcome(name, code, message)


def plan_create_topics(request, config: BrokerConfig) -> list[Union[TopicCreation, TopicOutcome]]:
    """One step per topic of the request, in its order: a creation to carry
    out, or the error the request itself earns (a repeated name, a count or
    factor beside an explicit assignment, a config the broker does not apply)."""
    names = [topic.name for topic in request.topics]
    repeated = {name for name in names if names.count(name) > 1}
    applied = {entry.name: entry.value for entry in kafka_configs.topic_configs(config)}
    validate_only = bool(getattr(request, "validate_only", False))
    steps: list[Union[TopicCreation, TopicOutcome]] = []
    for topic in request.topics:
        name = topic.name
        if name in repeated:
            steps.append(TopicOutcome(name, codes.INVALID_REQUEST,
                                      f"topic {name!r} appears more than once in the request"))
            continue
        assignment = None
        partitions = topic.num_partitions
        try:
            topic_admin.check_topic_name(name)
            if topic.assignments:
                if topic.num_partitions != NO_DEFAULT or topic.replication_factor != NO_DEFAULT:
                    steps.append(TopicOutcome(name, codes.INVALID_REQUEST,
                                              "a partition count or replication factor and replica assignments "
                                              "were both given; give one or the other"))
                    continue
                assignment = {a.partition_index: list(a.broker_ids) for a in topic.assignments}
                if len(assignment) != len(topic.assignments):
                    raise topic_admin.InvalidAssignmentError("a partition is assigned more than once")
            else:
                if partitions == NO_DEFAULT:
                    partitions = kafka_configs.DEFAULT_PARTITIONS
                factor = topic.replication_factor
                topic_admin.check_count(partitions, "the partition count")
                topic_admin.check_replication_factor(
                    kafka_configs.DEFAULT_REPLICATION_FACTOR if factor == NO_DEFAULT else factor)
        except topic_admin.TopicAdminError as exc:
            steps.append(outcome_of_error(name, exc))
            continue
        refused = _config_refusal(topic.configs, applied)
        if refused is not None:
            steps.append(TopicOutcome(name, codes.INVALID_CONFIG, refused))
            continue
        steps.append(TopicCreation(name, partitions if assignment is None else None, assignment, validate_only))
    return steps


def _config_refusal(configs, applied: dict[str, Optional[str]]) -> Optional[str]:
    """Why the configs asked for cannot be had, or None: the broker keeps no
    per-topic configs, so only the values it applies to every topic are accepted."""
    for config in configs or ():
        if config.name not in applied:
            return f"topic config {config.name!r} is not known to this broker"
        if config.value is not None and config.value != applied[config.name]:
            return (f"topic configs are the broker's settings here: {config.name} is "
                    f"{applied[config.name]!r} for every topic, not {config.value!r}")
    return None


def create_topics_response(request, outcomes: list[TopicOutcome], config: BrokerConfig):
    Result = CreateTopicsResponse.CreatableTopicResult
    entries = kafka_configs.topic_configs(config)
    results = []
    for outcome in outcomes:
        ok = outcome.error_code == codes.NONE and outcome.assignment is not None
        configs = [Result.CreatableTopicConfigs(name=e.name, value=e.value, read_only=True,
                                                config_source=e.source, is_sensitive=False)
                   for e in entries] if ok else []
        results.append(Result(
            name=outcome.name, error_code=outcome.error_code, error_message=outcome.error_message,
            num_partitions=len(outcome.assignment) if ok else -1,
            replication_factor=max(len(r) for r in outcome.assignment.values()) if ok else -1,
            configs=configs))
    return CreateTopicsResponse(version=request.API_VERSION, throttle_time_ms=0, topics=results)


# -- CreatePartitions ------------------------------------------------------------------


class PartitionsGrowth(NamedTuple):
    """A topic to grow to ``total`` partitions (or, with validate_only, to check)."""

    name: str
    total: int
    validate_only: bool


def plan_create_partitions(request) -> list[Union[PartitionsGrowth, TopicOutcome]]:
    """One step per topic of the request, in its order: a growth to carry
    out, or the error the request itself earns (a repeated name; placements
    given: partitions are placed round robin over the live brokers, as
    `zkcoord topics add-partitions` places them)."""
    names = [topic.name for topic in request.topics]
    repeated = {name for name in names if names.count(name) > 1}
    steps: list[Union[PartitionsGrowth, TopicOutcome]] = []
    for topic in request.topics:
        if topic.name in repeated:
            steps.append(TopicOutcome(topic.name, codes.INVALID_REQUEST,
                                      f"topic {topic.name!r} appears more than once in the request"))
        elif topic.assignments is not None:
            steps.append(TopicOutcome(topic.name, codes.INVALID_REPLICA_ASSIGNMENT,
                                      "new partitions are placed by the broker (round robin over the live "
                                      "brokers); placements cannot be given"))
        else:
            steps.append(PartitionsGrowth(topic.name, topic.count, bool(request.validate_only)))
    return steps


def create_partitions_response(request, outcomes: list[TopicOutcome]):
    Result = CreatePartitionsResponse.CreatePartitionsTopicResult
    return CreatePartitionsResponse(
        version=request.API_VERSION, throttle_time_ms=0,
        results=[Result(name=o.name, error_code=o.error_code, error_message=o.error_message) for o in outcomes])


# -- DescribeConfigs ------------------------------------------------------------------


def _everything(_operation: str, _resource: acl.Resource) -> bool:
    return True


# Who answers for a resource whose configs may not be described or altered, by its config resource type.
_CONFIGS_REFUSED = {kafka_configs.RESOURCE_TOPIC: codes.TOPIC_AUTHORIZATION_FAILED,
                    kafka_configs.RESOURCE_BROKER: codes.CLUSTER_AUTHORIZATION_FAILED}


def _configs_acl_resource(resource) -> Optional[acl.Resource]:
    """What DescribeConfigs (or AlterConfigs) of ``resource`` asks the
    operation on, as Kafka asks: a topic itself, a broker the cluster (None:
    a type not described)."""
    if resource.resource_type == kafka_configs.RESOURCE_TOPIC:
        return acl.topic(resource.resource_name)
    if resource.resource_type == kafka_configs.RESOURCE_BROKER:
        return acl.cluster()
    return None


def _configs_refusal(resource, operation: str, authorize, principal: Principal):
    """(error code, message) when the client may not do ``operation`` to
    ``resource``'s configs, else None."""
    asked = _configs_acl_resource(resource)
    if asked is not None and not authorize(operation, asked):
        return _CONFIGS_REFUSED[resource.resource_type], acl.refusal(principal, operation, asked)
    return None


def describe_configs(request, config: BrokerConfig, metadata_cache: MetadataCache,
                     authorize: Callable[[str, acl.Resource], bool] = _everything, principal: Principal = ANONYMOUS):
    """``authorize(operation, resource)``: the authorizer's answer for the
    client, ``principal``. A resource it may not describe is refused before
    anything else is looked at, so the answer never tells whether it exists."""
    Result = DescribeConfigsResponse.DescribeConfigsResult
    version = request.API_VERSION
    synonyms = bool(getattr(request, "include_synonyms", False)) and version >= 1
    documentation = bool(getattr(request, "include_documentation", False)) and version >= 3
    results = []
    for resource in request.resources:
        refused = _configs_refusal(resource, acl.DESCRIBE_CONFIGS, authorize, principal)
        if refused is not None:
            (error, message), entries = refused, []
        else:
            error, message, entries = _resource_configs(resource, config, metadata_cache)
        if resource.configuration_keys is not None:
            wanted = set(resource.configuration_keys)
            entries = [e for e in entries if e.name in wanted]
        results.append(Result(
            error_code=error, error_message=message, resource_type=resource.resource_type,
            resource_name=resource.resource_name,
            configs=[_config_result(e, resource.resource_type, synonyms, documentation) for e in entries]))
    return DescribeConfigsResponse(version=version, throttle_time_ms=0, results=results)


def _resource_configs(resource, config: BrokerConfig, metadata_cache: MetadataCache):
    """(error code, message, entries) for one resource."""
    name = resource.resource_name
    if resource.resource_type == kafka_configs.RESOURCE_TOPIC:
        try:
            layout.validate_topic_name(name)
        except layout.LayoutError as exc:
            return codes.INVALID_TOPIC_EXCEPTION, str(exc), []
        if name not in metadata_cache.topics:
            return codes.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist", []
        return codes.NONE, None, kafka_configs.topic_configs(config)
    if resource.resource_type == kafka_configs.RESOURCE_BROKER:
        if name == "":
            # The cluster-wide dynamic defaults: the broker has none.
            return codes.NONE, None, []
        if name != str(config.broker_id):
            return (codes.INVALID_REQUEST,
                    f"broker {name!r} is not this broker ({config.broker_id}); ask that broker", [])
        return codes.NONE, None, kafka_configs.broker_configs(config)
    return (codes.INVALID_REQUEST,
            f"resource type {resource.resource_type} is not described; topics (2) and brokers (4) are", [])


def _config_result(entry: kafka_configs.ConfigEntry, resource_type: int, synonyms: bool, documentation: bool):
    Config = DescribeConfigsResponse.DescribeConfigsResult.DescribeConfigsResourceResult
    listed = []
    if synonyms:
        broker_name = (kafka_configs.broker_name_of(entry.name)
                       if resource_type == kafka_configs.RESOURCE_TOPIC else entry.name)
        listed.append(Config.DescribeConfigsSynonym(name=broker_name, value=entry.value, source=entry.source))
        if not entry.is_default and entry.default_value is not None:
            listed.append(Config.DescribeConfigsSynonym(name=broker_name, value=entry.default_value,
                                                        source=kafka_configs.DEFAULT_CONFIG))
    # Nothing can be altered (there is no AlterConfigs): every config is read-only.
    return Config(name=entry.name, value=entry.value, read_only=True, is_default=entry.is_default,
                  config_source=entry.source, is_sensitive=False, synonyms=listed,
                  config_type=entry.config_type, documentation=entry.documentation if documentation else None)


def alter_configs(request, config: BrokerConfig, metadata_cache: MetadataCache,
                  authorize: Callable[[str, acl.Resource], bool] = _everything, principal: Principal = ANONYMOUS):
    """IncrementalAlterConfigs: every change is refused with INVALID_CONFIG,
    as Kafka refuses a setting that cannot be changed while the broker runs.
    A topic's configs are the broker's settings (kafka_configs), set when it
    starts; a resource the client may not alter, or that does not exist, is
    refused as Kafka refuses it first. A resource with no change is done."""
    Result = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
    results = []
    for resource in request.resources:
        refused = _configs_refusal(resource, acl.ALTER_CONFIGS, authorize, principal)
        if refused is None:
            error, message, _ = _resource_configs(resource, config, metadata_cache)
            refused = (error, message) if error != codes.NONE else None
        if refused is None and resource.configs:
            names = ", ".join(sorted({c.name for c in resource.configs}))
            refused = (codes.INVALID_CONFIG,
                       f"{names}: configs are the settings this broker was started with (every topic has the "
                       f"broker's; there are no per-topic or dynamic configs); restart the broker with new "
                       f"settings instead")
        error, message = refused or (codes.NONE, None)
        results.append(Result(error_code=error, error_message=message, resource_type=resource.resource_type,
                              resource_name=resource.resource_name))
    return IncrementalAlterConfigsResponse(version=request.API_VERSION, throttle_time_ms=0, responses=results)


# -- DescribeCluster ------------------------------------------------------------------


ENDPOINT_BROKERS = 1  # DescribeCluster v1+: which endpoints to describe
ENDPOINT_CONTROLLERS = 2


def _every_operation() -> frozenset[int]:
    return acl.authorized_operations(acl.CLUSTER, lambda _operation: True)


def describe_cluster(request, broker_id: int, metadata_cache: MetadataCache,
                     cluster_operations: Callable[[], frozenset[int]] = _every_operation):
    """Answered to anyone, as Kafka's brokers answer it (what it tells,
    Metadata tells too). ``cluster_operations()``: the codes of what the
    client may do to the cluster (none unless it may Describe it), sent as a
    bit field when asked for."""
    Broker = DescribeClusterResponse.DescribeClusterBroker
    endpoint_type = getattr(request, "endpoint_type", ENDPOINT_BROKERS) if request.API_VERSION >= 1 \
        else ENDPOINT_BROKERS
    error, message, brokers = codes.NONE, None, []
    if endpoint_type == ENDPOINT_CONTROLLERS:
        error, message = codes.MISMATCHED_ENDPOINT_TYPE, "brokers describe brokers; no controller quorum runs"
    elif endpoint_type != ENDPOINT_BROKERS:
        error, message = codes.UNSUPPORTED_ENDPOINT_TYPE, f"endpoint type {endpoint_type} is not known"
    else:
        brokers = [Broker(broker_id=node, host=address.host, port=address.port, rack=address.rack)
                   for node, address in sorted(metadata_cache.brokers.items())]
    operations = set(cluster_operations()) if request.include_cluster_authorized_operations else None
    return DescribeClusterResponse(
        version=request.API_VERSION, throttle_time_ms=0, error_code=error, error_message=message,
        endpoint_type=endpoint_type, cluster_id=metadata_cache.cluster_id,
        controller_id=metadata_cache.controller_id(broker_id), brokers=brokers,
        authorized_operations=operations)
