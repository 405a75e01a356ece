/* SPDX-License-Identifier: MIT */
/**
 * @file cpu.h
 * @brief Emulated CPUs: attach and detach, emulated interrupts, IPIs.
 * @ingroup cpu
 *
 * An emulated CPU is a thread. Most calls take the CPU handle and must be made
 * by the thread attached as that CPU; they return -EPERM otherwise.
 *
 * Interrupts: each CPU has an interrupts-off flag (a per-CPU variable, not
 * sigprocmask). An IPI that arrives while it is set is recorded as pending
 * and handled when sd_irq_enable() turns interrupts back on.
 *
 * RCU: CPUs are liburcu QSBR readers. A CPU passes a quiescent state at
 * every context switch, idle entry, and address-space operation, and goes
 * offline while it waits, so grace periods end without help from callers.
 */
#ifndef SHOOTDOWN_CPU_H
#define SHOOTDOWN_CPU_H

#include <stdint.h>

#include "export.h"
#include "machine.h"

SD_BEGIN_DECLS

/**
 * @defgroup cpu CPUs, interrupts and IPIs
 * Threads attached as emulated CPUs; emulated interrupts; IPIs as real signals.
 * @{
 */

/**
 * sd_cpu_attach() - make the calling thread emulated CPU @id of @m.
 *
 * Binds the thread to the CPU's PU (unpinned if that is impossible and the
 * machine is not strict), registers it with RCU and sets its thread-local
 * CPU. The CPU starts with no address space loaded, interrupts on, and an
 * empty TLB (it received no flush while it had no thread).
 *
 * What the thread sees from then on: IPIs arrive as the machine's
 * ipi_signal (sd_machine_info()), handled with SA_RESTART. read(), write(),
 * futex and mutex waits resume after an IPI; nanosleep(), poll(),
 * epoll_wait(), select(), sigtimedwait() and the like return EINTR once per
 * IPI (as for any signal): loop on EINTR. Masking the signal (sigprocmask,
 * pthread_sigmask) holds every flush that needs this CPU until it is
 * unmasked; the waiters report it on stderr (ipi_timeout_ms). A language
 * runtime must allow for both before it attaches its threads. A thread that
 * exits while attached is detached as it exits (its queued IPIs are run).
 *
 * Return: 0; -EINVAL if @id is out of range or an argument is NULL; -EBUSY if
 * this thread is already a CPU (of any machine) or CPU @id already has a
 * thread; -ENOSYS/-EPERM if strict pinning fails; -EAGAIN if the process
 * has no thread-specific key left for the thread-exit detach. Any thread.
 */
SD_EXPORT int sd_cpu_attach(struct sd_machine *m, unsigned id, struct sd_cpu **out);

/**
 * sd_cpu_detach() - end the calling thread's life as @cpu.
 *
 * Switches the CPU to no address space, unregisters from RCU and restores
 * the thread's previous binding. IPIs still queued are answered first.
 *
 * Return: 0; -EPERM if the caller is not attached as @cpu; -EBUSY if
 * interrupts are off. Called by the attached thread.
 */
SD_EXPORT int sd_cpu_detach(struct sd_cpu *cpu);

/**
 * sd_cpu_self() - the calling thread's CPU, or NULL. Any thread; async-signal-
 * safe. Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT struct sd_cpu *sd_cpu_self(void);

/**
 * sd_cpu_id() - the id of @cpu; 0 for NULL (error.h's getter rule). Any
 * thread. Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT unsigned sd_cpu_id(const struct sd_cpu *cpu);

/**
 * sd_cpu_machine() - the machine @cpu belongs to; NULL for NULL. Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT struct sd_machine *sd_cpu_machine(const struct sd_cpu *cpu);

/**
 * sd_irq_disable() - set the emulated interrupts-off flag.
 * Nests: each call must be paired with sd_irq_enable(). No syscall.
 * Called by the attached thread only; from any other thread (or with NULL)
 * it does nothing and records the detail in sd_last_error().
 */
SD_EXPORT void sd_irq_disable(struct sd_cpu *cpu);

