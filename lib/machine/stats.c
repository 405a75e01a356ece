/* SPDX-License-Identifier: MIT */
/*
 * The counters' reader (<shootdown/stats.h>): snapshots of the per-CPU
 * counters and the flush-latency histogram the event funnel writes
 * (hw/event.h), their differences, quantiles and printing.
 */
#include <errno.h>
#include <string.h>

#include <shootdown/stats.h>

#include "../core/error.h"
#include "../hw/machine_state.h"
#include "../hw/user_event.h"

static const char *const stat_names[SD_STAT_NR] = {
#define SD_STAT_NAME(id, name) name,
	SD_STAT_LIST(SD_STAT_NAME)
#undef SD_STAT_NAME
};

/* Counters last and a whole number of them per known size: see struct sd_stats. */
_Static_assert(SD_STATS_SIZE(SD_STAT_NR) == sizeof(struct sd_stats),
	       "struct sd_stats must end with its counters, unpadded");

/*
 * How many counters a caller's struct holds, from the size it compiled
 * (the sd_machine_config convention): -EINVAL with the detail for a size
 * no release ever had, so a wrong size is never read or written past.
 */
static int stats_nr_counters(const struct sd_stats *s, const char *fn)
{
	size_t head = SD_STATS_SIZE(0);

	if (s->size < head || s->size > sizeof(*s) ||
	    (s->size - head) % sizeof(s->counter[0]))
		return sd_fail(-EINVAL, "%s: struct sd_stats size %zu unknown (expected %zu): "
			       "start from SD_STATS_INIT", fn, s->size, sizeof(*s));
	return (int)((s->size - head) / sizeof(s->counter[0]));
}

/* A caller's struct, widened to ours: counters it does not know read as 0. */
static void stats_widen(struct sd_stats *full, const struct sd_stats *s)
{
	memset(full, 0, sizeof(*full));
	memcpy(full, s, s->size);
}

/* Hand @full back in the caller's size: never a byte past @out->size. */
static void stats_narrow(struct sd_stats *out, struct sd_stats *full)
{
	full->size = out->size;
	memcpy(out, full, out->size);
}

/* A counter's name: a program's own counter has the name it registered
 * (hw/user_event.c), if it did. */
static const char *name_of(unsigned id)
{
	const char *user = NULL;

	if (id >= SD_STAT_USER_0 && id <= SD_STAT_USER_15)
		user = sd_user_event_name(id - SD_STAT_USER_0);
	return user ? user : stat_names[id];
}

const char *sd_stat_name(enum sd_stat id)
{
	if ((unsigned)id >= SD_STAT_NR) {
		sd_fail(-EINVAL, "sd_stat_name: counter %u out of range", (unsigned)id);
		return NULL;
	}
	return name_of(id);
}

static void add_cpu(struct sd_stats *s, const struct sd_cpu *c)
{
	for (unsigned i = 0; i < SD_STAT_NR; i++)
		s->counter[i] += atomic_load_explicit(&c->stats.counter[i], memory_order_relaxed);
	/* The TLB's invalidation sequence counts every invalidation that
	 * reached it, local or remote, without a counter write on the path. */
	s->counter[SD_STAT_TLB_INVALS] += sd_tlb_invalidations(&c->tlb);
	/* Modelled time: the clock as the CPU last published it (exact once
	 * it detached), and its window waits; 0 without a profile. */
	s->counter[SD_STAT_MODEL_NS] +=
		atomic_load_explicit(&c->model_pub.clock_ps, memory_order_relaxed) / PS_PER_NS;
	s->counter[SD_STAT_MODEL_WINDOW_WAITS] +=
		atomic_load_explicit(&c->model_pub.window_waits, memory_order_relaxed);
	/* Derived, so the hit path bumps one counter, not two. */
	s->counter[SD_STAT_TLB_HIT] +=
		atomic_load_explicit(&c->stats.counter[SD_STAT_TLB_L1_HIT], memory_order_relaxed) +
		atomic_load_explicit(&c->stats.counter[SD_STAT_TLB_L2_HIT], memory_order_relaxed);
	for (unsigned i = 0; i < SD_STAT_HIST_BUCKETS; i++)
		s->flush_ns_hist[i] += atomic_load_explicit(&c->stats.flush_ns_hist[i],
							    memory_order_relaxed);
	s->flush_ns_total += atomic_load_explicit(&c->stats.flush_ns_total, memory_order_relaxed);
	s->nr_cpus++;
}

int sd_stats_snapshot(const struct sd_machine *m, struct sd_stats *out)
{
	struct sd_stats full = { .size = sizeof(full) };
	int err;

	if (!m || !out)
		return sd_fail(-EINVAL, "sd_stats_snapshot: NULL argument");
	err = stats_nr_counters(out, "sd_stats_snapshot");
	if (err < 0)
		return err;
	for (unsigned i = 0; i < m->nr_cpus; i++)
		add_cpu(&full, m->cpus[i]);
	stats_narrow(out, &full);
	return 0;
}

