// SPDX-License-Identifier: MIT
//
// A TLB hit, against the floor of any direct-mapped lookup.
//
//   baseline/array_probe/dependent:{0,1}  bare 64-entry direct-mapped {tag, payload} probe
//   tlb_lookup/l1/cpus:1                  sd_tlb_probe() L1 hits, dependent chain
//   tlb_lookup/sd_access/cpus:1           public sd_access() hits, dependent chain
//
// --sd_set=all only.
#include "common.hpp"

#include <algorithm>
#include <memory>
#include <new>
#include <numeric>
#include <random>
#include <vector>

namespace sdbench {
namespace {

constexpr uint64_t kProbeBatch = 1024;                // probes per call of probe_loop()

// Entries of the bare direct-mapped array: the same as the default L1 TLB.
constexpr unsigned kProbeEntries = 64;

// One entry of the bare array: two 64-bit words, as an entry of the TLB.
struct ProbeEntry {
	std::atomic<uint64_t> tag;
	std::atomic<uint64_t> payload;
};

// A tag shaped as the TLB shapes its own (VPN, ASID 0, a valid bit), so the
// compare costs what the TLB's does.
constexpr uint64_t probe_tag(uint64_t key)
{
	return key << 17 | 1;
}

// The bare array: the same entry size and the same two fields a direct-mapped
// probe reads (array pointer and mask), so what is left between this and
// tlb_lookup/l1 is what the library's probe adds (a call, the owner check).
struct ProbeArray {
	ProbeEntry *e;
	uint64_t mask;
	explicit ProbeArray(uint64_t base)
		: e(new (std::align_val_t(64)) ProbeEntry[kProbeEntries]), mask(kProbeEntries - 1)
	{
		for (uint64_t i = 0; i < kProbeEntries; i++) {
			uint64_t key = base + i;
			// A payload with bit 63 clear.
			e[key & mask].tag.store(probe_tag(key), std::memory_order_relaxed);
			e[key & mask].payload.store((key << 8) | 1, std::memory_order_relaxed);
		}
	}
	~ProbeArray() { operator delete[](e, std::align_val_t(64)); }
	ProbeArray(const ProbeArray &) = delete;
	ProbeArray &operator=(const ProbeArray &) = delete;

