/* SPDX-License-Identifier: MIT */
#ifndef SD_STRATEGY_BUILTIN_H
#define SD_STRATEGY_BUILTIN_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_STRATEGY
#error "strategy/builtin.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include "../mm/flush_ops.h"

/* The built-in strategies, one file each, named after them. */
extern const struct sd_strategy_ops sd_broadcast_ops;
extern const struct sd_strategy_ops sd_local_ops;
extern const struct sd_strategy_ops sd_ipi_ops;
extern const struct sd_strategy_ops sd_gbcast_ops;
extern const struct sd_strategy_ops sd_rar_ops;
extern const struct sd_strategy_ops sd_riscv_ops;
extern const struct sd_strategy_ops sd_none_ops;

/* The template of every user strategy's ops (user.c): the registry copies
 * it and fills in name, summary and user. */
extern const struct sd_strategy_ops sd_user_ops;

#endif
