// SPDX-License-Identifier: MIT
//
// shootdown-bench: every libshootdown workload in one Google Benchmark
// executable; its names are a contract the scripts rely on (README,
// "Benchmarks"). Public API only (<shootdown/...>), linked against the
// shared library.
//
// Names are <workload>/<strategy>/cpus:<N>[/<arg>:<value>], and
// <workload>/<strategy>/lru:<global|percpu>/cpus:<N> for the workloads that
// vary the machine's LRU setting (tlb_flush2_*); the machine's own limits
// are baseline/<what>. All times are wall-clock: real time, except
// remote:refilled and trap_dispatch, which time themselves (manual time);
// counters are snake_case. Every benchmark that builds a machine reports
// `oversubscribed` (1 when it has more emulated CPUs than PUs).
//
// The machines these run on move their vCPUs between a near and a far
// placement, so absolute times drift up to 5x between runs: compare the
// benchmarks of one run with each other (scripts/bench-ratios does that,
// repeats, and takes medians), never absolute times across runs.
//
// The workload families, one file each, in the order they run (each file's
// head lists its benchmarks; bench/README.md is the same index):
//   baseline.cpp           baseline/{cacheline_roundtrip,signal_roundtrip,membarrier}
//   flush_page.cpp         flush_page/*, mprotect_page/*: one page, two CPUs
//   tlb_lookup.cpp         baseline/array_probe, tlb_lookup/*: a TLB hit
//   memory_per_cpu.cpp     memory/per_cpu
//   trap_dispatch.cpp      trap_dispatch/*: arm64 EL0 MRS emulation without the hook lock
//   mprotect_threaded.cpp  mprotect_threaded/*: arm64 "skip tlbi broadcast"
//   process_churn.cpp      process_churn/*: the same patch's short-lived processes
//   range_flush.cpp        range_flush/*: arm64 range TLBI decomposition
//   scale.cpp              scale/*: oversubscribed, oracle checked
//   context_switch.cpp     context_switch/*: x86/mm lazy mm_cpumask (hackbench shape)
//   forked_worker.cpp      forked_worker/*: the same patch, a migrating worker
//   tlb_flush2.cpp         tlb_flush2_{threads,processes}/*: the AMD INVLPGB series
//   tlb_flush_file.cpp     tlb_flush{1,3}_{threads,processes}/*: will-it-scale's file-backed twins
//   native.cpp             the `native` twins on this machine's kernel
// Shared helpers and the registration mechanism (SD_BENCH_FAMILY) are in
// common.hpp.
//
// --sd_set=patches registers each reproduced patch's workloads at the patch's
// own CPU counts, for modelled runs on its machine's profile.
// --sd_set=main registers instead the comparison run's matrix (scripts/compare):
// every workload against every strategy that applies at --sd_cpus (default
// 1, 2, PUs, 2x and 4x PUs), natives and baselines included. --sd_oracle=checked
// makes every workload machine check for stale translations (`violations`).
// --sd_profile=NAME gives every workload machine modelled time (model_ns,
// model_slowdown, model_window_waits; bench/README.md, "Modelled time").
// `shootdown-bench --sd_help` lists these flags.
#include "common.hpp"

#include <limits.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

extern char **environ;

