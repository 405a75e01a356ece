/* SPDX-License-Identifier: MIT */
#ifndef SD_FLUSH_USER_H
#define SD_FLUSH_USER_H

#include <stdbool.h>
#include <stddef.h>

struct sd_machine;
struct sd_strategy_ops;

/* The ops of the registered user strategy called @name (@len characters), or NULL. */
const struct sd_strategy_ops *sd_strategy_user_lookup(const char *name, size_t len);
/* Whether @m runs a user strategy (the building blocks work only there). */
bool sd_user_strategy(const struct sd_machine *m);

#endif
