/* SPDX-License-Identifier: MIT */
/*
 * Machine profiles: find the file, read it with json-c, check every
 * parameter and its source, place the emulated CPUs on the modelled
 * topology with hwloc, and turn the costs into picoseconds. The per-event
 * table the funnel charges from is filled above, from the event table's
 * cost column (hw/model.c). The file format is in docs/guide.md
 * ("Modelled time"); the parameter list is time/params.h.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>

#include <hwloc.h>
#include <json-c/json.h>

#include "../core/error.h"
#include "../core/synthetic.h"
#include "model.h"

#ifndef SD_PROFILES_INSTALL_DIR
#define SD_PROFILES_INSTALL_DIR "/usr/local/share/shootdown/profiles"
#endif
#ifndef SD_PROFILES_SOURCE_DIR
#define SD_PROFILES_SOURCE_DIR ""
#endif

/* A cost above this is a typo (a second, in ns), not a machine. */
#define MAX_COST_NS 1e9

static const char *const param_key[SD_MP_NR] = {
#define SD_MP_KEY(id, key, what) key,
	SD_MODEL_PARAM_LIST(SD_MP_KEY)
#undef SD_MP_KEY
};

static const char *const dist_param_key[SD_MDP_NR] = {
#define SD_MDP_KEY(id, key, what) key,
	SD_MODEL_DIST_PARAM_LIST(SD_MDP_KEY)
#undef SD_MDP_KEY
};

static const char *const dist_key[SD_DIST_NR] = SD_MODEL_DIST_KEYS;

/* ---- finding the file ---- */

static bool name_is_path(const char *name)
{
	size_t n = strlen(name);

	return strchr(name, '/') || (n > 5 && !strcmp(name + n - 5, ".json"));
}

static bool name_is_clean(const char *name)
{
	for (const char *p = name; *p; p++)
		if (!(('a' <= *p && *p <= 'z') || ('A' <= *p && *p <= 'Z') ||
		      ('0' <= *p && *p <= '9') || *p == '-' || *p == '_' || *p == '.'))
			return false;
	return name[0] != '.';
}

/* Try DIR/NAME.json: 0 if it exists (its path in @path), -ENAMETOOLONG
 * if it exists but its path does not fit in @len, else -ENOENT. */
static int try_dir(const char *dir, size_t dir_len, const char *name, char *path, size_t len)
{
	char full[PATH_MAX];
	int n;

	if (!dir_len)
		return -ENOENT;
	n = snprintf(full, sizeof(full), "%.*s/%s.json", (int)dir_len, dir, name);
	if (n < 0 || (size_t)n >= sizeof(full) || access(full, R_OK))
		return -ENOENT;
	if ((size_t)n >= len)
		return -ENAMETOOLONG;
	memcpy(path, full, (size_t)n + 1);
	return 0;
}

/* The user's own profiles: $XDG_DATA_HOME/shootdown/profiles, where
 * sd-calibrate writes by default. */
static void user_dir(char *buf, size_t len)
{
	const char *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");

	buf[0] = 0;
	if (xdg && *xdg)
		snprintf(buf, len, "%s/shootdown/profiles", xdg);
	else if (home && *home)
		snprintf(buf, len, "%s/.local/share/shootdown/profiles", home);
}

int sd_profile_locate(const char *name, char *path, size_t len)
{
	const char *env = getenv("SD_PROFILE_PATH");
	char user[PATH_MAX];
	int err;

	if (!name || !*name || !path || !len)
		return sd_fail(-EINVAL, "sd_profile_locate: NULL or empty argument");
	if (name_is_path(name)) {
		if ((size_t)snprintf(path, len, "%s", name) >= len)
			return sd_fail(-ENAMETOOLONG, "sd_profile_locate: '%s' does not fit in %zu bytes",
				       name, len);
		if (access(path, R_OK))
			return sd_fail(-ENOENT, "profile file '%s': %s", name, strerror(errno));
		return 0;
	}
	if (!name_is_clean(name))
		return sd_fail(-EINVAL, "sd_profile_locate: '%s' is neither a path nor a plain name "
			       "(letters, digits, '-', '_', '.')", name);
	for (const char *d = env; d && *d;) {
		size_t n = strcspn(d, ":");
		if ((err = try_dir(d, n, name, path, len)) != -ENOENT)
			goto found;
		d += n + (d[n] == ':');
	}
	user_dir(user, sizeof(user));
	if ((err = try_dir(user, strlen(user), name, path, len)) != -ENOENT)
		goto found;
	if ((err = try_dir(SD_PROFILES_INSTALL_DIR, strlen(SD_PROFILES_INSTALL_DIR), name, path,
			   len)) != -ENOENT)
		goto found;
	if ((err = try_dir(SD_PROFILES_SOURCE_DIR, strlen(SD_PROFILES_SOURCE_DIR), name, path,
			   len)) != -ENOENT)
		goto found;
	return sd_fail(-ENOENT, "no profile '%s': looked for %s.json in SD_PROFILE_PATH (%s), %s, "
		       "%s and %s", name, name, env ? env : "unset", user[0] ? user : "(no home)",
		       SD_PROFILES_INSTALL_DIR,
		       SD_PROFILES_SOURCE_DIR[0] ? SD_PROFILES_SOURCE_DIR : "(no source tree)");
found:
	if (err == -ENAMETOOLONG)
		return sd_fail(err, "sd_profile_locate: the path of '%s' does not fit in %zu bytes",
			       name, len);
	return 0;
}

