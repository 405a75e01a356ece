// SPDX-License-Identifier: MIT
// User strategies (strategy.h): the registry's errors, the building blocks'
// errors, and the oracle judging user strategies exactly as built-in ones:
// a broadcast one and an IPI one are clean, one that flushes only its own
// TLB is caught, deterministically and under a random workload.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <urcu-qsbr.h>

#include "common.hpp"

namespace {

constexpr uint64_t kVa = 0x40000000ull;
constexpr unsigned kPages = 8;

// ---- three strategies ----

// Broadcast: one TLBI ...IS reaches every TLB.
void bcast_flush(sd_cpu *cpu, sd_mm *mm, uint64_t va, uint64_t len, unsigned, void *)
{
	EXPECT_EQ(0, sd_tlb_invalidate_broadcast(cpu, mm, va, len));
}

// IPIs: invalidate here, then make every other CPU in the mask invalidate
// its own TLB in its IPI handler, as x86 does.
struct IpiReq {
	sd_mm *mm;
	uint64_t va, len;
};

void ipi_target(sd_cpu *target, void *arg)
{
	auto *r = static_cast<IpiReq *>(arg);
	sd_tlb_invalidate_local(target, r->mm, r->va, r->len);
}

void ipi_flush(sd_cpu *cpu, sd_mm *mm, uint64_t va, uint64_t len, unsigned, void *)
{
	IpiReq r{ mm, va, len };
	const unsigned me = sd_cpu_id(cpu), n = sd_machine_nr_cpus(sd_cpu_machine(cpu));

	EXPECT_EQ(0, sd_tlb_invalidate_local(cpu, mm, va, len));
	for (unsigned c = sd_mm_cpumask_next(mm, 0); c < n; c = sd_mm_cpumask_next(mm, c + 1)) {
		if (c != me) {
			EXPECT_EQ(0, sd_smp_call_single(cpu, c, ipi_target, &r));
		}
	}
}

// Broken on purpose: only the initiator's own TLB.
void local_only_flush(sd_cpu *cpu, sd_mm *mm, uint64_t va, uint64_t len, unsigned, void *)
{
	sd_tlb_invalidate_local(cpu, mm, va, len);
}

struct Registered {
	std::string name;
	Registered(const char *n, decltype(sd_strategy::flush) flush) : name(n)
	{
		sd_strategy s = SD_STRATEGY_INIT;
		s.name = n;
		s.flush = flush;
		EXPECT_EQ(0, sd_strategy_register(&s)) << sd_last_error();
	}
	~Registered() { EXPECT_EQ(0, sd_strategy_unregister(name.c_str())) << sd_last_error(); }
};

// ---- a deterministic scenario: fill everywhere, write-protect, write ----

struct Scenario {
	sd_mm *mm = nullptr;
	std::atomic<unsigned> filled{0};
	std::atomic<int> phase{0};
	std::atomic<unsigned> writes_allowed{0};
};

void wait_until(sd_cpu *c, const std::function<bool()> &done)
{
	while (!done()) {
		sd_cpu_quiescent(c);
		sched_yield();
	}
}

void scenario_body(sd_cpu *c, void *p)
{
	auto *s = static_cast<Scenario *>(p);
	const unsigned id = sd_cpu_id(c), n = sd_machine_nr_cpus(sd_cpu_machine(c));

	ASSERT_EQ(0, sd_switch_mm(c, s->mm));
	EXPECT_EQ(0, sd_access(c, kVa, SD_WRITE, nullptr));
	s->filled.fetch_add(1);
	if (id == 0) {
		wait_until(c, [&] { return s->filled.load() == n; });
		EXPECT_EQ(0, sd_mprotect(c, s->mm, kVa, SD_PAGE_SIZE, SD_PROT_READ));
		s->phase.store(1);
	} else {
		wait_until(c, [&] { return s->phase.load() == 1; });
	}
	if (sd_access(c, kVa, SD_WRITE, nullptr) == 0)
		s->writes_allowed.fetch_add(1);
	EXPECT_EQ(0, sd_switch_mm(c, nullptr));
}

struct Result {
	unsigned writes_allowed = 0;
	uint64_t violations = 0;
};

Result run_scenario(const char *strategy, unsigned cpus)
{
	Result r;
	sd_machine_config cfg = sdtest::config(cpus, strategy);
	cfg.oracle = SD_ORACLE_CHECKED;
	sdtest::Machine m(cfg);
	if (!m.m)
		return r;
	Scenario s;
	{
		sdtest::Attached a(m.m, 0);
		EXPECT_EQ(0, sd_mm_create(m.m, &s.mm));
		EXPECT_EQ(0, sd_mmap(a.c, s.mm, kVa, kPages * SD_PAGE_SIZE,
				     SD_PROT_READ | SD_PROT_WRITE));
	}
	EXPECT_EQ(0, sd_machine_run(m.m, scenario_body, &s)) << sd_last_error();
	r.writes_allowed = s.writes_allowed.load();
	r.violations = sd_oracle_violations(m.m);
	EXPECT_EQ(0, sd_mm_destroy(s.mm));
	return r;
}

} // namespace

