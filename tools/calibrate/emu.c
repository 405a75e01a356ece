/* SPDX-License-Identifier: MIT */
/*
 * The emulator on one CPU (the calling thread attached): a machine
 * through the public API, its mappings and TLB-geometry passes.
 */
#include "calibrate.h"

struct emu_geometry emu_geom;

int emu_create(struct sd_machine **m, const char *strategy, unsigned nr_cpus)
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
int emu_open(struct emu *e, const char *strategy)
{
	memset(e, 0, sizeof(*e));
	if (emu_create(&e->m, strategy, 1))
		return -1;
	TRY(sd_cpu_attach(e->m, 0, &e->cpu));
	TRY(sd_mm_create(e->m, &e->mm));
	TRY(sd_switch_mm(e->cpu, e->mm));
	return 0;
}
void emu_close(struct emu *e)
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
int emu_map(struct emu *e, unsigned nr_seq)
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
void emu_tlb_measure(struct emu *e, unsigned nr_seq, struct emu_tlb *out)
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
double emu_spread_wc_frac(struct emu *e)
{
	uint64_t wc0 = stat_of(e, SD_STAT_WALK_CACHE_HIT), pw0 = stat_of(e, SD_STAT_PAGE_WALK);

	emu_cold_pass(e, VA_SPREAD, REGION, NR_SPREAD, false);
	uint64_t pw = stat_of(e, SD_STAT_PAGE_WALK) - pw0;

	return pw ? (double)(stat_of(e, SD_STAT_WALK_CACHE_HIT) - wc0) / (double)pw : 0;
}
