// SPDX-License-Identifier: MIT
// The `riscv` strategy (lib/strategy/riscv.c): mm_cpumask footmarks that
// outlive the switch while the mm keeps its ASID (cleared at each switch
// without ASIDs), the local flush's single page / per page / Svinval /
// whole-ASID choice at tlb_flush_all_threshold, SBI remote fences (the
// firmware's one-page range limit, serviced in M-mode with S-mode
// interrupts off) against S-mode IPIs, the kernel's rule between them, the
// reclaim batch's union mask and whole flush, and two planted bugs the
// oracle catches: the pre-2022 clearing of a footmark at switch-out, and
// the switcher's fence between its mask bit and satp removed.
#include "common.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <shootdown/tlbbatch.h>

extern "C" {
#include "core/ordering.h"
#include "hw/smp.h"
#include "mm/mm.h"
#include "strategy/riscv.h"
}

namespace {

using sdtest::Attached;
using sdtest::Cpus;
using sdtest::Machine;
using sdtest::total;

constexpr uint64_t kBase = 0x40000000;
constexpr uint64_t P = SD_PAGE_SIZE;
constexpr unsigned RW = SD_PROT_READ | SD_PROT_WRITE;

void touch(sd_cpu *c, sd_mm *mm, unsigned pages, sd_access_kind how = SD_WRITE)
{
	EXPECT_EQ(0, sd_switch_mm(c, mm));
	for (unsigned i = 0; i < pages; i++)
		EXPECT_EQ(0, sd_access(c, kBase + i * P, how, nullptr));
}

struct Break {
	explicit Break(unsigned bug) { atomic_store(&sd_riscv_test_break, bug); }
	~Break() { atomic_store(&sd_riscv_test_break, 0u); }
};

// CPU 1 ran the mm, cached a page writable and went to another mm; CPU 0
// write-protects the page; CPU 1 comes back under the same ASID (no flush
// at the switch) and writes. Returns the write's result; @targets the
// flush's remote targets (SBI fences).
struct Footmark {
	int write = 1;
	uint64_t targets = 0, violations = 0;
};

Footmark leave_and_return(const char *spec)
{
	Footmark r;
	Machine mc(sdtest::config(2, spec));
	Attached a(mc.m, 0);
	Cpus cpus(mc.m, 2);
	sd_mm *mm = nullptr, *other = nullptr;

	EXPECT_EQ(0, sd_mm_create(mc.m, &mm));
	EXPECT_EQ(0, sd_mm_create(mc.m, &other));
	EXPECT_EQ(0, sd_mmap(a.c, mm, kBase, P, RW));
	touch(a.c, mm, 1);
	cpus.run(1, [&](sd_cpu *c) {
		touch(c, mm, 1);
		EXPECT_EQ(0, sd_switch_mm(c, other));
	});
	uint64_t sent = total(mc.m, SD_STAT_SBI_SENT);
	EXPECT_EQ(0, sd_mprotect(a.c, mm, kBase, P, SD_PROT_READ));
	r.targets = total(mc.m, SD_STAT_SBI_SENT) - sent;
	cpus.run(1, [&](sd_cpu *c) {
		EXPECT_EQ(0, sd_switch_mm(c, mm));
		r.write = sd_access(c, kBase, SD_WRITE, nullptr);
		EXPECT_EQ(0, sd_switch_mm(c, nullptr));
	});
	r.violations = sd_oracle_violations(mc.m);
	EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	EXPECT_EQ(0, sd_mm_destroy(mm));
	EXPECT_EQ(0, sd_mm_destroy(other));
	return r;
}

TEST(Riscv, AFootmarkOutlivesTheSwitchSoTheFlushStillReachesIt)
{
	Footmark r = leave_and_return("riscv:rfence=sbi");
	EXPECT_EQ(1u, r.targets) << "CPU 1 left the mm but keeps its bit and its entries";
	EXPECT_EQ(-EACCES, r.write);
	EXPECT_EQ(0u, r.violations);
}

TEST(Riscv, ClearingTheFootmarkAtSwitchOutLeavesAStaleEntryTheOracleCatches)
{
	Break bug(SD_RISCV_BREAK_CLEAR_FOOTMARK);
	Footmark r = leave_and_return("riscv:rfence=sbi");
	EXPECT_EQ(0u, r.targets) << "the flush found CPU 0 alone in the mask";
	EXPECT_EQ(0, r.write) << "CPU 1 wrote through its stale writable entry";
	EXPECT_GE(r.violations, 1u);
}

TEST(Riscv, WithoutAsidsTheSwitchFlushesAndClearsItsBit)
{
	// The same leave and return, on a hart with no ASID bits: the switch's
	// full flush (set_mm_noasid()) makes the clearing correct.
	Footmark r = leave_and_return("riscv:rfence=sbi,asid=0");
	EXPECT_EQ(0u, r.targets);
	EXPECT_EQ(-EACCES, r.write);
	EXPECT_EQ(0u, r.violations);
}

// ---- the local flush: local_flush_tlb_range_asid() ----

struct LocalKinds {
	uint64_t one, range, asid;
};

LocalKinds local_flush_of(const char *spec, unsigned pages)
{
	Machine mc(sdtest::config(1, spec));
	Attached a(mc.m, 0);
	sd_mm *mm = nullptr;

	EXPECT_EQ(0, sd_mm_create(mc.m, &mm));
	EXPECT_EQ(0, sd_mmap(a.c, mm, kBase, 128 * P, RW));
	touch(a.c, mm, pages);
	LocalKinds before = { total(mc.m, SD_STAT_LOCAL_FLUSH_ONE),
			      total(mc.m, SD_STAT_LOCAL_FLUSH_RANGE),
			      total(mc.m, SD_STAT_LOCAL_FLUSH_ASID) };
	EXPECT_EQ(0, sd_mprotect(a.c, mm, kBase, pages * P, SD_PROT_READ));
	LocalKinds r = { total(mc.m, SD_STAT_LOCAL_FLUSH_ONE) - before.one,
			 total(mc.m, SD_STAT_LOCAL_FLUSH_RANGE) - before.range,
			 total(mc.m, SD_STAT_LOCAL_FLUSH_ASID) - before.asid };
	EXPECT_EQ(-EACCES, sd_access(a.c, kBase + (pages - 1) * P, SD_WRITE, nullptr));
	EXPECT_EQ(0u, sd_oracle_violations(mc.m));
	EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	EXPECT_EQ(0, sd_mm_destroy(mm));
	return r;
}

TEST(Riscv, TheLocalFlushIsAPageAPageUpToTheThresholdThenTheAsid)
{
	LocalKinds one = local_flush_of("riscv", 1);
	EXPECT_EQ(1u, one.one);
	LocalKinds eight = local_flush_of("riscv:svinval=0", 8);
	EXPECT_EQ(8u, eight.one) << "one sfence.vma a page";
	EXPECT_EQ(0u, eight.asid);
	LocalKinds at = local_flush_of("riscv:svinval=0", 64);
	EXPECT_EQ(64u, at.one) << "64 pages is not above tlb_flush_all_threshold";
	LocalKinds above = local_flush_of("riscv:svinval=0", 65);
	EXPECT_EQ(0u, above.one);
	EXPECT_EQ(1u, above.asid) << "65 pages: sfence.vma for the ASID";
	LocalKinds zero = local_flush_of("riscv:threshold=0", 2);
	EXPECT_EQ(1u, zero.asid);
}

TEST(Riscv, SvinvalPipelinesTheRangeBetweenTwoFences)
{
	LocalKinds sv = local_flush_of("riscv:svinval=1", 8);
	EXPECT_EQ(0u, sv.one);
	EXPECT_EQ(1u, sv.range) << "sfence.w.inval, 8 sinval.vma, sfence.inval.ir";
	LocalKinds above = local_flush_of("riscv:svinval=1", 65);
	EXPECT_EQ(0u, above.range);
	EXPECT_EQ(1u, above.asid);
}

// ---- remote fences ----

struct Remote {
	uint64_t ecalls, sbi_targets, widened, ipis, remote_asid, remote_one;
	uint64_t violations;
	int write;
};

// CPUs 0 and 1 run the mm with @pages cached writable; CPU 0 protects them.
Remote remote_flush_of(const char *spec, unsigned pages)
{
	Remote r{};
	Machine mc(sdtest::config(2, spec));
	Attached a(mc.m, 0);
	Cpus cpus(mc.m, 2);
	sd_mm *mm = nullptr;

	EXPECT_EQ(0, sd_mm_create(mc.m, &mm));
	EXPECT_EQ(0, sd_mmap(a.c, mm, kBase, pages * P, RW));
	touch(a.c, mm, pages);
	cpus.run(1, [&](sd_cpu *c) { touch(c, mm, pages); });
	uint64_t e = total(mc.m, SD_STAT_SBI_ECALL), s = total(mc.m, SD_STAT_SBI_SENT);
	uint64_t w = total(mc.m, SD_STAT_SBI_RANGE_WIDENED), i = total(mc.m, SD_STAT_IPI_SENT);
	uint64_t ra = sdtest::counter(mc.m, 1, SD_STAT_LOCAL_FLUSH_ASID);
	uint64_t ro = sdtest::counter(mc.m, 1, SD_STAT_LOCAL_FLUSH_ONE);
	EXPECT_EQ(0, sd_mprotect(a.c, mm, kBase, pages * P, SD_PROT_READ));
	r.ecalls = total(mc.m, SD_STAT_SBI_ECALL) - e;
	r.sbi_targets = total(mc.m, SD_STAT_SBI_SENT) - s;
	r.widened = total(mc.m, SD_STAT_SBI_RANGE_WIDENED) - w;
	r.ipis = total(mc.m, SD_STAT_IPI_SENT) - i;
	r.remote_asid = sdtest::counter(mc.m, 1, SD_STAT_LOCAL_FLUSH_ASID) - ra;
	r.remote_one = sdtest::counter(mc.m, 1, SD_STAT_LOCAL_FLUSH_ONE) - ro;
	cpus.run(1, [&](sd_cpu *c) {
		r.write = sd_access(c, kBase + (pages - 1) * P, SD_WRITE, nullptr);
		EXPECT_EQ(0, sd_switch_mm(c, nullptr));
	});
	r.violations = sd_oracle_violations(mc.m);
	EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	EXPECT_EQ(0, sd_mm_destroy(mm));
	return r;
}

TEST(Riscv, TheFirmwareFlushesARangeLongerThanItsLimitAsTheWholeAsid)
{
	Remote one = remote_flush_of("riscv:rfence=sbi", 1);
	EXPECT_EQ(1u, one.ecalls);
	EXPECT_EQ(1u, one.sbi_targets);
	EXPECT_EQ(0u, one.widened);
	EXPECT_EQ(1u, one.remote_one);
	EXPECT_EQ(0u, one.ipis) << "no S-mode IPI: the firmware fences CPU 1";
	EXPECT_EQ(-EACCES, one.write);

	Remote two = remote_flush_of("riscv:rfence=sbi", 2);
	EXPECT_EQ(1u, two.widened) << "2 pages > tlb_range_flush_limit (4 KiB)";
	EXPECT_EQ(1u, two.remote_asid);
	EXPECT_EQ(0u, two.remote_one);
	EXPECT_EQ(-EACCES, two.write);

	Remote limit = remote_flush_of("riscv:rfence=sbi,sbi_flush_limit=4", 2);
	EXPECT_EQ(0u, limit.widened);
	EXPECT_EQ(2u, limit.remote_one);
	EXPECT_EQ(0u, limit.violations + two.violations + one.violations);
}

TEST(Riscv, IpiFencesRunTheKernelsOwnLocalFlushOnEachTarget)
{
	Remote r = remote_flush_of("riscv:rfence=ipi,svinval=0", 2);
	EXPECT_EQ(0u, r.ecalls);
	EXPECT_GE(r.ipis, 1u);
	EXPECT_EQ(2u, r.remote_one) << "local_flush_tlb_range_asid() in the handler";
	EXPECT_EQ(-EACCES, r.write);
	EXPECT_EQ(0u, r.violations);
}

// ---- the kernel's rule: SBI when the IPIs go through SBI ----

std::string profile_without_native_ipis()
{
	std::ifstream in(SD_SOURCE_ROOT "/test/hw/profile-fixture.json");
	std::stringstream ss;
	ss << in.rdbuf();
	std::string s = ss.str();
	const std::string ipi =
		"\"ipi\": \"test fixture: every mechanism, so that every strategy runs on it\",";
	size_t at = s.find(ipi);
	EXPECT_NE(std::string::npos, at);
	if (at != std::string::npos)
		s.erase(at, ipi.size());
	std::string path = testing::TempDir() + "riscv-sbi-only.json";
	std::ofstream(path) << s;
	return path;
}

TEST(Riscv, AutoFollowsTheIpiDeviceAndAMissingMechanismIsRefused)
{
	std::string sbi_only = profile_without_native_ipis();
	sd_machine_config c = sdtest::config(2, "riscv");
	c.profile = sbi_only.c_str();
	sd_machine *m = nullptr;
	ASSERT_EQ(0, sd_machine_create(&c, &m)) << sd_last_error();
	sd_mechanism_info info = SD_MECHANISM_INFO_INIT;
	ASSERT_EQ(0, sd_machine_mechanisms(m, &info));
	EXPECT_EQ((unsigned)SD_MECH_SBI, info.needed) << "no native IPIs: rfence=sbi";
	EXPECT_EQ(0, sd_machine_destroy(m));

	c.strategy = "riscv:rfence=ipi";
	m = nullptr;
	EXPECT_EQ(-EOPNOTSUPP, sd_machine_create(&c, &m));
	EXPECT_EQ(nullptr, m);
	EXPECT_NE(nullptr, std::strstr(sd_last_error(), "rfence=ipi"));

	c.flags |= SD_MACHINE_ANY_MECHANISM;
	ASSERT_EQ(0, sd_machine_create(&c, &m)) << sd_last_error();
	ASSERT_EQ(0, sd_machine_mechanisms(m, &info));
	EXPECT_EQ((unsigned)SD_MECH_IPI, info.missing);
	EXPECT_EQ(0, sd_machine_destroy(m));

	// With both (the fixture), the rule picks the S-mode IPIs.
	c = sdtest::config(2, "riscv");
	c.profile = SD_SOURCE_ROOT "/test/hw/profile-fixture.json";
	ASSERT_EQ(0, sd_machine_create(&c, &m)) << sd_last_error();
	ASSERT_EQ(0, sd_machine_mechanisms(m, &info));
	EXPECT_EQ((unsigned)SD_MECH_IPI, info.needed);
	EXPECT_EQ(0, sd_machine_destroy(m));
	std::remove(sbi_only.c_str());
}

TEST(Riscv, BadOptionsAreRefused)
{
	for (const char *s : {"riscv:rfence=mmode", "riscv:svinval=2", "riscv:asid=yes",
			      "riscv:sbi_flush_limit=0", "riscv:threshold=-1", "riscv:select=ipi",
			      "riscv:batch=2"}) {
		sd_machine_config c = sdtest::config(1, s);
		sd_machine *m = nullptr;
		EXPECT_NE(0, sd_machine_create(&c, &m)) << s;
		EXPECT_EQ(nullptr, m) << s;
	}
}

// ---- the reclaim batch: a union mask, a whole flush a target ----

TEST(Riscv, TheBatchFlushesEveryTlbOfTheUnionWhole)
{
	Machine mc(sdtest::config(3, "riscv:rfence=sbi"));
	Attached a(mc.m, 0);
	Cpus cpus(mc.m, 3);
	sd_mm *m1 = nullptr, *m2 = nullptr;
	sd_tlbbatch *batch = nullptr;

	ASSERT_EQ(0, sd_mm_create(mc.m, &m1));
	ASSERT_EQ(0, sd_mm_create(mc.m, &m2));
	EXPECT_EQ(0, sd_mmap(a.c, m1, kBase, 4 * P, RW));
	EXPECT_EQ(0, sd_mmap(a.c, m2, kBase, 4 * P, RW));
	cpus.run(1, [&](sd_cpu *c) { touch(c, m1, 4); });
	cpus.run(2, [&](sd_cpu *c) { touch(c, m2, 4); });
	ASSERT_EQ(0, sd_tlbbatch_create(mc.m, &batch));
	uint64_t e = total(mc.m, SD_STAT_SBI_ECALL), all = total(mc.m, SD_STAT_LOCAL_FLUSH_ALL);
	EXPECT_EQ(0, sd_reclaim(a.c, batch, m1, kBase, 4 * P)) << sd_last_error();
	EXPECT_EQ(0, sd_reclaim(a.c, batch, m2, kBase, 4 * P)) << sd_last_error();
	EXPECT_EQ(e, total(mc.m, SD_STAT_SBI_ECALL)) << "nothing sent before the batch's flush";
	EXPECT_EQ(0, sd_tlbbatch_flush(a.c, batch));
	EXPECT_EQ(1u, total(mc.m, SD_STAT_SBI_ECALL) - e) << "one fence for both mms";
	EXPECT_EQ(2u, total(mc.m, SD_STAT_LOCAL_FLUSH_ALL) - all) << "CPUs 1 and 2, every ASID";
	cpus.run(1, [&](sd_cpu *c) {
		EXPECT_EQ(0, sd_access(c, kBase, SD_READ, nullptr));
		EXPECT_EQ(0, sd_switch_mm(c, nullptr));
	});
	cpus.run(2, [&](sd_cpu *c) {
		EXPECT_EQ(0, sd_access(c, kBase, SD_READ, nullptr));
		EXPECT_EQ(0, sd_switch_mm(c, nullptr));
	});
	EXPECT_EQ(0u, sd_oracle_violations(mc.m));
	EXPECT_EQ(0, sd_tlbbatch_destroy(batch));
	EXPECT_EQ(0, sd_mm_destroy(m1));
	EXPECT_EQ(0, sd_mm_destroy(m2));
}

TEST(Riscv, BeforeTheBatchEachZappedPageWasFencedAtOnce)
{
	Machine mc(sdtest::config(2, "riscv:rfence=sbi,batch=0"));
	Attached a(mc.m, 0);
	Cpus cpus(mc.m, 2);
	sd_mm *mm = nullptr;
	sd_tlbbatch *batch = nullptr;

	ASSERT_EQ(0, sd_mm_create(mc.m, &mm));
	EXPECT_EQ(0, sd_mmap(a.c, mm, kBase, 4 * P, RW));
	touch(a.c, mm, 4);
	cpus.run(1, [&](sd_cpu *c) { touch(c, mm, 4); });
	ASSERT_EQ(0, sd_tlbbatch_create(mc.m, &batch));
	uint64_t e = total(mc.m, SD_STAT_SBI_ECALL);
	EXPECT_EQ(0, sd_reclaim(a.c, batch, mm, kBase, 4 * P)) << sd_last_error();
	EXPECT_EQ(4u, total(mc.m, SD_STAT_SBI_ECALL) - e) << "flush_tlb_page() a page, at its zap";
	EXPECT_EQ(0, sd_tlbbatch_flush(a.c, batch));
	EXPECT_EQ(4u, total(mc.m, SD_STAT_SBI_ECALL) - e) << "nothing left for the batch";
	cpus.run(1, [&](sd_cpu *c) {
		EXPECT_EQ(0, sd_access(c, kBase, SD_READ, nullptr));
		EXPECT_EQ(0, sd_switch_mm(c, nullptr));
	});
	EXPECT_EQ(0u, sd_oracle_violations(mc.m));
	EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	EXPECT_EQ(0, sd_tlbbatch_destroy(batch));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

TEST(Riscv, ABoardWithoutAsidsRunsWithoutTheAllocator)
{
	// starfive-jh7110-4 says no_asid: every switch flushes the whole TLB
	// and no ASID is ever allocated.
	sd_machine_config c = sdtest::config(2, "riscv");
	c.profile = "starfive-jh7110-4";
	Machine mc(c);
	ASSERT_NE(nullptr, mc.m) << sd_last_error();
	Attached a(mc.m, 0);
	sd_mm *m1 = nullptr, *m2 = nullptr;
	ASSERT_EQ(0, sd_mm_create(mc.m, &m1));
	ASSERT_EQ(0, sd_mm_create(mc.m, &m2));
	uint64_t all = total(mc.m, SD_STAT_LOCAL_FLUSH_ALL);
	EXPECT_EQ(0, sd_switch_mm(a.c, m1));
	EXPECT_EQ(0, sd_switch_mm(a.c, m2));
	EXPECT_EQ(0, sd_switch_mm(a.c, m1));
	EXPECT_EQ(3u, total(mc.m, SD_STAT_LOCAL_FLUSH_ALL) - all);
	EXPECT_EQ(0u, total(mc.m, SD_STAT_ASID_ALLOC));
	sd_mechanism_info info = SD_MECHANISM_INFO_INIT;
	ASSERT_EQ(0, sd_machine_mechanisms(mc.m, &info));
	EXPECT_EQ((unsigned)SD_MECH_SBI, info.needed) << "the board's IPIs go through SBI";
	EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	EXPECT_EQ(0, sd_mm_destroy(m1));
	EXPECT_EQ(0, sd_mm_destroy(m2));
}

// ---- the switch/flush race, forced ----
//
// CPU 0 ran the mm alone and write-protects page P; CPU 1 switches to the
// mm for the first time, and its walker caches P (still writable) as soon
// as satp is written (SD_ORDER_SWITCH_LOADED), held there with interrupts
// off while CPU 0 flushes, with delayed stores on. A fence CPU 0 sends it
// is taken at its instruction boundaries in the hold: M-mode does not wait
// for S-mode interrupts.

constexpr uint64_t kRacePage = kBase;
std::atomic<bool> hold{false}, filled{false}, flushed{false};
sd_mm *race_mm = nullptr;

void hold_after_satp(enum sd_order_point p, unsigned cpu)
{
	if (p != SD_ORDER_SWITCH_LOADED || cpu != 1 || !hold.exchange(false))
		return;
	sd_cpu *self = sd_cpu_self();
	EXPECT_EQ(0, sd_mm_walk_speculative(self, race_mm, kRacePage));
	filled = true;
	auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
	while (!flushed && std::chrono::steady_clock::now() < deadline) {
		sd_smp_boundary(self);
		std::this_thread::yield();
	}
}

struct Race {
	uint64_t violations = 0, local = 0, irqs_off = 0;
	int write = 1;
};

Race run_race(unsigned bug)
{
	Race r;
	Machine mach(sdtest::config(2, "riscv:rfence=sbi"));
	EXPECT_NE(nullptr, mach.m);
	if (!mach.m)
		return r;
	EXPECT_EQ(0, sd_mm_create(mach.m, &race_mm));
	std::atomic<bool> a_ready{false};
	hold = filled = flushed = false;
	sd_order_set_delayed_stores(true);
	sd_order_set_hook(hold_after_satp);
	Break planted(bug);
	std::thread tb([&] {
		Attached b(mach.m, 1);
		while (!a_ready)
			std::this_thread::yield();
		hold = true;
		EXPECT_EQ(0, sd_switch_mm(b.c, race_mm));
		r.write = sd_access(b.c, kRacePage, SD_WRITE, nullptr);
		EXPECT_EQ(0, sd_switch_mm(b.c, nullptr));
	});
	{
		Attached a(mach.m, 0);
		EXPECT_EQ(0, sd_mmap(a.c, race_mm, kRacePage, P, RW));
		EXPECT_EQ(0, sd_switch_mm(a.c, race_mm));
		EXPECT_EQ(0, sd_access(a.c, kRacePage, SD_WRITE, nullptr));
		a_ready = true;
		while (!filled)
			std::this_thread::yield();
		EXPECT_EQ(0, sd_mprotect(a.c, race_mm, kRacePage, P, SD_PROT_READ));
		flushed = true;
		tb.join();
		EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	}
	sd_order_set_hook(nullptr);
	sd_order_set_delayed_stores(false);
	r.violations = total(mach.m, SD_STAT_VIOLATION);
	r.local = total(mach.m, SD_STAT_LOCAL_ONLY_FLUSH);
	r.irqs_off = total(mach.m, SD_STAT_SBI_IRQS_OFF);
	EXPECT_EQ(0, sd_mm_destroy(race_mm));
	return r;
}

TEST(RiscvRace, TheSwitchersFencePutsItInTheMaskTheFlusherReads)
{
	Race r = run_race(0);
	EXPECT_EQ(0u, r.local);
	EXPECT_EQ(1u, r.irqs_off) << "CPU 1 took the fence in M-mode, interrupts off";
	EXPECT_EQ(-EACCES, r.write);
	EXPECT_EQ(0u, r.violations);
}

TEST(RiscvRace, WithoutItTheFlusherStaysLocalAndTheOracleSeesIt)
{
	Race r = run_race(SD_RISCV_BREAK_NO_FENCE);
	EXPECT_EQ(1u, r.local) << "CPU 1's bit was still in its store buffer";
	EXPECT_GE(r.violations, 1u);
}

}  // namespace
