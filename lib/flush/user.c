/* SPDX-License-Identifier: MIT */
/*
 * User strategies (include/shootdown/strategy.h): a registry of callbacks
 * and the adapter that turns them into a struct sd_strategy_ops.
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
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shootdown/strategy.h>

#include "../core/compiler.h"
#include "../core/cpumask.h"
#include "../core/error.h"
#include "../machine/machine.h"
#include "../mm/mm.h"
#include "broadcast.h"
#include "strategy.h"
#include "user.h"

struct user_entry {
	struct sd_strategy_ops ops;    /* first: the machine's m->ops points here */
	struct sd_strategy s;          /* the user's copy */
	char name[32];
	char summary[96];
	bool registered;
	unsigned machines;             /* machines using it; guarded by registry_lock */
};

struct user_machine {
	struct sd_broadcast b;         /* first: broadcast reads m->strategy as this */
	struct user_entry *e;
};

struct user_mm {
	struct sd_broadcast_mm base;   /* first: broadcast reads mm->strategy as this */
	sd_cacheline_aligned SD_ATOMIC(int) nr_active;
	struct sd_cpumask cpumask;
	/* CPUs that may still cache translations some flush did not reach:
	 * TLB entries are ASID-tagged and outlive a switch away, so a CPU
	 * whose bit was clear when a flush read the mask must flush at its
	 * next switch-in (as `local`'s stale mask, and x86's tlb_gen check). */
	struct sd_cpumask stale;
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct user_entry registry[SD_STRATEGY_MAX_USER];

static struct user_entry *entry_of(const struct sd_machine *m)
{
	return ((struct user_machine *)m->strategy)->e;
}

/* ---- the adapter ---- */

static int user_machine_init(struct sd_machine *m, const struct sd_strategy_opt *opts,
			     unsigned nr_opts, void **priv)
{
	struct user_entry *e = (struct user_entry *)m->ops;
	struct user_machine *um;
	char options[SD_STRATEGY_MAX_OPTS * 66] = "";
	int err;

	pthread_mutex_lock(&registry_lock);
	err = e->registered ? 0 : sd_fail(-ENOENT, "strategy '%s' was unregistered", e->name);
	if (!err)
		e->machines++;          /* sd_strategy_unregister() now says -EBUSY */
	pthread_mutex_unlock(&registry_lock);
	if (err)
		return err;
	um = aligned_alloc(SD_CACHELINE, sd_round_up(sizeof(*um), SD_CACHELINE));
	err = um ? sd_broadcast_machine_init(m, &um->b) : -ENOMEM;
	if (!err) {
		um->e = e;
		*priv = um;
		for (unsigned i = 0; i < nr_opts; i++) {
			strcat(options, i ? "," : "");
			strcat(options, opts[i].key);
			strcat(options, "=");
			strcat(options, opts[i].value);
		}
		if (e->s.machine_init) {
			err = e->s.machine_init(m, options, e->s.arg);
			if (err)
				sd_fail(err, "strategy '%s': machine_init refused options '%s'",
					e->name, options);
		} else if (nr_opts) {
			err = sd_strategy_unknown_opt(e->name, &opts[0]);
		}
		if (err)
			sd_arm64_asid_fini(&um->b.asid);
	}
	if (!err)
		return 0;
	free(um);
	*priv = NULL;
	pthread_mutex_lock(&registry_lock);
	e->machines--;
	pthread_mutex_unlock(&registry_lock);
	return err;
}

/* What the adapter allocated; the user's own machine_init state is the
 * user's to count. */
static size_t user_state_bytes(const struct sd_machine *m, const void *priv)
{
	const struct user_machine *um = priv;

	(void)m;
	return sd_round_up(sizeof(*um), SD_CACHELINE) + sd_arm64_asid_bytes(&um->b.asid);
}

static void user_machine_fini(struct sd_machine *m, void *priv)
{
	struct user_machine *um = priv;
	struct user_entry *e = um->e;

	if (e->s.machine_fini)
		e->s.machine_fini(m, e->s.arg);
	sd_arm64_asid_fini(&um->b.asid);
	free(um);
	pthread_mutex_lock(&registry_lock);
	e->machines--;
	pthread_mutex_unlock(&registry_lock);
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
	atomic_init(&u->base.ctx_id, 0);
	atomic_init(&u->nr_active, 0);
	*mm_priv = u;
	return 0;
}

static void user_mm_fini(struct sd_machine *m, struct sd_mm *mm, void *mm_priv)
{
	struct user_mm *u = mm_priv;

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
	struct user_mm *u = mm->strategy;

	if (sd_cpumask_weight(&u->stale) != u->stale.nbits)
		sd_cpumask_setall(&u->stale);
	sd_smp_mb();
}

static void user_flush_range(struct sd_cpu *cpu, const struct sd_flush_req *req)
{
	struct user_entry *e = entry_of(cpu->m);

	user_prepare_flush(req->mm);
	e->s.flush(cpu, req->mm, req->vpn << SD_PAGE_SHIFT, req->nr << SD_PAGE_SHIFT,
		   req->freed_tables ? SD_FLUSH_FREED_TABLES : 0, e->s.arg);
}

static void user_flush_mm(struct sd_cpu *cpu, struct sd_mm *mm)
{
	struct user_entry *e = entry_of(cpu->m);

	user_prepare_flush(mm);
	e->s.flush(cpu, mm, 0, 0, SD_FLUSH_FREED_TABLES, e->s.arg);
}

/* switch_mm(), interrupts off. */
static void user_switch(struct sd_cpu *cpu, struct sd_mm *prev, struct sd_mm *next)
{
	struct user_entry *e = entry_of(cpu->m);

	if (prev == next) {
		sd_broadcast_switch(cpu, prev, next);
		return;
	}
	if (prev) {
		struct user_mm *u = prev->strategy;
		if (e->s.switch_out)
			e->s.switch_out(cpu, prev, e->s.arg);
		if (!(e->s.flags & SD_STRATEGY_LAZY_CPUMASK))
			sd_cpumask_clear(&u->cpumask, cpu->id);
		atomic_fetch_sub(&u->nr_active, 1);
	}
	bool stale = false;
	if (next) {
		struct user_mm *u = next->strategy;
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
	if (next && e->s.switch_in)
		e->s.switch_in(cpu, next, e->s.arg);
}

/* ---- the registry ---- */

static bool name_ok(const char *name)
{
	size_t n = strlen(name);

	if (!n || n > 31)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
		      name[i] == '_'))
			return false;
	return true;
}

