"""A stand-in Redis server that answers what a test scripts, to misbehave on purpose.

It speaks enough RESP to read commands (arrays of bulk strings, pipelined or
not) and hands each to `script(command) -> Reply`; the reply's bytes go out
as they are, so a test can send malformed, oversized, wrong-typed, truncated
or trickled replies. One thread per connection.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Callable


@dataclasses.dataclass
class Reply:
    """Bytes to send; `drip` seconds between single bytes; `close` after sending."""

    data: bytes = b""
    drip: float = 0.0
    close: bool = False


Script = Callable[[list[bytes]], Reply]


def bulk(value: bytes | None) -> bytes:
    return b"$-1\r\n" if value is None else b"$%d\r\n%s\r\n" % (len(value), value)


def array(items: list[bytes]) -> bytes:
    """An array of already encoded replies."""
    return b"*%d\r\n%s" % (len(items), b"".join(items))


def integer(value: int) -> bytes:
    return b":%d\r\n" % value


OK = b"+OK\r\n"
# redis-py opens each connection with HELLO 3 (RESP3) and CLIENT SETINFO.
HELLO = b"%1\r\n+proto\r\n:3\r\n"


def handshake(command: list[bytes]) -> Reply | None:
    """The reply to a connection's opening commands, None for any other command."""
    name = command[0].upper() if command else b""
    if name == b"HELLO":
        return Reply(HELLO)
    if name == b"CLIENT":
        return Reply(OK)
    return None


class _Reader:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._more()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exact(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            self._more()
        data, self.buf = self.buf[:n], self.buf[n + 2 :]
        return data

    def _more(self) -> None:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise EOFError
        self.buf += chunk

    def command(self) -> list[bytes]:
        head = self.line()
        if not head.startswith(b"*"):
            return head.split()  # inline command
        return [self.exact(int(self.line()[1:])) for _ in range(int(head[1:]))]


class StandInServer:
    """A loopback server answering every command with `script`; `url` reaches it."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.commands: list[list[bytes]] = []
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            # Replies go out one command at a time: without NODELAY, Nagle and
            # delayed ACKs would add 40 ms to every pipelined round trip.
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        reader = _Reader(conn)
        try:
            while not self._closed:
                command = reader.command()
                self.commands.append(command)
                reply = self.script(command)
                if reply.drip:
                    for i in range(len(reply.data)):
                        conn.sendall(reply.data[i : i + 1])
                        time.sleep(reply.drip)
                else:
                    conn.sendall(reply.data)
                if reply.close:
                    return
        except (EOFError, OSError, ValueError):
            return
        finally:
            conn.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def __enter__(self) -> StandInServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
