"""SPDY/3.1 framing, the server side, as kube-apiserver's SPDY client (moby/spdystream) speaks it.

kube-apiserver 1.36 reaches a kubelet's ``/exec`` over SPDY/3.1 (it uses WebSockets to a kubelet
only when the node declares the ExtendWebSocketsToKubelet feature). Facts from the SPDY/3 draft:

- A frame is 8 bytes of header then its payload. A control frame: bit 1, version (15 bits, 3),
  type (16 bits), flags (8 bits), length (24 bits). A data frame: bit 0, stream id (31 bits),
  flags, length. Flag 0x01 is FIN (this side sends no more on the stream).
- SYN_STREAM (1) opens a stream: id, associated id, priority (3 bits) and slot, then a header
  block; SYN_REPLY (2) accepts it: id and a header block; RST_STREAM (3) ends it with a status;
  PING (6) is echoed with the same id; GOAWAY (7) ends the session; HEADERS (8) adds headers;
  SETTINGS (4) and WINDOW_UPDATE (9) are read and ignored (spdystream does no flow control
  either, so none is enforced on it).
- A header block is a 32-bit count, then for each pair a 32-bit length and the name (lower case),
  a 32-bit length and the value; it travels zlib-compressed with one compression context per
  direction for the whole session, primed with SPDY's dictionary, each block ending in a sync
  flush. Every block received must go through the decompressor, even one that is ignored.

Bounded against a hostile or broken peer: control frames, decompressed header blocks, header
counts, open streams and unread data per stream all have limits; breaking one ends the session
with GOAWAY PROTOCOL_ERROR (or the stream with RST_STREAM), never with a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

VERSION = 3
FLAG_FIN = 0x01
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = (
    1,
    2,
    3,
    4,
    6,
    7,
    8,
    9,
)
# RST_STREAM and GOAWAY status codes
PROTOCOL_ERROR, REFUSED_STREAM, CANCEL, INTERNAL_ERROR = 1, 3, 5, 6
GOAWAY_OK, GOAWAY_PROTOCOL_ERROR = 0, 1

# SPDY/3's header compression dictionary: these words, each after its 32-bit length, then a tail.
_WORDS = (
    "options head post put delete trace accept accept-charset accept-encoding "
    "accept-language accept-ranges age allow authorization cache-control connection "
    "content-base content-encoding content-language content-length content-location "
    "content-md5 content-range content-type date etag expect expires from host if-match "
    "if-modified-since if-none-match if-range if-unmodified-since last-modified location "
    "max-forwards pragma proxy-authenticate proxy-authorization range referer retry-after "
    "server te trailer transfer-encoding upgrade user-agent vary via warning "
    "www-authenticate method get status"
)
_DICTIONARY_WORDS = (
    *_WORDS.split(),
    "200 OK",
    *["version", "HTTP/1.1", "url", "public", "set-cookie", "keep-alive", "origin"],
)
_DICTIONARY_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request"
    "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented"
    "503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 "
    "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,"
    "application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age="
    "gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)


def _dictionary() -> bytes:
    words = b"".join(struct.pack(">I", len(w)) + w.encode() for w in _DICTIONARY_WORDS)
    return words + _DICTIONARY_TAIL.encode()


DICTIONARY = _dictionary()
DICTIONARY_ADLER32 = 3821447106  # the spec's dictionary's checksum, which zlib verifies


class SpdyError(Exception):
    """The peer broke the protocol or a limit; the session ends with GOAWAY."""


@dataclass(frozen=True)
class Limits:
    """Bounds on what one peer may make this side hold."""

    max_control_frame: int = 64 * 1024
    max_header_block: int = 64 * 1024  # decompressed
    max_headers: int = 64
    max_streams: int = 16  # open at once (exec needs at most five)
    max_unread: int = 1024 * 1024  # received but not yet read, per stream
    max_data_chunk: int = 64 * 1024  # what one data frame this side sends carries


class HeaderCodec:
    """One direction's header compression and the other's decompression, per session."""

    def __init__(self, limits: Limits) -> None:
        self._limits = limits
        self._compress = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zdict=DICTIONARY)
        self._decompress = zlib.decompressobj(zdict=DICTIONARY)

    def encode(self, headers: Mapping[str, str]) -> bytes:
        raw = [struct.pack(">I", len(headers))]
        for name, value in headers.items():
            for part in (name.lower().encode(), value.encode()):
                raw.append(struct.pack(">I", len(part)) + part)
        block = b"".join(raw)
        return self._compress.compress(block) + self._compress.flush(zlib.Z_SYNC_FLUSH)

    def decode(self, compressed: bytes) -> dict[str, str]:
        limit = self._limits.max_header_block
        try:
            block = self._decompress.decompress(compressed, limit + 1)
        except zlib.error as exc:
            raise SpdyError(f"header block does not decompress: {exc}") from None
        if len(block) > limit or self._decompress.unconsumed_tail:
            raise SpdyError(f"header block larger than {limit} bytes")
        return _parse_block(block, self._limits.max_headers)


def _parse_block(block: bytes, max_headers: int) -> dict[str, str]:
    if len(block) < 4:
        raise SpdyError("header block shorter than its count")
    (count,) = struct.unpack_from(">I", block)
    if count > max_headers:
        raise SpdyError(f"header block has {count} headers (at most {max_headers})")
    headers, offset = {}, 4
    for _ in range(count):
        name, offset = _field(block, offset)
        value, offset = _field(block, offset)
        headers[name.decode("latin-1").lower()] = value.decode("latin-1")
    if offset != len(block):
        raise SpdyError("header block has bytes after its last header")
    return headers


def _field(block: bytes, offset: int) -> tuple[bytes, int]:
    if offset + 4 > len(block):
        raise SpdyError("header block cut inside a length")
    (length,) = struct.unpack_from(">I", block, offset)
    end = offset + 4 + length
    if end > len(block):
        raise SpdyError("header block cut inside a name or value")
    return block[offset + 4 : end], end


def control_frame(kind: int, payload: bytes, flags: int = 0) -> bytes:
    return struct.pack(">HHI", 0x8000 | VERSION, kind, flags << 24 | len(payload)) + payload


def data_frame(stream_id: int, payload: bytes, flags: int = 0) -> bytes:
    return struct.pack(">II", stream_id & 0x7FFFFFFF, flags << 24 | len(payload)) + payload


class Stream:
    """One stream the peer opened: its headers, what it sent (``read``), what we send."""

    def __init__(self, session: Session, stream_id: int, headers: dict[str, str]) -> None:
        self.session = session
        self.id = stream_id
        self.headers = headers
        self.remote_closed = False  # the peer sent FIN or reset it
        self.local_closed = False  # we sent FIN or reset it
        self._unread = bytearray()
        self._changed = asyncio.Condition()

    async def read(self, limit: int = 65536) -> bytes:
        """Up to `limit` bytes the peer sent; b"" once it half-closed and all was read."""
        async with self._changed:
            await self._changed.wait_for(lambda: bool(self._unread) or self.remote_closed)
            chunk = bytes(self._unread[:limit])
            del self._unread[:limit]
            self._changed.notify_all()
            return chunk

    async def write(self, data: bytes) -> None:
        """Send `data` (in frames of at most Limits.max_data_chunk)."""
        step = self.session.limits.max_data_chunk
        for start in range(0, len(data), step):
            if self.local_closed:
                return
            await self.session.send(data_frame(self.id, data[start : start + step]))

    async def close(self) -> None:
        """Half-close: FIN (an empty data frame). Idempotent."""
        if not self.local_closed:
            self.local_closed = True
            await self.session.send(data_frame(self.id, b"", FLAG_FIN))
            self.session.forget_if_done(self)

    async def reply(self) -> None:
        """Accept the stream (SYN_REPLY with no headers, as a kubelet does)."""
        block = self.session.codec.encode({})
        await self.session.send(control_frame(SYN_REPLY, struct.pack(">I", self.id) + block))

    async def reset(self, status: int = CANCEL) -> None:
        if not (self.local_closed and self.remote_closed):
            await self.session.send(control_frame(RST_STREAM, struct.pack(">II", self.id, status)))
        await self._received_end(local=True)

    async def _received(self, data: bytes, fin: bool) -> None:
        async with self._changed:
            limit = self.session.limits.max_unread
            await self._changed.wait_for(lambda: len(self._unread) < limit or self.remote_closed)
            if not self.remote_closed:
                self._unread += data
            self.remote_closed = self.remote_closed or fin
            self._changed.notify_all()
        if fin:
            self.session.forget_if_done(self)

    async def _received_end(self, *, local: bool = False) -> None:
        async with self._changed:
            self.remote_closed = True
            self.local_closed = self.local_closed or local
            self._changed.notify_all()
        self.session.forget_if_done(self)


class Session:
    """A SPDY session over an upgraded connection, this side the server (peer streams odd).

    ``run()`` reads frames until the peer leaves, breaks the protocol, or is idle longer than
    `idle_timeout`; streams the peer opens come out of ``accept()``."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        limits: Limits | None = None,
        idle_timeout: float = 4 * 3600.0,
    ) -> None:
        self.limits = limits or Limits()
        self.codec = HeaderCodec(self.limits)
        self.idle_timeout = idle_timeout
        self._reader, self._writer = reader, writer
        self._write_lock = asyncio.Lock()
        self._streams: dict[int, Stream] = {}
        self._last_id = 0
        self._new: asyncio.Queue[Stream | None] = asyncio.Queue()
        self.closed = False
        self.error = ""

    async def accept(self, timeout: float) -> Stream | None:
        """The next stream the peer opened (None: the session ended or `timeout` passed)."""
        try:
            return await asyncio.wait_for(self._new.get(), timeout)
        except asyncio.TimeoutError:
            return None

    async def send(self, frame: bytes) -> None:
        if self.closed:
            return
        async with self._write_lock:
            try:
                self._writer.write(frame)
                await self._writer.drain()
            except (ConnectionError, OSError):
                self.closed = True

    def forget_if_done(self, stream: Stream) -> None:
        if stream.local_closed and stream.remote_closed:
            self._streams.pop(stream.id, None)

    async def run(self) -> None:
        """Read frames until the session ends; then every stream reads end of file."""
        try:
            while not self.closed:
                header = await asyncio.wait_for(self._reader.readexactly(8), self.idle_timeout)
                await self._frame(header)
        except SpdyError as exc:
            self.error = str(exc)
            await self.send(control_frame(GOAWAY, struct.pack(">II", self._last_id, 1)))
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError, OSError):
            pass
        finally:
            await self._end()

    async def close(self) -> None:
        """GOAWAY, then close the connection. Idempotent."""
        if not self.closed:
            await self.send(control_frame(GOAWAY, struct.pack(">II", self._last_id, GOAWAY_OK)))
            self.closed = True
        with contextlib.suppress(ConnectionError, OSError):
            self._writer.close()

    async def _end(self) -> None:
        self.closed = True
        for stream in list(self._streams.values()):
            await stream._received_end()
        self._new.put_nowait(None)

    async def _frame(self, header: bytes) -> None:
        first, second = struct.unpack(">II", header)
        flags, length = second >> 24, second & 0xFFFFFF
        if first & 0x80000000:
            await self._control(first >> 16 & 0x7FFF, first & 0xFFFF, flags, length)
        else:
            await self._data(first & 0x7FFFFFFF, flags, length)

    async def _data(self, stream_id: int, flags: int, length: int) -> None:
        """Deliver a data frame in pieces (a frame may be 16 MiB); one for no stream is dropped."""
        stream = self._streams.get(stream_id)
        fin, remaining = bool(flags & FLAG_FIN), length
        while True:
            step = min(remaining, self.limits.max_data_chunk)
            chunk = await self._reader.readexactly(step) if step else b""
            remaining -= len(chunk)
            last = not remaining
            if stream is not None and not stream.remote_closed and (chunk or (fin and last)):
                await stream._received(chunk, fin=fin and last)
            if last:
                return

    async def _control(self, version: int, kind: int, flags: int, length: int) -> None:
        if version != VERSION:
            raise SpdyError(f"control frame of SPDY version {version} (3 expected)")
        if length > self.limits.max_control_frame:
            raise SpdyError(
                f"control frame of {length} bytes (at most {self.limits.max_control_frame})"
            )
        payload = await self._reader.readexactly(length)
        handler = {
            SYN_STREAM: self._syn_stream,
            RST_STREAM: self._rst_stream,
            PING: self._ping,
            GOAWAY: self._goaway,
            HEADERS: self._headers,
        }.get(kind)
        if handler is not None:
            await handler(payload, flags)

    async def _syn_stream(self, payload: bytes, flags: int) -> None:
        if len(payload) < 10:
            raise SpdyError("SYN_STREAM shorter than 10 bytes")
        stream_id = struct.unpack_from(">I", payload)[0] & 0x7FFFFFFF
        headers = self.codec.decode(payload[10:])
        if stream_id % 2 == 0 or stream_id <= self._last_id:
            raise SpdyError(f"SYN_STREAM with stream id {stream_id} (odd and increasing expected)")
        self._last_id = stream_id
        if len(self._streams) >= self.limits.max_streams:
            await self.send(
                control_frame(RST_STREAM, struct.pack(">II", stream_id, REFUSED_STREAM))
            )
            return
        stream = Stream(self, stream_id, headers)
        stream.remote_closed = bool(flags & FLAG_FIN)
        self._streams[stream_id] = stream
        self._new.put_nowait(stream)

    async def _rst_stream(self, payload: bytes, flags: int) -> None:
        if len(payload) != 8:
            raise SpdyError("RST_STREAM is not 8 bytes")
        stream = self._streams.get(struct.unpack_from(">I", payload)[0] & 0x7FFFFFFF)
        if stream is not None:
            stream.local_closed = True
            await stream._received_end()

    async def _ping(self, payload: bytes, flags: int) -> None:
        if len(payload) != 4:
            raise SpdyError("PING is not 4 bytes")
        await self.send(control_frame(PING, payload))

    async def _goaway(self, payload: bytes, flags: int) -> None:
        self.closed = True

    async def _headers(self, payload: bytes, flags: int) -> None:
        if len(payload) < 4:
            raise SpdyError("HEADERS shorter than 4 bytes")
        self.codec.decode(payload[4:])  # keeps the decompressor in step; nothing uses them
