/* SPDX-License-Identifier: MIT */
#ifndef SD_CORE_SYNTHETIC_H
#define SD_CORE_SYNTHETIC_H

#include "layer.h"
#if SD_LAYER < SD_LAYER_CORE
#error "core/synthetic.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <stdint.h>

/*
 * The number of PUs the hwloc synthetic description @s has (the product
 * of its levels' counts), or limit + 1 if that exceeds @limit, in *@pus:
 * 0, or -EINVAL if @s is not a list of "type:count" levels (hwloc itself
 * then says what is wrong). For checking a description's size before
 * hwloc builds it. Any thread.
 */
int sd_synthetic_pus(const char *s, uint64_t limit, uint64_t *pus);

/* The largest synthetic topology the library builds: a machine has at most
 * 4096 CPUs, and a description 16 times that is surely a typo. */
#define SD_SYNTHETIC_MAX_PUS 65536u

#endif
