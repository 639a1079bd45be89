"""Cluster DNS as data: which names have which addresses, and what any packet is answered."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from trainop_core.node.network import dnswire
from trainop_core.node.network.dns import answer
from trainop_core.node.network.records import addresses

ZONE = "cluster.local"
Obj = dict[str, Any]


class FakeView:
    """Services, EndpointSlices and Pods held in lists, read as ClusterView reads its cache."""

    def __init__(self) -> None:
        self.services: dict[tuple[str, str], Obj] = {}
        self.slices: dict[tuple[str, str], list[Obj]] = {}
        self.pods: list[Obj] = []

    def service(self, namespace: str, name: str) -> Obj | None:
        return self.services.get((namespace, name))

    def endpoint_slices(self, namespace: str, service: str) -> list[Obj]:
        return self.slices.get((namespace, service), [])

    def pods_named(self, namespace: str, subdomain: str, hostname: str) -> list[Obj]:
        return [p for p in self.pods if p["key"] == (namespace, subdomain, hostname)]

    def add_service(self, ns: str, name: str, cluster_ip: str = "None", **spec: Any) -> FakeView:
        self.services[(ns, name)] = {"spec": {"clusterIP": cluster_ip, **spec}}
        return self

    def add_endpoints(self, ns: str, service: str, *endpoints: tuple[str, str, bool]) -> FakeView:
        items = [
            {"addresses": [ip], "hostname": host, "conditions": {"ready": ready}}
            for ip, host, ready in endpoints
        ]
        self.slices.setdefault((ns, service), []).append(
            {"addressType": "IPv4", "endpoints": items}
        )
        return self

    def add_pod(self, ns: str, subdomain: str, host: str, ip: str, ready: bool) -> FakeView:
        status = {"podIP": ip, "phase": "Running"}
        status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
        self.pods.append({"key": (ns, subdomain, host), "status": status})
        return self


def cluster() -> FakeView:
    return (
        FakeView()
        .add_service("ns", "web", "10.0.0.20")
        .add_endpoints("ns", "web", ("10.244.0.4", "web-0", True))
        .add_service("ns", "job-master-0")
        .add_endpoints("ns", "job-master-0", ("10.244.0.5", "", True), ("10.244.0.6", "", False))
        .add_service("ns", "workers")
        .add_endpoints("ns", "workers", ("10.244.0.7", "w-0", True))
        .add_pod("ns", "workers", "w-1", "10.244.0.8", ready=True)
        .add_pod("ns", "workers", "w-2", "10.244.0.9", ready=False)
        .add_service("ns", "published", publishNotReadyAddresses=True)
        .add_pod("ns", "published", "p-0", "10.244.0.10", ready=False)
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("web.ns.svc.cluster.local", ["10.0.0.20"]),
        ("job-master-0.ns.svc.cluster.local", ["10.244.0.5"]),
        ("w-0.workers.ns.svc.cluster.local", ["10.244.0.7"]),
        ("w-1.workers.ns.svc.cluster.local", ["10.244.0.8"]),
        ("w-2.workers.ns.svc.cluster.local", None),
        ("web-0.web.ns.svc.cluster.local", None),
        ("p-0.published.ns.svc.cluster.local", ["10.244.0.10"]),
        ("10-244-0-9.ns.pod.cluster.local", ["10.244.0.9"]),
        ("web.other.svc.cluster.local", None),
        ("web.ns.svc.cluster.local.example.com", None),
        ("example.com", None),
    ],
    ids=[
        "a ClusterIP service has its cluster IP",
        "a headless service has its ready endpoints only",
        "an endpoint hostname under its service has its address",
        "a ready pod with that hostname and subdomain has its IP",
        "a pod not ready has no name",
        "an endpoint of a ClusterIP service has no name of its own",
        "a pod under a service publishing not-ready addresses has its IP",
        "a dashed pod address names itself",
        "a service of another namespace is no name",
        "a name beyond the zone is no name",
        "a name outside the cluster is no name",
    ],
)
def test_cluster_names_have_the_addresses_the_dns_specification_gives(
    name: str, expected: list[str] | None
) -> None:
    assert addresses(name, cluster(), ZONE) == expected


def query(name: str, qtype: int = dnswire.A, qid: int = 7) -> bytes:
    header = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    return header + dnswire.encode_name(name) + struct.pack("!HH", qtype, dnswire.IN)


def read(reply: bytes) -> tuple[int, int, list[str], bool]:
    """(id, rcode, A addresses, truncated) of a reply."""
    qid, flags, _, count, _, _ = struct.unpack_from("!HHHHHH", reply)
    _, offset = dnswire.read_name(reply, 12)
    offset += 4
    found = []
    for _ in range(count):
        found.append(".".join(str(b) for b in reply[offset + 12 : offset + 16]))
        offset += 16
    return qid, flags & 0xF, found, bool(flags & 0x0200)


def test_a_query_is_answered_with_its_id_and_addresses() -> None:
    reply = answer(query("Web.NS.svc.cluster.local.", qid=4242), cluster(), ZONE)
    assert reply is not None
    assert read(reply) == (4242, dnswire.NOERROR, ["10.0.0.20"], False)


def test_an_unknown_name_is_nxdomain_and_a_known_one_has_no_ipv6_records() -> None:
    missing = answer(query("nope.ns.svc.cluster.local"), cluster(), ZONE)
    ipv6 = answer(query("web.ns.svc.cluster.local", dnswire.AAAA), cluster(), ZONE)
    assert missing is not None and ipv6 is not None
    assert read(missing)[1:] == (dnswire.NXDOMAIN, [], False)
    assert read(ipv6)[1:] == (dnswire.NOERROR, [], False)


def test_an_answer_too_long_for_udp_is_truncated_and_whole_over_tcp() -> None:
    many = [(f"10.244.1.{i}", "", True) for i in range(1, 41)]
    view = cluster().add_service("ns", "many").add_endpoints("ns", "many", *many)
    udp = answer(query("many.ns.svc.cluster.local"), view, ZONE)
    tcp = answer(query("many.ns.svc.cluster.local"), view, ZONE, limit=65535)
    assert udp is not None and tcp is not None
    assert len(udp) <= 512 and read(udp)[3] is True
    assert len(read(tcp)[2]) == 40 and read(tcp)[3] is False


def pointer_chain(length: int) -> bytes:
    """A query whose name is `length` compression pointers in a row, each to the next, ending in
    the root name after the question (no loop: only long)."""
    header = struct.pack("!HHHHHH", 9, 0x0100, 1, 0, 0, 0)
    first = 12 + 2 + 4  # after the question's pointer, type and class
    chain = b"".join(struct.pack("!H", 0xC000 | (first + 2 * i)) for i in range(1, length))
    return header + struct.pack("!HHH", 0xC000 | first, dnswire.A, dnswire.IN) + chain + b"\0"


def test_names_up_to_the_limits_are_read() -> None:
    longest = ".".join(["a"] * 127)  # 254 bytes on the wire with the root
    reply = answer(query(longest), cluster(), ZONE)
    chained = answer(pointer_chain(dnswire.MAX_POINTERS - 1), cluster(), ZONE)
    assert reply is not None and read(reply)[1] == dnswire.NXDOMAIN
    assert chained is not None and read(chained)[1] == dnswire.NXDOMAIN


def loop_packet() -> bytes:
    header = struct.pack("!HHHHHH", 9, 0x0100, 1, 0, 0, 0)
    return header + b"\xc0\x0c" + b"\0\1\0\1"  # the name points at itself


@pytest.mark.parametrize(
    "packet",
    [
        loop_packet(),
        query("web.ns.svc.cluster.local", qid=9)[:-3],
        struct.pack("!HHHHHH", 9, 0x0100, 1, 0, 0, 0) + b"\x3f" + b"a" * 10,
        struct.pack("!HHHHHH", 9, 0x0100, 1, 0, 0, 0) + (b"\x3f" + b"a" * 63) * 1000 + b"\0",
        struct.pack("!HHHHHH", 9, 0x0100, 1, 0, 0, 0) + b"\x80abc\0\0\1\0\1",
        struct.pack("!HHHHHH", 9, 0x0100, 2, 0, 0, 0) + query("a")[12:] * 2,
        struct.pack("!HHHHHH", 9, 0x0100, 0xFFFF, 0, 0, 0) + query("a")[12:],
        struct.pack("!HHHHHH", 9, 0x0100, 0, 0, 0, 0),
        pointer_chain(dnswire.MAX_POINTERS + 1),
        struct.pack("!HHHHHH", 9, 0x0100, 1, 0, 0, 0) + b"\x01a" * 128 + b"\0\0\1\0\1",
        struct.pack("!HHHHHH", 9, 0x0100, 1, 0, 0, 0) + b"\xc0\xff\0\1\0\1",
    ],
    ids=[
        "a compression loop",
        "a question cut short",
        "a label running past the packet",
        "a name of 64 KiB",
        "a reserved label type",
        "two questions",
        "65535 questions",
        "no question",
        "a chain of compression pointers too long",
        "a name over 255 bytes in one-letter labels",
        "a pointer past the packet",
    ],
)
def test_a_malformed_query_is_answered_formerr(packet: bytes) -> None:
    reply = answer(packet, cluster(), ZONE)
    assert reply is not None
    assert struct.unpack_from("!HH", reply) == (9, 0x8000 | dnswire.FORMERR)


@pytest.mark.parametrize(
    "packet",
    [b"", b"\x01", struct.pack("!HHHHHH", 9, 0x8000, 0, 0, 0, 0)],
    ids=["an empty packet", "one byte", "a response (answering it could start a loop)"],
)
def test_what_is_no_query_gets_no_answer(packet: bytes) -> None:
    assert answer(packet, cluster(), ZONE) is None
