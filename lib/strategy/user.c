/* SPDX-License-Identifier: MIT */
/*
 * User strategies (include/shootdown/strategy.h): the adapter that turns
 * the user's callbacks into a struct sd_strategy_ops (the registry copies
 * sd_user_ops per registration), and the building blocks they call.
 *
 * A user strategy stands on `broadcast`'s machinery for what it does not
 * decide: the arm64 ASID allocator (so invariant 3 holds whatever the user
 * writes) and the TLBI building blocks. On top, the adapter keeps an
 * mm_cpumask and an active count, with the two full barriers of the
 * kernel's switch_mm/flush pairing (the store-buffering, or Dekker,
 * pattern): the switcher sets its bit, then fences, then may fill its
 * TLB; the flusher's page-table change is followed by a fence before the
 * user's flush() reads the mask. Either the flusher sees the bit, or the
 * switcher's walk sees the new PTE.
 */
#include <errno.h>
#include <urcu/compiler.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shootdown/strategy.h>

#include "../core/compiler.h"
#include "../core/cpumask.h"
#include "../core/error.h"
#include "../hw/machine_state.h"
#include "../mm/mm.h"
#include "broadcast.h"
#include "builtin.h"

/*
 * Built on `broadcast`: the machine and per-mm states embed broadcast's,
 * and m->strategy and mm->strategy point to those members, so broadcast's
 * functions read them as their own (see mm/flush_ops.h).
 */
struct user_machine {
	struct sd_broadcast b;
	const struct sd_strategy *s;   /* the registry's copy of the user's */
};

struct user_mm {
	struct sd_broadcast_mm base;
	sd_cacheline_aligned SD_ATOMIC(int) nr_active;
	struct sd_cpumask cpumask;
	/* CPUs that may still cache translations some flush did not reach:
	 * TLB entries are ASID-tagged and outlive a switch away, so a CPU
	 * whose bit was clear when a flush read the mask must flush at its
	 * next switch-in (as `local`'s stale mask, and x86's tlb_gen check). */
	struct sd_cpumask stale;
};

static struct user_machine *user_of(void *priv)
{
	return caa_container_of(priv, struct user_machine, b);
}

static struct user_mm *user_mm_of(void *mm_priv)
{
	return caa_container_of(mm_priv, struct user_mm, base);
}

/* ---- the adapter ---- */

/*
 * What the user's machine_init() said of its refusal (sd_strategy_error()),
 * on the creating thread: machine_init() runs on it, so a thread-local
 * carries the message from the call to the refusal without a lock.
 */
static _Thread_local char init_message[256];
static _Thread_local bool init_said;

int sd_strategy_error(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(init_message, sizeof(init_message), fmt ? fmt : "(no message)", ap);
	va_end(ap);
	init_said = true;
	return sd_fail(err, "%s", init_message);
}

/* The options back as the user wrote them, for the user's machine_init(). */
static void join_options(const struct sd_opt *opts, unsigned nr_opts, char *buf)
{
	buf[0] = '\0';
	for (unsigned i = 0; i < nr_opts; i++) {
		strcat(buf, i ? "," : "");
		strcat(buf, opts[i].key);
		strcat(buf, "=");
		strcat(buf, opts[i].value);
	}
}

/* The registry holds the strategy for this machine from the look-up on
 * (sd_strategy_lookup()), so the user's copy lives until machine_fini. */
static int user_machine_init(struct sd_machine *m, const struct sd_opt *opts,
			     unsigned nr_opts, void **priv)
{
	const struct sd_strategy *s = m->ops->user;
	struct user_machine *um;
	char options[SD_OPTS_MAX * 66];
	int err;

	um = aligned_alloc(SD_CACHELINE, sd_round_up(sizeof(*um), SD_CACHELINE));
	if (!um)
		return -ENOMEM;
	err = sd_broadcast_machine_init(m, &um->b);
	if (err) {
		free(um);
		return err;
	}
	um->s = s;
	join_options(opts, nr_opts, options);
	if (s->machine_init) {
		init_said = false;
		err = s->machine_init(m, options, s->arg);
		if (err && init_said)
			sd_fail(err, "strategy '%s': %s", s->name, init_message);
		else if (err)
			sd_fail(err, "strategy '%s': machine_init refused options '%s'",
				s->name, options);
		init_said = false;
	} else if (nr_opts) {
		err = sd_opt_unknown(s->name, &opts[0]);
	}
	if (err) {
		sd_arm64_asid_fini(&um->b.asid);
		free(um);
		return err;
	}
	*priv = &um->b;
	return 0;
}

/* What the adapter allocated; the user's own machine_init state is the
 * user's to count. */
static size_t user_state_bytes(const struct sd_machine *m, const void *priv)
{
	const struct user_machine *um = user_of((void *)priv);

	(void)m;
	return sd_round_up(sizeof(*um), SD_CACHELINE) + sd_arm64_asid_bytes(&um->b.asid);
}

