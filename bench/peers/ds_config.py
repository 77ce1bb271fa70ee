"""The DeepSpeed config of the benchmark: DeepSpeed is initialized with it, and zero's program
gets the same JSON (bench_peer_zero --config), so both run the same settings."""

# The one set of training hyper-parameters every system uses.
LR, BETAS, EPS, WEIGHT_DECAY, CLIP = 3e-4, (0.9, 0.999), 1e-8, 0.1, 1.0


def deepspeed_config(batch, dtype, stage, bucket_elements):
    zero = {"stage": stage, "reduce_bucket_size": int(bucket_elements),
            "allgather_bucket_size": int(bucket_elements)}
    if stage == 3:
        zero["stage3_prefetch_bucket_size"] = int(bucket_elements)
    return {
        "train_micro_batch_size_per_gpu": batch,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": LR, "betas": list(BETAS), "eps": EPS,
                                                  "weight_decay": WEIGHT_DECAY}},
        "gradient_clipping": CLIP,
        "zero_optimization": zero,
        "bf16": {"enabled": dtype == "bf16"},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
