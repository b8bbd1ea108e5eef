"""Fuzzing live servers: random and mutated frames against a coordinator
and its embedded broker while a real group keeps consuming beside them.

Starts its own one-node ZooKeeper and one `zkcoord server` (coordinator
and embedded broker in one process) on 127.0.0.1, a topic with a producer
that keeps writing to it, and a thin consumer group (`zkcoord consume`
processes) reading it. Then --threads senders send --frames frames over many
short connections to both listeners: valid coordinator-protocol frames built
with zkcoord.wire and valid Kafka requests built with kafka-python, and
mutations of them (truncated, bits flipped, bytes overwritten, wrong and huge
size prefixes, unknown message types, API keys and versions, splices, pure
garbage), a few frames per connection; beside that, now and then, a frame
trickled byte by byte, a crowd of connections each holding a partial frame,
and a registered member of a group of its own sending mutated frames on its
member connection. A prober asks both listeners a valid request every
second on a connection of its own.

Measured: crashes (the server process died, or a probe went unanswered for
--probe-timeout seconds), the group's deliveries during the fuzz and the
Starts and Stops its members obeyed meanwhile (the fuzz must cause none),
and the server's RSS from after the first 5% of frames (allocators and
caches warmed) to a moment after the last (its connections gone), with its
peak; and the CPU the server and the bench itself spent meanwhile, to see
which limits the rate (--profile runs the server under cProfile and prints
where its time went). The last line is

    frames N; crashes C; group deliveries during fuzz D; server RSS growth M MiB

and the exit status is 1 if C > 0 or the group saw a rebalance. Bounded in
count (--frames) and time (--max-seconds: the fuzz stops there and reports
the frames it sent); everything started is stopped on exit.

    python bench/bench_fuzz.py --frames 1000000
"""

from __future__ import annotations

import argparse
import io
import os
import pstats
import random
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kafka.protocol.admin import DescribeClusterRequest, DescribeGroupsRequest, ListGroupsRequest  # noqa: E402
from kafka.protocol.consumer import (  # noqa: E402
    FetchRequest, HeartbeatRequest, LeaveGroupRequest, ListOffsetsRequest, OffsetFetchRequest, SyncGroupRequest,
)
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest  # noqa: E402
from kafka.protocol.producer import ProduceRequest  # noqa: E402
from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402

from zkcoord import wire  # noqa: E402
from zkcoord.testing import LocalCluster, exit_on_signal, start_ensemble, wait_until  # noqa: E402

TOPIC = "fuzzed"          # what the real group reads
SINK = "fuzz-sink"        # where the fuzz's own Produce requests write
GROUP = "fuzz-bystanders"
FUZZ_GROUPS = [f"fuzz-group-{i}" for i in range(4)]  # the fuzz's members register here, never in GROUP
PARTITIONS = 4
IO_TIMEOUT_S = 2.0
SERVER_ARGS = (
    "--zk-session-timeout-ms", "4000",
    "--min-session-timeout-ms", "1000",
    "--rebalance-timeout-ms", "5000",
    "--offset-flush-interval-ms", "500",
    "--frame-timeout-ms", "2000",  # trickled frames end within this
    "--metrics-port", "0",
)


# -- valid frames -----------------------------------------------------------------------------------


def coordinator_templates() -> list[bytes]:
    """Valid coordinator-protocol frames, in every version each message has."""
    requests = [
        wire.ClusterMetadataRequest(),
        wire.ClusterMetadataRequest(group_id=GROUP),
        wire.ClusterMetadataRequest(group_id=FUZZ_GROUPS[0], known_epoch=3, max_wait_ms=50),
        wire.ResetOffsetsRequest(group_id=FUZZ_GROUPS[1], execute=False,
                                 offsets=(wire.TopicPartitionOffset(TOPIC, 0, 0),)),
        wire.RegisterConsumerRequest(group_id=FUZZ_GROUPS[2], consumer_id="fuzzer", topics=(TOPIC,),
                                     session_timeout_ms=1000),
        # Frames a server never expects from a peer that has not registered.
        wire.PingResponse(offsets=(wire.TopicPartitionOffset(TOPIC, 1, 5),), last_poll_ms_ago=3),
        wire.StopResponse(coordinator_epoch=1, generation=1),
        wire.LeaveGroupRequest(),
        wire.ErrorResponse(message="fuzz"),
        wire.ClusterMetadataResponse(),
    ]
    frames = []
    for request in requests:
        for version in range(request.version_for(None) + 1):
            try:
                frames.append(wire.encode(request, random.randrange(1 << 31), version))
            except wire.WireError:  # a field this version cannot say: leave the version out
                continue
    return frames