TEST(UserStrategy, RegistryRejectsBadInput)
{
	sd_strategy s = SD_STRATEGY_INIT;
	EXPECT_EQ(-EINVAL, sd_strategy_register(nullptr));
	EXPECT_EQ(-EINVAL, sd_strategy_register(&s)) << "no name";
	s.name = "Bad-Name";
	s.flush = bcast_flush;
	EXPECT_EQ(-EINVAL, sd_strategy_register(&s));
	s.name = "noflush";
	s.flush = nullptr;
	EXPECT_EQ(-EINVAL, sd_strategy_register(&s));
	s.flush = bcast_flush;
	s.name = "ipi";
	EXPECT_EQ(-EEXIST, sd_strategy_register(&s)) << "a built-in name";
	s.size = 3;
	s.name = "tiny";
	EXPECT_EQ(-EINVAL, sd_strategy_register(&s)) << "unknown size";
	s.size = sizeof(s);
	s.flags = 1u << 7;
	EXPECT_EQ(-EINVAL, sd_strategy_register(&s)) << "unknown flag";
	EXPECT_EQ(-ENOENT, sd_strategy_unregister("never_registered"));
	EXPECT_EQ(-EINVAL, sd_strategy_unregister(nullptr));
	EXPECT_STRNE("", sd_strerror(-EEXIST));

	{
		Registered once("dup_check", bcast_flush);
		s.flags = 0;
		s.name = "dup_check";
		EXPECT_EQ(-EEXIST, sd_strategy_register(&s));
	}
	// The registry is finite: the 17th is refused, and nothing half-done
	// stays behind (all 16 unregister cleanly).
	std::vector<std::string> names;
	for (unsigned i = 0; i < SD_STRATEGY_MAX_USER; i++) {
		names.push_back("fill_" + std::to_string(i));
		s.name = names.back().c_str();
		ASSERT_EQ(0, sd_strategy_register(&s)) << sd_last_error();
	}
	s.name = "one_too_many";
	EXPECT_EQ(-ENOSPC, sd_strategy_register(&s));
	for (auto &n : names)
		EXPECT_EQ(0, sd_strategy_unregister(n.c_str()));
}

TEST(UserStrategy, MachineNamesItAndKeepsItBusy)
{
	Registered r("busy_check", bcast_flush);
	sd_machine_config cfg = sdtest::config(2, "busy_check");
	sd_machine *m = nullptr;
	ASSERT_EQ(0, sd_machine_create(&cfg, &m)) << sd_last_error();
	EXPECT_EQ(-EBUSY, sd_strategy_unregister("busy_check"));
	// Options go to machine_init; without one, any option is refused.
	sd_machine *m2 = nullptr;
	cfg.strategy = "busy_check:x=1";
	EXPECT_EQ(-ENOENT, sd_machine_create(&cfg, &m2));
	EXPECT_EQ(nullptr, m2);
	EXPECT_EQ(0, sd_machine_destroy(m));
}

