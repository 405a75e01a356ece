// SPDX-License-Identifier: MIT
// `rar`: Intel RAR (Rik van Riel's RFC v2-v4, 2025), forced
// deterministically on emulated CPUs, the oracle checking every access.
//
// The questions the series left open, settled for the emulated rules:
//   - new_cpu: RAR reaches the mm's cpumask only, so a CPU trimmed out of
//     it misses flushes, and must flush the global ASID when it switches
//     back in (choose_new_asid()'s new_cpu). SD_IPI_BREAK_RAR_NEW_CPU
//     removes the flush: the CPU then uses the stale entry.
//   - the trim: v2 sent a flush whose trim was due by IPI, which skips lazy
//     CPUs (should_flush_tlb()); on a global ASID a lazy CPU has no
//     generation to catch up by at its return, so it keeps the entry
//     (trim=v2, a violation). v4 trims by IPI and flushes by RAR, which
//     reaches lazy CPUs too (trim=v4, the default: none).
//   - the local TLB: v4 8/8 reports a RAR a CPU sends itself returning
//     SUCCESS without flushing. self=rar on such hardware (self_flush=0) is
//     a violation; self=rar on hardware that flushes, and self=local (v4
//     8/8's fix, the default) on either, are not.
// Then: a RAR flush reaches the mask without an interrupt, two payloads
// under PTI, a target with interrupts off is served at its next
// instruction boundary, a full payload table makes initiators wait, the
// pool's wrap-around flushes every TLB by RAR, bad options are refused,
// and a profile without RAR refuses the strategy.
#include "common.hpp"
#include "internal.hpp"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "hw/machine_state.h"
#include "strategy/ipi.h"
}