/* ---- reading it ---- */

/* One cost: {"ns": number, "source": "non-empty"}. */
static int read_cost(struct json_object *o, const char *what, double *ns)
{
	struct json_object *v, *src;
	json_type t;

	if (!json_object_is_type(o, json_type_object))
		return sd_fail(-EINVAL, "profile: %s is not an object {\"ns\": ..., \"source\": ...}",
			       what);
	json_object_object_foreach(o, key, val) {
		(void)val;
		if (strcmp(key, "ns") && strcmp(key, "source") && strcmp(key, "note"))
			return sd_fail(-EINVAL, "profile: %s has an unknown field '%s'", what, key);
	}
	if (!json_object_object_get_ex(o, "ns", &v))
		return sd_fail(-EINVAL, "profile: %s has no \"ns\"", what);
	t = json_object_get_type(v);
	if (t != json_type_double && t != json_type_int)
		return sd_fail(-EINVAL, "profile: %s's \"ns\" is not a number", what);
	*ns = json_object_get_double(v);
	if (!isfinite(*ns) || *ns < 0 || *ns > MAX_COST_NS)
		return sd_fail(-EINVAL, "profile: %s's \"ns\" (%g) is not between 0 and %g", what, *ns,
			       MAX_COST_NS);
	if (!json_object_object_get_ex(o, "source", &src) ||
	    !json_object_is_type(src, json_type_string) || !json_object_get_string_len(src))
		return sd_fail(-EINVAL, "profile: %s has no \"source\" (every cost names where it "
			       "comes from: a citation, a measurement command, or \"fitted to ...\")",
			       what);
	return 0;
}

static int find_key(const char *const *keys, unsigned n, const char *key)
{
	for (unsigned i = 0; i < n; i++)
		if (!strcmp(keys[i], key))
			return (int)i;
	return -1;
}

static int read_dist_table(struct json_object *o, const char *name, double out[SD_DIST_NR])
{
	bool seen[SD_DIST_NR] = { false };
	char what[96];
	int i, err;

	if (!json_object_is_type(o, json_type_object))
		return sd_fail(-EINVAL, "profile: costs.%s is not an object of distance classes", name);
	json_object_object_foreach(o, key, val) {
		if ((i = find_key(dist_key, SD_DIST_NR, key)) < 0)
			return sd_fail(-EINVAL, "profile: costs.%s has an unknown distance class '%s' "
				       "(core, llc, package, system)", name, key);
		snprintf(what, sizeof(what), "costs.%s.%s", name, key);
		if ((err = read_cost(val, what, &out[i])))
			return err;
		seen[i] = true;
	}
	for (i = 0; i < SD_DIST_NR; i++)
		if (!seen[i])
			return sd_fail(-EINVAL, "profile: costs.%s has no '%s'", name, dist_key[i]);
	return 0;
}

/* A virtual machine's parameters (absent: not a virtual machine), a
 * workload's own message cost (absent: 0), which the library never charges,
 * the LRU's per-folio work, a broadcast's cost to its receivers and a new
 * page's allocation, zeroing and charge (absent: 0, as in profiles older
 * than them, whose page_fault_entry held a whole fault), the scheduler's
 * (lib/sched: absent, 0, and the balance interval its default), a VMA's
 * split and merge (absent, 0: their work then sits in vma_change), Intel
 * RAR's (absent, 0: a machine without RAR; the mechanism check refuses a
 * `rar` run on it), MADV_DONTNEED's own work and a file fault's page-cache
 * work (absent, 0, as in profiles older than them). */
