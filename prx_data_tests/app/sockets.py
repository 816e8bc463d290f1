"""Listening TCP sockets of a process tree, read from /proc (Linux): the proof of what a command
exposes to the network."""

from __future__ import annotations

import ipaddress
import os
import socket


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(name))
    return kids


def process_tree(root: int) -> list[int]:
    kids, out, i = _children(), [root], 0
    while i < len(out):
        out.extend(kids.get(out[i], []))
        i += 1
    return out


def _address(hexaddr: str, v6: bool) -> tuple[str, int]:
    ip, port = hexaddr.split(":")
    raw = bytes.fromhex(ip)
    if v6:
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
        return socket.inet_ntop(socket.AF_INET6, raw), int(port, 16)
    return socket.inet_ntop(socket.AF_INET, raw[::-1]), int(port, 16)


def listening_sockets(pids: list[int]) -> set[tuple[str, int, str]]:
    """(address, port, process name) of every listening TCP socket held by ``pids``."""
    inodes: dict[str, int] = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes[link[8:-1]] = pid
    found = set()
    for table, v6 in (("tcp", False), ("tcp6", True)):
        with open(f"/proc/net/{table}") as f:
            lines = f.read().splitlines()[1:]
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ip, port = _address(fields[1], v6)
                try:
                    with open(f"/proc/{inodes[fields[9]]}/comm") as c:
                        comm = c.read().strip()
                except OSError:
                    comm = "?"
                found.add((ip, port, comm))
    return found


def is_loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback
