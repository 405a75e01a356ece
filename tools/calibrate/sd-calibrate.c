/* SPDX-License-Identifier: MIT */
/*
 * sd-calibrate: measure this machine and write two modelled-time profiles.
 *
 *   host.json         what the emulator's own events cost here, measured
 *                     through the public API, so that a workload's modelled
 *                     time under this profile can be checked against its
 *                     real time (the model's self-consistency check);
 *   host-kernel.json  what the real Linux kernel's primitives cost here,
 *                     for predicting native-kernel runs.
 *
 * Every value is a median over repetitions, after a warm-up, with the
 * measuring threads pinned by hwloc. Where an event cannot be isolated the
 * smallest operation containing it is measured and the "source" string of
 * the value says how it was derived. The parameter list is the library's
 * own (lib/time/params.h), so no key can be forgotten here.
 *
 * Usage: sd-calibrate [-o DIR] [--only GROUP[,GROUP]] [--quick] [--print]
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>
#include <linux/membarrier.h>

#include <hwloc.h>
#include <json-c/json.h>
#include <shootdown/shootdown.h>

#include "time/params.h"

/* ---- the parameter tables, from the library's one list ---- */

enum param {
#define P_ENUM(id, key, what) P_##id,
	SD_MODEL_PARAM_LIST(P_ENUM)
#undef P_ENUM
	P_NR
};

enum dparam {
#define D_ENUM(id, key, what) D_##id,
	SD_MODEL_DIST_PARAM_LIST(D_ENUM)
#undef D_ENUM
	D_NR
};

#define P_KEY(id, key, what) key,
static const char *const param_key[P_NR] = { SD_MODEL_PARAM_LIST(P_KEY) };
static const char *const dparam_key[D_NR] = { SD_MODEL_DIST_PARAM_LIST(P_KEY) };
#undef P_KEY
static const char *const dist_key[] = SD_MODEL_DIST_KEYS;
#define NR_DIST ((int)(sizeof(dist_key) / sizeof(dist_key[0])))

enum { DIST_CORE, DIST_LLC, DIST_PACKAGE, DIST_SYSTEM };

struct cost {
	double ns;
	char src[448];
	bool set;
};

/* The profile's "mechanisms", in enum sd_mechanism's bit order: a
 * mechanism is named only once a group measured its costs here. */
#define NR_MECH 3
static const char *const mech_key[NR_MECH] = { "ipi", "tlbi_broadcast", "invlpgb" };

struct profile {
	const char *name;
	struct cost c[P_NR];
	struct cost d[D_NR][4];
	const char *mech_source[NR_MECH];   /* NULL: not in the profile */
};

static struct profile host = { .name = "host" };
static struct profile kern = { .name = "host-kernel" };

/* ---- run-wide settings ---- */

static struct {
	int reps;               /* medians over this many timed repetitions */
	double scale;           /* iteration counts are multiplied by this */
	bool quick;
	hwloc_topology_t topo;
	hwloc_obj_t pu0, pu1;   /* the pair the two-CPU measurements use */
	int pair_class;         /* distance class of pu0, pu1 */
	bool hypervisor;
	bool has_invlpgb;
} cal;

static volatile uint64_t sink;  /* keeps measured loads alive */

/*
 * The profile the emulated machines run under: none in the first pass; in
 * the second, the first pass's host profile, so that what the emulator's
 * events cost includes charging them to a modelled clock. A workload run
 * with --sd_profile=host pays that too, and self-consistency compares
 * its modelled time with that real time.
 */
static char emu_profile[4200];
static bool emu_profile_writing;        /* the first pass's profile: not reported */

static const char *const group_names[] = {
	"lines", "tlb", "flush", "switch", "trap", "syscall", "ipi", "bcast", "mm",
};
#define NR_GROUPS (sizeof(group_names) / sizeof(group_names[0]))

/* ---- small helpers ---- */

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static long iters(long n)
{
	long k = (long)((double)n * cal.scale);

	return k < 16 ? 16 : k;
}

static double pos(double v)
{
	return v > 0 && isfinite(v) ? v : 0;
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static void vset(struct cost *c, double ns, const char *fmt, va_list ap)
{
	c->ns = pos(ns);
	int n = vsnprintf(c->src, sizeof(c->src), fmt, ap);

	if (emu_profile[0] && n > 0 && (size_t)n < sizeof(c->src))
		snprintf(c->src + n, sizeof(c->src) - (size_t)n, "; second pass, modelling on");
	c->set = true;
}

__attribute__((format(printf, 4, 5)))
static void set(struct profile *p, enum param k, double ns, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vset(&p->c[k], ns, fmt, ap);
	va_end(ap);
}

__attribute__((format(printf, 5, 6)))
static void dset(struct profile *p, enum dparam k, int dist, double ns, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vset(&p->d[k][dist], ns, fmt, ap);
	va_end(ap);
}

static int sd_fail(const char *what, int err)
{
	fprintf(stderr, "sd-calibrate: %s: %s (%s)\n", what, sd_strerror(err), sd_last_error());
	return -1;
}

static int sys_fail(const char *what)
{
	fprintf(stderr, "sd-calibrate: %s: %s\n", what, strerror(errno));
	return -1;
}

/* Evaluate an sd_* call; on error report it and leave the function. */
#define TRY(expr) do { int err_ = (expr); if (err_) return sd_fail(#expr, err_); } while (0)

/* Linear fit y = a + b x by least squares (fixed part and per-unit part). */
static void fit(const double *x, const double *y, int n, double *a, double *b)
{
	double sx = 0, sy = 0, sxx = 0, sxy = 0;

	for (int i = 0; i < n; i++) {
		sx += x[i];
		sy += y[i];
		sxx += x[i] * x[i];
		sxy += x[i] * y[i];
	}
	*b = (n * sxy - sx * sy) / (n * sxx - sx * sx);
	*a = (sy - *b * sx) / n;
}

/* The cost of reading the clock itself, subtracted from single-op timings. */
static double clock_overhead(void)
{
	static double co = -1;
	double v[101];

	if (co >= 0)
		return co;
	for (int i = 0; i < 101; i++) {
		double t0 = now_ns();

		v[i] = now_ns() - t0;
	}
	co = median(v, 101);
	return co;
}

/*
 * Wait for *v to reach @want, spinning, at most @secs seconds: every wait
 * in the calibrator is bounded, so a peer that never runs is an error
 * message, not a hang.
 */
static int spin_until(atomic_int *v, int want, double secs)
{
	double deadline = now_ns() + secs * 1e9;

	for (unsigned i = 0; atomic_load_explicit(v, memory_order_acquire) < want; i++) {
		cpu_relax();
		if (!(i & 1023) && now_ns() > deadline)
			return -1;
	}
	return 0;
}

/* The other side of a request flag: wait until it was cleared. */
static int spin_until_zero(atomic_int *v, double secs)
{
	double deadline = now_ns() + secs * 1e9;

	for (unsigned i = 0; atomic_load_explicit(v, memory_order_acquire); i++) {
		cpu_relax();
		if (!(i & 1023) && now_ns() > deadline)
			return -1;
	}
	return 0;
}

/* ---- pinning ---- */

static int bind_self(hwloc_obj_t pu)
{
	if (hwloc_set_cpubind(cal.topo, pu->cpuset, HWLOC_CPUBIND_THREAD) < 0)
		return sys_fail("hwloc_set_cpubind");
	return 0;
}

static void unbind_self(void)
{
	hwloc_set_cpubind(cal.topo, hwloc_topology_get_allowed_cpuset(cal.topo),
			  HWLOC_CPUBIND_THREAD);
}

/* The last-level cache above @pu: the cache ancestor nearest the root. */
static hwloc_obj_t llc_of(hwloc_obj_t pu)
{
	hwloc_obj_t llc = NULL;

	for (hwloc_obj_t o = pu->parent; o; o = o->parent)
		if (hwloc_obj_type_is_cache(o->type))
			llc = o;
	return llc;
}

static hwloc_obj_t ancestor(hwloc_obj_t pu, hwloc_obj_type_t t)
{
	return hwloc_get_ancestor_obj_by_type(cal.topo, t, pu);
}

static int distance_class(hwloc_obj_t a, hwloc_obj_t b)
{
	hwloc_obj_t llc = llc_of(a);

	if (ancestor(a, HWLOC_OBJ_CORE) && ancestor(a, HWLOC_OBJ_CORE) == ancestor(b, HWLOC_OBJ_CORE))
		return DIST_CORE;
	if (llc && hwloc_bitmap_isset(llc->cpuset, (unsigned)b->os_index))
		return DIST_LLC;
	if (ancestor(a, HWLOC_OBJ_PACKAGE) && ancestor(a, HWLOC_OBJ_PACKAGE) == ancestor(b, HWLOC_OBJ_PACKAGE))
		return DIST_PACKAGE;
	return DIST_SYSTEM;
}

/* For each class, the first PU (from PU 0) at that distance, or NULL. */
static void class_partners(hwloc_obj_t partner[4])
{
	int n = hwloc_get_nbobjs_by_type(cal.topo, HWLOC_OBJ_PU);
	hwloc_obj_t pu0 = hwloc_get_obj_by_type(cal.topo, HWLOC_OBJ_PU, 0);

	for (int d = 0; d < 4; d++)
		partner[d] = NULL;
	for (int i = 1; i < n; i++) {
		hwloc_obj_t pu = hwloc_get_obj_by_type(cal.topo, HWLOC_OBJ_PU, (unsigned)i);
		int d = distance_class(pu0, pu);

		if (!partner[d])
			partner[d] = pu;
	}
}

/* ---- the emulator on one CPU (the calling thread attached) ---- */

#define VA_HIT    UINT64_C(0x10000000)
#define VA_SEQ    UINT64_C(0x20000000)    /* 2 MiB aligned: one leaf table */
#define VA_SPREAD UINT64_C(0x40000000)    /* one page per 2 MiB region */
#define REGION    (UINT64_C(1) << 21)
#define NR_SPREAD 64
#define PAGE      SD_PAGE_SIZE

struct emu {
	struct sd_machine *m;
	struct sd_cpu *cpu;
	struct sd_mm *mm;
};

/* The TLB geometry the next emu_create() gives its machine (0: the default). */
static struct { unsigned sets, ways, l1; } emu_geom;


static int emu_create(struct sd_machine **m, const char *strategy, unsigned nr_cpus)
{
	struct sd_machine_config cfg = SD_MACHINE_CONFIG_INIT;

	cfg.tlb_sets = emu_geom.sets;
	cfg.tlb_ways = emu_geom.ways;
	cfg.tlb_l1_entries = emu_geom.l1;
	unsigned pus[2] = { cal.pu0->os_index, cal.pu1 ? cal.pu1->os_index : cal.pu0->os_index };

	cfg.nr_cpus = nr_cpus;
	cfg.strategy = strategy;
	cfg.profile = emu_profile[0] ? emu_profile : NULL;
	cfg.placement = SD_PLACE_LIST;
	cfg.pu_list = pus;
	cfg.pu_list_len = 2;
	/* The oracle's checks take the hit path off its fast path: measure
	 * the emulator as a workload runs it, whatever SD_ORACLE says. */
	cfg.oracle = SD_ORACLE_OFF;
	/* The second pass measures the emulator with modelling on: a
	 * profile from --only names only the mechanisms it measured, and
	 * what is measured here is the emulator's speed, not that machine. */
	if (cfg.profile)
		cfg.flags |= SD_MACHINE_ANY_MECHANISM;
	TRY(sd_machine_create(&cfg, m));
	return 0;
}

static int emu_open(struct emu *e, const char *strategy)
{
	memset(e, 0, sizeof(*e));
	if (emu_create(&e->m, strategy, 1))
		return -1;
	TRY(sd_cpu_attach(e->m, 0, &e->cpu));
	TRY(sd_mm_create(e->m, &e->mm));
	TRY(sd_switch_mm(e->cpu, e->mm));
	return 0;
}

static void emu_close(struct emu *e)
{
	if (e->cpu) {
		sd_switch_mm(e->cpu, NULL);
		if (e->mm)
			sd_mm_destroy(e->mm);
		sd_cpu_detach(e->cpu);
	}
	if (e->m)
		sd_machine_destroy(e->m);
}

static uint64_t stat_of(const struct emu *e, enum sd_stat id)
{
	struct sd_stats s = SD_STATS_INIT;

	sd_stats_cpu(e->m, 0, &s);
	return s.counter[id];
}

/* Map the three access patterns' pages and populate them. */
static int emu_map(struct emu *e, unsigned nr_seq)
{
	TRY(sd_mmap(e->cpu, e->mm, VA_HIT, PAGE, SD_PROT_READ | SD_PROT_WRITE));
	TRY(sd_mmap(e->cpu, e->mm, VA_SEQ, nr_seq * PAGE, SD_PROT_READ | SD_PROT_WRITE));
	for (uint64_t i = 0; i < NR_SPREAD; i++)
		TRY(sd_mmap(e->cpu, e->mm, VA_SPREAD + i * REGION, PAGE,
			    SD_PROT_READ | SD_PROT_WRITE));
	TRY(sd_access(e->cpu, VA_HIT, SD_WRITE, NULL));
	for (uint64_t i = 0; i < nr_seq; i++)
		TRY(sd_access(e->cpu, VA_SEQ + i * PAGE, SD_WRITE, NULL));
	for (uint64_t i = 0; i < NR_SPREAD; i++)
		TRY(sd_access(e->cpu, VA_SPREAD + i * REGION, SD_WRITE, NULL));
	return 0;
}

/* ns per access of @n accesses to pages @va, @va + @stride, ..., @passes times. */
static double emu_loop(struct emu *e, uint64_t va, uint64_t stride, unsigned n, long passes)
{
	double t0 = now_ns();

	for (long p = 0; p < passes; p++)
		for (unsigned i = 0; i < n; i++)
			sd_access(e->cpu, va + i * stride, SD_READ, NULL);
	return (now_ns() - t0) / ((double)n * (double)passes);
}

/* ns for one pass over @n pages right after a flush of them (the flush untimed). */
static double emu_cold_pass(struct emu *e, uint64_t va, uint64_t stride, unsigned n, bool drop)
{
	uint64_t len = (n - 1) * stride + PAGE;

	if (drop)
		sd_madvise_dontneed(e->cpu, e->mm, va, len);
	else
		sd_flush_tlb_range(e->cpu, e->mm, va, len);
	return emu_loop(e, va, stride, n, 1) * n;
}

struct emu_tlb {
	double hit, l2, full, wc, fault;
	double l2_frac;         /* share of the L2 pattern's accesses counted as L2 hits */
};

static void emu_tlb_measure(struct emu *e, unsigned nr_seq, struct emu_tlb *out)
{
	int reps = cal.reps;
	double v[5][64];
	long n = iters(200000);

	emu_loop(e, VA_HIT, 0, 1, n);   /* warm-up */
	uint64_t l2_0 = stat_of(e, SD_STAT_TLB_L2_HIT);

	for (int r = 0; r < reps; r++) {
		v[0][r] = emu_loop(e, VA_HIT, 0, 1, n);
		v[1][r] = emu_loop(e, VA_SEQ, PAGE, nr_seq, n / nr_seq);
	}
	out->l2_frac = (double)(stat_of(e, SD_STAT_TLB_L2_HIT) - l2_0) /
		     ((double)reps * (double)(n / nr_seq) * nr_seq);
	for (int r = 0; r < reps; r++) {
		double full = 0, wc = 0, fault = 0;
		int k = 8;

		for (int i = 0; i < k; i++) {
			full += emu_cold_pass(e, VA_SPREAD, REGION, NR_SPREAD, false) / NR_SPREAD;
			wc += emu_cold_pass(e, VA_SEQ, PAGE, nr_seq, false);
			fault += emu_cold_pass(e, VA_SEQ, PAGE, nr_seq, true);
		}
		v[2][r] = full / k;
		/* The first access of the sequential pass walked all 4 levels. */
		v[3][r] = (wc / k - v[2][r]) / (nr_seq - 1);
		v[4][r] = (fault / k - v[2][r]) / (nr_seq - 1);
	}
	out->hit = median(v[0], reps);
	out->l2 = median(v[1], reps);
	out->full = median(v[2], reps);
	out->wc = median(v[3], reps);
	out->fault = median(v[4], reps);
}

/* The spread pattern, counted once: walks that used the walk cache. */
static double emu_spread_wc_frac(struct emu *e)
{
	uint64_t wc0 = stat_of(e, SD_STAT_WALK_CACHE_HIT), pw0 = stat_of(e, SD_STAT_PAGE_WALK);

	emu_cold_pass(e, VA_SPREAD, REGION, NR_SPREAD, false);
	uint64_t pw = stat_of(e, SD_STAT_PAGE_WALK) - pw0;

	return pw ? (double)(stat_of(e, SD_STAT_WALK_CACHE_HIT) - wc0) / (double)pw : 0;
}

static int host_tlb(void)
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
	ret = 0;
out:
	emu_close(&e);
	return ret;
}

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

