// SPDX-License-Identifier: MIT
//
// One page, two CPUs: a strategy's flush of one page while CPU 1 runs the
// same mm, timed alone, through sd_flush_tlb_range() (the flush a change
// sends, with no PTE changed), and the public sd_mprotect() around it.
//
//   flush_page/{broadcast,ipi}/cpus:2/remote:busy  flush of 1 page; CPU 1 keeps refilling
//                                            it (ipi: an IPI, a real signal, every flush)
//   flush_page/{broadcast,ipi}/cpus:2/remote:idle  ... CPU 1 idle (its entry is gone after
//                                            the first; ipi: lazy, no IPI), all set only
//   flush_page/broadcast/cpus:2/remote:refilled  ... each flush waits (untimed) until CPU 1
//                                            has refilled, so every flush removes an entry;
//                                            manual time of the flush call alone (TSC)
//   mprotect_page/broadcast/cpus:2           public sd_mprotect of 1 touched page, CPU 1 busy
//
// Registered right after the baselines: flush_page/ipi's yardstick is
// baseline/signal_roundtrip, to be compared in the same placement. The main
// set has remote:busy of both strategies only.
#include "common.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <thread>

namespace sdbench {
namespace {

// The strategy's flush of one page, with no PTE changed.
inline int flush_page(sd_cpu *cpu, sd_mm *mm)
{
	return sd_flush_tlb_range(cpu, mm, kRegion, SD_PAGE_SIZE);
}

// CPU @cpu's tlb_fills, from its own counters.
inline uint64_t tlb_fills(const sd_machine *m, unsigned cpu)
{
	return cpu_stats(m, cpu).counter[SD_STAT_TLB_FILL];
}

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

private:
	void run(bool busy)
	{
		sd_cpu *c = nullptr;
		int err = sd_cpu_attach(s_.m(), 1, &c);

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

// The strategy's flush of one page, as a change of it would send it.
void BM_flush_page(State &st, bool busy, const char *strategy)
{
	TwoCpuPage t(busy, strategy);
	int err = 0;

	if (!t.ok(st))
		return;
	sd_stats b0 = cpu_stats(t.m(), 0), b1 = cpu_stats(t.m(), 1);
	ModelSpan model(t.m(), t.cpu());
	for (auto _ : st)
		err |= flush_page(t.cpu(), t.mm());
	model.stop();
	sd_stats d0 = delta(cpu_stats(t.m(), 0), b0), d1 = delta(cpu_stats(t.m(), 1), b1);
	report_two_cpu(st, t, d0, d1);
	model.report(st, (double)st.iterations());
	if (strategy_is(t.m(), "ipi"))
		report_two_cpu_ipi(st, d0, d1);
	if (err)
		st.SkipWithError("sd_flush_tlb_range failed");
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
	// Prime: one untimed flush, so the first wait has a refill to see.
	uint64_t fills = tlb_fills(t.m(), 1);
	int err = flush_page(t.cpu(), t.mm());
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
	// Modelled time of the timed flushes alone: CPU 0's own clock around
	// each, against the manual time it reports (host_s).
	ModelSpan model(t.m(), t.cpu());
	uint64_t model_ns = 0;
	double host_s = 0;
	for (auto _ : st) {
		uint64_t now;
		const uint64_t wait0 = ticks();
		for (unsigned spins = 0; (now = tlb_fills(t.m(), 1)) == fills;) {
			cpu_relax();
			// Modelled, CPU 0's clock must move while it waits outside
			// the library, or CPU 1, a window ahead, waits for it and
			// never refills. Untimed, and outside the modelled span
			// (only the flush is); nothing without a profile.
			sd_cpu_work(t.cpu(), 10);
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
		// Modelled, the refill happened at CPU 1's time: CPU 0 sees it
		// no earlier, so it catches up before the timed flush (else the
		// flush would be charged CPU 1's lead while completing on it).
		if (model.on()) {
			struct sd_model_info mi = SD_MODEL_INFO_INIT;
			const uint64_t own = sd_cpu_clock_ns(t.cpu());
			if (!sd_machine_model_info(t.m(), &mi) && mi.clock_max_ns > own)
				sd_cpu_work(t.cpu(), mi.clock_max_ns - own);
		}
		const uint64_t m0 = sd_cpu_clock_ns(t.cpu());
		uint64_t c0 = ticks_fenced();
		err |= flush_page(t.cpu(), t.mm());
		uint64_t c1 = ticks_fenced();
		model_ns += sd_cpu_clock_ns(t.cpu()) - m0;
		host_s += (double)(c1 - c0) / per_ns * 1e-9;
		st.SetIterationTime((double)(c1 - c0) / per_ns * 1e-9);
	}
	model.stop(model_ns);
	if (late) {
		st.SkipWithError("CPU 1 stopped refilling: over 10 s spent waiting (machine busy?)");
		return;
	}
	if (err) {
		st.SkipWithError("sd_flush_tlb_range failed");
		return;
	}
	const auto wall = std::chrono::steady_clock::now() - start;
	report_two_cpu(st, t, delta(cpu_stats(t.m(), 0), b0), delta(cpu_stats(t.m(), 1), b1));
	st.counters["timer_ns"] = timer_ns;
	st.counters["refill_timeouts"] = (double)timeouts;
	model.report(st, (double)st.iterations(), host_s);
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
	ModelSpan model(t.m(), t.cpu());
	for (auto _ : st) {
		unsigned prot = (i++ & 1) ? SD_PROT_READ | SD_PROT_WRITE : SD_PROT_READ;
		err |= sd_mprotect(t.cpu(), t.mm(), kRegion, SD_PAGE_SIZE, prot);
	}
	model.stop();
	model.report(st, (double)st.iterations());
	sd_stats d0 = delta(cpu_stats(t.m(), 0), b0);
	report_two_cpu(st, t, d0, delta(cpu_stats(t.m(), 1), b1));
	st.counters["flushes"] = Counter((double)d0.counter[SD_STAT_FLUSH], Counter::kAvgIterations);
	st.counters["flush_ns"] = flush_ns_mean(d0);
	if (err)
		st.SkipWithError("sd_mprotect failed");
}

void register_flush_page(Set set)
{
	if (set == Set::patches)
		return;
	if (set == Set::main) {
		for (const char *s : { "broadcast", "ipi" })
			reg(std::string("flush_page/") + s + "/cpus:2/remote:busy",
			    [s](State &st) { BM_flush_page(st, true, s); });
		return;
	}
	// x86: an IPI shootdown of one page is a signal round trip plus the
	// flush protocol.
	for (const char *s : { "ipi", "broadcast" }) {
		reg(std::string("flush_page/") + s + "/cpus:2/remote:busy",
		    [s](State &st) { BM_flush_page(st, true, s); });
		reg(std::string("flush_page/") + s + "/cpus:2/remote:idle",
		    [s](State &st) { BM_flush_page(st, false, s); });
	}
	benchmark::RegisterBenchmark("flush_page/broadcast/cpus:2/remote:refilled",
				     BM_flush_page_refilled)->UseManualTime();
	reg("mprotect_page/broadcast/cpus:2", BM_mprotect_page);
}

} // namespace

SD_BENCH_FAMILY(flush_page, 20, register_flush_page);

} // namespace sdbench
