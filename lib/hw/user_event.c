/* SPDX-License-Identifier: MIT */
/*
 * The program's own events (include/shootdown/events.h): a process-wide
 * table of names, and the calls that count and trace them through the
 * event funnel (event.h, sd_event_user()).
 *
 * The table only grows: a name, once published, is never rewritten, so a
 * reader (a snapshot's printer, the trace writer, any thread) needs no
 * lock: it loads the count with acquire, which pairs with the release that
 * published it after the name was written. Registrations take a mutex
 * among themselves; counting never touches the table beyond that load.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include <shootdown/events.h>
#include <shootdown/stats.h>

#include "../core/error.h"
#include "event.h"
#include "machine_state.h"
#include "user_event.h"

#define NAME_MAX_LEN 31

static pthread_mutex_t register_lock = PTHREAD_MUTEX_INITIALIZER;
static char names[SD_USER_EVENTS_MAX][NAME_MAX_LEN + 1];
static atomic_uint nr_names;

_Static_assert(SD_STAT_USER_15 - SD_STAT_USER_0 + 1 == SD_USER_EVENTS_MAX,
	       "one counter for each user event");

static const char *const builtin_names[] = {
#define SD_STAT_NAME(id, name) name,
	SD_STAT_LIST(SD_STAT_NAME)
#undef SD_STAT_NAME
	/* sd_stats_json()'s and sd_stats_print()'s other fields */
	"nr_cpus", "flush_ns_total", "flush_ns_hist", "flush_ns_mean",
};

const char *sd_user_event_name(unsigned index)
{
	/* Pairs with the release in sd_user_event_register(). */
	return index < atomic_load_explicit(&nr_names, memory_order_acquire) ? names[index] : NULL;
}

static bool name_ok(const char *name)
{
	size_t len = name ? strlen(name) : 0;

	if (!len || len > NAME_MAX_LEN || strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_") != len)
		return false;
	/* user_<digits>: an unregistered counter's name. */
	if (!strncmp(name, "user_", 5) && name[5] && strspn(name + 5, "0123456789") == len - 5)
		return false;
	for (size_t i = 0; i < sizeof(builtin_names) / sizeof(builtin_names[0]); i++)
		if (!strcmp(name, builtin_names[i]))
			return false;
	return true;
}

int sd_user_event_register(const char *name)
{
	unsigned n;
	int id = -ENOSPC;

	if (!name_ok(name))
		return sd_fail(-EINVAL, "sd_user_event_register: '%s' is not a name: 1..%d "
			       "characters of [a-z0-9_], not a library counter's or user_<n>",
			       name ? name : "(null)", NAME_MAX_LEN);
	pthread_mutex_lock(&register_lock);
	n = atomic_load_explicit(&nr_names, memory_order_relaxed);
	for (unsigned i = 0; i < n; i++)
		if (!strcmp(names[i], name))
			id = SD_STAT_USER_0 + (int)i;
	if (id == -ENOSPC && n < SD_USER_EVENTS_MAX) {
		strcpy(names[n], name);
		/* The name before the count that makes it readable. */
		atomic_store_explicit(&nr_names, n + 1, memory_order_release);
		id = SD_STAT_USER_0 + (int)n;
	}
	pthread_mutex_unlock(&register_lock);
	if (id == -ENOSPC)
		return sd_fail(-ENOSPC, "sd_user_event_register: all %d names are taken ('%s' "
			       "is not one of them)", SD_USER_EVENTS_MAX, name);
	return id;
}

/* The caller is @cpu's thread and @id a registered event: its index. */
static int check_event(struct sd_cpu *cpu, int id, const char *fn)
{
	if (sd_cpu_check_self(cpu))
		return sd_fail(-EPERM, "%s: " SD_NOT_ATTACHED, fn);
	if (id < SD_STAT_USER_0 || id >= SD_STAT_USER_0 + SD_USER_EVENTS_MAX ||
	    !sd_user_event_name((unsigned)(id - SD_STAT_USER_0)))
		return sd_fail(-EINVAL, "%s: %d is not a registered event "
			       "(sd_user_event_register())", fn, id);
	return 0;
}

int sd_user_event(struct sd_cpu *cpu, int id, uint64_t n)
{
	int err = check_event(cpu, id, "sd_user_event");

	if (!err)
		sd_event_user(cpu, SD_EV_USER_MARK, (unsigned)(id - SD_STAT_USER_0), n, n);
	return err;
}

int sd_user_event_begin(struct sd_cpu *cpu, int id)
{
	int err = check_event(cpu, id, "sd_user_event_begin");
	unsigned depth;

	if (err)
		return err;
	if (cpu->nr_user_slices == sizeof(cpu->user_slice))
		return sd_fail(-EOVERFLOW, "sd_user_event_begin: %zu slices are open on CPU %u",
			       sizeof(cpu->user_slice), cpu->id);
	/* The depth first: an IPI function that opens and closes a slice
	 * of its own between the two stores uses the next slot, not ours. */
	depth = cpu->nr_user_slices++;
	atomic_signal_fence(memory_order_seq_cst);
	cpu->user_slice[depth] = (uint8_t)(id - SD_STAT_USER_0);
	sd_event_user(cpu, SD_EV_USER_BEGIN, (unsigned)(id - SD_STAT_USER_0), 1, 0);
	return 0;
}

int sd_user_event_end(struct sd_cpu *cpu, int id)
{
	int err = check_event(cpu, id, "sd_user_event_end");
	unsigned depth;

	if (err)
		return err;
	depth = cpu->nr_user_slices;
	if (!depth || cpu->user_slice[depth - 1] != (uint8_t)(id - SD_STAT_USER_0))
		return sd_fail(-EINVAL, "sd_user_event_end: the innermost open slice on CPU %u is "
			       "%s, not '%s'", cpu->id, depth ? "another event's" : "none",
			       sd_user_event_name((unsigned)(id - SD_STAT_USER_0)));
	sd_event_user(cpu, SD_EV_USER_END, (unsigned)(id - SD_STAT_USER_0), 0, 0);
	atomic_signal_fence(memory_order_seq_cst);
	cpu->nr_user_slices = depth - 1;
	return 0;
}

uint64_t sd_user_flow_start(struct sd_cpu *cpu, int id)
{
	if (check_event(cpu, id, "sd_user_flow_start"))
		return 0;
	return sd_event_user(cpu, SD_EV_USER_FLOW_OUT, (unsigned)(id - SD_STAT_USER_0), 1, 0);
}

int sd_user_flow_end(struct sd_cpu *cpu, int id, uint64_t token)
{
	int err = check_event(cpu, id, "sd_user_flow_end");

	if (!err)
		sd_event_user(cpu, SD_EV_USER_FLOW_IN, (unsigned)(id - SD_STAT_USER_0), 1, token);
	return err;
}
