/* SPDX-License-Identifier: MIT */
#ifndef SD_HW_TRACE_H
#define SD_HW_TRACE_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_HW
#error "hw/trace.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <stdbool.h>

#include "../core/compiler.h"

struct sd_cpu;
struct sd_machine;

/* One traced event: 32 bytes, what a timeline needs and nothing more. */
struct sd_trace_rec {
	uint64_t ts_ns;                /* CLOCK_MONOTONIC */
	uint64_t arg;
	uint64_t aux;
	uint32_t ev;                   /* enum sd_event */
	uint32_t reserved;
};

/*
 * A CPU's ring. Written by the owner thread alone, which includes its IPI
 * handler: a signal may land in the middle of a record, so the slot is
 * claimed with one RMW on a word no other thread writes (a signal-safe
 * claim, never a shared line), and @published, the count a reader may
 * trust, is stored only when the outermost record is complete.
 *
 * When full it keeps the FIRST records and counts the rest (the counter
 * trace_records_dropped, and the file's metadata): a slot once written is
 * never rewritten, so a reader may copy while the CPU runs, every slice end
 * in the file has its beginning, and a full ring costs one compare.
 */
struct sd_trace_ring {
	uint64_t cap;
	SD_ATOMIC(uint64_t) claimed;   /* slots handed out, drops included */
	unsigned nesting;              /* records in progress on this thread */
	SD_ATOMIC(uint64_t) published; /* filled slots: release, by the owner */
	struct sd_trace_rec *rec;      /* right after the ring, same allocation */
};

/* Machine-wide trace settings, fixed at creation. */
struct sd_trace {
	char *path;                    /* NULL: tracing off */
	unsigned per_cpu;              /* records per CPU ring */
	unsigned serial;               /* the machine's number: its trace pid */
	uint64_t t0_ns;                /* creation: the file's time zero */
};

/* A trace is written beside its path under the temporary name
 * sd_trace_tmp_name() gives (NULL: no memory; free() it) and renamed over
 * the path once whole. sd_trace_path_check(): 0 if @path is a regular file
 * or absent (a symbolic link, a device, a FIFO or a socket is never
 * replaced: -EINVAL; a directory: -EISDIR); with @try_create, also that the
 * temporary file can be created beside it (the -errno of the open: a
 * missing directory, no permission, a read-only file system). The detail
 * is in sd_last_error(). Any thread. */
char *sd_trace_tmp_name(const char *path);
int sd_trace_path_check(const char *path, bool try_create);

/* The machine's halves (machine/create.c). Setup: resolve the config and
 * SD_TRACE into @m->trace, check the path (sd_trace_path_check(), so a
 * trace that could not be written is refused now, not after the run) and
 * give each CPU its ring (-ENOMEM, -EINVAL, that check's codes; nothing
 * left on failure). Teardown frees what setup made. */
int sd_trace_setup(struct sd_machine *m);
void sd_trace_teardown(struct sd_machine *m);

#endif
