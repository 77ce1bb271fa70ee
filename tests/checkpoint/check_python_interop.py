#!/usr/bin/env python3
"""Our safetensors files against Hugging Face's own implementation, both ways.

usage: check_python_interop.py SAFETENSORS_INTEROP_BINARY WORK_DIR

1. `safetensors_interop write` writes the reference tensors; safetensors.torch loads them and
   they must match names, dtypes, shapes and values exactly.
2. safetensors.torch saves the same tensors; `safetensors_interop check` reads them with
   zero::read_safetensors and must find them identical.
Exits 77 (ctest's SKIP_RETURN_CODE) when the safetensors or torch module is not installed.
"""
import os
import subprocess
import sys

try:
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
except ImportError as error:
    print(f"skipped: {error} (pip install safetensors torch)")
    sys.exit(77)


def reference(dtype, shape):
    """Same definition as reference() in safetensors_interop.cpp."""
    numel = 1
    for d in shape:
        numel *= d
    i = torch.arange(numel, dtype=torch.float64)
    if dtype == torch.bool:
        value = torch.fmod(i, 2).eq(0)
    elif dtype.is_floating_point:
        value = ((i - 2) * 0.5).to(dtype)
    else:
        value = (i.to(torch.int64) * 7 - 3).to(dtype)
    return value.reshape(shape)


REFERENCE = {
    "f32": reference(torch.float32, [2, 3]),
    "bf16": reference(torch.bfloat16, [4]),
    "f16": reference(torch.float16, [2, 2]),
    "f64": reference(torch.float64, []),
    "i64": reference(torch.int64, [3]),
    "i32": reference(torch.int32, [2, 0]),
    "u8": reference(torch.uint8, [0]),
    "i8": reference(torch.int8, [2]),
    "bool": reference(torch.bool, [3]),
    "h.0.attn.c_attn.weight": reference(torch.float32, [3, 5]),
}


def main():
    tool, work_dir = sys.argv[1], sys.argv[2]
    os.makedirs(work_dir, exist_ok=True)
    failures = []

    ours = os.path.join(work_dir, "from_zero.safetensors")
    subprocess.run([tool, "write", ours], check=True)
    with safe_open(ours, framework="pt") as f:
        if f.metadata() != {"format": "pt", "producer": "zero"}:
            failures.append(f"metadata {f.metadata()}")
    loaded = load_file(ours)
    if sorted(loaded) != sorted(REFERENCE):
        failures.append(f"names {sorted(loaded)} != {sorted(REFERENCE)}")
    for name, expected in REFERENCE.items():
        got = loaded.get(name)
        if got is None:
            continue
        if got.dtype != expected.dtype or list(got.shape) != list(expected.shape):
            failures.append(f"{name}: {got.dtype}{list(got.shape)} != {expected.dtype}{list(expected.shape)}")
        elif not torch.equal(got, expected):
            failures.append(f"{name}: values differ")

    # safetensors.torch.save_file goes through numpy; without it only direction 1 runs.
    try:
        import numpy  # noqa: F401
    except ImportError:
        numpy = None
        print("note: numpy is not installed, so Python -> zero is not checked (pip install numpy)")
    if numpy is not None:
        theirs = os.path.join(work_dir, "from_python.safetensors")
        save_file(REFERENCE, theirs, metadata={"format": "pt"})
        result = subprocess.run([tool, "check", theirs])
        if result.returncode != 0:
            failures.append("zero::read_safetensors rejected or misread the file Python wrote")

    for failure in failures:
        print("FAIL:", failure)
    if not failures:
        ways = "both ways" if numpy is not None else "zero -> Python"
        print(f"ok: {len(REFERENCE)} tensors {ways} (safetensors {__import__('safetensors').__version__})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
