"""The console's web application: its routes, its login, and the pages it
answers when something goes wrong.

Every page has a fragment beside it (``/fragments/...``, the part of the
page that changes) that the page's script asks for again every few
seconds and swaps in, so the page follows the cluster without reloading
and without a second rendering of the same data in JavaScript; the group
page's live ownership timeline is drawn from the owners each fragment
carries. ``/api/...`` serves the same data as JSON.

Nothing that goes wrong reaches the viewer as a stack trace: an unknown
group or drill is a 404 page, a name the layout refuses a 400, a viewer the
ACLs refuse a 403, a ZooKeeper that cannot be reached a 503 (the page's
script keeps the last view and says so), anything else a 500 page that
names the error, with the trace in the console's log.
"""

from __future__ import annotations

import datetime
import logging
import os
import time
from pathlib import Path
from typing import Optional

from flask import Flask, abort, jsonify, redirect, render_template, request, session, url_for
from kazoo.exceptions import KazooException, NoAuthError
from werkzeug.exceptions import HTTPException

from zkcoord.admin.groups import list_groups, started_at
from zkcoord.admin.live import kind_name, lease_text
from zkcoord.console import drills, model
from zkcoord.console.access import Access, LoginEnded, Viewer
from zkcoord.console.config import ConsoleConfig
from zkcoord.drill.timeline import PALETTE  # a member's colour as in the drill's timeline; no reds
from zkcoord.errors import ZkcoordError
from zkcoord.security.scram import AuthenticationFailed
from zkcoord.zk import layout

log = logging.getLogger(__name__)


class ZooKeeperUnavailable(ZkcoordError):
    """The console's ZooKeeper session is not connected now."""

    retriable = True


