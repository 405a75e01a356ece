/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include "../core/futex.h"
#include "../core/rcu.h"
#include "../time/sequencer.h"

#include "../core/error.h"
#include "event.h"
#include "machine_state.h"
#include "smp.h"

size_t sd_cpu_area_size(unsigned l1, unsigned sets, unsigned ways)
{
	size_t size = sizeof(struct sd_cpu) + sd_tlb_storage_size(l1, sets, ways);

	return (size + SD_CACHELINE - 1) & ~(size_t)(SD_CACHELINE - 1);
}

void sd_cpu_area_init(struct sd_cpu *c, struct sd_machine *m, unsigned id, size_t size,
		      unsigned l1, unsigned sets, unsigned ways)
{
	/* hwloc_alloc() may come from posix_memalign: not zeroed. */
	memset(c, 0, size);
	c->id = id;
	c->m = m;
	c->alloc_size = size;
	__cds_lfs_init(&c->ipi_queue);
	atomic_init(&c->ipi_kick, 0);
	atomic_init(&c->ipi_senders, 0);
	atomic_init(&c->tid, 0);
	atomic_init(&c->attached, 0);
	atomic_init(&c->mm, NULL);
	atomic_init(&c->lazy, 0);
	atomic_init(&c->barriers, 0);
	c->irq_depth = 0;
	c->ipi_pending = 0;
	c->asid = 0;
	c->pinned = -1;
	c->checked = m->checked;
	sd_model_cpu_init(c);
	sd_tlb_init(&c->tlb, (char *)c + sizeof(*c), l1, sets, ways);
}

static void note_unpinned(struct sd_machine *m, const char *note)
{
	pthread_mutex_lock(&m->pin_note_lock);
	if (!m->pin_note[0])
		snprintf(m->pin_note, sizeof(m->pin_note), "%s", note);
	pthread_mutex_unlock(&m->pin_note_lock);
	atomic_store(&m->any_unpinned, 1);
}

/*
 * GCC 12's libtsan creates a thread's signal context lazily with a plain
 * load and store, on the first signal or intercepted blocking call; a signal
 * landing while it is being created is dropped (LLVM later made it a
 * compare-and-swap, see its signal_thread_sigctx_race.cpp). A fresh CPU
 * entering its first blocking call right as its first IPI lands is exactly
 * that race: create the context while no IPI can reach us yet.
 */
static void tsan_signal_context_create(void)
{
#ifdef SD_TSAN
	struct timespec zero = { 0, 0 };

	nanosleep(&zero, NULL);
#endif
}

/*
 * The hardware half of sd_cpu_attach() (machine/attach.c): claim CPU @id,
 * pin the thread, start from an empty TLB, then become reachable by IPIs.
 */
int sd_cpu_online(struct sd_machine *m, unsigned id, struct sd_cpu **out)
{
	struct sd_cpu *c = m->cpus[id];
	char note[128];
	int expected = 0, pinned;

	if (!atomic_compare_exchange_strong(&c->attached, &expected, 1))
		return sd_fail(-EBUSY, "CPU %u already has a thread", id);

	pinned = sd_topology_bind_self(&m->topo, id, m->cfg.flags & SD_MACHINE_STRICT_PIN,
				       &c->binding, note, sizeof(note));
	if (pinned < 0) {
		atomic_store(&c->attached, 0);
		return pinned;
	}
	if (!pinned)
		note_unpinned(m, note);
	c->pinned = pinned;
	c->irq_depth = 0;
	c->ipi_pending = 0;
	/* While detached (or with a thread that died) the CPU received no
	 * flush: whatever its TLB still holds may be stale. */
	sd_tlb_invalidate(&c->tlb, &(struct sd_tlb_inval){ .kind = SD_TLB_INVAL_ALL });
	/* A kick left by a signal that found the thread gone. */
	atomic_store(&c->ipi_kick, 0);
	atomic_store_explicit(&c->ipi_send_err, 0, memory_order_relaxed);
	tsan_signal_context_create();
	/* The handler finds its CPU through sd_this_cpu: set it before the
	 * tid makes us reachable, or the first IPI would find no CPU, leave
	 * the kick set and never be answered. */
	sd_this_cpu = c;
	atomic_store(&c->tid, (int)syscall(SYS_gettid));
	sd_rcu_register();
	/* Modelled time: the CPU joins the running ones at their time. */
	sd_model_cpu_online(c);
	sd_cpu_seq_hook(c, true);
	atomic_fetch_add(&m->nr_attached, 1);
	*out = c;
	return 0;
}