namespace sdbench {
namespace {

// The machine, for the top of a report: hwloc's view, the CPU model, the
// kernel, and whether this process may pin threads.
void print_machine()
{
	sd_machine *m = nullptr;
	struct sd_machine_info info;
	sd_machine_config c = SD_MACHINE_CONFIG_INIT;
	char model[256] = "?";

	c.nr_cpus = 1;
	if (FILE *f = fopen("/proc/cpuinfo", "r")) {
		char line[512];
		while (fgets(line, sizeof(line), f))
			if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
				snprintf(model, sizeof(model), "%s", strchr(line, ':') + 2);
				model[strcspn(model, "\n")] = 0;
				break;
			}
		fclose(f);
	}
	struct utsname u;
	uname(&u);
	if (sd_machine_create(&c, &m) || sd_machine_info(m, &info)) {
		printf("machine: %s\n", sd_last_error());
		return;
	}
	// Pinning works if a CPU attaches pinned.
	sd_cpu *cpu = nullptr;
	int pinned = !sd_cpu_attach(m, 0, &cpu) && sd_machine_info(m, &info) == 0 && info.all_pinned;
	if (cpu)
		sd_cpu_detach(cpu);
	printf("machine: %u package(s), %u core(s), %u PU(s), %u NUMA node(s) (hwloc%s)\n",
	       info.nr_packages, info.nr_cores, info.nr_pus, info.nr_numa_nodes,
	       info.synthetic ? ", synthetic SD_TOPOLOGY" : "");
	struct sd_machine_pus pus = SD_MACHINE_PUS_INIT;
	if (!info.synthetic && !sd_machine_pus(m, &pus))
		printf("pus: %s of the host's %u (this process's affinity mask and cpuset; "
		       "every emulated and native thread is placed on these)\n",
		       pus.allowed, pus.nr_host_pus);
	printf("cpu: %s\n", model);
	printf("kernel: %s %s %s\n", u.sysname, u.release, u.machine);
	printf("pinning: %s\n", pinned ? "yes (emulated CPUs are pinned to PUs)"
				     : "NO (CPUs float; results are noisier)");
	sd_machine_destroy(m);
}

// Which PUs the run uses and why, on stderr and in the JSON's context.
void announce_pus()
{
	sd_machine_config c = SD_MACHINE_CONFIG_INIT;
	struct sd_machine_info info;
	struct sd_machine_pus pus = SD_MACHINE_PUS_INIT;
	sd_machine *m = nullptr;
	char line[256];

	c.nr_cpus = 1;
	if (sd_machine_create(&c, &m) || sd_machine_info(m, &info) || sd_machine_pus(m, &pus)) {
		sd_machine_destroy(m);
		return;
	}
	sd_machine_destroy(m);
	if (info.synthetic)
		snprintf(line, sizeof(line), "none: synthetic topology (SD_TOPOLOGY), threads unpinned");
	else
		snprintf(line, sizeof(line), "%s of the host's %u (affinity mask and cpuset)",
			 pus.allowed, pus.nr_host_pus);
	fprintf(stderr, "shootdown-bench: PUs %s\n", line);
	benchmark::AddCustomContext("pus", line);
}

// 1, 2, every PU, 2x and 4x PUs oversubscribed; sorted, once each.
std::vector<unsigned> default_cpus()
{
	unsigned p = native::nr_pus();
	std::vector<unsigned> v = { 1, 2, p, 2 * p, 4 * p };
	std::sort(v.begin(), v.end());
	v.erase(std::unique(v.begin(), v.end()), v.end());
	return v;
}

void usage(FILE *f)
{
	fprintf(f,
		"shootdown-bench's own flags (the rest go to Google Benchmark):\n"
		"  --sd_set=all|main|patches  all: every workload and variant (default);\n"
		"                          main: the comparison run's matrix (scripts/compare);\n"
		"                          patches: each reproduced patch's workloads at its own\n"
		"                          CPU counts (up to 32, 36, 64), for --sd_profile runs\n"
		"  --sd_cpus=N,N,...       CPU counts of the main set (default 1,2,PUs,2xPUs,4xPUs)\n"
		"  --sd_oracle=checked     run every workload machine with the oracle checking;\n"
		"                          each then reports `violations`\n"
		"  --sd_trap_reads=N       ID register reads per thread in trap_dispatch (10^6)\n"
		"  --sd_iterations=N       run every benchmark exactly N iterations instead of\n"
		"                          as many as fill --benchmark_min_time: the same work\n"
		"                          in every run, for modelled time (trap_dispatch keeps\n"
		"                          its own 2; a workload whose batch does not split\n"
		"                          rounds N up: mprotect_threaded to pairs, process_churn\n"
		"                          to a child a CPU, context_switch to whole hackbench\n"
		"                          runs)\n"
		"  --sd_machine            print the machine (hwloc, CPU, kernel, pinning) and exit\n"
		"  --sd_profile=NAME|PATH  modelled time: every workload machine gets this machine\n"
		"                          profile (a name as sd_profile_locate() finds it, or a\n"
		"                          .json path) and reports model_ns, model_slowdown and\n"
		"                          model_window_waits; \"host\" runs sd-calibrate if there\n"
		"                          is no host profile yet, or an older release's. Shipped:\n"
		"                          ampere-emag-32, thunderx2-64-vm (arm64: TLBI broadcast,\n"
		"                          IPIs), milan-36 (x86: IPIs, INVLPGB); sd-calibrate\n"
		"                          writes host and host-kernel\n"
		"  --sd_model_topology=STR the modelled topology (hwloc synthetic string) instead\n"
		"                          of the profile's, e.g. 'pack:2 core:32 pu:1'\n"
		"  --sd_model=strict|lax   modelled time's mode (default strict, or lax if\n"
		"                          SD_MODEL_LAX=1): strict runs one CPU at a time in\n"
		"                          modelled-time order, lax runs them at once within a\n"
		"                          window\n"
		"  --sd_model_window=NS    lax mode's synchronisation window in modelled ns\n"
		"                          (default 2000; strict mode has none)\n"
		"  --sd_any_mechanism      run a strategy on a profile that lacks its mechanism\n"
		"                          (broadcast on milan-36, gbcast on an arm64 profile),\n"
		"                          at the profile's costs for it: a what-if, labelled\n"
		"                          on every such row (counter mechanism_missing);\n"
		"                          without it those rows are refused with the reason\n");
}

// Take our flags out of argv; false on a bad one.
bool parse_options(int *argc, char **argv)
{
	int out = 1;
	g_opt.cpus = default_cpus();
	for (int i = 1; i < *argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--sd_set=main")) {
			g_opt.main_set = true;
			g_opt.patches_set = false;
		} else if (!strcmp(a, "--sd_set=all")) {
			g_opt.main_set = false;
			g_opt.patches_set = false;
		} else if (!strcmp(a, "--sd_set=patches")) {
			g_opt.main_set = false;
			g_opt.patches_set = true;
		} else if (!strncmp(a, "--sd_cpus=", 10)) {
			g_opt.cpus.clear();
			for (const char *p = a + 10; *p;) {
				char *end;
				unsigned long n = strtoul(p, &end, 10);
				if (end == p || n == 0 || n > 4096 || (*end && *end != ','))
					return false;
				g_opt.cpus.push_back((unsigned)n);
				p = *end ? end + 1 : end;
			}
			if (g_opt.cpus.empty())
				return false;
		} else if (!strcmp(a, "--sd_oracle=checked")) {
			g_opt.oracle = true;
		} else if (!strcmp(a, "--sd_oracle=off")) {
			g_opt.oracle = false;
		} else if (!strncmp(a, "--sd_trap_reads=", 16)) {
			char *end;
			g_opt.trap_reads = strtoull(a + 16, &end, 10);
			if (*end || !g_opt.trap_reads)
				return false;
		} else if (!strncmp(a, "--sd_iterations=", 16)) {
			char *end;
			g_opt.iterations = strtoull(a + 16, &end, 10);
			if (*end || !g_opt.iterations || g_opt.iterations > 1000000000ull)
				return false;
			native::exact_iterations = true;
		} else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			// Ours first; Google Benchmark then prints its own and exits.
			usage(stdout);
			argv[out++] = argv[i];
		} else if (!strcmp(a, "--sd_machine")) {
			g_opt.print_machine = true;
		} else if (!strncmp(a, "--sd_profile=", 13)) {
			g_opt.profile = a + 13;
			if (g_opt.profile.empty())
				return false;
		} else if (!strncmp(a, "--sd_model_topology=", 20)) {
			g_opt.model_topology = a + 20;
			if (g_opt.model_topology.empty())
				return false;
		} else if (!strcmp(a, "--sd_model=strict")) {
			g_opt.model_flags = SD_MACHINE_MODEL_STRICT;
		} else if (!strcmp(a, "--sd_model=lax")) {
			g_opt.model_flags = SD_MACHINE_MODEL_LAX;
		} else if (!strcmp(a, "--sd_any_mechanism")) {
			g_opt.any_mechanism = true;
		} else if (!strncmp(a, "--sd_model_window=", 18)) {
			char *end;
			g_opt.model_window_ns = strtoull(a + 18, &end, 10);
			if (*end || end == a + 18 || !g_opt.model_window_ns ||
			    g_opt.model_window_ns > 1000000000ull)
				return false;
		} else if (!strncmp(a, "--sd_", 5)) {
			return false;       // --sd_help included: usage() follows
		} else {
			argv[out++] = argv[i];
		}
	}
	*argc = out;
	argv[out] = nullptr;
	if ((!g_opt.model_topology.empty() || g_opt.model_window_ns || g_opt.model_flags ||
	     g_opt.any_mechanism) && g_opt.profile.empty()) {
		fprintf(stderr, "shootdown-bench: --sd_model_topology, --sd_model, "
				"--sd_model_window and --sd_any_mechanism need --sd_profile\n");
		return false;
	}
	if (g_opt.any_mechanism)
		g_opt.model_flags |= SD_MACHINE_ANY_MECHANISM;
	return true;
}

