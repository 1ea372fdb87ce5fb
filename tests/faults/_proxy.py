"""A loopback TCP proxy that can cut the connection to the database, for real partitions.

`TcpProxy(port)` listens on a free loopback port and forwards every connection to
`127.0.0.1:<port>`. `cut()` closes every open connection and refuses new ones (the listening
socket is closed); `restore()` listens again on the same port.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    """Forwards loopback connections to a target port until cut (see the module docs)."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._listen()

    def _listen(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut: the listener was closed
            try:
                server = socket.create_connection(self.target, timeout=10)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:  # cut meanwhile: this one is cut too
                    client.close()
                    server.close()
                    return
                self._sockets.update((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            self._close(sock)

    def _close(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(sock)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()

    def cut(self) -> None:
        """Close every connection and refuse new ones."""
        with self._lock:
            listener, self._listener = self._listener, None
            open_sockets = list(self._sockets)
        if listener is not None:
            listener.close()
        for sock in open_sockets:
            self._close(sock)

    def restore(self) -> None:
        """Accept connections again (on the same port)."""
        if self._listener is None:
            self._listen()

    def close(self) -> None:
        self.cut()