/* The hardware half of sd_cpu_detach(), after the strategy and the mm layer
 * let go: answer what is queued, give back the frames, unpin. Owner,
 * interrupts on. */
void sd_cpu_offline(struct sd_cpu *c)
{
	struct sd_machine *m = c->m;

	sd_smp_call_offline(c);
	sd_cpu_seq_hook(c, false);
	sd_model_cpu_offline(c);
	sd_frame_cache_drain(&m->frames, &c->frames);
	sd_rcu_unregister();
	sd_topology_unbind_self(&m->topo, &c->binding);
	sd_this_cpu = NULL;
	atomic_store(&c->attached, 0);
	atomic_fetch_sub(&m->nr_attached, 1);
}

void sd_cpu_thread_prepare(void)
{
	tsan_signal_context_create();
	sd_rcu_register();
	sd_rcu_thread_offline();
}

void sd_cpu_thread_finish(struct sd_machine *m, struct sd_topology_binding *binding)
{
	if (binding->saved)
		sd_topology_unbind_self(&m->topo, binding);
	if (!sd_rcu_online())
		sd_rcu_thread_online();
	sd_rcu_unregister();
}

void sd_cpu_hand_out(struct sd_cpu *c, int next_tid)
{
	if (c->model.seq)
		sd_seq_cpu_handover(&c->model);
	sd_cpu_seq_hook(c, false);
	/* A parked thread is an extended quiescent state: grace periods
	 * do not wait for it. */
	if (sd_rcu_online())
		sd_rcu_thread_offline();
	/* tid is never 0 here: a CPU with no tid reads as offline, and a
	 * flush would skip it (sd_smp_call_post()). It names the incoming
	 * thread from now on, which is parked and alive: the outgoing one
	 * may exit (a task that returned), and the IPI watchdog would take a
	 * signal refused for a gone thread for a dead CPU (-ESRCH). A signal
	 * that lands before the incoming thread takes over finds no CPU and
	 * is dropped (ipi_handler()); its kick stays set, and the take-over
	 * runs the queue. */
	sd_this_cpu = NULL;
	if (next_tid)
		atomic_store(&c->tid, next_tid);
}

int sd_cpu_hand_in(struct sd_cpu *c, bool bind, struct sd_topology_binding *binding)
{
	struct sd_machine *m = c->m;
	char note[128];
	int pinned = c->pinned;

	if (bind) {
		if (binding->saved)
			sd_topology_unbind_self(&m->topo, binding);
		pinned = sd_topology_bind_self(&m->topo, c->id, m->cfg.flags & SD_MACHINE_STRICT_PIN,
					       binding, note, sizeof(note));
		if (pinned == 0)
			note_unpinned(m, note);
	}
	/* As in sd_cpu_online(): the handler finds its CPU before the tid
	 * makes this thread the one signals go to. */
	sd_this_cpu = c;
	atomic_store(&c->tid, (int)syscall(SYS_gettid));
	/* Against sd_smp_call_post(), which counts itself in ipi_senders and
	 * then reads tid (both seq_cst): a sender that read the old tid has
	 * pushed and sent before the count drops, so the queue run below
	 * sees its request; a later one reads our tid. */
	while (atomic_load(&c->ipi_senders))
		sched_yield();
	if (c->model.seq)
		sd_seq_cpu_rethread(&c->model);
	sd_rcu_thread_online();
	sd_cpu_seq_hook(c, true);
	c->ipi_pending = 1;
	return pinned < 0 ? pinned : 0;
}