def kafka_templates() -> list[bytes]:
    """Valid Kafka requests of the APIs and versions the broker serves (none
    that creates topics or writes to TOPIC: the fuzz must not change what the
    group reads by asking for it properly)."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    builder.append(0, timestamp=int(time.time() * 1000), key=b"k", value=b"fuzz" * 8, headers=[])
    batch = bytes(builder.build())
    lo_topic = ListOffsetsRequest.ListOffsetsTopic
    fetch_topic = FetchRequest.FetchTopic
    produce_topic = ProduceRequest.TopicProduceData
    built: list[tuple[Callable[[], object], range]] = [
        (lambda: ApiVersionsRequest(client_software_name="fuzz", client_software_version="1"), range(0, 4)),
        (lambda: MetadataRequest(topics=None, allow_auto_topic_creation=False), range(1, 13)),
        (lambda: MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)],
                                 allow_auto_topic_creation=False), range(0, 13)),
        (lambda: FindCoordinatorRequest(key=FUZZ_GROUPS[3], key_type=0), range(0, 4)),
        (lambda: ListGroupsRequest(states_filter=[]), range(0, 5)),
        (lambda: DescribeGroupsRequest(groups=[GROUP, FUZZ_GROUPS[0]]), range(0, 6)),
        (lambda: HeartbeatRequest(group_id=FUZZ_GROUPS[1], generation_id=1, member_id="nobody"), range(0, 5)),
        (lambda: LeaveGroupRequest(group_id=FUZZ_GROUPS[1], member_id="nobody"), range(0, 3)),
        (lambda: SyncGroupRequest(group_id=FUZZ_GROUPS[2], generation_id=1, member_id="nobody",
                                  assignments=[]), range(0, 4)),
        (lambda: OffsetFetchRequest(group_id=GROUP, topics=None), range(2, 8)),
        (lambda: DescribeClusterRequest(), range(0, 2)),
        (lambda: ListOffsetsRequest(replica_id=-1, topics=[lo_topic(name=TOPIC, partitions=[
            lo_topic.ListOffsetsPartition(partition_index=p, timestamp=-1, max_num_offsets=1)
            for p in range(PARTITIONS)])]), range(0, 9)),
        (lambda: FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 16, isolation_level=0,
                              session_id=0, session_epoch=-1, topics=[fetch_topic(topic=TOPIC, partitions=[
                                  fetch_topic.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                             last_fetched_epoch=-1, log_start_offset=-1,
                                                             partition_max_bytes=1 << 15)])],
                              forgotten_topics_data=[], rack_id=""), range(4, 13)),
        (lambda: ProduceRequest(transactional_id=None, acks=1, timeout_ms=1000, topic_data=[produce_topic(
            name=SINK, partition_data=[produce_topic.PartitionProduceData(index=0, records=batch)])]),
         range(3, 12)),
    ]
    frames = []
    for make, versions in built:
        for version in versions:
            request = make()
            request.API_VERSION = version
            request.with_header(correlation_id=random.randrange(1 << 31), client_id="fuzz")
            try:
                frames.append(bytes(request.encode(header=True, framed=True)))
            except Exception:  # a field this version cannot say: leave the version out
                continue
    return frames


# -- mutations ------------------------------------------------------------------------------------------


def with_size(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


def mutate(frame: bytes, templates: list[bytes], rng: random.Random) -> bytes:
    """A mutation of ``frame`` (size prefix and all); mostly with its size
    prefix made true again, so that the decoder, not the framing, meets it."""
    body = bytearray(frame[4:])
    kind = rng.randrange(12)
    if kind == 0:  # truncated: the rest never comes
        return frame[:rng.randrange(1, len(frame))]
    if kind == 1:  # wrong size prefix, body as it was
        return (max(len(body) + rng.randint(-8, 8), 0)).to_bytes(4, "big") + bytes(body)
    if kind == 2:  # huge or negative size prefix
        size = rng.choice([2**31 - 1, 2**30, 100 * 2**20 + 1, 2**24, -1, -2**31])
        return size.to_bytes(4, "big", signed=True) + bytes(body[:rng.randrange(0, 64)])
    if kind == 3:  # unknown message type / API key
        body[0:2] = rng.choice([rng.randrange(-2**15, 2**15), 0x7FFF, -1, 99, 1000]).to_bytes(2, "big", signed=True)
    elif kind == 4:  # unknown version
        body[2:4] = rng.choice([rng.randrange(-2**15, 2**15), 0x7FFF, -1, 13, 99]).to_bytes(2, "big", signed=True)
    elif kind == 5:  # pure garbage
        garbage = rng.randbytes(rng.randrange(0, 256))
        return with_size(garbage) if rng.random() < 0.7 else garbage
    elif kind == 6:  # splice of two frames' bodies
        other = rng.choice(templates)[4:]
        body = body[:rng.randrange(len(body) + 1)] + other[rng.randrange(len(other) + 1):]
    elif kind == 7 and len(body) > 8:  # a chunk deleted
        at = rng.randrange(8, len(body))
        del body[at:at + rng.randrange(1, 16)]
    elif kind == 8:  # bytes inserted
        at = rng.randrange(len(body) + 1)
        body[at:at] = rng.randbytes(rng.randrange(1, 16))
    elif kind == 9 and len(body) > 8:  # a length field's neighbourhood set to extremes
        at = rng.randrange(8, len(body))
        body[at:at + 4] = rng.choice([b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\x00\x00"])
    else:  # bits flipped, past the header mostly
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(len(body))
            body[at] ^= 1 << rng.randrange(8)
    if rng.random() < 0.85:
        return with_size(bytes(body))
    return len(frame[4:]).to_bytes(4, "big") + bytes(body)  # the old size: too long or too short


# -- the fuzz -------------------------------------------------------------------------------------------


class Fuzz:
    """Senders sharing one budget of frames, and what they count."""

    def __init__(self, ports: dict, templates: dict, frames: int, threads: int, deadline: float, seed: int):
        self.ports = ports
        self.target = frames
        self.threads = threads
        self.deadline = deadline
        self.seed = seed
        self.templates = templates
        self.all_templates = self.templates["coordinator"] + self.templates["broker"]
        self.sent = 0
        self.connections = 0
        self.connect_failures = 0
        self._lock = threading.Lock()
        self._trickling = 0
        self.session_seconds: dict[str, list] = {}  # kind -> [sessions, seconds]
        self.on_progress: Optional[Callable[[int], None]] = None

    def _take(self, count: int) -> int:
        """Claim up to ``count`` frames of the budget; 0 when it is spent or time is up."""
        with self._lock:
            if time.monotonic() >= self.deadline:
                return 0
            count = min(count, self.target - self.sent)
            if count <= 0:
                return 0
            self.sent += count
            sent = self.sent
        if self.on_progress is not None:
            self.on_progress(sent)
        return count

    def run(self) -> None:
        workers = [threading.Thread(target=self._worker, args=(i,), daemon=True) for i in range(self.threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    def _connect(self, listener: str) -> Optional[socket.socket]:
        try:
            sock = socket.create_connection(("127.0.0.1", self.ports[listener]), timeout=IO_TIMEOUT_S)
        except OSError:
            with self._lock:
                self.connect_failures += 1
            return None
        with self._lock:
            self.connections += 1
        return sock

    def _worker(self, index: int) -> None:
        rng = random.Random(self.seed * 1000 + index)
        while True:
            roll = rng.random()
            if roll < 0.002 and self._trickling < 4:
                session = self._trickle
            elif roll < 0.003:
                session = self._crowd
            elif roll < 0.005:
                session = self._member
            else:
                session = self._burst
            began = time.monotonic()
            if not session(rng):
                return
            with self._lock:
                spent = self.session_seconds.setdefault(session.__name__.lstrip("_"), [0, 0.0])
                spent[0] += 1
                spent[1] += time.monotonic() - began

    def _frames(self, listener: str, count: int, rng: random.Random) -> list[bytes]:
        templates = self.templates[listener]
        out = []
        for _ in range(count):
            frame = rng.choice(templates)
            if rng.random() < 0.6:
                frame = mutate(frame, self.all_templates if rng.random() < 0.1 else templates, rng)
            out.append(frame)
        return out

    def _burst(self, rng: random.Random) -> bool:
        """A few frames, valid and mutated, in one write; read what comes back; close."""
        count = self._take(rng.randint(1, 24))
        if not count:
            return False
        listener = "coordinator" if rng.random() < 0.5 else "broker"
        sock = self._connect(listener)
        if sock is None:
            return True
        try:
            sock.sendall(b"".join(self._frames(listener, count, rng)))
            if rng.random() < 0.9:
                # Said all: the server answers what it can and closes, and
                # the fuzz goes on without waiting for a silence.
                sock.shutdown(socket.SHUT_WR)
                drain(sock, 1.0)
            else:
                drain(sock, 0.05)
        except OSError:
            pass  # closed on us: what a bad frame earns
        finally:
            sock.close()
        return True

    def _trickle(self, rng: random.Random) -> bool:
        """One frame, a byte at a time, until the server cuts it (its frame deadline) or 4 s."""
        if not self._take(1):
            return False
        listener = rng.choice(["coordinator", "broker"])
        frame = rng.choice(self.templates[listener])
        frame = (len(frame) + 1000).to_bytes(4, "big") + frame[4:]  # never whole
        sock = self._connect(listener)
        if sock is None:
            return True
        with self._lock:
            self._trickling += 1
        try:
            sock.settimeout(0.2)
            ends = time.monotonic() + 4.0
            for byte in frame:
                if time.monotonic() > ends:
                    break
                sock.send(bytes([byte]))
                try:
                    if sock.recv(4096) == b"":
                        break
                except socket.timeout:
                    pass
        except OSError:
            pass
        finally:
            sock.close()
            with self._lock:
                self._trickling -= 1
        return True

    def _crowd(self, rng: random.Random) -> bool:
        """Many connections at once, each holding part of a frame, then all gone."""
        count = self._take(rng.randint(20, 100))
        if not count:
            return False
        listener = rng.choice(["coordinator", "broker"])
        held = []
        try:
            for frame in self._frames(listener, count, rng):
                sock = self._connect(listener)
                if sock is None:
                    continue
                held.append(sock)
                try:
                    sock.sendall(frame[:rng.randrange(1, len(frame) + 1)] if len(frame) > 1 else frame)
                except OSError:
                    pass
            time.sleep(rng.uniform(0.05, 0.5))  # the crowd holds its connections a while
        finally:
            for sock in held:
                sock.close()
        return True

    def _member(self, rng: random.Random) -> bool:
        """Register in a fuzz group, then mutated frames on the member's connection."""
        count = self._take(rng.randint(2, 12))
        if not count:
            return False
        sock = self._connect("coordinator")
        if sock is None:
            return True
        try:
            register = wire.RegisterConsumerRequest(
                group_id=rng.choice(FUZZ_GROUPS), consumer_id=f"fuzz-{rng.randrange(1 << 30)}", topics=(TOPIC,),
                session_timeout_ms=1000)
            sock.sendall(wire.encode(register, 1))
            drain(sock, 0.2)
            frames = []
            for _ in range(count - 1):
                message = rng.choice([wire.PingResponse(), wire.StopResponse(), wire.LeaveGroupRequest(),
                                      wire.ErrorResponse(message="fuzz"), wire.ClusterMetadataRequest()])
                frame = wire.encode(message, rng.randrange(1 << 31))
                frames.append(mutate(frame, self.templates["coordinator"], rng) if rng.random() < 0.5 else frame)
            sock.sendall(b"".join(frames))
            drain(sock, 0.1)
        except OSError:
            pass
        finally:
            sock.close()
        return True


