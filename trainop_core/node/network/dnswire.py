"""The DNS wire format (RFC 1035) for one question and A answers, written with the stdlib.

Only what a cluster resolver needs: read a query's header and first question, write an answer.
A library (dnspython) would parse every record type; a stub resolver's queries need none of that,
and reading a name here is bounded outright (at most 255 bytes of name, at most 32 compression
pointers, every offset checked), so a hostile packet costs microseconds and raises FormatError.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

A, AAAA, ANY = 1, 28, 255
IN = 1
NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP, REFUSED = 0, 1, 2, 3, 4, 5
UDP_LIMIT = 512  # without EDNS0, the largest answer a UDP client takes
MAX_NAME = 255
MAX_POINTERS = 32
_HEADER = struct.Struct("!HHHHHH")


class FormatError(ValueError):
    """The packet is no well-formed DNS query."""


@dataclass(frozen=True)
class Query:
    id: int
    flags: int
    name: str  # lower case, no trailing dot
    qtype: int
    qclass: int

    @property
    def opcode(self) -> int:
        return (self.flags >> 11) & 0xF


def parse_query(data: bytes) -> Query:
    """The header and first question of `data`; FormatError if it is malformed or an answer."""
    if len(data) < _HEADER.size:
        raise FormatError("shorter than a DNS header")
    qid, flags, qdcount, _, _, _ = _HEADER.unpack_from(data)
    if flags & 0x8000:
        raise FormatError("a response, not a query")
    if qdcount != 1:
        raise FormatError(f"{qdcount} questions (one is supported)")
    name, end = read_name(data, _HEADER.size)
    if end + 4 > len(data):
        raise FormatError("question cut short")
    qtype, qclass = struct.unpack_from("!HH", data, end)
    return Query(qid, flags, name, qtype, qclass)


def read_name(data: bytes, offset: int) -> tuple[str, int]:
    """The name at `offset` and where the record continues after it (bounded: see module)."""
    labels: list[bytes] = []
    end, length, pointers = -1, 0, 0
    while True:
        if offset >= len(data):
            raise FormatError("name runs past the packet")
        size = data[offset]
        if size & 0xC0 == 0xC0:
            pointers += 1
            if pointers > MAX_POINTERS or offset + 1 >= len(data):
                raise FormatError("compression pointer loop or cut short")
            end = offset + 2 if end < 0 else end
            offset = ((size & 0x3F) << 8) | data[offset + 1]
            continue
        if size & 0xC0:
            raise FormatError("reserved label type")
        if size == 0:
            break
        length += size + 1
        if length > MAX_NAME or offset + 1 + size > len(data):
            raise FormatError("name too long or cut short")
        labels.append(data[offset + 1 : offset + 1 + size])
        offset += 1 + size
    end = offset + 1 if end < 0 else end
    return b".".join(labels).decode("ascii", "replace").lower(), end


def encode_name(name: str) -> bytes:
    out = b""
    for label in (label for label in name.split(".") if label):
        raw = label.encode("ascii", "replace")[:63]
        out += bytes([len(raw)]) + raw
    return out + b"\0"


def response(query: Query, rcode: int, addresses: list[str], ttl: int, limit: int) -> bytes:
    """The answer to `query`: A records for `addresses` (IPv4), TC set when over `limit` bytes."""
    flags = 0x8000 | (query.flags & 0x7900) | 0x0400 | rcode  # QR, opcode+RD kept, AA
    question = encode_name(query.name) + struct.pack("!HH", query.qtype, query.qclass)
    records = [_a_record(address, ttl) for address in addresses]
    room = (limit - _HEADER.size - len(question)) // 16
    if len(records) > room:
        records, flags = records[: max(room, 0)], flags | 0x0200
    header = _HEADER.pack(query.id, flags, 1, len(records), 0, 0)
    return header + question + b"".join(records)


def error(data: bytes, rcode: int) -> bytes:
    """An answer with just `rcode` to a packet that could not be read (echoing its id)."""
    qid = struct.unpack_from("!H", data)[0] if len(data) >= 2 else 0
    return _HEADER.pack(qid, 0x8000 | rcode, 0, 0, 0, 0)


def _a_record(address: str, ttl: int) -> bytes:
    packed = ipaddress.IPv4Address(address).packed
    return struct.pack("!HHHIH", 0xC00C, A, IN, ttl, 4) + packed
