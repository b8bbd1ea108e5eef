"""`zkcoord console`: the web console, served on gevent until stopped."""

from __future__ import annotations

import argparse
import logging
from functools import partial
from pathlib import Path

log = logging.getLogger(__name__)

# The authorizer's and the login limits' settings of the brokers and
# servers, which the console applies to its own viewers alike.
ACCESS_SETTINGS = ("authorizer", "super_users", "failed_authentication_delay_ms", "login_failures_burst",
                   "login_failure_refill_ms")
# Requests served at once: a few operators, each page asking every second or so.
MAX_REQUESTS = 64


def register(subparsers) -> None:
    from zkcoord import settings
    from zkcoord.admin import add_security_options, reset
    from zkcoord.console.config import ConsoleConfig
    from zkcoord.security.config import SecurityConfig

    parser = subparsers.add_parser(
        "console", help="a read-only web console: slots, servers, groups, owners, lag, drills",
        description="Serve a read-only web console of the cluster whose ZooKeeper is --zookeeper: the "
                    "coordinator slots and servers, the groups with their state, members, owners and lag "
                    "(as `zkcoord groups describe` reads them), live, and the drills of --drills. "
                    "With ZooKeeper credentials or TLS it asks viewers to log in as a zkcoord user.")
    parser.add_argument("--zookeeper", required=True, help="ZooKeeper connect string, chroot allowed")
    add_security_options(parser)
    settings.add_options(parser, ConsoleConfig)
    settings.add_options(parser, SecurityConfig, only=ACCESS_SETTINGS)
    parser.add_argument("--no-lag", action="store_true", help="do not ask the brokers for log end offsets")
    reset.add_client_options(parser)  # the brokers' log ends, asked as `zkcoord groups describe` asks them
    parser.add_argument("--port-file", default=None, help="write the port served, as JSON, once serving")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # gevent must patch the process before the networking modules are used.
    from gevent import monkey

    monkey.patch_all()
    import gevent.event
    import gevent.pool
    import gevent.pywsgi

    from zkcoord import settings
    from zkcoord.admin import security_from, zookeeper_session
    from zkcoord.admin.groups import log_end_offsets
    from zkcoord.admin.live import live_members
    from zkcoord.admin.reset import client_credential, client_tls, kafka_bootstrap
    from zkcoord.console.access import Access
    from zkcoord.console.app import create_app
    from zkcoord.console.config import ConsoleConfig
    from zkcoord.errors import ConfigError
    from zkcoord.interrupts import on_stop
    from zkcoord.readiness import write_port_file
    from zkcoord.security.checks import LoginChecks
    from zkcoord.security.config import SecurityConfig
    from zkcoord.zk.client import reconnecting_for_ever
    from zkcoord.zk.cluster_hosts import ClusterHosts
    from zkcoord.zk.gevent_handler import GeventHandler
    from zkcoord.zk.security_store import CredentialStore

    config = settings.from_args(ConsoleConfig, args)
    if config.drills is not None and not Path(config.drills).is_dir():
        raise ConfigError(f"--drills {config.drills}: no such directory")
    security = settings.from_args(SecurityConfig, args)
    zk_security = security_from(args)
    # A secured ZooKeeper holds what only its principals may read: so may the console's viewers.
    login_required = config.require_login or zk_security.authenticated or zk_security.tls or security.authorizing
    handler = GeventHandler()
    with zookeeper_session(args.zookeeper, security=zk_security, handler=handler,
                           connection_retry=reconnecting_for_ever(handler)) as zk:
        ends = None if args.no_lag else log_end_offsets(
            zk, tls=client_tls(args), credential=client_credential(args),
            plain_without_tls=args.password_without_tls, kafka_bootstrap=kafka_bootstrap(args))
        logins = LoginChecks(CredentialStore(zk), security, ClusterHosts(zk)) if login_required else None
        access = Access(zk, login_required, logins, security.authorizing, security.super_principals)
        # The console's own credential goes to the coordinators only where it may travel.
        credential = client_credential(args) if client_tls(args) is not None or args.password_without_tls else None
        members = partial(live_members, zk, tls=client_tls(args), credential=credential)
        app = create_app(zk, config, access, ends, members=members)
        server = gevent.pywsgi.WSGIServer((config.host, config.port), app, spawn=gevent.pool.Pool(MAX_REQUESTS),
                                          log=None, error_log=log)
        try:
            server.start()
        except OSError as exc:
            raise ConfigError(f"cannot serve the console on {config.host}:{config.port}: {exc}") from None
        stopped = gevent.event.Event()
        on_stop(stopped.set, greenlet=True)
        if args.port_file is not None:
            write_port_file(args.port_file, port=server.server_port)
        print(f"console on http://{config.host}:{server.server_port}/"
              + (" (login required)" if login_required else ""), flush=True)
        try:
            stopped.wait()
        finally:
            server.stop(timeout=2)
            access.close()
    return 0
