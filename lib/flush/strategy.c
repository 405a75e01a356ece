/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "strategy.h"
#include "user.h"

static const struct sd_strategy_ops *const builtin[] = {
	&sd_broadcast_ops,
	&sd_local_ops,
	&sd_ipi_ops,
	&sd_gbcast_ops,
	&sd_none_ops,
};

/* A blank anywhere in "key=value": strtoull() would skip a leading one and
 * a key compare would miss a padded one, so "ceiling= 5" is refused whole. */
static bool has_blank(const char *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (isspace((unsigned char)p[i]))
			return true;
	return false;
}

/* Whether @key was given already: the later one would silently win. */
static bool repeated_key(const struct sd_strategy_opt *opts, unsigned nr, const char *key)
{
	for (unsigned i = 0; i < nr; i++)
		if (!strcmp(opts[i].key, key))
			return true;
	return false;
}

static int parse_opts(const char *name, const char *p, struct sd_strategy_opt *opts,
		      unsigned *nr_opts)
{
	*nr_opts = 0;
	while (*p) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		const char *eq = memchr(p, '=', len);
		struct sd_strategy_opt *o = &opts[*nr_opts];

		if (*nr_opts == SD_STRATEGY_MAX_OPTS)
			return sd_fail(-EINVAL, "too many options for '%s'", name);
		if (!eq || eq == p || (size_t)(eq - p) >= sizeof(o->key) ||
		    len - (size_t)(eq - p) - 1 >= sizeof(o->value) || eq + 1 == p + len)
			return sd_fail(-EINVAL, "malformed option '%.*s' for '%s' (want key=value)",
				       (int)len, p, name);
		if (has_blank(p, len))
			return sd_fail(-EINVAL, "malformed option '%.*s' for '%s': blanks are not "
				       "allowed in key=value", (int)len, p, name);
		memcpy(o->key, p, (size_t)(eq - p));
		o->key[eq - p] = '\0';
		if (repeated_key(opts, *nr_opts, o->key))
			return sd_fail(-EINVAL, "option '%s' given twice for '%s'", o->key, name);
		memcpy(o->value, eq + 1, len - (size_t)(eq - p) - 1);
		o->value[len - (size_t)(eq - p) - 1] = '\0';
		(*nr_opts)++;
		p += len + (comma ? 1 : 0);
		if (comma && !*p)
			return sd_fail(-EINVAL, "trailing ',' in options for '%s'", name);
	}
	return 0;
}

bool sd_strategy_builtin(const char *spec, const struct sd_strategy_ops **ops, size_t *name_len)
{
	const char *colon = strchr(spec, ':');
	size_t len = colon ? (size_t)(colon - spec) : strlen(spec);

	*name_len = len;
	for (size_t i = 0; i < sizeof(builtin) / sizeof(builtin[0]); i++) {
		if (strlen(builtin[i]->name) == len && !strncmp(builtin[i]->name, spec, len)) {
			*ops = builtin[i];
			return true;
		}
	}
	return false;
}

int sd_strategy_lookup(const char *spec, const struct sd_strategy_ops **ops,
		       struct sd_strategy_opt *opts, unsigned *nr_opts)
{
	const char *colon = strchr(spec, ':');
	size_t len;

	/* Built-ins first: a user strategy can never shadow one. */
	if (!sd_strategy_builtin(spec, ops, &len) && !(*ops = sd_strategy_user_lookup(spec, len)))
		return sd_fail(-ENOENT, "unknown strategy '%.*s' (built-in: broadcast, local, ipi, "
			       "gbcast, none; or one registered with sd_strategy_register())",
			       (int)len, spec);
	return parse_opts((*ops)->name, colon ? colon + 1 : "", opts, nr_opts);
}

int sd_strategy_unknown_opt(const char *strategy, const struct sd_strategy_opt *opt)
{
	return sd_fail(-ENOENT, "unknown option '%s' for strategy '%s'", opt->key, strategy);
}

int sd_strategy_opt_uint(const char *strategy, const struct sd_strategy_opt *opt,
			 uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(opt->value, &end, 10);
	if (errno || *end || end == opt->value || opt->value[0] == '-' || v < min || v > max)
		return sd_fail(-EINVAL, "option %s=%s for '%s': want an integer in %llu..%llu",
			       opt->key, opt->value, strategy, (unsigned long long)min,
			       (unsigned long long)max);
	*out = v;
	return 0;
}
