// SPDX-License-Identifier: MIT
//
// stress-ng --tlb-shootdown: one instance of the stressor as its source has
// it, on tasks. Names: stress_tlb_shootdown/<strategy spec>/cpus:<n>.
//
//   stress_tlb_shootdown/{ipi,gbcast,broadcast,local}/cpus:{2,4,8}
//   stress_tlb_shootdown/native/seconds:2   the host's kernel (native.cpp)
//
// The source is stress-tlb-shootdown.c (ColinIanKing/stress-ng at
// 291fc43, 2026). stress_tlb_shootdown(), the instance (the parent here):
//
//	memfd = mmap(4 pages, RW, MAP_SHARED, fd of an unlinked temp file);
//	mem = mmap(512 pages, RW, MAP_SHARED | MAP_ANONYMOUS); memset(mem);
//	fork tlb_procs = min(8, max(2, CPUs allowed)) children;
//	do {
//		madvise(memfd page, DONTNEED); write it; msync(MS_SYNC);
//		madvise(memfd page, DONTNEED); read it;  msync(MS_SYNC);
//		madvise(mem page, DONTNEED);   read it;
//		madvise(mem page, DONTNEED);   write it;
//		(tlb_single_page_flush_ceiling read and written back, debugfs;
//		 MADV_COLLAPSE and MADV_NOHUGEPAGE of both mappings)
//	} while (running);
//
// stress_tlb_shootdown_child(), each child, a process of its own:
//
//	sched_setaffinity(args->pid, cpus[0]);
//	do {
//		mprotect(page, R); read it;  mprotect(page, W); write it;
//		mprotect(mem, R); 32768 strided reads;
//		mprotect(mem, W); 32768 strided writes; mprotect(mem, RW);
//		madvise(mem page, DONTNEED); read it;
//		madvise(memfd page, DONTNEED); write it; msync(MS_ASYNC);
//		every second: sched_setaffinity(args->pid, the next CPU);
//	} while (running);
//
// "Read it" and "write it" are a load or store at every 64-byte line of the
// page; the strided loops step (137 + a prime above 32768) lines, the prime
// the next for each child (stress_prime64_next_get()). Here every load and
// store of the source is one sd_access(), and a random page is the
// source's stress_mwc32() replaced by a fixed-seed xorshift per task.
//
// What the source does that is worth saying:
//
// - **The affinity the children rotate is the parent's.** args->pid is the
//   instance's pid (stress_run_child() sets it before calling the stressor),
//   and the children are forks of the instance, so their
//   sched_setaffinity(args->pid, ...) pins and moves the parent, not
//   themselves: the parent goes to cpus[0] as the children start and to the
//   next CPU each second, and the children keep the mask they were forked
//   with (all CPUs) and go where the scheduler puts them. Modelled as
//   written: each child calls sd_task_set_affinity() on the parent.
// - The temp file is taken to be on tmpfs (stress-ng --temp-path /dev/shm):
//   the emulator's files are tmpfs page caches (file.h), whose msync() is a
//   no-op (shmem's fsync is noop_fsync), as MS_ASYNC is everywhere since
//   2.6.19. On ext4 the parent's MS_SYNC would write back and write-protect
//   the page in every mm that maps it (folio_mkclean()): more flushes than
//   here. Neither msync is emulated.
// - Not modelled: the debugfs ceiling (a read and a write of one integer;
//   needs root), MADV_COLLAPSE (a 2 MiB collapse needs shmem THP, off by
//   default, and fails; the emulator has no huge pages) and the cache-line
//   flushes after each write (stress_cpu_cache_data_flush(): data cache,
//   not TLB).
// - More tasks than CPUs below 9 CPUs: each task calls
//   sd_task_preempt_point() after every system call, where the kernel would
//   switch a task whose slice has run out.
//
// An iteration is one child loop of each child (a bogo op each, as stress-
// ng counts them); the parent loops until the children are done. The
// counters are stress-ng's metrics per modelled second: TLB shootdowns
// (the flushes other CPUs ran for an IPI, /proc/interrupts' TLB line on
// x86) and IPIs (all the emulator sent, reschedule IPIs included: stress-
// ng's CAL line has only the function-call ones).
#include "common.hpp"

#include <shootdown/file.h>
#include <shootdown/task.h>

#include <chrono>
#include <string>
#include <vector>

