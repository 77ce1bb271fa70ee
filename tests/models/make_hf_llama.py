#!/usr/bin/env python3
"""Hugging Face Llama-family directories for test_llama_pretrained (ctest hf_llama), made here
with transformers from a random init (no download), with what the Hugging Face model computes
on fixed tokens.

    make_hf_llama.py WORK_DIR

Writes WORK_DIR/manifest.json:
  {"variants": [{"name", "dir", "tokens": [[...], ...], "loss", "greedy": [...],
                 "prompt": [...], "grad_norms": {name: norm}}],
                                           every one must load and give `loss` (1e-5), its
                                           gradients' norms, and continue `prompt` greedily as
                                           `greedy`
   "bad": [{"name", "dir", "message"}]}    every one must be refused with `message`
Variants: Llama (grouped-query attention, Llama 3 rope scaling, untied head); Llama with
attention and MLP biases, a tied head and linear rope scaling; Mistral (head_dim given, not
hidden / heads); Qwen2 (q/k/v biases, tied); the Llama one sharded with an index; the Llama one
with transformers 4.x's config keys (rope_theta and rope_scaling with "type") and bf16 tensors.
"""
import copy
import json
import os
import shutil
import sys

import torch
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM)

work = sys.argv[1]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
VOCAB = 512
common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
              rms_norm_eps=1e-5, attention_dropout=0.0,
              initializer_range=0.15)  # logits far from uniform: the loss tells models apart
models = {
    "llama": (LlamaForCausalLM, LlamaConfig(
        **common, tie_word_embeddings=False, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    "llama-biases": (LlamaForCausalLM, LlamaConfig(
        **common, tie_word_embeddings=True, attention_bias=True, mlp_bias=True,
        rope_scaling={"rope_type": "linear", "factor": 2.0})),
    "mistral": (MistralForCausalLM, MistralConfig(
        **common, head_dim=32, sliding_window=None, tie_word_embeddings=False)),
    "qwen2": (Qwen2ForCausalLM, Qwen2Config(**common, tie_word_embeddings=True)),
}
tokens = torch.randint(0, VOCAB, (2, 33), generator=torch.Generator().manual_seed(3))
prompt = tokens[0, :5]


def reference(model):
    model = model.float().eval()
    with torch.no_grad():
        loss = model(input_ids=tokens, labels=tokens).loss.item()
    with torch.enable_grad():  # the gradients of that loss: each parameter's norm
        model.zero_grad()
        model(input_ids=tokens, labels=tokens).loss.backward()
        grad_norms = {name: p.grad.norm().item() for name, p in model.named_parameters()}
        model.zero_grad()
        model.generation_config.eos_token_id = None  # the whole 12 tokens, as zero-generate
        greedy = model.generate(prompt.unsqueeze(0), max_new_tokens=12, do_sample=False,
                                pad_token_id=0)[0, len(prompt):].tolist()
    return {"tokens": tokens.tolist(), "loss": loss, "greedy": greedy, "prompt": prompt.tolist(),
            "grad_norms": grad_norms}


manifest = {"variants": [], "bad": []}
for seed, (name, (cls, config)) in enumerate(models.items()):
    torch.manual_seed(11 + seed)
    model = cls(config).eval()
    with torch.no_grad():  # transformers initialises biases and norms to 0 and 1: perturb them
        for pname, param in model.named_parameters():
            if pname.endswith("bias") or "norm" in pname:
                param.add_(torch.randn_like(param) * 0.1)
    directory = os.path.join(work, name)
    model.save_pretrained(directory, safe_serialization=True)
    manifest["variants"].append({"name": name, "dir": directory, **reference(model)})
    if name == "llama":
        sharded = os.path.join(work, "llama-sharded")
        model.save_pretrained(sharded, safe_serialization=True, max_shard_size="200KB")
        assert os.path.exists(os.path.join(sharded, "model.safetensors.index.json"))
        manifest["variants"].append({"name": "llama-sharded", "dir": sharded, **reference(model)})
        # transformers 4.x's keys and bf16 weights, as most published checkpoints are saved.
        legacy = os.path.join(work, "llama-4x-bf16")
        rounded = cls(config).eval()  # the bf16 weights in fp32, the rotary buffers fp32's
        rounded.load_state_dict({k: v.to(torch.bfloat16).float() for k, v in model.state_dict().items()})
        copy.deepcopy(rounded).to(torch.bfloat16).save_pretrained(legacy, safe_serialization=True)
        path = os.path.join(legacy, "config.json")
        with open(path) as f:
            cfg = json.load(f)
        rope = cfg.pop("rope_parameters")
        cfg["rope_theta"] = rope.pop("rope_theta")
        rope["type"] = rope.pop("rope_type")
        cfg["rope_scaling"] = rope
        cfg["torch_dtype"] = "bfloat16"
        with open(path, "w") as f:
            json.dump(cfg, f)
        manifest["variants"].append({"name": "llama-4x-bf16", "dir": legacy, **reference(rounded)})


def bad(name, message, base="llama", edit_config=None, edit_state=None):
    directory = os.path.join(work, "bad-" + name)
    shutil.copytree(os.path.join(work, base), directory)
    if edit_config:
        path = os.path.join(directory, "config.json")
        with open(path) as f:
            cfg = json.load(f)
        edit_config(cfg)
        with open(path, "w") as f:
            json.dump(cfg, f)
    if edit_state:
        from safetensors.torch import load_file, save_file
        path = os.path.join(directory, "model.safetensors")
        tensors = load_file(path)
        edit_state(tensors)
        save_file(tensors, path)
    manifest["bad"].append({"name": name, "dir": directory, "message": message})


bad("gelu", 'hidden_act = "gelu" is not supported', edit_config=lambda c: c.update(hidden_act="gelu"))
bad("yarn", 'rope_type = "yarn" is not supported',
    edit_config=lambda c: c["rope_parameters"].update(rope_type="yarn"))
bad("model-type", 'model_type = "gemma" is not a model zero builds',
    edit_config=lambda c: c.update(model_type="gemma"))
bad("missing", "has no tensor 'model.layers.1.mlp.up_proj.weight'",
    edit_state=lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
bad("kv-heads", "has shape [32, 64], the model's model.layers.0.self_attn.k_proj.weight [64, 64]",
    edit_config=lambda c: c.update(num_key_value_heads=4))
bad("unknown", "tensor 'model.layers.0.adapter.weight' is not a parameter of Llama",
    edit_state=lambda t: t.update({"model.layers.0.adapter.weight": torch.zeros(4)}))
bad("untied", "lm_head.weight differs from model.embed_tokens.weight", base="qwen2",
    edit_state=lambda t: t.update({"lm_head.weight": t["model.embed_tokens.weight"] + 1}))
with open(os.path.join(work, "manifest.json"), "w") as f:
    json.dump(manifest, f)
print(f"made {len(manifest['variants'])} variants and {len(manifest['bad'])} bad directories in {work}")