static bool param_optional(int i)
{
	return i == SD_MP_VCPU_PREEMPT_INTERVAL || i == SD_MP_VCPU_PREEMPT ||
	       i == SD_MP_PIPE_MESSAGE || i == SD_MP_LRU_PAGE || i == SD_MP_TLBI_RECV ||
	       i == SD_MP_INVLPGB_RECV || i == SD_MP_KPTI_TRAMPOLINE || i == SD_MP_PAGE_ALLOC ||
	       i == SD_MP_PAGE_ZERO || i == SD_MP_PAGE_COPY || i == SD_MP_MEMCG_CHARGE ||
	       i == SD_MP_SCHED_SWITCH || i == SD_MP_SCHED_WAKEUP || i == SD_MP_SCHED_MIGRATE ||
	       i == SD_MP_TASK_FORK || i == SD_MP_SCHED_BALANCE_INTERVAL ||
	       i == SD_MP_VMA_SPLIT || i == SD_MP_VMA_MERGE || i == SD_MP_RAR_SEND ||
	       i == SD_MP_RAR_DELIVERY || i == SD_MP_RAR_SERVICE || i == SD_MP_SBI_ECALL ||
	       i == SD_MP_SBI_SEND_TARGET || i == SD_MP_SBI_DELIVERY || i == SD_MP_SBI_SERVICE ||
	       i == SD_MP_MADVISE_ZAP || i == SD_MP_FILE_FAULT;
}

/*
 * A receiver does its part of a broadcast before it reports completion
 * (the DVM sync's response; INVLPGB's to the issuer's TLBSYNC), so the
 * stall it pays cannot outlast the time the issuer waits for every
 * target: a larger value is a unit slip (us for ns), not a machine.
 */
static int check_recv(const struct sd_model *mod, enum sd_model_param recv,
		      enum sd_model_param completion)
{
	if (mod->param_ns[recv] <= mod->param_ns[completion])
		return 0;
	return sd_fail(-EINVAL, "profile: %s (%g ns) is longer than %s (%g ns): a CPU a "
		       "broadcast reaches is done with it by the time the broadcast completes",
		       param_key[recv], mod->param_ns[recv], param_key[completion],
		       mod->param_ns[completion]);
}

static int read_costs(struct json_object *costs, struct sd_model *mod)
{
	bool seen[SD_MP_NR] = { false }, seen_dist[SD_MDP_NR] = { false };
	char what[96];
	int i, err;

	if (!json_object_is_type(costs, json_type_object))
		return sd_fail(-EINVAL, "profile: \"costs\" is not an object");
	json_object_object_foreach(costs, key, val) {
		if ((i = find_key(param_key, SD_MP_NR, key)) >= 0) {
			snprintf(what, sizeof(what), "costs.%s", key);
			if ((err = read_cost(val, what, &mod->param_ns[i])))
				return err;
			seen[i] = true;
		} else if ((i = find_key(dist_param_key, SD_MDP_NR, key)) >= 0) {
			if ((err = read_dist_table(val, key, mod->dist_ns[i])))
				return err;
			seen_dist[i] = true;
		} else {
			return sd_fail(-EINVAL, "profile: unknown cost '%s'", key);
		}
	}
	for (i = 0; i < SD_MP_NR; i++)
		if (!seen[i] && !param_optional(i))
			return sd_fail(-EINVAL, "profile: costs has no '%s' (a profile from an older "
				       "release: add it with its source, or run sd-calibrate again for "
				       "host and host-kernel)", param_key[i]);
	if (seen[SD_MP_VCPU_PREEMPT] != seen[SD_MP_VCPU_PREEMPT_INTERVAL])
		return sd_fail(-EINVAL, "profile: costs has one of 'vcpu_preempt' and "
			       "'vcpu_preempt_interval' without the other");
	if (mod->param_ns[SD_MP_VCPU_PREEMPT] > 0 &&
	    mod->param_ns[SD_MP_VCPU_PREEMPT] >= mod->param_ns[SD_MP_VCPU_PREEMPT_INTERVAL])
		return sd_fail(-EINVAL, "profile: vcpu_preempt (%g ns) must be shorter than "
			       "vcpu_preempt_interval (%g ns; 0: not a virtual machine, and "
			       "vcpu_preempt 0 too)",
			       mod->param_ns[SD_MP_VCPU_PREEMPT],
			       mod->param_ns[SD_MP_VCPU_PREEMPT_INTERVAL]);
	if ((err = check_recv(mod, SD_MP_TLBI_RECV, SD_MP_DVM_COMPLETION)) ||
	    (err = check_recv(mod, SD_MP_INVLPGB_RECV, SD_MP_INVLPGB_COMPLETION)))
		return err;
	for (i = 0; i < SD_MDP_NR; i++)
		if (!seen_dist[i])
			return sd_fail(-EINVAL, "profile: costs has no '%s'", dist_param_key[i]);
	return 0;
}

