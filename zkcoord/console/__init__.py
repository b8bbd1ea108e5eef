"""`zkcoord console`: a read-only web console of one cluster, for the
operator in the middle of an incident (docs/CONSOLE.md).

Owns the console's pages and nothing they show: the data is read from
ZooKeeper by the readers the CLI uses (zkcoord.admin.groups for groups,
their state, owners, offsets and lag; zkcoord.zk.nodes for servers and
brokers), a drill's report and timeline by the drill's own code
(zkcoord.drill.report, timeline, checker), and logins are checked by
zkcoord.security.checks against the users in ZooKeeper, under the ACLs of
zkcoord.security.acl.

- config.py: the settings (`zkcoord console --help`);
- model.py: what the pages show, as JSON-able dicts, and the problems first;
- access.py: who must log in, and what a viewer may see;
- drills.py: the drill histories under ``--drills``;
- app.py: the Flask application (routes, login, error pages);
- cli.py: the command, serving the application on gevent;
- templates/, static/: plain HTML, CSS and one script, served as they are.

Flask, served by gevent's WSGI server: the console shares the CLI's
blocking readers, and every other zkcoord process runs on gevent (the
metrics endpoint already serves on gevent.pywsgi), so a request is a
greenlet and a ZooKeeper read waits without holding a thread. Flask is the
long-kept WSGI framework that needs nothing else (its Jinja templates
escape what they print); an asyncio framework would need a second,
asynchronous reader of the same nodes. The browser gets files as they are
written: no JavaScript build step, no framework downloaded at run time.

Layer 10 of the map in docs/DESIGN.md: it may import every package below
it (the drill's code, the admin readers, zk, security and the base modules);
only the command line imports it.
"""
