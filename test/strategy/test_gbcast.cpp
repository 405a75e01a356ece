// SPDX-License-Identifier: MIT
// `gbcast`: AMD INVLPGB with global ASIDs, forced
// deterministically on emulated CPUs.
//
// The setup of the transition tests: CPU B runs mm M on a dynamic ASID and
// caches page P. CPU A (not running M) flushes another page of M; that flush
// still goes by IPI (M has no global ASID yet), B answers it, and only then
// does consider_global_asid() (threshold=0, sample=1) give M a global ASID.
// B, which does not switch, keeps running M on its dynamic ASID: a
// straggler, with asid_transition set. (The first allocation's wrap-around
// flushed every TLB, so B then touches P again: a writable entry under its
// dynamic ASID.) INVLPGB on the global ASID does not touch B's entries, so:
//   - Jann Horn's race (his review of the v4 reclaim path): reclaim of P
//     must not trust an INVLPGB of the global ASID alone. The 6.15 code flushes every non-global entry of
//     every PCID; v4 (SD_IPI_BREAK_BATCH_GLOBAL_ONLY) left B's entry alive.
//   - finish_asid_transition(): an ordinary flush of M must IPI the
//     stragglers; SD_IPI_BREAK_NO_TRANSITION never does.
// Each test runs the fixed code, then the same steps with the bug planted
// back, so every run shows the test can tell the two apart.
//
// Then: the policy of consider_global_asid() (threshold over active,
// non-lazy CPUs; sampling; running out of ASIDs), TLBSYNC locality (it
// covers only its own CPU's INVLPGBs) through the internal INVLPGB API, and global ASID reuse across wrap-arounds with the oracle
// watching for foreign translations, with the wrap-around flush
// removed once to show the check has teeth. RCU table freeing under gbcast
// is in test_rcu_free.cpp; the pool alone in test_global_asid.cpp.
#include "common.hpp"
#include "internal.hpp"

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <set>
#include <thread>
#include <vector>

extern "C" {
#include "strategy/gbcast.h"
#include "hw/machine_state.h"
#include "mm/mm.h"
}

namespace {

constexpr uint64_t P = SD_PAGE_SIZE;
constexpr uint64_t kBase = 0x10000000;
constexpr unsigned kA = 0, kB = 1;
constexpr unsigned RW = SD_PROT_READ | SD_PROT_WRITE;
// Every multi-CPU mm goes global at its first IPI flush.
constexpr const char *kEager = "gbcast:threshold=0,sample=1";

using sdtest::Attached;
using sdtest::counter;
using sdtest::Cpus;
using sdtest::Machine;
using sdtest::total;

sd_ipi *ipi_of(sd_machine *m)
{
	return static_cast<sd_ipi *>(m->strategy);
}

sd_ipi_mm *ipi_mm(sd_mm *mm)
{
	return static_cast<sd_ipi_mm *>(mm->strategy);
}

uint16_t global_asid(sd_mm *mm)
{
	return ipi_mm(mm)->global_asid.load();
}

bool in_transition(sd_mm *mm)
{
	return ipi_mm(mm)->asid_transition.load();
}

// loaded_mm_asid of @cpu: a dynamic slot 0..5 or a global ASID.
uint16_t loaded_asid(sd_machine *m, unsigned cpu)
{
	return ipi_of(m)->percpu[cpu].loaded_asid.load();
}

bool is_dynamic(uint16_t asid)
{
	return asid < SD_IPI_NR_DYN_ASIDS;
}

void print_violations(sd_machine *m)
{
	uint64_t n = sd_oracle_violations(m);
	for (unsigned i = 0; i < n && i < SD_ORACLE_MAX_DETAILS; i++) {
		sd_violation v;
		if (sd_oracle_violation(m, i, &v))
			break;
		ADD_FAILURE() << "violation " << i << ": "
			      << (v.kind == SD_VIOLATION_STALE ? "stale" : "foreign") << " cpu "
			      << v.cpu << " mm " << v.mm_id << " entry mm " << v.entry_mm_id
			      << std::hex << " va 0x" << v.va << std::dec << " entry version "
			      << v.entry_version << " floor " << v.floor_version;
	}
}

// ---- M goes global while B runs it on a dynamic ASID ----

// P is the page B keeps cached; Q the page whose flush makes M global.
constexpr uint64_t kP = kBase, kQ = kBase + P, kR = kBase + 2 * P;

struct Straggler {
	Machine mc;
	Attached a;
	Cpus cpus;
	sd_mm *mm = nullptr;
	uint64_t old_p = 0;     // P's frame as B cached it
	uint16_t b_dyn = 0;     // B's dynamic slot for M
	uint16_t gasid = 0;     // M's global ASID

