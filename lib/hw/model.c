/* SPDX-License-Identifier: MIT */
/*
 * Modelled time's charges: what each event costs a CPU's clock, by its row
 * of the event table (hw/event.h), priced here with the shared resources'
 * answers (time/resource.c); the clocks are kept in step by time/sync.c
 * (include/shootdown/model.h for what, docs/design.md "Modelled time" for
 * why it is built this way). The profile file is read by profile.c.
 *
 * The scheme is Graphite's (Miller et al., HPCA 2010): the real threads run
 * as they will, each emulated CPU advances its own clock by the cost of
 * what it did, shared resources keep a "free at" time that serialises
 * their users in modelled time, and a CPU that gets more than a window
 * ahead of the slowest running CPU waits for it in real time. Messages (an
 * IPI, an ack) carry the sender's time; the receiver's clock moves up to
 * the message's arrival if it is behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../core/backoff.h"
#include "../core/error.h"
#include "event.h"
#include "machine_state.h"
#include "model.h"

_Static_assert(SD_LOCK_KIND_NR <= SD_MODEL_LOCK_KINDS, "model.h: too few lock kinds");
_Static_assert(SD_EV_NR <= 256, "model.h: ev_ps is too small for the event list");

static inline uint64_t max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

/* ---- distances ---- */

enum sd_model_distance sd_model_distance_of(const struct sd_model *mod, unsigned a, unsigned b)
{
	const struct sd_model_place *pa = &mod->place[a], *pb = &mod->place[b];

	if (pa->core == pb->core)
		return SD_DIST_CORE;
	if (pa->llc == pb->llc)
		return SD_DIST_LLC;
	if (pa->package == pb->package)
		return SD_DIST_PACKAGE;
	return SD_DIST_SYSTEM;
}

static uint64_t dist_cost(const struct sd_model *mod, enum sd_model_dist_param p, unsigned a,
			  unsigned b)
{
	return mod->dist_ps[p][sd_model_distance_of(mod, a, b)];
}

/*
 * The first gap of @occ at or after @t in the history @h (@busy, @cap
 * slots) that @lock guards, @owner saying who holds it. The lock is taken
 * only when modelling, for a few dozen instructions; in strict mode only
 * the running CPU takes it, in lax mode the host's threads share it.
 */
static uint64_t hist_reserve(struct sd_cpu *c, struct sd_spinlock *lock,
			     SD_ATOMIC(unsigned) *owner, struct sd_model_hist *h,
			     struct sd_model_busy *busy, unsigned cap, uint64_t t, uint64_t occ)
{
	struct sd_backoff b = SD_BACKOFF_INIT;
	uint64_t start;

	/* An IPI handler that interrupted this very CPU inside the history
	 * (lax mode: a real signal, and the handler touches the same line)
	 * must not wait for itself: it queues behind everything instead. */
	while (!sd_spin_trylock(lock)) {
		/* Relaxed: an owner equal to us was written by this thread
		 * (the handler interrupted it), so no ordering is needed to
		 * see it; any other value just means wait. */
		if (atomic_load_explicit(owner, memory_order_relaxed) == c->id + 1)
			return max_u64(t, h->last_end_ps);
		sd_backoff_wait(&b);
	}
	atomic_store_explicit(owner, c->id + 1, memory_order_relaxed);
	start = sd_model_hist_reserve(h, busy, cap, t, occ);
	atomic_store_explicit(owner, 0, memory_order_relaxed);
	sd_spin_unlock(lock);
	return start;
}

static uint64_t queue_reserve(struct sd_cpu *c, struct sd_model_queue *q, uint64_t t,
			      uint64_t occ)
{
	return hist_reserve(c, &q->lock, &q->owner, &q->hist, q->busy, SD_MODEL_QUEUE_SLOTS,
			    t, occ);
}

/* ---- charges out of line ---- */

