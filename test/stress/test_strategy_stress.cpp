// SPDX-License-Identifier: MIT
// Oracle-checked random workload under every strategy: broadcast, ipi (both
// cpumask modes) and gbcast cases (named by their prefixes).
//
// Model: 3 x ncpus tasks (more in the small-ASID configuration), each bound
// to an address space; most mms belong to one task, two are shared by three
// tasks each. Emulated CPUs pull tasks from a shared pool (an atomic claim),
// switch to the task's mm, run a burst of random operations on it (accesses,
// mmap, munmap, mprotect, madvise(DONTNEED), interrupts-off sections, idle),
// then release the task, which later migrates to whichever CPU claims it. A
// task sometimes "execs": its single-threaded mm is replaced by a fresh one
// and the old one destroyed, so ASIDs keep being allocated. A "hot" mix
// (accesses and single-page mprotect flips on one always-mapped region) makes
// TLB hits race with invalidations of the very entries they use.
//
// Each configuration runs for sdtest::stress_seconds() and must end with no
// oracle violation, no unexpected return code, every mm destroyed and the
// machine destroyed. A last configuration runs the same workload with the
// broken "none" strategy and must see violations: the workload can detect a
// strategy that breaks invariant 1.
//
// Seeded: the seed is printed; SD_SEED=<n> replays the same random choices
// (thread interleavings still differ).
#include "common.hpp"

#include <cstring>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t P = SD_PAGE_SIZE;
constexpr unsigned kRegionPages = 64;

// Three regions per mm: across a 2 MiB leaf-table boundary, across a 1 GiB
// boundary, and at the very top of the VA space.
const uint64_t kRegions[3] = {
	0x200000 - 32 * P,
	0x40000000 - 32 * P,
	SD_VA_END - kRegionPages * P,
};

struct StressConfig {
	const char *name;
	unsigned cpus;
	const char *strategy;
	unsigned asid_bits;      // 0: default
	unsigned min_tasks;      // at least this many tasks
	bool expect_violations;  // the broken strategy
	double time_factor;      // of stress_seconds()
	bool hot = false;        // mprotect-heavy mix on one pre-mapped region
};

std::ostream &operator<<(std::ostream &os, const StressConfig &c)
{
	return os << c.name;
}

struct Slot {
	std::atomic<sd_mm *> mm{nullptr};
	unsigned ntasks = 0;
};

struct Task {
	unsigned slot = 0;
	std::atomic<bool> claimed{false};
};

struct Counts {
	std::atomic<uint64_t> bursts{0}, accesses{0}, mmaps{0}, munmaps{0}, mprotects{0},
		madvises{0}, idles{0}, irq_sections{0}, execs{0}, unexpected{0};
};

struct World {
	const StressConfig *cfg = nullptr;
	sd_machine *m = nullptr;
	std::vector<Slot> slots;
	std::vector<Task> tasks;
	uint64_t seed = 0;
	Clock::time_point deadline;
	// A loaded host can end the budget before the case saw what it exists
	// to exercise (a rollover of 5-bit ASIDs: none in 49 bursts beside
	// another test under TSan). The CPUs go on past the deadline until it
	// has (seen()), up to this one.
	Clock::time_point hard_deadline;
	bool anchors = false;  // keep every leaf table alive (see below)
	std::atomic<bool> stop{false};
	Counts n;
	std::mutex lock;       // guards graveyard and first_error
	std::vector<sd_mm *> graveyard;
	std::string first_error;

