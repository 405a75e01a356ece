// SPDX-License-Identifier: MIT
//
// shootdown-bench: every libshootdown workload in one Google Benchmark
// executable; its names are a contract the scripts rely on (README,
// "Benchmarks").
//
// Names are <workload>/<strategy>/cpus:<N>[/<arg>:<value>]; the machine's own
// limits are baseline/<what>. All times are wall-clock: real time, except
// remote:refilled, which times its flush calls itself (manual time); counters
// are snake_case. Every benchmark that builds a machine reports
// `oversubscribed` (1 when it has more emulated CPUs than PUs).
//
// The machines these run on move their vCPUs between a near and a far
// placement, so absolute times drift up to 5x between runs: compare the
// benchmarks of one run with each other (scripts/bench-ratios does that,
// repeats, and takes medians), never absolute times across runs.
//
//   baseline/cacheline_roundtrip             one line ping-ponged between PU 0 and PU 1
//   baseline/signal_roundtrip                tgkill + handler ack to a thread spinning on PU 1
//   baseline/membarrier                      membarrier(PRIVATE_EXPEDITED): the kernel's IPI to
//                                            a thread of ours spinning on PU 1 (native.cpp)
//   baseline/array_probe/dependent:{0,1}     bare 64-entry direct-mapped {tag, payload} probe
//   tlb_lookup/l1/cpus:1                     sd_tlb_lookup_l1() hit, dependent chain
//   tlb_lookup/sd_access/cpus:1              public sd_access() hit, dependent chain
//   flush_page/broadcast/cpus:2/remote:busy  strategy flush of 1 page; CPU 1 keeps refilling it
//   flush_page/broadcast/cpus:2/remote:idle  ... CPU 1 idle (its entry is gone after the first)
//   flush_page/broadcast/cpus:2/remote:refilled  ... each flush waits (untimed) until CPU 1 has
//                                            refilled, so every flush removes an entry; manual
//                                            time of the flush call alone (TSC)
//   mprotect_page/broadcast/cpus:2           public sd_mprotect of 1 touched page, CPU 1 busy
//   memory/per_cpu                           bytes per emulated CPU (no time)
//   mprotect_threaded/{broadcast,local}/cpus:{1,2,4,8,16} one mm per CPU: touch, mprotect RO, mprotect RW
//   process_churn/{broadcast,local}/cpus:{1,2,4,8,16} short-lived mms: create, map, touch, unmap, destroy
//   range_flush/broadcast:range={none,ascending,descending}/cpus:2/pages:P  one P-page flush
//   scale/broadcast/cpus:{64,256,1024}       oversubscribed run, oracle checked: no livelock
//
// Native twins (strategy `native`, bench/native.cpp): the same shapes on this
// machine's kernel, time per operation per worker as their emulated twins:
//   mprotect_threaded/native:mode={processes,threads}/cpus:N   real mprotect of a touched page
//   context_switch/native/cpus:N             N pairs of processes, pipes, one PU per pair
//   tlb_flush2_threads/native/cpus:N         real madvise(MADV_DONTNEED), threads of one process
//
// --sd_set=main registers instead the comparison run's matrix (scripts/compare):
// every workload against every strategy that applies at --sd_cpus (default
// 1, 2, PUs, 2x and 4x PUs), natives and baselines included. --sd_oracle=checked
// makes every workload machine check for stale translations (`violations`).
// `shootdown-bench --sd_help` lists these flags.
//
// x86 (`ipi`) and seed 002 (lazy mm_cpumask):
//   flush_page/ipi/cpus:2/remote:{busy,idle}  the ipi strategy's flush of 1 page; CPU 1
//                                            in the same mm reading it (busy: an IPI, a
//                                            real signal, every flush) or idle (lazy: none).
//                                            Registered right after baseline/signal_roundtrip,
//                                            its yardstick.
//   context_switch/ipi:cpumask={eager,lazy}/cpus:{1,2,4,8}[/flush_every:{0,500}]
//                                            hackbench (process mode) shape: tasks, each its
//                                            own mm, claimed from one pool, 2 switches per
//                                            message, 1 flush per 50 switches by default
//   forked_worker/ipi:cpumask={eager,lazy,lazy,trim_ms=1}/cpus:{2,4}
//                                            one worker mm migrates CPU to CPU, and frees
//                                            (a flush) after each migration
//   tlb_flush2_threads/{ipi,broadcast,local}/cpus:{1,2,4,8}
//                                            will-it-scale tlb_flush2, threads of one mm:
//                                            write a page, madvise(DONTNEED) it, read it
//
// AMD INVLPGB (`gbcast`, seed 004):
//   tlb_flush2_threads/{ipi,gbcast}:lru={global,percpu}[,threshold=0]/cpus:{1,2,4,8}
//                                            the same loop; lru=global frees pages under one
//                                            machine-wide lock (vanilla's LRU lock), percpu
//                                            does not (the lru_add_drain removal); gbcast
//                                            goes global on > threshold active CPUs (3
//                                            merged, 0 so 2 CPUs qualify). 4 and 8 are
//                                            oversubscribed on 2 PUs. Untimed warm-up until
//                                            the mm is global (warmup_* counters).
//   tlb_flush2_processes/ipi:lru={global,percpu}/cpus:{1,2,4,8}
//                                            the same loop, every CPU its own mm: what the
//                                            LRU lock costs with nothing else shared
#include <benchmark/benchmark.h>

#include <pthread.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif
#include <sched.h>
#include <signal.h>
#include <linux/futex.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include <shootdown/shootdown.h>
// Internals (shootdown_internal_dep): the TLB's L1 probe, the strategy's
// flush, per-CPU state and the machine's allocations.
#include "strategy/broadcast.h"
#include "strategy/gbcast.h"
#include "mm/flush_ops.h"
#include "strategy/builtin.h"
#include "hw/machine.h"
#include "mm/mm.h"
#include "hw/tlb.h"
}

#include "native.hpp"

namespace {

using benchmark::Counter;
using benchmark::State;

// shootdown-bench's own flags, taken out of argv before Google Benchmark
// sees it (see usage()).
struct Options {
	bool main_set = false;          // --sd_set=main: the comparison run's matrix only
	std::vector<unsigned> cpus;     // --sd_cpus=: its CPU counts
	bool oracle = false;            // --sd_oracle=checked: every workload machine checked
	uint64_t trap_reads = 1000000;  // --sd_trap_reads=: seed 001's reads per thread
	bool print_machine = false;     // --sd_machine: print the machine and exit
};

Options g_opt;

constexpr uint64_t kRegion = 0x10000000ull;          // VPN 0x10000: L1 slot 0
constexpr uint64_t kRegionVpn = kRegion >> SD_PAGE_SHIFT;
constexpr uint64_t kProbeBatch = 1024;                // probes per call of probe_loop()

// ---- the probe loops (bare array and TLB L1) ----

// Entries of the bare direct-mapped array: the same as the default L1 TLB.
constexpr unsigned kProbeEntries = 64;

// The bare array: the same entry type and the same two fields the TLB's L1
// probe reads (array pointer and mask), so the only difference left is what
// sd_tlb_lookup_l1() adds.
struct ProbeArray {
	sd_tlb_entry *e;
	uint64_t mask;
	explicit ProbeArray(uint64_t base)
		: e(new (std::align_val_t(64)) sd_tlb_entry[kProbeEntries]), mask(kProbeEntries - 1)
	{
		for (uint64_t i = 0; i < kProbeEntries; i++) {
			uint64_t key = base + i;
			// Tag as the TLB builds it (ASID 0); a payload with bit 63 clear.
			e[key & mask].tag.store(sd_tlb_tag(key, 0), std::memory_order_relaxed);
			e[key & mask].pte.store((key << 8) | 1, std::memory_order_relaxed);
		}
	}
	~ProbeArray() { operator delete[](e, std::align_val_t(64)); }
	ProbeArray(const ProbeArray &) = delete;
	ProbeArray &operator=(const ProbeArray &) = delete;

	// One probe: what a direct-mapped lookup is when nothing else is added.
	bool probe(uint64_t key, uint64_t *payload) const
	{
		sd_tlb_entry *x = &e[key & mask];

		if (x->tag.load(std::memory_order_relaxed) != sd_tlb_tag(key, 0))
			return false;
		*payload = x->pte.load(std::memory_order_relaxed);
		return true;
	}
};

// The loop the bare array and the TLB share: @n probes, key k = base +
// order[k % 64]. With Dependent, each key also adds (previous payload >> 63),
// which is 0 (no payload has bit 63 set) but which neither the compiler nor
// the CPU knows until the previous payload load has completed, so each probe
// waits on the last. Out of line, so both variants compile to the same
// stand-alone loop. Return: misses (0 when every probe hits).
template <bool Dependent, class Probe>
__attribute__((noinline)) uint64_t probe_loop(uint64_t base, const uint32_t *order, uint64_t n,
					      Probe probe)
{
	uint64_t dep = 0, misses = 0;

	for (uint64_t k = 0; k < n; k++) {
		uint64_t key = base + order[k & (kProbeEntries - 1)];
		uint64_t payload;
		if (Dependent)
			key += dep;
		if (__builtin_expect(probe(key, &payload), 1))
			dep = payload >> 63;
		else
			misses++;
	}
	return misses;
}

// The strategy's flush of one page, called directly as the mm layer calls
// it: m->ops->flush_range(cpu, &(sd_flush_req){ mm, vpn, 1, false }).
inline void flush_page(sd_cpu *cpu, sd_mm *mm, uint64_t vpn)
{
	sd_flush_req req{ mm, vpn, 1, false };
	cpu->m->ops->flush_range(cpu, &req);
}

// @cpu's event counter @id, one relaxed load. Any thread.
inline uint64_t cpu_stat(const sd_cpu *cpu, sd_stat id)
{
	return cpu->stats.counter[id].load(std::memory_order_relaxed);
}

// Per-CPU memory of @m beyond sd_machine_info().bytes_per_cpu.
struct CpuMemory {
	size_t area = 0;           // the per-CPU area (struct sd_cpu + TLB arrays)
	size_t area_mapped = 0;    // the same, rounded up to whole pages as mapped
	size_t extra = 0;          // other per-CPU allocations the machine makes
};

CpuMemory cpu_memory(const sd_machine *m)
{
	CpuMemory out;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t machine_wide = 0;

	out.area = m->cpu_area_size;
	out.area_mapped = (m->cpu_area_size + page - 1) / page * page;
	// m->cpus[] and the topology's pu_of_cpu[]: one pointer each.
	out.extra = sizeof(m->cpus[0]) + sizeof(m->topo.pu_of_cpu[0]);
	if (m->ops == &sd_broadcast_ops) {
		const auto *b = static_cast<const sd_broadcast *>(m->strategy);
		// The arm64 ASID allocator: a line per CPU, one bit of flush_pending.
		out.extra += sizeof(b->asid.percpu[0]);
		machine_wide += sd_cpumask_nwords(&b->asid.flush_pending) * sizeof(uint64_t);
	}
	out.extra += (machine_wide + m->nr_cpus - 1) / m->nr_cpus;
	return out;
}

inline void cpu_relax()
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}

void fail(State &st, const char *what, int err)
{
	std::string msg = std::string(what) + ": " + sd_strerror(err) + ": " + sd_last_error();
	st.SkipWithError(msg.c_str());
}

// ---- pinning plain threads (the baselines) ----

