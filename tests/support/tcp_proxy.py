"""A loopback TCP proxy whose link can be cut and restored: a real network fault.

Subclasses change what happens to each chunk passed on (`_chunk`, e.g. a delay); the
accept and pipe loops, and the cut, are this class's alone."""

from __future__ import annotations

import socket
import threading

from zonesync.dev import procs


class TcpProxy:
    def __init__(self, target_port: int):
        self.target_port = target_port
        self.port = procs.free_port()
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> TcpProxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def _accept(self, listener):
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                if listener is not self._listener:  # cut meanwhile: the cut is total
                    client.close()
                    upstream.close()
                    continue
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _chunk(self, data: bytes) -> None:
        """Called with each chunk before it is passed on (either way); nothing here."""

    def _pipe(self, src, dst):
        try:
            while data := src.recv(65536):
                self._chunk(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        """Refuse new connections and break every open one."""
        if self._listener:
            try:  # wakes the accept() blocked in the other thread (close alone does not)
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
            self._listener = None
        with self._lock:
            for s in self._conns:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                    s.close()
                except OSError:
                    pass
            self._conns.clear()

    def restore(self) -> None:
        self.start()

    def upstream_ports(self) -> set[int]:
        """The local ports of the proxy's connections to the target (as the target's
        processlist shows them, `127.0.0.1:PORT`), open or not."""
        ports = set()
        with self._lock:
            for s in self._conns[1::2]:  # (client, upstream) pairs
                try:
                    ports.add(s.getsockname()[1])
                except OSError:
                    pass
        return ports

    @property
    def is_cut(self) -> bool:
        return self._listener is None
