// SPDX-License-Identifier: MIT
//
// vm-scalability's lru-file-mmap-read under reclaim: the workload of Mel
// Gorman's "mm: send one IPI per CPU to TLB flush all entries after
// unmapping pages" (Linux 4.3), which batches reclaim's flushes (the x86
// arch_tlbbatch that tlbbatch.h emulates). Names:
//
//   lru_file_mmap_read/ipi:cpumask=eager/batch:{0,32}/cpus:{2,4,8,16,48}
//       batch:0    before 4.3: try_to_unmap_one()'s ptep_clear_flush(), a
//                  shootdown a page
//       batch:32   4.3 on: a shootdown to the union of the mms' CPUs per
//                  shrink_page_list() call of SWAP_CLUSTER_MAX pages
//
// The shape, from vm-scalability's case-lru-file-mmap-read: nr_task = the
// CPUs' count of readers, each with a sparse file of its own, of
// ROTATE_BYTES / nr_task, run as `usemem -f FILE --readonly SIZE`: the file
// mapped read-only and read once, page by page. The commit's message: "NR_CPU
// readers of mapped files that consume 10*RAM", on "a 4-node machine with
// 64G RAM and 48 CPUs", elapsed 25.43 s before and 20.59 s after, and
// interrupts from about 500K to 45K a second. Reclaim is kswapd's: it
// takes the oldest pages off the LRU, 32 at a time, unmaps each from the
// reader that maps it (try_to_unmap() through the rmap: here the workload
// knows the one mapping) and evicts it (sd_file_evict()) after the flush.
//
// Scaled and simplified, each said:
// - RAM is kRamPages (16 MiB): the files total 10 x that, as the message.
// - The LRU is one list in the order pages joined it. A reader adds its
//   pages through its CPU's pagevec, PAGEVEC_SIZE 14 in 4.2 (lru_cache_add()
//   drains it when full), so the list holds runs of 14 pages of one reader;
//   a batch of 32 then spans few readers, which is what the batching saves.
// - One kswapd (the machine has one node per 12 CPUs and a kswapd each;
//   here one for all). It wakes when the cache reaches RAM less kLowGap
//   pages and reclaims down to RAM less kHighGap: the kernel's low and high
//   watermarks are fractions of a percent of 64 GiB, which at 16 MiB would
//   be a page or two; these gaps are chosen, not taken from the source.
// - Direct reclaim: a reader that finds the cache full reclaims a batch
//   itself, with a batch of its own, as kswapd does; it waits for kswapd
//   only when nothing is on the LRU yet (all in the pagevecs).
// - No readahead and no second chance: a fault reads in its page alone,
//   and a page referenced once is reclaimed at its first scan (the kernel
//   keeps a mapped page once, clearing its young bit without a flush on
//   x86, and reclaims it at the second scan: the same one unmap a page).
//
// An iteration is one whole run (every reader reads its file once); the
// counters are the message's: elapsed (modelled), flush IPIs a second, and
// IPIs a page reclaimed.
#include "common.hpp"

#include <shootdown/file.h>
#include <shootdown/task.h>
#include <shootdown/tlbbatch.h>

#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace sdbench {
namespace {

constexpr uint64_t kRamPages = 4096;          // 16 MiB
constexpr uint64_t kFilesPages = 10 * kRamPages;
constexpr unsigned kPagevec = 14;             // PAGEVEC_SIZE, Linux 4.2
constexpr unsigned kSwapClusterMax = 32;      // SWAP_CLUSTER_MAX
constexpr uint64_t kLowGap = 64;              // chosen (see above)
constexpr uint64_t kHighGap = 256;            // chosen (see above)
constexpr uint64_t kFileBase = kRegion + (UINT64_C(1) << 32);
// x86 as of 4.2/4.3: switch_mm() cleared the outgoing CPU's bit of the old
// mm's cpumask, so a flush reached only CPUs running the mm (or lazy in
// it); the lazy clearing came in 2024 (van Riel).
constexpr const char *kStrategy = "ipi:cpumask=eager";

struct LruShared;

struct Reader {
	LruShared *sh = nullptr;
	unsigned index = 0;
	sd_file *file = nullptr;
	sd_mm *mm = nullptr;            // its process's, set when it runs
	std::vector<uint64_t> pagevec;  // pages not yet on the LRU
};

struct LruPage {
	unsigned reader;
	uint64_t pgoff;
};

struct LruShared {
	unsigned batch = kSwapClusterMax;
	uint64_t file_pages = 0;        // each reader's
	std::vector<Reader> readers;
	std::mutex lru_lock;            // the LRU list's (the kernel's lru_lock)
	std::deque<LruPage> lru;
	std::atomic<uint64_t> cached{0};
	std::atomic<unsigned> readers_done{0};
	std::atomic<uint64_t> reclaimed{0}, throttled{0}, direct_reclaims{0};
	sd_waitq *kswapd_wait = nullptr;
	sd_waitq *throttle = nullptr;
	sd_waitq *finish = nullptr;     // readers wait here for kswapd's end
	std::atomic<bool> kswapd_done{false};
	std::atomic<int> err{0};