// A machine_init() that refuses says why, in the strategy's own words.
TEST(UserStrategy, ARefusalCarriesTheStrategysOwnMessage)
{
	sd_strategy s = SD_STRATEGY_INIT;
	s.name = "says_why";
	s.flush = bcast_flush;
	s.machine_init = [](sd_machine *, const char *options, void *) {
		if (!strcmp(options, "mode=fast"))
			return 0;
		if (!strcmp(options, "mode=quiet"))
			return -EINVAL;         // no message: the generic one
		return sd_strategy_error(-EINVAL, "mode must be fast, not '%s'", options);
	};
	ASSERT_EQ(0, sd_strategy_register(&s)) << sd_last_error();
	sd_machine_config cfg = sdtest::config(2, "says_why:mode=slow");
	sd_machine *m = nullptr;
	EXPECT_EQ(-EINVAL, sd_machine_create(&cfg, &m));
	EXPECT_EQ(nullptr, m);
	EXPECT_STREQ("strategy 'says_why': mode must be fast, not 'mode=slow'", sd_last_error());
	// A later refusal without a message does not inherit the old one.
	cfg.strategy = "says_why:mode=quiet";
	EXPECT_EQ(-EINVAL, sd_machine_create(&cfg, &m));
	EXPECT_NE(nullptr, strstr(sd_last_error(), "machine_init refused options 'mode=quiet'"))
		<< sd_last_error();
	cfg.strategy = "says_why:mode=fast";
	ASSERT_EQ(0, sd_machine_create(&cfg, &m)) << sd_last_error();
	EXPECT_EQ(0, sd_machine_destroy(m));
	// Outside a machine_init() it is a plain record of the message.
	EXPECT_EQ(-ERANGE, sd_strategy_error(-ERANGE, "just %d words", 3));
	EXPECT_STREQ("just 3 words", sd_last_error());
	EXPECT_EQ(0, sd_strategy_unregister("says_why"));
}

