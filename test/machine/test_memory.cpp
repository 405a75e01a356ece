// SPDX-License-Identifier: MIT
// Memory at scale: every strategy's state grows linearly
// with the CPU count, sd_machine_info() reports what a CPU really costs, and
// the `ipi` request ring that made it linear still waits for every target.
//
// The per-CPU figure is checked against the resident-set growth of creating
// machines of two sizes: the difference cancels what a machine costs whatever
// its size. Everything a machine allocates is zeroed at creation and no flush
// allocates, so creation is the worst case. The 4096-CPU figures come from
// the bench (`memory/strategy`, BENCHMARKS.md); 512 CPUs is what CI affords.
#include "common.hpp"

#include <malloc.h>
#include <cerrno>
#include <cstring>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

extern "C" {
#include "strategy/ipi.h"
#include "hw/machine_state.h"
}

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SD_TEST_SANITIZED 1
#endif
#if defined(__SANITIZE_THREAD__)
#define SD_TEST_TSAN_BUILD 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SD_TEST_SANITIZED 1
#endif
#if __has_feature(thread_sanitizer)
#define SD_TEST_TSAN_BUILD 1
#endif
#endif

using Clock = std::chrono::steady_clock;

// From before main(): large blocks are mapped and unmapped whole, so the
// heap never keeps a freed machine's arrays resident for the next one.
const int fixed_mmap_threshold = mallopt(M_MMAP_THRESHOLD, 64 * 1024);

constexpr uint64_t kPage = 0x40000000;
constexpr size_t kGoalPerCpu = 64 * 1024;     // the goal at 4096 CPUs

void user_flush(sd_cpu *, sd_mm *, uint64_t, uint64_t, unsigned, void *)
{
}

// A user strategy, registered for the scope: its adapter has state too.
struct UserStrategy {
	UserStrategy()
	{
		sd_strategy s = SD_STRATEGY_INIT;
		s.name = "memtest";
		s.flush = user_flush;
		EXPECT_EQ(0, sd_strategy_register(&s)) << sd_last_error();
	}
	~UserStrategy() { EXPECT_EQ(0, sd_strategy_unregister("memtest")) << sd_last_error(); }
};

const char *const kStrategies[] = { "broadcast", "local", "ipi", "gbcast", "none", "memtest" };

size_t bytes_per_cpu(unsigned cpus, const char *spec)
{
	sd_machine_config c = sdtest::config(cpus, spec);
	c.oracle = SD_ORACLE_OFF;
	sdtest::Machine mach(c);
	struct sd_machine_info info{};

	if (!mach.m)
		return 0;
	EXPECT_EQ(0, sd_machine_info(mach.m, &info));
	return info.bytes_per_cpu;
}

// Linear: a CPU costs the same in a machine of 128 and of 1024 CPUs (up to
// the machine-wide arrays, whose per-CPU share only shrinks), and no more
// than the goal.
TEST(Memory, EveryStrategyGrowsLinearly)
{
	UserStrategy user;

	for (const char *spec : kStrategies) {
		size_t small = bytes_per_cpu(128, spec), big = bytes_per_cpu(1024, spec);

		SCOPED_TRACE(spec);
		ASSERT_GT(small, 0u);
		EXPECT_LE(big, small) << "a CPU of a 1024-CPU machine costs more than of a 128-CPU one";
		EXPECT_LE(big, kGoalPerCpu);
		EXPECT_LE(small, kGoalPerCpu);
	}
}

// sd_machine_info() counts the strategy: `ipi` with the largest ring costs
// csd_window requests per CPU more than `broadcast`.
TEST(Memory, InfoCountsTheStrategyState)
{
	size_t bcast = bytes_per_cpu(128, "broadcast");
	size_t ipi = bytes_per_cpu(128, "ipi:csd_window=127");

	EXPECT_GE(ipi, bcast + 127 * sizeof(sd_smp_call_req) - 1024)
		<< "the request ring is not in bytes_per_cpu";
}

long rss_bytes()
{
	long pages = 0, resident = 0;
	FILE *f = std::fopen("/proc/self/statm", "r");

	if (!f)
		return -1;
	if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2)
		resident = -1;
	std::fclose(f);
	return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

