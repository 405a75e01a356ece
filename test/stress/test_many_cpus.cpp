// SPDX-License-Identifier: MIT
// 1024 emulated CPUs on a machine with a handful of PUs: a no-livelock test
// (invariant 6 of docs/invariants.md), not a timing test. Every CPU switches to one of a few
// shared mms and touches pages; every 8th CPU also runs a few sd_mprotect(),
// each one a broadcast that must reach all 1024 TLBs while most of their
// threads are preempted. A watchdog aborts the process with a clear message if
// the run is stuck for 120 s. Under sanitizers (SD_STRESS_SCALE < 1) the CPU
// count scales down, to no fewer than 256.
#include "common.hpp"

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
constexpr unsigned RW = SD_PROT_READ | SD_PROT_WRITE;
constexpr unsigned kMms = 4;
constexpr unsigned kPages = 64;
constexpr uint64_t kBase = 0x10000000;
constexpr unsigned kMprotects = 3;
constexpr unsigned kRounds = 8;
constexpr double kWatchdogSeconds = 120;

unsigned cpu_count()
{
	unsigned n = 1024;
	const char *k = std::getenv("SD_STRESS_SCALE");
	double scale = k ? std::atof(k) : 1.0;
	if (scale > 0 && scale < 1) {
		n = (unsigned)(n * scale);
		if (n < 256)
			n = 256;
	}
	return n;
}


struct Shared {
	sd_mm *mms[kMms] = {};
	uint64_t seed = 0;
	std::atomic<unsigned> started{0}, finished{0};
	std::atomic<uint64_t> accesses{0}, mprotects{0}, unexpected{0};
	std::mutex lock;
	std::string first_error;

	void bad(const std::string &what)
	{
		if (unexpected.fetch_add(1) == 0) {
			std::lock_guard<std::mutex> g(lock);
			first_error = what;
		}
	}
};

void touch(Shared &s, sd_cpu *c, std::mt19937 &rng, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		uint64_t va = kBase + (rng() % kPages) * P;
		bool write = rng() % 2;
		int err = sd_access(c, va, write ? SD_WRITE : SD_READ, nullptr);
		// A write may meet a page another CPU just made read-only.
		if (err != 0 && !(write && err == -EACCES))
			s.bad("cpu " + std::to_string(sd_cpu_id(c)) + ": sd_access returned " +
			      std::to_string(err));
		s.accesses.fetch_add(1, std::memory_order_relaxed);
	}
}

void workload(sd_cpu *c, void *arg)
{
	Shared &s = *static_cast<Shared *>(arg);
	const unsigned id = sd_cpu_id(c);
	std::mt19937 rng((unsigned)(s.seed + id * 7919u));
	s.started.fetch_add(1);
	for (unsigned round = 0; round < kRounds; round++) {
		// Migrate between the shared mms, round by round.
		sd_mm *mm = s.mms[(id + round) % kMms];
		if (int err = sd_switch_mm(c, mm))
			s.bad("sd_switch_mm: " + std::to_string(err));
		touch(s, c, rng, 32);
		if (id % 8 == 0) {
			uint64_t va = kBase + ((id / 8 + round) % (kPages / 2)) * 2 * P;
			for (unsigned k = 0; k < kMprotects; k++) {
				unsigned prot = k % 2 ? RW : (unsigned)SD_PROT_READ;
				if (int err = sd_mprotect(c, mm, va, 2 * P, prot))
					s.bad("sd_mprotect: " + std::to_string(err));
				s.mprotects.fetch_add(1, std::memory_order_relaxed);
				touch(s, c, rng, 4);
			}
			// Leave the pages writable.
			if (int err = sd_mprotect(c, mm, va, 2 * P, RW))
				s.bad("sd_mprotect: " + std::to_string(err));
			s.mprotects.fetch_add(1, std::memory_order_relaxed);
		}
		touch(s, c, rng, 16);
		if (int err = sd_cpu_idle(c))
			s.bad("sd_cpu_idle: " + std::to_string(err));
	}
	s.finished.fetch_add(1);
}

