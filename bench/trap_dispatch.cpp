// SPDX-License-Identifier: MIT
//
// arm64 EL0 MRS emulation without the hook lock: every thread reads an ID
// register through sd_trap(), under each dispatch mode.
//
//   trap_dispatch/{locked,rcu,direct}/threads:T    T emulated CPUs, each reading
//                                            ID_AA64ISAR0_EL1 --sd_trap_reads times
//                                            (all set: T = 1, 2, 4, 8, 16; main: --sd_cpus)
//   trap_dispatch/native:mode=cpuid/threads:T      the x86 counterpart, CPUID on this
//                                            machine (native.cpp), main set only
#include "common.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <string>

namespace sdbench {
namespace {

struct TrapArg {
	std::atomic<uint64_t> cpu_ns{0};
	std::atomic<uint64_t> preempted{0};     // involuntary switches: preemptions, yields
	std::atomic<uint64_t> blocked{0};       // voluntary ones: futex parks
	std::atomic<int> err{0};
	CpuClocks *clocks = nullptr;            // modelled clocks of the timed runs
};

void trap_body(sd_cpu *c, void *p)
{
	auto *a = static_cast<TrapArg *>(p);
	struct rusage r0, r1;
	getrusage(RUSAGE_THREAD, &r0);
	const uint64_t t0 = thread_cpu_ns();
	int err = 0;

	a->clocks->begin(c);
	for (uint64_t i = 0; !err && i < g_opt.trap_reads; i++)
		err = sd_trap(c, SD_ID_AA64ISAR0_EL1(i % 31));
	a->clocks->end(c);
	a->cpu_ns.fetch_add(thread_cpu_ns() - t0, std::memory_order_relaxed);
	getrusage(RUSAGE_THREAD, &r1);
	a->preempted.fetch_add(r1.ru_nivcsw - r0.ru_nivcsw, std::memory_order_relaxed);
	a->blocked.fetch_add(r1.ru_nvcsw - r0.ru_nvcsw, std::memory_order_relaxed);
	if (err)
		a->err.store(err);
}

// trap_dispatch/<mode>/threads:T: T threads (emulated CPUs) each read
// ID_AA64ISAR0_EL1 --sd_trap_reads times (a million). Time is the wall time
// of the run (the MRS emulation patch's "real"); cpu_s is the threads'
// summed CPU time (its "sys").
void BM_trap_dispatch(State &st, sd_trap_dispatch mode, unsigned threads)
{
	// make_config() for the modelled-time flags; no strategy (NULL: the
	// library's default, as SD_MACHINE_CONFIG_INIT has it), default LRU.
	sd_machine_config c = make_config(threads, g_opt.oracle ? SD_ORACLE_CHECKED : SD_ORACLE_OFF,
					  nullptr, SD_LRU_PERCPU);
	sd_machine *m = nullptr;
	double cpu_s = 0, preempted = 0, blocked = 0, wall_s = 0;
	CpuClocks clocks;

	c.trap_dispatch = mode;
	if (int err = sd_machine_create(&c, &m)) {
		st.SkipWithError((std::string("sd_machine_create: ") + sd_last_error()).c_str());
		(void)err;
		return;
	}
	clocks.reset(threads);
	ModelSpan model(m);
	for (auto _ : st) {
		TrapArg a;
		a.clocks = &clocks;
		auto w0 = std::chrono::steady_clock::now();
		int err = sd_machine_run(m, trap_body, &a);
		auto w1 = std::chrono::steady_clock::now();
		if (err || a.err.load()) {
			st.SkipWithError("trap run failed");
			break;
		}
		st.SetIterationTime(std::chrono::duration<double>(w1 - w0).count());
		wall_s += std::chrono::duration<double>(w1 - w0).count();
		cpu_s += (double)a.cpu_ns.load() / 1e9;
		preempted += (double)a.preempted.load();
		blocked += (double)a.blocked.load();
	}
	// Context switches show why time grows: preemptions of a running
	// thread (lock-holder preemption among them) and waits that blocked.
	st.counters["cpu_s"] = Counter(cpu_s, Counter::kAvgIterations);
	st.counters["preemptions"] = Counter(preempted, Counter::kAvgIterations);
	st.counters["blocks"] = Counter(blocked, Counter::kAvgIterations);
	st.counters["reads_per_thread"] = (double)g_opt.trap_reads;
	// Per iteration (one run), in ns: the benchmark's own time is shown in ms.
	model.stop(clocks.span_ns());
	model.report(st, (double)st.iterations(), wall_s);
	report_machine(st, m);
	sd_machine_destroy(m);
}

const char *dispatch_name(sd_trap_dispatch mode)
{
	return mode == SD_TRAP_LOCKED ? "locked" : mode == SD_TRAP_RCU ? "rcu" : "direct";
}

// The three dispatch modes (all set: 1 to 16 threads, 4 and up
// oversubscribed on 2 PUs) and, in the main set, the native twin at a
// hundredth of the reads: each CPUID there is a VM exit of microseconds,
// so 10^4 a thread is already tens of milliseconds, and its time per read
// is the same as at 10^5 (BENCHMARKS.md, "The main job's length"), which
// took a minute of the main job's four on 2 PUs.
void register_trap_dispatch(Set set)
{
	static const std::vector<unsigned> all_threads = { 1, 2, 4, 8, 16 };
	// The MRS rework's table: 1 to 64 threads in a 64-vCPU guest.
	static const std::vector<unsigned> patch_threads = { 1, 2, 4, 8, 16, 32, 64 };
	const std::vector<unsigned> &threads = set == Set::main ? g_opt.cpus
					       : set == Set::patches ? patch_threads : all_threads;

	for (sd_trap_dispatch mode : { SD_TRAP_LOCKED, SD_TRAP_RCU, SD_TRAP_DIRECT }) {
		for (unsigned t : threads)
			benchmark::RegisterBenchmark(("trap_dispatch/" + std::string(dispatch_name(mode)) +
						      "/threads:" + std::to_string(t)).c_str(),
						     [mode, t](State &st) { BM_trap_dispatch(st, mode, t); })
				->UseManualTime()->Iterations(2)->Unit(benchmark::kMillisecond);
	}
	if (set != Set::main)
		return;
	for (unsigned t : threads)
		benchmark::RegisterBenchmark(("trap_dispatch/native:mode=cpuid/threads:" +
					      std::to_string(t)).c_str(),
					     [t](State &st) {
						     native::BM_trap_cpuid(
							     st, t, std::max<uint64_t>(1, g_opt.trap_reads / 100));
					     })
			->UseManualTime()->Iterations(2)->Unit(benchmark::kMillisecond);
}

} // namespace

SD_BENCH_FAMILY(trap_dispatch, 50, register_trap_dispatch);

} // namespace sdbench
