/* SPDX-License-Identifier: MIT */
/*
 * The program's own IPIs beyond sd_smp_call_single(): a request posted now
 * and waited for later (smp_call_function_single_async() with its
 * csd_lock_wait()), and one function run on a list of CPUs
 * (on_each_cpu_mask() through smp_call_function_many_cond()). Both are the
 * endpoint's post and wait (smp.c), so a user strategy's IPIs cost, count
 * and trace exactly as the built-in `ipi` strategy's do.
 *
 * What the endpoint cannot survive is a request pushed twice or freed while
 * queued (its lfstack node is in the target's queue until the handler pops
 * it). So each posted public request is on its sender's list until it is
 * waited for: posting it again is refused, detach is refused while the
 * list is not empty, and a thread that exits attached waits for the list
 * first (sd_smp_async_settle()). The list is the owner's alone: no atomics.
 */
#include <errno.h>
#include <stdalign.h>
#include <stdlib.h>

#include "../core/error.h"
#include "event.h"
#include "machine_state.h"
#include "smp.h"

/* What struct sd_smp_call holds. */
struct sd_smp_async {
	struct sd_smp_call_req req;
	uint64_t magic;                /* SD_SMP_ASYNC_POSTED while posted */
	struct sd_cpu *from;           /* the sender: the only one that may wait */
	struct sd_smp_async *next;     /* the sender's list of posted requests */
};

/* A posted request says so with this value; anything else is free. The
 * caller's memory is not zeroed for us, so the value is one no stray
 * stack word is likely to hold. */
#define SD_SMP_ASYNC_POSTED UINT64_C(0x5344736d70617379)

_Static_assert(sizeof(struct sd_smp_async) <= sizeof(struct sd_smp_call),
	       "struct sd_smp_call must hold the request");
_Static_assert(alignof(struct sd_smp_async) <= alignof(struct sd_smp_call),
	       "struct sd_smp_call must be aligned for the request");

static struct sd_smp_async *async_of(struct sd_smp_call *call)
{
	return (struct sd_smp_async *)(void *)call;
}

static void async_unlink(struct sd_cpu *c, struct sd_smp_async *a)
{
	struct sd_smp_async **p = &c->async_posted;

	while (*p && *p != a)
		p = &(*p)->next;
	if (*p) {
		*p = a->next;
		c->nr_async_posted--;
	}
	a->magic = 0;
}

int sd_smp_call_async(struct sd_cpu *from, unsigned target, sd_smp_call_fn fn, void *arg,
		      struct sd_smp_call *call)
{
	struct sd_smp_async *a = async_of(call);

	if (sd_cpu_check_self(from))
		return sd_fail(-EPERM, "sd_smp_call_async: " SD_NOT_ATTACHED);
	if (!fn || !call || target >= from->m->nr_cpus || target == from->id)
		return sd_fail(-EINVAL, "sd_smp_call_async: bad target %u (CPU %u sends), or NULL "
			       "function or request", target, from->id);
	if (a->magic == SD_SMP_ASYNC_POSTED)
		return sd_fail(-EBUSY, "sd_smp_call_async: the request is still posted (to CPU %u); "
			       "sd_smp_call_async_wait() it first", a->req.target->id);
	a->req.fn = fn;
	a->req.arg = arg;
	a->req.async = false;          /* the sender waits for its ack */
	if (!sd_smp_call_post(from, from->m->cpus[target], &a->req))
		return sd_fail(-EINVAL, "sd_smp_call_async: CPU %u has no thread", target);
	a->magic = SD_SMP_ASYNC_POSTED;
	a->from = from;
	a->next = from->async_posted;
	from->async_posted = a;
	from->nr_async_posted++;
	return 0;
}

