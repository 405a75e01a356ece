/* SPDX-License-Identifier: MIT */
#ifndef SD_HW_CPU_H
#define SD_HW_CPU_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_HW
#error "hw/cpu.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <signal.h>
#include <urcu/compiler.h>
#include <urcu/lfstack.h>

#include <shootdown/cpu.h>
#include <shootdown/stats.h>

#include "../core/compiler.h"
#include "frame.h"
#include "model.h"
#include "tlb.h"
#include "topology.h"

struct sd_mm;
struct sd_trace_ring;
struct sd_smp_async;
struct sd_smp_call_req;

/* Counters of one CPU: written by it alone (plain relaxed stores), read by
 * snapshots. Their own lines, away from anything another CPU writes. */
struct sd_cpu_stats {
	sd_cacheline_aligned SD_ATOMIC(uint64_t) counter[SD_STAT_NR];
	SD_ATOMIC(uint64_t) flush_ns_hist[SD_STAT_HIST_BUCKETS];
	SD_ATOMIC(uint64_t) flush_ns_total;
};

/*
 * The per-CPU area: one allocation on the CPU's NUMA node, page aligned,
 * with the TLB arrays after it. Groups that other CPUs write are on lines
 * of their own, so the owner's private state never bounces.
 */
struct sd_cpu {
	/* Read-mostly identity. */
	unsigned id;
	struct sd_machine *m;
	size_t alloc_size;

	/* IPI endpoint: written by senders (sd_smp_call_single). */
	sd_cacheline_aligned struct __cds_lfs_stack ipi_queue;
	SD_ATOMIC(int) ipi_kick;          /* a signal is on its way; don't send another */
	SD_ATOMIC(int) ipi_senders;       /* posts in progress: detach waits them out */
	SD_ATOMIC(int) tid;               /* kernel thread id, 0 while detached */
	SD_ATOMIC(int) attached;
	SD_ATOMIC(int) ipi_send_err;      /* last failed send (-errno), for the watchdog report */
	struct sd_model_line ipi_line;    /* the queue head as a modelled hot line */
	/* Modelled ps of stall that broadcasts (TLBI IS, INVLPGB) issued by
	 * other CPUs owe this one, not yet in its clock (time/sync.c, recv_pay()). */
	SD_ATOMIC(uint64_t) recv_stall_ps;

	/* Modelled clock as others see it (lax synchronisation). */
	struct sd_model_pub model_pub;

	/* Loaded address space: owner writes, others may read. */
	sd_cacheline_aligned SD_ATOMIC(struct sd_mm *) mm;
	SD_ATOMIC(int) lazy;
	/* Full barriers this CPU passed that another CPU may count on (an
	 * interrupt taken, a switch_mm, a handshake function run):
	 * sd_cpu_passed_barrier(). */
	SD_ATOMIC(uint64_t) barriers;
	/* Restartable sequences (runtime/rseq.c): the section of the thread
	 * now running here. Written by that thread and its handlers alone;
	 * a MEMBARRIER_RSEQ handshake's check reads them (the state's
	 * release store publishes the number it goes with). */
	SD_ATOMIC(uint64_t) rseq_seq;     /* sections begun here */
	SD_ATOMIC(int) rseq_state;        /* SD_RSEQ_* */

	/* Owner-private. The IPI handler runs on the owner's thread, so these
	 * need compiler (signal) fences only, never atomics. */
	sd_cacheline_aligned volatile sig_atomic_t irq_depth;
	volatile sig_atomic_t ipi_pending;
	/* A RAR or SBI request arrived with interrupts off: serviced at the next
	 * instruction boundary (sd_smp_boundary()). */
	volatile sig_atomic_t boundary_pending;
	/* The request whose function runs now, until it is acknowledged
	 * (sd_smp_call_ack_early()); NULL otherwise. */
	struct sd_smp_call_req *running_req;
	unsigned irq_unbalanced;       /* sd_irq_enable() calls with interrupts on */
	uint16_t asid;                 /* the ASID register */
	uint64_t regs[31];             /* X0..X30: what trap emulation writes */
	bool checked;                  /* copy of the machine's oracle mode */
	struct sd_trace_ring *trace;   /* NULL unless tracing (event.h reads it) */
	struct sd_cpu_model model;     /* modelled time; model.ev_ps NULL: off */
	int pinned;                    /* -1 never attached, 0 unpinned, 1 pinned */
	unsigned ops_since_qs;         /* accesses since the last quiescent state */
	struct sd_topology_binding binding;
	struct sd_frame_cache frames;
	unsigned lru_add_pending;      /* folios in this CPU's lru_add batch (mm/lru.c) */
	unsigned lru_free_pending;     /* ...of them freed, to leave the LRU at its drain */
	/* Public IPIs (hw/smp_async.c): the requests sd_smp_call_async()
	 * posted and nobody waited for yet, and sd_smp_call_many()'s array
	 * of one request per CPU (NULL until its first call). */
	struct sd_smp_async *async_posted;
	unsigned nr_async_posted;
	struct sd_smp_call_req *many_reqs;
	uint8_t *many_listed;
	/* The program's open slices (events.h), innermost last. */
	uint8_t user_slice[8];
	unsigned nr_user_slices;

