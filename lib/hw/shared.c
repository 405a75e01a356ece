/* SPDX-License-Identifier: MIT */
/*
 * The program's own lock and hot line in modelled time (shootdown/shared.h):
 * the public face of the model's struct sd_model_lock and struct
 * sd_model_line (time/resource.h), charged through the funnel as the
 * library's own locks and lines are (SD_EV_LOCK_ACQUIRE with the lock's
 * model as aux, SD_EV_LINE_WRITE / SD_EV_LINE_READ).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <shootdown/shared.h>

#include "../core/backoff.h"
#include "../core/error.h"
#include "event.h"
#include "machine_state.h"
#include "smp.h"

struct sd_lock {
	struct sd_spinlock real;
	/* The holder's id + 1, 0: free. Written by the holder under the real
	 * lock; read without it only to refuse a recursive acquisition (a
	 * value equal to our own id + 1 can only be our own store) and for
	 * reports, so relaxed. */
	SD_ATOMIC(unsigned) holder;
	/* CPUs in lock_wait(): only sd_lock_destroy()'s advisory refusal
	 * reads it (its header asks that no CPU take the lock any more),
	 * and it publishes nothing else, so relaxed. */
	SD_ATOMIC(unsigned) waiters;
	struct sd_machine *m;
	struct sd_model_lock model;     /* written under the real lock only */
	char name[32];
};

struct sd_line {
	struct sd_machine *m;
	struct sd_model_line model;
};

int sd_lock_create(struct sd_machine *m, const char *name, struct sd_lock **out)
{
	struct sd_lock *l;

	if (!m || !out)
		return sd_fail(-EINVAL, "sd_lock_create: NULL argument");
	l = calloc(1, sizeof(*l));
	if (!l)
		return sd_fail(-ENOMEM, "sd_lock_create: no memory");
	sd_spin_init(&l->real);
	atomic_init(&l->holder, 0);
	atomic_init(&l->waiters, 0);
	l->m = m;
	l->model = (struct sd_model_lock)SD_MODEL_LOCK_INIT;
	snprintf(l->name, sizeof(l->name), "%s", name ? name : "lock");
	*out = l;
	return 0;
}

int sd_lock_destroy(struct sd_lock *l)
{
	unsigned holder;

	if (!l)
		return sd_fail(-EINVAL, "sd_lock_destroy: NULL lock");
	holder = atomic_load_explicit(&l->holder, memory_order_relaxed);
	if (holder)
		return sd_fail(-EBUSY, "sd_lock_destroy: CPU %u holds lock '%s'", holder - 1,
			       l->name);
	if (atomic_load_explicit(&l->waiters, memory_order_relaxed))
		return sd_fail(-EBUSY, "sd_lock_destroy: CPUs wait for lock '%s'", l->name);
	free(l);
	return 0;
}

int sd_lock_holder(const struct sd_lock *l)
{
	if (!l)
		return sd_fail(-EINVAL, "sd_lock_holder: NULL lock");
	return (int)atomic_load_explicit(&l->holder, memory_order_relaxed) - 1;
}

static int check_lock(const struct sd_cpu *c, const struct sd_lock *l, const char *fn)
{
	if (sd_cpu_check_self(c))
		return sd_fail(-EPERM, "%s: " SD_NOT_ATTACHED, fn);
	if (!l)
		return sd_fail(-EINVAL, "%s: NULL lock", fn);
	if (l->m != c->m)
		return sd_fail(-EINVAL, "%s: lock '%s' belongs to another machine", fn, l->name);
	return 0;
}

/* Who waits for whom, and what the holder is doing. */
static void lock_report_stuck(struct sd_cpu *c, struct sd_lock *l, uint64_t waited_ns)
{
	unsigned holder = atomic_load_explicit(&l->holder, memory_order_relaxed);
	char state[512] = "no CPU (released meanwhile)";

	if (holder && holder - 1 < c->m->nr_cpus)
		sd_smp_call_describe(c->m->cpus[holder - 1], state, sizeof(state));
	sd_event(c, SD_EV_LOCK_STUCK, holder ? holder - 1 : UINT32_MAX, 0);
	fprintf(stderr, "libshootdown: CPU %u has waited %llu ms for lock '%s'%s, held by %s\n",
		c->id, (unsigned long long)(waited_ns / 1000000), l->name,
		c->irq_depth ? " with interrupts off" : "", state);
}