def drain(sock: socket.socket, quiet_s: float) -> None:
    """Read until the server closes or says nothing for ``quiet_s``."""
    sock.settimeout(quiet_s)
    try:
        while sock.recv(65536):
            pass
    except (socket.timeout, OSError):
        pass


# -- what is measured ---------------------------------------------------------------------------------


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def probe(ports: dict) -> Optional[str]:
    """None if both listeners answer a valid request on a new connection, else what failed."""
    try:
        with socket.create_connection(("127.0.0.1", ports["coordinator"]), timeout=PROBE_TIMEOUT_S) as sock:
            sock.sendall(wire.encode(wire.ClusterMetadataRequest(), 7))
            decoder = wire.FrameDecoder()
            frames = []
            while not frames:
                chunk = sock.recv(65536)
                if not chunk:
                    return "the coordinator closed a valid request's connection"
                frames = decoder.feed(chunk)
            if not isinstance(frames[0].message, wire.ClusterMetadataResponse):
                return f"the coordinator answered {frames[0].message!r}"
    except OSError as exc:
        return f"the coordinator did not answer: {exc}"
    request = ApiVersionsRequest()
    request.API_VERSION = 0
    request.with_header(correlation_id=7, client_id="probe")
    try:
        with socket.create_connection(("127.0.0.1", ports["broker"]), timeout=PROBE_TIMEOUT_S) as sock:
            sock.sendall(bytes(request.encode(header=True, framed=True)))
            got = b""
            while len(got) < 4 or len(got) < 4 + int.from_bytes(got[:4], "big"):
                chunk = sock.recv(65536)
                if not chunk:
                    return "the broker closed a valid request's connection"
                got += chunk
    except OSError as exc:
        return f"the broker did not answer: {exc}"
    return None


