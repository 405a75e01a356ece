/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "../hw/event.h"
#include "../hw/machine_state.h"
#include "invlpgb.h"

/* The CPU this thread issued unsynced INVLPGBs as, plus one (0: none),
 * and where they wait. */
static SD_THREAD_LOCAL unsigned unsynced_issuer;
static SD_THREAD_LOCAL struct sd_invlpgb *unsynced_ib;

int sd_invlpgb_init(struct sd_invlpgb *ib, unsigned nr_cpus)
{
	size_t size = sd_round_up(nr_cpus * sizeof(*ib->percpu), SD_CACHELINE);

	ib->nr_cpus = nr_cpus;
	ib->percpu = aligned_alloc(SD_CACHELINE, size);
	if (!ib->percpu)
		return -ENOMEM;
	memset(ib->percpu, 0, size);
	return 0;
}

size_t sd_invlpgb_bytes(const struct sd_invlpgb *ib)
{
	return sd_round_up(ib->nr_cpus * sizeof(*ib->percpu), SD_CACHELINE);
}

void sd_invlpgb_fini(struct sd_invlpgb *ib)
{
	free(ib->percpu);
	ib->percpu = NULL;
}

void sd_invlpgb(struct sd_cpu *cpu, struct sd_invlpgb *ib, const struct sd_tlb_inval *op)
{
	struct sd_invlpgb_cpu *me = &ib->percpu[cpu->id];

	if (me->nr_pending == SD_INVLPGB_INFLIGHT)
		(void)sd_tlbsync(cpu, ib);     /* the issue stalls until room */
	me->pending[me->nr_pending++] = *op;
	unsynced_issuer = cpu->id + 1;
	unsynced_ib = ib;
	sd_event(cpu, SD_EV_INVLPGB, op->vpn, op->kind == SD_TLB_INVAL_RANGE ? op->nr : 0);
}

int sd_tlbsync(struct sd_cpu *cpu, struct sd_invlpgb *ib)
{
	struct sd_invlpgb_cpu *me = &ib->percpu[cpu->id];
	struct sd_machine *m = cpu->m;

	if (cpu != sd_this_cpu)
		return sd_fail(-EPERM, "TLBSYNC for CPU %u from a thread that is not it", cpu->id);
	if (unsynced_issuer && unsynced_issuer != cpu->id + 1)
		return sd_fail(-EPERM, "TLBSYNC on CPU %u for INVLPGBs issued on CPU %u",
			       cpu->id, unsynced_issuer - 1);
	unsigned synced = me->nr_pending;

	for (unsigned i = 0; i < me->nr_pending; i++) {
		for (unsigned t = 0; t < ib->nr_cpus; t++)
			sd_tlb_invalidate(&m->cpus[t]->tlb, &me->pending[i]);
		sd_event(cpu, SD_EV_REMOTE_INVAL, ib->nr_cpus - 1, 0);
	}
	me->nr_pending = 0;
	unsynced_issuer = 0;
	unsynced_ib = NULL;
	sd_event(cpu, SD_EV_TLBSYNC, synced, 0);
	return 0;
}

void sd_invlpgb_sync_self(struct sd_cpu *cpu)
{
	if (unsynced_ib && unsynced_issuer == cpu->id + 1)
		(void)sd_tlbsync(cpu, unsynced_ib);
}
