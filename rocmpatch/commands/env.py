from __future__ import annotations

import shlex

from rocmpatch.console import emit_json, out
from rocmpatch.env.advice import ARCH_NAMES, Advice, advise
from rocmpatch.env.facts import Machine, probe
from rocmpatch.errors import ExitCode, UsageError
from rocmpatch.tables import Table


def run(*, as_json: bool, export: bool, machine: Machine | None = None) -> ExitCode:
    if as_json and export:
        raise UsageError("--json and --export do not go together", hint="pick one")
    advice = advise(machine or probe())
    if as_json:
        emit_json(advice.to_json())
    elif export:
        out.print(export_lines(advice), markup=False)
    else:
        _print(advice)
    return ExitCode.OK


def export_lines(advice: Advice) -> str:
    lines = ["# rocmpatch env: recommended for Megatron-LM training on this node"]
    for r in advice.recommendations:
        note = f" (now {r.current})" if r.status == "differs" else ""
        lines.append(f"export {r.name}={shlex.quote(r.value)}  # {r.scope}{note}: {r.why}")
    lines += [f"# note: {n.name}: {n.message}" for n in advice.notices]
    return "\n".join(lines)


def _print(advice: Advice) -> None:
    m = advice.machine
    torch = "not installed" if m.torch_version is None else f"{m.torch_version} ({m.platform}{': HIP ' + m.hip_version if m.hip_version else ''}{': CUDA ' + m.cuda_version if m.cuda_version else ''})"
    out.print(f"torch: {torch}", markup=False)
    for gpu in m.gpus:
        family = ARCH_NAMES.get(gpu.arch, "")
        out.print(f"GPU {gpu.index}: {gpu.name} [{gpu.arch}{': ' + family if family else ''}]", markup=False)
    socket = advice.network.socket_interface
    rdma = ", ".join(f"{p.name} ({p.link_layer}, {'active' if p.active else 'down'})" for p in advice.network.rdma_ports) or "none"
    out.print(f"network: socket interface {socket.name if socket else 'none'}; RDMA ports: {rdma}", markup=False)
    table = Table("variable", "value", "now", "scope", "why", title="recommended environment", title_justify="left",
                  whole=("variable", "value"))
    for r in advice.recommendations:
        now = {"unset": "unset", "same": "set, same"}.get(r.status, f"set to {r.current}")
        table.add_row(r.name, r.value, now, r.scope, f"{r.why} [{r.source}]")
    out.print(table)
    for n in advice.notices:
        out.print(f"note: {n.name}: {n.message}", markup=False)
    out.print("`rocmpatch env --export` prints these as shell lines; docs/environment.md says where each comes from.", markup=False)
