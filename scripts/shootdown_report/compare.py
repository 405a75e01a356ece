# SPDX-License-Identifier: MIT
"""scripts/compare: the comparison run (usage in that file's docstring)."""
import argparse
import json
import os
import re
import subprocess
import sys
import time

from . import DEFAULT_BENCH, ROOT, load_values, mechanisms, modelled, names, patches, \
    reference, runner
from .fmt import NOISY_SPREAD, fmt_rate, fmt_time, fmt_x, noisy, table
from .results import UNIT_NS, load, med

# Machine limits (baseline/...) and which one bounds which strategy.
CACHELINE = "baseline/cacheline_roundtrip"
SIGNAL = "baseline/signal_roundtrip"
MEMBARRIER = "baseline/membarrier"
COMPONENT_PREFIX = "component/"

# The patch each workload reproduces, as README.md and BENCHMARKS.md name it
# (patches.py).
SKIP_BROADCAST = patches.title("skip_broadcast")
LAZY_CPUMASK = patches.title("lazy_cpumask")
INVLPGB = patches.title("invlpgb")
MRS_REWORK = patches.title("mrs")
RANGE_TLBI = patches.title("range_tlbi")


def limit_of(strategy):
    """The machine limit an emulated (or native) figure is set against."""
    if strategy.startswith("native"):
        return MEMBARRIER          # the kernel's own IPI round trip
    if strategy.startswith("ipi"):
        return SIGNAL              # our IPI is a signal
    return CACHELINE               # shared-memory strategies


# One block per workload: the patch, what a cell is, the patch's "before"
# variant, the variants in table order, the native twin. A variant is the
# name's strategy spec, with /lru:... where the workload varies the lock.
WORKLOADS = [
    {"key": "mprotect_threaded", "patch": SKIP_BROADCAST,
     "what": "mprotect of a written 4 MiB buffer, read-only and back, a process per CPU; time per mprotect per process",
     "before": "broadcast",
     "strategies": ["broadcast", "local", "ipi", "gbcast", "native:mode=processes", "native:mode=threads"],
     "native": "native:mode=processes"},
    {"key": "process_churn", "patch": SKIP_BROADCAST,
     "what": "short-lived mms (create, map 16 pages, touch, unmap, destroy); time per mm per CPU",
     "before": "broadcast", "strategies": ["broadcast", "local", "ipi", "gbcast"],
     "native": None},
    {"key": "context_switch", "patch": LAZY_CPUMASK,
     "what": "hackbench --pipe in process mode on tasks, receivers that sleep; time per message",
     "before": "ipi:cpumask=eager",
     "strategies": ["ipi:cpumask=eager", "ipi:cpumask=lazy", "broadcast", "local", "gbcast",
                    "native"],
     "native": "native"},
    {"key": "forked_worker", "patch": LAZY_CPUMASK,
     "what": "a worker task migrated CPU to CPU by its affinity, freeing after each hop; time per hop",
     "before": "ipi:cpumask=eager", "strategies": ["ipi:cpumask=eager", "ipi:cpumask=lazy"],
     "native": None},
    {"key": "tlb_flush2_threads", "patch": INVLPGB,
     "what": "will-it-scale tlb_flush2, threads of one mm; loops/s in total (higher is better)",
     "metric": "loops_per_s", "before": "ipi/lru:global",
     "strategies": ["ipi/lru:global", "ipi/lru:percpu", "gbcast/lru:global",
                    "gbcast/lru:percpu", "broadcast", "local", "native"],
     # One change at a time: the LRU fix and INVLPGB each against vanilla,
     # both together; the arm64 strategies against ipi at their LRU setting.
     "vs": {"broadcast": "ipi/lru:percpu", "local": "ipi/lru:percpu"},
     "native": "native"},
    {"key": "trap_dispatch", "patch": MRS_REWORK, "count": "threads",
     "what": "ID-register reads (10^6 per thread; native: CPUID, a VM exit in a guest, 10^4); "
             "run wall time per read",
     "per_read": True, "before": "locked", "strategies": ["locked", "rcu", "direct", "native:mode=cpuid"],
     "native": "native:mode=cpuid"},
]
RANGE_ORDERS = ["ascending", "descending", "none"]      # before, after, per page
FLUSH_PAGE = ["broadcast", "ipi"]


def cell_name(w, variant, n):
    return names.build(w["key"], variant, n, count=w.get("count", "cpus"))


def range_name(order, pages):
    return names.build("range_flush", "broadcast:range=" + order, 2, pages=pages)


# ---- running ----