	// What the case exists to exercise, each seen at least once: the
	// counters the test checks after the run. Any thread may snapshot.
	bool seen() const
	{
		sd_stats st = SD_STATS_INIT;
		if (sd_stats_snapshot(m, &st))
			return true;
		const uint64_t *k = st.counter;
		const char *s = cfg->strategy;
		if (cfg->expect_violations)
			return sd_oracle_violations(m) > 0;
		if (n.bursts.load(std::memory_order_relaxed) <= cfg->cpus)
			return false;
		if (cfg->asid_bits && cfg->asid_bits <= 8 && !k[SD_STAT_ASID_ROLLOVER])
			return false;
		if (!std::strncmp(s, "rar", 3) && !(k[SD_STAT_RAR_PAYLOAD] && k[SD_STAT_RAR_DONE]))
			return false;
		if (!std::strncmp(s, "riscv", 5) &&
		    !k[std::strstr(s, "rfence=sbi") ? SD_STAT_SBI_SENT : SD_STAT_IPI_SENT])
			return false;
		if (!std::strncmp(s, "gbcast:pool", 11) &&
		    !(k[SD_STAT_GLOBAL_ASID_ALLOC] && k[SD_STAT_INVLPGB] && k[SD_STAT_GLOBAL_ASID_RESET]))
			return false;
		return k[SD_STAT_FLUSH] && k[SD_STAT_TLB_HIT];
	}

	void unexpected(const std::string &what)
	{
		if (n.unexpected.fetch_add(1) == 0) {
			std::lock_guard<std::mutex> g(lock);
			first_error = what;
		}
	}
};

// With the broken strategy, other CPUs keep walk-cache pointers to leaf
// tables a munmap freed: a use-after-free by design. An anchor page mapped
// right outside each region keeps every leaf table of the regions non-empty,
// so no table is ever freed and the run stays memory-safe (ASan) while the
// leaf translations still go stale.
int map_anchors(sd_cpu *c, sd_mm *mm)
{
	for (uint64_t r : kRegions) {
		int err = sd_mmap(c, mm, r - P, P, SD_PROT_READ);
		if (!err && r + kRegionPages * P < SD_VA_END)
			err = sd_mmap(c, mm, r + kRegionPages * P, P, SD_PROT_READ);
		if (err)
			return err;
	}
	return 0;
}

// Destroy what can be destroyed now. No lock is held across sd_mm_destroy,
// which may wait for a grace period that other CPUs blocked on our lock
// could never grant.
void try_bury(World &w)
{
	std::vector<sd_mm *> todo, keep;
	{
		std::lock_guard<std::mutex> g(w.lock);
		todo.swap(w.graveyard);
	}
	for (sd_mm *mm : todo)
		if (sd_mm_destroy(mm) != 0)
			keep.push_back(mm);
	std::lock_guard<std::mutex> g(w.lock);
	w.graveyard.insert(w.graveyard.end(), keep.begin(), keep.end());
}

struct Cpu {
	World &w;
	sd_cpu *c;
	std::mt19937_64 rng;

	unsigned pick(unsigned n)
	{
		return (unsigned)(rng() % n);
	}

	// A random page-aligned subrange of a random region.
	void range(uint64_t &va, uint64_t &len)
	{
		uint64_t base = kRegions[pick(3)];
		if (pick(16) == 0) {
			va = base;
			len = kRegionPages * P;
			return;
		}
		unsigned first = pick(kRegionPages);
		unsigned max = kRegionPages - first;
		unsigned n = 1 + pick(max < 12 ? max : 12);
		va = base + first * P;
		len = n * P;
	}

	unsigned prot()
	{
		static const unsigned prots[] = {SD_PROT_READ, SD_PROT_READ | SD_PROT_WRITE,
						 SD_PROT_READ | SD_PROT_WRITE, SD_PROT_NONE};
		return prots[pick(4)];
	}

	void check(int err, std::initializer_list<int> ok, const char *op, uint64_t va)
	{
		for (int e : ok)
			if (err == e)
				return;
		char buf[160];
		std::snprintf(buf, sizeof(buf), "cpu %u: %s(0x%llx) returned %d (%s): %s", sd_cpu_id(c),
			      op, (unsigned long long)va, err, sd_strerror(err), sd_last_error());
		w.unexpected(buf);
	}

