"""The /proc readers that tests use to find the processes a command started and what they listen on."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
import time

import pytest

from agentlab.testing.processes import (
    ListeningSocket,
    alive,
    descendants,
    is_loopback,
    listening_sockets,
    proc_net_address,
)

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads Linux's /proc")


def test_addresses_are_read_as_the_kernel_writes_them() -> None:
    assert proc_net_address("0100007F") == "127.0.0.1"
    assert proc_net_address("0202000A") == "10.0.2.2"
    assert proc_net_address("00000000000000000000000001000000") == "::1"
    mapped = ipaddress.ip_address(proc_net_address("0000000000000000FFFF00000100007F"))
    assert mapped == ipaddress.ip_address("::ffff:127.0.0.1")


@pytest.mark.parametrize(("address", "loopback"), [
    ("127.0.0.1", True), ("127.8.0.1", True), ("::1", True), ("::ffff:127.0.0.1", True),
    ("0.0.0.0", False), ("::", False), ("192.0.2.2", False), ("::ffff:192.0.2.2", False), ("fe80::1", False),
])
def test_only_loopback_addresses_count_as_loopback(address: str, loopback: bool) -> None:
    assert is_loopback(address) is loopback


def test_the_sockets_of_a_process_are_found_with_their_addresses() -> None:
    tcp = socket.create_server(("127.0.0.1", 0))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    tcp_port, udp_port = tcp.getsockname()[1], udp.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", tcp_port))  # a connected socket listens on nothing
    name = open(f"/proc/{os.getpid()}/comm").read().strip()
    try:
        mine = listening_sockets({os.getpid()})
        assert sorted((s for s in mine if s.port in (tcp_port, udp_port)), key=lambda s: s.protocol) == [
            ListeningSocket(os.getpid(), name, "tcp", "127.0.0.1", tcp_port),
            ListeningSocket(os.getpid(), name, "udp", "127.0.0.1", udp_port),
        ]
        assert client.getsockname()[1] not in {s.port for s in mine}
    finally:
        client.close()
        tcp.close()
        udp.close()
    assert not {tcp_port, udp_port} & {s.port for s in listening_sockets({os.getpid()})}


def test_descendants_and_alive_follow_a_process_tree() -> None:
    # A child that starts a grandchild, prints its pid, and waits.
    script = ("import subprocess, sys, time; g = subprocess.Popen([sys.executable, '-c', 'import time; "
              "time.sleep(60)']); print(g.pid, flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        assert descendants(child.pid) == {grandchild}
        assert {child.pid, grandchild} <= descendants(os.getpid())
        assert alive({child.pid, grandchild, 2**22 + 1}) == {child.pid, grandchild}
        os.kill(grandchild, 9)
        deadline = time.monotonic() + 10
        while grandchild in alive({grandchild}) and time.monotonic() < deadline:  # a zombie until reaped
            time.sleep(0.05)
        assert alive({child.pid, grandchild}) == {child.pid}
    finally:
        child.kill()
        child.wait()