bool executable(const std::string &path)
{
	struct stat sb;
	return !stat(path.c_str(), &sb) && S_ISREG(sb.st_mode) && !access(path.c_str(), X_OK);
}

// sd-calibrate: next to this executable in the build tree (tools/meson.build
// builds it as tools/sd-calibrate; tools/calibrate/sd-calibrate is looked at
// too), else on PATH; "" if none.
std::string find_calibrator()
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n > 0) {
		self[n] = 0;
		std::string dir(self);
		dir.erase(dir.find_last_of('/') + 1);
		for (const char *rel : { "../tools/sd-calibrate", "../tools/calibrate/sd-calibrate" }) {
			std::string p = dir + rel;
			if (executable(p))
				return p;
		}
	}
	if (const char *path = getenv("PATH")) {
		for (const char *d = path; *d;) {
			size_t len = strcspn(d, ":");
			std::string p = std::string(d, len) + "/sd-calibrate";
			if (len && executable(p))
				return p;
			d += len + (d[len] == ':');
		}
	}
	return "";
}

// Does the profile load (a 1-CPU machine with it, created and destroyed)?
// The reason is in sd_last_error() if not.
bool profile_loads()
{
	// `none` needs no mechanism: the profile loads whatever it has.
	sd_machine_config cfg = make_config(1, SD_ORACLE_OFF, "none", SD_LRU_PERCPU);
	sd_machine *m = nullptr;

	if (sd_machine_create(&cfg, &m))
		return false;
	sd_machine_destroy(m);
	return true;
}