	Straggler(unsigned broken)
		: mc(sdtest::config(2, kEager)), a(mc.m, kA), cpus(mc.m, 2)
	{
		EXPECT_EQ(0, sd_ipi_test_break(mc.m, broken)) << sd_last_error();
		EXPECT_EQ(0, sd_mm_create(mc.m, &mm));
		EXPECT_EQ(0, sd_mmap(a.c, mm, kBase, 4 * P, RW));
		cpus.run(kB, [&](sd_cpu *c) {
			EXPECT_EQ(0, sd_switch_mm(c, mm));
			EXPECT_EQ(0, sd_access(c, kP, SD_WRITE, &old_p)); // writable in B's TLB
			EXPECT_EQ(0, sd_access(c, kQ, SD_WRITE, nullptr));
			EXPECT_EQ(0, sd_access(c, kR, SD_WRITE, nullptr));
		});
		EXPECT_EQ(0u, global_asid(mm));
		b_dyn = loaded_asid(mc.m, kB);
		EXPECT_TRUE(is_dynamic(b_dyn));

		// A flushes Q: an IPI flush (B is in the mask), and after it
		// consider_global_asid() finds M active on B.
		EXPECT_EQ(0, sd_madvise_dontneed(a.c, mm, kQ, P));
		gasid = global_asid(mm);
		EXPECT_GE(gasid, SD_IPI_NR_DYN_ASIDS) << "M did not get a global ASID";
		EXPECT_TRUE(in_transition(mm));
		EXPECT_EQ(1u, counter(mc.m, kA, SD_STAT_FALLBACK_IPI_FLUSH));
		EXPECT_EQ(1u, counter(mc.m, kA, SD_STAT_GLOBAL_ASID_ALLOC));
		EXPECT_EQ(1u, counter(mc.m, kA, SD_STAT_GLOBAL_ASID_RESET))
			<< "the first allocation wraps the space";
		// B got the IPI before the ASID existed, and did not move.
		EXPECT_EQ(1u, counter(mc.m, kB, SD_STAT_REMOTE_INVAL_RECV));
		EXPECT_EQ(b_dyn, loaded_asid(mc.m, kB));

		// B still runs M on its dynamic ASID. The first allocation's
		// wrap-around flushed every TLB, so B misses on P once and caches
		// it again, writable, under that dynamic ASID; then it hits.
		cpus.run(kB, [&](sd_cpu *c) {
			EXPECT_EQ(b_dyn + 1u, c->asid);
			EXPECT_FALSE(sdtest::tlb_holds(&c->tlb, kP / P, (uint16_t)(b_dyn + 1)))
				<< "the wrap-around flush missed B";
			uint64_t miss = counter(mc.m, kB, SD_STAT_TLB_MISS), pfn = 0;
			EXPECT_EQ(0, sd_access(c, kP, SD_WRITE, &pfn));
			EXPECT_EQ(old_p, pfn);
			EXPECT_EQ(miss + 1, counter(mc.m, kB, SD_STAT_TLB_MISS));
			EXPECT_EQ(0, sd_access(c, kP, SD_READ, &pfn));
			EXPECT_EQ(miss + 1, counter(mc.m, kB, SD_STAT_TLB_MISS));
			EXPECT_EQ(0, sd_access(c, kR, SD_READ, nullptr));
			EXPECT_TRUE(sdtest::tlb_holds(&c->tlb, kP / P, (uint16_t)(b_dyn + 1)));
			EXPECT_EQ(b_dyn + 1u, c->asid) << "B moved without a switch or an IPI";
		});
		EXPECT_TRUE(in_transition(mm));
		EXPECT_EQ(0u, sd_oracle_violations(mc.m));
	}

