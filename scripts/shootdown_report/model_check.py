# SPDX-License-Identifier: MIT
"""Validation of modelled time: modelled against measured, in one run.

    scripts/model-check [--bench PATH] [--reps K] [--min-time S] [--native]
                        [--profile NAME] [--filter REGEX] [--json FILE]
    scripts/model-check --converge [--quick] [--bench PATH] [--json FILE]
    scripts/model-check --scale [--cpus N,...] [--strategies S,...] [--bench PATH]
    scripts/model-check --components [--rounds N] [--bench PATH] [--reps K]
                        [--profile NAME]

--components: the model part by part (components.py): each component of
modelled time on a `host-kernel` profile sd-calibrate writes just before
(or --profile NAME), strict, against a native microbenchmark of the same
operation on this machine, within 25%; N rounds (3), each calibrated
afresh, the median round deciding (on a shared virtual machine a kernel
primitive's cost moves by 1.5x from one minute to the next).

--converge: does modelled time converge (converge.py)? Every modelled row
of the main job, strict three times, strict beside a busy loop on every
PU, lax five times and at a tenth of the window, in one table.

--scale: strict mode's host cost at 36 to 256 emulated CPUs (scale.py).

Self-consistency (default, profile `host`): every seed workload at 1 and 2
CPUs runs once with the profile; its modelled time per operation
(`model_ns`) is set against its measured real time per operation from the
same run. The host profile holds this emulator's own costs on this machine,
so the two should agree within 25%: a check of the model's mechanics.

--native (profile `host-kernel`, calibrated before each of --rounds rounds
as --components does): the emulated `ipi` twin of each native workload
runs with the kernel's primitives as costs, beside the native workload on
this machine's kernel; the modelled time predicts the native time, within
35%, with nothing fitted to the result.

Medians over K repetitions (--benchmark_repetitions). The load average
before and after is printed: a loaded host spoils the real side only.
"""
import argparse
import os

from . import fmt, loadavg, results, runner

SELF_TOL = 0.25
NATIVE_TOL = 0.35

# The seed workloads, at 1 and 2 CPUs (none oversubscribed on 2 PUs).
SELF_FILTER = (r"^(mprotect_threaded/(broadcast|local|ipi|gbcast)"
               r"|process_churn/(broadcast|local|ipi)"
               r"|context_switch/(ipi:cpumask=(eager|lazy)|broadcast|local)"
               r"|tlb_flush2_threads/(ipi|gbcast)/lru:(global|percpu))/cpus:[12]/"
               r"|^flush_page/(broadcast|ipi)/cpus:2/remote:(idle|busy)/"
               r"|^trap_dispatch/(locked|rcu|direct)/threads:[12]/")

# (native twin, its emulated x86 twin): the same shape, each CPU its own
# address space where the native one uses processes.
NATIVE_PAIRS = [
    ("mprotect_threaded/native:mode=processes/cpus:%d", "mprotect_threaded/ipi/cpus:%d"),
    ("tlb_flush2_threads/native/cpus:%d", "tlb_flush2_threads/ipi/lru:global/cpus:%d"),
    # N pairs of processes passing a byte through two pipes, a PU each: the
    # emulated ping-pong (bench/component.cpp) is that shape; hackbench's
    # groups (context_switch/ipi) are not, and modelled 1.9x the pair.
    ("context_switch/native/cpus:%d", "component/pipe_pingpong/ipi/cpus:%d"),
]


def run(bench, profile, filt, reps, min_time, extra=()):
    cmd = runner.command(bench, filt, profile=profile, reps=reps, min_time=min_time,
                         extra=extra)
    return runner.run(cmd, echo=True, check=True).res


def row(name, real, model, tol):
    if not real or model is None:
        return [name, fmt.fmt_ns(real) if real else "-", "-", "-", "no model_ns"]
    ratio = model / real
    return [name, fmt.fmt_ns(real), fmt.fmt_ns(model), "%.2f" % ratio,
            "pass" if abs(ratio - 1) <= tol else "miss"]


def self_consistency(res):
    rows = []
    for name in sorted(res):
        r = res[name]
        if r["errors"] or not r["real_ns"]:
            continue
        rows.append(row(name, results.med(r), results.med(r, "model_ns"), SELF_TOL))
    return rows


def native_table():
    """NATIVE_PAIRS at 1 and 2 CPUs, in components.py's table shape."""
    return [("%s vs %s" % (nat % n, emu % n), emu % n, nat % n, None)
            for nat, emu in NATIVE_PAIRS for n in (1, 2)]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    p.add_argument("--bench", default=os.path.join(here, "..", "..", "build", "bench",
                                                   "shootdown-bench"))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--min-time", type=float, default=0.2)
    p.add_argument("--native", action="store_true")
    p.add_argument("--components", action="store_true",
                   help="each component of modelled time against its native twin")
    p.add_argument("--rounds", type=int, default=3,
                   help="with --components: rounds, each calibrated afresh")
    p.add_argument("--profile")
    p.add_argument("--filter")
    p.add_argument("--converge", action="store_true",
                   help="the main job's modelled rows: strict x3, loaded, lax x5, lax window/10")
    p.add_argument("--quick", action="store_true", help="with --converge: the --tiny sizes")
    p.add_argument("--scale", action="store_true",
                   help="strict mode's host cost at 36-256 CPUs (scale.py)")
    p.add_argument("--cpus", default="36,64,128,256", help="with --scale")
    p.add_argument("--strategies", default="ipi,broadcast,gbcast", help="with --scale")
    p.add_argument("--json")
    args = p.parse_args(argv)
    if args.scale:
        from . import scale
        return scale.main(os.path.abspath(args.bench),
                          [int(n) for n in args.cpus.split(",")],
                          args.strategies.split(","), args.json)
    if args.converge:
        from . import converge
        return converge.main(os.path.abspath(args.bench), args.quick, args.json)
    if args.components or args.native:
        from . import components
        if args.components:
            return components.main(run, args.bench, args.profile, args.reps, args.min_time,
                                   args.rounds)
        return components.main(run, args.bench, args.profile, args.reps, args.min_time,
                               args.rounds, native_table(), NATIVE_TOL, "native twins",
                               "1,2")
    profile = args.profile or "host"
    filt = args.filter or SELF_FILTER
    before = loadavg()
    res = run(args.bench, profile, filt, args.reps, args.min_time)
    after = loadavg()
    rows = self_consistency(res)
    tol = SELF_TOL
    print("profile %s, load average before %s, after %s; pass = within %d%%"
          % (profile, before, after, round(tol * 100)))
    print("\n".join(fmt.table(rows, ["benchmark", "real", "model", "model/real", ""])))
    passed = sum(1 for r in rows if r[-1] == "pass")
    print("%d of %d within %d%%" % (passed, len(rows), round(tol * 100)))
    return 0 if rows else 1
