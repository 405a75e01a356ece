/* SPDX-License-Identifier: MIT */
#ifndef SD_STRATEGY_REGISTRY_H
#define SD_STRATEGY_REGISTRY_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_STRATEGY
#error "strategy/registry.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include "../core/options.h"
#include "../mm/flush_ops.h"

/*
 * Find the strategy of "name[:key=value[,key=value]]" and parse its options.
 * A user strategy found here is held (sd_strategy_unregister() says -EBUSY)
 * until sd_strategy_put(): the look-up and the hold are one step under the
 * registry lock, so an unregister cannot slip between them.
 * Return: 0; -ENOENT for an unknown name; -EINVAL for a malformed spec
 * (nothing held then).
 */
int sd_strategy_lookup(const char *spec, const struct sd_strategy_ops **ops,
		       struct sd_opt *opts, unsigned *nr_opts);

/* Release what sd_strategy_lookup() held (nothing for a built-in). */
void sd_strategy_put(const struct sd_strategy_ops *ops);

#endif
