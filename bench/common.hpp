// SPDX-License-Identifier: MIT
//
// What every workload family of shootdown-bench shares: its own flags, the
// machine and mm wrappers, the counter helpers and the one registration
// mechanism (SD_BENCH_FAMILY). Public API only: every figure comes from
// sd_stats_*(), sd_machine_info() and the other <shootdown/...> calls.
#ifndef SD_BENCH_COMMON_HPP
#define SD_BENCH_COMMON_HPP

#include <benchmark/benchmark.h>

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <shootdown/shootdown.h>

#include "batch.hpp"

#include "native.hpp"

namespace sdbench {

using benchmark::Counter;
using benchmark::State;

// shootdown-bench's own flags, taken out of argv before Google Benchmark
// sees it (main.cpp, usage()).
struct Options {
	bool main_set = false;          // --sd_set=main: the comparison run's matrix only
	std::vector<unsigned> cpus;     // --sd_cpus=: its CPU counts
	bool oracle = false;            // --sd_oracle=checked: every workload machine checked
	uint64_t trap_reads = 1000000;  // --sd_trap_reads=: trap_dispatch's reads per thread
	uint64_t iterations = 0;        // --sd_iterations=: fixed iterations (0: by min_time)
	bool print_machine = false;     // --sd_machine: print the machine and exit
	// Modelled time (<shootdown/model.h>): every workload machine gets
	// these (make_config()); empty / 0 = the library's default.
	std::string profile;            // --sd_profile=NAME|PATH: sd_machine_config.profile
	std::string model_topology;     // --sd_model_topology=STR: .model_topology
	uint64_t model_window_ns = 0;   // --sd_model_window=NS: .model_window_ns
	unsigned model_flags = 0;       // --sd_model=strict|lax: SD_MACHINE_MODEL_*
	bool any_mechanism = false;     // --sd_any_mechanism: SD_MACHINE_ANY_MECHANISM
	bool patches_set = false;       // --sd_set=patches
};

extern Options g_opt;

// ---- registration: one mechanism, one function per family ----

// Which matrix is being registered: every variant (--sd_set=all), the
// comparison run's (--sd_set=main, at g_opt.cpus), or each reproduced
// patch's workloads at the patch's own CPU counts (--sd_set=patches: up to
// 32, 36 or 64; oversubscribed on the host, meant for modelled time on the
// patch machine's profile).
enum class Set { all, main, patches };

using FamilyFn = void (*)(Set set);

// A family's registration function, run by register_families() in @order
// (lowest first): the order the benchmarks run in, so that a benchmark and
// its yardstick (flush_page/ipi after baseline/signal_roundtrip) run in
// the same placement.
struct FamilyRegistrar {
	FamilyRegistrar(const char *name, int order, FamilyFn fn);
};

#define SD_BENCH_FAMILY(name, order, fn) \
	static const ::sdbench::FamilyRegistrar sd_bench_family_##name(#name, order, fn)

// Run every family's registration function for @set.
void register_families(Set set);

// Register @f as @name, timed in real time. Names carry their arguments
// (<workload>/<strategy>/cpus:<n>[/...]), so parameters go through lambdas.
template <class F>
benchmark::internal::Benchmark *reg(const std::string &name, F f)
{
	benchmark::internal::Benchmark *b = benchmark::RegisterBenchmark(name.c_str(), f);

	if (g_opt.iterations)
		b->Iterations((benchmark::IterationCount)g_opt.iterations);
	return b->UseRealTime();
}

// The next batch's size under --sd_iterations: batch.hpp.
inline uint64_t next_batch(const State &st, uint64_t batch, uint64_t unit = 1)
{
	return sdbench_batch::next_batch(st, batch, unit, g_opt.iterations != 0);
}

inline std::string cpus_tail(unsigned n)
{
	return "/cpus:" + std::to_string(n);
}

// "lru:global" or "lru:percpu": the name component of the machine's
// sd_machine_config.lru, for the workloads that vary it.
const char *lru_name(unsigned lru);

// ---- small helpers ----

constexpr uint64_t kRegion = 0x10000000ull;          // VPN 0x10000: L1 slot 0
constexpr uint64_t kRegionVpn = kRegion >> SD_PAGE_SHIFT;

inline void cpu_relax()
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}

