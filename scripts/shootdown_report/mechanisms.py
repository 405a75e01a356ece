# SPDX-License-Identifier: MIT
"""scripts/compare's mechanisms section: each shootdown mechanism under
debate against its baseline, on the profile of a machine that has it, at 2
CPUs up to the profile's count, in modelled time, with what the mechanism
costs CPUs that never run the mm (the bystander rows) and the published
figure where one exists.

Every run is strict (one emulated CPU at a time, in modelled-time order),
so its numbers depend on the workload and the profile alone, not on this
host's load. The iteration counts are the section's, one per family and
the same for every row of it: pass --sd_iterations of your own to
shootdown-bench to see a row move, or not (at half these counts the
rows move by under 1%, the RAR row at 32 CPUs by 3.6%: 0.371x at 64
loops, 0.358x at 128). A row whose profile lacks the
mechanism (the RISC-V board has no S-mode IPI device) runs as a what-if
and says so.

The INVLPGB and skip-broadcast rows are the modelled section's own runs,
read from its results, not run twice.
"""
import concurrent.futures
import json
import os
import queue
import time

from . import reference, runner
from .fmt import fmt_time, fmt_x, table
from .modelled import model_ns, pus, ratio
from .results import med

# One bench run each: its profile, the benchmarks, the iteration count,
# and what a row compares (baseline first).
RUNS = [
    {"key": "rar", "profile": "sapphire-rapids-112",
     "filter": r"^tlb_flush2_threads/(ipi|rar)/lru:percpu/cpus:(2|8|32)/",
     "args": ["--sd_iterations=128"]},
    {"key": "eurosys", "profile": "milan-36",
     "filter": r"^tlb_flush2_threads/(ipi|ipi:ack=early|ipi:order=serial|ipi:lines=split)/lru:percpu/"
               r"cpus:(2|8|36)/",
     "args": ["--sd_iterations=256"]},
    {"key": "arm64_select", "profile": "ampere-emag-32",
     "filter": r"^mprotect_threaded/(broadcast|broadcast:select=(active_cpu|ipi))/"
               r"cpus:(2|8|16)/",
     "args": ["--sd_iterations=500"]},
    {"key": "wp_reuse", "profile": "ampere-emag-32",
     "filter": r"^usemem_fork/(broadcast|broadcast:wp_reuse=tlbi)/cpus:(4|32)/sweeps:4/",
     "args": ["--sd_iterations=2"]},
    {"key": "batch_arm64", "profile": "ampere-emag-32",
     "filter": r"^pageout/(broadcast|broadcast:batch=0)/cpus:(8|32)/pages:512/",
     "args": ["--sd_iterations=8"]},
    {"key": "batch_x86", "profile": "milan-36",
     "filter": r"^lru_file_mmap_read/ipi:cpumask=eager/batch:(0|32)/cpus:(2|8|16)/",
     "args": ["--sd_iterations=1"]},
    {"key": "batch_riscv", "profile": "starfive-jh7110-4",
     "filter": r"^pageout_sleepers/(riscv|riscv:batch=0)/cpus:4/pages:256/",
     "args": ["--sd_iterations=32"]},
    # The board has no S-mode IPI device: rfence=ipi is a what-if there,
    # IPIs through SBI, the case the kernel's rule avoids.
    {"key": "rfence", "profile": "starfive-jh7110-4", "any_mechanism": True,
     "filter": r"^tlb_flush2_threads/riscv:rfence=(sbi|ipi)/lru:percpu/cpus:(2|4)/",
     "args": ["--sd_iterations=512"]},
    {"key": "bystander_arm64", "profile": "ampere-emag-32",
     "filter": r"^bystander/(broadcast|local|broadcast:select=ipi)/flushers:4/bystanders:2/",
     "args": ["--sd_iterations=500"]},
    {"key": "bystander_x86", "profile": "milan-36",
     "filter": r"^bystander/(ipi|gbcast)/flushers:4/bystanders:2/",
     "args": ["--sd_iterations=500"]},
    {"key": "bystander_rar", "profile": "sapphire-rapids-112",
     "filter": r"^bystander/rar/flushers:4/bystanders:2/",
     "args": ["--sd_iterations=500"]},
]

