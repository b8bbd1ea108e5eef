"""One blocking connection to a Kafka broker, for reading: Fetch, ListOffsets
and what the cluster says of itself (Metadata: brokers, topics, leaders).

The bytes of every request and response are kafka-python's message classes
(the broker uses the same ones); this module only frames them, negotiates
versions with ApiVersions when it connects, and hands a Fetch response's
records over as a view into the received frame, so the decoder
(:mod:`zkcoord.fetch.records`) reads them where they landed. One request is
in flight at a time; a connection is used by one thread.
"""

from __future__ import annotations

import socket
import ssl
import struct
from functools import partial
from typing import NamedTuple, Optional, Union

from kafka.errors import for_code
from kafka.protocol.consumer import FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
)

from zkcoord.errors import ConfigError, TlsError, ZkcoordError
from zkcoord.fetch.cluster import TOPIC_AUTHORIZATION_FAILED, ClusterMetadata, topic_id_of
from zkcoord.fetch.isolation import ISOLATION_LEVELS, READ_UNCOMMITTED
from zkcoord.fetch.records import RecordColumns, decode_batches
from zkcoord.fetch.recovery import LEADERSHIP_ERRORS, NO_EPOCH
from zkcoord.records import LogEnd
from zkcoord.security import scram
from zkcoord.security import tls as tls_

NONE = 0
OFFSET_OUT_OF_RANGE = 1
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1

LIST_OFFSETS_ISOLATION_VERSION = 2  # the first ListOffsets with isolation_level (Kafka 0.11, as transactions)

# The versions this client speaks: Fetch from 4 (record batches, log start
# offset) to 12 (the last that names topics, not topic ids); ListOffsets 1 to 7.
FETCH_VERSIONS = (4, 12)
OLDEST_KAFKA = "0.11"  # the first release with Fetch 4, ListOffsets 1 and Metadata 1
LIST_OFFSETS_VERSIONS = (1, 7)
# Metadata from 1 (topics by name, leaders: every broker since 0.10) to 12
# (the last of our embedded broker); from 7 on it carries each partition's
# leader epoch, which fetches send, and from 10 on topic ids, which tell a
# topic deleted and created again.
METADATA_VERSIONS = (1, 12)
API_VERSIONS_VERSION = 0  # every broker answers it, in version 0, whatever it speaks
SASL_VERSION = 1  # SaslHandshake and SaslAuthenticate: tokens framed by SaslAuthenticate
# Every request this client sends, by Kafka's name, and the versions it may
# send it in (the one sent is the highest the broker also speaks).
SPOKEN = {
    "ApiVersions": (API_VERSIONS_VERSION, API_VERSIONS_VERSION),
    "SaslHandshake": (SASL_VERSION, SASL_VERSION),
    "SaslAuthenticate": (SASL_VERSION, SASL_VERSION),
    "Fetch": FETCH_VERSIONS,
    "ListOffsets": LIST_OFFSETS_VERSIONS,
    "Metadata": METADATA_VERSIONS,
}
# SASL mechanisms this client speaks, the strongest first.
PREFERRED_MECHANISMS = (scram.SCRAM_SHA_512, scram.SCRAM_SHA_256, scram.PLAIN)
MAX_FRAME = 1 << 30  # larger than any response we ask for: a corrupt size prefix


class BrokerConnectionError(ZkcoordError):
    """The broker cannot be reached, closed the connection or sent bytes we
    cannot read. Retriable: a new connection may work."""

    retriable = True


class BrokerAuthenticationError(BrokerConnectionError):
    """The broker refused the credential (a wrong password, an unknown user),
    or this client would not send it (no mechanism in common, PLAIN without
    TLS when not allowed). No retry helps."""

    retriable = False


class BrokerTooOld(BrokerConnectionError):
    """The broker speaks none of the versions of an API this client speaks
    (or no ApiVersions at all): a Kafka older than this client reads. No
    retry helps."""

    retriable = False


