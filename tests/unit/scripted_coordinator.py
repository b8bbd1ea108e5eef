"""A scripted coordinator on 127.0.0.1 for the member's network thread's tests:
each test says how it answers a frame; the socket, the threads and the
ClusterMetadata naming itself are here."""

from __future__ import annotations

import socket
import threading

from zkcoord import wire
from zkcoord.channel import Channel, ChannelClosed


class Listener:
    """A member's listener that runs nothing and reports nothing."""

    def on_start(self, partitions):
        pass

    def on_stop(self, partitions):
        return {}

    def offsets(self):
        return None

    def last_poll_ms_ago(self):
        return 0


class ScriptedServer:
    """Answers each frame of each connection with :meth:`answer`, which
    returns False to close that connection."""

    epoch = 5  # the coordinator epoch it names itself under

    def __init__(self) -> None:
        self._channels: list[Channel] = []
        self._closed = False
        self._lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def answer(self, channel: Channel, frame: wire.Frame) -> bool:
        raise NotImplementedError

    def name_myself(self, channel: Channel, frame: wire.Frame) -> None:
        """Answer a ClusterMetadataRequest: I coordinate, at ``epoch``."""
        me = wire.NodeAddress(1, "127.0.0.1", self.port)
        channel.send(wire.ClusterMetadataResponse(coordinator_id=1, coordinator_epoch=self.epoch, servers=(me,)),
                     frame.correlation_id)

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                if self._closed:  # accepted as close() ran: ended as close() ends the others
                    sock.close()
                    return
                channel = Channel(sock)
                self._channels.append(channel)
            threading.Thread(target=self._connection, args=(channel,), daemon=True).start()

    def _connection(self, channel: Channel) -> None:
        try:
            while True:
                frame = channel.receive(timeout=10)
                if frame is None or not self.answer(channel, frame):
                    return
        except (ChannelClosed, OSError, wire.WireError):
            pass
        finally:
            channel.close()

    def close(self) -> None:
        """Stop listening and end every connection, one left unanswered too, so
        that no member is left waiting for an answer. A shutdown, unlike a
        close, reaches a socket another thread is blocked on (a close left
        the listener accepting)."""
        with self._lock:
            self._closed = True
        for sock in [self.listener] + [channel.sock for channel in self._channels]:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # ended already
        self.listener.close()
