/* SPDX-License-Identifier: MIT */
#ifndef SD_MACHINE_REPORT_H
#define SD_MACHINE_REPORT_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_MACHINE
#error "machine/report.h is in a higher layer than the file including it (core/layer.h)"
#endif

/*
 * The readers of what the layers below record, in the top layer: the
 * counters' snapshots (stats.c, the public calls of <shootdown/stats.h>)
 * and the trace's export (trace_export.c). They read a machine; nothing
 * below calls them.
 */

struct sd_machine;

/* sd_machine_trace_write() once its arguments are checked (a tracing
 * machine, a path): 0 or -errno, with sd_last_error() set. Any thread
 * with interrupts on; the rings are copied while their CPUs run. */
int sd_trace_write_file(struct sd_machine *m, const char *path);

#endif
