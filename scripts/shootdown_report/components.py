# SPDX-License-Identifier: MIT
"""The model validated part by part (scripts/model-check --components).

Each component of modelled time is run twice in one bench process: as an
emulated workload on the `host-kernel` profile (this machine's kernel
primitives, measured by sd-calibrate), strict mode, and as a native
microbenchmark of the same operation on this machine's kernel. The modelled
time should predict the native time within COMPONENT_TOL; a headline ratio
can agree by two errors cancelling, a component cannot.

  IPI round trip, 1 target   component/ipi_roundtrip/ipi/targets:1 against
                             membarrier with a spinning thread minus
                             membarrier alone (component/ipi_roundtrip/native)
  mprotect, 1 thread         mprotect_threaded/ipi/cpus:1 (1024 written pages,
                             read-only and back) against its native twin in
                             processes mode
  fault loop                 tlb_flush2_threads/ipi/lru:global/cpus:1 (madvise
                             of a page, a write fault and a read fault)
                             against tlb_flush2_threads/native/cpus:1
  switch with a pipe message component/pipe_pingpong/ipi/cpus:1 against
                             context_switch/native/cpus:1, ns a switch

  lock, no waiter            component/lock_shared/ipi/cpus:1 (one CPU taking an
                             sd_lock and adding to a counter under it) against
                             a ticket lock taken by one thread
                             (component/lock_shared/native/cpus:1)
  lock handoff, 1 waiter     the same with 2 CPUs / 2 threads, a PU each: every
                             acquisition a handoff (cpus:2), ns an acquisition
                             as CPU 0 sees it
  line among 2 sharers       component/line_shared/ipi/cpus:2 (2 CPUs adding to
                             one word, its sd_line written) against 2 threads
                             doing an atomic add to one word
                             (component/line_shared/native/cpus:2), ns a move
                             of the line: the native time an add over the
                             share of adds that found the line elsewhere
                             (its counter moves_per_op). The model moves the
                             line at every add of CPUs that alternate; a
                             core that holds the line may complete its next
                             add before the other core's request lands
                             (0.56-0.78 moves an add measured here), which
                             is the hardware's count of moves, not their
                             cost.

A line with one sharer is no component: an access that hits is not
charged. On 2 PUs no component can have more than one target, waiter or
sharer natively.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

from . import fmt, loadavg, results, runner

COMPONENT_TOL = 0.25
PROFILES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "profiles")

# (label, emulated benchmark, native benchmark, native baseline or None
# [, native counter]): the native figure is the native benchmark's real
# time less the baseline's, when there is one, over the counter's value
# when one is named (a time per event rather than per operation).
COMPONENTS = [
    ("IPI round trip, 1 target", "component/ipi_roundtrip/ipi/targets:1",
     "component/ipi_roundtrip/native/targets:1", "component/ipi_roundtrip/native/targets:0"),
    ("mprotect of 1024 pages, 1 thread", "mprotect_threaded/ipi/cpus:1",
     "mprotect_threaded/native:mode=processes/cpus:1", None),
    ("fault loop (madvise, 2 faults)", "tlb_flush2_threads/ipi/lru:global/cpus:1",
     "tlb_flush2_threads/native/cpus:1", None),
    ("switch with a pipe message", "component/pipe_pingpong/ipi/cpus:1",
     "context_switch/native/cpus:1", None),
    ("lock, no waiter", "component/lock_shared/ipi/cpus:1",
     "component/lock_shared/native/cpus:1", None),
    ("lock handoff, 1 waiter", "component/lock_shared/ipi/cpus:2",
     "component/lock_shared/native/cpus:2", None),
    ("line among 2 sharers", "component/line_shared/ipi/cpus:2",
     "component/line_shared/native/cpus:2", None, "moves_per_op"),
]


def names(table):
    """Every benchmark @table (COMPONENTS' shape) needs."""
    out = []
    for _, emu, nat, base, *_ in table:
        out += [emu, nat] + ([base] if base else [])
    return out


def bench_args(cpus="1"):
    """The bench arguments: the main set (where the x86 twins of the
    native workloads are) at @cpus, strict mode."""
    return ["--sd_set=main", "--sd_cpus=" + cpus, "--sd_model=strict"]


def native_ns(res, nat, base, per=None):
    r = res.get(nat)
    if not r or r["errors"] or not r["real_ns"]:
        return None
    v = results.med(r)
    if base:
        b = res.get(base)
        if not b or b["errors"] or not b["real_ns"]:
            return None
        v -= results.med(b)
    if per:
        events = results.med(r, per)
        return v / events if events else None
    return v


def ratios(res, table):
    """{label: (native ns, modelled ns)} of one round; None where missing."""
    out = {}
    for label, emu, nat, base, *per in table:
        n = native_ns(res, nat, base, *per)
        e = res.get(emu)
        m = results.med(e, "model_ns") if e and not e["errors"] else None
        out[label] = (n, m) if n and n > 0 and m is not None else None
    return out


def rows(rounds, table, tol):
    """[label, native, modelled, model/native (median), its range, verdict]
    per row of @table over @rounds (each a ratios() dict): the median
    round's ratio decides, within @tol."""
    out = []
    for label, *_ in table:
        got = [r[label] for r in rounds if r.get(label)]
        if not got:
            out.append([label, "-", "-", "-", "-", "no result"])
            continue
        got.sort(key=lambda nm: nm[1] / nm[0])
        n, m = got[len(got) // 2]
        ratio = m / n
        lo, hi = got[0][1] / got[0][0], got[-1][1] / got[-1][0]
        out.append([label, fmt.fmt_ns(n), fmt.fmt_ns(m), "%.2f" % ratio,
                    "%.2f-%.2f" % (lo, hi),
                    "pass" if abs(ratio - 1) <= tol else "miss"])
    return out


def report(rounds, profile, before, after, table=COMPONENTS, tol=COMPONENT_TOL,
           what="components"):
    lines = ["%s, profile %s (modelled, strict) against this machine's kernel, "
             "%d round(s); load average before %s, after %s; pass = the median round "
             "within %d%%" % (what, profile, len(rounds), before, after, round(tol * 100))]
    out = rows(rounds, table, tol)
    lines += fmt.table(out, ["component" if what == "components" else "workload", "native",
                             "modelled", "model/native", "rounds", ""])
    passed = sum(1 for r in out if r[-1] == "pass")
    lines.append("%d of %d %s within %d%%" % (passed, len(out), what, round(tol * 100)))
    return lines, out


# ---- the main job's guard: every component present, each cost charged once ----

# What must hold whatever the timing: on a fixed profile (GUARD_PROFILE,
# strict mode, so every figure is exact), doubling one cost moves a
# component's modelled time per operation by that cost times the number of
# times the kernel pays it per operation: 1 for the IPI's parts on the
# initiator's path, 0 for the target's irq_exit (after the ack), 2 system
# calls a switch (a write and a read), 1024 PTEs an mprotect, and for
# will-it-scale's loop two faults, one zap and one munmapped PTE, with an
# mmap and a munmap each 256 loops. A cost charged twice, or where the
# kernel pays none (an mmap's PTE writes, found this way), breaks it.
GUARD_PROFILE = "milan-36"
GUARD_TOL = 0.01
GUARD = {
    "component/ipi_roundtrip/ipi/targets:1": (512, {
        "ipi_send": 1, "ipi_delivery": 1, "irq_entry": 1, "ipi_handler": 1, "irq_exit": 0}),
    "component/pipe_pingpong/ipi/cpus:1": (512, {
        "syscall_entry": 2, "syscall_exit": 2, "pipe_message": 1, "context_switch": 1,
        "sched_switch": 1, "ipi_send": 0}),
    "mprotect_threaded/ipi/cpus:1": (64, {
        "syscall_entry": 1, "syscall_exit": 1, "vma_change": 1, "pte_update": 1024,
        "local_flush_asid": 1, "ipi_send": 0}),
    "tlb_flush2_threads/ipi/lru:global/cpus:1": (512, {
        "page_fault_entry": 2, "page_alloc": 1, "page_zero": 1, "page_free": 1,
        "local_flush_page": 1, "pte_update": 4, "syscall_entry": 1 + 2 / 256,
        "lru_page": 2, "vma_change": 2 / 256}),
    # CPUs 0 and 1 share milan-36's last-level cache; two CPUs alternate,
    # so an acquisition as CPU 0 sees it spans its own hold and the
    # other's, each a handoff, and a write the line's two transfers.
    "component/lock_shared/ipi/cpus:1": (512, {"lock_acquire": 1, "lock_handoff.llc": 0}),
    "component/lock_shared/ipi/cpus:2": (512, {"lock_acquire": 2, "lock_handoff.llc": 2,
                                               "lock_handoff.core": 0}),
    "component/line_shared/ipi/cpus:2": (512, {"line_transfer.llc": 2,
                                               "line_transfer.core": 0}),
}


def cost_of(costs, key):
    """The entry of @key in a profile's costs: "name" or "name.class" (a
    distance table's class)."""
    name, _, cls = key.partition(".")
    return costs[name][cls] if cls else costs[name]


def overlay_costs(costs, key, ns):
    """The "costs" of an overlay that changes @key to @ns: a whole distance
    table for a class, the others as they were."""
    name, _, cls = key.partition(".")
    source = "model-check guard: the base's value changed to see it move"
    if not cls:
        return {name: {"ns": ns, "source": source}}
    table = {c: dict(v) for c, v in costs[name].items()}
    table[cls] = {"ns": ns, "source": source}
    return {name: table}


def guard_models(bench, profile):
    """{benchmark: model_ns} of GUARD's benchmarks on @profile (a name or
    a path), strict, each at its fixed iteration count."""
    out = {}
    for name, (iters, _) in GUARD.items():
        res = runner.run(runner.command(bench, "^" + name + "/", profile=profile,
                                        iterations=iters, extra=bench_args())).res
        r = res.get(name)
        out[name] = results.med(r, "model_ns") if r and not r["errors"] else None
    return out


def guard(bench, profile_dir=None):
    """The guard's problems (strings, none if it holds): a component with
    no modelled time, or a cost whose doubling moves a component by other
    than GUARD's count of it."""
    base_path = os.path.join(profile_dir or PROFILES, GUARD_PROFILE + ".json")
    with open(base_path) as f:
        costs = json.load(f)["costs"]
    base = guard_models(bench, GUARD_PROFILE)
    bad = ["component %s: no model_ns on %s" % (n, GUARD_PROFILE)
           for n, v in base.items() if not v]
    if bad:
        return bad
    keys = sorted({k for _, want in GUARD.values() for k in want})
    with tempfile.TemporaryDirectory() as tmp:
        for key in keys:
            was = cost_of(costs, key)["ns"]
            now = 2 * was if was else 100.0
            path = os.path.join(tmp, key + ".json")
            with open(path, "w") as f:
                json.dump({"format": "shootdown-profile-1", "name": "guard-" + key,
                           "inherits": os.path.abspath(base_path),
                           "costs": overlay_costs(costs, key, now)}, f)
            got = guard_models(bench, path)
            for name, (_, want) in GUARD.items():
                if key not in want or got.get(name) is None:
                    continue
                count = (got[name] - base[name]) / (now - was)
                if abs(count - want[key]) > GUARD_TOL * max(1, want[key]):
                    bad.append("%s: %s charged %.3f times an operation, not %g"
                               % (name, key, count, want[key]))
    return bad


def calibrate(bench, out_dir):
    """sd-calibrate (next to the bench, in ../tools/) into @out_dir, so that
    the profile and the native runs see the host in the same minute: on a
    shared virtual machine an IPI or a page-table walk can cost 1.5x more
    in one minute than in the next. None if there is no sd-calibrate."""
    tool = os.path.join(os.path.dirname(os.path.abspath(bench)), "..", "tools", "sd-calibrate")
    if not os.access(tool, os.X_OK):
        return None
    print("$ %s -o %s" % (tool, out_dir), file=sys.stderr)
    proc = subprocess.run([tool, "-o", out_dir], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode:
        sys.exit("model-check: sd-calibrate failed: " + proc.stderr.strip()[-300:])
    return os.path.join(out_dir, "host-kernel.json")


def main(run, bench, profile, reps, min_time, nr_rounds=3, table=COMPONENTS,
         tol=COMPONENT_TOL, what="components", cpus="1"):
    """Run @table's benchmarks (COMPONENTS, or model_check.py's native pairs) with
    @run (model.run) @nr_rounds times and print the table. With no
    @profile, each round calibrates first (calibrate()) and uses its
    host-kernel."""
    before = loadavg()
    filt = "^(" + "|".join(re.escape(n) for n in names(table)) + ")/"
    rounds = []
    for _ in range(nr_rounds):
        with tempfile.TemporaryDirectory() as tmp:
            path = profile or calibrate(bench, tmp)
            if path is None:
                sys.exit("model-check: no sd-calibrate beside the bench; give --profile NAME")
            res = run(bench, path, filt, reps, min_time, bench_args(cpus))
            rounds.append(ratios(res, table))
    after = loadavg()
    lines, table = report(rounds, profile or "host-kernel (calibrated before each round)",
                          before, after, table, tol, what)
    print("\n".join(lines))
    sys.stdout.flush()
    return 0 if table else 1