	struct sd_cpu_stats stats;
	struct sd_tlb tlb;
};

/* Initial-exec: a %fs-relative load on the hit path, not a __tls_get_addr
 * call through the PLT, even from the shared library. */
extern SD_THREAD_LOCAL struct sd_cpu *sd_this_cpu __attribute__((tls_model("initial-exec")));

/* Counters and the trace are written through sd_event() (event.h) alone. */

/*
 * @c passed a full barrier: it took an interrupt (the IPI handler's
 * batch), switched mm, or ran a handshake's function. membarrier() and
 * the runtimes' handshakes rest on these (kernel/sched/membarrier.c: the
 * barriers "after rq->curr update" and of the IPI), and a handshake's
 * check counts them (runtime/handshake.c). An RMW, because the IPI
 * handler may interrupt the owner between a load and a store; release,
 * pairing with the acquire of sd_cpu_barriers().
 */
static inline void sd_cpu_passed_barrier(struct sd_cpu *c)
{
	atomic_fetch_add_explicit(&c->barriers, 1, memory_order_release);
}

static inline uint64_t sd_cpu_barriers(const struct sd_cpu *c)
{
	return atomic_load_explicit(&((struct sd_cpu *)c)->barriers, memory_order_acquire);
}

enum { SD_RSEQ_NONE, SD_RSEQ_ACTIVE, SD_RSEQ_ABORTED };

/*
 * rseq_preempt(), rseq_signal_deliver(): abort the restartable sequence of
 * the thread running on @c, if it is in one, so its commit is refused. On
 * @c's own thread alone: its IPI handler, its scheduler switching it out.
 * The owner's commit (sd_rseq_end()) reads the state with interrupts off,
 * so a handler never runs between its check and its store: no RMW needed.
 * True if a section was aborted; the caller counts it (SD_EV_RSEQ_ABORT).
 */
static inline bool sd_cpu_rseq_abort(struct sd_cpu *c)
{
	if (atomic_load_explicit(&c->rseq_state, memory_order_relaxed) != SD_RSEQ_ACTIVE)
		return false;
	atomic_store_explicit(&c->rseq_state, SD_RSEQ_ABORTED, memory_order_relaxed);
	return true;
}

/* Emulated interrupts, inline for the access path. */
static inline void sd_irq_off(struct sd_cpu *c)
{
	c->irq_depth++;
	atomic_signal_fence(memory_order_seq_cst);
}

void sd_irq_run_pending(struct sd_cpu *c);
/* What the IPI handler would have done for a signal that landed while
 * the calling thread held the sequencer's lock (sd_seq_irq_missed), done
 * now that it does not: the signal's delivery, a moment later. */
void sd_irq_replay(void);
/* Strict modelled time: set (or clear) the calling thread's wait hook. */
void sd_cpu_seq_hook(struct sd_cpu *c, bool on);

/* A synchronisation point of modelled time (time/sync.c): in strict mode it
 * may find IPIs that have arrived by the CPU's clock, which run here,
 * where the IPI endpoint can be reached, before it syncs again. */
static inline void sd_cpu_model_sync(struct sd_cpu *c)
{
	while (unlikely(sd_clock_sync(&c->model)))
		sd_irq_run_pending(c);
}

/* Modelled time: a synchronisation that fell inside a lock or interrupt
 * section (sd_model_sync()) happens at the section's end, once no real
 * lock is held either: called after the real unlock, never before, or a
 * CPU would wait at the window for one that waits for its lock. Strict
 * mode syncs inside the mmap_lock (seq_sync()), so only lax mode waits
 * for its release. */