	void access_one()
	{
		uint64_t va, len;
		range(va, len);
		va += pick((unsigned)(len / P)) * P + pick(4096);
		bool write = pick(5) < 2;
		// With interrupts off a page that is not present is not
		// faulted in (-EDEADLK): the fault could wait for the
		// mmap_lock of a holder waiting for this CPU's IPI.
		if (sd_irqs_disabled(c))
			check(sd_access(c, va, write ? SD_WRITE : SD_READ, nullptr),
			      {0, -EFAULT, -EACCES, -EDEADLK}, "sd_access (interrupts off)", va);
		else
			check(sd_access(c, va, write ? SD_WRITE : SD_READ, nullptr),
			      {0, -EFAULT, -EACCES}, "sd_access", va);
		w.n.accesses.fetch_add(1, std::memory_order_relaxed);
	}

	// The "hot" mix: a write-barrier-like pattern. Almost only accesses to
	// one always-mapped region, and single-page protection flips on it, so
	// TLB hits race with invalidations of the very entries they use.
	void hot_burst(sd_mm *mm)
	{
		unsigned ops = 50 + pick(200);
		for (unsigned i = 0; i < ops; i++) {
			uint64_t va = kRegions[0] + pick(16) * P;
			if (pick(10)) {
				check(sd_access(c, va, pick(3) ? SD_READ : SD_WRITE, nullptr),
				      {0, -EACCES}, "sd_access", va);
				w.n.accesses.fetch_add(1, std::memory_order_relaxed);
			} else {
				unsigned prot = pick(2) ? SD_PROT_READ | SD_PROT_WRITE : (unsigned)SD_PROT_READ;
				check(sd_mprotect(c, mm, va, P, prot), {0}, "sd_mprotect", va);
				w.n.mprotects.fetch_add(1, std::memory_order_relaxed);
			}
		}
	}

	void burst(sd_mm *mm)
	{
		if (w.cfg->hot)
			return hot_burst(mm);
		unsigned ops = 20 + pick(180);
		for (unsigned i = 0; i < ops; i++) {
			unsigned r = pick(1000);
			uint64_t va, len;
			if (r < 760) {
				access_one();
			} else if (r < 830) {
				range(va, len);
				check(sd_mmap(c, mm, va, len, prot()), {0, -EEXIST}, "sd_mmap", va);
				w.n.mmaps.fetch_add(1, std::memory_order_relaxed);
			} else if (r < 885) {
				range(va, len);
				check(sd_munmap(c, mm, va, len), {0}, "sd_munmap", va);
				w.n.munmaps.fetch_add(1, std::memory_order_relaxed);
			} else if (r < 945) {
				range(va, len);
				check(sd_mprotect(c, mm, va, len, prot()), {0, -ENOMEM}, "sd_mprotect",
				      va);
				w.n.mprotects.fetch_add(1, std::memory_order_relaxed);
			} else if (r < 985) {
				range(va, len);
				check(sd_madvise_dontneed(c, mm, va, len), {0}, "sd_madvise_dontneed",
				      va);
				w.n.madvises.fetch_add(1, std::memory_order_relaxed);
			} else if (r < 995) {
				// Accesses with emulated interrupts off (a remote
				// operation arriving now must wait).
				sd_irq_disable(c);
				for (int k = 0; k < 4; k++)
					access_one();
				sd_irq_enable(c);
				w.n.irq_sections.fetch_add(1, std::memory_order_relaxed);
			} else {
				check(sd_cpu_idle(c), {0}, "sd_cpu_idle", 0);
				check(sd_access(c, kRegions[0], SD_READ, nullptr), {-ESRCH},
				      "sd_access while idle", kRegions[0]);
				check(sd_switch_mm(c, mm), {0}, "sd_switch_mm", 0);
				w.n.idles.fetch_add(1, std::memory_order_relaxed);
			}
		}
	}

