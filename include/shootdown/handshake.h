/* SPDX-License-Identifier: MIT */
/**
 * @file handshake.h
 * @brief Handshakes among the threads of an address space, as language
 * runtimes make them: membarrier, signals, poll words, the mprotect trick.
 * @ingroup handshake
 *
 * A runtime stops or synchronises every thread of its process for a
 * safepoint, a process-wide barrier, a preemption or a code patch. Here its
 * threads are emulated CPUs running an mm, and sd_handshake_run() asks each
 * to run a function (or pass a barrier) at its next point of the chosen
 * kind, waits until all have, and says what it cost and whom it reached:
 *
 * - SD_HANDSHAKE_MEMBARRIER: Linux membarrier(MEMBARRIER_CMD_PRIVATE_
 *   EXPEDITED) (kernel/sched/membarrier.c, membarrier_private_expedited()):
 *   one IPI to each CPU *currently running* a thread of the mm (its loaded
 *   mm, not the lazy mm_cpumask), which runs the function and a barrier in
 *   its handler; the caller waits for all (smp_call_function_many()).
 * - SD_HANDSHAKE_MEMBARRIER_RSEQ: membarrier(MEMBARRIER_CMD_PRIVATE_
 *   EXPEDITED_RSEQ): the same IPIs, whose handler (ipi_rseq()) also aborts
 *   the target's restartable sequence if it is in one (rseq.h), so that
 *   no critical section begun before the handshake commits after it: the
 *   fence of per-CPU data structures. With SD_HANDSHAKE_FLAG_CPU, one CPU
 *   only (MEMBARRIER_CMD_FLAG_CPU), if it runs the mm.
 * - SD_HANDSHAKE_SIGNAL: Go's asynchronous preemption (runtime/preempt.go,
 *   suspendG() and preemptM()): a signal to each target, whose handler runs
 *   the function only at an asynchronous safe point and refuses otherwise;
 *   the requester sends again every resend_ns until the target
 *   acknowledges, by its handler or at its own next sd_handshake_poll()
 *   (Go's synchronous preemption at a function prologue).
 * - SD_HANDSHAKE_POLL: HotSpot's thread-local handshakes (JEP 312): the
 *   requester arms each target's poll word; the target runs the function
 *   when its own code polls (sd_handshake_poll(), a safepoint poll) and
 *   acknowledges. A target in a safe state (sd_handshake_set_safe(): in
 *   native code or blocked) is handled by the requester on its behalf,
 *   the function run with the target as its argument, as the VM thread does.
 * - SD_HANDSHAKE_MPROTECT: .NET's FlushProcessWriteBuffers() fallback
 *   (and OpenJ9's, Mono's): two mprotect() calls on a helper page, RW then
 *   none, with a write in between, so that the kernel's TLB shootdown IPIs
 *   serve as a barrier on every CPU running the mm. No function runs on the
 *   targets. Whether the shootdown interrupts them is the machine's
 *   strategy's business: under `ipi` it reaches exactly the CPUs running
 *   the mm; under `broadcast`, `local` or `gbcast` no interrupt reaches
 *   anyone (dotnet/coreclr issue 12246, OpenJ9 issue 14870), and the check
 *   below says so.
 *
 * **The check.** Whatever the kind, after a handshake every target must
 * have run the function after the request, or been handled on its behalf
 * in a safe state, or (the membarriers, mprotect) passed a full barrier after
 * it: taken an interrupt, switched mm. For MEMBARRIER_RSEQ, a target that
 * was in a restartable sequence at the request must also have left it
 * (committed or aborted) by the end: a section begun before the fence and
 * still open, unaborted, would commit after it. The library counts those
 * barriers and sections on each CPU itself, apart from any kind's
 * mechanism, and reports each target that failed in the result and in the
 * counter handshake_targets_unreached. A result with unreached targets is a
 * handshake that did not do what the runtime relies on: for the mprotect
 * kind on an IPI-free strategy it is the expected answer, not an error.
 *
 * **Cost.** Every step goes through the event funnel: counted (handshakes,
 * handshake_acks, handshakes_on_behalf, handshake_refusals,
 * handshake_resends), drawn in the trace (a `handshake` slice on the
 * requester, an arrow from each request to its acknowledgement), and
 * charged in modelled time from the profile: membarrier and mprotect are
 * system calls (syscall_entry, syscall_exit) with the IPIs and flushes they
 * make; a signal is an IPI to the target (ipi_send, ipi_delivery,
 * irq_entry, ipi_handler, irq_exit) and a resend interval of the
 * requester's time; a poll word is a line the requester writes and the
 * target reads (line_transfer), and the acknowledgement a line back.
 * @{
 */
