// SPDX-License-Identifier: MIT
//
// LATR's mmap microbenchmark (Kumar et al., "LATR: Lazy Translation
// Coherence", ASPLOS 2018; sslab-gatech/latr,
// microbenchmark/mmap_micro/src/lib/main.cc), as its source has it:
//
//   mmap_micro/<strategy>/cores:C/pages:P/{munmap,madvise}
//
// The allocator thread, pinned to core 0, mmaps P pages
// (MAP_PRIVATE|MAP_ANONYMOUS) an iteration and hands the address to C
// reference threads, pinned one a core from core 0 on (the first shares
// core 0 with the allocator). A pthread barrier starts them; each writes
// every page once; a second barrier ends the round. Then the allocator
// times munmap() of the range (or madvise(MADV_DONTNEED) with
// --use-madvise, which leaves the mapping, so the source maps a fresh range
// the next round). The reference threads wait on the barrier meanwhile:
// asleep, their cores idle, with the mm loaded lazily.
//
// Here each thread is a task (task.h) with its affinity, the barrier a
// wait queue, and the timed call's modelled time read off the allocator's
// CPU clock. With madvise the range is unmapped after the timed call,
// untimed (the source leaks it instead; the next round's mmap then gets
// another address, which the emulator's would not: same work timed).
//
//   mmap_micro/native/cores:C/pages:P/{munmap,madvise}
//       the native twin: the source's shape with real threads pinned to PU
//       i % PUs, a pthread barrier, real mmap and munmap (or madvise) timed
//       with the steady clock; cores above the host's PUs oversubscribed.
//
// Counters (modelled time only): munmap_ns (or madvise_ns) per call, its
// minimum over the run (the source prints both), and the flush's IPIs
// (the barrier's reschedule IPIs counted apart) and broadcasts per call.
#include "common.hpp"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace sdbench {
namespace {

constexpr uint64_t kLatrVa = kRegion + (1ull << 30);

struct LatrRun {
	unsigned refs = 0, pages = 0;
	bool madvise = false;
	uint64_t rounds = 0;
	sd_mm *mm = nullptr;
	sd_waitq *q = nullptr;
	// pthread_barrier_t: the arrivals of this generation, and the
	// generation, bumped (release) by the last to arrive.
	std::atomic<unsigned> arrived{0};
	std::atomic<uint64_t> generation{0};
	std::atomic<uint64_t> timed_ns{0}, min_ns{UINT64_MAX};
	std::atomic<int> err{0};
};

struct BarrierWait {
	const LatrRun *r;
	uint64_t generation;
};

// Acquire pairs with the last arrival's release: a waiter let through sees
// what every thread did before arriving.
bool barrier_passed(void *p)
{
	auto *w = static_cast<BarrierWait *>(p);
	return w->r->generation.load(std::memory_order_acquire) != w->generation;
}

int barrier(sd_task *self, LatrRun *r)
{
	BarrierWait w = { r, r->generation.load(std::memory_order_acquire) };

	if (r->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == r->refs + 1) {
		r->arrived.store(0, std::memory_order_relaxed);
		r->generation.fetch_add(1, std::memory_order_release);
		const int woken = sd_task_wake(self, r->q, 0);
		return woken < 0 ? woken : 0;
	}
	return sd_task_wait(self, r->q, barrier_passed, &w);
}

// ReferenceThread::run(): touch each page once a round, between barriers.
void reference_task(sd_task *self, void *p)
{
	auto *r = static_cast<LatrRun *>(p);
	int err = 0;

	for (uint64_t i = 0; !err && i < r->rounds; i++) {
		err = barrier(self, r);
		for (unsigned j = 0; !err && j < r->pages; j++)
			err = sd_access(sd_task_cpu(self), kLatrVa + j * SD_PAGE_SIZE, SD_WRITE, nullptr);
		if (!err)
			err = barrier(self, r);
	}
	note_first_error(r->err, err);
}

// The timed call, on the allocator's CPU: its modelled ns.
int timed_unmap(sd_task *self, LatrRun *r, uint64_t *ns)
{
	sd_cpu *c = sd_task_cpu(self);
	const uint64_t len = (uint64_t)r->pages * SD_PAGE_SIZE;
	const uint64_t t0 = sd_cpu_clock_ns(c);
	int err = r->madvise ? sd_madvise_dontneed(c, r->mm, kLatrVa, len)
			     : sd_munmap(c, r->mm, kLatrVa, len);

	*ns = sd_cpu_clock_ns(c) - t0;
	if (!err && r->madvise)
		err = sd_munmap(c, r->mm, kLatrVa, len);
	return err;
}

// MainThread::run(): map, release the references, wait for them, unmap.
void allocator_task(sd_task *self, void *p)
{
	auto *r = static_cast<LatrRun *>(p);
	int err = sd_switch_mm(sd_task_cpu(self), r->mm) == 0 ? 0 : -EINVAL;

	for (uint64_t i = 0; !err && i < r->rounds; i++) {
		uint64_t ns = 0;
		err = sd_mmap(sd_task_cpu(self), r->mm, kLatrVa, (uint64_t)r->pages * SD_PAGE_SIZE,
			      SD_PROT_READ | SD_PROT_WRITE);
		if (!err)
			err = barrier(self, r);
		if (!err)
			err = barrier(self, r);
		if (!err)
			err = timed_unmap(self, r, &ns);
		r->timed_ns.fetch_add(ns, std::memory_order_relaxed);
		uint64_t seen = r->min_ns.load(std::memory_order_relaxed);
		while (ns < seen && !r->min_ns.compare_exchange_weak(seen, ns))
			;
	}
	note_first_error(r->err, err);
}

constexpr uint64_t kLatrBatch = 64;

void BM_mmap_micro(State &st, const char *strategy, unsigned cores, unsigned pages, bool madvise)
{
	RunMachine rm(cores, SD_ORACLE_OFF, 1, 1, spec_of(strategy));
	LatrRun r;
	std::vector<std::string> affinity(cores);
	sd_stats d = SD_STATS_INIT;

	if (!rm.ok(st))
		return;
	if (int e = sd_waitq_create(rm.m(), "pthread_barrier", &r.q)) {
		fail(st, "sd_waitq_create", e);
		return;
	}
	r.refs = cores;
	r.pages = pages;
	r.madvise = madvise;
	r.mm = rm.mm(0);
	for (unsigned i = 0; i < cores; i++)
		affinity[i] = std::to_string(i);
	auto create = [&](sd_machine *m, uint64_t rounds) {
		r.rounds = rounds;
		r.arrived.store(0);
		for (unsigned i = 0; i <= cores; i++) {
			// Task 0 is the allocator on core 0; reference i-1 on core i-1.
			const unsigned cpu = i == 0 ? 0 : i - 1;
			sd_task_config tc = SD_TASK_CONFIG_INIT;
			tc.mm = r.mm;
			tc.cpu = cpu;
			tc.affinity = affinity[cpu].c_str();
			if (int e = sd_task_create(m, &tc, i == 0 ? allocator_task : reference_task,
						   &r, nullptr))
				return e;
		}
		return 0;
	};
	const bool ran = run_task_batches(st, rm, create, kLatrBatch, "mmap_micro run", &d);
	sd_waitq_destroy(r.q);
	if (!ran)
		return;
	if (r.err.load()) {
		fail(st, "mmap_micro task", r.err.load());
		return;
	}
	const double calls = (double)st.iterations();
	const char *what = madvise ? "madvise_ns" : "munmap_ns";
	st.counters[what] = ratio(r.timed_ns.load(), st.iterations());
	st.counters[std::string(what) + "_min"] = (double)r.min_ns.load();
	// The barrier's reschedule IPIs apart: the flushes' own (with madvise,
	// the untimed munmap's too, if it finds anything left to flush).
	st.counters["flush_ipis_per_call"] =
		calls ? (double)(d.counter[SD_STAT_IPI_SENT] - d.counter[SD_STAT_WAKEUP_IPI]) / calls
		      : 0;
	st.counters["wakeup_ipis_per_call"] =
		calls ? (double)d.counter[SD_STAT_WAKEUP_IPI] / calls : 0;
	st.counters["broadcasts_per_call"] =
		calls ? (double)(d.counter[SD_STAT_TLBI_OP] + d.counter[SD_STAT_INVLPGB]) / calls : 0;
	st.counters["oversubscribed"] = oversubscribed(rm.m());
	report_machine(st, rm.m());
}

// The native twin, as main.cc runs: the allocator on PU 0, reference i on
// PU i % PUs; the references wait on the barrier between rounds.
void BM_mmap_micro_native(State &st, unsigned cores, unsigned pages, bool madv)
{
	const size_t page = (size_t)sysconf(_SC_PAGESIZE), len = page * pages;
	pthread_barrier_t bar;
	std::atomic<char *> data{nullptr};
	std::atomic<bool> stop{false};
	std::vector<std::thread> refs;
	uint64_t total = 0, least = UINT64_MAX;
	int err = 0;

	pthread_barrier_init(&bar, nullptr, cores + 1);
	for (unsigned i = 0; i < cores; i++)
		refs.emplace_back([&, i] {
			Pin pin((int)i);
			for (;;) {
				pthread_barrier_wait(&bar);
				if (stop.load())
					return;
				volatile char *d = data.load();
				for (unsigned j = 0; j < pages; j++)
					d[(size_t)j * page] = 0;
				pthread_barrier_wait(&bar);
			}
		});
	{
		Pin pin(0);
		for (auto _ : st) {
			char *d = (char *)mmap(nullptr, len, PROT_READ | PROT_WRITE,
					       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (d == MAP_FAILED) {
				err = -errno;
				break;
			}
			data.store(d);
			pthread_barrier_wait(&bar);     // the references touch
			pthread_barrier_wait(&bar);     // ... and are done
			const auto t0 = std::chrono::steady_clock::now();
			if (madv ? madvise(d, len, MADV_DONTNEED) : munmap(d, len))
				err = -errno;
			const uint64_t ns = (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
				std::chrono::steady_clock::now() - t0).count();
			if (madv)
				munmap(d, len);
			total += ns;
			least = std::min(least, ns);
			if (err)
				break;
		}
	}
	stop.store(true);
	pthread_barrier_wait(&bar);
	for (auto &t : refs)
		t.join();
	pthread_barrier_destroy(&bar);
	if (err) {
		fail(st, "native mmap_micro", err);
		return;
	}
	const char *what = madv ? "madvise_ns" : "munmap_ns";
	st.counters[what] = ratio(total, st.iterations());
	st.counters[std::string(what) + "_min"] = (double)least;
	st.counters["oversubscribed"] = cores + 1 > std::thread::hardware_concurrency();
}

void register_mmap_micro(Set set)
{
	if (set != Set::all)
		return;
	for (const char *s : { "ipi", "gbcast", "broadcast" })
		for (unsigned cores : { 1u, 2u, 8u, 32u })
			for (unsigned pages : { 1u, 64u })
				for (bool madv : { false, true })
					reg("mmap_micro/" + std::string(s) + "/cores:" +
						    std::to_string(cores) + "/pages:" +
						    std::to_string(pages) +
						    (madv ? "/madvise" : "/munmap"),
					    [s, cores, pages, madv](State &st) {
						    BM_mmap_micro(st, s, cores, pages, madv);
					    });
	for (unsigned cores : { 1u, 2u, 8u })
		for (unsigned pages : { 1u, 64u })
			for (bool madv : { false, true })
				reg("mmap_micro/native/cores:" + std::to_string(cores) + "/pages:" +
					    std::to_string(pages) + (madv ? "/madvise" : "/munmap"),
				    [cores, pages, madv](State &st) {
					    BM_mmap_micro_native(st, cores, pages, madv);
				    });
}

} // namespace

SD_BENCH_FAMILY(mmap_micro, 119, register_mmap_micro);

} // namespace sdbench