// Skip the benchmark with "@what: <errno>: <sd_last_error()>".
void fail(State &st, const char *what, int err);

// a / b, 0 when b is 0.
inline double ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0.0;
}

inline Counter per_iteration(uint64_t v)
{
	return Counter((double)v, Counter::kAvgIterations);
}

// CPU time of the calling thread, ns.
uint64_t thread_cpu_ns();

struct alignas(64) Line {
	std::atomic<uint64_t> v{0};
	char pad[64 - sizeof(std::atomic<uint64_t>)];
};

// Pin the calling thread for a scope to the @pu-th PU the process may use
// (native::pu_os_index()), then restore.
class Pin {
public:
	explicit Pin(int pu);
	~Pin();
	bool ok() const { return ok_; }
	Pin(const Pin &) = delete;
	Pin &operator=(const Pin &) = delete;

private:
	cpu_set_t saved_;
	bool have_saved_ = false;
	bool ok_ = false;
};

// ---- machines and their figures (all public calls) ----

// The one place workload machines are configured: size, strategy, oracle,
// LRU, and the modelled-time flags (--sd_profile and its two companions).
sd_machine_config make_config(unsigned cpus, sd_oracle_mode oracle,
			      const char *strategy = "broadcast", unsigned lru = SD_LRU_PERCPU);

// 1 if @m has more emulated CPUs than PUs, -1 if it cannot say.
int oversubscribed(const sd_machine *m);

// Whether @m runs strategy @name (the spec's name, options aside), from
// sd_machine_info().strategy.
bool strategy_is(const sd_machine *m, const char *name);

// What every workload machine reports: whether it was oversubscribed and,
// when its oracle checked it, how many stale translations it served.
void report_machine(State &st, const sd_machine *m);

sd_stats cpu_stats(const sd_machine *m, unsigned cpu);
sd_stats all_stats(const sd_machine *m);
sd_stats delta(const sd_stats &after, const sd_stats &before);
double flush_ns_mean(const sd_stats &s);

// Counters every x86 (`ipi`, `gbcast`) workload reports, from the delta @d
// of all CPUs.
void report_ipi_common(State &st, const sd_stats &d);

// ---- modelled time (--sd_profile) ----

// Each CPU's modelled clock at the start of its first body and the end of
// its last one in a measured part, read by the CPU's own thread (exact).
// reset() before the measured part (from the thread that reads span_ns()
// afterwards, with no CPU running); begin()/end() from the CPUs' bodies,
// each touching only its own slot.
class CpuClocks {
public:
	void reset(unsigned nr_cpus);
	void begin(const sd_cpu *c);
	void end(const sd_cpu *c);
	// Max over the CPUs of (last end - first begin), ns; 0 if none ran.
	uint64_t span_ns() const;

private:
	std::vector<uint64_t> first_, last_;
};

