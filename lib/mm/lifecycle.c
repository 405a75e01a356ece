/* SPDX-License-Identifier: MIT */
/*
 * Address spaces: their creation and destruction, and what a destroyer
 * must wait for (CPUs that still hold the mm, lazily or running).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "../hw/event.h"
#include "../hw/machine_state.h"
#include "../hw/smp.h"
#include "flush_ops.h"
#include "mm.h"

int sd_mm_create(struct sd_machine *m, struct sd_mm **out)
{
	struct sd_mm *mm;
	int err;

	if (!m || !out)
		return sd_fail(-EINVAL, "sd_mm_create: NULL argument");
	mm = aligned_alloc(SD_CACHELINE, sizeof(*mm));
	if (!mm)
		return -ENOMEM;
	memset(mm, 0, sizeof(*mm));
	mm->m = m;
	mm->pgd = sd_pt_alloc();
	err = mm->pgd ? 0 : -ENOMEM;
	if (!err && m->checked)
		err = sd_oracle_floor_init(&mm->floor);
	if (!err)
		err = m->ops->mm_init(m, mm, &mm->strategy);
	if (err) {
		sd_oracle_floor_fini(&mm->floor);
		sd_pt_free(mm->pgd);
		free(mm);
		return err;
	}
	sd_rwsem_init(&mm->mmap_lock);
	mm->mmap_model = (struct sd_model_rwsem)SD_MODEL_RWSEM_INIT;
	atomic_init(&mm->batch_pending, 0);
	atomic_init(&mm->flush_pending, 0);
	mm->id = atomic_fetch_add(&m->next_mm_id, 1) + 1;
	/* Each mm's generations start in a range of their own, so a walk-cache
	 * entry left by a destroyed mm (whose tables sd_mm_destroy() frees at
	 * once) can never match a new mm that is given the same ASID, even
	 * by a strategy that reuses ASIDs without flushing walk caches. */
	atomic_init(&mm->table_gen, mm->id << 32);
	atomic_fetch_add(&m->nr_mms, 1);
	/* mm_alloc() + pgd_alloc() + init_new_context(): charged to the
	 * calling CPU if it is one of this machine's (a plain thread has no
	 * clock to charge). */
	struct sd_cpu *self = sd_this_cpu;
	if (self && self->m == m)
		sd_event(self, SD_EV_MM_CREATE, mm->id, 0);
	*out = mm;
	return 0;
}

struct teardown {
	struct sd_machine *m;
	uint64_t frames;        /* frames freed (modelled time) */
};

static void free_frame_of(uint64_t pte, void *arg)
{
	struct teardown *td = arg;

	/* The zero page is no frame of the pool's; a frame another mm still
	 * maps loses this mapping only. */
	if ((pte & SD_PTE_PRESENT) && !sd_pte_is_zero_page(pte) &&
	    sd_frame_put(&td->m->frames, NULL, sd_pte_pfn(pte)))
		td->frames++;
}

/*
 * 1 + the first CPU with @mm loaded (lazily or not), or 0. A scan rather
 * than a count: a counter would be two contended atomics on every context
 * switch, which Linux does not pay for switches between user tasks.
 * Switching to an mm while it is being destroyed is the caller's bug, as
 * for a task's mm in the kernel.
 */
static unsigned loaded_anywhere(const struct sd_mm *mm)
{
	const struct sd_machine *m = mm->m;

	for (unsigned i = 0; i < m->nr_cpus; i++)
		if (atomic_load_explicit(&m->cpus[i]->mm, memory_order_acquire) == mm)
			return i + 1;
	return 0;
}

/* 1 + the first CPU running @mm for real (not lazily), or 0. */
static unsigned running_anywhere(const struct sd_mm *mm)
{
	const struct sd_machine *m = mm->m;

	for (unsigned i = 0; i < m->nr_cpus; i++) {
		const struct sd_cpu *c = m->cpus[i];
		if (atomic_load_explicit(&c->mm, memory_order_acquire) == mm &&
		    !atomic_load_explicit(&c->lazy, memory_order_relaxed))
			return i + 1;
	}
	return 0;
}

/*
 * do_shoot_lazy_tlb(): on @c's own thread with interrupts off (the IPI
 * handler, or the destroyer on itself). If @c still holds @mm only lazily,
 * switch it to no mm (the kernel's switch to init_mm) through the strategy,
 * so its per-CPU state for @mm (loaded_mm, cpumask bits, active counts,
 * the ASID register) is released before the ack. A CPU that switched away
 * meanwhile, or back into @mm for real, is left alone: the destroyer sees
 * the latter in its rescan. The CPU stays idle (lazy) on no mm.
 */
static void drop_lazy_mm(struct sd_cpu *c, void *arg)
{
	struct sd_mm *mm = arg;

	if (atomic_load_explicit(&c->mm, memory_order_relaxed) != mm ||
	    !atomic_load_explicit(&c->lazy, memory_order_relaxed))
		return;
	c->m->ops->switch_mm(c, mm, NULL);
	/* Relaxed: the ack's release (ipi_run_queue()'s exchange to DONE)
	 * publishes it to the destroyer's rescan, which pairs with it through
	 * the acquire in sd_smp_call_wait(). */
	atomic_store_explicit(&c->mm, NULL, memory_order_relaxed);
}

