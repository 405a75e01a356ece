// SPDX-License-Identifier: MIT
//
// The machine's own limits, no library involved: what a line transfer, a
// signal round trip and the kernel's own IPI cost here, the yardsticks of
// the emulated flushes.
//
//   baseline/cacheline_roundtrip   one line ping-ponged between PU 0 and PU 1
//   baseline/signal_roundtrip      tgkill + handler ack to a thread spinning on PU 1
//   baseline/membarrier            membarrier(PRIVATE_EXPEDITED): the kernel's IPI to
//                                  a thread of ours spinning on PU 1 (native.cpp)
//
// Both sets register all three, first.
#include "common.hpp"
#include "native.hpp"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <thread>

namespace sdbench {
namespace {

// One cache line flipped between the first two PUs the process may use
// (this thread and a helper):
// each iteration is one round trip, two line transfers.
void BM_cacheline_roundtrip(State &st)
{
	if (native::nr_pus() < 2) {
		st.SkipWithError("needs 2 PUs the process may use");
		return;
	}
	auto line = std::make_unique<Line>();
	Line stop;
	std::atomic<int> pinned1{-1};
	Pin pin(0);

	std::thread pong([&] {
		Pin p(1);
		uint64_t expect = 1;

		pinned1.store(p.ok());
		for (;;) {
			uint64_t v;
			while ((v = line->v.load(std::memory_order_acquire)) != expect) {
				if (stop.v.load(std::memory_order_relaxed))
					return;
				cpu_relax();
			}
			line->v.store(expect + 1, std::memory_order_release);
			expect += 2;
		}
	});
	uint64_t v = 0;
	auto round_trip = [&] {
		line->v.store(v + 1, std::memory_order_release);
		while (line->v.load(std::memory_order_acquire) != v + 2)
			cpu_relax();
		v += 2;
	};
	for (int i = 0; i < 1000; i++)          // warm up: the helper is running and pinned
		round_trip();
	for (auto _ : st)
		round_trip();
	stop.v.store(1);
	pong.join();
	if (!pin.ok() || pinned1.load() != 1)
		st.SkipWithError("could not pin to PU 0 and PU 1");
	st.counters["oversubscribed"] = 0;
}

std::atomic<uint64_t> g_signal_acks{0};

void ack_handler(int)
{
	g_signal_acks.fetch_add(1, std::memory_order_release);
}

// tgkill(SIGRTMIN+5) to a thread spinning on PU 1; its handler bumps an
// atomic that this thread waits for.
void BM_signal_roundtrip(State &st)
{
	if (native::nr_pus() < 2) {
		st.SkipWithError("needs 2 PUs the process may use");
		return;
	}
	const int sig = SIGRTMIN + 5;
	struct sigaction sa, old;
	Line stop;
	std::atomic<int> tid{0};
	std::atomic<int> pinned1{-1};
	Pin pin(0);

	std::memset(&sa, 0, sizeof(sa));
	sa.sa_handler = ack_handler;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(sig, &sa, &old);
	std::thread target([&] {
		Pin p(1);
		pinned1.store(p.ok());
		tid.store((int)syscall(SYS_gettid));
		while (!stop.v.load(std::memory_order_relaxed))
			cpu_relax();
	});
	while (!tid.load())
		cpu_relax();
	const pid_t pid = getpid();
	auto round_trip = [&] {
		uint64_t before = g_signal_acks.load(std::memory_order_relaxed);
		syscall(SYS_tgkill, pid, tid.load(std::memory_order_relaxed), sig);
		while (g_signal_acks.load(std::memory_order_acquire) == before)
			cpu_relax();
	};
	for (int i = 0; i < 100; i++)
		round_trip();
	for (auto _ : st)
		round_trip();
	stop.v.store(1);
	target.join();
	sigaction(sig, &old, nullptr);
	if (!pin.ok() || pinned1.load() != 1)
		st.SkipWithError("could not pin to PU 0 and PU 1");
	st.counters["oversubscribed"] = 0;
}

void register_baseline(Set set)
{
	if (set == Set::patches)
		return;
	reg("baseline/cacheline_roundtrip", BM_cacheline_roundtrip);
	reg("baseline/signal_roundtrip", BM_signal_roundtrip);
	reg("baseline/membarrier", [](State &st) { native::BM_membarrier(st, 1); });
}

} // namespace

SD_BENCH_FAMILY(baseline, 10, register_baseline);

} // namespace sdbench
