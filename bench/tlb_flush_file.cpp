// SPDX-License-Identifier: MIT
//
// will-it-scale tlb_flush1 and tlb_flush3: tlb_flush2's loop over a file
// instead of anonymous memory, each task with a file of its own, mapped
// private (tlb_flush1) or shared (tlb_flush3). Names:
// <workload>/<strategy spec>/cpus:<n>.
//
//   tlb_flush{1,3}_threads/{ipi,gbcast,broadcast,local}/cpus:{1,2,4,8}
//                                 threads of one mm, each its own file
//   tlb_flush{1,3}_processes/ipi/cpus:{1,2,4,8}
//                                 every CPU its own mm
//   tlb_flush{1,3}_threads/native/cpus:N
//                                 real mmap of a real file (native.cpp)
//
// Not in the main job: what they add to tlb_flush2 is the file's fault
// path, and their published numbers (will-it-scale's runs in LKP reports)
// are not on a machine this repository has a profile of.
#include "common.hpp"

#include <shootdown/file.h>

#include <vector>

namespace sdbench {
namespace {

// will-it-scale tests/tlb_flush1.c and tests/tlb_flush3.c (antonblanchard/
// will-it-scale at 75f66e4):
//
//	fd = mkstemp(tmpfile); ftruncate(fd, FILESIZE); unlink(tmpfile);
//	while (1) {
//		addr = mmap(NULL, FILESIZE, PROT_READ|PROT_WRITE,
//			    MAP_PRIVATE (1) or MAP_SHARED (3), fd, 0);
//		for (i = 0; i < FILESIZE; i += pgsize) {
//			*(addr + i) = 1;
//			madvise(addr + i, pgsize, MADV_DONTNEED);
//			assert(*(addr + i) == 0 (1) or 1 (3));
//			(*iteration)++;
//		}
//		munmap(addr, FILESIZE);
//	}
//
// with FILESIZE 128 MiB, a file per task (testcase() runs in each). In
// tlb_flush1 the write copies the file's page into a private one
// (do_cow_fault()), the madvise frees that copy, and the read maps the
// file's page again (the assert reads the file's 0); in tlb_flush3 the
// write, the madvise and the read all touch the file's own page, which
// stays in the page cache. One loop is one flush either way. The file
// here is a tmpfs one (file.h), which needs no write notification. A read
// fault maps up to 15 cached neighbours too (do_fault_around()).
//
// A loop's position in its file carries over from one timed batch to the
// next, so a pass is the file's 32768 pages as in the source, its munmap
// and mmap once a pass; an untimed first pass reads the file in.
constexpr uint64_t kFilePages = (128u << 20) / SD_PAGE_SIZE;
constexpr uint64_t kFileBatch = 1024;

// The files' region, a 128 MiB slot per CPU above RunMachine's page.
inline uint64_t file_region(unsigned id)
{
	return kRegion + (UINT64_C(1) << 30) + (uint64_t)id * kFilePages * SD_PAGE_SIZE;
}

struct FileArg : RunArg {
	bool shared = false;
	std::vector<sd_file *> files;           // one per CPU
	std::vector<uint64_t> pos;              // the next page of each CPU's pass
	std::vector<char> mapped;               // each CPU's file mapped now