	// Replace the task's private mm with a fresh one (execve).
	void exec(Slot &s)
	{
		sd_mm *fresh = nullptr;
		int err = sd_mm_create(w.m, &fresh);
		check(err, {0}, "sd_mm_create", 0);
		if (err)
			return;
		if (w.anchors)
			check(map_anchors(c, fresh), {0}, "map_anchors", 0);
		if (w.cfg->hot)
			check(sd_mmap(c, fresh, kRegions[0], kRegionPages * P, SD_PROT_READ | SD_PROT_WRITE),
			      {0}, "sd_mmap", kRegions[0]);
		check(sd_switch_mm(c, fresh), {0}, "sd_switch_mm", 0);
		sd_mm *old = s.mm.exchange(fresh);
		// Still lazily loaded on a CPU that idled after running it:
		// bury it later.
		err = sd_mm_destroy(old);
		check(err, {0, -EBUSY}, "sd_mm_destroy", 0);
		if (err) {
			std::lock_guard<std::mutex> g(w.lock);
			w.graveyard.push_back(old);
		}
		w.n.execs.fetch_add(1, std::memory_order_relaxed);
		if (pick(8) == 0)
			try_bury(w);
	}

	void run()
	{
		const unsigned nt = (unsigned)w.tasks.size();
		while (!w.stop.load(std::memory_order_relaxed)) {
			const auto now = Clock::now();
			if (now >= w.deadline && (now >= w.hard_deadline || w.seen()))
				break;
			if (w.cfg->expect_violations && sd_oracle_violations(w.m) > 0)
				break;
			Task *t = nullptr;
			unsigned start = pick(nt);
			for (unsigned k = 0; k < nt && !t; k++) {
				Task &cand = w.tasks[(start + k) % nt];
				if (!cand.claimed.load(std::memory_order_relaxed) &&
				    !cand.claimed.exchange(true, std::memory_order_acquire))
					t = &cand;
			}
			if (!t) {
				check(sd_cpu_idle(c), {0}, "sd_cpu_idle", 0);
				std::this_thread::sleep_for(std::chrono::microseconds(50));
				continue;
			}
			Slot &s = w.slots[t->slot];
			sd_mm *mm = s.mm.load();
			check(sd_switch_mm(c, mm), {0}, "sd_switch_mm", 0);
			burst(mm);
			w.n.bursts.fetch_add(1, std::memory_order_relaxed);
			if (s.ntasks == 1 && pick(24) == 0)
				exec(s);
			t->claimed.store(false, std::memory_order_release);
			if (pick(4) == 0)
				check(sd_cpu_idle(c), {0}, "sd_cpu_idle", 0);
		}
	}
};

void cpu_main(sd_cpu *c, void *arg)
{
	World &w = *static_cast<World *>(arg);
	Cpu cpu{w, c, std::mt19937_64(w.seed * 0x9e3779b97f4a7c15ull + sd_cpu_id(c))};
	cpu.run();
}


class BroadcastStress : public ::testing::TestWithParam<StressConfig> {};