def bench_cmd(args, cpus, filt=None, **more):
    """The measured set's command line at @cpus; @filt replaces the user's
    filter; @more: runner.command()'s other settings."""
    if filt is None:
        # With a profile the native twins and machine limits, which
        # measure this host, are left out: they have no model.
        filt = args.filter or ("-(native|baseline)" if args.profile else None)
    return runner.command(args.bench, filt, bench_set="main", cpus=list(cpus),
                          profile=args.profile, oracle="checked" if args.tiny else None,
                          trap_reads=10000 if args.tiny else None,
                          extra=["--sd_any_mechanism"] if args.any_mechanism else [], **more)


# ---- --profile: the emulated workloads in modelled time ----

def profile_pus(name):
    """The PUs of profile @name (a path, or a name under profiles/), from
    its topology's synthetic string; None if the file is not found here
    (the benchmark still finds it where the library looks)."""
    path = name if os.path.sep in name or name.endswith(".json") \
        else os.path.join(ROOT, "profiles", name + ".json")
    try:
        with open(path) as f:
            synthetic = json.load(f)["topology"]["synthetic"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    pus = 1
    for n in re.findall(r":(\d+)", synthetic):
        pus *= int(n)
    return pus


def to_model_time(json_path):
    """Rewrite a --profile run's JSON so that each benchmark's time is its
    modelled time: real_time becomes model_ns (in the entry's time unit;
    the host's is kept as host_real_time) and the rates the tables read
    (loops_per_s and the like) are scaled by host time / modelled time.
    Entries without model_ns (nothing modelled) are dropped. Everything
    downstream (tables, plots) then reads modelled time."""
    with open(json_path) as f:
        doc = json.load(f)
    kept = []
    for b in doc.get("benchmarks", []):
        m = b.get("model_ns")
        if not m:
            if b.get("error_occurred"):
                kept.append(b)
            continue
        unit = UNIT_NS.get(b.get("time_unit", "ns"), 1.0)
        host_ns = b["real_time"] * unit
        for k in [k for k in b if k.endswith("_per_s") or k.endswith("_per_s_per_thread")]:
            if isinstance(b[k], (int, float)) and host_ns:
                b[k] = b[k] * host_ns / m
        b["host_real_time"] = b["real_time"]
        b["real_time"] = m / unit
        # The host's own CPU time means nothing in modelled time.
        for k in ("cpu_s", "cpu_ns_per_loop"):
            b.pop(k, None)
        kept.append(b)
    doc["benchmarks"] = kept
    with open(json_path, "w") as f:
        json.dump(doc, f, indent=1)


def machine_lines(bench):
    out = [l for l in runner.lines([bench, "--sd_machine"])[0] if l.strip()]
    return out or ["machine: (shootdown-bench --sd_machine failed)"]


def list_benchmarks(args, cpus):
    out, status, err = runner.lines(bench_cmd(args, cpus) + ["--benchmark_list_tests=true"])
    if status:
        # A profile that does not load, a bad filter: the bench says why.
        sys.exit("compare: %s refused the run (exit %d): %s"
                 % (args.bench, status, (err or "\n".join(out)).strip()))
    # The component family is scripts/model-check's (its emulated and
    # native halves set side by side there); no block here reports it. A
    # --filter of the user's may still ask for it.
    return [l.strip() for l in out if l.strip() and
            (args.filter or not l.strip().startswith(COMPONENT_PREFIX))]


MODEL_NS = re.compile(r"\bmodel_ns=([0-9.]+)([kMG]?)\b")
SI = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9}


def progress_value(line, parts, modelled_run):
    """What a progress line shows of a console line: the time column, or in
    a modelled run (--profile) the modelled time, which is what its table
    holds (the host's time there is only how long the emulation took)."""
    if modelled_run:
        m = MODEL_NS.search(line)
        return "model " + fmt_time(float(m.group(1)) * SI[m.group(2)]) if m else "model -"
    return " ".join(parts[1:3]) if len(parts) > 2 else ""


def regex_quote(name):
    """@name as a literal in Google Benchmark's filter (ECMAScript regex)."""
    return re.sub(r"([.^$|?*+()\[\]{}\\])", r"\\\1", name)


def chunks(full_names, user_filter):
    """The measured runs, one bench run per workload (in the set's order):
    (workload, filter). A finished workload's results are then kept whatever
    happens to a later one (Ctrl-C included), and its repetitions still
    interleave with the variants they are compared with. A --filter of the
    user's is one chunk, as given."""
    if user_filter:
        return [("filter", user_filter)]
    groups = {}
    for n in full_names:
        groups.setdefault(names.parse(names.base_name(n)).workload, []).append(n)
    return [(w, "^(%s)$" % "|".join(regex_quote(n) for n in ns)) for w, ns in groups.items()]


