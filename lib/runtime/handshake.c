/* SPDX-License-Identifier: MIT */
/*
 * Handshakes among the threads of an mm (include/shootdown/handshake.h):
 * the object, the targets, the safe states, the requester's wait, and the
 * check that every target was reached. How a request travels is each
 * kind's file.
 *
 * The check does not trust the kind. Before delivering anything, the
 * requester issues a full barrier (its request, and everything it stored
 * before, ordered before what follows) and then reads, for every target,
 * how many full barriers the target had passed (sd_cpu_barriers(): the
 * IPI handler's batch, switch_mm, a handshake function run; hw/cpu.h).
 * Afterwards a target counts as reached if it ran the function for this
 * request (acked), was handled on its behalf, or, for the barrier kinds
 * (membarrier, mprotect), passed a barrier since. That is what a runtime
 * relies on, whatever delivered it; a kind that skips a target, or a
 * strategy whose flush interrupts nobody, is caught here. The targets'
 * side and the steps the kinds share are target.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <shootdown/handshake.h>

#include "../core/error.h"
#include "../hw/event.h"
#include "../hw/machine_state.h"
#include "../mm/mm.h"
#include "handshake.h"

/* The caller's clock: modelled under a profile, the host's otherwise. */
static uint64_t clock_of(struct sd_cpu *c)
{
	return c->m->model.on ? sd_cpu_clock_ns(c) : sd_hs_host_ns();
}

static bool is_membarrier(unsigned kind)
{
	return kind == SD_HANDSHAKE_MEMBARRIER || kind == SD_HANDSHAKE_MEMBARRIER_RSEQ;
}

static int check_config(const struct sd_machine *m, const struct sd_handshake_config *cfg)
{
	if (cfg->size != sizeof(*cfg))
		return sd_fail(-EINVAL, "sd_handshake_create: config size %zu unknown (expected "
			       "%zu): start from SD_HANDSHAKE_CONFIG_INIT", cfg->size, sizeof(*cfg));
	if (cfg->kind >= SD_HANDSHAKE_KIND_NR)
		return sd_fail(-EINVAL, "sd_handshake_create: kind %u unknown", cfg->kind);
	if (cfg->refuse_per_million > 1000000)
		return sd_fail(-EINVAL, "sd_handshake_create: refuse_per_million %u above a million",
			       cfg->refuse_per_million);
	if (cfg->helper_va & (SD_PAGE_SIZE - 1))
		return sd_fail(-EINVAL, "sd_handshake_create: helper_va %#llx not page aligned",
			       (unsigned long long)cfg->helper_va);
	if (cfg->flags & ~SD_HANDSHAKE_FLAG_CPU)
		return sd_fail(-EINVAL, "sd_handshake_create: unknown flags %#x",
			       cfg->flags & ~SD_HANDSHAKE_FLAG_CPU);
	if (cfg->flags && !is_membarrier(cfg->kind))
		return sd_fail(-EINVAL, "sd_handshake_create: SD_HANDSHAKE_FLAG_CPU is a membarrier "
			       "flag, not for a %s handshake", sd_hs_kind_name(cfg->kind));
	if ((cfg->flags & SD_HANDSHAKE_FLAG_CPU) && cfg->cpu_id >= m->nr_cpus)
		return sd_fail(-EINVAL, "sd_handshake_create: cpu_id %u out of range (machine has %u)",
			       cfg->cpu_id, m->nr_cpus);
	return 0;
}

int sd_handshake_create(struct sd_mm *mm, const struct sd_handshake_config *cfg,
			struct sd_handshake **out)
{
	struct sd_handshake *h;
	int err;

