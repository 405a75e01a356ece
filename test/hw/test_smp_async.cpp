// SPDX-License-Identifier: MIT
// The program's own IPIs beyond sd_smp_call_single() (lib/hw/smp_async.c):
// a request posted now and waited for later, one function run on a list of
// CPUs, their refusals, the posted-request bookkeeping that keeps a target's
// queue whole, and their modelled time against answers computed by hand.
#include "common.hpp"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "profile.hpp"

namespace {

using sdtest::Attached;
using sdtest::Machine;
using sdtest::Profile;
using sdtest::Watchdog;

void nothing(sd_cpu *, void *) {}

void count_here(sd_cpu *c, void *arg)
{
	auto *ran = static_cast<std::atomic<unsigned> *>(arg);
	ran[sd_cpu_id(c)].fetch_add(1);
}

TEST(MachineCpu, NamesEachCpuAndRefusesTheRest)
{
	Machine mach(sdtest::config(3));
	ASSERT_NE(nullptr, mach.m);
	for (unsigned i = 0; i < 3; i++) {
		sd_cpu *c = sd_machine_cpu(mach.m, i);
		ASSERT_NE(nullptr, c);
		EXPECT_EQ(i, sd_cpu_id(c));
		EXPECT_EQ(mach.m, sd_cpu_machine(c));
	}
	EXPECT_EQ(nullptr, sd_machine_cpu(mach.m, 3));
	EXPECT_NE(nullptr, strstr(sd_last_error(), "out of range"));
	EXPECT_EQ(nullptr, sd_machine_cpu(nullptr, 0));
	// The handle is the one the attached thread gets.
	Attached a(mach.m, 2);
	EXPECT_EQ(a.c, sd_machine_cpu(mach.m, 2));
}

// Every refusal leaves nothing posted: the CPU detaches afterwards.
TEST(SmpAsync, RefusesBadCallsAndLeavesNothingPosted)
{
	Machine mach(sdtest::config(3, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	sd_smp_call call{}, other{};
	std::atomic<unsigned> ran[3]{};

	EXPECT_EQ(-EPERM, sd_smp_call_async(nullptr, 1, nothing, nullptr, &call));
	EXPECT_EQ(-EPERM, sd_smp_call_async_wait(nullptr, &call));
	EXPECT_EQ(-EPERM, sd_smp_call_many(nullptr, nullptr, 0, nothing, nullptr, 0));
	sdtest::PollingCpu target(mach.m, 1);
	{
		Attached a(mach.m, 0);
		EXPECT_EQ(-EINVAL, sd_smp_call_async(a.c, 0, nothing, nullptr, &call)) << "itself";
		EXPECT_EQ(-EINVAL, sd_smp_call_async(a.c, 3, nothing, nullptr, &call));
		EXPECT_EQ(-EINVAL, sd_smp_call_async(a.c, 1, nullptr, nullptr, &call));
		EXPECT_EQ(-EINVAL, sd_smp_call_async(a.c, 1, nothing, nullptr, nullptr));
		EXPECT_EQ(-EINVAL, sd_smp_call_async(a.c, 2, nothing, nullptr, &call));
		EXPECT_NE(nullptr, strstr(sd_last_error(), "no thread"));
		EXPECT_EQ(-EINVAL, sd_smp_call_async_wait(a.c, &call)) << "never posted";
		EXPECT_EQ(-EINVAL, sd_smp_call_async_wait(a.c, nullptr));

		ASSERT_EQ(0, sd_smp_call_async(a.c, 1, count_here, ran, &call));
		EXPECT_EQ(-EBUSY, sd_smp_call_async(a.c, 1, count_here, ran, &call))
			<< "posted twice would push one node twice";
		EXPECT_EQ(-EBUSY, sd_cpu_detach(a.c));
		EXPECT_NE(nullptr, strstr(sd_last_error(), "not waited for"));
		sd_irq_disable(a.c);
		EXPECT_EQ(-EDEADLK, sd_smp_call_async_wait(a.c, &call));
		// Posting with interrupts off is allowed, as the kernel's is.
		EXPECT_EQ(0, sd_smp_call_async(a.c, 1, count_here, ran, &other));
		EXPECT_EQ(0, sd_irq_enable(a.c));
		EXPECT_EQ(0, sd_smp_call_async_wait(a.c, &call));
		EXPECT_EQ(0, sd_smp_call_async_wait(a.c, &other));
		EXPECT_EQ(-EINVAL, sd_smp_call_async_wait(a.c, &call)) << "waited for twice";
		EXPECT_EQ(2u, ran[1].load());

		unsigned dup[] = {1, 1}, far[] = {1, 7};
		EXPECT_EQ(-EINVAL, sd_smp_call_many(a.c, dup, 2, count_here, ran, 0));
		EXPECT_NE(nullptr, strstr(sd_last_error(), "listed twice"));
		EXPECT_EQ(-EINVAL, sd_smp_call_many(a.c, far, 2, count_here, ran, 0));
		EXPECT_EQ(-EINVAL, sd_smp_call_many(a.c, nullptr, 1, count_here, ran, 0));
		EXPECT_EQ(-EINVAL, sd_smp_call_many(a.c, dup, 1, nullptr, ran, 0));
		EXPECT_EQ(-EINVAL, sd_smp_call_many(a.c, dup, 1, count_here, ran, 1));
		EXPECT_EQ(2u, ran[1].load()) << "a refused call sent nothing";
		// The arrays are clean after a refusal: the same list works.
		EXPECT_EQ(1, sd_smp_call_many(a.c, dup, 1, count_here, ran, 0));
		EXPECT_EQ(0, sd_smp_call_many(a.c, nullptr, 0, count_here, ran, 0));
		sd_irq_disable(a.c);
		EXPECT_EQ(-EDEADLK, sd_smp_call_many(a.c, dup, 1, count_here, ran, 0));
		EXPECT_EQ(0, sd_irq_enable(a.c));
		EXPECT_EQ(3u, ran[1].load());
	}
}

TEST(SmpAsync, OnlyTheSenderWaits)
{
	Machine mach(sdtest::config(3, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	struct Run {
		sd_smp_call call{};
		std::atomic<int> posted{0}, checked{0};
	} r;
	Watchdog w("SmpAsync.OnlyTheSenderWaits: a CPU stuck", 60);
	ASSERT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *arg) {
		auto *r = static_cast<Run *>(arg);
		if (sd_cpu_id(c) == 0) {
			EXPECT_EQ(0, sd_smp_call_async(c, 1, nothing, nullptr, &r->call));
			r->posted.store(1);
			while (!r->checked.load())
				EXPECT_EQ(0, sd_cpu_poll(c));
			EXPECT_EQ(0, sd_smp_call_async_wait(c, &r->call));
		} else if (sd_cpu_id(c) == 2) {
			while (!r->posted.load())
				EXPECT_EQ(0, sd_cpu_poll(c));
			EXPECT_EQ(-EXDEV, sd_smp_call_async_wait(c, &r->call));
			r->checked.store(1);
		} else {
			while (!r->checked.load())
				EXPECT_EQ(0, sd_cpu_poll(c));
		}
	}, &r));
}

// A body that forgets a request: the run says so, answers it, and every
// CPU detaches (the machine runs again).
TEST(SmpAsync, ABodyThatLeavesARequestPostedIsReported)
{
	Machine mach(sdtest::config(2, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	static sd_smp_call call;       // outlives the body: only the bookkeeping is tested
	static std::atomic<unsigned> ran[2];
	ran[1].store(0);
	EXPECT_EQ(-EBUSY, sd_machine_run(mach.m, [](sd_cpu *c, void *) {
		if (sd_cpu_id(c) == 0) {
			EXPECT_EQ(0, sd_smp_call_async(c, 1, count_here, ran, &call));
		}
	}, nullptr));
	EXPECT_NE(nullptr, strstr(sd_last_error(), "not waited for"));
	EXPECT_EQ(1u, ran[1].load()) << "the request ran before the CPUs detached";
	EXPECT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *, void *) {}, nullptr));
}

// A thread that exits attached with a request posted waits for it first.
// The request is static: one on a frame that has returned would be the
// program's bug (cpu.h), and the sanitizers would say so.
TEST(SmpAsync, AThreadExitingAttachedWaitsForItsRequests)
{
	Machine mach(sdtest::config(2, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	static std::atomic<unsigned> ran[2];
	ran[1].store(0);
	sdtest::PollingCpu target(mach.m, 1);
	std::thread([&] {
		sd_cpu *c = nullptr;
		ASSERT_EQ(0, sd_cpu_attach(mach.m, 0, &c));
		static sd_smp_call call;
		ASSERT_EQ(0, sd_smp_call_async(c, 1, count_here, ran, &call));
		// Leaves attached: the thread-exit detach settles the request.
	}).join();
	EXPECT_EQ(1u, ran[1].load());
	// CPU 0 is free again.
	Attached again(mach.m, 0);
	EXPECT_NE(nullptr, again.c);
}

// Every CPU multicasts to all the others and itself, more CPUs than PUs:
// each function ran once per sender on every CPU, the caller's own with
// interrupts off, and nobody was left waiting.
TEST(SmpAsync, ManyAmongMoreCpusThanPus)
{
	constexpr unsigned kCpus = 8, kRounds = 50;
	Machine mach(sdtest::config(kCpus, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	struct Run {
		std::atomic<unsigned> ran[kCpus]{};
		std::atomic<unsigned> local_irqs_off{0};
	} r;
	Watchdog w("SmpAsync.ManyAmongMoreCpusThanPus: a CPU stuck", 120);
	ASSERT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *arg) {
		auto *r = static_cast<Run *>(arg);
		unsigned all[kCpus];
		for (unsigned i = 0; i < kCpus; i++)
			all[i] = (sd_cpu_id(c) + i) % kCpus;     // the caller first
		for (unsigned round = 0; round < kRounds; round++) {
			EXPECT_EQ((int)kCpus, sd_smp_call_many(c, all, kCpus, [](sd_cpu *t, void *a) {
				auto *r = static_cast<Run *>(a);
				r->ran[sd_cpu_id(t)].fetch_add(1);
				if (sd_irqs_disabled(t))
					r->local_irqs_off.fetch_add(1);
			}, r, 0));
		}
	}, &r));
	for (unsigned i = 0; i < kCpus; i++)
		EXPECT_EQ(kCpus * kRounds, r.ran[i].load()) << "CPU " << i;
	EXPECT_EQ(kCpus * kCpus * kRounds, r.local_irqs_off.load())
		<< "every function ran with interrupts off, the caller's too";
}

// Posting to every other CPU, then waiting in turn, at 8 CPUs on 2 PUs.
TEST(SmpAsync, PostAllThenWaitAmongMoreCpusThanPus)
{
	constexpr unsigned kCpus = 8, kRounds = 50;
	Machine mach(sdtest::config(kCpus, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	static std::atomic<unsigned> ran[kCpus];
	for (auto &x : ran)
		x.store(0);
	Watchdog w("SmpAsync.PostAllThenWait: a CPU stuck", 120);
	ASSERT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *) {
		sd_smp_call calls[kCpus];
		for (unsigned round = 0; round < kRounds; round++) {
			for (unsigned t = 0; t < kCpus; t++) {
				if (t != sd_cpu_id(c)) {
					EXPECT_EQ(0, sd_smp_call_async(c, t, count_here, ran, &calls[t]));
				}
			}
			for (unsigned t = 0; t < kCpus; t++) {
				if (t != sd_cpu_id(c)) {
					EXPECT_EQ(0, sd_smp_call_async_wait(c, &calls[t]));
				}
			}
		}
	}, nullptr));
	for (unsigned i = 0; i < kCpus; i++)
		EXPECT_EQ((kCpus - 1) * kRounds, ran[i].load()) << "CPU " << i;
}

// Modelled time, by hand. Send S (the first target), S_T (each further
// one), delivery D, handler H; everything else 0. Three targets:
//   one at a time (sd_smp_call_single x3): 3 (S + D + H)
//   all posted, then waited for (many, or async then wait): the posts end
//   at S, S + S_T, S + 2 S_T; the last ack at S + 2 S_T + D + H.
constexpr double S = 50, ST = 20, D = 1000, H = 10;

struct ModelRun {
	int how;                        // 0 singles, 1 many, 2 async
	std::atomic<int> done{0};
	uint64_t sender_ns = 0;
};

void model_body(sd_cpu *c, void *arg)
{
	auto *r = static_cast<ModelRun *>(arg);
	if (sd_cpu_id(c) != 0) {
		while (!r->done.load())
			EXPECT_EQ(0, sd_cpu_poll(c));
		return;
	}
	unsigned targets[] = {1, 2, 3};
	if (r->how == 0) {
		for (unsigned t : targets)
			EXPECT_EQ(0, sd_smp_call_single(c, t, nothing, nullptr));
	} else if (r->how == 1) {
		EXPECT_EQ(3, sd_smp_call_many(c, targets, 3, nothing, nullptr, 0));
	} else {
		sd_smp_call calls[3];
		for (unsigned i = 0; i < 3; i++)
			EXPECT_EQ(0, sd_smp_call_async(c, targets[i], nothing, nullptr, &calls[i]));
		for (unsigned i = 0; i < 3; i++)
			EXPECT_EQ(0, sd_smp_call_async_wait(c, &calls[i]));
	}
	r->sender_ns = sd_cpu_clock_ns(c);
	r->done.store(1);
	EXPECT_EQ(0, sd_cpu_poll_wake(c));
}

uint64_t sender_time(int how)
{
	Profile p("pack:1 core:4 pu:1", {{"ipi_send", S}, {"ipi_send_target", ST},
					 {"ipi_delivery", D}, {"ipi_handler", H}});
	Machine mach(sdtest::strict_config(4, "ipi", p));
	if (!mach.m)
		return 0;
	ModelRun r;
	r.how = how;
	Watchdog w("SmpAsyncModel: a CPU stuck", 60);
	EXPECT_EQ(0, sd_machine_run(mach.m, model_body, &r)) << sd_last_error();
	return r.sender_ns;
}

TEST(SmpAsyncModel, OneRoundTripForAllWhenPostedBeforeTheWaits)
{
	EXPECT_EQ((uint64_t)(3 * (S + D + H)), sender_time(0));
	EXPECT_EQ((uint64_t)(S + 2 * ST + D + H), sender_time(1));
	EXPECT_EQ((uint64_t)(S + 2 * ST + D + H), sender_time(2));
}

}  // namespace
