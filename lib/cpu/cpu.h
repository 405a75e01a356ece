/* SPDX-License-Identifier: MIT */
#ifndef SD_CPU_CPU_H
#define SD_CPU_CPU_H

#include <signal.h>
#include <urcu/compiler.h>
#include <urcu/lfstack.h>

#include <shootdown/cpu.h>
#include <shootdown/stats.h>

#include "../core/compiler.h"
#include "../mm/frame.h"
#include "../tlb/tlb.h"
#include "../topology/topology.h"

struct sd_mm;

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

	/* IPI endpoint: written by senders (sd_ipi_call). */
	sd_cacheline_aligned struct __cds_lfs_stack ipi_queue;
	SD_ATOMIC(int) ipi_kick;          /* a signal is on its way; don't send another */
	SD_ATOMIC(int) ipi_senders;       /* posts in progress: detach waits them out */
	SD_ATOMIC(int) tid;               /* kernel thread id, 0 while detached */
	SD_ATOMIC(int) attached;
	SD_ATOMIC(int) ipi_send_err;      /* last failed send (-errno), for the watchdog report */

	/* Loaded address space: owner writes, others may read. */
	sd_cacheline_aligned SD_ATOMIC(struct sd_mm *) mm;
	SD_ATOMIC(int) lazy;

	/* Owner-private. The IPI handler runs on the owner's thread, so these
	 * need compiler (signal) fences only, never atomics. */
	sd_cacheline_aligned volatile sig_atomic_t irq_depth;
	volatile sig_atomic_t ipi_pending;
	unsigned irq_unbalanced;       /* sd_irq_enable() calls with interrupts on */
	uint16_t asid;                 /* the ASID register */
	uint64_t regs[31];             /* X0..X30: what trap emulation writes */
	bool checked;                  /* copy of the machine's oracle mode */
	int pinned;                    /* -1 never attached, 0 unpinned, 1 pinned */
	unsigned ops_since_qs;         /* accesses since the last quiescent state */
	struct sd_topology_binding binding;
	struct sd_frame_cache frames;

	struct sd_cpu_stats stats;
	struct sd_tlb tlb;
};

/* Initial-exec: a %fs-relative load on the hit path, not a __tls_get_addr
 * call through the PLT, even from the shared library. */
extern SD_THREAD_LOCAL struct sd_cpu *sd_this_cpu __attribute__((tls_model("initial-exec")));

static inline void sd_stat_add(struct sd_cpu *c, enum sd_stat id, uint64_t n)
{
	sd_counter_add(&c->stats.counter[id], n);
}

static inline void sd_stat_inc(struct sd_cpu *c, enum sd_stat id)
{
	sd_stat_add(c, id, 1);
}

void sd_stat_flush_latency(struct sd_cpu *c, uint64_t ns);

/* Emulated interrupts, inline for the access path. */
static inline void sd_irq_off(struct sd_cpu *c)
{
	c->irq_depth++;
	atomic_signal_fence(memory_order_seq_cst);
}

void sd_irq_run_pending(struct sd_cpu *c);

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

/*
 * One IPI request (the kernel's call_single_data): queued on the target,
 * run there, acknowledged through @state. Owned by the sender, which must
 * not reuse it before sd_ipi_wait() returned.
 */
enum {
	SD_IPI_PENDING,
	SD_IPI_PARKED,
	SD_IPI_DONE,        /* run by the target */
	SD_IPI_GONE,        /* released unrun: the target's thread died */
};

struct sd_ipi_req {
	struct cds_lfs_node node;
	sd_ipi_fn fn;
	void *arg;
	SD_ATOMIC(int) state;          /* SD_IPI_*: the sender parks on it */
	struct sd_cpu *target;         /* for the watchdog: whom to re-signal */
};

/*
 * Queue @req on @t and interrupt it with a real signal, unless one is
 * already on its way. Returns false, queueing nothing, if @t has no thread
 * (an offline CPU: it runs nothing and needs no IPI). Callable with
 * interrupts off; only the wait needs them on. @from may be NULL when the
 * sender is not a CPU (a plain thread; nothing is counted then).
 */
bool sd_ipi_post(struct sd_cpu *from, struct sd_cpu *t, struct sd_ipi_req *req);

/*
 * Wait until the target has run @req: spin, yield, then park on a futex
 * that the target's handler wakes. Interrupts must be on, so that IPIs
 * aimed at the waiter meanwhile are answered (no deadlock between two
 * initiators aiming at each other). Parked, the watchdog re-sends the
 * signal every SD_IPI_RESEND_MS and reports a stuck target every
 * ipi_timeout_ms (it keeps waiting: the request stays queued, so it must
 * stay alive). Returns 0, or -ESRCH if the target's thread had exited while
 * attached and the request was released without running. @from may be NULL,
 * as for sd_ipi_post(): reports then name "a thread that is no CPU".
 */
int sd_ipi_wait(struct sd_cpu *from, struct sd_ipi_req *req);

/* Going offline (detach): no new posts, wait out posts in progress, answer
 * everything queued. Owner only, interrupts on. */
void sd_ipi_offline(struct sd_cpu *c);

/* IPI endpoint: install/remove the process-wide handler for @sig. Install
 * refuses (-EBUSY) a signal the host already handles unless @take_over;
 * uninstall restores the host's action only if ours is still in place. */
int sd_ipi_install(int sig, bool take_over);
void sd_ipi_uninstall(int sig);

/* The IPI state of @t in one line (what the watchdog reports): depth,
 * pending flags, queue, signal mask, what its thread is blocked in. Any
 * thread; the owner-private words are read racily. */
void sd_ipi_describe(struct sd_cpu *t, char *buf, size_t len);

/* Test only: plant the stranded-IPI bug back (no look at ipi_pending after
 * ipi_run_queue()'s decrement), so a test can show it tells the two apart. */
extern SD_ATOMIC(bool) sd_ipi_test_no_recheck;

/* Answer every queued IPI now (detach, shutdown). Owner only. */
void sd_ipi_drain(struct sd_cpu *c);

/* Pass an RCU quiescent state (owner, interrupts on). */
void sd_cpu_qs(struct sd_cpu *c);

#endif
