// SPDX-License-Identifier: MIT
//
//   memory/per_cpu   bytes per emulated CPU at the default geometry (no time):
//                    what sd_machine_info() reports, cross-checked against the
//                    resident-set growth of creating 64- and 128-CPU machines
//
// --sd_set=all only. bench/memory.c (shootdown-memory) is the per-strategy,
// per-CPU-count table.
#include "common.hpp"

#include <unistd.h>

#include <cstdio>

namespace sdbench {
namespace {

long rss_bytes()
{
	long size = 0, resident = 0;
	FILE *f = std::fopen("/proc/self/statm", "r");

	if (!f)
		return -1;
	if (std::fscanf(f, "%ld %ld", &size, &resident) != 2)
		resident = -1;
	std::fclose(f);
	return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

// Resident bytes added by creating a default-geometry machine of @cpus CPUs.
long rss_delta(unsigned cpus, int *err)
{
	sd_machine_config cfg = make_config(cpus, SD_ORACLE_OFF);
	sd_machine *m = nullptr;
	long before = rss_bytes();

	*err = sd_machine_create(&cfg, &m);
	long after = rss_bytes();
	if (!*err)
		sd_machine_destroy(m);
	return after - before;
}

// Bytes per emulated CPU at the default geometry: what the machine reports
// (its per-CPU area as mapped, its per-CPU pointers and its share of the
// strategy's arrays) and the resident-set growth of creating 64- and
// 128-CPU machines as a cross-check. Time: one machine creation.
void BM_memory_per_cpu(State &st)
{
	struct sd_machine_info info{};
	int err = 0;

	for (auto _ : st) {
		sd_machine *m = nullptr;
		if ((err = sd_machine_create(nullptr, &m)))
			break;
		sd_machine_info(m, &info);
		sd_machine_destroy(m);
	}
	if (err) {
		fail(st, "sd_machine_create", err);
		return;
	}
	int e64 = 0, e128 = 0;
	long d64 = rss_delta(64, &e64);
	long d128 = rss_delta(128, &e128);
	if (e64 || e128) {
		fail(st, "sd_machine_create(64/128 CPUs)", e64 ? e64 : e128);
		return;
	}
	st.counters["bytes_per_cpu"] = (double)info.bytes_per_cpu;
	st.counters["rss_bytes_per_cpu_64"] = (double)d64 / 64.0;
	st.counters["rss_marginal_bytes_per_cpu"] = (double)(d128 - d64) / 64.0;
	st.counters["tlb_entries"] =
		(double)info.tlb_l1_entries + (double)info.tlb_sets * (double)info.tlb_ways;
	st.counters["oversubscribed"] = 0;
}

void register_memory(Set set)
{
	if (set == Set::all)
		reg("memory/per_cpu", BM_memory_per_cpu);
}

} // namespace

SD_BENCH_FAMILY(memory, 40, register_memory);

} // namespace sdbench
