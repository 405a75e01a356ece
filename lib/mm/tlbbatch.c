/* SPDX-License-Identifier: MIT */
/*
 * Batched unmap flushes (arch_tlbbatch_*, mm/rmap.c's tlb_ubc). The batch
 * collects mms, frames and oracle floors; the strategy decides what one
 * flush of it costs: `ipi` sends one shootdown to the union of cpumasks,
 * the others flush each noted mm in turn.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/error.h"
#include "../hw/event.h"
#include "../core/ordering.h"
#include "../hw/machine_state.h"
#include "flush_ops.h"
#include "mm.h"
#include "tlbbatch.h"

int sd_tlbbatch_create(struct sd_machine *m, struct sd_tlbbatch **out)
{
	struct sd_tlbbatch *b;

	if (!m || !out)
		return sd_fail(-EINVAL, "sd_tlbbatch_create: NULL argument");
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	if (sd_cpumask_init(&b->cpus, m->nr_cpus)) {
		free(b);
		return -ENOMEM;
	}
	b->m = m;
	*out = b;
	return 0;
}

static bool batch_empty(const struct sd_tlbbatch *b)
{
	return !b->nr_mms && !b->nr_frames && !b->nr_pages;
}

int sd_tlbbatch_destroy(struct sd_tlbbatch *b)
{
	if (!b)
		return 0;
	if (!batch_empty(b))
		return sd_fail(-EBUSY, "sd_tlbbatch_destroy: the batch still owes a flush "
			       "(%zu mm(s)); call sd_tlbbatch_flush() first", b->nr_mms);
	sd_cpumask_destroy(&b->cpus);
	free(b->mms);
	free(b->frames);
	free(b->pages);
	free(b);
	return 0;
}

/* Grow *@v (of @size-byte elements) to hold one more; 0 or -ENOMEM. */
static int grow(void **v, size_t *cap, size_t n, size_t size)
{
	if (n < *cap)
		return 0;
	size_t ncap = *cap ? 2 * *cap : 16;
	void *p = realloc(*v, ncap * size);
	if (!p)
		return -ENOMEM;
	*v = p;
	*cap = ncap;
	return 0;
}

int sd_tlbbatch_reserve(struct sd_tlbbatch *b)
{
	return grow((void **)&b->mms, &b->cap_mms, b->nr_mms, sizeof(*b->mms));
}

int sd_tlbbatch_note(struct sd_cpu *cpu, struct sd_tlbbatch *b, struct sd_mm *mm, uint64_t vpn)
{
	const struct sd_strategy_ops *ops = cpu->m->ops;
	size_t i;

	for (i = 0; i < b->nr_mms && b->mms[i] != mm; i++)
		;
	if (i == b->nr_mms) {
		if (grow((void **)&b->mms, &b->cap_mms, b->nr_mms, sizeof(*b->mms)))
			return sd_fail(-ENOMEM, "sd_tlbbatch_add: out of memory");
		b->mms[b->nr_mms++] = mm;
		/* flush_tlb_batched_pending() sees this until our flush. */
		atomic_fetch_add(&mm->batch_pending, 1);
	}
	/* Every add bumps the generation, as every zap needs its flush. */
	if (ops->batch_add)
		ops->batch_add(cpu, &b->cpus, mm, vpn);
	return 0;
}

int sd_tlbbatch_hold_frame(struct sd_tlbbatch *b, uint64_t pfn)
{
	if (grow((void **)&b->frames, &b->cap_frames, b->nr_frames, sizeof(*b->frames)))
		return -ENOMEM;
	b->frames[b->nr_frames++] = pfn;
	return 0;
}

int sd_tlbbatch_hold_floor(struct sd_tlbbatch *b, struct sd_mm *mm, uint64_t vpn, uint64_t nr,
			   uint32_t version)
{
	if (grow((void **)&b->pages, &b->cap_pages, b->nr_pages, sizeof(*b->pages)))
		return -ENOMEM;
	b->pages[b->nr_pages++] = (struct sd_tlbbatch_page){ mm, vpn, nr, version };
	return 0;
}

static int check_batch(struct sd_cpu *cpu, struct sd_tlbbatch *b, const char *what)
{
	if (sd_cpu_check_self(cpu))
		return sd_fail(-EPERM, "%s: " SD_NOT_ATTACHED, what);
	if (!b || b->m != cpu->m)
		return sd_fail(-EINVAL, "%s: batch is NULL or belongs to another machine", what);
	return 0;
}

int sd_tlbbatch_add(struct sd_cpu *cpu, struct sd_tlbbatch *b, struct sd_mm *mm)
{
	int err = check_batch(cpu, b, "sd_tlbbatch_add");

	if (err)
		return err;
	if (!mm || mm->m != cpu->m)
		return sd_fail(-EINVAL, "sd_tlbbatch_add: mm is NULL or belongs to another machine");
	return sd_tlbbatch_note(cpu, b, mm, SD_BATCH_NO_VPN);
}

static void flush_batch(struct sd_cpu *cpu, struct sd_tlbbatch *b)
{
	const struct sd_strategy_ops *ops = cpu->m->ops;
	uint64_t t0;

	/* Test instrumentation: a flush about to start (see ordering.h). */
	sd_order_point(SD_ORDER_CHANGE_FLUSH, cpu->id);
	sd_event(cpu, SD_EV_FLUSH_BEGIN, 0, sd_flush_aux(SD_FLUSH_BATCH, 0));
	t0 = sd_event_flush_start(cpu);
	if (ops->batch_flush) {
		ops->batch_flush(cpu, &b->cpus);
	} else {
		for (size_t i = 0; i < b->nr_mms; i++)
			ops->flush_mm(cpu, b->mms[i]);
	}
	sd_event(cpu, SD_EV_FLUSH_END, sd_event_flush_ns(cpu, t0), SD_FLUSH_BATCH);
}

int sd_tlbbatch_flush(struct sd_cpu *cpu, struct sd_tlbbatch *b)
{
	int err = check_batch(cpu, b, "sd_tlbbatch_flush");

	if (err)
		return err;
	if (cpu->irq_depth)
		return sd_fail(-EINVAL, "sd_tlbbatch_flush: called with interrupts off");
	if (batch_empty(b))
		return 0;
	flush_batch(cpu, b);
	/* Only now is no translation older than the zaps left anywhere. */
	for (size_t i = 0; i < b->nr_pages; i++)
		sd_oracle_floor_raise_known(&b->pages[i].mm->floor, b->pages[i].vpn,
					    b->pages[i].nr, b->pages[i].version);
	sd_mm_free_frames(cpu, b->frames, b->nr_frames);
	for (size_t i = 0; i < b->nr_mms; i++)
		atomic_fetch_sub_explicit(&b->mms[i]->batch_pending, 1, memory_order_release);
	sd_cpumask_clearall(&b->cpus);
	b->nr_mms = b->nr_frames = b->nr_pages = 0;
	sd_cpu_qs(cpu);
	return 0;
}