static int read_string(struct json_object *root, const char *key, char *buf, size_t len,
		       bool required)
{
	struct json_object *v;

	if (!json_object_object_get_ex(root, key, &v)) {
		if (required)
			return sd_fail(-EINVAL, "profile: no \"%s\"", key);
		return 0;
	}
	if (!json_object_is_type(v, json_type_string))
		return sd_fail(-EINVAL, "profile: \"%s\" is not a string", key);
	if ((size_t)snprintf(buf, len, "%s", json_object_get_string(v)) >= len)
		return sd_fail(-EINVAL, "profile: \"%s\" is longer than %zu characters", key, len - 1);
	return 0;
}

static const char *const mechanism_key[] = {
#define SD_MECH_KEY(bit, key, what) key,
	SD_MODEL_MECHANISM_LIST(SD_MECH_KEY)
#undef SD_MECH_KEY
};
_Static_assert(SD_MECH_ALL == (1u << sizeof(mechanism_key) / sizeof(mechanism_key[0])) - 1,
	       "SD_MODEL_MECHANISM_LIST and enum sd_mechanism name the same mechanisms");

/*
 * "mechanisms": { "ipi": "<source>", ... }: the shootdown mechanisms the
 * machine has, each with where that is known from. Required: a profile
 * that says nothing would let a strategy run on a mechanism its machine
 * does not have, at the 0s the profile gives its costs.
 */
static int read_mechanisms(struct json_object *root, unsigned *mechanisms)
{
	const size_t nr = sizeof(mechanism_key) / sizeof(mechanism_key[0]);
	struct json_object *obj;

	*mechanisms = 0;
	if (!json_object_object_get_ex(root, "mechanisms", &obj))
		return sd_fail(-EINVAL, "profile: no \"mechanisms\" (a profile from an older "
			       "release: name the ones the machine has, of ipi, tlbi_broadcast and "
			       "invlpgb, each with its source, or run sd-calibrate again for host "
			       "and host-kernel; the guide, \"Modelled time\")");
	if (!json_object_is_type(obj, json_type_object))
		return sd_fail(-EINVAL, "profile: \"mechanisms\" is not an object");
	json_object_object_foreach(obj, key, val) {
		int i = find_key(mechanism_key, nr, key);

		if (i < 0)
			return sd_fail(-EINVAL, "profile: unknown mechanism '%s' (known: ipi, "
				       "tlbi_broadcast, invlpgb, rar, sbi)", key);
		if (!json_object_is_type(val, json_type_string) ||
		    !*json_object_get_string(val))
			return sd_fail(-EINVAL, "profile: mechanism '%s' needs its source as a "
				       "non-empty string", key);
		*mechanisms |= 1u << i;
	}
	return 0;
}

static const char *const feature_key[] = {
#define SD_FEATURE_KEY(bit, key, what) key,
	SD_MODEL_FEATURE_LIST(SD_FEATURE_KEY)
#undef SD_FEATURE_KEY
};
#define NR_FEATURES (sizeof(feature_key) / sizeof(feature_key[0]))
_Static_assert(SD_MODEL_FEATURE_RANGE_TLBI == 1u << 0 && SD_MODEL_FEATURE_KPTI == 1u << 1 &&
	       SD_MODEL_FEATURE_REPEAT_TLBI == 1u << 2 && SD_MODEL_FEATURE_SVINVAL == 1u << 3 &&
	       SD_MODEL_FEATURE_NO_ASID == 1u << 4 && NR_FEATURES == 5,
	       "SD_MODEL_FEATURE_LIST and the feature bits agree");
/* The features a machine with TLBI broadcasts must state; repeat_tlbi, an
 * erratum's workaround few parts need, may be left out (not present). */
#define REQUIRED_FEATURES (SD_MODEL_FEATURE_RANGE_TLBI | SD_MODEL_FEATURE_KPTI)

/* One feature: {"present": true|false, "source": "..."}; sets its bit. */
static int read_feature(const char *key, struct json_object *val, unsigned bit,
			unsigned *features)
{
	struct json_object *present, *source;

	if (!json_object_is_type(val, json_type_object) ||
	    !json_object_object_get_ex(val, "present", &present) ||
	    !json_object_is_type(present, json_type_boolean) ||
	    !json_object_object_get_ex(val, "source", &source) ||
	    !json_object_is_type(source, json_type_string) || !*json_object_get_string(source) ||
	    json_object_object_length(val) != 2)
		return sd_fail(-EINVAL, "profile: feature '%s' wants {\"present\": true or false, "
			       "\"source\": \"...\"} and nothing else", key);
	if (json_object_get_boolean(present))
		*features |= bit;
	return 0;
}

/*
 * "features": what the CPU has that changes the kernel's flushes. Optional,
 * but a machine with TLBI broadcasts must state every one: an arm64 part
 * without range TLBIs, or one the kernel runs with KPTI, flushes otherwise
 * than the default would have it (guide, "Modelled time").
 */
