/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../core/backoff.h"
#include "../hw/event.h"
#include "../hw/machine_state.h"
#include "rar.h"

int sd_rar_init(struct sd_rar *r, unsigned nr_cpus, unsigned nr_payloads, bool self_flush)
{
	size_t percpu = sd_round_up(nr_cpus * sizeof(*r->percpu), SD_CACHELINE);
	size_t reqs = sd_round_up((size_t)nr_cpus * SD_RAR_WINDOW * sizeof(*r->reqs), SD_CACHELINE);

	if (!nr_payloads || nr_payloads > SD_RAR_MAX_PAYLOADS)
		return -EINVAL;
	r->nr_cpus = nr_cpus;
	r->nr_payloads = nr_payloads;
	r->self_flush = self_flush;
	/* The slots past the CPU's count are in use for good (rar_in_use's
	 * ~(RAR_MAX_PAYLOADS - 1) start, here for any count). */
	atomic_init(&r->in_use, nr_payloads == 64 ? 0 : ~0ull << nr_payloads);
	r->percpu = aligned_alloc(SD_CACHELINE, percpu);
	r->reqs = aligned_alloc(SD_CACHELINE, reqs);
	if (!r->percpu || !r->reqs) {
		sd_rar_fini(r);
		return -ENOMEM;
	}
	memset(r->percpu, 0, percpu);
	memset(r->reqs, 0, reqs);
	for (unsigned i = 0; i < nr_cpus; i++) {
		r->percpu[i].req = &r->reqs[(size_t)i * SD_RAR_WINDOW];
		if (sd_cpumask_init(&r->percpu[i].dest, nr_cpus)) {
			sd_rar_fini(r);
			return -ENOMEM;
		}
	}
	return 0;
}

void sd_rar_fini(struct sd_rar *r)
{
	for (unsigned i = 0; r->percpu && i < r->nr_cpus; i++)
		if (r->percpu[i].dest.words)
			sd_cpumask_destroy(&r->percpu[i].dest);
	free(r->percpu);
	free(r->reqs);
	r->percpu = NULL;
	r->reqs = NULL;
}

size_t sd_rar_bytes(const struct sd_rar *r)
{
	size_t masks = r->nr_cpus ? r->nr_cpus * sd_cpumask_bytes(&r->percpu[0].dest) : 0;

	return sd_round_up(r->nr_cpus * sizeof(*r->percpu), SD_CACHELINE) +
	       sd_round_up((size_t)r->nr_cpus * SD_RAR_WINDOW * sizeof(*r->reqs), SD_CACHELINE) +
	       masks;
}

struct sd_tlb_inval sd_rar_op(uint16_t asid, uint64_t vpn, uint64_t nr, bool leaf_only)
{
	struct sd_tlb_inval op = { .kind = SD_TLB_INVAL_ALL };

	if (!asid)
		return op;             /* RAR_INVPCID_ALL: the kernel's own flushes */
	op.asid = asid;
	if (!nr || nr > SD_RAR_MAX_PAGES) {
		op.kind = SD_TLB_INVAL_ASID;           /* RAR_INVPCID_PCID */
		return op;
	}
	op.kind = SD_TLB_INVAL_RANGE;                  /* RAR_INVPCID_ADDR */
	op.vpn = vpn;
	op.nr = nr;
	op.leaf_only = leaf_only;
	return op;
}

/* ---- the target: microcode ---- */

void sd_rar_invalidate_local(struct sd_cpu *cpu, const struct sd_tlb_inval *op)
{
	sd_tlb_invalidate(&cpu->tlb, op);
	if (op->kind == SD_TLB_INVAL_RANGE)
		sd_event(cpu, SD_EV_FLUSH_PARTIAL, op->nr, 0);
	else
		sd_event(cpu, SD_EV_FLUSH_FULL, 0, 0);
}

/*
 * The RAR handler: every PENDING entry of this CPU's action vector, in slot
 * order, each completed with SUCCESS. The acquire load of the byte pairs
 * with the initiator's release store of PENDING after the payload; the
 * release store of SUCCESS, after the invalidation, pairs with the
 * initiator's acquire read before it frees the slot. A self-RAR's entry
 * (the initiator is this CPU) invalidates only if the hardware does so.
 */
static void rar_service(struct sd_cpu *cpu, void *arg)
{
	struct sd_rar *r = arg;
	struct sd_rar_cpu *me = &r->percpu[cpu->id];

	for (unsigned s = 0; s < r->nr_payloads; s++) {
		if (atomic_load_explicit(&me->action[s], memory_order_acquire) != SD_RAR_PENDING)
			continue;
		const struct sd_rar_payload *p = &r->payload[s];
		if (p->initiator != cpu->id || r->self_flush)
			sd_rar_invalidate_local(cpu, &p->op);
		atomic_store_explicit(&me->action[s], SD_RAR_SUCCESS, memory_order_release);
		sd_event(cpu, SD_EV_RAR_DONE, s, 0);
	}
}

