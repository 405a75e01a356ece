// SPDX-License-Identifier: MIT
// Helpers shared by the test suites.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include <shootdown/shootdown.h>
}

namespace sdtest {

// Seed from SD_SEED or the clock; the test prints it so a failure can be replayed.
inline uint64_t seed()
{
	static uint64_t s = [] {
		const char *e = std::getenv("SD_SEED");
		uint64_t v = e ? std::strtoull(e, nullptr, 0)
			       : (uint64_t)std::chrono::steady_clock::now().time_since_epoch().count();
		std::fprintf(stderr, "[seed] SD_SEED=%llu\n", (unsigned long long)v);
		return v;
	}();
	return s;
}

// True in the ThreadSanitizer build. Its runs are for races: a test that
// repeats one path to compare results, or checks single-threaded arithmetic
// exhaustively, does less there (each says what), and the plain and ASan
// builds keep the whole of it. TSan ran such tests 10 to 60 times slower,
// a minute and a half of CI's budget.
constexpr bool under_tsan =
#if defined(__SANITIZE_THREAD__)
	true;
#else
	false;
#endif

// SD_STRESS_SCALE: how much of its full budget a stress run takes (1 when
// unset or not positive; CI's sanitizer builds set 0.5 and 0.35).
// A strict run's determinism check under ThreadSanitizer: beside busy
// loops, a holder's thread can sleep in the runtime's own locks past the
// sequencer's stall threshold. Such a run says it is not exact (its
// seq_stalls), as the contract has it, and is not compared: true (and
// said on stdout) when @stalls is non-zero in a TSan build. The plain
// build compares every run and must have no stall.
inline bool tsan_stalled(const char *what, uint64_t stalls)
{
#if defined(__SANITIZE_THREAD__)
	if (stalls) {
		std::printf("[strict %s] %llu stalls reported under TSan: not compared\n", what,
			    (unsigned long long)stalls);
		return true;
	}
#else
	(void)what;
	(void)stalls;
#endif
	return false;
}

inline double stress_scale()
{
	const char *k = std::getenv("SD_STRESS_SCALE");
	double scale = k ? std::atof(k) : 1.0;
	return scale > 0 ? scale : 1.0;
}

// Stress budget: SD_STRESS_SECONDS (meson option) times SD_STRESS_SCALE.
inline double stress_seconds()
{
	const char *s = std::getenv("SD_STRESS_SECONDS");
	double secs = s ? std::atof(s) : 4.0;
	return secs * stress_scale();
}

inline sd_machine_config config(unsigned cpus, const char *strategy = "broadcast")
{
	sd_machine_config c = SD_MACHINE_CONFIG_INIT;
	c.nr_cpus = cpus;
	c.strategy = strategy;
	c.oracle = SD_ORACLE_CHECKED;
	return c;
}

// A machine that is destroyed at scope exit.
struct Machine {
	sd_machine *m = nullptr;
	explicit Machine(const sd_machine_config &c)
	{
		int err = sd_machine_create(&c, &m);
		if (err) {
			ADD_FAILURE() << "sd_machine_create: " << sd_strerror(err) << ": "
				      << sd_last_error();
		}
	}
	~Machine()
	{
		if (m) {
			EXPECT_EQ(0, sd_machine_destroy(m)) << sd_last_error();
		}
	}
	Machine(const Machine &) = delete;
	Machine &operator=(const Machine &) = delete;
};

// The calling thread attached as a CPU for the scope.
struct Attached {
	sd_cpu *c = nullptr;
	Attached(sd_machine *m, unsigned id)
	{
		int err = sd_cpu_attach(m, id, &c);
		if (err) {
			ADD_FAILURE() << "sd_cpu_attach: " << sd_strerror(err) << ": " << sd_last_error();
		}
	}
	~Attached()
	{
		if (c) {
			EXPECT_EQ(0, sd_cpu_detach(c)) << sd_last_error();
		}
	}
	Attached(const Attached &) = delete;
	Attached &operator=(const Attached &) = delete;
};

// A thread attached as CPU @id for the scope that answers IPIs
// (sd_cpu_poll()) until the scope ends: a target for the caller's IPIs.
// Attached before the constructor returns.
class PollingCpu {
public:
	PollingCpu(sd_machine *m, unsigned id)
		: thread_([this, m, id] {
			  Attached t(m, id);
			  ready_.store(1);
			  while (!stop_.load())
				  EXPECT_EQ(0, sd_cpu_poll(t.c));
		  })
	{
		while (!ready_.load())
			std::this_thread::yield();
	}
	~PollingCpu()
	{
		stop_.store(1);
		thread_.join();
	}
	PollingCpu(const PollingCpu &) = delete;
	PollingCpu &operator=(const PollingCpu &) = delete;

private:
	std::atomic<int> ready_{0}, stop_{0};
	std::thread thread_;
};

// With SD_TOPOLOGY the per-CPU areas come from the heap; if the library does
// not zero them, a CPU's frame cache holds garbage and detaching it corrupts
// the heap. Check (through the counters, which share the area) before
// attaching, so that bug fails the test instead of crashing the binary.
inline bool fresh_cpus_clean(sd_machine *m)
{
	for (unsigned c = 0; c < sd_machine_nr_cpus(m); c++) {
		sd_stats st = SD_STATS_INIT;
		if (sd_stats_cpu(m, c, &st))
			return false;
		for (unsigned i = 0; i < SD_STAT_NR; i++)
			if (st.counter[i]) {
				ADD_FAILURE() << "library bug: cpu " << c << " starts with "
					      << sd_stat_name(static_cast<sd_stat>(i)) << " = "
					      << st.counter[i]
					      << ": per-CPU area not zeroed; not attaching";
				return false;
			}
	}
	return true;
}

// Aborts the process with a message if the scope is not left within @secs:
// a stress run that stops making progress (livelock, deadlock) fails loudly
// instead of hanging CI until its timeout.
class Watchdog {
public:
	Watchdog(const std::string &what, double secs)
		: t_([this, what, secs] {
			  std::unique_lock<std::mutex> g(mu_);
			  if (!cv_.wait_for(g, std::chrono::duration<double>(secs),
					    [this] { return done_; })) {
				  std::fprintf(stderr, "WATCHDOG: %s still running after %.0f s: "
						       "livelock or deadlock (invariant 6 of docs/invariants.md)\n",
					       what.c_str(), secs);
				  std::fflush(stdout);
				  std::fflush(stderr);
				  std::abort();
			  }
		  })
	{
	}
	~Watchdog()
	{
		{
			std::lock_guard<std::mutex> g(mu_);
			done_ = true;
		}
		cv_.notify_all();
		t_.join();
	}
	Watchdog(const Watchdog &) = delete;
	Watchdog &operator=(const Watchdog &) = delete;

private:
	std::mutex mu_;
	std::condition_variable cv_;
	bool done_ = false;
	std::thread t_;
};

// Emulated CPUs 1..n-1 on threads that run the closures posted to them;
// the test thread is CPU 0. Between closures a worker sleeps (nanosleep)
// with its mm still loaded and not lazy, so IPIs reach it in every build,
// TSan included.
class Cpus {
public:
	Cpus(sd_machine *m, unsigned n) : slots_(n)
	{
		for (unsigned id = 1; id < n; id++)
			threads_.emplace_back([this, m, id] { loop(m, id); });
		for (unsigned id = 1; id < n; id++)
			run(id, [](sd_cpu *) {});
	}
	~Cpus()
	{
		stop_ = true;
		for (auto &t : threads_)
			t.join();
	}
	// Run @fn on CPU @id and wait for it.
	void run(unsigned id, std::function<void(sd_cpu *)> fn)
	{
		Slot &s = slots_[id];
		s.fn = std::move(fn);
		s.pending.store(true);
		while (s.pending.load())
			std::this_thread::sleep_for(std::chrono::microseconds(50));
	}

private:
	struct Slot {
		std::function<void(sd_cpu *)> fn;
		std::atomic<bool> pending{false};
	};
	void loop(sd_machine *m, unsigned id)
	{
		Attached a(m, id);
		Slot &s = slots_[id];
		while (!stop_.load()) {
			if (!s.pending.load()) {
				std::this_thread::sleep_for(std::chrono::microseconds(50));
				continue;
			}
			s.fn(a.c);
			s.pending.store(false);
		}
	}
	std::vector<Slot> slots_;
	std::vector<std::thread> threads_;
	std::atomic<bool> stop_{false};
};

// One CPU's counter, and the machine-wide sum.
inline uint64_t counter(sd_machine *m, unsigned cpu, sd_stat id)
{
	sd_stats s = SD_STATS_INIT;
	EXPECT_EQ(0, sd_stats_cpu(m, cpu, &s));
	return s.counter[id];
}

// A task of @m in @mm, created from outside a run (or from a task), placed
// on @cpu within @affinity; the test fails if it cannot be made.
inline sd_task *create_task(sd_machine *m, sd_mm *mm, sd_task_fn fn, void *arg,
			    unsigned cpu = SD_TASK_ANY_CPU, const char *affinity = nullptr)
{
	sd_task_config cfg = SD_TASK_CONFIG_INIT;
	cfg.mm = mm;
	cfg.cpu = cpu;
	cfg.affinity = affinity;
	sd_task *t = nullptr;
	EXPECT_EQ(0, sd_task_create(m, &cfg, fn, arg, &t)) << sd_last_error();
	return t;
}

inline uint64_t total(sd_machine *m, sd_stat id)
{
	sd_stats s = SD_STATS_INIT;
	EXPECT_EQ(0, sd_stats_snapshot(m, &s));
	return s.counter[id];
}

// A user strategy written exactly as docs/guide.md shows (broadcast into
// every TLB), registered as @name for the scope.
inline void guide_broadcast_flush(sd_cpu *cpu, sd_mm *mm, uint64_t va, uint64_t len, unsigned,
				  void *)
{
	EXPECT_EQ(0, sd_tlb_invalidate_broadcast(cpu, mm, va, len));
}

struct GuideStrategy {
	std::string name;
	explicit GuideStrategy(const char *n) : name(n)
	{
		sd_strategy s = SD_STRATEGY_INIT;
		s.name = name.c_str();
		s.flush = guide_broadcast_flush;
		EXPECT_EQ(0, sd_strategy_register(&s)) << sd_last_error();
	}
	~GuideStrategy() { EXPECT_EQ(0, sd_strategy_unregister(name.c_str())); }
	GuideStrategy(const GuideStrategy &) = delete;
	GuideStrategy &operator=(const GuideStrategy &) = delete;
};

// Busy loops on every PU (and then some) beside a run: the host's load.
struct Hogs {
	std::atomic<bool> stop{false};
	std::vector<std::thread> threads;
	explicit Hogs(unsigned n)
	{
		for (unsigned i = 0; i < n; i++)
			threads.emplace_back([this]() {
				volatile uint64_t x = 0;
				while (!stop.load(std::memory_order_relaxed))
					x = x + 1;
			});
	}
	~Hogs()
	{
		stop.store(true);
		for (auto &t : threads)
			t.join();
	}
};

// An attached CPU waits for @done, passing quiescent states and letting
// IPIs in (nanosleep is where TSan delivers signals).
inline void wait_for(sd_cpu *c, const std::function<bool()> &done)
{
	while (!done()) {
		sd_cpu_quiescent(c);
		std::this_thread::sleep_for(std::chrono::microseconds(50));
	}
}

} // namespace sdtest