static int host_flush(void)
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

/* ---- tasks (task.h): the emulator's scheduler ---- */

/* Two tasks on one CPU pass a turn through two wait queues: each turn is
 * one sd_task_wake() of a sleeper and one switch between host threads. */
struct host_pp {
	struct sd_waitq *q[2];
	atomic_uint turn;
	long turns;
	double wake_ns;          /* summed over task 0's wakes */
	long wakes;
};

struct host_player {
	struct host_pp *pp;
	unsigned me;
};

static bool host_turn_is(void *arg)
{
	struct host_player *p = arg;

	return atomic_load(&p->pp->turn) == p->me;
}

static void host_player(struct sd_task *self, void *arg)
{
	struct host_player *p = arg;
	struct host_pp *pp = p->pp;

	for (long i = 0; i < pp->turns; i++) {
		if (sd_task_wait(self, pp->q[p->me], host_turn_is, p))
			return;
		atomic_store(&pp->turn, 1 - p->me);
		double t0 = now_ns();

		sd_task_wake(self, pp->q[1 - p->me], 1);
		if (p->me == 0 && i) {
			pp->wake_ns += now_ns() - t0;
			pp->wakes++;
		}
	}
}

/* One run of @turns turns each: ns per turn (a wake and a switch), and
 * the mean of task 0's sd_task_wake() of a waiting task in *@wake. */
static double host_pp_run(long turns, double *wake)
{
	struct sd_machine *m = NULL;
	struct sd_mm *mm = NULL;
	struct host_pp pp = { .turns = turns };
	struct host_player pl[2] = { { &pp, 0 }, { &pp, 1 } };
	struct sd_task_config cfg = SD_TASK_CONFIG_INIT;
	double t = -1;

	atomic_init(&pp.turn, 0);
	if (emu_create(&m, "ipi", 1) || sd_mm_create(m, &mm) ||
	    sd_waitq_create(m, "ping", &pp.q[0]) || sd_waitq_create(m, "pong", &pp.q[1]))
		goto out;
	cfg.mm = mm;
	if (sd_task_create(m, &cfg, host_player, &pl[0], NULL) ||
	    sd_task_create(m, &cfg, host_player, &pl[1], NULL))
		goto out;
	double t0 = now_ns();

	if (sd_sched_run(m))
		goto out;
	t = (now_ns() - t0) / (2.0 * (double)turns);
	*wake = pp.wakes ? pp.wake_ns / (double)pp.wakes : 0;
out:
	if (t < 0)
		fprintf(stderr, "sd-calibrate: tasks: %s\n", sd_last_error());
	if (pp.q[0])
		sd_waitq_destroy(pp.q[0]);
	if (pp.q[1])
		sd_waitq_destroy(pp.q[1]);
	if (mm)
		sd_mm_destroy(mm);
	if (m)
		sd_machine_destroy(m);
	return t;
}

static void host_nop_task(struct sd_task *self, void *arg)
{
	(void)self;
	(void)arg;
}

struct host_forker {
	long n, done;
	double fork_ns, mm_fork_ns;
};

/* sd_task_fork() of an empty mm against sd_mm_fork() of one: the task's
 * own part (its thread's creation, its queueing). */
static void host_forker(struct sd_task *self, void *arg)
{
	struct host_forker *f = arg;
	struct sd_cpu *c = sd_task_cpu(self);
	struct sd_mm *child;

	for (long i = 0; i < f->n; i++) {
		double t0 = now_ns();

		if (sd_mm_fork(c, sd_task_mm(self), &child)) {
			fprintf(stderr, "sd-calibrate: sd_mm_fork: %s\n", sd_last_error());
			return;
		}
		f->mm_fork_ns += now_ns() - t0;
		sd_mm_destroy(child);
		t0 = now_ns();
		if (sd_task_fork(self, host_nop_task, NULL, NULL)) {
			fprintf(stderr, "sd-calibrate: sd_task_fork: %s\n", sd_last_error());
			return;
		}
		f->fork_ns += now_ns() - t0;
		f->done++;
		sd_task_yield(self);    /* the child runs and returns */
	}
}

