/* SPDX-License-Identifier: MIT */
/*
 * Group flush: local flushes and mapping changes, in the emulator
 * and in the kernel (mprotect and madvise fitted against their size).
 */
#include "calibrate.h"

/* ---- local flushes and mapping changes on one emulated CPU ---- */

static double emu_flush_ns(struct emu *e, unsigned pages, long n)
{
	double t0 = now_ns();

	for (long i = 0; i < n; i++)
		sd_flush_tlb_range(e->cpu, e->mm, VA_SEQ, pages * PAGE);
	return (now_ns() - t0) / (double)n;
}

/* One mprotect, averaged over a write-protect and its undoing. */
static double emu_mprotect_ns(struct emu *e, unsigned pages, long n)
{
	double t0 = now_ns();

	for (long i = 0; i < n; i++) {
		sd_mprotect(e->cpu, e->mm, VA_SEQ, pages * PAGE, SD_PROT_READ);
		sd_mprotect(e->cpu, e->mm, VA_SEQ, pages * PAGE, SD_PROT_READ | SD_PROT_WRITE);
	}
	return (now_ns() - t0) / (2.0 * (double)n);
}

/* One madvise of populated pages; the repopulation is not timed. */
static double emu_madvise_ns(struct emu *e, unsigned pages, long n)
{
	double sum = 0;

	for (long i = 0; i < n; i++) {
		for (unsigned p = 0; p < pages; p++)
			sd_access(e->cpu, VA_SEQ + p * PAGE, SD_WRITE, NULL);
		double t0 = now_ns();

		sd_madvise_dontneed(e->cpu, e->mm, VA_SEQ, pages * PAGE);
		sum += now_ns() - t0 - clock_overhead();
	}
	return sum / (double)n;
}

typedef double (*emu_op_fn)(struct emu *e, unsigned pages, long n);

