/* SPDX-License-Identifier: MIT */
/*
 * The strategy registry: the built-in strategies and the user's registered
 * ones (include/shootdown/strategy.h), looked up by the name in a spec.
 * A user strategy runs on the ops template of user.c, copied here with its
 * name and the user's callbacks filled in.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <urcu/compiler.h>

#include <shootdown/model.h>
#include <shootdown/strategy.h>

#include "../core/error.h"
#include "builtin.h"
#include "registry.h"

static const struct sd_strategy_ops *const builtin[] = {
	&sd_broadcast_ops,
	&sd_local_ops,
	&sd_ipi_ops,
	&sd_gbcast_ops,
	&sd_rar_ops,
	&sd_riscv_ops,
	&sd_none_ops,
};

struct user_entry {
	struct sd_strategy_ops ops;    /* what a machine's m->ops points to */
	struct sd_strategy s;          /* the user's copy */
	char name[32];
	char summary[96];
	bool registered;
	unsigned machines;             /* machines holding it; under registry_lock */
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct user_entry registry[SD_STRATEGY_MAX_USER];

static const struct sd_strategy_ops *builtin_lookup(const char *name, size_t len)
{
	for (size_t i = 0; i < sizeof(builtin) / sizeof(builtin[0]); i++)
		if (strlen(builtin[i]->name) == len && !strncmp(builtin[i]->name, name, len))
			return builtin[i];
	return NULL;
}

/* Under registry_lock. */
static struct user_entry *user_lookup_locked(const char *name, size_t len)
{
	for (unsigned i = 0; i < SD_STRATEGY_MAX_USER; i++)
		if (registry[i].registered && strlen(registry[i].name) == len &&
		    !strncmp(registry[i].name, name, len))
			return &registry[i];
	return NULL;
}

/* The user strategy @name, held for a machine; NULL if none. */
static const struct sd_strategy_ops *user_get(const char *name, size_t len)
{
	struct user_entry *e;

	pthread_mutex_lock(&registry_lock);
	e = user_lookup_locked(name, len);
	if (e)
		e->machines++;
	pthread_mutex_unlock(&registry_lock);
	return e ? &e->ops : NULL;
}

void sd_strategy_put(const struct sd_strategy_ops *ops)
{
	struct user_entry *e;

	if (!ops || !ops->user)
		return;
	e = caa_container_of(ops, struct user_entry, ops);
	pthread_mutex_lock(&registry_lock);
	e->machines--;
	pthread_mutex_unlock(&registry_lock);
}

int sd_strategy_lookup(const char *spec, const struct sd_strategy_ops **ops,
		       struct sd_opt *opts, unsigned *nr_opts)
{
	const char *colon = strchr(spec, ':');
	size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
	int err;

	/* Built-ins first: a user strategy can never shadow one. */
	*ops = builtin_lookup(spec, len);
	if (!*ops && !(*ops = user_get(spec, len)))
		return sd_fail(-ENOENT, "unknown strategy '%.*s' (built-in: broadcast, local, ipi, "
			       "gbcast, none; or one registered with sd_strategy_register())",
			       (int)len, spec);
	err = sd_opts_parse((*ops)->name, colon ? colon + 1 : "", opts, nr_opts);
	if (err) {
		sd_strategy_put(*ops);
		*ops = NULL;
	}
	return err;
}

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

/* A slot for a new registration of @name, under registry_lock: one neither
 * registered nor still held by a machine. */
static int free_slot_locked(const char *name, struct user_entry **slot)
{
	*slot = NULL;
	for (unsigned i = 0; i < SD_STRATEGY_MAX_USER; i++) {
		if (registry[i].registered && !strcmp(registry[i].name, name))
			return sd_fail(-EEXIST, "sd_strategy_register: '%s' is registered", name);
		if (!*slot && !registry[i].registered && !registry[i].machines)
			*slot = &registry[i];
	}
	if (!*slot)
		return sd_fail(-ENOSPC, "sd_strategy_register: %d user strategies already",
			       SD_STRATEGY_MAX_USER);
	return 0;
}

static void fill_entry(struct user_entry *e, const struct sd_strategy *s)
{
	memset(e, 0, sizeof(*e));
	memcpy(&e->s, s, s->size);
	snprintf(e->name, sizeof(e->name), "%s", s->name);
	snprintf(e->summary, sizeof(e->summary), "%s", s->summary ? s->summary : "user strategy");
	e->s.name = e->name;
	e->s.summary = e->summary;
	e->ops = sd_user_ops;
	e->ops.name = e->name;
	e->ops.summary = e->summary;
	e->ops.user = &e->s;
	/* Judged by all it declares: a user strategy has no one mechanism
	 * that sets it apart that we could know of. */
	e->ops.mechanisms = e->s.mechanisms;
	e->ops.primary_mechanism = e->s.mechanisms;
}

int sd_strategy_register(const struct sd_strategy *s)
{
	struct user_entry *slot;
	int err;

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
	if (s->size >= offsetof(struct sd_strategy, mechanisms) + sizeof(s->mechanisms) &&
	    (s->mechanisms & ~(unsigned)SD_MECH_ALL))
		return sd_fail(-EINVAL, "sd_strategy_register: unknown mechanisms 0x%x",
			       s->mechanisms & ~(unsigned)SD_MECH_ALL);
	if (builtin_lookup(s->name, strlen(s->name)))
		return sd_fail(-EEXIST, "sd_strategy_register: '%s' is a built-in strategy", s->name);
	pthread_mutex_lock(&registry_lock);
	err = free_slot_locked(s->name, &slot);
	if (!err) {
		fill_entry(slot, s);
		slot->registered = true;
	}
	pthread_mutex_unlock(&registry_lock);
	return err;
}

int sd_strategy_unregister(const char *name)
{
	int err = -ENOENT;
	struct user_entry *e;

	if (!name)
		return sd_fail(-EINVAL, "sd_strategy_unregister: NULL name");
	pthread_mutex_lock(&registry_lock);
	e = user_lookup_locked(name, strlen(name));
	if (e && e->machines) {
		err = sd_fail(-EBUSY, "sd_strategy_unregister: %u machine(s) use '%s'",
			      e->machines, name);
	} else if (e) {
		e->registered = false;
		err = 0;
	}
	pthread_mutex_unlock(&registry_lock);
	/* Recorded only on failure: a success leaves sd_last_error() alone. */
	if (err == -ENOENT)
		sd_fail(err, "sd_strategy_unregister: no user strategy '%s'", name);
	return err;
}