// --sd_profile: check it can be found and loaded before any benchmark runs.
// "host" with no host profile yet, or one an older sd-calibrate wrote (a
// parameter missing), runs the calibrator once, which writes it
// ($SD_PROFILE_DIR, else the user's profiles directory). False after saying
// why on stderr.
bool locate_profile()
{
	char path[PATH_MAX];
	const char *why = "no 'host' profile yet";

	if (g_opt.profile.empty())
		return true;
	if (!sd_profile_locate(g_opt.profile.c_str(), path, sizeof(path))) {
		if (profile_loads())
			return true;
		if (g_opt.profile != "host" || !strstr(sd_last_error(), "older release")) {
			fprintf(stderr, "shootdown-bench: --sd_profile=%s: %s\n",
				g_opt.profile.c_str(), sd_last_error());
			return false;
		}
		why = "the 'host' profile is from an older release";
	} else if (g_opt.profile != "host") {
		fprintf(stderr, "shootdown-bench: --sd_profile=%s: %s\n", g_opt.profile.c_str(),
			sd_last_error());
		return false;
	}
	const std::string cal = find_calibrator();
	if (cal.empty()) {
		fprintf(stderr, "shootdown-bench: no 'host' profile (%s), and no sd-calibrate next to "
				"this executable (../tools/calibrate/) or on PATH to write one\n",
			sd_last_error());
		return false;
	}
	fprintf(stderr, "shootdown-bench: %s; running sd-calibrate (about 25 s)\n", why);
	fflush(stderr);
	pid_t pid;
	char *args[] = { const_cast<char *>(cal.c_str()), nullptr };
	int status = 0;
	int err = posix_spawn(&pid, cal.c_str(), nullptr, nullptr, args, environ);
	if (err) {
		fprintf(stderr, "shootdown-bench: cannot run %s: %s\n", cal.c_str(), strerror(err));
		return false;
	}
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			fprintf(stderr, "shootdown-bench: waiting for %s: %s\n", cal.c_str(),
				strerror(errno));
			return false;
		}
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "shootdown-bench: %s failed (%s %d); no 'host' profile\n", cal.c_str(),
			WIFEXITED(status) ? "exit status" : "signal",
			WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
		return false;
	}
	if (!sd_profile_locate("host", path, sizeof(path))) {
		if (profile_loads())
			return true;
		fprintf(stderr, "shootdown-bench: the new 'host' profile does not load: %s\n",
			sd_last_error());
		return false;
	}
	// $SD_PROFILE_DIR is where sd-calibrate wrote, but not where
	// sd_profile_locate() looks (that is SD_PROFILE_PATH): use the file.
	const char *dir = getenv("SD_PROFILE_DIR");
	if (dir && *dir && !access((std::string(dir) + "/host.json").c_str(), R_OK)) {
		g_opt.profile = std::string(dir) + "/host.json";
		return true;
	}
	fprintf(stderr, "shootdown-bench: sd-calibrate ran but the 'host' profile is still not "
			"found: %s\n", sd_last_error());
	return false;
}

} // namespace
} // namespace sdbench

int main(int argc, char **argv)
{
	using namespace sdbench;

	// Progress (and a JSON report on stdout) reaches a pipe as each line
	// is done, not in blocks: scripts/compare shows it as it comes.
	setvbuf(stdout, nullptr, _IOLBF, 0);
	native::nr_pus();       // the allowed PUs, read before anything pins

	if (!parse_options(&argc, argv)) {
		usage(stderr);
		return 2;
	}
	if (g_opt.print_machine) {
		print_machine();
		return 0;
	}
	if (!locate_profile())
		return 1;
	announce_pus();
	register_families(g_opt.patches_set ? Set::patches
			  : g_opt.main_set ? Set::main : Set::all);
	benchmark::Initialize(&argc, argv);
	if (benchmark::ReportUnrecognizedArguments(argc, argv))
		return 1;
	benchmark::RunSpecifiedBenchmarks();
	benchmark::Shutdown();
	return 0;
}