static int read_features(struct json_object *root, unsigned mechanisms, unsigned *features)
{
	struct json_object *obj;
	unsigned stated = 0;
	int err;

	*features = 0;
	if (json_object_object_get_ex(root, "features", &obj)) {
		if (!json_object_is_type(obj, json_type_object))
			return sd_fail(-EINVAL, "profile: \"features\" is not an object");
		json_object_object_foreach(obj, key, val) {
			int i = find_key(feature_key, NR_FEATURES, key);

			if (i < 0)
				return sd_fail(-EINVAL, "profile: unknown feature '%s' (known: "
					       "range_tlbi, kpti, repeat_tlbi, svinval, no_asid)", key);
			if ((err = read_feature(key, val, 1u << i, features)))
				return err;
			stated |= 1u << i;
		}
	}
	if ((mechanisms & SD_MECH_TLBI_BROADCAST) &&
	    (stated & REQUIRED_FEATURES) != REQUIRED_FEATURES)
		return sd_fail(-EINVAL, "profile: a machine with tlbi_broadcast must state its "
			       "\"features\": range_tlbi and kpti, each {\"present\": ..., "
			       "\"source\": ...}");
	return 0;
}

static int read_topology(struct json_object *root, char *synthetic, size_t len)
{
	struct json_object *topo, *src;

	if (!json_object_object_get_ex(root, "topology", &topo) ||
	    !json_object_is_type(topo, json_type_object))
		return sd_fail(-EINVAL, "profile: no \"topology\" object");
	json_object_object_foreach(topo, key, val) {
		(void)val;
		if (strcmp(key, "synthetic") && strcmp(key, "source") && strcmp(key, "note"))
			return sd_fail(-EINVAL, "profile: topology has an unknown field '%s'", key);
	}
	if (!json_object_object_get_ex(topo, "source", &src) ||
	    !json_object_is_type(src, json_type_string) || !json_object_get_string_len(src))
		return sd_fail(-EINVAL, "profile: topology has no \"source\"");
	return read_string(topo, "synthetic", synthetic, len, true);
}

/* A profile is a few kilobytes; this is far more than any will be. */
#define PROFILE_MAX_BYTES (1u << 20)

/*
 * The file, whole, in a buffer (free() it): a regular file of at most
 * PROFILE_MAX_BYTES. Opened without blocking and checked before it is
 * read: a FIFO given as a profile blocked sd_machine_create() for ever,
 * and /dev/zero was read until memory ran out.
 */
static int read_file(const char *path, char **out, size_t *n)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC), err;
	char *buf;
	ssize_t got;
	size_t have = 0;

	if (fd < 0) {
		err = -errno;
		return sd_fail(err, "profile '%s': %s", path, strerror(-err));
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		return sd_fail(-EINVAL, "profile '%s' is not a regular file", path);
	}
	if (st.st_size > PROFILE_MAX_BYTES) {
		close(fd);
		return sd_fail(-EINVAL, "profile '%s' is %lld bytes: a profile is at most %u",
			       path, (long long)st.st_size, PROFILE_MAX_BYTES);
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return sd_fail(-ENOMEM, "profile '%s': no memory", path);
	}
	while (have < (size_t)st.st_size &&
	       (got = read(fd, buf + have, (size_t)st.st_size - have)) > 0)
		have += (size_t)got;
	close(fd);
	buf[have] = 0;
	*out = buf;
	*n = have;
	return 0;
}

/* Parse @text (@n bytes) as JSON; a syntax error names its line and column. */
static struct json_object *parse_json(const char *path, const char *text, size_t n)
{
	struct json_tokener *tok = json_tokener_new();
	struct json_object *root;

	if (!tok) {
		sd_fail(-ENOMEM, "profile '%s': no memory", path);
		return NULL;
	}
	root = json_tokener_parse_ex(tok, text, (int)n);
	enum json_tokener_error jerr = json_tokener_get_error(tok);

	if (!root || jerr != json_tokener_success) {
		size_t at = json_tokener_get_parse_end(tok), line = 1, col = 1;

		for (size_t i = 0; i < at && i < n; i++, col++)
			if (text[i] == '\n') {
				line++;
				col = 0;
			}
		sd_fail(-EINVAL, "profile '%s' is not valid JSON: %s at line %zu, column %zu", path,
			jerr == json_tokener_continue ? "unexpected end of file"
						      : json_tokener_error_desc(jerr),
			line, col);
		json_object_put(root);
		root = NULL;
	}
	json_tokener_free(tok);
	return root;
}

/* A what-if inherits at most this deep: a base of a base of a base. */
#define PROFILE_MAX_INHERIT 4

