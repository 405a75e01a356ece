/* SPDX-License-Identifier: MIT */
/*
 * Group mm: address spaces and page tables: map and unmap cycles,
 * mm creation (fork minus vfork) in the emulator and the kernel.
 */
#include "calibrate.h"

/* ---- address spaces and page tables ---- */

#define VA_FAR UINT64_C(0x80000000)     /* its own 1 GiB: a PMD and a PTE table */

/* ns of @n (sd_mmap + sd_access) and, separately, of @n sd_munmap, of one
 * page at @va. */
static void emu_map_cycle(struct emu *e, uint64_t va, long n, double *map, double *unmap)
{
	double tm = 0, tu = 0;

	for (long i = 0; i < n; i++) {
		double t0 = now_ns();

		sd_mmap(e->cpu, e->mm, va, PAGE, SD_PROT_READ | SD_PROT_WRITE);
		sd_access(e->cpu, va, SD_WRITE, NULL);
		double t1 = now_ns();

		sd_munmap(e->cpu, e->mm, va, PAGE);
		tu += now_ns() - t1;
		tm += t1 - t0;
	}
	*map = tm / (double)n;
	*unmap = tu / (double)n;
}
int host_mm(void)
{
	enum { K = 256 };
	struct sd_mm *mms[K];
	struct emu e;
	double vc[64], vd[64], am[64], au[64], nm[64], nu[64];
	long n = iters(20000);
	int ret = -1;

	if (emu_open(&e, "broadcast") || emu_map(&e, 1))
		goto out;
	for (int r = -1; r < cal.reps; r++) {
		double tc = 0, td = 0;

		for (long b = 0; b < n / K + 1; b++) {
			double t0 = now_ns();

			for (int i = 0; i < K; i++)
				if (sd_mm_create(e.m, &mms[i])) {
					lib_fail("sd_mm_create", -ENOMEM);
					goto out;
				}
			double t1 = now_ns();

			for (int i = 0; i < K; i++)
				sd_mm_destroy(mms[i]);
			td += now_ns() - t1;
			tc += t1 - t0;
		}
		if (r >= 0) {
			vc[r] = tc / (double)((n / K + 1) * K);
			vd[r] = td / (double)((n / K + 1) * K);
		}
	}
	/* One page in a 1 GiB region of its own (its PMD and PTE tables are
	 * linked by the mmap and unlinked by the munmap) against one beside
	 * the mapped VA_HIT page (no table either way); both are touched, so
	 * both munmaps flush. */
	for (int r = -1; r < cal.reps; r++) {
		double a, b, c, d;

		emu_map_cycle(&e, VA_FAR, n / 4, &a, &b);
		emu_map_cycle(&e, VA_HIT + PAGE, n / 4, &c, &d);
		if (r >= 0) {
			am[r] = a, au[r] = b, nm[r] = c, nu[r] = d;
		}
	}
	double far_m = median(am, cal.reps), far_u = median(au, cal.reps);
	double near_m = median(nm, cal.reps), near_u = median(nu, cal.reps);

	set(&host, P_MM_CREATE, median(vc, cal.reps), "sd-calibrate --only mm: median of %d runs "
	    "of sd_mm_create() in batches of %d (strategy broadcast, oracle off, 1 CPU "
	    "attached): the mm, its top-level table, the strategy's mm_init", cal.reps, K);
	set(&host, P_MM_DESTROY, median(vd, cal.reps), "sd-calibrate --only mm: median of %d "
	    "runs of sd_mm_destroy() of those never-loaded, empty mms (no lazy CPU to shoot, no "
	    "table below the top level, no frame)", cal.reps);
	set(&host, P_PT_ALLOC, (far_m - near_m) / 2, "sd-calibrate --only mm: (sd_mmap + first "
	    "touch of 1 page in a 1 GiB region of its own, %.1f ns, which links a PMD and a PTE "
	    "table) minus (the same beside a mapped page, %.1f ns, no table), / 2; medians of "
	    "%d x %ld", far_m, near_m, cal.reps, n / 4);
	set(&host, P_PT_FREE, (far_u - near_u) / 2, "sd-calibrate --only mm: (sd_munmap of that "
	    "touched page, %.1f ns, which unlinks both tables) minus (sd_munmap beside a mapped "
	    "page, %.1f ns), / 2; both flush", far_u, near_u);
	ret = 0;
out:
	emu_close(&e);
	return ret;
}