/*
 * A broadcast stalls the CPUs it reaches: @ps owed by each CPU but the
 * issuer (whose own TLB is in issue_ps). TLBI ...IS reaches every PE of
 * the inner-shareable domain, whatever runs there (Arm ARM, DDI 0487,
 * "TLB maintenance instructions": the IS forms apply to all PEs in the
 * same Inner Shareable shareability domain; Linux puts every CPU in one),
 * and INVLPGB every logical processor of the system (AMD64 APM vol. 3,
 * INVLPGB): lib/strategy/broadcast.c and lib/arch/invlpgb.c invalidate
 * every CPU's TLB, not mm_cpumask's, and every CPU pays likewise.
 *
 * Only a CPU writes its own clock, so the issuer adds to the receiver's
 * recv_stall_ps and the receiver takes it at its next sync point
 * (recv_pay()). Relaxed: the word carries a sum and publishes nothing
 * else; its RMWs are in one modification order, so no add is lost or
 * taken twice, and one the receiver's exchange misses is taken at its
 * next sync (lax mode lets a stall land a sync late, within the window).
 * Strict mode needs every add made earlier in modelled time to be seen by
 * the take: adds and takes are both made by the token's holder, and the
 * token's handoff orders them: the release store of go in grant()
 * (sequencer.c) pairs with the acquire load in park().
 */
static void recv_owe(struct sd_cpu *c, uint64_t ps)
{
	const struct sd_machine *m = c->m;

	if (!ps)
		return;
	if (c->model.seq && sd_seq_running(&c->model)) {
		sd_seq_recv_owe(&c->model, ps);
		return;
	}
	for (unsigned i = 0; i < m->nr_cpus; i++) {
		struct sd_cpu *t = m->cpus[i];

		if (t != c)
			atomic_fetch_add_explicit(&t->recv_stall_ps, ps, memory_order_relaxed);
	}
}

/* @whole: the op drops a whole ASID or the whole TLB, which scans each
 * TLB it reaches where the profile says invalidation scans (scan_ps). */
static void charge_broadcast(struct sd_cpu *c, uint64_t issue_ps, uint64_t targets,
			     uint64_t completion_ps, uint64_t *done_ps, uint64_t recv_ps,
			     bool whole)
{
	struct sd_model *mod = &c->m->model;
	uint64_t occ = mod->param_ps[SD_MP_DVM_MESSAGE] + mod->param_ps[SD_MP_DVM_TARGET] * targets;

	c->model.clock_ps += issue_ps;
	uint64_t start = queue_reserve(c, &mod->interconnect, c->model.clock_ps, occ);
	*done_ps = max_u64(*done_ps, start + occ + completion_ps);
	recv_owe(c, recv_ps + (whole ? mod->scan_ps : 0));
}

/* The count's line moves to @c for a down or an up (an atomic RMW), after
 * the moves before it: lock_handoff at the distance from its last owner. */
static void charge_count(struct sd_cpu *c, struct sd_model_rwsem *rw)
{
	struct sd_model *mod = &c->m->model;

	if (rw->count_owner != UINT32_MAX && rw->count_owner != c->id) {
		uint64_t cost = dist_cost(mod, SD_MDP_LOCK_HANDOFF, rw->count_owner, c->id);
		c->model.clock_ps = sd_model_hist_reserve(&rw->count, rw->count_busy,
							  SD_MODEL_LINE_SLOTS,
							  c->model.clock_ps, cost) + cost;
	}
	rw->count_owner = c->id;
}

/*
 * down_read() / down_write() and their ups on an mm's mmap_lock (struct
 * sd_model_rwsem). Taken under the real rwlock, and @rw->lock orders the
 * modelled state among the readers that share it. A CPU holds at most one
 * read hold at a time (the library never nests them): its start is kept
 * in the CPU's own state. The per-VMA lock's holds (a fault's read,
 * SD_LOCK_MM_VMA, against the VMA's own sd_model_rwsem; a change's
 * vma_start_write(), SD_LOCK_VMA_WRITE) touch no mmap_lock count. A
 * fault's read moves the VMA lock's own count, as the mmap_lock's reads
 * move theirs: vma_start_read() is a down_read_trylock() of the VMA's
 * rwsem and vma_end_read() its up_read() (Suren Baghdasaryan's per-VMA
 * locks, Linux 6.4; a reference count, as much an RMW, since 6.15), so
 * threads faulting in one VMA hand its line around twice a fault. The
 * write side is charged its wait for the VMA's readers only, its store
 * being part of vma_change.
 */
