#!/usr/bin/env python3
"""Writes tiny quantized checkpoints in the formats vLLM loads, from a float Hugging Face checkpoint, together with
the dequantized weights a correct loader must reconstruct from each.

    python3 scripts/make_quantized_checkpoints.py --model DIR --out OUTDIR [--formats F ...] [--group-size G]
    python3 scripts/make_quantized_checkpoints.py --random llama|mixtral --out OUTDIR [--seed N] ...

DIR holds config.json and model.safetensors (F32, F16 or BF16; or model.safetensors.index.json and its shards).
With --random instead, a tiny float model with random weights (seeded by --seed) is made first and written to
OUTDIR/float/; `llama` has attention and MLP biases and an untied lm_head, `mixtral` has 4 experts per layer.

For each format F it writes OUTDIR/F/:
  config.json          the input's, plus the format's quantization_config as the real tool writes it
  model.safetensors    the quantized checkpoint (tensor names, dtypes, shapes and packing as the real tool's)
  tokenizer files      copied from DIR when present
  reference/           config.json (no quantization_config) and model.safetensors with every tensor as F32: the
                       quantized Linear weights dequantized (exactly what a correct loader reconstructs: the F32
                       value of (code - zero) * scale, exact for the 16-bit scales; with an F32 scale, as `fp8`'s
                       per-tensor one, the product rounded once to F32), everything else converted to F32 unchanged;
                       and reference_info.json: the format, bits, group size, the activation scheme the runtime
                       applies (int8 / fp8 per-token dynamic for ct_w8a8 / ct_fp8), padding, the quantized names.
Quantized: every model.layers.N.{self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj}.weight, MoE experts
mlp.experts.E.{gate,up,down}_proj and Mixtral block_sparse_moe.experts.E.{w1,w2,w3}; embeddings, norms, biases,
lm_head and routers stay float, as the real tools leave them. Round-to-nearest per group from the float weights.

Formats: awq, gptq4 (asymmetric), gptq8 (symmetric), gptq4_perchannel (symmetric, group_size -1), ct_w4a16,
ct_w8a8, fp8 (vLLM's own, dynamic activations), ct_fp8. The facts each one follows, and where they were
confirmed, are in the comment at the top of its function.

Group size: --group-size, else the largest of 128, 64, 32 dividing every quantized in_features other than the MLP
intermediate size. When the intermediate size (stories260K: 172) does not fit a format's packing (a multiple of
the group size, and of the 32/bits values per int32 where it is packed), the MLP is zero-padded to the next size
that does (172 -> 192 with group 64): gate/up get zero rows, down zero columns, so the padded model computes
exactly what the original does; config.json's intermediate_size says the padded size. A format that needs no
padding (ct_w8a8, fp8, ct_fp8) keeps the original size.

Standard library only (Python 3.11)."""
import argparse
import array
import bisect
import json
import math
import os
import random
import re
import shutil
import struct
import sys

ALL_FORMATS = ["awq", "gptq4", "gptq8", "gptq4_perchannel", "ct_w4a16", "ct_w8a8", "fp8", "ct_fp8"]

# ------------------------------------------------------------------------------------------------------------------
# safetensors
# ------------------------------------------------------------------------------------------------------------------

DTYPE_SIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
              "F8_E4M3": 1, "BOOL": 1}
FLOAT_DTYPES = ("F32", "F16", "BF16")
LITTLE = sys.byteorder == "little"


class Tensor:
    """A tensor as stored: safetensors dtype name, shape, little-endian bytes."""

    def __init__(self, dtype, shape, data):
        self.dtype, self.shape, self.data = dtype, list(shape), bytes(data)
        if len(self.data) != numel(self.shape) * DTYPE_SIZE[dtype]:
            raise ValueError(f"{dtype} {self.shape}: {len(self.data)} bytes")


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def read_safetensors(path):
    """{name: Tensor}, metadata."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack_from("<Q", blob, 0)
    header = json.loads(blob[8:8 + n])
    metadata = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        out[name] = Tensor(info["dtype"], info["shape"], blob[base + begin:base + end])
    return out, metadata


def write_safetensors(path, tensors, metadata=None):
    """Header JSON (8-byte little-endian length first, padded with spaces to a multiple of 8), then the data. The
    tensors go largest element size first, then by name, so every tensor starts aligned to its element size."""
    order = sorted(tensors, key=lambda k: (-DTYPE_SIZE[tensors[k].dtype], k))
    header = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    for name in order:
        t = tensors[name]
        header[name] = {"dtype": t.dtype, "shape": t.shape, "data_offsets": [offset, offset + len(t.data)]}
        offset += len(t.data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name in order:
            f.write(tensors[name].data)


def load_checkpoint(model_dir):
    """All tensors of model.safetensors, or of the shards model.safetensors.index.json names."""
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return read_safetensors(single)[0]
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if not os.path.exists(index):
        raise SystemExit(f"{model_dir}: neither model.safetensors nor model.safetensors.index.json")
    with open(index) as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    out = {}
    for shard in shards:
        out.update(read_safetensors(os.path.join(model_dir, shard))[0])
    return out


def _typed(code, data):
    a = array.array(code)
    a.frombytes(data)
    if not LITTLE:
        a.byteswap()
    return a


def _raw(a):
    if not LITTLE:
        a = array.array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


def to_floats(t):
    """A float tensor's values as Python floats (exact)."""
    if t.dtype == "F32":
        return list(_typed("f", t.data))
    if t.dtype == "F16":
        return list(struct.unpack(f"<{len(t.data) // 2}e", t.data))
    if t.dtype == "BF16":
        return list(_typed("f", _raw(array.array("I", (h << 16 for h in _typed("H", t.data))))))
    raise ValueError(f"not a float dtype: {t.dtype}")


def f32_tensor(shape, values):
    return Tensor("F32", shape, _raw(array.array("f", values)))


def f16_tensor(shape, values):
    return Tensor("F16", shape, struct.pack(f"<{len(values)}e", *values))


def bf16_bits(x):
    """x rounded to the nearest bfloat16, ties to even, as its 16 bits (x is first rounded to float32, as a float32
    tensor's .to(torch.bfloat16) sees it)."""
    (b,) = struct.unpack("<I", struct.pack("<f", x))
    if (b & 0x7F800000) == 0x7F800000:
        return b >> 16
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF


