"""``zkcoord broker``: run one broker alone, in the foreground, until SIGTERM
or SIGINT. Also runnable as ``python -m zkcoord.broker.cli``."""

from __future__ import annotations

import argparse
import sys


def register(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("broker", help="run a Kafka-protocol broker alone",
                                   description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.set_defaults(func=run)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--id", type=int, required=True, help="broker id (as in /brokers/ids)")
    parser.add_argument("--zookeeper", required=True, help="ZooKeeper connect string, chroot allowed")
    parser.add_argument("--data-dir", required=True, help="directory of the partition logs")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=9092, help="port; 0 picks a free one")
    parser.add_argument("--advertised-host", help="host name to publish instead of --host")
    parser.add_argument("--rack")
    parser.add_argument("--segment-bytes", type=int, default=128 * 1024 * 1024)
    parser.add_argument("--retention-bytes", type=int, default=-1)
    parser.add_argument("--retention-ms", type=int, default=7 * 24 * 3600 * 1000)
    parser.add_argument("--retention-check-ms", type=int, default=60_000)
    parser.add_argument("--flush-messages", type=int)
    parser.add_argument("--flush-ms", type=int)
    parser.add_argument("--max-request-bytes", type=int, default=100 * 1024 * 1024)
    parser.add_argument("--max-connections", type=int, default=1000)
    parser.add_argument("--idle-timeout-ms", type=int, default=600_000,
                        help="close connections idle this long")
    parser.add_argument("--port-file", help="write the bound port here once serving")
    parser.add_argument("--zk-timeout", type=float, default=15.0,
                        help="seconds to wait for ZooKeeper at start")
    parser.add_argument("--zk-session-timeout", type=float, default=10.0,
                        help="ZooKeeper session timeout in seconds")
    parser.add_argument("--register-timeout-ms", type=int, default=30_000,
                        help="how long to wait for a crashed predecessor's registration to expire")


def run(args) -> int:
    from gevent import monkey

    if not monkey.is_module_patched("socket"):
        monkey.patch_all()

    import logging
    import signal

    import gevent
    import gevent.event
    from kazoo.client import KazooClient
    from zkcoord.zk.gevent_handler import GeventHandler

    from zkcoord.broker.config import BrokerConfig
    from zkcoord.broker.server import Broker
    from zkcoord.readiness import write_port_file
    from zkcoord.errors import ZkcoordError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        config = BrokerConfig(
            broker_id=args.id, data_dir=args.data_dir, host=args.host, port=args.port,
            advertised_host=args.advertised_host, rack=args.rack, segment_bytes=args.segment_bytes,
            retention_bytes=args.retention_bytes, retention_ms=args.retention_ms,
            retention_check_ms=args.retention_check_ms, flush_messages=args.flush_messages,
            flush_ms=args.flush_ms, max_request_bytes=args.max_request_bytes,
            register_timeout_ms=args.register_timeout_ms, max_connections=args.max_connections,
            idle_timeout_ms=args.idle_timeout_ms)
    except ZkcoordError as exc:
        print(f"zkcoord broker: {exc}", file=sys.stderr)
        return 2
    client = KazooClient(hosts=args.zookeeper, handler=GeventHandler(),
                         timeout=args.zk_session_timeout)
    try:
        client.start(timeout=args.zk_timeout)
    except Exception as exc:
        print(f"zkcoord broker: cannot reach ZooKeeper at {args.zookeeper}: {exc}", file=sys.stderr)
        return 1
    broker = Broker(config, client)
    try:
        broker.start()
    except ZkcoordError as exc:
        print(f"zkcoord broker: {exc}", file=sys.stderr)
        client.stop()
        return 1
    if args.port_file:
        write_port_file(args.port_file, port=broker.port)
    done = gevent.event.Event()
    gevent.signal_handler(signal.SIGTERM, done.set)
    gevent.signal_handler(signal.SIGINT, done.set)
    done.wait()
    broker.stop(timeout=10)
    client.stop()
    client.close()
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="zkcoord broker", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
