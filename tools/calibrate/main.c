/* SPDX-License-Identifier: MIT */
/*
 * sd-calibrate: measure this machine and write two modelled-time
 * profiles (see calibrate.h); options, the topology, the two passes.
 */
#include "calibrate.h"

struct calibration cal;
char emu_profile[4200];
bool emu_profile_writing;

static const char *const group_names[] = {
	"lines", "tlb", "flush", "switch", "trap", "syscall", "ipi", "bcast", "mm",
};
#define NR_GROUPS (sizeof(group_names) / sizeof(group_names[0]))

static int (*const group_fn[NR_GROUPS])(void) = {
	group_lines, group_tlb, group_flush, group_switch, host_trap_group, kern_syscall,
	group_ipi, group_bcast, group_mm,
};

/* The groups' measurements of the emulator, run again in the second pass. */
static int (*const group_emu_fn[NR_GROUPS])(void) = {
	NULL, host_tlb, host_flush, host_switch_group, host_trap, NULL, NULL, NULL, host_mm,
};

/* ---- setup ---- */

static bool cpuinfo_flag(const char *flag)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[8192];
	bool found = false;
	size_t n = strlen(flag);

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		if (strncmp(line, "flags", 5))
			continue;
		for (char *s = strstr(line, flag); s && !found; s = strstr(s + 1, flag))
			found = s[-1] == ' ' && (s[n] == ' ' || s[n] == '\n');
		break;
	}
	fclose(f);
	return found;
}

static int topo_init(char *synthetic, size_t len)
{
	if (hwloc_topology_init(&cal.topo) || hwloc_topology_load(cal.topo)) {
		fprintf(stderr, "sd-calibrate: hwloc cannot load this machine's topology\n");
		return -1;
	}
	/* Only the PUs we may use (taskset, cpuset), as the library places
	 * its CPUs: the pair measured must be one the user allowed. */
	hwloc_bitmap_t allowed = hwloc_bitmap_alloc();

	if (allowed && !hwloc_get_cpubind(cal.topo, allowed, HWLOC_CPUBIND_THREAD) &&
	    !hwloc_bitmap_isequal(allowed, hwloc_topology_get_topology_cpuset(cal.topo)))
		hwloc_topology_restrict(cal.topo, allowed, 0);
	hwloc_bitmap_free(allowed);
	if (hwloc_topology_export_synthetic(cal.topo, synthetic, len,
		    HWLOC_TOPOLOGY_EXPORT_SYNTHETIC_FLAG_NO_ATTRS |
		    HWLOC_TOPOLOGY_EXPORT_SYNTHETIC_FLAG_IGNORE_MEMORY) < 0) {
		fprintf(stderr, "sd-calibrate: hwloc cannot describe this topology as a synthetic "
			"string (asymmetric machine?)\n");
		return -1;
	}
	cal.pu0 = hwloc_get_obj_by_type(cal.topo, HWLOC_OBJ_PU, 0);
	cal.pu1 = hwloc_get_obj_by_type(cal.topo, HWLOC_OBJ_PU, 1);
	if (!cal.pu0) {
		fprintf(stderr, "sd-calibrate: hwloc finds no PU\n");
		return -1;
	}
	cal.pair_class = cal.pu1 ? distance_class(cal.pu0, cal.pu1) : DIST_CORE;
	cal.hypervisor = cpuinfo_flag("hypervisor");
	cal.has_invlpgb = cpuinfo_flag("invlpgb");
	return 0;
}

static void watchdog(int sig)
{
	static const char msg[] = "sd-calibrate: a measurement took too long; giving up\n";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(3);
	_exit(3);
}

/* The groups --only takes, as one line: from the table itself, so the
 * help and the error can never list fewer than there are. */
static void print_groups(FILE *f)
{
	for (size_t g = 0; g < NR_GROUPS; g++)
		fprintf(f, "%s%s", g ? " " : "", group_names[g]);
	fputc('\n', f);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: sd-calibrate [-o DIR] [--only GROUP[,GROUP]] [--quick] [--print]\n"
		"Measure this machine; write host.json (the emulator's own costs) and\n"
		"host-kernel.json (the Linux kernel's) to DIR, by default $SD_PROFILE_DIR,\n"
		"else $XDG_DATA_HOME/shootdown/profiles (~/.local/share/shootdown/profiles).\n"
		"Profiles already there are replaced, the old ones kept as NAME.json.old.\n"
		"  -o DIR          write the profiles there (created if needed)\n"
		"  --only GROUPS   measure only these (others are written as 0, marked so):\n"
		"                  ");
	print_groups(f);
	fprintf(f, "  --quick         fewer repetitions (under 10 s; for tests)\n"
		"  --print         print the table of values too\n"
		"  -h, --help      this text\n");
}

static int parse_only(const char *arg, bool *want)
{
	char buf[256], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", arg);
	for (size_t g = 0; g < NR_GROUPS; g++)
		want[g] = false;
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		size_t g = 0;

		while (g < NR_GROUPS && strcmp(t, group_names[g]))
			g++;
		if (g == NR_GROUPS) {
			fprintf(stderr, "sd-calibrate: unknown group '%s' for --only; the groups: ", t);
			print_groups(stderr);
			return -1;
		}
		want[g] = true;
	}
	return 0;
}

/*
 * Measure the emulator again with modelling on, under the host profile the
 * first pass measured: each charge (a table look-up, the clock, the window
 * check, a hot line's or a lock's modelled state) is then inside the
 * costs. The IPI and broadcast groups are left to the first pass: an
 * initiator whose clock runs ahead of its target's waits at the window in
 * real time, which would be measured as the IPI's or the TLBI's cost.
 */