static void charge_rwsem(struct sd_cpu *c, uint64_t kind, struct sd_model_rwsem *rw, bool acquire)
{
	struct sd_model *mod = &c->m->model;
	bool write = kind == SD_LOCK_MM || kind == SD_LOCK_VMA_WRITE;

	sd_spin_lock(&rw->lock);
	if (!acquire) {
		if (kind != SD_LOCK_VMA_WRITE)
			charge_count(c, rw);
		if (write)
			sd_model_lock_record(&rw->writers, rw->writers.cur_start_ps,
					     max_u64(c->model.clock_ps, rw->writers.cur_start_ps),
					     c->id);
		else
			sd_model_lock_record(&rw->readers, c->model.read_start_ps,
					     max_u64(c->model.clock_ps, c->model.read_start_ps),
					     c->id);
		sd_spin_unlock(&rw->lock);
		c->model.rwsems_held--;
		return;
	}
	/* The RMW that takes the lock comes once it is free (a waiter's
	 * spin ends at the release), as charge_lock() adds the handoff
	 * after the gap. */
	uint64_t t = write ? sd_model_rwsem_write_gap(rw, c->model.clock_ps, rw->writers.hold_ps)
			   : sd_model_rwsem_read_gap(rw, c->model.clock_ps);
	if (write)
		rw->writers.cur_start_ps = t;
	else
		c->model.read_start_ps = t;
	c->model.clock_ps = t;
	if (kind != SD_LOCK_VMA_WRITE)
		charge_count(c, rw);
	sd_spin_unlock(&rw->lock);
	if (kind != SD_LOCK_VMA_WRITE)
		c->model.clock_ps += mod->param_ps[SD_MP_LOCK_ACQUIRE];
	c->model.rwsems_held++;
}

/*
 * mmap_write_downgrade(): one RMW of the count (atomic_long_add_return_release()),
 * which ends the write hold and starts a read hold at once; readers that
 * wait for the writer's end may start from here.
 */
static void charge_rwsem_downgrade(struct sd_cpu *c, struct sd_model_rwsem *rw)
{
	sd_spin_lock(&rw->lock);
	charge_count(c, rw);
	sd_model_lock_record(&rw->writers, rw->writers.cur_start_ps,
			     max_u64(c->model.clock_ps, rw->writers.cur_start_ps), c->id);
	c->model.read_start_ps = c->model.clock_ps;
	sd_spin_unlock(&rw->lock);
}

static void charge_lock(struct sd_cpu *c, uint64_t kind, uint64_t aux, bool acquire)
{
	struct sd_model *mod = &c->m->model;
	struct sd_model_lock *l = aux ? (struct sd_model_lock *)(uintptr_t)aux : &mod->lock[kind];
	uint32_t prev;

	/* The DVM lock is the interconnect, modelled as a resource. */
	if (kind == SD_LOCK_DVM)
		return;
	if (kind == SD_LOCK_MM || kind == SD_LOCK_MM_READ || kind == SD_LOCK_MM_VMA ||
	    kind == SD_LOCK_VMA_WRITE) {
		charge_rwsem(c, kind, (struct sd_model_rwsem *)(uintptr_t)aux, acquire);
		return;
	}
	if (!acquire) {
		uint64_t end = max_u64(c->model.clock_ps, l->cur_start_ps);

		if (l->cal)
			sd_model_cal_record(l->cal, l->cur_start_ps, end - l->cur_start_ps, c->id);
		else
			sd_model_lock_record(l, l->cur_start_ps, end, c->id);
		l->last_cpu = c->id;
		c->model.locks_held--;
		return;
	}
	prev = l->last_cpu;
	uint64_t t = l->cal ? sd_model_cal_gap(l->cal, c->model.clock_ps, &prev)
			    : sd_model_lock_gap(l, c->model.clock_ps, l->hold_ps, &prev);

	l->cur_start_ps = t;
	t += mod->param_ps[SD_MP_LOCK_ACQUIRE];
	if (prev != UINT32_MAX && prev != c->id)
		t += dist_cost(mod, SD_MDP_LOCK_HANDOFF, prev, c->id);
	c->model.clock_ps = t;
	c->model.locks_held++;
}

/*
 * A hot line (resource.h, sd_model_line_access()): a fetch costs a
 * transfer at the distance from its last writer, the invalidation of
 * other copies one at LLC distance; transfers of one line serialise, in
 * modelled order (its history), whatever order the CPUs reach it in.
 */
