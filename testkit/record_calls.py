"""Run a training script (upstream's pretrain_gpt.py) recording what reaches the torch ops of the fast
path, so that a CPU run proves which op and which arguments a GPU run would get.

    ROCMPATCH_RECORD=out.json python -m torch.distributed.run ... record_calls.py pretrain_gpt.py ARGS

(harness.recorded_run runs it.)

Each rank writes out.json.<rank> when the script ends: {"sdpa": {signature: count}, "optimizers":
[{class, fused, foreach}], "rms_norm": count, "scaled_mm": {"<a dtype> x <b dtype>": count}}.
With ROCMPATCH_RECORD_FP8=emulate each torch._scaled_mm call is computed as the same GEMM on the
dequantized operands in float32 (what testkit/checks/fp8.py's gemm group checks the CPU kernel
equals), since torch's CPU FP8 kernel is a reference loop far too slow for training runs. A signature is the JSON of is_causal, the attention
mask's shape (or None), enable_gqa and the query/key head counts of one
torch.nn.functional.scaled_dot_product_attention call.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys

import torch
import torch.nn.functional as F

RECORD = {"sdpa": {}, "optimizers": [], "rms_norm": 0, "scaled_mm": {}}


def _write() -> None:
    rank = os.environ.get("RANK", "0")
    with open(f"{os.environ['ROCMPATCH_RECORD']}.{rank}", "w") as out:
        json.dump(RECORD, out)


def _install() -> None:
    real_sdpa, real_rms_norm = F.scaled_dot_product_attention, F.rms_norm

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
        signature = json.dumps({"is_causal": is_causal, "attn_mask": None if attn_mask is None else list(attn_mask.shape),
                                "enable_gqa": kw.get("enable_gqa", False), "q_heads": query.size(1),
                                "k_heads": key.size(1)}, sort_keys=True)
        RECORD["sdpa"][signature] = RECORD["sdpa"].get(signature, 0) + 1
        return real_sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **kw)

    def rms_norm(*args, **kwargs):
        RECORD["rms_norm"] += 1
        return real_rms_norm(*args, **kwargs)

    F.scaled_dot_product_attention = sdpa
    F.rms_norm = rms_norm

    real_scaled_mm, emulate = torch._scaled_mm, os.environ.get("ROCMPATCH_RECORD_FP8") == "emulate"

    def scaled_mm(a, b, scale_a=None, scale_b=None, bias=None, out_dtype=None, **kw):
        pair = f"{str(a.dtype).removeprefix('torch.')} x {str(b.dtype).removeprefix('torch.')}"
        RECORD["scaled_mm"][pair] = RECORD["scaled_mm"].get(pair, 0) + 1
        if emulate:
            out = (a.float() * scale_a) @ (b.float() * scale_b)
            return (out if bias is None else out + bias).to(out_dtype or a.dtype)
        return real_scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, bias=bias, out_dtype=out_dtype, **kw)

    torch._scaled_mm = scaled_mm

    for cls in (torch.optim.AdamW, torch.optim.Adam):
        def init(self, *args, _real=cls.__init__, _cls=cls, **kwargs):
            _real(self, *args, **kwargs)
            if type(self) is _cls:  # once, where AdamW's __init__ goes through Adam's
                RECORD["optimizers"].append({"class": _cls.__name__, "fused": self.defaults.get("fused"),
                                             "foreach": self.defaults.get("foreach")})
        cls.__init__ = init


if __name__ == "__main__":
    _install()
    atexit.register(_write)
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
