/* SPDX-License-Identifier: MIT */
/*
 * The trace's write side: the event funnel's per-CPU rings (hw/trace.h),
 * their setup and teardown. The reader that turns them into a file is in
 * the top layer (machine/trace_export.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <shootdown/machine.h>

#include "../core/error.h"
#include "../core/ordering.h"
#include "event.h"
#include "machine_state.h"
#include "trace.h"

#define SD_TRACE_DEFAULT_PER_CPU 65536u
#define SD_TRACE_MAX_PER_CPU (1u << 26)   /* 2 GiB a CPU: surely a mistake */
#define SD_TRACE_MAX_NESTING 64

/* ---- the funnel's out-of-line halves ---- */

void sd_event_flush_latency(struct sd_cpu *c, uint64_t ns)
{
	unsigned b = ns ? sd_ilog2(ns) : 0;

	if (b >= SD_STAT_HIST_BUCKETS)
		b = SD_STAT_HIST_BUCKETS - 1;
	sd_counter_add(&c->stats.flush_ns_hist[b], 1);
	sd_counter_add(&c->stats.flush_ns_total, ns);
}

/*
 * Record one event on the owner's ring; the slot number, or -1 if the ring
 * is full (counted as dropped). The claim is a relaxed RMW on a word only
 * this thread writes: our own IPI handler may interrupt between a plain
 * load and store of it and take the same slot. @nesting needs no RMW: a
 * handler that interrupts its update puts it back as it found it.
 */
static uint64_t flow_id(unsigned cpu, uint64_t slot);

static int64_t trace_put(struct sd_cpu *c, enum sd_event ev, uint64_t arg, uint64_t aux,
			 bool aux_is_flow)
{
	struct sd_trace_ring *r = c->trace;
	uint64_t slot;
	int64_t ret = -1;

	r->nesting++;
	atomic_signal_fence(memory_order_seq_cst);
	slot = atomic_fetch_add_explicit(&r->claimed, 1, memory_order_relaxed);
	/* Test instrumentation: where a nested record lands (ordering.h). */
	sd_order_point(SD_ORDER_TRACE_CLAIMED, c->id);
	if (slot < r->cap) {
		struct sd_trace_rec *rec = &r->rec[slot];

		/* A modelled machine's timeline is in modelled time. */
		rec->ts_ns = c->model.ev_ps ? c->model.clock_ps / PS_PER_NS : sd_now_ns();
		rec->arg = arg;
		rec->aux = aux_is_flow ? flow_id(c->id, slot) : aux;
		rec->ev = (uint32_t)ev;
		ret = (int64_t)slot;
	} else {
		sd_event_count(c, SD_STAT_TRACE_DROPPED, 1);
	}
	/* Pairs with a nested handler's: its records are complete before our
	 * decrement is seen by it. */
	atomic_signal_fence(memory_order_seq_cst);
	if (--r->nesting == 0) {
		uint64_t done;

		/* Release: the records below @done are filled (every claim
		 * below it belongs to a record that has returned, as nesting
		 * is 0). Pairs with the acquire in trace_snapshot(). A
		 * handler that records between our load and our store
		 * publishes more, which our store would take back: look
		 * again, so the last store is never behind the last claim. */
		do {
			done = atomic_load_explicit(&r->claimed, memory_order_relaxed);
			atomic_store_explicit(&r->published, done < r->cap ? done : r->cap,
					      memory_order_release);
			atomic_signal_fence(memory_order_seq_cst);
		} while (atomic_load_explicit(&r->claimed, memory_order_relaxed) != done);
	}
	return ret;
}

void sd_trace_record(struct sd_cpu *c, enum sd_event ev, uint64_t arg, uint64_t aux)
{
	(void)trace_put(c, ev, arg, aux, false);
}

/* A flow id names the IPI_SENT record itself: CPU and slot, unique for the
 * machine's life (slots are never reused), and below 2^53 so JSON readers
 * keep it exact. */
static uint64_t flow_id(unsigned cpu, uint64_t slot)
{
	return (uint64_t)(cpu + 1) << 32 | (slot + 1);
}

/* The id is the slot's, known only once claimed, so trace_put() writes it
 * into the record before the record is published. */