static inline void sd_model_resync(struct sd_cpu *c)
{
	if (unlikely(c->model.sync_deferred) && !c->model.locks_held && !c->irq_depth &&
	    (c->model.seq || !c->model.rwsems_held))
		sd_cpu_model_sync(c);
}

static inline void sd_irq_on(struct sd_cpu *c)
{
	atomic_signal_fence(memory_order_seq_cst);
	if (--c->irq_depth == 0) {
		/* Pairs with the handler's irq_depth read: a signal landing
		 * after the decrement runs its IPIs itself; one that landed
		 * before left ipi_pending for us. An `if` is enough because
		 * sd_irq_run_pending() never returns with one left behind
		 * (ipi_run_queue() looks again after its own decrement). */
		atomic_signal_fence(memory_order_seq_cst);
		if (unlikely(c->ipi_pending))
			sd_irq_run_pending(c);
		sd_model_resync(c);
	}
}

/* -EPERM unless the calling thread is attached as @c. */
static inline int sd_cpu_check_self(const struct sd_cpu *c)
{
	return likely(c && c == sd_this_cpu) ? 0 : -EPERM;
}

int sd_cpu_check_self_slow(const struct sd_cpu *c);

/* Per-CPU area lifecycle, called by the machine. */
size_t sd_cpu_area_size(unsigned l1, unsigned sets, unsigned ways);
void sd_cpu_area_init(struct sd_cpu *c, struct sd_machine *m, unsigned id, size_t size,
		      unsigned l1, unsigned sets, unsigned ways);

/* The hardware halves of attach and detach (machine/attach.c has the
 * rest). Online: -EBUSY if the CPU has a thread, or the binding's error.
 * Offline: owner, interrupts on, after the strategy and mm let go. */
int sd_cpu_online(struct sd_machine *m, unsigned id, struct sd_cpu **out);
void sd_cpu_offline(struct sd_cpu *c);

/* Pass an RCU quiescent state (owner, interrupts on). */
void sd_cpu_qs(struct sd_cpu *c);

/*
 * A CPU changes host threads (lib/sched: a context switch between tasks).
 * The outgoing thread, interrupts off, lets go: its thread-locals stop
 * naming @c, and IPI signals go to @next_tid (the incoming thread, parked
 * until it takes @c over: its handler finds no CPU and leaves the queue to
 * that take-over) rather than to a thread that may exit. The incoming one takes @c over with interrupts still off
 * (they are the CPU's, raised by the outgoing thread, and the incoming
 * one's sd_irq_on() ends the switch): it binds itself to @c's PU when
 * @bind (a task that last ran on another CPU), becomes the thread IPIs go
 * to, and leaves ipi_pending set so that the sd_irq_on() runs whatever a
 * signal to the outgoing thread could not. The incoming thread must have
 * registered with RCU (sd_cpu_thread_prepare()).
 */
void sd_cpu_hand_out(struct sd_cpu *c, int next_tid);
int sd_cpu_hand_in(struct sd_cpu *c, bool bind, struct sd_topology_binding *binding);
/* A thread that will take CPUs over (sd_cpu_hand_in()), before any: RCU
 * registration (offline), the signal context TSan needs. */
void sd_cpu_thread_prepare(void);
void sd_cpu_thread_finish(struct sd_machine *m, struct sd_topology_binding *binding);

/* The CPU's time: its modelled clock (ns) on a modelled machine, else the
 * host's CLOCK_MONOTONIC. Owner. */
uint64_t sd_cpu_now_ns(struct sd_cpu *c);
/*
 * lib/sched's idle thread, holding @c: wait until *@word is not @val (a
 * reschedule IPI's handler changes it) or @c's time reaches @until_ns
 * (UINT64_MAX: no deadline), answering IPIs meanwhile. Strict modelled
 * time: a wait in the machine (sd_seq_wait()), woken by an IPI's arrival
 * or the deadline, so the wakeup happens at its modelled time. Lax: a
 * deadline is idle time added to the clock at once (the window holds it
 * back). Real time: a futex wait. May return early; the caller looks again.
 */
void sd_cpu_idle_wait(struct sd_cpu *c, SD_ATOMIC(int) *word, int val, uint64_t until_ns);

#endif
