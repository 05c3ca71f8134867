"""The node's network as sysfs shows it: interfaces (/sys/class/net) and RDMA ports (/sys/class/infiniband).

Read-only file reads, no root and no tools (no ip, no ibv_devinfo), so it works in any container that
mounts /sys. Every path is taken under `root` so tests describe a node with a few files in a tmp dir.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# Interfaces that never carry traffic between nodes: container bridges, veth pairs, VPN/tunnels.
VIRTUAL_PREFIXES = ("lo", "docker", "veth", "virbr", "br-", "cni", "flannel", "cali", "vxlan", "tun", "tap", "kube", "weave", "podman")
ARPHRD_ETHER, ARPHRD_INFINIBAND, ARPHRD_LOOPBACK = 1, 32, 772


@dataclass(frozen=True)
class Interface:
    name: str
    kind: str  # "ethernet", "ipoib", "loopback", "other"
    up: bool
    physical: bool  # backed by a device (has a `device` link), not a bridge/veth/bond
    speed_mbps: int | None
    default_route: bool
    rdma_device: str | None  # the RDMA device this netdev belongs to (a RoCE NIC or an IPoIB port)


@dataclass(frozen=True)
class RdmaPort:
    device: str  # "mlx5_0", "rdma0", "bnxt_re0"
    port: int
    active: bool
    link_layer: str  # "InfiniBand" or "Ethernet" (RoCE)
    rate: str  # "400 Gb/sec (4X NDR)"
    roce_v2_ipv4_gids: tuple[int, ...]  # GID indices whose type is RoCE v2 and address IPv4-mapped

    @property
    def name(self) -> str:
        return f"{self.device}:{self.port}"


@dataclass(frozen=True)
class Network:
    interfaces: tuple[Interface, ...]
    rdma_ports: tuple[RdmaPort, ...]

    @property
    def socket_interface(self) -> Interface | None:
        """The interface to name in NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME, or None if none qualifies.

        The one carrying the default route if it is up and not a container/virtual interface (the
        address other nodes reach this one by), else the first physical Ethernet interface that is up.
        """
        usable = [i for i in self.interfaces if i.up and i.kind in ("ethernet", "ipoib") and not i.name.startswith(VIRTUAL_PREFIXES)]
        for interface in usable:
            if interface.default_route:
                return interface
        physical = [i for i in usable if i.physical]
        plain = [i for i in physical if i.kind == "ethernet" and i.rdma_device is None]
        return (plain or physical or [None])[0]

    @property
    def active_rdma_ports(self) -> tuple[RdmaPort, ...]:
        return tuple(p for p in self.rdma_ports if p.active)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:  # missing, or unreadable (speed of a link that is down raises EINVAL)
        return None


def _natural(name: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _default_route_interfaces(root: Path) -> set[str]:
    text = _read(root / "proc/net/route") or ""
    names = set()
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 2 and fields[1] == "00000000":
            names.add(fields[0])
    return names


def _rdma_netdevs(root: Path) -> dict[str, str]:
    """{netdev name: RDMA device} from /sys/class/infiniband/<dev>/device/net/<netdev>."""
    mapping = {}
    base = root / "sys/class/infiniband"
    if base.is_dir():
        for device in base.iterdir():
            net = device / "device" / "net"
            if net.is_dir():
                for netdev in net.iterdir():
                    mapping[netdev.name] = device.name
    return mapping


def _interfaces(root: Path) -> tuple[Interface, ...]:
    base = root / "sys/class/net"
    if not base.is_dir():
        return ()
    defaults = _default_route_interfaces(root)
    rdma = _rdma_netdevs(root)
    found = []
    for entry in sorted(base.iterdir(), key=lambda p: _natural(p.name)):
        arp_type = _read(entry / "type")
        kind = {str(ARPHRD_ETHER): "ethernet", str(ARPHRD_INFINIBAND): "ipoib", str(ARPHRD_LOOPBACK): "loopback"}.get(arp_type or "", "other")
        state = _read(entry / "operstate") or "unknown"
        carrier = _read(entry / "carrier")
        up = state == "up" or (state == "unknown" and carrier == "1")
        speed = _read(entry / "speed")
        speed_mbps = int(speed) if speed and speed.lstrip("-").isdigit() and int(speed) > 0 else None
        found.append(Interface(entry.name, kind, up, (entry / "device").exists(), speed_mbps, entry.name in defaults, rdma.get(entry.name)))
    return tuple(found)


def _rdma_ports(root: Path) -> tuple[RdmaPort, ...]:
    base = root / "sys/class/infiniband"
    if not base.is_dir():
        return ()
    ports = []
    for device in sorted(base.iterdir(), key=lambda p: _natural(p.name)):
        port_dir = device / "ports"
        if not port_dir.is_dir():
            continue
        for port in sorted(port_dir.iterdir(), key=lambda p: _natural(p.name)):
            if not port.name.isdigit():
                continue
            state = _read(port / "state") or ""
            gids = []
            types = port / "gid_attrs" / "types"
            if types.is_dir():
                for entry in types.iterdir():
                    if entry.name.isdigit() and (_read(entry) or "").lower() == "roce v2":
                        gid = (_read(port / "gids" / entry.name) or "").lower()
                        if gid.startswith("0000:0000:0000:0000:0000:ffff:"):
                            gids.append(int(entry.name))
            ports.append(RdmaPort(device.name, int(port.name), "ACTIVE" in state.upper(), _read(port / "link_layer") or "unknown",
                                  _read(port / "rate") or "", tuple(sorted(gids))))
    return tuple(ports)


def read_network(root: Path) -> Network:
    return Network(_interfaces(root), _rdma_ports(root))
