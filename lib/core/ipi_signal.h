/* SPDX-License-Identifier: MIT */
#ifndef SD_CORE_IPI_SIGNAL_H
#define SD_CORE_IPI_SIGNAL_H

#include "layer.h"
#if SD_LAYER < SD_LAYER_CORE
#error "core/ipi_signal.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <signal.h>
#include <stdbool.h>

/*
 * The real signal behind an IPI, apart from the queues (smp.c) so that the
 * strict sequencer (sequencer.c) can summon a CPU without reaching up into
 * them. Our signals carry a cookie's address as their value
 * (rt_tgsigqueueinfo with SI_QUEUE), so the handler can tell an IPI from
 * the host's own signal of the same number, which goes on to the host's
 * handler.
 */

/* Send IPI signal @sig to thread @tid of this process: 0 or a negative
 * errno (-ESRCH: no such thread; -EAGAIN: the real-time signal queue is
 * full). Async-signal-safe; any thread. */
int sd_ipi_signal_send(int sig, int tid);

/* Did @si come from sd_ipi_signal_send()? */
bool sd_ipi_signal_is_ours(const siginfo_t *si);

#endif
