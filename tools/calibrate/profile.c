/* SPDX-License-Identifier: MIT */
/*
 * Writing the profiles: every parameter with its value and the
 * source string saying how it was measured, JSON through json-c.
 */
#include "calibrate.h"

#define P_KEY(id, key, what) key,
static const char *const param_key[P_NR] = { SD_MODEL_PARAM_LIST(P_KEY) };
static const char *const dparam_key[D_NR] = { SD_MODEL_DIST_PARAM_LIST(P_KEY) };
#undef P_KEY
const char *const dist_key[] = SD_MODEL_DIST_KEYS;
#define NR_DIST ((int)(sizeof(dist_key) / sizeof(dist_key[0])))

/* The profile's "mechanisms", in enum sd_mechanism's bit order: a
 * mechanism is named only once a group measured its costs here. */
static const char *const mech_key[NR_MECH] = { "ipi", "tlbi_broadcast", "invlpgb" };

struct profile host = { .name = "host" };
struct profile kern = { .name = "host-kernel" };

/* ---- writing the profiles ---- */

static json_object *cost_json(const struct cost *c)
{
	json_object *o = json_object_new_object();
	char num[32];

	snprintf(num, sizeof(num), "%.1f", c->ns);
	json_object_object_add(o, "ns", json_object_new_double_s(c->ns, num));
	json_object_object_add(o, "source", json_object_new_string(c->src));
	return o;
}

/* Both profiles describe this host as it runs, so no host preemption is
 * added on top: whatever preempted the measuring threads (a hypervisor
 * under this host included) is already in the medians. */
void no_vcpu_preemption(struct profile *p)
{
	static const char why[] = "0: the profile is this host as measured; preemptions of its "
				  "threads, by a hypervisor under it or not, are already in the "
				  "measured costs";

	set(p, P_VCPU_PREEMPT_INTERVAL, 0, "%s", why);
	set(p, P_VCPU_PREEMPT, 0, "%s", why);
}

/* KPTI's trampoline is an arm64 kernel's cost; neither profile states the
 * kpti feature, so it is never charged. */
void no_kpti(struct profile *p)
{
	set(p, P_KPTI_TRAMPOLINE, 0, "not applicable: 0, and the profile states no kpti feature "
	    "(the emulator has no kernel to isolate; this host's kernel's entry costs, KPTI or "
	    "not, are in syscall_entry and page_fault_entry as measured)");
}
void fill_unmeasured(struct profile *p, const char *only)
{
	for (int k = 0; k < P_NR; k++)
		if (!p->c[k].set)
			set(p, (enum param)k, 0, "not measured: sd-calibrate --only %s skipped it; 0",
			    only);
	for (int k = 0; k < D_NR; k++)
		for (int d = 0; d < NR_DIST; d++)
			if (!p->d[k][d].set)
				dset(p, (enum dparam)k, d, 0, "not measured: sd-calibrate --only %s "
				     "skipped it; 0", only);
}

/* A profile already at @path is the user's: say so and keep it beside
 * the new one (@path.old), never replace it in silence. */
static int keep_old(const char *path)
{
	char old[4200];

	if (access(path, F_OK))
		return 0;
	snprintf(old, sizeof(old), "%s.old", path);
	if (rename(path, old)) {
		fprintf(stderr, "sd-calibrate: cannot keep the old %s as %s: %s; not replacing it\n",
			path, old, strerror(errno));
		return -1;
	}
	printf("sd-calibrate: replacing %s (the old one is now %s)\n", path, old);
	return 0;
}

