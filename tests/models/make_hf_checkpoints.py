#!/usr/bin/env python3
"""Hugging Face GPT-2 directories for test_gpt2_pretrained (ctest hf_init), made here with
transformers from a random init (no download), and the losses the Hugging Face model gives on
fixed tokens.

    make_hf_checkpoints.py WORK_DIR [EXTRA_NAME=DIR ...]

Writes WORK_DIR/manifest.json:
  {"tokens": [[...], ...],
   "variants": [{"name", "dir", "loss"}],      every one must load and give `loss` (1e-5)
   "bad": [{"name", "dir", "message"}]}         every one must be refused with `message`
Variants: one model.safetensors ("single"); shards with model.safetensors.index.json
("sharded"); the original gpt2 files' names, without "transformer.", with lm_head.weight and
the attention mask buffers ("legacy", bf16 tensors); EXTRA_NAME=DIR adds a directory as is
(an export of zero-ckpt). Bad: an activation zero cannot compute, a missing tensor, a shape
that config.json contradicts, an unknown tensor, an untied lm_head.
"""
import json
import os
import shutil
import sys

import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

work = sys.argv[1]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
torch.manual_seed(7)
config = GPT2Config(vocab_size=50257, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
model = GPT2LMHeadModel(config).eval()
tokens = torch.randint(0, 50257, (2, 33), generator=torch.Generator().manual_seed(3))


def loss_of(m):
    with torch.no_grad():
        return m(input_ids=tokens, labels=tokens).loss.item()


manifest = {"tokens": tokens.tolist(), "variants": [], "bad": []}
single = os.path.join(work, "single")
model.save_pretrained(single, safe_serialization=True)
manifest["variants"].append({"name": "single", "dir": single, "loss": loss_of(model)})
sharded = os.path.join(work, "sharded")
model.save_pretrained(sharded, safe_serialization=True, max_shard_size="2MB")
assert os.path.exists(os.path.join(sharded, "model.safetensors.index.json"))
manifest["variants"].append({"name": "sharded", "dir": sharded, "loss": loss_of(model)})

# The original gpt2 layout: names without "transformer.", lm_head.weight saved, mask buffers.
legacy = os.path.join(work, "legacy")
os.makedirs(legacy)
state = {}
for name, value in model.state_dict().items():
    short = name[len("transformer."):] if name.startswith("transformer.") else name
    state[short] = value.to(torch.bfloat16).contiguous()
for i in range(config.n_layer):
    state[f"h.{i}.attn.bias"] = torch.tril(torch.ones(1, 1, 64, 64)).contiguous()
save_file(state, os.path.join(legacy, "model.safetensors"))
config.save_pretrained(legacy)
rounded = GPT2LMHeadModel(config).eval()
rounded.load_state_dict({k: v.to(torch.bfloat16).float() for k, v in model.state_dict().items()})
manifest["variants"].append({"name": "legacy (bf16)", "dir": legacy, "loss": loss_of(rounded)})

for extra in sys.argv[2:]:
    name, directory = extra.split("=", 1)
    exported = GPT2LMHeadModel.from_pretrained(directory).eval()
    manifest["variants"].append({"name": name, "dir": directory, "loss": loss_of(exported.float())})


def bad(name, message, edit_config=None, edit_state=None):
    directory = os.path.join(work, "bad-" + name)
    shutil.copytree(single, directory)
    if edit_config:
        with open(os.path.join(directory, "config.json")) as f:
            cfg = json.load(f)
        edit_config(cfg)
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(cfg, f)
    if edit_state:
        from safetensors.torch import load_file
        path = os.path.join(directory, "model.safetensors")
        tensors = load_file(path)
        edit_state(tensors)
        save_file(tensors, path)
    manifest["bad"].append({"name": name, "dir": directory, "message": message})


bad("relu", 'activation_function = "relu" is not supported',
    edit_config=lambda c: c.update(activation_function="relu"))
bad("missing", "has no tensor 'transformer.h.1.mlp.c_fc.weight'",
    edit_state=lambda t: t.pop("transformer.h.1.mlp.c_fc.weight"))
bad("shape", "has shape [50257, 64], the model's transformer.wte.weight [50257, 32]",
    edit_config=lambda c: c.update(n_embd=32, n_head=2))
bad("unknown", "tensor 'transformer.h.0.adapter.weight' is not a parameter of GPT-2",
    edit_state=lambda t: t.update({"transformer.h.0.adapter.weight": torch.zeros(4)}))
bad("untied", "lm_head.weight differs from transformer.wte.weight",
    edit_state=lambda t: t.update({"lm_head.weight": t["transformer.wte.weight"] + 1}))
with open(os.path.join(work, "manifest.json"), "w") as f:
    json.dump(manifest, f)
print(f"made {len(manifest['variants'])} variants and {len(manifest['bad'])} bad directories in {work}")
