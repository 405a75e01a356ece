/* SPDX-License-Identifier: MIT */
/*
 * Group tlb: TLB hits, walks and fills, in the emulator (host.json)
 * and in the kernel (a pointer chase through aliased pages; faults,
 * clearing and madvise sizes, host-kernel.json).
 */
#include "calibrate.h"

static volatile uint64_t sink;  /* keeps measured loads alive */

int host_tlb(void)
{
	struct emu e;
	struct sd_machine_info mi;
	struct emu_tlb r;
	int ret = -1;

	if (emu_open(&e, "ipi"))
		goto out;
	sd_machine_info(e.m, &mi);
	/* Four times the direct-mapped L1: every access evicts, and the
	 * pages (one per L2 set) all stay in the L2. */
	unsigned nr_seq = 4 * mi.tlb_l1_entries;

	if (nr_seq > 512 || nr_seq > mi.tlb_sets * mi.tlb_ways / 2) {
		fprintf(stderr, "sd-calibrate: L1 TLB of %u entries too large to calibrate\n",
			mi.tlb_l1_entries);
		goto out;
	}
	if (emu_map(&e, nr_seq))
		goto out;
	emu_tlb_measure(&e, nr_seq, &r);
	double spread_wc = emu_spread_wc_frac(&e);

	set(&host, P_TLB_L1_HIT, r.hit, "sd-calibrate --only tlb: median of %d runs of %ld "
	    "sd_access() reads of one page (L1 hits), CPU 0 alone", cal.reps, iters(200000));
	set(&host, P_TLB_L2_HIT, r.l2, "sd-calibrate --only tlb: median of %d runs of sd_access() "
	    "reads cycling over %u pages, 4x the %u-entry direct-mapped L1 (%.1f%% L2 hits "
	    "by the counters)", cal.reps, nr_seq, mi.tlb_l1_entries, 100 * r.l2_frac);
	/* A miss costs tlb_miss + levels x walk_level + tlb_fill: a full
	 * walk reads 4 levels, a walk-cache hit only the leaf. */
	double level = pos((r.full - r.wc) / 3);
	set(&host, P_TLB_MISS, r.l2, "sd-calibrate --only tlb: = tlb_l2_hit: the L1 probe and L2 "
	    "lookup a miss pays before its walk are those of an L2 hit (not separable through "
	    "the public API)");
	set(&host, P_WALK_LEVEL, level, "sd-calibrate --only tlb: (full - leaf) / 3, full = %.1f ns "
	    "per sd_access() after a flush, one page per 2 MiB region over %d regions (walk "
	    "cache used by %.0f%% of walks), leaf = %.1f ns per access of %u pages of one leaf "
	    "table after a flush (walk cache hit: leaf level only); medians of %d runs",
	    r.full, NR_SPREAD, 100 * spread_wc, r.wc, nr_seq, cal.reps);
	set(&host, P_TLB_FILL, r.wc - r.l2 - level, "sd-calibrate --only tlb: leaf - tlb_miss - "
	    "walk_level: what a walk-cache-hit miss costs beyond its lookup and its one level");
	set(&host, P_PAGE_FAULT_ENTRY, r.fault - r.wc, "sd-calibrate --only tlb: first touch (a read) "
	    "after sd_madvise_dontneed() of %u pages (%.1f ns an access) minus the same miss on "
	    "a populated page (leaf, %.1f ns): the populate (mm lock, the zero page's PTE set) "
	    "and the second walk", nr_seq, r.fault, r.wc);
	set(&host, P_PAGE_ALLOC, 0, "0: the emulator's write fault pops a frame from a per-CPU "
	    "cache, a few ns not measured apart");
	set(&host, P_PAGE_ZERO, 0, "0: the emulator's frames have no bytes to clear");
	set(&host, P_PAGE_COPY, 0, "0: the emulator's frames have no bytes to copy");
	set(&host, P_MEMCG_CHARGE, 0, "0: the emulator has no memory cgroups");
	set(&host, P_FILE_FAULT, 0, "0: the emulator's file fault (a lookup in its page index) "
	    "is in page_fault_entry's measurement of the populate, not measured apart");
	ret = 0;
out:
	emu_close(&e);
	return ret;
}

/*
 * A pointer chase (each load's address depends on the previous load) over
 * @nr_alias virtual aliases of ONE physical page, so the data is always in
 * the L1 data cache and only the TLB level changes with @nr_alias.
 */
static double chase_ns(const char *base, const uint32_t *idx, unsigned nr, long loads)
{
	uint64_t x = 0;
	double t0 = now_ns();

	for (long i = 0, j = 0; i < loads; i++) {
		x = *(const volatile uint64_t *)(base + idx[j] + x);
		if (++j == nr)
			j = 0;
	}
	double t = (now_ns() - t0) / (double)loads;

	sink += x;
	return t;
}