	if (!mm || !cfg || !out)
		return sd_fail(-EINVAL, "sd_handshake_create: NULL argument");
	err = check_config(mm->m, cfg);
	if (err)
		return err;
	h = calloc(1, sizeof(*h));
	if (h) {
		h->cpus = aligned_alloc(SD_CACHELINE, sd_round_up(mm->m->nr_cpus * sizeof(*h->cpus),
								   SD_CACHELINE));
		/* Made here, not at each handshake: no allocation on its path. */
		h->target_ids = malloc(mm->m->nr_cpus * sizeof(*h->target_ids));
	}
	if (!h || !h->cpus || !h->target_ids || sd_lock_create(mm->m, "handshake", &h->lock)) {
		if (h) {
			free(h->cpus);
			free(h->target_ids);
		}
		free(h);
		return sd_fail(-ENOMEM, "sd_handshake_create: no memory for %u CPUs",
			       mm->m->nr_cpus);
	}
	memset(h->cpus, 0, mm->m->nr_cpus * sizeof(*h->cpus));
	h->mm = mm;
	h->m = mm->m;
	h->cfg = *cfg;
	if (!h->cfg.resend_ns)
		h->cfg.resend_ns = 5000;        /* preemptM()'s retry: yieldDelay / 2 */
	if (!h->cfg.helper_va)
		h->cfg.helper_va = SD_HANDSHAKE_HELPER_VA;
	for (unsigned i = 0; i < h->m->nr_cpus; i++) {
		struct sd_hs_cpu *hc = &h->cpus[i];

		atomic_init(&hc->armed, 0);
		atomic_init(&hc->acked, 0);
		atomic_init(&hc->state, SD_HS_RUNNING);
		atomic_init(&hc->flow, 0);
		atomic_init(&hc->refusals, 0);
		atomic_init(&hc->rseq_aborted, 0);
		hc->rng = cfg->seed ^ (0x9e3779b97f4a7c15ull * (i + 1));
		sd_model_line_init(&hc->word);
		sd_model_line_init(&hc->ack);
	}
	atomic_init(&h->running, 0);
	*out = h;
	return 0;
}

int sd_handshake_destroy(struct sd_handshake *h)
{
	if (!h)
		return sd_fail(-EINVAL, "sd_handshake_destroy: NULL handshake");
	if (atomic_load(&h->running))
		return sd_fail(-EBUSY, "sd_handshake_destroy: a %s handshake is running on it",
			       sd_hs_kind_name(h->cfg.kind));
	sd_lock_destroy(h->lock);
	free(h->cpus);
	free(h->target_ids);
	free(h);
	return 0;
}

/* ---- the targets and the check ---- */

/* Every CPU running a thread of the mm now (its loaded mm, not lazily),
 * the caller excepted (membarrier's MEMBARRIER_CMD_FLAG_CPU: only cpu_id),
 * with its barrier count, its open section and the request's arrow. */
static unsigned pick_targets(struct sd_handshake *h, struct sd_cpu *cpu)
{
	unsigned n = 0;

	for (unsigned t = 0; t < h->m->nr_cpus; t++) {
		struct sd_cpu *c = h->m->cpus[t];
		struct sd_hs_cpu *hc = &h->cpus[t];

		hc->target = t != cpu->id &&
			     (!(h->cfg.flags & SD_HANDSHAKE_FLAG_CPU) || t == h->cfg.cpu_id) &&
			     atomic_load_explicit(&c->mm, memory_order_acquire) == h->mm &&
			     !atomic_load_explicit(&c->lazy, memory_order_relaxed);
		hc->in_flight = hc->on_behalf = hc->seen_done = hc->left = false;
		if (!hc->target)
			continue;
		hc->barriers_at_request = sd_cpu_barriers(c);
		hc->refusals_at_request = atomic_load_explicit(&hc->refusals, memory_order_acquire);
		hc->rseq_open_at_request = sd_hs_rseq_open(c);
		atomic_store_explicit(&hc->flow, sd_event_flow_out(cpu, SD_EV_HANDSHAKE_REQUEST, t),
				      memory_order_relaxed);
		n++;
	}
	return n;
}

/* What the runtime relies on, checked apart from the kind's mechanism. */
static void check_targets(struct sd_handshake *h, struct sd_cpu *cpu,
			  struct sd_handshake_result *res)
{
	bool barrier_kind = is_membarrier(h->cfg.kind) || h->cfg.kind == SD_HANDSHAKE_MPROTECT;
	bool rseq_kind = h->cfg.kind == SD_HANDSHAKE_MEMBARRIER_RSEQ;