TEST_P(BroadcastStress, OracleChecked)
{
	const StressConfig &sc = GetParam();
	// Line-buffered, so progress lines survive a watchdog abort or a timeout.
	std::setvbuf(stdout, nullptr, _IOLBF, 0);
	const double secs = sdtest::stress_seconds() * sc.time_factor;
	uint64_t hash = 1469598103934665603ull;
	for (const char *p = sc.name; *p; p++)
		hash = (hash ^ (unsigned char)*p) * 1099511628211ull;

	World w;
	w.cfg = &sc;
	w.seed = sdtest::seed() ^ hash;
	w.anchors = sc.expect_violations;

	sd_machine_config cfg = sdtest::config(sc.cpus, sc.strategy);
	cfg.asid_bits = sc.asid_bits;
	ASSERT_EQ(0, sd_machine_create(&cfg, &w.m)) << sd_last_error();
	ASSERT_EQ(1, sd_oracle_checked(w.m));
	struct sd_machine_info info;
	ASSERT_EQ(0, sd_machine_info(w.m, &info));
	std::printf("[stress] %s: %u CPUs on %u PUs%s, strategy %s, %u-bit ASIDs, %.1f s, "
		    "SD_SEED=%llu\n",
		    sc.name, info.nr_cpus, info.nr_pus,
		    info.oversubscribed ? " (OVERSUBSCRIBED: more emulated CPUs than PUs)" : "",
		    info.strategy, info.asid_bits, secs, (unsigned long long)sdtest::seed());

	// Tasks and mms: two mms shared by several tasks each, the rest private.
	unsigned ntasks = 3 * sc.cpus;
	if (ntasks < sc.min_tasks)
		ntasks = sc.min_tasks;
	const unsigned nshared = 2, per_shared = sc.cpus <= 2 ? 2 : 3;
	const unsigned nslots = nshared + (ntasks - nshared * per_shared);
	w.slots = std::vector<Slot>(nslots);
	w.tasks = std::vector<Task>(ntasks);
	for (unsigned t = 0; t < ntasks; t++) {
		unsigned slot = t < nshared * per_shared ? t / per_shared : nshared + (t - nshared * per_shared);
		w.tasks[t].slot = slot;
		w.slots[slot].ntasks++;
	}
	{
		sdtest::Attached a(w.m, 0);
		ASSERT_NE(nullptr, a.c);
		for (auto &s : w.slots) {
			sd_mm *mm = nullptr;
			ASSERT_EQ(0, sd_mm_create(w.m, &mm));
			s.mm = mm;
			if (w.anchors) {
				ASSERT_EQ(0, map_anchors(a.c, mm));
			}
			if (sc.hot) {
				ASSERT_EQ(0, sd_mmap(a.c, mm, kRegions[0], kRegionPages * P,
						     SD_PROT_READ | SD_PROT_WRITE));
			}
		}
	}
	std::printf("[stress] %s: %u tasks over %u mms (%u shared by %u tasks each)\n", sc.name,
		    ntasks, nslots, nshared, per_shared);

	auto t0 = Clock::now();
	w.deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(secs));
	w.hard_deadline = w.deadline + std::chrono::seconds(30);
	{
		sdtest::Watchdog dog(sc.name, secs + 150);
		ASSERT_EQ(0, sd_machine_run(w.m, cpu_main, &w)) << sd_last_error();
	}
	double took = std::chrono::duration<double>(Clock::now() - t0).count();

	sd_stats st = SD_STATS_INIT;
	ASSERT_EQ(0, sd_stats_snapshot(w.m, &st));
	const uint64_t violations = sd_oracle_violations(w.m);
	std::printf("[stress] %s: %.2f s, %llu bursts, %llu accesses (%llu hits), %llu mmap, "
		    "%llu munmap, %llu mprotect, %llu madvise, %llu idle, %llu irq-off, %llu exec; "
		    "%llu flushes, %llu tlbi ops, %llu ASID allocs, %llu rollovers, "
		    "%llu fills raced; %llu violations\n",
		    sc.name, took, (unsigned long long)w.n.bursts.load(),
		    (unsigned long long)w.n.accesses.load(),
		    (unsigned long long)st.counter[SD_STAT_TLB_HIT],
		    (unsigned long long)w.n.mmaps.load(), (unsigned long long)w.n.munmaps.load(),
		    (unsigned long long)w.n.mprotects.load(), (unsigned long long)w.n.madvises.load(),
		    (unsigned long long)w.n.idles.load(), (unsigned long long)w.n.irq_sections.load(),
		    (unsigned long long)w.n.execs.load(), (unsigned long long)st.counter[SD_STAT_FLUSH],
		    (unsigned long long)st.counter[SD_STAT_TLBI_OP],
		    (unsigned long long)st.counter[SD_STAT_ASID_ALLOC],
		    (unsigned long long)st.counter[SD_STAT_ASID_ROLLOVER],
		    (unsigned long long)st.counter[SD_STAT_TLB_FILL_RACED],
		    (unsigned long long)violations);
	if (!std::strncmp(sc.strategy, "ipi", 3) || !std::strncmp(sc.strategy, "gbcast", 6) ||
	    !std::strncmp(sc.strategy, "rar", 3)) {
		std::printf("[stress] %s: x86: %llu IPIs (%llu unneeded, %llu deferred), %llu lazy "
			    "skips; gbcast: %llu INVLPGBs, %llu TLBSYNCs, %llu global ASIDs "
			    "(%llu resets), %llu transition IPIs, %llu fallback IPI flushes\n",
			    sc.name, (unsigned long long)st.counter[SD_STAT_IPI_SENT],
			    (unsigned long long)st.counter[SD_STAT_IPI_UNNEEDED],
			    (unsigned long long)st.counter[SD_STAT_IPI_DEFERRED],
			    (unsigned long long)st.counter[SD_STAT_LAZY_SKIP],
			    (unsigned long long)st.counter[SD_STAT_INVLPGB],
			    (unsigned long long)st.counter[SD_STAT_TLBSYNC],
			    (unsigned long long)st.counter[SD_STAT_GLOBAL_ASID_ALLOC],
			    (unsigned long long)st.counter[SD_STAT_GLOBAL_ASID_RESET],
			    (unsigned long long)st.counter[SD_STAT_TRANSITION_IPI],
			    (unsigned long long)st.counter[SD_STAT_FALLBACK_IPI_FLUSH]);
	}
	if (!std::strncmp(sc.strategy, "rar", 3)) {
		std::printf("[stress] %s: rar: %llu payloads, %llu signals, %llu actions done, "
			    "%llu slot waits, %llu new_cpu flushes, %llu served with interrupts off\n",
			    sc.name, (unsigned long long)st.counter[SD_STAT_RAR_PAYLOAD],
			    (unsigned long long)st.counter[SD_STAT_RAR_SENT],
			    (unsigned long long)st.counter[SD_STAT_RAR_DONE],
			    (unsigned long long)st.counter[SD_STAT_RAR_SLOT_WAIT],
			    (unsigned long long)st.counter[SD_STAT_RAR_NEW_CPU_FLUSH],
			    (unsigned long long)st.counter[SD_STAT_RAR_IRQS_OFF]);
		// The cases exist to exercise these paths.
		EXPECT_GT(st.counter[SD_STAT_RAR_PAYLOAD], 0u);
		EXPECT_GT(st.counter[SD_STAT_RAR_DONE], 0u);
	}
	if (!std::strncmp(sc.strategy, "riscv", 5)) {
		std::printf("[stress] %s: riscv: %llu SBI calls to %llu targets (%llu widened, "
			    "%llu served with interrupts off), %llu IPIs\n", sc.name,
			    (unsigned long long)st.counter[SD_STAT_SBI_ECALL],
			    (unsigned long long)st.counter[SD_STAT_SBI_SENT],
			    (unsigned long long)st.counter[SD_STAT_SBI_RANGE_WIDENED],
			    (unsigned long long)st.counter[SD_STAT_SBI_IRQS_OFF],
			    (unsigned long long)st.counter[SD_STAT_IPI_SENT]);
		// The cases exist to exercise these paths.
		if (std::strstr(sc.strategy, "rfence=sbi"))
			EXPECT_GT(st.counter[SD_STAT_SBI_SENT], 0u);
		else
			EXPECT_GT(st.counter[SD_STAT_IPI_SENT], 0u);
	}
	if (!std::strncmp(sc.strategy, "gbcast:pool", 11)) {
		// The tiny-pool cases exist to exercise these paths.
		EXPECT_GT(st.counter[SD_STAT_GLOBAL_ASID_ALLOC], 0u);
		EXPECT_GT(st.counter[SD_STAT_INVLPGB], 0u);
		EXPECT_GT(st.counter[SD_STAT_GLOBAL_ASID_RESET], 0u);
	}

	EXPECT_EQ(0u, w.n.unexpected.load()) << "first: " << w.first_error;
	// The broken strategy stops at its first violation, which can come in the
	// first bursts; its violations prove the workload ran. A clean strategy
	// must have run enough for its silence to mean something.
	if (sc.expect_violations)
		EXPECT_GT(w.n.bursts.load(), 0u) << "the workload never ran";
	else
		EXPECT_GT(w.n.bursts.load(), (uint64_t)sc.cpus) << "the workload barely ran";
	EXPECT_GT(st.counter[SD_STAT_FLUSH], 0u);
	EXPECT_GT(st.counter[SD_STAT_TLB_HIT], 0u);
	EXPECT_EQ(violations, st.counter[SD_STAT_VIOLATION]);
	if (sc.expect_violations) {
		EXPECT_GT(violations, 0u) << "the workload did not catch the broken strategy";
		sd_violation v;
		if (violations && sd_oracle_violation(w.m, 0, &v) == 0)
			std::printf("[stress] %s: first violation (expected): %s cpu %u mm %llu va 0x%llx "
				    "entry version %u < floor %u\n",
				    sc.name, v.kind == SD_VIOLATION_STALE ? "stale" : "foreign", v.cpu,
				    (unsigned long long)v.mm_id, (unsigned long long)v.va,
				    v.entry_version, v.floor_version);
	} else {
		EXPECT_EQ(0u, violations);
		for (unsigned i = 0; i < violations && i < SD_ORACLE_MAX_DETAILS; i++) {
			sd_violation v;
			if (sd_oracle_violation(w.m, i, &v))
				break;
			ADD_FAILURE() << "violation " << i << ": "
				      << (v.kind == SD_VIOLATION_STALE ? "stale" : "foreign") << " cpu "
				      << v.cpu << " mm " << v.mm_id << " entry mm " << v.entry_mm_id
				      << std::hex << " va 0x" << v.va << std::dec << " entry version "
				      << v.entry_version << " floor " << v.floor_version;
		}
		if (sc.asid_bits && sc.asid_bits <= 8) {
			EXPECT_GT(st.counter[SD_STAT_ASID_ROLLOVER], 0u)
				<< "the small-ASID configuration never rolled over";
		}
	}

	// Everything goes away cleanly.
	for (auto &s : w.slots)
		EXPECT_EQ(0, sd_mm_destroy(s.mm.load())) << sd_last_error();
	for (auto *mm : w.graveyard)
		EXPECT_EQ(0, sd_mm_destroy(mm)) << sd_last_error();
	EXPECT_EQ(0, sd_machine_destroy(w.m)) << sd_last_error();
}