static double emu_median(struct emu *e, emu_op_fn fn, unsigned pages, long n)
{
	double v[64];

	fn(e, pages, n / 4 + 1);        /* warm-up */
	for (int r = 0; r < cal.reps; r++)
		v[r] = fn(e, pages, n);
	return median(v, cal.reps);
}
int host_flush(void)
{
	static const double sizes[] = { 1, 4, 8, 16, 32 };
	double t[5], fa, fb, mp1, mp32, md1, md32;
	struct emu e = { 0 };
	int ret = -1;
	long n = iters(20000);

	/* A whole-ASID flush (64 pages, see local_flush_asid below) on a machine with a small TLB (the
	 * switch-heavy benchmarks' 16 x 8 + 16): the emulator's flush is a
	 * scan of every entry, so two sizes give its fixed part and its
	 * per-entry part. */
	struct emu es;
	double asid_small = -1;
	unsigned small = 16 + 16 * 8;

	emu_geom.sets = 16;
	emu_geom.ways = 8;
	emu_geom.l1 = 16;
	if (!emu_open(&es, "ipi") && !emu_map(&es, 64))
		asid_small = emu_median(&es, emu_flush_ns, 64, n);
	emu_close(&es);
	memset(&emu_geom, 0, sizeof(emu_geom));
	if (emu_open(&e, "ipi") || emu_map(&e, 64))
		goto out;
	for (int i = 0; i < 5; i++)
		t[i] = emu_median(&e, emu_flush_ns, (unsigned)sizes[i], n);
	fit(sizes, t, 5, &fa, &fb);
	double asid = emu_median(&e, emu_flush_ns, 64, n);
	struct sd_machine_info mi;

	sd_machine_info(e.m, &mi);
	unsigned big = mi.tlb_l1_entries + mi.tlb_sets * mi.tlb_ways;
	if (asid_small < 0)
		goto out;
	double scan = pos((asid - asid_small) / (double)(big - small));
	double asid0 = pos(asid - scan * big);

	mp1 = emu_median(&e, emu_mprotect_ns, 1, n / 2);
	mp32 = emu_median(&e, emu_mprotect_ns, 32, n / 8);
	md1 = emu_median(&e, emu_madvise_ns, 1, n / 4);
	md32 = emu_median(&e, emu_madvise_ns, 32, n / 16);
	double mps = (mp32 - mp1) / 31, mds = (md32 - md1) / 31;

	set(&host, P_LOCAL_FLUSH_PAGE, t[0], "sd-calibrate --only flush: median of %d x %ld "
	    "sd_flush_tlb_range() of 1 page, strategy ipi on a 1-CPU machine (the whole call: "
	    "the strategy's decision and the local invalidation)", cal.reps, n);
	set(&host, P_LOCAL_FLUSH_RANGE, fa, "sd-calibrate --only flush: intercept of a least-squares "
	    "fit of sd_flush_tlb_range() over 1, 4, 8, 16, 32 pages (ipi, 1 CPU, per-page "
	    "invalidation below the 33-page ceiling); medians of %d x %ld", cal.reps, n);
	set(&host, P_LOCAL_FLUSH_RANGE_PAGE, fb, "sd-calibrate --only flush: slope of the same fit "
	    "(%.1f ns for 1 page, %.1f ns for 32)", t[0], t[4]);
	set(&host, P_LOCAL_FLUSH_ASID, asid0, "sd-calibrate --only flush: fixed part of "
	    "sd_flush_tlb_range() of 64 pages (above ipi's 33-page ceiling: a whole-ASID "
	    "invalidation, a scan of both TLB levels), 1 CPU, medians of %d x %ld: %.1f ns with "
	    "a %u-entry TLB minus %u x tlb_scan_entry", cal.reps, n, asid, big, big);
	set(&host, P_TLB_SCAN_ENTRY, scan, "sd-calibrate --only flush: (%.1f - %.1f ns) / "
	    "(%u - %u entries): the same 64-page sd_flush_tlb_range() with the default TLB and "
	    "with a 16 x 8 + 16 one (lib/hw/tlb.c scans every entry)", asid, asid_small, big,
	    small);
	set(&host, P_LOCAL_FLUSH_ALL, asid0, "sd-calibrate --only flush: = local_flush_asid: the "
	    "emulator's invalidate-all and invalidate-ASID are the same scan of both TLB levels "
	    "(lib/hw/tlb.c, + tlb_scan_entry per entry); invalidate-all is only reached by an "
	    "ASID rollover");
	set(&host, P_PTE_UPDATE, mps - fb, "sd-calibrate --only flush: per-page slope of "
	    "sd_mprotect() 1 -> 32 pages (%.1f -> %.1f ns, R <-> RW, 1 CPU) minus the flush's "
	    "per-page slope", mp1, mp32);
	/* The library call's own path (argument checks, the mm lock, the
	 * page-table walk of the range, flush_pending, the oracle's floors):
	 * what a real kernel spends between entry and exit besides the PTE
	 * write and the flush, so the emulator's "system call" costs it. */
	double call = pos(mp1 - (mps - fb) - t[0]) / 2;

	set(&host, P_SYSCALL_ENTRY, call, "sd-calibrate --only flush: half of what one "
	    "sd_mprotect() of 1 page (%.1f ns, ipi, 1 CPU) costs beyond its charged events "
	    "(pte_update and the 1-page flush, local_flush_page): the library call's own path "
	    "(checks, mm lock, range walk, flush bookkeeping)", mp1);
	set(&host, P_SYSCALL_EXIT, call, "sd-calibrate --only flush: the other half (see "
	    "syscall_entry)");
	set(&host, P_VMA_CHANGE, 0, "0: the emulator's VMA list (mm/vma.c) is part of its "
	    "mapping calls' own path, which is in syscall_entry and syscall_exit");
	set(&host, P_VMA_SPLIT, 0, "0: not measured apart; the emulator's split is in its "
	    "mapping call's own path (syscall_entry, syscall_exit)");
	set(&host, P_VMA_MERGE, 0, "0: not measured apart; the emulator's merge is in its "
	    "mapping call's own path (syscall_entry, syscall_exit)");
	set(&host, P_MADVISE_ZAP, 0, "0: the emulator's madvise walk is part of its mapping "
	    "call's own path (syscall_entry, syscall_exit)");
	set(&host, P_PIPE_MESSAGE, 0, "0: the emulator passes no messages; a workload that does "
	    "measures its own");
	set(&host, P_LRU_PAGE, 0, "0: the emulator keeps no LRU lists; under its LRU lock it "
	    "bumps one counter, which the lock's own charges cover");
	set(&host, P_PAGE_FREE, mds - mps, "sd-calibrate --only flush: per-page slope of "
	    "sd_madvise_dontneed() of 1 -> 32 populated pages (%.1f -> %.1f ns) minus that of "
	    "sd_mprotect() (the PTE write and flush both have)", md1, md32);
	ret = 0;
out:
	emu_close(&e);
	return ret;
}

/*
 * A VMA of @n written pages between two PROT_NONE guard pages, so that an
 * mprotect of all of it neither splits it nor merges it with a neighbour:
 * the mprotect-threaded benchmark's call (QI Fuli's program mprotects its
 * whole buffer). Returns its first page, or NULL; unmap @n + 2 pages from
 * one page below it.
 */
