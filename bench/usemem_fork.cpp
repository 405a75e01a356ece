// SPDX-License-Identifier: MIT
//
// usemem with a periodic fork()/exec(): the workload of Huang Ying's "arm64,
// tlbflush: don't TLBI broadcast if page reused in write fault" (Linux 6.19).
//
//   usemem_fork/<strategy>/cpus:{4,32,36,64}/sweeps:{1,4,16}
//       broadcast                   arm64 since 6.19: the reuse flushes locally
//       broadcast:wp_reuse=tlbi     arm64 before 6.19: the reuse broadcasts
//       local                       Arcangeli's skip-broadcast (2020)
//       ipi, gbcast                 x86: the reuse flushes nothing
//   usemem_fork/native/cpus:4/sweeps:{1,4,16}
//       the same rounds on the host's kernel (native.cpp)
//
// The shape, from the patch's message: "run usemem with 4 threads, access
// 100GB memory, and call fork()/exec() every 40 seconds". usemem is
// vm-scalability's usemem.c: with -t each thread mmaps its own anonymous
// region (do_units()) and writes every word of it (p[idx] = idx, step 8
// bytes), again for each repeat (-r). After fork() write-protected the
// parent's pages and the child's exec() dropped its copy, the first write to
// each page is a write fault that reuses the page in place (wp_page_reuse()):
// arm64 before 6.19 flushed that page by a broadcast TLBI, x86 and arm64
// since 6.19 do not broadcast.
//
// Here: 4 usemem thread tasks of one mm, thread t pinned to CPU t, each
// writing a region of kUmPages pages, its own VMA (um_allocate()). Thread 0,
// usemem's main thread, starts each round with fork() and wait4() for the
// child, which exec()s and exits (the "external program"), then sweeps its
// region @sweeps times; the other threads sweep on all the while and stop
// when thread 0 is done. Per page one emulated write (sd_access()), and the
// page's other 511 word stores charged in modelled time as the profile's
// page_zero (clear_page(), the same 4 KiB of stores, cache-hot: a lower bound
// on a sweep of cold memory). An iteration is one round; the score is pages
// written per modelled microsecond, all threads together. The regions are
// populated by one sweep before the rounds.
//
// Scaling choices, stated as choices: kUmPages (16 MiB a thread instead of
// 25 GiB) is twice the emulated TLB's reach, so that, as at 100 GB, every
// sweep misses the TLB on every page; @sweeps, the sweeps between two forks,
// stands for the 40 s: how many sweeps of 25 GiB fit in 40 s is not in the
// message, so the rows give the curve and BENCHMARKS.md reads the published
// point off it (a fit, said there). 4 KiB pages only: the patch's huge-pmd
// half (flush_tlb_fix_spurious_fault_pmd()) is not modelled.
#include "common.hpp"

#include <string>
#include <vector>