class Progress:
    """Progress lines, numbered across the chunks of one section."""

    def __init__(self, total, modelled_run):
        self.total, self.done, self.t0 = total, 0, time.time()
        self.modelled_run = modelled_run

    def line(self, line):
        parts = line.split()
        if not parts or "/" not in parts[0] or names.AGGREGATE.search(parts[0]):
            return
        self.done += 1
        shown = progress_value(line, parts, self.modelled_run)
        if "ERROR" in line or "error_message" in line:
            shown = "ERROR " + line.split(parts[0], 1)[1].strip()
        over = " (oversubscribed)" if "oversubscribed=1" in line else ""
        print("[%4d/%d %5.0fs] %-58s %s%s" % (self.done, self.total, time.time() - self.t0,
                                            names.base_name(parts[0]), shown, over),
              flush=True)


def run_chunk(args, cpus, filt, json_path, progress):
    """One bench run of the measured set, restricted to @filt; its exit
    status. The bench's stdout is line-buffered (bench/main.cpp), so each
    line arrives as its run ends. On Ctrl-C the bench, in our process group,
    gets the SIGINT too; the KeyboardInterrupt goes up after it is reaped."""
    more = ["--benchmark_counters_tabular=false"]
    if args.repetitions > 1:
        more += ["--benchmark_enable_random_interleaving=true",
                 "--benchmark_display_aggregates_only=false"]
    cmd = bench_cmd(args, cpus, filt, reps=args.repetitions, min_time=args.min_time,
                    out=json_path) + more
    return runner.stream(cmd, progress.line)


def merge_json(paths, out):
    """One Google Benchmark JSON of the chunks' (the first one's context)."""
    doc = None
    for p in paths:
        try:
            with open(p) as f:
                d = json.load(f)
        except (OSError, ValueError):
            continue
        if doc is None:
            doc = d
        else:
            doc["benchmarks"] += d.get("benchmarks", [])
    doc = doc or {"context": {}, "benchmarks": []}
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)


# ---- reporting ----

def count_header(w, cpus, pus):
    return ["%s:%d%s" % (w.get("count", "cpus"), n, "*" if n > pus else "") for n in cpus]


def speedup(w, value, before):
    if value is None or before is None or value == 0 or before == 0:
        return None
    return value / before if w.get("metric") else before / value