def create_app(zk, config: ConsoleConfig, access: Access, ends: model.Ends = None,
               clock=time.monotonic, members: model.Members = None) -> Flask:
    """The console over the started kazoo client ``zk``; ``ends`` gives
    partitions' log end offsets (None: no lag shown); ``members`` asks a
    group's coordinator for its members now (admin/live.py; None: the
    members as ZooKeeper recorded them, without their leases)."""
    app = Flask(__name__)
    app.config.update(SECRET_KEY=os.urandom(32),  # a restart logs everyone out, as it should
                      SESSION_COOKIE_HTTPONLY=True, SESSION_COOKIE_SAMESITE="Strict",
                      PERMANENT_SESSION_LIFETIME=datetime.timedelta(milliseconds=config.session_ms))
    trend = model.LagTrend(clock)
    reports = drills.DrillReports()
    drill_root = Path(config.drills) if config.drills else None

    # -- who is looking --------------------------------------------------------------------------------

    def viewer() -> Viewer:
        connected()
        return access.viewer(session.get("user"), request.remote_addr or "")

    def connected() -> None:
        if not zk.connected:
            raise ZooKeeperUnavailable("ZooKeeper cannot be reached now; the console reconnects by itself")

    def to_login(why: str):
        if request.path.startswith(("/fragments/", "/api/")):
            return error_page(401, "Not logged in", why), 401
        return redirect(url_for("login", next=request.full_path.rstrip("?")))

    @app.before_request
    def require_login():
        if request.endpoint in ("login", "static") or not access.login_required:
            return None
        if session.get("user") is None:
            return to_login("Log in again: the login has ended.")
        return None

    @app.errorhandler(LoginEnded)
    def login_ended(exc: LoginEnded):
        session.clear()
        return to_login(str(exc))

    @app.context_processor
    def common():
        return {"user": session.get("user"), "login_required": access.login_required,
                "drills_shown": drill_root is not None, "refresh_ms": config.refresh_ms, "palette": PALETTE,
                "when": _when, "started_at": started_at, "kind_name": kind_name, "lease_text": lease_text}

    @app.route("/login", methods=["GET", "POST"])
    def login():
        if not access.login_required:
            return redirect(url_for("overview"))
        error = None
        if request.method == "POST":
            name = request.form.get("user", "")
            try:
                connected()
                access.check_password(request.remote_addr or "", name, request.form.get("password", ""))
            except AuthenticationFailed as exc:
                error = str(exc)
                time.sleep(access.failure_delay_s)  # as the brokers answer one: no fast guessing
            else:
                session.clear()
                session.permanent = True
                session["user"] = name
                target = request.args.get("next", "")
                # Only a path of this console: never a redirect elsewhere.
                return redirect(target if target.startswith("/") and not target.startswith(("//", "/\\"))
                                else url_for("overview"))
        return render_template("login.html", error=error), 401 if error else 200

    @app.route("/logout", methods=["POST"])
    def logout():
        session.clear()
        return redirect(url_for("login"))

    # -- the cluster -----------------------------------------------------------------------------------

    def overview_data() -> dict:
        who = viewer()
        return model.overview(zk, ends, who.sees_group, who.sees_topic, trend, members)

    @app.route("/")
    def overview():
        return render_template("overview.html", view=overview_data())

    @app.route("/fragments/overview")
    def overview_fragment():
        return render_template("overview_body.html", view=overview_data())

    @app.route("/api/overview")
    def overview_json():
        return jsonify(overview_data())

    def group_data(name: str) -> dict:
        try:
            layout.group_path(name)
        except layout.LayoutError as exc:
            abort(400, f"{name!r} is no group name: {exc}")
        who = viewer()
        if not who.sees_group(name):  # before existence, as Kafka answers: no telling who exists
            abort(403, f"{who.principal} may not describe group {name!r}")
        if name not in list_groups(zk):
            abort(404, f"There is no group {name!r} in this cluster.")
        view = model.group_view(zk, name, ends, who.sees_topic, members)
        view["ownership"] = model.ownership(view)
        return view

    @app.route("/groups/<path:name>")
    def group(name: str):
        return render_template("group.html", view=group_data(name))

    @app.route("/fragments/groups/<path:name>")
    def group_fragment(name: str):
        return render_template("group_body.html", view=group_data(name))

    @app.route("/api/groups/<path:name>")
    def group_json(name: str):
        return jsonify(group_data(name))

    # -- drills ----------------------------------------------------------------------------------------

    def shown_drills() -> Path:
        if drill_root is None:
            abort(404, "This console shows no drills: start it with --drills DIR.")
        if not viewer().sees_drills():
            abort(403, "Drills are shown to those who may describe the cluster.")
        return drill_root

    def drill_dir(name: str) -> Path:
        try:
            return drills.resolve(shown_drills(), name)
        except drills.NotADrill as exc:
            abort(404, str(exc))

    @app.route("/drills")
    def drill_list():
        root = shown_drills()
        return render_template("drills.html", drills=drills.list_drills(root), root=root)

    @app.route("/drills/view/", defaults={"name": ""})
    @app.route("/drills/view/<path:name>")
    def drill(name: str):
        directory = drill_dir(name)
        try:
            document, text, own = reports.report(directory)
        except drills.NotADrill as exc:
            abort(404, str(exc))
        return render_template("drill.html", name=name, label=name or directory.name, report=document,
                               text=text, own=own, lines=_report_lines(text))

    @app.route("/drills/timeline/", defaults={"name": ""})
    @app.route("/drills/timeline/<path:name>")
    def drill_timeline(name: str):
        try:
            page = reports.timeline(drill_dir(name))
        except drills.NotADrill as exc:
            abort(404, str(exc))
        # The drill's page is self-contained and runs no script; say so to the browser too.
        return page, 200, {"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:",
                           "Content-Type": "text/html; charset=utf-8"}

    # -- when things go wrong --------------------------------------------------------------------------

    def error_page(status: int, title: str, text: str) -> str:
        template = "error_body.html" if request.path.startswith("/fragments/") else "error.html"
        if request.path.startswith("/api/"):
            return jsonify({"error": title, "message": text})
        return render_template(template, status=status, title=title, text=text)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException):
        return error_page(exc.code or 500, f"{exc.code} {exc.name}", exc.description or ""), exc.code

    @app.errorhandler(ZooKeeperUnavailable)
    @app.errorhandler(KazooException)
    def zookeeper_gone(exc: Exception):
        if isinstance(exc, NoAuthError):
            return error_page(403, "Refused by ZooKeeper", "The console's ZooKeeper credential may not read "
                                                          "these nodes (their ACL refuses it)."), 403
        log.warning("ZooKeeper unavailable for %s: %r", request.path, exc)
        return error_page(503, "ZooKeeper unavailable", str(exc) or "ZooKeeper did not answer; the console "
                                                                     "reconnects by itself."), 503

    @app.errorhandler(ZkcoordError)
    def zkcoord_error(exc: ZkcoordError):
        log.warning("%s: %s", request.path, exc)
        return error_page(500, "Cannot show this", str(exc)), 500

    @app.errorhandler(Exception)
    def unexpected(exc: Exception):
        log.exception("%s failed", request.path)
        return error_page(500, "Internal error", f"{type(exc).__name__}: {exc} (the console's log has "
                                                 f"the details)"), 500

    return app


def _when(ms: Optional[int]) -> str:
    """A ZooKeeper time (ms since 1970) as UTC text."""
    if ms is None:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


# Lines of a drill's text report that tell of a violation or a slow recovery.
TROUBLE = ("VIOLATED", "NOT WHOLE", "LATE", "FAIL", "INTERRUPTED", "lost (", "double ownership",
           "deliveries after")


def _report_lines(text: str) -> list[tuple[str, bool]]:
    """The report's lines, each with whether it tells of trouble (shown highlighted)."""
    return [(line, any(mark in line for mark in TROUBLE) and "[ok]" not in line) for line in text.splitlines()]
