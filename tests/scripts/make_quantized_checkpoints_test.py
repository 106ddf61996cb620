#!/usr/bin/env python3
"""scripts/make_quantized_checkpoints.py: writes every format from stories260K (../shared/models/stories260K, or the
shared directory given as the first argument, or $ACTORLLM_SHARED) and from its own random llama and mixtral models
into a temporary directory, then reads each quantized checkpoint back with the little unpackers below, written from
the loaders' side (vLLM's AWQ triton reverse order, the GPTQ v1 zero + 1, compressed-tensors' unpack_from_int32)
rather than from the script, and checks: they reproduce the reference weights bit for bit; the reference is the
float model within the quantization step; padding is zeros; the headers are valid safetensors; the configs are the
tools' own; fp8 e4m3fn encoding round-trips all 256 codes and rounds ties to even. Standard library only."""
import json
import math
import operator
import os
import struct
import subprocess
import sys
import tempfile
import unittest

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.normpath(os.path.join(here, "..", ".."))
SCRIPT = os.path.join(root, "scripts", "make_quantized_checkpoints.py")
sys.path.insert(0, os.path.join(root, "scripts"))
sys.dont_write_bytecode = True  # no scripts/__pycache__ in the source tree
import make_quantized_checkpoints as m  # noqa: E402

SHARED = (sys.argv.pop(1) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else
          os.environ.get("ACTORLLM_SHARED") or os.environ.get("ACTORLLM_SHARED_DIR")
          or os.path.join(root, "..", "shared"))
STORIES = os.path.join(SHARED, "models", "stories260K")
FORMATS = ["awq", "gptq4", "gptq8", "gptq4_perchannel", "ct_w4a16", "ct_w8a8", "fp8", "ct_fp8"]
SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "F8_E4M3": 1,
         "BOOL": 1}


# ---- an independent safetensors reader that checks the header as it goes -------------------------------------------

