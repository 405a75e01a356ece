// SPDX-License-Identifier: MIT
// The mmap_lock's reader-writer semaphore (lib/core/rwsem.h): exclusion,
// a waiting writer keeping new readers out, a downgrade that lets readers
// in and writers not, parked waiters woken by a release, and a signal that
// runs its handler in a parked wait without ending it. Every wait here is
// bounded by a watchdog: a lost wake-up is a hang, reported by name.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>
#include <vector>

#include <pthread.h>

extern "C" {
#include "core/rwsem.h"
}
#include "common.hpp"

namespace {

using namespace std::chrono_literals;

// Readers, writers and downgraders on one semaphore: a writer is alone, a
// downgraded holder shares only with readers. Counts kept beside the lock
// say who is inside.
TEST(Rwsem, ExclusionUnderContention)
{
	sd_rwsem s;
	sd_rwsem_init(&s);
	std::atomic<int> readers{0}, writers{0}, bad{0};
	const unsigned kThreads = 4, kOps = 20000;
	sdtest::Watchdog w("Rwsem exclusion: a waiter never got the lock", 120);
	std::vector<std::thread> t;
	for (unsigned id = 0; id < kThreads; id++)
		t.emplace_back([&, id] {
			for (unsigned i = 0; i < kOps; i++) {
				switch ((i + id) % 3) {
				case 0:
					sd_rwsem_down_read(&s);
					readers.fetch_add(1);
					if (writers.load())
						bad.fetch_add(1);
					readers.fetch_sub(1);
					sd_rwsem_up_read(&s);
					break;
				case 1:
					sd_rwsem_down_write(&s);
					if (writers.fetch_add(1) || readers.load())
						bad.fetch_add(1);
					writers.fetch_sub(1);
					sd_rwsem_up_write(&s);
					break;
				default:
					sd_rwsem_down_write(&s);
					if (writers.fetch_add(1) || readers.load())
						bad.fetch_add(1);
					writers.fetch_sub(1);
					readers.fetch_add(1);
					sd_rwsem_downgrade(&s);
					if (writers.load())
						bad.fetch_add(1);
					readers.fetch_sub(1);
					sd_rwsem_up_read(&s);
				}
			}
		});
	for (auto &th : t)
		th.join();
	EXPECT_EQ(0, bad.load());
	EXPECT_EQ(0, atomic_load(&s.count)) << "every hold was released";
}

// Waits until @pred holds, or fails the test after 10 s.
template <class F> bool eventually(F pred)
{
	const auto t0 = std::chrono::steady_clock::now();
	while (!pred()) {
		if (std::chrono::steady_clock::now() - t0 > 10s)
			return false;
		std::this_thread::sleep_for(100us);
	}
	return true;
}

// rw_semaphore's fairness: a reader that comes while a writer waits queues
// behind it, so a stream of faults does not starve mprotect. Breaking
// sd_rwsem_trylock_read()'s writers_waiting test lets the second reader in
// first.
TEST(Rwsem, ReaderQueuesBehindAWaitingWriter)
{
	sd_rwsem s;
	sd_rwsem_init(&s);
	std::atomic<int> order{0}, writer_at{0}, reader_at{0};
	sdtest::Watchdog w("Rwsem fairness: a waiter never got the lock", 60);
	sd_rwsem_down_read(&s);
	std::thread writer([&] {
		sd_rwsem_down_write(&s);
		writer_at.store(++order);
		sd_rwsem_up_write(&s);
	});
	ASSERT_TRUE(eventually([&] { return atomic_load(&s.writers_waiting) == 1; }));
	EXPECT_FALSE(sd_rwsem_trylock_read(&s)) << "a reader got past a waiting writer";
	std::thread reader([&] {
		sd_rwsem_down_read(&s);
		reader_at.store(++order);
		sd_rwsem_up_read(&s);
	});
	std::this_thread::sleep_for(20ms);
	EXPECT_EQ(0, reader_at.load()) << "the second reader did not wait for the writer";
	sd_rwsem_up_read(&s);
	writer.join();
	reader.join();
	EXPECT_EQ(1, writer_at.load());
	EXPECT_EQ(2, reader_at.load());
}

// mmap_write_downgrade(): the writer's hold becomes a read hold at once,
// readers waiting for it come in, and a writer still waits for it.
TEST(Rwsem, DowngradeLetsReadersInAndWritersNot)
{
	sd_rwsem s;
	sd_rwsem_init(&s);
	std::atomic<bool> read_in{false}, write_in{false};
	sdtest::Watchdog w("Rwsem downgrade: a waiter never got the lock", 60);
	sd_rwsem_down_write(&s);
	std::thread reader([&] {
		sd_rwsem_down_read(&s);
		read_in.store(true);
		sd_rwsem_up_read(&s);
	});
	std::this_thread::sleep_for(20ms);
	EXPECT_FALSE(read_in.load()) << "a reader came in beside a writer";
	sd_rwsem_downgrade(&s);
	EXPECT_TRUE(eventually([&] { return read_in.load(); }))
		<< "the reader did not come in after the downgrade";
	reader.join();
	EXPECT_FALSE(sd_rwsem_trylock_write(&s)) << "a writer came in beside the downgraded hold";
	std::thread writer([&] {
		sd_rwsem_down_write(&s);
		write_in.store(true);
		sd_rwsem_up_write(&s);
	});
	std::this_thread::sleep_for(20ms);
	EXPECT_FALSE(write_in.load());
	sd_rwsem_up_read(&s);
	writer.join();
	EXPECT_TRUE(write_in.load());
}

// A waiter that has spun and yielded parks on the futex; only a release's
// wake ends that. With sd_rwsem_wake()'s futex wake removed the waiters
// sleep for ever (the watchdog names them).
std::atomic<int> g_handled{0};

void count_signal(int)
{
	g_handled.fetch_add(1);
}

TEST(Rwsem, ParkedWaitersAreWokenAndSignalsRunInTheWait)
{
	sd_rwsem s;
	sd_rwsem_init(&s);
	constexpr int kSig = SIGUSR2;
	struct sigaction sa = {}, old = {};
	sa.sa_handler = count_signal;
	sigemptyset(&sa.sa_mask);
	ASSERT_EQ(0, sigaction(kSig, &sa, &old));
	std::atomic<int> got{0};
	sdtest::Watchdog w("Rwsem park: a parked waiter was never woken by the release", 60);
	sd_rwsem_down_write(&s);
	std::vector<std::thread> t;
	std::vector<pthread_t> ids(3);
	for (unsigned i = 0; i < 3; i++)
		t.emplace_back([&, i] {
			ids[i] = pthread_self();
			const bool write = i == 0;
			if (write)
				sd_rwsem_down_write(&s);
			else
				sd_rwsem_down_read(&s);
			got.fetch_add(1);
			if (write)
				sd_rwsem_up_write(&s);
			else
				sd_rwsem_up_read(&s);
		});
	ASSERT_TRUE(eventually([&] { return atomic_load(&s.parked) == 3; }))
		<< "the waiters never parked";
	// A signal interrupts a parked waiter: its handler runs, the wait goes
	// on. Sent again while unhandled: under ThreadSanitizer a parked waiter
	// polls in nanosleep() and TSan defers a signal that lands between two
	// sleeps; in 1 of ~100 loaded runs it was never run in 10 s (CI), so
	// the test resends as the library's IPI watchdog does.
	g_handled.store(0);
	ASSERT_TRUE(eventually([&] {
		if (g_handled.load() == 0)
			pthread_kill(ids[1], kSig);
		std::this_thread::sleep_for(5ms);
		return g_handled.load() >= 1;
	})) << "the parked waiter never ran its signal handler";
	std::this_thread::sleep_for(10ms);
	EXPECT_EQ(0, got.load()) << "a signal ended a wait for a held lock";
	sd_rwsem_up_write(&s);
	for (auto &th : t)
		th.join();
	EXPECT_EQ(3, got.load());
	sigaction(kSig, &old, nullptr);
}

}  // namespace
