# SPDX-License-Identifier: MIT
"""How far does strict modelled time scale? issue 23's goals on a 2-PU host:

    scripts/model-check --scale [--bench PATH] [--cpus 36,64,128,256]
                                [--strategies ipi,broadcast,gbcast] [--json FILE]

will-it-scale's tlb_flush2 in threads mode (bench/tlb_flush2.cpp, the
main set's lru:percpu row), 1000 loops a thread (--sd_iterations=1000),
on milan-36's costs laid out on N CPUs ('pack:2 core:N/2 pu:1'), strict mode, one run per cell. For each
cell: the host seconds of the whole process, modelled ns a loop, host ns a
loop, and host seconds per modelled second (host ns / modelled ns). Goals:
ipi at 128 CPUs, broadcast and gbcast at 256, each within 180 host s.

Host seconds are a measure of this host: the table says the load it ran
at. Nothing here asserts a time.
"""
import json
import os
import tempfile
import time

from . import fmt, loadavg, runner

GOAL_S = 180
GOALS = {("ipi", 128), ("broadcast", 256), ("gbcast", 256)}


def run_cell(bench, strategy, cpus):
    """One cell: (host s, model ns a loop, host ns a loop, stalls) or None."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "out.json")
        cmd = runner.command(
            bench, "^tlb_flush2_threads/%s/lru:percpu/cpus:%d/" % (strategy, cpus),
            bench_set="main", cpus=cpus, profile="milan-36", mode="strict", iterations=1000,
            extra=["--sd_model_topology=pack:2 core:%d pu:1" % (cpus // 2)])
        t = time.time()
        r = runner.run(cmd, out=path)
        host_s = time.time() - t
        if not r.ok:
            print("%s/%d: FAILED: %s" % (strategy, cpus, r.last_words()))
            return None
        bm = [b for b in (r.doc or {}).get("benchmarks", []) if "model_ns" in b]
    if not bm:
        return None
    b = bm[0]
    return host_s, b["model_ns"], b["real_time"], b.get("model_stalls", 0)


def main(bench, cpus, strategies, json_path=None):
    before = loadavg()
    rows, out = [], []
    for s in strategies:
        for n in cpus:
            cell = run_cell(bench, s, n)
            if not cell:
                rows.append([s, str(n), "failed", "", "", "", ""])
                continue
            host_s, model_ns, real_ns, stalls = cell
            goal = ""
            if (s, n) in GOALS:
                goal = "met" if host_s <= GOAL_S else "missed"
            rows.append([s, str(n), "%.1f" % host_s, "%.0f" % model_ns, "%.0f" % real_ns,
                         "%.0f" % (real_ns / model_ns), ("stalls %d " % stalls if stalls
                                                         else "") + goal])
            out.append({"strategy": s, "cpus": n, "host_s": host_s, "model_ns": model_ns,
                        "real_ns": real_ns, "stalls": stalls})
            print("  %s/%d: %.1f s" % (s, n, host_s), flush=True)
    after = loadavg()
    print("tlb_flush2_threads lru:percpu, milan-36 costs, strict, 1024 loops a thread; "
          "load average before %s, after %s" % (before, after))
    print("\n".join(fmt.table(rows, ["strategy", "CPUs", "host s", "model ns/loop",
                                     "host ns/loop", "host s per model s",
                                     "goal (%d s)" % GOAL_S])))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if all(r[2] != "failed" for r in rows) else 1