def spread(w, r):
    """Half the range of a cell's repetitions over their median, as "±N%";
    "" with fewer than 3 repetitions (a bare median is all there is)."""
    if not r:
        return ""
    vals = r["counters"].get(w["metric"], []) if w.get("metric") else r["real_ns"]
    vals = [v for v in vals if v]
    if len(vals) < 3:
        return ""
    m = sorted(vals)[len(vals) // 2]
    return " ±%.0f%%" % (50.0 * (max(vals) - min(vals)) / m) if m else ""


# What a strategy is on this host when it is measured rather than modelled:
# the emulator's mechanism, not the hardware's. Said in the row itself, so
# that "broadcast ... 150x" does not read as arm64 against x86.
HOST_MECHANISM = {"broadcast": "shm bcast", "local": "shm bcast", "gbcast": "shm bcast+signals",
                  "ipi": "signals", "native": "this kernel", "locked": "emulated",
                  "rcu": "emulated", "direct": "emulated"}


def host_label(variant):
    """@variant with what it runs on here, e.g. "ipi/lru:global [signals]"."""
    what = HOST_MECHANISM.get(re.split(r"[:/]", variant)[0])
    return "%s [%s]" % (variant, what) if what else variant


def row_label(w, s, base, on_host):
    label = host_label if on_host else (lambda v: v)
    if base == w["before"]:
        return label(s)
    return "%s (x vs %s)" % (label(s), label(base))


def refused(r):
    """The library's reason when a profile lacks the strategy's mechanism
    (sd_machine_create()'s -EOPNOTSUPP), else None."""
    for e in r["errors"]:
        m = re.search(r"strategy '[^']+' needs \S+, which profile '[^']+' does not have", e)
        if m:
            return m.group(0) + " (--any-mechanism runs it as a what-if)"
    return None


def noisy_cell(w, r):
    """Whether a cell's repetitions spread more than fmt.NOISY_SPREAD."""
    if not r:
        return False
    vals = r["counters"].get(w["metric"], []) if w.get("metric") else r["real_ns"]
    return noisy([v for v in vals if v])


def workload_block(w, res, cpus, pus, out, on_host=False):
    out.append("")
    out.append("%s (%s): %s; before = %s; ±: half the range of the repetitions%s"
               % (w["key"], w["patch"], w["what"], w["before"],
                  "; [what runs it on this host: shm bcast = the emulator's shared-memory "
                  "broadcast, signals = POSIX signals between threads]" if on_host else ""))
    rows, notes = [], []
    for s in w["strategies"]:
        base = w.get("vs", {}).get(s, w["before"])
        row = [row_label(w, s, base, on_host)]
        whatif = False
        for n in cpus:
            r = res.get(cell_name(w, s, n))
            b = res.get(cell_name(w, base, n))
            if w.get("per_read"):
                v, bv = per_op_ns(w, r, n), per_op_ns(w, b, n)
            else:
                v, bv = med(r, w.get("metric")), med(b, w.get("metric"))
            if r and r["errors"] and v is None:
                why = refused(r)
                row.append("n/a" if why else "ERROR")
                if why and why not in notes:
                    notes.append(why)
                continue
            if r and max(r["counters"].get("mechanism_missing", [0]) or [0]):
                whatif = True
            shown = (fmt_rate(v) if w.get("metric") else fmt_time(v)) + spread(w, r)
            if noisy_cell(w, r):
                shown = "~" + shown
            x = speedup(w, v, bv)
            row.append(shown if x is None else "%s %s" % (shown, fmt_x(x)))
        if whatif:
            row[0] += " WHAT-IF"
        rows.append(row)
    out += table(rows, ["strategy"] + count_header(w, cpus, pus))
    out += ["  n/a: " + n for n in notes]
    if any(r[0].endswith(" WHAT-IF") for r in rows):
        out.append("  WHAT-IF: run on a profile that lacks the strategy's mechanism "
                   "(--any-mechanism), charged at that profile's costs for it, often 0: "
                   "not a figure of that machine")


def fidelity_cell(w, s, res, n, limits):
    t = per_op_ns(w, res.get(cell_name(w, s, n)), n)
    if t is None:
        return "-"
    nat = per_op_ns(w, res.get(cell_name(w, w["native"], n)), n) \
        if w["native"] and not s.startswith("native") else None
    lim = limits.get(limit_of(s))
    parts = ["%s nat" % fmt_x(t / nat)] if nat else []
    if limits.get("spoiled"):
        parts.append("lim ?")
    else:
        parts.append("%s lim" % fmt_x(t / lim) if lim else "-")
    return " ".join(parts)


# ---- is the machine loaded? ----

def cpu_share(seconds=0.2):
    """The share of a PU a single-threaded busy loop gets: its CPU time over
    the wall time it ran (about 1 on an idle machine, lower when other work
    shares its PU)."""
    w0, c0 = time.perf_counter(), time.thread_time()
    x = 0
    while time.perf_counter() - w0 < seconds:
        x += 1
    return (time.thread_time() - c0) / (time.perf_counter() - w0)


def others_busy(seconds=0.5):
    """PUs' worth of CPU time others used while we slept @seconds, from
    /proc/stat (None where it cannot be read). The load average is no use
    here: a minute's average still carries the build that just ran."""
    def times():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + (v[4] if len(v) > 4 else 0)     # all, idle + iowait
    try:
        t0, i0 = times()
        time.sleep(seconds)
        t1, i1 = times()
    except (OSError, ValueError, IndexError):
        return None
    total = t1 - t0
    return (os.cpu_count() or 1) * (1.0 - (i1 - i0) / total) if total > 0 else None


def load_verdict(busy, shares, pus, load1=None):
    """Loaded or not, and why, from what others used of the machine just
    before the run (@busy, PUs' worth, others_busy()) and the busy loop's
    CPU shares before and after it. Thresholds: others using more than half
    a PU, or a loop that got less than 90% of its PU. @load1, the 1-minute
    load average, is recorded for the reader, not judged."""
    why = []
    if busy is not None and busy > 0.5:
        why.append("other work used %.1f of the %d PUs before the run" % (busy, pus))
    low = [s for s in shares if s is not None and s < 0.9]
    if low:
        why.append("a single-threaded loop got %.0f%% of a PU" % (100 * min(low)))
    return {"others_busy_pus": busy, "cpu_share": shares, "load1_before": load1,
            "loaded": bool(why), "why": "; ".join(why)}


def load1_text(load):
    """The 1-minute load average a verdict recorded, as printed ("?": none)."""
    return "?" if load.get("load1_before") is None else "%.2f" % load["load1_before"]


def load_warning(load):
    return ("WARNING: the machine was loaded (%s): times are spread and the ratios to "
            "machine limits are not shown (lim ?); run again on a quiet machine"
            % load["why"])


def fidelity_block(res, cpus, pus, out, load=None):
    """Emulated / native twin and emulated / machine limit, per cell; the
    limit ratios are withheld when the machine was loaded (@load)."""
    out.append("")
    out.append("fidelity: emulated time / native twin's time, and / machine limit "
               "(cache-line RT for shared-memory strategies, signal RT for ipi, membarrier "
               "for native)")
    limits = {k: med(res.get(k)) for k in (CACHELINE, SIGNAL, MEMBARRIER)}
    if load and load.get("loaded"):
        out.append("  " + load_warning(load))
        limits["spoiled"] = True
    out.append("  limits: cache-line round trip %s, signal round trip %s, membarrier %s" % tuple(
        fmt_time(limits[k]) for k in (CACHELINE, SIGNAL, MEMBARRIER)))
    rows = [["%s/%s" % (w["key"], s)] + [fidelity_cell(w, s, res, n, limits) for n in cpus]
            for w in WORKLOADS for s in w["strategies"]]
    for s in FLUSH_PAGE:
        name = names.build("flush_page", s, 2, remote="busy")
        t, lim = med(res.get(name)), limits.get(limit_of(s))
        ratio = "?" if limits.get("spoiled") else fmt_x(t / lim) if t and lim else "-"
        rows.append([name, "%s (%s lim)" % (fmt_time(t), ratio)] + [""] * (len(cpus) - 1))
    out += table(rows, ["workload/strategy"] + count_header({}, cpus, pus))


def per_op_ns(w, r, n):
    """Time per operation per CPU; tlb_flush2 reports a rate instead."""
    if not r:
        return None
    if w.get("metric"):
        rate = med(r, w["metric"])
        return n / rate * 1e9 if rate else None
    reads = med(r, "reads_per_thread")          # trap_dispatch: per read
    t = med(r)
    return t / reads if t and reads else t


def range_block(res, out):
    """TLBI ops per flush as the benchmark counted them (tlbi_ops): the
    encoding's formula is tested in C (test/unit/test_tlbi_range.cpp)."""
    out.append("")
    out.append("range_flush (%s): one flush of P pages on 2 CPUs; TLBI ops per flush "
               "(time per flush); before = ascending" % RANGE_TLBI)
    pages = sorted({int(p.params["pages"]) for p in map(names.parse, res)
                    if p.workload == "range_flush" and "pages" in p.params})
    rows = []
    for order in RANGE_ORDERS:
        row = [order]
        for p in pages:
            r = res.get(range_name(order, p))
            ops = med(r, "tlbi_ops")
            row.append("-" if ops is None else "%g (%s)" % (ops, fmt_time(med(r))))
        rows.append(row)
    out += table(rows, ["order"] + ["pages:%d" % p for p in pages])


def report(res, cpus, pus, head, load=None, fidelity=True):
    """The tables, as lines after @head; @load: load_verdict() of the run;
    @fidelity: the table against the native twins and machine limits."""
    out = list(head)
    if load and load.get("loaded"):
        out.append(load_warning(load))
    out.append("~ = noise: the cell's repetitions spread more than %.0f%% (half their range "
               "over their median); do not read a ratio from it" % (100 * NOISY_SPREAD))
    for w in WORKLOADS:
        if not fidelity:
            # --profile: the native twins ran on no model, so they are not here.
            w = dict(w, strategies=[s for s in w["strategies"] if not s.startswith("native")])
        if any(cell_name(w, s, n) in res for s in w["strategies"] for n in cpus):
            workload_block(w, res, cpus, pus, out, on_host=fidelity)
    if any(k.startswith("range_flush/") for k in res):
        range_block(res, out)
    if fidelity:
        fidelity_block(res, cpus, pus, out, load)
    return out


# ---- checking (the regression guard) ----

ORACLE_WORKLOADS = ("mprotect_threaded", "process_churn", "context_switch", "forked_worker",
                    "tlb_flush2_threads", "range_flush", "trap_dispatch")


def integral(values):
    return bool(values) and all(float(v).is_integer() for v in values)


def check_one(name, r):
    """What is wrong with benchmark @name's result @r (a list of lines)."""
    if not r or not r["real_ns"]:
        return ["%s: no result%s" % (name, (" (" + r["errors"][0] + ")") if r and r["errors"]
                                     else "")]
    bad = []
    p = names.parse(name)
    emulated = p.workload in ORACLE_WORKLOADS and p.kind != "native"
    v = r["counters"].get("violations")
    if emulated and v is None:
        bad.append("%s: no oracle count (was the oracle checking?)" % name)
    elif v and max(v) != 0:
        bad.append("%s: %g stale translations" % (name, max(v)))
    # Range ops are reported as measured: the encoding's formula is checked
    # in C (test/unit/test_tlbi_range.cpp), here only that the counts exist.
    if p.workload == "range_flush":
        for counter in ("tlbi_ops", "asid_ops"):
            if not integral(r["counters"].get(counter, [])):
                bad.append("%s: %s missing or not a whole number: %s"
                           % (name, counter, r["counters"].get(counter)))
    if p.workload in ("mprotect_threaded", "process_churn") and p.strategy == "local":
        remote = r["counters"].get("remote_invalidations_per_flush", [None])
        if any(x != 0 for x in remote):
            bad.append("%s: %s remote invalidations per flush for single-CPU mms"
                       % (name, remote))
    return bad


def check(bench_names, res):
    return [b for name in bench_names for b in check_one(name, res.get(name))]


def parse_args(argv, doc):
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 repetition, short runs (about 1 min)")
    ap.add_argument("--tiny", action="store_true", help="regression-guard size, oracle checked")
    ap.add_argument("--check", action="store_true", help="check invariant counters; exit 1 if not")
    ap.add_argument("--bench", default=DEFAULT_BENCH)
    ap.add_argument("--out", default=None, help="output directory (default results/)")
    ap.add_argument("--cpus", default=None, help="CPU counts (default 1,2,PUs,2xPUs,4xPUs)")
    ap.add_argument("--repetitions", type=int, default=None)
    ap.add_argument("--min-time", type=float, default=None)
    ap.add_argument("--filter", default=None, help="only benchmarks matching this regex")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--no-model", action="store_true",
                    help="skip the modelled section (each patch on its machine's profile)")
    ap.add_argument("--no-mechanisms", action="store_true",
                    help="skip the mechanisms section (each mechanism under debate against "
                         "its baseline, modelled)")
    ap.add_argument("--any-mechanism", action="store_true",
                    help="with --profile: also run the strategies whose mechanism the profile "
                         "lacks, marked WHAT-IF")
    ap.add_argument("--modelled-only", action="store_true",
                    help="the modelled and mechanisms sections alone (about three minutes; no load changes them)")
    ap.add_argument("--profile", default=None,
                    help="run the emulated workloads in modelled time on this profile (a name "
                         "or a file); implies --no-model")
    args = ap.parse_args(argv)
    if args.profile:
        args.no_model = True
    if args.any_mechanism and not args.profile:
        ap.error("--any-mechanism is for --profile runs")
    if args.modelled_only and (args.no_model or args.filter):
        ap.error("--modelled-only runs the modelled section alone: not with --no-model, "
                 "--profile or --filter")
    # Three repetitions: the fewest that give a median and a spread; five
    # took the main job past 6 minutes on 2 PUs (--repetitions 5 for more).
    if args.repetitions is None:
        args.repetitions = 1 if (args.quick or args.tiny or args.profile) else 3
    if args.min_time is None:
        args.min_time = 0.001 if args.tiny else 0.05 if args.quick else 0.1
    return args


