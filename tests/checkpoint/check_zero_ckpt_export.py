#!/usr/bin/env python3
"""zero-ckpt export's files, read by Hugging Face's safetensors.

usage: check_zero_ckpt_export.py WORK_DIR   (the WORK_DIR check_zero_ckpt.sh filled)

The exports of the tiny GPT-2 checkpoint must load with safetensors.torch.load_file under
GPT2LMHeadModel's names and shapes, with no separate lm_head.weight (tied to wte, stored once
as HF does), metadata {"format": "pt"}, and values equal to the engine's parameters
(reference.safetensors, bf16): the bf16 export bitwise, the fp32 one after rounding to bf16.
Exits 77 (ctest's SKIP_RETURN_CODE) when the safetensors or torch module is not installed.
"""
import os
import sys

try:
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file
except ImportError as error:
    print(f"skipped: {error} (pip install safetensors torch)")
    sys.exit(77)

VOCAB, CONTEXT, WIDTH, LAYERS = 97, 16, 32, 2


def expected_shapes():
    """GPT2LMHeadModel's trainable parameters (n_inner = 4 * n_embd, Conv1D weights [in, out])."""
    shapes = {
        "transformer.wte.weight": [VOCAB, WIDTH],
        "transformer.wpe.weight": [CONTEXT, WIDTH],
        "transformer.ln_f.weight": [WIDTH],
        "transformer.ln_f.bias": [WIDTH],
    }
    for i in range(LAYERS):
        h = f"transformer.h.{i}."
        shapes.update({
            h + "ln_1.weight": [WIDTH], h + "ln_1.bias": [WIDTH],
            h + "attn.c_attn.weight": [WIDTH, 3 * WIDTH], h + "attn.c_attn.bias": [3 * WIDTH],
            h + "attn.c_proj.weight": [WIDTH, WIDTH], h + "attn.c_proj.bias": [WIDTH],
            h + "ln_2.weight": [WIDTH], h + "ln_2.bias": [WIDTH],
            h + "mlp.c_fc.weight": [WIDTH, 4 * WIDTH], h + "mlp.c_fc.bias": [4 * WIDTH],
            h + "mlp.c_proj.weight": [4 * WIDTH, WIDTH], h + "mlp.c_proj.bias": [WIDTH],
        })
    return shapes


def main():
    work = sys.argv[1]
    reference = load_file(os.path.join(work, "reference.safetensors"))
    shapes = expected_shapes()
    failures = []
    for dtype_name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16),
                              ("fp16", torch.float16)):
        path = os.path.join(work, f"model-{dtype_name}.safetensors")
        with safe_open(path, framework="pt") as f:
            if f.metadata() != {"format": "pt"}:
                failures.append(f"{dtype_name}: metadata {f.metadata()}")
        tensors = load_file(path)
        if "lm_head.weight" in tensors:
            failures.append(f"{dtype_name}: has lm_head.weight (tied to wte: stored once)")
        if sorted(tensors) != sorted(shapes):
            failures.append(f"{dtype_name}: names {sorted(set(tensors) ^ set(shapes))} differ")
        for name, value in tensors.items():
            if list(value.shape) != shapes.get(name) or value.dtype != dtype:
                failures.append(f"{dtype_name}: {name} {value.dtype}{list(value.shape)}, "
                                f"expected {dtype}{shapes.get(name)}")
                continue
            expected = reference[name]
            if dtype == torch.float16:
                # Rounded from the fp32 master, not from the bf16 parameters: only close to them.
                ok = torch.allclose(value.float(), expected.float(), rtol=1e-2, atol=1e-3)
            elif dtype == torch.float32:
                ok = torch.equal(value.to(torch.bfloat16), expected)
            else:
                ok = torch.equal(value, expected)
            if not ok:
                failures.append(f"{dtype_name}: {name} values differ from the engine's parameters")
    for failure in failures:
        print("FAIL:", failure)
    if failures:
        return 1
    print(f"ok: {len(shapes)} tensors under GPT2LMHeadModel names, no lm_head.weight, fp32/bf16/fp16 "
          f"(safetensors {__import__('safetensors').__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