class PlainWithoutTlsRefused(BrokerAuthenticationError):
    """The broker offers only SASL/PLAIN, which would send the password
    readable over a connection without TLS, and the client does not allow it."""


def _unless_refused(error: TlsError) -> ZkcoordError:
    """A TLS failure as the caller should see it: a refusal (a certificate, a
    protocol) as the TlsError it is, which no retry helps; a connection that
    merely broke in a handshake as any broken connection, to retry."""
    return error if not error.retriable else BrokerConnectionError(str(error))


class PartitionError(ZkcoordError):
    """The broker answered for a partition with a Kafka error code."""

    def __init__(self, topic: str, partition: int, code: int):
        error = for_code(code)
        self.code = code
        self.retriable = retriable(code)
        super().__init__(f"{topic}-{partition}: {error.__name__} (Kafka error {code})")


def retriable(code: int) -> bool:
    """Whether a partition's Kafka error ``code`` may go away if asked
    again (maybe elsewhere: leadership moving or not yet known)."""
    return bool(getattr(for_code(code), "retriable", False)) or code in LEADERSHIP_ERRORS


def retriable_codes(highest: int = 200) -> list[int]:
    """Every retriable code up to ``highest`` (for readers outside Python)."""
    return [code for code in range(highest + 1) if retriable(code)]


class Fetched(NamedTuple):
    """One partition of a Fetch response."""

    high_watermark: int
    log_start_offset: int
    records: memoryview  # record batches; may end in a partial batch
    # Fetch 12+: the leader's log leaves the last fetched epoch before the
    # fetch offset; it ends that epoch at diverging_end (-1: no divergence).
    diverging_epoch: int = NO_EPOCH
    diverging_end: int = -1
    last_stable_offset: int = -1  # -1: the broker did not say
    # read_committed: the aborted transactions among the records, as
    # (producer id, first offset) pairs; None when reading uncommitted.
    aborted_transactions: Optional[tuple[tuple[int, int], ...]] = None

    def decode(self, start: int, end: Optional[int] = None) -> RecordColumns:
        """The records from ``start`` up to ``end`` (None: no end) that the
        fetch's isolation level delivers: reading committed, none of an
        aborted transaction and none at or above the last stable offset."""
        if self.aborted_transactions is not None and self.last_stable_offset >= 0:
            end = self.last_stable_offset if end is None else min(end, self.last_stable_offset)
        return decode_batches(self.records, start=start, end=end, aborted_transactions=self.aborted_transactions)


class Leader(NamedTuple):
    """A partition's leader as a broker's Metadata names it."""

    address: str
    epoch: int  # NO_EPOCH below Metadata 7
    topic_id: Optional[str] = None  # None below Metadata 10: a topic created again has a new one


