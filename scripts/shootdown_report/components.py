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

Not yet built (each needs a modelled lock or line a workload can take
through the public API): a contended lock handoff against the number of
waiters, and a line bounced among N sharers. On 2 PUs no component can have
more than one target, waiter or sharer natively.
"""
import os
import subprocess
import sys
import tempfile

from . import fmt, loadavg, results

COMPONENT_TOL = 0.25

# (label, emulated benchmark, native benchmark, native baseline or None):
# the native figure is the native benchmark's real time less the
# baseline's, when there is one.
COMPONENTS = [
    ("IPI round trip, 1 target", "component/ipi_roundtrip/ipi/targets:1",
     "component/ipi_roundtrip/native/targets:1", "component/ipi_roundtrip/native/targets:0"),
    ("mprotect of 1024 pages, 1 thread", "mprotect_threaded/ipi/cpus:1",
     "mprotect_threaded/native:mode=processes/cpus:1", None),
    ("fault loop (madvise, 2 faults)", "tlb_flush2_threads/ipi/lru:global/cpus:1",
     "tlb_flush2_threads/native/cpus:1", None),
    ("switch with a pipe message", "component/pipe_pingpong/ipi/cpus:1",
     "context_switch/native/cpus:1", None),
]


def names(table):
    """Every benchmark @table (COMPONENTS' shape) needs."""
    out = []
    for _, emu, nat, base in table:
        out += [emu, nat] + ([base] if base else [])
    return out


def bench_args(cpus="1"):
    """The bench arguments: the main set (where the x86 twins of the
    native workloads are) at @cpus, strict mode."""
    return ["--sd_set=main", "--sd_cpus=" + cpus, "--sd_model=strict"]


def native_ns(res, nat, base):
    r = res.get(nat)
    if not r or r["errors"] or not r["real_ns"]:
        return None
    v = results.med(r)
    if base:
        b = res.get(base)
        if not b or b["errors"] or not b["real_ns"]:
            return None
        v -= results.med(b)
    return v


def ratios(res, table):
    """{label: (native ns, modelled ns)} of one round; None where missing."""
    out = {}
    for label, emu, nat, base in table:
        n = native_ns(res, nat, base)
        e = res.get(emu)
        m = results.med(e, "model_ns") if e and not e["errors"] else None
        out[label] = (n, m) if n and n > 0 and m is not None else None
    return out


def rows(rounds, table, tol):
    """[label, native, modelled, model/native (median), its range, verdict]
    per row of @table over @rounds (each a ratios() dict): the median
    round's ratio decides, within @tol."""
    out = []
    for label, _, _, _ in table:
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
    """Run @table's benchmarks (COMPONENTS, or model.py's native pairs) with
    @run (model.run) @nr_rounds times and print the table. With no
    @profile, each round calibrates first (calibrate()) and uses its
    host-kernel."""
    import re
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
