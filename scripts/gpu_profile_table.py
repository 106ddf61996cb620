#!/usr/bin/env python3
"""The profile step of scripts/gpu_check.sh: turns the CSV of

    ncu --profile-from-start off --clock-control none --cache-control none --print-units base --csv \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --log-file CSV \
        bench_gpu --profile 1 64

into one table per profiled region (bench_gpu starts each region with the marker kernel of
kernels/cuda/profile_range.hpp): per kernel kind its count, total time, share of the region's kernel time, DRAM
bytes moved (read + write, as ncu counted them) and those bytes over the kernel time. Prints the tables, and with
--summary one line for the check's summary. Exit status 1 when the CSV holds no profiled kernel."""
import argparse
import csv
import re
import sys

MARKER = "actorllm_profile_marker"
SCALE = {"": 1.0, "byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "nsecond": 1.0, "usecond": 1e3,
         "msecond": 1e6, "second": 1e9}


def number(text, unit):
    """A metric's value in base units (bytes, nanoseconds); None when ncu printed none."""
    text = (text or "").replace(",", "").strip()
    if text in ("", "n/a", "N/A"):
        return None
    return float(text) * SCALE.get(unit.strip().lower(), 1.0)


def kernel_kind(name):
    """What a kernel does, without its namespace, template arguments and parameters: 'void
    actorllm::<unnamed>::rms_norm_kernel<__nv_bfloat16>(const float *, ...)' -> 'rms_norm_kernel'; cuBLAS's own
    names (nvjet_sm90_tss_64x8_..._splitK_TNT) stay whole, since their tile and split-K choice is the point."""
    name = name.strip()
    if name.startswith("void "):
        name = name[5:]
    depth, cut = 0, len(name)
    for i, c in enumerate(name):  # the parameter list: the first '(' outside template brackets
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0:
            cut = i
            break
    name = name[:cut]
    while "<" in name:  # template arguments, innermost first
        stripped = re.sub(r"<[^<>]*>", "", name)
        if stripped == name:
            break
        name = stripped
    return name.split("::")[-1].strip() or "?"


def read_kernels(path):
    """[(name, time_ns, dram_bytes or None)] in launch order, from ncu's CSV: the raw page (one row per kernel, a
    column per metric, a units row after the header when present) or the details page (a row per metric); ncu's
    own lines before the header are skipped."""
    with open(path, newline="", errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        return []
    rows = list(csv.reader(lines[start:]))
    header, body = rows[0], rows[1:]
    col = {h: i for i, h in enumerate(header)}
    units = [""] * len(header)
    if body and body[0] and body[0][0] == "":
        units, body = body[0], body[1:]
    name_col = col.get("Kernel Name")
    if name_col is not None and "Metric Name" in col and "Metric Value" in col:
        return long_rows(path, body, col)
    time_col = col.get("gpu__time_duration.sum")
    if name_col is None or time_col is None:
        raise SystemExit(f"{path}: no 'Kernel Name' or gpu__time_duration.sum column in {header}")
    byte_cols = [col[m] for m in ("dram__bytes_read.sum", "dram__bytes_write.sum") if m in col]
    kernels = []
    for r in body:
        if len(r) < len(header):
            continue
        t = number(r[time_col], units[time_col])
        parts = [number(r[c], units[c]) for c in byte_cols]
        moved = sum(parts) if byte_cols and None not in parts else None
        kernels.append((r[name_col], t or 0.0, moved))
    return kernels


def long_rows(path, body, col):
    """The same list from ncu's details layout (what --csv gives without --page raw): one row per kernel and
    metric, with 'Metric Name', 'Metric Unit' and 'Metric Value' columns; a kernel is the rows of one ID."""
    by_id, order = {}, []
    width = max(col.values()) + 1
    for r in body:
        if len(r) < width:
            continue
        key = r[col["ID"]] if "ID" in col else str(len(order))
        if key not in by_id:
            by_id[key] = {"name": r[col["Kernel Name"]], "metrics": {}}
            order.append(key)
        unit = r[col["Metric Unit"]] if "Metric Unit" in col else ""
        by_id[key]["metrics"][r[col["Metric Name"]]] = number(r[col["Metric Value"]], unit)
    if order and all("gpu__time_duration.sum" not in by_id[k]["metrics"] for k in order):
        raise SystemExit(f"{path}: no gpu__time_duration.sum metric among the kernels' rows")
    kernels = []
    for k in order:
        m = by_id[k]["metrics"]
        parts = [m.get(name) for name in ("dram__bytes_read.sum", "dram__bytes_write.sum")]
        moved = sum(parts) if None not in parts else None
        kernels.append((by_id[k]["name"], m.get("gpu__time_duration.sum") or 0.0, moved))
    return kernels


def regions(kernels):
    """The kernels split at the markers, the markers left out; kernels before the first marker are dropped."""
    out = []
    for name, t, b in kernels:
        if MARKER in name:
            out.append([])
        elif out:
            out[-1].append((name, t, b))
    return out


def table(kernels):
    """Rows (kind, count, time_ns, share, bytes or None) by time, and the region's total kernel time."""
    total = sum(t for _, t, _ in kernels)
    kinds = {}
    for name, t, b in kernels:
        k = kinds.setdefault(kernel_kind(name), [0, 0.0, 0.0])
        k[0] += 1
        k[1] += t
        k[2] = None if b is None or k[2] is None else k[2] + b
    rows = [(kind, n, t, t / total if total else 0.0, b) for kind, (n, t, b) in kinds.items()]
    rows.sort(key=lambda r: -r[2])
    return rows, total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--labels", default="", help="one name per region, comma separated (e.g. b1,b64)")
    ap.add_argument("--summary", help="write one summary line here")
    args = ap.parse_args()
    labels = [l for l in args.labels.split(",") if l]
    found = regions(read_kernels(args.csv))
    if not any(found):
        print(f"gpu_profile_table: no profiled kernel in {args.csv}")
        if args.summary:
            with open(args.summary, "w") as f:
                f.write("no profiled kernel (is ncu's output in the CSV?)\n")
        return 1
    summary = []
    for i, kernels in enumerate(found):
        label = labels[i] if i < len(labels) else f"region {i + 1}"
        rows, total = table(kernels)
        print(f"\ndecode step {label}: {len(kernels)} kernels, {total / 1e3:.1f} us of kernel time")
        print(f"{'kernel kind':<60} {'count':>6} {'time (us)':>10} {'share':>7} {'DRAM MB':>9} {'TB/s':>6}")
        for kind, n, t, share, b in rows:
            mb = f"{b / 1e6:9.2f}" if b is not None else f"{'n/a':>9}"
            rate = f"{b / t / 1e3:6.2f}" if b is not None and t > 0 else f"{'n/a':>6}"
            print(f"{kind[:60]:<60} {n:6d} {t / 1e3:10.1f} {100 * share:6.1f}% {mb} {rate}")
        top = rows[0]
        summary.append(f"{label}: {len(kernels)} kernels, {total / 1e6:.2f} ms, top {top[0][:32]} "
                       f"{100 * top[3]:.0f}%")
    if args.summary:
        with open(args.summary, "w") as f:
            f.write("; ".join(summary) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
