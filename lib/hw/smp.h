/* SPDX-License-Identifier: MIT */
#ifndef SD_HW_SMP_H
#define SD_HW_SMP_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_HW
#error "hw/smp.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <stdbool.h>
#include <stddef.h>

#include "cpu.h"

/*
 * The IPI endpoint (kernel/smp.c): a request queue per CPU, a real signal
 * as the interrupt, and the waiter's side with its watchdog. The public
 * call is sd_smp_call_single() (include/shootdown/cpu.h).
 */

/*
 * One IPI request (the kernel's call_single_data): queued on the target,
 * run there, acknowledged through @state. Owned by the sender, which must
 * not reuse it before sd_smp_call_wait() returned.
 */
enum {
	SD_SMP_CALL_PENDING,
	SD_SMP_CALL_PARKED,
	SD_SMP_CALL_DONE,        /* run by the target */
	SD_SMP_CALL_GONE,        /* released unrun: the target's thread died */
};

/*
 * Who services a request. An IPI runs in the target's interrupt handler,
 * when its interrupts are on. The other two run below the kernel, at the
 * target's next instruction boundary whatever its interrupt flag says
 * (sd_smp_boundary()), with no interrupt entry or exit: an Intel RAR
 * signal, serviced by the microcode (arch/rar.c), and a RISC-V SBI remote
 * fence, serviced by the M-mode firmware that the machine-level software
 * interrupt traps into (arch/sbi.c); each is charged at its own costs.
 */
enum sd_smp_req_kind {
	SD_SMP_REQ_IPI,
	SD_SMP_REQ_RAR,
	SD_SMP_REQ_SBI,
};

struct sd_smp_call_req {
	struct cds_lfs_node node;
	sd_smp_call_fn fn;
	void *arg;
	SD_ATOMIC(int) state;          /* SD_IPI_*: the sender parks on it */
	struct sd_cpu *target;         /* for the watchdog: whom to re-signal */
	struct sd_cpu *from;           /* the sender, NULL: a thread that is no CPU */
	uint64_t flow;                 /* trace flow id from the sender, or 0 */
	uint64_t model_sent_ps;        /* modelled time it was sent, 0: none */
	uint64_t model_acked_ps;       /* modelled time the target acked it */
	/* Nobody waits for it (a reschedule IPI, lib/sched): the target
	 * tells the sender nothing, which may have gone offline since. */
	bool async;
	/* enum sd_smp_req_kind, set by the post. */
	uint8_t kind;
};

/*
 * Queue @req on @t and interrupt it with a real signal, unless one is
 * already on its way. Returns false, queueing nothing, if @t has no thread
 * (an offline CPU: it runs nothing and needs no IPI). Callable with
 * interrupts off; only the wait needs them on. @from may be NULL when the
 * sender is not a CPU (a plain thread; nothing is counted then).
 */
bool sd_smp_call_post(struct sd_cpu *from, struct sd_cpu *t, struct sd_smp_call_req *req);

/* The same for an Intel RAR signal: what sd_smp_call_wait() then waits
 * for is the target's microcode, not its interrupt handler. */
bool sd_smp_rar_post(struct sd_cpu *from, struct sd_cpu *t, struct sd_smp_call_req *req);

/* The same for a RISC-V SBI remote fence: the target's M-mode firmware
 * runs @req's function (OpenSBI's sbi_tlb_process()). */
bool sd_smp_sbi_post(struct sd_cpu *from, struct sd_cpu *t, struct sd_smp_call_req *req);

/*
 * Wait until the target has run @req: spin, yield, then park on a futex
 * that the target's handler wakes. Interrupts must be on, so that IPIs
 * aimed at the waiter meanwhile are answered (no deadlock between two
 * initiators aiming at each other). Parked, the watchdog re-sends the
 * signal every SD_SMP_CALL_RESEND_MS and reports a stuck target every
 * ipi_timeout_ms (it keeps waiting: the request stays queued, so it must
 * stay alive). Returns 0, or -ESRCH if the target's thread had exited while
 * attached and the request was released without running. @from may be NULL,
 * as for sd_smp_call_post(): reports then name "a thread that is no CPU".
 */
int sd_smp_call_wait(struct sd_cpu *from, struct sd_smp_call_req *req);

/* Going offline (detach): no new posts, wait out posts in progress, answer
 * everything queued. Owner only, interrupts on. */
void sd_smp_call_offline(struct sd_cpu *c);

/* IPI endpoint: install/remove the process-wide handler for @sig. Install
 * refuses (-EBUSY) a signal the host already handles unless @take_over;
 * uninstall restores the host's action only if ours is still in place. */
int sd_smp_call_install(int sig, bool take_over);
void sd_smp_call_uninstall(int sig);

/* The IPI state of @t in one line (what the watchdog reports): depth,
 * pending flags, queue, signal mask, what its thread is blocked in. Any
 * thread; the owner-private words are read racily. */
void sd_smp_call_describe(struct sd_cpu *t, char *buf, size_t len);

/* Test only: plant the stranded-IPI bug back (no look at ipi_pending after
 * ipi_run_queue()'s decrement), so a test can show it tells the two apart. */
extern SD_ATOMIC(bool) sd_smp_call_test_no_recheck;

/*
 * An instruction boundary of @c (sd_access(), sd_cpu_poll(), sd_cpu_work()):
 * the RAR and SBI requests that reached it with interrupts off run here, as
 * the microcode (or the M-mode trap) runs them between two instructions
 * whatever the interrupt flag says; the interrupts stay deferred. Owner
 * only; costs one owner-private load when none is pending.
 */
void sd_smp_boundary_run(struct sd_cpu *c);
static inline void sd_smp_boundary(struct sd_cpu *c)
{
	if (__builtin_expect(c->boundary_pending, 0))
		sd_smp_boundary_run(c);
}

/*
 * Acknowledge the request whose function @c runs now, before the function
 * ends (the EuroSys 2020 early acknowledgement): its sender may go on, and
 * reuse whatever the request points to, from here. The function must have
 * copied what it still needs. Owner only, from inside the function; a
 * second call does nothing.
 */
void sd_smp_call_ack_early(struct sd_cpu *c);

/* Answer every queued IPI now (detach, shutdown). Owner only. */
void sd_smp_call_drain(struct sd_cpu *c);

/* The public asynchronous requests (smp_async.c): wait for every one @c
 * posted and has not waited for (a thread exiting attached), and free
 * sd_smp_call_many()'s arrays (the machine's end). Owner, interrupts on;
 * the free: once no thread runs as @c. */
void sd_smp_async_settle(struct sd_cpu *c);
void sd_smp_many_free(struct sd_cpu *c);

/* Strict modelled time: before @c leaves the machine (idle, the end of an
 * IPI it was summoned for), it runs the IPIs already on their way to it,
 * each at its arrival, as an idle CPU would take them; later ones bring it
 * back (sequencer.c). Owner, interrupts on. */
void sd_smp_seq_settle(struct sd_cpu *c);

#endif