TEST(UserStrategy, BuildingBlocksRefuseMisuse)
{
	// On a built-in strategy's machine the blocks do not apply.
	sdtest::Machine m(sdtest::config(2, "broadcast"));
	ASSERT_NE(nullptr, m.m);
	sd_mm *mm = nullptr;
	ASSERT_EQ(0, sd_mm_create(m.m, &mm));
	{
		sdtest::Attached a(m.m, 0);
		EXPECT_EQ(-EOPNOTSUPP, sd_tlb_invalidate_local(a.c, mm, 0, 0));
		EXPECT_EQ(-EOPNOTSUPP, sd_tlb_invalidate_broadcast(a.c, mm, 0, 0));
		EXPECT_EQ(-EINVAL, sd_tlb_invalidate_local(a.c, mm, 1, 0)) << "unaligned";
	}
	EXPECT_EQ(-EOPNOTSUPP, sd_mm_cpumask_test(mm, 0));
	EXPECT_EQ(-EOPNOTSUPP, sd_mm_active_cpus(mm));
	EXPECT_EQ(-EINVAL, sd_mm_cpumask_set(nullptr, 0));
	EXPECT_EQ(0, sd_mm_destroy(mm));

	Registered r("blocks_check", bcast_flush);
	sdtest::Machine u(sdtest::config(2, "blocks_check"));
	ASSERT_NE(nullptr, u.m);
	ASSERT_EQ(0, sd_mm_create(u.m, &mm));
	EXPECT_EQ(-EINVAL, sd_mm_cpumask_test(mm, 2)) << "CPU out of range";
	{
		sdtest::Attached a(u.m, 0);
		sd_cpu *other = nullptr;
		std::thread t([&] { sdtest::Attached b(u.m, 1); other = b.c; });
		t.join();
		EXPECT_EQ(0, sd_switch_mm(a.c, mm));
		EXPECT_EQ(1, sd_mm_cpumask_test(mm, 0));
		EXPECT_EQ(1, sd_mm_active_cpus(mm));
		EXPECT_EQ(0u, sd_mm_cpumask_next(mm, 0));
		EXPECT_EQ(2u, sd_mm_cpumask_next(mm, 1));
		EXPECT_EQ(-EPERM, sd_tlb_invalidate_local(other, mm, 0, 0)) << "not CPU 1's thread";
		EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
		EXPECT_EQ(0, sd_mm_cpumask_test(mm, 0)) << "eager: cleared on switch-out";
		EXPECT_EQ(0, sd_mm_active_cpus(mm));
	}
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

TEST(UserStrategy, OracleAcceptsBroadcastAndIpiStrategies)
{
	Registered b("user_bcast", bcast_flush);
	Registered i("user_ipi", ipi_flush);
	for (const char *s : { "user_bcast", "user_ipi" }) {
		for (unsigned cpus : { 2u, 4u }) {
			Result r = run_scenario(s, cpus);
			EXPECT_EQ(0u, r.writes_allowed) << s << " at " << cpus << " CPUs";
			EXPECT_EQ(0u, r.violations) << s << " at " << cpus << " CPUs";
		}
	}
}

TEST(UserStrategy, OracleCatchesALocalOnlyStrategy)
{
	Registered r("user_local_only", local_only_flush);
	Result res = run_scenario("user_local_only", 4);
	// CPUs 1..3 kept their writable entry: each write goes through, and
	// the oracle counts it.
	EXPECT_EQ(3u, res.writes_allowed);
	EXPECT_EQ(3u, res.violations);
}

namespace {

// A CPU that cached a page, switched away, and comes back after a flush
// that skipped it (its cpumask bit was clear): its ASID-tagged entry is
// still in its TLB, so the library must flush it at switch-in.
struct Return {
	sd_mm *mm = nullptr, *other = nullptr;
	std::atomic<int> step{0};
	int write_back = 0;
};

void return_body(sd_cpu *c, void *p)
{
	auto *r = static_cast<Return *>(p);
	if (sd_cpu_id(c) == 1) {
		ASSERT_EQ(0, sd_switch_mm(c, r->mm));
		EXPECT_EQ(0, sd_access(c, kVa, SD_WRITE, nullptr));   // cached RW
		ASSERT_EQ(0, sd_switch_mm(c, r->other));              // bit cleared
		r->step.store(1);
		wait_until(c, [&] { return r->step.load() == 2; });
		ASSERT_EQ(0, sd_switch_mm(c, r->mm));                 // back
		r->write_back = sd_access(c, kVa, SD_WRITE, nullptr);
		EXPECT_EQ(0, sd_switch_mm(c, nullptr));
	} else {
		wait_until(c, [&] { return r->step.load() == 1; });
		ASSERT_EQ(0, sd_switch_mm(c, r->mm));
		EXPECT_EQ(0, sd_mprotect(c, r->mm, kVa, SD_PAGE_SIZE, SD_PROT_READ));
		EXPECT_EQ(0, sd_switch_mm(c, nullptr));
		r->step.store(2);
	}
}

} // namespace

TEST(UserStrategy, ACpuThatLeftAndCameBackIsFlushed)
{
	Registered i("user_ipi_return", ipi_flush);
	sd_machine_config cfg = sdtest::config(2, "user_ipi_return");
	cfg.oracle = SD_ORACLE_CHECKED;
	sdtest::Machine m(cfg);
	ASSERT_NE(nullptr, m.m);
	Return r;
	{
		sdtest::Attached a(m.m, 0);
		ASSERT_EQ(0, sd_mm_create(m.m, &r.mm));
		ASSERT_EQ(0, sd_mm_create(m.m, &r.other));
		ASSERT_EQ(0, sd_mmap(a.c, r.mm, kVa, SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE));
	}
	ASSERT_EQ(0, sd_machine_run(m.m, return_body, &r)) << sd_last_error();
	EXPECT_EQ(-EACCES, r.write_back) << "the entry cached before leaving was used";
	EXPECT_EQ(0u, sd_oracle_violations(m.m));
	EXPECT_EQ(0, sd_mm_destroy(r.mm));
	EXPECT_EQ(0, sd_mm_destroy(r.other));
}

namespace {

// Wait until every call_rcu() callback queued so far has run (the deferred
// page-table frees included), passing quiescent states meanwhile: the
// barrier's grace period needs this CPU's.
void wait_for_deferred_frees(sd_cpu *c)
{
	std::atomic<bool> done{false};
	std::thread barrier([&] {
		urcu_qsbr_barrier();
		done.store(true);
	});
	while (!done.load()) {
		sd_cpu_quiescent(c);
		std::this_thread::sleep_for(std::chrono::microseconds(100));
	}
	barrier.join();
}

} // namespace

// Issue 13.3: a strategy written exactly as docs/guide.md shows flushes
// leaf-only (sd_tlb_invalidate_broadcast() of the range), so the walk cache
// keeps its pointer to a leaf table that the unmap unlinked and, after the
// grace period, freed. The library must never walk it again: the next
// access faults on the unmapped page, succeeds once it is mapped again, is
// ASan clean and does not spin.
TEST(UserStrategy, GuideFlushCannotMakeAWalkReadAFreedTable)
{
	Registered r("user_guide_walk", bcast_flush);
	sd_machine_config cfg = sdtest::config(2, "user_guide_walk");
	sdtest::Machine m(cfg);
	ASSERT_NE(nullptr, m.m);
	sdtest::Watchdog w("walk-cache test: CPU 0 loops between walk_and_fill() and populate()",
			   60);
	sdtest::Attached a(m.m, 0);
	sd_mm *mm = nullptr;
	ASSERT_EQ(0, sd_mm_create(m.m, &mm));
	ASSERT_EQ(0, sd_switch_mm(a.c, mm));
	// Alone in its 512 GiB region: the munmap frees every table below the pgd.
	const uint64_t va = 0x7f0000200000ull;
	const unsigned rw = SD_PROT_READ | SD_PROT_WRITE;
	for (int round = 0; round < 3; round++) {
		ASSERT_EQ(0, sd_mmap(a.c, mm, va, SD_PAGE_SIZE, rw));
		ASSERT_EQ(0, sd_access(a.c, va, SD_WRITE, nullptr));   // walk cache: the leaf
		const uint64_t wc_hits = sdtest::counter(m.m, 0, SD_STAT_WALK_CACHE_HIT);
		ASSERT_EQ(0, sd_munmap(a.c, mm, va, SD_PAGE_SIZE));
		wait_for_deferred_frees(a.c);
		EXPECT_EQ(-EFAULT, sd_access(a.c, va, SD_READ, nullptr)) << "round " << round;
		ASSERT_EQ(0, sd_mmap(a.c, mm, va, SD_PAGE_SIZE, rw));
		EXPECT_EQ(0, sd_access(a.c, va, SD_WRITE, nullptr)) << "round " << round;
		EXPECT_EQ(wc_hits, sdtest::counter(m.m, 0, SD_STAT_WALK_CACHE_HIT))
			<< "round " << round << ": a walk went through the freed leaf table";
		ASSERT_EQ(0, sd_munmap(a.c, mm, va, SD_PAGE_SIZE));
	}
	EXPECT_EQ(0u, sd_oracle_violations(m.m));
	EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}