static int host_sched(void)
{
	double v[64], w[64], wake = 0;
	long n = iters(20000);
	struct sd_machine *m = NULL;
	struct sd_mm *mm = NULL;
	struct host_forker f = { .n = iters(200) };
	struct sd_task_config cfg = SD_TASK_CONFIG_INIT;

	for (int r = -1; r < cal.reps; r++) {
		double t = host_pp_run(n, &wake);

		if (t < 0)
			return -1;
		if (r >= 0) {
			v[r] = t;
			w[r] = wake;
		}
	}
	double turn = median(v, cal.reps), wk = median(w, cal.reps);

	set(&host, P_SCHED_WAKEUP, wk, "sd-calibrate --only switch: median of %d runs of the mean "
	    "sd_task_wake() of a waiting task by a task on the same CPU, %ld turns, 1 CPU, "
	    "strategy ipi: the wait queue, try_to_wake_up() and the run-queue lock", cal.reps, n);
	set(&host, P_SCHED_SWITCH, turn - wk, "sd-calibrate --only switch: median of %d x %ld "
	    "turns of two tasks passing a turn through two wait queues on 1 CPU (%.1f ns a "
	    "turn), minus its wakeup: __schedule() and the hand-over of the CPU between two host "
	    "threads (a futex wake and a futex wait)", cal.reps, 2 * n, turn);
	set(&host, P_SCHED_MIGRATE, wk, "not measured apart: a migration here is the same "
	    "dequeue and enqueue under run-queue locks as a wakeup's, taken as sched_wakeup");
	set(&host, P_SCHED_BALANCE_INTERVAL, 4000000, "the library's default without a model "
	    "(task.h): 4 ms of the CPU's time");
	if (emu_create(&m, "ipi", 1) || sd_mm_create(m, &mm))
		goto fail;
	cfg.mm = mm;
	if (sd_task_create(m, &cfg, host_forker, &f, NULL) || sd_sched_run(m) || f.done != f.n)
		goto fail;
	sd_mm_destroy(mm);
	sd_machine_destroy(m);
	set(&host, P_TASK_FORK, pos(f.fork_ns / (double)f.n - f.mm_fork_ns / (double)f.n),
	    "sd-calibrate --only switch: mean of %ld sd_task_fork() of an empty mm (%.1f ns) "
	    "minus sd_mm_fork() of one (%.1f ns), 1 CPU: the task's part (its host thread's "
	    "creation, its queueing)", f.n, f.fork_ns / (double)f.n, f.mm_fork_ns / (double)f.n);
	return 0;
fail:
	fprintf(stderr, "sd-calibrate: tasks: %s\n", sd_last_error());
	if (mm)
		sd_mm_destroy(mm);
	if (m)
		sd_machine_destroy(m);
	return -1;
}

/* ---- context switch and traps ---- */

static int host_switch(void)
{
	struct emu e;
	struct sd_mm *mm2 = NULL;
	double v[64];
	long n = iters(200000);
	int ret = -1;

	if (emu_open(&e, "ipi") || emu_map(&e, 1))
		goto out;
	if (sd_mm_create(e.m, &mm2)) {
		sd_fail("sd_mm_create", -ENOMEM);
		goto out;
	}
	for (int r = -1; r < cal.reps; r++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++) {
			sd_switch_mm(e.cpu, mm2);
			sd_switch_mm(e.cpu, e.mm);
		}
		if (r >= 0)
			v[r] = (now_ns() - t0) / (2.0 * (double)n);
	}
	set(&host, P_CONTEXT_SWITCH, median(v, cal.reps), "sd-calibrate --only switch: median of "
	    "%d x %ld sd_switch_mm() alternating between two mms, 1 CPU, strategy ipi: the "
	    "x86 switch_mm_irqs_off() bookkeeping (loaded_mm, the mm_cpumask bits, the "
	    "tlb_gen check, the PCID slots) on top of what every strategy's switch does; "
	    "an arm64 ASID switch costs less in this emulator", cal.reps, 2 * n);
	ret = 0;
out:
	if (mm2) {
		sd_switch_mm(e.cpu, e.mm);
		sd_mm_destroy(mm2);
	}
	emu_close(&e);
	return ret;
}

static int host_trap(void)
{
	struct emu e;
	double v[64];
	long n = iters(200000);
	int ret = -1;

	if (emu_open(&e, "broadcast"))
		goto out;
	for (int r = -1; r < cal.reps; r++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++)
			sd_trap(e.cpu, SD_ID_AA64ISAR0_EL1(0));
		if (r >= 0)
			v[r] = (now_ns() - t0) / (double)n;
	}
	double t = median(v, cal.reps);

	set(&host, P_TRAP_ENTRY, t / 2, "sd-calibrate --only trap: half the median of %d x %ld "
	    "sd_trap(MRS ID_AA64ISAR0_EL1) round trips (entry, direct dispatch, emulation, "
	    "return), split evenly: entry and return are not separable", cal.reps, n);
	set(&host, P_TRAP_EXIT, t / 2, "sd-calibrate --only trap: the other half of the same "
	    "round trip");
	ret = 0;
out:
	emu_close(&e);
	return ret;
}

/* ---- host primitives shared by both profiles ---- */

static double syscall_ns(void)
{
	static double t = -1;
	double v[64];
	long n = iters(500000);

	if (t >= 0)
		return t;
	for (int r = -1; r < cal.reps; r++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++)
			syscall(SYS_getppid);
		if (r >= 0)
			v[r] = (now_ns() - t0) / (double)n;
	}
	return t = median(v, cal.reps);
}

static atomic_int raw_signals;

static void raw_handler(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)si;
	(void)uc;
	atomic_fetch_add_explicit(&raw_signals, 1, memory_order_release);
}

/* Our own signal, apart from the library's (SIGRTMIN+4 by default). */
static int raw_signo(void)
{
	return SIGRTMIN + 6;
}

static void raw_install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = raw_handler;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(raw_signo(), &sa, NULL);
}

/* A signal sent to oneself and handled: delivery entry plus sigreturn. */
static double self_signal_ns(void)
{
	static double t = -1;
	double v[64];
	long n = iters(100000);
	pid_t pid = getpid(), tid = gettid();

	if (t >= 0)
		return t;
	raw_install();
	for (int r = -1; r < cal.reps; r++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++)
			syscall(SYS_tgkill, pid, tid, raw_signo());
		if (r >= 0)
			v[r] = (now_ns() - t0) / (double)n;
	}
	return t = median(v, cal.reps);
}

/* ---- cache-line and lock ping-pong between two pinned threads ---- */

struct pingpong {
	_Alignas(64) atomic_int turn;
	atomic_int lock;
	hwloc_obj_t pu[2];
	long rounds;
	bool use_lock;
	atomic_int started;
	int err;
	double ns;
};

static void pp_lock(atomic_int *l)
{
	while (atomic_exchange_explicit(l, 1, memory_order_acquire))
		while (atomic_load_explicit(l, memory_order_relaxed))
			cpu_relax();
}

/*
 * Side @me (0 or 1) waits for its turn and passes it on. With use_lock each
 * pass takes the lock (last released by the other side) and updates the
 * turn under it: a lock handoff. Without, the turn's line alone moves.
 */
static int pp_side(struct pingpong *pp, int me)
{
	double deadline = now_ns() + 10e9;

	for (long i = 0; i < pp->rounds; i++) {
		int want = (int)(2 * i + me);

		for (unsigned k = 0; atomic_load_explicit(&pp->turn, memory_order_acquire) != want; k++) {
			cpu_relax();
			if (!(k & 4095) && now_ns() > deadline)
				return -1;
		}
		if (pp->use_lock) {
			pp_lock(&pp->lock);
			atomic_store_explicit(&pp->turn, want + 1, memory_order_relaxed);
			atomic_store_explicit(&pp->lock, 0, memory_order_release);
		} else {
			atomic_store_explicit(&pp->turn, want + 1, memory_order_release);
		}
	}
	return 0;
}

static void *pp_thread(void *arg)
{
	struct pingpong *pp = arg;

	if (bind_self(pp->pu[1]))
		pp->err = -1;
	atomic_store(&pp->started, 1);
	if (!pp->err && pp_side(pp, 1))
		pp->err = -1;
	return NULL;
}

/* ns per one-way pass between pu[0] and pu[1]: a round trip is two. */
static int pingpong_ns(hwloc_obj_t a, hwloc_obj_t b, bool use_lock, long rounds, double *ns)
{
	struct pingpong pp = { .pu = { a, b }, .rounds = rounds, .use_lock = use_lock };
	pthread_t th;

	if (bind_self(a))
		return -1;
	if (pthread_create(&th, NULL, pp_thread, &pp))
		return sys_fail("pthread_create");
	int err = spin_until(&pp.started, 1, 5);
	double t0 = now_ns();

	if (!err && !pp.err)
		err = pp_side(&pp, 0);
	double t1 = now_ns();

	pthread_join(th, NULL);
	unbind_self();
	if (err || pp.err) {
		fprintf(stderr, "sd-calibrate: ping-pong between PU %u and PU %u timed out\n",
			a->os_index, b->os_index);
		return -1;
	}
	*ns = (t1 - t0) / (2.0 * (double)rounds);
	return 0;
}

#define PP_BATCH 2000    /* round trips a batch */

/*
 * The median over many short batches: on a shared or virtual machine a
 * thread preempted mid-run inflates one batch's mean, not the median.
 */
static int pingpong_median(hwloc_obj_t a, hwloc_obj_t b, bool use_lock, double *ns)
{
	int nr = cal.quick ? 15 : 61;
	double v[64], w;

	if (pingpong_ns(a, b, use_lock, PP_BATCH, &w))
		return -1;
	for (int r = 0; r < nr; r++)
		if (pingpong_ns(a, b, use_lock, PP_BATCH, &v[r]))
			return -1;
	*ns = median(v, nr);
	return 0;
}

static double pair_line_ns = -1;        /* line_transfer of (pu0, pu1) */

static const char *const pp_what[D_NR] = {
	"a cache-line ping-pong (one atomic int, acquire/release) between two threads",
	"a spinlock ping-pong (xchg lock; the turn is passed under the lock) between two threads",
};

static int measure_dist(enum dparam k, hwloc_obj_t partner[4])
{
	hwloc_obj_t pu0 = hwloc_get_obj_by_type(cal.topo, HWLOC_OBJ_PU, 0);
	int nearest = -1;
	double val[4];

	for (int d = 0; d < 4; d++) {
		if (!partner[d])
			continue;
		if (pingpong_median(pu0, partner[d], k == D_LOCK_HANDOFF, &val[d]))
			return -1;
		for (int p = 0; p < 2; p++)
			dset(p ? &kern : &host, k, d, val[d], "sd-calibrate --only lines: median of "
			     "%d batches of %d round trips of %s pinned on PU %u and PU %u (%s), "
			     "per one-way pass%s", cal.quick ? 15 : 61, PP_BATCH, pp_what[k],
			     pu0->os_index,
			     partner[d]->os_index, dist_key[d], p ? "" : "; the emulator's "
			     "lines and locks are the host's own");
		if (k == D_LINE_TRANSFER && partner[d] == cal.pu1)
			pair_line_ns = val[d];
	}
	for (int d = 0; d < 4; d++) {
		if (partner[d])
			continue;
		/* The nearest measured class: first farther, then nearer. */
		nearest = -1;
		for (int s = 1; s < 4 && nearest < 0; s++) {
			if (d + s < 4 && partner[d + s])
				nearest = d + s;
			else if (d - s >= 0 && partner[d - s])
				nearest = d - s;
		}
		for (int p = 0; p < 2; p++) {
			if (nearest < 0)
				dset(p ? &kern : &host, k, d, 0, "not present on this machine (one "
				     "PU): no pair to measure; 0");
			else
				dset(p ? &kern : &host, k, d, val[nearest], "not present on this "
				     "machine; copied from %s", dist_key[nearest]);
		}
	}
	return 0;
}

