// SPDX-License-Identifier: MIT
//
// Native-kernel twins of the emulated workloads (strategy name `native`):
// the same shapes run on this machine's own kernel, with real threads or
// processes, real mprotect, madvise and pipes. Each reports time per
// operation per worker, the unit its emulated twin reports, so the two can
// be divided within one run. Plus baseline/membarrier, the kernel's own
// IPI broadcast to the CPUs running this process.
#ifndef SD_BENCH_NATIVE_HPP
#define SD_BENCH_NATIVE_HPP

#include <benchmark/benchmark.h>

namespace native {

// Run a fixed --sd_iterations count exactly (batch.hpp); main() sets it.
extern bool exact_iterations;

// mprotect_threaded/native:mode={threads,processes}/cpus:N: N workers, each
// with its own 4 MiB buffer written whole, each iteration one mprotect of
// all of it (read-only, then back): the patch thread's program
// (mprotect_threaded.cpp). Threads share one mm, so every mprotect is a
// shootdown to the other workers' CPUs; processes (the arm64 "skip tlbi
// broadcast" patch's for-each-cpu.sh, each with the program's sleeping
// second thread) never need one.
void BM_mprotect(benchmark::State &st, unsigned workers, bool processes);

// tlb_flush2_threads/native/cpus:N: will-it-scale tlb_flush2, threads of one
// process, each writing a private page, madvise(MADV_DONTNEED)-ing it and
// reading it back (a fault). Reports loops_per_s like the emulated twin.
void BM_tlb_flush2(benchmark::State &st, unsigned workers);

// stress_tlb_shootdown/native: stress-ng --tlb-shootdown's instance on the
// host (bench/stress_tlb_shootdown.cpp gives the source): the parent, its
// min(8, max(2, PUs)) forked children for @seconds a run, the file on
// /dev/shm (tmpfs, as the emulated one). Reports stress-ng's metrics from
// /proc/interrupts (its TLB and CAL lines, summed over CPUs) a second.
void BM_stress_tlb_shootdown(benchmark::State &st, double seconds);

// usemem_fork/native/cpus:4/sweeps:S: usemem_fork's shape on the host's
// kernel: 4 threads, each writing every word of a 16 MiB region of its own
// again and again; thread 0 starts each round with fork() and an exec() of
// /bin/true it waits for, then sweeps its region S times, while the others
// sweep on. Reports pages_per_us (all threads, real time) like the emulated
// twin, and oversubscribed when the host has fewer than 4 PUs.
void BM_usemem_fork(benchmark::State &st, unsigned sweeps);

// tlb_flush{1,3}_threads/native/cpus:N: will-it-scale tlb_flush1 (@shared
// false) and tlb_flush3 (true): tlb_flush2's loop over a 128 MiB file of
// each thread's own in $TMPDIR (else /tmp), mapped MAP_PRIVATE or
// MAP_SHARED. Reports loops_per_s like the emulated twin.
void BM_tlb_flush_file(benchmark::State &st, unsigned workers, bool shared);

// context_switch/native/cpus:N: hackbench's shape with N pairs of processes
// passing a byte back and forth through two pipes; pair i runs on PU
// i % PUs, so every message is a real context switch on that PU. Time per
// switch per pair. With @threads, each pair is two threads of one process
// (the workers are threads then): will-it-scale's context_switch1 in
// threads mode.
void BM_context_switch(benchmark::State &st, unsigned pairs, bool threads = false);

// trap_dispatch/native:mode=cpuid/threads:T: T threads each executing CPUID
// (leaf 7, the feature ID registers) @reads times: the x86 counterpart of an
// arm64 EL0 ID-register read. In a virtual machine every CPUID is a VM exit,
// trapped and emulated per vCPU by the hypervisor with no global lock (the
// "after" shape); on bare metal it does not trap (counter `hypervisor`).
// Manual time: the run's wall time; cpu_s: the threads' summed CPU time.
void BM_trap_cpuid(benchmark::State &st, unsigned threads, uint64_t reads);

// baseline/membarrier: membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), after
// registering, with @targets (0 or 1) other threads of this process
// spinning on PU 1: with one, one kernel IPI round trip to it; with none,
// the system call alone (the kernel IPIs only CPUs running the mm).
void BM_membarrier(benchmark::State &st, unsigned targets = 1);

// component/lock_shared/native/threads:T: T threads, a PU each, taking one
// ticket lock (FIFO, as the kernel's queued spinlock) and incrementing a
// counter on its line, as fast as they can; ns an acquisition as thread 0
// sees it. component/line_shared/native/threads:T: the same with an atomic
// add to one shared word instead of the lock.
void BM_lock_shared(benchmark::State &st, unsigned threads);
void BM_line_shared(benchmark::State &st, unsigned threads);

// PUs the process may use (its affinity mask and cpuset, as hwloc reports
// them at the first call, which main() makes before anything is pinned; at
// least 1).
unsigned nr_pus();

// OS index of the @pu-th of those PUs (modulo their number).
int pu_os_index(unsigned pu);

} // namespace native

#endif