def read_checked(test, path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack_from("<Q", blob, 0)
    test.assertEqual(n % 8, 0, f"{path}: header length {n} not a multiple of 8")
    text = blob[8:8 + n].decode("utf-8")
    test.assertTrue(text.startswith("{") and text.rstrip(" ").endswith("}"), f"{path}: header padding not spaces")
    test.assertLess(len(text) - len(text.rstrip(" ")), 8, f"{path}: more padding than 8-byte alignment needs")
    header = json.loads(text)
    test.assertEqual(header.pop("__metadata__"), {"format": "pt"})
    spans = []
    out = {}
    for name, info in header.items():
        test.assertEqual(sorted(info), ["data_offsets", "dtype", "shape"])
        dtype, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
        test.assertIn(dtype, SIZES)
        test.assertEqual(e - b, math.prod(shape) * SIZES[dtype], name)
        test.assertEqual(b % SIZES[dtype], 0, f"{name}: misaligned")
        spans.append((b, e))
        out[name] = (dtype, shape, blob[8 + n + b:8 + n + e])
    spans.sort()
    pos = 0
    for b, e in spans:
        test.assertEqual(b, pos, f"{path}: hole or overlap at {pos}")
        pos = e
    test.assertEqual(8 + n + pos, len(blob), f"{path}: trailing bytes")
    return out


def fp8_value(code):
    """e4m3fn from its definition: sign, 4-bit exponent with bias 7, 3-bit mantissa, no inf, S.1111.111 NaN."""
    s = -1.0 if code >> 7 else 1.0
    e, f = (code >> 3) & 15, code & 7
    if e == 15 and f == 7:
        return float("nan")
    return s * (f / 8 * 2.0 ** -6 if e == 0 else (1 + f / 8) * 2.0 ** (e - 7))


FP8 = [fp8_value(c) for c in range(256)]
SIXTEENTH = (1 / 16).__mul__


def values(t):
    dtype, _, raw = t
    n = len(raw) // SIZES[dtype]
    if dtype == "F32":
        return list(struct.unpack(f"<{n}f", raw))
    if dtype == "F16":
        return list(struct.unpack(f"<{n}e", raw))
    if dtype == "BF16":
        return list(struct.unpack(f"<{n}f", struct.pack(f"<{n}I", *(h << 16 for h in struct.unpack(f"<{n}H", raw)))))
    if dtype == "I32":
        return list(struct.unpack(f"<{n}i", raw))
    if dtype == "I64":
        return list(struct.unpack(f"<{n}q", raw))
    if dtype == "I8":
        return list(struct.unpack(f"<{n}b", raw))
    if dtype == "F8_E4M3":
        return [FP8[c] for c in raw]
    raise AssertionError(dtype)


def f32_list(xs):
    """Each value rounded to float32 (to nearest, ties to even)."""
    return list(struct.unpack(f"<{len(xs)}f", struct.pack(f"<{len(xs)}f", *xs)))


def rows(t):
    _, shape, _ = t
    v = values(t)
    if not shape:
        return v
    cols = shape[-1] if len(shape) > 1 else 1
    return [v[r * cols:(r + 1) * cols] for r in range(len(v) // cols)]


# ---- dequantization, from the loaders' side ----------------------------------------------------------------------
# Each returns the weight [out][in] and, per row, (group size, [(scale, lowest, highest representable value)] per
# group), for the check that the reference is the float weight rounded to the nearest step or clamped.

AWQ_SHIFT = [0, 4, 1, 5, 2, 6, 3, 7]  # vLLM awq_triton: output column j of an int32 sits at nibble AWQ_SHIFT[j]


def deq_awq(q, base, qc):
    qw, qz, sc = rows(q[base + ".qweight"]), rows(q[base + ".qzeros"]), rows(q[base + ".scales"])
    n_in, n_out, g = len(qw), len(sc[0]), qc["group_size"]
    w, groups = [], []
    for o in range(n_out):
        sh, col = 4 * AWQ_SHIFT[o % 8], o // 8
        zs = [(qz[k][col] >> sh) & 15 for k in range(n_in // g)]
        w.append([(((qw[i][col] >> sh) & 15) - zs[i // g]) * sc[i // g][o] for i in range(n_in)])
        groups.append((g, [(sc[k][o], -z * sc[k][o], (15 - z) * sc[k][o]) for k, z in enumerate(zs)]))
    return w, groups


def deq_gptq(q, base, qc):
    qw, qz, sc = rows(q[base + ".qweight"]), rows(q[base + ".qzeros"]), rows(q[base + ".scales"])
    g_idx = values(q[base + ".g_idx"])
    bits = qc["bits"]
    pf, mask = 32 // bits, (1 << bits) - 1
    n_in, n_out = len(qw) * pf, len(qw[0])
    g = n_in if qc["group_size"] == -1 else qc["group_size"]
    assert g_idx == [i // g for i in range(n_in)]
    w, groups = [], []
    for o in range(n_out):
        zs = [((qz[k][o // pf] >> (bits * (o % pf))) & mask) + 1 for k in range(len(qz))]  # v1: stored zero - 1
        w.append([(((qw[i // pf][o] >> (bits * (i % pf))) & mask) - zs[g_idx[i]]) * sc[g_idx[i]][o]
                  for i in range(n_in)])
        groups.append((g, [(sc[k][o], -z * sc[k][o], (mask - z) * sc[k][o]) for k, z in enumerate(zs)]))
    return w, groups


def deq_ct_w4a16(q, base, qc):
    wp, sc = rows(q[base + ".weight_packed"]), rows(q[base + ".weight_scale"])
    n_out, n_in = values(q[base + ".weight_shape"])
    g = qc["config_groups"]["group_0"]["weights"]["group_size"]
    w = [[(((wp[o][i // 8] >> (4 * (i % 8))) & 15) - 8) * sc[o][i // g] for i in range(n_in)] for o in range(n_out)]
    return w, [(g, [(s, -8 * s, 7 * s) for s in sc[o]]) for o in range(n_out)]


def deq_per_row(q, base, qc):  # ct_w8a8, ct_fp8: weight [out, in] (int8 or e4m3fn) times weight_scale [out, 1]
    w, sc = rows(q[base + ".weight"]), rows(q[base + ".weight_scale"])
    lo, hi = (-128, 127) if q[base + ".weight"][0] == "I8" else (-448, 448)
    return ([[c * sc[o][0] for c in w[o]] for o in range(len(w))],
            [(len(w[o]), [(sc[o][0], lo * sc[o][0], hi * sc[o][0])]) for o in range(len(w))])


def deq_fp8(q, base, qc):  # vLLM fp8: weight [out, in] e4m3fn times one F32 scale (shape [])
    assert q[base + ".weight_scale"][1] == []
    w, (s,) = rows(q[base + ".weight"]), values(q[base + ".weight_scale"])
    return [[c * s for c in row] for row in w], [(len(row), [(s, -448 * s, 448 * s)]) for row in w]


DEQUANT = {"awq": deq_awq, "gptq4": deq_gptq, "gptq8": deq_gptq, "gptq4_perchannel": deq_gptq,
           "ct_w4a16": deq_ct_w4a16, "ct_w8a8": deq_per_row, "fp8": deq_fp8, "ct_fp8": deq_per_row}
PARTS = {"awq": {"qweight": "I32", "qzeros": "I32", "scales": "F16"},
         "gptq4": {"qweight": "I32", "qzeros": "I32", "scales": "F16", "g_idx": "I32"},
         "ct_w4a16": {"weight_packed": "I32", "weight_scale": "BF16", "weight_shape": "I64"},
         "ct_w8a8": {"weight": "I8", "weight_scale": "BF16"},
         "fp8": {"weight": "F8_E4M3", "weight_scale": "F32"},
         "ct_fp8": {"weight": "F8_E4M3", "weight_scale": "BF16"}}
PARTS["gptq8"] = PARTS["gptq4_perchannel"] = PARTS["gptq4"]


def ct_args(bits, type_, strategy, group_size=None, dynamic=False):
    return {"actorder": None, "block_structure": None, "dynamic": dynamic, "group_size": group_size, "num_bits": bits,
            "observer": None if dynamic else "minmax", "observer_kwargs": {}, "strategy": strategy,
            "symmetric": True, "type": type_}


def ct_config(fmt, weights, inputs):
    return {"config_groups": {"group_0": {"format": fmt, "input_activations": inputs, "output_activations": None,
                                          "targets": ["Linear"], "weights": weights}},
            "format": fmt, "global_compression_ratio": None, "ignore": ["lm_head"], "kv_cache_scheme": None,
            "quant_method": "compressed-tensors", "quantization_status": "compressed", "sparsity_config": {},
            "transform_config": {}, "version": "0.12.2"}


def gptq(bits, g, sym):
    return {"bits": bits, "checkpoint_format": "gptq", "damp_percent": 0.01, "desc_act": False, "group_size": g,
            "model_file_base_name": "model", "model_name_or_path": None, "quant_method": "gptq",
            "static_groups": False, "sym": sym, "true_sequential": True}


def expected_configs(g):
    return {
        "awq": {"bits": 4, "group_size": g, "modules_to_not_convert": None, "quant_method": "awq", "version": "gemm",
                "zero_point": True},
        "gptq4": gptq(4, g, False), "gptq8": gptq(8, g, True), "gptq4_perchannel": gptq(4, -1, True),
        "ct_w4a16": ct_config("pack-quantized", ct_args(4, "int", "group", g), None),
        "ct_w8a8": ct_config("int-quantized", ct_args(8, "int", "channel"), ct_args(8, "int", "token", dynamic=True)),
        "fp8": {"activation_scheme": "dynamic", "ignored_layers": ["lm_head"], "quant_method": "fp8"},
        "ct_fp8": ct_config("float-quantized", ct_args(8, "float", "channel"),
                            ct_args(8, "float", "token", dynamic=True)),
    }


def is_quantized(name):
    return m.QUANTIZED.match(name) is not None


class Fp8(unittest.TestCase):
    def test_all_256_codes(self):
        m.fp8_self_test()
        for c in range(256):
            v = fp8_value(c)
            if math.isnan(v):
                self.assertIn(c, (0x7F, 0xFF))
                self.assertTrue(math.isnan(m.fp8_decode(c)))
                continue
            self.assertEqual(m.fp8_decode(c), v, hex(c))
            self.assertEqual(m.fp8_encode(v), c, hex(c))

    def test_ties_go_to_even_and_others_to_nearest(self):
        for c in range(0x7E):  # each pair of neighbouring non-negative finite codes, and their negatives
            lo, hi = fp8_value(c), fp8_value(c + 1)
            mid = (lo + hi) / 2
            even = c if c % 2 == 0 else c + 1
            for sign in (0, 0x80):
                k = -1.0 if sign else 1.0
                probe = [k * mid, k * (mid - (hi - lo) / 64), k * (mid + (hi - lo) / 64)]
                want = [sign | even, sign | c, sign | (c + 1)]
                self.assertEqual([m.fp8_encode(v) for v in probe], want, (hex(c), mid))
                self.assertEqual(m.fp8_encode_list([v * 0.25 for v in probe], 0.25), want, (hex(c), mid))

    def test_saturation_and_extremes(self):
        self.assertEqual(fp8_value(0x7E), 448.0)
        self.assertEqual(m.fp8_encode(448.0), 0x7E)
        self.assertEqual(m.fp8_encode(1e30), 0x7E)
        self.assertEqual(m.fp8_encode(-500.0), 0xFE)
        self.assertEqual(m.fp8_encode(float("nan")), 0x7F)
        self.assertEqual(m.fp8_encode(2.0 ** -9), 0x01)  # smallest subnormal
        self.assertEqual(m.fp8_encode(2.0 ** -11), 0x00)  # below half of it: zero


class Packing(unittest.TestCase):
    def test_value_positions(self):
        # AWQ: nibble k holds column order[k] of 8 (AutoAWQ order_map [0, 2, 4, 6, 1, 3, 5, 7])
        self.assertEqual(m.pack_values(list(range(8)), 4, m.AWQ_ORDER), 0x75316420)
        # GPTQ and compressed-tensors: value k at bits 4k / 8k
        self.assertEqual(m.pack_values(list(range(8)), 4), 0x76543210)
        self.assertEqual(m.pack_values([1, 2, 3, 255], 8), 0xFF030201)


class Formats(unittest.TestCase):
    tmp = None

    @classmethod
    def setUpClass(cls):
        if not os.path.isfile(os.path.join(STORIES, "model.safetensors")):
            raise RuntimeError(f"stories260K not found at {STORIES} (pass the shared directory or set ACTORLLM_SHARED)")
        cls.tmp = tempfile.TemporaryDirectory(prefix="quantized-checkpoints-")
        runs = {"stories": ["--model", STORIES], "llama": ["--random", "llama", "--seed", "3"],
                "mixtral": ["--random", "mixtral", "--seed", "4"]}
        procs = {k: subprocess.Popen([sys.executable, "-W", "error", SCRIPT, *args, "--out",
                                      os.path.join(cls.tmp.name, k)], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True) for k, args in runs.items()}
        cls.logs = {k: p.communicate()[0] for k, p in procs.items()}
        failed = [f"{k}: exit {p.returncode}\n{cls.logs[k]}" for k, p in procs.items() if p.returncode != 0]
        if failed:
            cls.tmp.cleanup()
            cls.tmp = None
            raise RuntimeError("\n".join(failed))

    @classmethod
    def tearDownClass(cls):
        if cls.tmp is not None:
            cls.tmp.cleanup()

    def out(self, run, *parts):
        return os.path.join(self.tmp.name, run, *parts)

    def check_format(self, run, fmt, source_dir, group):
        fdir = self.out(run, fmt)
        with open(os.path.join(fdir, "config.json")) as f:
            conf = json.load(f)
        with open(os.path.join(fdir, "reference", "config.json")) as f:
            rconf = json.load(f)
        with open(os.path.join(source_dir, "config.json")) as f:
            src_conf = json.load(f)
        qc = conf.pop("quantization_config")
        self.assertEqual(qc, expected_configs(group)[fmt], fmt)
        self.assertNotIn("quantization_config", rconf)
        self.assertEqual(rconf["torch_dtype"], "float32")
        if fmt.startswith("gptq"):
            with open(os.path.join(fdir, "quantize_config.json")) as f:
                self.assertEqual(json.load(f), qc)
        # The same config as the input but for the padded intermediate size.
        inter, padded = src_conf["intermediate_size"], conf["intermediate_size"]
        need = {"awq": group, "gptq4": group, "gptq8": group, "gptq4_perchannel": 8, "ct_w4a16": group}.get(fmt, 1)
        self.assertEqual(padded, -(-inter // need) * need, fmt)
        self.assertEqual({k: v for k, v in conf.items() if k != "intermediate_size"},
                         {k: v for k, v in src_conf.items() if k != "intermediate_size"})
        for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
            if os.path.exists(os.path.join(source_dir, name)):
                with open(os.path.join(source_dir, name), "rb") as a, open(os.path.join(fdir, name), "rb") as b:
                    self.assertEqual(a.read(), b.read(), name)

        src = read_checked(self, os.path.join(source_dir, "model.safetensors"))
        q = read_checked(self, os.path.join(fdir, "model.safetensors"))
        ref = read_checked(self, os.path.join(fdir, "reference", "model.safetensors"))
        self.assertEqual(sorted(ref), sorted(src))
        expected_q = set()
        n_quantized = 0
        for name, t in src.items():
            self.assertEqual(ref[name][0], "F32")
            if not is_quantized(name):
                expected_q.add(name)
                self.assertEqual(q[name][0], t[0], name)
                want = values(t)
                rows_ = t[1][0]
                if t[1] != ref[name][1]:  # a padded gate/up bias
                    self.assertTrue(m.MLP_ROWS.match(name), name)
                    want += [0.0] * (ref[name][1][0] - rows_)
                self.assertEqual(values(q[name]), want, name)
                self.assertEqual(values(ref[name]), want, name)
                continue
            n_quantized += 1
            base = name[:-len(".weight")]
            parts = PARTS[fmt]
            for part, dtype in parts.items():
                expected_q.add(f"{base}.{part}")
                self.assertEqual(q[f"{base}.{part}"][0], dtype, f"{base}.{part}")
            n_out, n_in = ref[name][1]
            w, groups = DEQUANT[fmt](q, base, qc)
            self.assertEqual((len(w), len(w[0])), (n_out, n_in), name)
            r, orig = rows(ref[name]), rows(src[name])
            o_out, o_in = t[1]
            fp8 = fmt in ("fp8", "ct_fp8")
            for o in range(n_out):
                self.assertEqual(f32_list(w[o]), r[o], f"{fmt} {name} row {o}: unpacked weight != reference")
                if o >= o_out or o_in < n_in:  # padding
                    self.assertFalse(any(r[o][o_in if o < o_out else 0:]), f"{fmt} {name} row {o}: padding not 0")
                x_row = (orig[o] if o < o_out else []) + [0.0] * (n_in - (o_in if o < o_out else 0))
                g, params = groups[o]
                for k, (s, lo, hi) in enumerate(params):
                    # The nearest step (half a step; e4m3: 2^-4 of the value, or half a subnormal step), or the
                    # clamp to the representable range lo..hi.
                    xs, ys = x_row[k * g:(k + 1) * g], r[o][k * g:(k + 1) * g]
                    err = list(map(abs, map(operator.sub, ys, xs)))
                    if fp8:  # (fast path first: every error within the rounding)
                        if max(map(operator.sub, err, map(SIXTEENTH, map(abs, xs)))) <= s * 2.0 ** -10 * (1 - 1e-6):
                            continue
                    elif max(err) <= s / 2 * (1 - 1e-6):
                        continue
                    for x, y in zip(xs, ys):
                        near = abs(x) / 16 + s * 2.0 ** -10 if fp8 else s / 2
                        if abs(y - x) > (near + max(0.0, lo - x, x - hi)) * (1 + 1e-6):
                            self.fail(f"{fmt} {name} row {o}: {x} -> {y} (scale {s}, range {lo}..{hi})")
        self.assertEqual(sorted(q), sorted(expected_q), fmt)
        with open(os.path.join(fdir, "reference", "reference_info.json")) as f:
            info = json.load(f)
        self.assertEqual(info["format"], fmt)
        self.assertEqual(len(info["quantized_tensors"]), n_quantized)
        self.assertEqual(info["activations"], {"ct_w8a8": "int8_per_token_dynamic", "fp8": "fp8_e4m3_dynamic",
                                               "ct_fp8": "fp8_e4m3_per_token_dynamic"}.get(fmt, "none"))
        return q

    def test_stories260k_every_format(self):
        for fmt in FORMATS:
            with self.subTest(fmt=fmt):
                self.check_format("stories", fmt, STORIES, 64)
        self.assertIn("awq: 35 Linear weights, group 64, padded intermediate_size 172->192", self.logs["stories"])
        self.assertIn("gptq4_perchannel: 35 Linear weights, group -1, padded intermediate_size 172->176",
                      self.logs["stories"])
        self.assertIn("fp8: 35 Linear weights, group -1\n", self.logs["stories"])

    def test_random_llama_with_biases(self):
        for fmt in FORMATS:
            with self.subTest(fmt=fmt):
                q = self.check_format("llama", fmt, self.out("llama", "float"), 64)
                self.assertIn("lm_head.weight", q)
                self.assertIn("model.layers.0.mlp.gate_proj.bias", q)
                if fmt == "gptq4":  # v1 cannot store a zero of 0: no stored zero is 15 (a zero of 16)
                    for name, t in q.items():
                        if name.endswith(".qzeros"):
                            for v in values(t):
                                self.assertNotIn(15, [(v >> (4 * k)) & 15 for k in range(8)], name)

    def test_random_mixtral_experts(self):
        for fmt in FORMATS:
            with self.subTest(fmt=fmt):
                q = self.check_format("mixtral", fmt, self.out("mixtral", "float"), 64)
                self.assertEqual(q["model.layers.0.block_sparse_moe.gate.weight"][0], "F32")
                self.assertIn("model.layers.0.block_sparse_moe.experts.3.w2." +
                              ("qweight" if fmt in ("awq", "gptq4") else "weight_packed" if fmt == "ct_w4a16" else
                               "weight" if fmt in ("ct_w8a8", "fp8", "ct_fp8") else "qweight"), q)


if __name__ == "__main__":
    unittest.main()
