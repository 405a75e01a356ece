/* SPDX-License-Identifier: MIT */
/*
 * membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0) and its RSEQ variant
 * (MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ) as handshakes
 * (kernel/sched/membarrier.c, membarrier_private_expedited()): a system
 * call that, between two full barriers, sends one IPI to every CPU whose
 * current task runs the mm (cpu_rq(cpu)->curr->mm, read under RCU: here
 * the CPU's loaded mm, not a lazy one) and waits for them all with
 * smp_call_function_many(). Each target's handler is ipi_mb(): a full
 * barrier, here with the runtime's function run beside it. A CPU that
 * switches to the mm after the targets were read passed switch_mm's
 * barrier after the request, which is why the kernel need not interrupt it.
 *
 * The RSEQ variant's handler is ipi_rseq(): the barrier and rseq_preempt(),
 * which aborts the target's restartable sequence, so that no critical
 * section begun before the call commits after it. With
 * MEMBARRIER_CMD_FLAG_CPU the call targets one CPU
 * (smp_call_function_single()), if its current task runs the mm; the
 * picking is handshake.c's.
 */
#include "../core/error.h"
#include "../hw/event.h"
#include "handshake.h"

/* ipi_mb(), and the runtime's function: on the target, interrupts off. */
static void membarrier_ipi(struct sd_cpu *t, void *arg)
{
	struct sd_handshake *h = arg;

	sd_smp_mb();
	sd_hs_run_fn(h, t, t, false);
}

/* ipi_rseq(): the barrier, rseq_preempt(current), and the function. */
static void membarrier_rseq_ipi(struct sd_cpu *t, void *arg)
{
	struct sd_handshake *h = arg;

	sd_smp_mb();
	if (!(atomic_load_explicit(&sd_hs_test_break, memory_order_relaxed) &
	      SD_HS_BREAK_NO_RSEQ_ABORT))
		sd_hs_rseq_abort(h, t);
	sd_hs_run_fn(h, t, t, false);
}

int sd_hs_membarrier(struct sd_handshake *h, struct sd_cpu *cpu)
{
	unsigned *targets = h->target_ids;
	unsigned n = 0;
	int ran;

	for (unsigned t = 0; t < h->m->nr_cpus; t++)
		if (h->cpus[t].target)
			targets[n++] = t;
	if (n && (atomic_load_explicit(&sd_hs_test_break, memory_order_relaxed) &
		  SD_HS_BREAK_SKIP_LAST))
		n--;
	sd_event(cpu, SD_EV_SYSCALL_ENTER, 0, 0);
	/* "system call entry is not a mb": the first of the call's two. */
	sd_smp_mb();
	ran = sd_smp_call_many(cpu, targets, n, h->cfg.kind == SD_HANDSHAKE_MEMBARRIER_RSEQ ?
			       membarrier_rseq_ipi : membarrier_ipi, h, 0);
	/* "exit from system call is not a mb": the second. */
	sd_smp_mb();
	sd_event(cpu, SD_EV_SYSCALL_EXIT, 0, 0);
	return ran < 0 ? ran : 0;
}