int sd_stats_cpu(const struct sd_machine *m, unsigned cpu, struct sd_stats *out)
{
	struct sd_stats full = { .size = sizeof(full) };
	int err;

	if (!m || !out || cpu >= m->nr_cpus)
		return sd_fail(-EINVAL, "sd_stats_cpu: NULL argument or CPU out of range");
	err = stats_nr_counters(out, "sd_stats_cpu");
	if (err < 0)
		return err;
	add_cpu(&full, m->cpus[cpu]);
	stats_narrow(out, &full);
	return 0;
}

void sd_stats_delta(const struct sd_stats *after, const struct sd_stats *before,
		    struct sd_stats *out)
{
	struct sd_stats a, b, d = { .size = sizeof(d) };

	if (!after || !before || !out) {
		sd_fail(-EINVAL, "sd_stats_delta: NULL argument");
		return;
	}
	if (stats_nr_counters(after, "sd_stats_delta") < 0 ||
	    stats_nr_counters(before, "sd_stats_delta") < 0 ||
	    stats_nr_counters(out, "sd_stats_delta") < 0)
		return;
	stats_widen(&a, after);
	stats_widen(&b, before);
	for (unsigned i = 0; i < SD_STAT_NR; i++)
		d.counter[i] = a.counter[i] - b.counter[i];
	for (unsigned i = 0; i < SD_STAT_HIST_BUCKETS; i++)
		d.flush_ns_hist[i] = a.flush_ns_hist[i] - b.flush_ns_hist[i];
	d.flush_ns_total = a.flush_ns_total - b.flush_ns_total;
	d.nr_cpus = a.nr_cpus;
	stats_narrow(out, &d);
}

uint64_t sd_stats_flush_ns_quantile(const struct sd_stats *s, double q)
{
	uint64_t total = 0, seen = 0;

	if (!s)
		return (uint64_t)sd_fail(0, "sd_stats_flush_ns_quantile: NULL stats");
	if (stats_nr_counters(s, "sd_stats_flush_ns_quantile") < 0)
		return 0;
	if (!(q >= 0.0 && q <= 1.0))    /* NaN too */
		return (uint64_t)sd_fail(0, "sd_stats_flush_ns_quantile: q = %g is not in [0, 1]", q);
	for (unsigned i = 0; i < SD_STAT_HIST_BUCKETS; i++)
		total += s->flush_ns_hist[i];
	if (!total)
		return 0;
	/* The first bucket whose cumulative count reaches q of the total
	 * (at least one sample, so q = 0 is the smallest bucket in use). */
	double want = q * (double)total < 1.0 ? 1.0 : q * (double)total;
	for (unsigned i = 0; i < SD_STAT_HIST_BUCKETS; i++) {
		seen += s->flush_ns_hist[i];
		if ((double)seen >= want)
			return UINT64_C(2) << i;
	}
	return UINT64_C(2) << (SD_STAT_HIST_BUCKETS - 1);
}

/* The writers' shared check: the counters @s knows, or -1 (reported) for a
 * NULL argument or a bad size. */
static int stats_writable(const struct sd_stats *s, FILE *f, const char *who)
{
	if (!s || !f) {
		sd_fail(-EINVAL, "%s: NULL argument", who);
		return -1;
	}
	return stats_nr_counters(s, who);
}

void sd_stats_print(const struct sd_stats *in, FILE *f)
{
	struct sd_stats full, *s = &full;
	int nr = stats_writable(in, f, "sd_stats_print");

	if (nr < 0)
		return;
	stats_widen(&full, in);
	for (int i = 0; i < nr; i++)
		if (s->counter[i])
			fprintf(f, "%-32s %llu\n", name_of(i), (unsigned long long)s->counter[i]);
	if (s->counter[SD_STAT_FLUSH]) {
		fprintf(f, "%-32s %llu\n", "flush_ns_mean",
			(unsigned long long)(s->flush_ns_total / s->counter[SD_STAT_FLUSH]));
		for (unsigned i = 0; i < SD_STAT_HIST_BUCKETS; i++)
			if (s->flush_ns_hist[i])
				fprintf(f, "  flush_ns [%llu, %llu) %llu\n",
					(unsigned long long)(UINT64_C(1) << i),
					(unsigned long long)(UINT64_C(2) << i),
					(unsigned long long)s->flush_ns_hist[i]);
	}
}

void sd_stats_json(const struct sd_stats *s, FILE *f)
{
	int nr = stats_writable(s, f, "sd_stats_json");

	if (nr < 0)
		return;
	fprintf(f, "{\"nr_cpus\": %u", s->nr_cpus);
	for (int i = 0; i < nr; i++)
		fprintf(f, ", \"%s\": %llu", name_of((unsigned)i), (unsigned long long)s->counter[i]);
	fprintf(f, ", \"flush_ns_total\": %llu, \"flush_ns_hist\": [",
		(unsigned long long)s->flush_ns_total);
	for (unsigned i = 0; i < SD_STAT_HIST_BUCKETS; i++)
		fprintf(f, "%s%llu", i ? ", " : "", (unsigned long long)s->flush_ns_hist[i]);
	fprintf(f, "]}\n");
}
