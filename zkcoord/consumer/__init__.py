"""The thin consumer: poll() and commit over a group membership and its fetchers.

It owns the application's side of a member (``consumer``: poll, poll_batch,
the offsets finished with, a Stop's wait for them), its record buffer
(``buffer``) and settings (``config``), and the ``zkcoord consume`` command.
The member side of the protocol it drives is ``zkcoord.member``'s.

May import the layers below it (docs/DESIGN.md, the map): ``member``,
``admin``, ``fetch`` and below; never ``broker`` or above (its command's
front door, ``cli``, aside).
"""