int sd_strategy_register(const struct sd_strategy *s)
{
	struct user_entry *slot = NULL;
	const struct sd_strategy_ops *builtin;
	size_t len;

	if (!s || s->size < offsetof(struct sd_strategy, switch_out) + sizeof(s->switch_out) ||
	    s->size > sizeof(*s))
		return sd_fail(-EINVAL, "sd_strategy_register: NULL or unknown size (start from "
			       "SD_STRATEGY_INIT)");
	if (!s->name || !name_ok(s->name))
		return sd_fail(-EINVAL, "sd_strategy_register: name must be 1..31 of [a-z0-9_]");
	if (!s->flush)
		return sd_fail(-EINVAL, "sd_strategy_register: '%s' has no flush()", s->name);
	if (s->flags & ~(unsigned)SD_STRATEGY_LAZY_CPUMASK)
		return sd_fail(-EINVAL, "sd_strategy_register: unknown flags 0x%x", s->flags);
	if (sd_strategy_builtin(s->name, &builtin, &len))
		return sd_fail(-EEXIST, "sd_strategy_register: '%s' is a built-in strategy", s->name);
	pthread_mutex_lock(&registry_lock);
	for (unsigned i = 0; i < SD_STRATEGY_MAX_USER; i++) {
		if (registry[i].registered && !strcmp(registry[i].name, s->name)) {
			pthread_mutex_unlock(&registry_lock);
			return sd_fail(-EEXIST, "sd_strategy_register: '%s' is registered", s->name);
		}
		if (!slot && !registry[i].registered && !registry[i].machines)
			slot = &registry[i];
	}
	if (!slot) {
		pthread_mutex_unlock(&registry_lock);
		return sd_fail(-ENOSPC, "sd_strategy_register: %d user strategies already",
			       SD_STRATEGY_MAX_USER);
	}
	memset(slot, 0, sizeof(*slot));
	memcpy(&slot->s, s, s->size);
	snprintf(slot->name, sizeof(slot->name), "%s", s->name);
	snprintf(slot->summary, sizeof(slot->summary), "%s", s->summary ? s->summary : "user strategy");
	slot->s.name = slot->name;
	slot->s.summary = slot->summary;
	slot->ops = (struct sd_strategy_ops){
		.name = slot->name,
		.summary = slot->summary,
		.machine_init = user_machine_init,
		.machine_fini = user_machine_fini,
		.mm_init = user_mm_init,
		.mm_fini = user_mm_fini,
		.flush_range = user_flush_range,
		.flush_mm = user_flush_mm,
		.switch_mm = user_switch,
		.state_bytes = user_state_bytes,
	};
	slot->registered = true;
	pthread_mutex_unlock(&registry_lock);
	return 0;
}