// The modelled counters of one measured part, when the machine models time:
//   model_ns            modelled ns per operation (the count real time is
//                       divided by): the part's modelled span / @ops
//   model_slowdown      host seconds per modelled second over the part
//   model_window_waits  times a CPU waited, a window ahead of the slowest
//   model_strict        1 in strict mode, 0 in lax mode
//   model_window_ns     the lax-synchronisation window
//   model_stalls        the part's disturbances: CPUs blocked outside the
//                       library long enough that host time decided the
//                       run (lax: sd_model_info.stalls; strict: seq_stalls).
//                       A row with any is disturbed.
//   model_late          strict mode: CPUs that came back behind the
//                       machine's time (seq_late), after a stall or by the
//                       workload's own order (a CPU whose first event
//                       comes after the others started); 0 in lax mode
//   model_lead_ns       lax mode: the largest lead of a CPU over the slowest
//                       since the machine was created (max_lead_ns; at
//                       most the window plus one step); 0 in strict mode
// Absent (not 0) on a machine that models nothing. The span is the largest
// of: the exact per-CPU span passed to stop() (CpuClocks), @self's own
// clock delta (the calling thread's CPU, exact), and the delta of the
// machine's largest published clock (sd_machine_model_info()).
class ModelSpan {
public:
	// Start of the measured part: samples the clocks and the host time.
	explicit ModelSpan(const sd_machine *m, const sd_cpu *self = nullptr);
	bool on() const { return on_; }
	// End of the measured part. @cpu_span_ns: an exact span if the caller
	// has one (CpuClocks::span_ns()), else 0. Only the first call counts.
	void stop(uint64_t cpu_span_ns = 0);
	// The counters, per @ops operations; @host_s: the host seconds of the
	// measured part when they are not its wall time (manual time), else < 0.
	// Calls stop() if it was not called.
	void report(State &st, double ops, double host_s = -1);
	uint64_t span_ns() const { return span_ns_; }

private:
	struct Sample {
		uint64_t clock_max_ns = 0, window_waits = 0, self_ns = 0;
		uint64_t stalls = 0, late = 0, max_lead_ns = 0;
		std::chrono::steady_clock::time_point t;
	};
	Sample sample() const;

	const sd_machine *m_;
	const sd_cpu *self_;
	bool on_ = false, stopped_ = false, strict_ = false;
	uint64_t window_ns_ = 0;
	Sample a_, b_;
	uint64_t span_ns_ = 0;
};

// One machine, this thread attached as CPU 0 with one mm loaded and
// @pages pages mapped at kRegion and touched. Undone at scope exit.
// --sd_oracle=checked overrides @oracle, as for RunMachine.
class Single {
public:
	Single(unsigned cpus, sd_oracle_mode oracle, uint64_t pages,
	       const char *strategy = "broadcast");
	~Single();
	// False (and the benchmark skipped) if setup failed.
	bool ok(State &st) const;
	sd_machine *m() const { return m_; }
	sd_cpu *cpu() const { return cpu_; }
	sd_mm *mm() const { return mm_; }
	Single(const Single &) = delete;
	Single &operator=(const Single &) = delete;

private:
	sd_machine *m_ = nullptr;
	sd_cpu *cpu_ = nullptr;
	sd_mm *mm_ = nullptr;
	int err_ = 0;
	const char *what_ = "";
};

// A TLB geometry for sd_machine_config; 0 is the default (256 x 8, L1 64).
struct TlbGeometry {
	unsigned sets = 0, ways = 0, l1_entries = 0;
};

// The TLB of the switch-heavy workloads (context_switch, forked_worker):
// 16 sets x 8 ways with a 16-entry L1. Their tasks use 4 pages at the same
// addresses, so with the default's associativity (8 ways) every hit and
// miss is as with the default geometry, but the emulated CR3 load with
// flush, a scan of every entry of the TLB, costs a thirteenth (160 entries
// against 2128). With the default geometry that scan, a few microseconds,
// makes up most of a switch and sits inside the LOADED_MM_SWITCHING window;
// on hardware the PCID flush does not grow with the TLB.
constexpr TlbGeometry kSwitchTlb = { 16, 8, 16 };

// What a RunMachine is built with besides its size.
struct MachineSpec {
	const char *strategy = "broadcast";
	TlbGeometry tlb = {};
	unsigned lru = SD_LRU_PERCPU;   // sd_machine_config.lru
};