/**
 * sd_irq_enable() - drop one level of interrupts-off; at level zero, run any
 * IPI that arrived meanwhile.
 *
 * An enable with interrupts already on (not paired with an sd_irq_disable())
 * is refused: interrupts stay on, the call is counted for sd_machine_run() to
 * report, and -EINVAL is returned. From any thread but @cpu's own it does
 * nothing.
 *
 * Return: 0; -EPERM if the caller is not attached as @cpu (NULL included);
 * -EINVAL if interrupts were already on (the detail is in sd_last_error()).
 * Called by the attached thread only, with interrupts off (that is what it
 * turns back on).
 */
SD_EXPORT int sd_irq_enable(struct sd_cpu *cpu);

/** sd_irqs_disabled() - whether @cpu runs with emulated interrupts off (0 for NULL). Any thread. */
SD_EXPORT int sd_irqs_disabled(const struct sd_cpu *cpu);

/**
 * sd_cpu_quiescent() - announce an RCU quiescent state for @cpu. Call it
 * from long loops that do no address-space operations. Attached thread only;
 * not with interrupts off (either mistake: nothing done, detail recorded).
 */
SD_EXPORT void sd_cpu_quiescent(struct sd_cpu *cpu);

/**
 * sd_cpu_poll() - one turn of a wait, in the program's own code, for
 * something another emulated CPU will do (a flag it stores, a mailbox it
 * answers): call it in the loop where a program would call sched_yield()
 * or cpu_relax(), and sd_cpu_poll_wake() after the store it waits for.
 *
 * IPIs that have arrived for @cpu are run (with interrupts on). Without
 * modelled time it yields the host CPU. In strict modelled time (the
 * default with a profile) the CPU gives the machine to the others and
 * comes back when one calls sd_cpu_poll_wake() or releases a lock, or
 * when an IPI arrives for it, with its clock moved to that moment: the
 * wait costs what it would on the modelled machine, and a CPU that spins
 * this way never holds the others back (a spin without it is a stall,
 * sd_model_info.seq_stalls). If no other CPU can run, it just looks again.
 * In lax mode it leaves the running CPUs and rejoins them, so it holds no
 * window back either. A loop around it ends when the condition it polls
 * does: sd_cpu_poll() itself never blocks for good.
 *
 * Return: 0; -EPERM if the caller is not attached as @cpu (NULL included);
 * -EDEADLK if @cpu runs with interrupts off (nothing done: a wait for
 * another CPU with interrupts off is how IPI deadlocks start, and the
 * kernel forbids it too). Called by the attached thread.
 */
SD_EXPORT int sd_cpu_poll(struct sd_cpu *cpu);

/**
 * sd_cpu_poll_wake() - say that something CPUs in sd_cpu_poll() may wait
 * for has changed: call it after the store they poll. In strict modelled
 * time they look again at @cpu's modelled clock; otherwise it does nothing
 * (they look again on their own). Never waits: may be called with
 * interrupts off.
 *
 * Return: 0; -EPERM if the caller is not attached as @cpu (NULL included).
 * Called by the attached thread.
 */
SD_EXPORT int sd_cpu_poll_wake(struct sd_cpu *cpu);

/** A function run on a target CPU by an IPI, in its signal handler, with interrupts off. */
typedef void (*sd_smp_call_fn)(struct sd_cpu *target, void *arg);

/**
 * sd_smp_call_single() - run @fn(@target, @arg) on CPU @target and wait for it
 * (the kernel's smp_call_function_single() with wait set).
 *
 * The request goes on the target's lock-free request queue and a real signal
 * (rt_tgsigqueueinfo(), tagged as the library's) interrupts its thread; the
 * handler runs every queued request. If the target runs with interrupts off,
 * the request waits until they are on again. The caller spins briefly, then yields, then sleeps until the ack.
 * @fn must be async-signal-safe and must not wait on other CPUs.
 *
 * The wait has no deadline but is watched: every 20 ms parked the signal is
 * sent again (a lost signal costs a delay), and every ipi_timeout_ms the stuck target is reported on stderr with its state and
 * counted (ipi_stuck_reports), including when the program replaced the
 * library's signal handler. The call returns once the target answers.
 *
 * Return: 0; -EINVAL if @target is out of range, is the caller itself, or
 * has no attached thread; -EPERM if the caller is not attached as @from;
 * -EDEADLK if the caller has interrupts off (it could never ack a cross IPI);
 * -ESRCH if the target's thread had exited without detaching (and without
 * running thread-exit destructors): @fn did not run, and the target counts as
 * offline from then on (ipi_targets_gone). Attached thread only.
 */