static json_object *feature_json(bool present, const char *source)
{
	json_object *f = json_object_new_object();

	json_object_object_add(f, "present", json_object_new_boolean(present));
	json_object_object_add(f, "source", json_object_new_string(source));
	return f;
}
int write_profile(const struct profile *p, const char *dir, const char *desc,
			 const char *synthetic)
{
	char path[4096], tmp[4200];
	json_object *root = json_object_new_object(), *topo = json_object_new_object();
	json_object *costs = json_object_new_object();

	json_object_object_add(root, "format", json_object_new_string("shootdown-profile-1"));
	json_object_object_add(root, "name", json_object_new_string(p->name));
	json_object_object_add(root, "description", json_object_new_string(desc));
	json_object_object_add(topo, "synthetic", json_object_new_string(synthetic));
	json_object_object_add(topo, "source", json_object_new_string("sd-calibrate: "
		"hwloc_topology_export_synthetic(NO_ATTRS | IGNORE_MEMORY), as "
		"lstopo-no-graphics --of synthetic --export-synthetic-flags 10"));
	json_object_object_add(root, "topology", topo);
	json_object *mech = json_object_new_object();
	for (int k = 0; k < NR_MECH; k++)
		if (p->mech_source[k])
			json_object_object_add(mech, mech_key[k],
					       json_object_new_string(p->mech_source[k]));
	json_object_object_add(root, "mechanisms", mech);
	if (p->mech_source[1]) {
		/* A profile with TLBI broadcasts states its CPU features: the
		 * emulator's broadcast has range ops and no KPTI. */
		json_object *feat = json_object_new_object();
		json_object_object_add(feat, "range_tlbi", feature_json(true,
			"emulated: libshootdown's broadcast encodes range ops (lib/arch/tlbi_range.c)"));
		json_object_object_add(feat, "kpti", feature_json(false,
			"emulated: the emulator has no kernel mapping to isolate"));
		json_object_object_add(feat, "repeat_tlbi", feature_json(false,
			"emulated: the emulator's TLBIs have no erratum to work around"));
		json_object_object_add(root, "features", feat);
	}
	for (int k = 0; k < P_NR; k++)
		json_object_object_add(costs, param_key[k], cost_json(&p->c[k]));
	for (int k = 0; k < D_NR; k++) {
		json_object *t = json_object_new_object();

		for (int d = 0; d < NR_DIST; d++)
			json_object_object_add(t, dist_key[d], cost_json(&p->d[k][d]));
		json_object_object_add(costs, dparam_key[k], t);
	}
	json_object_object_add(root, "costs", costs);
	snprintf(path, sizeof(path), "%s/%s.json", dir, p->name);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if (!emu_profile_writing && keep_old(path))
		return -1;
	/* Written under a temporary name, then renamed: never half a profile. */
	int err = json_object_to_file_ext(tmp, root, JSON_C_TO_STRING_PRETTY |
					  JSON_C_TO_STRING_NOSLASHESCAPE);
	json_object_put(root);
	if (err || rename(tmp, path)) {
		fprintf(stderr, "sd-calibrate: cannot write %s: %s\n", path,
			err ? json_util_get_last_err() : strerror(errno));
		unlink(tmp);
		return -1;
	}
	if (!emu_profile_writing)
		printf("sd-calibrate: wrote %s\n", path);
	return 0;
}
void print_table(void)
{
	printf("%-26s %12s %12s\n", "parameter (ns)", "host", "host-kernel");
	for (int k = 0; k < P_NR; k++)
		printf("%-26s %12.1f %12.1f\n", param_key[k], host.c[k].ns, kern.c[k].ns);
	for (int k = 0; k < D_NR; k++)
		for (int d = 0; d < NR_DIST; d++) {
			char name[64];

			snprintf(name, sizeof(name), "%s.%s", dparam_key[k], dist_key[d]);
			printf("%-26s %12.1f %12.1f\n", name, host.d[k][d].ns, kern.d[k][d].ns);
		}
}

/* mkdir -p */
int make_dirs(const char *dir)
{
	char buf[4096];

	if (snprintf(buf, sizeof(buf), "%s", dir) >= (int)sizeof(buf)) {
		fprintf(stderr, "sd-calibrate: directory name too long\n");
		return -1;
	}
	for (char *s = buf + 1; ; s++) {
		if (*s != '/' && *s)
			continue;
		char c = *s;

		*s = 0;
		if (mkdir(buf, 0777) && errno != EEXIST) {
			fprintf(stderr, "sd-calibrate: cannot create %s: %s\n", buf, strerror(errno));
			return -1;
		}
		*s = c;
		if (!c)
			return 0;
	}
}
int default_dir(char *out, size_t len)
{
	const char *e = getenv("SD_PROFILE_DIR"), *xdg = getenv("XDG_DATA_HOME");
	const char *home = getenv("HOME");

	if (e && *e)
		snprintf(out, len, "%s", e);
	else if (xdg && *xdg)
		snprintf(out, len, "%s/shootdown/profiles", xdg);
	else if (home && *home)
		snprintf(out, len, "%s/.local/share/shootdown/profiles", home);
	else {
		fprintf(stderr, "sd-calibrate: neither SD_PROFILE_DIR, XDG_DATA_HOME nor HOME "
			"is set: give -o DIR\n");
		return -1;
	}
	return 0;
}
