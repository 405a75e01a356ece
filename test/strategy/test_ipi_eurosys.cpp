// SPDX-License-Identifier: MIT
// The switches of Amit, Tai and Wei, "Don't shoot down TLB shootdowns!"
// (EuroSys 2020), on `ipi`, forced deterministically:
//   - order: since 5.13 the initiator flushes its own TLB while the IPIs
//     are out (concurrent, the default); before, it flushed first and then
//     sent them (order=serial).
//   - early acknowledgement (ack=early, never merged): the target acks on
//     entry and flushes after. It is correct only while the target is still
//     in its handler, interrupts off, and only if it copied the flush's
//     description before the ack: the initiator reuses its flush_tlb_info
//     at once. SD_IPI_BREAK_EARLY_ACK_NO_COPY acks first; the initiator's
//     next flush, of another mm, overwrites the description, and the target
//     takes it for a trim of that mm: it flushes nothing, and writes through
//     its stale entry (the oracle sees it).
#include "common.hpp"

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

extern "C" {
#include "core/ordering.h"
#include "strategy/ipi.h"
}

namespace {

constexpr uint64_t P = SD_PAGE_SIZE;
constexpr uint64_t kBase = 0x10000000;
constexpr unsigned kA = 0, kB = 1;
constexpr unsigned RW = SD_PROT_READ | SD_PROT_WRITE;

using sdtest::Attached;
using sdtest::counter;
using sdtest::Cpus;
using sdtest::Machine;

bool wait_for(const std::function<bool()> &pred)
{
	auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
	while (!pred()) {
		if (std::chrono::steady_clock::now() > deadline)
			return false;
		std::this_thread::yield();
	}
	return true;
}

// ---- order ----

std::atomic<bool> order_armed{false};
std::atomic<sd_machine *> order_machine{nullptr};
std::atomic<uint64_t> a_flushes_at_send{0};

uint64_t local_flushes(sd_machine *m, unsigned cpu)
{
	return counter(m, cpu, SD_STAT_FLUSH_PARTIAL) + counter(m, cpu, SD_STAT_FLUSH_FULL);
}

void order_hook(enum sd_order_point p, unsigned cpu)
{
	if (order_armed.load() && p == SD_ORDER_FLUSH_LOADED && cpu == kA)
		a_flushes_at_send = local_flushes(order_machine.load(), kA);
}

// A and B run M with P cached; A write-protects P. How many local flushes
// A had done when its IPIs were out.
uint64_t flushes_before_the_ipis(const char *spec)
{
	Machine mc(sdtest::config(2, spec));
	Attached a(mc.m, kA);
	Cpus cpus(mc.m, 2);
	sd_mm *mm = nullptr;

	EXPECT_EQ(0, sd_mm_create(mc.m, &mm));
	EXPECT_EQ(0, sd_mmap(a.c, mm, kBase, P, RW));
	EXPECT_EQ(0, sd_switch_mm(a.c, mm));
	EXPECT_EQ(0, sd_access(a.c, kBase, SD_WRITE, nullptr));
	cpus.run(kB, [&](sd_cpu *c) {
		EXPECT_EQ(0, sd_switch_mm(c, mm));
		EXPECT_EQ(0, sd_access(c, kBase, SD_WRITE, nullptr));
	});
	uint64_t before = local_flushes(mc.m, kA);
	order_machine = mc.m;
	sd_order_set_hook(order_hook);
	order_armed = true;
	EXPECT_EQ(0, sd_mprotect(a.c, mm, kBase, P, SD_PROT_READ));
	order_armed = false;
	sd_order_set_hook(nullptr);
	cpus.run(kB, [&](sd_cpu *c) {
		EXPECT_EQ(-EACCES, sd_access(c, kBase, SD_WRITE, nullptr));
		EXPECT_EQ(0, sd_switch_mm(c, nullptr));
	});
	EXPECT_EQ(0u, sd_oracle_violations(mc.m));
	EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	EXPECT_EQ(0, sd_mm_destroy(mm));
	return a_flushes_at_send.load() - before;
}

TEST(IpiEuroSys, ConcurrentOrderSendsTheIpisBeforeTheLocalFlushSerialAfter)
{
	EXPECT_EQ(0u, flushes_before_the_ipis("ipi")) << "5.13: the local flush runs with the IPIs out";
	EXPECT_EQ(1u, flushes_before_the_ipis("ipi:order=serial")) << "before 5.13: local first";
}

// ---- early acknowledgement ----

std::atomic<bool> ack_armed{false};
std::atomic<bool> b_acked{false}, release_b{false}, hook_timed_out{false};

void ack_hook(enum sd_order_point p, unsigned cpu)
{
	if (!ack_armed.load() || p != SD_ORDER_IPI_ACKED_EARLY || cpu != kB)
		return;
	// B, in its handler, acked and not yet flushed: held until released.
	ack_armed = false;
	b_acked = true;
	if (!wait_for([] { return release_b.load(); }))
		hook_timed_out = true;
}

TEST(IpiEuroSys, AnEarlyAckLetsTheInitiatorGoOnWhileTheTargetIsStillInItsHandler)
{
	Machine mc(sdtest::config(2, "ipi:ack=early"));
	Attached a(mc.m, kA);
	Cpus cpus(mc.m, 2);
	sd_mm *mm = nullptr;

	ASSERT_EQ(0, sd_mm_create(mc.m, &mm));
	ASSERT_EQ(0, sd_mmap(a.c, mm, kBase, P, RW));
	ASSERT_EQ(0, sd_switch_mm(a.c, mm));
	cpus.run(kB, [&](sd_cpu *c) {
		EXPECT_EQ(0, sd_switch_mm(c, mm));
		EXPECT_EQ(0, sd_access(c, kBase, SD_WRITE, nullptr));
	});
	b_acked = release_b = hook_timed_out = false;
	sd_order_set_hook(ack_hook);
	ack_armed = true;
	EXPECT_EQ(0, sd_mprotect(a.c, mm, kBase, P, SD_PROT_READ));
	// The hook notes B's ack just after it: wait for the note, not the ack.
	EXPECT_TRUE(wait_for([] { return b_acked.load(); })) << "B never acked";
	// A is back while B still holds its stale entry, inside its handler.
	uint64_t b_flushes = local_flushes(mc.m, kB);
	release_b = true;
	cpus.run(kB, [&](sd_cpu *c) {
		EXPECT_EQ(-EACCES, sd_access(c, kBase, SD_WRITE, nullptr));
		EXPECT_EQ(0, sd_switch_mm(c, nullptr));
	});
	sd_order_set_hook(nullptr);
	EXPECT_FALSE(hook_timed_out.load());
	EXPECT_GT(local_flushes(mc.m, kB), b_flushes) << "B flushed after its ack";
	EXPECT_EQ(0u, sd_oracle_violations(mc.m));
	EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

// B ran N once (its bit stays: lazy mask), then runs M with P cached. A
// write-protects P: B acks early and is held; A then write-protects a page
// of N, which rewrites A's flush_tlb_info (B is in N's mask, not running
// it: no IPI) and releases B at its FLUSH_LOADED. B then writes P.
std::atomic<bool> copy_armed{false};

void copy_hook(enum sd_order_point p, unsigned cpu)
{
	if (p == SD_ORDER_IPI_ACKED_EARLY && cpu == kB && ack_armed.load()) {
		ack_armed = false;
		b_acked = true;
		if (!wait_for([] { return release_b.load(); }))
			hook_timed_out = true;
	} else if (p == SD_ORDER_FLUSH_LOADED && cpu == kA && copy_armed.load()) {
		copy_armed = false;
		release_b = true;
	}
}

uint64_t early_ack_violations(unsigned broken)
{
	Machine mc(sdtest::config(2, "ipi:ack=early"));
	Attached a(mc.m, kA);
	Cpus cpus(mc.m, 2);
	sd_mm *m = nullptr, *n = nullptr;

	EXPECT_EQ(0, sd_ipi_test_break(mc.m, broken));
	EXPECT_EQ(0, sd_mm_create(mc.m, &m));
	EXPECT_EQ(0, sd_mm_create(mc.m, &n));
	EXPECT_EQ(0, sd_mmap(a.c, m, kBase, P, RW));
	EXPECT_EQ(0, sd_mmap(a.c, n, kBase, P, RW));
	EXPECT_EQ(0, sd_switch_mm(a.c, m));
	cpus.run(kB, [&](sd_cpu *c) {
		EXPECT_EQ(0, sd_switch_mm(c, n));
		EXPECT_EQ(0, sd_access(c, kBase, SD_WRITE, nullptr));
		EXPECT_EQ(0, sd_switch_mm(c, m));
		EXPECT_EQ(0, sd_access(c, kBase, SD_WRITE, nullptr));
	});
	b_acked = release_b = hook_timed_out = false;
	sd_order_set_hook(copy_hook);
	ack_armed = true;
	EXPECT_EQ(0, sd_mprotect(a.c, m, kBase, P, SD_PROT_READ));
	// B's order point (where the hook notes the ack) comes after the ack
	// that let our flush return: wait for it rather than race it.
	EXPECT_TRUE(wait_for([] { return b_acked.load(); }));
	copy_armed = true;
	EXPECT_EQ(0, sd_mprotect(a.c, n, kBase, P, SD_PROT_READ));
	EXPECT_TRUE(wait_for([] { return release_b.load(); }));
	cpus.run(kB, [&](sd_cpu *c) {
		(void)sd_access(c, kBase, SD_WRITE, nullptr);
		EXPECT_EQ(0, sd_switch_mm(c, nullptr));
	});
	sd_order_set_hook(nullptr);
	copy_armed = false;
	EXPECT_FALSE(hook_timed_out.load());
	uint64_t v = sd_oracle_violations(mc.m);
	EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	EXPECT_EQ(0, sd_mm_destroy(m));
	EXPECT_EQ(0, sd_mm_destroy(n));
	return v;
}

TEST(IpiEuroSys, AnEarlyAckMustCopyTheFlushFirst)
{
	EXPECT_EQ(0u, early_ack_violations(0));
	EXPECT_GE(early_ack_violations(SD_IPI_BREAK_EARLY_ACK_NO_COPY), 1u)
		<< "B read A's next flush for its own and flushed nothing: the test lost its power";
}

TEST(IpiEuroSys, BadOptionsAreRefused)
{
	for (const char *s : {"ipi:order=parallel", "ipi:ack=never", "ipi:ack=", "gbcast:order=x",
			      "ipi:lines=merged"}) {
		sd_machine_config c = sdtest::config(2, s);
		sd_machine *m = nullptr;
		EXPECT_EQ(-EINVAL, sd_machine_create(&c, &m)) << s;
		EXPECT_EQ(nullptr, m) << s;
	}
}

} // namespace