namespace sdbench {
namespace {

constexpr unsigned kMaxProcs = 8;       // MAX_TLB_PROCS
constexpr unsigned kMinProcs = 2;       // MIN_TLB_PROCS
constexpr uint64_t kMemPages = 512;     // MMAP_PAGES
constexpr uint64_t kFdPages = 4;        // MMAP_FD_PAGES
constexpr uint64_t kLine = 64;          // STRESS_CACHE_LINE_SIZE
constexpr uint64_t kMemSize = kMemPages * SD_PAGE_SIZE;
constexpr uint64_t kMemMask = kMemSize - 1;
constexpr uint64_t kFdMask = kFdPages * SD_PAGE_SIZE - 1;
constexpr uint64_t kCacheLines = kMemSize / kLine;
constexpr uint64_t kSecondNs = 1000000000;

// The mappings, above RunMachine's page: mem, then memfd.
constexpr uint64_t kMem = kRegion + (UINT64_C(1) << 30);
constexpr uint64_t kMemfd = kMem + 2 * kMemSize;

// stress_mwc32() stands in for: a per-task xorshift, seeded per task so
// that a strict run repeats.
struct Rand {
	uint32_t s;
	uint32_t next()
	{
		s ^= s << 13;
		s ^= s >> 17;
		s ^= s << 5;
		return s;
	}
};

struct StressShared;

struct Child {
	StressShared *sh = nullptr;
	unsigned index = 0;
	uint64_t stride = 0;            // bytes
	Rand rnd{ 0 };
	unsigned cpu_idx = 0;           // its rotation of the parent, kept across batches
	uint64_t t_next_ns = 0;         // when it moves the parent next (0: not started)
	uint64_t k = 0;                 // the strided loops' offset
};

struct StressShared {
	~StressShared()
	{
		// The creator's reference; the mappings' go with the mm.
		if (file)
			(void)sd_file_close(file);
		if (start_q)
			(void)sd_waitq_destroy(start_q);
	}
	const RunMachine *rm = nullptr;
	unsigned ncpus = 0;
	unsigned procs = 0;
	uint64_t loops = 0;             // per child, this batch
	bool setup = false;             // the first run: map and memset only
	sd_file *file = nullptr;
	sd_task *parent = nullptr;
	sd_waitq *start_q = nullptr;    // the children wait here for the last fork
	std::atomic<bool> started{false};
	Rand parent_rnd{ 0x2545f491u };
	std::vector<Child> children;
	std::atomic<unsigned> children_done{0};
	std::atomic<uint64_t> parent_loops{0};
	std::atomic<uint64_t> child_loops{0};
	std::atomic<uint64_t> rotations{0};
	std::atomic<int> err{0};
};

// The clock a task's "every second" reads: its CPU's modelled clock, or
// the host's when the machine is not modelled.
uint64_t now_ns(sd_cpu *c)
{
	if (sd_cpu_clock_ns(c))
		return sd_cpu_clock_ns(c);
	return (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
		       std::chrono::steady_clock::now().time_since_epoch())
		.count();
}

// The return of a system call: the task may switch, or move.
int syscall_return(sd_task *self, sd_cpu **c)
{
	int err = sd_task_preempt_point(self);

	*c = sd_task_cpu(self);
	return err;
}

// stress_tlb_shootdown_read_mem()/_write_mem() of one page: every line.
int touch_page(sd_cpu *c, uint64_t page, sd_access_kind kind)
{
	int err = 0;

	for (uint64_t m = 0; !err && m < SD_PAGE_SIZE; m += kLine)
		err = sd_access(c, page + m, kind, nullptr);
	return err;
}

int mprotect_call(sd_task *self, sd_cpu **c, uint64_t va, uint64_t len, unsigned prot)
{
	int err = sd_mprotect(*c, sd_task_mm(self), va, len, prot);

	return err ? err : syscall_return(self, c);
}

int madvise_call(sd_task *self, sd_cpu **c, uint64_t va)
{
	int err = sd_madvise_dontneed(*c, sd_task_mm(self), va, SD_PAGE_SIZE);

	return err ? err : syscall_return(self, c);
}

// The strided loop over the whole of mem: kCacheLines accesses.
int strided(sd_cpu *c, Child *ch, sd_access_kind kind)
{
	int err = 0;

	for (uint64_t l = 0; !err && l < kCacheLines; l++) {
		err = sd_access(c, kMem + ch->k, kind, nullptr);
		ch->k = (ch->k + ch->stride) & kMemMask;
	}
	return err;
}

int child_loop(sd_task *self, sd_cpu **c, Child *ch)
{
	const unsigned RW = SD_PROT_READ | SD_PROT_WRITE;
	uint64_t page = kMem + ((ch->rnd.next() & kMemMask) & ~(SD_PAGE_SIZE - 1));
	int err;

	ch->k = ch->rnd.next() & kMemMask;
	err = mprotect_call(self, c, page, SD_PAGE_SIZE, SD_PROT_READ);
	if (!err)
		err = touch_page(*c, page, SD_READ);
	// PROT_WRITE alone is read-write on x86 and arm64.
	if (!err)
		err = mprotect_call(self, c, page, SD_PAGE_SIZE, RW);
	if (!err)
		err = touch_page(*c, page, SD_WRITE);
	if (!err)
		err = mprotect_call(self, c, kMem, kMemSize, SD_PROT_READ);
	if (!err)
		err = strided(*c, ch, SD_READ);
	if (!err)
		err = mprotect_call(self, c, kMem, kMemSize, RW);
	if (!err)
		err = strided(*c, ch, SD_WRITE);
	if (!err)
		err = mprotect_call(self, c, kMem, kMemSize, RW);
	page = kMem + ((ch->rnd.next() & kMemMask) & ~(SD_PAGE_SIZE - 1));
	if (!err)
		err = madvise_call(self, c, page);
	if (!err)
		err = touch_page(*c, page, SD_READ);
	page = kMemfd + ((ch->rnd.next() & kFdMask) & ~(SD_PAGE_SIZE - 1));
	if (!err)
		err = madvise_call(self, c, page);
	if (!err)
		err = touch_page(*c, page, SD_WRITE);
	return err;
}

// Every second of its own, a child moves the parent to the next CPU.
int maybe_rotate(sd_task *self, sd_cpu **c, Child *ch)
{
	StressShared *sh = ch->sh;

	if (now_ns(*c) < ch->t_next_ns)
		return 0;
	ch->cpu_idx = ch->cpu_idx + 1 >= sh->ncpus ? 0 : ch->cpu_idx + 1;
	ch->t_next_ns += kSecondNs;
	sh->rotations.fetch_add(1, std::memory_order_relaxed);
	const std::string cpu = std::to_string(ch->cpu_idx);
	int err = sd_task_set_affinity(self, sh->parent, cpu.c_str());
	*c = sd_task_cpu(self);
	// The parent has returned (its loop ends with the children's).
	return err == -ESRCH ? 0 : err;
}

void stress_child(sd_task *self, void *p)
{
	auto *ch = static_cast<Child *>(p);
	StressShared *sh = ch->sh;
	sd_cpu *c = sd_task_cpu(self);
	int err = 0;

	// stress_sync_start_wait_s_pid(): stopped until the parent has forked
	// them all, so that every child is forked with the parent's own mask.
	err = sd_task_wait(self, sh->start_q, [](void *v) {
		return static_cast<StressShared *>(v)->started.load(std::memory_order_acquire);
	}, sh);
	// The child's first sched_setaffinity(args->pid, cpus[cpu_idx]).
	const std::string cpu = std::to_string(ch->cpu_idx);
	if (!err)
		err = sd_task_set_affinity(self, sh->parent, cpu.c_str());
	c = sd_task_cpu(self);
	if (!ch->t_next_ns)
		ch->t_next_ns = now_ns(c) + kSecondNs;
	for (uint64_t i = 0; !err && i < sh->loops; i++) {
		err = child_loop(self, &c, ch);
		if (!err)
			err = maybe_rotate(self, &c, ch);
		sh->child_loops.fetch_add(!err, std::memory_order_relaxed);
	}
	note_first_error(sh->err, err);
	sh->children_done.fetch_add(1, std::memory_order_release);
}

int parent_loop(sd_task *self, sd_cpu **c, StressShared *sh)
{
	Rand &r = sh->parent_rnd;
	uint64_t fd_page = kMemfd + ((r.next() & kFdMask) & ~(SD_PAGE_SIZE - 1));
	uint64_t page = kMem + ((r.next() & kMemMask) & ~(SD_PAGE_SIZE - 1));
	int err = madvise_call(self, c, fd_page);

	if (!err)
		err = touch_page(*c, fd_page, SD_WRITE);
	if (!err)
		err = madvise_call(self, c, fd_page);
	if (!err)
		err = touch_page(*c, fd_page, SD_READ);
	if (!err)
		err = madvise_call(self, c, page);
	if (!err)
		err = touch_page(*c, page, SD_READ);
	if (!err)
		err = madvise_call(self, c, page);
	if (!err)
		err = touch_page(*c, page, SD_WRITE);
	return err;
}

// The instance: the mappings and memset once (the setup run), then each
// batch forks the children and loops until they are done.
void stress_parent(sd_task *self, void *p)
{
	auto *sh = static_cast<StressShared *>(p);
	sd_cpu *c = sd_task_cpu(self);
	sd_mm *mm = sd_task_mm(self);
	const unsigned RW = SD_PROT_READ | SD_PROT_WRITE;
	int err = 0;

	if (sh->setup) {
		err = sd_mmap_file(c, mm, kMemfd, kFdPages * SD_PAGE_SIZE, RW, SD_MAP_SHARED,
				   sh->file, 0);
		if (!err)
			err = sd_mmap_file(c, mm, kMem, kMemSize, RW, SD_MAP_SHARED, nullptr, 0);
		for (uint64_t pg = 0; !err && pg < kMemPages; pg++)
			err = touch_page(c, kMem + pg * SD_PAGE_SIZE, SD_WRITE);
		note_first_error(sh->err, err);
		return;
	}
	sh->parent = self;
	sh->children_done.store(0, std::memory_order_relaxed);
	sh->started.store(false, std::memory_order_relaxed);
	unsigned forked = 0;
	for (; !err && forked < sh->procs; forked++)
		err = sd_task_fork(self, stress_child, &sh->children[forked], nullptr);
	if (err) {
		note_first_error(sh->err, err);
		sh->loops = 0;          // the forked ones end at once
		sh->children_done.fetch_add(sh->procs - forked + 1, std::memory_order_relaxed);
	}
	// stress_sync_start_cont_list(): all forked, the children go on.
	sh->started.store(true, std::memory_order_release);
	int woken = sd_task_wake(self, sh->start_q, sh->procs);
	if (woken < 0)
		note_first_error(sh->err, woken);
	c = sd_task_cpu(self);
	while (sh->children_done.load(std::memory_order_acquire) < sh->procs && !sh->err.load()) {
		err = parent_loop(self, &c, sh);
		note_first_error(sh->err, err);
		sh->parent_loops.fetch_add(!err, std::memory_order_relaxed);
		if (!err)
			err = syscall_return(self, &c);
	}
	// Wait for the children (stress_kill_and_wait_many()).
	while (sh->children_done.load(std::memory_order_acquire) < sh->procs)
		(void)sd_task_yield(self);
}

int create_parent(sd_machine *m, StressShared *sh)
{
	sd_task_config tc = SD_TASK_CONFIG_INIT;

	tc.mm = sh->rm->mm(0);
	tc.cpu = 0;
	return sd_task_create(m, &tc, stress_parent, sh, nullptr);
}

// The next prime after @p that does not divide kCacheLines
// (stress_prime64_next_get(), whose first call starts at kCacheLines + 1).
uint64_t next_prime(uint64_t p)
{
	for (;;) {
		p += 2;
		bool prime = kCacheLines % p != 0;
		for (uint64_t d = 3; prime && d * d <= p; d += 2)
			prime = p % d != 0;
		if (prime)
			return p;
	}
}

void report_stress(State &st, const sd_stats &d, const StressShared &sh, double wall_s)
{
	auto model = st.counters.find("model_ns");
	const bool modelled = model != st.counters.end() && model->second.value > 0;
	const double span_s = modelled ? model->second.value * (double)st.iterations() / 1e9 : wall_s;
	const double loops = (double)sh.child_loops.load();
	const uint64_t flushes = d.counter[SD_STAT_FLUSH];

	if (span_s <= 0)
		return;
	st.counters["tlb_shootdowns_per_s"] = (double)d.counter[SD_STAT_REMOTE_INVAL_RECV] / span_s;
	st.counters["ipis_per_s"] = (double)d.counter[SD_STAT_IPI_SENT] / span_s;
	st.counters["wakeup_ipis_per_s"] = (double)d.counter[SD_STAT_WAKEUP_IPI] / span_s;
	st.counters["bogo_ops_per_s"] = loops / span_s;
	st.counters["parent_loops_per_s"] = (double)sh.parent_loops.load() / span_s;
	st.counters["flushes_per_s"] = (double)flushes / span_s;
	st.counters["flushes_per_child_loop"] = ratio(flushes, (uint64_t)loops);
	st.counters["remote_invalidations_per_flush"] = ratio(d.counter[SD_STAT_REMOTE_INVAL], flushes);
	st.counters["tlbi_ops_per_s"] = (double)d.counter[SD_STAT_TLBI_OP] / span_s;
	st.counters["invlpgb_per_s"] = (double)d.counter[SD_STAT_INVLPGB] / span_s;
	st.counters["task_migrations_per_s"] = (double)d.counter[SD_STAT_TASK_MIGRATE] / span_s;
	st.counters["task_switches_per_s"] = (double)d.counter[SD_STAT_TASK_SWITCH] / span_s;
	st.counters["parent_rotations"] = (double)sh.rotations.load();
	st.counters["span_s"] = span_s;
	st.counters["violations"] = (double)d.counter[SD_STAT_VIOLATION];
}

void BM_stress_tlb_shootdown(State &st, const char *strategy, unsigned cpus)
{
	RunMachine rm(cpus, SD_ORACLE_DEFAULT, 1, 1, spec_of(strategy));
	StressShared sh;
	sd_stats d = SD_STATS_INIT;
	RunTimes times;

	if (!rm.ok(st))
		return;
	sh.rm = &rm;
	sh.ncpus = cpus;
	sh.procs = cpus > kMaxProcs ? kMaxProcs : cpus < kMinProcs ? kMinProcs : cpus;
	sh.children.resize(sh.procs);
	uint64_t prime = kCacheLines + 1;
	for (unsigned i = 0; i < sh.procs; i++) {
		prime = next_prime(prime);
		sh.children[i].sh = &sh;
		sh.children[i].index = i;
		sh.children[i].stride = (137 + prime) * kLine;
		sh.children[i].rnd.s = 0x9e3779b9u * (i + 1);
	}
	if (int err = sd_file_create(rm.m(), kFdPages * SD_PAGE_SIZE, &sh.file)) {
		fail(st, "sd_file_create", err);
		return;
	}
	if (int err = sd_waitq_create(rm.m(), "sync_start", &sh.start_q)) {
		fail(st, "sd_waitq_create", err);
		return;
	}
	// ftruncate(), mmap() and memset() before the forks, untimed.
	sh.setup = true;
	int err = create_parent(rm.m(), &sh);
	if (!err)
		err = sd_sched_run(rm.m());
	sh.setup = false;
	if (err || sh.err.load()) {
		fail(st, "stress_tlb_shootdown setup", err ? err : sh.err.load());
		return;
	}
	auto create = [&](sd_machine *m, uint64_t batch) {
		sh.loops = batch;
		return create_parent(m, &sh);
	};
	const bool ran = run_task_batches(st, rm, create, 4, "stress_tlb_shootdown run", &d, &times);
	if (ran && sh.err.load())
		fail(st, "stress_tlb_shootdown task", sh.err.load());
	else if (ran) {
		report_stress(st, d, sh, times.wall_s);
		report_machine(st, rm.m());
	}
}

void register_stress_tlb_shootdown(Set set)
{
	if (set != Set::all)
		return;
	static const char *const strategies[] = { "ipi", "gbcast", "broadcast", "local" };
	for (unsigned n : { 2u, 4u, 8u })
		for (const char *s : strategies)
			reg("stress_tlb_shootdown/" + std::string(s) + cpus_tail(n),
			    [s, n](State &st) { BM_stress_tlb_shootdown(st, s, n); });
	// The host's kernel, 2 s a run, as many PUs as it has.
	reg("stress_tlb_shootdown/native/seconds:2",
	    [](State &st) { native::BM_stress_tlb_shootdown(st, 2.0); })
		->Iterations(1);
}

} // namespace

SD_BENCH_FAMILY(stress_tlb_shootdown, 127, register_stress_tlb_shootdown);

} // namespace sdbench