uint64_t sd_cpu_now_ns(struct sd_cpu *c)
{
	struct timespec ts;

	if (c->model.ev_ps)
		return sd_cpu_clock_ns(c);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void sd_cpu_idle_wait(struct sd_cpu *c, SD_ATOMIC(int) *word, int val, uint64_t until_ns)
{
	uint64_t now = sd_cpu_now_ns(c);

	if (c->model.seq) {
		uint64_t until_ps = until_ns == UINT64_MAX ? SD_SEQ_NEVER : until_ns * PS_PER_NS;

		if (atomic_load(word) == val && until_ps > c->model.clock_ps)
			sd_seq_wait(&c->model, until_ps);
		/* Its sync point: the IPIs that woke it run here. */
		sd_event(c, SD_EV_WORK, 0, 0);
		return;
	}
	if (until_ns != UINT64_MAX && c->model.ev_ps) {
		if (until_ns > now)
			sd_event(c, SD_EV_WORK, until_ns - now, 0);
		return;
	}
	if (until_ns == UINT64_MAX)
		sd_futex_wait(word, val);
	else if (until_ns > now)
		sd_futex_wait_ns(word, val, until_ns - now);
}

struct sd_cpu *sd_cpu_self(void)
{
	return sd_this_cpu;
}

/* Getters follow error.h's rule: a NULL CPU reads as the neutral value. */
unsigned sd_cpu_id(const struct sd_cpu *c)
{
	if (!c)
		return (unsigned)sd_fail(0, "sd_cpu_id: NULL CPU");
	return c->id;
}

struct sd_machine *sd_cpu_machine(const struct sd_cpu *c)
{
	if (!c) {
		sd_fail(0, "sd_cpu_machine: NULL CPU");
		return NULL;
	}
	return c->m;
}

/*
 * One compare with the thread-local CPU (an initial-exec TLS load, as the
 * sd_access() hit path pays), so a stray call from another thread cannot
 * corrupt the owner's irq_depth, which only its own thread may write.
 */
void sd_irq_disable(struct sd_cpu *c)
{
	if (unlikely(sd_cpu_check_self(c))) {
		sd_fail(-EPERM, "sd_irq_disable: " SD_NOT_ATTACHED);
		return;
	}
	sd_irq_off(c);
}

/*
 * An enable with interrupts already on would take the depth to -1: the CPU
 * would read as interrupts-off for good, and every IPI to it (so every
 * remote flush that must reach it) would wait forever. Refuse it, leave the
 * depth at 0 and count it, so sd_machine_run() can report a body that did
 * it. The library's own pairs use sd_irq_on() and skip this check.
 */
int sd_irq_enable(struct sd_cpu *c)
{
	if (unlikely(sd_cpu_check_self(c)))
		return sd_fail(-EPERM, "sd_irq_enable: " SD_NOT_ATTACHED);
	if (unlikely(c->irq_depth <= 0)) {
		c->irq_unbalanced++;
		return sd_fail(-EINVAL, "sd_irq_enable: interrupts are already on on CPU %u "
			       "(unbalanced enable, ignored)", c->id);
	}
	sd_irq_on(c);
	return 0;
}

int sd_irqs_disabled(const struct sd_cpu *c)
{
	if (!c)
		return sd_fail(0, "sd_irqs_disabled: NULL CPU");
	return c->irq_depth != 0;
}

void sd_cpu_qs(struct sd_cpu *c)
{
	c->ops_since_qs = 0;
	/* An idle CPU is offline (an extended quiescent state); announcing a
	 * quiescent state would bring it back online. */
	if (sd_rcu_online())
		sd_rcu_quiescent();
}

void sd_cpu_quiescent(struct sd_cpu *c)
{
	if (sd_cpu_check_self(c))
		sd_fail(-EPERM, "sd_cpu_quiescent: " SD_NOT_ATTACHED);
	else if (c->irq_depth)
		sd_fail(-EINVAL, "sd_cpu_quiescent: interrupts are off");
	else
		sd_cpu_qs(c);
}

/* Modelled time's per-CPU calls (the model itself is model.c). */
uint64_t sd_cpu_clock_ns(const struct sd_cpu *c)
{
	if (!c)
		return (uint64_t)sd_fail(0, "sd_cpu_clock_ns: NULL CPU");
	if (!c->model.ev_ps)
		return 0;
	/* The owner's exact clock includes the stalls broadcasts owe it
	 * that its next sync point will take in (time/sync.c, recv_pay()). */
	if (c == sd_this_cpu)
		return (c->model.clock_ps + atomic_load_explicit(&c->recv_stall_ps,
								 memory_order_relaxed)) / PS_PER_NS;
	return atomic_load_explicit(&c->model_pub.clock_ps, memory_order_relaxed) / PS_PER_NS;
}

int sd_cpu_work(struct sd_cpu *c, uint64_t ns)
{
	if (sd_cpu_check_self(c))
		return sd_fail(-EPERM, "sd_cpu_work: " SD_NOT_ATTACHED);
	/* An instruction boundary (smp.h): pending RAR requests first. */
	sd_smp_boundary(c);
	/* The header's promise: nothing on a machine without a model, for
	 * any @ns (there is no clock to overflow). */
	if (!c->m->model.on)
		return 0;
	/* A clock never passes 2^63 ps (106 days), so sums of charges
	 * cannot wrap. */
	if (ns > UINT64_MAX / PS_PER_NS / 4 ||
	    c->model.clock_ps + ns * PS_PER_NS > (1ull << 63))
		return sd_fail(-EINVAL, "sd_cpu_work: %llu ns would take CPU %u's modelled clock "
			       "past 2^63 ps", (unsigned long long)ns, c->id);
	if (!c->model.seq || c->irq_depth || c->model.locks_held) {
		sd_event(c, SD_EV_WORK, ns, 0);
		return 0;
	}
	/* Strict mode: the work is a wait for its own end. The other CPUs
	 * run meanwhile; an IPI that arrives during it takes the token back
	 * at its arrival, its handler runs there, and the work resumes after
	 * it, as an interrupt would have it. One hand-off per work (and per
	 * interrupt), not one at each other CPU's step. */
	uint64_t left = ns * PS_PER_NS;

	while (left) {
		left -= sd_clock_work_wait(&c->model, left);
		/* Its sync point: the preemption tick it reached, the IPIs
		 * that arrived. */
		sd_event(c, SD_EV_WORK, 0, 0);
	}
	return 0;
}

/*
 * Strict modelled time's wait hook (core/backoff.h): a CPU holding the
 * token that spins on a real lock lets the other CPUs make a step, runs
 * the IPIs that arrived meanwhile (the lock's holder may wait for its
 * ack), and looks again.
 */
static bool seq_wait_hook(void)
{
	struct sd_cpu *c = sd_this_cpu;

	if (!c || !c->model.seq || !sd_seq_running(&c->model) || !sd_seq_poll(&c->model))
		return false;
	if (!c->irq_depth && !c->model.irq_batch &&
	    (c->ipi_pending || sd_seq_arrival(&c->model, NULL) <= c->model.clock_ps))
		sd_irq_run_pending(c);
	return true;
}

int sd_cpu_poll(struct sd_cpu *c)
{
	if (sd_cpu_check_self(c))
		return sd_fail(-EPERM, "sd_cpu_poll: " SD_NOT_ATTACHED);
	if (c->irq_depth)
		return sd_fail(-EDEADLK, "sd_cpu_poll: CPU %u waits for another CPU with "
			       "interrupts off", c->id);
	if (c->model.seq) {
		/* Back from a stall or idle first: only the holder polls. */
		if (!sd_seq_running(&c->model))
			sd_clock_sync(&c->model);
		if (!seq_wait_hook())
			sched_yield();  /* nobody else can run: look again */
		return 0;
	}
	/* Lax: out of the running set until its next event, so the window
	 * does not wait for a clock that a spin in the program's code
	 * cannot move. */
	sd_clock_lax_poll(&c->model);
	sched_yield();
	return 0;
}

int sd_cpu_poll_wake(struct sd_cpu *c)
{
	if (sd_cpu_check_self(c))
		return sd_fail(-EPERM, "sd_cpu_poll_wake: " SD_NOT_ATTACHED);
	if (c->model.seq)
		sd_seq_released(&c->model);
	return 0;
}

static void seq_release_hook(void)
{
	struct sd_cpu *c = sd_this_cpu;

	if (c && c->model.seq)
		sd_seq_released(&c->model);
}

void sd_cpu_seq_hook(struct sd_cpu *c, bool on)
{
	sd_wait_hook = on && c->model.seq ? seq_wait_hook : NULL;
	sd_release_hook = on && c->model.seq ? seq_release_hook : NULL;
}