/*
 * The contended path of spin_lock(). With interrupts on, each turn is an
 * sd_cpu_poll(): IPIs for this CPU run, strict mode hands the machine on
 * until a release (sd_spin_unlock()'s sd_wait_released()), lax mode leaves
 * the running set so the window does not wait for a spinner. With them
 * off, the library's backoff (which in strict mode also hands the machine
 * on). The modelled wait is not this loop: the acquisition's start is
 * found from the lock's holds (charge_lock(), hw/model.c).
 */
static void lock_wait(struct sd_cpu *c, struct sd_lock *l)
{
	const uint64_t report_ns = (uint64_t)c->m->cfg.ipi_timeout_ms * 1000000u;
	const uint64_t start = sd_now_ns();
	uint64_t next_report = start + report_ns;
	struct sd_backoff b = SD_BACKOFF_INIT;

	atomic_fetch_add_explicit(&l->waiters, 1, memory_order_relaxed);
	sd_event(c, SD_EV_LOCK_WAIT_BEGIN, SD_LOCK_USER, 0);
	do {
		if (c->irq_depth)
			sd_backoff_wait(&b);
		else
			(void)sd_cpu_poll(c);   /* attached, interrupts on: cannot fail */
		const uint64_t now = sd_now_ns();
		if (now >= next_report) {
			lock_report_stuck(c, l, now - start);
			next_report = now + report_ns;
		}
	} while (!sd_spin_trylock(&l->real));
	sd_event(c, SD_EV_LOCK_WAIT_END, SD_LOCK_USER, 0);
	atomic_fetch_sub_explicit(&l->waiters, 1, memory_order_relaxed);
}

int sd_lock_acquire(struct sd_cpu *c, struct sd_lock *l)
{
	int err = check_lock(c, l, "sd_lock_acquire");

	if (err)
		return err;
	if (atomic_load_explicit(&l->holder, memory_order_relaxed) == c->id + 1)
		return sd_fail(-EDEADLK, "sd_lock_acquire: CPU %u already holds lock '%s'", c->id,
			       l->name);
	/* The trylock's acquire pairs with the release in sd_lock_release()'s
	 * unlock: the previous holder's writes are seen from here on. */
	if (!sd_spin_trylock(&l->real))
		lock_wait(c, l);
	atomic_store_explicit(&l->holder, c->id + 1, memory_order_relaxed);
	sd_event(c, SD_EV_LOCK_ACQUIRE, SD_LOCK_USER, (uint64_t)(uintptr_t)&l->model);
	return 0;
}

int sd_lock_release(struct sd_cpu *c, struct sd_lock *l)
{
	int err = check_lock(c, l, "sd_lock_release");
	unsigned holder;

	if (err)
		return err;
	holder = atomic_load_explicit(&l->holder, memory_order_relaxed);
	if (holder != c->id + 1) {
		if (!holder)
			return sd_fail(-EPERM, "sd_lock_release: lock '%s' is not held", l->name);
		return sd_fail(-EPERM, "sd_lock_release: lock '%s' is held by CPU %u, not CPU %u",
			       l->name, holder - 1, c->id);
	}
	/* The model's state is written while the real lock still orders it
	 * (sd_event_spin_unlock()'s rule). */
	sd_event(c, SD_EV_LOCK_RELEASE, SD_LOCK_USER, (uint64_t)(uintptr_t)&l->model);
	atomic_store_explicit(&l->holder, 0, memory_order_relaxed);
	/* The unlock's release pairs with the next holder's trylock acquire
	 * (sd_lock_acquire(), lock_wait()): what this CPU wrote under the
	 * lock is seen there. */
	sd_spin_unlock(&l->real);
	sd_event_unlocked(c);
	return 0;
}

int sd_line_create(struct sd_machine *m, struct sd_line **out)
{
	struct sd_line *line;

	if (!m || !out)
		return sd_fail(-EINVAL, "sd_line_create: NULL argument");
	line = calloc(1, sizeof(*line));
	if (!line)
		return sd_fail(-ENOMEM, "sd_line_create: no memory");
	line->m = m;
	sd_model_line_init(&line->model);
	*out = line;
	return 0;
}

int sd_line_destroy(struct sd_line *line)
{
	if (!line)
		return sd_fail(-EINVAL, "sd_line_destroy: NULL line");
	free(line);
	return 0;
}

int sd_line_access(struct sd_cpu *c, struct sd_line *line, int write)
{
	if (sd_cpu_check_self(c))
		return sd_fail(-EPERM, "sd_line_access: " SD_NOT_ATTACHED);
	if (!line)
		return sd_fail(-EINVAL, "sd_line_access: NULL line");
	if (line->m != c->m)
		return sd_fail(-EINVAL, "sd_line_access: the line belongs to another machine");
	sd_event_line(c, &line->model, write != 0);
	return 0;
}
