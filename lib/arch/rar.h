/* SPDX-License-Identifier: MIT */
#ifndef SD_ARCH_RAR_H
#define SD_ARCH_RAR_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_ARCH
#error "arch/rar.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include "../core/compiler.h"
#include "../core/cpumask.h"
#include "../hw/smp.h"
#include "../hw/tlb.h"

struct sd_cpu;

/*
 * Intel Remote Action Request (RAR), emulated: the hardware half of Rik van
 * Riel's "x86/mm: Intel RAR TLB invalidation" RFC series (v1-v4, 2025, on
 * Yu-cheng Yu's 2019 one), arch/x86/mm/rar.c's smp_call_rar_many().
 *
 * One payload table is shared by every CPU: RAR_MAX_PAYLOADS (64) slots,
 * each naming one invalidation (a PCID and up to 63 pages, or the whole
 * PCID, or everything). An initiator takes a free slot (spinning while the
 * table is full), writes the payload, then sets the slot's byte to PENDING
 * in each target's action vector (a per-CPU array of 64 bytes, one line),
 * sends the RAR signal, and spins on each target's byte until it reads
 * SUCCESS; then it frees the slot.
 *
 * A target's microcode, not an interrupt handler, services the signal: at
 * the next instruction boundary, with interrupts disabled or not
 * (RAR_CTRL_IGNORE_IF, as rar_cpu_init() sets it). It performs every
 * PENDING entry of its action vector on its own TLB and writes SUCCESS.
 *
 * How the emulation gets there. The signal is a request of the IPI endpoint
 * posted with sd_smp_rar_post(): a real signal to the target's thread, whose
 * handler runs the service at once when the emulated interrupts are on, and
 * otherwise leaves it to the CPU's next instruction boundary
 * (sd_smp_boundary(): the slow path of sd_access(), sd_cpu_work()),
 * never to the end of the interrupts-off section as an IPI waits. The
 * initiator's spin on the byte is its wait for that request (whose service
 * covers every entry pending by then, ours included), charged as the byte's
 * line coming back. The payload table, the action vectors and the slot
 * bitmap are real shared memory with the kernel's orderings: the payload
 * is written before the byte (a release), the byte read before the payload
 * (an acquire), SUCCESS written after the invalidation (a release), read by
 * the initiator before it frees the slot.
 *
 * @self_flush is the one question the series could not settle on its
 * hardware: whether a RAR a CPU sends to itself also invalidates its own
 * TLB. The RAR white paper says it does ("the ILP may invalidate its own
 * TLB by signaling RAR to itself"); van Riel's v4 8/8 ("x86/tlb: flush the
 * local TLB twice (DEBUG)") reports the status flipping to SUCCESS with
 * the TLB not flushed. Both are emulated; the oracle tells which strategy
 * is correct on which.
 */

/* RAR_MAX_PAYLOADS: slots in the payload table. */
#define SD_RAR_MAX_PAYLOADS 64
/* RAR_INVLPG_MAX_PAGES: a payload names up to 63 pages; more is the whole
 * PCID (RAR_INVPCID_PCID). */
#define SD_RAR_MAX_PAGES 63
/* Signals one initiator has in flight before it waits for the oldest. */
#define SD_RAR_WINDOW 64

enum sd_rar_status {
	SD_RAR_SUCCESS = 0x00,  /* RAR_ACTION_SUCCESS */
	SD_RAR_PENDING = 0x01,  /* RAR_ACTION_PENDING */
};

/* One slot of the payload table (struct rar_payload's INVPCID form). */
struct sd_rar_payload {
	struct sd_tlb_inval op;
	unsigned initiator;            /* who filled it (for @self_flush) */
};

struct sd_rar_cpu {
	/* The action vector: written PENDING by initiators, SUCCESS by this
	 * CPU's microcode. */
	sd_cacheline_aligned SD_ATOMIC(uint8_t) action[SD_RAR_MAX_PAYLOADS];
	/* Initiator-private: its ring of signals (SD_RAR_WINDOW requests) and
	 * the targets of its flush in progress (rar_cpu_mask). */
	sd_cacheline_aligned struct sd_smp_call_req *req;
	unsigned nr_posted, nr_reaped;
	struct sd_cpumask dest;
};

struct sd_rar {
	unsigned nr_cpus;
	unsigned nr_payloads;          /* RAR_INFO's count, at most 64 */
	bool self_flush;               /* a self-RAR invalidates the sender's TLB */
	sd_cacheline_aligned SD_ATOMIC(uint64_t) in_use;   /* rar_in_use */
	sd_cacheline_aligned struct sd_rar_payload payload[SD_RAR_MAX_PAYLOADS];
	struct sd_rar_cpu *percpu;
	struct sd_smp_call_req *reqs;  /* nr_cpus * SD_RAR_WINDOW */
};

/* @nr_payloads slots (1..64). Return: 0, -EINVAL, -ENOMEM. */
int sd_rar_init(struct sd_rar *r, unsigned nr_cpus, unsigned nr_payloads, bool self_flush);
void sd_rar_fini(struct sd_rar *r);
/* Bytes sd_rar_init() allocated: an action vector, a signal ring and a
 * cpumask a CPU. */
size_t sd_rar_bytes(const struct sd_rar *r);

/*
 * smp_call_rar_many(): @op on the TLBs of @mask's CPUs, @cpu initiating,
 * and on @cpu's own by a self-RAR if @self and @cpu is in @mask (else never:
 * the kernel clears this CPU from the mask and flushes locally itself).
 * Returns once every target wrote SUCCESS. CPUs with no thread (offline)
 * are skipped, as the kernel skips offline CPUs. Interrupts on.
 */
void sd_rar_call_many(struct sd_cpu *cpu, struct sd_rar *r, const struct sd_cpumask *mask,
		      bool self, const struct sd_tlb_inval *op);

/* One payload's invalidation of @cpu's own TLB, charged as the local flush
 * it is (the microcode's per entry; the strategy's own flush of the global
 * PCID). Owner only. */
void sd_rar_invalidate_local(struct sd_cpu *cpu, const struct sd_tlb_inval *op);

/* The payload for a flush of @nr pages at @vpn of PCID tag @asid (set_payload()):
 * more than 63 pages, or 0, is the whole PCID; @asid 0 is everything. */
struct sd_tlb_inval sd_rar_op(uint16_t asid, uint64_t vpn, uint64_t nr, bool leaf_only);

#endif
