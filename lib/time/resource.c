/* SPDX-License-Identifier: MIT */
/*
 * The shared resources of modelled time (resource.h says what each
 * models). Pure functions of timestamps and the resource's own state.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "resource.h"

static inline uint64_t max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

uint64_t sd_model_hist_reserve(struct sd_model_hist *h, struct sd_model_busy *busy,
			       unsigned cap, uint64_t t, uint64_t occ)
{
	uint64_t start;
	unsigned i;

	if (h->n == cap) {
		h->floor_ps = max_u64(h->floor_ps, busy[0].end_ps);
		memmove(&busy[0], &busy[1], --h->n * sizeof(busy[0]));
	}
	start = max_u64(t, h->floor_ps);
	for (i = 0; i < h->n; i++) {
		if (busy[i].end_ps <= start)
			continue;
		if (busy[i].start_ps >= start + occ)
			break;
		start = busy[i].end_ps;
	}
	if (occ) {
		memmove(&busy[i + 1], &busy[i], (h->n - i) * sizeof(busy[0]));
		busy[i].start_ps = start;
		busy[i].end_ps = start + occ;
		h->n++;
		h->last_end_ps = max_u64(h->last_end_ps, start + occ);
	}
	return start;
}

/* Sorted by start, each hold that reaches into the gap moves it past its
 * end. */
uint64_t sd_model_lock_gap(const struct sd_model_lock *l, uint64_t t, uint64_t need,
			   uint32_t *prev)
{
	uint64_t start = t;

	for (uint32_t i = 0; i < l->n; i++) {
		if (l->busy[i].end_ps <= start) {
			*prev = l->busy[i].cpu;
			continue;
		}
		if (l->busy[i].start_ps >= start + need)
			break;
		start = l->busy[i].end_ps;
		*prev = l->busy[i].cpu;
	}
	return start;
}

/*
 * When full, the earliest hold is forgotten. An acquirer earlier still
 * then goes at once, as if the lock were free: it may overlap a forgotten
 * hold, which is less wrong than the alternative (waiting for every
 * forgotten hold) once many CPUs share a lock: with more CPUs than slots
 * inside a window, that would pull each acquirer up to the leaders' time.
 */
void sd_model_lock_record(struct sd_model_lock *l, uint64_t start, uint64_t end, uint32_t cpu)
{
	uint32_t i;

	if (l->n == SD_MODEL_LOCK_SLOTS)
		memmove(&l->busy[0], &l->busy[1], --l->n * sizeof(l->busy[0]));
	for (i = l->n; i > 0 && l->busy[i - 1].start_ps > start; i--)
		l->busy[i] = l->busy[i - 1];
	l->busy[i].start_ps = start;
	l->busy[i].end_ps = end;
	l->busy[i].cpu = cpu;
	l->n++;
	l->hold_ps = (3 * l->hold_ps + (end - start)) / 4;
}

int sd_model_cal_init(struct sd_model_calendar *cal, uint32_t nr, uint64_t bucket_ps)
{
	cal->b = calloc(nr, sizeof(*cal->b));
	if (!cal->b)
		return -ENOMEM;
	cal->nr = nr;
	cal->bucket_ps = bucket_ps;
	return 0;
}

void sd_model_cal_fini(struct sd_model_calendar *cal)
{
	free(cal->b);
	cal->b = NULL;
	cal->nr = 0;
}

/* The bucket for modelled time @t, emptied if it held an older time;
 * NULL if it holds a newer one (@t is older than the calendar covers). */
static struct sd_model_bucket *cal_bucket(struct sd_model_calendar *cal, uint64_t t)
{
	uint64_t epoch = t / cal->bucket_ps + 1;
	struct sd_model_bucket *b = &cal->b[epoch & (cal->nr - 1)];

	if (b->epoch > epoch)
		return NULL;
	if (b->epoch < epoch) {
		b->epoch = epoch;
		b->busy_ps = 0;
		b->last_cpu = SD_MODEL_NONE;
	}
	return b;
}

/*
 * A fluid queue: each bucket has @bucket_ps of capacity, holds fill it
 * from its start, and a hold longer than what is left of its bucket pours
 * over into the next ones' free capacity. Work is conserved (a saturated
 * lock serialises exactly); where inside a bucket a hold sits is
 * approximate, by at most a bucket.
 */
uint64_t sd_model_cal_gap(struct sd_model_calendar *cal, uint64_t t, uint32_t *prev)
{
	const uint64_t w = cal->bucket_ps;
	uint64_t start = t;

	for (uint32_t i = 0; i < cal->nr; i++) {
		struct sd_model_bucket *b = cal_bucket(cal, start);
		uint64_t from = start - start % w;

		if (!b)
			break;
		if (b->busy_ps)
			*prev = b->last_cpu;
		if (b->busy_ps < w) {
			start = max_u64(start, from + b->busy_ps);
			break;
		}
		start = from + w;
	}
	return start;
}

void sd_model_cal_record(struct sd_model_calendar *cal, uint64_t start, uint64_t len,
			 uint32_t cpu)
{
	const uint64_t w = cal->bucket_ps;

	for (uint32_t i = 0; i < cal->nr && len; i++) {
		struct sd_model_bucket *b = cal_bucket(cal, start);
		uint64_t room, put;

		if (!b)
			break;
		room = b->busy_ps < w ? w - b->busy_ps : 0;
		put = len < room ? len : room;
		b->busy_ps += put;
		if (put)
			b->last_cpu = cpu;
		len -= put;
		start = start - start % w + w;
	}
}

/* Each search can only move the start later, and each move passes a
 * remembered hold, so it ends within their number of rounds. */
uint64_t sd_model_rwsem_write_gap(const struct sd_model_rwsem *rw, uint64_t t, uint64_t need)
{
	uint32_t prev;

	for (unsigned round = 0; round <= 2 * SD_MODEL_LOCK_SLOTS; round++) {
		uint64_t after_w = sd_model_lock_gap(&rw->writers, t, need, &prev);
		uint64_t after_r = sd_model_lock_gap(&rw->readers, after_w, need, &prev);

		if (after_r == t)
			break;
		t = after_r;
	}
	return t;
}

uint64_t sd_model_rwsem_read_gap(const struct sd_model_rwsem *rw, uint64_t t)
{
	uint32_t prev;

	return sd_model_lock_gap(&rw->writers, t, rw->readers.hold_ps, &prev);
}

enum sd_model_line_cost sd_model_line_access(struct sd_model_line *line, uint32_t cpu,
					     bool write, uint32_t *from)
{
	uint32_t w = atomic_load_explicit(&line->writer, memory_order_relaxed);
	uint64_t me = 1ull << (cpu % 64);
	uint64_t readers = atomic_load_explicit(&line->readers, memory_order_relaxed);
	enum sd_model_line_cost cost = SD_LINE_HIT;

	if (w && w - 1 != cpu && !(!write && (readers & me))) {
		cost = SD_LINE_FETCH;
		*from = w - 1;
	} else if (write && (readers & ~me)) {
		cost = SD_LINE_INVALIDATE;
	}
	if (write) {
		if (w != cpu + 1)
			atomic_store_explicit(&line->writer, cpu + 1, memory_order_relaxed);
		if (readers)
			atomic_store_explicit(&line->readers, 0, memory_order_relaxed);
	} else if (!(readers & me)) {
		atomic_fetch_or_explicit(&line->readers, me, memory_order_relaxed);
	}
	return cost;
}
