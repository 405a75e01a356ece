// SPDX-License-Identifier: MIT
// Receivers pay (issue 23, item 5): a broadcast invalidation (TLBI IS,
// INVLPGB) stalls every CPU it reaches, and the stall is charged to that
// CPU's own clock (lib/hw/model.c, recv_owe() and recv_pay()).
//
// Each test writes a profile in which every cost is 0 except the ones it
// names, so a bystander's clock can only move by the receive cost.
#include "common.hpp"

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "profile.hpp"

namespace {

using sdtest::Machine;
using sdtest::Profile;
using sdtest::Watchdog;

constexpr uint64_t P = SD_PAGE_SIZE;
constexpr uint64_t kPage = 0x40000000;
// A window of 1 s: nobody waits for anybody, so no CPU is marked stalled
// while it sleeps (which would forget what it was owed: model.c, rejoin()).
constexpr uint64_t kWindowNs = 1000000000;
// Work past the quantum (half the window): the bystander reaches a sync
// point, where what it is owed goes into its clock proper.
constexpr uint64_t kWorkNs = 600000000;

void wait_for(const std::atomic<int> &flag)
{
	while (!flag.load())
		std::this_thread::sleep_for(std::chrono::microseconds(50));
}

// CPU 0 (with CPU 1 too when @shared: an mm gbcast gives a global ASID
// to) runs an mm and flushes it @flushes times, @pages each; the last CPU
// never runs it and only watches its own clock.
struct Run {
	unsigned flushes = 0;
	uint64_t pages = 1;
	bool shared = false;
	sd_mm *mm = nullptr;
	sd_cpu *bystander = nullptr;
	std::atomic<int> ready{0}, go{0}, done{0}, read{0};
	uint64_t before = 0, owed = 0, after_work = 0, published = 0;
};

void body(sd_cpu *c, void *arg)
{
	auto *r = static_cast<Run *>(arg);
	const unsigned id = sd_cpu_id(c), last = sd_machine_nr_cpus(sd_cpu_machine(c)) - 1;

	if (id == last) {
		r->bystander = c;
		wait_for(r->ready);
		r->before = sd_cpu_clock_ns(c);
		r->go.store(1);
		wait_for(r->done);
		// The owner's view: its clock and what it is owed.
		r->owed = sd_cpu_clock_ns(c);
		EXPECT_EQ(0, sd_cpu_work(c, kWorkNs));
		r->after_work = sd_cpu_clock_ns(c);
		r->read.store(1);
		return;
	}
	if (id == 1 && r->shared) {
		EXPECT_EQ(0, sd_switch_mm(c, r->mm));
		r->ready.fetch_add(1);
		wait_for(r->read);
		EXPECT_EQ(0, sd_switch_mm(c, nullptr));
		return;
	}
	if (id != 0)
		return;
	EXPECT_EQ(0, sd_switch_mm(c, r->mm));
	while (r->ready.load() < (r->shared ? 1 : 0))
		std::this_thread::sleep_for(std::chrono::microseconds(50));
	r->ready.store(1);
	wait_for(r->go);
	for (unsigned i = 0; i < r->flushes; i++)
		EXPECT_EQ(0, sd_flush_tlb_range(c, r->mm, kPage, r->pages * P));
	r->done.store(1);
	wait_for(r->read);
	// The others' view: what the bystander published at its sync point,
	// so the stall is in its clock, not only in what it is owed.
	r->published = sd_cpu_clock_ns(r->bystander);
	EXPECT_EQ(0, sd_switch_mm(c, nullptr));
}

struct Result {
	uint64_t owed, after_work, published, broadcasts, tlb_entries;
};

Result run(const char *strategy, unsigned cpus, const Profile &p, unsigned flushes,
	   uint64_t pages = 1, bool shared = false)
{
	sd_machine_config cfg = sdtest::config(cpus, strategy);
	cfg.profile = p.path.c_str();
	cfg.model_window_ns = kWindowNs;
	Machine mach(cfg);
	EXPECT_NE(nullptr, mach.m) << sd_last_error();
	if (!mach.m)
		return {};
	Run r;
	r.flushes = flushes;
	r.pages = pages;
	r.shared = shared;
	EXPECT_EQ(0, sd_mm_create(mach.m, &r.mm));
	Watchdog w("Receivers pay: a CPU stuck", 60);
	EXPECT_EQ(0, sd_machine_run(mach.m, body, &r)) << sd_last_error();
	EXPECT_EQ(0, sd_mm_destroy(r.mm));
	sd_stats st = SD_STATS_INIT;
	EXPECT_EQ(0, sd_stats_snapshot(mach.m, &st));
	struct sd_machine_info info {};
	EXPECT_EQ(0, sd_machine_info(mach.m, &info));
	EXPECT_EQ(0u, r.before) << "the bystander was charged before the broadcasts";
	return { r.owed - r.before, r.after_work - r.before, r.published - r.before,
		 st.counter[SD_STAT_TLBI_OP] + st.counter[SD_STAT_INVLPGB],
		 info.tlb_l1_entries + info.tlb_sets * info.tlb_ways };
}

// Five one-page flushes are five TLBI VALE1IS: the bystander, which never
// ran the mm, pays R for each, and only R.
TEST(ReceiversPay, BystanderPaysEachBroadcastTlbi)
{
	constexpr double R = 7;
	constexpr unsigned N = 5;
	Profile p("pack:1 core:2 pu:1", {{"tlbi_recv", R}, {"dvm_completion", 100}});
	Result got = run("broadcast", 2, p, N);
	EXPECT_EQ((uint64_t)N, got.broadcasts);
	EXPECT_EQ((uint64_t)(N * R), got.owed);
	EXPECT_EQ((uint64_t)(N * R) + kWorkNs, got.after_work);
	EXPECT_EQ((uint64_t)(N * R) + kWorkNs, got.published);
}

// An ASID-wide TLBI (ASIDE1IS, from max_tlbi_ops pages on, without range
// ops) pays R and,
// where the profile says invalidation scans, one scan of the whole TLB.
TEST(ReceiversPay, WholeAsidBroadcastAddsTheScan)
{
	constexpr double R = 7, S = 0.5;
	Profile p("pack:1 core:2 pu:1",
		  {{"tlbi_recv", R}, {"dvm_completion", 100}, {"tlb_scan_entry", S}});
	Result got = run("broadcast:range=none,max_tlbi_ops=4", 2, p, 3, 4);
	EXPECT_EQ(3u, got.broadcasts);
	// In ps, as the model adds: the scan is 500 ps an entry.
	const uint64_t scan_ps = (uint64_t)(S * 1000) * got.tlb_entries;
	EXPECT_EQ(3 * ((uint64_t)(R * 1000) + scan_ps) / 1000, got.owed) << got.tlb_entries;
}

// INVLPGB reaches every CPU too: gbcast with a global ASID for an mm on
// two CPUs, a third that never runs it.
TEST(ReceiversPay, BystanderPaysEachInvlpgb)
{
	constexpr double R = 9;
	constexpr unsigned N = 4;
	Profile p("pack:1 core:3 pu:1", {{"invlpgb_recv", R}, {"invlpgb_completion", 100}});
	Result got = run("gbcast:threshold=1,sample=1", 3, p, N, 1, true);
	EXPECT_GE(got.broadcasts, (uint64_t)N);
	EXPECT_EQ((uint64_t)(got.broadcasts * R), got.owed) << got.broadcasts << " INVLPGBs";
	EXPECT_EQ((uint64_t)(got.broadcasts * R) + kWorkNs, got.published);
}

// A profile whose receive cost is 0 (as every profile older than it):
// the bystander's clock does not move.
TEST(ReceiversPay, ZeroCostChargesNothing)
{
	Profile p("pack:1 core:2 pu:1", {{"tlbi_issue", 5}, {"dvm_message", 50}});
	Result got = run("broadcast", 2, p, 5);
	EXPECT_EQ(5u, got.broadcasts);
	EXPECT_EQ(0u, got.owed);
	EXPECT_EQ(kWorkNs, got.published);
}

// IPIs reach mm_cpumask only: a bystander pays nothing under ipi.
TEST(ReceiversPay, IpiSparesTheBystander)
{
	Profile p("pack:1 core:2 pu:1", {{"tlbi_recv", 7}, {"dvm_completion", 100},
					 {"invlpgb_recv", 9}, {"invlpgb_completion", 100}});
	Result got = run("ipi", 2, p, 5);
	EXPECT_EQ(0u, got.owed);
}

// A receive cost longer than the broadcast's completion is a unit slip.
TEST(ReceiversPay, ReceiveLongerThanCompletionIsRefused)
{
	for (const char *k : {"tlbi_recv", "invlpgb_recv"}) {
		Profile p("pack:1 core:2 pu:1", {{k, 500}, {"dvm_completion", 100},
						 {"invlpgb_completion", 100}});
		sd_machine_config cfg = sdtest::config(2, "broadcast");
		cfg.profile = p.path.c_str();
		sd_machine *m = nullptr;
		EXPECT_EQ(-EINVAL, sd_machine_create(&cfg, &m)) << k;
		EXPECT_NE(std::string::npos, std::string(sd_last_error()).find(k)) << sd_last_error();
		EXPECT_EQ(nullptr, m);
	}
}

}  // namespace
