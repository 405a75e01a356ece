# SPDX-License-Identifier: MIT
"""scripts/compare's modelled section: each kernel patch's workload on a
profile of the machine it was measured on, at the patch's own CPU counts, in
modelled time, beside the figure the patch published (reference.json).

Every row runs in strict mode (the default with a profile: one emulated CPU
at a time, in modelled-time order), with nothing chosen per row: no window,
no repetitions. Strict results depend on the workload and the profile alone,
not on this host's speed or load, so one run is enough; scripts/model-check
shows it (three strict runs bit-identical, lax beside it). Nothing here
asserts a time: --check looks at what must hold whatever the numbers (every
workload ran, was modelled, served no stale translation, was not disturbed).
"""
import concurrent.futures
import json
import os
import queue
import re
import time

from . import ROOT, patches, reference, runner
from .fmt import fmt_rate, fmt_time, fmt_x, table
from .results import med

# Every row's mode: strict, the library's default with a profile.
MODE = "strict"

# Within this of the patch's figure (ours / theirs), a row reproduces it.
TOLERANCE = 0.30

# One bench run per patch: its profile, the benchmarks at full size and at
# the regression guard's size, and the workload's own size. Every row runs
# a fixed number of iterations: a count Google Benchmark picks from real
# time amortises a run's first faults differently from run to run (the
# 1-CPU mprotect rows moved by 0.07 ns that way). 5000 MRS reads
# a thread, not the patch's 10^6: per trap the modelled times are the same
# (lax mode at a 200 ns window: locked / direct at 1, 2, 4, 64 threads 1.10,
# 2.04, 5.04, 127x with 5000, 1.10, 2.01, 5.03, 124x with 20000).
RUNS = [
    {"key": "skip_broadcast", "profile": patches.profile("skip_broadcast"),
     "filter": r"^mprotect_threaded/(broadcast|local)/cpus:(1|8|32)/",
     "tiny": r"^mprotect_threaded/(broadcast|local)/cpus:(1|2)/",
     "args": ["--sd_iterations=2000"], "tiny_args": ["--sd_iterations=500"]},
    {"key": "mrs", "profile": patches.profile("mrs"),
     "filter": r"^trap_dispatch/(locked|direct)/threads:(1|2|4|64)/",
     "tiny": r"^trap_dispatch/(locked|direct)/threads:(1|2)/",
     "args": ["--sd_trap_reads=5000"],
     "tiny_args": ["--sd_trap_reads=1000"]},
    # One hackbench run (--sd_iterations=1 rounds up to one: a run does
    # not split), of hackbench's own 100 loops, every task created fresh
    # as hackbench's processes are: a second run would start with the
    # first one's cpumasks. Its length is the source's, not a setting of
    # this section, so it has no half run ("whole"). Two runs, one per
    # variant, so that they take a PU each: each row is a machine of its
    # own, and strict mode's results do not depend on what else runs.
    {"key": "lazy_cpumask", "part": "eager", "profile": patches.profile("lazy_cpumask"),
     "whole": True,
     "filter": r"^context_switch/ipi:cpumask=eager/cpus:36/",
     "tiny": r"^context_switch/ipi:cpumask=eager/cpus:36/",
     "args": ["--sd_iterations=1"]},
    {"key": "lazy_cpumask", "part": "lazy", "profile": patches.profile("lazy_cpumask"),
     "whole": True,
     "filter": r"^context_switch/ipi:cpumask=lazy/cpus:36/",
     "tiny": r"^context_switch/ipi:cpumask=lazy/cpus:36/",
     "args": ["--sd_iterations=1"]},
    # The merged commit's table by thread count (tip against INVLPGB, 1 to
    # 32 threads of a 72-CPU Milan), at the per-CPU LRU setting: taken as
    # tip's, since its figures at 32 threads (759k, 1199k) stand as the
    # cover letter's LRU fix and both at 36 (731k, 1157k: 1.58x each), an
    # inference, not a statement of the commit. Below 4 threads gbcast
    # takes the IPI path (the merged threshold), as the kernel does. 2048
    # loops, as the run below: at 4 and 8 threads a loop's modelled time
    # is the same within 1% at 1024, 2048 and 4096 loops, and 512 (the
    # half of 1024) is 1.7% off, the 256-loop passes' structure not yet
    # averaged out.
    {"key": "invlpgb_threads", "profile": patches.profile("invlpgb_threads"),
     "filter": r"^tlb_flush2_threads/(ipi|gbcast)/lru:percpu/cpus:(1|2|4|8|16|32)/",
     "tiny": r"^tlb_flush2_threads/(ipi|gbcast)/lru:percpu/cpus:(1|2)/",
     "args": ["--sd_iterations=2048"], "tiny_args": ["--sd_iterations=128"]},
    {"key": "invlpgb", "profile": patches.profile("invlpgb"),
     "filter": r"^tlb_flush2_threads/(ipi|gbcast)/lru:(global|percpu)/cpus:36/",
     "tiny": r"^tlb_flush2_threads/(ipi|gbcast)/lru:(global|percpu)/cpus:36/",
     "args": ["--sd_iterations=2048"], "tiny_args": ["--sd_iterations=128"]},
]