static void charge_line(struct sd_cpu *c, struct sd_model_line *line, bool write)
{
	struct sd_model *mod = &c->m->model;
	uint32_t from = SD_MODEL_NONE;
	uint64_t cost = 0;

	switch (sd_model_line_access(line, c->id, write, &from)) {
	case SD_LINE_FETCH:
		cost = dist_cost(mod, SD_MDP_LINE_TRANSFER, from, c->id);
		break;
	case SD_LINE_INVALIDATE:
		cost = mod->dist_ps[SD_MDP_LINE_TRANSFER][SD_DIST_LLC];
		break;
	case SD_LINE_HIT:
		break;
	}
	if (cost)
		c->model.clock_ps = hist_reserve(c, &line->lock, &line->owner, &line->hist,
						 line->busy, SD_MODEL_LINE_SLOTS,
						 c->model.clock_ps, cost) + cost;
}

void sd_model_event(struct sd_cpu *c, enum sd_event ev, uint64_t arg, uint64_t aux)
{
	struct sd_model *mod = &c->m->model;
	const uint64_t *p = mod->param_ps;

	sd_clock_event(&c->model);
	/* Per unit of the argument: levels read, PTEs, frames, tables, pages. */
	if (sd_event_desc[ev].cost == SD_COST_EACH) {
		c->model.clock_ps += c->model.ev_ps[ev] * arg;
		return;
	}
	/* The rules of the events marked OUT in SD_EVENT_LIST. */
	switch (ev) {
	case SD_EV_LOCAL_FLUSH_RANGE:
		c->model.clock_ps += p[SD_MP_LOCAL_FLUSH_RANGE] + p[SD_MP_LOCAL_FLUSH_RANGE_PAGE] * aux;
		break;
	case SD_EV_TLBI_OP:
		charge_broadcast(c, p[SD_MP_TLBI_ISSUE], arg, p[SD_MP_DVM_COMPLETION],
				 &c->model.dvm_done_ps, p[SD_MP_TLBI_RECV], !aux);
		break;
	case SD_EV_DSB:
		c->model.clock_ps = max_u64(c->model.clock_ps, c->model.dvm_done_ps) + p[SD_MP_DSB];
		break;
	case SD_EV_INVLPGB:
		charge_broadcast(c, p[SD_MP_INVLPGB_ISSUE], c->m->nr_cpus - 1,
				 p[SD_MP_INVLPGB_COMPLETION], &c->model.invlpgb_done_ps,
				 p[SD_MP_INVLPGB_RECV], !aux);
		break;
	case SD_EV_TLBSYNC:
		c->model.clock_ps = max_u64(c->model.clock_ps, c->model.invlpgb_done_ps) +
				    p[SD_MP_TLBSYNC];
		break;
	case SD_EV_LOCK_ACQUIRE:
	case SD_EV_LOCK_RELEASE:
		charge_lock(c, arg, aux, ev == SD_EV_LOCK_ACQUIRE);
		break;
	case SD_EV_ANON_PAGE:
		/* do_anonymous_page() / wp_page_copy(): the folio's allocation,
		 * its clearing (arg 1) or the copy of the old page (arg 0), and
		 * its memcg charge. */
		c->model.clock_ps += p[SD_MP_PAGE_ALLOC] + p[SD_MP_MEMCG_CHARGE] +
				     (arg ? p[SD_MP_PAGE_ZERO] : p[SD_MP_PAGE_COPY]);
		break;
	case SD_EV_LOCK_DOWNGRADE:
		charge_rwsem_downgrade(c, (struct sd_model_rwsem *)(uintptr_t)aux);
		break;
	case SD_EV_LINE_READ:
	case SD_EV_LINE_WRITE:
		charge_line(c, (struct sd_model_line *)(uintptr_t)aux, ev == SD_EV_LINE_WRITE);
		break;
	case SD_EV_LRU_LOCKED_OPS:
		/* list_add()/list_del() at the head write the head and its
		 * neighbour, both last written by the lock's previous holder
		 * when that was another CPU: fetched once per hold. */
		charge_line(c, &mod->lru_lines[0], true);
		charge_line(c, &mod->lru_lines[1], true);
		c->model.clock_ps += p[SD_MP_LRU_PAGE] * arg;
		break;
	case SD_EV_WORK:
		c->model.clock_ps += arg * PS_PER_NS;
		break;
	default:
		/* A row marked OUT with no rule here. */
		c->model.clock_ps += c->model.ev_ps[ev];
		break;
	}
	/* The caller (sd_model_charge()) syncs: it can run IPIs. */
}