SD_EXPORT int sd_smp_call_single(struct sd_cpu *from, unsigned target, sd_smp_call_fn fn,
				 void *arg);

/**
 * struct sd_smp_call - an IPI request the caller owns from
 * sd_smp_call_async() until sd_smp_call_async_wait() returns (the kernel's
 * call_single_data_t). Opaque; it may live on the sender's stack, and must
 * neither move nor be freed, reused or left behind while posted.
 */
struct sd_smp_call {
	/** The library's; do not touch. */
	uint64_t opaque[16];
};

/**
 * sd_smp_call_async() - send @fn(@target, @arg) to CPU @target and return at
 * once: the kernel's smp_call_function_single_async(). Wait for it with
 * sd_smp_call_async_wait(@from, @call), from the same thread, before @call
 * goes out of scope; until then the caller may post more (to other targets
 * or the same one, each with its own @call), do its own work, and run IPIs
 * sent to it. Several posted this way and then waited for in turn are the
 * shape of smp_call_function_many_cond(): every target is interrupted
 * before the sender waits for the first.
 *
 * Sending costs what sd_smp_call_single()'s send does, in modelled time
 * too, and is counted (ipis_sent) and traced with the arrows to the
 * target's handler and back to the wait (trace: the IPI's flow).
 * sd_cpu_detach() is refused while a request is posted and not waited
 * for. A thread that exits attached, and sd_machine_run() after a body
 * returned, wait for the requests still posted before the CPU detaches,
 * so that no target is left with a request whose sender has gone; that
 * reads @call, so it must still be valid memory then (a request in a
 * stack frame that has returned is already the caller's bug).
 *
 * Return: 0; -EPERM if the caller is not attached as @from; -EINVAL for a
 * NULL @fn or @call, @target out of range, the caller itself, or without a
 * thread (nothing sent); -EBUSY if @call is still posted (not waited for:
 * sending it again would corrupt the target's queue). Interrupts may be off
 * (the request then waits in the target's queue as any other). Attached
 * thread only.
 */
SD_EXPORT int sd_smp_call_async(struct sd_cpu *from, unsigned target, sd_smp_call_fn fn,
				void *arg, struct sd_smp_call *call);

/**
 * sd_smp_call_async_wait() - wait until the request sd_smp_call_async()
 * posted in @call has run on its target (csd_lock_wait()). The wait is the
 * one sd_smp_call_single() makes: IPIs sent to the caller meanwhile run,
 * modelled time moves to the target's acknowledgement, and a stuck target is
 * reported every ipi_timeout_ms. @call is free again when it returns (with 0
 * or -ESRCH).
 *
 * Return: 0; -EPERM if the caller is not attached as @from; -EINVAL if @call
 * is NULL, was never posted or was already waited for; -EXDEV if another CPU
 * posted it (only the sender may wait); -EDEADLK with interrupts off (the
 * request stays posted: wait again with them on); -ESRCH if the target's
 * thread exited without detaching, @fn unrun. Attached thread only.
 */
SD_EXPORT int sd_smp_call_async_wait(struct sd_cpu *from, struct sd_smp_call *call);

/**
 * sd_smp_call_many() - run @fn(cpu, @arg) on every CPU listed in @targets
 * and wait for all (on_each_cpu_mask(), through smp_call_function_many_cond()):
 * every other target is sent its IPI first, then the caller runs @fn itself
 * with interrupts off if its own id is listed, then it waits for each
 * acknowledgement in the order of @targets. A target with no thread
 * (offline) is skipped: it runs nothing and needs nothing.
 *
 * Return: how many CPUs ran @fn (the caller included); -EPERM if the caller
 * is not attached as @from; -EINVAL for a NULL @fn, a NULL @targets with
 * @nr_targets > 0, an id out of range or listed twice, or @flags not 0
 * (nothing sent in any of these cases); -EDEADLK with interrupts off;
 * -ENOMEM if the per-CPU request array (made at the first call, one request
 * per CPU of the machine) cannot be allocated. A target whose thread exited
 * without detaching is not counted. Attached thread only.
 */
SD_EXPORT int sd_smp_call_many(struct sd_cpu *from, const unsigned *targets, unsigned nr_targets,
			       sd_smp_call_fn fn, void *arg, unsigned flags);

/** @} */

SD_END_DECLS

#endif
