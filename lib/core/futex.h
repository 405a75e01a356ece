/* SPDX-License-Identifier: MIT */
#ifndef SD_CORE_FUTEX_H
#define SD_CORE_FUTEX_H

#include "layer.h"
#if SD_LAYER < SD_LAYER_CORE
#error "core/futex.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include "compiler.h"

/*
 * Park and wake on a 32-bit word (Linux futex). Only ever reached after a
 * waiter has spun and yielded: with hundreds of emulated CPUs per PU, a
 * waiter that keeps polling steals the PU from the thread it waits for.
 * Signals (IPIs) interrupt a parked thread; its handler runs and the wait
 * is simply retried by the caller's loop.
 */
void sd_futex_wait(SD_ATOMIC(int) *word, int expected);
/* The same, giving up after about @ns: the IPI watchdog's park. Under TSan
 * it sleeps at most the usual short poll. */
void sd_futex_wait_ns(SD_ATOMIC(int) *word, int expected, uint64_t ns);
void sd_futex_wake(SD_ATOMIC(int) *word, int nr);

/*
 * Wait until *word != @old: spin, yield, then park. Whoever changes the
 * word must call sd_futex_wake() afterwards.
 */
void sd_wait_while_eq(SD_ATOMIC(int) *word, int old);

#endif