	~FileArg()
	{
		for (sd_file *f : files)
			if (f)
				(void)sd_file_close(f);
	}
};

void tlb_flush_file_body(sd_cpu *c, void *p)
{
	auto *r = static_cast<FileArg *>(p);
	const unsigned id = sd_cpu_id(c);
	sd_mm *mm = r->rm->mm(id);
	const uint64_t base = file_region(id);
	const uint64_t len = kFilePages * SD_PAGE_SIZE;
	const unsigned flags = r->shared ? SD_MAP_SHARED : SD_MAP_PRIVATE;
	int err = sd_switch_mm(c, mm);

	for (uint64_t i = 0; !err && i < r->count; i++) {
		uint64_t &pos = r->pos[id];
		if (pos == kFilePages && r->mapped[id]) {
			err = sd_munmap(c, mm, base, len);
			r->mapped[id] = 0;
			pos = 0;
		}
		if (!err && !r->mapped[id]) {
			err = sd_mmap_file(c, mm, base, len, SD_PROT_READ | SD_PROT_WRITE, flags,
					   r->files[id], 0);
			r->mapped[id] = !err;
		}
		if (!err)
			err = write_dontneed_read(c, mm, base + pos * SD_PAGE_SIZE);
		pos++;
	}
	int serr = sd_switch_mm(c, nullptr);
	note_error(r, err ? err : serr);
}

void BM_tlb_flush_file(State &st, const char *strategy, unsigned cpus, bool shared,
		       bool processes)
{
	RunMachine rm(cpus, SD_ORACLE_OFF, processes ? cpus : 1, 1, spec_of(strategy));
	FileArg arg;
	sd_stats d = SD_STATS_INIT;
	RunTimes times;

	if (!rm.ok(st))
		return;
	arg.shared = shared;
	arg.pos.assign(cpus, 0);
	arg.mapped.assign(cpus, 0);
	arg.files.assign(cpus, nullptr);
	for (auto &f : arg.files) {
		if (int err = sd_file_create(rm.m(), kFilePages * SD_PAGE_SIZE, &f)) {
			fail(st, "sd_file_create", err);
			return;
		}
	}
	// An untimed first pass: it reads each file into its page cache (the
	// source's files start empty), so the timed loops see what will-it-
	// scale's seconds-long runs mostly see, a cached file, where a read
	// fault maps its cached neighbours too (fault-around).
	arg.rm = &rm;
	arg.count = kFilePages;
	if (int err = sd_machine_run(rm.m(), tlb_flush_file_body, &arg); err || arg.err.load()) {
		fail(st, "tlb_flush_file warm-up", err ? err : arg.err.load());
		return;
	}
	if (!run_batches(st, rm, tlb_flush_file_body, kFileBatch, "tlb_flush_file run", &d, &arg,
			 &times))
		return;
	const double wall = times.wall_s;
	const double loops = (double)st.iterations() * cpus;
	const uint64_t flushes = d.counter[SD_STAT_FLUSH];
	st.counters["pu_share"] = times.pu_share;
	report_machine(st, rm.m());
	report_ipi_common(st, d);
	st.counters["loops_per_s"] = wall > 0 ? loops / wall : 0;
	st.counters["loops_per_s_per_thread"] = wall > 0 ? loops / wall / cpus : 0;
	st.counters["flushes_per_loop"] = ratio(flushes, loops);
	// With the file cached, a read fault maps its 16-page window: in
	// tlb_flush3 the next 15 writes hit (tmpfs maps them writable), so
	// about 1 + 1/16 faults a loop; in tlb_flush1 each of them is a write-
	// protect fault that copies the page and flushes the read-only entry
	// (wp_page_copy()): about 2 faults and 2 flushes a loop.
	st.counters["page_faults_per_loop"] = ratio(d.counter[SD_STAT_PAGE_FAULT], loops);
	st.counters["wp_faults_per_loop"] = ratio(d.counter[SD_STAT_WP_FAULT], loops);
	st.counters["fault_around_pages_per_loop"] = ratio(d.counter[SD_STAT_FAULT_AROUND], loops);
	st.counters["remote_invalidations_per_flush"] = ratio(d.counter[SD_STAT_REMOTE_INVAL], flushes);
	uint64_t cached = 0;
	for (sd_file *f : arg.files)
		cached += sd_file_cached_pages(f);
	st.counters["file_pages_cached"] = (double)cached;
}

void reg_file(const char *workload, const char *strategy, unsigned n, bool shared,
	      bool processes)
{
	reg(std::string(workload) + "/" + strategy + cpus_tail(n),
	    [strategy, n, shared, processes](State &st) {
		    BM_tlb_flush_file(st, strategy, n, shared, processes);
	    });
}

void register_tlb_flush_file(Set set)
{
	if (set != Set::all)
		return;
	static const char *const threads[] = { "ipi", "gbcast", "broadcast", "local" };
	for (unsigned n : { 1u, 2u, 4u, 8u }) {
		for (const char *s : threads) {
			reg_file("tlb_flush1_threads", s, n, false, false);
			reg_file("tlb_flush3_threads", s, n, true, false);
		}
		reg_file("tlb_flush1_processes", "ipi", n, false, true);
		reg_file("tlb_flush3_processes", "ipi", n, true, true);
		reg("tlb_flush1_threads/native" + cpus_tail(n),
		    [n](State &st) { native::BM_tlb_flush_file(st, n, false); });
		reg("tlb_flush3_threads/native" + cpus_tail(n),
		    [n](State &st) { native::BM_tlb_flush_file(st, n, true); });
	}
}

} // namespace

SD_BENCH_FAMILY(tlb_flush_file, 125, register_tlb_flush_file);

} // namespace sdbench