/* An uncontended acquire and release on one thread: the lock's line stays here. */
static double lock_pair_ns(void)
{
	atomic_int l = 0;
	double v[64];
	long n = iters(2000000);

	for (int r = -1; r < cal.reps; r++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++) {
			pp_lock(&l);
			atomic_store_explicit(&l, 0, memory_order_release);
		}
		if (r >= 0)
			v[r] = (now_ns() - t0) / (double)n;
	}
	return median(v, cal.reps);
}

static int group_lines(void)
{
	hwloc_obj_t partner[4];

	class_partners(partner);
	if (measure_dist(D_LINE_TRANSFER, partner) || measure_dist(D_LOCK_HANDOFF, partner))
		return -1;
	double lk = lock_pair_ns();

	for (struct profile *p = &host; p; p = p == &host ? &kern : NULL)
		set(p, P_LOCK_ACQUIRE, lk, "sd-calibrate --only lines: median of %d x %ld "
		    "uncontended acquire (atomic exchange) and release (store-release) pairs of "
		    "a test-and-set lock on one thread, the shape of lib/core/spinlock.c's and of "
		    "an uncontended queued spinlock's fast path", cal.reps, iters(2000000));
	return 0;
}

static double line_ns(void)
{
	hwloc_obj_t pu0 = hwloc_get_obj_by_type(cal.topo, HWLOC_OBJ_PU, 0);

	if (pair_line_ns < 0 && cal.pu1 && pingpong_median(pu0, cal.pu1, false, &pair_line_ns))
		pair_line_ns = 0;
	return pos(pair_line_ns);
}

/* ---- IPIs: the emulator's (signals) ---- */

struct duo;
typedef int (*duo_fn)(struct sd_cpu *cpu, struct duo *d);

/* Two emulated CPUs: CPU 1 runs the mm and spins, CPU 0 measures. */
struct duo {
	struct sd_mm *mm;
	duo_fn work;
	atomic_int ready, done;
	int err;
	double *a, *rtt;        /* per-call samples of the IPI measurement */
	long n;
	double flush_ns;
	uint64_t invlpgb;
	bool busy;              /* CPU 1 keeps hitting in its TLB, as a workload's CPUs do */
};

static void duo_target(struct sd_cpu *cpu, struct duo *d)
{
	double deadline = now_ns() + 60e9;

	if (sd_switch_mm(cpu, d->mm) || sd_access(cpu, VA_HIT, SD_READ, NULL))
		d->err = -1;
	atomic_store(&d->ready, 1);
	for (unsigned i = 0; !atomic_load_explicit(&d->done, memory_order_acquire); i++) {
		/* A busy target keeps its TLB's lines in its own cache, so an
		 * issuer that invalidates them fetches them: the cost a
		 * broadcast pays at a running CPU. Its hits also move its
		 * modelled clock, so the issuer is not held at the window. */
		if (d->busy)
			sd_access(cpu, VA_HIT, SD_READ, NULL);
		else
			cpu_relax();
		if (!(i & 255)) {
			sd_cpu_quiescent(cpu);
			if (now_ns() > deadline)
				break;
		}
	}
	sd_switch_mm(cpu, NULL);
}

static void duo_body(struct sd_cpu *cpu, void *arg)
{
	struct duo *d = arg;

	if (sd_cpu_id(cpu) == 1) {
		duo_target(cpu, d);
		return;
	}
	if (spin_until(&d->ready, 1, 10) || d->err || sd_switch_mm(cpu, d->mm)) {
		fprintf(stderr, "sd-calibrate: CPU 1 did not start\n");
		d->err = -1;
	} else if (d->work(cpu, d)) {
		d->err = -1;
	}
	sd_switch_mm(cpu, NULL);
	atomic_store_explicit(&d->done, 1, memory_order_release);
}

static int duo_run(const char *strategy, unsigned nr_cpus, struct duo *d)
{
	struct sd_machine *m;
	struct sd_cpu *cpu;
	int err = 0;

	if (emu_create(&m, strategy, nr_cpus))
		return -1;
	/* Map the page from this thread attached as CPU 0 for the purpose. */
	err = sd_cpu_attach(m, 0, &cpu);
	if (!err)
		err = sd_mm_create(m, &d->mm);
	if (!err)
		err = sd_mmap(cpu, d->mm, VA_HIT, PAGE, SD_PROT_READ | SD_PROT_WRITE);
	if (!err)
		err = sd_cpu_detach(cpu);
	if (!err && nr_cpus == 1) {
		atomic_store(&d->ready, 1);
		err = sd_machine_run(m, duo_body, d);
	} else if (!err) {
		err = sd_machine_run(m, duo_body, d);
	}
	if (err)
		sd_fail("two-CPU run", err);
	if (d->mm)
		sd_mm_destroy(d->mm);
	sd_machine_destroy(m);
	return err || d->err ? -1 : 0;
}

static void stamp_fn(struct sd_cpu *target, void *arg)
{
	(void)target;
	*(double *)arg = now_ns();
}

static int ipi_work(struct sd_cpu *cpu, struct duo *d)
{
	for (long i = -d->n / 4; i < d->n; i++) {
		double t2 = 0, t0 = now_ns();

		TRY(sd_smp_call_single(cpu, 1, stamp_fn, &t2));
		double t3 = now_ns();

		if (i >= 0) {
			d->a[i] = t2 - t0;
			d->rtt[i] = t3 - t0;
		}
	}
	return 0;
}

/* The sender's side of a raw signal to a spinning thread on pu1. */
struct spinner {
	hwloc_obj_t pu;
	atomic_int stop, started;
	atomic_int reset;       /* main asks, the spinner empties gaps and clears */
	double *gaps;           /* gaps in the spin loop longer than gap_min */
	long nr_gaps, max_gaps;
	double gap_min;
	pid_t tid;
};

static void *spinner_thread(void *arg)
{
	struct spinner *s = arg;
	double deadline = now_ns() + 60e9;

	bind_self(s->pu);
	s->tid = gettid();
	atomic_store(&s->started, 1);
	double prev = now_ns();

	while (!atomic_load_explicit(&s->stop, memory_order_relaxed)) {
		double t = now_ns();

		/* Only this thread writes the gaps until it is joined. */
		if (atomic_load_explicit(&s->reset, memory_order_relaxed)) {
			s->nr_gaps = 0;
			atomic_store(&s->reset, 0);
		}
		if (t - prev > s->gap_min && s->nr_gaps < s->max_gaps)
			s->gaps[s->nr_gaps++] = t - prev;
		prev = t;
		if (t > deadline)
			break;
	}
	return NULL;
}

static int spinner_start(struct spinner *s, pthread_t *th)
{
	if (pthread_create(th, NULL, spinner_thread, s))
		return sys_fail("pthread_create");
	if (spin_until(&s->started, 1, 5)) {
		atomic_store(&s->stop, 1);
		pthread_join(*th, NULL);
		fprintf(stderr, "sd-calibrate: spinning thread did not start\n");
		return -1;
	}
	return 0;
}

static void spinner_stop(struct spinner *s, pthread_t th)
{
	atomic_store(&s->stop, 1);
	pthread_join(th, NULL);
}

static int raw_send_ns(double *ns)
{
	struct spinner s = { .pu = cal.pu1, .gap_min = 1e18 };
	long n = iters(20000);
	double *v = calloc((size_t)n, sizeof(*v));
	pthread_t th;
	int err = 0;

	if (!v)
		return sys_fail("calloc");
	raw_install();
	if (bind_self(cal.pu0) || spinner_start(&s, &th)) {
		free(v);
		return -1;
	}
	for (long i = -n / 4; i < n && !err; i++) {
		int before = atomic_load(&raw_signals);
		double t0 = now_ns();

		pthread_sigqueue(th, raw_signo(), (union sigval){ 0 });
		double t1 = now_ns();

		err = spin_until(&raw_signals, before + 1, 2);
		if (i >= 0)
			v[i] = t1 - t0 - clock_overhead();
	}
	spinner_stop(&s, th);
	unbind_self();
	if (err)
		fprintf(stderr, "sd-calibrate: a raw signal to PU %u was never handled\n",
			cal.pu1->os_index);
	*ns = median(v, (int)n);
	free(v);
	return err;
}

static int host_ipi(void)
{
	struct duo d = { .work = ipi_work, .n = iters(20000) };
	int ret = -1;
	double send = 0;

	d.a = calloc((size_t)d.n, sizeof(double));
	d.rtt = calloc((size_t)d.n, sizeof(double));
	if (!d.a || !d.rtt) {
		sys_fail("calloc");
		goto out;
	}
	if (duo_run("ipi", 2, &d) || raw_send_ns(&send))
		goto out;
	double a = median(d.a, (int)d.n), rtt = median(d.rtt, (int)d.n);
	double entry = pos(self_signal_ns() - syscall_ns()) / 2, lt = line_ns();

	set(&host, P_IPI_SEND, send, "sd-calibrate --only ipi: median of %ld pthread_sigqueue() "
	    "(rt_tgsigqueueinfo, the emulator's IPI) to a thread spinning on PU %u, sender-side "
	    "duration of the call; the request-queue push is not included", d.n,
	    cal.pu1->os_index);
	set(&host, P_IPI_SEND_TARGET, send, "sd-calibrate --only ipi: = ipi_send: each further "
	    "target of the emulator's IPI is one more rt_tgsigqueueinfo()");
	set(&host, P_IRQ_ENTRY, entry, "sd-calibrate --only ipi: half of (tgkill() of a signal to "
	    "oneself with an empty handler, %.1f ns, minus getppid(), %.1f ns): signal frame "
	    "setup and sigreturn, split evenly", self_signal_ns(), syscall_ns());
	set(&host, P_IRQ_EXIT, entry, "sd-calibrate --only ipi: the other half of the same");
	set(&host, P_IPI_DELIVERY, a - send - entry, "sd-calibrate --only ipi: median over %ld "
	    "sd_smp_call_single() CPU 0 -> 1 (PUs %u, %u) of the time from the call to the "
	    "function's start on the target (%.1f ns), minus ipi_send and irq_entry", d.n,
	    cal.pu0->os_index, cal.pu1->os_index, a);
	set(&host, P_IPI_HANDLER, rtt - a - lt, "sd-calibrate --only ipi: median round trip of "
	    "the same calls (%.1f ns) minus the time to the function's start, minus one "
	    "line_transfer (%.1f ns, the ack): the library's handler and ack", rtt, lt);
	ret = 0;
out:
	free(d.a);
	free(d.rtt);
	return ret;
}

/* ---- broadcast invalidations: the emulator's software DVM and INVLPGB ---- */

static int flush_work(struct sd_cpu *cpu, struct duo *d)
{
	struct sd_stats s0 = SD_STATS_INIT, s1 = SD_STATS_INIT;
	double v[64];

	TRY(sd_access(cpu, VA_HIT, SD_READ, NULL));
	sd_stats_cpu(sd_cpu_machine(cpu), 0, &s0);
	for (int r = -1; r < cal.reps; r++) {
		double t0 = now_ns();

		for (long i = 0; i < d->n; i++)
			TRY(sd_flush_tlb_range(cpu, d->mm, VA_HIT, PAGE));
		if (r >= 0)
			v[r] = (now_ns() - t0) / (double)d->n;
	}
	sd_stats_cpu(sd_cpu_machine(cpu), 0, &s1);
	d->invlpgb = s1.counter[SD_STAT_INVLPGB] - s0.counter[SD_STAT_INVLPGB];
	d->flush_ns = median(v, cal.reps);
	return 0;
}