PROBE_TIMEOUT_S = 10.0


class Prober(threading.Thread):
    """Asks both listeners a valid request every second; counts what went unanswered."""

    def __init__(self, ports: dict, server):
        super().__init__(daemon=True)
        self.ports = ports
        self.server = server
        self.failures: list[str] = []
        self.probes = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(1.0):
            if not self.server.alive:
                self.failures.append("the server process died")
                return
            failed = probe(self.ports)
            self.probes += 1
            if failed is not None:
                self.failures.append(failed)


class Producer(threading.Thread):
    """Keeps writing to TOPIC, so that the group has something to deliver."""

    def __init__(self, bootstrap: str, rate: int):
        super().__init__(daemon=True)
        from confluent_kafka import Producer as KafkaProducer

        self.producer = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 0})
        self.rate = rate
        self.stopping = threading.Event()
        self.sent = 0

    def run(self) -> None:
        while not self.stopping.wait(0.1):
            for _ in range(self.rate // 10):
                try:
                    self.producer.produce(TOPIC, value=b"r%d" % self.sent)
                    self.sent += 1
                except BufferError:
                    break
            self.producer.poll(0)
        self.producer.flush(5)


def own_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def lines(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def refusals(server) -> dict:
    metrics = server.scrape()
    out = {}
    for listener in ("coordinator", "broker"):
        for kind in ("malformed", "frame_deadline", "per_address", "buffer_cap"):
            value = metrics.value("zkcoord_listener_refusals_total", listener=listener, kind=kind)
            if value:
                out[f"{listener}/{kind}"] = int(value)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=100_000, help="frames to send (default 100000)")
    parser.add_argument("--threads", type=int, default=16, help="sending threads (default 16)")
    parser.add_argument("--consumers", type=int, default=2, help="members of the real group (default 2)")
    parser.add_argument("--rate", type=int, default=500, help="records/s produced for the group (default 500)")
    parser.add_argument("--max-seconds", type=float, default=1500.0,
                        help="stop the fuzz after this long, whatever is left (default 1500)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="run the server under cProfile and print where its time went")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, exit_on_signal)
    random.seed(args.seed)

    templates = {"coordinator": coordinator_templates(), "broker": kafka_templates()}
    work = Path(tempfile.mkdtemp(prefix="bench-fuzz-"))
    ensemble = cluster = producer = prober = None
    try:
        ensemble = start_ensemble(work / "zk", nodes=1, timeout=60)
        cluster = LocalCluster(ensemble.connect_string, work / "cluster", SERVER_ARGS)
        server = cluster.add_server(1, start=False)
        profile_path = work / "server.pstats"
        if args.profile:  # python -m cProfile -o ... -m zkcoord.cli server ...
            server.command = [*server.command[:1], "-m", "cProfile", "-o", str(profile_path), *server.command[1:]]
        server.start(60)
        cluster.wait_for_brokers(60)
        cluster.wait_for_coordinator(60)
        cluster.create_topic(TOPIC, PARTITIONS)
        cluster.create_topic(SINK, 1)
        ports = {"coordinator": server.port, "broker": server.broker_port}
        producer = Producer(cluster.broker_list, args.rate)
        producer.start()
        members = [cluster.add_consumer(GROUP, topics=[TOPIC]) for _ in range(args.consumers)]
        wait_until(lambda: sum(len(m.assignment()) for m in members) == PARTITIONS, 60,
                   message="the group's partitions assigned")
        wait_until(lambda: sum(lines(m.output_path) for m in members) > 0, 30, message="the group delivering")
        time.sleep(2.0)  # the group settled: its first Starts written out before counting
        prober = Prober(ports, server)
        prober.start()

        fuzz = Fuzz(ports, templates, args.frames, args.threads, time.monotonic() + args.max_seconds, args.seed)
        warm = max(args.frames // 20, 1)
        marks: dict = {}
        peak = [rss_mib(server.pid)]

        def progress(sent: int) -> None:
            if "rss" not in marks and sent >= warm:
                marks["rss"] = rss_mib(server.pid)
            if sent % 2000 < 24:
                try:
                    peak[0] = max(peak[0], rss_mib(server.pid))
                except (OSError, RuntimeError):
                    pass
            if sent >= marks.get("report", 100_000):
                marks["report"] = sent - sent % 100_000 + 100_000
                print(f"  {sent} frames sent, {time.monotonic() - began:.0f} s", flush=True)

        fuzz.on_progress = progress
        rss_before = rss_mib(server.pid)
        delivered_before = sum(lines(m.output_path) for m in members)
        events_before = sum(lines(m.events_path) for m in members)
        print(f"fuzzing coordinator :{ports['coordinator']} and broker :{ports['broker']} with {args.frames} "
              f"frames ({len(fuzz.templates['coordinator'])} + {len(fuzz.templates['broker'])} valid templates), "
              f"server RSS {rss_before:.1f} MiB", flush=True)
        began = time.monotonic()
        server_cpu, bench_cpu = server.cpu_seconds(), own_cpu_seconds()
        fuzz.run()
        elapsed = time.monotonic() - began
        server_cpu, bench_cpu = server.cpu_seconds() - server_cpu, own_cpu_seconds() - bench_cpu
        delivered = sum(lines(m.output_path) for m in members) - delivered_before
        rebalances = sum(lines(m.events_path) for m in members) - events_before
        producer.stopping.set()  # before the results: its client's last words must not follow them
        producer.join(10)
        # The fuzz's connections are all closed: let the server see them go.
        time.sleep(3.0)
        probe_failure = probe(ports) if server.alive else "the server process died"
        prober.stopping.set()
        prober.join(PROBE_TIMEOUT_S + 2)
        failures = prober.failures + ([probe_failure] if probe_failure and probe_failure not in prober.failures
                                      else [])
        crashes = len(failures)  # each death or unanswered probe
        rss_after = rss_mib(server.pid) if server.alive else float("nan")
        growth = rss_after - marks.get("rss", rss_before)
        tracebacks = server.log_path.read_text(errors="replace").count("Traceback")
        counted = refusals(server) if server.alive else {}
        if args.profile:
            server.terminate(timeout=30)  # cProfile writes its stats as the server exits
            out = io.StringIO()
            pstats.Stats(str(profile_path), stream=out).sort_stats("tottime").print_stats(25)
            print(out.getvalue())
        print(f"{fuzz.sent} frames on {fuzz.connections} connections in {elapsed:.1f} s "
              f"({fuzz.sent / elapsed:,.0f} frames/s); {fuzz.connect_failures} connects refused; "
              f"{prober.probes} probes")
        print("sessions: " + ", ".join(f"{kind} {count} ({seconds / count * 1000:.1f} ms each)"
                                       for kind, (count, seconds) in sorted(fuzz.session_seconds.items())))
        print(f"CPU during the fuzz: server {server_cpu:.1f} s ({100 * server_cpu / elapsed:.0f}% of a core), "
              f"bench {bench_cpu:.1f} s ({100 * bench_cpu / elapsed:.0f}%)")
        print(f"server RSS {rss_before:.1f} MiB at start, {marks.get('rss', rss_before):.1f} after "
              f"{warm} frames, peak {peak[0]:.1f}, {rss_after:.1f} after the fuzz; "
              f"tracebacks in its log {tracebacks}")
        print(f"refusals counted: {counted}")
        print(f"group: {delivered} records delivered during the fuzz; Starts/Stops during the fuzz {rebalances}")
        for failure in failures[:10]:
            print(f"crash: {failure}")
        print(f"frames {fuzz.sent}; crashes {crashes}; group deliveries during fuzz {delivered}; "
              f"server RSS growth {growth:.1f} MiB")
        return 1 if crashes or rebalances else 0
    except BaseException:
        if cluster is not None:
            for name, tail in cluster.log_tails().items():
                print(f"--- {name} log (tail) ---\n{tail[-3000:]}", file=sys.stderr)
        raise
    finally:
        if prober is not None:
            prober.stopping.set()
        if producer is not None:
            producer.stopping.set()
            producer.join(10)
        if cluster is not None:
            cluster.close()
        if ensemble is not None:
            ensemble.stop()
        if args.keep:
            print(f"work directory kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