namespace {

constexpr uint64_t P = SD_PAGE_SIZE;
constexpr uint64_t kBase = 0x10000000;
constexpr uint64_t kP = kBase, kQ = kBase + P;
constexpr unsigned kA = 0, kB = 1, kC = 2;
constexpr unsigned RW = SD_PROT_READ | SD_PROT_WRITE;

using sdtest::Attached;
using sdtest::counter;
using sdtest::Cpus;
using sdtest::Machine;
using sdtest::total;

uint16_t global_asid(sd_mm *mm)
{
	return static_cast<sd_ipi_mm *>(mm->strategy)->global_asid.load();
}

bool in_mask(sd_mm *mm, unsigned cpu)
{
	return sd_cpumask_test(&static_cast<sd_ipi_mm *>(mm->strategy)->cpumask, cpu);
}

void sleep_ms(unsigned ms)
{
	std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// M runs on A and the other CPUs with a global ASID, page P cached by all
// under it. The first flush (of Q, by IPI: M has no global ASID yet) gives
// M its global ASID; every CPU then switches out and back in, and lands on
// it.
struct GlobalMm {
	Machine mc;
	Attached a;
	Cpus cpus;
	sd_mm *mm = nullptr, *other = nullptr;

	GlobalMm(const char *spec, unsigned nr_cpus, unsigned broken = 0)
		: mc(sdtest::config(nr_cpus, spec)), a(mc.m, kA), cpus(mc.m, nr_cpus)
	{
		EXPECT_EQ(0, sd_ipi_test_break(mc.m, broken)) << sd_last_error();
		EXPECT_EQ(0, sd_mm_create(mc.m, &mm));
		EXPECT_EQ(0, sd_mm_create(mc.m, &other));
		EXPECT_EQ(0, sd_mmap(a.c, mm, kBase, 4 * P, RW));
		EXPECT_EQ(0, sd_mmap(a.c, other, kBase, P, RW));
		EXPECT_EQ(0, sd_switch_mm(a.c, mm));
		EXPECT_EQ(0, sd_access(a.c, kP, SD_WRITE, nullptr));
		for (unsigned b = 1; b < nr_cpus; b++)
			cpus.run(b, [&](sd_cpu *c) {
				EXPECT_EQ(0, sd_switch_mm(c, mm));
				EXPECT_EQ(0, sd_access(c, kQ, SD_WRITE, nullptr));
			});
		EXPECT_EQ(0, sd_madvise_dontneed(a.c, mm, kQ, P));
		EXPECT_NE(0u, global_asid(mm)) << "M got no global ASID";
		EXPECT_EQ(0, sd_switch_mm(a.c, other));
		EXPECT_EQ(0, sd_switch_mm(a.c, mm));
		EXPECT_EQ(0, sd_access(a.c, kP, SD_WRITE, nullptr));
		for (unsigned b = 1; b < nr_cpus; b++)
			cpus.run(b, [&](sd_cpu *c) {
				EXPECT_EQ(0, sd_switch_mm(c, other));
				EXPECT_EQ(0, sd_switch_mm(c, mm));
				EXPECT_EQ(0, sd_access(c, kP, SD_READ, nullptr));
			});
		EXPECT_EQ(0u, sd_oracle_violations(mc.m));
	}

	~GlobalMm()
	{
		for (unsigned b = 1; b < mc.m->nr_cpus; b++)
			cpus.run(b, [](sd_cpu *c) { EXPECT_EQ(0, sd_switch_mm(c, nullptr)); });
		EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
		EXPECT_EQ(0, sd_mm_destroy(mm));
		EXPECT_EQ(0, sd_mm_destroy(other));
	}
};

TEST(Rar, AFlushReachesTheMaskByMicrocodeNotByInterrupt)
{
	GlobalMm g("rar:threshold=0,sample=1", 3);
	uint64_t ipis = total(g.mc.m, SD_STAT_IPI_SENT);
	uint64_t sent = total(g.mc.m, SD_STAT_RAR_SENT);
	uint64_t payloads = total(g.mc.m, SD_STAT_RAR_PAYLOAD);
	uint64_t done_b = counter(g.mc.m, kB, SD_STAT_RAR_DONE);

	EXPECT_EQ(0, sd_mprotect(g.a.c, g.mm, kP, P, SD_PROT_READ));
	EXPECT_EQ(ipis, total(g.mc.m, SD_STAT_IPI_SENT)) << "a RAR flush sends no IPI";
	EXPECT_EQ(sent + 2, total(g.mc.m, SD_STAT_RAR_SENT)) << "B and C signalled";
	EXPECT_EQ(payloads + 1, total(g.mc.m, SD_STAT_RAR_PAYLOAD));
	EXPECT_EQ(done_b + 1, counter(g.mc.m, kB, SD_STAT_RAR_DONE));
	g.cpus.run(kB, [&](sd_cpu *c) {
		EXPECT_FALSE(sdtest::tlb_holds(&c->tlb, kP / P, sd_ipi_slot_tag(global_asid(g.mm))))
			<< "B's microcode left P in its TLB";
		EXPECT_EQ(-EACCES, sd_access(c, kP, SD_WRITE, nullptr));
	});
	EXPECT_EQ(0u, sd_oracle_violations(g.mc.m));
}

TEST(Rar, PtiSendsTwoPayloadsAFlush)
{
	GlobalMm g("rar:threshold=0,sample=1,pti=1", 2);
	uint64_t payloads = total(g.mc.m, SD_STAT_RAR_PAYLOAD);

	EXPECT_EQ(0, sd_mprotect(g.a.c, g.mm, kP, P, SD_PROT_READ));
	EXPECT_EQ(payloads + 2, total(g.mc.m, SD_STAT_RAR_PAYLOAD))
		<< "the kernel PCID and the user PCID";
	EXPECT_EQ(0u, sd_oracle_violations(g.mc.m));
}

// B leaves for another mm, not lazily, and a trimming flush takes it out
// of M's mask; A then changes P by RAR (B not reached); B comes back.
uint64_t new_cpu_violations(unsigned broken)
{
	GlobalMm g("rar:threshold=0,sample=1,trim_ms=1", 2, broken);

	g.cpus.run(kB, [&](sd_cpu *c) { EXPECT_EQ(0, sd_switch_mm(c, g.other)); });
	sleep_ms(5);            // the next flush's trim is due
	EXPECT_EQ(0, sd_access(g.a.c, kQ, SD_WRITE, nullptr));
	EXPECT_EQ(0, sd_madvise_dontneed(g.a.c, g.mm, kQ, P));
	EXPECT_FALSE(in_mask(g.mm, kB)) << "the trim left B in M's mask";
	EXPECT_EQ(0, sd_mprotect(g.a.c, g.mm, kP, P, SD_PROT_READ));
	uint64_t flushes = counter(g.mc.m, kB, SD_STAT_RAR_NEW_CPU_FLUSH);
	g.cpus.run(kB, [&](sd_cpu *c) {
		EXPECT_EQ(0, sd_switch_mm(c, g.mm));
		(void)sd_access(c, kP, SD_WRITE, nullptr);
	});
	EXPECT_EQ(flushes + !broken, counter(g.mc.m, kB, SD_STAT_RAR_NEW_CPU_FLUSH));
	return sd_oracle_violations(g.mc.m);
}

TEST(Rar, ACpuNewToTheMaskFlushesTheGlobalAsid)
{
	EXPECT_EQ(0u, new_cpu_violations(0));
	EXPECT_GE(new_cpu_violations(SD_IPI_BREAK_RAR_NEW_CPU), 1u)
		<< "without the new_cpu flush B must use its stale entry: the test lost its power";
}

// B idles on M (lazy, in the mask, M loaded); A changes P with a trim due;
// B comes back to M and writes P.
uint64_t lazy_trim_violations(const char *trim)
{
	std::string spec = std::string("rar:threshold=0,sample=1,trim_ms=1,trim=") + trim;
	GlobalMm g(spec.c_str(), 2);

	g.cpus.run(kB, [&](sd_cpu *c) { EXPECT_EQ(0, sd_cpu_idle(c)); });
	sleep_ms(5);
	EXPECT_EQ(0, sd_mprotect(g.a.c, g.mm, kP, P, SD_PROT_READ));
	EXPECT_TRUE(in_mask(g.mm, kB)) << "a lazy CPU is never trimmed";
	g.cpus.run(kB, [&](sd_cpu *c) {
		EXPECT_EQ(0, sd_switch_mm(c, g.mm));
		(void)sd_access(c, kP, SD_WRITE, nullptr);
	});
	return sd_oracle_violations(g.mc.m);
}

TEST(Rar, V2sTrimByIpiMissesALazyCpuOnAGlobalAsidV4sDoesNot)
{
	EXPECT_EQ(0u, lazy_trim_violations("v4"));
	EXPECT_GE(lazy_trim_violations("v2"), 1u)
		<< "v2's IPI flush skips the lazy CPU and nothing flushes it at its return";
}

// A runs M with P cached (global ASID) and flushes P with a RAR to itself.
uint64_t self_violations(const char *opts)
{
	std::string spec = std::string("rar:threshold=0,sample=1,") + opts;
	GlobalMm g(spec.c_str(), 2);

	EXPECT_EQ(0, sd_access(g.a.c, kP, SD_WRITE, nullptr));
	EXPECT_EQ(0, sd_mprotect(g.a.c, g.mm, kP, P, SD_PROT_READ));
	(void)sd_access(g.a.c, kP, SD_WRITE, nullptr);
	return sd_oracle_violations(g.mc.m);
}

TEST(Rar, ASelfRarIsCorrectOnlyOnHardwareThatFlushesTheSender)
{
	EXPECT_EQ(0u, self_violations("self=local,self_flush=0"));
	EXPECT_EQ(0u, self_violations("self=rar,self_flush=1"));
	EXPECT_GE(self_violations("self=rar,self_flush=0"), 1u)
		<< "v4's self-RAR on hardware that does not flush the sender must be stale";
}

TEST(Rar, ATargetWithInterruptsOffIsServedAtItsNextInstructionBoundary)
{
	GlobalMm g("rar:threshold=0,sample=1", 2);
	std::atomic<bool> flushed{false}, off{false};
	uint64_t before = counter(g.mc.m, kB, SD_STAT_RAR_IRQS_OFF);

	// B turns interrupts off and works until A's flush is done: an IPI
	// would wait for B's sd_irq_enable(), which comes only after it.
	std::thread b([&] {
		g.cpus.run(kB, [&](sd_cpu *c) {
			sd_irq_disable(c);
			off.store(true);
			while (!flushed.load())
				EXPECT_EQ(0, sd_cpu_work(c, 1));
			EXPECT_EQ(0, sd_irq_enable(c));
		});
	});
	while (!off.load())
		std::this_thread::yield();
	EXPECT_EQ(0, sd_mprotect(g.a.c, g.mm, kP, P, SD_PROT_READ));
	flushed.store(true);
	b.join();
	EXPECT_GE(counter(g.mc.m, kB, SD_STAT_RAR_IRQS_OFF), before + 1)
		<< "B's microcode did not run with interrupts off";
	EXPECT_EQ(0u, sd_oracle_violations(g.mc.m));
}

TEST(Rar, AFullPayloadTableMakesInitiatorsWait)
{
	constexpr unsigned kCpus = 6;
	Machine mc(sdtest::config(kCpus, "rar:threshold=0,sample=1,payloads=1"));
	sd_mm *mm = nullptr;
	ASSERT_EQ(0, sd_mm_create(mc.m, &mm));
	std::atomic<unsigned> ready{0};
	std::vector<std::thread> ts;
	const uint64_t rounds = 80;

	for (unsigned i = 0; i < kCpus; i++)
		ts.emplace_back([&, i] {
			Attached at(mc.m, i);
			const uint64_t va = kBase + i * P;
			if (i == 0) {
				EXPECT_EQ(0, sd_mmap(at.c, mm, kBase, kCpus * P, RW));
			}
			ready.fetch_add(1);
			while (ready.load() < kCpus)
				std::this_thread::yield();
			EXPECT_EQ(0, sd_switch_mm(at.c, mm));
			for (uint64_t r = 0; r < rounds; r++) {
				EXPECT_EQ(0, sd_access(at.c, va, SD_WRITE, nullptr));
				EXPECT_EQ(0, sd_madvise_dontneed(at.c, mm, va, P));
			}
			EXPECT_EQ(0, sd_switch_mm(at.c, nullptr));
		});
	for (auto &t : ts)
		t.join();
	EXPECT_NE(0u, global_asid(mm));
	EXPECT_GT(total(mc.m, SD_STAT_RAR_PAYLOAD), 0u);
	EXPECT_GT(total(mc.m, SD_STAT_RAR_SLOT_WAIT), 0u)
		<< "six initiators and one payload slot, and nobody waited for it";
	EXPECT_EQ(0u, sd_oracle_violations(mc.m));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

TEST(Rar, ThePoolsWrapAroundFlushesEveryTlbByRar)
{
	// Two global ASIDs: the third mm that asks wraps the space around.
	Machine mc(sdtest::config(2, "rar:threshold=0,sample=1,pool=2"));
	Attached a(mc.m, kA);
	Cpus cpus(mc.m, 2);
	for (unsigned i = 0; i < 4; i++) {
		sd_mm *mm = nullptr;
		ASSERT_EQ(0, sd_mm_create(mc.m, &mm));
		ASSERT_EQ(0, sd_mmap(a.c, mm, kBase, 2 * P, RW));
		cpus.run(kB, [&](sd_cpu *c) {
			EXPECT_EQ(0, sd_switch_mm(c, mm));
			EXPECT_EQ(0, sd_access(c, kP, SD_WRITE, nullptr));
		});
		EXPECT_EQ(0, sd_switch_mm(a.c, mm));
		EXPECT_EQ(0, sd_madvise_dontneed(a.c, mm, kP, P));
		cpus.run(kB, [&](sd_cpu *c) {
			EXPECT_EQ(0, sd_access(c, kP, SD_WRITE, nullptr));
			EXPECT_EQ(0, sd_switch_mm(c, nullptr));
		});
		EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
		EXPECT_EQ(0, sd_mm_destroy(mm));
	}
	EXPECT_GE(total(mc.m, SD_STAT_GLOBAL_ASID_RESET), 2u);
	EXPECT_EQ(0u, sd_oracle_violations(mc.m));
}

TEST(Rar, BadOptionsAreRefused)
{
	for (const char *s : {"rar:payloads=0", "rar:payloads=65", "rar:pti=2", "rar:self=both",
			      "rar:self_flush=yes", "rar:trim=v3", "rar:pool=0"}) {
		sd_machine_config c = sdtest::config(2, s);
		sd_machine *m = nullptr;
		EXPECT_EQ(-EINVAL, sd_machine_create(&c, &m)) << s;
		EXPECT_EQ(nullptr, m) << s;
	}
	// gbcast's INVLPGB option, and no option at all: unknown to rar.
	for (const char *s : {"rar:count_max=4", "rar:bogus=1"}) {
		sd_machine_config c = sdtest::config(2, s);
		sd_machine *m = nullptr;
		EXPECT_EQ(-ENOENT, sd_machine_create(&c, &m)) << s;
		EXPECT_EQ(nullptr, m) << s;
	}
}

TEST(Rar, AProfileWithoutRarRefusesIt)
{
	sd_machine_config c = sdtest::config(4, "rar");
	sd_machine *m = nullptr;

	c.profile = "milan-36";
	EXPECT_EQ(-EOPNOTSUPP, sd_machine_create(&c, &m)) << "Milan has no RAR";
	EXPECT_EQ(nullptr, m);
	c.profile = "sapphire-rapids-112";
	EXPECT_EQ(0, sd_machine_create(&c, &m)) << sd_last_error();
	EXPECT_EQ(0, sd_machine_destroy(m));
}

} // namespace

namespace {

// A idles on M (lazy: M loaded, in the mask) with P cached under the global
// ASID, then itself changes P (a flush it initiates); B runs M. A comes back.
uint64_t lazy_initiator_violations(const char *self)
{
	std::string spec = std::string("rar:threshold=0,sample=1,self=") + self;
	GlobalMm g(spec.c_str(), 2);

	EXPECT_EQ(0, sd_access(g.a.c, kP, SD_WRITE, nullptr));
	EXPECT_EQ(0, sd_cpu_idle(g.a.c));
	EXPECT_EQ(0, sd_mprotect(g.a.c, g.mm, kP, P, SD_PROT_READ)) << sd_last_error();
	EXPECT_EQ(0, sd_switch_mm(g.a.c, g.mm));
	(void)sd_access(g.a.c, kP, SD_WRITE, nullptr);
	return sd_oracle_violations(g.mc.m);
}

TEST(Rar, ALazyInitiatorFlushesItsOwnGlobalEntries)
{
	EXPECT_EQ(0u, lazy_initiator_violations("pcid"));
	EXPECT_GE(lazy_initiator_violations("local"), 1u)
		<< "flush_tlb_func() on a lazy initiator leaves for init_mm without a flush";
}

} // namespace