/* ---- IPIs ---- */

uint64_t sd_model_ipi_posted(struct sd_cpu *from, struct sd_cpu *t)
{
	const uint64_t *p = from->m->model.param_ps;

	/* The first target of a shootdown pays the send, the others the
	 * multicast's per-target part (until the initiator waits). */
	from->model.clock_ps += from->model.ipi_posts++ ? p[SD_MP_IPI_SEND_TARGET]
							: p[SD_MP_IPI_SEND];
	charge_line(from, &t->ipi_line, true);
	return from->model.clock_ps;
}

void sd_model_ipi_run(struct sd_cpu *c, uint64_t sent_ps)
{
	const uint64_t *p = c->m->model.param_ps;

	/* The handler starts at the later of the IPI's arrival and this
	 * CPU's own time: a CPU ahead of the sender takes it at its time. */
	if (sent_ps)
		c->model.clock_ps = max_u64(c->model.clock_ps, sent_ps + p[SD_MP_IPI_DELIVERY]);
	if (!c->model.irq_batch) {
		c->model.clock_ps += p[SD_MP_IRQ_ENTRY];
		c->model.irq_batch = 1;
	}
	c->model.clock_ps += p[SD_MP_IPI_HANDLER];
	charge_line(c, &c->ipi_line, true);
}

/* A RAR signal: the initiator writes the target's action byte and its bit
 * in the RAR IPI, rar_send a target; the byte's line moves to it. */
uint64_t sd_model_rar_posted(struct sd_cpu *from, struct sd_cpu *t)
{
	from->model.clock_ps += from->m->model.param_ps[SD_MP_RAR_SEND];
	charge_line(from, &t->ipi_line, true);
	return from->model.clock_ps;
}

/* The microcode starts at the later of the signal's arrival and this CPU's
 * time; no interrupt entry or exit, and no handler: each action entry it
 * completes is charged (RAR_DONE, rar_service) with its invalidation. */
void sd_model_rar_run(struct sd_cpu *c, uint64_t sent_ps)
{
	if (sent_ps)
		c->model.clock_ps = max_u64(c->model.clock_ps,
					    sent_ps + c->m->model.param_ps[SD_MP_RAR_DELIVERY]);
	charge_line(c, &c->ipi_line, true);
}

/* A remote fence: the firmware, in the initiator's ecall, queues it in the
 * target's FIFO and writes its MSIP, sbi_send_target a target; the FIFO's
 * line moves to the target. */
uint64_t sd_model_sbi_posted(struct sd_cpu *from, struct sd_cpu *t)
{
	from->model.clock_ps += from->m->model.param_ps[SD_MP_SBI_SEND_TARGET];
	charge_line(from, &t->ipi_line, true);
	return from->model.clock_ps;
}

/* The target's M-mode trap starts at the later of the interrupt's arrival
 * and this CPU's time, and costs sbi_service (trap entry and exit, the
 * FIFO's processing) apart from the fence itself, charged as the local
 * flush it is; no S-mode interrupt entry or exit. */
void sd_model_sbi_run(struct sd_cpu *c, uint64_t sent_ps)
{
	const uint64_t *p = c->m->model.param_ps;

	if (sent_ps)
		c->model.clock_ps = max_u64(c->model.clock_ps, sent_ps + p[SD_MP_SBI_DELIVERY]);
	c->model.clock_ps += p[SD_MP_SBI_SERVICE];
	charge_line(c, &c->ipi_line, true);
}

void sd_model_irq_exit(struct sd_cpu *c)
{
	if (!c->model.irq_batch)
		return;
	c->model.clock_ps += c->m->model.param_ps[SD_MP_IRQ_EXIT];
	/* Still in the handler (irq_batch set): a sync here is only put
	 * off, and the interrupted code retries its own at its section's
	 * end, not because of us. */
	if (c->model.clock_ps >= c->model.sync_at_ps)
		(void)sd_clock_sync(&c->model);
	c->model.irq_batch = 0;
}