// Machines whose CPUs run a function under sd_machine_run(), with @nr_mms
// address spaces of @pages pages each, mapped from this thread as CPU 0.
// --sd_oracle=checked overrides @oracle.
class RunMachine {
public:
	RunMachine(unsigned cpus, sd_oracle_mode oracle, unsigned nr_mms, uint64_t pages,
		   const MachineSpec &spec = {});
	~RunMachine();
	bool ok(State &st) const;
	sd_machine *m() const { return m_; }
	sd_mm *mm(unsigned i) const { return mms_[i % mms_.size()]; }
	RunMachine(const RunMachine &) = delete;
	RunMachine &operator=(const RunMachine &) = delete;

private:
	sd_machine *m_ = nullptr;
	std::vector<sd_mm *> mms_;
	int err_ = 0;
	const char *what_ = "";
};

inline MachineSpec spec_of(const char *strategy)
{
	MachineSpec s;
	s.strategy = strategy;
	return s;
}

// will-it-scale's tlb_flush loop step on @va of @mm, loaded on @c: write the
// page, madvise(DONTNEED) it (one flush), read it again. 0 or the first
// error.
inline int write_dontneed_read(sd_cpu *c, sd_mm *mm, uint64_t va)
{
	int err = sd_access(c, va, SD_WRITE, nullptr);
	if (!err)
		err = sd_madvise_dontneed(c, mm, va, SD_PAGE_SIZE);
	if (!err)
		err = sd_access(c, va, SD_READ, nullptr);
	return err;
}

// The argument of a sd_machine_run() body; workloads that need more derive.
struct RunArg {
	const RunMachine *rm = nullptr;
	uint64_t count = 0;             // per-CPU operations for this run
	std::atomic<int> err{0};
	sd_cpu_fn body = nullptr;       // run_batches(): the body it wraps
	std::atomic<uint64_t> thread_cpu_ns{0};   // CPU time of the CPUs' threads in body
	std::atomic<uint64_t> thread_wall_ns{0};  // their wall time in body
	CpuClocks clocks;               // run_batches(): modelled clocks of the timed runs
};

// In modelled time, one side of a pipe message (a write or a read): its
// system call's entry and exit and half of the profile's pipe_message; 0
// for a profile without pipe_message (context_switch.cpp says why).
uint64_t message_half_ns(const sd_machine *m);

// Keep the first error a CPU (or task) of the run hit in @slot.
void note_first_error(std::atomic<int> &slot, int err);
inline void note_error(RunArg *r, int err)
{
	note_first_error(r->err, err);
}

// What run_batches() measured besides the counters.
struct RunTimes {
	double wall_s = 0;      // wall-clock seconds of all the runs
	double pu_share = 0;    // the CPUs' threads: CPU time / wall time in their bodies
};

// Time batches of @batch iterations, each one sd_machine_run of @body in
// which every CPU does @batch operations (fewer in the last one under
// --sd_iterations: next_batch(); the body reads RunArg::count). Returns the counters' delta, or
// false after reporting an error. @arg: the body's argument, for bodies
// that need more than RunArg (its rm and count are set here); @times: wall
// time, and the share of a PU the CPUs' threads got while running the body:
// near 1 pinned, near PUs/CPUs oversubscribed, less when they slept or other
// processes took their PUs. With a modelled machine it reports model_ns
// (per iteration, as real time), model_slowdown and model_window_waits.
bool run_batches(State &st, RunMachine &rm, sd_cpu_fn body, uint64_t batch, const char *what,
		 sd_stats *d, RunArg *arg = nullptr, RunTimes *times = nullptr);

// The same for workloads of tasks (task.h): each batch of @batch iterations
// (fewer for the last one under --sd_iterations, a multiple of @unit:
// next_batch()) is @create(machine, n) making its tasks for n iterations,
// then one sd_sched_run().
// @create returns 0 or the -errno that stops the run. Modelled time: the
// machine's largest clock over the runs (ModelSpan), per iteration.
bool run_task_batches(State &st, RunMachine &rm,
		      const std::function<int(sd_machine *, uint64_t)> &create, uint64_t batch,
		      const char *what, sd_stats *d, RunTimes *times = nullptr, uint64_t unit = 1);

} // namespace sdbench

#endif
