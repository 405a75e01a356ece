# SPDX-License-Identifier: MIT
"""shootdown-bench, started in one place.

Every script of the package builds its command line with command() and runs
it with run() (or, for compare's measured set, which shows each line as it
comes, with stream()): the same flag spellings, the same JSON through a
file (--benchmark_out, so that the bench's own lines on stdout never mix
with it), the same way to hold a run to one PU, and one error report.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from . import results


def command(bench, filt=None, *, bench_set=None, cpus=None, profile=None, mode=None,
            window=None, iterations=None, trap_reads=None, oracle=None, reps=None,
            min_time=None, out=None, extra=()):
    """The command line of one bench run. @cpus: an int or a list (the
    main set's --sd_cpus); @out: the JSON file to write (--benchmark_out);
    @extra: further arguments, last."""
    cmd = [bench]
    if bench_set:
        cmd.append("--sd_set=" + bench_set)
    if cpus is not None:
        cmd.append("--sd_cpus=" + (",".join(map(str, cpus)) if isinstance(cpus, (list, tuple))
                                   else str(cpus)))
    if profile:
        cmd.append("--sd_profile=" + profile)
    if mode:
        cmd.append("--sd_model=" + mode)
    if window:
        cmd.append("--sd_model_window=%d" % window)
    if iterations:
        cmd.append("--sd_iterations=%d" % iterations)
    if trap_reads:
        cmd.append("--sd_trap_reads=%d" % trap_reads)
    if oracle:
        cmd.append("--sd_oracle=" + oracle)
    if filt:
        cmd.append("--benchmark_filter=" + filt)
    if reps:
        cmd.append("--benchmark_repetitions=%d" % reps)
    if min_time is not None:
        cmd.append("--benchmark_min_time=%g" % min_time)
    if out:
        cmd += ["--benchmark_out=" + out, "--benchmark_out_format=json",
                "--benchmark_color=false"]
    return cmd + list(extra)


def shown(cmd):
    """@cmd as a shell would take it back."""
    return " ".join("'%s'" % c if any(ch in c for ch in " |()*?") else c for c in cmd)


def pinned(cmd, pu):
    """@cmd held to PU @pu with taskset (util-linux, in every Debian): not a
    preexec_fn, which is not safe on a thread of a pool. As it is without
    taskset or a PU."""
    return (["taskset", "-c", str(pu)] if pu is not None and shutil.which("taskset")
            else []) + cmd


class Run:
    """One finished run: its results (results.from_doc(), {} if it wrote
    none), the raw JSON document, its exit status and its stderr."""

    def __init__(self, res, doc, returncode, stderr):
        self.res, self.doc, self.returncode, self.stderr = res, doc, returncode, stderr

    @property
    def ok(self):
        return self.returncode == 0

    def last_words(self):
        """The bench's last line on stderr, or its exit status."""
        said = self.stderr.strip().splitlines()
        return said[-1] if said else "exit %d" % self.returncode


def run(cmd, pu=None, echo=False, check=False, out=None, env=None):
    """Run @cmd (command(), without @out: a temporary file is added; with
    it, that file is read back) and return a Run. @echo prints the command
    on stderr first; @check exits the script, with the bench's words, if
    it failed; @env: the bench's environment (None: ours)."""
    if echo:
        print("$ " + shown(cmd), file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="sd-bench-") as tmp:
        path = out
        if path is None:
            path = os.path.join(tmp, "out.json")
            cmd = cmd + ["--benchmark_out=" + path, "--benchmark_out_format=json"]
        proc = subprocess.run(pinned(cmd, pu), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, env=env)
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            doc = None
    r = Run(results.from_doc(doc) if doc else {}, doc, proc.returncode, proc.stderr)
    if check and not r.ok:
        sys.exit("%s failed: %s" % (os.path.basename(cmd[0]), r.last_words()))
    return r


def stream(cmd, on_line):
    """Run @cmd with its stdout and stderr passed line by line to @on_line
    as they come (the bench's stdout is line-buffered); its exit status. On
    Ctrl-C the bench, in our process group, gets the SIGINT too; the
    KeyboardInterrupt goes up after it is reaped."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:
            on_line(line)
        return proc.wait()
    except KeyboardInterrupt:
        proc.kill()
        proc.wait()
        raise


def lines(cmd):
    """@cmd's stdout lines (a listing: --benchmark_list_tests, --sd_machine)
    and its exit status and stderr."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return proc.stdout.splitlines(), proc.returncode, proc.stderr