/*
 * cleanup_lazy_tlbs() with CONFIG_MMU_LAZY_TLB_SHOOTDOWN: make every CPU
 * that holds @mm lazily drop it, IPIing the others and waiting for their
 * acks (interrupts on, so IPIs aimed at @self meanwhile are answered).
 * @self is the calling CPU of this machine, or NULL for a plain thread.
 */
static int shoot_lazy_cpus(struct sd_mm *mm, struct sd_cpu *self)
{
	struct sd_machine *m = mm->m;
	struct sd_smp_call_req *reqs = NULL;
	bool *posted = NULL;

	if (self && atomic_load_explicit(&self->mm, memory_order_relaxed) == mm) {
		sd_irq_off(self);
		drop_lazy_mm(self, mm);
		sd_irq_on(self);
	}
	if (!loaded_anywhere(mm))
		return 0;
	reqs = calloc(m->nr_cpus, sizeof(*reqs));
	posted = calloc(m->nr_cpus, sizeof(*posted));
	if (!reqs || !posted) {
		free(reqs);
		free(posted);
		return sd_fail(-ENOMEM, "sd_mm_destroy: no memory for the lazy-CPU IPIs");
	}
	/* Post to all first, then wait: the targets answer in parallel, as
	 * on_each_cpu_mask() does. A CPU with no thread (detaching) already
	 * switched to no mm before it went offline (sd_cpu_detach()). */
	for (unsigned i = 0; i < m->nr_cpus; i++) {
		struct sd_cpu *t = m->cpus[i];
		if (t == self || atomic_load_explicit(&t->mm, memory_order_acquire) != mm)
			continue;
		reqs[i].fn = drop_lazy_mm;
		reqs[i].async = false;
		reqs[i].arg = mm;
		posted[i] = sd_smp_call_post(self, t, &reqs[i]);
	}
	for (unsigned i = 0; i < m->nr_cpus; i++)
		if (posted[i])
			sd_smp_call_wait(self, &reqs[i]);
	free(reqs);
	free(posted);
	return 0;
}

int sd_mm_destroy(struct sd_mm *mm)
{
	struct sd_cpu *self = sd_this_cpu;
	struct sd_machine *m;
	unsigned busy;
	int err;

	if (!mm)
		return sd_fail(-EINVAL, "sd_mm_destroy: NULL mm");
	m = mm->m;
	if (self && self->irq_depth)
		return sd_fail(-EDEADLK, "sd_mm_destroy: interrupts are off on CPU %u (it could "
			       "not wait for lazy CPUs)", self->id);
	if ((busy = running_anywhere(mm)))
		return sd_fail(-EBUSY, "mm %llu is still loaded on CPU %u (switch it out first)",
			       (unsigned long long)mm->id, busy - 1);
	if (atomic_load(&mm->batch_pending))
		return sd_fail(-EBUSY, "mm %llu is in a TLB batch that was not flushed yet",
			       (unsigned long long)mm->id);
	err = shoot_lazy_cpus(mm, self && self->m == m ? self : NULL);
	if (err)
		return err;
	/* A CPU switched back into it while we shot the lazy ones (the
	 * caller's bug, but caught when we can): nothing freed. */
	if ((busy = loaded_anywhere(mm)))
		return sd_fail(-EBUSY, "mm %llu was loaded again on CPU %u while being destroyed",
			       (unsigned long long)mm->id, busy - 1);
	/* No CPU has it loaded, so no walk of it is in flight: its tables can
	 * go now. Its ASID is never reused without a flush (arm64: a new
	 * generation flushes every CPU first). */
	struct teardown td = { m, 0 };
	uint64_t tables = sd_pt_free_tree(mm->pgd, free_frame_of, &td);
	m->ops->mm_fini(m, mm, mm->strategy);
	/* exit_mmap(): the frames still mapped, the tables below the top
	 * level, and the fixed part (pgd_free, destroy_context) on the
	 * destroying CPU if it is one of this machine's. */
	if (self && self->m == m) {
		if (td.frames)
			sd_event(self, SD_EV_PAGE_FREE, td.frames, 0);
		if (tables > 1)
			sd_event(self, SD_EV_PT_FREE, tables - 1, 0);
		sd_event(self, SD_EV_MM_DESTROY, 0, 0);
	}
	sd_vma_free_all(mm);
	sd_oracle_floor_fini(&mm->floor);
	free(mm);
	atomic_fetch_sub(&m->nr_mms, 1);
	return 0;
}

uint64_t sd_mm_id(const struct sd_mm *mm)
{
	if (!mm)
		return (uint64_t)sd_fail(0, "sd_mm_id: NULL mm");
	return mm->id;
}
