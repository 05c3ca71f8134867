"""pytest plugin: Megatron-LM's own tests/unit_tests on a CPU, world size 1 over gloo, no test edited.

Loaded by testkit/upstream_units/runner.py as `-p megatron_on_cpu` (its folder on PYTHONPATH), in a
pytest started in the Megatron-LM tree. It imports nothing from rocmpatch, and it never changes a
file of the tree: everything below is a change to this process only.

- world size 1, rank 0, and a free local port for the rendezvous (MASTER_PORT), unless the
  environment already says otherwise;
- every process group asked for with nccl gets gloo (init_process_group, new_group), without
  NCCL-only options;
- torch.cuda.set_device and torch.cuda.synchronize do nothing (a CPU build raises there), and
  while tests.unit_tests.test_utilities' Utils.initialize_distributed runs, torch.cuda.device_count()
  says 1 (it picks `rank % device_count()` as the device: a ZeroDivisionError with none);
- no network: the unit-test data set is never downloaded (upstream's conftest fetches it when
  /opt/data is empty), names other than localhost do not resolve and connections go to loopback
  addresses only, and Hugging Face and wandb are told to stay offline; tests that need the network
  or the data set fail the same way on every tree;
- ROCMPATCH_UNITS_BLOCK (comma-separated top-level module names) are refused as not installed even
  where they are, so that no result depends on what the machine happens to have;
- ROCMPATCH_UNITS_LOG names a file to which one JSON line per test phase is appended as it ends,
  and one line when a test starts: a run killed by a crash or a timeout still says what ran;
  ROCMPATCH_UNITS_SKIP names a file of test ids (one a line) to deselect: those a killed run
  already ran, when the runner starts it again;
- an upstream Utils whose world_size was computed as torch.cuda.device_count() at import (0 on a
  CPU; core_v0.5.0) gets WORLD_SIZE instead.
"""

from __future__ import annotations

import importlib
import importlib.abc
import json
import os
import socket
import sys
import time

import pytest


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


for _name, _value in (("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"), ("RANK", "0"), ("MASTER_ADDR", "127.0.0.1")):
    os.environ.setdefault(_name, _value)
os.environ.setdefault("MASTER_PORT", str(_free_port()))
for _name, _value in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1"),
                      ("WANDB_MODE", "disabled")):
    os.environ[_name] = _value


def _is_local(host) -> bool:
    if host in (None, "", "localhost", "localhost.localdomain", b"localhost"):
        return True
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    import ipaddress

    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback or str(host) in ("0.0.0.0", "::")
    except ValueError:
        return str(host) == socket.gethostname()


_getaddrinfo = socket.getaddrinfo
_connect, _connect_ex = socket.socket.connect, socket.socket.connect_ex


def _local_getaddrinfo(host, *args, **kwargs):
    if not _is_local(host):
        raise socket.gaierror(socket.EAI_NONAME, f"megatron_on_cpu: no network (tried to resolve {host!r})")
    return _getaddrinfo(host, *args, **kwargs)


def _local_only(connect):
    def wrapper(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address[0]):
            raise ConnectionRefusedError(f"megatron_on_cpu: no network (tried to connect to {address[0]!r})")
        return connect(self, address)

    return wrapper


socket.getaddrinfo = _local_getaddrinfo
socket.socket.connect = _local_only(_connect)
socket.socket.connect_ex = _local_only(_connect_ex)


class _Refuse(importlib.abc.MetaPathFinder):
    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r} (refused by megatron_on_cpu)", name=name)
        return None


_BLOCKED = {n.strip() for n in os.environ.get("ROCMPATCH_UNITS_BLOCK", "").split(",") if n.strip()}
if _BLOCKED:
    sys.meta_path.insert(0, _Refuse(_BLOCKED))

import torch  # noqa: E402  (after the finder: torch itself may probe optional packages)
import torch.distributed as dist  # noqa: E402


def _gloo(backend):
    """'gloo' for any backend naming nccl ('nccl', 'cuda:nccl', 'cpu:gloo,cuda:nccl', Backend.NCCL)."""
    if backend is not None and "nccl" in str(backend).lower():
        return "gloo"
    return backend


