// SPDX-License-Identifier: MIT
// Batched unmap flushes (arch_tlbbatch_*, include/shootdown/tlbbatch.h).
//
// Reclaim zaps PTEs of several mms and flushes once: under `ipi` that is one
// shootdown to the union of the cpumasks, one IPI per target CPU however many
// mms and pages were reclaimed, and each target catches up the mm it has
// loaded. Until then other CPUs may keep the old translations (the oracle
// floor is raised only by the flush), a mapping change of a noted mm flushes
// the whole mm first (flush_tlb_batched_pending), and the mm cannot go.
#include "common.hpp"

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

extern "C" {
#include "core/ordering.h"
}

namespace {

constexpr uint64_t P = SD_PAGE_SIZE;
constexpr uint64_t kBase = 0x10000000;

using sdtest::Attached;
using sdtest::counter;
using sdtest::Cpus;
using sdtest::Machine;
using sdtest::total;

// Map @pages at kBase in @mm, switch @c to it and touch them all.
void map_and_touch(sd_cpu *c, sd_mm *mm, unsigned pages)
{
	ASSERT_EQ(0, sd_switch_mm(c, mm)) << sd_last_error();
	for (unsigned i = 0; i < pages; i++)
		ASSERT_EQ(0, sd_access(c, kBase + i * P, SD_WRITE, nullptr)) << sd_last_error();
}

uint64_t pfn_of(sd_cpu *c, uint64_t va)
{
	uint64_t pfn = 0;
	EXPECT_EQ(0, sd_access(c, va, SD_READ, &pfn)) << sd_last_error();
	return pfn;
}

TEST(TlbBatch, BadArgumentsFailCleanly)
{
	Machine a(sdtest::config(1, "ipi")), b(sdtest::config(1, "ipi"));
	sd_tlbbatch *batch = nullptr, *other = nullptr;

	EXPECT_EQ(-EINVAL, sd_tlbbatch_create(nullptr, &batch));
	EXPECT_EQ(-EINVAL, sd_tlbbatch_create(a.m, nullptr));
	ASSERT_EQ(0, sd_tlbbatch_create(a.m, &batch));
	ASSERT_EQ(0, sd_tlbbatch_create(b.m, &other));
	EXPECT_EQ(0, sd_tlbbatch_destroy(nullptr));
	{
		Attached c(a.m, 0);
		sd_mm *mm = nullptr;
		ASSERT_EQ(0, sd_mm_create(a.m, &mm));
		ASSERT_EQ(0, sd_mmap(c.c, mm, kBase, P, SD_PROT_READ | SD_PROT_WRITE));
		EXPECT_EQ(-EINVAL, sd_tlbbatch_add(c.c, batch, nullptr));
		EXPECT_EQ(-EINVAL, sd_tlbbatch_add(c.c, other, mm));
		EXPECT_EQ(-EINVAL, sd_tlbbatch_flush(c.c, other));
		EXPECT_EQ(-EINVAL, sd_reclaim(c.c, other, mm, kBase, P));
		EXPECT_EQ(-EINVAL, sd_reclaim(c.c, batch, mm, kBase + 1, P));
		EXPECT_EQ(-EINVAL, sd_reclaim(c.c, batch, mm, kBase, 0));
		EXPECT_EQ(-EPERM, sd_tlbbatch_add(nullptr, batch, mm));
		sd_irq_disable(c.c);
		EXPECT_EQ(-EINVAL, sd_tlbbatch_flush(c.c, batch));
		sd_irq_enable(c.c);
		// Nothing half-done: an empty batch goes away, the mm too.
		EXPECT_EQ(0, sd_tlbbatch_destroy(batch));
		EXPECT_EQ(0, sd_mm_destroy(mm)) << sd_last_error();
	}
	EXPECT_EQ(0, sd_tlbbatch_destroy(other));
}

TEST(TlbBatch, OwedFlushBlocksDestroyUntilFlushed)
{
	Machine mc(sdtest::config(1, "ipi"));
	Attached c(mc.m, 0);
	sd_tlbbatch *batch = nullptr;
	sd_mm *mm = nullptr;

	ASSERT_EQ(0, sd_tlbbatch_create(mc.m, &batch));
	ASSERT_EQ(0, sd_mm_create(mc.m, &mm));
	ASSERT_EQ(0, sd_mmap(c.c, mm, kBase, 4 * P, SD_PROT_READ | SD_PROT_WRITE));
	map_and_touch(c.c, mm, 4);
	ASSERT_EQ(0, sd_reclaim(c.c, batch, mm, kBase, 4 * P));
	EXPECT_EQ(-EBUSY, sd_tlbbatch_destroy(batch));
	ASSERT_EQ(0, sd_switch_mm(c.c, nullptr));
	EXPECT_EQ(-EBUSY, sd_mm_destroy(mm));
	ASSERT_EQ(0, sd_tlbbatch_flush(c.c, batch));
	EXPECT_EQ(0, sd_tlbbatch_destroy(batch));
	EXPECT_EQ(0, sd_mm_destroy(mm)) << sd_last_error();
}

// Until the flush, another CPU may still use the reclaimed page; after it,
// every CPU walks to a fresh frame. One IPI per target for two mms and many
// pages; a CPU running an unrelated mm is not disturbed.
TEST(TlbBatch, IpiOneShootdownForTheUnionOfCpumasks)
{
	Machine mc(sdtest::config(4, "ipi"));
	Attached c0(mc.m, 0);
	Cpus cpus(mc.m, 4);
	sd_mm *a = nullptr, *b = nullptr, *other = nullptr;
	sd_tlbbatch *batch = nullptr;
	uint64_t old_a = 0, old_b = 0;

	ASSERT_EQ(0, sd_tlbbatch_create(mc.m, &batch));
	for (sd_mm **mm : { &a, &b, &other }) {
		ASSERT_EQ(0, sd_mm_create(mc.m, mm));
		ASSERT_EQ(0, sd_mmap(c0.c, *mm, kBase, 8 * P, SD_PROT_READ | SD_PROT_WRITE));
	}
	cpus.run(1, [&](sd_cpu *c) { map_and_touch(c, a, 8); old_a = pfn_of(c, kBase); });
	cpus.run(2, [&](sd_cpu *c) { map_and_touch(c, b, 8); old_b = pfn_of(c, kBase); });
	cpus.run(3, [&](sd_cpu *c) { map_and_touch(c, other, 8); });

	uint64_t sent0 = counter(mc.m, 0, SD_STAT_IPI_SENT);
	uint64_t full3 = counter(mc.m, 3, SD_STAT_FLUSH_FULL);
	ASSERT_EQ(0, sd_reclaim(c0.c, batch, a, kBase, 8 * P)) << sd_last_error();
	ASSERT_EQ(0, sd_reclaim(c0.c, batch, b, kBase, 8 * P)) << sd_last_error();
	EXPECT_EQ(sent0, counter(mc.m, 0, SD_STAT_IPI_SENT)) << "reclaim must defer the flush";
	// Deferred: the old translations are still in use, legitimately.
	cpus.run(1, [&](sd_cpu *c) { EXPECT_EQ(old_a, pfn_of(c, kBase)); });
	cpus.run(2, [&](sd_cpu *c) { EXPECT_EQ(old_b, pfn_of(c, kBase)); });

	ASSERT_EQ(0, sd_tlbbatch_flush(c0.c, batch)) << sd_last_error();
	EXPECT_EQ(sent0 + 2, counter(mc.m, 0, SD_STAT_IPI_SENT))
		<< "one IPI per target CPU, not per mm or page";
	EXPECT_EQ(1u, counter(mc.m, 1, SD_STAT_IPI_RECV));
	EXPECT_EQ(1u, counter(mc.m, 2, SD_STAT_IPI_RECV));
	EXPECT_EQ(0u, counter(mc.m, 3, SD_STAT_IPI_RECV)) << "CPU 3 runs no batched mm";
	EXPECT_EQ(full3, counter(mc.m, 3, SD_STAT_FLUSH_FULL));
	cpus.run(1, [&](sd_cpu *c) {
		uint64_t misses = counter(mc.m, 1, SD_STAT_TLB_MISS);
		for (unsigned i = 0; i < 8; i++)
			EXPECT_EQ(0, sd_access(c, kBase + i * P, SD_READ, nullptr));
		EXPECT_EQ(misses + 8, counter(mc.m, 1, SD_STAT_TLB_MISS));
	});
	cpus.run(2, [&](sd_cpu *c) { EXPECT_EQ(0, sd_access(c, kBase, SD_READ, nullptr)); });
	EXPECT_EQ(0u, total(mc.m, SD_STAT_VIOLATION));

	for (unsigned id = 1; id < 4; id++)
		cpus.run(id, [](sd_cpu *c) { EXPECT_EQ(0, sd_switch_mm(c, nullptr)); });
	EXPECT_EQ(0, sd_tlbbatch_destroy(batch));
	for (sd_mm *mm : { a, b, other })
		EXPECT_EQ(0, sd_mm_destroy(mm)) << sd_last_error();
}

// A lazy CPU is skipped by the batch flush and catches up when it switches
// back to the mm it kept loaded.
TEST(TlbBatch, IpiLazyCpuCatchesUpAtSwitchIn)
{
	Machine mc(sdtest::config(2, "ipi"));
	Attached c0(mc.m, 0);
	Cpus cpus(mc.m, 2);
	sd_mm *mm = nullptr;
	sd_tlbbatch *batch = nullptr;

	ASSERT_EQ(0, sd_tlbbatch_create(mc.m, &batch));
	ASSERT_EQ(0, sd_mm_create(mc.m, &mm));
	ASSERT_EQ(0, sd_mmap(c0.c, mm, kBase, 4 * P, SD_PROT_READ | SD_PROT_WRITE));
	cpus.run(1, [&](sd_cpu *c) {
		map_and_touch(c, mm, 4);
		EXPECT_EQ(0, sd_cpu_idle(c));
	});
	ASSERT_EQ(0, sd_reclaim(c0.c, batch, mm, kBase, 4 * P));
	ASSERT_EQ(0, sd_tlbbatch_flush(c0.c, batch));
	EXPECT_EQ(0u, counter(mc.m, 1, SD_STAT_IPI_RECV));
	EXPECT_EQ(1u, counter(mc.m, 0, SD_STAT_LAZY_SKIP));
	cpus.run(1, [&](sd_cpu *c) {
		uint64_t sw = counter(mc.m, 1, SD_STAT_SWITCH_FLUSH);
		EXPECT_EQ(0, sd_switch_mm(c, mm));
		EXPECT_EQ(sw + 1, counter(mc.m, 1, SD_STAT_SWITCH_FLUSH));
		for (unsigned i = 0; i < 4; i++)
			EXPECT_EQ(0, sd_access(c, kBase + i * P, SD_READ, nullptr));
		EXPECT_EQ(0, sd_switch_mm(c, nullptr));
	});
	EXPECT_EQ(0u, total(mc.m, SD_STAT_VIOLATION));
	EXPECT_EQ(0, sd_tlbbatch_destroy(batch));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

// flush_tlb_batched_pending(): an mprotect of a page the batch did not touch
// still flushes the whole mm while the batch owes it a flush, so the
// reclaimed page is gone from the other CPU before mprotect returns.
TEST(TlbBatch, ChangeOfOwedMmFlushesItWhole)
{
	for (const char *strategy : { "ipi", "ipi:cpumask=eager", "gbcast:threshold=0,sample=1", "broadcast", "local" }) {
		SCOPED_TRACE(strategy);
		Machine mc(sdtest::config(2, strategy));
		Attached c0(mc.m, 0);
		Cpus cpus(mc.m, 2);
		sd_mm *mm = nullptr;
		sd_tlbbatch *batch = nullptr;
		uint64_t old = 0;

		ASSERT_EQ(0, sd_tlbbatch_create(mc.m, &batch));
		ASSERT_EQ(0, sd_mm_create(mc.m, &mm));
		ASSERT_EQ(0, sd_mmap(c0.c, mm, kBase, 4 * P, SD_PROT_READ | SD_PROT_WRITE));
		ASSERT_EQ(0, sd_switch_mm(c0.c, mm));
		cpus.run(1, [&](sd_cpu *c) { map_and_touch(c, mm, 4); old = pfn_of(c, kBase); });
		ASSERT_EQ(0, sd_reclaim(c0.c, batch, mm, kBase, P));
		ASSERT_EQ(0, sd_mprotect(c0.c, mm, kBase + 3 * P, P, SD_PROT_READ));
		cpus.run(1, [&](sd_cpu *c) {
			uint64_t pfn = pfn_of(c, kBase);
			EXPECT_NE(old, pfn) << "the reclaimed page survived a change of its mm";
		});
		ASSERT_EQ(0, sd_tlbbatch_flush(c0.c, batch));
		EXPECT_EQ(0u, total(mc.m, SD_STAT_VIOLATION));
		cpus.run(1, [](sd_cpu *c) { EXPECT_EQ(0, sd_switch_mm(c, nullptr)); });
		ASSERT_EQ(0, sd_switch_mm(c0.c, nullptr));
		EXPECT_EQ(0, sd_tlbbatch_destroy(batch));
		EXPECT_EQ(0, sd_mm_destroy(mm));
	}
}

// Every strategy: reclaim in a loop while another CPU keeps using the pages;
// the oracle checks every access against the floors the flushes raise.
TEST(TlbBatch, EveryStrategyReclaimsUnderTheOracle)
{
	for (const char *strategy : { "ipi", "ipi:cpumask=eager", "gbcast:threshold=0,sample=1", "broadcast", "local" }) {
		SCOPED_TRACE(strategy);
		sd_machine_config cfg = sdtest::config(3, strategy);
		Machine mc(cfg);
		sd_mm *mms[2] = {};
		std::atomic<bool> stop{false};
		std::atomic<int> ready{0};
		struct Arg {
			sd_mm **mms;
			std::atomic<bool> *stop;
			std::atomic<int> *ready;
		} arg{ mms, &stop, &ready };

		for (sd_mm *&mm : mms)
			ASSERT_EQ(0, sd_mm_create(mc.m, &mm));
		ASSERT_EQ(0, sd_machine_run(mc.m, [](sd_cpu *c, void *p) {
			Arg *a = static_cast<Arg *>(p);
			unsigned id = sd_cpu_id(c);
			if (id == 0) {
				for (sd_mm *mm : { a->mms[0], a->mms[1] })
					EXPECT_EQ(0, sd_mmap(c, mm, kBase, 16 * P,
							     SD_PROT_READ | SD_PROT_WRITE));
				a->ready->store(1);
				sd_tlbbatch *b = nullptr;
				EXPECT_EQ(0, sd_tlbbatch_create(sd_cpu_machine(c), &b));
				for (unsigned r = 0; r < 400; r++) {
					for (sd_mm *mm : { a->mms[0], a->mms[1] })
						EXPECT_EQ(0, sd_reclaim(c, b, mm, kBase + (r % 4) * 4 * P,
									4 * P));
					EXPECT_EQ(0, sd_tlbbatch_flush(c, b));
				}
				a->stop->store(true);
				EXPECT_EQ(0, sd_tlbbatch_destroy(b));
				return;
			}
			while (!a->ready->load())
				std::this_thread::yield();
			for (unsigned n = 0; !a->stop->load(); n++) {
				sd_mm *mm = a->mms[(n / 64 + id) % 2];
				EXPECT_EQ(0, sd_switch_mm(c, mm));
				for (unsigned i = 0; i < 16; i++)
					EXPECT_EQ(0, sd_access(c, kBase + i * P, SD_WRITE, nullptr));
			}
			EXPECT_EQ(0, sd_switch_mm(c, nullptr));
		}, &arg)) << sd_last_error();
		EXPECT_EQ(0u, total(mc.m, SD_STAT_VIOLATION));
		for (sd_mm *mm : mms)
			EXPECT_EQ(0, sd_mm_destroy(mm)) << sd_last_error();
	}
}

// A CPU that switches into the mm in the middle of a reclaim, after its
// first page table and before its last, and caches a page of the last one,
// must be in the batch's flush: every zap gathers the mm's CPUs into the
// batch (set_tlb_ubc_flush_pending() after each PTE clear), not only the
// first. The interleaving is forced: CPU 0's reclaim of a page in each of
// two tables is held between them (SD_ORDER_LEAF_EDITED) until CPU 1 has
// switched in and read the second page. After the batch flush, CPU 1's read
// of it must not be served by the old translation.
struct MidReclaim {
	sd_mm *mm = nullptr, *other = nullptr;
	sd_tlbbatch *batch = nullptr;
	std::atomic<int> stage{0};
	std::atomic<bool> held{false};
};
MidReclaim *g_mid;
constexpr uint64_t kSecondTable = kBase + 512 * P;

void hold_between_tables(enum sd_order_point point, unsigned cpu)
{
	MidReclaim *r = g_mid;

	if (!r || point != SD_ORDER_LEAF_EDITED || cpu != 0 || r->stage.load() != 1 ||
	    r->held.exchange(true))
		return;
	r->stage.store(2);
	// Interrupts are on here: CPU 1's switch may IPI us meanwhile.
	while (r->stage.load() != 3)
		std::this_thread::sleep_for(std::chrono::microseconds(50));
}

void mid_reclaim_body(sd_cpu *c, void *p)
{
	auto *r = static_cast<MidReclaim *>(p);
	auto wait = [&](int s) {
		while (r->stage.load() < s) {
			sd_cpu_quiescent(c);
			std::this_thread::sleep_for(std::chrono::microseconds(50));
		}
	};
	if (sd_cpu_id(c) == 0) {
		EXPECT_EQ(0, sd_switch_mm(c, r->mm));
		EXPECT_EQ(0, sd_access(c, kBase, SD_WRITE, nullptr));
		EXPECT_EQ(0, sd_access(c, kSecondTable, SD_WRITE, nullptr));
		r->stage.store(1);
		EXPECT_EQ(0, sd_reclaim(c, r->batch, r->mm, kBase, 513 * P)) << sd_last_error();
		EXPECT_EQ(0, sd_tlbbatch_flush(c, r->batch)) << sd_last_error();
		r->stage.store(4);
		wait(5);
	} else {
		EXPECT_EQ(0, sd_switch_mm(c, r->other));    // not in the mm's cpumask
		wait(2);
		EXPECT_EQ(0, sd_switch_mm(c, r->mm));
		EXPECT_EQ(0, sd_access(c, kSecondTable, SD_READ, nullptr));  // still present
		r->stage.store(3);
		wait(4);
		EXPECT_EQ(0, sd_access(c, kSecondTable, SD_READ, nullptr));
		r->stage.store(5);
	}
	EXPECT_EQ(0, sd_switch_mm(c, nullptr));
}

TEST(TlbBatch, CpuThatJoinsMidReclaimIsInTheBatchFlush)
{
	for (const char *strategy : { "ipi", "ipi:cpumask=eager", "gbcast:threshold=0,sample=1", "broadcast", "local" }) {
		SCOPED_TRACE(strategy);
		sd_machine_config cfg = sdtest::config(2, strategy);
		cfg.oracle = SD_ORACLE_CHECKED;
		Machine mc(cfg);
		ASSERT_NE(nullptr, mc.m);
		MidReclaim r;
		ASSERT_EQ(0, sd_tlbbatch_create(mc.m, &r.batch));
		ASSERT_EQ(0, sd_mm_create(mc.m, &r.mm));
		ASSERT_EQ(0, sd_mm_create(mc.m, &r.other));
		{
			Attached a(mc.m, 0);
			ASSERT_EQ(0, sd_mmap(a.c, r.mm, kBase, 513 * P, SD_PROT_READ | SD_PROT_WRITE));
		}
		g_mid = &r;
		sd_order_set_hook(hold_between_tables);
		{
			sdtest::Watchdog w(std::string(strategy) + ": CPU 0 held between the tables of "
					   "its reclaim until CPU 1 switched in and read", 60);
			EXPECT_EQ(0, sd_machine_run(mc.m, mid_reclaim_body, &r)) << sd_last_error();
		}
		sd_order_set_hook(nullptr);
		g_mid = nullptr;
		EXPECT_TRUE(r.held.load()) << "the reclaim never reached its second table";
		EXPECT_EQ(0u, sd_oracle_violations(mc.m))
			<< "CPU 1 read the reclaimed page through a translation the batch flush missed";
		EXPECT_EQ(0, sd_tlbbatch_destroy(r.batch));
		EXPECT_EQ(0, sd_mm_destroy(r.mm));
		EXPECT_EQ(0, sd_mm_destroy(r.other));
	}
}

} // namespace

namespace {

// arm64's batched reclaim (Linux 6.5): each zapped page's TLBI goes out at
// the zap, with no DSB; the batch's flush is one DSB for all of them.
// batch=0, the kernel before it: a TLBI and a DSB for each page. Either
// way CPU 1's entries are gone before the frames are freed.
struct ArmBatch {
	uint64_t tlbis_at_reclaim = 0, dsbs_at_reclaim = 0, dsbs_at_flush = 0;
	uint64_t violations = 0;
};

ArmBatch arm_reclaim(const char *spec)
{
	constexpr unsigned kPages = 8;
	ArmBatch r;
	Machine mc(sdtest::config(2, spec));
	Attached a(mc.m, 0);
	Cpus cpus(mc.m, 2);
	sd_mm *mm = nullptr;
	sd_tlbbatch *batch = nullptr;

	EXPECT_EQ(0, sd_mm_create(mc.m, &mm));
	EXPECT_EQ(0, sd_mmap(a.c, mm, kBase, kPages * P, SD_PROT_READ | SD_PROT_WRITE));
	map_and_touch(a.c, mm, kPages);
	cpus.run(1, [&](sd_cpu *c) { map_and_touch(c, mm, kPages); });
	EXPECT_EQ(0, sd_tlbbatch_create(mc.m, &batch));
	uint64_t tlbi = total(mc.m, SD_STAT_TLBI_PAGE_OP), dsb = total(mc.m, SD_STAT_DSB);
	EXPECT_EQ(0, sd_reclaim(a.c, batch, mm, kBase, kPages * P)) << sd_last_error();
	r.tlbis_at_reclaim = total(mc.m, SD_STAT_TLBI_PAGE_OP) - tlbi;
	r.dsbs_at_reclaim = total(mc.m, SD_STAT_DSB) - dsb;
	dsb = total(mc.m, SD_STAT_DSB);
	EXPECT_EQ(0, sd_tlbbatch_flush(a.c, batch));
	r.dsbs_at_flush = total(mc.m, SD_STAT_DSB) - dsb;
	cpus.run(1, [&](sd_cpu *c) {
		for (unsigned i = 0; i < kPages; i++)
			EXPECT_EQ(0, sd_access(c, kBase + i * P, SD_READ, nullptr));
		EXPECT_EQ(0, sd_switch_mm(c, nullptr));
	});
	r.violations = sd_oracle_violations(mc.m);
	EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	EXPECT_EQ(0, sd_tlbbatch_destroy(batch));
	EXPECT_EQ(0, sd_mm_destroy(mm));
	return r;
}

TEST(TlbBatchArm64, TlbisGoOutAtTheZapAndOneDsbEndsTheBatch)
{
	ArmBatch batched = arm_reclaim("broadcast");
	EXPECT_EQ(8u, batched.tlbis_at_reclaim);
	EXPECT_EQ(0u, batched.dsbs_at_reclaim) << "a batched TLBI waits for nothing";
	EXPECT_EQ(1u, batched.dsbs_at_flush);
	EXPECT_EQ(0u, batched.violations);

	ArmBatch each = arm_reclaim("broadcast:batch=0");
	EXPECT_EQ(8u, each.tlbis_at_reclaim);
	EXPECT_EQ(8u, each.dsbs_at_reclaim) << "before 6.5: ptep_clear_flush() a page";
	EXPECT_EQ(0u, each.dsbs_at_flush);
	EXPECT_EQ(0u, each.violations);
}

TEST(TlbBatchArm64, BadBatchOptionIsRefused)
{
	for (const char *s : {"broadcast:batch=2", "broadcast:batch=", "local:batch=1"}) {
		sd_machine_config c = sdtest::config(1, s);
		sd_machine *m = nullptr;
		EXPECT_NE(0, sd_machine_create(&c, &m)) << s;
		EXPECT_EQ(nullptr, m) << s;
	}
}

} // namespace
