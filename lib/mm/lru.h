/* SPDX-License-Identifier: MIT */
#ifndef SD_MM_LRU_H
#define SD_MM_LRU_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_MM
#error "mm/lru.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <stddef.h>

struct sd_cpu;

/*
 * The LRU lock's work for a mapping change's pages (lru.c). Both run on
 * @c's own thread (its batch counts are owner-private), with no lock of the
 * mm held, interrupts on.
 */

/* folio_add_lru(): a page @c populated joins @c's lru_add batch, which is
 * moved onto the LRU under the lock when it is full. */
void sd_lru_add(struct sd_cpu *c);

/* @n pages freed by @c leave the LRU: under the lock now, after draining
 * @c's batch first (SD_LRU_GLOBAL), or at the batch's drain for those still
 * in it (SD_LRU_PERCPU). */
void sd_lru_free(struct sd_cpu *c, size_t n);

#endif
