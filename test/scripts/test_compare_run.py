#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""scripts/compare as a run: the measured section split by workload (so a
finished workload survives a later one's failure or Ctrl-C), progress in the
table's unit, the plan said before the run, noise and refused cells marked,
and, end to end on a fake bench, partial results kept when a workload
fails."""
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from shootdown_report import compare, results  # noqa: E402
from test_report import bench, cells  # noqa: E402


class Chunks(unittest.TestCase):
    def test_one_exact_filter_per_workload_in_order(self):
        names = ["mprotect_threaded/broadcast/cpus:1/real_time",
                 "baseline/cacheline_roundtrip/real_time",
                 "mprotect_threaded/local/cpus:1/real_time",
                 "range_flush/broadcast:range=descending/cpus:2/pages:511/real_time"]
        got = compare.chunks(names, None)
        self.assertEqual([w for w, _ in got], ["mprotect_threaded", "baseline", "range_flush"])
        self.assertEqual(got[0][1], "^(mprotect_threaded/broadcast/cpus:1/real_time|"
                                    "mprotect_threaded/local/cpus:1/real_time)$")
        # A user's filter is one chunk, as given.
        self.assertEqual(compare.chunks(names, "tlb"), [("filter", "tlb")])

    def test_regex_quote(self):
        self.assertEqual(compare.regex_quote("a.b(c)+[d]|e"), r"a\.b\(c\)\+\[d\]\|e")


class Progress(unittest.TestCase):
    LINE = ("mprotect_threaded/broadcast/cpus:4/real_time  25389 ns  75.5 ns  2000 "
            "flush_ns=113.033 model_ns=2.87791k oversubscribed=1")

    def test_modelled_run_shows_modelled_time(self):
        parts = self.LINE.split()
        self.assertEqual(compare.progress_value(self.LINE, parts, True), "model 2.88 us")
        self.assertEqual(compare.progress_value(self.LINE, parts, False), "25389 ns")


class Plan(unittest.TestCase):
    class Args:
        min_time = 0.05

    def test_busy_machine_is_said_up_front_with_the_fast_path(self):
        busy = compare.load_verdict(1.6, [0.4], 2, 3.0)
        out = "\n".join(compare.plan_lines(self.Args, 158, busy))
        self.assertIn("BUSY MACHINE", out)
        self.assertIn("--modelled-only", out)
        self.assertIn("about 40 s on a quiet machine", out)
        quiet = compare.load_verdict(0.0, [1.0], 2, 0.1)
        self.assertNotIn("BUSY", "\n".join(compare.plan_lines(self.Args, 158, quiet)))


class Cells(unittest.TestCase):
    def test_noise_and_refusal_and_what_if_are_marked(self):
        mp = "mprotect_threaded/%s/cpus:2"
        doc = {"benchmarks": (
            bench(mp % "broadcast", [{"real_time": 400}, {"real_time": 800},
                                     {"real_time": 380}]) +
            bench(mp % "local", [{"real_time": 200}, {"real_time": 200}, {"real_time": 200}],
                  mechanism_missing=2) +
            [{"name": mp % "ipi" + "/real_time", "run_name": mp % "ipi" + "/real_time",
              "run_type": "iteration", "error_occurred": True,
              "error_message": "sd_machine_create: not supported: strategy 'ipi' needs "
                               "ipi, which profile 'x' does not have (its mechanisms: none)"}])}
        lines = compare.report(results.from_doc(doc), [2], 2, [], fidelity=False)
        self.assertTrue(cells(lines, "broadcast")[0].startswith("~400 ns"), lines)
        self.assertEqual(cells(lines, "local WHAT-IF"), ["200 ns ±0% 2.00x"])
        self.assertEqual(cells(lines, "ipi"), ["n/a"])
        text = "\n".join(lines)
        self.assertIn("n/a: strategy 'ipi' needs ipi, which profile 'x' does not have", text)
        self.assertIn("~ = noise", text)


# A stand-in for shootdown-bench: lists two workloads' benchmarks, runs a
# chunk by writing its JSON, and fails (exit 1, no JSON) on the second
# workload, as a crash would.
FAKE_BENCH = textwrap.dedent('''\
    #!/usr/bin/env python3
    import json, os, re, sys, time
    names = ["mprotect_threaded/broadcast/cpus:1/real_time",
             "mprotect_threaded/local/cpus:1/real_time",
             "process_churn/broadcast/cpus:1/real_time"]
    args = sys.argv[1:]
    if "--sd_machine" in args:
        print("machine: 1 package(s), 1 core(s), 2 PU(s), 1 NUMA node(s) (hwloc)")
        sys.exit(0)
    filt = next((a.split("=", 1)[1] for a in args if a.startswith("--benchmark_filter=")),
                ".")
    if "--benchmark_list_tests=true" in args:
        print("\\n".join(names))
        sys.exit(0)
    run = [n for n in names if re.search(filt, n)]
    if any(n.startswith("process_churn") for n in run):
        if os.environ.get("FAKE_HANG"):
            time.sleep(60)
        print("process_churn/broadcast/cpus:1/real_time ERROR OCCURRED: 'crash'", flush=True)
        sys.exit(1)
    out = next(a.split("=", 1)[1] for a in args if a.startswith("--benchmark_out="))
    bs = []
    for n in run:
        print("%s  100 ns  100 ns  10 violations=0" % n, flush=True)
        bs.append({"name": n, "run_name": n, "run_type": "iteration", "iterations": 10,
                   "real_time": 100, "cpu_time": 100, "time_unit": "ns", "violations": 0})
    json.dump({"context": {}, "benchmarks": bs}, open(out, "w"))
''')


def read(path):
    with open(path) as f:
        return f.read()


class EndToEnd(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.fake = os.path.join(self.tmp.name, "bench")
        with open(self.fake, "w") as f:
            f.write(FAKE_BENCH)
        os.chmod(self.fake, os.stat(self.fake).st_mode | stat.S_IEXEC)
        self.out = os.path.join(self.tmp.name, "out")
        self.cmd = [sys.executable, os.path.join(ROOT, "scripts", "compare"), "--bench",
                    self.fake, "--out", self.out, "--no-model", "--no-plot", "--quick",
                    "--cpus", "1"]

    def tearDown(self):
        self.tmp.cleanup()

    def kept(self, marker):
        """What a cut-short run must leave: the first workload's rows, the
        mark, compare.json with its two results, no chunk file."""
        text = read(os.path.join(self.out, "compare.txt"))
        self.assertIn(marker, text)
        self.assertEqual(cells(text.splitlines(), "local [shm bcast]"), ["100 ns 1.00x"])
        doc = json.loads(read(os.path.join(self.out, "compare.json")))
        self.assertEqual(len(doc["benchmarks"]), 2)
        self.assertFalse([f for f in os.listdir(self.out) if f.startswith("compare-")],
                         "chunk files left behind")

    def test_a_failing_workload_keeps_the_finished_one(self):
        r = subprocess.run(self.cmd, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.kept("FAILED: process_churn (exit 1)")
        self.assertIn("[   1/3", r.stdout, "progress lines as each run ends")

    def test_ctrl_c_keeps_the_finished_workloads(self):
        proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True,
                                env=dict(os.environ, FAKE_HANG="1"))
        seen = ""
        for line in proc.stdout:
            seen += line
            if line.startswith("[   2/3"):
                break
        time.sleep(0.5)                 # into the second workload's run
        os.killpg(proc.pid, signal.SIGINT)
        seen += proc.stdout.read()
        proc.stdout.close()
        self.assertEqual(proc.wait(timeout=60), 130, seen)
        self.kept("INTERRUPTED: measured section incomplete: 1 of 2 workloads done")


if __name__ == "__main__":
    unittest.main()
