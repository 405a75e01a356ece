# SPDX-License-Identifier: MIT
"""scripts/bench-ratios: ratios taken within each run (usage in that file)."""
import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time

from . import DEFAULT_BENCH, ROOT, load_values, names, reference, runner
from .fmt import fmt_ns, fmt_rate, fmt_x, table
from .results import ByName, from_doc, median, one_run

DEFAULT_OUT = os.path.join(ROOT, "results", "bench-ratios.json")

# Benchmark names, as the README's "Benchmarks" section spells them (Google Benchmark's own
# suffixes such as /real_time are stripped before matching).
RT = "baseline/cacheline_roundtrip"
SIG = "baseline/signal_roundtrip"
PROBE_DEP = "baseline/array_probe/dependent:1"
PROBE_INDEP = "baseline/array_probe/dependent:0"
L1 = "tlb_lookup/l1/cpus:1"
ACCESS = "tlb_lookup/sd_access/cpus:1"
FLUSH_BUSY = "flush_page/broadcast/cpus:2/remote:busy"
FLUSH_IDLE = "flush_page/broadcast/cpus:2/remote:idle"
FLUSH_REFILLED = "flush_page/broadcast/cpus:2/remote:refilled"
MPROTECT_PAGE = "mprotect_page/broadcast/cpus:2"
MEMORY = "memory/per_cpu"
SCALE_1024 = "scale/broadcast/cpus:1024"
FLUSH_IPI_BUSY = "flush_page/ipi/cpus:2/remote:busy"


def cs(mode, n, every=None):
    """context_switch (hackbench shape) with the eager or lazy mm_cpumask;
    @every: the flush_every:N variant (None: the default, 1 flush in 50)."""
    strategy = "ipi:cpumask=" + mode
    if every is None:
        return names.build("context_switch", strategy, n)
    return names.build("context_switch", strategy, n, flush_every=every)


def fw(spec, n):
    """forked_worker (Dave Hansen's migrate-then-free case)."""
    return names.build("forked_worker", "ipi:" + spec, n)


def tf2(strategy, n, lru=None):
    """will-it-scale tlb_flush2, threads mode; @lru: the LRU lock, if varied."""
    return names.build("tlb_flush2_threads", names.with_lru(strategy, lru), n)


def tf2p(strategy, n, lru=None):
    """will-it-scale tlb_flush2, processes mode (every CPU its own mm)."""
    return names.build("tlb_flush2_processes", names.with_lru(strategy, lru), n)


def trap(mode, t):
    """The MRS emulation rework's shape: @t threads each reading an ID
    register 10^6 times."""
    return names.build("trap_dispatch", mode, t, count="threads")


CS_CPUS = (1, 2, 4, 8)
CS_EVERY = (0, 250)          # flush_every variants, on 2 CPUs
FW_CPUS = (2, 4)
FW_SPECS = ("cpumask=eager", "cpumask=lazy", "cpumask=lazy,trim_ms=1")
TF2_CPUS = (1, 2, 4, 8)
REF = reference.load()

# The INVLPGB cover letter's four configurations of tlb_flush2_threads:
# (key, label, strategy, LRU lock). At 2 CPUs gbcast runs with threshold=0
# (the merged rule, more than 3 active CPUs, is never met by 2); at 4 and 8
# (oversubscribed) with the merged threshold.
TF2_CONFIGS = [
    ("vanilla", "vanilla (ipi, global LRU lock)", "ipi", "global"),
    ("lru_removal", "lru_add_drain removal (ipi, per-CPU)", "ipi", "percpu"),
    ("invlpgb_alone", "INVLPGB alone (gbcast, global LRU lock)", "gbcast", "global"),
    ("both", "both (gbcast, per-CPU)", "gbcast", "percpu"),
]
TF2_REF = REF["tlb_flush2_threads"]["configurations"]
TF2_REF_CPUS = (2, 4, 8)
# The goal: gbcast + lru percpu at least 3x ipi + lru global, 2 CPUs.
TF2_GOAL = 3.0
TF2_MERGED = reference.by_count(REF["tlb_flush2_threads_merged"])
VANILLA = tf2("ipi", 2, "global")


def tf2_strategy(strategy, n):
    """The cover letter table's strategy at @n CPUs: gbcast with threshold=0 below 4."""
    return strategy + ":threshold=0" if strategy == "gbcast" and n < 4 else strategy