def note_load(json_path, verdict):
    """Record the load verdict in the run's JSON (key "shootdown_load")."""
    try:
        with open(json_path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return
    doc["shootdown_load"] = verdict
    with open(json_path, "w") as f:
        json.dump(doc, f, indent=1)


def cpu_counts(args, lines):
    """(PUs, the CPU counts to run) from --cpus, --tiny or the machine."""
    pus_line = next((l for l in lines if l.startswith("machine:")), "")
    m = re.search(r"(\d+) PU", pus_line)
    pus = int(m.group(1)) if m else os.cpu_count() or 1
    if args.cpus:
        return pus, sorted({int(x) for x in args.cpus.split(",")})
    if args.tiny:
        return pus, [1, 2, 4]
    if args.profile:
        modelled_pus = profile_pus(args.profile) or pus
        return pus, sorted({1, 2, modelled_pus})
    return pus, sorted({1, 2, pus, 2 * pus, 4 * pus})


# ---- the run, section by section ----

# Seconds a measured section takes on a quiet machine: each benchmark run
# is timed for at least min_time, plus its machine's setup and Google
# Benchmark's iteration search. Fitted to two quiet runs on the 2-PU
# development VM at 48d8ac2 (--quick: 158 runs of 0.05 s in 39 s; the
# default: 790 runs of 0.1 s in 232 s); only an estimate for the start.
def quiet_seconds(runs, min_time):
    return runs * (min_time + 0.2)


def measure_load(pus):
    """The load just before a run: what others use of the machine and the
    share of a PU a busy loop gets (load_verdict())."""
    load = load_values()
    return load_verdict(others_busy(), [cpu_share()], pus, load[0] if load else None)


def plan_lines(args, runs, load):
    """What the run will do and how long it should take, said before it
    starts: on a busy machine the measured section is slow and disturbed,
    and the modelled section, which no load changes, can be had alone."""
    out = ["machine load before the run: others used %s PUs, a busy loop got %.0f%% of a PU "
           "(1-minute load average %s)"
           % ("?" if load["others_busy_pus"] is None else "%.2f" % load["others_busy_pus"],
              100 * load["cpu_share"][0], load1_text(load))]
    quiet = quiet_seconds(runs, args.min_time)
    if runs:
        out.append("measured section: %d runs, about %.0f s on a quiet machine" % (runs, quiet))
    if load["loaded"]:
        slow = ", %.0f s or more," % (quiet / max(load["cpu_share"][0], 0.05)) if runs else ""
        out.append("BUSY MACHINE (%s): the measured section will be slow%s and disturbed "
                   "(times spread, limits withheld, its PNGs stamped). The modelled section "
                   "does not depend on load: `scripts/compare --modelled-only` runs it alone "
                   "(about three minutes)." % (load["why"], slow))
    return out


def plot(args, extra):
    """scripts/plot with @extra; False if it failed (not for a missing
    matplotlib, which it says itself)."""
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "plot")] + extra
    return subprocess.run(cmd).returncode in (0, 3)