# What each comparison is: the mechanism, its baseline, the workload's
# name pattern (%s the strategy, %d the CPU count), the CPU counts, and
# the published figure (baseline time / mechanism time) where there is one.
ROWS = [
    {"run": "rar", "mechanism": "Intel RAR", "strategy": "rar", "baseline": "ipi",
     "name": "tlb_flush2_threads/%s/lru:percpu/cpus:%d", "cpus": [2, 8, 32],
     "published": None, "note": "none published; RAR costs estimates; many CPUs: a drained IPI "
     "batch flushes once (tlb_gen), RAR once an action; 112 CPUs in BENCHMARKS.md"},
    {"run": "invlpgb_threads", "mechanism": "AMD INVLPGB", "strategy": "gbcast",
     "baseline": "ipi", "name": "tlb_flush2_threads/%s/lru:percpu/cpus:%d",
     "cpus": [2, 8, 32], "published": "invlpgb_merged",
     "note": "the modelled section's run; below 4 threads no INVLPGB is sent"},
    {"run": "eurosys", "mechanism": "early ack (EuroSys 2020)", "strategy": "ipi:ack=early",
     "baseline": "ipi", "name": "tlb_flush2_threads/%s/lru:percpu/cpus:%d",
     "cpus": [2, 8, 36], "published": None,
     "note": "never merged; the paper measured other workloads"},
    {"run": "eurosys", "mechanism": "concurrent flush (5.13)", "strategy": "ipi",
     "baseline": "ipi:order=serial", "name": "tlb_flush2_threads/%s/lru:percpu/cpus:%d",
     "cpus": [2, 8, 36], "published": None, "note": ""},
    {"run": "eurosys", "mechanism": "line consolidation (EuroSys)", "strategy": "ipi",
     "baseline": "ipi:lines=split", "name": "tlb_flush2_threads/%s/lru:percpu/cpus:%d",
     "cpus": [2, 8, 36], "published": None,
     "note": "never merged; split lines cost a flush one more transfer a target, the loop "
     "little at 36 CPUs (BENCHMARKS.md, the EuroSys 2020 line switch)"},
    {"run": "skip_broadcast", "mechanism": "arm64 skip broadcast", "strategy": "local",
     "baseline": "broadcast", "name": "mprotect_threaded/%s/cpus:%d", "cpus": [8, 32],
     "published": None, "note": "the modelled section's run; its figure is there"},
    {"run": "arm64_select", "mechanism": "arm64 active_cpu (Roberts)",
     "strategy": "broadcast:select=active_cpu", "baseline": "broadcast",
     "name": "mprotect_threaded/%s/cpus:%d", "cpus": [2, 8, 16], "published": None, "note": ""},
    {"run": "arm64_select", "mechanism": "arm64 IPI flush (Fujitsu)",
     "strategy": "broadcast:select=ipi", "baseline": "broadcast",
     "name": "mprotect_threaded/%s/cpus:%d", "cpus": [2, 8, 16], "published": None, "note": ""},
    {"run": "wp_reuse", "mechanism": "arm64 wp-reuse local flush (6.19)",
     "strategy": "broadcast", "baseline": "broadcast:wp_reuse=tlbi",
     "name": "usemem_fork/%s/cpus:%d/sweeps:4", "cpus": [4, 32],
     "published": "1.41x", "note": "published: +40.6% (Huang Ying, usemem with a fork "
     "every sweep); the fault path here is cheaper: BENCHMARKS.md, usemem with a periodic fork"},
    {"run": "batch_arm64", "mechanism": "arm64 batched reclaim (6.5)", "strategy": "broadcast",
     "baseline": "broadcast:batch=0", "name": "pageout/%s/cpus:%d/pages:512", "cpus": [8, 32],
     "published": "-", "note": "published: ptep_clear_flush 5.36% of a profile on 8 cores, "
     "16.99% on ~100, removed; no time given"},
    {"run": "batch_x86", "mechanism": "x86 batched reclaim (4.3)",
     "strategy": "ipi:cpumask=eager/batch:32", "baseline": "ipi:cpumask=eager/batch:0",
     "name": "lru_file_mmap_read/%s/cpus:%d", "cpus": [2, 8, 16], "published": "1.235x",
     "note": "published at 48 CPUs (4 nodes, 64 GB): 25.43 s -> 20.59 s, ~500K -> ~45K "
     "interrupts/s; flush IPIs a page 0.98 -> 0.096 at 48 here (BENCHMARKS.md, lru-file-mmap-read)"},
    {"run": "batch_riscv", "mechanism": "RISC-V batched reclaim (6.8)", "strategy": "riscv",
     "baseline": "riscv:batch=0", "name": "pageout_sleepers/%s/cpus:%d/pages:256", "cpus": [4],
     "published": "2.04x", "note": "published on a VisionFive 2: 36.67 s -> 18.02 s with "
     "swap I/O, which is not modelled: compare the time saved a page, 7.29 us published "
     "(BENCHMARKS.md, RISC-V batched reclaim)"},
    {"run": "rfence", "mechanism": "RISC-V SBI remote fence", "strategy": "riscv:rfence=sbi",
     "baseline": "riscv:rfence=ipi", "name": "tlb_flush2_threads/%s/lru:percpu/cpus:%d",
     "cpus": [2, 4], "published": "-",
     "note": "the baseline is a what-if on this board (IPIs through SBI, what the kernel's rule "
     "avoids); OpenSBI pull request 111 found SBI fences 5% faster on another board"},
]