def tf2_config(strategy, lru, n):
    return tf2(tf2_strategy(strategy, n), n, lru)


# The lazy mm_cpumask patch's goal: lazy at least 5% faster than eager (time
# ratio <= 1/1.05) on the machine's real parallelism (2 pinned CPUs); 4 and 8
# are oversubscribed, reported without a goal.
CS_GOAL_CPUS = (2,)

# (key, numerator, denominator, goal or None, what)
RATIOS = [
    ("tlb_l1_vs_probe", L1, PROBE_DEP, 2.0, "TLB L1 hit / bare probe (dependent)"),
    ("sd_access_vs_probe", ACCESS, PROBE_DEP, 2.0, "sd_access hit / bare probe (dependent)"),
    ("flush_busy_vs_roundtrip", FLUSH_BUSY, RT, 2.0, "1-page flush, remote busy / line round trip"),
    ("flush_idle_vs_roundtrip", FLUSH_IDLE, RT, 2.0, "1-page flush, remote idle / line round trip"),
    ("flush_refilled_vs_roundtrip", FLUSH_REFILLED, RT, 2.0,
     "1-page flush, remote just refilled / line round trip"),
    ("mprotect_page_vs_roundtrip", MPROTECT_PAGE, RT, None, "sd_mprotect 1 page / line round trip"),
    ("signal_vs_roundtrip", SIG, RT, None, "signal round trip / line round trip"),
    ("ipi_flush_busy_vs_signal", FLUSH_IPI_BUSY, SIG, 1.15,
     "ipi 1-page flush, remote busy / signal round trip"),
] + [
    # The MRS emulation rework: the goals at 2 threads (lower
    # bounds: locked time over the others'), then how each mode grows from
    # 2 to 16 threads (8x the threads; oversubscribed from 4 on).
    ("trap_locked_vs_%s_t2" % m, trap("locked", 2), trap(m, 2), (">=", 1.5),
     "trap_dispatch threads:2: locked / %s wall time" % m) for m in ("rcu", "direct")
] + [
    ("trap_%s_vs_direct_t1" % m, trap(m, 1), trap("direct", 1), None,
     "trap_dispatch threads:1: %s / direct wall time" % m) for m in ("locked", "rcu")
] + [
    ("trap_%s_t%d_vs_t2" % (m, t), trap(m, t), trap(m, 2), None,
     "trap_dispatch %s: threads:%d / threads:2 wall time (%d = linear)" % (m, t, t // 2))
    for m in ("locked", "rcu", "direct") for t in (4, 8, 16)
] + [
    ("cs_lazy_vs_eager_cpus%d" % n, cs("lazy", n), cs("eager", n),
     round(1 / 1.05, 3) if n in CS_GOAL_CPUS else None,
     "context_switch cpus:%d: lazy / eager time per switch" % n) for n in CS_CPUS
] + [
    ("cs_lazy_vs_eager_cpus2_flush_every%d" % e, cs("lazy", 2, e), cs("eager", 2, e), None,
     "context_switch cpus:2 flush_every:%d: lazy / eager time per switch" % e) for e in CS_EVERY
]

# tlb_flush2 variants compared under both LRU locks: (key, name builder, strategy).
TF2_LRU_PAIRS = (("ipi", tf2, "ipi"), ("gbcast", tf2, "gbcast"),
                 ("gbcast_t0", tf2, "gbcast:threshold=0"), ("processes", tf2p, "ipi"))

# Ratios of counters within one run: (key, (benchmark, counter), (benchmark,
# counter), goal or None, what); the goal is an upper bound.
COUNTER_RATIOS = [
    ("cs_cpumask_writes_lazy_vs_eager_cpus%d" % n,
     (cs("lazy", n), "cpumask_writes_per_switch"), (cs("eager", n), "cpumask_writes_per_switch"),
     0.10 if n in CS_GOAL_CPUS else None,
     "context_switch cpus:%d: cpumask writes per switch, lazy / eager" % n) for n in CS_CPUS
] + [
    ("tf2_%s_vs_ipi_cpus%d" % (s, n), (tf2(s, n), "loops_per_s"), (tf2("ipi", n), "loops_per_s"),
     None, "tlb_flush2_threads cpus:%d: loops/s, %s / ipi" % (n, s))
    for n in TF2_CPUS for s in ("broadcast", "local")
] + [
    # INVLPGB: the goal (a lower bound), then the cover letter's
    # four-way table against vanilla, the merged table (gbcast / ipi, both
    # per-CPU LRU, merged threshold), and what the LRU lock costs with each
    # strategy.
    ("tf2_gbcast_percpu_t0_vs_ipi_global_cpus2",
     (tf2("gbcast:threshold=0", 2, "percpu"), "loops_per_s"), (VANILLA, "loops_per_s"),
     (">=", TF2_GOAL),
     "tlb_flush2_threads cpus:2: loops/s, gbcast:threshold=0/lru:percpu / ipi/lru:global"),
] + [
    ("tf2_config_%s_vs_vanilla_cpus%d" % (key, n),
     (tf2_config(s, lru, n), "loops_per_s"), (tf2("ipi", n, "global"), "loops_per_s"),
     None, "tlb_flush2_threads cpus:%d: loops/s, %s / vanilla"
     % (n, names.with_lru(tf2_strategy(s, n), lru)))
    for n in TF2_REF_CPUS for key, _, s, lru in TF2_CONFIGS[1:]
] + [
    ("tf2_merged_gbcast_vs_ipi_cpus%d" % n,
     (tf2("gbcast", n, "percpu"), "loops_per_s"), (tf2("ipi", n, "percpu"), "loops_per_s"),
     None, "tlb_flush2_threads cpus:%d: loops/s, gbcast / ipi (lru:percpu, threshold 3)" % n)
    for n in TF2_CPUS
] + [
    ("tf2_lru_percpu_vs_global_%s_cpus%d" % (what, n),
     (bench(s, n, "percpu"), "loops_per_s"), (bench(s, n, "global"), "loops_per_s"),
     None, "%s/lru:* cpus:%d: loops/s, lru:percpu / lru:global"
     % (bench(s, n).rsplit("/", 1)[0], n))
    for n in TF2_CPUS for what, bench, s in TF2_LRU_PAIRS
]

# Single counters with an upper bound: (key, benchmark, counter, limit, what).
COUNTER_GOALS = [
    ("fw_%s_cpus%d" % (spec.replace("cpumask=", "").replace(",", "_").replace("=", ""), n),
     fw(spec, n), "unneeded_ipis_per_migration", 0.0 if "eager" in spec else 1.0,
     "forked_worker %s cpus:%d: unneeded IPIs per migration" % (spec, n))
    for n in FW_CPUS for spec in FW_SPECS
]

# Counters printed per run in the x86 summary (benchmark, counter).
X86_SUMMARY = (
    [(cs(m, n, e), c) for n, e in [(n, None) for n in CS_CPUS] + [(2, e) for e in CS_EVERY]
     for m in ("eager", "lazy")
     for c in ("cpumask_writes_per_switch", "ipis_per_flush", "unneeded_ipis_per_flush",
               "switch_flushes_per_switch", "migrations_per_switch")] +
    [(fw(spec, n), c) for n in FW_CPUS for spec in FW_SPECS
     for c in ("ipis_per_migration", "unneeded_ipis_per_migration", "ipis_per_flush",
               "cpumask_writes_per_migration")] +
    [(tf2(s, n), c) for n in TF2_CPUS for s in ("ipi", "broadcast", "local")
     for c in ("loops_per_s", "loops_per_s_per_thread", "ipis_per_flush")] +
    [(tf2(s, n, lru), "loops_per_s") for n in TF2_CPUS
     for s in ("ipi", "gbcast", "gbcast:threshold=0") for lru in ("global", "percpu")] +
    [(tf2p("ipi", n, lru), "loops_per_s") for n in TF2_CPUS for lru in ("global", "percpu")]
)

# Columns of the INVLPGB tables: (counter, header, format).
TF2_COLUMNS = [
    ("loops_per_s", "loops/s", "rate"),
    ("loops_per_s_per_thread", "per thread", "rate"),
    ("real_ns", "ns/loop", "%.0f"),
    ("cpu_ns_per_loop", "cpu ns/loop", "%.0f"),
    ("flush_ns", "flush ns", "%.0f"),
    ("ipis_per_flush", "IPIs/flush", "%.3g"),
    ("invlpgbs_per_flush", "INVLPGB/flush", "%.3g"),
    ("fallback_ipi_flushes", "fallback", "%.0f"),
    ("warmup_fallback_ipi_flushes", "warm-up fallback", "%.0f"),
    ("warmup_global_asid_allocations", "global ASIDs", "%.0f"),
    ("lru_lock_pages_per_loop", "LRU pages/loop", "%.3g"),
]


def print_tf2_reference(med_times, med_counters, med_ratios):
    """The INVLPGB cover letter's four-way table and the merged series' thread table."""
    have = [n for n in TF2_REF_CPUS if tf2("ipi", n, "global") in med_times]
    if not have:
        return

    def cell(name, counter, fmt):
        v = med_times.get(name) if counter == "real_ns" else \
            med_counters.get(name, {}).get(counter)
        return "-" if v is None else fmt_rate(v, per="") if fmt == "rate" else fmt % v

    vanilla = TF2_REF["vanilla"]
    print("\n%s: tlb_flush2_threads, four configurations (medians; x = median of "
          "per-run ratios to vanilla)" % REF["sources"]["invlpgb_cover"]["title"])
    print("  %s: " % REF["sources"]["invlpgb_cover"]["machine"] + ", ".join(
        "%s %.0fk (%.2fx)" % (k, TF2_REF[k] / 1e3, TF2_REF[k] / vanilla)
        for k, _, _, _ in TF2_CONFIGS))
    for n in have:
        over = med_counters.get(tf2("ipi", n, "global"), {}).get("oversubscribed")
        print("  cpus:%d%s" % (n, " (oversubscribed)" if over else ""))
        rows = []
        for key, _, strategy, lru in TF2_CONFIGS:
            name = tf2_config(strategy, lru, n)
            x = 1.0 if key == "vanilla" else \
                med_ratios.get("tf2_config_%s_vs_vanilla_cpus%d" % (key, n))
            rows.append([key, names.parse(name).variant, fmt_x(x, None),
                         fmt_x(TF2_REF[key] / vanilla, None)] +
                        [cell(name, c, f) for c, _, f in TF2_COLUMNS])
        hdr = ["config", "spec", "x vanilla", "patch x"] + [h for _, h, _ in TF2_COLUMNS]
        print("\n".join(table(rows, hdr, indent="    ", left=2)))
    g = med_ratios.get("tf2_gbcast_percpu_t0_vs_ipi_global_cpus2")
    if g is not None:
        print("  goal: both (threshold=0) / vanilla at cpus:2 = %s (>= %.3gx: %s)"
              % (fmt_x(g, None), TF2_GOAL, "met" if g >= TF2_GOAL else "MISSED"))
    print_tf2_merged(med_counters, med_ratios)
    print_lru(med_ratios)


def print_tf2_merged(med_counters, med_ratios):
    def loops(strategy, n):
        return med_counters.get(tf2(strategy, n, "percpu"), {}).get("loops_per_s")

    merged = [n for n in TF2_CPUS if loops("ipi", n) and loops("gbcast", n)]
    if not merged:
        return
    print("\n%s, total loops/s: tip -> INVLPGB against ipi -> gbcast, both lru:percpu, "
          "threshold 3" % REF["sources"]["invlpgb_merged"]["title"])
    print("    %-8s %22s %8s %26s %8s" % ("threads", "patch tip -> INVLPGB", "patch x",
                                        "here ipi -> gbcast", "here x"))
    for n in merged:
        a, b = loops("ipi", n), loops("gbcast", n)
        tip, inv = TF2_MERGED[n]
        print("    %-8s %22s %8s %26s %8s" % (
            "%d%s" % (n, "*" if med_counters.get(tf2("ipi", n, "percpu"), {})
                      .get("oversubscribed") else ""),
            "%.0fk -> %.0fk" % (tip / 1e3, inv / 1e3), fmt_x(inv / tip, None),
            "%s -> %s" % (fmt_rate(a, per=""), fmt_rate(b, per="")),
            fmt_x(med_ratios.get("tf2_merged_gbcast_vs_ipi_cpus%d" % n), None)))
    print("    (* oversubscribed)")


def print_lru(med_ratios):
    lru = [(n, [med_ratios.get("tf2_lru_percpu_vs_global_%s_cpus%d" % (w, n))
                for w, _, _ in TF2_LRU_PAIRS]) for n in TF2_CPUS]
    lru = [(n, xs) for n, xs in lru if any(x is not None for x in xs)]
    if lru:
        print("\nthe LRU lock: loops/s, lru:percpu / lru:global (medians of per-run ratios)")
        print("    %-10s %10s %10s %14s %22s" % ("cpus", "ipi", "gbcast", "gbcast thr=0",
                                              "processes (ipi)"))
    for n, xs in lru:
        print("    %-10s %10s %10s %14s %22s" % (n, *(fmt_x(x, None) for x in xs)))


# The MRS emulation rework's table: threads -> (before real, before sys,
# after real, after sys), seconds for 10^6 ID-register reads per thread.
TRAP_REF = reference.by_count(REF["trap_dispatch"])
TRAP_THREADS = (1, 2, 4, 8, 16)


def print_trap_reference(med_times, med_counters, med_ratios):
    have = [t for t in TRAP_THREADS if trap("locked", t) in med_times]
    if not have:
        return
    print("\n%s: trap_dispatch, 10^6 ID-register reads per thread (medians; real = wall, "
          "sys = summed thread CPU; * oversubscribed)" % REF["sources"]["mrs_rework"]["title"])
    print("    %-8s %21s %21s | %21s %21s %21s | %s" % (
        "threads", "patch before real/sys", "patch after real/sys", "locked real/sys",
        "rcu real/sys", "direct real/sys", "preemptions+yields locked/direct"))

    def cell(m, t):
        real = med_times.get(trap(m, t))
        cpu = med_counters.get(trap(m, t), {}).get("cpu_s")
        if real is None or cpu is None:
            return "-"
        return "%.1f / %.1f ms" % (real / 1e6, cpu * 1e3)

    for t in have:
        over = med_counters.get(trap("locked", t), {}).get("oversubscribed")
        ref = TRAP_REF[t]
        pre = [med_counters.get(trap(m, t), {}).get("preemptions") for m in ("locked", "direct")]
        print("    %-8s %21s %21s | %21s %21s %21s | %s" % (
            "%d%s" % (t, "*" if over else ""), "%.2f / %.2f s" % tuple(ref[:2]),
            "%.2f / %.2f s" % tuple(ref[2:]),
            cell("locked", t), cell("rcu", t), cell("direct", t),
            " / ".join("-" if p is None else "%.0f" % p for p in pre)))
    ref2 = TRAP_REF[2][0] / TRAP_REF[2][2]
    for m in ("rcu", "direct"):
        x = med_ratios.get("trap_locked_vs_%s_t2" % m)
        if x is not None:
            print("  goal: locked / %s wall at threads:2 = %s (>= 1.5x: %s; patch before/after %s)"
                  % (m, fmt_x(x, None), "met" if x >= 1.5 else "MISSED", fmt_x(ref2, None)))
    grow = [(m, [med_ratios.get("trap_%s_t%d_vs_t2" % (m, t)) for t in (4, 8, 16)])
            for m in ("locked", "rcu", "direct")]
    print("  growth of wall time from 2 threads (2 = linear at 4, 4 at 8, 8 at 16): " +
          "; ".join("%s %s" % (m, " ".join(fmt_x(x, None) for x in xs)) for m, xs in grow))


# Single-threaded loops that never wait: real time well above CPU time means
# the thread lost its PU to another process during the run.
CPU_BOUND = [PROBE_DEP, PROBE_INDEP, L1, ACCESS]
NEAR_FAR_NS = 250.0    # a round trip below this is the near placement


def host_info():
    info = {"kernel": platform.release(), "cpus": os.cpu_count()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("Model name", "Hypervisor vendor", "Virtualization type", "CPU(s)"):
                info[key.lower().replace(" ", "_").replace("(s)", "s")] = value.strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return info


def parse_run(doc):
    """Benchmarks of one run: base name -> {real_ns, cpu_ns, iterations, counters, error}."""
    return one_run(from_doc(doc))


def ratios_of(run):
    r = {}
    for key, num, den, _, _ in RATIOS:
        a, b = run.get(num, {}), run.get(den, {})
        if "real_ns" in a and "real_ns" in b and b["real_ns"] > 0:
            r[key] = a["real_ns"] / b["real_ns"]
    for key, (na, ca), (nb, cb), _, _ in COUNTER_RATIOS:
        a = run.get(na, {}).get("counters", {}).get(ca)
        b = run.get(nb, {}).get("counters", {}).get(cb)
        if a is not None and b:
            r[key] = a / b
    return r


ALL_RATIOS = [(k, g, w) for k, _, _, g, w in RATIOS] + [(k, g, w) for k, _, _, g, w in COUNTER_RATIOS]


def goal_met(value, goal):
    """@goal: a number (upper bound) or (">=", x) (lower bound)."""
    if isinstance(goal, tuple):
        return value >= goal[1]
    return value <= goal


def goal_str(goal):
    if isinstance(goal, tuple):
        return ">= %.3g" % goal[1]
    return "<= %.3g" % goal


def goal_limit(goal):
    return goal[1] if isinstance(goal, tuple) else goal


def disturbed(run):
    """Names of CPU-bound benchmarks whose thread was off its PU for >10% of the run."""
    bad = []
    for name in CPU_BOUND:
        b = run.get(name, {})
        if b.get("cpu_ns") and b["real_ns"] / b["cpu_ns"] > 1.10:
            bad.append(name)
    b = run.get(RT, {})
    if b.get("real_ns") and b["cpu_ns"] / b["real_ns"] < 0.90:
        bad.append(RT)
    # Multi-threaded workloads report pu_share, their threads' CPU time over
    # their wall time. Pinned (not oversubscribed), the CPUs of these two
    # never sleep for long, so a low share means other processes had their
    # PUs.
    # Time the hypervisor steals still counts as CPU time: not seen here.
    # tlb_flush2 pinned: 0.93 to 0.99 on a quiet machine, `ipi` included
    # (an initiator spins on its acks), 0.2 to 0.8 when others ran.
    for name, b in run.items():
        c = b.get("counters", {})
        if c.get("oversubscribed") != 0:
            continue
        if (name.startswith(("context_switch/", "forked_worker/", "tlb_flush2_processes/")) and
                c.get("pu_share", 1.0) < 0.90):
            bad.append(name)
        elif name.startswith("tlb_flush2_threads/") and c.get("pu_share", 1.0) < 0.85:
            bad.append(name)
    return bad


def cpu_times():
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)   # idle + iowait
    return sum(fields), idle


def busy_fraction(window=2.0):
    try:
        t0, i0 = cpu_times()
        time.sleep(window)
        t1, i1 = cpu_times()
    except (OSError, ValueError, IndexError):
        return 0.0
    return 1.0 - (i1 - i0) / max(1, t1 - t0)


def wait_quiet(limit, max_wait):
    start = time.time()
    while True:
        busy = busy_fraction()
        if busy < limit:
            return busy
        if time.time() - start > max_wait:
            print("CPUs still %.0f%% busy after %.0f s; running anyway"
                  % (100 * busy, max_wait), file=sys.stderr, flush=True)
            return busy


def run_bench(args, i):
    busy = wait_quiet(args.wait_quiet, args.wait_max) if args.wait_quiet else None
    cmd = runner.command(args.bench, args.filter, min_time=args.min_time)
    print("run %d/%d: %s" % (i + 1, args.runs, runner.shown(cmd)), file=sys.stderr, flush=True)
    before = load_values()
    t0 = datetime.datetime.now()
    r = runner.run(cmd)
    secs = (datetime.datetime.now() - t0).total_seconds()
    if not r.ok or r.doc is None:
        sys.stderr.write(r.stderr)
        raise SystemExit("shootdown-bench exited with status %d" % r.returncode)
    return r.doc, {"loadavg_before": before, "loadavg_after": load_values(),
                                     "busy_before": busy,
                                     "seconds": secs, "command": cmd}


def parse_args(argv, doc):
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=None, help="runs (default 5; 3 with --quick)")
    ap.add_argument("--quick", action="store_true", help="--benchmark_min_time=0.05, 3 runs")
    ap.add_argument("--min-time", type=float, default=None,
                    help="seconds per benchmark (default 0.2)")
    ap.add_argument("--bench", default=DEFAULT_BENCH, help="the benchmark executable")
    ap.add_argument("--filter", default=None, help="passed as --benchmark_filter")
    ap.add_argument("--out", default=DEFAULT_OUT, help="JSON report (default results/bench-ratios.json)")
    ap.add_argument("--wait-quiet", type=float, default=None, metavar="BUSY",
                    help="before each run, wait until the CPUs were busy less than this "
                         "fraction for 2 s (e.g. 0.05)")
    ap.add_argument("--wait-max", type=float, default=900,
                    help="longest wait for --wait-quiet, seconds (default 900)")
    ap.add_argument("--from-json", nargs="+", metavar="FILE",
                    help="analyse saved --benchmark_format=json outputs instead of running")
    args = ap.parse_args(argv)
    if args.runs is None:
        args.runs = 3 if args.quick else 5
    if args.min_time is None:
        args.min_time = 0.05 if args.quick else 0.2
    return args


def collect(args):
    """[(Google Benchmark JSON, meta)] a run, read (--from-json) or run."""
    runs = []
    if args.from_json:
        for path in args.from_json:
            with open(path) as f:
                runs.append((json.load(f), {"source": path}))
        args.runs = len(runs)
        return runs
    if not os.access(args.bench, os.X_OK):
        raise SystemExit("%s not found: meson setup build && meson compile -C build" % args.bench)
    return [run_bench(args, i) for i in range(args.runs)]


def report_run(i, doc, meta):
    run = parse_run(doc)
    rt = run.get(RT, {}).get("real_ns")
    return {
        "index": i + 1,
        "date": doc.get("context", {}).get("date"),
        "meta": meta,
        "placement": None if rt is None else ("near" if rt < NEAR_FAR_NS else "far"),
        "disturbed": disturbed(run),
        "benchmarks": run,
        "ratios": ratios_of(run),
        "oversubscribed": sorted(n for n, b in run.items()
                                 if b.get("counters", {}).get("oversubscribed") == 1),
        "errors": {n: b["error"] for n, b in run.items() if "error" in b},
    }


def first_seen(lists):
    """The items of @lists in order of first appearance, each once."""
    out = []
    for items in lists:
        out += [x for x in items if x not in out]
    return out


def medians(report_runs):
    """(names, median time, median counters, median ratio) over the runs."""
    bench_names = first_seen(r["benchmarks"] for r in report_runs)
    med_times = ByName((n, median([r["benchmarks"].get(n, {}).get("real_ns")
                                   for r in report_runs])) for n in bench_names)
    med_counters = ByName()
    for n in bench_names:
        keys = first_seen(r["benchmarks"].get(n, {}).get("counters", {}) for r in report_runs)
        med_counters[n] = {k: median([r["benchmarks"].get(n, {}).get("counters", {}).get(k)
                                      for r in report_runs]) for k in keys}
    med_ratios = {key: median([r["ratios"].get(key) for r in report_runs])
                  for key, _, _ in ALL_RATIOS}
    return bench_names, med_times, med_counters, med_ratios


def print_per_run(report_runs, med_times, med_ratios):
    # One row per ratio present in some run, one column per run: with a
    # --filter most ratios have no benchmarks, and are left out.
    print("\nper-run ratios (each within one run; placement from the line round trip)")
    present = [(k, g, w) for k, g, w in ALL_RATIOS if med_ratios.get(k) is not None]
    hdr = ["ratio"] + ["run %d" % r["index"] for r in report_runs] + ["median", "goal"]
    rows = [["placement"] + [r["placement"] or "-" for r in report_runs] + ["", ""],
            ["roundtrip"] + [fmt_ns(r["benchmarks"].get(RT, {}).get("real_ns"))
                             for r in report_runs] + [fmt_ns(med_times.get(RT)), ""]]
    for k, g, _ in present:
        rows.append([k] + [fmt_x(r["ratios"].get(k), None) for r in report_runs] +
                    [fmt_x(med_ratios[k], None), "" if g is None else goal_str(g)])
    print("\n".join(table(rows, hdr, indent="")))


def goals_of(report_runs, med_times, med_counters, med_ratios):
    goals = []
    for key, goal, what in ALL_RATIOS:
        if goal is None:
            continue
        v = med_ratios[key]
        ok = None if v is None else goal_met(v, goal)
        goals.append({"goal": "%s %s" % (what, goal_str(goal)), "key": key,
                      "limit": goal_limit(goal),
                      "bound": "lower" if isinstance(goal, tuple) else "upper",
                      "median": v, "met": ok, "kind": "ratio"})
    for key, name, counter, limit, what in COUNTER_GOALS:
        v = med_counters.get(name, {}).get(counter)
        goals.append({"goal": "%s <= %g" % (what, limit), "key": key, "limit": limit,
                      "median": v, "met": None if v is None else v <= limit, "kind": "count"})
    mem = med_counters.get(MEMORY, {}).get("bytes_per_cpu")
    goals.append({"goal": "bytes per emulated CPU (default geometry) <= 96 KiB",
                  "key": "bytes_per_cpu", "limit": 96 * 1024, "median": mem,
                  "met": None if mem is None else mem <= 96 * 1024, "kind": "bytes"})
    # Judged only when it ran (a --filter may leave it out).
    scale_ok = [SCALE_1024 in r["benchmarks"] and "real_ns" in r["benchmarks"][SCALE_1024] and
                r["benchmarks"][SCALE_1024]["counters"].get("violations") == 0 for r in report_runs
                if SCALE_1024 in med_times]
    goals.append({"goal": "1024 oversubscribed CPUs finish (no livelock), 0 violations",
                  "key": "scale_1024", "limit": None, "median": med_times.get(SCALE_1024),
                  "met": all(scale_ok) if scale_ok else None, "kind": "time"})
    return goals


def print_goals(goals):
    print("\ngoals (medians of per-run ratios)")
    for g in goals:
        v = g["median"]
        shown = ("-" if v is None else
                 fmt_x(v, None) if g["kind"] == "ratio" else
                 "%.0f B" % v if g["kind"] == "bytes" else
                 "%.4g" % v if g["kind"] == "count" else
                 fmt_ns(v))
        state = {True: "met", False: "MISSED", None: "n/a"}[g["met"]]
        print("  %-70s %12s  %s" % (g["goal"], shown, state))


def print_x86(report_runs):
    x86 = [(n, c) for n, c in X86_SUMMARY if any(n in r["benchmarks"] for r in report_runs)]
    if not x86:
        return
    print("\nx86 counters per run (lazy mm_cpumask and tlb_flush2; medians last)")
    for n, c in x86:
        vals = [r["benchmarks"].get(n, {}).get("counters", {}).get(c) for r in report_runs]
        print("  %-56s %-28s %s  | %s" % (
            n, c, " ".join("-" if v is None else "%.4g" % v for v in vals),
            "-" if median(vals) is None else "%.4g" % median(vals)))


def print_runs(report_runs, bench_names, med_times, med_counters):
    print("\nmedian absolute times (these drift with placement; compare ratios instead)")
    for n in bench_names:
        c = med_counters.get(n, {})
        extra = ", ".join("%s=%.4g" % (k, v) for k, v in c.items() if v is not None)
        print("  %-50s %12s  %s" % (n, fmt_ns(med_times[n]), extra))

    over = sorted({n for r in report_runs for n in r["oversubscribed"]})
    print("\noversubscribed (more emulated CPUs than PUs): " + (", ".join(over) or "none"))
    for r in report_runs:
        la = r["meta"].get("loadavg_before")
        notes = []
        if r["disturbed"]:
            notes.append("disturbed (thread lost its PU): " + ", ".join(r["disturbed"]))
        loads = [x[0] for x in (r["meta"].get("loadavg_before"), r["meta"].get("loadavg_after")) if x]
        if loads and max(loads) > (os.cpu_count() or 1):
            notes.append("other processes were running (1-minute load average up to %.2f)"
                         % max(loads))
        if r["errors"]:
            notes.append("errors: " + "; ".join("%s: %s" % kv for kv in r["errors"].items()))
        print("run %d: %s placement, loadavg %s%s" % (
            r["index"], r["placement"] or "?", "-" if la is None else "%.2f" % la[0],
            ("; " + "; ".join(notes)) if notes else ""))
    return over


def main(argv=None, doc=__doc__):
    args = parse_args(argv, doc)
    report_runs = [report_run(i, doc_, meta) for i, (doc_, meta) in enumerate(collect(args))]
    bench_names, med_times, med_counters, med_ratios = medians(report_runs)

    print_per_run(report_runs, med_times, med_ratios)
    goals = goals_of(report_runs, med_times, med_counters, med_ratios)
    print_goals(goals)
    print_x86(report_runs)
    print_tf2_reference(med_times, med_counters, med_ratios)
    print_trap_reference(med_times, med_counters, med_ratios)
    over = print_runs(report_runs, bench_names, med_times, med_counters)

    report = {
        "command": " ".join(shlex.quote(a) for a in sys.argv),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "host": host_info(),
        "min_time": args.min_time,
        "runs": report_runs,
        "median": {"real_ns": med_times, "ratios": med_ratios, "counters": med_counters},
        "goals": goals,
        "oversubscribed": over,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1, sort_keys=False)
        f.write("\n")
    print("\nwrote " + os.path.relpath(args.out, os.getcwd()))
    missing = [r["index"] for r in report_runs if r["errors"]]
    return 1 if missing else 0