	res->first_unreached = -1;
	for (unsigned t = 0; t < h->m->nr_cpus; t++) {
		struct sd_hs_cpu *hc = &h->cpus[t];
		bool ran, barrier;

		if (!hc->target)
			continue;
		ran = !hc->on_behalf &&
		      atomic_load_explicit(&hc->acked, memory_order_acquire) >= h->seq;
		barrier = sd_cpu_barriers(h->m->cpus[t]) > hc->barriers_at_request;
		res->refusals += atomic_load_explicit(&hc->refusals, memory_order_acquire) -
				 hc->refusals_at_request;
		res->ran += ran;
		res->on_behalf += hc->on_behalf;
		res->barriers += barrier;
		res->left += !ran && !hc->on_behalf && hc->left;
		res->aborted += atomic_load_explicit(&hc->rseq_aborted, memory_order_acquire) == h->seq;
		/* The fence's promise: the section open at the request is not
		 * still open, unaborted, able to commit after it. */
		if (rseq_kind && hc->rseq_open_at_request &&
		    sd_hs_rseq_open(h->m->cpus[t]) == hc->rseq_open_at_request)
			barrier = ran = false;
		if (ran || hc->on_behalf || hc->left || (barrier_kind && barrier))
			continue;
		res->unreached++;
		if (res->first_unreached < 0)
			res->first_unreached = (int)t;
		sd_event(cpu, SD_EV_HANDSHAKE_UNREACHED, t, 0);
	}
}

static int check_run(struct sd_handshake *h, struct sd_cpu *cpu, struct sd_handshake_result *res)
{
	if (sd_cpu_check_self(cpu))
		return sd_fail(-EPERM, "sd_handshake_run: " SD_NOT_ATTACHED);
	if (!h || !res)
		return sd_fail(-EINVAL, "sd_handshake_run: NULL handshake or result");
	if (h->m != cpu->m)
		return sd_fail(-EINVAL, "sd_handshake_run: the handshake is of another machine");
	if (cpu->irq_depth)
		return sd_fail(-EDEADLK, "sd_handshake_run: interrupts are off on CPU %u", cpu->id);
	return 0;
}

static int deliver(struct sd_handshake *h, struct sd_cpu *cpu, struct sd_handshake_result *res)
{
	switch (h->cfg.kind) {
	case SD_HANDSHAKE_MEMBARRIER:
	case SD_HANDSHAKE_MEMBARRIER_RSEQ:
		return sd_hs_membarrier(h, cpu);
	case SD_HANDSHAKE_SIGNAL:
		return sd_hs_signal(h, cpu, res);
	case SD_HANDSHAKE_POLL:
		return sd_hs_poll_word(h, cpu);
	default:
		return sd_hs_mprotect(h, cpu);
	}
}

int sd_handshake_run(struct sd_handshake *h, struct sd_cpu *cpu, sd_smp_call_fn fn, void *arg,
		     struct sd_handshake_result *res)
{
	uint64_t start;
	int err = check_run(h, cpu, res);

	if (err)
		return err;
	memset(res, 0, sizeof(*res));
	sd_lock_acquire(cpu, h->lock);
	atomic_store(&h->running, 1);
	h->seq++;
	h->fn = fn;
	h->arg = arg;
	start = clock_of(cpu);
	sd_event(cpu, SD_EV_HANDSHAKE_BEGIN, h->cfg.kind, 0);
	/* The request, and all the caller stored before it, ordered before
	 * the targets' mm and barrier counts are read: pairs with the
	 * barrier each target passes (sd_cpu_passed_barrier(): after its mm
	 * store in switch_mm, in its interrupt, after a function run). */
	sd_smp_mb();
	res->targets = pick_targets(h, cpu);
	err = deliver(h, cpu, res);
	if (!err) {
		check_targets(h, cpu, res);
		res->ns = clock_of(cpu) - start;
	}
	sd_event(cpu, SD_EV_HANDSHAKE_END, h->cfg.kind, 0);
	atomic_store(&h->running, 0);
	sd_lock_release(cpu, h->lock);
	return err;
}