static const char *const profile_fields[] = {
	"format", "name", "description", "topology", "costs", "notes", "mechanisms", "features",
	"inherits",
};

static int check_fields(struct json_object *root, const char *path)
{
	if (!json_object_is_type(root, json_type_object))
		return sd_fail(-EINVAL, "profile '%s': the top level is not an object", path);
	json_object_object_foreach(root, key, val) {
		size_t i = 0;

		(void)val;
		while (i < sizeof(profile_fields) / sizeof(profile_fields[0]) &&
		       strcmp(key, profile_fields[i]))
			i++;
		if (i == sizeof(profile_fields) / sizeof(profile_fields[0]))
			return sd_fail(-EINVAL, "profile '%s': unknown field '%s'", path, key);
	}
	return 0;
}

/*
 * Where "inherits": @name of the profile at @path is: beside @path first
 * (NAME.json in its directory; a relative path is taken from there too),
 * then wherever sd_profile_locate() finds a name.
 */
static int locate_base(const char *path, const char *name, char *out, size_t len)
{
	const char *slash = strrchr(path, '/');
	int dir_len = slash ? (int)(slash - path) : 1;
	const char *dir = slash ? path : ".";

	if (name[0] != '/' && !name_is_path(name)) {
		if (name_is_clean(name) &&
		    (size_t)snprintf(out, len, "%.*s/%s.json", dir_len, dir, name) < len &&
		    !access(out, R_OK))
			return 0;
		return sd_profile_locate(name, out, len);
	}
	if (name[0] != '/') {
		char rel[PATH_MAX];

		if ((size_t)snprintf(rel, sizeof(rel), "%.*s/%s", dir_len, dir, name) >= sizeof(rel))
			return sd_fail(-ENAMETOOLONG, "profile '%s': inherits '%s': path too long",
				       path, name);
		return sd_profile_locate(rel, out, len);
	}
	return sd_profile_locate(name, out, len);
}

/* The child's fields over its base's: each cost by its key, the other
 * fields whole. Consumes @child; returns @base. */
static struct json_object *overlay(struct json_object *base, struct json_object *child)
{
	struct json_object *base_costs = NULL;

	json_object_object_get_ex(base, "costs", &base_costs);
	json_object_object_foreach(child, key, val) {
		if (!strcmp(key, "inherits"))
			continue;
		if (!strcmp(key, "costs") && base_costs &&
		    json_object_is_type(val, json_type_object)) {
			json_object_object_foreach(val, ckey, cval)
				json_object_object_add(base_costs, ckey, json_object_get(cval));
			continue;
		}
		json_object_object_add(base, key, json_object_get(val));
	}
	json_object_object_del(base, "inherits");
	json_object_put(child);
	return base;
}

/*
 * The profile at @path as one JSON object, "inherits" resolved: a what-if
 * file names a profile and the few values it changes (each with its own
 * source), as a gem5 or ZSim user changes one setting. NULL after
 * reporting the error in *@err.
 */
static struct json_object *load_root(const char *path, unsigned depth, int *err)
{
	struct json_object *root, *inherits, *base;
	char *text = NULL, base_path[PATH_MAX], format[64] = "";
	size_t n = 0;

	if ((*err = read_file(path, &text, &n)))
		return NULL;
	root = parse_json(path, text, n);
	free(text);
	if (!root) {
		*err = -EINVAL;
		return NULL;
	}
	if ((*err = check_fields(root, path)) ||
	    (*err = read_string(root, "format", format, sizeof(format), true)))
		goto fail;
	if (strcmp(format, "shootdown-profile-1")) {
		*err = sd_fail(-EINVAL, "profile '%s': format '%s' is not shootdown-profile-1", path,
			       format);
		goto fail;
	}
	if (!json_object_object_get_ex(root, "inherits", &inherits))
		return root;
	if (!json_object_is_type(inherits, json_type_string) ||
	    !*json_object_get_string(inherits)) {
		*err = sd_fail(-EINVAL, "profile '%s': \"inherits\" is not a profile's name or path",
			       path);
		goto fail;
	}
	if (depth >= PROFILE_MAX_INHERIT) {
		*err = sd_fail(-ELOOP, "profile '%s': inherits more than %u deep (a cycle?)", path,
			       PROFILE_MAX_INHERIT);
		goto fail;
	}
	if ((*err = locate_base(path, json_object_get_string(inherits), base_path,
				sizeof(base_path))))
		goto fail;
	if (!(base = load_root(base_path, depth + 1, err)))
		goto fail;
	return overlay(base, root);
fail:
	json_object_put(root);
	return NULL;
}