static int host_bcast(void)
{
	struct duo b1 = { .work = flush_work, .n = iters(20000), .busy = true };
	struct duo b2 = b1, g2 = b1;

	if (duo_run("broadcast", 1, &b1) || duo_run("broadcast", 2, &b2) ||
	    duo_run("gbcast:threshold=1,sample=1", 2, &g2))
		return -1;
	set(&host, P_TLBI_ISSUE, b1.flush_ns, "sd-calibrate --only bcast: median of %d x %ld "
	    "sd_flush_tlb_range() of 1 page, strategy broadcast, 1 CPU: the issue, the DVM "
	    "lock and the issuer's own invalidation", cal.reps, b1.n);
	set(&host, P_DVM_TARGET, b2.flush_ns - b1.flush_ns, "sd-calibrate --only bcast: the same "
	    "on 2 CPUs with the mm live on both and CPU 1 hitting in its TLB (%.1f ns) minus 1 "
	    "CPU: the issuer invalidates one more TLB inside the DVM lock, fetching the lines "
	    "the running target holds", b2.flush_ns);
	set(&host, P_DVM_MESSAGE, 0, "sd-calibrate --only bcast: 0: the emulator's broadcast has "
	    "no message apart from the per-TLB work (charged in tlbi_issue and dvm_target)");
	set(&host, P_DVM_COMPLETION, 0, "sd-calibrate --only bcast: 0: the emulator invalidates "
	    "every TLB synchronously inside the issue; nothing completes later");
	set(&host, P_DSB, 0, "sd-calibrate --only bcast: 0: the emulator's DSB finds every "
	    "broadcast done (synchronous issue), so it costs nothing measurable apart from it");
	set(&host, P_INVLPGB_ISSUE, g2.flush_ns, "sd-calibrate --only bcast: median of %d x %ld "
	    "sd_flush_tlb_range() of 1 page, strategy gbcast:threshold=1,sample=1 (a global ASID "
	    "for an mm on 2 CPUs), 2 CPUs with the mm live on both "
	    "(%llu INVLPGBs counted): issue, invalidations and TLBSYNC in one call, not "
	    "separable through the public API", cal.reps, g2.n, (unsigned long long)g2.invlpgb);
	set(&host, P_INVLPGB_COMPLETION, 0, "sd-calibrate --only bcast: 0: included in "
	    "invlpgb_issue (the emulated INVLPGB completes within the flush call)");
	set(&host, P_TLBSYNC, 0, "sd-calibrate --only bcast: 0: included in invlpgb_issue");
	set(&host, P_TLBI_RECV, 0, "sd-calibrate --only bcast: 0: the emulator's issuer does "
	    "each target's invalidation itself (in dvm_target); the target's thread loses no time");
	set(&host, P_INVLPGB_RECV, 0, "sd-calibrate --only bcast: 0: the emulator's issuer does "
	    "each target's invalidation itself (in invlpgb_issue); the target's thread loses no time");
	return 0;
}

/* ---- the real kernel ---- */

/* A 100-byte message written to a pipe and read back by the same thread:
 * nobody sleeps, so no wakeup and no switch are in it. */
static double pipe_message_ns(void)
{
	double v[64];
	long n = iters(200000);
	char buf[128] = { 0 };
	int p[2];

	if (pipe(p))
		return -1;
	for (int r = -1; r < cal.reps; r++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++)
			if (write(p[1], buf, 100) != 100 || read(p[0], buf, 100) != 100)
				break;
		if (r >= 0)
			v[r] = (now_ns() - t0) / (double)n;
	}
	close(p[0]);
	close(p[1]);
	return median(v, cal.reps);
}

static int kern_syscall(void)
{
	double t = syscall_ns(), msg = pipe_message_ns();

	set(&kern, P_SYSCALL_ENTRY, t / 2, "sd-calibrate --only syscall: half the median of %d x "
	    "%ld syscall(SYS_getppid) (entry and exit split evenly)", cal.reps, iters(500000));
	set(&kern, P_SYSCALL_EXIT, t / 2, "sd-calibrate --only syscall: the other half of the "
	    "same getppid() round trip");
	if (msg < 0)
		return sys_fail("pipe");
	set(&kern, P_PIPE_MESSAGE, pos(msg - 2 * t), "sd-calibrate --only syscall: median of %d x "
	    "%ld write() + read() of 100 bytes through one pipe by one thread (%.1f ns) minus two "
	    "getppid() (%.1f ns each): both calls' bodies and the copy; no sleeping reader, so no "
	    "wakeup", cal.reps, iters(200000), msg, t);
	return 0;
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
static double madvise_ns(char *p, unsigned n, bool touch, bool prot)
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

static void fit_sizes(char *p, const double *x, int n, bool prot, double *a, double *b)
{
	double y[8];

	for (int i = 0; i < n; i++)
		y[i] = madvise_ns(p, (unsigned)x[i], true, prot);
	fit(x, y, n, a, b);
}

static int kern_tlb(void)
{
	char *p = mmap(NULL, 512 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return sys_fail("mmap");
	bind_self(cal.pu0);
	double fw = fault_ns(p, true), fr = fault_ns(p, false), z = 0, zc = 0, cp = 0;
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
	return kern_tlb_chase();
}

static int kern_flush(void)
{
	static const double small[] = { 1, 4, 8, 16, 32 }, large[] = { 64, 128, 256, 512 };
	char *p = mmap(NULL, 512 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	double cs, ss, cl, sl, pcl, psl, sys = syscall_ns();

	if (p == MAP_FAILED)
		return sys_fail("mmap");
	bind_self(cal.pu0);
	double one = madvise_ns(p, 1, true, false), none = madvise_ns(p, 1, false, false);
	/* A page in the middle: each mprotect splits the VMA in three and
	 * the one back merges it (the mprotect-threaded benchmark's case). */
	double split = madvise_ns(p + 256 * 4096, 1, true, true);

	fit_sizes(p, small, 5, false, &cs, &ss);
	fit_sizes(p, large, 4, false, &cl, &sl);
	fit_sizes(p, large, 4, true, &pcl, &psl);
	unbind_self();
	munmap(p, 512 * 4096);
	set(&kern, P_LOCAL_FLUSH_PAGE, one - sys, "sd-calibrate --only flush: median madvise("
	    "MADV_DONTNEED) of one written private page (%.1f ns) minus getppid() (%.1f ns): the "
	    "VMA lookup, the PTE clear, the page freed, the mmu_gather and its INVLPG", one, sys);
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
	set(&kern, P_PTE_UPDATE, psl, "sd-calibrate --only flush: per-page slope of mprotect(RW -> "
	    "R) over 64-512 written pages (one full flush, so only the PTE writes grow)");
	set(&kern, P_VMA_CHANGE, pos(split - sys - psl - (ss - sl)), "sd-calibrate --only flush: "
	    "median mprotect(RW -> R) of one written page in the middle of a 512-page mapping "
	    "(%.1f ns: the VMA split in three, merged back by the next call) minus getppid() "
	    "(%.1f ns), one PTE write (pte_update) and one INVLPG (local_flush_range_page)",
	    split, sys);
	set(&kern, P_VMA_SPLIT, 0, "0: not measured apart; vma_change's measurement (an "
	    "mprotect splitting a VMA in three, merged back by the next call) holds its splits");
	set(&kern, P_VMA_MERGE, 0, "0: not measured apart; vma_change's measurement (an "
	    "mprotect splitting a VMA in three, merged back by the next call) holds its merges");
	set(&kern, P_PAGE_FREE, sl - psl, "sd-calibrate --only flush: per-page slope of "
	    "madvise(DONTNEED) over 64-512 pages (%.1f ns) minus that of mprotect (%.1f ns): the "
	    "freeing of the page", sl, psl);
	return 0;
}

/* Pin the calling process (after fork: one thread) to @os_index. */
static void pin_process(unsigned os_index)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(os_index, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static double pipe_rtt_ns(int w, int r, long n)
{
	char c = 0;
	double t0 = now_ns();

	for (long i = 0; i < n; i++)
		if (write(w, &c, 1) != 1 || read(r, &c, 1) != 1)
			return -1;
	return (now_ns() - t0) / (double)n;
}

/* A thread of this process on the same PU, echoing what comes through
 * one pipe back through another. */
struct echo {
	int r, w;
	unsigned pu;
};

static void *echo_thread(void *arg)
{
	struct echo *e = arg;
	char c;

	pin_process(e->pu);     /* the calling thread: sched_setaffinity(0) */
	while (read(e->r, &c, 1) == 1 && write(e->w, &c, 1) == 1)
		;
	return NULL;
}

/* Ping-pong with an echo thread on @pu: the median round trip. */
static double echo_rtt(hwloc_obj_t pu, long n)
{
	int a[2], b[2];
	double v[64];
	struct echo e;
	pthread_t th;
	int err;

	if (pipe(a) || pipe(b))
		return -1;
	e = (struct echo){ a[0], b[1], pu->os_index };
	if (pthread_create(&th, NULL, echo_thread, &e))
		return -1;
	err = pipe_rtt_ns(a[1], b[0], n / 4) < 0;
	for (int r = 0; r < cal.reps && !err; r++) {
		v[r] = pipe_rtt_ns(a[1], b[0], n);
		err = v[r] < 0;
	}
	close(a[1]);
	pthread_join(th, NULL);
	close(a[0]);
	close(b[0]);
	close(b[1]);
	if (err)
		return -1;
	return median(v, cal.reps);
}

/*
 * The scheduler apart from switch_mm: two threads of one process pinned on
 * one PU ping-pong through pipes (perf bench sched pipe -T's shape): a
 * round trip is two wakeups, two switches without an address-space change
 * and two write+read pairs. The wakeup is not measured apart: on one PU
 * the woken reader preempts the writer inside the write() that wakes it,
 * and across PUs (a KVM guest here) that write() pays the guest's IPI
 * exit. So sched_switch holds both, as the ping-pong pays them, one
 * wakeup per switch.
 */
static int kern_sched(double *thread_rtt)
{
	int self[2];
	long n = iters(20000);
	double pr[64];
	int err = 0;

	if (pipe(self))
		return sys_fail("pipe");
	bind_self(cal.pu0);
	double rtt = echo_rtt(cal.pu0, n);

	for (int r = 0; r < cal.reps && !err; r++) {
		pr[r] = pipe_rtt_ns(self[1], self[0], n);
		err = pr[r] < 0;
	}
	unbind_self();
	close(self[0]);
	close(self[1]);
	if (err || rtt < 0)
		return sys_fail("thread ping-pong");
	double pair = median(pr, cal.reps);

	*thread_rtt = rtt;
	set(&kern, P_SCHED_SWITCH, pos((rtt - 2 * pair) / 2), "sd-calibrate --only switch: two "
	    "threads of one process pinned on PU %u ping-pong a byte through two pipes (perf "
	    "bench sched pipe -T's shape), median of %d x %ld round trips (%.1f ns), minus two "
	    "write+read pairs without a sleeper (%.1f ns each), halved: try_to_wake_up(), "
	    "__schedule() and __switch_to() between two threads of one mm (no switch_mm), the "
	    "wakeup included (sched_wakeup 0)", cal.pu0->os_index, cal.reps, n, rtt, pair);
	set(&kern, P_SCHED_WAKEUP, 0, "not measured apart: included in sched_switch (the "
	    "ping-pong pays one wakeup per switch; on one PU the woken reader preempts the "
	    "writer inside the write() that wakes it); 0");
	set(&kern, P_SCHED_MIGRATE, 0, "not measured: detach_task() and attach_task() are a "
	    "dequeue and an enqueue under run-queue locks, no figure apart from a switch's; 0");
	set(&kern, P_SCHED_BALANCE_INTERVAL, 4000000, "Linux kernel/sched/topology.c sd_init(): "
	    "min_interval = sd_weight ms, balance_interval from 1 ms up to max_interval = 2 x "
	    "sd_weight ms as balancing finds nothing; 4 ms taken for a small LLC domain (an "
	    "estimate, not this host's domains)");
	return 0;
}

/* pthread_create() and pthread_join() of an empty thread: copy_process()
 * with CLONE_VM (no dup_mmap()) and the wake of the new task. */
static void *empty_thread(void *arg)
{
	return arg;
}

static int kern_fork(void)
{
	double v[64];
	long n = iters(2000);

	for (int r = -1; r < cal.reps; r++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++) {
			pthread_t th;

			if (pthread_create(&th, NULL, empty_thread, NULL))
				return sys_fail("pthread_create");
			pthread_join(th, NULL);
		}
		if (r >= 0)
			v[r] = (now_ns() - t0) / (double)n;
	}
	set(&kern, P_TASK_FORK, median(v, cal.reps), "sd-calibrate --only switch: median of %d x "
	    "%ld pthread_create() + pthread_join() of an empty thread: copy_process() without "
	    "dup_mmap() (CLONE_VM), wake_up_new_task(), the thread's exit and reaping; its stack's "
	    "mmap included", cal.reps, n);
	return 0;
}

static int kern_switch(void)
{
	int p1[2], p2[2], self[2];
	long n = iters(20000);
	double v[64], wr[64];
	pid_t pid;

	if (pipe(p1) || pipe(p2) || pipe(self))
		return sys_fail("pipe");
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return sys_fail("fork");
	if (pid == 0) {
		char c;

		/* Only the parent may hold the write end: its close is our EOF. */
		close(p1[1]);
		close(p2[0]);
		alarm(30);      /* bounds the parent's waitpid() too */
		pin_process(cal.pu0->os_index);
		while (read(p1[0], &c, 1) == 1 && write(p2[1], &c, 1) == 1)
			;
		_exit(0);
	}
	close(p1[0]);
	close(p2[1]);
	bind_self(cal.pu0);
	int err = pipe_rtt_ns(p1[1], p2[0], n / 4) < 0;

	for (int r = 0; r < cal.reps && !err; r++) {
		v[r] = pipe_rtt_ns(p1[1], p2[0], n);
		wr[r] = pipe_rtt_ns(self[1], self[0], n);
		err = v[r] < 0 || wr[r] < 0;
	}
	close(p1[1]);
	waitpid(pid, NULL, 0);
	unbind_self();
	close(p2[0]);
	close(self[0]);
	close(self[1]);
	if (err)
		return sys_fail("pipe ping-pong");
	double rtt = median(v, cal.reps), pair = median(wr, cal.reps);

	double thread_rtt = 0;

	if (kern_sched(&thread_rtt) || kern_fork())
		return -1;
	set(&kern, P_CONTEXT_SWITCH, pos((rtt - thread_rtt) / 2), "sd-calibrate --only switch: "
	    "pipe ping-pong between two processes pinned on PU %u, median of %d x %ld round trips "
	    "(%.1f ns), minus the same between two threads of one process (%.1f ns; "
	    "sched_switch), halved: what a switch between address spaces adds (switch_mm)",
	    cal.pu0->os_index, cal.reps, n, rtt, thread_rtt);
	(void)pair;
	return 0;
}

#if defined(__x86_64__)
static void ill_handler(int sig, siginfo_t *si, void *ucv)
{
	ucontext_t *uc = ucv;

	(void)sig;
	(void)si;
	uc->uc_mcontext.gregs[REG_RIP] += 2;    /* past the ud2 */
}

static int kern_trap(void)
{
	struct sigaction sa, old;
	double v[64];
	long n = iters(50000);

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = ill_handler;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGILL, &sa, &old);
	for (int r = -1; r < cal.reps; r++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++)
			__asm__ volatile("ud2" ::: "memory");
		if (r >= 0)
			v[r] = (now_ns() - t0) / (double)n;
	}
	sigaction(SIGILL, &old, NULL);
	double ud = median(v, cal.reps), sig = pos(self_signal_ns() - syscall_ns());

	set(&kern, P_TRAP_ENTRY, (ud - sig) / 2, "sd-calibrate --only trap: half of (ud2 -> SIGILL "
	    "handler that skips it, median of %d x %ld, %.1f ns, minus the signal delivery and "
	    "sigreturn measured by a self-tgkill minus getppid, %.1f ns): the exception's entry; "
	    "the kernel's own emulation (arm64 MRS) is not on this host", cal.reps, n, ud, sig);
	set(&kern, P_TRAP_EXIT, (ud - sig) / 2, "sd-calibrate --only trap: the other half of the "
	    "same (exception return)");
	return 0;
}

static double cpuid_ns(void)
{
	double v[64];
	long n = iters(20000);

	for (int r = -1; r < cal.reps; r++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++) {
			unsigned a = 0, b, c = 0, d;

			__asm__ volatile("cpuid" : "+a"(a), "=b"(b), "+c"(c), "=d"(d));
		}
		if (r >= 0)
			v[r] = (now_ns() - t0) / (double)n;
	}
	return median(v, cal.reps);
}
#else
static int kern_trap(void)
{
	set(&kern, P_TRAP_ENTRY, 0, "not measured: sd-calibrate measures traps with x86's ud2 only");
	set(&kern, P_TRAP_EXIT, 0, "not measured: sd-calibrate measures traps with x86's ud2 only");
	return 0;
}