	~LruShared()
	{
		for (Reader &r : readers)
			if (r.file)
				(void)sd_file_close(r.file);
		if (kswapd_wait)
			(void)sd_waitq_destroy(kswapd_wait);
		if (throttle)
			(void)sd_waitq_destroy(throttle);
		if (finish)
			(void)sd_waitq_destroy(finish);
	}
};

bool cache_has_room(void *p)
{
	auto *sh = static_cast<LruShared *>(p);
	return sh->cached.load(std::memory_order_acquire) < kRamPages;
}

bool kswapd_has_work(void *p)
{
	auto *sh = static_cast<LruShared *>(p);
	return sh->cached.load(std::memory_order_acquire) >= kRamPages - kLowGap ||
	       sh->readers_done.load(std::memory_order_acquire) == sh->readers.size();
}

// lru_cache_add()'s pagevec: full, it goes onto the LRU at once.
void lru_add(Reader *r, uint64_t pgoff, bool drain)
{
	r->pagevec.push_back(pgoff);
	if (!drain && r->pagevec.size() < kPagevec)
		return;
	std::lock_guard<std::mutex> g(r->sh->lru_lock);
	for (uint64_t pg : r->pagevec)
		r->sh->lru.push_back(LruPage{ r->index, pg });
	r->pagevec.clear();
}

int shrink_list(sd_cpu *c, LruShared *sh, sd_tlbbatch *tb, size_t *taken);

// __alloc_pages_slowpath() of a reader that finds the cache full: it wakes
// kswapd and reclaims a SWAP_CLUSTER_MAX batch itself (direct reclaim,
// try_to_free_pages(): shrink_page_list() with the task's own batch, as
// kswapd's); with nothing on the LRU yet, it waits for kswapd.
int make_room(sd_task *self, Reader *r, sd_tlbbatch *tb)
{
	LruShared *sh = r->sh;
	size_t taken = 0;
	int err = sd_task_wake(self, sh->kswapd_wait, 1);

	if (err < 0)
		return err;
	err = shrink_list(sd_task_cpu(self), sh, tb, &taken);
	sh->direct_reclaims.fetch_add(1, std::memory_order_relaxed);
	if (!err && !taken && !cache_has_room(sh)) {
		sh->throttled.fetch_add(1, std::memory_order_relaxed);
		err = sd_task_wait(self, sh->throttle, cache_has_room, sh);
	}
	return err;
}

// usemem -f FILE --readonly: the file mapped read-only, each page read
// once; a page cache at RAM's size makes room first.
void reader(sd_task *self, void *p)
{
	auto *r = static_cast<Reader *>(p);
	LruShared *sh = r->sh;
	sd_cpu *c = sd_task_cpu(self);
	sd_tlbbatch *tb = nullptr;
	int err;

	// A process of its own: its mm goes when it returns.
	err = sd_task_exec(self);
	c = sd_task_cpu(self);
	r->mm = sd_task_mm(self);
	if (!err)
		err = sd_tlbbatch_create(sd_cpu_machine(c), &tb);
	if (!err)
		err = sd_mmap_file(c, r->mm, kFileBase, sh->file_pages * SD_PAGE_SIZE, SD_PROT_READ,
				   SD_MAP_SHARED, r->file, 0);
	for (uint64_t pg = 0; !err && pg < sh->file_pages; pg++) {
		if (!cache_has_room(sh)) {
			err = make_room(self, r, tb);
			c = sd_task_cpu(self);
			if (err)
				break;
		}
		err = sd_access(c, kFileBase + pg * SD_PAGE_SIZE, SD_READ, nullptr);
		if (err)
			break;
		sh->cached.fetch_add(1, std::memory_order_release);
		lru_add(r, pg, pg + 1 == sh->file_pages);
		if (sh->cached.load(std::memory_order_relaxed) >= kRamPages - kLowGap)
			err = sd_task_wake(self, sh->kswapd_wait, 1);
		err = err < 0 ? err : sd_task_preempt_point(self);
		c = sd_task_cpu(self);
	}
	note_first_error(sh->err, err < 0 ? err : 0);
	(void)sd_tlbbatch_destroy(tb);
	sh->readers_done.fetch_add(1, std::memory_order_release);
	(void)sd_task_wake(self, sh->kswapd_wait, 1);
	// kswapd and other readers' direct reclaim may still unmap our
	// pages: the mm stays until kswapd, the last reclaimer, is done.
	(void)sd_task_wait(self, sh->finish, [](void *v) {
		return static_cast<LruShared *>(v)->kswapd_done.load(std::memory_order_acquire);
	}, sh);
}

// shrink_page_list() of up to SWAP_CLUSTER_MAX pages off the LRU's tail:
// each unmapped into the batch (try_to_unmap() with TTU_BATCH_FLUSH), the
// batch flushed every sh->batch pages (before 4.3: every page), then the
// pages evicted (__remove_mapping()).
int shrink_list(sd_cpu *c, LruShared *sh, sd_tlbbatch *tb, size_t *taken)
{
	std::vector<LruPage> take;
	int err = 0;

	{
		std::lock_guard<std::mutex> g(sh->lru_lock);
		while (take.size() < kSwapClusterMax && !sh->lru.empty()) {
			take.push_back(sh->lru.front());
			sh->lru.pop_front();
		}
	}
	if (taken)
		*taken = take.size();
	for (size_t i = 0; !err && i < take.size(); i++) {
		const Reader &r = sh->readers[take[i].reader];
		err = sd_reclaim(c, tb, r.mm, kFileBase + take[i].pgoff * SD_PAGE_SIZE, SD_PAGE_SIZE);
		if (!err && (sh->batch == 0 || (i + 1) % sh->batch == 0))
			err = sd_tlbbatch_flush(c, tb);
	}
	if (!err)
		err = sd_tlbbatch_flush(c, tb);
	for (size_t i = 0; !err && i < take.size(); i++) {
		const Reader &r = sh->readers[take[i].reader];
		int e = sd_file_evict(c, r.file, take[i].pgoff * SD_PAGE_SIZE, SD_PAGE_SIZE);
		if (e < 0)
			err = e;
		else if (e) {
			sh->cached.fetch_sub(1, std::memory_order_release);
			sh->reclaimed.fetch_add(1, std::memory_order_relaxed);
		}
	}
	return err;
}

void kswapd(sd_task *self, void *p)
{
	auto *sh = static_cast<LruShared *>(p);
	sd_tlbbatch *tb = nullptr;
	int err = sd_tlbbatch_create(sd_cpu_machine(sd_task_cpu(self)), &tb);

	while (!err && sh->readers_done.load(std::memory_order_acquire) < sh->readers.size()) {
		err = sd_task_wait(self, sh->kswapd_wait, kswapd_has_work, sh);
		while (!err && sh->cached.load(std::memory_order_acquire) > kRamPages - kHighGap) {
			err = shrink_list(sd_task_cpu(self), sh, tb, nullptr);
			int woken = err ? 0 : sd_task_wake(self, sh->throttle, UINT32_MAX);
			err = woken < 0 ? woken : err;
			if (!err)
				err = sd_task_preempt_point(self);
			bool empty;
			{
				std::lock_guard<std::mutex> g(sh->lru_lock);
				empty = sh->lru.empty();
			}
			if (empty) {
				// The rest sits in the readers' pagevecs.
				(void)sd_task_yield(self);
				break;
			}
		}
	}
	note_first_error(sh->err, err);
	(void)sd_tlbbatch_destroy(tb);
	sh->kswapd_done.store(true, std::memory_order_release);
	int woken = sd_task_wake(self, sh->finish, UINT32_MAX);
	note_first_error(sh->err, woken < 0 ? woken : 0);
}

// The message's figures: elapsed (modelled, a run), interrupts a second
// (the flush IPIs the targets ran), and what decides them.
void report_lru(State &st, const sd_stats &d, const LruShared &sh)
{
	auto model = st.counters.find("model_ns");
	const bool modelled = model != st.counters.end() && model->second.value > 0;
	const double runs = (double)st.iterations();
	const double span_s = modelled ? model->second.value * runs / 1e9 : 0;
	const uint64_t pages = sh.reclaimed.load();

	st.counters["pages_reclaimed_per_run"] = (double)pages / runs;
	st.counters["flush_ipis_per_page"] = ratio(d.counter[SD_STAT_REMOTE_INVAL_RECV], pages);
	st.counters["ipis_per_page"] = ratio(d.counter[SD_STAT_IPI_SENT], pages);
	st.counters["flushes_per_page"] = ratio(d.counter[SD_STAT_FLUSH], pages);
	st.counters["readers_throttled_per_run"] = (double)sh.throttled.load() / runs;
	st.counters["direct_reclaims_per_run"] = (double)sh.direct_reclaims.load() / runs;
	if (span_s > 0) {
		st.counters["elapsed_ms"] = span_s * 1e3 / runs;
		st.counters["flush_ipis_per_s"] = (double)d.counter[SD_STAT_REMOTE_INVAL_RECV] / span_s;
		st.counters["ipis_per_s"] = (double)d.counter[SD_STAT_IPI_SENT] / span_s;
	}
	st.counters["violations"] = (double)d.counter[SD_STAT_VIOLATION];
}

void BM_lru_file_mmap_read(State &st, unsigned batch, unsigned cpus)
{
	RunMachine rm(cpus, SD_ORACLE_DEFAULT, 1, 1, spec_of(kStrategy));
	LruShared sh;
	sd_stats d = SD_STATS_INIT;
	RunTimes times;

	if (!rm.ok(st))
		return;
	sh.batch = batch;
	sh.file_pages = kFilesPages / cpus;
	sh.readers.resize(cpus);
	if (int e = sd_waitq_create(rm.m(), "kswapd_wait", &sh.kswapd_wait)) {
		fail(st, "sd_waitq_create", e);
		return;
	}
	if (int e = sd_waitq_create(rm.m(), "throttle", &sh.throttle)) {
		fail(st, "sd_waitq_create", e);
		return;
	}
	if (int e = sd_waitq_create(rm.m(), "finish", &sh.finish)) {
		fail(st, "sd_waitq_create", e);
		return;
	}
	for (unsigned i = 0; i < cpus; i++) {
		sh.readers[i].sh = &sh;
		sh.readers[i].index = i;
	}
	auto create = [&](sd_machine *m, uint64_t) {
		// Each run reads new files from an empty cache; the last run's
		// files go with their readers' mms.
		for (Reader &r : sh.readers) {
			if (r.file)
				(void)sd_file_close(r.file);
			r.file = nullptr;
			r.pagevec.clear();
			if (int e = sd_file_create(m, sh.file_pages * SD_PAGE_SIZE, &r.file))
				return e;
		}
		sh.lru.clear();
		sh.cached.store(0);
		sh.readers_done.store(0);
		sh.kswapd_done.store(false);
		for (unsigned i = 0; i < cpus; i++) {
			sd_task_config tc = SD_TASK_CONFIG_INIT;
			tc.mm = rm.mm(0);
			tc.cpu = i;
			if (int e = sd_task_create(m, &tc, reader, &sh.readers[i], nullptr))
				return e;
		}
		sd_task_config kc = SD_TASK_CONFIG_INIT;
		kc.mm = rm.mm(0);
		return sd_task_create(m, &kc, kswapd, &sh, nullptr);
	};
	if (!run_task_batches(st, rm, create, 1, "lru_file_mmap_read run", &d, &times))
		return;
	if (sh.err.load()) {
		fail(st, "lru_file_mmap_read task", sh.err.load());
		return;
	}
	report_lru(st, d, sh);
	report_machine(st, rm.m());
}

void register_lru_file_mmap_read(Set set)
{
	if (set != Set::all)
		return;
	for (unsigned n : { 2u, 4u, 8u, 16u, 48u })
		for (unsigned b : { 0u, kSwapClusterMax })
			reg("lru_file_mmap_read/ipi:cpumask=eager/batch:" + std::to_string(b) + cpus_tail(n),
			    [b, n](State &st) { BM_lru_file_mmap_read(st, b, n); });
}

} // namespace

SD_BENCH_FAMILY(lru_file_mmap_read, 128, register_lru_file_mmap_read);

} // namespace sdbench