static char *guarded_vma(unsigned n)
{
	char *g = mmap(NULL, ((size_t)n + 2) * 4096, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (g == MAP_FAILED)
		return NULL;
	if (mprotect(g, 4096, PROT_NONE) ||
	    mprotect(g + ((size_t)n + 1) * 4096, 4096, PROT_NONE)) {
		munmap(g, ((size_t)n + 2) * 4096);
		return NULL;
	}
	return g + 4096;
}

/* Median of an mprotect of all @n pages at @p, averaged over read-only and
 * back to read-write, as the program alternates them. */
static double mprotect_pair_ns(char *p, unsigned n)
{
	double v[256];
	int k = cal.quick ? 41 : 151;

	for (int i = -4; i < k; i++) {
		double t0 = now_ns();

		mprotect(p, (size_t)n * 4096, PROT_READ);
		mprotect(p, (size_t)n * 4096, PROT_READ | PROT_WRITE);
		if (i >= 0)
			v[i] = (now_ns() - t0 - clock_overhead()) / 2;
	}
	return median(v, k);
}

/* Fit an mprotect of a whole guarded VMA of x[i] pages, written once
 * before the first call, as mprotect_pair_ns() times it: intercept @a (the
 * call, the VMA's change, a full flush on the way to read-only; noisy, as
 * the slope's noise carries into it) and per-page slope @b (the PTE
 * writes). */
static int fit_whole_vma(const double *x, int n, double *a, double *b)
{
	double y[8];

	for (int i = 0; i < n; i++) {
		char *p = guarded_vma((unsigned)x[i]);

		if (!p)
			return sys_fail("mmap");
		/* Written once, as the program writes its buffer once: the
		 * calls that follow touch no page in between. */
		memset(p, 1, (size_t)x[i] * 4096);
		y[i] = mprotect_pair_ns(p, (unsigned)x[i]);
		munmap(p - 4096, ((size_t)x[i] + 2) * 4096);
	}
	fit(x, y, n, a, b);
	return 0;
}

/* Medians of mprotect(RW -> R) of the one written page in the middle of a
 * guarded 3-page VMA (@split: the VMA split in three) and of the call back
 * to RW (@merge: the three merged back into one). */
static int split_merge_ns(double *split, double *merge)
{
	double vs[256], vm[256];
	int k = cal.quick ? 41 : 151;
	char *p = guarded_vma(3);

	if (!p)
		return sys_fail("mmap");
	for (int i = -4; i < k; i++) {
		p[4096] = 1;
		double t0 = now_ns();

		mprotect(p + 4096, 4096, PROT_READ);
		double t1 = now_ns();

		mprotect(p + 4096, 4096, PROT_READ | PROT_WRITE);
		double t2 = now_ns();

		if (i >= 0) {
			vs[i] = t1 - t0 - clock_overhead();
			vm[i] = t2 - t1 - clock_overhead();
		}
	}
	munmap(p - 4096, 5 * 4096);
	*split = median(vs, k);
	*merge = median(vm, k);
	return 0;
}

static int kern_flush(void)
{
	static const double small[] = { 1, 4, 8, 16, 32 }, large[] = { 64, 128, 256, 512 };
	static const double whole[] = { 64, 128, 256, 512, 1024 };
	char *p = mmap(NULL, 512 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	double cs, ss, cl, sl, wa, wb, split, merge, sys = syscall_ns();

	if (p == MAP_FAILED)
		return sys_fail("mmap");
	bind_self(cal.pu0);
	double one = madvise_ns(p, 1, true, false), none = madvise_ns(p, 1, false, false);

	fit_sizes(p, small, 5, false, &cs, &ss);
	fit_sizes(p, large, 4, false, &cl, &sl);
	char *lone = guarded_vma(1);
	int err = !lone || fit_whole_vma(whole, 5, &wa, &wb) || split_merge_ns(&split, &merge);
	double pair1 = 0;

	if (lone) {
		lone[0] = 1;
		pair1 = mprotect_pair_ns(lone, 1);
		munmap(lone - 4096, 3 * 4096);
	}
	unbind_self();
	munmap(p, 512 * 4096);
	if (err)
		return lone ? -1 : sys_fail("mmap");
	/* Besides a VMA's change, a one-page mprotect is the system call,
	 * one PTE, and on the way to read-only a one-page range flush: x86's
	 * pte_needs_flush() skips the flush of a write-enable. The fit over
	 * 64-1024 pages gives the PTE's slope; its intercept would carry that
	 * slope's noise, so the change comes from a one-page VMA. */
	const double flush1 = pos(cs - none) + pos(ss - sl);
	const double change = pos(pair1 - sys - wb - flush1 / 2);
	/* A madvise that finds nothing mapped is the call's own work alone
	 * (madvise_zap); a page more is its PTE, its free and the INVLPG. */
	set(&kern, P_MADVISE_ZAP, pos(none - sys), "sd-calibrate --only flush: median "
	    "madvise(MADV_DONTNEED) of a page with nothing mapped (%.1f ns) minus getppid() "
	    "(%.1f ns): madvise_lock(), the VMA walk, the mmu_gather's setup and teardown, the "
	    "notifiers, with no PTE, no free and no flush", none, sys);
	set(&kern, P_LOCAL_FLUSH_PAGE, pos(one - none - sl), "sd-calibrate --only flush: median "
	    "madvise(MADV_DONTNEED) of one written private page (%.1f ns) minus that of a page "
	    "with nothing mapped (madvise_zap's call) and minus the per-page slope over 64-512 "
	    "pages (%.1f ns: the PTE cleared and the page freed, no INVLPG): the INVLPG", one,
	    sl);
	set(&kern, P_LOCAL_FLUSH_RANGE_PAGE, ss - sl, "sd-calibrate --only flush: per-page slope of "
	    "madvise(DONTNEED) over 1-32 written pages (%.1f ns, one INVLPG a page: below "
	    "tlb_single_page_flush_ceiling, 33) minus that over 64-512 pages (%.1f ns, one full "
	    "flush)", ss, sl);
	set(&kern, P_LOCAL_FLUSH_RANGE, cs - none, "sd-calibrate --only flush: intercept of that "
	    "fit over 1-32 pages (%.1f ns) minus madvise(DONTNEED) of a page with nothing mapped "
	    "(%.1f ns, no flush): the range flush's fixed part", cs, none);
	set(&kern, P_LOCAL_FLUSH_ASID, cl - cs, "sd-calibrate --only flush: intercept of the fit "
	    "over 64-512 pages (%.1f ns, one full flush of the PCID) minus that over 1-32 pages "
	    "(no full flush); the TLB refill afterwards is not included", cl);
	set(&kern, P_LOCAL_FLUSH_ALL, cl - cs, "sd-calibrate --only flush: = local_flush_asid: "
	    "user space reaches no other full flush (x86 with PCID flushes the current PCID)");
	set(&kern, P_TLB_SCAN_ENTRY, 0, "0 by construction: a hardware whole-PCID invalidation "
	    "(INVPCID single-context, a CR3 write without NOFLUSH) is no software scan; its cost "
	    "is local_flush_asid whatever the TLB's size");
	set(&kern, P_PTE_UPDATE, wb, "sd-calibrate --only flush: per-page slope of mprotect of a "
	    "whole VMA of 64-1024 pages between PROT_NONE guard pages, written once before, "
	    "averaged over read-only and back (one full flush at most, no split: only the PTE "
	    "writes grow)");
	set(&kern, P_VMA_CHANGE, change, "sd-calibrate --only flush: median mprotect of a whole "
	    "one-page VMA between guard pages, averaged over read-only and back (%.1f ns: the "
	    "mprotect-threaded benchmark's call on one page: no split, no merge), minus getppid() "
	    "(%.1f ns), one pte_update and half a one-page range flush (local_flush_range + "
	    "local_flush_range_page, %.1f ns: x86 flushes on the way to read-only only)", pair1,
	    sys, flush1);
	set(&kern, P_VMA_SPLIT, pos(split - sys - wb - flush1 - change) / 2, "sd-calibrate --only "
	    "flush: half of (median mprotect(RW -> R) of the written middle page of a guarded "
	    "3-page VMA, %.1f ns: the VMA split in three) minus getppid(), pte_update, the one-page "
	    "range flush and vma_change", split);
	set(&kern, P_VMA_MERGE, pos(merge - sys - wb - change) / 2, "sd-calibrate --only flush: "
	    "half of (median mprotect back to RW of that page, %.1f ns: the three VMAs merged into "
	    "one; no flush for a write-enable) minus getppid(), pte_update and vma_change", merge);
	set(&kern, P_PAGE_FREE, pos(sl - wb), "sd-calibrate --only flush: per-page slope of "
	    "madvise(DONTNEED) over 64-512 pages (%.1f ns) minus that of mprotect (pte_update, "
	    "%.1f ns): the freeing of the page", sl, wb);
	return 0;
}
int group_flush(void)
{
	return host_flush() || kern_flush() ? -1 : 0;
}
