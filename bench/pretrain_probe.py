"""Run upstream's pretrain_gpt.py with probes, for the training benchmarks (train_throughput.py,
memory_estimate.py). Standalone: needs only torch and the Megatron tree, no rocmpatch import.

    ROCMPATCH_PROBE=OUT python -m torch.distributed.run ... bench/pretrain_probe.py TREE/pretrain_gpt.py ARGS

Each rank writes OUT.<rank>.json at exit:
- step_seconds: the wall time of every train_step (the device synchronized before and after);
  step_cpu_seconds: the process's CPU time in each (all threads; steadier than wall time on a busy CPU);
- flops_per_step: upstream's own count for one global batch (training.num_floating_point_operations);
- sdpa: {signature: count} of torch.nn.functional.scaled_dot_product_attention calls (is_causal,
  attn_mask shape, enable_gqa, query/key heads);
- attention_ops: the names of the attention ops and GPU kernels the torch profiler saw during the
  step ROCMPATCH_PROBE_PROFILE_STEP (default 2; 0: no profile), with their counts;
- optimizers: class, fused and foreach of each torch Adam/AdamW built;
- scaled_mm: {"<a dtype> x <b dtype>": count} of torch._scaled_mm calls (the FP8 GEMMs of --fp8-format
  without Transformer Engine);
- peak_bytes, peak_how: on a GPU torch.cuda.max_memory_allocated over the whole run; on the CPU,
  with ROCMPATCH_PROBE_MEMORY=1, the peak of live tensor bytes over the whole run, summed from the
  torch profiler's memory events (every allocation and free of the CPU allocator), else None.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import time

import torch
import torch.nn.functional as F

ATTENTION_WORDS = ("attention", "attn", "fmha", "flash", "sdpa", "softmax")
RESULT: dict = {"step_seconds": [], "step_cpu_seconds": [], "sdpa": {}, "attention_ops": {}, "optimizers": [], "scaled_mm": {},
                "flops_per_step": None,
                "peak_bytes": None, "peak_how": None, "device": None}


def _synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _record_sdpa() -> None:
    real = F.scaled_dot_product_attention

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
        signature = json.dumps({"is_causal": is_causal, "attn_mask": None if attn_mask is None else list(attn_mask.shape),
                                "enable_gqa": kw.get("enable_gqa", False), "q_heads": query.size(1),
                                "k_heads": key.size(1)}, sort_keys=True)
        RESULT["sdpa"][signature] = RESULT["sdpa"].get(signature, 0) + 1
        return real(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **kw)

    F.scaled_dot_product_attention = sdpa


def _record_scaled_mm() -> None:
    real = torch._scaled_mm

    def scaled_mm(a, b, *args, **kwargs):
        pair = f"{str(a.dtype).removeprefix('torch.')} x {str(b.dtype).removeprefix('torch.')}"
        RESULT["scaled_mm"][pair] = RESULT["scaled_mm"].get(pair, 0) + 1
        return real(a, b, *args, **kwargs)

    torch._scaled_mm = scaled_mm


def _record_optimizers() -> None:
    for cls in (torch.optim.AdamW, torch.optim.Adam):
        def init(self, *args, _real=cls.__init__, _cls=cls, **kwargs):
            _real(self, *args, **kwargs)
            if type(self) is _cls:
                RESULT["optimizers"].append({"class": _cls.__name__, "fused": self.defaults.get("fused"),
                                             "foreach": self.defaults.get("foreach")})
        cls.__init__ = init


def _attention_names(prof) -> dict:
    """{name: count} of the attention ops and GPU kernels (an op's kernels, or device events)."""
    names: dict = {}
    for event in prof.events():
        for name in (event.name, *(kernel.name for kernel in getattr(event, "kernels", []) or [])):
            if any(word in name.lower() for word in ATTENTION_WORDS):
                names[name] = names.get(name, 0) + 1
    return names


def _wrap_train_step(profile_step: int) -> None:
    from megatron.training import training

    real = training.train_step

    def train_step(*args, **kwargs):
        index = len(RESULT["step_seconds"]) + 1
        if RESULT["flops_per_step"] is None:
            margs = training.get_args()
            RESULT["flops_per_step"] = float(training.num_floating_point_operations(margs, margs.global_batch_size))
        profiler = None
        if index == profile_step:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            profiler = torch.profiler.profile(activities=activities)
            profiler.__enter__()
        _synchronize()
        start, cpu_start = time.perf_counter(), time.process_time()
        try:
            return real(*args, **kwargs)
        finally:
            _synchronize()
            RESULT["step_seconds"].append(time.perf_counter() - start)
            RESULT["step_cpu_seconds"].append(time.process_time() - cpu_start)
            if profiler is not None:
                profiler.__exit__(None, None, None)
                RESULT["attention_ops"] = _attention_names(profiler)

    training.train_step = train_step


def _peak_tracker():
    """Start measuring peak memory; returns a function that stops and records it."""
    if torch.cuda.is_available():
        RESULT["device"] = torch.cuda.get_device_name()
        torch.cuda.reset_peak_memory_stats()

        def stop():
            RESULT["peak_bytes"], RESULT["peak_how"] = torch.cuda.max_memory_allocated(), "torch.cuda.max_memory_allocated"
        return stop
    RESULT["device"] = "cpu"
    if os.environ.get("ROCMPATCH_PROBE_MEMORY") != "1":
        return lambda: None
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True)
    prof.__enter__()

    def stop():
        prof.__exit__(None, None, None)
        events = prof.profiler.kineto_results.events()
        memory = [e for e in events if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU]
        live = peak = peak_ns = 0
        for event in sorted(memory, key=lambda e: e.start_ns()):
            live += event.nbytes()  # an allocation's size, a free's negative size
            if live > peak:
                peak, peak_ns = live, event.start_ns()
        # The ops running when the peak was reached, outermost first (where in the step it is).
        around = sorted((e for e in events if e.name() != "[memory]" and e.start_ns() <= peak_ns <= e.end_ns()),
                        key=lambda e: e.start_ns())
        RESULT["peak_bytes"], RESULT["peak_how"] = peak, "torch.profiler memory events (live CPU tensor bytes)"
        RESULT["peak_during"] = [e.name() for e in around][-6:]
    return stop


def _write(stop_peak) -> None:
    stop_peak()
    with open(f"{os.environ['ROCMPATCH_PROBE']}.{os.environ.get('RANK', '0')}.json", "w") as out:
        json.dump(RESULT, out)


def main() -> None:
    script = os.path.abspath(sys.argv[1])
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(script))
    stop_peak = _peak_tracker()
    atexit.register(_write, stop_peak)
    _record_sdpa()
    _record_scaled_mm()
    _record_optimizers()
    _wrap_train_step(int(os.environ.get("ROCMPATCH_PROBE_PROFILE_STEP", "2")))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