def bench_cmd(bench, run, tiny, json_path, mode=MODE, window=None, oracle=None):
    """@run's command line; @tiny: the guard's size, with the oracle
    checking (unless @oracle says otherwise)."""
    if oracle is None:
        oracle = "checked" if tiny else ""
    return runner.command(bench, run["tiny"] if tiny else run["filter"], bench_set="patches",
                          profile=run["profile"], mode=mode, window=window, reps=1,
                          min_time=0.001 if tiny else 0.05, out=json_path, oracle=oracle,
                          extra=run.get("tiny_args", run["args"]) if tiny else run["args"])


def pus():
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return [None]


def run_file(run):
    """The JSON file of one bench run of the section: modelled-<key>.json,
    or modelled-<key>-<part>.json for a patch run in parts (the half-length
    runs: modelled-<key>[-<part>]-half.json)."""
    return "modelled-%s%s.json" % (run.get("file_key", run["key"]),
                                   "-" + run["part"] if "part" in run else "")


def run_one(bench, run, tiny, out_dir, pu, t0):
    """One patch's bench run (or part of it), held to @pu: a strict machine
    sits on the PU its creating thread runs on, so runs on different PUs do
    not share one. Its results, and its line for the log."""
    path = os.path.join(out_dir, run_file(run))
    t = time.time()
    r = runner.run(bench_cmd(bench, run, tiny, path), pu=pu, out=path)
    line = "[modelled %5.0fs] %-20s on %-16s %s" % (
        time.time() - t0, run["key"] + ("/" + run["part"] if "part" in run else ""),
        run["profile"], "%.0f s" % (time.time() - t) if r.ok else "FAILED: " + r.last_words())
    return r.res, line


def run_all(bench, out_dir, tiny=False):
    """Run every patch's benchmarks, one per PU at a time (strict mode runs
    one CPU at a time, so each needs one PU, and modelled results do not
    depend on what else the host runs); {key: results}, the seconds taken."""
    res, t0 = {}, time.time()
    free = queue.Queue()
    for pu in pus():
        free.put(pu)

    def job(run):
        pu = free.get()
        try:
            out, line = run_one(bench, run, tiny, out_dir, pu, t0)
        finally:
            free.put(pu)
        print(line, flush=True)
        return run["key"], out

    # The longest first: INVLPGB's four rows at 36 CPUs, then the MRS and
    # skip-broadcast rows; the half runs after them.
    longest = ["invlpgb", "invlpgb_threads", "skip_broadcast", "mrs", "lazy_cpumask"]
    order = sorted(RUNS, key=lambda r: longest.index(r["key"]))
    if not tiny:
        order += [half_run(r) for r in order if not r.get("whole")]
    with concurrent.futures.ThreadPoolExecutor(max_workers=free.qsize()) as pool:
        for key, out in pool.map(job, order):
            res.setdefault(key, {}).update(out)
    return res, time.time() - t0


HALF = "half:"


