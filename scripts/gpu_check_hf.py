#!/usr/bin/env python3
"""The transformers side of scripts/gpu_check.sh: `generate` at the 8B shape in bf16 on the GPU (random weights made
on the device), the same shapes bench_gpu runs through actorllm, in the same check. Writes JSON; prints one line per
shape. A shape whose KV cache cannot fit is recorded as skipped, not timed."""
import argparse
import json
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True, help="directory with config.json (the 8B shape)")
    ap.add_argument("--json", required=True)
    ap.add_argument("--cases", default="1x128x128,64x128x128,64x1024x1024,256x128x128",
                    help="BATCHxINxOUT, comma separated")
    args = ap.parse_args()
    result = {"engine": "transformers", "cases": []}
    try:
        import torch
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM
    except Exception as e:  # noqa: BLE001
        result["error"] = f"transformers unavailable: {e}"
        json.dump(result, open(args.json, "w"), indent=1)
        print(result["error"])
        return 0
    result["torch"] = torch.__version__
    result["transformers"] = transformers.__version__
    cfg = AutoConfig.from_pretrained(args.config)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with torch.device("cuda"):
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        except TypeError:
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
    model.eval()
    torch.cuda.synchronize()
    result["init_seconds"] = time.perf_counter() - t0
    vocab = cfg.vocab_size
    for spec in args.cases.split(","):
        batch, n_in, n_out = (int(x) for x in spec.split("x"))
        case = {"batch": batch, "input_len": n_in, "output_len": n_out}
        kv_bytes = batch * (n_in + n_out) * cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * \
            (cfg.hidden_size // cfg.num_attention_heads) * 2
        free, _ = torch.cuda.mem_get_info()
        if kv_bytes > 0.8 * free:
            case["skipped"] = f"KV cache of {kv_bytes / 2**30:.1f} GiB does not fit in {free / 2**30:.1f} GiB free"
            result["cases"].append(case)
            print(f"transformers b{batch} {n_in}/{n_out}: skipped ({case['skipped']})", flush=True)
            continue
        ids = torch.randint(3, vocab, (batch, n_in), device="cuda")
        mask = torch.ones_like(ids)
        with torch.inference_mode():
            model.generate(ids[:, :8], attention_mask=mask[:, :8], max_new_tokens=4, do_sample=False, pad_token_id=0)
            torch.cuda.synchronize()
            t = time.perf_counter()
            out = model.generate(ids, attention_mask=mask, max_new_tokens=n_out, min_new_tokens=n_out,
                                 do_sample=False, pad_token_id=0)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t
        produced = (out.shape[1] - n_in) * batch
        case["seconds"] = dt
        case["output_tokens_per_s"] = produced / dt
        result["cases"].append(case)
        print(f"transformers b{batch} {n_in}/{n_out}: {produced / dt:.0f} output tokens/s ({dt:.1f} s)", flush=True)
        torch.cuda.empty_cache()
    json.dump(result, open(args.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
