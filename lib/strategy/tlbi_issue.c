/* SPDX-License-Identifier: MIT */
/*
 * Issuing an arm64 flush: the TLBI ops a flush of a range or an ASID is
 * made of (__flush_tlb_range(), flush_tlb_mm()), each one DVM message to
 * every CPU (TLBI ...IS) or a non-shareable op on the issuing CPU alone,
 * doubled under KPTI (__tlbi_user()) and repeated after a DSB under the
 * repeat-TLBI erratum's workaround, and the DSB that completes them. Below
 * broadcast.c's flush selection and the modes that choose among them
 * (active_cpu.c, tlb_mode.c), which all issue their TLBIs here.
 */
#include "../hw/event.h"
#include "../hw/machine_state.h"
#include "../mm/mm.h"
#include "broadcast.h"

/* m->strategy is a struct sd_broadcast (or one embedded first in a
 * strategy built on it); mm->strategy a struct sd_broadcast_mm. */
static inline struct sd_broadcast *bcast_of(struct sd_machine *m)
{
	return m->strategy;
}

static inline struct sd_broadcast_mm *bcast_mm_of(struct sd_mm *mm)
{
	return mm->strategy;
}

void sd_broadcast_tlbi(struct sd_cpu *cpu, const struct sd_tlb_inval *op)
{
	struct sd_machine *m = cpu->m;
	struct sd_broadcast *b = bcast_of(m);

	sd_event_spin_lock(cpu, &b->dvm, SD_LOCK_DVM);
	for (unsigned i = 0; i < m->nr_cpus; i++)
		sd_tlb_invalidate(&m->cpus[i]->tlb, op);
	sd_spin_unlock(&b->dvm);
	sd_event(cpu, SD_EV_TLBI_OP, m->nr_cpus - 1,
		 op->kind == SD_TLB_INVAL_RANGE ? op->nr : 0);
	if (op->kind != SD_TLB_INVAL_RANGE)
		sd_event(cpu, SD_EV_TLBI_ASID_OP, 0, 0);
	sd_event(cpu, SD_EV_REMOTE_INVAL, m->nr_cpus - 1, 0);
}

bool sd_broadcast_mm_asid(struct sd_cpu *cpu, struct sd_mm *mm, uint16_t *asid)
{
	struct sd_broadcast *b = bcast_of(cpu->m);
	uint64_t id = atomic_load_explicit(&bcast_mm_of(mm)->ctx_id,
					   memory_order_relaxed);

	/* An mm that never ran has no entries anywhere. One that ran in an
	 * older generation may still be live under its reserved number, so
	 * its number is flushed as it stands. */
	if (!id)
		return false;
	*asid = sd_arm64_asid_of(&b->asid, id);
	return true;
}

struct tlbi_issue {
	struct sd_cpu *cpu;
	uint16_t asid;
	bool leaf_only;
	bool local_only;
	bool kpti;
	bool repeat;
};

/* One TLBI instruction, broadcast or local. */
static void tlbi_once(struct sd_cpu *cpu, const struct sd_tlb_inval *inv, bool local_only,
		      enum sd_tlbi_op_kind kind, uint64_t vpn, uint64_t pages)
{
	if (!local_only) {
		sd_broadcast_tlbi(cpu, inv);
		return;
	}
	sd_tlb_invalidate(&cpu->tlb, inv);
	sd_event(cpu, inv->kind == SD_TLB_INVAL_ASID ? SD_EV_LOCAL_FLUSH_ASID
		 : kind == SD_TLBI_OP_PAGE ? SD_EV_LOCAL_FLUSH_ONE : SD_EV_LOCAL_FLUSH_RANGE,
		 vpn, pages);
}

/* One TLBI op: a single broadcast message (or a local op), whatever the
 * number of pages it covers; each TLB it reaches pays one scan at most. */
static void issue_tlbi(const struct sd_tlbi_op *op, void *arg)
{
	const struct tlbi_issue *t = arg;
	struct sd_tlb_inval inv = {
		.kind = op->kind == SD_TLBI_OP_ASID ? SD_TLB_INVAL_ASID : SD_TLB_INVAL_RANGE,
		.asid = t->asid,
		.leaf_only = t->leaf_only,
		.vpn = op->vpn,
		.nr = op->pages,
	};
	struct sd_cpu *cpu = t->cpu;

	if (op->kind == SD_TLBI_OP_RANGE)
		sd_event(cpu, (enum sd_event)(SD_EV_TLBI_RANGE_S0 + op->scale), 0, 0);
	else if (op->kind == SD_TLBI_OP_PAGE)
		sd_event(cpu, SD_EV_TLBI_PAGE_OP, 0, 0);
	/* Under KPTI every user TLBI goes out twice, the second for the
	 * user ASID (__tlbi_user()). Our TLB tags one ASID per mm, so the
	 * second finds nothing more; it is the same op again, paid again. */
	for (int i = 0; i < 1 + t->kpti; i++) {
		tlbi_once(cpu, &inv, t->local_only, op->kind, op->vpn, op->pages);
		/* The erratum's workaround (__TLBI_0()'s ALTERNATIVE): "dsb
		 * ish; tlbi" again, so the first must complete before the
		 * second goes out. */
		if (t->repeat) {
			sd_event(cpu, SD_EV_DSB, 0, 0);
			tlbi_once(cpu, &inv, t->local_only, op->kind, op->vpn, op->pages);
		}
	}
}

/* The TLBI ops of a flush, without the DSB that completes them; false if
 * the mm never ran (no ASID: nothing to flush anywhere). */
static bool issue_flush(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t vpn, uint64_t nr,
			bool freed_tables, bool local_only)
{
	struct sd_broadcast *b = bcast_of(cpu->m);
	struct tlbi_issue t = {
		.cpu = cpu, .leaf_only = !freed_tables, .local_only = local_only, .kpti = b->kpti,
		.repeat = b->repeat_tlbi,
	};

	if (!sd_broadcast_mm_asid(cpu, mm, &t.asid))
		return false;
	if (nr == 0) {
		struct sd_tlbi_op all = { .kind = SD_TLBI_OP_ASID, .vpn = vpn };
		issue_tlbi(&all, &t);
	} else {
		sd_tlbi_split(&b->split, vpn, nr, issue_tlbi, &t);
	}
	if (!local_only)
		sd_event(cpu, SD_EV_REMOTE_FLUSH, 0, 0);
	return true;
}

void sd_broadcast_flush(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t vpn, uint64_t nr,
			bool freed_tables, bool local_only)
{
	/* __flush_tlb_range()'s closing dsb(ish): the flush is over only
	 * when every target has done every op (dsb(nsh) for a local one). */
	if (issue_flush(cpu, mm, vpn, nr, freed_tables, local_only))
		sd_event(cpu, SD_EV_DSB, 0, 0);
}

bool sd_broadcast_flush_nosync(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t vpn, uint64_t nr)
{
	return issue_flush(cpu, mm, vpn, nr, false, false);
}