/* ns of @n (mmap + touch) and, separately, of @n munmap of one page at @p. */
static void kern_map_cycle(char *p, long n, double *map, double *unmap)
{
	double tm = 0, tu = 0;

	for (long i = 0; i < n; i++) {
		double t0 = now_ns();
		char *q = mmap(p, PAGE, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

		if (q == MAP_FAILED)
			return;
		*(volatile char *)q = 1;
		double t1 = now_ns();

		munmap(q, PAGE);
		tu += now_ns() - t1;
		tm += t1 - t0;
	}
	*map = tm / (double)n;
	*unmap = tu / (double)n;
}

/* A 1 GiB-aligned address with 1 GiB free on either side, or NULL. */
static char *free_gib(void)
{
	const uintptr_t gib = UINT64_C(1) << 30;

	for (uintptr_t a = UINT64_C(64) << 30; a < (UINT64_C(120) << 40); a += 7 * gib) {
		void *q = mmap((void *)(a - gib), 3 * gib, PROT_NONE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
			       -1, 0);
		if (q == MAP_FAILED)
			continue;
		munmap(q, 3 * gib);
		return (char *)a;
	}
	return NULL;
}
double fork_ns(bool use_vfork, long n)
{
	/* volatile: vfork() returns twice in this frame. */
	volatile double t0 = now_ns();

	for (volatile long i = 0; i < n; i++) {
		pid_t pid = use_vfork ? vfork() : fork();

		if (pid == 0)
			_exit(0);
		if (pid < 0)
			return -1;
		waitpid(pid, NULL, 0);
	}
	return (now_ns() - t0) / (double)n;
}

static int kern_mm(void)
{
	double am[64], au[64], nm[64], nu[64], vf[64], vv[64];
	long n = iters(20000), nf = iters(2000);
	char *near = mmap(NULL, 2 * REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			  -1, 0), *far = free_gib();

	if (near == MAP_FAILED)
		return sys_fail("mmap");
	if (!far) {
		munmap(near, 2 * REGION);
		fprintf(stderr, "sd-calibrate: no free 3 GiB of address space\n");
		return -1;
	}
	/* A page kept mapped and touched in a 2 MiB-aligned region: the
	 * page beside it needs no table. */
	char *base = (char *)(((uintptr_t)near + REGION - 1) & ~(uintptr_t)(REGION - 1));

	munmap(base + PAGE, PAGE);
	base[0] = 1;
	bind_self(cal.pu0);
	for (int r = -1; r < cal.reps; r++) {
		double a = 0, b = 0, c = 0, d = 0;

		kern_map_cycle(far, n / 4, &a, &b);
		kern_map_cycle(base + PAGE, n / 4, &c, &d);
		if (r >= 0) {
			am[r] = a, au[r] = b, nm[r] = c, nu[r] = d;
			vf[r] = fork_ns(false, nf / 4);
			vv[r] = fork_ns(true, nf / 4);
		}
	}
	unbind_self();
	munmap(near, 2 * REGION);
	double far_m = median(am, cal.reps), far_u = median(au, cal.reps);
	double near_m = median(nm, cal.reps), near_u = median(nu, cal.reps);
	double f = median(vf, cal.reps), v = median(vv, cal.reps);

	set(&kern, P_PT_ALLOC, (far_m - near_m) / 2, "sd-calibrate --only mm: (mmap + first "
	    "touch of 1 page in an otherwise empty 3 GiB, %.1f ns: the fault allocates a PMD and a "
	    "PTE table) minus (the same beside a touched page, %.1f ns), / 2; medians of %d x %ld",
	    far_m, near_m, cal.reps, n / 4);
	set(&kern, P_PT_FREE, (far_u - near_u) / 2, "sd-calibrate --only mm: (munmap of that "
	    "page, %.1f ns: free_pgtables frees both tables) minus (munmap beside a touched page, "
	    "%.1f ns), / 2", far_u, near_u);
	set(&kern, P_MM_CREATE, pos(f - v) / 2, "sd-calibrate --only mm: half of fork()+_exit()+"
	    "waitpid() (%.1f ns) minus the same with vfork() (%.1f ns, the mm shared): mm_alloc, "
	    "pgd_alloc, and dup_mmap of sd-calibrate's own VMAs (so an upper bound for a fresh "
	    "mm), split evenly with mm_destroy (not separable); medians of %d x %ld", f, v,
	    cal.reps, nf / 4);
	set(&kern, P_MM_DESTROY, pos(f - v) / 2, "sd-calibrate --only mm: the other half of "
	    "fork() minus vfork() (see mm_create): exit_mmap and pgd_free of the child's copy");
	return 0;
}
int group_mm(void)
{
	return host_mm() || kern_mm() ? -1 : 0;
}
