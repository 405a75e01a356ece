/* SPDX-License-Identifier: MIT */
#ifndef SD_ARCH_INVLPGB_H
#define SD_ARCH_INVLPGB_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_ARCH
#error "arch/invlpgb.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include "../core/compiler.h"
#include "../hw/tlb.h"

struct sd_cpu;
struct sd_machine;

/*
 * AMD INVLPGB and TLBSYNC (arch/x86/include/asm/tlb.h), emulated.
 *
 * INVLPGB is asynchronous and weakly ordered: an invalidation may reach
 * each TLB at any moment up to the issuer's TLBSYNC, which waits for all of
 * this CPU's INVLPGBs to complete everywhere. Nobody is interrupted.
 *
 * Who applies them: the issuer, in TLBSYNC, writing straight into every
 * CPU's TLB (shared memory; the TLB's bump-then-clear sequence closes the
 * race with the owner's fills). The hardware is free to complete them that
 * late, and it means no target, idle, descheduled or with interrupts off,
 * can ever stall a TLBSYNC: the issuer needs nothing from anyone. The cost
 * model is the hardware's: no IPI, one TLB scan per target per operation.
 *
 * TLBSYNC only covers INVLPGBs issued by the CPU it runs on (the kernel
 * asserts cant_migrate()). An emulated CPU is a thread, so the thread
 * remembers the CPU it issued as, and a TLBSYNC on another CPU, which would
 * wait for nothing, is refused.
 */

/* INVLPGBs one CPU may have in flight; one more syncs first. */
#define SD_INVLPGB_INFLIGHT 16

struct sd_invlpgb_cpu {
	/* Issuer-private: the INVLPGBs not yet synced. */
	sd_cacheline_aligned struct sd_tlb_inval pending[SD_INVLPGB_INFLIGHT];
	unsigned nr_pending;
};

struct sd_invlpgb {
	unsigned nr_cpus;
	struct sd_invlpgb_cpu *percpu;
};

int sd_invlpgb_init(struct sd_invlpgb *ib, unsigned nr_cpus);
void sd_invlpgb_fini(struct sd_invlpgb *ib);
/* Bytes sd_invlpgb_init() allocated: one issuer's queue per CPU. */
size_t sd_invlpgb_bytes(const struct sd_invlpgb *ib);

/* INVLPGB ..., no sync: @op for every CPU's TLB, @cpu issuing (the caller's
 * own CPU). */
void sd_invlpgb(struct sd_cpu *cpu, struct sd_invlpgb *ib, const struct sd_tlb_inval *op);

/*
 * TLBSYNC: return once every INVLPGB @cpu issued reached every TLB.
 * Return: 0; -EPERM if the calling thread is not @cpu, or issued INVLPGBs
 * as another CPU and did not sync them (the wrong-CPU TLBSYNC); nothing is
 * applied then.
 */
int sd_tlbsync(struct sd_cpu *cpu, struct sd_invlpgb *ib);

/* TLBSYNC whatever the calling thread, attached as @cpu, issued and did not
 * sync yet (detach: like migrate_enable(), only after the sync). */
void sd_invlpgb_sync_self(struct sd_cpu *cpu);

#endif
