/* SPDX-License-Identifier: MIT */
#ifndef SD_CORE_OPTIONS_H
#define SD_CORE_OPTIONS_H

#include "layer.h"
#if SD_LAYER < SD_LAYER_CORE
#error "core/options.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <stdbool.h>
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

/*
 * One value a choice option accepts, and what it stands for in the error
 * message ("concurrent" and "5.13": "want concurrent (5.13) or ..."), or
 * NULL.
 */
struct sd_opt_choice {
	const char *value;
	const char *hint;
};

/*
 * @opt's value as the index of the matching one of @choices (@nr of them).
 * Return: 0; -EINVAL naming @opt and @owner and listing the choices in their
 * order ("want a (hint), b or c"), *out untouched.
 */
int sd_opt_choose(const char *owner, const struct sd_opt *opt,
		  const struct sd_opt_choice *choices, unsigned nr, unsigned *out);

/*
 * A two-way choice: *out is true for @choices[1], false for @choices[0];
 * the error lists @choices[@first_listed] first (a default named first).
 * Return: as sd_opt_choose().
 */
int sd_opt_flag(const char *owner, const struct sd_opt *opt,
		const struct sd_opt_choice choices[2], unsigned first_listed, bool *out);

#endif
