/* SPDX-License-Identifier: MIT */
#ifndef SD_HW_MODEL_H
#define SD_HW_MODEL_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_HW
#error "hw/model.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <stdbool.h>
#include <stdint.h>

#include <shootdown/model.h>

#include "../core/compiler.h"
#include "../core/spinlock.h"
#include "../time/params.h"
#include "../time/model.h"
#include "../time/sync.h"

struct sd_cpu;

/* sd_model_load() (time/profile.c), and each event's cost from its row
 * of the event table (hw/event.h) into ev_ps. The same errors; fini is
 * sd_model_fini(). model.c. */
int sd_model_init(struct sd_model *mod, const char *profile, const char *topology,
		  uint64_t window_ns, unsigned nr_cpus, unsigned tlb_entries);
enum sd_model_distance sd_model_distance_of(const struct sd_model *mod, unsigned a, unsigned b);

/* A CPU's modelled state: set up with its area, joined to the running set
 * at attach, left at detach (model.c). */
void sd_model_cpu_init(struct sd_cpu *c);
void sd_model_cpu_online(struct sd_cpu *c);
void sd_model_cpu_offline(struct sd_cpu *c);
#endif