int sd_smp_call_async_wait(struct sd_cpu *from, struct sd_smp_call *call)
{
	struct sd_smp_async *a = async_of(call);
	int err;

	if (sd_cpu_check_self(from))
		return sd_fail(-EPERM, "sd_smp_call_async_wait: " SD_NOT_ATTACHED);
	if (!call || a->magic != SD_SMP_ASYNC_POSTED)
		return sd_fail(-EINVAL, "sd_smp_call_async_wait: NULL, or a request not posted "
			       "(never, or already waited for)");
	if (a->from != from)
		return sd_fail(-EXDEV, "sd_smp_call_async_wait: CPU %u posted it, not CPU %u",
			       a->from->id, from->id);
	if (from->irq_depth)
		return sd_fail(-EDEADLK, "sd_smp_call_async_wait: interrupts are off on CPU %u",
			       from->id);
	err = sd_smp_call_wait(from, &a->req);
	async_unlink(from, a);
	return err;
}

void sd_smp_async_settle(struct sd_cpu *c)
{
	while (c->async_posted) {
		struct sd_smp_async *a = c->async_posted;

		sd_smp_call_wait(c, &a->req);
		async_unlink(c, a);
	}
}

/* sd_smp_call_many()'s per-CPU arrays, made at its first call. */
static int many_arrays(struct sd_cpu *c)
{
	if (c->many_reqs)
		return 0;
	c->many_reqs = calloc(c->m->nr_cpus, sizeof(*c->many_reqs));
	c->many_listed = calloc(c->m->nr_cpus, 1);
	if (!c->many_reqs || !c->many_listed) {
		sd_smp_many_free(c);
		return sd_fail(-ENOMEM, "sd_smp_call_many: no memory for %u requests",
			       c->m->nr_cpus);
	}
	return 0;
}

void sd_smp_many_free(struct sd_cpu *c)
{
	free(c->many_reqs);
	free(c->many_listed);
	c->many_reqs = NULL;
	c->many_listed = NULL;
}

/* Every id in range and listed once; many_listed is left all zero. */
static int check_targets(struct sd_cpu *c, const unsigned *targets, unsigned nr)
{
	int err = 0;
	unsigned i;

	for (i = 0; i < nr && !err; i++) {
		if (targets[i] >= c->m->nr_cpus)
			err = sd_fail(-EINVAL, "sd_smp_call_many: CPU %u out of range (the machine "
				      "has %u)", targets[i], c->m->nr_cpus);
		else if (c->many_listed[targets[i]]++)
			err = sd_fail(-EINVAL, "sd_smp_call_many: CPU %u listed twice", targets[i]);
	}
	while (i--)
		if (targets[i] < c->m->nr_cpus)
			c->many_listed[targets[i]] = 0;
	return err;
}

int sd_smp_call_many(struct sd_cpu *from, const unsigned *targets, unsigned nr_targets,
		     sd_smp_call_fn fn, void *arg, unsigned flags)
{
	bool run_local = false;
	int ran = 0, err;

	if (sd_cpu_check_self(from))
		return sd_fail(-EPERM, "sd_smp_call_many: " SD_NOT_ATTACHED);
	if (!fn || (!targets && nr_targets) || flags)
		return sd_fail(-EINVAL, "sd_smp_call_many: NULL function or targets, or flags %#x "
			       "(none are defined)", flags);
	if (from->irq_depth)
		return sd_fail(-EDEADLK, "sd_smp_call_many: interrupts are off on CPU %u", from->id);
	err = many_arrays(from);
	if (!err)
		err = check_targets(from, targets, nr_targets);
	if (err)
		return err;
	/* Every request out before the first wait: the targets' handlers
	 * run side by side, as smp_call_function_many_cond()'s do. */
	for (unsigned i = 0; i < nr_targets; i++) {
		struct sd_smp_call_req *req = &from->many_reqs[targets[i]];

		if (targets[i] == from->id) {
			run_local = true;
			continue;
		}
		req->fn = fn;
		req->arg = arg;
		req->async = false;
		from->many_listed[targets[i]] = sd_smp_call_post(from, from->m->cpus[targets[i]], req);
	}
	if (run_local) {
		sd_irq_off(from);
		fn(from, arg);
		sd_irq_on(from);
		ran++;
	}
	for (unsigned i = 0; i < nr_targets; i++) {
		if (!from->many_listed[targets[i]])
			continue;
		from->many_listed[targets[i]] = 0;
		if (!sd_smp_call_wait(from, &from->many_reqs[targets[i]]))
			ran++;
	}
	return ran;
}
