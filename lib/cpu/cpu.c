/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include "../core/rcu.h"

#include <shootdown/mm.h>

#include "../core/error.h"
#include "../machine/machine.h"
#include "cpu.h"
#include "../flush/invlpgb.h"

_Thread_local struct sd_cpu *sd_this_cpu __attribute__((tls_model("initial-exec")));

size_t sd_cpu_area_size(unsigned l1, unsigned sets, unsigned ways)
{
	size_t size = sizeof(struct sd_cpu) + sd_tlb_storage_size(l1, sets, ways);

	return (size + SD_CACHELINE - 1) & ~(size_t)(SD_CACHELINE - 1);
}

void sd_cpu_area_init(struct sd_cpu *c, struct sd_machine *m, unsigned id, size_t size,
		      unsigned l1, unsigned sets, unsigned ways)
{
	/* hwloc_alloc() may come from posix_memalign: not zeroed. */
	memset(c, 0, size);
	c->id = id;
	c->m = m;
	c->alloc_size = size;
	__cds_lfs_init(&c->ipi_queue);
	atomic_init(&c->ipi_kick, 0);
	atomic_init(&c->ipi_senders, 0);
	atomic_init(&c->tid, 0);
	atomic_init(&c->attached, 0);
	atomic_init(&c->mm, NULL);
	atomic_init(&c->lazy, 0);
	c->irq_depth = 0;
	c->ipi_pending = 0;
	c->asid = 0;
	c->pinned = -1;
	c->checked = m->checked;
	sd_tlb_init(&c->tlb, (char *)c + sizeof(*c), l1, sets, ways);
}

static void note_unpinned(struct sd_machine *m, const char *note)
{
	pthread_mutex_lock(&m->pin_note_lock);
	if (!m->pin_note[0])
		snprintf(m->pin_note, sizeof(m->pin_note), "%s", note);
	pthread_mutex_unlock(&m->pin_note_lock);
	atomic_store(&m->any_unpinned, 1);
}

int sd_cpu_attach(struct sd_machine *m, unsigned id, struct sd_cpu **out)
{
	struct sd_cpu *c;
	char note[128];
	int expected = 0, pinned;

	if (!m || !out)
		return sd_fail(-EINVAL, "sd_cpu_attach: NULL argument");
	if (id >= m->nr_cpus)
		return sd_fail(-EINVAL, "CPU %u out of range (machine has %u)", id, m->nr_cpus);
	if (sd_this_cpu)
		return sd_fail(-EBUSY, "this thread is already attached as CPU %u", sd_this_cpu->id);
	c = m->cpus[id];
	if (!atomic_compare_exchange_strong(&c->attached, &expected, 1))
		return sd_fail(-EBUSY, "CPU %u already has a thread", id);

	pinned = sd_topology_bind_self(&m->topo, id, m->cfg.flags & SD_MACHINE_STRICT_PIN,
				       &c->binding, note, sizeof(note));
	if (pinned < 0) {
		atomic_store(&c->attached, 0);
		return pinned;
	}
	if (!pinned)
		note_unpinned(m, note);
	c->pinned = pinned;
	c->irq_depth = 0;
	c->ipi_pending = 0;
	/* A kick left by a signal that found the thread gone. */
	atomic_store(&c->ipi_kick, 0);
	/* The handler finds its CPU through sd_this_cpu: set it before the
	 * tid makes us reachable, or the first IPI would find no CPU, leave
	 * the kick set and never be answered. */
	sd_this_cpu = c;
	atomic_store(&c->tid, (int)syscall(SYS_gettid));
	sd_rcu_register();
	atomic_fetch_add(&m->nr_attached, 1);
	*out = c;
	return 0;
}

int sd_cpu_detach(struct sd_cpu *c)
{
	struct sd_machine *m;

	if (sd_cpu_check_self(c))
		return sd_fail(-EPERM, "sd_cpu_detach: caller is not attached as this CPU");
	if (c->irq_depth)
		return sd_fail(-EBUSY, "sd_cpu_detach: interrupts are off");
	m = c->m;
	sd_invlpgb_sync_self(c);
	sd_switch_mm(c, NULL);
	sd_ipi_offline(c);
	sd_frame_cache_drain(&m->frames, &c->frames);
	sd_rcu_unregister();
	sd_topology_unbind_self(&m->topo, &c->binding);
	sd_this_cpu = NULL;
	atomic_store(&c->attached, 0);
	atomic_fetch_sub(&m->nr_attached, 1);
	return 0;
}

struct sd_cpu *sd_cpu_self(void)
{
	return sd_this_cpu;
}

/* Getters follow error.h's rule: a NULL CPU reads as the neutral value. */
unsigned sd_cpu_id(const struct sd_cpu *c)
{
	if (!c)
		return (unsigned)sd_fail(0, "sd_cpu_id: NULL CPU");
	return c->id;
}

struct sd_machine *sd_cpu_machine(const struct sd_cpu *c)
{
	if (!c) {
		sd_fail(0, "sd_cpu_machine: NULL CPU");
		return NULL;
	}
	return c->m;
}

/*
 * One compare with the thread-local CPU (an initial-exec TLS load, as the
 * sd_access() hit path pays), so a stray call from another thread cannot
 * corrupt the owner's irq_depth, which only its own thread may write.
 */
void sd_irq_disable(struct sd_cpu *c)
{
	if (unlikely(sd_cpu_check_self(c))) {
		sd_fail(-EPERM, "sd_irq_disable: caller is not attached as this CPU");
		return;
	}
	sd_irq_off(c);
}

void sd_irq_enable(struct sd_cpu *c)
{
	if (unlikely(sd_cpu_check_self(c))) {
		sd_fail(-EPERM, "sd_irq_enable: caller is not attached as this CPU");
		return;
	}
	/* Unbalanced: a wrapped depth would hold interrupts off for good. */
	if (unlikely(!c->irq_depth)) {
		sd_fail(-EINVAL, "sd_irq_enable: interrupts are already on");
		return;
	}
	sd_irq_on(c);
}

int sd_irqs_disabled(const struct sd_cpu *c)
{
	if (!c)
		return sd_fail(0, "sd_irqs_disabled: NULL CPU");
	return c->irq_depth != 0;
}

void sd_cpu_qs(struct sd_cpu *c)
{
	c->ops_since_qs = 0;
	/* An idle CPU is offline (an extended quiescent state); announcing a
	 * quiescent state would bring it back online. */
	if (sd_rcu_online())
		sd_rcu_quiescent();
}

void sd_cpu_quiescent(struct sd_cpu *c)
{
	if (sd_cpu_check_self(c))
		sd_fail(-EPERM, "sd_cpu_quiescent: caller is not attached as this CPU");
	else if (c->irq_depth)
		sd_fail(-EINVAL, "sd_cpu_quiescent: interrupts are off");
	else
		sd_cpu_qs(c);
}

void sd_stat_flush_latency(struct sd_cpu *c, uint64_t ns)
{
	unsigned b = ns ? sd_ilog2(ns) : 0;

	if (b >= SD_STAT_HIST_BUCKETS)
		b = SD_STAT_HIST_BUCKETS - 1;
	sd_counter_add(&c->stats.flush_ns_hist[b], 1);
	sd_counter_add(&c->stats.flush_ns_total, ns);
}