TEST(ManyCpus, BroadcastToEveryTlbTerminates)
{
	const unsigned n = cpu_count();
	// Line-buffered, so progress lines survive a watchdog abort or a timeout.
	std::setvbuf(stdout, nullptr, _IOLBF, 0);
	sd_machine_config cfg = sdtest::config(n, "broadcast");
	sd_machine *m = nullptr;
	ASSERT_EQ(0, sd_machine_create(&cfg, &m)) << sd_last_error();
	struct sd_machine_info info;
	ASSERT_EQ(0, sd_machine_info(m, &info));
	std::printf("[many_cpus] %u emulated CPUs on %u PUs (%s, %ux oversubscribed), %zu bytes "
		    "per CPU, SD_SEED=%llu\n",
		    info.nr_cpus, info.nr_pus, info.topology, info.nr_pus ? info.nr_cpus / info.nr_pus : 0,
		    info.bytes_per_cpu, (unsigned long long)sdtest::seed());
	if (n < 1024)
		std::printf("[many_cpus] scaled down from 1024 by SD_STRESS_SCALE\n");
	EXPECT_EQ(1, info.oversubscribed);

	Shared s;
	s.seed = sdtest::seed();
	{
		// The test thread sets the mms up as CPU 0, then leaves.
		sdtest::Attached a(m, 0);
		ASSERT_NE(nullptr, a.c);
		for (auto &mm : s.mms) {
			ASSERT_EQ(0, sd_mm_create(m, &mm));
			ASSERT_EQ(0, sd_mmap(a.c, mm, kBase, kPages * P, RW));
		}
	}

	auto t0 = Clock::now();
	{
		sdtest::Watchdog dog("sd_machine_run with " + std::to_string(n) + " CPUs", kWatchdogSeconds);
		ASSERT_EQ(0, sd_machine_run(m, workload, &s)) << sd_last_error();
	}
	double secs = std::chrono::duration<double>(Clock::now() - t0).count();

	sd_stats st = SD_STATS_INIT;
	ASSERT_EQ(0, sd_stats_snapshot(m, &st));
	const unsigned initiators = (n + 7) / 8;
	std::printf("[many_cpus] %u CPUs done in %.2f s: %llu accesses, %llu mprotects, %llu flushes, "
		    "%llu tlbi ops, %llu remote invalidations, %llu violations\n",
		    n, secs, (unsigned long long)s.accesses.load(),
		    (unsigned long long)s.mprotects.load(), (unsigned long long)st.counter[SD_STAT_FLUSH],
		    (unsigned long long)st.counter[SD_STAT_TLBI_OP],
		    (unsigned long long)st.counter[SD_STAT_REMOTE_INVAL],
		    (unsigned long long)sd_oracle_violations(m));

	EXPECT_LT(secs, kWatchdogSeconds);
	EXPECT_EQ(n, s.started.load());
	EXPECT_EQ(n, s.finished.load()) << "some CPU's body never returned";
	EXPECT_EQ(0u, s.unexpected.load()) << s.first_error;
	EXPECT_EQ((uint64_t)initiators * kRounds * (kMprotects + 1), s.mprotects.load());
	// Every mprotect changed populated pages (touched before by someone)
	// or not, and a write to a page first read broke copy-on-write (a
	// one-page flush); each flush that happened reached every other CPU.
	EXPECT_GT(st.counter[SD_STAT_FLUSH], 0u);
	EXPECT_LE(st.counter[SD_STAT_FLUSH], s.mprotects.load() + st.counter[SD_STAT_WP_FAULT]);
	EXPECT_EQ(st.counter[SD_STAT_TLBI_OP] * (n - 1), st.counter[SD_STAT_REMOTE_INVAL]);
	EXPECT_EQ(0u, sd_oracle_violations(m));
	sd_violation v;
	if (sd_oracle_violation(m, 0, &v) == 0)
		ADD_FAILURE() << "first violation: cpu " << v.cpu << " mm " << v.mm_id << std::hex
			      << " va 0x" << v.va << std::dec << " entry version " << v.entry_version
			      << " floor " << v.floor_version;
	EXPECT_GE(st.counter[SD_STAT_CTX_SWITCH], (uint64_t)n * kRounds) << "a CPU skipped a switch";

	for (auto *mm : s.mms)
		EXPECT_EQ(0, sd_mm_destroy(mm)) << sd_last_error();
	EXPECT_EQ(0, sd_machine_destroy(m)) << sd_last_error();
}

} // namespace