static void user_machine_fini(struct sd_machine *m, void *priv)
{
	struct user_machine *um = user_of(priv);

	if (um->s->machine_fini)
		um->s->machine_fini(m, um->s->arg);
	sd_arm64_asid_fini(&um->b.asid);
	free(um);
}

static int user_mm_init(struct sd_machine *m, struct sd_mm *mm, void **mm_priv)
{
	struct user_mm *u = aligned_alloc(SD_CACHELINE, sd_round_up(sizeof(*u), SD_CACHELINE));

	(void)mm;
	if (!u)
		return -ENOMEM;
	if (sd_cpumask_init(&u->cpumask, m->nr_cpus)) {
		free(u);
		return -ENOMEM;
	}
	if (sd_cpumask_init(&u->stale, m->nr_cpus)) {
		sd_cpumask_destroy(&u->cpumask);
		free(u);
		return -ENOMEM;
	}
	sd_broadcast_mm_ctx_init(&u->base);
	atomic_init(&u->nr_active, 0);
	*mm_priv = &u->base;
	return 0;
}

static void user_mm_fini(struct sd_machine *m, struct sd_mm *mm, void *mm_priv)
{
	struct user_mm *u = user_mm_of(mm_priv);

	(void)m;
	(void)mm;
	sd_cpumask_destroy(&u->cpumask);
	sd_cpumask_destroy(&u->stale);
	free(u);
}

/* Before the user's flush: every CPU is stale for @mm (skipping the shared
 * write when all already are), then the fence that orders the page-table
 * change and the stale marks before flush() reads the cpumask. Pairs with
 * the fence after the bit is set in user_switch(): either flush() sees the
 * switcher's bit, or the switcher sees its stale mark and flushes itself. */
static void user_prepare_flush(struct sd_mm *mm)
{
	struct user_mm *u = user_mm_of(mm->strategy);

	if (sd_cpumask_weight(&u->stale) != u->stale.nbits)
		sd_cpumask_setall(&u->stale);
	sd_smp_mb();
}

static void user_flush_range(struct sd_cpu *cpu, const struct sd_flush_req *req)
{
	const struct sd_strategy *us = cpu->m->ops->user;

	user_prepare_flush(req->mm);
	us->flush(cpu, req->mm, req->vpn << SD_PAGE_SHIFT, req->nr << SD_PAGE_SHIFT,
		   req->freed_tables ? SD_FLUSH_FREED_TABLES : 0, us->arg);
}

static void user_flush_mm(struct sd_cpu *cpu, struct sd_mm *mm)
{
	const struct sd_strategy *us = cpu->m->ops->user;

	user_prepare_flush(mm);
	us->flush(cpu, mm, 0, 0, SD_FLUSH_FREED_TABLES, us->arg);
}

/* switch_mm(), interrupts off. */
static void user_switch(struct sd_cpu *cpu, struct sd_mm *prev, struct sd_mm *next)
{
	const struct sd_strategy *us = cpu->m->ops->user;

	if (prev == next) {
		sd_broadcast_switch(cpu, prev, next);
		return;
	}
	if (prev) {
		struct user_mm *u = user_mm_of(prev->strategy);
		if (us->switch_out)
			us->switch_out(cpu, prev, us->arg);
		if (!(us->flags & SD_STRATEGY_LAZY_CPUMASK))
			sd_cpumask_clear(&u->cpumask, cpu->id);
		atomic_fetch_sub(&u->nr_active, 1);
	}
	bool stale = false;
	if (next) {
		struct user_mm *u = user_mm_of(next->strategy);
		atomic_fetch_add(&u->nr_active, 1);
		if (!sd_cpumask_test(&u->cpumask, cpu->id))
			sd_cpumask_set(&u->cpumask, cpu->id);
		/* The bit (and count) before reading our stale mark and before
		 * any fill of @next's translations; pairs with the fence in
		 * user_prepare_flush(). */
		sd_smp_mb();
		stale = sd_cpumask_test(&u->stale, cpu->id);
		if (stale)
			sd_cpumask_clear(&u->stale, cpu->id);
	}
	sd_broadcast_switch(cpu, prev, next);
	/* Entries cached before we left may have missed a flush: drop all of
	 * @next's (its ASID is set now), before any access can use them. */
	if (stale)
		sd_broadcast_flush(cpu, next, 0, 0, true, true);
	if (next && us->switch_in)
		us->switch_in(cpu, next, us->arg);
}

const struct sd_strategy_ops sd_user_ops = {
	.machine_init = user_machine_init,
	.machine_fini = user_machine_fini,
	.mm_init = user_mm_init,
	.mm_fini = user_mm_fini,
	.flush_range = user_flush_range,
	.flush_mm = user_flush_mm,
	.switch_mm = user_switch,
	.state_bytes = user_state_bytes,
};

