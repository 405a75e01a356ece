/* SPDX-License-Identifier: MIT */
#ifndef SD_CORE_OPTIONS_H
#define SD_CORE_OPTIONS_H

#include "layer.h"
#if SD_LAYER < SD_LAYER_CORE
#error "core/options.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <stdint.h>

/*
 * "key=value[,key=value]" option lists, as strategy specs carry after their
 * name ("ipi:ceiling=8,cpumask=eager"). Written by hand: glibc's getsubopt()
 * takes a fixed token list and accepts blanks, repeats and a bare key, which
 * a spec must refuse.
 */
struct sd_opt {
	char key[32];
	char value[32];
};

#define SD_OPTS_MAX 8

/*
 * Parse @list into @opts (at most SD_OPTS_MAX). Refuses, naming @owner: a
 * malformed or blank-padded pair, a repeated key, a trailing ','.
 * Return: 0; -EINVAL.
 */
int sd_opts_parse(const char *owner, const char *list, struct sd_opt *opts, unsigned *nr_opts);

/* An option @owner does not know. Return: -ENOENT naming both. */
int sd_opt_unknown(const char *owner, const struct sd_opt *opt);

/* @opt's value as an unsigned integer in [@min, @max]. Return: 0; -EINVAL
 * naming it otherwise (*out untouched). */
int sd_opt_uint(const char *owner, const struct sd_opt *opt, uint64_t min, uint64_t max,
		uint64_t *out);

#endif