static double chase_median(const char *base, uint32_t *idx, unsigned nr)
{
	double v[64];
	long loads = iters(2000000);

	/* A random order over the aliases, one line of the page each. */
	for (unsigned i = 0; i < nr; i++)
		idx[i] = i * 4096 + (i % 64) * 64;
	for (unsigned i = nr - 1; i > 0; i--) {
		unsigned j = (unsigned)rand() % (i + 1);
		uint32_t t = idx[i];

		idx[i] = idx[j];
		idx[j] = t;
	}
	chase_ns(base, idx, nr, loads / 4);
	for (int r = 0; r < cal.reps; r++)
		v[r] = chase_ns(base, idx, nr, loads);
	return median(v, cal.reps);
}

#define NR_ALIAS 16384

static char *map_aliases(int fd, unsigned nr)
{
	char *base = mmap(NULL, (size_t)nr * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (base == MAP_FAILED)
		return NULL;
	for (unsigned i = 0; i < nr; i++) {
		if (mmap(base + (size_t)i * 4096, 4096, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0)
		    == MAP_FAILED) {
			munmap(base, (size_t)nr * 4096);
			return NULL;
		}
	}
	return base;
}

static int kern_tlb_chase(void)
{
	int fd = memfd_create("sd-calibrate", 0);
	uint32_t *idx = calloc(NR_ALIAS, sizeof(*idx));
	char *base = NULL;

	if (fd < 0 || !idx || ftruncate(fd, 4096) || !(base = map_aliases(fd, NR_ALIAS))) {
		sys_fail("aliases of one page (memfd_create, mmap)");
		free(idx);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	bind_self(cal.pu0);
	double l1 = chase_median(base, idx, 4);
	double l2 = chase_median(base, idx, 512);
	double miss = chase_median(base, idx, NR_ALIAS);

	unbind_self();
	munmap(base, (size_t)NR_ALIAS * 4096);
	close(fd);
	free(idx);
	set(&kern, P_TLB_L1_HIT, l1, "sd-calibrate --only tlb: median of %d runs of %ld dependent "
	    "loads over 4 virtual aliases of one physical page (L1 dTLB, L1d hits), PU %u",
	    cal.reps, iters(2000000), cal.pu0->os_index);
	set(&kern, P_TLB_L2_HIT, l2, "sd-calibrate --only tlb: the same over 512 aliases in random "
	    "order (beyond the L1 dTLB, within the STLB; the data stays in L1d)");
	set(&kern, P_TLB_MISS, l2, "sd-calibrate --only tlb: = tlb_l2_hit: a miss pays both "
	    "lookups and the load as an STLB hit does (the lookup alone is not separable)");
	set(&kern, P_WALK_LEVEL, (miss - l2) / 4, "sd-calibrate --only tlb: (%.1f ns a load over "
	    "%d aliases, beyond the STLB, minus tlb_l2_hit) / 4; the paging-structure caches skip "
	    "upper levels%s, so this is the average per level of the model's 4",
	    miss, NR_ALIAS, cal.hypervisor ? " and this guest's walks are two-dimensional (EPT/NPT)" : "");
	set(&kern, P_TLB_FILL, 0, "sd-calibrate --only tlb: 0: the hardware fills the TLB at the "
	    "end of the walk, within walk_level's measurement");
	return 0;
}

/* ns of madvise(MADV_DONTNEED) of @n pages; they are first written (untimed) if @touch. */
double madvise_ns(char *p, unsigned n, bool touch, bool prot)
{
	double v[256];
	int k = cal.quick ? 41 : 151;

	for (int i = -4; i < k; i++) {
		if (touch)
			for (unsigned j = 0; j < n; j++)
				p[(size_t)j * 4096] = 1;
		double t0 = now_ns();

		if (prot)
			mprotect(p, (size_t)n * 4096, PROT_READ);
		else
			madvise(p, (size_t)n * 4096, MADV_DONTNEED);
		double t1 = now_ns();

		if (prot)
			mprotect(p, (size_t)n * 4096, PROT_READ | PROT_WRITE);
		if (i >= 0)
			v[i] = t1 - t0 - clock_overhead();
	}
	return median(v, k);
}

/* A fault on a page just emptied by madvise(MADV_DONTNEED): a write
 * (a new zeroed page: allocation, clearing, memcg charge, rmap, LRU add) or
 * a read (the zero page mapped: none of that). */
static double fault_ns(char *p, bool write)
{
	double v[4096];
	int k = cal.quick ? 401 : 4001;

	for (int i = -50; i < k; i++) {
		madvise(p, 4096, MADV_DONTNEED);
		double t0 = now_ns();

		if (write)
			p[0] = 1;
		else
			(void)*(volatile char *)p;
		double t1 = now_ns();

		if (i >= 0)
			v[i] = t1 - t0 - clock_overhead();
	}
	return median(v, k);
}

/*
 * clear_page()'s work from user space: memset() of 4 KiB (glibc clears
 * 4 KiB with REP STOSB above its threshold, as clear_page_erms() does).
 * Hot: one page again and again, as a fault loop's new page is: the page
 * the last madvise freed comes back from the per-CPU free list (LIFO),
 * still in the cache. Cold: each page of a populated 128 MiB buffer once a
 * pass, as a stream of new pages is. Medians per page.
 */
static int clear_ns(double *hot, double *cold, double *copy)
{
	const size_t pages = 32768;     /* 128 MiB */
	char *b = mmap(NULL, pages * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	double vh[64], vc[64], vp[64];
	int reps = cal.quick ? 3 : 9;

	if (b == MAP_FAILED)
		return -1;
	memset(b, 1, pages * 4096);     /* populated: no fault in the timing */
	for (int r = 0; r < reps; r++) {
		double t0 = now_ns();

		for (size_t i = 0; i < pages; i++)
			memset(b, (int)i, 4096);
		double t1 = now_ns();

		for (size_t i = 0; i < pages; i++)
			memset(b + i * 4096, 0, 4096);
		double t2 = now_ns();

		/* copy_page()'s work on a cache-hot pair, as a copy-on-write
		 * break of a page just written copies it. */
		for (size_t i = 0; i < pages; i++)
			memcpy(b + 4096, b, 4096);
		vh[r] = (t1 - t0) / (double)pages;
		vc[r] = (t2 - t1) / (double)pages;
		vp[r] = (now_ns() - t2) / (double)pages;
	}
	munmap(b, pages * 4096);
	*hot = median(vh, reps);
	*cold = median(vc, reps);
	*copy = median(vp, reps);
	return 0;
}
void fit_sizes(char *p, const double *x, int n, bool prot, double *a, double *b)
{
	double y[8];

	for (int i = 0; i < n; i++)
		y[i] = madvise_ns(p, (unsigned)x[i], true, prot);
	fit(x, y, n, a, b);
}

/* A read fault of a page of a tmpfs file that stays in its page cache
 * (shmem: memfd_create()), just unmapped by madvise(MADV_DONTNEED): the
 * fault finds the cached page (shmem_fault()) and maps it. 0 on failure. */
static double file_fault_ns(void)
{
	int fd = memfd_create("sd-calibrate", 0);
	double ns = 0;

	if (fd < 0)
		return 0;
	if (!ftruncate(fd, 4096)) {
		char *f = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

		if (f != MAP_FAILED) {
			f[0] = 1;               /* in the cache, never to leave it */
			ns = fault_ns(f, false);
			munmap(f, 4096);
		}
	}
	close(fd);
	return ns;
}

static int kern_tlb(void)
{
	char *p = mmap(NULL, 512 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return sys_fail("mmap");
	bind_self(cal.pu0);
	double fw = fault_ns(p, true), fr = fault_ns(p, false), z = 0, zc = 0, cp = 0;
	double ff = file_fault_ns();
	double md = madvise_ns(p, 1, true, false);
	int cerr = clear_ns(&z, &zc, &cp);

	unbind_self();
	munmap(p, 512 * 4096);
	if (cerr)
		return sys_fail("mmap");
	set(&kern, P_PAGE_FAULT_ENTRY, fr, "sd-calibrate --only tlb: median of %d reads of a private "
	    "anonymous page just emptied by madvise(MADV_DONTNEED), the madvise not timed "
	    "(%.1f ns): exception entry and exit, the fault handler, the zero page mapped",
	    cal.quick ? 401 : 4001, md);
	set(&kern, P_PAGE_ZERO, z, "sd-calibrate --only tlb: median per page of memset() of one "
	    "4 KiB page again and again (REP STOSB, as clear_page_erms()): cache-hot, as a fault "
	    "loop's new page is, the page just freed coming back from the per-CPU free list; a "
	    "stream of cold pages took %.1f ns a page", zc);
	set(&kern, P_PAGE_ALLOC, pos(fw - fr - z), "sd-calibrate --only tlb: a write fault of the "
	    "same page (%.1f ns) minus the read fault (%.1f ns) minus page_zero: the page's "
	    "allocation, its memcg charge (where the process is in a memory cgroup), rmap and "
	    "counters, and the LRU batch add", fw, fr);
	set(&kern, P_PAGE_COPY, cp, "sd-calibrate --only tlb: median per page of memcpy() of a "
	    "cache-hot 4 KiB page to another (REP MOVSB, as copy_page()'s)");
	set(&kern, P_MEMCG_CHARGE, 0, "not measured apart: the charge is in page_alloc (a user-space "
	    "timer cannot isolate it)");
	set(&kern, P_FILE_FAULT, pos(ff - fr), "sd-calibrate --only tlb: median read fault of a "
	    "cached page of a tmpfs file (memfd_create(), MAP_SHARED) just unmapped by "
	    "madvise(MADV_DONTNEED) (%.1f ns) minus that of the private page (page_fault_entry): "
	    "shmem_fault()'s page-cache lookup, the folio's lock and reference, the file rmap", ff);
	return kern_tlb_chase();
}
int group_tlb(void)
{
	return host_tlb() || kern_tlb() ? -1 : 0;
}
