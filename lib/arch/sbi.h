/* SPDX-License-Identifier: MIT */
#ifndef SD_ARCH_SBI_H
#define SD_ARCH_SBI_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_ARCH
#error "arch/sbi.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include "../core/compiler.h"
#include "../core/cpumask.h"
#include "../hw/smp.h"
#include "../hw/tlb.h"

struct sd_cpu;

/*
 * A RISC-V SBI remote fence, emulated: the firmware half of the kernel's
 * sbi_remote_sfence_vma_asid() (arch/riscv/kernel/sbi.c, the RFENCE
 * extension's SBI_EXT_RFENCE_REMOTE_SFENCE_VMA_ASID), as OpenSBI does it
 * (lib/sbi/sbi_tlb.c: sbi_tlb_request(), tlb_update(), tlb_process(),
 * tlb_sync()).
 *
 * The caller's ecall enters M-mode (sbi_ecall). There the firmware widens a
 * range longer than its tlb_range_flush_limit (a platform value, 4 KiB by
 * default: one page) to the whole ASID, performs the fence on its own hart
 * at once if the caller's mask names it, and for every other hart queues
 * the request in that hart's TLB FIFO and raises its machine-level software
 * interrupt (sbi_send_target each). A target traps into M-mode at its next
 * instruction boundary, whatever its S-mode interrupt state (M-mode
 * interrupts are always enabled below M-mode), performs the queued fences
 * with sfence.vma and counts itself done in the caller's sync counter
 * (sbi_delivery, sbi_service, and the sfence as the local flush it is).
 * The caller spins in tlb_sync() until every target has, then returns to
 * S-mode.
 *
 * How the emulation gets there: each target's part is a request of the IPI
 * endpoint posted with sd_smp_sbi_post() (run at the target's next
 * instruction boundary, sd_smp_boundary(), when its emulated interrupts are
 * off), the caller's tlb_sync() its wait for them. Left out: the FIFO's
 * merging of overlapping requests (tlb_entry_compare's range check) and its
 * bound (a full FIFO makes the sender process its own queue first), which
 * change how much a target flushes, never whether.
 */

/* Requests one caller has in flight before it waits for the oldest. */
#define SD_SBI_WINDOW 64

/* OpenSBI's SBI_PLATFORM_TLB_RANGE_FLUSH_LIMIT_DEFAULT (1 << 12), in pages. */
#define SD_SBI_FLUSH_LIMIT_PAGES 1

struct sd_sbi_cpu {
	/* Caller-private: its ring of requests and the fence they carry,
	 * read by the targets until the caller's wait for them returns. */
	sd_cacheline_aligned struct sd_smp_call_req *req;
	unsigned nr_posted, nr_reaped;
	struct sd_tlb_inval op;
};

struct sd_sbi {
	unsigned nr_cpus;
	uint64_t flush_limit_pages;    /* tlb_range_flush_limit / 4 KiB, >= 1 */
	struct sd_sbi_cpu *percpu;
	struct sd_smp_call_req *reqs;  /* nr_cpus * SD_SBI_WINDOW */
};

/* Return: 0; -EINVAL for a limit of 0; -ENOMEM. */
int sd_sbi_init(struct sd_sbi *s, unsigned nr_cpus, uint64_t flush_limit_pages);
void sd_sbi_fini(struct sd_sbi *s);
/* Bytes sd_sbi_init() allocated. */
size_t sd_sbi_bytes(const struct sd_sbi *s);

/*
 * sbi_remote_sfence_vma_asid(@mask, ...): @op on the TLBs of @mask's harts,
 * @cpu's own included if @mask names it, returning once every one has
 * done it. An @op of kind RANGE longer than the flush limit is done as its
 * ASID. Harts with no thread (offline) are skipped. Interrupts on.
 */
void sd_sbi_remote_sfence_vma(struct sd_cpu *cpu, struct sd_sbi *s,
			      const struct sd_cpumask *mask, const struct sd_tlb_inval *op);

/* sfence.vma on @cpu's own TLB, as OpenSBI's sbi_tlb_local_sfence_vma_asid()
 * issues it: one a page for a range, one for an ASID, one for all, each
 * charged as the local flush it is. Owner only. */
void sd_sbi_sfence_local(struct sd_cpu *cpu, const struct sd_tlb_inval *op);

#endif
