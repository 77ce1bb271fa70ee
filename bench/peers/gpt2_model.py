"""GPT-2 in plain PyTorch, numerically the same model as zero's C++ one (src/models/gpt2.cpp).

Parameter names and shapes are Hugging Face GPT2LMHeadModel's (Conv1D weights stored [in, out]),
so a state dict maps one to one onto zero's and onto the shared init safetensors file. The
lm_head is tied: logits use transformer.wte.weight and there is no lm_head parameter. Each block
is its own module so FSDP2 can shard per block and DeepSpeed stage 3 can gather per module.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class GPT2Config:
    vocab_size: int = 50257
    n_positions: int = 256
    n_embd: int = 384
    n_layer: int = 6
    n_head: int = 6
    layer_norm_epsilon: float = 1e-5
    initializer_range: float = 0.02


# Same sizes as zero's presets (kPresets in src/models/gpt2.cpp).
PRESETS = {
    "gpt2-tiny": dict(n_layer=4, n_head=4, n_embd=128, n_positions=256),
    "gpt2-mini": dict(n_layer=6, n_head=6, n_embd=384, n_positions=256),
    "gpt2": dict(n_layer=12, n_head=12, n_embd=768, n_positions=1024),
}


def preset(name: str) -> GPT2Config:
    if name not in PRESETS:
        raise ValueError(f"unknown GPT-2 preset {name!r}; known: {', '.join(PRESETS)}")
    return GPT2Config(**PRESETS[name])


class Conv1D(nn.Module):
    """HF's Conv1D: y = x @ weight + bias with weight [in, out], one addmm like zero's."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        # Values come from the init file; zeros keep construction cheap and RNG-free.
        self.weight = nn.Parameter(torch.zeros(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        shape = x.shape[:-1] + (self.weight.shape[1],)
        return torch.addmm(self.bias, x.reshape(-1, self.weight.shape[0]), self.weight).view(shape)


class Attention(nn.Module):
    def __init__(self, c: GPT2Config):
        super().__init__()
        self.n_head = c.n_head
        self.c_attn = Conv1D(c.n_embd, 3 * c.n_embd)
        self.c_proj = Conv1D(c.n_embd, c.n_embd)

    def forward(self, x):
        B, T, C = x.shape
        hd = C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, hd).transpose(1, 2)
        k = k.view(B, T, self.n_head, hd).transpose(1, 2)
        v = v.view(B, T, self.n_head, hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, c: GPT2Config):
        super().__init__()
        self.c_fc = Conv1D(c.n_embd, 4 * c.n_embd)
        self.c_proj = Conv1D(4 * c.n_embd, c.n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))  # HF "gelu_new"


class Block(nn.Module):
    def __init__(self, c: GPT2Config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.n_embd, eps=c.layer_norm_epsilon)
        self.attn = Attention(c)
        self.ln_2 = nn.LayerNorm(c.n_embd, eps=c.layer_norm_epsilon)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    def __init__(self, c: GPT2Config):
        super().__init__()
        self.wte = nn.Embedding(c.vocab_size, c.n_embd)
        self.wpe = nn.Embedding(c.n_positions, c.n_embd)
        self.h = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.ln_f = nn.LayerNorm(c.n_embd, eps=c.layer_norm_epsilon)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2(nn.Module):
    """GPT2LMHeadModel layout; forward returns the fp32 mean cross-entropy loss."""

    def __init__(self, c: GPT2Config):
        super().__init__()
        self.config = c
        self.transformer = Transformer(c)

    def logits(self, idx):
        hidden = self.transformer(idx)
        # Tied head. The weight is read through the module (not a cached tensor) so FSDP2 and
        # DeepSpeed stage 3, which swap parameter storage around forward, see a gathered one.
        return torch.matmul(hidden, self.transformer.wte.weight.t())

    def forward(self, idx, targets):
        logits = self.logits(idx)
        V = logits.shape[-1]
        return F.cross_entropy(logits.float().view(-1, V), targets.view(-1))


def init_state_dict(c: GPT2Config, seed: int = 1234) -> dict:
    """GPT-2 initialisation like zero's: N(0, 0.02) for wte, wpe, c_attn and c_fc weights,
    N(0, 0.02/sqrt(2 n_layer)) for both c_proj weights, zero biases, LayerNorm (1, 0).
    Only the distribution matches zero's (the random streams differ); every system loads the
    file this produces, so they all start from the same weights."""
    g = torch.Generator().manual_seed(seed)
    std = c.initializer_range
    proj_std = std / math.sqrt(2 * c.n_layer)
    C = c.n_embd

    def normal(*shape, s=std):
        return torch.empty(*shape).normal_(0.0, s, generator=g)

    sd = {
        "transformer.wte.weight": normal(c.vocab_size, C),
        "transformer.wpe.weight": normal(c.n_positions, C),
    }
    for i in range(c.n_layer):
        p = f"transformer.h.{i}."
        sd[p + "ln_1.weight"] = torch.ones(C)
        sd[p + "ln_1.bias"] = torch.zeros(C)
        sd[p + "attn.c_attn.weight"] = normal(C, 3 * C)
        sd[p + "attn.c_attn.bias"] = torch.zeros(3 * C)
        sd[p + "attn.c_proj.weight"] = normal(C, C, s=proj_std)
        sd[p + "attn.c_proj.bias"] = torch.zeros(C)
        sd[p + "ln_2.weight"] = torch.ones(C)
        sd[p + "ln_2.bias"] = torch.zeros(C)
        sd[p + "mlp.c_fc.weight"] = normal(C, 4 * C)
        sd[p + "mlp.c_fc.bias"] = torch.zeros(4 * C)
        sd[p + "mlp.c_proj.weight"] = normal(4 * C, C, s=proj_std)
        sd[p + "mlp.c_proj.bias"] = torch.zeros(C)
    sd["transformer.ln_f.weight"] = torch.ones(C)
    sd["transformer.ln_f.bias"] = torch.zeros(C)
    return sd


def count_parameters(c: GPT2Config) -> dict:
    """Parameter counts for the FLOP model (the tied head shares wte's V x C)."""
    C, L, V, P = c.n_embd, c.n_layer, c.vocab_size, c.n_positions
    per_block = (2 * C) + (C * 3 * C + 3 * C) + (C * C + C) + (2 * C) + (C * 4 * C + 4 * C) + (4 * C * C + C)
    blocks = L * per_block + 2 * C  # + ln_f
    return {"total": V * C + P * C + blocks, "non_embedding": blocks, "embedding": V * C + P * C}


def write_init(model: str, path: str, seed: int = 1234) -> None:
    """The shared initial weights of a run, fp32 safetensors with HF names."""
    from safetensors.torch import save_file

    save_file(init_state_dict(preset(model), seed), path)