static double cpuid_ns(void)
{
	return 0;
}
#endif

static int host_trap_group(void)
{
	return host_trap() || kern_trap() ? -1 : 0;
}

/* @n membarrier(PRIVATE_EXPEDITED) calls, each timed into @v. */
static void membarrier_ns(double *v, long n)
{
	for (long i = 0; i < n; i++) {
		double t0 = now_ns();

		syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
		if (v)
			v[i] = now_ns() - t0 - clock_overhead();
	}
}

/*
 * The calls that sent an IPI: a call finds the other thread off its PU
 * whenever the host preempts it, and then costs what a call with nobody
 * to interrupt costs (on a loaded machine, most calls). Those slower than
 * twice the 99th percentile of the lone calls are taken as the IPI calls;
 * their median is returned, their count in *@nr.
 */
static double ipi_calls_median(double *with, long n, double *without, long *nr)
{
	qsort(without, (size_t)n, sizeof(double), cmp_double);
	double cut = 2 * without[n * 99 / 100];
	long k = 0;

	for (long i = 0; i < n; i++)
		if (with[i] > cut)
			with[k++] = with[i];
	*nr = k;
	return k ? median(with, (int)k) : cut;
}

static double fence_ns(void)
{
	static _Atomic unsigned long word;
	double v[64];
	long n = iters(1000000);

	/* A seq_cst read-modify-write: a full barrier (a locked instruction
	 * on x86), as smp_mb() is, and one ThreadSanitizer builds accept,
	 * unlike atomic_thread_fence(). */
	for (int r = -1; r < cal.reps; r++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++)
			atomic_fetch_add_explicit(&word, 0, memory_order_seq_cst);
		if (r >= 0)
			v[r] = (now_ns() - t0) / (double)n;
	}
	return median(v, cal.reps);
}

static void kern_ipi_unmeasured(const char *why)
{
	for (int k = P_IPI_SEND; k <= P_IPI_HANDLER; k++)
		set(&kern, (enum param)k, 0, "not measured: %s; 0", why);
}

static int kern_ipi(void)
{
	long n = iters(50000), nr_ipi;
	struct spinner s = { .pu = cal.pu1, .gap_min = 150, .max_gaps = 2 * n };
	double *with = calloc((size_t)n, sizeof(double)), *without = calloc((size_t)n, sizeof(double));
	pthread_t th;

	if (syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0)) {
		kern_ipi_unmeasured("membarrier(REGISTER_PRIVATE_EXPEDITED) failed");
		free(with);
		free(without);
		return 0;
	}
	s.gaps = calloc((size_t)s.max_gaps, sizeof(double));
	if (!s.gaps || !with || !without) {
		free(with);
		free(without);
		free(s.gaps);
		return sys_fail("calloc");
	}
	bind_self(cal.pu0);
	membarrier_ns(NULL, n / 4);
	membarrier_ns(without, n);
	double lone = median(without, (int)n);

	if (spinner_start(&s, &th)) {
		free(s.gaps);
		free(with);
		free(without);
		return -1;
	}
	membarrier_ns(NULL, n / 4);
	atomic_store(&s.reset, 1);
	if (spin_until_zero(&s.reset, 5)) {
		spinner_stop(&s, th);
		free(s.gaps);
		free(with);
		free(without);
		return -1;
	}
	membarrier_ns(with, n);
	spinner_stop(&s, th);
	unbind_self();

	double d = ipi_calls_median(with, n, without, &nr_ipi) - lone;
	long nr_gaps = s.nr_gaps;
	double stolen = nr_gaps ? median(s.gaps, (int)nr_gaps) - clock_overhead() : 0;
	double h = fence_ns(), send = cpuid_ns(), lt = line_ns();
	double entry = pos(stolen - h) / 2;

	free(with);
	free(without);
	free(s.gaps);
	set(&kern, P_IPI_HANDLER, h, "sd-calibrate --only ipi: membarrier's IPI handler is one full "
	    "barrier (ipi_mb): median of %d x %ld seq_cst atomic_fetch_add (a full barrier) in user space",
	    cal.reps, iters(1000000));
	set(&kern, P_IRQ_ENTRY, entry, "sd-calibrate --only ipi: half of (the median gap an IPI "
	    "leaves in a clock-reading loop spinning on PU %u, %.1f ns over %ld gaps for %ld "
	    "membarrier calls, minus ipi_handler): interrupt entry and exit split evenly",
	    cal.pu1->os_index, stolen, nr_gaps, n);
	set(&kern, P_IRQ_EXIT, entry, "sd-calibrate --only ipi: the other half of the same gap");
	set(&kern, P_IPI_SEND, send, "sd-calibrate --only ipi: estimate: median CPUID time (%s), "
	    "as the ICR write of an IPI %s; not separable from delivery in user space", cal.hypervisor
	    ? "a VM exit in this guest" : "a serialising instruction",
	    cal.hypervisor ? "exits to the hypervisor the same way" : "costs a serialising MSR write");
	set(&kern, P_IPI_SEND_TARGET, send, "sd-calibrate --only ipi: = ipi_send: x2APIC sends one "
	    "ICR write per further target");
	set(&kern, P_IPI_DELIVERY, d - send - entry - h - lt, "sd-calibrate --only ipi: "
	    "membarrier(PRIVATE_EXPEDITED) (registered) from PU %u with a thread of the process "
	    "spinning on PU %u (median of the %ld of %ld calls slower than twice the 99th "
	    "percentile of lone calls: those that sent an IPI) minus the median with no other thread (%.1f ns), = %.1f ns "
	    "an IPI round trip, minus ipi_send, irq_entry, ipi_handler and one line_transfer "
	    "(the ack, %.1f ns)", cal.pu0->os_index, cal.pu1->os_index, nr_ipi, n, lone, d, lt);
	return 0;
}