	~Straggler()
	{
		cpus.run(kB, [](sd_cpu *c) { EXPECT_EQ(0, sd_switch_mm(c, nullptr)); });
		EXPECT_EQ(0, sd_mm_destroy(mm)) << sd_last_error();
	}
};

struct ReclaimResult {
	uint64_t violations = 0;
	uint64_t old_pfn = 0, new_pfn = 0;
	uint64_t b_misses = 0;   // B's misses on its access to P after the flush
	uint64_t a_ipis = 0;     // IPIs A sent for the batch
	uint64_t a_invlpgb = 0;  // INVLPGBs A issued for the batch
	uint64_t a_tlbsync = 0;
};

ReclaimResult run_reclaim_race(unsigned broken)
{
	Straggler s(broken);
	ReclaimResult r;
	sd_tlbbatch *batch = nullptr;

	r.old_pfn = s.old_p;
	EXPECT_EQ(0, sd_tlbbatch_create(s.mc.m, &batch));
	uint64_t ipis = counter(s.mc.m, kA, SD_STAT_IPI_SENT);
	uint64_t invlpgb = counter(s.mc.m, kA, SD_STAT_INVLPGB);
	uint64_t tlbsync = counter(s.mc.m, kA, SD_STAT_TLBSYNC);
	EXPECT_EQ(0, sd_reclaim(s.a.c, batch, s.mm, kP, P)) << sd_last_error();
	EXPECT_EQ(0, sd_tlbbatch_flush(s.a.c, batch)) << sd_last_error();
	r.a_ipis = counter(s.mc.m, kA, SD_STAT_IPI_SENT) - ipis;
	r.a_invlpgb = counter(s.mc.m, kA, SD_STAT_INVLPGB) - invlpgb;
	r.a_tlbsync = counter(s.mc.m, kA, SD_STAT_TLBSYNC) - tlbsync;
	// P's frame is free now. B, which never switched, uses P again.
	s.cpus.run(kB, [&](sd_cpu *c) {
		uint64_t miss = counter(s.mc.m, kB, SD_STAT_TLB_MISS);
		EXPECT_EQ(0, sd_access(c, kP, SD_WRITE, &r.new_pfn));
		r.b_misses = counter(s.mc.m, kB, SD_STAT_TLB_MISS) - miss;
	});
	r.violations = sd_oracle_violations(s.mc.m);
	EXPECT_EQ(0, sd_tlbbatch_destroy(batch));
	return r;
}

TEST(Gbcast, ReclaimVsAsidTransition)
{
	{
		SCOPED_TRACE("fixed (6.15: flush every non-global entry)");
		ReclaimResult r = run_reclaim_race(0);
		EXPECT_EQ(0u, r.violations);
		EXPECT_EQ(1u, r.b_misses) << "B's dynamic-ASID entry for P survived the batch flush";
		EXPECT_NE(r.old_pfn, r.new_pfn) << "B still uses the reclaimed frame";
		EXPECT_EQ(0u, r.a_ipis) << "the 6.15 batch flush sends no IPI";
		EXPECT_EQ(1u, r.a_invlpgb);
		EXPECT_EQ(1u, r.a_tlbsync);
	}
	{
		SCOPED_TRACE("SD_IPI_BREAK_BATCH_GLOBAL_ONLY (v4)");
		ReclaimResult r = run_reclaim_race(SD_IPI_BREAK_BATCH_GLOBAL_ONLY);
		EXPECT_GE(r.violations, 1u)
			<< "the planted bug went unnoticed: the test lost its power";
		EXPECT_EQ(0u, r.b_misses);
		EXPECT_EQ(r.old_pfn, r.new_pfn) << "B should have hit its stale entry";
		EXPECT_EQ(0u, r.a_ipis);
		EXPECT_EQ(1u, r.a_invlpgb) << "v4: one INVLPGB of the global ASID";
	}
}

struct TransitionResult {
	uint64_t violations = 0;
	int write_err = 0;             // B's write to P after A's mprotect returned
	uint64_t transition_ipis = 0;  // on A
	uint64_t b_ipis = 0;           // IPI flushes B ran
	uint16_t b_asid = 0;           // B's loaded ASID afterwards
	uint16_t gasid = 0;
};

// @then runs after the checks, with the straggler setup still alive.
TransitionResult run_straggler(unsigned broken,
			       const std::function<void(Straggler &)> &then = nullptr)
{
	Straggler s(broken);
	TransitionResult r;
	uint64_t recv = counter(s.mc.m, kB, SD_STAT_REMOTE_INVAL_RECV);

	r.gasid = s.gasid;
	// An ordinary flush of M: broadcast on the global ASID, plus
	// finish_asid_transition() for B.
	EXPECT_EQ(0, sd_mprotect(s.a.c, s.mm, kP, P, SD_PROT_READ));
	r.transition_ipis = counter(s.mc.m, kA, SD_STAT_TRANSITION_IPI);
	r.b_ipis = counter(s.mc.m, kB, SD_STAT_REMOTE_INVAL_RECV) - recv;
	r.b_asid = loaded_asid(s.mc.m, kB);
	s.cpus.run(kB, [&](sd_cpu *c) {
		r.write_err = sd_access(c, kP, SD_WRITE, nullptr);
		uint64_t pfn = 0;
		EXPECT_EQ(0, sd_access(c, kP, SD_READ, &pfn));
		EXPECT_EQ(s.old_p, pfn) << "mprotect keeps the frame";
	});
	r.violations = sd_oracle_violations(s.mc.m);
	if (then)
		then(s);
	return r;
}

TEST(Gbcast, StragglerGetsTransitionIpi)
{
	{
		SCOPED_TRACE("fixed");
		TransitionResult r = run_straggler(0, [](Straggler &s) {
			// B is on the global ASID now: the next flush finds no
			// straggler, ends the transition, and sends no IPI at all.
			uint64_t ipis = counter(s.mc.m, kA, SD_STAT_IPI_SENT);
			EXPECT_TRUE(in_transition(s.mm));
			EXPECT_EQ(0, sd_madvise_dontneed(s.a.c, s.mm, kR, P));
			EXPECT_FALSE(in_transition(s.mm));
			EXPECT_EQ(1u, counter(s.mc.m, kA, SD_STAT_TRANSITION_IPI));
			EXPECT_EQ(ipis, counter(s.mc.m, kA, SD_STAT_IPI_SENT));
			// And INVLPGB on the global ASID reaches B: R is gone.
			s.cpus.run(kB, [&](sd_cpu *c) {
				EXPECT_FALSE(sdtest::tlb_holds(&c->tlb, kR / P, (uint16_t)(s.gasid + 1)));
				uint64_t miss = counter(s.mc.m, kB, SD_STAT_TLB_MISS);
				EXPECT_EQ(0, sd_access(c, kR, SD_READ, nullptr));
				EXPECT_EQ(miss + 1, counter(s.mc.m, kB, SD_STAT_TLB_MISS));
			});
			EXPECT_EQ(0u, sd_oracle_violations(s.mc.m));
		});
		EXPECT_EQ(0u, r.violations);
		EXPECT_EQ(-EACCES, r.write_err) << "a write succeeded on a read-only page";
		EXPECT_EQ(1u, r.transition_ipis);
		EXPECT_EQ(1u, r.b_ipis);
		EXPECT_EQ(r.gasid, r.b_asid) << "the transition IPI moves B onto the global ASID";
	}
	{
		SCOPED_TRACE("SD_IPI_BREAK_NO_TRANSITION");
		TransitionResult r = run_straggler(SD_IPI_BREAK_NO_TRANSITION);
		EXPECT_GE(r.violations, 1u)
			<< "the planted bug went unnoticed: the test lost its power";
		EXPECT_EQ(0, r.write_err) << "B should have written through its stale entry";
		EXPECT_EQ(0u, r.transition_ipis);
		EXPECT_EQ(0u, r.b_ipis);
		EXPECT_TRUE(is_dynamic(r.b_asid));
	}
}

// A CPU that switches back to M after M went global takes the global ASID
// with no flush at switch-in, and is not a straggler.
TEST(Gbcast, SwitchInTakesGlobalAsidWithoutFlush)
{
	Straggler s(0);
	sd_mm *other = nullptr;
	ASSERT_EQ(0, sd_mm_create(s.mc.m, &other));
	s.cpus.run(kB, [&](sd_cpu *c) {
		EXPECT_EQ(0, sd_switch_mm(c, other));
		uint64_t sw = counter(s.mc.m, kB, SD_STAT_SWITCH_FLUSH);
		EXPECT_EQ(0, sd_switch_mm(c, s.mm));
		EXPECT_EQ(sw, counter(s.mc.m, kB, SD_STAT_SWITCH_FLUSH));
		EXPECT_EQ(s.gasid + 1u, c->asid);
	});
	EXPECT_EQ(s.gasid, loaded_asid(s.mc.m, kB));
	EXPECT_EQ(0, sd_mprotect(s.a.c, s.mm, kP, P, SD_PROT_READ));
	EXPECT_EQ(0u, counter(s.mc.m, kA, SD_STAT_TRANSITION_IPI));
	EXPECT_FALSE(in_transition(s.mm));
	s.cpus.run(kB, [&](sd_cpu *c) {
		EXPECT_EQ(-EACCES, sd_access(c, kP, SD_WRITE, nullptr));
	});
	EXPECT_EQ(0u, sd_oracle_violations(s.mc.m));
	EXPECT_EQ(0, sd_mm_destroy(other));
}

// ---- the policy: when an mm gets a global ASID ----

// A flush of @mm from A (not running it) that always finds R present.
void flush_r(sd_cpu *a, sd_mm *mm)
{
	EXPECT_EQ(0, sd_mprotect(a, mm, kR, P, RW)) << sd_last_error();
}

void run_and_touch(Cpus &cpus, unsigned id, sd_mm *mm)
{
	cpus.run(id, [&](sd_cpu *c) {
		EXPECT_EQ(0, sd_switch_mm(c, mm));
		EXPECT_EQ(0, sd_access(c, kR, SD_WRITE, nullptr));
	});
}

// mm_active_cpus_exceeds(mm, 1): more than one CPU that has the mm loaded
// and is not lazy. Bits in the (lazy) mm_cpumask of CPUs that went idle or
// run another mm count toward the quick weight check only.
TEST(Gbcast, ThresholdCountsActiveNonLazyCpusOnly)
{
	Machine mc(sdtest::config(4, "gbcast:threshold=1,sample=1"));
	Attached a(mc.m, kA);
	Cpus cpus(mc.m, 4);
	sd_mm *mm = nullptr, *other = nullptr;
	ASSERT_EQ(0, sd_mm_create(mc.m, &mm));
	ASSERT_EQ(0, sd_mm_create(mc.m, &other));
	ASSERT_EQ(0, sd_mmap(a.c, mm, kBase, 4 * P, RW));

	run_and_touch(cpus, 1, mm);
	flush_r(a.c, mm);                      // weight 1: not more than 1
	EXPECT_EQ(0u, global_asid(mm));
	run_and_touch(cpus, 2, mm);
	cpus.run(2, [](sd_cpu *c) { EXPECT_EQ(0, sd_cpu_idle(c)); });
	flush_r(a.c, mm);                      // weight 2, but CPU 2 is lazy
	EXPECT_EQ(0u, global_asid(mm));
	EXPECT_GE(counter(mc.m, kA, SD_STAT_LAZY_SKIP), 1u);
	run_and_touch(cpus, 3, mm);
	cpus.run(3, [&](sd_cpu *c) { EXPECT_EQ(0, sd_switch_mm(c, other)); });
	flush_r(a.c, mm);                      // CPU 3 runs another mm
	EXPECT_EQ(0u, global_asid(mm));
	EXPECT_EQ(3u, counter(mc.m, kA, SD_STAT_FALLBACK_IPI_FLUSH));
	EXPECT_EQ(0u, total(mc.m, SD_STAT_GLOBAL_ASID_ALLOC));

	cpus.run(2, [&](sd_cpu *c) { EXPECT_EQ(0, sd_switch_mm(c, mm)); }); // active again
	flush_r(a.c, mm);                      // CPUs 1 and 2: more than 1
	EXPECT_NE(0u, global_asid(mm));
	EXPECT_EQ(1u, counter(mc.m, kA, SD_STAT_GLOBAL_ASID_ALLOC));
	EXPECT_EQ(4u, counter(mc.m, kA, SD_STAT_FALLBACK_IPI_FLUSH));
	// The next flush is a broadcast, and moves the two stragglers over.
	flush_r(a.c, mm);
	EXPECT_EQ(4u, counter(mc.m, kA, SD_STAT_FALLBACK_IPI_FLUSH));
	EXPECT_EQ(1u, counter(mc.m, kA, SD_STAT_TRANSITION_IPI));
	EXPECT_EQ(global_asid(mm), loaded_asid(mc.m, 1));
	EXPECT_EQ(global_asid(mm), loaded_asid(mc.m, 2));
	EXPECT_TRUE(is_dynamic(loaded_asid(mc.m, 3)));

	for (unsigned id = 1; id < 4; id++)
		cpus.run(id, [](sd_cpu *c) { EXPECT_EQ(0, sd_switch_mm(c, nullptr)); });
	EXPECT_EQ(0u, sd_oracle_violations(mc.m));
	EXPECT_EQ(0, sd_mm_destroy(mm));
	EXPECT_EQ(0, sd_mm_destroy(other));
}

// The merged default: threshold 3, i.e. active on 4 or more CPUs.
TEST(Gbcast, DefaultThresholdWantsFourActiveCpus)
{
	Machine mc(sdtest::config(5, "gbcast:sample=1"));
	Attached a(mc.m, kA);
	Cpus cpus(mc.m, 5);
	sd_mm *mm = nullptr;
	ASSERT_EQ(0, sd_mm_create(mc.m, &mm));
	ASSERT_EQ(0, sd_mmap(a.c, mm, kBase, 4 * P, RW));
	for (unsigned id = 1; id <= 3; id++)
		run_and_touch(cpus, id, mm);
	flush_r(a.c, mm);
	EXPECT_EQ(0u, global_asid(mm)) << "3 active CPUs are not more than 3";
	run_and_touch(cpus, 4, mm);
	flush_r(a.c, mm);
	EXPECT_NE(0u, global_asid(mm)) << "4 active CPUs are";
	for (unsigned id = 1; id <= 4; id++)
		cpus.run(id, [](sd_cpu *c) { EXPECT_EQ(0, sd_switch_mm(c, nullptr)); });
	EXPECT_EQ(0u, sd_oracle_violations(mc.m));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

// consider_global_asid() runs on 1 in N IPI flushes of each CPU.
TEST(Gbcast, SamplingConsidersOneFlushInN)
{
	Machine mc(sdtest::config(2, "gbcast:threshold=0,sample=3"));
	Attached a(mc.m, kA);
	Cpus cpus(mc.m, 2);
	sd_mm *mm = nullptr;
	ASSERT_EQ(0, sd_mm_create(mc.m, &mm));
	ASSERT_EQ(0, sd_mmap(a.c, mm, kBase, 4 * P, RW));
	run_and_touch(cpus, kB, mm);
	flush_r(a.c, mm);
	flush_r(a.c, mm);
	EXPECT_EQ(0u, global_asid(mm));
	flush_r(a.c, mm);
	EXPECT_NE(0u, global_asid(mm)) << "the third IPI flush is the sampled one";
	EXPECT_EQ(3u, counter(mc.m, kA, SD_STAT_FALLBACK_IPI_FLUSH));
	cpus.run(kB, [](sd_cpu *c) { EXPECT_EQ(0, sd_switch_mm(c, nullptr)); });
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

// "Ran out of global ASIDs": the mm stays on dynamic ASIDs and IPIs, and
// stays correct; once an ASID is freed, the wrap-around recycles it.
TEST(Gbcast, ExhaustedPoolFallsBackToIpis)
{
	Machine mc(sdtest::config(3, "gbcast:pool=1,threshold=0,sample=1"));
	Attached a(mc.m, kA);
	Cpus cpus(mc.m, 3);
	sd_mm *m1 = nullptr, *m2 = nullptr;
	ASSERT_EQ(0, sd_mm_create(mc.m, &m1));
	ASSERT_EQ(0, sd_mm_create(mc.m, &m2));
	for (sd_mm *mm : { m1, m2 })
		ASSERT_EQ(0, sd_mmap(a.c, mm, kBase, 4 * P, RW));
	run_and_touch(cpus, 1, m1);
	run_and_touch(cpus, 2, m2);
	flush_r(a.c, m1);
	const uint16_t g1 = global_asid(m1);
	EXPECT_NE(0u, g1);
	for (int i = 0; i < 3; i++)
		flush_r(a.c, m2);
	EXPECT_EQ(0u, global_asid(m2)) << "a pool of one cannot serve two mms";
	EXPECT_EQ(4u, counter(mc.m, kA, SD_STAT_FALLBACK_IPI_FLUSH));
	EXPECT_EQ(1u, total(mc.m, SD_STAT_GLOBAL_ASID_ALLOC));
	// Still correct by IPIs.
	uint64_t recv = counter(mc.m, 2, SD_STAT_REMOTE_INVAL_RECV);
	ASSERT_EQ(0, sd_mprotect(a.c, m2, kR, P, SD_PROT_READ));
	EXPECT_EQ(recv + 1, counter(mc.m, 2, SD_STAT_REMOTE_INVAL_RECV));
	cpus.run(2, [](sd_cpu *c) { EXPECT_EQ(-EACCES, sd_access(c, kR, SD_WRITE, nullptr)); });
	ASSERT_EQ(0, sd_mprotect(a.c, m2, kR, P, RW));

	// m1 goes: its ASID is freed, and m2's next IPI flush gets it through
	// a wrap-around.
	cpus.run(1, [](sd_cpu *c) { EXPECT_EQ(0, sd_switch_mm(c, nullptr)); });
	EXPECT_EQ(0, sd_mm_destroy(m1));
	EXPECT_EQ(1u, counter(mc.m, kA, SD_STAT_GLOBAL_ASID_FREE));
	flush_r(a.c, m2);
	EXPECT_EQ(g1, global_asid(m2));
	EXPECT_EQ(2u, total(mc.m, SD_STAT_GLOBAL_ASID_RESET));
	cpus.run(2, [](sd_cpu *c) { EXPECT_EQ(0, sd_switch_mm(c, nullptr)); });
	EXPECT_EQ(0u, sd_oracle_violations(mc.m));
	EXPECT_EQ(0, sd_mm_destroy(m2));
}

// ---- TLBSYNC locality (internal API) ----

TEST(Gbcast, TlbsyncOnlyFromTheIssuingCpu)
{
	Machine mc(sdtest::config(3, "gbcast"));
	Attached a(mc.m, kA);
	Cpus cpus(mc.m, 2);   // CPU 1 only; CPU 2 is attached by a thread below
	struct sd_invlpgb *ib = &sd_gbcast_of(mc.m)->ib;
	sd_cpu *c0 = mc.m->cpus[0], *c1 = mc.m->cpus[1];
	sd_mm *mm = nullptr;
	uint16_t tag = 0;
	uint64_t pfn_p = 0;

	ASSERT_EQ(0, sd_mm_create(mc.m, &mm));
	ASSERT_EQ(0, sd_mmap(a.c, mm, kBase, 2 * P, RW));
	cpus.run(kB, [&](sd_cpu *c) {
		EXPECT_EQ(0, sd_switch_mm(c, mm));
		EXPECT_EQ(0, sd_access(c, kP, SD_WRITE, &pfn_p));
		EXPECT_EQ(0, sd_access(c, kQ, SD_WRITE, nullptr));
		tag = c->asid;
	});
	ASSERT_NE(0u, tag);
	ASSERT_TRUE(sdtest::tlb_holds(&c1->tlb, kP / P, tag));
	ASSERT_TRUE(sdtest::tlb_holds(&c1->tlb, kQ / P, tag));
	const sd_tlb_inval op = { SD_TLB_INVAL_RANGE, tag, true, kP / P, 1 };

	// Issued, not synced: nothing guaranteed yet (the emulation applies it
	// at TLBSYNC).
	sd_invlpgb(c0, ib, &op);
	EXPECT_EQ(1u, counter(mc.m, kA, SD_STAT_INVLPGB));
	EXPECT_TRUE(sdtest::tlb_holds(&c1->tlb, kP / P, tag));

	// TLBSYNC for another CPU's queue from CPU 0's thread: refused, and
	// nothing is applied.
	EXPECT_EQ(-EPERM, sd_tlbsync(c1, ib));
	EXPECT_TRUE(sdtest::tlb_holds(&c1->tlb, kP / P, tag)) << "a refused TLBSYNC applied INVLPGBs";
	EXPECT_EQ(0u, counter(mc.m, kA, SD_STAT_TLBSYNC));
	EXPECT_EQ(0u, counter(mc.m, kB, SD_STAT_TLBSYNC));
	cpus.run(kB, [&](sd_cpu *c) {
		uint64_t miss = counter(mc.m, kB, SD_STAT_TLB_MISS);
		EXPECT_EQ(0, sd_access(c, kP, SD_READ, nullptr));
		EXPECT_EQ(miss, counter(mc.m, kB, SD_STAT_TLB_MISS)) << "P should still be cached";
	});
	// Not attached at all: refused too.
	std::thread([&] { EXPECT_EQ(-EPERM, sd_tlbsync(c0, ib)); }).join();
	EXPECT_TRUE(sdtest::tlb_holds(&c1->tlb, kP / P, tag));

	// The issuer's own TLBSYNC: applied everywhere, and only what was
	// issued (Q stays).
	EXPECT_EQ(0, sd_tlbsync(c0, ib));
	EXPECT_EQ(1u, counter(mc.m, kA, SD_STAT_TLBSYNC));
	EXPECT_FALSE(sdtest::tlb_holds(&c1->tlb, kP / P, tag));
	EXPECT_TRUE(sdtest::tlb_holds(&c1->tlb, kQ / P, tag));
	EXPECT_EQ(0, sd_tlbsync(c0, ib)) << "a TLBSYNC with nothing in flight";
	cpus.run(kB, [&](sd_cpu *c) {
		uint64_t miss = counter(mc.m, kB, SD_STAT_TLB_MISS), pfn = 0;
		EXPECT_EQ(0, sd_access(c, kP, SD_READ, &pfn));
		EXPECT_EQ(miss + 1, counter(mc.m, kB, SD_STAT_TLB_MISS));
		EXPECT_EQ(pfn_p, pfn);
		EXPECT_EQ(0, sd_access(c, kQ, SD_READ, nullptr));
		EXPECT_EQ(miss + 1, counter(mc.m, kB, SD_STAT_TLB_MISS)) << "Q was flushed too";
	});
	ASSERT_TRUE(sdtest::tlb_holds(&c1->tlb, kP / P, tag));

	// Detaching with an INVLPGB in flight syncs it first (migrate_enable()
	// only after the TLBSYNC).
	std::thread([&] {
		Attached c2(mc.m, 2);
		sd_invlpgb(c2.c, ib, &op);
		EXPECT_TRUE(sdtest::tlb_holds(&c1->tlb, kP / P, tag));
	}).join();
	EXPECT_FALSE(sdtest::tlb_holds(&c1->tlb, kP / P, tag)) << "detach left an INVLPGB unsynced";
	EXPECT_EQ(1u, counter(mc.m, 2, SD_STAT_INVLPGB));
	EXPECT_EQ(1u, counter(mc.m, 2, SD_STAT_TLBSYNC));
	// And the thread-local issuer state went with it: CPU 2 can be attached
	// again by another thread, and this one still syncs as CPU 0.
	std::thread([&] {
		Attached c2(mc.m, 2);
		EXPECT_EQ(0, sd_tlbsync(c2.c, ib));
	}).join();
	EXPECT_EQ(0, sd_tlbsync(c0, ib));

	cpus.run(kB, [](sd_cpu *c) { EXPECT_EQ(0, sd_switch_mm(c, nullptr)); });
	EXPECT_EQ(0u, sd_oracle_violations(mc.m));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

// ---- global ASID reuse ----

constexpr unsigned kReusePages = 8;
constexpr unsigned kReuseCpus = 4;      // A plus three workers
constexpr unsigned kReuseRounds = 40;

struct ReuseResult {
	uint64_t violations = 0, stale = 0, foreign = 0;
	uint64_t allocs = 0, frees = 0, reset_stats = 0;
	unsigned resets = 0;               // wrap-arounds of the pool
	std::map<uint16_t, std::set<uint64_t>> mms_of_asid;
	unsigned rounds_global = 0;
};

// mms created, run on every worker under their global ASID, destroyed, over
// and over: their ASIDs are freed and handed to later mms through
// wrap-arounds, and every mm maps the same pages. A worker that kept an old
// mm's global-ASID entries would hit them for the new mm (foreign).
// @no_wrap_flush removes the flush from the wrap-around (the pool's
// callback; tests only), which is exactly that bug.
ReuseResult run_reuse(const char *spec, bool no_wrap_flush)
{
	Machine mc(sdtest::config(kReuseCpus, spec));
	Attached a(mc.m, kA);
	Cpus cpus(mc.m, kReuseCpus);
	sd_gbcast *g = sd_gbcast_of(mc.m);
	ReuseResult r;

	if (no_wrap_flush) {
		sd_global_asid_lock(&g->gasid);
		g->gasid.flush_all_nonglobals = nullptr;
		sd_global_asid_unlock(&g->gasid);
	}
	for (unsigned round = 0; round < kReuseRounds; round++) {
		sd_mm *mm = nullptr;
		EXPECT_EQ(0, sd_mm_create(mc.m, &mm));
		EXPECT_EQ(0, sd_mmap(a.c, mm, kBase, kReusePages * P, RW));
		for (unsigned w = 1; w < kReuseCpus; w++)
			cpus.run(w, [&](sd_cpu *c) {
				EXPECT_EQ(0, sd_switch_mm(c, mm));
				for (unsigned i = 0; i < kReusePages; i++)
					EXPECT_EQ(0, sd_access(c, kBase + i * P, SD_WRITE, nullptr));
			});
		// An IPI flush makes it global, the next one moves the workers
		// over (transition IPIs).
		EXPECT_EQ(0, sd_madvise_dontneed(a.c, mm, kBase + (kReusePages - 1) * P, P));
		uint16_t gasid = global_asid(mm);
		EXPECT_NE(0u, gasid);
		EXPECT_EQ(0, sd_madvise_dontneed(a.c, mm, kBase + (kReusePages - 2) * P, P));
		bool all_global = gasid != 0;
		for (unsigned w = 1; w < kReuseCpus; w++) {
			cpus.run(w, [&](sd_cpu *c) {
				if (c->asid != gasid + 1u)
					all_global = false;
				// Fill (or hit) every page under the global ASID.
				for (unsigned i = 0; i < kReusePages; i++)
					EXPECT_EQ(0, sd_access(c, kBase + i * P,
							       i % 2 ? SD_READ : SD_WRITE, nullptr));
			});
		}
		r.rounds_global += all_global;
		if (gasid)
			r.mms_of_asid[gasid].insert(sd_mm_id(mm));
		// One more flush on the global ASID alone, then everyone leaves.
		EXPECT_EQ(0, sd_mprotect(a.c, mm, kBase, P, SD_PROT_READ));
		for (unsigned w = 1; w < kReuseCpus; w++)
			cpus.run(w, [&](sd_cpu *c) {
				EXPECT_EQ(-EACCES, sd_access(c, kBase, SD_WRITE, nullptr));
				EXPECT_EQ(0, sd_switch_mm(c, nullptr));
			});
		EXPECT_EQ(0, sd_mm_destroy(mm)) << sd_last_error();
	}
	r.violations = sd_oracle_violations(mc.m);
	for (unsigned i = 0; i < r.violations && i < SD_ORACLE_MAX_DETAILS; i++) {
		sd_violation v;
		if (sd_oracle_violation(mc.m, i, &v))
			break;
		(v.kind == SD_VIOLATION_FOREIGN ? r.foreign : r.stale)++;
	}
	if (!no_wrap_flush)
		print_violations(mc.m);
	r.allocs = total(mc.m, SD_STAT_GLOBAL_ASID_ALLOC);
	r.frees = total(mc.m, SD_STAT_GLOBAL_ASID_FREE);
	r.reset_stats = total(mc.m, SD_STAT_GLOBAL_ASID_RESET);
	sd_global_asid_lock(&g->gasid);
	r.resets = g->gasid.resets;
	sd_global_asid_unlock(&g->gasid);
	std::fprintf(stderr,
		     "[reuse] %s%s: %u rounds, %llu global ASIDs allocated, %u wrap-arounds, "
		     "%zu distinct ASIDs; %llu violations (%llu foreign, %llu stale of the first %u)\n",
		     spec, no_wrap_flush ? " without the wrap flush" : "", kReuseRounds,
		     (unsigned long long)r.allocs, r.resets, r.mms_of_asid.size(),
		     (unsigned long long)r.violations, (unsigned long long)r.foreign,
		     (unsigned long long)r.stale, SD_ORACLE_MAX_DETAILS);
	return r;
}

class GlobalAsidReuse : public ::testing::TestWithParam<const char *> {};

TEST_P(GlobalAsidReuse, NoTranslationCrossesMms)
{
	{
		SCOPED_TRACE("fixed");
		ReuseResult r = run_reuse(GetParam(), false);
		EXPECT_EQ(0u, r.violations);
		EXPECT_EQ(kReuseRounds, r.rounds_global) << "workers did not run on the global ASID";
		EXPECT_EQ(kReuseRounds, r.allocs);
		EXPECT_EQ(kReuseRounds, r.frees) << "counted on A, which destroys the mms";
		EXPECT_GT(r.resets, 1u);
		EXPECT_EQ(r.resets, r.reset_stats);
		// The reuse really happened: some ASID served several mms.
		size_t most = 0;
		for (auto &kv : r.mms_of_asid)
			most = std::max(most, kv.second.size());
		EXPECT_GE(most, 2u) << "no global ASID was ever reused";
		EXPECT_LE(r.mms_of_asid.size(), 2u) << "pool of at most 2";
	}
	{
		SCOPED_TRACE("wrap-around without its flush (planted from the test)");
		ReuseResult r = run_reuse(GetParam(), true);
		EXPECT_GE(r.foreign, 1u)
			<< "reuse without a flush went unnoticed: the test lost its power";
		EXPECT_GT(r.resets, 1u);
		EXPECT_EQ(0u, r.reset_stats) << "the flush callback counts the resets";
	}
}

INSTANTIATE_TEST_SUITE_P(Pools, GlobalAsidReuse,
			 ::testing::Values("gbcast:pool=1,threshold=0,sample=1",
					   "gbcast:pool=2,threshold=0,sample=1",
					   "gbcast:pool=2,threshold=0,sample=1,cpumask=eager"),
			 [](const auto &info) {
				 return std::string(info.index == 0   ? "Pool1"
						    : info.index == 1 ? "Pool2"
								      : "Pool2Eager");
			 });

} // namespace