def half_run(run):
    """@run at half its length: its iteration counts halved. Its results go
    under HALF + key; a row that moves between the two depends on a
    setting of this section, not on the workload and the profile alone."""
    args = []
    for a in run["args"]:
        m = re.match(r"^(--sd_iterations=|--sd_trap_reads=)(\d+)$", a)
        args.append(m.group(1) + str(int(m.group(2)) // 2) if m else a)
    part = run.get("part", "") + ("-" if "part" in run else "") + "half"
    return dict(run, key=HALF + run["key"], args=args, part=part,
                file_key=run["key"])


def model_ns(res, name):
    r = res.get(name)
    return med(r, "model_ns") if r else None


def ratio(a, b):
    return a / b if a and b else None


def verdict(ours, theirs, speedup=False):
    """'within' if @ours is inside TOLERANCE of @theirs. A @speedup (a
    ratio whose distance from 1 is the patch's effect) must also have the
    patch's sign and at least half its effect, however small: 1.02x is
    within 30% of 1.39x but no reproduction of a 39% gain, and 0.85x is
    within 30% of 1.07x but a 15% loss where the patch gained 7%. A patch
    figure of exactly 1 claims no effect: tolerance alone."""
    if ours is None or theirs is None:
        return "-"
    if abs(ours / theirs - 1) > TOLERANCE:
        return "miss (%+.0f%%)" % (100 * (ours / theirs - 1))
    effect, got = theirs - 1, ours - 1
    if speedup and effect and (got * effect <= 0 or abs(got) < abs(effect) / 2):
        return "miss (%s %.0f%% of %.0f%%)" % ("gain" if effect > 0 else "loss",
                                             100 * got, 100 * effect)
    return "within"


def rows_skip_broadcast(res, ref):
    fig = ref["mprotect_threaded"]["cpus"]["32"]
    counts = sorted({int(n.split("cpus:")[1].split("/")[0]) for n in res if "cpus:" in n})
    n = counts[-1] if counts else 32
    ours = ratio(model_ns(res, "mprotect_threaded/broadcast/cpus:%d" % n),
                 model_ns(res, "mprotect_threaded/local/cpus:%d" % n))
    theirs = fig[0] / fig[1]
    return [[patches.label("skip_broadcast"), patches.where("skip_broadcast", n, "CPUs"),
             "broadcast / local", fmt_x(theirs),
             fmt_x(ours), verdict(ours, theirs, speedup=True)]]


def rows_mrs(res, ref):
    fig = reference.by_count(ref["trap_dispatch"])
    rows = []
    for t in sorted(fig):
        ours = ratio(model_ns(res, "trap_dispatch/locked/threads:%d" % t),
                     model_ns(res, "trap_dispatch/direct/threads:%d" % t))
        if ours is None:
            continue
        theirs = fig[t][0] / fig[t][2]
        # At 64 threads the goal is a floor: at least 50x.
        v = ("within" if ours >= 50 else "miss") if t == 64 else verdict(ours, theirs, True)
        rows.append([patches.label("mrs"), patches.where("mrs", t, "threads"), "locked / direct",
                     fmt_x(theirs), fmt_x(ours), v + (" (goal >= 50x)" if t == 64 else "")])
    return rows


def rows_lazy(res, ref):
    fig = ref["hackbench"]
    before, after = fig["cpus"]["36"]
    eager = res.get("context_switch/ipi:cpumask=eager/cpus:36")
    lazy = res.get("context_switch/ipi:cpumask=lazy/cpus:36")
    ours = ratio(med(eager, "model_ns") if eager else None, med(lazy, "model_ns") if lazy else None)
    we = med(eager, "cpumask_writes_per_switch") if eager else None
    wl = med(lazy, "cpumask_writes_per_switch") if lazy else None
    fewer = 1 - wl / we if we and wl is not None else None
    lab, where = patches.label("lazy_cpumask"), patches.where("lazy_cpumask")
    return [[lab, where, "eager / lazy a message", fmt_x(before / after),
             fmt_x(ours), verdict(ours, before / after, speedup=True)],
            [lab, where, "cpumask writes saved",
             ">= %.0f%%" % (100 * fig["min_write_reduction"]),
             "-" if fewer is None else "%.1f%%" % (100 * fewer),
             "-" if fewer is None else
             ("within" if fewer >= fig["min_write_reduction"] else "miss")]]


def rows_invlpgb(res, ref):
    fig = ref["tlb_flush2_threads"]["configurations"]
    cfg = {"vanilla": "ipi/lru:global", "lru_removal": "ipi/lru:percpu",
           "invlpgb_alone": "gbcast/lru:global", "both": "gbcast/lru:percpu"}
    t = {k: model_ns(res, "tlb_flush2_threads/%s/cpus:36" % v) for k, v in cfg.items()}
    loops = 36 * 1e9 / t["vanilla"] if t["vanilla"] else None
    lab, where = patches.label("invlpgb"), patches.where("invlpgb")
    rows = [[lab, where, "vanilla loops/s", fmt_rate(fig["vanilla"]),
             fmt_rate(loops), verdict(loops, fig["vanilla"])]]
    for k, label in (("lru_removal", "LRU fix / vanilla"), ("invlpgb_alone", "INVLPGB / vanilla"),
                     ("both", "both / vanilla")):
        ours, theirs = ratio(t["vanilla"], t[k]), fig[k] / fig["vanilla"]
        rows.append([lab, where, label, fmt_x(theirs), fmt_x(ours),
                     verdict(ours, theirs, speedup=True)])
    return rows


# The merged series' threshold: global ASIDs (and INVLPGB) for an mm
# active on 4 or more CPUs (bench/tlb_flush2.cpp's gbcast_threshold()).
GBCAST_THRESHOLD = 4


def rows_invlpgb_threads(res, ref):
    """The merged commit's INVLPGB / tip by thread count: a row each."""
    fig = reference.by_count(ref["tlb_flush2_threads_merged"])
    rows = []
    for n in sorted(fig):
        tip, inv = fig[n]
        ours = ratio(model_ns(res, "tlb_flush2_threads/ipi/lru:percpu/cpus:%d" % n),
                     model_ns(res, "tlb_flush2_threads/gbcast/lru:percpu/cpus:%d" % n))
        if ours is None and res:
            continue
        # Below the merged threshold (an mm on 4 or more CPUs) the kernel
        # sends no INVLPGB: the published difference (0.97x, 1.00x) is
        # the runs' noise, not an effect to reproduce; tolerance alone.
        engaged = n >= GBCAST_THRESHOLD
        rows.append([patches.label("invlpgb_threads"),
                     patches.where("invlpgb_threads", n, "threads"),
                     "INVLPGB / tip" + ("" if engaged else " (not used)"),
                     fmt_x(inv / tip), fmt_x(ours), verdict(ours, inv / tip, speedup=engaged)])
    return rows


def curve(res, ref):
    """The thread-count curve for the plot: threads, and loops/s (all
    threads) published and modelled, tip and INVLPGB."""
    fig = reference.by_count(ref["tlb_flush2_threads_merged"])
    out = {"threads": sorted(fig), "published": {"tip": [], "invlpgb": []},
           "modelled": {"tip": [], "invlpgb": []}}
    for n in out["threads"]:
        out["published"]["tip"].append(fig[n][0])
        out["published"]["invlpgb"].append(fig[n][1])
        for key, strategy in (("tip", "ipi"), ("invlpgb", "gbcast")):
            ns = model_ns(res, "tlb_flush2_threads/%s/lru:percpu/cpus:%d" % (strategy, n))
            out["modelled"][key].append(n * 1e9 / ns if ns else None)
    return out


def fitted_params():
    """Every profile value whose source says it was fitted: (profile, key, source)."""
    out, pdir = [], os.path.join(ROOT, "profiles")
    for run in sorted({r["profile"] for r in RUNS}):
        with open(os.path.join(pdir, run + ".json")) as f:
            doc = json.load(f)
        for key, v in doc["costs"].items():
            entries = [(key, v)] if "ns" in v else [("%s.%s" % (key, d), e)
                                                   for d, e in v.items() if isinstance(e, dict)]
            for k, e in entries:
                if "fitted" in e.get("source", "").lower():
                    out.append((run, k, e["source"]))
    return out


def disturbed(res):
    """Rows whose run says host time got into it (model_stalls > 0: the
    watchdog took the machine from a thread blocked outside the library,
    or lax mode marked a laggard stalled): their numbers are not exact."""
    out = []
    for key in sorted(res):
        for name, r in res[key].items():
            if max(r["counters"].get("model_stalls", [0]) or [0]) > 0:
                out.append(name)
    return out


def all_rows(res, ref, prefix=""):
    return (rows_skip_broadcast(res.get(prefix + "skip_broadcast", {}), ref)
            + rows_mrs(res.get(prefix + "mrs", {}), ref)
            + rows_lazy(res.get(prefix + "lazy_cpumask", {}), ref)
            + rows_invlpgb(res.get(prefix + "invlpgb", {}), ref)
            + rows_invlpgb_threads(res.get(prefix + "invlpgb_threads", {}), ref))


# A row's figure may move this much between the run and its half: beyond
# it the row depends on the section's run length (a setting), not within.
HALF_TOLERANCE = 0.01


def with_half(rows, half):
    """Each row with its figure at half the run's length, and its verdict
    refused if the two differ by more than HALF_TOLERANCE."""
    from .fmt import fig_value
    out = []
    for row, h in zip(rows, half):
        full, short = fig_value(row[4]), fig_value(h[4])
        v = row[5]
        if full and short and abs(short / full - 1) > HALF_TOLERANCE:
            v = ("not within" if v.startswith("within") else v) + \
                " (moves with the run's length)"
        out.append(row[:5] + [h[4] if short else "n/a", v])
    return out


def report(res, seconds):
    """The section's lines and its rows (for the JSON)."""
    ref = reference.load()
    rows = all_rows(res, ref)
    half = any(k.startswith(HALF) for k in res)
    if half:
        rows = with_half(rows, all_rows(res, ref, HALF))
    else:
        rows = [row[:5] + ["-", row[5]] for row in rows]
    out = ["== Modelled: each patch on a profile of its own machine (%.0f s) ==" % seconds,
           "modelled time, %s mode for every row (one CPU at a time in modelled-time "
           "order: the same numbers on any host, at any load, run after run); "
           "'within' = inside +-%.0f%% of the patch's figure, and for a speedup the "
           "patch's sign and at least half its gain" % (MODE, 100 * TOLERANCE)]
    out.append("'half run': the same rows at half the iterations; a row that moves by more "
               "than %.0f%% between the two is not within (it depends on a setting of this "
               "section); n/a: the run is the source's own length (one hackbench run)"
               % (100 * HALF_TOLERANCE))
    out += table(rows, ["patch", "profile", "measure", "patch's", "modelled", "half run",
                        "verdict"], left=3)
    hit = disturbed(res)
    out.append("disturbed runs (not exact; see model_stalls): " + (", ".join(hit) if hit else "none"))
    fitted = fitted_params()
    out.append("fitted parameters (their figures do not count as reproduced):"
               if fitted else "fitted parameters: none")
    out += ["  %s %s: %s" % (p, k, s[:150] + ("..." if len(s) > 150 else "")) for p, k, s in fitted]
    # What each row rests on, computed offline (it takes minutes): whatif
    # imports this module, so it is imported here.
    from . import decided
    out += decided.decided_lines(rows)
    out.append("profiles and every value's source: docs/profiles.md; why each miss is a miss: "
               "BENCHMARKS.md; ask what-if: scripts/what-if PATCH PARAM")
    return out, rows


def profile_costs(name):
    with open(os.path.join(ROOT, "profiles", name + ".json")) as f:
        return {k: v["ns"] for k, v in json.load(f)["costs"].items() if "ns" in v}


def message_ns(costs):
    """What context_switch charges each side of a pipe message, the write
    and the read (bench/context_switch.cpp, message_half_ns())."""
    msg = costs.get("pipe_message", 0)
    return 0 if msg <= 0 else int(costs["syscall_entry"] + costs["syscall_exit"] + msg / 2 + 0.5)


def check(res, tiny=False):
    """What is wrong whatever the numbers: a workload missing, not modelled,
    serving a stale translation (the oracle checks in --tiny runs), or
    hackbench's shape not charged its messages."""
    bad = []
    want = message_ns(profile_costs(patches.profile("lazy_cpumask")))
    for name, r in res.get("lazy_cpumask", {}).items():
        got = med(r, "message_ns_per_side")
        if r["real_ns"] and got != want:
            bad.append("modelled lazy_cpumask: %s charged %s ns a side of a message, "
                       "not %d" % (name, got, want))
    for run in RUNS:
        got = res.get(run["key"], {})
        pattern = re.compile(run["tiny"] if tiny else run["filter"])
        if not got:
            bad.append("modelled %s: no result" % run["key"])
            continue
        for name, r in got.items():
            if not pattern.search(name + "/"):
                continue
            if not r["real_ns"]:
                bad.append("modelled %s: %s failed: %s" % (run["key"], name,
                                                          (r["errors"] or ["no result"])[0]))
            elif not med(r, "model_ns"):
                bad.append("modelled %s: %s has no model_ns (was it modelled?)"
                           % (run["key"], name))
            if max(r["counters"].get("model_stalls", [0]) or [0]) > 0:
                bad.append("modelled %s: %s was disturbed (model_stalls %g): host time "
                           "decided part of it" % (run["key"], name,
                                                  max(r["counters"]["model_stalls"])))
            v = r["counters"].get("violations")
            if v and max(v):
                bad.append("modelled %s: %s served %g stale translations"
                           % (run["key"], name, max(v)))
    return bad


def write_json(path, rows, seconds, res=None):
    """modelled.json: the rows, the fitted values, the raw runs' files and
    (from @res) the thread-count curve plot.py draws."""
    with open(path, "w") as f:
        json.dump({"seconds": seconds, "tolerance": TOLERANCE,
                   "invlpgb_threads": curve((res or {}).get("invlpgb_threads", {}),
                                            reference.load()),
                   "columns": ["patch", "profile", "measure", "patch's", "modelled", "half run",
                               "verdict"],
                   "rows": rows,
                   "fitted": [{"profile": p, "param": k, "source": s}
                              for p, k, s in fitted_params()],
                   "runs": {k: [run_file(r) for r in RUNS if r["key"] == k]
                            for k in dict.fromkeys(r["key"] for r in RUNS)}}, f, indent=1)
