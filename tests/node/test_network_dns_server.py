"""The cluster DNS server under hostile clients: every packet is answered or dropped, and
neither a flood of bad packets nor idle or oversized TCP clients keeps it from answering others.

Runs on loopback sockets (no root, no network namespace); waits only on observable replies."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest

from tests.node.test_network_dns import ZONE, cluster, loop_packet, pointer_chain, query, read
from trainop_core.node.network import dns, dnswire

WAIT = 30.0  # generous: the machine is shared; a healthy server answers in microseconds


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, int]]:
    monkeypatch.setattr(dns, "TCP_TIMEOUT", 0.5)
    monkeypatch.setattr(dns, "MAX_TCP_CLIENTS", 2)
    udp, tcp = port_pair()
    port = udp.getsockname()[1]
    running = dns.DnsServer(udp, tcp, cluster(), ZONE)
    running.start()
    yield "127.0.0.1", port
    running.stop()


def port_pair() -> tuple[socket.socket, socket.socket]:
    """A UDP and a TCP socket on one loopback port, as DNS serves both: the UDP port the
    kernel picks may be taken for TCP by another process, so another pick is tried."""
    for _ in range(50):
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind(("127.0.0.1", 0))
        try:
            return udp, socket.create_server(("127.0.0.1", udp.getsockname()[1]))
        except OSError:
            udp.close()
    raise AssertionError("no loopback port free for both UDP and TCP in 50 tries")


def udp_client(address: tuple[str, int]) -> socket.socket:
    client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    client.settimeout(WAIT)
    client.connect(address)
    return client


def tcp_ask(conn: socket.socket, packet: bytes) -> bytes:
    conn.sendall(struct.pack("!H", len(packet)) + packet)
    size = struct.unpack("!H", recv_exactly(conn, 2))[0]
    return recv_exactly(conn, size)


def recv_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        assert chunk, "the server closed the connection"
        data += chunk
    return data


def closed_by_server(conn: socket.socket) -> bool:
    """Waits for the server to close `conn` (an orderly close or a reset); False if it answers."""
    try:
        return conn.recv(1) == b""
    except ConnectionResetError:
        return True


def test_hostile_datagrams_are_answered_formerr_or_dropped_and_the_server_goes_on(
    server: tuple[str, int],
) -> None:
    hostile = [
        (loop_packet(), True),
        (pointer_chain(dnswire.MAX_POINTERS + 1), True),
        (struct.pack("!HHHHHH", 9, 0x0100, 0xFFFF, 0, 0, 0) + query("a")[12:], True),
        (struct.pack("!HHHHHH", 9, 0x0100, 1, 0, 0, 0) + b"\x3f" * 60000, True),  # huge
        (struct.pack("!HHHHHH", 9, 0x8000, 0, 0, 0, 0), False),  # a response
        (b"\x01", False),
    ]
    client = udp_client(server)
    for round_ in range(20):
        for number, (packet, answered) in enumerate(hostile):
            qid = 1000 + round_ * 10 + number
            client.send(packet)
            client.send(query("web.ns.svc.cluster.local", qid=qid))
            replies = [client.recv(4096)]
            while struct.unpack_from("!H", replies[-1])[0] != qid:
                replies.append(client.recv(4096))
            bad = [struct.unpack_from("!HH", r) for r in replies[:-1]]
            assert bad == ([(9, 0x8000 | dnswire.FORMERR)] if answered else [])
            assert read(replies[-1]) == (qid, dnswire.NOERROR, ["10.0.0.20"], False)


def test_a_tcp_client_sending_a_loop_gets_formerr_and_a_response_ends_its_connection(
    server: tuple[str, int],
) -> None:
    with socket.create_connection(server, timeout=WAIT) as conn:
        reply = tcp_ask(conn, loop_packet())
        assert struct.unpack_from("!HH", reply) == (9, 0x8000 | dnswire.FORMERR)
        assert read(tcp_ask(conn, query("web.ns.svc.cluster.local", qid=5)))[:2] == (5, 0)
        response = struct.pack("!HHHHHH", 9, 0x8000, 0, 0, 0, 0)
        conn.sendall(struct.pack("!H", len(response)) + response)
        assert closed_by_server(conn)


def test_a_tcp_client_promising_more_than_it_sends_is_cut_off_and_others_are_served(
    server: tuple[str, int],
) -> None:
    with socket.create_connection(server, timeout=WAIT) as stalled:
        stalled.sendall(struct.pack("!H", 65535) + b"\0" * 100)  # then nothing more
        with socket.create_connection(server, timeout=WAIT) as other:
            assert read(tcp_ask(other, query("web.ns.svc.cluster.local", qid=6)))[:2] == (6, 0)
        assert closed_by_server(stalled)  # once TCP_TIMEOUT passed


def test_tcp_clients_beyond_the_limit_are_closed_at_once_while_udp_is_answered(
    server: tuple[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dns, "TCP_TIMEOUT", 60.0)  # the idle ones hold their places
    idle = [socket.create_connection(server, timeout=WAIT) for _ in range(dns.MAX_TCP_CLIENTS)]
    try:
        with socket.create_connection(server, timeout=WAIT) as extra:
            extra.sendall(struct.pack("!H", 40) + query("web.ns.svc.cluster.local")[:40])
            assert closed_by_server(extra)
        client = udp_client(server)
        client.send(query("web.ns.svc.cluster.local", qid=8))
        assert read(client.recv(512))[:2] == (8, dnswire.NOERROR)
    finally:
        for conn in idle:
            conn.close()