/* Whether @m runs a user strategy: the building blocks work only there. */
static bool user_strategy(const struct sd_machine *m)
{
	return m && m->ops && m->ops->user;
}

/* ---- building blocks ---- */

static int check_block(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t va, uint64_t len,
		       const char *fn)
{
	if (!cpu || !mm || mm->m != cpu->m || (va | len) & (SD_PAGE_SIZE - 1))
		return sd_fail(-EINVAL, "%s: NULL, foreign mm, or a range not page aligned", fn);
	if (sd_cpu_check_self(cpu))
		return sd_fail(-EPERM, "%s: caller is not CPU %u's thread", fn, cpu->id);
	if (!user_strategy(cpu->m))
		return sd_fail(-EOPNOTSUPP, "%s: the machine runs '%s', not a user strategy", fn,
			       cpu->m->ops->name);
	return 0;
}

int sd_tlb_invalidate_local(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t va, uint64_t len)
{
	int err = check_block(cpu, mm, va, len, "sd_tlb_invalidate_local");

	if (!err)
		sd_broadcast_flush(cpu, mm, va >> SD_PAGE_SHIFT, len >> SD_PAGE_SHIFT, !len, true);
	return err;
}

int sd_tlb_invalidate_broadcast(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t va, uint64_t len)
{
	int err = check_block(cpu, mm, va, len, "sd_tlb_invalidate_broadcast");

	/* The what-if a profile without TLBI broadcasts allows only when
	 * asked (machine/create.c, check_mechanisms()): a strategy that declared no
	 * mechanisms is refused here instead of at creation. */
	if (!err && cpu->m->model.on && !(cpu->m->model.mechanisms & SD_MECH_TLBI_BROADCAST) &&
	    !(cpu->m->cfg.flags & SD_MACHINE_ANY_MECHANISM))
		err = sd_fail(-EOPNOTSUPP, "sd_tlb_invalidate_broadcast: profile '%s' has no "
			      "tlbi_broadcast (SD_MACHINE_ANY_MECHANISM runs it anyway, as a what-if)",
			      cpu->m->model.name);
	if (!err)
		sd_broadcast_flush(cpu, mm, va >> SD_PAGE_SHIFT, len >> SD_PAGE_SHIFT, !len, false);
	return err;
}

static struct user_mm *checked_user_mm(const struct sd_mm *mm, unsigned cpu, int *err,
				       const char *fn)
{
	if (!mm || cpu >= mm->m->nr_cpus) {
		*err = sd_fail(-EINVAL, "%s: NULL mm or CPU %u out of range", fn, cpu);
		return NULL;
	}
	if (!user_strategy(mm->m)) {
		*err = sd_fail(-EOPNOTSUPP, "%s: the machine runs '%s', not a user strategy", fn,
			       mm->m->ops->name);
		return NULL;
	}
	*err = 0;
	return user_mm_of(mm->strategy);
}

int sd_mm_cpumask_test(const struct sd_mm *mm, unsigned cpu)
{
	int err;
	struct user_mm *u = checked_user_mm(mm, cpu, &err, "sd_mm_cpumask_test");

	return u ? sd_cpumask_test(&u->cpumask, cpu) : err;
}

int sd_mm_cpumask_set(struct sd_mm *mm, unsigned cpu)
{
	int err;
	struct user_mm *u = checked_user_mm(mm, cpu, &err, "sd_mm_cpumask_set");

	if (u)
		sd_cpumask_set(&u->cpumask, cpu);
	return err;
}

int sd_mm_cpumask_clear(struct sd_mm *mm, unsigned cpu)
{
	int err;
	struct user_mm *u = checked_user_mm(mm, cpu, &err, "sd_mm_cpumask_clear");

	if (u)
		sd_cpumask_clear(&u->cpumask, cpu);
	return err;
}

unsigned sd_mm_cpumask_next(const struct sd_mm *mm, unsigned from)
{
	int err;
	struct user_mm *u;

	/* UINT_MAX, not 0: "for (c = next(mm, 0); c < nr; c = next(mm, c + 1))"
	 * must end (error.h's rule for getters). */
	if (!mm) {
		sd_fail(-EINVAL, "sd_mm_cpumask_next: NULL mm");
		return UINT_MAX;
	}
	if (from >= mm->m->nr_cpus || !(u = checked_user_mm(mm, from, &err, "sd_mm_cpumask_next")))
		return mm->m->nr_cpus;
	for (unsigned c = from; c < mm->m->nr_cpus; c++)
		if (sd_cpumask_test(&u->cpumask, c))
			return c;
	return mm->m->nr_cpus;
}

int sd_mm_active_cpus(const struct sd_mm *mm)
{
	int err;
	struct user_mm *u = checked_user_mm(mm, 0, &err, "sd_mm_active_cpus");

	return u ? atomic_load(&u->nr_active) : err;
}