#ifndef SHOOTDOWN_HANDSHAKE_H
#define SHOOTDOWN_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

#include "export.h"
#include "cpu.h"

SD_BEGIN_DECLS

struct sd_mm;
struct sd_handshake;

/** How a handshake reaches its targets (the file comment says which runtime
 *  does which). */
enum sd_handshake_kind {
	SD_HANDSHAKE_MEMBARRIER,
	SD_HANDSHAKE_SIGNAL,
	SD_HANDSHAKE_POLL,
	SD_HANDSHAKE_MPROTECT,
	SD_HANDSHAKE_MEMBARRIER_RSEQ,
	SD_HANDSHAKE_KIND_NR
};

/** The settings of a handshake object. Start from SD_HANDSHAKE_CONFIG_INIT. */
struct sd_handshake_config {
	/** sizeof(struct sd_handshake_config) as the caller compiled it. */
	size_t size;
	/** enum sd_handshake_kind. */
	unsigned kind;
	/** SIGNAL: whether @target, interrupted by the signal, is at a safe
	 *  point (runs in its handler, interrupts off: async-signal-safe, no
	 *  waiting). NULL: refuse_per_million alone decides. */
	int (*safe_point)(struct sd_cpu *target, void *arg);
	/** Passed to safe_point(). */
	void *safe_point_arg;
	/** SIGNAL: refuse this many signals in a million at random (seeded by
	 *  seed), on top of safe_point(): an experiment's knob. 0..1000000. */
	unsigned refuse_per_million;
	/** SIGNAL: the requester's time between two signals to a target that
	 *  has not acknowledged, in ns (modelled ns under a profile). 0: 5000,
	 *  Go's preemptM() retry (yieldDelay / 2, runtime/preempt.go). */
	uint64_t resend_ns;
	/** SIGNAL: the random refusals' seed. */
	uint64_t seed;
	/** MPROTECT: the helper page's address in the mm (page aligned; 0: the
	 *  default, SD_HANDSHAKE_HELPER_VA). It is mapped at the first
	 *  handshake, and the program must not map anything there. */
	uint64_t helper_va;
	/** MEMBARRIER, MEMBARRIER_RSEQ: SD_HANDSHAKE_FLAG_* (0: none). */
	unsigned flags;
	/** With SD_HANDSHAKE_FLAG_CPU: the one CPU to fence (below the
	 *  machine's CPU count). */
	unsigned cpu_id;
};

/** Fence only the CPU cpu_id (membarrier's MEMBARRIER_CMD_FLAG_CPU): it is
 *  the one target if it runs a thread of the mm, the caller's own CPU
 *  excepted; otherwise there is none. */
#define SD_HANDSHAKE_FLAG_CPU 1u

/** MPROTECT's default helper page: the last page below 2^47 - 2^32. */
#define SD_HANDSHAKE_HELPER_VA 0x7fff00000000ull

/** Initialiser for struct sd_handshake_config: membarrier, defaults. */
#define SD_HANDSHAKE_CONFIG_INIT { sizeof(struct sd_handshake_config), 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/** What one handshake did. */
struct sd_handshake_result {
	/** CPUs asked: those running a thread of the mm, the caller excepted. */
	unsigned targets;
	/** ...of them that ran the function after the request. */
	unsigned ran;
	/** ...handled on their behalf in a safe state (POLL, SIGNAL). */
	unsigned on_behalf;
	/** ...that passed a full barrier after the request. */
	unsigned barriers;
	/** ...that stopped running the mm during the handshake (switched away:
	 *  an exited or idle thread), owing nothing, as HotSpot skips a thread
	 *  that exited; POLL and SIGNAL only, whose waits would never end. */
	unsigned left;
	/** ...that did none of these: what the check caught (0 is success). */
	unsigned unreached;
	/** The lowest unreached CPU's id; -1 if none. */
	int first_unreached;
	/** SIGNAL: signals the targets refused (not at a safe point). */
	unsigned refusals;
	/** SIGNAL: signals sent again to a target that had not acknowledged. */
	unsigned resends;
	/** MEMBARRIER_RSEQ, SIGNAL: targets whose restartable sequence the
	 *  handshake aborted (rseq.h). */
	unsigned aborted;
	/** The caller's time from the request to the last acknowledgement, in
	 *  ns of its clock: modelled ns under a profile, host ns otherwise. */
	uint64_t ns;
};

