/* SPDX-License-Identifier: MIT */
/*
 * Restartable sequences (include/shootdown/rseq.h; Linux kernel/rseq.c).
 *
 * The kernel keeps the section in the thread (struct rseq's rseq_cs) and
 * aborts it on the way back to user mode after a preemption, a migration,
 * a signal or membarrier's ipi_rseq(), by moving the thread's instruction
 * pointer to its abort handler (rseq_ip_fixup()). Here the thread's side is
 * a thread-local record of which section it began on which CPU, and the
 * CPU's side is its state (hw/cpu.h), which the aborts mark from the CPU's
 * own thread: the scheduler switching the task out (sched.c), a signal
 * handshake's handler (preempt_signal.c), a MEMBARRIER_RSEQ handshake's
 * handler (membarrier.c). The commit checks the mark and stores with
 * interrupts off, so no handler falls between the two: the single commit
 * instruction.
 */
#include <errno.h>

#include <shootdown/rseq.h>

#include "../core/error.h"
#include "../hw/event.h"
#include "handshake.h"

/* The calling thread's section: the CPU it began on and its number there
 * (rseq's rseq_cs and cpu_id_start); cpu NULL when none. */
static _Thread_local struct {
	struct sd_cpu *cpu;
	uint64_t seq;
} this_section;

int sd_rseq_begin(struct sd_cpu *cpu)
{
	uint64_t seq;

	if (sd_cpu_check_self(cpu))
		return sd_fail(-EPERM, "sd_rseq_begin: " SD_NOT_ATTACHED);
	seq = atomic_load_explicit(&cpu->rseq_seq, memory_order_relaxed) + 1;
	this_section.cpu = cpu;
	this_section.seq = seq;
	atomic_store_explicit(&cpu->rseq_seq, seq, memory_order_relaxed);
	/* Release: a handshake's check that reads ACTIVE reads this number
	 * with it (the acquire in sd_hs_rseq_open()). An abort by a handler
	 * that runs before this store finds no section: it came before the
	 * section began, which is what the program sees too. */
	atomic_store_explicit(&cpu->rseq_state, SD_RSEQ_ACTIVE, memory_order_release);
	return (int)cpu->id;
}

int sd_rseq_end(struct sd_cpu *cpu, uint64_t *word, uint64_t value)
{
	bool commit;

	if (sd_cpu_check_self(cpu))
		return sd_fail(-EPERM, "sd_rseq_end: " SD_NOT_ATTACHED);
	if ((uintptr_t)word & 7)
		return sd_fail(-EINVAL, "sd_rseq_end: word %p is not 8-byte aligned", (void *)word);
	if (!this_section.cpu)
		return sd_fail(-EINVAL, "sd_rseq_end: no section begun (sd_rseq_begin())");
	/* Interrupts off: an abort arriving now runs after the commit, as
	 * an interrupt after the commit instruction does. */
	sd_irq_off(cpu);
	commit = this_section.cpu == cpu &&
		 atomic_load_explicit(&cpu->rseq_seq, memory_order_relaxed) == this_section.seq &&
		 atomic_load_explicit(&cpu->rseq_state, memory_order_relaxed) == SD_RSEQ_ACTIVE;
	if (commit && word)
		__atomic_store_n(word, value, __ATOMIC_RELAXED);
	/* Another task's section on the CPU we began on (we migrated) is
	 * not ours to end. */
	if (this_section.cpu == cpu &&
	    atomic_load_explicit(&cpu->rseq_seq, memory_order_relaxed) == this_section.seq)
		atomic_store_explicit(&cpu->rseq_state, SD_RSEQ_NONE, memory_order_release);
	/* An abort was counted where it happened (its cause's CPU). */
	if (commit)
		sd_event(cpu, SD_EV_RSEQ_COMMIT, this_section.seq, 0);
	this_section.cpu = NULL;
	sd_irq_on(cpu);
	if (!commit)
		return sd_fail(-EAGAIN, "sd_rseq_end: the section was aborted (its task switched "
			       "out or migrated, a signal, or a membarrier RSEQ fence): begin again");
	return 0;
}