int sd_strategy_unregister(const char *name)
{
	int err = -ENOENT;

	if (!name)
		return sd_fail(-EINVAL, "sd_strategy_unregister: NULL name");
	pthread_mutex_lock(&registry_lock);
	for (unsigned i = 0; i < SD_STRATEGY_MAX_USER; i++) {
		struct user_entry *e = &registry[i];
		if (!e->registered || strcmp(e->name, name))
			continue;
		if (e->machines) {
			err = sd_fail(-EBUSY, "sd_strategy_unregister: %u machine(s) use '%s'",
				      e->machines, name);
		} else {
			e->registered = false;
			err = 0;
		}
		break;
	}
	pthread_mutex_unlock(&registry_lock);
	/* Recorded only on failure: a success leaves sd_last_error() alone. */
	if (err == -ENOENT)
		sd_fail(err, "sd_strategy_unregister: no user strategy '%s'", name);
	return err;
}

const struct sd_strategy_ops *sd_strategy_user_lookup(const char *name, size_t len)
{
	const struct sd_strategy_ops *ops = NULL;

	pthread_mutex_lock(&registry_lock);
	for (unsigned i = 0; i < SD_STRATEGY_MAX_USER && !ops; i++)
		if (registry[i].registered && strlen(registry[i].name) == len &&
		    !strncmp(registry[i].name, name, len))
			ops = &registry[i].ops;
	pthread_mutex_unlock(&registry_lock);
	return ops;
}

bool sd_user_strategy(const struct sd_machine *m)
{
	return m && m->ops && m->ops->machine_init == user_machine_init;
}

/* ---- building blocks ---- */

static int check_block(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t va, uint64_t len,
		       const char *fn)
{
	if (!cpu || !mm || mm->m != cpu->m || (va | len) & (SD_PAGE_SIZE - 1))
		return sd_fail(-EINVAL, "%s: NULL, foreign mm, or a range not page aligned", fn);
	if (sd_cpu_check_self(cpu))
		return sd_fail(-EPERM, "%s: caller is not CPU %u's thread", fn, cpu->id);
	if (!sd_user_strategy(cpu->m))
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

	if (!err)
		sd_broadcast_flush(cpu, mm, va >> SD_PAGE_SHIFT, len >> SD_PAGE_SHIFT, !len, false);
	return err;
}

static struct user_mm *user_mm_of(const struct sd_mm *mm, unsigned cpu, int *err, const char *fn)
{
	if (!mm || cpu >= mm->m->nr_cpus) {
		*err = sd_fail(-EINVAL, "%s: NULL mm or CPU %u out of range", fn, cpu);
		return NULL;
	}
	if (!sd_user_strategy(mm->m)) {
		*err = sd_fail(-EOPNOTSUPP, "%s: the machine runs '%s', not a user strategy", fn,
			       mm->m->ops->name);
		return NULL;
	}
	*err = 0;
	return mm->strategy;
}

int sd_mm_cpumask_test(const struct sd_mm *mm, unsigned cpu)
{
	int err;
	struct user_mm *u = user_mm_of(mm, cpu, &err, "sd_mm_cpumask_test");

	return u ? sd_cpumask_test(&u->cpumask, cpu) : err;
}

int sd_mm_cpumask_set(struct sd_mm *mm, unsigned cpu)
{
	int err;
	struct user_mm *u = user_mm_of(mm, cpu, &err, "sd_mm_cpumask_set");

	if (u)
		sd_cpumask_set(&u->cpumask, cpu);
	return err;
}

int sd_mm_cpumask_clear(struct sd_mm *mm, unsigned cpu)
{
	int err;
	struct user_mm *u = user_mm_of(mm, cpu, &err, "sd_mm_cpumask_clear");

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
	if (from >= mm->m->nr_cpus || !(u = user_mm_of(mm, from, &err, "sd_mm_cpumask_next")))
		return mm->m->nr_cpus;
	for (unsigned c = from; c < mm->m->nr_cpus; c++)
		if (sd_cpumask_test(&u->cpumask, c))
			return c;
	return mm->m->nr_cpus;
}

int sd_mm_active_cpus(const struct sd_mm *mm)
{
	int err;
	struct user_mm *u = user_mm_of(mm, 0, &err, "sd_mm_active_cpus");

	return u ? atomic_load(&u->nr_active) : err;
}
