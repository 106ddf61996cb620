#!/usr/bin/env python3
"""Writes a PEFT LoRA adapter directory with seeded random weights for a Hugging Face Llama-family model, as test
data for the adapter loader and the LoRA forward pass.

    python3 scripts/make_lora_adapter.py --model DIR --out OUTDIR --rank R --alpha A --targets q_proj,v_proj,...
                                         --seed S [--dtype float32|bfloat16|float16] [--rslora]

DIR holds the model's config.json (only the sizes are read: hidden_size, intermediate_size, num_attention_heads,
num_key_value_heads, head_dim, num_hidden_layers). OUTDIR gets what PEFT's save_pretrained writes:
  adapter_config.json        peft_type LORA, r, lora_alpha, target_modules (the --targets list), use_rslora, and
                             PEFT's other keys at their defaults (bias "none", use_dora false, ...)
  adapter_model.safetensors  for every layer and target, base_model.model.model.layers.N.self_attn.{q,k,v,o}_proj
                             or .mlp.{gate,up,down}_proj .lora_A.weight [r, in_features] and .lora_B.weight
                             [out_features, r], all of --dtype
Targets: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj (MLP ones refused on mixture-of-experts
models: their MLPs are expert blocks).

Values: lora_A uniform with std 1/sqrt(in_features); lora_B uniform with std 0.5/sqrt(r) (PEFT starts B at zero, which
would change nothing: a test adapter must change the outputs). For an input of RMS 1, B A x then has elements of std
about 0.5, times the scaling lora_alpha / r (lora_alpha / sqrt(r) with --rslora): with --alpha equal to --rank, an
update about half the size of the input, enough to change stories260K's greedy continuations without drowning the
base model. Every value is a function of (seed, layer, target, matrix, index), drawn in that order and rounded to
float32; 16-bit dtypes hold those float32 values rounded to nearest even.

Standard library only (Python 3.11)."""
import argparse
import json
import math
import os
import random
import sys

sys.dont_write_bytecode = True  # no scripts/__pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_quantized_checkpoints import (bf16_tensor, f16_tensor, f32_tensor, round_f32_list,  # noqa: E402
                                        write_safetensors)

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
DTYPES = {"float32": f32_tensor, "float16": f16_tensor, "bfloat16": bf16_tensor}


def module_shapes(config):
    """{target: (block, out_features, in_features)} of the base model's Linear layers."""
    n_embd = config["hidden_size"]
    n_head = config["num_attention_heads"]
    n_head_kv = config.get("num_key_value_heads") or n_head
    head_dim = config.get("head_dim") or n_embd // n_head
    n_ff = config["intermediate_size"]
    return {
        "q_proj": ("self_attn", n_head * head_dim, n_embd),
        "k_proj": ("self_attn", n_head_kv * head_dim, n_embd),
        "v_proj": ("self_attn", n_head_kv * head_dim, n_embd),
        "o_proj": ("self_attn", n_embd, n_head * head_dim),
        "gate_proj": ("mlp", n_ff, n_embd),
        "up_proj": ("mlp", n_ff, n_embd),
        "down_proj": ("mlp", n_embd, n_ff),
    }


def uniform(rng, n, std):
    """n values uniform in [-std*sqrt(3), std*sqrt(3)) (standard deviation `std`), rounded to float32: a 16-bit
    adapter is then the float32 one of the same seed rounded, as torch's .to() would round it."""
    half = std * math.sqrt(3.0)
    return round_f32_list(rng.uniform(-half, half) for _ in range(n))


def make_adapter(config, targets, rank, alpha, seed, dtype="float32", rslora=False, base_model=""):
    """(adapter_config dict, {tensor name: Tensor})."""
    shapes = module_shapes(config)
    unknown = [t for t in targets if t not in shapes]
    if unknown:
        raise SystemExit(f"unknown target {', '.join(unknown)}; known: {', '.join(TARGETS)}")
    if not targets:
        raise SystemExit("--targets names no module")
    moe = bool(config.get("num_local_experts") or config.get("num_experts"))
    if moe and any(shapes[t][0] == "mlp" for t in targets):
        raise SystemExit("MLP targets on a mixture-of-experts model: its MLPs are expert blocks, which LoRA here "
                         "does not modify")
    if rank < 1:
        raise SystemExit(f"--rank {rank}: must be at least 1")
    make = DTYPES[dtype]
    rng = random.Random(seed)
    tensors = {}
    for layer in range(config["num_hidden_layers"]):
        for target in TARGETS:  # a fixed order, whatever order --targets gives
            if target not in targets:
                continue
            block, n_out, n_in = shapes[target]
            prefix = f"base_model.model.model.layers.{layer}.{block}.{target}"
            tensors[f"{prefix}.lora_A.weight"] = make([rank, n_in], uniform(rng, rank * n_in, 1 / math.sqrt(n_in)))
            tensors[f"{prefix}.lora_B.weight"] = make([n_out, rank], uniform(rng, n_out * rank, 0.5 / math.sqrt(rank)))
    adapter_config = {
        "alpha_pattern": {},
        "auto_mapping": None,
        "base_model_name_or_path": base_model,
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "init_lora_weights": True,
        "layer_replication": None,
        "layers_pattern": None,
        "layers_to_transform": None,
        "loftq_config": {},
        "lora_alpha": int(alpha) if float(alpha).is_integer() else alpha,
        "lora_dropout": 0.0,
        "megatron_config": None,
        "megatron_core": "megatron.core",
        "modules_to_save": None,
        "peft_type": "LORA",
        "r": rank,
        "rank_pattern": {},
        "revision": None,
        "target_modules": [t for t in TARGETS if t in targets],
        "task_type": "CAUSAL_LM",
        "use_dora": False,
        "use_rslora": rslora,
    }
    return adapter_config, tensors


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the base model's directory (its config.json is read)")
    ap.add_argument("--out", required=True, help="the adapter directory to write")
    ap.add_argument("--rank", type=int, required=True, help="r")
    ap.add_argument("--alpha", type=float, required=True, help="lora_alpha")
    ap.add_argument("--targets", required=True, help=f"comma-separated, of {','.join(TARGETS)}")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--dtype", choices=list(DTYPES), default="float32", help="of the stored matrices")
    ap.add_argument("--rslora", action="store_true", help="use_rslora: scaling lora_alpha / sqrt(r)")
    args = ap.parse_args(argv)

    with open(os.path.join(args.model, "config.json")) as f:
        config = json.load(f)
    targets = [t for t in args.targets.split(",") if t]
    adapter_config, tensors = make_adapter(config, targets, args.rank, args.alpha, args.seed, args.dtype,
                                           args.rslora, os.path.abspath(args.model))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "adapter_config.json"), "w") as f:
        json.dump(adapter_config, f, indent=2, sort_keys=True)
        f.write("\n")
    write_safetensors(os.path.join(args.out, "adapter_model.safetensors"), tensors)
    print(f"{args.out}: r {args.rank}, lora_alpha {adapter_config['lora_alpha']}, "
          f"{', '.join(adapter_config['target_modules'])}, {len(tensors)} tensors ({args.dtype})")


if __name__ == "__main__":
    main()