void sd_model_ipi_acked(struct sd_cpu *from, struct sd_cpu *t, uint64_t acked_ps)
{
	struct sd_model *mod = &from->m->model;

	from->model.ipi_posts = 0;
	/* The wait ends when the ack's line reaches the initiator. */
	if (acked_ps)
		from->model.clock_ps = max_u64(from->model.clock_ps,
					       acked_ps + dist_cost(mod, SD_MDP_LINE_TRANSFER,
								    t->id, from->id));
}

/* ---- lifecycle ---- */

void sd_model_cpu_init(struct sd_cpu *c)
{
	struct sd_model *mod = &c->m->model;

	memset(&c->model, 0, sizeof(c->model));
	c->model.ev_ps = mod->on ? mod->ev_ps : NULL;
	c->model.seq = mod->seq.on;
	c->model.until_ps = SD_SEQ_NEVER;
	c->model.arrival_ps = SD_SEQ_NEVER;
	c->model.id = c->id;
	c->model.irq_depth = &c->irq_depth;
	c->model.ipi_pending = &c->ipi_pending;
	c->model.recv_stall_ps = &c->recv_stall_ps;
	c->model.sq = &mod->seq;
	c->model.pub = &c->model_pub;
	c->model.mod = mod;
	if (mod->peer && c->id < mod->nr_clk)
		mod->peer[c->id] = (struct sd_model_peer){ &c->model_pub, &c->tid };
	atomic_init(&c->model_pub.clock_ps, 0);
	atomic_init(&c->model_pub.state, SD_MODEL_OFF);
	atomic_init(&c->model_pub.window_waits, 0);
	atomic_init(&c->model_pub.preemptions, 0);
	atomic_init(&c->model_pub.preemptions_locked, 0);
	atomic_init(&c->recv_stall_ps, 0);
	c->model.preempt_at_ps = UINT64_MAX;
	sd_model_line_init(&c->ipi_line);
}

void sd_model_cpu_online(struct sd_cpu *c)
{
	if (!c->model.ev_ps)
		return;
	c->model.ipi_posts = 0;
	c->model.locks_held = 0;
	c->model.rwsems_held = 0;
	c->model.sync_deferred = false;
	c->model.irq_batch = 0;
	c->model.seq = c->m->model.seq.on;
	sd_clock_online(&c->model);
}

void sd_model_cpu_offline(struct sd_cpu *c)
{
	if (!c->model.ev_ps)
		return;
	/* The endpoint's offline already left strict mode (smp.c). */
	sd_clock_offline(&c->model);
}

/* ---- set up ---- */

/* Each event's cost from its row of SD_EVENT_LIST (event.h): ONCE and EACH
 * their parameter (EACH per unit of the argument: sd_model_event()), SCAN
 * its parameter and a scan of every entry of the machine's TLBs. */
/* An entry from EL0 and its return, which KPTI runs through its trampoline
 * (tramp_vectors, tramp_exit): a system call, a fault, a trapped
 * instruction. IRQs are left out: an IPI lands as often in the kernel (a
 * CPU spinning in a flush) as in user space, and the emulator cannot tell. */
static bool entry_from_el0(enum sd_model_param p)
{
	return p == SD_MP_SYSCALL_ENTRY || p == SD_MP_PAGE_FAULT_ENTRY || p == SD_MP_TRAP_ENTRY;
}

static void fill_event_costs(struct sd_model *mod)
{
	const bool kpti = mod->features & SD_MODEL_FEATURE_KPTI;

	memset(mod->ev_ps, 0, sizeof(mod->ev_ps));
	for (unsigned ev = 0; ev < SD_EV_NR; ev++) {
		const struct sd_event_desc *d = &sd_event_desc[ev];

		if (d->cost == SD_COST_ONCE || d->cost == SD_COST_SCAN || d->cost == SD_COST_EACH)
			mod->ev_ps[ev] = mod->param_ps[d->param];
		if (d->cost == SD_COST_SCAN)
			mod->ev_ps[ev] += mod->scan_ps;
		if (kpti && d->cost == SD_COST_ONCE && entry_from_el0(d->param))
			mod->ev_ps[ev] += mod->param_ps[SD_MP_KPTI_TRAMPOLINE];
	}
}