/**
 * sd_handshake_create() - a handshake object for the threads of @mm.
 *
 * Return: 0 and *@out; -EINVAL for a NULL argument, an unknown
 * @cfg->size or kind, refuse_per_million above a million, an unaligned
 * helper_va, an unknown flag, a flag for a kind other than MEMBARRIER or
 * MEMBARRIER_RSEQ, a cpu_id not below the machine's CPU count; -ENOMEM. Nothing is made on failure. Any thread; it waits
 * for no CPU, so interrupts may be off.
 */
SD_EXPORT int sd_handshake_create(struct sd_mm *mm, const struct sd_handshake_config *cfg,
				  struct sd_handshake **out);

/**
 * sd_handshake_destroy() - free @h. Not while a handshake runs on it.
 *
 * Return: 0; -EINVAL for NULL; -EBUSY while sd_handshake_run() runs on it.
 * Any thread; it waits for no CPU, so interrupts may be off.
 */
SD_EXPORT int sd_handshake_destroy(struct sd_handshake *h);

/**
 * sd_handshake_run() - ask every CPU running a thread of @h's mm (its
 * loaded mm, not lazily; the caller excepted) to run @fn(target, @arg) at
 * its next point of @h's kind (MPROTECT: to pass a barrier, @fn is not
 * run), wait until all have, check them, and fill @res. @fn may be NULL:
 * the targets then only reach their point (a membarrier's barrier, a
 * safepoint with no operation). Handshakes on one @h run one at a time (a second caller waits in
 * modelled time, as for an sd_lock); on different objects they overlap.
 *
 * The targets keep running their own code; each must reach its point:
 * take the IPI (interrupts on), poll (POLL, SIGNAL: sd_handshake_poll()),
 * or be in a safe state. One that switches away from the mm meanwhile (an
 * exiting thread) owes nothing and is counted in @res->left. A target that
 * does none of these keeps the caller waiting, reported on stderr every
 * ipi_timeout_ms with what it is waiting for.
 *
 * @fn runs on the target's thread with interrupts off (MEMBARRIER and
 * SIGNAL: in its IPI handler; POLL: inside its sd_handshake_poll()), or on
 * the caller's thread for a target handled on its behalf: it must be
 * async-signal-safe and must not wait.
 *
 * Return: 0 (the check's verdict is in @res, not the return); -EPERM if the
 * caller is not attached as @cpu; -EINVAL for a NULL @h or @res, @cpu of
 * another machine, or (MPROTECT) a caller that does
 * not run the mm (its write goes through its own TLB); -EDEADLK with
 * interrupts off; -ENOMEM (MEMBARRIER: the IPIs' request array, made at
 * the caller's first multicast);
 * MPROTECT: what sd_mmap(), sd_mprotect() or sd_access() returned on the
 * helper page (the handshake did not run). Attached thread only.
 */
SD_EXPORT int sd_handshake_run(struct sd_handshake *h, struct sd_cpu *cpu, sd_smp_call_fn fn,
			       void *arg, struct sd_handshake_result *res);

/**
 * sd_handshake_poll() - a safepoint poll of @cpu's thread: if a handshake
 * of @h waits for it (POLL, or a SIGNAL it refused), run its function here
 * and acknowledge. Put it where the runtime polls (loop back-edges,
 * function prologues). One load when nothing waits.
 *
 * Return: 1 if it ran a function, 0 if nothing waited; -EPERM if the
 * caller is not attached as @cpu; -EINVAL for a NULL @h or @cpu of
 * another machine. Attached thread only; interrupts may be off.
 */
SD_EXPORT int sd_handshake_poll(struct sd_handshake *h, struct sd_cpu *cpu);

/**
 * sd_handshake_set_safe() - say that @cpu's thread enters (@safe 1) or
 * leaves (0) a safe state, in which it runs no code the handshake's
 * function could race with (HotSpot's _thread_in_native and
 * _thread_blocked): a requester meanwhile handles it on its behalf. Leaving
 * waits while a requester is doing so, then polls (so a request made while
 * it was safe is seen), as a thread returning from native code does.
 *
 * Return: 0, or when leaving, what sd_handshake_poll() returned; -EPERM if
 * the caller is not attached as @cpu; -EINVAL for a NULL @h, @cpu of
 * another machine, or a state it is already in. Attached thread only;
 * leaving needs interrupts on (-EDEADLK otherwise).
 */
SD_EXPORT int sd_handshake_set_safe(struct sd_handshake *h, struct sd_cpu *cpu, int safe);

/** @} */

SD_END_DECLS

#endif
