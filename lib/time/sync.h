/* SPDX-License-Identifier: MIT */
#ifndef SD_TIME_SYNC_H
#define SD_TIME_SYNC_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_TIME
#error "time/sync.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <stdbool.h>
#include <stdint.h>

#include "clock.h"
#include "model.h"

/*
 * Keeping a CPU's modelled clock in step with the others' (sync.c). Every
 * call is made by the clock's own CPU thread (its IPI handler included),
 * on its own clock; the CPU's layer (hw) says when.
 */

/* A synchronisation point: publish the clock and keep within the window
 * (strict mode: give the machine away once past the next CPU); deferred
 * inside a lock or interrupt section to its end. Returns true when IPIs
 * have arrived by the clock (strict mode): the caller runs them
 * (sd_irq_run_pending()) and syncs again, as sd_cpu_model_sync() in
 * hw/cpu.h does. */
bool sd_clock_sync(struct sd_cpu_model *c);
/* An event starts on the clock: strict mode's sign of life to the
 * watchdog; lax mode's return of a CPU taken for stalled. */
void sd_clock_event(struct sd_cpu_model *c);
/* Into the running set (SD_MODEL_RUNNING: a switch) or out of it
 * (SD_MODEL_IDLE), at the clock's own time. */
void sd_clock_set_run(struct sd_cpu_model *c, int state);
/* Lax mode: the owner polls in the program's code (sd_cpu_poll()); it
 * holds nobody back until its next event, which rejoins it. */
void sd_clock_lax_poll(struct sd_cpu_model *c);
/* Strict mode: modelled work of @left ps by the holder (sd_cpu_work()), as
 * a wait for its end, which the next vCPU preemption tick or an IPI's
 * arrival interrupts (the other CPUs run meanwhile). Returns the ps of it
 * done; the caller's next event is the sync point that takes the tick or
 * runs the IPIs. */
uint64_t sd_clock_work_wait(struct sd_cpu_model *c, uint64_t left);
/* The clock joins its machine's run (attach), and leaves it (detach). */
void sd_clock_online(struct sd_cpu_model *c);
void sd_clock_offline(struct sd_cpu_model *c);

#endif