static int group_ipi(void)
{
	if (!cal.pu1) {
		for (int k = P_IPI_SEND; k <= P_IPI_HANDLER; k++)
			set(&host, (enum param)k, 0, "not measured: this machine has one PU; 0");
		kern_ipi_unmeasured("this machine has one PU");
		return 0;
	}
	if (kern_ipi() || host_ipi())
		return -1;
	kern.mech_source[0] = "this host's kernel IPIs, measured by sd-calibrate --only ipi";
	host.mech_source[0] = "emulated: libshootdown's IPIs (POSIX signals between pinned "
			      "threads), measured by sd-calibrate --only ipi";
	return 0;
}

static void kern_bcast(void)
{
	static const enum param dvm[] = {
		P_TLBI_ISSUE, P_DVM_MESSAGE, P_DVM_TARGET, P_DVM_COMPLETION, P_DSB, P_TLBI_RECV,
	};
	static const enum param gb[] = {
		P_INVLPGB_ISSUE, P_INVLPGB_COMPLETION, P_TLBSYNC, P_INVLPGB_RECV,
	};

	for (size_t i = 0; i < sizeof(dvm) / sizeof(dvm[0]); i++)
		set(&kern, dvm[i], 0, "not measurable on this host%s: no broadcast TLBI (arm64 "
		    "DVM) to time; 0 (unused by the x86 strategies)",
#if defined(__x86_64__) || defined(__i386__)
		    " (x86)"
#else
		    ""
#endif
		    );
	for (size_t i = 0; i < sizeof(gb) / sizeof(gb[0]); i++)
		set(&kern, gb[i], 0, cal.has_invlpgb ? "not measured: INVLPGB is a kernel-mode "
		    "instruction user space cannot time; 0 (gbcast would need a value from a "
		    "profile of a measured machine)" : "not measurable: this CPU lacks INVLPGB "
		    "(no invlpgb flag in /proc/cpuinfo); 0 (unused by ipi)");
}

static int group_bcast(void)
{
	kern_bcast();
	if (!cal.pu1) {
		fprintf(stderr, "sd-calibrate: bcast needs two PUs\n");
		return -1;
	}
	if (host_bcast())
		return -1;
	/* The emulator's own: a shared-memory broadcast stands for both.
	 * The kernel's profile names neither: user space cannot time a TLBI
	 * or an INVLPGB (kern_bcast() says why, per parameter). */
	host.mech_source[1] = "emulated: libshootdown's shared-memory broadcast, measured by "
			      "sd-calibrate --only bcast";
	host.mech_source[2] = host.mech_source[1];
	return 0;
}

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

static int host_mm(void)
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
					sd_fail("sd_mm_create", -ENOMEM);
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

static double fork_ns(bool use_vfork, long n)
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

static int group_mm(void)
{
	return host_mm() || kern_mm() ? -1 : 0;
}

static int group_tlb(void)
{
	return host_tlb() || kern_tlb() ? -1 : 0;
}

static int group_flush(void)
{
	return host_flush() || kern_flush() ? -1 : 0;
}

static int group_switch(void)
{
	return host_switch() || host_sched() || kern_switch() ? -1 : 0;
}

static int host_switch_group(void)
{
	return host_switch() || host_sched() ? -1 : 0;
}

static int (*const group_fn[NR_GROUPS])(void) = {
	group_lines, group_tlb, group_flush, group_switch, host_trap_group, kern_syscall,
	group_ipi, group_bcast, group_mm,
};

/* The groups' measurements of the emulator, run again in the second pass. */
static int (*const group_emu_fn[NR_GROUPS])(void) = {
	NULL, host_tlb, host_flush, host_switch_group, host_trap, NULL, NULL, NULL, host_mm,
};

/* ---- writing the profiles ---- */

static json_object *cost_json(const struct cost *c)
{
	json_object *o = json_object_new_object();
	char num[32];

	snprintf(num, sizeof(num), "%.1f", c->ns);
	json_object_object_add(o, "ns", json_object_new_double_s(c->ns, num));
	json_object_object_add(o, "source", json_object_new_string(c->src));
	return o;
}

/* Both profiles describe this host as it runs, so no host preemption is
 * added on top: whatever preempted the measuring threads (a hypervisor
 * under this host included) is already in the medians. */
static void no_vcpu_preemption(struct profile *p)
{
	static const char why[] = "0: the profile is this host as measured; preemptions of its "
				  "threads, by a hypervisor under it or not, are already in the "
				  "measured costs";

	set(p, P_VCPU_PREEMPT_INTERVAL, 0, "%s", why);
	set(p, P_VCPU_PREEMPT, 0, "%s", why);
}

/* KPTI's trampoline is an arm64 kernel's cost; neither profile states the
 * kpti feature, so it is never charged. */
static void no_kpti(struct profile *p)
{
	set(p, P_KPTI_TRAMPOLINE, 0, "not applicable: 0, and the profile states no kpti feature "
	    "(the emulator has no kernel to isolate; this host's kernel's entry costs, KPTI or "
	    "not, are in syscall_entry and page_fault_entry as measured)");
}

static void fill_unmeasured(struct profile *p, const char *only)
{
	for (int k = 0; k < P_NR; k++)
		if (!p->c[k].set)
			set(p, (enum param)k, 0, "not measured: sd-calibrate --only %s skipped it; 0",
			    only);
	for (int k = 0; k < D_NR; k++)
		for (int d = 0; d < NR_DIST; d++)
			if (!p->d[k][d].set)
				dset(p, (enum dparam)k, d, 0, "not measured: sd-calibrate --only %s "
				     "skipped it; 0", only);
}

/* A profile already at @path is the user's: say so and keep it beside
 * the new one (@path.old), never replace it in silence. */
static int keep_old(const char *path)
{
	char old[4200];

	if (access(path, F_OK))
		return 0;
	snprintf(old, sizeof(old), "%s.old", path);
	if (rename(path, old)) {
		fprintf(stderr, "sd-calibrate: cannot keep the old %s as %s: %s; not replacing it\n",
			path, old, strerror(errno));
		return -1;
	}
	printf("sd-calibrate: replacing %s (the old one is now %s)\n", path, old);
	return 0;
}

static json_object *feature_json(bool present, const char *source)
{
	json_object *f = json_object_new_object();

	json_object_object_add(f, "present", json_object_new_boolean(present));
	json_object_object_add(f, "source", json_object_new_string(source));
	return f;
}

static int write_profile(const struct profile *p, const char *dir, const char *desc,
			 const char *synthetic)
{
	char path[4096], tmp[4200];
	json_object *root = json_object_new_object(), *topo = json_object_new_object();
	json_object *costs = json_object_new_object();

	json_object_object_add(root, "format", json_object_new_string("shootdown-profile-1"));
	json_object_object_add(root, "name", json_object_new_string(p->name));
	json_object_object_add(root, "description", json_object_new_string(desc));
	json_object_object_add(topo, "synthetic", json_object_new_string(synthetic));
	json_object_object_add(topo, "source", json_object_new_string("sd-calibrate: "
		"hwloc_topology_export_synthetic(NO_ATTRS | IGNORE_MEMORY), as "
		"lstopo-no-graphics --of synthetic --export-synthetic-flags 10"));
	json_object_object_add(root, "topology", topo);
	json_object *mech = json_object_new_object();
	for (int k = 0; k < NR_MECH; k++)
		if (p->mech_source[k])
			json_object_object_add(mech, mech_key[k],
					       json_object_new_string(p->mech_source[k]));
	json_object_object_add(root, "mechanisms", mech);
	if (p->mech_source[1]) {
		/* A profile with TLBI broadcasts states its CPU features: the
		 * emulator's broadcast has range ops and no KPTI. */
		json_object *feat = json_object_new_object();
		json_object_object_add(feat, "range_tlbi", feature_json(true,
			"emulated: libshootdown's broadcast encodes range ops (lib/arch/tlbi_range.c)"));
		json_object_object_add(feat, "kpti", feature_json(false,
			"emulated: the emulator has no kernel mapping to isolate"));
		json_object_object_add(root, "features", feat);
	}
	for (int k = 0; k < P_NR; k++)
		json_object_object_add(costs, param_key[k], cost_json(&p->c[k]));
	for (int k = 0; k < D_NR; k++) {
		json_object *t = json_object_new_object();

		for (int d = 0; d < NR_DIST; d++)
			json_object_object_add(t, dist_key[d], cost_json(&p->d[k][d]));
		json_object_object_add(costs, dparam_key[k], t);
	}
	json_object_object_add(root, "costs", costs);
	snprintf(path, sizeof(path), "%s/%s.json", dir, p->name);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if (!emu_profile_writing && keep_old(path))
		return -1;
	/* Written under a temporary name, then renamed: never half a profile. */
	int err = json_object_to_file_ext(tmp, root, JSON_C_TO_STRING_PRETTY |
					  JSON_C_TO_STRING_NOSLASHESCAPE);
	json_object_put(root);
	if (err || rename(tmp, path)) {
		fprintf(stderr, "sd-calibrate: cannot write %s: %s\n", path,
			err ? json_util_get_last_err() : strerror(errno));
		unlink(tmp);
		return -1;
	}
	if (!emu_profile_writing)
		printf("sd-calibrate: wrote %s\n", path);
	return 0;
}

static void print_table(void)
{
	printf("%-26s %12s %12s\n", "parameter (ns)", "host", "host-kernel");
	for (int k = 0; k < P_NR; k++)
		printf("%-26s %12.1f %12.1f\n", param_key[k], host.c[k].ns, kern.c[k].ns);
	for (int k = 0; k < D_NR; k++)
		for (int d = 0; d < NR_DIST; d++) {
			char name[64];

			snprintf(name, sizeof(name), "%s.%s", dparam_key[k], dist_key[d]);
			printf("%-26s %12.1f %12.1f\n", name, host.d[k][d].ns, kern.d[k][d].ns);
		}
}