namespace sdbench {
namespace {

constexpr unsigned kUmThreads = 4;
constexpr uint64_t kUmPages = 4096;

struct UmShared {
	uint64_t rounds = 0;
	unsigned sweeps = 1;
	bool populate = false;          // one sweep, no fork: the first touches
	uint64_t store_ns = 0;          // the page's other stores, modelled
	sd_waitq *wait4 = nullptr;
	std::atomic<bool> child_done{false};
	std::atomic<bool> main_done{false};     // thread 0's rounds are over
	std::atomic<int> err{0};
};

struct UmThread {
	UmShared *sh = nullptr;
	unsigned index = 0;
	uint64_t pages = 0;             // pages written in the rounds (its task's own)
};

void um_child(sd_task *self, void *p)
{
	auto *sh = static_cast<UmShared *>(p);
	// exec() of the external program: the copy fork made goes, and with it
	// the second mapping of every page the parent's writes would copy.
	int err = sd_task_exec(self);

	note_first_error(sh->err, err);
	sh->child_done.store(true, std::memory_order_release);
	int woken = sd_task_wake(self, sh->wait4, 1);
	note_first_error(sh->err, woken < 0 ? woken : 0);
}

bool um_child_done(void *p)
{
	return static_cast<UmShared *>(p)->child_done.load(std::memory_order_acquire);
}

int um_fork_exec(sd_task *self, UmShared *sh)
{
	sh->child_done.store(false, std::memory_order_relaxed);
	int err = sd_task_fork(self, um_child, sh, nullptr);

	return err ? err : sd_task_wait(self, sh->wait4, um_child_done, sh);
}

// Thread @index's region: its own VMA, a page apart from the next one's.
uint64_t um_base(unsigned index)
{
	return kRegion + (uint64_t)index * (kUmPages + 1) * SD_PAGE_SIZE;
}

// usemem's allocate(): each thread maps its own region, as a private
// mapping of /dev/zero at offset 0. Two such mappings side by side do not
// merge (vma_merge() wants the second's file offset to continue the
// first's), so every thread faults in a VMA, and on a per-VMA lock, of its
// own. Thread 0's is the one RunMachine mapped.
int um_allocate(sd_task *self, const UmThread *t)
{
	if (t->index == 0)
		return 0;
	return sd_mmap(sd_task_cpu(self), sd_task_mm(self), um_base(t->index),
		       kUmPages * SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE);
}

// usemem's do_unit() loop over one thread's region, one write per page;
// the other threads' sweeps stop when thread 0 is done (@stop).
int um_sweep(sd_task *self, UmThread *t, bool stop)
{
	const uint64_t base = um_base(t->index);
	sd_cpu *c = sd_task_cpu(self);
	int err = 0;

	for (uint64_t pg = 0; !err && pg < kUmPages; pg++) {
		if (stop && t->sh->main_done.load(std::memory_order_relaxed))
			break;
		err = sd_access(c, base + pg * SD_PAGE_SIZE, SD_WRITE, nullptr);
		if (!err && t->sh->store_ns)
			err = sd_cpu_work(c, t->sh->store_ns);
		t->pages += !err;
	}
	return err;
}

// Thread 0: a fork()/exec() every @sweeps of its sweeps; the others sweep
// on meanwhile, as usemem's threads never wait for the main one.
int um_rounds(sd_task *self, UmThread *t)
{
	UmShared *sh = t->sh;
	int err = 0;

	if (t->index) {
		while (!err && !sh->main_done.load(std::memory_order_relaxed))
			err = um_sweep(self, t, true);
		return err;
	}
	for (uint64_t r = 0; !err && r < sh->rounds; r++) {
		err = um_fork_exec(self, sh);
		for (unsigned s = 0; !err && s < sh->sweeps; s++)
			err = um_sweep(self, t, false);
	}
	sh->main_done.store(true, std::memory_order_relaxed);
	return err;
}

void um_thread(sd_task *self, void *p)
{
	auto *t = static_cast<UmThread *>(p);
	UmShared *sh = t->sh;
	int err = 0;

	if (sh->populate) {
		err = um_allocate(self, t);
		if (!err)
			err = um_sweep(self, t, false);
		t->pages = 0;
	} else {
		err = um_rounds(self, t);
	}
	note_first_error(sh->err, err);
}

void report_usemem(State &st, const sd_stats &d, const std::vector<UmThread> &threads)
{
	const double rounds = (double)st.iterations();
	double pages = 0;

	for (const UmThread &t : threads)
		pages += (double)t.pages;

	st.counters["wp_faults_per_round"] = ratio(d.counter[SD_STAT_WP_FAULT], st.iterations());
	st.counters["spurious_faults_per_round"] =
		ratio(d.counter[SD_STAT_SPURIOUS_FAULT], st.iterations());
	st.counters["tlbi_ops_per_round"] = ratio(d.counter[SD_STAT_TLBI_OP], st.iterations());
	st.counters["ipis_per_round"] = ratio(d.counter[SD_STAT_IPI_SENT], st.iterations());
	st.counters["flushes_per_round"] = ratio(d.counter[SD_STAT_FLUSH], st.iterations());
	st.counters["flush_ns"] = flush_ns_mean(d);
	auto model = st.counters.find("model_ns");
	if (model == st.counters.end() || model->second.value <= 0)
		return;
	// usemem's score is its throughput: pages written per modelled µs.
	// The flush share is perf's "cycles% of TLB flush functions": the
	// modelled time the threads spent in flushes over their time.
	const double span_ns = model->second.value * rounds;
	st.counters["pages_per_us"] = pages / (span_ns / 1000.0);
	st.counters["flush_share"] = (double)d.flush_ns_total / (span_ns * kUmThreads);
}

void BM_usemem_fork(State &st, const char *strategy, unsigned cpus, unsigned sweeps)
{
	RunMachine rm(cpus, SD_ORACLE_OFF, 1, kUmPages, spec_of(strategy));
	UmShared sh;
	std::vector<UmThread> threads(kUmThreads);
	sd_stats d = SD_STATS_INIT;

	for (unsigned i = 0; i < kUmThreads; i++)
		threads[i] = UmThread{ &sh, i, 0 };

	if (!rm.ok(st))
		return;
	if (cpus < kUmThreads) {
		st.SkipWithError("usemem_fork needs a CPU for each of its 4 threads");
		return;
	}
	const double store = sd_model_cost_ns(rm.m(), "page_zero");
	sh.store_ns = store > 0 ? (uint64_t)(store + 0.5) : 0;
	sh.sweeps = sweeps;
	if (int e = sd_waitq_create(rm.m(), "wait4", &sh.wait4)) {
		fail(st, "sd_waitq_create", e);
		return;
	}
	auto make = [&](sd_machine *m, uint64_t rounds, bool populate) {
		sh.rounds = rounds;
		sh.populate = populate;
		sh.main_done.store(false);
		for (unsigned i = 0; i < kUmThreads; i++) {
			const std::string cpu = std::to_string(i);
			sd_task_config tc = SD_TASK_CONFIG_INIT;
			tc.mm = rm.mm(0);
			tc.cpu = i;
			tc.affinity = cpu.c_str();
			if (int e = sd_task_create(m, &tc, um_thread, &threads[i], nullptr))
				return e;
		}
		return 0;
	};
	// usemem's first sweep populates the regions (do_anonymous_page()),
	// before the steady state the rounds measure.
	auto create = [&](sd_machine *m, uint64_t batch) { return make(m, batch, false); };
	int err = make(rm.m(), 0, true);
	if (!err)
		err = sd_sched_run(rm.m());
	const bool ran = !err && run_task_batches(st, rm, create, 2, "usemem_fork run", &d);
	if (err)
		fail(st, "usemem_fork populate", err);
	sd_waitq_destroy(sh.wait4);
	if (!ran)
		return;
	if (sh.err.load()) {
		fail(st, "usemem_fork task", sh.err.load());
		return;
	}
	report_usemem(st, d, threads);
	report_machine(st, rm.m());
}

void register_usemem_fork(Set set)
{
	if (set != Set::all)
		return;
	static const std::vector<const char *> strategies = { "broadcast", "broadcast:wp_reuse=tlbi",
							      "local", "ipi", "gbcast" };
	static const std::vector<unsigned> all_cpus = { 4, 32, 36, 64 };
	static const std::vector<unsigned> all_sweeps = { 1, 4, 16 };

	for (unsigned n : all_cpus)
		for (const char *s : strategies)
			for (unsigned sw : all_sweeps)
				reg("usemem_fork/" + std::string(s) + cpus_tail(n) + "/sweeps:" +
					    std::to_string(sw),
				    [s, n, sw](State &st) { BM_usemem_fork(st, s, n, sw); });
	// The host's kernel, 4 threads as the message's usemem (x86 here: the
	// reuse flushes nothing, as the ipi rows).
	for (unsigned sw : all_sweeps)
		reg("usemem_fork/native" + cpus_tail(4) + "/sweeps:" + std::to_string(sw),
		    [sw](State &st) { native::BM_usemem_fork(st, sw); });
}

} // namespace

SD_BENCH_FAMILY(usemem_fork, 115, register_usemem_fork);

} // namespace sdbench