// Resident growth of creating a machine of @cpus CPUs running @spec, in a
// child process: a fresh heap, so no earlier machine's freed memory serves
// this one. *@reported is its sd_machine_info() figure. -1 on failure.
long rss_growth(unsigned cpus, const char *spec, size_t *reported)
{
	long out[2] = { -1, 0 };
	int fds[2];

	if (pipe(fds))
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		sd_machine_config c = sdtest::config(cpus, spec);
		struct sd_machine_info info{};
		sd_machine *m = nullptr;

		c.oracle = SD_ORACLE_OFF;
		// With THP=always a large array could be backed by 2 MiB pages.
		prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);
		long before = rss_bytes();
		if (!sd_machine_create(&c, &m)) {
			out[0] = rss_bytes() - before;
			sd_machine_info(m, &info);
			out[1] = (long)info.bytes_per_cpu;
		}
		ssize_t w = write(fds[1], out, sizeof(out));
		_exit(w == (ssize_t)sizeof(out) ? 0 : 1);
	}
	close(fds[1]);
	ssize_t r = pid > 0 ? read(fds[0], out, sizeof(out)) : -1;
	close(fds[0]);
	if (pid > 0)
		waitpid(pid, nullptr, 0);
	if (r != (ssize_t)sizeof(out))
		return -1;
	*reported = (size_t)out[1];
	return out[0];
}

// The reported figure against the measured one: the resident growth from
// a 128- to a 512-CPU machine, per added CPU, within 2 %. `ipi` runs with a
// 127-request ring, so leaving the ring out of the report (4 KiB of the
// ~49 KiB) cannot pass.
TEST(Memory, InfoMatchesResidentGrowth)
{
#ifdef SD_TEST_SANITIZED
	GTEST_SKIP() << "sanitizer shadow memory and redzones inflate the resident set";
#endif
	ASSERT_EQ(1, fixed_mmap_threshold);
	UserStrategy user;       // registered before fork(): the child has it
	const char *const specs[] = { "broadcast", "local", "ipi:csd_window=127", "gbcast",
				      "memtest" };

	for (const char *spec : specs) {
		size_t rep_small = 0, rep_big = 0;
		long small = rss_growth(128, spec, &rep_small);
		long big = rss_growth(512, spec, &rep_big);

		SCOPED_TRACE(spec);
		ASSERT_GT(small, 0);
		ASSERT_GT(big, small);
		double measured = (double)(big - small) / (512 - 128);
		std::fprintf(stderr, "[memory] %-20s reported %zu B/CPU, measured %.0f B/CPU\n",
			     spec, rep_big, measured);
		EXPECT_NEAR((double)rep_big, measured, 0.02 * measured);
	}
}

// ---- the request ring: reuse only after the ack, return only after all ----

// Initiator 0 write-protects a page four CPUs cache writable, through a
// ring of two requests. Target 1 keeps interrupts off until the initiator
// posts a third request (the reuse of 1's slot: a bug while 1 has not
// answered) or 300 ms passed. Target 4, the last one posted to, keeps them
// off from its post until the initiator's flush returned (a bug: 4 has not
// answered) or 300 ms passed. Either bug is seen whatever the scheduling; the fixed code
// costs the two 300 ms bounds.
struct RingRun {
	std::atomic<bool> reused_before_ack{ false };
	std::atomic<bool> returned_before_ack{ false };
	uint64_t stale = 0;
	unsigned targets_flushed = 0;
};

uint64_t sent_by(sd_machine *m, unsigned cpu)
{
	return sdtest::counter(m, cpu, SD_STAT_IPI_SENT);
}

uint64_t received_by(sd_machine *m, unsigned cpu)
{
	return sdtest::counter(m, cpu, SD_STAT_IPI_RECV);
}

// Whether @pred held before @ms milliseconds passed.
bool holds_within(const std::function<bool()> &pred, int ms)
{
	auto deadline = Clock::now() + std::chrono::milliseconds(ms);
	while (!pred()) {
		if (Clock::now() > deadline)
			return false;
		std::this_thread::yield();
	}
	return true;
}

