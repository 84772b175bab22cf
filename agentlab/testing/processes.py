"""What a process tree is and what it listens on, read from Linux's /proc (for tests that start servers).

:func:`descendants` and :func:`alive` find and check the processes a command started (Ray's servers,
say), so a test can stop every one of them; :func:`listening_sockets` lists the TCP sockets those
processes listen on and the UDP sockets they have bound, with :func:`is_loopback` to tell which ones
only this machine can reach.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
#: /proc/net tables and the socket state that means "waiting for peers" in each (TCP LISTEN, UDP unconnected).
_WAITING_STATES = {"tcp": "0A", "tcp6": "0A", "udp": "07", "udp6": "07"}


@dataclass(frozen=True)
class ListeningSocket:
    """One socket a process listens on."""

    pid: int
    #: The process's name as the kernel keeps it (``/proc/PID/comm``: ``gcs_server``, ``raylet``, ...).
    process: str
    #: ``tcp``, ``tcp6``, ``udp`` or ``udp6`` (the /proc/net table it was found in).
    protocol: str
    #: The bound address, e.g. ``127.0.0.1``, ``::``, ``::ffff:127.0.0.1``.
    address: str
    port: int


def _stat_fields(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the process name (which may hold spaces and parentheses)."""
    return (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()


def descendants(pid: int) -> set[int]:
    """Every process below ``pid``: its children, their children, and so on (not ``pid`` itself)."""
    parents: dict[int, int] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(_stat_fields(int(entry.name))[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pids: Iterable[int]) -> set[int]:
    """Those of ``pids`` that still run (a zombie, dead but not yet reaped, does not count)."""
    running = set()
    for pid in pids:
        try:
            state = _stat_fields(pid)[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            running.add(pid)
    return running


def proc_net_address(hex_address: str) -> str:
    """An address as /proc/net/{tcp,udp}[6] writes it (hex, each 32-bit word in little-endian order)."""
    raw = bytes.fromhex(hex_address)
    ordered = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(ordered))


def _waiting_sockets() -> dict[int, tuple[str, str, int]]:
    """Every socket on this machine waiting for peers, by inode: (protocol, address, port)."""
    found: dict[int, tuple[str, str, int]] = {}
    for protocol, waiting in _WAITING_STATES.items():
        try:
            rows = (PROC / "net" / protocol).read_text().splitlines()[1:]
        except OSError:  # no IPv6 on this machine
            continue
        for row in rows:
            fields = row.split()
            local, state, inode = fields[1], fields[3], int(fields[9])
            if state == waiting and inode:
                host, port = local.rsplit(":", 1)
                found[inode] = (protocol, proc_net_address(host), int(port, 16))
    return found


def listening_sockets(pids: Iterable[int]) -> list[ListeningSocket]:
    """The sockets that the processes ``pids`` listen on (TCP) or have bound without a peer (UDP).

    A process of another user, or one gone meanwhile, is skipped: its file descriptors cannot be read.
    """
    waiting = _waiting_sockets()
    found = []
    for pid in sorted(set(pids)):
        try:
            process = (PROC / str(pid) / "comm").read_text().strip()
            descriptors = list((PROC / str(pid) / "fd").iterdir())
        except OSError:
            continue
        for descriptor in descriptors:
            try:
                target = os.readlink(descriptor)
            except OSError:
                continue
            if target.startswith("socket:[") and (inode := int(target[8:-1])) in waiting:
                protocol, address, port = waiting[inode]
                found.append(ListeningSocket(pid, process, protocol, address, port))
    return found


def is_loopback(address: str) -> bool:
    """Whether only this machine can reach ``address``: 127.0.0.0/8, ``::1`` or an IPv4-mapped loopback
    address (``::ffff:127.0.0.1``, how a dual-stack socket bound to 127.0.0.1 shows). The unspecified
    addresses ``0.0.0.0`` and ``::`` mean every interface, so they are not.
    """
    ip = ipaddress.ip_address(address)
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return (mapped or ip).is_loopback