def bf16_tensor(shape, values):
    return Tensor("BF16", shape, _raw(array.array("H", (bf16_bits(v) for v in values))))


def round_f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def round_f32_list(values):
    """Each value rounded to float32 (to nearest, ties to even), at C speed."""
    return array.array("f", values).tolist()


def round_f16(x):
    return struct.unpack("<e", struct.pack("<e", x))[0]


def round_bf16(x):
    return struct.unpack("<f", struct.pack("<I", bf16_bits(x) << 16))[0]


SCALE_DTYPES = {"F32": (round_f32, f32_tensor), "F16": (round_f16, f16_tensor), "BF16": (round_bf16, bf16_tensor)}


def int_tensor(dtype, shape, values):
    code = {"I32": "i", "I64": "q", "I8": "b"}[dtype]
    return Tensor(dtype, shape, _raw(array.array(code, values)))


def u32_to_i32(v):
    return v - (1 << 32) if v & 0x80000000 else v


# ------------------------------------------------------------------------------------------------------------------
# float8 e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; S.1111.111 is NaN (0x7F, 0xFF); largest
# finite 0x7E = 1.75 * 2^8 = 448; exponent field 0 holds the subnormals m/8 * 2^-6 (smallest 2^-9). As torch's
# float8_e4m3fn (and the OCP FP8 spec) define it.
# ------------------------------------------------------------------------------------------------------------------

FP8_MAX = 448.0


def fp8_decode(code):
    sign = -1.0 if code & 0x80 else 1.0
    e, m = (code >> 3) & 0xF, code & 7
    if e == 15 and m == 7:
        return math.nan
    if e == 0:
        return sign * math.ldexp(m, -9)
    return sign * math.ldexp(8 + m, e - 10)


_FP8_POSITIVE = [fp8_decode(c) for c in range(0x7F)]  # codes 0x00..0x7E: 0.0 .. 448.0, increasing
_FP8_VALUE = [fp8_decode(c) for c in range(256)]
_FP8_MIDPOINTS = [(a + b) / 2 for a, b in zip(_FP8_POSITIVE, _FP8_POSITIVE[1:])]  # exact: at most 5 significant bits


def fp8_encode(x):
    """The e4m3fn code nearest x, ties to the even code; |x| > 448 saturates to +-448 (the tools clamp before the
    cast); NaN -> 0x7F."""
    if x != x:
        return 0x7F
    sign = 0x80 if math.copysign(1.0, x) < 0 else 0
    a = -x if sign else x
    c = bisect.bisect_left(_FP8_MIDPOINTS, a)  # the number of midpoints below a
    if c < len(_FP8_MIDPOINTS) and a == _FP8_MIDPOINTS[c] and c & 1:
        c += 1  # a tie between codes c and c + 1: the even one
    return sign | c


def fp8_encode_list(values, scale):
    """[fp8_encode(v / scale) for v in values], faster."""
    mids, n, bl, out = _FP8_MIDPOINTS, len(_FP8_MIDPOINTS), bisect.bisect_left, []
    for v in values:
        a = v / scale
        sign = 0
        if a < 0 or (a == 0 and math.copysign(1.0, a) < 0):
            sign, a = 0x80, -a
        c = bl(mids, a)
        if c & 1 and c < n and a == mids[c]:
            c += 1
        out.append(sign | c)
    return out


def fp8_self_test():
    """Every finite code round-trips; ties go to the even code; saturation; subnormals. Raises AssertionError."""
    def check(ok, what):
        if not ok:
            raise AssertionError(f"fp8 self-test: {what}")

    for c in range(256):
        v = fp8_decode(c)
        check(c in (0x7F, 0xFF) if math.isnan(v) else fp8_encode(v) == c, f"code {c:#04x}")
    check(fp8_decode(0x7E) == 448.0 and fp8_decode(0x01) == 2.0 ** -9 and fp8_decode(0x08) == 2.0 ** -6, "values")
    check(fp8_encode(1e9) == 0x7E and fp8_encode(-1e9) == 0xFE and fp8_encode(464.0) == 0x7E, "saturation")
    check(fp8_encode(1.0 + 1 / 16) == fp8_encode(1.0), "tie 1.0625 -> 1.0 (m=0, even)")
    check(fp8_encode(1.0 + 3 / 16) == fp8_encode(1.25), "tie 1.1875 -> 1.25 (m=2, even)")
    check(fp8_encode(2.0 ** -10) == 0x00 and fp8_encode(3 * 2.0 ** -10) == 0x02, "subnormal ties to even")
    check(fp8_encode(-0.0) == 0x80, "-0")
    probe = [v * k for v in _FP8_POSITIVE + _FP8_MIDPOINTS for k in (1.0, -1.0, 1.01, -0.99)] + [1e9, -1e9, -0.0]
    check(fp8_encode_list(probe, 1.0) == [fp8_encode(v) for v in probe], "fp8_encode_list == fp8_encode")


# ------------------------------------------------------------------------------------------------------------------
# Which tensors are quantized, and the MLP padding
# ------------------------------------------------------------------------------------------------------------------

QUANTIZED = re.compile(r"^model\.layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj"
                       r"|mlp\.experts\.\d+\.(gate|up|down)_proj|block_sparse_moe\.experts\.\d+\.w[123])\.weight$")
# The MLP's intermediate dimension: rows of gate/up (w1/w3), columns of down (w2).
MLP_ROWS = re.compile(r"^model\.layers\.\d+\.(mlp\.(gate|up)_proj|mlp\.experts\.\d+\.(gate|up)_proj"
                      r"|block_sparse_moe\.experts\.\d+\.w[13])\.(weight|bias)$")
MLP_COLS = re.compile(r"^model\.layers\.\d+\.(mlp\.down_proj|mlp\.experts\.\d+\.down_proj"
                      r"|block_sparse_moe\.experts\.\d+\.w2)\.weight$")


def intermediate_key(name, config):
    if (".experts." in name and "moe_intermediate_size" in config and "block_sparse_moe" not in name):
        return "moe_intermediate_size"
    return "intermediate_size"


def lcm(a, b):
    return a * b // math.gcd(a, b)


