/* SPDX-License-Identifier: MIT */
/**
 * @file events.h
 * @brief The program's own events: named counters in sd_stats, and marks,
 * slices and arrows in the trace.
 * @ingroup events
 *
 * A user strategy or a runtime's handshake has events of its own (a poll,
 * an acknowledgement, a lap of a wait) that deserve the place the built-in
 * strategies' events have. Register a name once; count it on a CPU, and it
 * lands in sd_stats_snapshot() under that name (sd_stat_name(),
 * sd_stats_print(), sd_stats_json()), through the same funnel as the
 * library's counters (each CPU counts in its own lines: no shared atomics);
 * mark it, open and close a slice of it, or draw an arrow from one CPU's
 * event to another's, and it is in the trace (sd_machine_trace_write()) on
 * that CPU's track, with its name.
 *
 * Events cost nothing in modelled time: what the work they mark costs is
 * charged where it happens (sd_cpu_work(), sd_line_access(), the IPIs and
 * locks the program uses).
 * @{
 */
#ifndef SHOOTDOWN_EVENTS_H
#define SHOOTDOWN_EVENTS_H

#include <stdint.h>

#include "export.h"

SD_BEGIN_DECLS

struct sd_cpu;

/** How many names sd_user_event_register() can hold (SD_STAT_USER_0 to
 *  SD_STAT_USER_15 of stats.h). */
#define SD_USER_EVENTS_MAX 16

/**
 * sd_user_event_register() - give one of the program's counters a name, for
 * the whole process (every machine, every CPU): the counter
 * SD_STAT_USER_0 + k of struct sd_stats, printed and written under @name.
 * Registering a name again returns the same id, so each machine_init() of a
 * strategy may register its names. Names are never unregistered.
 *
 * @name: 1..31 characters of [a-z0-9_], not the name of a library counter
 * (sd_stat_name()) or of a field of sd_stats_json() (nr_cpus,
 * flush_ns_total, flush_ns_hist, flush_ns_mean), and not of the form
 * user_<digits> (the names of unregistered counters).
 *
 * Return: the counter's id (an enum sd_stat, SD_STAT_USER_0 or above);
 * -EINVAL for a bad @name; -ENOSPC if SD_USER_EVENTS_MAX names are taken.
 * Any thread. Never waits for another CPU: may be called with interrupts
 * off (it takes a process-wide mutex only against other registrations).
 */
SD_EXPORT int sd_user_event_register(const char *name);

/**
 * sd_user_event() - count @n of event @id on @cpu, and mark it in the
 * trace (an instant on @cpu's track, named after the event, with @n).
 *
 * Return: 0; -EPERM if the caller is not attached as @cpu; -EINVAL if @id
 * is not a registered event. Attached thread only; interrupts may be off
 * (an IPI function may call it). Never waits.
 */
SD_EXPORT int sd_user_event(struct sd_cpu *cpu, int id, uint64_t n);

/**
 * sd_user_event_begin() - count one event @id on @cpu and open a slice of
 * it on @cpu's track; sd_user_event_end() closes it. Slices nest, as the
 * library's own do (a flush inside a slice of yours is drawn inside it),
 * up to 8 deep on a CPU: close them innermost first, within the same
 * context (an IPI function closes what it opened before it returns).
 *
 * Return: 0; -EPERM if the caller is not attached as @cpu; -EINVAL if @id
 * is not a registered event; -EOVERFLOW if 8 slices are open. Attached
 * thread only; interrupts may be off. Never waits.
 */
SD_EXPORT int sd_user_event_begin(struct sd_cpu *cpu, int id);

/**
 * sd_user_event_end() - close the innermost slice open on @cpu, which must
 * be of event @id.
 *
 * Return: 0; -EPERM if the caller is not attached as @cpu; -EINVAL if no
 * slice is open or the innermost is of another event (nothing closed).
 * Attached thread only; interrupts may be off. Never waits.
 */
SD_EXPORT int sd_user_event_end(struct sd_cpu *cpu, int id);

/**
 * sd_user_flow_start() - count one event @id on @cpu, mark it in the trace,
 * and return a token for the arrow that sd_user_flow_end() draws from this
 * mark to the mark of the event that answers it, on any CPU (a request and
 * its acknowledgement; a poll word set and the poll that saw it). Hand the
 * token to the other side however the program likes (the word it polls).
 *
 * Return: the token; 0 when @cpu does not trace (an arrow needs both ends in
 * the trace: sd_user_flow_end() with 0 still counts its event), when the
 * caller is not attached as @cpu or @id is not registered (both with the
 * detail in sd_last_error(), and nothing counted). Attached thread only;
 * interrupts may be off. Never waits.
 */
SD_EXPORT uint64_t sd_user_flow_start(struct sd_cpu *cpu, int id);

/**
 * sd_user_flow_end() - count one event @id on @cpu, mark it in the trace,
 * and end there the arrow of @token (from sd_user_flow_start(), on this or
 * any CPU of the same machine; 0 draws no arrow). A token ended more than
 * once draws one arrow, to one of its ends; one never ended draws none.
 *
 * Return: 0; -EPERM if the caller is not attached as @cpu; -EINVAL if @id
 * is not registered. Attached thread only; interrupts may be off. Never
 * waits.
 */
SD_EXPORT int sd_user_flow_end(struct sd_cpu *cpu, int id, uint64_t token);

/** @} */

SD_END_DECLS

#endif