// Pin the calling thread to one PU (OS index) for a scope, then restore.
class Pin {
public:
	explicit Pin(int pu)
	{
		cpu_set_t set;

		have_saved_ = !pthread_getaffinity_np(pthread_self(), sizeof(saved_), &saved_);
		CPU_ZERO(&set);
		CPU_SET(pu, &set);
		ok_ = !pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	}
	~Pin()
	{
		if (have_saved_)
			pthread_setaffinity_np(pthread_self(), sizeof(saved_), &saved_);
	}
	bool ok() const { return ok_; }
	Pin(const Pin &) = delete;
	Pin &operator=(const Pin &) = delete;

private:
	cpu_set_t saved_;
	bool have_saved_ = false;
	bool ok_ = false;
};

struct alignas(64) Line {
	std::atomic<uint64_t> v{0};
	char pad[64 - sizeof(std::atomic<uint64_t>)];
};

// A fixed permutation of 0..63: the order the probe loops visit the entries.
const uint32_t *probe_order()
{
	static const std::vector<uint32_t> order = [] {
		std::vector<uint32_t> o(kProbeEntries);
		std::iota(o.begin(), o.end(), 0u);
		std::shuffle(o.begin(), o.end(), std::mt19937(42));
		return o;
	}();
	return order.data();
}

// ---- baselines ----

// One cache line flipped between PU 0 (this thread) and PU 1 (a helper):
// each iteration is one round trip, two line transfers.
void BM_cacheline_roundtrip(State &st)
{
	auto line = std::make_unique<Line>();
	Line stop;
	std::atomic<int> pinned1{-1};
	Pin pin(0);

	std::thread pong([&] {
		Pin p(1);
		uint64_t expect = 1;

		pinned1.store(p.ok());
		for (;;) {
			uint64_t v;
			while ((v = line->v.load(std::memory_order_acquire)) != expect) {
				if (stop.v.load(std::memory_order_relaxed))
					return;
				cpu_relax();
			}
			line->v.store(expect + 1, std::memory_order_release);
			expect += 2;
		}
	});
	uint64_t v = 0;
	auto round_trip = [&] {
		line->v.store(v + 1, std::memory_order_release);
		while (line->v.load(std::memory_order_acquire) != v + 2)
			cpu_relax();
		v += 2;
	};
	for (int i = 0; i < 1000; i++)          // warm up: the helper is running and pinned
		round_trip();
	for (auto _ : st)
		round_trip();
	stop.v.store(1);
	pong.join();
	if (!pin.ok() || pinned1.load() != 1)
		st.SkipWithError("could not pin to PU 0 and PU 1");
	st.counters["oversubscribed"] = 0;
}

std::atomic<uint64_t> g_signal_acks{0};

void ack_handler(int)
{
	g_signal_acks.fetch_add(1, std::memory_order_release);
}

// tgkill(SIGRTMIN+5) to a thread spinning on PU 1; its handler bumps an
// atomic that this thread waits for.
void BM_signal_roundtrip(State &st)
{
	const int sig = SIGRTMIN + 5;
	struct sigaction sa, old;
	Line stop;
	std::atomic<int> tid{0};
	std::atomic<int> pinned1{-1};
	Pin pin(0);

	std::memset(&sa, 0, sizeof(sa));
	sa.sa_handler = ack_handler;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(sig, &sa, &old);
	std::thread target([&] {
		Pin p(1);
		pinned1.store(p.ok());
		tid.store((int)syscall(SYS_gettid));
		while (!stop.v.load(std::memory_order_relaxed))
			cpu_relax();
	});
	while (!tid.load())
		cpu_relax();
	const pid_t pid = getpid();
	auto round_trip = [&] {
		uint64_t before = g_signal_acks.load(std::memory_order_relaxed);
		syscall(SYS_tgkill, pid, tid.load(std::memory_order_relaxed), sig);
		while (g_signal_acks.load(std::memory_order_acquire) == before)
			cpu_relax();
	};
	for (int i = 0; i < 100; i++)
		round_trip();
	for (auto _ : st)
		round_trip();
	stop.v.store(1);
	target.join();
	sigaction(sig, &old, nullptr);
	if (!pin.ok() || pinned1.load() != 1)
		st.SkipWithError("could not pin to PU 0 and PU 1");
	st.counters["oversubscribed"] = 0;
}

// A bare 64-entry direct-mapped array of {tag, payload}: the floor for a
// TLB hit. Time per probe.
void BM_array_probe(State &st)
{
	const int dependent = (int)st.range(0);
	Pin pin(0);
	ProbeArray a(kRegionVpn);
	auto probe = [&a](uint64_t key, uint64_t *payload) { return a.probe(key, payload); };
	uint64_t misses = 0;

	while (st.KeepRunningBatch(kProbeBatch)) {
		misses += dependent ? probe_loop<true>(kRegionVpn, probe_order(), kProbeBatch, probe)
				    : probe_loop<false>(kRegionVpn, probe_order(), kProbeBatch, probe);
	}
	st.counters["misses"] = (double)misses;
	st.counters["oversubscribed"] = 0;
}

// ---- machines ----

sd_machine_config make_config(unsigned cpus, sd_oracle_mode oracle,
			      const char *strategy = "broadcast")
{
	sd_machine_config cfg = SD_MACHINE_CONFIG_INIT;
	cfg.nr_cpus = cpus;
	cfg.strategy = strategy;
	cfg.oracle = oracle;
	return cfg;
}

int oversubscribed(const sd_machine *m)
{
	struct sd_machine_info info;
	return sd_machine_info(m, &info) ? -1 : info.oversubscribed;
}

// What every workload machine reports: whether it was oversubscribed and,
// when its oracle checked it, how many stale translations it served.
void report_machine(State &st, const sd_machine *m)
{
	struct sd_machine_info info;

	st.counters["oversubscribed"] = oversubscribed(m);
	if (sd_machine_info(m, &info))
		return;
	st.counters["pinned"] = info.all_pinned;
	if (info.oracle == SD_ORACLE_CHECKED)
		st.counters["violations"] = (double)sd_oracle_violations(m);
}

sd_stats cpu_stats(const sd_machine *m, unsigned cpu)
{
	sd_stats s = SD_STATS_INIT;
	sd_stats_cpu(m, cpu, &s);
	return s;
}

sd_stats all_stats(const sd_machine *m)
{
	sd_stats s = SD_STATS_INIT;
	sd_stats_snapshot(m, &s);
	return s;
}

sd_stats delta(const sd_stats &after, const sd_stats &before)
{
	sd_stats d = SD_STATS_INIT;
	sd_stats_delta(&after, &before, &d);
	return d;
}

double flush_ns_mean(const sd_stats &s)
{
	uint64_t n = s.counter[SD_STAT_FLUSH];
	return n ? (double)s.flush_ns_total / (double)n : 0.0;
}

// One machine, this thread attached as CPU 0 with one mm loaded and
// @pages pages mapped at kRegion and touched. Undone at scope exit.
class Single {
public:
	Single(unsigned cpus, sd_oracle_mode oracle, uint64_t pages,
	       const char *strategy = "broadcast")
	{
		sd_machine_config cfg = make_config(cpus, oracle, strategy);

		if ((err_ = sd_machine_create(&cfg, &m_))) {
			what_ = "sd_machine_create";
			return;
		}
		if ((err_ = sd_cpu_attach(m_, 0, &cpu_))) {
			what_ = "sd_cpu_attach";
			return;
		}
		if ((err_ = sd_mm_create(m_, &mm_))) {
			what_ = "sd_mm_create";
			return;
		}
		if ((err_ = sd_mmap(cpu_, mm_, kRegion, pages * SD_PAGE_SIZE,
				    SD_PROT_READ | SD_PROT_WRITE))) {
			what_ = "sd_mmap";
			return;
		}
		if ((err_ = sd_switch_mm(cpu_, mm_))) {
			what_ = "sd_switch_mm";
			return;
		}
		for (uint64_t p = 0; p < pages && !err_; p++)
			err_ = sd_access(cpu_, kRegion + p * SD_PAGE_SIZE, SD_WRITE, nullptr);
		if (err_)
			what_ = "sd_access";
	}
	~Single()
	{
		if (cpu_) {
			sd_switch_mm(cpu_, nullptr);
			sd_cpu_detach(cpu_);
		}
		if (mm_)
			sd_mm_destroy(mm_);
		if (m_)
			sd_machine_destroy(m_);
	}
	// False (and the benchmark skipped) if setup failed.
	bool ok(State &st) const
	{
		if (err_)
			fail(st, what_, err_);
		return !err_;
	}
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

// ---- TLB hit lookups ----

// sd_tlb_lookup_l1() hits, each waiting on the last: the same loop as
// baseline/array_probe/dependent:1 over the CPU's real L1 TLB.
void BM_tlb_lookup_l1(State &st)
{
	Single s(1, SD_ORACLE_OFF, kProbeEntries);
	uint64_t misses = 0;

	if (!s.ok(st))
		return;
	sd_tlb *tlb = &s.cpu()->tlb;
	const uint16_t asid = s.cpu()->asid;
	auto probe = [tlb, asid](uint64_t vpn, uint64_t *pte) {
		sd_tlb_hit hit;
		if (!sd_tlb_lookup_l1(tlb, vpn, asid, false, &hit))
			return false;
		*pte = hit.pte;
		return true;
	};
	while (st.KeepRunningBatch(kProbeBatch))
		misses += probe_loop<true>(kRegionVpn, probe_order(), kProbeBatch, probe);
	st.counters["misses"] = (double)misses;
	st.counters["oversubscribed"] = oversubscribed(s.m());
}

// The public access path on an attached CPU, oracle off: sd_access() hits on
// 64 pages (one per L1 slot), each address waiting on the last frame number.
void BM_tlb_lookup_sd_access(State &st)
{
	Single s(1, SD_ORACLE_OFF, kProbeEntries);
	const uint32_t *order = probe_order();
	uint64_t pfn = 0, k = 0, errors = 0;

	if (!s.ok(st))
		return;
	sd_stats before = cpu_stats(s.m(), 0);
	while (st.KeepRunningBatch(kProbeBatch)) {
		for (uint64_t i = 0; i < kProbeBatch; i++, k++) {
			// pfn < 2^24, so pfn >> 63 is 0, but only once the last access returned.
			uint64_t va = kRegion + ((uint64_t)order[k % kProbeEntries] << SD_PAGE_SHIFT) +
				      ((pfn >> 63) << SD_PAGE_SHIFT);
			errors += sd_access(s.cpu(), va, SD_READ, &pfn) != 0;
		}
	}
	sd_stats d = delta(cpu_stats(s.m(), 0), before);
	double lookups = (double)d.counter[SD_STAT_TLB_HIT] + (double)d.counter[SD_STAT_TLB_MISS];
	st.counters["errors"] = (double)errors;
	st.counters["tlb_misses"] = (double)d.counter[SD_STAT_TLB_MISS];
	st.counters["l1_hit_fraction"] = lookups ? (double)d.counter[SD_STAT_TLB_L1_HIT] / lookups : 0;
	st.counters["oversubscribed"] = oversubscribed(s.m());
}

// ---- one page, two CPUs ----

// A 2-CPU machine, oracle off. This thread is CPU 0 with the mm loaded and
// one page touched; a helper thread is CPU 1 in the same mm. Busy: the
// helper reads the page in a loop, so every flush finds (and removes) an
// entry in its TLB and it refills. Idle: it touches the page once, goes idle
// (lazy mode, its TLB untouched) and waits.
class TwoCpuPage {
public:
	explicit TwoCpuPage(bool busy, const char *strategy = "broadcast")
		: s_(2, SD_ORACLE_OFF, 1, strategy)
	{
		if (s_.m() == nullptr || s_.mm() == nullptr)
			return;
		helper_ = std::thread([this, busy] { run(busy); });
		while (!ready_.v.load(std::memory_order_acquire))
			cpu_relax();
	}
	~TwoCpuPage()
	{
		stop_.v.store(1, std::memory_order_relaxed);
		if (helper_.joinable())
			helper_.join();
	}
	bool ok(State &st) const
	{
		if (!s_.ok(st))
			return false;
		if (helper_err_) {
			fail(st, "helper CPU 1", helper_err_);
			return false;
		}
		return true;
	}
	sd_machine *m() const { return s_.m(); }
	sd_cpu *cpu() const { return s_.cpu(); }
	sd_mm *mm() const { return s_.mm(); }
	sd_cpu *remote() const { return remote_; }

private:
	void run(bool busy)
	{
		sd_cpu *c = nullptr;
		int err = sd_cpu_attach(s_.m(), 1, &c);

		remote_ = c;
		if (!err)
			err = sd_switch_mm(c, s_.mm());
		if (!err)
			err = sd_access(c, kRegion, SD_READ, nullptr);
		if (!err && !busy)
			err = sd_cpu_idle(c);
		helper_err_ = err;
		ready_.v.store(1, std::memory_order_release);
		if (!err && busy) {
			while (!stop_.v.load(std::memory_order_relaxed))
				sd_access(c, kRegion, SD_READ, nullptr);
		} else {
			while (!stop_.v.load(std::memory_order_relaxed))
				cpu_relax();
		}
		if (c)
			sd_cpu_detach(c);
	}