def mechanisms_section(args, out_dir, model_res):
    """Each mechanism against its baseline on a machine that has it:
    printed and written (mechanisms.json) as soon as it is done."""
    res, seconds = mechanisms.run_all(args.bench, out_dir)
    ref = reference.load()
    lines = mechanisms.report(res, model_res, ref, seconds)
    mechanisms.write_json(os.path.join(out_dir, "mechanisms.json"), res, model_res, ref, seconds)
    print("\n".join(lines), flush=True)
    return lines


def modelled_section(args, out_dir):
    """Each patch on its own machine's profile: printed, written
    (modelled.json) and drawn as soon as it is done."""
    model_res, model_s = modelled.run_all(args.bench, out_dir, tiny=args.tiny)
    model_lines, model_rows = modelled.report(model_res, model_s)
    modelled.write_json(os.path.join(out_dir, "modelled.json"), model_rows, model_s, model_res)
    print("\n".join(model_lines), flush=True)
    drawn = args.no_plot or plot(args, ["--modelled", out_dir])
    return model_lines, model_res, drawn


class Measured:
    """The measured section as far as it got: its chunks' JSON merged into
    compare.json after each one, the tables rebuilt from it."""

    def __init__(self, args, cpus, out_dir, full_names):
        self.args, self.cpus, self.out_dir = args, cpus, out_dir
        self.json_path = os.path.join(out_dir, "compare.json")
        self.chunks = chunks(full_names, args.filter)
        self.paths, self.failed, self.rc = [], [], 0
        self.progress = Progress(len(full_names) * args.repetitions, bool(args.profile))
        self.took = 0.0

    def run(self, after_chunk):
        """Every chunk in turn; @after_chunk(number done) after each. A
        chunk Ctrl-C cut short is left out whole (its JSON is never
        finished) and the KeyboardInterrupt goes up."""
        t0 = time.time()
        try:
            for i, (workload, filt) in enumerate(self.chunks):
                path = os.path.join(self.out_dir, "compare-%02d.json" % i)
                rc = run_chunk(self.args, self.cpus, filt, path, self.progress)
                if rc:
                    self.failed.append("%s (exit %d)" % (workload, rc))
                    self.rc = rc
                if self.args.profile and os.path.exists(path):
                    to_model_time(path)
                self.paths.append(path)
                merge_json(self.paths, self.json_path)
                self.took = time.time() - t0
                after_chunk(len(self.paths))
        finally:
            for i in range(len(self.chunks)):
                path = os.path.join(self.out_dir, "compare-%02d.json" % i)
                if os.path.exists(path):
                    os.unlink(path)

    def state(self, done):
        """Empty when finished; else how far it got, for its text."""
        if done == len(self.chunks):
            return ""
        return ("measured section incomplete: %d of %d workloads done (%s)"
                % (done, len(self.chunks), ", ".join(w for w, _ in self.chunks[:done]) or "none"))