	// One probe: what a direct-mapped lookup is when nothing else is added.
	bool probe(uint64_t key, uint64_t *payload) const
	{
		ProbeEntry *x = &e[key & mask];

		if (x->tag.load(std::memory_order_relaxed) != probe_tag(key))
			return false;
		*payload = x->payload.load(std::memory_order_relaxed);
		return true;
	}
};

// The loop the bare array and the TLB share: @n probes, key k = base +
// order[k % 64]. With Dependent, each key also adds (previous payload >> 63),
// which is 0 (no payload has bit 63 set) but which neither the compiler nor
// the CPU knows until the previous payload load has completed, so each probe
// waits on the last. Out of line, so both variants compile to the same
// stand-alone loop. Return: misses (0 when every probe hits).
template <bool Dependent, class Probe>
__attribute__((noinline)) uint64_t probe_loop(uint64_t base, const uint32_t *order, uint64_t n,
					      Probe probe)
{
	uint64_t dep = 0, misses = 0;

	for (uint64_t k = 0; k < n; k++) {
		uint64_t key = base + order[k & (kProbeEntries - 1)];
		uint64_t payload;
		if (Dependent)
			key += dep;
		if (__builtin_expect(probe(key, &payload), 1))
			dep = payload >> 63;
		else
			misses++;
	}
	return misses;
}

// A fixed permutation of 0..63: the order the probe loops visit the entries.
const uint32_t *probe_order()
{
	static const std::vector<uint32_t> order = [] {
		std::vector<uint32_t> o(kProbeEntries);
		std::iota(o.begin(), o.end(), 0u);
		std::shuffle(o.begin(), o.end(), std::mt19937(42));
		return o;
	}();
	return order.data();
}

// A bare 64-entry direct-mapped array of {tag, payload}: the floor for a
// TLB hit. Time per probe.
void BM_array_probe(State &st)
{
	const int dependent = (int)st.range(0);
	Pin pin(0);
	ProbeArray a(kRegionVpn);
	auto probe = [&a](uint64_t key, uint64_t *payload) { return a.probe(key, payload); };
	uint64_t misses = 0;

	for (uint64_t n; st.KeepRunningBatch(n = next_batch(st, kProbeBatch));) {
		misses += dependent ? probe_loop<true>(kRegionVpn, probe_order(), n, probe)
				    : probe_loop<false>(kRegionVpn, probe_order(), n, probe);
	}
	st.counters["misses"] = (double)misses;
	st.counters["oversubscribed"] = 0;
}

// sd_tlb_probe() hits, each waiting on the last: the same loop as
// baseline/array_probe/dependent:1 over the CPU's real L1 TLB.
void BM_tlb_lookup_l1(State &st)
{
	Single s(1, SD_ORACLE_OFF, kProbeEntries);
	uint64_t misses = 0;

	if (!s.ok(st))
		return;
	const sd_cpu *cpu = s.cpu();
	auto probe = [cpu](uint64_t vpn, uint64_t *pfn) {
		return sd_tlb_probe(cpu, vpn << SD_PAGE_SHIFT, pfn) == 1;
	};
	ModelSpan model(s.m(), s.cpu());
	for (uint64_t n; st.KeepRunningBatch(n = next_batch(st, kProbeBatch));)
		misses += probe_loop<true>(kRegionVpn, probe_order(), n, probe);
	model.report(st, (double)st.iterations());
	st.counters["misses"] = (double)misses;
	st.counters["oversubscribed"] = oversubscribed(s.m());
}

// The public access path on an attached CPU, oracle off: sd_access() hits on
// 64 pages (one per L1 slot), each address waiting on the last frame number.
void BM_tlb_lookup_sd_access(State &st)
{
	Single s(1, SD_ORACLE_OFF, kProbeEntries);
	const uint32_t *order = probe_order();
	uint64_t pfn = 0, k = 0, errors = 0;

	if (!s.ok(st))
		return;
	sd_stats before = cpu_stats(s.m(), 0);
	ModelSpan model(s.m(), s.cpu());
	for (uint64_t n; st.KeepRunningBatch(n = next_batch(st, kProbeBatch));) {
		for (uint64_t i = 0; i < n; i++, k++) {
			// pfn < 2^24, so pfn >> 63 is 0, but only once the last access returned.
			uint64_t va = kRegion + ((uint64_t)order[k % kProbeEntries] << SD_PAGE_SHIFT) +
				      ((pfn >> 63) << SD_PAGE_SHIFT);
			errors += sd_access(s.cpu(), va, SD_READ, &pfn) != 0;
		}
	}
	model.report(st, (double)st.iterations());
	sd_stats d = delta(cpu_stats(s.m(), 0), before);
	double lookups = (double)d.counter[SD_STAT_TLB_HIT] + (double)d.counter[SD_STAT_TLB_MISS];
	st.counters["errors"] = (double)errors;
	st.counters["tlb_misses"] = (double)d.counter[SD_STAT_TLB_MISS];
	st.counters["l1_hit_fraction"] = lookups ? (double)d.counter[SD_STAT_TLB_L1_HIT] / lookups : 0;
	st.counters["oversubscribed"] = oversubscribed(s.m());
}

void register_tlb_lookup(Set set)
{
	if (set != Set::all)
		return;
	reg("baseline/array_probe", BM_array_probe)->ArgName("dependent")->Arg(0)->Arg(1);
	reg("tlb_lookup/l1/cpus:1", BM_tlb_lookup_l1);
	reg("tlb_lookup/sd_access/cpus:1", BM_tlb_lookup_sd_access);
}

} // namespace

SD_BENCH_FAMILY(tlb_lookup, 30, register_tlb_lookup);

} // namespace sdbench