uint64_t sd_trace_record_flow(struct sd_cpu *c, enum sd_event ev, uint64_t arg)
{
	int64_t slot = trace_put(c, ev, arg, 0, true);

	return slot < 0 ? 0 : flow_id(c->id, (uint64_t)slot);
}

/* ---- setup and teardown ---- */

static _Atomic unsigned machine_serial;

int sd_trace_setup(struct sd_machine *m)
{
	const char *path = m->cfg.trace_path;
	unsigned per_cpu = m->cfg.trace_events_per_cpu;

	if (path && !*path)
		return sd_fail(-EINVAL, "trace_path is empty: NULL means no tracing");
	if (!path) {
		path = getenv("SD_TRACE");
		if (path && !*path)
			path = NULL;
	}
	if (per_cpu > SD_TRACE_MAX_PER_CPU)
		return sd_fail(-EINVAL, "trace_events_per_cpu %u: at most %u", per_cpu,
			       SD_TRACE_MAX_PER_CPU);
	m->trace.per_cpu = per_cpu ? per_cpu : SD_TRACE_DEFAULT_PER_CPU;
	m->cfg.trace_events_per_cpu = m->trace.per_cpu;
	m->cfg.trace_path = NULL;
	m->trace.serial = atomic_fetch_add(&machine_serial, 1) + 1;
	m->trace.t0_ns = m->model.on ? 0 : sd_now_ns();
	if (!path)
		return 0;
	int err = sd_trace_path_check(path, true);
	if (err)
		return err;
	m->trace.path = strdup(path);
	if (!m->trace.path)
		return -ENOMEM;
	for (unsigned i = 0; i < m->nr_cpus; i++) {
		struct sd_trace_ring *r = calloc(1, sizeof(*r) + (size_t)m->trace.per_cpu *
							       sizeof(struct sd_trace_rec));

		if (!r) {
			sd_trace_teardown(m);
			return -ENOMEM;
		}
		r->cap = m->trace.per_cpu;
		r->rec = (struct sd_trace_rec *)(r + 1);
		m->cpus[i]->trace = r;
	}
	m->cfg.trace_path = m->trace.path;
	return 0;
}

char *sd_trace_tmp_name(const char *path)
{
	char *tmp;

	return asprintf(&tmp, "%s.%d.tmp", path, (int)getpid()) < 0 ? NULL : tmp;
}

static const char *kind_of(mode_t mode)
{
	return S_ISLNK(mode) ? "a symbolic link" : S_ISCHR(mode) ? "a character device" :
	       S_ISBLK(mode) ? "a block device" : S_ISFIFO(mode) ? "a FIFO" :
	       S_ISSOCK(mode) ? "a socket" : "not a regular file";
}

int sd_trace_path_check(const char *path, bool try_create)
{
	struct stat st;
	char *tmp;
	int fd, err;

	/* lstat(): a symbolic link is the link, not what it points at,
	 * which the rename would never touch. */
	if (lstat(path, &st) == 0) {
		if (S_ISDIR(st.st_mode))
			return sd_fail(-EISDIR, "trace path %s is a directory", path);
		if (!S_ISREG(st.st_mode))
			return sd_fail(-EINVAL, "trace path %s is %s: a trace replaces only a "
				       "regular file", path, kind_of(st.st_mode));
	} else if (errno != ENOENT) {
		err = -errno;
		return sd_fail(err, "trace path %s: %s", path, strerror(-err));
	}
	if (!try_create)
		return 0;
	tmp = sd_trace_tmp_name(path);
	if (!tmp)
		return sd_fail(-ENOMEM, "trace path: no memory");
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0) {
		err = -errno;
		sd_fail(err, "trace path %s: cannot create a file beside it (%s): %s", path, tmp,
			strerror(-err));
		free(tmp);
		return err;
	}
	close(fd);
	unlink(tmp);
	free(tmp);
	return 0;
}

void sd_trace_teardown(struct sd_machine *m)
{
	for (unsigned i = 0; m->cpus && i < m->nr_cpus; i++) {
		if (!m->cpus[i])
			continue;
		free(m->cpus[i]->trace);
		m->cpus[i]->trace = NULL;
	}
	free(m->trace.path);
	m->trace.path = NULL;
	m->cfg.trace_path = NULL;
}