int sd_model_init(struct sd_model *mod, const char *profile, const char *topology,
		  uint64_t window_ns, unsigned nr_cpus, unsigned tlb_entries)
{
	int err = sd_model_load(mod, profile, topology, window_ns, nr_cpus, tlb_entries);

	if (!err && mod->on)
		fill_event_costs(mod);
	return err;
}

/* ---- public calls ---- */

double sd_model_cost_ns(const struct sd_machine *m, const char *param)
{
	if (!m || !param)
		return sd_fail(-1, "sd_model_cost_ns: NULL argument"), -1.0;
	if (!m->model.on)
		return sd_fail(-1, "sd_model_cost_ns: the machine models no time (no profile)"), -1.0;
	return sd_model_param_ns(&m->model, param);
}

int sd_machine_model_info(const struct sd_machine *m, struct sd_model_info *info)
{
	struct sd_model_info out = SD_MODEL_INFO_INIT;
	const struct sd_model *mod;

	if (!m || !info)
		return sd_fail(-EINVAL, "sd_machine_model_info: NULL argument");
	/* 0.2.0's struct ended at rejoins, 0.2.1's at vcpu_preemptions_locked,
	 * 0.2.2's at seq_summons: fill that much for their callers. */
	const size_t v020 = offsetof(struct sd_model_info, vcpu_preemptions);
	const size_t v021 = offsetof(struct sd_model_info, strict);
	const size_t v022 = offsetof(struct sd_model_info, stalls);
	const size_t size = info->size;

	if (size != sizeof(out) && size != v020 && size != v021 && size != v022)
		return sd_fail(-EINVAL, "sd_machine_model_info: unknown size %zu (this release: %zu, "
			       "0.2.2's %zu, 0.2.1's %zu or 0.2.0's %zu)", size, sizeof(out), v022,
			       v021, v020);
	mod = &m->model;
	out.modelled = mod->on;
	if (mod->on) {
		snprintf(out.profile, sizeof(out.profile), "%s", mod->name);
		snprintf(out.profile_path, sizeof(out.profile_path), "%s", mod->path);
		snprintf(out.topology, sizeof(out.topology), "%s", mod->topology);
		out.nr_pus = mod->nr_pus;
		out.window_ns = mod->window_ps / PS_PER_NS;
		out.clock_min_ns = UINT64_MAX;
		for (unsigned i = 0; i < m->nr_cpus; i++) {
			uint64_t v = atomic_load_explicit(&m->cpus[i]->model_pub.clock_ps,
							  memory_order_relaxed) / PS_PER_NS;
			out.clock_min_ns = v < out.clock_min_ns ? v : out.clock_min_ns;
			out.clock_max_ns = v > out.clock_max_ns ? v : out.clock_max_ns;
			out.window_waits += atomic_load_explicit(&m->cpus[i]->model_pub.window_waits,
								 memory_order_relaxed);
			out.vcpu_preemptions += atomic_load_explicit(
				&m->cpus[i]->model_pub.preemptions, memory_order_relaxed);
			out.vcpu_preemptions_locked += atomic_load_explicit(
				&m->cpus[i]->model_pub.preemptions_locked, memory_order_relaxed);
		}
		out.max_lead_ns = atomic_load_explicit(&mod->max_lead_ps, memory_order_relaxed) /
				  PS_PER_NS;
		out.rejoins = atomic_load_explicit(&mod->rejoins, memory_order_relaxed);
		out.strict = mod->seq.on;
		out.seq_handoffs = atomic_load_explicit(&mod->seq.handoffs, memory_order_relaxed);
		out.seq_stalls = atomic_load_explicit(&mod->seq.stalls, memory_order_relaxed);
		out.seq_late = atomic_load_explicit(&mod->seq.late, memory_order_relaxed);
		out.seq_summons = atomic_load_explicit(&mod->seq.summons, memory_order_relaxed);
		out.stalls = atomic_load_explicit(&mod->stalls, memory_order_relaxed);
	}
	out.size = size;
	memcpy(info, &out, size);
	return 0;
}