class BrokerConnection:
    """A connection to ``host:port``; raises BrokerConnectionError when it
    cannot be opened or negotiated."""

    def __init__(self, address: str, *, client_id: str = "zkcoord", timeout_s: float = 30.0,
                 tls: Optional[ssl.SSLContext] = None, credential: Optional[tuple[str, str]] = None,
                 plain_without_tls: bool = False, isolation_level: str = READ_UNCOMMITTED):
        """``isolation_level`` (ISOLATION_LEVELS) is what its Fetch and its
        latest offsets see: read_committed fetches with isolation level 1 (the
        aborted transactions come with the records) and takes the last
        stable offset for the latest (ListOffsets v2 and later; an older
        broker has no transactions, its log end is stable).
        ``tls``: a client SSLContext (zkcoord.security.tls.client_context);
        a handshake that fails raises TlsError, not retriable when refused.
        ``credential`` (user, password): authenticate with SASL first, with
        the strongest mechanism the broker offers; a refusal raises
        BrokerAuthenticationError. Unless ``plain_without_tls``, the password
        is never sent with PLAIN over a connection without TLS (a broker that
        offers only PLAIN is refused: PlainWithoutTlsRefused)."""
        if isolation_level not in ISOLATION_LEVELS:
            raise ConfigError(f"isolation_level must be one of {', '.join(ISOLATION_LEVELS)}, "
                             f"not {isolation_level!r}")
        self.address = address
        self._isolation = ISOLATION_LEVELS[isolation_level]
        self._client_id = client_id
        self._timeout_s = timeout_s
        self._tls = tls
        self._plain_without_tls = plain_without_tls
        self._sock: Optional[socket.socket] = None
        self._open()
        if credential is not None:
            try:
                if not self._authenticate(*credential):
                    # A broker that authenticates nobody (it offers no SASL at
                    # all) serves anyone: the credential, given for the
                    # coordinator too, is not asked for. It closed this
                    # connection on the handshake, so open another.
                    self.close()
                    self._open()
            except BaseException:
                self.close()
                raise

    def _open(self) -> None:
        """Connect (TLS if asked) and agree on versions."""
        host, _, port = self.address.rpartition(":")
        self._correlation = 0
        try:
            self._sock = socket.create_connection((host, int(port)), timeout=self._timeout_s)
        except (OSError, ValueError) as exc:
            raise BrokerConnectionError(f"cannot connect to broker {self.address}: {exc}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is not None:
            try:
                self._sock = tls_.connect(self._sock, self._tls, host, self._timeout_s)
            except TlsError as exc:
                self._sock = None
                raise _unless_refused(exc) from None
        try:
            offered = self._request(ApiVersionsRequest(version=API_VERSIONS_VERSION), ApiVersionsResponse,
                                    API_VERSIONS_VERSION)
            if offered.error_code != NONE:
                raise BrokerConnectionError(f"broker {self.address} refused ApiVersions: error {offered.error_code}")
            ranges = {api.api_key: (api.min_version, api.max_version) for api in offered.api_keys}
            self._fetch_version = self._pick(ranges, FetchRequest.API_KEY, FETCH_VERSIONS, "Fetch")
            self._list_offsets_version = self._pick(ranges, ListOffsetsRequest.API_KEY, LIST_OFFSETS_VERSIONS,
                                                    "ListOffsets")
            self._metadata_version = self._pick(ranges, MetadataRequest.API_KEY, METADATA_VERSIONS, "Metadata")
        except BaseException:
            self.close()
            raise

    def _authenticate(self, user: str, password: str) -> bool:
        """SASL with the strongest mechanism the broker offers: SCRAM-SHA-512,
        SCRAM-SHA-256, else PLAIN (over TLS where the password must not be
        seen). False if the broker offers none at all (it authenticates nobody)."""
        offered = self._request(SaslHandshakeRequest(version=SASL_VERSION, mechanism=PREFERRED_MECHANISMS[0]),
                                SaslHandshakeResponse, SASL_VERSION)
        if not offered.mechanisms:
            return False
        mechanism = next((m for m in PREFERRED_MECHANISMS if m in offered.mechanisms), None)
        if mechanism is None:
            raise BrokerAuthenticationError(f"broker {self.address} offers no SASL mechanism this client speaks "
                                            f"(it offers {', '.join(offered.mechanisms) or 'none'}; this client "
                                            f"{', '.join(PREFERRED_MECHANISMS)})")
        if mechanism == scram.PLAIN and self._tls is None and not self._plain_without_tls:
            # PLAIN sends the password itself: anyone on the path reads it.
            raise PlainWithoutTlsRefused(
                f"broker {self.address} offers only SASL/PLAIN, which would send user {user!r}'s password "
                "over a connection without TLS: refused")
        if mechanism != PREFERRED_MECHANISMS[0]:
            # A broker closes the connection after a refused handshake: start
            # again, asking for the mechanism it offers.
            self.close()
            self._open()
            handshake = self._request(SaslHandshakeRequest(version=SASL_VERSION, mechanism=mechanism),
                                      SaslHandshakeResponse, SASL_VERSION)
            if handshake.error_code != NONE:
                raise BrokerAuthenticationError(f"broker {self.address} refused SASL/{mechanism} "
                                                f"(error {handshake.error_code})")
        try:
            if mechanism == scram.PLAIN:
                self._sasl_step(b"\0" + user.encode("utf-8") + b"\0" + password.encode("utf-8"), user)
            else:
                client = scram.ScramClient(mechanism, user, password)
                server_first = self._sasl_step(client.first(), user)
                client.verify(self._sasl_step(client.final(server_first), user))
        except scram.AuthenticationFailed as exc:
            raise BrokerAuthenticationError(f"broker {self.address}: {exc}") from None
        return True

    def _sasl_step(self, token: bytes, user: str) -> bytes:
        answer = self._request(SaslAuthenticateRequest(version=SASL_VERSION, auth_bytes=token),
                               SaslAuthenticateResponse, SASL_VERSION)
        if answer.error_code != NONE:
            raise BrokerAuthenticationError(f"broker {self.address} refused user {user!r}: "
                                            f"{answer.error_message or answer.error_code}")
        return bytes(answer.auth_bytes or b"")

    def _pick(self, offered: dict, api_key: int, ours: tuple[int, int], name: str) -> int:
        low, high = offered.get(api_key, (None, None))
        if low is None or max(low, ours[0]) > min(high, ours[1]):
            # Below ours: a Kafka too old (Fetch 4 is Kafka 0.11's); above: one
            # that has dropped what we speak (as Kafka 4 dropped pre-2.1 versions, KIP-896).
            why = ("a Kafka newer than this client, which dropped the versions it speaks" if low is not None
                   and low > ours[1] else f"a Kafka too old for this client, which needs Kafka {OLDEST_KAFKA} or later")
            raise BrokerTooOld(f"broker {self.address} offers {name} versions {low}..{high}; "
                               f"this client speaks {ours[0]}..{ours[1]}: {why}")
        return min(high, ours[1])

    def versions(self) -> dict[str, int]:
        """The version of each API this connection sends, as agreed with the broker."""
        return {"ApiVersions": API_VERSIONS_VERSION, "SaslHandshake": SASL_VERSION, "SaslAuthenticate": SASL_VERSION,
                "Fetch": self._fetch_version,
                "ListOffsets": self._list_offsets_version, "Metadata": self._metadata_version}

    # -- requests ----------------------------------------------------------------------------

    def fetch(self, topic: str, partition: int, offset: int, *, max_wait_ms: int, partition_max_bytes: int,
              min_bytes: int = 1) -> Fetched:
        """Records of one partition from ``offset``. Raises PartitionError for
        a partition-level error (OFFSET_OUT_OF_RANGE among them)."""
        result = self.fetch_partitions({(topic, partition): offset}, max_wait_ms=max_wait_ms,
                                       partition_max_bytes=partition_max_bytes, max_bytes=partition_max_bytes,
                                       min_bytes=min_bytes)[(topic, partition)]
        if isinstance(result, PartitionError):
            raise result
        return result

    def fetch_partitions(self, positions: dict[tuple[str, int], int], *, max_wait_ms: int,
                         partition_max_bytes: int, max_bytes: int, min_bytes: int = 1,
                         epochs: Optional[dict[tuple[str, int], tuple[int, int]]] = None,
                         ) -> dict[tuple[str, int], Union[Fetched, PartitionError]]:
        """One Fetch for several partitions of this broker: each partition's
        records from its offset, or the PartitionError the broker gave it.
        ``epochs``: a partition's (current leader epoch, last fetched epoch),
        for the broker to check (NO_EPOCH, or a partition left out: none)."""
        version = self._fetch_version
        by_topic: dict[str, list] = {}
        for (topic, partition), offset in positions.items():
            current, last = (epochs or {}).get((topic, partition), (NO_EPOCH, NO_EPOCH))
            by_topic.setdefault(topic, []).append(FetchRequest.FetchTopic.FetchPartition(
                partition=partition, current_leader_epoch=current, fetch_offset=offset, last_fetched_epoch=last,
                log_start_offset=-1, partition_max_bytes=partition_max_bytes))
        request = FetchRequest(
            version=version, replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
            max_bytes=max_bytes, isolation_level=self._isolation, session_id=0, session_epoch=-1,
            topics=[FetchRequest.FetchTopic(topic=topic, partitions=parts) for topic, parts in by_topic.items()],
            forgotten_topics_data=[], rack_id="")
        response = self._request(request, FetchResponse, version)
        if response.error_code != NONE:
            error = PartitionError("*", -1, response.error_code)
            return {tp: error for tp in positions}
        result: dict[tuple[str, int], Union[Fetched, PartitionError]] = {}
        for topic_data in response.responses:
            for part in topic_data.partitions:
                tp = (topic_data.topic, part.partition_index)
                if tp not in positions:
                    continue
                if part.error_code != NONE:
                    result[tp] = PartitionError(tp[0], tp[1], part.error_code)
                else:
                    records = part.records if part.records is not None else b""
                    diverging = part.diverging_epoch if version >= 12 else None
                    aborted = None
                    if self._isolation:
                        aborted = tuple((a.producer_id, a.first_offset) for a in part.aborted_transactions or ())
                    result[tp] = Fetched(
                        part.high_watermark, part.log_start_offset, memoryview(records),
                        diverging_epoch=diverging.epoch if diverging else NO_EPOCH,
                        diverging_end=diverging.end_offset if diverging else -1,
                        last_stable_offset=part.last_stable_offset, aborted_transactions=aborted)
        missing = [tp for tp in positions if tp not in result]
        if missing:
            raise BrokerConnectionError(f"broker {self.address} answered a fetch without {sorted(missing)}")
        return result

    def list_offset(self, topic: str, partition: int, timestamp: int, *, high_watermark: bool = False) -> int:
        """The offset for ``timestamp`` (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP or a
        time in ms). LATEST is the connection's isolation level's (reading
        committed, the last stable offset) unless ``high_watermark``."""
        answer = {tp: a if isinstance(a, PartitionError) else a.offset for tp, a in self._list_offsets(
            [(topic, partition)], timestamp, committed=not high_watermark).items()}[(topic, partition)]
        if isinstance(answer, PartitionError):
            raise answer
        return answer

    def list_offsets(self, partitions, timestamp: int) -> dict[tuple[str, int], Union[int, "PartitionError"]]:
        """:meth:`list_offset` of several partitions in one request: each
        one's offset, or the PartitionError its leader answered with."""
        return {tp: answer if isinstance(answer, PartitionError) else answer.offset
                for tp, answer in self._list_offsets(partitions, timestamp).items()}

    def log_ends(self, partitions) -> dict[tuple[str, int], Union[LogEnd, "PartitionError"]]:
        """Each partition's log end with its leader's epoch, in one request, or
        the PartitionError its leader answered with."""
        return self._list_offsets(partitions, LATEST_TIMESTAMP)

    def _list_offsets(self, partitions, timestamp: int,
                      committed: bool = True) -> dict[tuple[str, int], Union[LogEnd, "PartitionError"]]:
        """``committed``: at the connection's isolation level (else read uncommitted)."""
        wanted: dict[str, list[int]] = {}
        for topic, partition in partitions:
            wanted.setdefault(topic, []).append(partition)
        version = self._list_offsets_version
        Topic = ListOffsetsRequest.ListOffsetsTopic
        request = ListOffsetsRequest(
            version=version, replica_id=-1,
            isolation_level=self._isolation if committed and version >= LIST_OFFSETS_ISOLATION_VERSION else 0,
            topics=[Topic(name=topic, partitions=[
                Topic.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=timestamp)
                for p in sorted(set(ps))]) for topic, ps in sorted(wanted.items())])
        response = self._request(request, ListOffsetsResponse, version)
        result: dict = {}
        for topic_data in response.topics:
            for part in topic_data.partitions:
                tp = (topic_data.name, part.partition_index)
                if part.partition_index in wanted.get(topic_data.name, ()):
                    result[tp] = (LogEnd(part.offset, part.leader_epoch if version >= 4 else -1)
                                  if part.error_code == NONE else PartitionError(tp[0], tp[1], part.error_code))
        missing = sorted((t, p) for t, ps in wanted.items() for p in ps if (t, p) not in result)
        if missing:
            raise BrokerConnectionError(f"broker {self.address} answered ListOffsets without {missing}")
        return result

    def leader(self, topic: str, partition: int) -> Optional[str]:
        """The address of the partition's leader as this broker knows it, or
        None while it has none (or does not know the partition)."""
        return self.leaders([(topic, partition)])[(topic, partition)]

    def leaders(self, partitions) -> dict[tuple[str, int], Optional[str]]:
        """:meth:`leader` for several partitions in one Metadata request."""
        partitions = list(partitions)
        known = self.partitions({topic for topic, _ in partitions})
        return {tp: known.get(tp) for tp in partitions}

    def partitions(self, topics) -> dict[tuple[str, int], Optional[str]]:
        """Every partition of ``topics`` this broker knows (a topic it does
        not know has none), with its leader's address (None: no leader now)."""
        return {tp: leader.address if leader is not None else None for tp, leader in self.led(topics).items()}

    def led(self, topics) -> dict[tuple[str, int], Optional[Leader]]:
        """:meth:`partitions` with each leader's epoch."""
        return self.led_or_refused(topics)[0]

    def led_or_refused(self, topics) -> tuple[dict[tuple[str, int], Optional[Leader]], dict[str, int]]:
        """:meth:`led`, and the topics the broker would not describe to this
        client's principal, with the error code (TOPIC_AUTHORIZATION_FAILED:
        an ACL is missing, which a topic unknown is not)."""
        response, version = self._metadata(topics)
        addresses = {b.node_id: f"{b.host}:{b.port}" for b in response.brokers}
        known: dict[tuple[str, int], Optional[Leader]] = {}
        refused: dict[str, int] = {}
        for topic_data in response.topics:
            if topic_data.error_code == TOPIC_AUTHORIZATION_FAILED:
                refused[topic_data.name] = topic_data.error_code
            if topic_data.error_code != NONE:
                continue
            topic_id = topic_id_of(topic_data)
            for part in topic_data.partitions:
                address = addresses.get(part.leader_id) if part.error_code == NONE else None
                known[(topic_data.name, part.partition_index)] = None if address is None else Leader(
                    address, part.leader_epoch if version >= 7 else NO_EPOCH, topic_id)
        return known, refused

    def cluster(self, topics=None, previous: Optional[ClusterMetadata] = None) -> ClusterMetadata:
        """What this broker knows of the cluster: its brokers, and ``topics``
        (None: every topic) with their ids and partitions' leaders.

        ``previous``: an answer read before. If this one is the same, byte for
        byte, ``previous`` itself is returned, without reading it: a cluster of
        thousands of partitions answers in hundreds of kilobytes, which
        kafka-python decodes in tens of milliseconds, to learn, polled every
        few seconds, that nothing has changed. One that differs is scanned
        for what the value holds, in a fifth of that (ClusterMetadata.read)."""
        version, request = self._metadata_request(topics)
        body = self._exchange(request, MetadataResponse, version)
        if previous is not None and previous.raw == body:
            return previous
        raw = bytes(body)
        return ClusterMetadata.read(raw, version, partial(self._decode, raw, MetadataResponse, version))

    def _metadata(self, topics):
        """This broker's Metadata answer on ``topics`` (None: every topic), and its version."""
        version, request = self._metadata_request(topics)
        return self._request(request, MetadataResponse, version), version

    def _metadata_request(self, topics) -> tuple[int, MetadataRequest]:
        version = self._metadata_version
        asked = None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in sorted(topics)]
        return version, MetadataRequest(version=version, topics=asked, allow_auto_topic_creation=False,
                                        include_cluster_authorized_operations=False,
                                        include_topic_authorized_operations=False)

    # -- framing -----------------------------------------------------------------------------

    def _request(self, request, response_class, version: int):
        return self._decode(self._exchange(request, response_class, version), response_class, version)

    def _exchange(self, request, response_class, version: int) -> memoryview:
        """Send ``request``; its answer's body, undecoded (past the response header)."""
        sock = self._socket()
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        request.with_header(correlation_id=self._correlation, client_id=self._client_id)
        try:
            sock.sendall(request.encode(version=version, header=True, framed=True))
            size = struct.unpack(">i", self._receive(4))[0]
            if not 4 <= size <= MAX_FRAME:
                raise BrokerConnectionError(f"broker {self.address} sent a frame of {size} bytes")
            frame = memoryview(self._receive(size))
        except ssl.SSLError as exc:  # TLS 1.3: a broker refusing our certificate says so at the first exchange
            # The write may have failed first (the broker gone), the alert unread behind it.
            alert = tls_.alert_behind(sock) if isinstance(exc, ssl.SSLEOFError) else None
            self.close()
            raise _unless_refused(tls_.refusal(alert or exc, self.address)) from None
        except OSError as exc:
            self.close()
            raise BrokerConnectionError(f"broker {self.address}: {exc}") from None
        correlation = struct.unpack_from(">i", frame)[0]
        if correlation != self._correlation:
            self.close()
            raise BrokerConnectionError(f"broker {self.address} answered request {correlation}, "
                                        f"not {self._correlation}")
        pos = 4
        # ApiVersions answers with the old header whatever its version.
        if response_class.flexible_version_q(version) and response_class is not ApiVersionsResponse:
            pos = _skip_tagged_fields(frame, pos)
        return frame[pos:]

    def _decode(self, body: memoryview, response_class, version: int):
        try:
            return response_class.decode(body, version=version)
        except Exception as exc:  # the library raises many types on bad bytes
            self.close()
            raise BrokerConnectionError(f"broker {self.address} sent a response we cannot decode: "
                                        f"{type(exc).__name__}: {exc}") from None

    def _receive(self, n: int) -> bytearray:
        buffer = bytearray(n)
        view = memoryview(buffer)
        got = 0
        while got < n:
            count = self._sock.recv_into(view[got:])
            if count == 0:
                raise OSError("connection closed by the broker")
            got += count
        return buffer

    def _socket(self) -> socket.socket:
        if self._sock is None:
            raise BrokerConnectionError(f"connection to {self.address} is closed")
        return self._sock

    def abort(self) -> None:
        """From another thread: make a request under way fail at once (the
        owner still closes the connection)."""
        sock = self._sock
        if sock is not None:
            try:
                tls_.shutdown(sock, socket.SHUT_RDWR)  # TLS left in place for the owner's read to fail in
            except OSError:
                pass

    def close(self) -> None:
        if self._sock is not None:
            sock, self._sock = self._sock, None
            sock.close()

    def __enter__(self) -> "BrokerConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _skip_tagged_fields(frame: memoryview, pos: int) -> int:
    """Past a flexible response header's tagged fields (none are used)."""
    count, pos = _uvarint(frame, pos)
    for _ in range(count):
        _, pos = _uvarint(frame, pos)
        size, pos = _uvarint(frame, pos)
        pos += size
    return pos


def _uvarint(data: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 28:
            raise BrokerConnectionError("a response header's tagged fields are malformed")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
