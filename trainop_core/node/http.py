"""The little HTTP/1.1 a kubelet's endpoint needs, on asyncio streams: read one request (bounded),
write a plain response, a chunked body, or a 101 that hands the connection to another protocol."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

MAX_HEAD = 64 * 1024  # request line and headers together
MAX_HEADERS = 100
MAX_BODY = 64 * 1024  # no endpoint here takes a body; a small one is read and dropped
REASONS = {
    101: "Switching Protocols",
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
}


class HttpError(Exception):
    """A request this server refuses: `status` and a message the client sees."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Request:
    method: str
    path: str  # decoded
    query: dict[str, list[str]]
    headers: dict[str, list[str]] = field(default_factory=dict)  # names in lower case

    def header(self, name: str) -> str:
        """Every value of header `name`, joined with commas ("" if absent)."""
        return ", ".join(self.headers.get(name.lower(), []))

    def flag(self, name: str) -> bool:
        """A query parameter as the kubelet reads booleans ("1" or "true")."""
        return self.param(name).lower() in ("1", "true")

    def param(self, name: str, default: str = "") -> str:
        values = self.query.get(name)
        return values[-1] if values else default


async def read_request(reader: asyncio.StreamReader, timeout: float) -> Request | None:
    """The next request on the connection; None if it closed (or stayed idle `timeout` seconds)
    before sending one. Raises HttpError for a malformed or oversized one."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    except asyncio.LimitOverrunError:
        raise HttpError(431, f"request line and headers larger than {MAX_HEAD} bytes") from None
    except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError):
        return None
    request = _parse_head(head.decode("latin-1"))
    await _drop_body(reader, request, timeout)
    return request


def _parse_head(head: str) -> Request:
    lines = head.split("\r\n")[:-2]
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, "malformed request line")
    if len(lines) - 1 > MAX_HEADERS:
        raise HttpError(431, f"more than {MAX_HEADERS} headers")
    url = urlsplit(parts[1])
    request = Request(parts[0], unquote(url.path), parse_qs(url.query, keep_blank_values=True))
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise HttpError(400, "malformed header line")
        request.headers.setdefault(name.lower(), []).append(value.strip())
    return request


async def _drop_body(reader: asyncio.StreamReader, request: Request, timeout: float) -> None:
    if request.header("transfer-encoding"):
        raise HttpError(501, "request bodies with a transfer encoding are not accepted")
    length = request.header("content-length") or "0"
    if not length.isdigit():
        raise HttpError(400, "Content-Length is not a number")
    if int(length) > MAX_BODY:
        raise HttpError(413, f"request body larger than {MAX_BODY} bytes")
    if int(length):
        try:
            await asyncio.wait_for(reader.readexactly(int(length)), timeout)
        except (asyncio.IncompleteReadError, asyncio.TimeoutError) as exc:
            raise HttpError(400, "request body cut short") from exc


def head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def respond(
    writer: asyncio.StreamWriter,
    status: int,
    body: bytes,
    content_type: str = "text/plain; charset=utf-8",
    close: bool = False,
) -> None:
    """A whole response with a Content-Length."""
    headers = {"Content-Type": content_type, "Content-Length": str(len(body))}
    if close:
        headers["Connection"] = "close"
    writer.write(head(status, headers) + body)
    await writer.drain()


class Chunked:
    """A response body of unknown length (Transfer-Encoding: chunked)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer

    async def start(self, status: int = 200, content_type: str = "text/plain") -> None:
        headers = {"Content-Type": content_type, "Transfer-Encoding": "chunked"}
        self.writer.write(head(status, headers))
        await self.writer.drain()

    async def send(self, data: bytes) -> None:
        if data:
            self.writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            await self.writer.drain()

    async def end(self) -> None:
        self.writer.write(b"0\r\n\r\n")
        await self.writer.drain()
