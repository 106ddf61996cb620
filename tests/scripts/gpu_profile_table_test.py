#!/usr/bin/env python3
"""scripts/gpu_profile_table.py on a CSV laid out as ncu's raw page with --print-units base (ncu's own lines around
it, a units row, quoted numbers with thousands separators, marker kernels starting each region): kernel kinds,
regions, units, the table and the summary line. Runs without a GPU."""
import os
import subprocess
import sys
import tempfile
import unittest

here = os.path.dirname(os.path.abspath(__file__))
scripts = os.path.join(here, "..", "..", "scripts")
sys.path.insert(0, scripts)
import gpu_profile_table as t  # noqa: E402

FIXTURE = os.path.join(here, "ncu_raw_fixture.csv")
# The same kernels in the layout ncu's --csv gives by default (the details page: a row per kernel and metric), as
# the first GPU run's ncu 2025 wrote it; one time in microseconds.
DETAILS = os.path.join(here, "ncu_details_fixture.csv")


class KernelKind(unittest.TestCase):
    def test_namespaces_templates_and_parameters_go(self):
        self.assertEqual(t.kernel_kind("void actorllm::<unnamed>::rms_norm_kernel<__nv_bfloat16>(const float *, long)"),
                         "rms_norm_kernel")
        self.assertEqual(t.kernel_kind("void cublasLt::splitKreduce_kernel<32, 16, int, float>(cublasLt::p<float>)"),
                         "splitKreduce_kernel")
        self.assertEqual(t.kernel_kind("void f<a<b<c>>, (int)3>(x<y>)"), "f")

    def test_cublas_tile_names_stay_whole(self):
        self.assertEqual(t.kernel_kind("nvjet_sm90_tss_64x8_64x16_2x1_v_bz_splitK_TNT"),
                         "nvjet_sm90_tss_64x8_64x16_2x1_v_bz_splitK_TNT")


class Units(unittest.TestCase):
    def test_scaled_to_bytes_and_nanoseconds(self):
        self.assertEqual(t.number("1,024", "byte"), 1024.0)
        self.assertEqual(t.number("2.5", "usecond"), 2500.0)
        self.assertEqual(t.number("3", "Mbyte"), 3e6)
        self.assertIsNone(t.number("n/a", "byte"))


class Regions(unittest.TestCase):
    def test_split_at_markers_which_are_left_out(self):
        regions = t.regions(t.read_kernels(FIXTURE))
        self.assertEqual([len(r) for r in regions], [4, 1])
        rows, total = t.table(regions[0])
        self.assertEqual(total, 10000 + 31600 + 14000 + 2600)
        kinds = {r[0]: r for r in rows}
        self.assertEqual(kinds["rms_norm_kernel"][1], 2)  # two launches, one kind
        self.assertEqual(kinds["rms_norm_kernel"][2], 24000)
        self.assertAlmostEqual(kinds["rms_norm_kernel"][3], 24000 / total)
        self.assertEqual(kinds["rms_norm_kernel"][4], 2 * (32768 + 16384))
        self.assertEqual(rows[0][0], "nvjet_sm90_tss_64x8_64x16_2x1_v_bz_TNT")  # by time, largest first

    def test_the_details_layout_gives_the_same_kernels(self):
        raw, details = t.read_kernels(FIXTURE), t.read_kernels(DETAILS)
        self.assertEqual(len(details), 7)
        self.assertEqual([k[0] for k in details], [k[0] for k in raw])
        for a, b in zip(raw, details):
            self.assertAlmostEqual(a[1], b[1])
            self.assertEqual(a[2], b[2])

    def test_the_table_and_the_summary(self):
        with tempfile.TemporaryDirectory() as d:
            summary = os.path.join(d, "summary.txt")
            r = subprocess.run([sys.executable, os.path.join(scripts, "gpu_profile_table.py"), FIXTURE,
                                "--labels", "b1,b64", "--summary", summary], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("decode step b1: 4 kernels, 58.2 us of kernel time", r.stdout)
            self.assertIn("decode step b64: 1 kernels, 20.0 us of kernel time", r.stdout)
            # 117,448,704 bytes in 31.6 us: 3.72 TB/s.
            self.assertRegex(r.stdout, r"nvjet_sm90_tss_64x8_64x16_2x1_v_bz_TNT\s+1\s+31\.6\s+54\.3%\s+117\.45\s+3\.72")
            with open(summary) as f:
                line = f.read()
            self.assertIn("b1: 4 kernels, 0.06 ms, top nvjet_sm90_tss_64x8_64x16_2x1_v_ 54%", line)
            self.assertIn("b64: 1 kernels, 0.02 ms, top paged_attention_kernel 100%", line)

    def test_no_profiled_kernel_fails(self):
        with tempfile.TemporaryDirectory() as d:
            empty = os.path.join(d, "ncu.csv")
            with open(empty, "w") as f:
                f.write("==PROF== nothing profiled\n")
            r = subprocess.run([sys.executable, os.path.join(scripts, "gpu_profile_table.py"), empty],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 1)
            self.assertIn("no profiled kernel", r.stdout)


if __name__ == "__main__":
    unittest.main()