void run_ring(RingRun *r, unsigned broken)
{
	constexpr unsigned kCpus = 5;
	sdtest::Machine machine{ sdtest::config(kCpus, "ipi:csd_window=2") };
	sdtest::Watchdog dog("the csd ring test (initiator or a target stuck)", 60);
	sd_mm *mm = nullptr;
	std::atomic<unsigned> ready{ 0 };
	std::atomic<bool> go{ false }, flushed{ false }, checked{ false };
	std::atomic<uint64_t> base{ 0 };
	uint64_t recv0[kCpus] = {};
	std::vector<std::thread> targets;

	ASSERT_NE(nullptr, machine.m);
	ASSERT_EQ(0, sd_ipi_test_break(machine.m, broken)) << sd_last_error();
	ASSERT_EQ(0, sd_mm_create(machine.m, &mm));
	for (unsigned id = 1; id < kCpus; id++) {
		targets.emplace_back([&, id] {
			sdtest::Attached t(machine.m, id);
			holds_within([&] { return go.load(); }, 20000);
			EXPECT_EQ(0, sd_switch_mm(t.c, mm));
			EXPECT_EQ(0, sd_access(t.c, kPage, SD_WRITE, nullptr));
			recv0[id] = received_by(machine.m, id);
			if (id == 1 || id == kCpus - 1)
				sd_irq_disable(t.c);
			ready++;
			if (id == 1) {
				// A third post before our ack reuses our request.
				if (holds_within([&] { return sent_by(machine.m, 0) >= base + 3; }, 300) &&
				    received_by(machine.m, 1) == recv0[1])
					r->reused_before_ack = true;
				sd_irq_enable(t.c);
			} else if (id == kCpus - 1) {
				// Posted to last: from then on, the flush must wait for us.
				holds_within([&] { return sent_by(machine.m, 0) >= base + 4; }, 20000);
				if (holds_within([&] { return flushed.load(); }, 300) &&
				    received_by(machine.m, id) == recv0[id])
					r->returned_before_ack = true;
				sd_irq_enable(t.c);
			}
			holds_within([&] { return checked.load(); }, 20000);
			// After the flush, a write must fault, not hit a stale entry.
			EXPECT_EQ(-EACCES, sd_access(t.c, kPage, SD_WRITE, nullptr));
			sd_switch_mm(t.c, nullptr);
		});
	}
	{
		sdtest::Attached a(machine.m, 0);
		EXPECT_EQ(0, sd_mmap(a.c, mm, kPage, SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE));
		EXPECT_EQ(0, sd_switch_mm(a.c, mm));
		EXPECT_EQ(0, sd_access(a.c, kPage, SD_WRITE, nullptr));
		go = true;
		EXPECT_TRUE(holds_within([&] { return ready.load() == kCpus - 1; }, 20000));
		base = sent_by(machine.m, 0);
		EXPECT_EQ(0, sd_mprotect(a.c, mm, kPage, SD_PAGE_SIZE, SD_PROT_READ));
		flushed = true;
		for (unsigned id = 1; id < kCpus; id++)
			r->targets_flushed += received_by(machine.m, id) > recv0[id];
		checked = true;
		for (auto &t : targets)
			t.join();
		sd_switch_mm(a.c, nullptr);
	}
	r->stale = sd_oracle_violations(machine.m);
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

TEST(CsdRing, WideFlushThroughASmallRing)
{
	RingRun r;

	run_ring(&r, 0);
	EXPECT_FALSE(r.reused_before_ack.load()) << "a request was posted again before its ack";
	EXPECT_FALSE(r.returned_before_ack.load()) << "the flush returned before the last ack";
	EXPECT_EQ(4u, r.targets_flushed);
	EXPECT_EQ(0u, r.stale);
}

// The planted bug: the ring reuses its oldest request without waiting.
TEST(CsdRing, PlantedReuseWithoutWaitIsSeen)
{
#ifdef SD_TEST_TSAN_BUILD
	GTEST_SKIP() << "the planted bug races on the request on purpose: TSan would halt";
#endif
	RingRun r;

	run_ring(&r, SD_IPI_BREAK_CSD_REUSE);
	EXPECT_TRUE(r.reused_before_ack.load());
}

// A ring option out of range is refused, naming it, and leaves no machine.
TEST(CsdRing, WindowOptionChecked)
{
	sd_machine_config c = sdtest::config(4, "ipi:csd_window=0");
	sd_machine *m = nullptr;

	EXPECT_EQ(-EINVAL, sd_machine_create(&c, &m));
	EXPECT_EQ(nullptr, m);
	EXPECT_NE(nullptr, std::strstr(sd_last_error(), "csd_window")) << sd_last_error();
	c.strategy = "gbcast:csd_window=5000";
	EXPECT_EQ(-EINVAL, sd_machine_create(&c, &m));
	EXPECT_EQ(nullptr, m);
}

} // namespace