static int read_profile(const char *path, struct sd_model *mod, char *synthetic, size_t len)
{
	struct json_object *root, *costs;
	int err;

	if (!(root = load_root(path, 0, &err)))
		return err;
	if ((err = read_string(root, "name", mod->name, sizeof(mod->name), true)) ||
	    (err = read_topology(root, synthetic, len)) ||
	    (err = read_mechanisms(root, &mod->mechanisms)) ||
	    (err = read_features(root, mod->mechanisms, &mod->features)))
		goto out;
	if (!json_object_object_get_ex(root, "costs", &costs)) {
		err = sd_fail(-EINVAL, "profile '%s': no \"costs\"", path);
		goto out;
	}
	err = read_costs(costs, mod);
out:
	json_object_put(root);
	return err;
}

/* ---- the modelled topology ---- */

/* The last-level cache above @pu: the cache ancestor of the highest level,
 * or the package if the description has no caches. */
static unsigned llc_of(hwloc_obj_t pu)
{
	hwloc_obj_t best = NULL;

	for (hwloc_obj_t o = pu->parent; o; o = o->parent)
		if (hwloc_obj_type_is_cache(o->type) &&
		    (!best || o->attr->cache.depth > best->attr->cache.depth))
			best = o;
	if (best)
		return best->logical_index;
	for (hwloc_obj_t o = pu->parent; o; o = o->parent)
		if (o->type == HWLOC_OBJ_PACKAGE)
			return 1000000u + o->logical_index;
	return 0;
}

static unsigned ancestor_index(hwloc_obj_t pu, hwloc_obj_type_t type, unsigned dflt)
{
	for (hwloc_obj_t o = pu->parent; o; o = o->parent)
		if (o->type == type)
			return o->logical_index;
	return dflt;
}

static int place_cpus(struct sd_model *mod, const char *synthetic, unsigned nr_cpus)
{
	hwloc_topology_t topo;
	int err = 0, nr;

	uint64_t pus;

	/* Sized before hwloc builds it, which it does object by object: a
	 * few digits too many took all the memory. */
	if (!sd_synthetic_pus(synthetic, SD_SYNTHETIC_MAX_PUS, &pus) && pus > SD_SYNTHETIC_MAX_PUS)
		return sd_fail(-EINVAL, "profile '%s': topology '%s' has more than %u PUs",
			       mod->path, synthetic, SD_SYNTHETIC_MAX_PUS);
	if (hwloc_topology_init(&topo))
		return sd_fail(-ENOMEM, "profile: hwloc_topology_init failed");
	if (hwloc_topology_set_synthetic(topo, synthetic) < 0 || hwloc_topology_load(topo) < 0) {
		err = sd_fail(-EINVAL, "profile '%s': topology '%s' is not a hwloc synthetic "
			      "description", mod->path, synthetic);
		goto out;
	}
	nr = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
	if (nr <= 0 || (unsigned)nr < nr_cpus) {
		err = sd_fail(-EINVAL, "profile '%s' models %d PUs (%s); the machine has %u CPUs "
			      "(a bigger topology: sd_machine_config.model_topology)", mod->path, nr,
			      synthetic, nr_cpus);
		goto out;
	}
	mod->nr_pus = (unsigned)nr;
	mod->place = calloc(nr_cpus, sizeof(*mod->place));
	if (!mod->place) {
		err = sd_fail(-ENOMEM, "profile: no memory for %u CPU places", nr_cpus);
		goto out;
	}
	for (unsigned i = 0; i < nr_cpus; i++) {
		hwloc_obj_t pu = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PU, i);
		mod->place[i].core = ancestor_index(pu, HWLOC_OBJ_CORE, 2000000u + i);
		mod->place[i].llc = llc_of(pu);
		mod->place[i].package = ancestor_index(pu, HWLOC_OBJ_PACKAGE, 0);
	}
out:
	hwloc_topology_destroy(topo);
	return err;
}

/* ---- the costs in picoseconds ---- */

static uint64_t to_ps(double ns)
{
	return (uint64_t)llround(ns * 1000.0);
}

/* Picoseconds, so that sub-ns costs add up exactly; and the scan a
 * whole-ASID or whole-TLB invalidation makes of @tlb_entries. */
static void fill_costs_ps(struct sd_model *mod, unsigned tlb_entries)
{
	for (unsigned i = 0; i < SD_MP_NR; i++)
		mod->param_ps[i] = to_ps(mod->param_ns[i]);
	for (unsigned p = 0; p < SD_MDP_NR; p++)
		for (unsigned d = 0; d < SD_DIST_NR; d++)
			mod->dist_ps[p][d] = to_ps(mod->dist_ns[p][d]);
	mod->scan_ps = mod->param_ps[SD_MP_TLB_SCAN_ENTRY] * tlb_entries;
}

