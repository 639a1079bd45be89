"""An https:// proxy: TLS to the proxy, CONNECT inside it, and the API server's TLS inside that.

The ssl module cannot put one SSLSocket inside another (OpenSSL would read the socket itself,
under the outer TLS), so the inner TLS runs on memory buffers (`SSLContext.wrap_bio`) whose bytes
go through the outer TLS socket. As Go's transport does for client-go, the proxy's certificate is
checked with the cluster's TLS settings (its CA, for the proxy's host name).
"""

from __future__ import annotations

import http.client
import io
import socket
import ssl
from typing import Any

READ_SIZE = 64 * 1024


class ProxiedConnection(http.client.HTTPConnection):
    """HTTP to the server through an https:// proxy's CONNECT tunnel (`server_context` None: the
    server speaks plain HTTP inside the tunnel)."""

    def __init__(
        self,
        proxy: tuple[str, int],
        timeout: float,
        proxy_context: ssl.SSLContext,
        server_context: ssl.SSLContext | None,
        server_name: str,
    ) -> None:
        super().__init__(proxy[0], proxy[1], timeout=timeout)
        self.proxy_context, self.tls, self.server_name = proxy_context, server_context, server_name

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = self.proxy_context.wrap_socket(sock, server_hostname=self.host)
        self._tunnel()  # type: ignore[attr-defined]  # http.client's CONNECT, on the TLS socket
        if self.tls is not None:
            self.sock = TunnelledTLS(self.sock, self.tls, self.server_name)


class TunnelledTLS:
    """TLS inside another TLS socket, with the socket methods http.client and the connection
    use (send, read, timeouts, keepalive options, shutdown from another thread, pending)."""

    def __init__(self, outer: ssl.SSLSocket, context: ssl.SSLContext, server_name: str) -> None:
        self.outer = outer
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._in, self._out, server_hostname=server_name)
        self._step(self._tls.do_handshake)

    def _step(self, operation: Any, *args: Any) -> Any:
        """Run a TLS operation, moving bytes between the buffers and the outer socket."""
        while True:
            try:
                result = operation(*args)
            except ssl.SSLWantReadError:
                self._flush()
                data = self.outer.recv(READ_SIZE)
                if data:
                    self._in.write(data)
                else:
                    self._in.write_eof()
                continue
            self._flush()
            return result

    def _flush(self) -> None:
        data = self._out.read()
        if data:
            self.outer.sendall(data)

    def recv_into(self, buffer: Any, nbytes: int = 0) -> int:
        try:
            count: int = self._step(self._tls.read, nbytes or len(buffer), buffer)
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            return 0  # the server closed the TLS session (or the proxy the tunnel)
        return count

    def recv(self, size: int) -> bytes:
        buffer = bytearray(size)
        return bytes(buffer[: self.recv_into(buffer)])

    def sendall(self, data: bytes) -> None:
        view = memoryview(data).cast("B")
        while view:
            view = view[self._step(self._tls.write, view) :]

    def makefile(self, mode: str = "rb", buffering: int = -1) -> io.BufferedReader:
        return io.BufferedReader(_Reader(self))

    def pending(self) -> int:
        """Bytes already decrypted or received, waiting to be read."""
        return self._tls.pending() + self._in.pending + self.outer.pending()

    def settimeout(self, timeout: float | None) -> None:
        self.outer.settimeout(timeout)

    def setsockopt(self, *args: Any) -> None:
        self.outer.setsockopt(*args)

    def shutdown(self, how: int) -> None:
        self.outer.shutdown(how)

    def fileno(self) -> int:
        return self.outer.fileno()

    def close(self) -> None:
        self.outer.close()


class _Reader(io.RawIOBase):
    def __init__(self, tls: TunnelledTLS) -> None:
        self.tls = tls

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self.tls.recv_into(buffer)
