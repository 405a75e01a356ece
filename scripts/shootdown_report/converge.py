# SPDX-License-Identifier: MIT
"""Does modelled time converge? Every modelled row of the main job
(modelled.RUNS, the same filters and sizes), run as issue 23 asks:

    scripts/model-check --converge [--bench PATH] [--quick] [--json FILE]

  - strict mode (the default) three times: bit-identical or not;
  - strict mode beside a busy loop on every PU: the same or not;
  - lax mode five times: the median and its spread (max - min over median);
  - lax mode at the default window against a window ten times smaller;
  - lax mode's median against strict mode.

Strict mode has no window and does not read the host's clock, so any
difference in its columns is a bug. Lax mode is the faster approximation:
its columns say how far it is from strict. A row whose run reports a
disturbance counter (model_stalls > 0: the watchdog took the machine from a
thread blocked outside the library) is marked: its number is not exact.
--quick runs the main job's --tiny sizes (minutes instead of tens of
minutes). Nothing here asserts a time; the table is the result, recorded
in BENCHMARKS.md with the command, the commit and the load.
"""
import json
import multiprocessing
import os
import tempfile
import time

from . import fmt, loadavg, modelled, results, runner

LAX_WINDOW_NS = 2000            # SD_MODEL_WINDOW_DEFAULT_NS (include/shootdown/model.h)
DISTURBANCE = ("model_stalls",)


def spin(stop):
    while not stop.is_set():
        pass


class BusyLoops:
    """A busy loop on every PU for the duration of a with block."""

    def __enter__(self):
        self.stop = multiprocessing.Event()
        self.procs = [multiprocessing.Process(target=spin, args=(self.stop,))
                      for _ in range(os.cpu_count() or 1)]
        for p in self.procs:
            p.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for p in self.procs:
            p.join()


def run_rows(bench, quick, mode, window=None):
    """Every modelled row once: {name: (model_ns, disturbed)}, seconds."""
    out, t0 = {}, time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for run in modelled.RUNS:
            path = os.path.join(tmp, modelled.run_file(run))
            cmd = modelled.bench_cmd(bench, run, quick, path, mode=mode, window=window,
                                     oracle="")
            res = runner.run(cmd, out=path).res
            if not res:
                continue
            for name, r in res.items():
                ns = results.med(r, "model_ns")
                if ns is None:
                    continue
                hit = any(max(r["counters"].get(k, [0]) or [0]) > 0 for k in DISTURBANCE)
                out[name] = (ns, hit)
    return out, time.time() - t0


def pct(a, b):
    return "-" if a is None or not b else "%+.2f%%" % (100.0 * (a / b - 1))


def table(strict, loaded, lax, lax_narrow):
    rows = []
    for name in sorted(strict[0]):
        s = [r.get(name, (None, False)) for r in strict]
        ns = s[0][0]
        same = "yes" if all(x[0] == ns for x in s) else \
            "NO (%s)" % ", ".join(fmt.fmt_ns(x[0]) if x[0] else "-" for x in s)
        ld = loaded.get(name, (None, False))[0]
        lx = [r[name][0] for r in lax if name in r]
        lmed = results.median(lx)
        spread = "-" if not lx else "%.2f%%" % (100.0 * (max(lx) - min(lx)) / lmed)
        narrow = lax_narrow.get(name, (None, False))[0]
        hit = any(x[1] for x in s) or loaded.get(name, (0, False))[1]
        rows.append([name + (" (disturbed)" if hit else ""), fmt.fmt_ns(ns), same,
                     "same" if ld == ns else pct(ld, ns), fmt.fmt_ns(lmed) if lmed else "-",
                     spread, pct(lmed, ns), pct(narrow, lmed)])
    return rows


def main(bench, quick=False, json_path=None):
    before = loadavg()
    t0 = time.time()
    strict = [run_rows(bench, quick, "strict")[0] for _ in range(3)]
    with BusyLoops():
        loaded, loaded_s = run_rows(bench, quick, "strict")
    lax = [run_rows(bench, quick, "lax")[0] for _ in range(5)]
    lax_narrow = run_rows(bench, quick, "lax", LAX_WINDOW_NS // 10)[0]
    rows = table(strict, loaded, lax, lax_narrow)
    cols = ["row", "strict", "3x identical", "strict loaded", "lax median", "lax spread",
            "lax vs strict", "lax window/10"]
    print("modelled-time convergence, %s sizes, %.0f s; load average before %s, after %s; "
          "the loaded run had a busy loop on each of %d PUs (%.0f s)"
          % ("--tiny" if quick else "full", time.time() - t0, before, loadavg(),
             os.cpu_count() or 1, loaded_s))
    print("\n".join(fmt.table(rows, cols)))
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"columns": cols, "rows": rows}, f, indent=1)
    bad = [r for r in rows if r[2] != "yes" or r[3] != "same"]
    print("%d of %d rows: strict bit-identical over 3 runs and beside the busy loops"
          % (len(rows) - len(bad), len(rows)))
    return 0 if rows and not bad else 1