const StressConfig kConfigs[] = {
	{"broadcast_cpus2", 2, "broadcast", 0, 0, false, 1.0},
	{"broadcast_cpus4_asid5", 4, "broadcast", 5, 40, false, 1.0},
	{"broadcast_cpus8", 8, "broadcast", 0, 0, false, 1.0},
	{"broadcast_maxtlbi4_cpus4", 4, "broadcast:max_tlbi_ops=4", 0, 0, false, 0.5},
	// Roberts' active_cpu, with ASID rollovers (v2's reset at a fresh ASID).
	{"active_cpu_asid5_cpus4", 4, "broadcast:select=active_cpu", 5, 40, false, 0.5},
	// Lameter's tlb_mode (IPIs up to 2 CPUs, then broadcast) and Fujitsu's
	// IPI-only flush, with ASID rollovers emptying the masks.
	{"tlb_mode_ipimax2_asid5_cpus4", 4, "broadcast:select=tlb_mode,ipi_max=2", 5, 40, false, 0.5},
	// Hits racing invalidations of the entries they use (it caught the L2-to-L1
	// promotion race of tlb.c before 96bbfbd: ~1000 violations in 3 s).
	{"broadcast_hot_cpus2", 2, "broadcast", 0, 0, false, 0.5, true},
	// x86 shootdown, both cpumask modes, oversubscribed up to 16 CPUs; the
	// ceiling of 4 makes most multi-page flushes full ones.
	{"ipi_lazy_cpus2", 2, "ipi", 0, 0, false, 1.0},
	{"ipi_eager_cpus4", 4, "ipi:cpumask=eager", 0, 0, false, 0.5},
	{"ipi_lazy_trim1_cpus8", 8, "ipi:cpumask=lazy,trim_ms=1", 0, 40, false, 0.5},
	{"ipi_lazy_ceiling4_cpus16", 16, "ipi:ceiling=4", 0, 40, false, 0.5},
	{"ipi_hot_cpus2", 2, "ipi", 0, 0, false, 0.5, true},
	// Flushes wider than the request ring (memory at scale): every
	// flush to more than 1 (or 2) targets reuses requests after their acks.
	{"ipi_csdwindow1_cpus8", 8, "ipi:csd_window=1", 0, 40, false, 0.5},
	{"gbcast_csdwindow2_cpus16", 16, "gbcast:pool=4,threshold=0,sample=1,csd_window=2", 0, 40, false, 0.5},
	// AMD INVLPGB: every multi-CPU mm goes global at once (threshold 0,
	// every flush sampled) from a pool of 4 ASIDs, so exhaustion, wrap-around
	// resets and transitions happen while flushes are in flight.
	{"gbcast_pool4_cpus2", 2, "gbcast:pool=4,threshold=0,sample=1", 0, 0, false, 1.0},
	{"gbcast_pool4_cpus8", 8, "gbcast:pool=4,threshold=0,sample=1", 0, 40, false, 0.5},
	{"gbcast_pool2_eager_cpus16", 16, "gbcast:pool=2,threshold=1,sample=1,cpumask=eager", 0, 40, false, 0.5},
	{"gbcast_default_cpus4", 4, "gbcast", 0, 0, false, 0.5},
	{"gbcast_hot_cpus2", 2, "gbcast:pool=4,threshold=0,sample=1", 0, 0, false, 0.5, true},
	// Intel RAR: every multi-CPU mm global at once from a pool of 4, with
	// wrap-arounds (flush_tlb_all() by RAR), trims every millisecond, and
	// PTI's two payloads through a table of 2 slots.
	{"rar_pool4_trim1_cpus8", 8, "rar:pool=4,threshold=0,sample=1,trim_ms=1", 0, 40, false, 0.5},
	{"rar_pti_payloads2_cpus16", 16, "rar:threshold=0,sample=1,pti=1,payloads=2", 0, 40, false, 0.5},
	// RISC-V: SBI fences with ASID rollovers (5 bits, 32 ASIDs for 8
	// CPUs) and the firmware's widening; IPI fences with Svinval; and a
	// hart without ASIDs, whose switches flush and clear its bit.
	{"riscv_sbi_asid5_cpus8", 8, "riscv:rfence=sbi", 5, 40, false, 0.5},
	{"riscv_ipi_svinval_cpus16", 16, "riscv:rfence=ipi,svinval=1,threshold=8", 0, 40, false, 0.5},
	{"riscv_noasid_sbi_cpus8", 8, "riscv:rfence=sbi,asid=0", 0, 40, false, 0.5},
	// The broken strategy: stops as soon as the oracle fires.
	{"none_cpus4_expect_violations", 4, "none", 0, 0, true, 0.5},
};

INSTANTIATE_TEST_SUITE_P(Configs, BroadcastStress, ::testing::ValuesIn(kConfigs),
			 [](const ::testing::TestParamInfo<StressConfig> &i) {
				 return std::string(i.param.name);
			 });

} // namespace
