#!/usr/bin/env python3
"""scripts/make_lora_adapter.py: writes adapters for stories260K (../shared/models/stories260K, or the shared
directory given as the first argument, or $ACTORLLM_SHARED) and for small configs of its own into a temporary
directory, reads them back with the independent reader below, and checks: adapter_config.json is PEFT's, with the
requested r, lora_alpha, target_modules and use_rslora; the safetensors file is valid and holds exactly lora_A
[r, in_features] and lora_B [out_features, r] for every layer and target, of the requested dtype; the values are
seeded (same seed, same bytes; another seed, other values), B is not zero, and the spreads are the documented ones;
the 16-bit adapters are the float32 one rounded; mixture-of-experts MLP targets and unknown targets are refused.
Standard library only."""
import array
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import unittest

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.normpath(os.path.join(here, "..", ".."))
SCRIPT = os.path.join(root, "scripts", "make_lora_adapter.py")

SHARED = (sys.argv.pop(1) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else
          os.environ.get("ACTORLLM_SHARED") or os.environ.get("ACTORLLM_SHARED_DIR")
          or os.path.join(root, "..", "shared"))
STORIES = os.path.join(SHARED, "models", "stories260K")
SIZES = {"F32": 4, "F16": 2, "BF16": 2}
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def read_checked(test, path):
    """{name: (dtype, shape, [float values])}, checking the file's layout as it goes."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack_from("<Q", blob, 0)
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    test.assertEqual(header.pop("__metadata__"), {"format": "pt"})
    spans, out = [], {}
    for name, info in header.items():
        dtype, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
        test.assertIn(dtype, SIZES, name)
        test.assertEqual(e - b, math.prod(shape) * SIZES[dtype], name)
        spans.append((b, e))
        raw = blob[8 + n + b:8 + n + e]
        if dtype == "F32":
            values = list(struct.unpack(f"<{len(raw) // 4}f", raw))
        elif dtype == "F16":
            values = list(struct.unpack(f"<{len(raw) // 2}e", raw))
        else:  # bf16: the upper half of a float32
            halves = struct.unpack(f"<{len(raw) // 2}H", raw)
            values = list(struct.unpack(f"<{len(halves)}f", struct.pack(f"<{len(halves)}I", *(h << 16 for h in halves))))
        out[name] = (dtype, shape, values)
    spans.sort()
    pos = 0
    for b, e in spans:
        test.assertEqual(b, pos, f"{path}: hole or overlap at {pos}")
        pos = e
    test.assertEqual(8 + n + pos, len(blob), f"{path}: trailing bytes")
    return out


def run(*args, check=True):
    p = subprocess.run([sys.executable, "-W", "error", SCRIPT, *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed: {p.stderr}")
    return p


def std(values):
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def bf16_round(x):
    (b,) = struct.unpack("<I", struct.pack("<f", x))
    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return struct.unpack("<f", struct.pack("<I", b & 0xFFFFFFFF))[0]


class MakeLoraAdapterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="actorllm-lora-script-")
        with open(os.path.join(STORIES, "config.json")) as f:
            cls.config = json.load(f)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def make(self, name, *args, model=STORIES):
        out = os.path.join(self.tmp.name, name)
        run("--model", model, "--out", out, *args)
        with open(os.path.join(out, "adapter_config.json")) as f:
            config = json.load(f)
        return config, read_checked(self, os.path.join(out, "adapter_model.safetensors")), out

    def expected_shapes(self, config, rank, targets):
        n_embd, n_head = config["hidden_size"], config["num_attention_heads"]
        head_dim = config.get("head_dim") or n_embd // n_head
        q, kv, n_ff = n_head * head_dim, config["num_key_value_heads"] * head_dim, config["intermediate_size"]
        dims = {"q_proj": (q, n_embd), "k_proj": (kv, n_embd), "v_proj": (kv, n_embd), "o_proj": (n_embd, q),
                "gate_proj": (n_ff, n_embd), "up_proj": (n_ff, n_embd), "down_proj": (n_embd, n_ff)}
        out = {}
        for layer in range(config["num_hidden_layers"]):
            for t in targets:
                block = "self_attn" if t in ALL[:4] else "mlp"
                n_out, n_in = dims[t]
                prefix = f"base_model.model.model.layers.{layer}.{block}.{t}"
                out[f"{prefix}.lora_A.weight"] = [rank, n_in]
                out[f"{prefix}.lora_B.weight"] = [n_out, rank]
        return out

    def test_stories_adapter_is_peft_shaped_seeded_and_non_zero(self):
        config, tensors, _ = self.make("all", "--rank", "4", "--alpha", "8", "--targets", ",".join(ALL),
                                       "--seed", "1")
        self.assertEqual(config["peft_type"], "LORA")
        self.assertEqual((config["r"], config["lora_alpha"], config["use_rslora"]), (4, 8, False))
        self.assertEqual(config["target_modules"], ALL)
        self.assertEqual((config["bias"], config["use_dora"], config["fan_in_fan_out"]), ("none", False, False))
        for key in ("modules_to_save", "layers_to_transform", "layers_pattern"):
            self.assertIsNone(config[key], key)
        self.assertEqual((config["rank_pattern"], config["alpha_pattern"]), ({}, {}))
        expected = self.expected_shapes(self.config, 4, ALL)
        self.assertEqual({n: t[1] for n, t in tensors.items()}, expected)
        self.assertEqual({t[0] for t in tensors.values()}, {"F32"})
        a_values = [v for n, t in tensors.items() if ".lora_A." in n for v in t[2]]
        b_values = [v for n, t in tensors.items() if ".lora_B." in n for v in t[2]]
        self.assertTrue(all(any(v != 0 for v in t[2]) for t in tensors.values()), "an all-zero matrix")
        # A: std 1/sqrt(in) per matrix; B: std 0.5/sqrt(r); within the sampling error of a few thousand values
        for name, (_, shape, values) in tensors.items():
            want = 1 / math.sqrt(shape[1]) if ".lora_A." in name else 0.5 / math.sqrt(shape[1])
            self.assertLess(abs(std(values) / want - 1), 0.25, name)
        self.assertGreater(len(set(a_values)), len(a_values) * 0.99)
        self.assertGreater(len(set(b_values)), len(b_values) * 0.99)

        # Same seed: the same bytes, whatever the order of --targets; another seed: other values.
        _, again, out_again = self.make("again", "--rank", "4", "--alpha", "8", "--targets",
                                        ",".join(reversed(ALL)), "--seed", "1")
        self.assertEqual(again, tensors)
        _, other, _ = self.make("other", "--rank", "4", "--alpha", "8", "--targets", ",".join(ALL), "--seed", "2")
        self.assertEqual(other.keys(), tensors.keys())
        self.assertTrue(all(other[n][2] != tensors[n][2] for n in tensors))

    def test_16_bit_adapters_are_the_float32_one_rounded(self):
        args = ["--rank", "2", "--alpha", "3", "--targets", "q_proj,down_proj", "--seed", "5"]
        _, f32, _ = self.make("f32", *args)
        _, bf16, _ = self.make("bf16", *args, "--dtype", "bfloat16")
        config, f16, _ = self.make("f16", *args, "--dtype", "float16", "--rslora")
        self.assertTrue(config["use_rslora"])
        self.assertEqual(config["lora_alpha"], 3)
        self.assertEqual(config["target_modules"], ["q_proj", "down_proj"])
        for name, (_, shape, values) in f32.items():
            self.assertEqual(bf16[name][:2], ("BF16", shape))
            self.assertEqual(f16[name][:2], ("F16", shape))
            self.assertEqual(bf16[name][2], [bf16_round(v) for v in values], name)
            self.assertEqual(f16[name][2], list(struct.unpack(f"<{len(values)}e", struct.pack(f"<{len(values)}e",
                                                                                               *values))), name)

    def test_gqa_sizes_and_refusals(self):
        model = os.path.join(self.tmp.name, "gqa")
        os.makedirs(model)
        config = {"architectures": ["LlamaForCausalLM"], "hidden_size": 48, "intermediate_size": 40,
                  "num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 16}
        with open(os.path.join(model, "config.json"), "w") as f:
            json.dump(config, f)
        cfg, tensors, _ = self.make("gqa-adapter", "--rank", "3", "--alpha", "6.5", "--targets",
                                    "k_proj,o_proj,up_proj", "--seed", "0", model=model)
        self.assertEqual(cfg["lora_alpha"], 6.5)
        self.assertEqual({n: t[1] for n, t in tensors.items()},
                         self.expected_shapes(config, 3, ["k_proj", "o_proj", "up_proj"]))

        p = run("--model", model, "--out", os.path.join(self.tmp.name, "bad"), "--rank", "2", "--alpha", "2",
                "--targets", "q_proj,lm_head", "--seed", "0", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("lm_head", p.stderr)
        config.update({"num_local_experts": 4, "num_experts_per_tok": 2})
        with open(os.path.join(model, "config.json"), "w") as f:
            json.dump(config, f)
        p = run("--model", model, "--out", os.path.join(self.tmp.name, "bad"), "--rank", "2", "--alpha", "2",
                "--targets", "q_proj,gate_proj", "--seed", "0", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("mixture-of-experts", p.stderr)
        self.make("moe-attention", "--rank", "2", "--alpha", "2", "--targets", "q_proj,v_proj", "--seed", "0",
                  model=model)


if __name__ == "__main__":
    unittest.main()
