/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../hw/event.h"
#include "../hw/machine_state.h"
#include "sbi.h"

int sd_sbi_init(struct sd_sbi *s, unsigned nr_cpus, uint64_t flush_limit_pages)
{
	size_t percpu = sd_round_up(nr_cpus * sizeof(*s->percpu), SD_CACHELINE);
	size_t reqs = sd_round_up((size_t)nr_cpus * SD_SBI_WINDOW * sizeof(*s->reqs), SD_CACHELINE);

	if (!flush_limit_pages)
		return -EINVAL;
	s->nr_cpus = nr_cpus;
	s->flush_limit_pages = flush_limit_pages;
	s->percpu = aligned_alloc(SD_CACHELINE, percpu);
	s->reqs = aligned_alloc(SD_CACHELINE, reqs);
	if (!s->percpu || !s->reqs) {
		sd_sbi_fini(s);
		return -ENOMEM;
	}
	memset(s->percpu, 0, percpu);
	memset(s->reqs, 0, reqs);
	for (unsigned i = 0; i < nr_cpus; i++)
		s->percpu[i].req = &s->reqs[(size_t)i * SD_SBI_WINDOW];
	return 0;
}

void sd_sbi_fini(struct sd_sbi *s)
{
	free(s->percpu);
	free(s->reqs);
	s->percpu = NULL;
	s->reqs = NULL;
}

size_t sd_sbi_bytes(const struct sd_sbi *s)
{
	return sd_round_up(s->nr_cpus * sizeof(*s->percpu), SD_CACHELINE) +
	       sd_round_up((size_t)s->nr_cpus * SD_SBI_WINDOW * sizeof(*s->reqs), SD_CACHELINE);
}

void sd_sbi_sfence_local(struct sd_cpu *cpu, const struct sd_tlb_inval *op)
{
	sd_tlb_invalidate(&cpu->tlb, op);
	switch (op->kind) {
	case SD_TLB_INVAL_RANGE:
		for (uint64_t i = 0; i < op->nr; i++)
			sd_event(cpu, SD_EV_LOCAL_FLUSH_ONE, op->vpn + i, 0);
		break;
	case SD_TLB_INVAL_ASID:
		sd_event(cpu, SD_EV_LOCAL_FLUSH_ASID, 0, 0);
		break;
	case SD_TLB_INVAL_ALL:
		sd_event(cpu, SD_EV_LOCAL_FLUSH_ALL, 0, 0);
		break;
	}
}

/*
 * tlb_process() on the target, in M-mode: the caller's fence. Its @op is
 * stable until the caller's tlb_sync() has seen this request done (the
 * ack, a release that its wait acquires).
 */
static void sbi_service(struct sd_cpu *t, void *arg)
{
	const struct sd_sbi_cpu *caller = arg;

	sd_sbi_sfence_local(t, &caller->op);
	sd_event(t, SD_EV_REMOTE_INVAL_RECV, 0, 0);
}

/* The oldest request of the ring done: free again. */
static void reap_one(struct sd_cpu *cpu, struct sd_sbi_cpu *me)
{
	(void)sd_smp_call_wait(cpu, &me->req[me->nr_reaped % SD_SBI_WINDOW]);
	me->nr_reaped++;
}

/* tlb_update() for one target: queued, its MSIP raised. */
static void send_one(struct sd_cpu *cpu, struct sd_sbi_cpu *me, unsigned t)
{
	if (me->nr_posted - me->nr_reaped == SD_SBI_WINDOW)
		reap_one(cpu, me);
	struct sd_smp_call_req *req = &me->req[me->nr_posted % SD_SBI_WINDOW];

	req->fn = sbi_service;
	req->arg = me;
	req->async = false;
	/* No thread: an offline hart, which the firmware never signals
	 * (the kernel passes it no offline hart either). */
	if (sd_smp_sbi_post(cpu, cpu->m->cpus[t], req))
		me->nr_posted++;
}

/* The firmware's own limit: a range longer than tlb_range_flush_limit is
 * flushed as its ASID (sbi_tlb_local_sfence_vma_asid()). */
static struct sd_tlb_inval widen(struct sd_cpu *cpu, const struct sd_sbi *s,
				 const struct sd_tlb_inval *op)
{
	struct sd_tlb_inval w = *op;

	if (op->kind == SD_TLB_INVAL_RANGE && op->nr > s->flush_limit_pages) {
		w.kind = SD_TLB_INVAL_ASID;
		w.vpn = w.nr = 0;
		sd_event(cpu, SD_EV_SBI_RANGE_WIDENED, 0, 0);
	}
	return w;
}

void sd_sbi_remote_sfence_vma(struct sd_cpu *cpu, struct sd_sbi *s,
			      const struct sd_cpumask *mask, const struct sd_tlb_inval *op)
{
	struct sd_sbi_cpu *me = &s->percpu[cpu->id];
	unsigned t, others = 0;

	sd_cpumask_for_each(t, mask)
		others += t != cpu->id;
	sd_event(cpu, SD_EV_SBI_ECALL, others, 0);
	me->op = widen(cpu, s, op);
	sd_cpumask_for_each(t, mask) {
		if (t != cpu->id)
			send_one(cpu, me, t);
	}
	/* The caller's own hart: done in its ecall, in M-mode, while the
	 * others take their interrupts. */
	if (sd_cpumask_test(mask, cpu->id))
		sd_sbi_sfence_local(cpu, &me->op);
	if (others)
		sd_event(cpu, SD_EV_REMOTE_FLUSH, 0, 0);
	/* tlb_sync(): every target counted itself done. */
	while (me->nr_reaped < me->nr_posted)
		reap_one(cpu, me);
}