/* mkdir -p */
static int make_dirs(const char *dir)
{
	char buf[4096];

	if (snprintf(buf, sizeof(buf), "%s", dir) >= (int)sizeof(buf)) {
		fprintf(stderr, "sd-calibrate: directory name too long\n");
		return -1;
	}
	for (char *s = buf + 1; ; s++) {
		if (*s != '/' && *s)
			continue;
		char c = *s;

		*s = 0;
		if (mkdir(buf, 0777) && errno != EEXIST) {
			fprintf(stderr, "sd-calibrate: cannot create %s: %s\n", buf, strerror(errno));
			return -1;
		}
		*s = c;
		if (!c)
			return 0;
	}
}

static int default_dir(char *out, size_t len)
{
	const char *e = getenv("SD_PROFILE_DIR"), *xdg = getenv("XDG_DATA_HOME");
	const char *home = getenv("HOME");

	if (e && *e)
		snprintf(out, len, "%s", e);
	else if (xdg && *xdg)
		snprintf(out, len, "%s/shootdown/profiles", xdg);
	else if (home && *home)
		snprintf(out, len, "%s/.local/share/shootdown/profiles", home);
	else {
		fprintf(stderr, "sd-calibrate: neither SD_PROFILE_DIR, XDG_DATA_HOME nor HOME "
			"is set: give -o DIR\n");
		return -1;
	}
	return 0;
}

/* ---- setup ---- */

static bool cpuinfo_flag(const char *flag)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[8192];
	bool found = false;
	size_t n = strlen(flag);

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		if (strncmp(line, "flags", 5))
			continue;
		for (char *s = strstr(line, flag); s && !found; s = strstr(s + 1, flag))
			found = s[-1] == ' ' && (s[n] == ' ' || s[n] == '\n');
		break;
	}
	fclose(f);
	return found;
}

static int topo_init(char *synthetic, size_t len)
{
	if (hwloc_topology_init(&cal.topo) || hwloc_topology_load(cal.topo)) {
		fprintf(stderr, "sd-calibrate: hwloc cannot load this machine's topology\n");
		return -1;
	}
	/* Only the PUs we may use (taskset, cpuset), as the library places
	 * its CPUs: the pair measured must be one the user allowed. */
	hwloc_bitmap_t allowed = hwloc_bitmap_alloc();

	if (allowed && !hwloc_get_cpubind(cal.topo, allowed, HWLOC_CPUBIND_THREAD) &&
	    !hwloc_bitmap_isequal(allowed, hwloc_topology_get_topology_cpuset(cal.topo)))
		hwloc_topology_restrict(cal.topo, allowed, 0);
	hwloc_bitmap_free(allowed);
	if (hwloc_topology_export_synthetic(cal.topo, synthetic, len,
		    HWLOC_TOPOLOGY_EXPORT_SYNTHETIC_FLAG_NO_ATTRS |
		    HWLOC_TOPOLOGY_EXPORT_SYNTHETIC_FLAG_IGNORE_MEMORY) < 0) {
		fprintf(stderr, "sd-calibrate: hwloc cannot describe this topology as a synthetic "
			"string (asymmetric machine?)\n");
		return -1;
	}
	cal.pu0 = hwloc_get_obj_by_type(cal.topo, HWLOC_OBJ_PU, 0);
	cal.pu1 = hwloc_get_obj_by_type(cal.topo, HWLOC_OBJ_PU, 1);
	if (!cal.pu0) {
		fprintf(stderr, "sd-calibrate: hwloc finds no PU\n");
		return -1;
	}
	cal.pair_class = cal.pu1 ? distance_class(cal.pu0, cal.pu1) : DIST_CORE;
	cal.hypervisor = cpuinfo_flag("hypervisor");
	cal.has_invlpgb = cpuinfo_flag("invlpgb");
	return 0;
}

static void watchdog(int sig)
{
	static const char msg[] = "sd-calibrate: a measurement took too long; giving up\n";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(3);
	_exit(3);
}

/* The groups --only takes, as one line: from the table itself, so the
 * help and the error can never list fewer than there are. */
static void print_groups(FILE *f)
{
	for (size_t g = 0; g < NR_GROUPS; g++)
		fprintf(f, "%s%s", g ? " " : "", group_names[g]);
	fputc('\n', f);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: sd-calibrate [-o DIR] [--only GROUP[,GROUP]] [--quick] [--print]\n"
		"Measure this machine; write host.json (the emulator's own costs) and\n"
		"host-kernel.json (the Linux kernel's) to DIR, by default $SD_PROFILE_DIR,\n"
		"else $XDG_DATA_HOME/shootdown/profiles (~/.local/share/shootdown/profiles).\n"
		"Profiles already there are replaced, the old ones kept as NAME.json.old.\n"
		"  -o DIR          write the profiles there (created if needed)\n"
		"  --only GROUPS   measure only these (others are written as 0, marked so):\n"
		"                  ");
	print_groups(f);
	fprintf(f, "  --quick         fewer repetitions (under 10 s; for tests)\n"
		"  --print         print the table of values too\n"
		"  -h, --help      this text\n");
}

static int parse_only(const char *arg, bool *want)
{
	char buf[256], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", arg);
	for (size_t g = 0; g < NR_GROUPS; g++)
		want[g] = false;
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		size_t g = 0;

		while (g < NR_GROUPS && strcmp(t, group_names[g]))
			g++;
		if (g == NR_GROUPS) {
			fprintf(stderr, "sd-calibrate: unknown group '%s' for --only; the groups: ", t);
			print_groups(stderr);
			return -1;
		}
		want[g] = true;
	}
	return 0;
}

/*
 * Measure the emulator again with modelling on, under the host profile the
 * first pass measured: each charge (a table look-up, the clock, the window
 * check, a hot line's or a lock's modelled state) is then inside the
 * costs. The IPI and broadcast groups are left to the first pass: an
 * initiator whose clock runs ahead of its target's waits at the window in
 * real time, which would be measured as the IPI's or the TLBI's cost.
 */
static int second_pass(const bool want[NR_GROUPS], const char *synthetic)
{
	char dir[] = "/tmp/sd-calibrate.XXXXXX";
	int err = 0;

	if (!mkdtemp(dir))
		return sys_fail("mkdtemp");
	emu_profile_writing = true;
	err = write_profile(&host, dir, "sd-calibrate's first pass", synthetic);
	emu_profile_writing = false;
	if (err) {
		rmdir(dir);
		return -1;
	}
	snprintf(emu_profile, sizeof(emu_profile), "%s/host.json", dir);
	for (size_t g = 0; g < NR_GROUPS && !err; g++)
		if (want[g] && group_emu_fn[g])
			err = group_emu_fn[g]();
	unlink(emu_profile);
	rmdir(dir);
	emu_profile[0] = 0;
	return err;
}

/* Where the profiles go and what load the values will carry, on the
 * terminal before the measuring starts, not only inside the files. */
static void announce(const char *dir, const char *load)
{
	double l1 = 0;

	sscanf(load, "%lf", &l1);
	printf("sd-calibrate: measuring this machine (%s); writing host.json and "
	       "host-kernel.json to %s (-o DIR for another place)\n",
	       cal.quick ? "--quick: a few seconds" : "about 25 s", dir);
	printf("sd-calibrate: 1-minute load average at start %.2f: %s\n", l1,
	       l1 >= 0.5 ? "LOADED: other work shares the PUs, so the values will be high; "
			   "measure again on a quiet machine" : "idle");
	fflush(stdout);
}

static void describe(char *out, size_t len, const char *load, double secs)
{
	char host_name[256] = "?";
	struct timespec ts;
	struct tm tm;
	char when[64];
	double l1 = 0;

	gethostname(host_name, sizeof(host_name) - 1);
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%MZ", &tm);
	sscanf(load, "%lf", &l1);
	snprintf(out, len, "%s, %u PUs%s, %s: sd-calibrate%s in %.0f s, medians over %d runs, "
		 "threads pinned with hwloc; the emulator's own costs apart from IPIs and "
		 "broadcasts measured with modelling on, under the profile a first pass "
		 "measured; load average at start %s (%s)", host_name,
		 (unsigned)hwloc_get_nbobjs_by_type(cal.topo, HWLOC_OBJ_PU),
		 cal.hypervisor ? " (a virtual machine)" : "", when, cal.quick ? " --quick" : "",
		 secs, cal.reps, load, l1 >= 0.5 ? "loaded: values may be high" : "idle");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "only", required_argument, NULL, 'O' },
		{ "quick", no_argument, NULL, 'q' },
		{ "print", no_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char dir[4096] = "", synthetic[1024], load[64] = "?", desc[1024], only[256] = "";
	bool want[NR_GROUPS], print = false;
	int c;

	for (size_t g = 0; g < NR_GROUPS; g++)
		want[g] = true;
	while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
		switch (c) {
		case 'o': snprintf(dir, sizeof(dir), "%s", optarg); break;
		case 'O':
			if (parse_only(optarg, want))
				return 2;
			snprintf(only, sizeof(only), "%s", optarg);
			break;
		case 'q': cal.quick = true; break;
		case 'p': print = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "sd-calibrate: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (!*dir && default_dir(dir, sizeof(dir)))
		return 2;
	/* The first pass measures the emulator unmodelled, whatever the
	 * caller's environment selects. */
	unsetenv("SD_PROFILE");
	unsetenv("SD_MODEL_TOPOLOGY");
	cal.reps = cal.quick ? 3 : 9;
	cal.scale = cal.quick ? 0.1 : 1;

	/* Read before we load the machine ourselves. */
	FILE *f = fopen("/proc/loadavg", "r");

	if (f) {
		if (fscanf(f, "%63[^\n]", load) != 1)
			snprintf(load, sizeof(load), "?");
		fclose(f);
	}
	if (make_dirs(dir) || topo_init(synthetic, sizeof(synthetic)))
		return 1;
	announce(dir, load);
	signal(SIGALRM, watchdog);
	alarm(cal.quick ? 60 : 180);
	srand(1);

	double t0 = now_ns();

	no_vcpu_preemption(&host);
	no_vcpu_preemption(&kern);
	no_kpti(&host);
	no_kpti(&kern);
	set(&kern, P_LRU_PAGE, 0, "not measured: the LRU's per-folio work runs inside the "
	    "kernel's page freeing with nothing a user-space timer can isolate; 0 (the LRU "
	    "lock's handoffs and line transfers are still charged)");
	for (size_t g = 0; g < NR_GROUPS; g++) {
		if (!want[g])
			continue;
		if (group_fn[g]()) {
			fprintf(stderr, "sd-calibrate: measuring %s failed; no profile written\n",
				group_names[g]);
			return 1;
		}
	}
	fill_unmeasured(&host, only);
	fill_unmeasured(&kern, only);
	if (second_pass(want, synthetic)) {
		fprintf(stderr, "sd-calibrate: the second pass failed; no profile written\n");
		return 1;
	}
	alarm(0);
	describe(desc, sizeof(desc), load, (now_ns() - t0) / 1e9);
	if (print)
		print_table();
	if (write_profile(&host, dir, desc, synthetic) || write_profile(&kern, dir, desc, synthetic))
		return 1;
	hwloc_topology_destroy(cal.topo);
	return 0;
}