BYSTANDERS = [
    ("bystander_arm64", "ampere-emag-32", ["broadcast", "local", "broadcast:select=ipi"]),
    ("bystander_x86", "milan-36", ["ipi", "gbcast"]),
    ("bystander_rar", "sapphire-rapids-112", ["rar"]),
]


def bench_cmd(bench, run, json_path):
    return runner.command(bench, run["filter"], bench_set="all", profile=run["profile"],
                          mode="strict", reps=1, min_time=0.05, out=json_path,
                          extra=run["args"])


def run_all(bench, out_dir):
    """Every run of the section, one per PU at a time; {key: results},
    the seconds taken."""
    res, t0 = {}, time.time()
    free = queue.Queue()
    for pu in pus():
        free.put(pu)

    def job(run):
        pu = free.get()
        path = os.path.join(out_dir, "mechanisms-%s.json" % run["key"])
        t = time.time()
        try:
            env = dict(os.environ, SD_MODEL_ANY_MECHANISM="1") if run.get("any_mechanism") \
                else None
            r = runner.run(bench_cmd(bench, run, path), pu=pu, out=path, env=env)
        finally:
            free.put(pu)
        print("[mechanisms %5.0fs] %-16s on %-20s %s" % (
            time.time() - t0, run["key"], run["profile"],
            "%.0f s" % (time.time() - t) if r.ok else "FAILED: " + r.last_words()), flush=True)
        return run["key"], r.res

    with concurrent.futures.ThreadPoolExecutor(max_workers=free.qsize()) as pool:
        for key, out in pool.map(job, RUNS):
            res[key] = out
    return res, time.time() - t0


def published_text(row, n, ref):
    pub = row["published"]
    if pub == "invlpgb_merged":
        fig = reference.by_count(ref["tlb_flush2_threads_merged"])
        return fmt_x(fig[n][1] / fig[n][0]) if n in fig else "-"
    return pub or "-"


def rows(res, model_res, ref):
    """One line a comparison and CPU count: the mechanism's speedup over
    its baseline (baseline time / mechanism time, above 1 is faster), and
    the published figure."""
    out = []
    for row in ROWS:
        got = res.get(row["run"]) or model_res.get(row["run"]) or {}
        prof = next((r["profile"] for r in RUNS if r["key"] == row["run"]), None) or {
            "invlpgb_threads": "milan-36", "skip_broadcast": "ampere-emag-32"}[row["run"]]
        for n in row["cpus"]:
            base = model_ns(got, row["name"] % (row["baseline"], n))
            mech = model_ns(got, row["name"] % (row["strategy"], n))
            out.append([row["mechanism"], "%s, %d" % (prof, n),
                        "%s / %s" % (row["baseline"], row["strategy"]),
                        fmt_time(base) if base else "-", fmt_time(mech) if mech else "-",
                        fmt_x(ratio(base, mech)), published_text(row, n, ref)])
    return out


def notes():
    """What each mechanism's rows need said, once a mechanism."""
    return ["  %s: %s" % (row["mechanism"], row["note"]) for row in ROWS if row["note"]]


def bystander_rows(res):
    out = []
    for key, prof, strategies in BYSTANDERS:
        got = res.get(key) or {}
        for s in strategies:
            r = got.get("bystander/%s/flushers:4/bystanders:2" % s)
            slow = med(r, "bystander_slowdown") if r else None
            stall = med(r, "bystander_stall_ns") if r else None
            out.append([s, prof, "-" if slow is None else "%.1f%%" % (100 * slow),
                        "-" if stall is None else "%.0f ns" % stall])
    return out


def report(res, model_res, ref, seconds):
    lines = ["== Mechanisms: each against its baseline, on a machine that has it "
             "(modelled, strict; %.0f s) ==" % seconds,
             "speedup = baseline time / mechanism time (above 1x: the mechanism is faster); "
             "every profile's sources in docs/profiles.md"]
    lines += table(rows(res, model_res, ref),
                   ["mechanism", "profile, CPUs", "baseline / mechanism", "baseline",
                    "mechanism", "speedup", "published"], left=3)
    lines += ["notes:"] + notes()
    lines += ["", "Bystanders: 4 CPUs flush one mm, 2 never run it; what the flushes cost "
              "the 2 (modelled)"]
    lines += table(bystander_rows(res),
                   ["strategy", "profile", "bystander slowdown", "stall a flusher loop"], left=2)
    return lines


def write_json(path, res, model_res, ref, seconds):
    doc = {"seconds": seconds, "rows": rows(res, model_res, ref),
           "bystanders": bystander_rows(res),
           "runs": [{k: r[k] for k in ("key", "profile", "filter", "args")} for r in RUNS]}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