/* ---- the initiator ---- */

/*
 * get_payload_slot(): the first free bit, claimed by a test-and-set; while
 * the table is full, spin until an initiator frees one (free_payload_slot()
 * says so to a parked waiter: sd_wait_released()).
 */
static unsigned get_slot(struct sd_cpu *cpu, struct sd_rar *r)
{
	struct sd_backoff b = SD_BACKOFF_INIT;
	bool waited = false;

	for (;;) {
		uint64_t used = atomic_load_explicit(&r->in_use, memory_order_relaxed);

		if (~used) {
			unsigned bit = (unsigned)__builtin_ctzll(~used);
			uint64_t mask = 1ull << bit;
			/* Acquire: the slot's last user finished with its
			 * payload before its release in free_slot(). */
			if (!(atomic_fetch_or_explicit(&r->in_use, mask, memory_order_acquire) & mask))
				return bit;
			continue;
		}
		if (!waited) {
			sd_event(cpu, SD_EV_RAR_SLOT_WAIT, 0, 0);
			waited = true;
		}
		sd_backoff_wait(&b);
	}
}

static void free_slot(struct sd_rar *r, unsigned slot)
{
	/* Release: partner of get_slot()'s acquire. */
	atomic_fetch_and_explicit(&r->in_use, ~(1ull << slot), memory_order_release);
	sd_wait_released();
}

/* The oldest signal of the ring acknowledged: its request is free again. */
static void reap_one(struct sd_cpu *cpu, struct sd_rar_cpu *me)
{
	(void)sd_smp_call_wait(cpu, &me->req[me->nr_reaped % SD_RAR_WINDOW]);
	me->nr_reaped++;
}

/* native_send_rar_ipi() to one target, the ring making room first. */
static void send_one(struct sd_cpu *cpu, struct sd_rar *r, struct sd_rar_cpu *me, unsigned t)
{
	if (me->nr_posted - me->nr_reaped == SD_RAR_WINDOW)
		reap_one(cpu, me);
	struct sd_smp_call_req *req = &me->req[me->nr_posted % SD_RAR_WINDOW];

	req->fn = rar_service;
	req->arg = r;
	req->async = false;
	/* No thread: an offline CPU, which the kernel never signals (its
	 * byte is put back in wait_all()). */
	if (sd_smp_rar_post(cpu, cpu->m->cpus[t], req))
		me->nr_posted++;
}

/*
 * wait_for_action_done() on every target: its signal's request done, its
 * byte reads SUCCESS (the service ran after our PENDING store, so it saw
 * it). A byte an offline CPU never serviced is put back to SUCCESS here.
 */
static void wait_all(struct sd_cpu *cpu, struct sd_rar *r, struct sd_rar_cpu *me,
		     const struct sd_cpumask *dest, unsigned slot)
{
	unsigned t;

	while (me->nr_reaped < me->nr_posted)
		reap_one(cpu, me);
	sd_cpumask_for_each(t, dest) {
		SD_ATOMIC(uint8_t) *b = &r->percpu[t].action[slot];
		uint8_t expect = SD_RAR_PENDING;

		/* Acquire: partner of the service's SUCCESS store. */
		if (atomic_load_explicit(b, memory_order_acquire) == SD_RAR_PENDING)
			atomic_compare_exchange_strong(b, &expect, SD_RAR_SUCCESS);
	}
}

void sd_rar_call_many(struct sd_cpu *cpu, struct sd_rar *r, const struct sd_cpumask *mask,
		      bool self, const struct sd_tlb_inval *op)
{
	struct sd_rar_cpu *me = &r->percpu[cpu->id];
	struct sd_cpumask *dest = &me->dest;
	unsigned t, n = 0;

	sd_cpumask_clearall(dest);
	sd_cpumask_for_each(t, mask)
		if (t != cpu->id || self) {
			sd_cpumask_set(dest, t);
			n++;
		}
	if (!n)
		return;
	unsigned slot = get_slot(cpu, r);

	r->payload[slot].op = *op;
	r->payload[slot].initiator = cpu->id;
	sd_event(cpu, SD_EV_RAR_PAYLOAD, slot, 0);
	/* set_action_entry(): release, so the microcode that reads PENDING
	 * reads the payload above (set_payload()'s smp_wmb()). */
	sd_cpumask_for_each(t, dest)
		atomic_store_explicit(&r->percpu[t].action[slot], SD_RAR_PENDING,
				      memory_order_release);
	sd_cpumask_for_each(t, dest) {
		if (t == cpu->id)
			continue;
		send_one(cpu, r, me, t);
	}
	/* A self-RAR: the microcode here takes it at once. */
	if (sd_cpumask_test(dest, cpu->id)) {
		sd_irq_off(cpu);
		rar_service(cpu, r);
		sd_irq_on(cpu);
	}
	wait_all(cpu, r, me, dest, slot);
	free_slot(r, slot);
}