def default_group_size(tensors, config):
    """The largest of 128, 64, 32 dividing every quantized in_features except the (paddable) MLP intermediate."""
    ins = {t.shape[1] for n, t in tensors.items() if QUANTIZED.match(n) and not MLP_COLS.match(n)}
    for g in (128, 64, 32):
        if all(i % g == 0 for i in ins):
            return g
    raise SystemExit(f"no group size of 128, 64, 32 divides the in_features {sorted(ins)}; pass --group-size")


def pad_plan(tensors, config, in_multiple, out_multiple):
    """{config key: (old size, padded size)} for the MLP intermediate sizes the format's multiples need padded."""
    plan = {}
    need = lcm(in_multiple, out_multiple)
    for name, t in tensors.items():
        if QUANTIZED.match(name) and (MLP_ROWS.match(name) or MLP_COLS.match(name)):
            key = intermediate_key(name, config)
            size = t.shape[0] if MLP_ROWS.match(name) else t.shape[1]
            if size % need:
                padded = -(-size // need) * need
                if plan.get(key, (size, padded)) != (size, padded):
                    raise SystemExit(f"{name}: {key} is not the same in every layer")
                plan[key] = (size, padded)
    return plan


def pad_tensor(name, t, plan, config):
    """t with the MLP intermediate dimension zero-padded when the plan pads it (zero bytes are 0.0 in every float
    dtype)."""
    if not (MLP_ROWS.match(name) or MLP_COLS.match(name)):
        return t
    key = intermediate_key(name, config)
    if key not in plan:
        return t
    old, new = plan[key]
    size = DTYPE_SIZE[t.dtype]
    if MLP_ROWS.match(name) and t.shape[0] == old:
        return Tensor(t.dtype, [new] + t.shape[1:], t.data + bytes((new - old) * numel(t.shape[1:]) * size))
    if MLP_COLS.match(name) and t.shape[1] == old:
        rows, row_bytes = t.shape[0], old * size
        pad = bytes((new - old) * size)
        data = b"".join(t.data[r * row_bytes:(r + 1) * row_bytes] + pad for r in range(rows))
        return Tensor(t.dtype, [rows, new], data)
    return t


# ------------------------------------------------------------------------------------------------------------------
# Integer round-to-nearest, per group along the input dimension
# ------------------------------------------------------------------------------------------------------------------

def rtn(w, n_out, n_in, group, params, qmin, qmax):
    """codes [n_out][n_in] (ints in qmin..qmax), scales and zeros [n_out][n_groups]: for each row and group of
    `group` input columns, params(values) gives the stored (already dtype-rounded) scale and the integer zero, and
    each code is clamp(round_half_even(w / scale) + zero, qmin, qmax)."""
    codes, scales, zeros = [], [], []
    for o in range(n_out):
        row = w[o * n_in:(o + 1) * n_in]
        crow, srow, zrow = [], [], []
        for g0 in range(0, n_in, group):
            vals = row[g0:g0 + group]
            s, z = params(vals)
            if not s > 0:
                raise SystemExit(f"row {o}, columns {g0}..: scale {s} (the weights are too small for the dtype)")
            q = [round(v / s) + z for v in vals]
            if min(q) < qmin or max(q) > qmax:
                q = [qmin if c < qmin else qmax if c > qmax else c for c in q]
            crow.extend(q)
            srow.append(s)
            zrow.append(z)
        codes.append(crow)
        scales.append(srow)
        zeros.append(zrow)
    return codes, scales, zeros


def dequantize(codes, scales, zeros, group):
    """The F32 reference [n_out * n_in], row-major: (code - zero) * scale, rounded to F32 (exact for 16-bit scales:
    at most 9 significant bits times at most 11)."""
    out = []
    for crow, srow, zrow in zip(codes, scales, zeros):
        for k, (s, z) in enumerate(zip(srow, zrow)):
            out.extend([(c - z) * s for c in crow[k * group:(k + 1) * group]])
    return round_f32_list(out)


def pack_values(vals, bits, order=None):
    """One uint32 from 32/bits values: value k at bits [k*bits, (k+1)*bits), or, with `order`, value order[k]."""
    v = 0
    for k in range(32 // bits):
        v |= (vals[order[k]] if order else vals[k]) << (k * bits)
    return v


# ------------------------------------------------------------------------------------------------------------------
# The formats. Each returns ({suffix: Tensor} for the quantized Linear, its F32 reference [n_out * n_in]).
# ------------------------------------------------------------------------------------------------------------------

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def quant_awq(w, n_out, n_in, group):
    # AWQ GEMM ("version": "gemm"), as AutoAWQ writes it (casper-hansen/AutoAWQ @88e4c76b):
    # - awq/quantize/quantizer.py pseudo_quantize_tensor, zero_point=True: per group of `group` input columns of an
    #   output row, scale = clamp(max - min, min=1e-5) / 15 (the group's own min and max, 0 not forced in),
    #   zero = clamp(-round(min / scale), 0, 15), code = clamp(round(w / scale) + zero, 0, 15); w ~ (code - zero) *
    #   scale. torch.round is half-to-even.
    # - awq/modules/linear/gemm.py WQLinear_GEMM: qweight int32 [in, out/8], qzeros int32 [in/group, out/8],
    #   scales float16 [in/group, out] (the codes are recomputed with the fp16 scales: round((w + zero*scale) /
    #   scale)); from_linear packs intweight transposed to [in, out]: for qweight[:, col], nibble i (bits 4i..4i+3)
    #   holds output column col*8 + order_map[i], order_map = [0, 2, 4, 6, 1, 3, 5, 7]; qzeros the same way.
    #   No zero offset: the stored zero is the zero.
    # - awq/utils/packing_utils.py: AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7], AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7];
    #   dequantize_gemm = (iweight - izeros) * scales after reversing the order.
    # - vllm-project/vllm vllm/model_executor/layers/quantization/awq_triton.py awq_dequantize_kernel: unpacks with
    #   shifts = [0, 4, 1, 5, 2, 6, 3, 7] * 4 for the 8 output columns of an int32, `(iweights - zeros) * scales`
    #   (no +1); group sizes -1, 32, 64, 128 (or K). vllm .../awq.py: qweight [in, out/8] (packed_dim 1), qzeros
    #   [in/group, out/8], scales [in/group, out] in the activation dtype (fp16); needs in % group == 0, out % 8 == 0.
    def params(vals):
        lo, hi = min(vals), max(vals)
        s = round_f16(max(hi - lo, 1e-5) / 15)
        return s, min(max(-round(lo / s), 0), 15)

    codes, scales, zeros = rtn(w, n_out, n_in, group, params, 0, 15)
    n_groups = n_in // group
    qweight = [u32_to_i32(pack_values([codes[c * 8 + j][i] for j in range(8)], 4, AWQ_ORDER))
               for i in range(n_in) for c in range(n_out // 8)]
    qzeros = [u32_to_i32(pack_values([zeros[c * 8 + j][g] for j in range(8)], 4, AWQ_ORDER))
              for g in range(n_groups) for c in range(n_out // 8)]
    out = {
        "qweight": int_tensor("I32", [n_in, n_out // 8], qweight),
        "qzeros": int_tensor("I32", [n_groups, n_out // 8], qzeros),
        "scales": f16_tensor([n_groups, n_out], [scales[o][g] for g in range(n_groups) for o in range(n_out)]),
    }
    return out, dequantize(codes, scales, zeros, group)


def quant_gptq(w, n_out, n_in, group, bits, sym):
    # GPTQ checkpoint format v1 ("checkpoint_format": "gptq"), as AutoGPTQ writes it (AutoGPTQ/AutoGPTQ @9f7d3707):
    # - auto_gptq/quantization/quantizer.py Quantizer.find_params: per group, xmin = min(min, 0), xmax = max(max, 0);
    #   sym: xmax = max(|xmin|, xmax) and xmin = -xmax if xmin < 0; xmin = -1, xmax = 1 where both are 0;
    #   scale = (xmax - xmin) / maxq (maxq = 2^bits - 1); zero = (maxq + 1) / 2 if sym else round(-xmin / scale);
    #   code = clamp(round(w / scale) + zero, 0, maxq); w ~ scale * (code - zero). (So a symmetric group with no
    #   negative weight keeps xmin 0 and reaches only 7/15 of its max: AutoGPTQ's behaviour, kept.)
    # - auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py QuantLinear: qweight int32 [in/32*bits, out], qzeros int32
    #   [ceil(in/group), out/32*bits], scales [ceil(in/group), out] (float16), g_idx int32 [in] = i // group
    #   (group_size -1 means group = in). pack(): qweight[row] |= intweight[row*32/bits + j] << (bits*j), i.e.
    #   packed along the INPUT dim, value j of the int32 at bits j*bits; `zeros -= 1` then qzeros[:, col] |=
    #   zeros[:, col*32/bits + j] << (bits*j): packed along the OUTPUT dim and stored minus 1 (the v1 convention).
    #   A zero of 0 would be stored as -1, whose uint32 0xFFFFFFFF ORs over its neighbours: v1 cannot hold a zero
    #   of 0, so the asymmetric zero is clamped to >= 1 here (GPTQ v2, "gptq_v2", stores the zero as is).
    # - vllm-project/vllm .../quantization/gptq.py: qweight [in/pack, out] packed_dim 0, qzeros [in/group, out/pack]
    #   packed_dim 1, scales [in/group, out], g_idx [in]; the dequantization adds 1 to the unpacked zeros
    #   (`zeros = zeros + 1`), weight = scales[g_idx] * (weight - zeros[g_idx]). xxxxyu/blog
    #   content/posts/vllm-gptqv2-support/index.md (on vLLM issue 26343 / PR 26092) restates it: v1 stores
    #   clamp(zero - 1), loaders add 1 back; v2 stores the zero. Symmetric 4-bit: zero 8, stored 7 (0x77777777 per
    #   int32); symmetric 8-bit: zero 128, stored 127.
    maxq = (1 << bits) - 1
    pf = 32 // bits

    def params(vals):
        xmin, xmax = min(min(vals), 0.0), max(max(vals), 0.0)
        if sym:
            xmax = max(abs(xmin), xmax)
            if xmin < 0:
                xmin = -xmax
        if xmin == 0 and xmax == 0:
            xmin, xmax = -1.0, 1.0
        s = round_f16((xmax - xmin) / maxq)
        z = (maxq + 1) // 2 if sym else max(min(round(-xmin / s), maxq), 1)
        return s, z

    codes, scales, zeros = rtn(w, n_out, n_in, group, params, 0, maxq)
    n_groups = n_in // group
    qweight = [u32_to_i32(pack_values([codes[o][r * pf + j] for j in range(pf)], bits))
               for r in range(n_in // pf) for o in range(n_out)]
    qzeros = [u32_to_i32(pack_values([zeros[c * pf + j][g] - 1 for j in range(pf)], bits))
              for g in range(n_groups) for c in range(n_out // pf)]
    out = {
        "qweight": int_tensor("I32", [n_in // pf, n_out], qweight),
        "qzeros": int_tensor("I32", [n_groups, n_out // pf], qzeros),
        "scales": f16_tensor([n_groups, n_out], [scales[o][g] for g in range(n_groups) for o in range(n_out)]),
        "g_idx": int_tensor("I32", [n_in], [i // group for i in range(n_in)]),
    }
    return out, dequantize(codes, scales, zeros, group)


def quant_ct_w4a16(w, n_out, n_in, group, scale_dtype):
    # compressed-tensors "pack-quantized", W4A16 symmetric group (neuralmagic/compressed-tensors @52792be0, 0.12.2):
    # - quantization/utils/helpers.py calculate_qparams: min = min(min, 0), max = max(max, 0); symmetric: scale =
    #   max(|min|, |max|) / ((q_max - q_min) / 2) with calculate_range int4 q_min = -8, q_max = 7 (so amax / 7.5),
    #   clamped to >= float32 eps; zero point 0. lifecycle/initialize.py: the scale has the weight's dtype
    #   (observed_dtype), shape [out, in/group] for strategy group.
    # - lifecycle/forward.py _quantize: clamp(x / scale + zp, q_min, q_max) then round (half-to-even) -> int8;
    #   _dequantize: (x_q - zp) * scale.
    # - compressors/quantized_compressors/pack_quantized.py: weight_packed int32 [out, ceil(in/8)] (packed along
    #   the INPUT dim), weight_shape = torch.tensor(weight.shape) (int64 [2]: out, in), weight_scale; pack_to_int32
    #   adds the offset 1 << (bits-1) = 8 (signed -8..7 -> unsigned 0..15) and puts value k of each 8 at bits 4k
    #   (no interleave); unpack_from_int32 subtracts 8. weight_zero_point only for asymmetric.
    # - vllm-project/vllm .../compressed_tensors/schemes/compressed_tensors_wNa16.py: weight_packed [out, in/pack]
    #   int32, weight_shape int64 [2], weight_scale [out, in/group] in the activation dtype, weight_g_idx optional.
    # llm-compressor would give an F32 model F32 scales (the weight's dtype); this writes `scale_dtype` (BF16 by
    # default: what a real bf16 model's checkpoint holds).
    rnd, make = SCALE_DTYPES[scale_dtype]

    def params(vals):
        amax = max(abs(min(min(vals), 0.0)), max(max(vals), 0.0))
        return rnd(max(amax / 7.5, 2.0 ** -23)), 0

    codes, scales, zeros = rtn(w, n_out, n_in, group, params, -8, 7)
    n_packed = -(-n_in // 8)
    packed = []
    for o in range(n_out):
        row = [c + 8 for c in codes[o]] + [0] * (n_packed * 8 - n_in)
        packed.extend(u32_to_i32(pack_values(row[k * 8:k * 8 + 8], 4)) for k in range(n_packed))
    out = {
        "weight_packed": int_tensor("I32", [n_out, n_packed], packed),
        "weight_scale": make([n_out, n_in // group], [s for row in scales for s in row]),
        "weight_shape": int_tensor("I64", [2], [n_out, n_in]),
    }
    return out, dequantize(codes, scales, zeros, group)


def quant_ct_w8a8(w, n_out, n_in, scale_dtype):
    # compressed-tensors "int-quantized", W8A8 int8 (compressed-tensors @52792be0, 0.12.2):
    # - quantization/quant_scheme.py INT8_W8A8: weights num_bits 8, type int, strategy channel, symmetric, static;
    #   input_activations num_bits 8, type int, strategy token, symmetric, dynamic true, observer None.
    # - helpers.py calculate_qparams: scale = amax / 127.5 (calculate_range int8: -128..127), >= float32 eps;
    #   initialize.py: channel scale shape [out, 1] in the weight's dtype; forward.py _quantize clamps to -128..127
    #   and rounds half-to-even.
    # - compressors/quantized_compressors/naive_quantized.py (int-quantized = IntQuantizationCompressor): `weight`
    #   = the quantized values in quantization_args.pytorch_dtype() = int8, [out, in]; weight_scale alongside.
    # - vllm .../compressed_tensors.py _is_dynamic_token_w8a8: 8-bit weights and inputs, weight strategy tensor or
    #   channel, input strategy token, weights static and symmetric, inputs dynamic; the runtime quantizes each
    #   row of x to int8 with scale max|x| / 127.
    rnd, make = SCALE_DTYPES[scale_dtype]

    def params(vals):
        amax = max(abs(min(min(vals), 0.0)), max(max(vals), 0.0))
        return rnd(max(amax / 127.5, 2.0 ** -23)), 0

    codes, scales, zeros = rtn(w, n_out, n_in, n_in, params, -128, 127)
    out = {
        "weight": int_tensor("I8", [n_out, n_in], [c for row in codes for c in row]),
        "weight_scale": make([n_out, 1], [row[0] for row in scales]),
    }
    return out, dequantize(codes, scales, zeros, n_in)


def quant_fp8(w, n_out, n_in):
    # vLLM's own "fp8" format with "activation_scheme": "dynamic", as AutoFP8 writes it (neuralmagic/AutoFP8
    # @505a7eda):
    # - auto_fp8/quantize.py per_tensor_quantize: amax = max|w| over the whole tensor; scale = 448 / clamp(amax,
    #   1e-12); qweight = clamp(w * scale, -448, 448).to(float8_e4m3fn); the stored weight_scale is the float32
    #   reciprocal (amax / 448), a 0-d tensor (shape []). FP8DynamicLinear: `weight` F8_E4M3 [out, in] and
    #   `weight_scale`; no input_scale with dynamic activations (FP8StaticLinear adds `input_scale`, 0-d F32).
    # - auto_fp8/quantize.py save_quantized_model: quantization_config {"quant_method": "fp8", "activation_scheme":
    #   ..., "ignored_layers": [...]} (ignored: Linear layers matching "re:.*lm_head" -> ["lm_head"]).
    # - vllm-project/vllm .../quantization/fp8.py Fp8Config.from_config: quant_method containing "fp8" -> the
    #   checkpoint is fp8-serialized; activation_scheme static|dynamic; ignored_layers; weight_block_size.
    #   Fp8LinearMethod.create_weights: weight float8_e4m3fn [out, in]; weight_scale PerTensorScaleParameter float32,
    #   one per fused shard (vllm/model_executor/parameter.py loads a 0-d checkpoint scale as shape [1]);
    #   input_scale only for "static". Dynamic activations: per-token when CUTLASS fp8 is
    #   supported (Fp8LinearOp(use_per_token_if_dynamic=cutlass_fp8_supported())), else per-tensor.
    # Here w / scale is rounded to e4m3fn half-to-even (same codes as w * (1/scale) but for ties).
    amax = max(max(w), -min(w), 1e-12)
    s = round_f32(amax / FP8_MAX)
    codes = fp8_encode_list(w, s)  # saturates at +-448 like the clamp before the cast
    ref = round_f32_list([_FP8_VALUE[c] * s for c in codes])
    out = {"weight": Tensor("F8_E4M3", [n_out, n_in], bytes(codes)), "weight_scale": f32_tensor([], [s])}
    return out, ref


def quant_ct_fp8(w, n_out, n_in, scale_dtype):
    # compressed-tensors "float-quantized", FP8 per-channel weights, dynamic per-token activations (FP8_DYNAMIC)
    # (compressed-tensors @52792be0, 0.12.2):
    # - quantization/quant_scheme.py FP8_DYNAMIC: weights num_bits 8, type float, strategy channel, symmetric,
    #   static; input_activations num_bits 8, type float, strategy token, symmetric, dynamic true, observer None.
    # - helpers.py calculate_range float 8-bit: FP8_E4M3_DATA min -448, max 448; calculate_qparams symmetric:
    #   scale = amax / ((448 - (-448)) / 2) = amax / 448, >= float32 eps; channel scale [out, 1], weight's dtype.
    # - forward.py _quantize: clamp(x / scale, -448, 448) then round_to_quantized_type -> float8_e4m3fn (round to
    #   nearest even); naive_quantized.py (float-quantized = FloatQuantizationCompressor): `weight` F8_E4M3
    #   [out, in], weight_scale alongside.
    # - vllm .../compressed_tensors/schemes/compressed_tensors_w8a8_fp8.py: channel weight scale [out, 1].
    rnd, make = SCALE_DTYPES[scale_dtype]
    codes, scales, ref = [], [], []
    for o in range(n_out):
        row = w[o * n_in:(o + 1) * n_in]
        s = rnd(max(max(max(row), -min(row)) / FP8_MAX, 2.0 ** -23))
        rc = fp8_encode_list(row, s)  # saturates at +-448 like the clamp before the cast
        codes.extend(rc)
        scales.append(s)
        ref.extend(_FP8_VALUE[c] * s for c in rc)
    out = {"weight": Tensor("F8_E4M3", [n_out, n_in], bytes(codes)), "weight_scale": make([n_out, 1], scales)}
    return out, round_f32_list(ref)


# ------------------------------------------------------------------------------------------------------------------
# quantization_config as the tools write it
# ------------------------------------------------------------------------------------------------------------------

CT_VERSION = "0.12.2"  # neuralmagic/compressed-tensors tag of the source these configs follow


def ct_args(num_bits, type_, strategy, group_size=None, dynamic=False):
    """A QuantizationArgs as compressed-tensors' model_dump writes it (quant_args.py fields, in declaration order;
    observer "minmax" for static, None for dynamic, as validate_model_after sets it)."""
    return {"num_bits": num_bits, "type": type_, "symmetric": True, "group_size": group_size, "strategy": strategy,
            "block_structure": None, "dynamic": dynamic, "actorder": None,
            "observer": None if dynamic else "minmax", "observer_kwargs": {}}


def ct_config(fmt, weights, input_activations):
    # compressed-tensors compressors/model_compressors/model_compressor.py update_config: config.json gets
    # quantization_config = {"version": compressed_tensors.__version__, "quant_method": "compressed-tensors",
    # "sparsity_config": {}, "transform_config": {}, **QuantizationConfig.model_dump(exclude quant_method)}, the file
    # dumped with indent=2, sort_keys=True. quant_config.py QuantizationConfig: config_groups, kv_cache_scheme,
    # format, quantization_status ("compressed" once compressed), global_compression_ratio, ignore (llm-compressor:
    # ["lm_head"]). quant_scheme.py QuantizationScheme: targets, weights, input_activations, output_activations,
    # format (the group's compression format).
    return {
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": input_activations,
                                      "output_activations": None, "format": fmt}},
        "format": fmt,
        "global_compression_ratio": None,
        "ignore": ["lm_head"],
        "kv_cache_scheme": None,
        "quant_method": "compressed-tensors",
        "quantization_status": "compressed",
        "sparsity_config": {},
        "transform_config": {},
        "version": CT_VERSION,
    }


def gptq_config(bits, group, sym):
    # AutoGPTQ auto_gptq/quantization/config.py BaseQuantizeConfig.to_dict(), written by save_quantized both as
    # config.json's quantization_config and as quantize_config.json. model_file_base_name: the weights' file name
    # without .safetensors (AutoGPTQ's from_quantized looks for it).
    return {"bits": bits, "group_size": group, "damp_percent": 0.01, "desc_act": False, "static_groups": False,
            "sym": sym, "true_sequential": True, "model_name_or_path": None, "model_file_base_name": "model",
            "quant_method": "gptq", "checkpoint_format": "gptq"}


# ------------------------------------------------------------------------------------------------------------------
# The format table: packing constraints (in_features multiple, out_features multiple), the quantizer, the config.
# ------------------------------------------------------------------------------------------------------------------

def format_spec(fmt, group, scale_dtype):
    """(group size used or -1, in multiple, out multiple, quantize(w, n_out, n_in) -> (tensors, ref),
    quantization_config, extra info for reference_info.json)."""
    if fmt == "awq":
        return (group, group, 8, lambda w, o, i: quant_awq(w, o, i, group),
                {"quant_method": "awq", "zero_point": True, "group_size": group, "bits": 4, "version": "gemm",
                 "modules_to_not_convert": None},
                {"bits": 4, "symmetric": False, "activations": "none"})
    if fmt in ("gptq4", "gptq8", "gptq4_perchannel"):
        bits = 8 if fmt == "gptq8" else 4
        sym = fmt != "gptq4"
        g = -1 if fmt == "gptq4_perchannel" else group
        pf = 32 // bits
        return (g, lcm(g, pf) if g > 0 else pf, pf,
                lambda w, o, i: quant_gptq(w, o, i, i if g < 0 else g, bits, sym), gptq_config(bits, g, sym),
                {"bits": bits, "symmetric": sym, "activations": "none"})
    if fmt == "ct_w4a16":
        return (group, lcm(group, 8), 1, lambda w, o, i: quant_ct_w4a16(w, o, i, group, scale_dtype),
                ct_config("pack-quantized", ct_args(4, "int", "group", group_size=group), None),
                {"bits": 4, "symmetric": True, "activations": "none"})
    if fmt == "ct_w8a8":
        return (-1, 1, 1, lambda w, o, i: quant_ct_w8a8(w, o, i, scale_dtype),
                ct_config("int-quantized", ct_args(8, "int", "channel"),
                          ct_args(8, "int", "token", dynamic=True)),
                {"bits": 8, "symmetric": True, "activations": "int8_per_token_dynamic",
                 "activations_note": "each row (token) of a quantized Linear's input is quantized at run time to "
                                     "int8, symmetric, scale max|x| / 127; the reference holds only the weights"})
    if fmt == "fp8":
        return (-1, 1, 1, quant_fp8,
                {"quant_method": "fp8", "activation_scheme": "dynamic", "ignored_layers": ["lm_head"]},
                {"bits": 8, "symmetric": True, "weight_type": "float8_e4m3fn", "weight_scale": "per_tensor",
                 "activations": "fp8_e4m3_dynamic",
                 "activations_note": "vLLM quantizes a quantized Linear's input to fp8 e4m3 at run time, per token "
                                     "where CUTLASS fp8 is available, else per tensor; the reference holds only the "
                                     "weights"})
    if fmt == "ct_fp8":
        return (-1, 1, 1, lambda w, o, i: quant_ct_fp8(w, o, i, scale_dtype),
                ct_config("float-quantized", ct_args(8, "float", "channel"),
                          ct_args(8, "float", "token", dynamic=True)),
                {"bits": 8, "symmetric": True, "weight_type": "float8_e4m3fn", "weight_scale": "per_channel",
                 "activations": "fp8_e4m3_per_token_dynamic",
                 "activations_note": "each row (token) of a quantized Linear's input is quantized at run time to "
                                     "fp8 e4m3, scale max|x| / 448; the reference holds only the weights"})
    raise SystemExit(f"unknown format {fmt!r}; known: {', '.join(ALL_FORMATS)}")


DEQUANT_RULE = {
    "awq": "w[o,i] = (q - z) * s; q from qweight[i, o/8] nibble AWQ_REVERSE_ORDER[o%8] ([0,4,1,5,2,6,3,7]), z likewise "
           "from qzeros[i/g, o/8], s = scales[i/g, o] (f16)",
    "gptq": "w[o,i] = (q - (z + 1)) * s; q = qweight[i/(32/b), o] >> (b*(i%(32/b))), z = qzeros[g_idx[i], o/(32/b)] >> "
            "(b*(o%(32/b))) (v1 stores zero - 1), s = scales[g_idx[i], o] (f16)",
    "ct_w4a16": "w[o,i] = ((weight_packed[o, i/8] >> 4*(i%8)) & 15) - 8) * weight_scale[o, i/g]",
    "ct_w8a8": "w[o,i] = weight[o,i] (int8) * weight_scale[o, 0]",
    "fp8": "w[o,i] = float(weight[o,i] as e4m3fn) * weight_scale (one F32 scalar), rounded to F32",
    "ct_fp8": "w[o,i] = float(weight[o,i] as e4m3fn) * weight_scale[o, 0]",
}

TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
                   "added_tokens.json", "vocab.json", "merges.txt", "generation_config.json", "chat_template.json",
                   "chat_template.jinja"]


def write_json(path, obj):
    # transformers' PretrainedConfig.to_json_string: indent=2, sort_keys=True, trailing newline.
    with open(path, "w") as f:
        f.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def convert_float(t, dtype):
    """A float tensor converted to F16/BF16/F32 (round to nearest even), or t itself for "keep"."""
    if dtype == "keep" or t.dtype == dtype:
        return t
    vals = to_floats(t)
    return {"F32": f32_tensor, "F16": f16_tensor, "BF16": bf16_tensor}[dtype](t.shape, vals)


def make_format(fmt, tensors, config, model_dir, out_dir, group, scale_dtype):
    """Writes OUT/fmt/ and its reference; returns a summary line."""
    g, in_mult, out_mult, quantize, qconfig, info = format_spec(fmt, group, scale_dtype)
    plan = pad_plan(tensors, config, in_mult, out_mult)
    fdir = os.path.join(out_dir, fmt)
    rdir = os.path.join(fdir, "reference")
    os.makedirs(rdir, exist_ok=True)
    qt, rt, quantized = {}, {}, []
    for name in sorted(tensors):
        t = pad_tensor(name, tensors[name], plan, config)
        if QUANTIZED.match(name):
            n_out, n_in = t.shape
            w = to_floats(t)
            total = sum(w)
            if total != total or total in (math.inf, -math.inf):
                raise SystemExit(f"{name}: not finite")
            if n_in % in_mult or n_out % out_mult:
                raise SystemExit(f"{fmt}: {name} {t.shape} does not fit the packing (in_features a multiple of "
                                 f"{in_mult}, out_features of {out_mult}); try --group-size")
            parts, ref = quantize(w, n_out, n_in)
            base = name[:-len(".weight")]
            for suffix, qtensor in parts.items():
                qt[f"{base}.{suffix}"] = qtensor
            rt[name] = f32_tensor(t.shape, ref)
            quantized.append(name)
        else:
            qt[name] = t
            rt[name] = f32_tensor(t.shape, to_floats(t)) if t.dtype in FLOAT_DTYPES else t
    qconf = dict(config)
    for key, (_, new) in plan.items():
        qconf[key] = new
    rconf = dict(qconf)
    rconf["torch_dtype"] = "float32"
    qconf["quantization_config"] = qconfig
    write_safetensors(os.path.join(fdir, "model.safetensors"), qt)
    write_safetensors(os.path.join(rdir, "model.safetensors"), rt)
    write_json(os.path.join(fdir, "config.json"), qconf)
    write_json(os.path.join(rdir, "config.json"), rconf)
    if fmt.startswith("gptq"):
        write_json(os.path.join(fdir, "quantize_config.json"), qconfig)
    for fname in TOKENIZER_FILES:
        src = os.path.join(model_dir, fname) if model_dir else ""
        if src and os.path.isfile(src):
            shutil.copyfile(src, os.path.join(fdir, fname))
            shutil.copyfile(src, os.path.join(rdir, fname))
    ref_info = {"format": fmt, "quant_method": qconfig["quant_method"], "group_size": g, **info,
                "dequantization": DEQUANT_RULE["gptq" if fmt.startswith("gptq") else fmt],
                "padded": {k: {"from": a, "to": b} for k, (a, b) in plan.items()},
                "quantized_tensors": quantized}
    write_json(os.path.join(rdir, "reference_info.json"), ref_info)
    pads = ", ".join(f"{k} {a}->{b}" for k, (a, b) in plan.items())
    return f"{fmt}: {len(quantized)} Linear weights, group {g}" + (f", padded {pads}" if pads else "")


# ------------------------------------------------------------------------------------------------------------------
# A tiny random float model (--random)
# ------------------------------------------------------------------------------------------------------------------

def random_model(arch, seed, out_dir):
    """Writes OUT/float/{config.json, model.safetensors} (F32, seeded) and returns the directory. Hidden 64,
    intermediate 40, untied lm_head; q_proj of layer 0 has an all-zero row and an all-positive row (zero-range and
    zero-point-0 groups). llama: 2 layers, attention and MLP biases. mixtral: 1 layer, 4 experts (top 2), router
    block_sparse_moe.gate."""
    rng = random.Random(seed)
    hidden, inter, heads, kv_heads, head_dim, vocab = 64, 40, 4, 2, 16, 128
    layers = 2 if arch == "llama" else 1
    config = {"hidden_size": hidden, "intermediate_size": inter, "num_attention_heads": heads,
              "num_key_value_heads": kv_heads, "head_dim": head_dim, "num_hidden_layers": layers,
              "vocab_size": vocab, "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
              "hidden_act": "silu", "torch_dtype": "float32", "tie_word_embeddings": False, "bos_token_id": 1,
              "eos_token_id": 2}
    if arch == "llama":
        config.update({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": True,
                       "mlp_bias": True})
    elif arch == "mixtral":
        config.update({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_local_experts": 4,
                       "num_experts_per_tok": 2})
    else:
        raise SystemExit(f"--random: llama or mixtral, not {arch!r}")
    t = {}

    def mat(name, rows, cols, std=0.05):
        t[name] = f32_tensor([rows, cols], [rng.gauss(0.0, std) for _ in range(rows * cols)])

    def vec(name, n, mean=0.0, std=0.02):
        t[name] = f32_tensor([n], [mean + rng.gauss(0.0, std) for _ in range(n)])

    mat("model.embed_tokens.weight", vocab, hidden, 0.5)
    mat("lm_head.weight", vocab, hidden)
    vec("model.norm.weight", hidden, 1.0)
    for layer in range(layers):
        p = f"model.layers.{layer}."
        vec(p + "input_layernorm.weight", hidden, 1.0)
        vec(p + "post_attention_layernorm.weight", hidden, 1.0)
        for proj, rows in (("q", heads * head_dim), ("k", kv_heads * head_dim), ("v", kv_heads * head_dim)):
            mat(p + f"self_attn.{proj}_proj.weight", rows, hidden)
            if arch == "llama":
                vec(p + f"self_attn.{proj}_proj.bias", rows)
        mat(p + "self_attn.o_proj.weight", hidden, heads * head_dim)
        if arch == "llama":
            vec(p + "self_attn.o_proj.bias", hidden)
            mat(p + "mlp.gate_proj.weight", inter, hidden)
            mat(p + "mlp.up_proj.weight", inter, hidden)
            mat(p + "mlp.down_proj.weight", hidden, inter)
            vec(p + "mlp.gate_proj.bias", inter)
            vec(p + "mlp.up_proj.bias", inter)
            vec(p + "mlp.down_proj.bias", hidden)
        else:
            mat(p + "block_sparse_moe.gate.weight", config["num_local_experts"], hidden)
            for e in range(config["num_local_experts"]):
                q = p + f"block_sparse_moe.experts.{e}."
                mat(q + "w1.weight", inter, hidden)
                mat(q + "w3.weight", inter, hidden)
                mat(q + "w2.weight", hidden, inter)
    q0 = to_floats(t["model.layers.0.self_attn.q_proj.weight"])
    q0[:hidden] = [0.0] * hidden
    q0[hidden:2 * hidden] = [abs(v) + 0.01 for v in q0[hidden:2 * hidden]]
    t["model.layers.0.self_attn.q_proj.weight"] = f32_tensor([heads * head_dim, hidden], q0)
    fdir = os.path.join(out_dir, "float")
    os.makedirs(fdir, exist_ok=True)
    write_safetensors(os.path.join(fdir, "model.safetensors"), t)
    write_json(os.path.join(fdir, "config.json"), config)
    return fdir


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="float HF checkpoint directory (config.json + model.safetensors)")
    src.add_argument("--random", choices=["llama", "mixtral"], help="make a tiny random float model first")
    ap.add_argument("--out", required=True, help="output directory (one subdirectory per format)")
    ap.add_argument("--formats", nargs="+", default=None, help=f"any of {' '.join(ALL_FORMATS)} (default: all)")
    ap.add_argument("--group-size", type=int, default=None, help="default: largest of 128/64/32 that fits")
    ap.add_argument("--scale-dtype", choices=["bf16", "f16", "f32"], default="bf16",
                    help="compressed-tensors weight_scale dtype (default bf16; AWQ/GPTQ are always f16, fp8 f32)")
    ap.add_argument("--dtype", choices=["keep", "f32", "f16", "bf16"], default="keep",
                    help="dtype of the tensors left float in the quantized checkpoints (default: the input's)")
    ap.add_argument("--seed", type=int, default=0, help="seed for --random")
    args = ap.parse_args(argv)

    fp8_self_test()
    formats = [f for spec in (args.formats or ALL_FORMATS) for f in spec.split(",") if f]
    for f in formats:
        if f not in ALL_FORMATS:
            raise SystemExit(f"unknown format {f!r}; known: {', '.join(ALL_FORMATS)}")
    os.makedirs(args.out, exist_ok=True)
    model_dir = args.model or random_model(args.random, args.seed, args.out)
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    config.pop("quantization_config", None)
    tensors = load_checkpoint(model_dir)
    for name, t in tensors.items():
        if QUANTIZED.match(name) and (t.dtype not in FLOAT_DTYPES or len(t.shape) != 2):
            raise SystemExit(f"{name}: {t.dtype} {t.shape}, expected a 2-D F32/F16/BF16 weight")
    dtype = {"keep": "keep", "f32": "F32", "f16": "F16", "bf16": "BF16"}[args.dtype]
    if dtype != "keep":
        tensors = {n: (convert_float(t, dtype) if t.dtype in FLOAT_DTYPES else t) for n, t in tensors.items()}
        config["torch_dtype"] = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype]
    group = args.group_size or default_group_size(tensors, config)
    scale_dtype = {"bf16": "BF16", "f16": "F16", "f32": "F32"}[args.scale_dtype]
    for fmt in formats:
        print(make_format(fmt, tensors, config, model_dir, args.out, group, scale_dtype))


if __name__ == "__main__":
    main()