static int second_pass(const bool want[NR_GROUPS], const char *synthetic)
{
	char dir[] = "/tmp/sd-calibrate.XXXXXX";
	int err = 0;

	if (!mkdtemp(dir))
		return sys_fail("mkdtemp");
	emu_profile_writing = true;
	err = write_profile(&host, dir, "sd-calibrate's first pass", synthetic);
	emu_profile_writing = false;
	if (err) {
		rmdir(dir);
		return -1;
	}
	snprintf(emu_profile, sizeof(emu_profile), "%s/host.json", dir);
	for (size_t g = 0; g < NR_GROUPS && !err; g++)
		if (want[g] && group_emu_fn[g])
			err = group_emu_fn[g]();
	unlink(emu_profile);
	rmdir(dir);
	emu_profile[0] = 0;
	return err;
}

/* Where the profiles go and what load the values will carry, on the
 * terminal before the measuring starts, not only inside the files. */
static void announce(const char *dir, const char *load)
{
	double l1 = 0;

	sscanf(load, "%lf", &l1);
	printf("sd-calibrate: measuring this machine (%s); writing host.json and "
	       "host-kernel.json to %s (-o DIR for another place)\n",
	       cal.quick ? "--quick: a few seconds" : "about 25 s", dir);
	printf("sd-calibrate: 1-minute load average at start %.2f: %s\n", l1,
	       l1 >= 0.5 ? "LOADED: other work shares the PUs, so the values will be high; "
			   "measure again on a quiet machine" : "idle");
	fflush(stdout);
}

static void describe(char *out, size_t len, const char *load, double secs)
{
	char host_name[256] = "?";
	struct timespec ts;
	struct tm tm;
	char when[64];
	double l1 = 0;

	gethostname(host_name, sizeof(host_name) - 1);
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%MZ", &tm);
	sscanf(load, "%lf", &l1);
	snprintf(out, len, "%s, %u PUs%s, %s: sd-calibrate%s in %.0f s, medians over %d runs, "
		 "threads pinned with hwloc; the emulator's own costs apart from IPIs and "
		 "broadcasts measured with modelling on, under the profile a first pass "
		 "measured; load average at start %s (%s)", host_name,
		 (unsigned)hwloc_get_nbobjs_by_type(cal.topo, HWLOC_OBJ_PU),
		 cal.hypervisor ? " (a virtual machine)" : "", when, cal.quick ? " --quick" : "",
		 secs, cal.reps, load, l1 >= 0.5 ? "loaded: values may be high" : "idle");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "only", required_argument, NULL, 'O' },
		{ "quick", no_argument, NULL, 'q' },
		{ "print", no_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char dir[4096] = "", synthetic[1024], load[64] = "?", desc[1024], only[256] = "";
	bool want[NR_GROUPS], print = false;
	int c;

	for (size_t g = 0; g < NR_GROUPS; g++)
		want[g] = true;
	while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
		switch (c) {
		case 'o': snprintf(dir, sizeof(dir), "%s", optarg); break;
		case 'O':
			if (parse_only(optarg, want))
				return 2;
			snprintf(only, sizeof(only), "%s", optarg);
			break;
		case 'q': cal.quick = true; break;
		case 'p': print = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "sd-calibrate: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (!*dir && default_dir(dir, sizeof(dir)))
		return 2;
	/* The first pass measures the emulator unmodelled, whatever the
	 * caller's environment selects. */
	unsetenv("SD_PROFILE");
	unsetenv("SD_MODEL_TOPOLOGY");
	cal.reps = cal.quick ? 3 : 9;
	cal.scale = cal.quick ? 0.1 : 1;

	/* Read before we load the machine ourselves. */
	FILE *f = fopen("/proc/loadavg", "r");

	if (f) {
		if (fscanf(f, "%63[^\n]", load) != 1)
			snprintf(load, sizeof(load), "?");
		fclose(f);
	}
	if (make_dirs(dir) || topo_init(synthetic, sizeof(synthetic)))
		return 1;
	announce(dir, load);
	signal(SIGALRM, watchdog);
	alarm(cal.quick ? 60 : 180);
	srand(1);

	double t0 = now_ns();

	no_vcpu_preemption(&host);
	no_vcpu_preemption(&kern);
	no_kpti(&host);
	no_kpti(&kern);
	set(&kern, P_LRU_PAGE, 0, "not measured: the LRU's per-folio work runs inside the "
	    "kernel's page freeing with nothing a user-space timer can isolate; 0 (the LRU "
	    "lock's handoffs and line transfers are still charged)");
	for (size_t g = 0; g < NR_GROUPS; g++) {
		if (!want[g])
			continue;
		if (group_fn[g]()) {
			fprintf(stderr, "sd-calibrate: measuring %s failed; no profile written\n",
				group_names[g]);
			return 1;
		}
	}
	fill_unmeasured(&host, only);
	fill_unmeasured(&kern, only);
	if (second_pass(want, synthetic)) {
		fprintf(stderr, "sd-calibrate: the second pass failed; no profile written\n");
		return 1;
	}
	alarm(0);
	describe(desc, sizeof(desc), load, (now_ns() - t0) / 1e9);
	if (print)
		print_table();
	if (write_profile(&host, dir, desc, synthetic) || write_profile(&kern, dir, desc, synthetic))
		return 1;
	hwloc_topology_destroy(cal.topo);
	return 0;
}