def _without_nccl(function, backend_position: int):
    def wrapper(*args, **kwargs):
        args = list(args)
        if len(args) > backend_position:
            args[backend_position] = _gloo(args[backend_position])
        elif "backend" in kwargs:
            kwargs["backend"] = _gloo(kwargs["backend"])
        kwargs.pop("device_id", None)  # binds the group to a CUDA device
        if kwargs.get("pg_options") is not None and not isinstance(kwargs["pg_options"], dist.ProcessGroupGloo.Options):
            kwargs["pg_options"] = None  # NCCL options
        return function(*args, **kwargs)

    wrapper.__wrapped__ = function
    return wrapper


dist.init_process_group = _without_nccl(dist.init_process_group, 0)
dist.new_group = _without_nccl(dist.new_group, 2)  # new_group(ranks, timeout, backend, pg_options, ...)
torch.cuda.set_device = lambda device: None
torch.cuda.synchronize = lambda device=None: None


def _one_device_while(function):
    def wrapper(*args, **kwargs):
        real = torch.cuda.device_count
        torch.cuda.device_count = lambda: max(1, real())
        try:
            return function(*args, **kwargs)
        finally:
            torch.cuda.device_count = real

    wrapper.__wrapped__ = function
    return wrapper


def _no_download(*args, **kwargs):
    raise RuntimeError("megatron_on_cpu downloads no test data")


# What upstream's conftest imports to fetch the test data set: core_v0.16 and later
# download_and_extract_asset; core_v0.15 get_oldest_release_and_assets (PyGithub), which calls
# sys.exit(1) when GitHub cannot be reached, so its SystemExit would error every test.
_DOWNLOADERS = ("download_and_extract_asset", "get_oldest_release_and_assets")


def _adapt(module) -> None:
    """Patch what an upstream test module or conftest bound at import."""
    for name in _DOWNLOADERS:
        if getattr(module, name, None) not in (None, _no_download):
            setattr(module, name, _no_download)
    utils = getattr(module, "Utils", None)
    if utils is not None and module.__name__.endswith("test_utilities"):
        original = utils.__dict__.get("initialize_distributed")
        if isinstance(original, staticmethod) and not hasattr(original.__func__, "__wrapped__"):
            utils.initialize_distributed = staticmethod(_one_device_while(original.__func__))
        if getattr(utils, "world_size", None) == 0:
            utils.world_size = int(os.environ["WORLD_SIZE"])


def _adapt_loaded() -> None:
    for name, module in list(sys.modules.items()):
        if name.startswith("tests.") or name == "conftest":
            _adapt(module)


def pytest_plugin_registered(plugin, manager):
    # conftest modules register here as they are imported (test_utilities with them)
    if getattr(plugin, "__file__", None):
        _adapt_loaded()


def pytest_configure(config):
    _adapt_loaded()


def pytest_collectstart(collector):
    # Without a conftest importing it first (core_v0.5.0), a test module may call
    # Utils.initialize_distributed() while it is imported: adapt test_utilities before that.
    if "tests.unit_tests.test_utilities" not in sys.modules and getattr(collector, "path", None) is not None \
            and collector.path.suffix == ".py":
        try:
            importlib.import_module("tests.unit_tests.test_utilities")
        except Exception:  # noqa: BLE001  (not on the path yet, or not this layout: the test says so itself)
            pass
    _adapt_loaded()


def pytest_collection_finish(session):
    _adapt_loaded()


_LOG = os.environ.get("ROCMPATCH_UNITS_LOG")
_SKIP = os.environ.get("ROCMPATCH_UNITS_SKIP")


def pytest_collection_modifyitems(session, config, items):
    if not _SKIP or not os.path.exists(_SKIP):
        return
    with open(_SKIP, encoding="utf-8") as lines:
        seen = {line.strip() for line in lines if line.strip()}
    kept = [item for item in items if item.nodeid not in seen]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.nodeid in seen])
        items[:] = kept


def _log(record: dict) -> None:
    if _LOG:
        with open(_LOG, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")


def pytest_runtest_logstart(nodeid, location):
    _log({"nodeid": nodeid, "event": "start", "time": time.time()})


def pytest_runtest_logreport(report):
    _log({"nodeid": report.nodeid, "event": report.when, "outcome": report.outcome,
          "duration": round(report.duration, 3)})


@pytest.hookimpl(tryfirst=True)
def pytest_collectreport(report):
    if report.failed:
        _log({"nodeid": report.nodeid, "event": "collect", "outcome": "failed"})
