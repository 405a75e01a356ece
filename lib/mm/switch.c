/* SPDX-License-Identifier: MIT */
/*
 * Context switches and idle: switch_mm_irqs_off()'s bookkeeping on the
 * emulated CPU, and lazy TLB mode.
 */
#include <errno.h>

#include "../core/error.h"
#include "../core/ordering.h"
#include "../core/rcu.h"
#include "../hw/event.h"
#include "../hw/machine_state.h"
#include "../hw/smp.h"
#include "flush_ops.h"
#include "mm.h"

/* ---- context switch and idle ---- */

static void rcu_online(struct sd_cpu *c)
{
	if (!sd_rcu_online())
		sd_rcu_thread_online();
}

int sd_switch_mm(struct sd_cpu *c, struct sd_mm *next)
{
	struct sd_mm *prev;

	if (sd_cpu_check_self(c))
		return sd_fail(-EPERM, "sd_switch_mm: " SD_NOT_ATTACHED);
	if (next && next->m != c->m)
		return sd_fail(-EINVAL, "sd_switch_mm: mm belongs to another machine");
	rcu_online(c);
	sd_order_point(SD_ORDER_SWITCH_ENTER, c->id);
	/* Modelled time: back from idle, at the running CPUs' time. */
	sd_event_run_state(c, SD_MODEL_RUNNING);
	sd_event(c, SD_EV_SWITCH_BEGIN, next ? next->id : 0, 0);
	sd_irq_off(c);
	/* Read under interrupts off: an IPI from sd_mm_destroy() may switch
	 * a lazy CPU away from its mm (drop_lazy_mm()), and a prev read
	 * before it would hand the strategy a stale, soon freed, mm. */
	prev = atomic_load_explicit(&c->mm, memory_order_relaxed);
	c->m->ops->switch_mm(c, prev, next);
	/* Release, pairing with the acquire in sd_mm_destroy()'s scans
	 * (loaded_anywhere(), running_anywhere()): a destroyer that sees
	 * this CPU gone from @prev frees it without an IPI, so everything
	 * this CPU did with @prev (switch_mm above, sd_cpu_idle()'s read of
	 * its id) must happen before. Any ordering other CPUs need for the
	 * flush (nr_active, cpumasks) is the strategy's, inside switch_mm. */
	atomic_store_explicit(&c->mm, next, memory_order_release);
	/* The barrier after the rq->curr update that membarrier() counts
	 * on (switch_mm's own, in the kernel): a handshake that reads the
	 * new mm here also sees this CPU's barrier. */
	sd_cpu_passed_barrier(c);
	if (atomic_load_explicit(&c->lazy, memory_order_relaxed)) {
		atomic_store_explicit(&c->lazy, 0, memory_order_relaxed);
		sd_event(c, SD_EV_LAZY_LEAVE, next ? next->id : 0, 0);
	}
	sd_irq_on(c);
	sd_event(c, SD_EV_SWITCH_END, 0, 0);
	sd_cpu_qs(c);
	return 0;
}

void sd_cpu_enter_lazy(struct sd_cpu *c)
{
	struct sd_mm *mm;

	sd_irq_off(c);
	/* Under interrupts off, as in sd_switch_mm(). */
	mm = atomic_load_explicit(&c->mm, memory_order_relaxed);
	if (!atomic_load_explicit(&c->lazy, memory_order_relaxed)) {
		if (mm && c->m->ops->enter_lazy)
			c->m->ops->enter_lazy(c, mm);
		sd_event(c, SD_EV_LAZY_ENTER, mm ? mm->id : 0, 0);
	}
	atomic_store_explicit(&c->lazy, 1, memory_order_relaxed);
	sd_irq_on(c);
}

int sd_cpu_idle(struct sd_cpu *c)
{
	if (sd_cpu_check_self(c))
		return sd_fail(-EPERM, "sd_cpu_idle: " SD_NOT_ATTACHED);
	sd_cpu_enter_lazy(c);
	/* Modelled time: an idle CPU holds nobody back; in strict mode it
	 * first takes the IPIs already on their way. */
	sd_smp_seq_settle(c);
	sd_event_run_state(c, SD_MODEL_IDLE);
	/* Idle is an extended quiescent state: grace periods need nothing
	 * from this CPU until it switches to an mm again. */
	if (sd_rcu_online())
		sd_rcu_thread_offline();
	return 0;
}

struct sd_mm *sd_cpu_current_mm(const struct sd_cpu *c)
{
	if (!c) {
		sd_fail(0, "sd_cpu_current_mm: NULL CPU");
		return NULL;
	}
	return atomic_load_explicit(&c->mm, memory_order_relaxed);
}