/*
 * The machine-wide locks' calendars (model.h): buckets of 32 ns over four
 * windows and 10 us more (the CPUs' spread, with room for a step past the
 * window), plus 2 us a CPU: a saturated lock's queue runs ahead of the
 * slowest clock by a hold per waiting CPU (64 CPUs trading a 200-400 ns
 * hold: 13-26 us, past a 16 us calendar at a 200 ns window, whose wrapped
 * buckets let late acquirers overlap). At most 64K buckets (1.5 MiB a
 * lock); an acquirer older than that finds nothing and goes at once.
 */
#define CAL_BUCKET_PS (32u * 1000u)
#define CAL_MAX_BUCKETS (64u * 1024u)

static int calendars_init(struct sd_model *mod, unsigned nr_cpus)
{
	uint64_t want = (4 * mod->window_ps + 10000u * 1000u + nr_cpus * 2000ull * 1000u) /
			CAL_BUCKET_PS;
	uint32_t nr = 64;

	while (nr < want && nr < CAL_MAX_BUCKETS)
		nr *= 2;
	for (unsigned k = 0; k < SD_MODEL_LOCK_KINDS; k++) {
		if (sd_model_cal_init(&mod->cal[k], nr, CAL_BUCKET_PS))
			return sd_fail(-ENOMEM, "profile: no memory for the lock calendars");
		mod->lock[k].cal = &mod->cal[k];
	}
	return 0;
}

int sd_model_load(struct sd_model *mod, const char *profile, const char *topology,
		  uint64_t window_ns, unsigned nr_cpus, unsigned tlb_entries)
{
	char synthetic[sizeof(mod->topology)];
	int err;

	memset(mod, 0, sizeof(*mod));
	sd_spin_init(&mod->interconnect.lock);
	for (unsigned i = 0; i < 2; i++)
		sd_model_line_init(&mod->lru_lines[i]);
	for (unsigned k = 0; k < SD_MODEL_LOCK_KINDS; k++)
		mod->lock[k] = (struct sd_model_lock)SD_MODEL_LOCK_INIT;
	if (!profile)
		return 0;
	if ((err = sd_profile_locate(profile, mod->path, sizeof(mod->path))) ||
	    (err = read_profile(mod->path, mod, synthetic, sizeof(synthetic))))
		return err;
	if (topology && (size_t)snprintf(synthetic, sizeof(synthetic), "%s", topology) >=
				sizeof(synthetic))
		return sd_fail(-EINVAL, "model_topology: longer than %zu characters",
			       sizeof(synthetic) - 1);
	snprintf(mod->topology, sizeof(mod->topology), "%s", synthetic);
	if ((err = place_cpus(mod, synthetic, nr_cpus)))
		return err;
	fill_costs_ps(mod, tlb_entries);
	mod->window_ps = (window_ns ? window_ns : SD_MODEL_WINDOW_DEFAULT_NS) * 1000u;
	mod->quantum_ps = mod->window_ps / 2;
	mod->seq_quantum_ps = SD_MODEL_SEQ_QUANTUM_PS;
	if ((err = calendars_init(mod, nr_cpus))) {
		sd_model_fini(mod);
		return err;
	}
	mod->peer = calloc(nr_cpus, sizeof(*mod->peer));
	if (!mod->peer) {
		sd_model_fini(mod);
		return sd_fail(-ENOMEM, "profile: no memory for %u clocks", nr_cpus);
	}
	mod->nr_clk = nr_cpus;
	mod->on = true;
	return 0;
}

void sd_model_fini(struct sd_model *mod)
{
	for (unsigned k = 0; k < SD_MODEL_LOCK_KINDS; k++) {
		sd_model_cal_fini(&mod->cal[k]);
		mod->lock[k].cal = NULL;
	}
	free(mod->place);
	mod->place = NULL;
	free(mod->peer);
	mod->peer = NULL;
	mod->nr_clk = 0;
	mod->on = false;
}

double sd_model_param_ns(const struct sd_model *mod, const char *param)
{
	const char *dot;
	int i, d;

	if ((i = find_key(param_key, SD_MP_NR, param)) >= 0)
		return mod->param_ns[i];
	dot = strchr(param, '.');
	if (dot) {
		char head[32];
		snprintf(head, sizeof(head), "%.*s", (int)(dot - param), param);
		if ((i = find_key(dist_param_key, SD_MDP_NR, head)) >= 0 &&
		    (d = find_key(dist_key, SD_DIST_NR, dot + 1)) >= 0)
			return mod->dist_ns[i][d];
	}
	return sd_fail(-1, "sd_model_cost_ns: no parameter '%s'", param), -1.0;
}
