// SPDX-License-Identifier: MIT
//
// shootdown-bench: every libshootdown workload in one Google Benchmark
// executable (DESIGN.md, "Contracts other tools rely on").
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
#include <benchmark/benchmark.h>

#include <pthread.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
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
#include "flush/broadcast.h"
#include "flush/strategy.h"
#include "machine/machine.h"
#include "mm/mm.h"
#include "tlb/tlb.h"
}

namespace {

using benchmark::Counter;
using benchmark::State;

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

sd_stats cpu_stats(const sd_machine *m, unsigned cpu)
{
	sd_stats s;
	sd_stats_cpu(m, cpu, &s);
	return s;
}

sd_stats all_stats(const sd_machine *m)
{
	sd_stats s;
	sd_stats_snapshot(m, &s);
	return s;
}

sd_stats delta(const sd_stats &after, const sd_stats &before)
{
	sd_stats d;
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
	Single(unsigned cpus, sd_oracle_mode oracle, uint64_t pages)
	{
		sd_machine_config cfg = make_config(cpus, oracle);

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
	TwoCpuPage(bool busy) : s_(2, SD_ORACLE_OFF, 1)
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

// The strategy's flush of one page, called as the mm layer calls it.
void BM_flush_page(State &st, bool busy)
{
	TwoCpuPage t(busy);

	if (!t.ok(st))
		return;
	sd_stats b0 = cpu_stats(t.m(), 0), b1 = cpu_stats(t.m(), 1);
	for (auto _ : st)
		flush_page(t.cpu(), t.mm(), kRegionVpn);
	report_two_cpu(st, t, delta(cpu_stats(t.m(), 0), b0), delta(cpu_stats(t.m(), 1), b1));
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

// Machines whose CPUs run a function under sd_machine_run(), with @nr_mms
// address spaces of @pages pages each, mapped from this thread as CPU 0.
class RunMachine {
public:
	RunMachine(unsigned cpus, sd_oracle_mode oracle, unsigned nr_mms, uint64_t pages,
		   const char *strategy = "broadcast")
		: mms_(nr_mms, nullptr)
	{
		sd_machine_config cfg = make_config(cpus, oracle, strategy);
		sd_cpu *cpu = nullptr;

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

struct RunArg {
	const RunMachine *rm;
	uint64_t count;                 // per-CPU operations for this run
	std::atomic<int> err{0};
};

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
	st.counters["oversubscribed"] = oversubscribed(rm.m());
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

// Time batches of @batch iterations, each one sd_machine_run of @body in
// which every CPU does @batch operations. Returns the counters' delta, or
// false after reporting an error.
bool run_batches(State &st, RunMachine &rm, sd_cpu_fn body, uint64_t batch, const char *what,
		 sd_stats *d)
{
	RunArg r;
	r.rm = &rm;
	r.count = batch;
	sd_stats before = all_stats(rm.m());
	int err = 0;
	while (st.KeepRunningBatch(batch)) {
		if (!err && !r.err.load())
			err = sd_machine_run(rm.m(), body, &r);
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
	sd_stats d;

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
	st.counters["oversubscribed"] = oversubscribed(rm.m());
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
	sd_stats d;

	if (!rm.ok(st) ||
	    !run_batches(st, rm, process_churn_body, kChurnBatch, "process_churn run", &d))
		return;
	uint64_t flushes = d.counter[SD_STAT_FLUSH];
	st.counters["flush_ns"] = flush_ns_mean(d);
	st.counters["remote_invalidations_per_flush"] =
		flushes ? (double)d.counter[SD_STAT_REMOTE_INVAL] / (double)flushes : 0;
	st.counters["asid_allocations"] = (double)d.counter[SD_STAT_ASID_ALLOC];
	st.counters["asid_rollovers"] = (double)d.counter[SD_STAT_ASID_ROLLOVER];
	st.counters["oversubscribed"] = oversubscribed(rm.m());
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
	st.counters["oversubscribed"] = oversubscribed(rm.m());
	sd_switch_mm(cpu, nullptr);
	sd_cpu_detach(cpu);
}

// ---- registration ----

void register_all()
{
	using benchmark::RegisterBenchmark;

	RegisterBenchmark("baseline/cacheline_roundtrip", BM_cacheline_roundtrip)->UseRealTime();
	RegisterBenchmark("baseline/signal_roundtrip", BM_signal_roundtrip)->UseRealTime();
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
}

} // namespace

int main(int argc, char **argv)
{
	register_all();
	benchmark::Initialize(&argc, argv);
	if (benchmark::ReportUnrecognizedArguments(argc, argv))
		return 1;
	benchmark::RunSpecifiedBenchmarks();
	benchmark::Shutdown();
	return 0;
}