	Single s_;
	sd_cpu *remote_ = nullptr;      // written before ready_ is released
	std::thread helper_;
	Line ready_, stop_;
	int helper_err_ = 0;
};

void report_two_cpu(State &st, const TwoCpuPage &t, const sd_stats &c0, const sd_stats &c1)
{
	st.counters["remote_invalidations"] =
		Counter((double)c0.counter[SD_STAT_REMOTE_INVAL], Counter::kAvgIterations);
	st.counters["tlbi_ops"] = Counter((double)c0.counter[SD_STAT_TLBI_OP], Counter::kAvgIterations);
	st.counters["tlb_fills"] = Counter((double)c1.counter[SD_STAT_TLB_FILL], Counter::kAvgIterations);
	st.counters["tlb_fills_raced"] =
		Counter((double)c1.counter[SD_STAT_TLB_FILL_RACED], Counter::kAvgIterations);
	st.counters["oversubscribed"] = oversubscribed(t.m());
}

// The x86 side of a two-CPU flush: IPIs sent by CPU 0, and what CPU 1 did
// with them, per iteration.
void report_two_cpu_ipi(State &st, const sd_stats &c0, const sd_stats &c1)
{
	auto per_iter = [](uint64_t v) { return Counter((double)v, Counter::kAvgIterations); };

	st.counters["ipis_sent"] = per_iter(c0.counter[SD_STAT_IPI_SENT]);
	st.counters["ipis_received"] = per_iter(c1.counter[SD_STAT_IPI_RECV]);
	st.counters["ipis_deferred"] = per_iter(c1.counter[SD_STAT_IPI_DEFERRED]);
	st.counters["lazy_cpus_skipped"] = per_iter(c0.counter[SD_STAT_LAZY_SKIP]);
	st.counters["remote_flushes_partial"] = per_iter(c1.counter[SD_STAT_FLUSH_PARTIAL]);
	st.counters["remote_flushes_full"] = per_iter(c1.counter[SD_STAT_FLUSH_FULL]);
	st.counters["remote_flushes_skipped_gen"] = per_iter(c1.counter[SD_STAT_FLUSH_GEN_SKIP]);
}

// The strategy's flush of one page, called as the mm layer calls it.
void BM_flush_page(State &st, bool busy, const char *strategy = "broadcast")
{
	TwoCpuPage t(busy, strategy);

	if (!t.ok(st))
		return;
	sd_stats b0 = cpu_stats(t.m(), 0), b1 = cpu_stats(t.m(), 1);
	for (auto _ : st)
		flush_page(t.cpu(), t.mm(), kRegionVpn);
	sd_stats d0 = delta(cpu_stats(t.m(), 0), b0), d1 = delta(cpu_stats(t.m(), 1), b1);
	report_two_cpu(st, t, d0, d1);
	if (t.m()->ops == &sd_ipi_ops)
		report_two_cpu_ipi(st, d0, d1);
}

// ---- a cheap wall-clock for one short call (remote:refilled) ----

// A raw timestamp: the TSC on x86 (constant and nonstop on the machines this
// runs on; lscpu shows constant_tsc), the monotonic clock in ns elsewhere.
inline uint64_t ticks()
{
#if defined(__x86_64__) || defined(__i386__)
	return __rdtsc();
#else
	return (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
		       std::chrono::steady_clock::now().time_since_epoch())
		.count();
#endif
}

// A timestamp that neither earlier nor later instructions cross.
inline uint64_t ticks_fenced()
{
#if defined(__x86_64__) || defined(__i386__)
	_mm_lfence();
	uint64_t t = __rdtsc();
	_mm_lfence();
	return t;
#else
	std::atomic_thread_fence(std::memory_order_seq_cst);
	uint64_t t = ticks();
	std::atomic_thread_fence(std::memory_order_seq_cst);
	return t;
#endif
}

// Ticks per ns, measured once against steady_clock.
double ticks_per_ns()
{
	static const double r = [] {
		auto t0 = std::chrono::steady_clock::now();
		uint64_t c0 = ticks();
		std::this_thread::sleep_for(std::chrono::milliseconds(20));
		uint64_t c1 = ticks();
		auto t1 = std::chrono::steady_clock::now();
		return (double)(c1 - c0) /
		       (double)std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
	}();
	return r;
}

// Each iteration waits, untimed, until CPU 1 has refilled the page (its
// tlb_fills counter moved), then times the strategy's flush alone: every
// flush removes an entry that the remote CPU has just written, the worst
// case for the lines it must fetch. The timer's own cost is included (it is
// reported as timer_ns, measured on an empty region).
void BM_flush_page_refilled(State &st)
{
	TwoCpuPage t(true);

	if (!t.ok(st))
		return;
	const double per_ns = ticks_per_ns();
	double timer_ns = 1e18;
	for (int i = 0; i < 1000; i++) {
		uint64_t a = ticks_fenced(), b = ticks_fenced();
		timer_ns = std::min(timer_ns, (double)(b - a) / per_ns);
	}
	sd_cpu *remote = t.remote();
	// Prime: one untimed flush, so the first wait has a refill to see.
	uint64_t fills = cpu_stat(remote, SD_STAT_TLB_FILL);
	flush_page(t.cpu(), t.mm(), kRegionVpn);
	sd_stats b0 = cpu_stats(t.m(), 0), b1 = cpu_stats(t.m(), 1);
	// The untimed waits can dwarf the timed flushes when other processes
	// hold PU 1; give up rather than run for minutes.
	// A refill that does not come within 200 us is given up on (counted in
	// refill_timeouts): either CPU 1 lost its PU, or its entry outlived the
	// flush, so it keeps hitting and never misses.
	const auto start = std::chrono::steady_clock::now();
	const auto deadline = start + std::chrono::seconds(10);
	const uint64_t patience = (uint64_t)(200e3 * per_ns);
	uint64_t timeouts = 0;
	bool late = false;
	for (auto _ : st) {
		uint64_t now;
		const uint64_t wait0 = ticks();
		for (unsigned spins = 0; (now = cpu_stat(remote, SD_STAT_TLB_FILL)) == fills;) {
			cpu_relax();
			if (++spins % 256 == 0 && ticks() - wait0 > patience) {
				timeouts++;
				break;
			}
		}
		if (timeouts && timeouts % 1024 == 0 && std::chrono::steady_clock::now() > deadline) {
			late = true;
			break;
		}
		fills = now;
		uint64_t c0 = ticks_fenced();
		flush_page(t.cpu(), t.mm(), kRegionVpn);
		uint64_t c1 = ticks_fenced();
		st.SetIterationTime((double)(c1 - c0) / per_ns * 1e-9);
	}
	if (late) {
		st.SkipWithError("CPU 1 stopped refilling: over 10 s spent waiting (machine busy?)");
		return;
	}
	const auto wall = std::chrono::steady_clock::now() - start;
	report_two_cpu(st, t, delta(cpu_stats(t.m(), 0), b0), delta(cpu_stats(t.m(), 1), b1));
	st.counters["timer_ns"] = timer_ns;
	st.counters["refill_timeouts"] = (double)timeouts;
	// Wall time of a whole iteration: the remote's miss, walk and refill
	// plus this flush.
	st.counters["cycle_ns"] = Counter(
		(double)std::chrono::duration_cast<std::chrono::nanoseconds>(wall).count(),
		Counter::kAvgIterations);
}

// The public sd_mprotect() of one touched page, flipping RO / RW, CPU 1 busy.
void BM_mprotect_page(State &st)
{
	TwoCpuPage t(true);
	unsigned i = 0;
	int err = 0;

	if (!t.ok(st))
		return;
	sd_stats b0 = cpu_stats(t.m(), 0), b1 = cpu_stats(t.m(), 1);
	for (auto _ : st) {
		unsigned prot = (i++ & 1) ? SD_PROT_READ | SD_PROT_WRITE : SD_PROT_READ;
		err |= sd_mprotect(t.cpu(), t.mm(), kRegion, SD_PAGE_SIZE, prot);
	}
	sd_stats d0 = delta(cpu_stats(t.m(), 0), b0);
	report_two_cpu(st, t, d0, delta(cpu_stats(t.m(), 1), b1));
	st.counters["flushes"] = Counter((double)d0.counter[SD_STAT_FLUSH], Counter::kAvgIterations);
	st.counters["flush_ns"] = flush_ns_mean(d0);
	if (err)
		st.SkipWithError("sd_mprotect failed");
}

// ---- memory ----

long rss_bytes()
{
	long size = 0, resident = 0;
	FILE *f = std::fopen("/proc/self/statm", "r");

	if (!f)
		return -1;
	if (std::fscanf(f, "%ld %ld", &size, &resident) != 2)
		resident = -1;
	std::fclose(f);
	return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

// Resident bytes added by creating a default-geometry machine of @cpus CPUs.
long rss_delta(unsigned cpus, int *err)
{
	sd_machine_config cfg = make_config(cpus, SD_ORACLE_OFF);
	sd_machine *m = nullptr;
	long before = rss_bytes();

	*err = sd_machine_create(&cfg, &m);
	long after = rss_bytes();
	if (!*err)
		sd_machine_destroy(m);
	return after - before;
}

// Bytes per emulated CPU at the default geometry: what the machine reports,
// what else it allocates per CPU, and the resident-set growth of creating
// 64- and 128-CPU machines as a cross-check. Time: one machine creation.
void BM_memory_per_cpu(State &st)
{
	struct sd_machine_info info{};
	CpuMemory mem;
	int err = 0;

	for (auto _ : st) {
		sd_machine *m = nullptr;
		if ((err = sd_machine_create(nullptr, &m)))
			break;
		sd_machine_info(m, &info);
		mem = cpu_memory(m);
		sd_machine_destroy(m);
	}
	if (err) {
		fail(st, "sd_machine_create", err);
		return;
	}
	int e64 = 0, e128 = 0;
	long d64 = rss_delta(64, &e64);
	long d128 = rss_delta(128, &e128);
	if (e64 || e128) {
		fail(st, "sd_machine_create(64/128 CPUs)", e64 ? e64 : e128);
		return;
	}
	st.counters["bytes_per_cpu"] = (double)info.bytes_per_cpu;
	st.counters["bytes_per_cpu_mapped"] = (double)mem.area_mapped;
	st.counters["bytes_per_cpu_extra"] = (double)mem.extra;
	st.counters["bytes_per_cpu_total"] = (double)(mem.area_mapped + mem.extra);
	st.counters["rss_bytes_per_cpu_64"] = (double)d64 / 64.0;
	st.counters["rss_marginal_bytes_per_cpu"] = (double)(d128 - d64) / 64.0;
	st.counters["tlb_entries"] =
		(double)info.tlb_l1_entries + (double)info.tlb_sets * (double)info.tlb_ways;
	st.counters["oversubscribed"] = 0;
}

// ---- many CPUs ----

// A TLB geometry for sd_machine_config; 0 is the default (256 x 8, L1 64).
struct TlbGeometry {
	unsigned sets = 0, ways = 0, l1_entries = 0;
};

// Machines whose CPUs run a function under sd_machine_run(), with @nr_mms
// address spaces of @pages pages each, mapped from this thread as CPU 0.
class RunMachine {
public:
	RunMachine(unsigned cpus, sd_oracle_mode oracle, unsigned nr_mms, uint64_t pages,
		   const char *strategy = "broadcast", TlbGeometry tlb = {})
		: mms_(nr_mms, nullptr)
	{
		sd_machine_config cfg = make_config(cpus, g_opt.oracle ? SD_ORACLE_CHECKED : oracle,
						    strategy);
		sd_cpu *cpu = nullptr;

		cfg.tlb_sets = tlb.sets;
		cfg.tlb_ways = tlb.ways;
		cfg.tlb_l1_entries = tlb.l1_entries;

		if ((err_ = sd_machine_create(&cfg, &m_))) {
			what_ = "sd_machine_create";
			return;
		}
		if ((err_ = sd_cpu_attach(m_, 0, &cpu))) {
			what_ = "sd_cpu_attach";
			return;
		}
		for (auto &mm : mms_) {
			if ((err_ = sd_mm_create(m_, &mm))) {
				what_ = "sd_mm_create";
				break;
			}
			if ((err_ = sd_mmap(cpu, mm, kRegion, pages * SD_PAGE_SIZE,
					    SD_PROT_READ | SD_PROT_WRITE))) {
				what_ = "sd_mmap";
				break;
			}
		}
		sd_cpu_detach(cpu);
	}
	~RunMachine()
	{
		for (auto mm : mms_)
			if (mm)
				sd_mm_destroy(mm);
		if (m_)
			sd_machine_destroy(m_);
	}
	bool ok(State &st) const
	{
		if (err_)
			fail(st, what_, err_);
		return !err_;
	}
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

// a / b, 0 when b is 0.
inline double ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0.0;
}

struct RunArg {
	const RunMachine *rm;
	uint64_t count;                 // per-CPU operations for this run
	std::atomic<int> err{0};
	sd_cpu_fn body = nullptr;       // run_batches(): the body it wraps
	std::atomic<uint64_t> thread_cpu_ns{0};   // CPU time of the CPUs' threads in body
	std::atomic<uint64_t> thread_wall_ns{0};  // their wall time in body
};

inline uint64_t thread_cpu_ns()
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// run_batches()' body: the real one, timed by the thread's CPU and wall clocks.
void timed_body(sd_cpu *c, void *p)
{
	auto *r = static_cast<RunArg *>(p);
	const auto w0 = std::chrono::steady_clock::now();
	const uint64_t t0 = thread_cpu_ns();

	r->body(c, p);
	r->thread_cpu_ns.fetch_add(thread_cpu_ns() - t0, std::memory_order_relaxed);
	r->thread_wall_ns.fetch_add(
		(uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
			std::chrono::steady_clock::now() - w0).count(),
		std::memory_order_relaxed);
}

void note_error(RunArg *r, int err)
{
	if (err) {
		int expected = 0;
		r->err.compare_exchange_strong(expected, err);
	}
}

constexpr unsigned kScaleMms = 4;
constexpr uint64_t kScalePages = 4;

// The scale body: switch to one of 4 shared mms, read 4 pages; every 8th CPU
// flips one page RO/RW four times (four broadcasts to every CPU); read again.
void scale_body(sd_cpu *c, void *p)
{
	auto *r = static_cast<RunArg *>(p);
	unsigned id = sd_cpu_id(c);
	sd_mm *mm = r->rm->mm(id);
	int err = sd_switch_mm(c, mm);

	for (uint64_t pg = 0; !err && pg < kScalePages; pg++)
		err = sd_access(c, kRegion + pg * SD_PAGE_SIZE, SD_READ, nullptr);
	if (id % 8 == 0) {
		uint64_t va = kRegion + ((id / 8) % kScalePages) * SD_PAGE_SIZE;
		for (unsigned j = 0; !err && j < 4; j++)
			err = sd_mprotect(c, mm, va, SD_PAGE_SIZE,
					  (j & 1) ? SD_PROT_READ | SD_PROT_WRITE : SD_PROT_READ);
	}
	for (uint64_t pg = 0; !err && pg < kScalePages; pg++)
		err = sd_access(c, kRegion + pg * SD_PAGE_SIZE, SD_READ, nullptr);
	note_error(r, err);
	sd_switch_mm(c, nullptr);
}

// A whole oversubscribed run per iteration, oracle checked: it must end (no
// livelock) with no violation.
void BM_scale(State &st, unsigned cpus)
{
	RunMachine rm(cpus, SD_ORACLE_CHECKED, kScaleMms, kScalePages);

	if (!rm.ok(st))
		return;
	RunArg r;
	r.rm = &rm;
	sd_stats before = all_stats(rm.m());
	int err = 0;
	for (auto _ : st) {
		err = sd_machine_run(rm.m(), scale_body, &r);
		if (err || r.err.load())
			break;
	}
	if (err || r.err.load()) {
		fail(st, "scale run", err ? err : r.err.load());
		return;
	}
	sd_stats d = delta(all_stats(rm.m()), before);
	st.counters["flushes"] = Counter((double)d.counter[SD_STAT_FLUSH], Counter::kAvgIterations);
	st.counters["tlbi_ops"] = Counter((double)d.counter[SD_STAT_TLBI_OP], Counter::kAvgIterations);
	st.counters["remote_invalidations"] =
		Counter((double)d.counter[SD_STAT_REMOTE_INVAL], Counter::kAvgIterations);
	st.counters["violations"] = (double)sd_oracle_violations(rm.m());
	st.counters["flush_ns"] = flush_ns_mean(d);
	report_machine(st, rm.m());
}

// Seed 000's shape (examples/compare.c): each CPU its own mm; touch the page
// (write), mprotect RO, mprotect RW. Time per mprotect as each CPU sees it:
// a batch of iterations is one sd_machine_run in which every CPU does that
// many mprotects, so wall time / batch = time per mprotect.
void mprotect_threaded_body(sd_cpu *c, void *p)
{
	auto *r = static_cast<RunArg *>(p);
	sd_mm *mm = r->rm->mm(sd_cpu_id(c));
	int err = sd_switch_mm(c, mm);

	for (uint64_t i = 0; !err && i < r->count; i += 2) {
		err = sd_access(c, kRegion, SD_WRITE, nullptr);
		if (!err)
			err = sd_mprotect(c, mm, kRegion, SD_PAGE_SIZE, SD_PROT_READ);
		if (!err)
			err = sd_mprotect(c, mm, kRegion, SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE);
	}
	note_error(r, err);
	sd_switch_mm(c, nullptr);
}

constexpr uint64_t kMprotectBatch = 2000;

// What run_batches() measured besides the counters.
struct RunTimes {
	double wall_s = 0;      // wall-clock seconds of all the runs
	double pu_share = 0;    // the CPUs' threads: CPU time / wall time in their bodies
};

// Time batches of @batch iterations, each one sd_machine_run of @body in
// which every CPU does @batch operations. Returns the counters' delta, or
// false after reporting an error. @arg: the body's argument, for bodies
// that need more than RunArg (its rm and count are set here); @times: wall
// time, and the share of a PU the CPUs' threads got while running the body:
// near 1 pinned, near PUs/CPUs oversubscribed, less when they slept or other
// processes took their PUs.
bool run_batches(State &st, RunMachine &rm, sd_cpu_fn body, uint64_t batch, const char *what,
		 sd_stats *d, RunArg *arg = nullptr, RunTimes *times = nullptr)
{
	RunArg own;
	RunArg &r = arg ? *arg : own;
	r.rm = &rm;
	r.count = batch;
	r.body = body;
	sd_stats before = all_stats(rm.m());
	int err = 0;
	const auto t0 = std::chrono::steady_clock::now();
	while (st.KeepRunningBatch(batch)) {
		if (!err && !r.err.load())
			err = sd_machine_run(rm.m(), timed_body, &r);
	}
	if (times) {
		times->wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
		times->pu_share = ratio(r.thread_cpu_ns.load(), r.thread_wall_ns.load());
	}
	if (err || r.err.load()) {
		fail(st, what, err ? err : r.err.load());
		return false;
	}
	*d = delta(all_stats(rm.m()), before);
	return true;
}

void BM_mprotect_threaded(State &st, const char *strategy, unsigned cpus)
{
	RunMachine rm(cpus, SD_ORACLE_OFF, cpus, 1, strategy);
	sd_stats d = SD_STATS_INIT;

	if (!rm.ok(st) ||
	    !run_batches(st, rm, mprotect_threaded_body, kMprotectBatch, "mprotect_threaded run", &d))
		return;
	uint64_t flushes = d.counter[SD_STAT_FLUSH];
	st.counters["flush_ns"] = flush_ns_mean(d);
	st.counters["remote_invalidations_per_flush"] =
		flushes ? (double)d.counter[SD_STAT_REMOTE_INVAL] / (double)flushes : 0;
	st.counters["flushes"] = Counter((double)flushes, Counter::kAvgIterations);
	st.counters["local_only_flushes_per_flush"] =
		flushes ? (double)d.counter[SD_STAT_LOCAL_ONLY_FLUSH] / (double)flushes : 0;
	st.counters["stale_switch_flushes"] = (double)d.counter[SD_STAT_STALE_SWITCH_FLUSH];
	report_machine(st, rm.m());
}

// Seed 000's sort-compute shape: short-lived processes. Each CPU, per
// iteration: create an mm, map and touch 16 pages, run, unmap (a flush that
// frees tables), switch away and destroy it. Exercises ASID allocation (a
// rollover every 65535 mms), exit flushes and, for `local`, mms that never
// run anywhere else.
constexpr uint64_t kChurnPages = 16;
constexpr uint64_t kChurnBatch = 200;

void process_churn_body(sd_cpu *c, void *p)
{
	auto *r = static_cast<RunArg *>(p);
	sd_machine *m = sd_cpu_machine(c);
	int err = 0;

	for (uint64_t i = 0; !err && i < r->count; i++) {
		sd_mm *mm;
		if ((err = sd_mm_create(m, &mm)))
			break;
		err = sd_mmap(c, mm, kRegion, kChurnPages * SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE);
		if (!err)
			err = sd_switch_mm(c, mm);
		for (uint64_t pg = 0; !err && pg < kChurnPages; pg++)
			err = sd_access(c, kRegion + pg * SD_PAGE_SIZE, SD_WRITE, nullptr);
		if (!err)
			err = sd_munmap(c, mm, kRegion, kChurnPages * SD_PAGE_SIZE);
		if (!err)
			err = sd_switch_mm(c, nullptr);
		int derr = sd_mm_destroy(mm);
		err = err ? err : derr;
	}
	note_error(r, err);
}

void BM_process_churn(State &st, const char *strategy, unsigned cpus)
{
	RunMachine rm(cpus, SD_ORACLE_OFF, 1, 1, strategy);
	sd_stats d = SD_STATS_INIT;

	if (!rm.ok(st) ||
	    !run_batches(st, rm, process_churn_body, kChurnBatch, "process_churn run", &d))
		return;
	uint64_t flushes = d.counter[SD_STAT_FLUSH];
	st.counters["flush_ns"] = flush_ns_mean(d);
	st.counters["remote_invalidations_per_flush"] =
		flushes ? (double)d.counter[SD_STAT_REMOTE_INVAL] / (double)flushes : 0;
	st.counters["asid_allocations"] = (double)d.counter[SD_STAT_ASID_ALLOC];
	st.counters["asid_rollovers"] = (double)d.counter[SD_STAT_ASID_ROLLOVER];
	report_machine(st, rm.m());
}

// Seed 003: one flush of P pages through the strategy, per range order, on
// 2 CPUs (the remote touched the range once, then idles). Time and TLBI ops
// per flush; the split is in tlb_range ops by scale.
void BM_range_flush(State &st, const char *strategy, uint64_t pages)
{
	RunMachine rm(2, SD_ORACLE_OFF, 1, pages, strategy);
	sd_cpu *cpu = nullptr;

	if (!rm.ok(st))
		return;
	int err = sd_cpu_attach(rm.m(), 0, &cpu);
	if (!err)
		err = sd_switch_mm(cpu, rm.mm(0));
	for (uint64_t pg = 0; !err && pg < pages && pg < 4096; pg++)
		err = sd_access(cpu, kRegion + pg * SD_PAGE_SIZE, SD_READ, nullptr);
	if (err) {
		fail(st, "range_flush setup", err);
		return;
	}
	sd_flush_req req = { rm.mm(0), kRegion >> SD_PAGE_SHIFT, pages, false };
	sd_stats before = all_stats(rm.m());
	for (auto _ : st)
		rm.m()->ops->flush_range(cpu, &req);
	sd_stats d = delta(all_stats(rm.m()), before);
	st.counters["tlbi_ops"] = Counter((double)d.counter[SD_STAT_TLBI_OP], Counter::kAvgIterations);
	st.counters["range_ops_scale0"] =
		Counter((double)d.counter[SD_STAT_TLBI_RANGE_S0], Counter::kAvgIterations);
	st.counters["range_ops_scale1"] =
		Counter((double)d.counter[SD_STAT_TLBI_RANGE_S1], Counter::kAvgIterations);
	st.counters["range_ops_scale2"] =
		Counter((double)d.counter[SD_STAT_TLBI_RANGE_S2], Counter::kAvgIterations);
	st.counters["range_ops_scale3"] =
		Counter((double)d.counter[SD_STAT_TLBI_RANGE_S3], Counter::kAvgIterations);
	st.counters["page_ops"] = Counter((double)d.counter[SD_STAT_TLBI_PAGE_OP], Counter::kAvgIterations);
	st.counters["asid_ops"] = Counter((double)d.counter[SD_STAT_TLBI_ASID_OP], Counter::kAvgIterations);
	report_machine(st, rm.m());
	sd_switch_mm(cpu, nullptr);
	sd_cpu_detach(cpu);
}

// ---- x86 IPI shootdown and seed 002's lazy mm_cpumask ----

// A per-CPU xorshift64: no state shared between CPUs.
inline uint64_t next_rand(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

// A turn word one CPU waits on and another passes to it: the waiter spins
// up to @spins pauses, then sleeps on a futex, so that on an oversubscribed
// machine the CPU whose turn it is gets a PU. (IPIs still reach a sleeper:
// the signal interrupts the futex wait, which SA_RESTART resumes.)
struct Turn {
	alignas(64) std::atomic<uint32_t> v{0};
	alignas(64) std::atomic<uint32_t> sleepers{0};
};

void turn_wait(Turn &t, uint32_t want, unsigned spins)
{
	for (unsigned n = 0; t.v.load(std::memory_order_acquire) != want; n++) {
		if (n < spins) {
			cpu_relax();
			continue;
		}
		// Dekker with turn_pass(): count ourselves, then re-read; it
		// stores, then reads the count. seq_cst on both sides.
		t.sleepers.fetch_add(1);
		uint32_t cur = t.v.load();
		if (cur != want)
			syscall(SYS_futex, &t.v, FUTEX_WAIT_PRIVATE, cur, nullptr, nullptr, 0);
		t.sleepers.fetch_sub(1);
	}
}

void turn_pass(Turn &t, uint32_t next)
{
	t.v.store(next);
	if (t.sleepers.load())
		syscall(SYS_futex, &t.v, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

// Counters every x86 workload reports, from the delta @d of all CPUs.
void report_ipi_common(State &st, const sd_stats &d)
{
	const uint64_t flushes = d.counter[SD_STAT_FLUSH];

	st.counters["flush_ns"] = flush_ns_mean(d);
	st.counters["ipis_per_flush"] = ratio(d.counter[SD_STAT_IPI_SENT], flushes);
	st.counters["unneeded_ipis_per_flush"] = ratio(d.counter[SD_STAT_IPI_UNNEEDED], flushes);
	st.counters["ipis_deferred_per_flush"] = ratio(d.counter[SD_STAT_IPI_DEFERRED], flushes);
	st.counters["lazy_skips_per_flush"] = ratio(d.counter[SD_STAT_LAZY_SKIP], flushes);
	st.counters["cpumask_trims"] = (double)d.counter[SD_STAT_CPUMASK_TRIM];
}

// hackbench --groups G --loops L in process mode, where every task is its
// own mm. 2 groups per CPU of 6 tasks (3 senders, 3 receivers): 12 tasks
// per CPU against 6 PCID slots (the seed's run had 800 tasks on 72 CPUs,
// about 11 per CPU). A message is two switches on one CPU: to a sender of a
// random group, which writes the message into its buffer page and reads
// another of its pages, then to a receiver of that group, which does the
// same with its own pages (each task is its own mm: the pipe itself is
// kernel memory, which no user TLB holds). Tasks are taken from one pool by
// all CPUs, as a scheduler that moves them freely would: a CPU claims a task
// before it switches to it and lets it go after it has switched away, so a
// task never runs on two CPUs at once; about half the switches find their
// task last ran on another CPU (migrations_per_switch). Every 50th switch of
// a CPU, the task it switched to frees its buffer page (madvise(DONTNEED),
// a flush) and touches it again; the flush_every:N variants change that rate
// (flush_every:0: never, as in hackbench itself, whose pipes flush nothing).
//
// What lazy mode pays here: a flush IPIs every CPU of the mask that is in
// the middle of a switch (LOADED_MM_SWITCHING, the CVE-2025-37964 rule),
// whatever mm it is switching to, and with the lazy mask every CPU the task
// ever ran on stays in it. Each such IPI is wrong-CPU (counted in
// unneeded_ipis_per_flush; with cpumask_trims 0 and a task running on one
// CPU at a time, nothing else sends one) and costs the flusher a signal
// round trip.
//
// The TLB is 16 sets x 8 ways with a 16-entry L1 (kSwitchTlb): the tasks use
// 4 pages at the same addresses, so with the default's associativity (8
// ways) every hit and miss is as with the default geometry, but the
// emulated CR3 load with flush, a scan of every entry of the TLB, costs a
// thirteenth (160 entries against 2128). With the default geometry that
// scan, a few microseconds, makes up most of a switch and sits inside the
// LOADED_MM_SWITCHING window; on hardware the PCID flush does not grow with
// the TLB.
constexpr TlbGeometry kSwitchTlb = { 16, 8, 16 };
constexpr unsigned kCsGroupsPerCpu = 2;
constexpr unsigned kCsTasksPerGroup = 6;
constexpr uint64_t kCsPages = 4;
constexpr uint64_t kCsFlushEvery = 50;
constexpr uint64_t kCsBatch = 4000;

struct alignas(64) CsTask {
	std::atomic<int> owner{-1};     // the CPU running it, or -1
	int last_cpu = -1;              // written by its owner only
};

struct CsArg : RunArg {
	unsigned groups = 0;
	uint64_t flush_every = kCsFlushEvery;   // 0: never
	std::unique_ptr<CsTask[]> tasks;
	std::atomic<uint64_t> migrations{0};
	std::atomic<uint64_t> claim_misses{0};
};

inline bool cs_claim(CsTask *t, int id)
{
	int free_ = -1;

	return t->owner.load(std::memory_order_relaxed) == -1 &&
	       t->owner.compare_exchange_strong(free_, id, std::memory_order_acquire,
						std::memory_order_relaxed);
}

void context_switch_body(sd_cpu *c, void *p)
{
	auto *r = static_cast<CsArg *>(static_cast<RunArg *>(p));
	const int id = (int)sd_cpu_id(c);
	const unsigned half = kCsTasksPerGroup / 2;
	uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(id + 1);
	uint64_t migrations = 0, misses = 0;
	unsigned g = 0;
	CsTask *cur = nullptr;
	int err = 0;

	for (uint64_t i = 0; !err && i < r->count; i++) {
		const unsigned role = (unsigned)(i & 1);    // 0: sender, 1: receiver
		unsigned idx;
		CsTask *t;

		if (!role)
			g = (unsigned)(next_rand(&rng) % r->groups);
		for (unsigned tries = 0;; tries++) {
			idx = g * kCsTasksPerGroup + role * half + (unsigned)(next_rand(&rng) % half);
			t = &r->tasks[idx];
			if (cs_claim(t, id))
				break;
			misses++;
			if (tries % 8 == 7)             // that side of the group is busy
				g = (unsigned)(next_rand(&rng) % r->groups);
			if (tries >= 64)
				sched_yield();
		}
		sd_mm *mm = r->rm->mm(idx);
		err = sd_switch_mm(c, mm);
		if (cur)
			cur->owner.store(-1, std::memory_order_release);
		cur = t;
		if (t->last_cpu != id) {
			migrations += t->last_cpu >= 0;
			t->last_cpu = id;
		}
		if (!err)
			err = sd_access(c, kRegion, SD_WRITE, nullptr);
		if (!err)
			err = sd_access(c, kRegion + (1 + (i >> 1) % (kCsPages - 1)) * SD_PAGE_SIZE,
					SD_READ, nullptr);
		if (!err && r->flush_every && (i + 1) % r->flush_every == 0) {
			err = sd_madvise_dontneed(c, mm, kRegion, SD_PAGE_SIZE);
			if (!err)
				err = sd_access(c, kRegion, SD_WRITE, nullptr);
		}
	}
	int serr = sd_switch_mm(c, nullptr);
	if (cur)
		cur->owner.store(-1, std::memory_order_release);
	r->migrations.fetch_add(migrations, std::memory_order_relaxed);
	r->claim_misses.fetch_add(misses, std::memory_order_relaxed);
	note_error(r, err ? err : serr);
}

void BM_context_switch(State &st, const char *strategy, unsigned cpus,
		       uint64_t flush_every = kCsFlushEvery)
{
	const unsigned groups = kCsGroupsPerCpu * cpus;
	const unsigned tasks = groups * kCsTasksPerGroup;
	RunMachine rm(cpus, SD_ORACLE_OFF, tasks, kCsPages, strategy, kSwitchTlb);
	CsArg arg;
	sd_stats d = SD_STATS_INIT;

	if (!rm.ok(st))
		return;
	arg.groups = groups;
	arg.flush_every = flush_every;
	arg.tasks.reset(new CsTask[tasks]);
	RunTimes times;
	if (!run_batches(st, rm, context_switch_body, kCsBatch, "context_switch run", &d, &arg,
			 &times))
		return;
	st.counters["pu_share"] = times.pu_share;
	// Every run ends with one switch to no mm per CPU: not a task switch.
	const uint64_t switches = d.counter[SD_STAT_CTX_SWITCH];
	report_ipi_common(st, d);
	st.counters["switches"] = Counter((double)switches, Counter::kAvgIterations);
	st.counters["cpumask_writes_per_switch"] = ratio(d.counter[SD_STAT_CPUMASK_WRITE], switches);
	st.counters["switch_flushes_per_switch"] = ratio(d.counter[SD_STAT_SWITCH_FLUSH], switches);
	st.counters["asid_allocations_per_switch"] = ratio(d.counter[SD_STAT_ASID_ALLOC], switches);
	st.counters["migrations_per_switch"] = ratio(arg.migrations.load(), switches);
	st.counters["claim_misses_per_switch"] = ratio(arg.claim_misses.load(), switches);
	st.counters["flushes_per_switch"] = ratio(d.counter[SD_STAT_FLUSH], switches);
	st.counters["unneeded_ipis_per_switch"] = ratio(d.counter[SD_STAT_IPI_UNNEEDED], switches);
	report_machine(st, rm.m());
}

// Dave Hansen's case from the seed thread: a task runs on CPU A, migrates to
// CPU B, and there frees memory, which needs a flush. One worker mm hops
// around the CPUs in turn (hop h runs on CPU h % N); every CPU also has its
// own mm, the other process it runs while the worker is elsewhere. A hop:
// switch to the worker (the migration), read two of its pages, write a third
// (malloc), madvise(DONTNEED) it (free: the flush), switch back to the CPU's
// own mm, pass the turn on. With the lazy mask, the CPUs the worker left
// stay in its mm_cpumask, running another mm: an IPI goes to them only when
// the mask is trimmed (once per trim_ms per mm) and then clears their bit.
// Time per iteration: one hop (one migration and one flush). Every switch to
// the worker finds its generation moved on (the last hop flushed), so it
// flushes the worker's PCID: the TLB is kSwitchTlb, for the same reason as
// in context_switch.
constexpr uint64_t kFwPages = 4;
constexpr uint64_t kFwBatch = 2000;

struct FwArg : RunArg {
	std::unique_ptr<Turn[]> turn;   // per CPU: the hop it may run next
	unsigned spins = 0;             // pauses before a waiter sleeps
};

void forked_worker_body(sd_cpu *c, void *p)
{
	auto *r = static_cast<FwArg *>(static_cast<RunArg *>(p));
	const unsigned id = sd_cpu_id(c);
	const unsigned n = sd_machine_nr_cpus(sd_cpu_machine(c));
	sd_mm *worker = r->rm->mm(0), *own = r->rm->mm(1 + id);
	int err = sd_switch_mm(c, own);

	if (!err)
		err = sd_access(c, kRegion, SD_WRITE, nullptr);
	for (uint64_t h = id; h < r->count; h += n) {
		turn_wait(r->turn[id], (uint32_t)h, r->spins);
		if (!err)
			err = sd_switch_mm(c, worker);
		for (uint64_t pg = 1; !err && pg < 3; pg++)
			err = sd_access(c, kRegion + pg * SD_PAGE_SIZE, SD_READ, nullptr);
		if (!err)
			err = sd_access(c, kRegion, SD_WRITE, nullptr);
		if (!err)
			err = sd_madvise_dontneed(c, worker, kRegion, SD_PAGE_SIZE);
		if (!err)
			err = sd_switch_mm(c, own);
		// The last hop of a run hands the first hop of the next run to
		// CPU 0 (whose own last wait of this run is over by then).
		if (h + 1 == r->count)
			turn_pass(r->turn[0], 0);
		else
			turn_pass(r->turn[(h + 1) % n], (uint32_t)(h + 1));
	}
	int serr = sd_switch_mm(c, nullptr);
	note_error(r, err ? err : serr);
}

void BM_forked_worker(State &st, const char *strategy, unsigned cpus)
{
	RunMachine rm(cpus, SD_ORACLE_OFF, 1 + cpus, kFwPages, strategy, kSwitchTlb);
	FwArg arg;
	sd_stats d = SD_STATS_INIT;

	RunTimes times;

	if (!rm.ok(st))
		return;
	arg.turn.reset(new Turn[cpus]);
	// Pinned, a waiter spins (for a millisecond or so, many hops); when
	// oversubscribed it would keep the next CPU off its PU, so it sleeps.
	arg.spins = oversubscribed(rm.m()) ? 64 : 1u << 16;
	if (!run_batches(st, rm, forked_worker_body, kFwBatch, "forked_worker run", &d, &arg, &times))
		return;
	st.counters["pu_share"] = times.pu_share;
	const uint64_t hops = st.iterations();
	report_ipi_common(st, d);
	st.counters["ipis_per_migration"] = ratio(d.counter[SD_STAT_IPI_SENT], hops);
	st.counters["unneeded_ipis_per_migration"] = ratio(d.counter[SD_STAT_IPI_UNNEEDED], hops);
	st.counters["cpumask_writes_per_migration"] = ratio(d.counter[SD_STAT_CPUMASK_WRITE], hops);
	st.counters["flushes_per_migration"] = ratio(d.counter[SD_STAT_FLUSH], hops);
	report_machine(st, rm.m());
}

// will-it-scale tlb_flush2, threads mode: the CPUs are threads of one mm,
// each with a private 1 MiB region (in a leaf table of its own). A loop:
// write a page, madvise(DONTNEED) it (a flush), read it again (will-it-scale
// asserts it reads 0: a fresh page). After each pass over the 256 pages the
// region is unmapped (a full flush that frees its table) and mapped again,
// as will-it-scale does. Time per iteration: one loop, as each thread sees
// it; loops_per_s is the total over all threads. Processes mode is the same
// loop with every CPU in its own mm.
//
// Every loop frees two pages (the madvise's now, the re-faulted one at the
// munmap of its pass): with lru=global (an `ipi`/`gbcast` option) each
// free takes the machine-wide LRU lock, as release_pages() takes the
// lruvec lock in vanilla; lru=percpu is seed 004's lru_add_drain removal.
// Besides that lock and the flush, the threads of one mm share its lock
// (mm->lock, taken by each fault and each madvise) and its tlb_gen line.
constexpr uint64_t kTf2Pages = 256;
constexpr uint64_t kTf2Batch = 1024;

inline uint64_t tf2_region(unsigned id)
{
	return kRegion + (uint64_t)(id + 1) * 512 * SD_PAGE_SIZE;    // 2 MiB apart
}

void tlb_flush2_body(sd_cpu *c, void *p)
{
	auto *r = static_cast<RunArg *>(p);
	// Threads mode: one mm (RunMachine's only one); processes mode: one
	// per CPU (mm(i) wraps around the RunMachine's mms).
	sd_mm *mm = r->rm->mm(sd_cpu_id(c));
	const uint64_t base = tf2_region(sd_cpu_id(c));
	const uint64_t len = kTf2Pages * SD_PAGE_SIZE;
	bool mapped = false;
	int err = sd_switch_mm(c, mm);

	for (uint64_t i = 0; !err && i < r->count; i++) {
		const uint64_t va = base + (i % kTf2Pages) * SD_PAGE_SIZE;
		if (i % kTf2Pages == 0) {
			if (mapped)
				err = sd_munmap(c, mm, base, len);
			if (!err)
				err = sd_mmap(c, mm, base, len, SD_PROT_READ | SD_PROT_WRITE);
			mapped = !err;
		}
		if (!err)
			err = sd_access(c, va, SD_WRITE, nullptr);
		if (!err)
			err = sd_madvise_dontneed(c, mm, va, SD_PAGE_SIZE);
		if (!err)
			err = sd_access(c, va, SD_READ, nullptr);
	}
	if (mapped) {
		int uerr = sd_munmap(c, mm, base, len);
		err = err ? err : uerr;
	}
	int serr = sd_switch_mm(c, nullptr);
	note_error(r, err ? err : serr);
}

// The mm's global ASID (gbcast), 0 when it has none (or under `ipi`).
uint16_t mm_global_asid(const sd_machine *m, sd_mm *mm)
{
	if (m->ops != &sd_gbcast_ops)
		return 0;
	return static_cast<sd_ipi_mm *>(mm->strategy)->global_asid.load(std::memory_order_acquire);
}

// Untimed batches before the timed ones: one, or for gbcast with more CPUs
// than its threshold as many as it takes the mm (CPU 0's) to get its
// global ASID (at most kTf2WarmupMax batches or kTf2WarmupSeconds). Until
// then every flush takes the IPI path, and only 1 in 32 of those looks at
// the threshold; with oversubscribed CPUs that takes hundreds of flushes of
// 100+ us each, a transient that would fill a good part of a 0.2 s
// measurement, where will-it-scale's seconds-long runs never see it.
constexpr unsigned kTf2WarmupMax = 16;
constexpr double kTf2WarmupSeconds = 0.5;

struct Tf2Warmup {
	unsigned batches = 0;
	sd_stats d = SD_STATS_INIT;
};

bool tf2_warmup(State &st, RunMachine &rm, Tf2Warmup *w)
{
	RunArg r;
	sd_stats before = all_stats(rm.m());
	// Only an mm active on more than `threshold` CPUs goes global, and
	// only after an IPI-path flush (another CPU in its mask): with fewer
	// CPUs than that, or one, waiting for it is pointless.
	const bool gbcast = rm.m()->ops == &sd_gbcast_ops &&
			    sd_machine_nr_cpus(rm.m()) >
				    std::max(1u, sd_gbcast_of(rm.m())->threshold);
	const auto t0 = std::chrono::steady_clock::now();

	r.rm = &rm;
	r.count = kTf2Batch;
	do {
		int err = sd_machine_run(rm.m(), tlb_flush2_body, &r);
		if (err || r.err.load()) {
			fail(st, "tlb_flush2 warm-up", err ? err : r.err.load());
			return false;
		}
		w->batches++;
	} while (gbcast && !mm_global_asid(rm.m(), rm.mm(0)) && w->batches < kTf2WarmupMax &&
		 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() <
			 kTf2WarmupSeconds);
	w->d = delta(all_stats(rm.m()), before);
	return true;
}

// @processes: will-it-scale's processes mode, every CPU its own mm (no
// IPI, no shared mm lock or tlb_gen; the LRU lock, when global, is still
// machine-wide: what is left to contend).
void BM_tlb_flush2(State &st, const char *strategy, unsigned cpus, bool processes)
{
	RunMachine rm(cpus, SD_ORACLE_OFF, processes ? cpus : 1, 1, strategy);
	RunArg arg;
	Tf2Warmup warm;
	sd_stats d = SD_STATS_INIT;
	RunTimes times;

	if (!rm.ok(st) || !tf2_warmup(st, rm, &warm))
		return;
	// Pages freed through the machine-wide LRU lock (lru=global only).
	const uint64_t lru_before = rm.m()->lru_pages;
	if (!run_batches(st, rm, tlb_flush2_body, kTf2Batch, "tlb_flush2 run", &d, &arg, &times))
		return;
	const double wall = times.wall_s;
	st.counters["pu_share"] = times.pu_share;
	const uint64_t flushes = d.counter[SD_STAT_FLUSH];
	const double loops = (double)st.iterations() * cpus;
	report_ipi_common(st, d);
	st.counters["loops_per_s"] = wall > 0 ? loops / wall : 0;
	st.counters["loops_per_s_per_thread"] = wall > 0 ? loops / wall / cpus : 0;
	// CPU time the CPUs' threads spent per loop (spinning on locks and
	// acks included, time off their PU or asleep not): against real time,
	// what oversubscription and sleeping hide.
	st.counters["cpu_ns_per_loop"] = loops > 0 ? (double)arg.thread_cpu_ns.load() / loops : 0;
	st.counters["flushes_per_loop"] = loops > 0 ? (double)flushes / loops : 0;
	st.counters["remote_invalidations_per_flush"] = ratio(d.counter[SD_STAT_REMOTE_INVAL], flushes);
	// The machine-wide LRU lock: pages freed under it per loop, 0 with
	// lru=percpu, else 2: the madvise's, and the page the loop's read
	// faulted back in, which the munmap ending its pass frees.
	st.counters["lru_lock_pages_per_loop"] =
		loops > 0 ? (double)(rm.m()->lru_pages - lru_before) / loops : 0;
	st.counters["warmup_batches"] = (double)warm.batches;
	if (rm.m()->ops == &sd_gbcast_ops) {
		// gbcast, timed part: INVLPGBs and one TLBSYNC per flush once
		// the mm has its global ASID; fallback_ipi_flushes are IPI-path
		// flushes of the mm without one. The warm-up's own counts (the
		// allocation and the flushes before it) are reported apart.
		st.counters["invlpgbs_per_flush"] = ratio(d.counter[SD_STAT_INVLPGB], flushes);
		st.counters["tlbsyncs_per_flush"] = ratio(d.counter[SD_STAT_TLBSYNC], flushes);
		st.counters["fallback_ipi_flushes"] = (double)d.counter[SD_STAT_FALLBACK_IPI_FLUSH];
		st.counters["fallback_ipi_flushes_per_flush"] =
			ratio(d.counter[SD_STAT_FALLBACK_IPI_FLUSH], flushes);
		st.counters["transition_ipis"] = (double)d.counter[SD_STAT_TRANSITION_IPI];
		st.counters["global_asid_allocations"] = (double)d.counter[SD_STAT_GLOBAL_ASID_ALLOC];
		st.counters["global_asid_resets"] = (double)d.counter[SD_STAT_GLOBAL_ASID_RESET];
		st.counters["warmup_fallback_ipi_flushes"] =
			(double)warm.d.counter[SD_STAT_FALLBACK_IPI_FLUSH];
		st.counters["warmup_transition_ipis"] = (double)warm.d.counter[SD_STAT_TRANSITION_IPI];
		st.counters["warmup_global_asid_allocations"] =
			(double)warm.d.counter[SD_STAT_GLOBAL_ASID_ALLOC];
		unsigned global = 0;
		for (unsigned i = 0; i < (processes ? cpus : 1u); i++)
			global += mm_global_asid(rm.m(), rm.mm(i)) != 0;
		st.counters["mms_global"] = (double)global;
	}
	report_machine(st, rm.m());
}

void BM_tlb_flush2_threads(State &st, const char *strategy, unsigned cpus)
{
	BM_tlb_flush2(st, strategy, cpus, false);
}

void BM_tlb_flush2_processes(State &st, const char *strategy, unsigned cpus)
{
	BM_tlb_flush2(st, strategy, cpus, true);
}

// ---- registration ----

// ---- seed 001: trap dispatch ----


struct TrapArg {
	std::atomic<uint64_t> cpu_ns{0};
	std::atomic<uint64_t> preempted{0};     // involuntary switches: preemptions, yields
	std::atomic<uint64_t> blocked{0};       // voluntary ones: futex parks
	std::atomic<int> err{0};
};

void trap_body(sd_cpu *c, void *p)
{
	auto *a = static_cast<TrapArg *>(p);
	struct rusage r0, r1;
	getrusage(RUSAGE_THREAD, &r0);
	const uint64_t t0 = thread_cpu_ns();
	int err = 0;

	for (uint64_t i = 0; !err && i < g_opt.trap_reads; i++)
		err = sd_trap(c, SD_ID_AA64ISAR0_EL1(i % 31));
	a->cpu_ns.fetch_add(thread_cpu_ns() - t0, std::memory_order_relaxed);
	getrusage(RUSAGE_THREAD, &r1);
	a->preempted.fetch_add(r1.ru_nivcsw - r0.ru_nivcsw, std::memory_order_relaxed);
	a->blocked.fetch_add(r1.ru_nvcsw - r0.ru_nvcsw, std::memory_order_relaxed);
	if (err)
		a->err.store(err);
}

// trap_dispatch/<mode>/threads:T: T threads (emulated CPUs) each read
// ID_AA64ISAR0_EL1 a million times. Time is the wall time of the run (the
// seed's "real"); cpu_s is the threads' summed CPU time (its "sys").
void BM_trap_dispatch(State &st, sd_trap_dispatch mode, unsigned threads)
{
	sd_machine_config c = SD_MACHINE_CONFIG_INIT;
	sd_machine *m = nullptr;
	double cpu_s = 0, preempted = 0, blocked = 0;

	c.nr_cpus = threads;
	c.trap_dispatch = mode;
	c.oracle = g_opt.oracle ? SD_ORACLE_CHECKED : SD_ORACLE_OFF;
	if (int err = sd_machine_create(&c, &m)) {
		st.SkipWithError((std::string("sd_machine_create: ") + sd_last_error()).c_str());
		(void)err;
		return;
	}
	for (auto _ : st) {
		TrapArg a;
		auto w0 = std::chrono::steady_clock::now();
		int err = sd_machine_run(m, trap_body, &a);
		auto w1 = std::chrono::steady_clock::now();
		if (err || a.err.load()) {
			st.SkipWithError("trap run failed");
			break;
		}
		st.SetIterationTime(std::chrono::duration<double>(w1 - w0).count());
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
	report_machine(st, m);
	sd_machine_destroy(m);
}

void register_all()
{
	using benchmark::RegisterBenchmark;

	RegisterBenchmark("baseline/cacheline_roundtrip", BM_cacheline_roundtrip)->UseRealTime();
	RegisterBenchmark("baseline/signal_roundtrip", BM_signal_roundtrip)->UseRealTime();
	RegisterBenchmark("baseline/membarrier", native::BM_membarrier)->UseRealTime();
	// x86: an IPI shootdown of one page is a signal round trip plus the
	// flush protocol; right after the bare round trip, to be compared in
	// the same placement.
	RegisterBenchmark("flush_page/ipi/cpus:2/remote:busy",
			  [](State &st) { BM_flush_page(st, true, "ipi"); })->UseRealTime();
	RegisterBenchmark("flush_page/ipi/cpus:2/remote:idle",
			  [](State &st) { BM_flush_page(st, false, "ipi"); })->UseRealTime();
	RegisterBenchmark("baseline/array_probe", BM_array_probe)
		->ArgName("dependent")->Arg(0)->Arg(1)->UseRealTime();
	RegisterBenchmark("tlb_lookup/l1/cpus:1", BM_tlb_lookup_l1)->UseRealTime();
	RegisterBenchmark("tlb_lookup/sd_access/cpus:1", BM_tlb_lookup_sd_access)->UseRealTime();
	// Names carry their arguments, so parameters go through lambdas, not Arg().
	RegisterBenchmark("flush_page/broadcast/cpus:2/remote:busy",
			  [](State &st) { BM_flush_page(st, true); })->UseRealTime();
	RegisterBenchmark("flush_page/broadcast/cpus:2/remote:idle",
			  [](State &st) { BM_flush_page(st, false); })->UseRealTime();
	RegisterBenchmark("flush_page/broadcast/cpus:2/remote:refilled", BM_flush_page_refilled)
		->UseManualTime();
	RegisterBenchmark("mprotect_page/broadcast/cpus:2", BM_mprotect_page)->UseRealTime();
	RegisterBenchmark("memory/per_cpu", BM_memory_per_cpu)->UseRealTime();
	// Seed 001: the three dispatch modes, 4 to 16 threads oversubscribed.
	for (sd_trap_dispatch mode : { SD_TRAP_LOCKED, SD_TRAP_RCU, SD_TRAP_DIRECT }) {
		const char *name = mode == SD_TRAP_LOCKED ? "locked" : mode == SD_TRAP_RCU ? "rcu" : "direct";
		for (unsigned t : { 1u, 2u, 4u, 8u, 16u })
			RegisterBenchmark(("trap_dispatch/" + std::string(name) + "/threads:" +
					   std::to_string(t)).c_str(),
					  [mode, t](State &st) { BM_trap_dispatch(st, mode, t); })
				->UseManualTime()->Iterations(2)->Unit(benchmark::kMillisecond);
	}
	// Seed 000: broadcast and local side by side, 8 and 16 oversubscribed.
	for (const char *strategy : { "broadcast", "local" }) {
		for (unsigned n : { 1u, 2u, 4u, 8u, 16u }) {
			std::string tail = std::string(strategy) + "/cpus:" + std::to_string(n);
			RegisterBenchmark(("mprotect_threaded/" + tail).c_str(),
					  [strategy, n](State &st) { BM_mprotect_threaded(st, strategy, n); })
				->UseRealTime();
			RegisterBenchmark(("process_churn/" + tail).c_str(),
					  [strategy, n](State &st) { BM_process_churn(st, strategy, n); })
				->UseRealTime();
		}
	}
	// The native twins of seed 000's shape: processes (the seed's
	// for-each-cpu.sh) and threads of one process.
	for (unsigned n : { 1u, 2u, 4u, 8u, 16u }) {
		RegisterBenchmark(("mprotect_threaded/native:mode=processes/cpus:" + std::to_string(n)).c_str(),
				  [n](State &st) { native::BM_mprotect(st, n, true); })->UseRealTime();
		RegisterBenchmark(("mprotect_threaded/native:mode=threads/cpus:" + std::to_string(n)).c_str(),
				  [n](State &st) { native::BM_mprotect(st, n, false); })->UseRealTime();
	}
	// Seed 003: the three range orders over the page counts of its table.
	for (const char *order : { "none", "ascending", "descending" }) {
		for (uint64_t p : { 1, 3, 17, 33, 64, 100, 511, 512, 1000, 4097, 65535 }) {
			std::string spec = std::string("broadcast:range=") + order;
			const char *strategy = strdup(spec.c_str());
			RegisterBenchmark(("range_flush/" + spec + "/cpus:2/pages:" + std::to_string(p)).c_str(),
					  [strategy, p](State &st) { BM_range_flush(st, strategy, p); })
				->UseRealTime();
		}
	}
	for (unsigned n : { 64u, 256u, 1024u })
		RegisterBenchmark(("scale/broadcast/cpus:" + std::to_string(n)).c_str(),
				  [n](State &st) { BM_scale(st, n); })->UseRealTime();
	// Seed 002: eager against lazy mm_cpumask, each pair run back to back;
	// on 2 CPUs also without flushes (hackbench's own case) and with a
	// tenth of them.
	for (unsigned n : { 1u, 2u, 4u, 8u }) {
		for (const char *strategy : { "ipi:cpumask=eager", "ipi:cpumask=lazy" })
			RegisterBenchmark(("context_switch/" + std::string(strategy) + "/cpus:" +
					   std::to_string(n)).c_str(),
					  [strategy, n](State &st) { BM_context_switch(st, strategy, n); })
				->UseRealTime();
		RegisterBenchmark(("context_switch/native/cpus:" + std::to_string(n)).c_str(),
				  [n](State &st) { native::BM_context_switch(st, n); })->UseRealTime();
	}
	for (uint64_t every : { 0u, 500u }) {
		for (const char *strategy : { "ipi:cpumask=eager", "ipi:cpumask=lazy" })
			RegisterBenchmark(("context_switch/" + std::string(strategy) +
					   "/cpus:2/flush_every:" + std::to_string(every)).c_str(),
					  [strategy, every](State &st) {
						  BM_context_switch(st, strategy, 2, every);
					  })
				->UseRealTime();
	}
	for (unsigned n : { 2u, 4u }) {
		for (const char *strategy :
		     { "ipi:cpumask=eager", "ipi:cpumask=lazy", "ipi:cpumask=lazy,trim_ms=1" })
			RegisterBenchmark(("forked_worker/" + std::string(strategy) + "/cpus:" +
					   std::to_string(n)).c_str(),
					  [strategy, n](State &st) { BM_forked_worker(st, strategy, n); })
				->UseRealTime();
	}
	// will-it-scale tlb_flush2 (seed 004's benchmark) under the x86 and arm64
	// strategies, then seed 004's four configurations back to back: vanilla
	// (ipi, global LRU lock), lru_add_drain removal (ipi, per-CPU), INVLPGB
	// alone (gbcast, global) and both (gbcast, per-CPU), with the merged
	// threshold (global ASID on more than 3 active CPUs) and with
	// threshold=0 (global once 2 CPUs run the mm: what 2 CPUs can show).
	for (unsigned n : { 1u, 2u, 4u, 8u }) {
		for (const char *strategy :
		     { "ipi", "broadcast", "local", "ipi:lru=global", "ipi:lru=percpu",
		       "gbcast:lru=global", "gbcast:lru=percpu", "gbcast:lru=global,threshold=0",
		       "gbcast:lru=percpu,threshold=0" })
			RegisterBenchmark(("tlb_flush2_threads/" + std::string(strategy) + "/cpus:" +
					   std::to_string(n)).c_str(),
					  [strategy, n](State &st) { BM_tlb_flush2_threads(st, strategy, n); })
				->UseRealTime();
		RegisterBenchmark(("tlb_flush2_threads/native/cpus:" + std::to_string(n)).c_str(),
				  [n](State &st) { native::BM_tlb_flush2(st, n); })->UseRealTime();
		// Processes mode: the global LRU lock alone, the mm shared by nobody.
		for (const char *strategy : { "ipi:lru=global", "ipi:lru=percpu" })
			RegisterBenchmark(("tlb_flush2_processes/" + std::string(strategy) + "/cpus:" +
					   std::to_string(n)).c_str(),
					  [strategy, n](State &st) { BM_tlb_flush2_processes(st, strategy, n); })
				->UseRealTime();
	}
}

// ---- the comparison run's matrix (scripts/compare) ----

template <class F>
void reg(const std::string &name, F f)
{
	benchmark::RegisterBenchmark(name.c_str(), f)->UseRealTime();
}

std::string cpus_tail(unsigned n)
{
	return "/cpus:" + std::to_string(n);
}

// Every workload against every strategy that applies, at g_opt.cpus, and
// its native twin; the machine limits first. Strategy lists hold the
// seed's "before" first (scripts/compare divides by it).
void register_main()
{
	reg("baseline/cacheline_roundtrip", BM_cacheline_roundtrip);
	reg("baseline/signal_roundtrip", BM_signal_roundtrip);
	reg("baseline/membarrier", native::BM_membarrier);
	for (const char *s : { "broadcast", "ipi" })
		reg(std::string("flush_page/") + s + "/cpus:2/remote:busy",
		    [s](State &st) { BM_flush_page(st, true, s); });
	static const char *const all[] = { "broadcast", "local", "ipi", "gbcast" };
	for (unsigned n : g_opt.cpus) {
		for (const char *s : all)
			reg("mprotect_threaded/" + std::string(s) + cpus_tail(n),
			    [s, n](State &st) { BM_mprotect_threaded(st, s, n); });
		reg("mprotect_threaded/native:mode=processes" + cpus_tail(n),
		    [n](State &st) { native::BM_mprotect(st, n, true); });
		reg("mprotect_threaded/native:mode=threads" + cpus_tail(n),
		    [n](State &st) { native::BM_mprotect(st, n, false); });
	}
	for (unsigned n : g_opt.cpus)
		for (const char *s : all)
			reg("process_churn/" + std::string(s) + cpus_tail(n),
			    [s, n](State &st) { BM_process_churn(st, s, n); });
	for (unsigned n : g_opt.cpus) {
		for (const char *s : { "ipi:cpumask=eager", "ipi:cpumask=lazy", "broadcast", "local",
				       "gbcast" })
			reg("context_switch/" + std::string(s) + cpus_tail(n),
			    [s, n](State &st) { BM_context_switch(st, s, n); });
		reg("context_switch/native" + cpus_tail(n),
		    [n](State &st) { native::BM_context_switch(st, n); });
	}
	for (unsigned n : g_opt.cpus) {
		if (n < 2)
			continue;
		for (const char *s : { "ipi:cpumask=eager", "ipi:cpumask=lazy" })
			reg("forked_worker/" + std::string(s) + cpus_tail(n),
			    [s, n](State &st) { BM_forked_worker(st, s, n); });
	}
	for (unsigned n : g_opt.cpus) {
		for (const char *s : { "ipi:lru=global", "gbcast:lru=percpu", "broadcast", "local" })
			reg("tlb_flush2_threads/" + std::string(s) + cpus_tail(n),
			    [s, n](State &st) { BM_tlb_flush2_threads(st, s, n); });
		reg("tlb_flush2_threads/native" + cpus_tail(n),
		    [n](State &st) { native::BM_tlb_flush2(st, n); });
	}
	// Seed 003's worked examples, up to the 2^21-page boundary the fix moved.
	for (const char *order : { "ascending", "descending", "none" }) {
		for (uint64_t p : { 1, 3, 17, 33, 64, 100, 511, 512, 1000, 4097, 65535, 2097151,
				    2097152 }) {
			const char *s = strdup((std::string("broadcast:range=") + order).c_str());
			reg("range_flush/" + std::string(s) + "/cpus:2/pages:" + std::to_string(p),
			    [s, p](State &st) { BM_range_flush(st, s, p); });
		}
	}
	for (sd_trap_dispatch mode : { SD_TRAP_LOCKED, SD_TRAP_RCU, SD_TRAP_DIRECT }) {
		const char *name = mode == SD_TRAP_LOCKED ? "locked" : mode == SD_TRAP_RCU ? "rcu" : "direct";
		for (unsigned t : g_opt.cpus)
			benchmark::RegisterBenchmark(("trap_dispatch/" + std::string(name) + "/threads:" +
						      std::to_string(t)).c_str(),
						     [mode, t](State &st) { BM_trap_dispatch(st, mode, t); })
				->UseManualTime()->Iterations(2)->Unit(benchmark::kMillisecond);
	}
	// A tenth of the reads: each CPUID here is a VM exit of microseconds.
	for (unsigned t : g_opt.cpus)
		benchmark::RegisterBenchmark(("trap_dispatch/native:mode=cpuid/threads:" + std::to_string(t)).c_str(),
					     [t](State &st) {
						     native::BM_trap_cpuid(st, t, std::max<uint64_t>(1, g_opt.trap_reads / 10));
					     })
			->UseManualTime()->Iterations(2)->Unit(benchmark::kMillisecond);
}

// The machine, for the top of a report: hwloc's view, the CPU model, the
// kernel, and whether this process may pin threads.
void print_machine()
{
	sd_machine *m = nullptr;
	struct sd_machine_info info;
	sd_machine_config c = SD_MACHINE_CONFIG_INIT;
	char model[256] = "?";

	c.nr_cpus = 1;
	if (FILE *f = fopen("/proc/cpuinfo", "r")) {
		char line[512];
		while (fgets(line, sizeof(line), f))
			if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
				snprintf(model, sizeof(model), "%s", strchr(line, ':') + 2);
				model[strcspn(model, "\n")] = 0;
				break;
			}
		fclose(f);
	}
	struct utsname u;
	uname(&u);
	if (sd_machine_create(&c, &m) || sd_machine_info(m, &info)) {
		printf("machine: %s\n", sd_last_error());
		return;
	}
	// Pinning works if a CPU attaches pinned.
	sd_cpu *cpu = nullptr;
	int pinned = !sd_cpu_attach(m, 0, &cpu) && sd_machine_info(m, &info) == 0 && info.all_pinned;
	if (cpu)
		sd_cpu_detach(cpu);
	printf("machine: %u package(s), %u core(s), %u PU(s), %u NUMA node(s) (hwloc%s)\n",
	       info.nr_packages, info.nr_cores, info.nr_pus, info.nr_numa_nodes,
	       info.synthetic ? ", synthetic SD_TOPOLOGY" : "");
	printf("cpu: %s\n", model);
	printf("kernel: %s %s %s\n", u.sysname, u.release, u.machine);
	printf("pinning: %s\n", pinned ? "yes (emulated CPUs are pinned to PUs)"
				     : "NO (CPUs float; results are noisier)");
	sd_machine_destroy(m);
}

// 1, 2, every PU, 2x and 4x PUs oversubscribed; sorted, once each.
std::vector<unsigned> default_cpus()
{
	unsigned p = native::nr_pus();
	std::vector<unsigned> v = { 1, 2, p, 2 * p, 4 * p };
	std::sort(v.begin(), v.end());
	v.erase(std::unique(v.begin(), v.end()), v.end());
	return v;
}

void usage()
{
	fprintf(stderr,
		"shootdown-bench's own flags (the rest go to Google Benchmark):\n"
		"  --sd_set=all|main       all: every workload and variant (default);\n"
		"                          main: the comparison run's matrix (scripts/compare)\n"
		"  --sd_cpus=N,N,...       CPU counts of the main set (default 1,2,PUs,2xPUs,4xPUs)\n"
		"  --sd_oracle=checked     run every workload machine with the oracle checking;\n"
		"                          each then reports `violations`\n"
		"  --sd_trap_reads=N       ID register reads per thread in trap_dispatch (10^6)\n"
		"  --sd_machine            print the machine (hwloc, CPU, kernel, pinning) and exit\n");
}

// Take our flags out of argv; false on a bad one.
bool parse_options(int *argc, char **argv)
{
	int out = 1;
	g_opt.cpus = default_cpus();
	for (int i = 1; i < *argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--sd_set=main")) {
			g_opt.main_set = true;
		} else if (!strcmp(a, "--sd_set=all")) {
			g_opt.main_set = false;
		} else if (!strncmp(a, "--sd_cpus=", 10)) {
			g_opt.cpus.clear();
			for (const char *p = a + 10; *p;) {
				char *end;
				unsigned long n = strtoul(p, &end, 10);
				if (end == p || n == 0 || n > 4096 || (*end && *end != ','))
					return false;
				g_opt.cpus.push_back((unsigned)n);
				p = *end ? end + 1 : end;
			}
			if (g_opt.cpus.empty())
				return false;
		} else if (!strcmp(a, "--sd_oracle=checked")) {
			g_opt.oracle = true;
		} else if (!strcmp(a, "--sd_oracle=off")) {
			g_opt.oracle = false;
		} else if (!strncmp(a, "--sd_trap_reads=", 16)) {
			char *end;
			g_opt.trap_reads = strtoull(a + 16, &end, 10);
			if (*end || !g_opt.trap_reads)
				return false;
		} else if (!strcmp(a, "--sd_machine")) {
			g_opt.print_machine = true;
		} else if (!strncmp(a, "--sd_", 5)) {
			return false;       // --sd_help included: usage() follows
		} else {
			argv[out++] = argv[i];
		}
	}
	*argc = out;
	argv[out] = nullptr;
	return true;
}

} // namespace

int main(int argc, char **argv)
{
	if (!parse_options(&argc, argv)) {
		usage();
		return 2;
	}
	if (g_opt.print_machine) {
		print_machine();
		return 0;
	}
	if (g_opt.main_set)
		register_main();
	else
		register_all();
	benchmark::Initialize(&argc, argv);
	if (benchmark::ReportUnrecognizedArguments(argc, argv))
		return 1;
	benchmark::RunSpecifiedBenchmarks();
	benchmark::Shutdown();
	return 0;
}
