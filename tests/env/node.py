"""Describe a node's sysfs in a tmp dir: network interfaces, RDMA ports, the routing table."""

from __future__ import annotations

from pathlib import Path

ROUTE_HEADER = "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n"


def add_interface(root: Path, name: str, *, arp_type: int = 1, state: str = "up", physical: bool = True, speed: int | None = 100000) -> None:
    base = root / "sys/class/net" / name
    base.mkdir(parents=True)
    (base / "type").write_text(f"{arp_type}\n")
    (base / "operstate").write_text(f"{state}\n")
    if physical:
        (base / "device").mkdir()
    if speed is not None:
        (base / "speed").write_text(f"{speed}\n")


def set_default_route(root: Path, name: str) -> None:
    route = root / "proc/net/route"
    route.parent.mkdir(parents=True, exist_ok=True)
    route.write_text(ROUTE_HEADER + f"{name}\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n")


def add_rdma(root: Path, device: str, *, port: int = 1, active: bool = True, link_layer: str = "Ethernet",
             gids: dict[int, tuple[str, str]] | None = None, netdev: str | None = None) -> None:
    """gids: {index: (type, gid)}, e.g. {3: ("RoCE v2", "0000:0000:0000:0000:0000:ffff:0a00:0001")}."""
    base = root / "sys/class/infiniband" / device
    port_dir = base / "ports" / str(port)
    port_dir.mkdir(parents=True)
    (port_dir / "state").write_text("4: ACTIVE\n" if active else "1: DOWN\n")
    (port_dir / "link_layer").write_text(link_layer + "\n")
    (port_dir / "rate").write_text("400 Gb/sec (4X NDR)\n")
    (port_dir / "gid_attrs" / "types").mkdir(parents=True)
    (port_dir / "gids").mkdir()
    for index, (kind, gid) in (gids or {}).items():
        (port_dir / "gid_attrs" / "types" / str(index)).write_text(kind + "\n")
        (port_dir / "gids" / str(index)).write_text(gid + "\n")
    if netdev:
        (base / "device" / "net" / netdev).mkdir(parents=True)


def roce_v2(index: int, last: str = "0a00:0001") -> dict[int, tuple[str, str]]:
    return {0: ("IB/RoCE v1", "fe80:0000:0000:0000:0000:0000:0000:0001"),
            1: ("RoCE v2", "fe80:0000:0000:0000:0000:0000:0000:0001"),
            index: ("RoCE v2", f"0000:0000:0000:0000:0000:ffff:{last}")}


def mi300x_node(root: Path, nics: int = 8) -> Path:
    """A typical MI300X node: a front-end NIC with the default route, docker0, 8 RoCE NICs (GID 3)."""
    add_interface(root, "lo", arp_type=772, state="unknown", physical=False, speed=None)
    add_interface(root, "docker0", state="up", physical=False)
    add_interface(root, "ens50f0np0")
    set_default_route(root, "ens50f0np0")
    for i in range(nics):
        add_interface(root, f"benic{i}p1")
        add_rdma(root, f"rdma{i}", gids=roce_v2(3, f"0a00:00{i:02x}"), netdev=f"benic{i}p1")
    return root