def measured_text(args, m, lines, pus, verdict, state):
    _, res = load(m.json_path)
    head = lines
    if args.profile:
        head = lines + [
            "modelled time on profile %s: every cell is modelled time (host load does not "
            "change it); the native twins and machine limits measure this host and are "
            "left out; CPU counts above the host's %d PUs run oversubscribed on the host, "
            "not in the model" % (args.profile, pus)]
    head = head + [
        "benchmark run: %.0f s, %d benchmarks x %d repetition(s); cells are medians "
        "± half the range of the repetitions; "
        "x = speedup over the patch's before strategy; * oversubscribed"
        % (m.took, m.progress.total // max(args.repetitions, 1), args.repetitions),
        "machine load: others used %s PUs just before the run (1-minute load average %s); "
        "a busy loop got %s of a PU before and after"
        % ("?" if verdict["others_busy_pus"] is None else "%.2f" % verdict["others_busy_pus"],
           load1_text(verdict),
           " and ".join("%.0f%%" % (100 * s) for s in verdict["cpu_share"]))]
    if state:
        head.append("INTERRUPTED: " + state + "; what follows is what finished")
    if m.failed:
        head.append("FAILED: %s; their rows are missing or marked ERROR" % ", ".join(m.failed))
    out = report(res, m.cpus, pus, head, None if args.profile else verdict,
                 fidelity=not args.profile)
    title = ("== Modelled on %s ==" % args.profile) if args.profile else \
        "== Measured: this host, emulated and native =="
    return [title] + out, res


def write_text(out_dir, model_lines, measured_lines):
    text = "\n".join(model_lines + ([""] if model_lines and measured_lines else []) +
                     measured_lines) + "\n"
    with open(os.path.join(out_dir, "compare.txt"), "w") as f:
        f.write(text)
    return text


def main(argv=None, doc=__doc__):
    started = time.time()
    args = parse_args(argv, doc)
    if not os.access(args.bench, os.X_OK):
        sys.exit("compare: %s not found; build first: meson setup build && meson compile -C build"
                 % args.bench)
    out_dir = args.out or os.path.join(
        ROOT, "results", *(["profile-" + os.path.basename(args.profile).replace(".json", "")]
                           if args.profile else []))
    os.makedirs(out_dir, exist_ok=True)

    lines = machine_lines(args.bench)
    print("\n".join(lines), flush=True)
    pus, cpus = cpu_counts(args, lines)
    full_names = [] if args.modelled_only else list_benchmarks(args, cpus)
    if full_names:
        print("emulated CPU counts: %s (* = more CPUs than the %d PUs: oversubscribed)"
              % (", ".join("%d%s" % (n, "*" if n > pus else "") for n in cpus), pus), flush=True)
    before = measure_load(pus)
    print("\n".join(plan_lines(args, len(full_names) * args.repetitions, before)), flush=True)

    status, model_lines, model_res, measured_lines, interrupted = 0, [], {}, [], False
    m, res, verdict = None, {}, before
    try:
        if not args.no_model:
            model_lines, model_res, drawn = modelled_section(args, out_dir)
            status = 0 if drawn else 1
            if not (args.tiny or args.no_mechanisms):
                write_text(out_dir, model_lines, [])
                model_lines += [""] + mechanisms_section(args, out_dir, model_res)
            write_text(out_dir, model_lines, ["(measured section: running)"] if full_names
                       else [])
        if full_names:
            m = Measured(args, cpus, out_dir, full_names)
            print("running: " + " ".join(bench_cmd(args, cpus)) + " (one run per workload)",
                  flush=True)

            def after_chunk(done):
                text, _ = measured_text(args, m, lines, pus, before, m.state(done))
                write_text(out_dir, model_lines, text)
            m.run(after_chunk)
    except KeyboardInterrupt:
        interrupted = True
        print("\ncompare: interrupted; keeping every section that finished", flush=True)
    if m and m.paths:
        verdict = load_verdict(before["others_busy_pus"], before["cpu_share"] + [cpu_share()],
                               pus, before["load1_before"])
        note_load(m.json_path, verdict)
        measured_lines, res = measured_text(args, m, lines, pus, verdict, m.state(len(m.paths)))
        status = status or (1 if m.rc else 0)
    text = write_text(out_dir, model_lines, measured_lines)
    print(text)
    written = ["compare.txt"] + (["modelled.json"] if model_lines else []) + \
        (["mechanisms.json"] if os.path.exists(os.path.join(out_dir, "mechanisms.json"))
         and not (args.tiny or args.no_mechanisms or args.no_model) else []) + \
        (["compare.json"] if m and m.paths else [])
    print("wrote %s in %s; took %.0f s in all" % (", ".join(written), out_dir,
                                                   time.time() - started))
    if m and m.paths and not args.no_plot:
        extra = ["--note", "modelled time on " + args.profile] if args.profile else []
        if verdict.get("loaded") and not args.profile:
            extra += ["--disturbed", verdict["why"]]
        status = status or (0 if plot(args, [m.json_path, "--out", out_dir] + extra) else 1)
    if args.check and not interrupted:
        bad = check([names.base_name(n) for n in full_names], res) + (
            [] if args.no_model else modelled.check(model_res, tiny=args.tiny))
        if not args.no_model and not args.profile:
            # The model part by part, what holds whatever the timing:
            # every component present, each cost charged once.
            from . import components
            guard_bad = components.guard(args.bench)
            print("check: components on %s: %s" % (
                components.GUARD_PROFILE, "%d problem(s)" % len(guard_bad) if guard_bad
                else "every component present, each of %d costs charged as the kernel "
                "pays it" % sum(len(w) for _, w in components.GUARD.values())))
            bad += guard_bad
        for b in bad:
            print("CHECK FAILED: " + b)
        print("check: %d benchmarks, %d problem(s)" % (len(full_names), len(bad)))
        status = status or (1 if bad else 0)
    return 130 if interrupted else status
