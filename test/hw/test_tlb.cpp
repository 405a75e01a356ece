// SPDX-License-Identifier: MIT
// The per-CPU software TLB (lib/hw/tlb.h) in one thread: geometry and
// layout, L1 hits, L2 hits with promotion, ASID tags, round-robin
// replacement, every invalidation kind and path, removed counts, the
// invalidation sequence, the walk cache and sd_tlb_drop. Each check is
// against the test's own model of what must be cached, not the code's.
#include "common.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

extern "C" {
#include "hw/tlb.h"
}

namespace {

struct Geometry {
	unsigned l1, sets, ways;
};

std::ostream &operator<<(std::ostream &os, const Geometry &g)
{
	return os << "l1_" << g.l1 << "_sets_" << g.sets << "_ways_" << g.ways;
}

constexpr size_t kGuard = 256;
constexpr unsigned char kGuardByte = 0xa5;

// A TLB over its own storage, with guard bytes after the storage that
// nothing may write.
struct Tlb {
	sd_tlb t;
	unsigned char *storage = nullptr;
	size_t size = 0;
	Geometry g;

	explicit Tlb(Geometry geo) : g(geo)
	{
		size = sd_tlb_storage_size(g.l1, g.sets, g.ways);
		size_t alloc = (size + kGuard + SD_CACHELINE - 1) / SD_CACHELINE * SD_CACHELINE;
		storage = static_cast<unsigned char *>(std::aligned_alloc(SD_CACHELINE, alloc));
		// Garbage first: init must clear every entry itself.
		std::memset(storage, 0xff, size);
		std::memset(storage + size, kGuardByte, alloc - size);
		std::memset(static_cast<void *>(&t), 0xff, sizeof(t));
		sd_tlb_init(&t, storage, g.l1, g.sets, g.ways);
	}
	~Tlb() { std::free(storage); }
	Tlb(const Tlb &) = delete;
	Tlb &operator=(const Tlb &) = delete;

	bool guard_intact() const
	{
		for (size_t i = 0; i < kGuard; i++)
			if (storage[size + i] != kGuardByte)
				return false;
		return true;
	}

	uint64_t seq() const { return sd_tlb_invalidations(&t); }

	bool fill(uint64_t vpn, uint16_t asid, uint64_t pte, uint32_t owner = 0,
		  void *leaf = nullptr)
	{
		uint64_t snap = sd_tlb_fill_begin(&t);
		return sd_tlb_fill_commit(&t, snap, vpn, asid, pte, owner, leaf);
	}

	// The access path's lookup: L1, then L2 (which promotes).
	bool lookup(uint64_t vpn, uint16_t asid, sd_tlb_hit *hit, bool checked = true)
	{
		return sd_tlb_lookup_l1(&t, vpn, asid, checked, hit) ||
		       sd_tlb_lookup_l2(&t, vpn, asid, checked, hit);
	}

	// Direct inspection of the arrays (no promotion, no side effect).
	uint64_t l1_tag(uint64_t i) const { return t.l1[i].tag.load(std::memory_order_relaxed); }
	uint64_t l2_tag(uint64_t i) const { return t.l2[i].tag.load(std::memory_order_relaxed); }
	size_t l2_size() const { return (size_t)g.sets * g.ways; }

	bool in_l1(uint64_t vpn, uint16_t asid) const
	{
		return l1_tag(vpn & (g.l1 - 1)) == sd_tlb_tag(vpn, asid);
	}
	unsigned in_l2(uint64_t vpn, uint16_t asid) const
	{
		unsigned n = 0;
		size_t set = (size_t)(vpn & (g.sets - 1)) * g.ways;
		for (unsigned w = 0; w < g.ways; w++)
			n += l2_tag(set + w) == sd_tlb_tag(vpn, asid);
		return n;
	}
	bool anywhere(uint64_t vpn, uint16_t asid) const
	{
		return in_l1(vpn, asid) || in_l2(vpn, asid);
	}
	unsigned valid_entries() const
	{
		unsigned n = 0;
		for (unsigned i = 0; i < g.l1; i++)
			n += l1_tag(i) != 0;
		for (size_t i = 0; i < l2_size(); i++)
			n += l2_tag(i) != 0;
		return n;
	}
	unsigned valid_wc() const
	{
		unsigned n = 0;
		for (auto &w : t.wc)
			n += w.tag.load(std::memory_order_relaxed) != 0;
		return n;
	}
	unsigned invalidate(sd_tlb_inval_kind kind, uint16_t asid = 0, uint64_t vpn = 0,
			    uint64_t nr = 0, bool leaf_only = false)
	{
		sd_tlb_inval req{};
		req.kind = kind;
		req.asid = asid;
		req.leaf_only = leaf_only;
		req.vpn = vpn;
		req.nr = nr;
		return sd_tlb_invalidate(&t, &req);
	}
};

uint64_t pte_for(uint64_t vpn, uint16_t asid, uint32_t version = 1)
{
	// Distinct per (vpn, asid) so a hit on the wrong entry shows.
	return sd_pte_make((vpn * 7 + asid) & SD_PFN_MAX,
			   SD_PTE_PRESENT | SD_PTE_VMA | SD_PTE_READ, version);
}

// A fake leaf-table pointer for the walk cache (never dereferenced).
void *fake_leaf(uint64_t region)
{
	return reinterpret_cast<void *>((uintptr_t)(region + 1) << 12);
}

class TlbGeom : public ::testing::TestWithParam<Geometry> {
protected:
	Geometry g = GetParam();
};

TEST_P(TlbGeom, InitLaysOutAndClearsStorage)
{
	Tlb t(g);
	size_t entries = (size_t)g.l1 + (size_t)g.sets * g.ways;
	// Entries, owner ids and the round-robin cursors must fit.
	EXPECT_GE(t.size, entries * sizeof(sd_tlb_entry) + entries * sizeof(uint32_t) + g.sets);
	EXPECT_EQ((void *)t.t.l1, (void *)t.storage);
	EXPECT_EQ((void *)t.t.l2, (void *)(t.storage + g.l1 * sizeof(sd_tlb_entry)));
	EXPECT_EQ(g.l1 - 1, t.t.l1_mask);
	EXPECT_EQ(g.sets - 1, t.t.set_mask);
	EXPECT_EQ(g.ways, t.t.ways);
	EXPECT_EQ(0u, t.seq());
	EXPECT_EQ(0u, t.valid_entries());
	EXPECT_EQ(0u, t.valid_wc());
	sd_tlb_hit hit;
	for (uint64_t v = 0; v < 2 * (uint64_t)g.sets; v++)
		EXPECT_FALSE(t.lookup(v, 0, &hit));
	EXPECT_TRUE(t.guard_intact());
}

TEST_P(TlbGeom, FillEveryWayStaysInsideStorage)
{
	Tlb t(g);
	// More fills than entries, through every set and L1 slot and all of the
	// 8-bit round-robin cursor's range.
	for (uint64_t v = 0; v < (uint64_t)g.sets * g.ways * 40; v++)
		ASSERT_TRUE(t.fill(v, (uint16_t)(v % 3), pte_for(v, 1), (uint32_t)v, fake_leaf(v >> 9)));
	EXPECT_EQ(g.l1 + t.l2_size(), t.valid_entries());
	EXPECT_TRUE(t.guard_intact());
	EXPECT_EQ(0u, t.seq()) << "a fill must not count as an invalidation";
}

TEST_P(TlbGeom, FillThenL1Hit)
{
	Tlb t(g);
	const uint64_t vpn = 0x12345;
	const uint16_t asid = 7;
	ASSERT_TRUE(t.fill(vpn, asid, pte_for(vpn, asid), 42));
	sd_tlb_hit hit{};
	ASSERT_TRUE(sd_tlb_lookup_l1(&t.t, vpn, asid, true, &hit));
	EXPECT_TRUE(hit.l1);
	EXPECT_EQ(pte_for(vpn, asid), hit.pte);
	EXPECT_EQ(42u, hit.owner);
	// Unchecked lookups do not report an owner.
	ASSERT_TRUE(sd_tlb_lookup_l1(&t.t, vpn, asid, false, &hit));
	EXPECT_EQ(0u, hit.owner);
	// The neighbours are not hits.
	EXPECT_FALSE(t.lookup(vpn + 1, asid, &hit));
	EXPECT_FALSE(t.lookup(vpn - 1, asid, &hit));
	EXPECT_FALSE(t.lookup(vpn + g.l1, asid, &hit));
	EXPECT_FALSE(t.lookup(vpn + g.sets, asid, &hit));
}

TEST_P(TlbGeom, L1ConflictEvictsThenL2HitPromotes)
{
	Tlb t(g);
	const uint16_t asid = 3;
	const uint64_t a = 1000, b = a + g.l1;   // same L1 slot
	ASSERT_TRUE(t.fill(a, asid, pte_for(a, asid), 11));
	ASSERT_TRUE(t.fill(b, asid, pte_for(b, asid), 22));

	sd_tlb_hit hit{};
	EXPECT_FALSE(sd_tlb_lookup_l1(&t.t, a, asid, true, &hit)) << "b must have evicted a from L1";
	EXPECT_TRUE(t.in_l1(b, asid));
	EXPECT_EQ(1u, t.in_l2(a, asid));

	ASSERT_TRUE(sd_tlb_lookup_l2(&t.t, a, asid, true, &hit));
	EXPECT_FALSE(hit.l1);
	EXPECT_EQ(pte_for(a, asid), hit.pte);
	EXPECT_EQ(11u, hit.owner);
	// Promoted: the next lookup is an L1 hit with the same payload and owner.
	ASSERT_TRUE(sd_tlb_lookup_l1(&t.t, a, asid, true, &hit));
	EXPECT_TRUE(hit.l1);
	EXPECT_EQ(pte_for(a, asid), hit.pte);
	EXPECT_EQ(11u, hit.owner);
	EXPECT_FALSE(t.in_l1(b, asid));
	EXPECT_EQ(1u, t.in_l2(b, asid)) << "promotion must not disturb L2";
	EXPECT_EQ(1u, t.in_l2(a, asid));
	EXPECT_EQ(0u, t.seq());
}

TEST_P(TlbGeom, AsidIsolation)
{
	Tlb t(g);
	const uint64_t vpn = 77;
	sd_tlb_hit hit{};
	ASSERT_TRUE(t.fill(vpn, 1, pte_for(vpn, 1), 1));
	EXPECT_FALSE(t.lookup(vpn, 2, &hit));
	EXPECT_FALSE(t.lookup(vpn, 0, &hit));
	EXPECT_FALSE(t.lookup(vpn, 0xffff, &hit));
	EXPECT_FALSE(t.anywhere(vpn, 2)) << "a miss must not create an entry";
	ASSERT_TRUE(t.fill(vpn, 2, pte_for(vpn, 2), 2));
	for (int round = 0; round < 3; round++) {
		ASSERT_TRUE(t.lookup(vpn, 1, &hit));
		EXPECT_EQ(pte_for(vpn, 1), hit.pte);
		EXPECT_EQ(1u, hit.owner);
		ASSERT_TRUE(t.lookup(vpn, 2, &hit));
		EXPECT_EQ(pte_for(vpn, 2), hit.pte);
		EXPECT_EQ(2u, hit.owner);
	}
	// The largest ASID must not bleed into the vpn bits of the tag.
	ASSERT_TRUE(t.fill(vpn, 0xffff, pte_for(vpn, 0xffff), 3));
	EXPECT_FALSE(t.lookup(vpn + 1, 0xffff, &hit));
	EXPECT_FALSE(t.lookup(vpn, 0x7fff, &hit));
	ASSERT_TRUE(t.lookup(vpn, 0xffff, &hit));
	EXPECT_EQ(pte_for(vpn, 0xffff), hit.pte);
}

TEST_P(TlbGeom, RoundRobinReplacementInOneSet)
{
	Tlb t(g);
	const uint16_t asid = 5;
	const uint64_t base = 3 % g.sets;
	auto vpn = [&](unsigned k) { return base + (uint64_t)k * g.sets; };  // all one set

	for (unsigned k = 0; k < g.ways; k++)
		ASSERT_TRUE(t.fill(vpn(k), asid, pte_for(vpn(k), asid)));
	for (unsigned k = 0; k < g.ways; k++)
		EXPECT_EQ(1u, t.in_l2(vpn(k), asid)) << "way " << k << " lost before the set was full";

	// Each further fill replaces the oldest entry of the set, in order,
	// through two full turns of the cursor.
	for (unsigned k = g.ways; k < 3 * g.ways; k++) {
		ASSERT_TRUE(t.fill(vpn(k), asid, pte_for(vpn(k), asid)));
		EXPECT_EQ(1u, t.in_l2(vpn(k), asid));
		EXPECT_FALSE(t.anywhere(vpn(k - g.ways), asid))
			<< "fill " << k << " should have evicted " << vpn(k - g.ways);
		for (unsigned j = k - g.ways + 1; j <= k; j++)
			EXPECT_EQ(1u, t.in_l2(vpn(j), asid)) << "fill " << k << " evicted " << j;
		sd_tlb_hit hit{};
		EXPECT_FALSE(t.lookup(vpn(k - g.ways), asid, &hit));
	}
	// Other sets are untouched.
	unsigned in_other_sets = 0;
	for (size_t i = 0; i < t.l2_size(); i++)
		if (i / g.ways != base)
			in_other_sets += t.l2_tag(i) != 0;
	EXPECT_EQ(0u, in_other_sets);
}

TEST_P(TlbGeom, InvalidateAll)
{
	Tlb t(g);
	unsigned filled = 0;
	for (uint64_t v = 0; v < 3 * (uint64_t)g.l1; v++)
		filled += t.fill(v * 5, (uint16_t)(v % 4), pte_for(v * 5, (uint16_t)(v % 4)), 0,
				 fake_leaf(v));
	unsigned before = t.valid_entries();
	ASSERT_GT(before, 0u);
	ASSERT_GT(t.valid_wc(), 0u);
	EXPECT_EQ(before, t.invalidate(SD_TLB_INVAL_ALL));
	EXPECT_EQ(0u, t.valid_entries());
	EXPECT_EQ(0u, t.valid_wc());
	EXPECT_EQ(1u, t.seq());
	sd_tlb_hit hit;
	for (uint64_t v = 0; v < 3 * (uint64_t)g.l1; v++)
		EXPECT_FALSE(t.lookup(v * 5, (uint16_t)(v % 4), &hit));
	// Nothing left: removes nothing, still counts.
	EXPECT_EQ(0u, t.invalidate(SD_TLB_INVAL_ALL));
	EXPECT_EQ(2u, t.seq());
	// ALL ignores leaf_only: the walk cache always goes.
	ASSERT_TRUE(t.fill(9, 1, pte_for(9, 1), 0, fake_leaf(0)));
	EXPECT_EQ(2u, t.invalidate(SD_TLB_INVAL_ALL, 0, 0, 0, true));
	EXPECT_EQ(0u, t.valid_wc());
	EXPECT_EQ(3u, t.seq());
}

TEST_P(TlbGeom, InvalidateAsid)
{
	Tlb t(g);
	// Two ASIDs, interleaved so they share sets and L1 slots.
	for (uint64_t v = 0; v < g.l1 + 2; v++) {
		ASSERT_TRUE(t.fill(v, 1, pte_for(v, 1), 1, fake_leaf(v)));
		ASSERT_TRUE(t.fill(v + 1, 2, pte_for(v + 1, 2), 2, fake_leaf(v + 1 + 100)));
		ASSERT_EQ(fake_leaf(v + 1 + 100), sd_tlb_walk_cache_lookup(&t.t, v + 1, 2));
	}
	unsigned asid1 = 0, other = 0;
	for (unsigned i = 0; i < g.l1; i++)
		(sd_tlb_tag_asid(t.l1_tag(i)) == 1 ? asid1 : other) += t.l1_tag(i) != 0;
	for (size_t i = 0; i < t.l2_size(); i++)
		(sd_tlb_tag_asid(t.l2_tag(i)) == 1 ? asid1 : other) += t.l2_tag(i) != 0;
	ASSERT_GT(asid1, 0u);
	ASSERT_GT(other, 0u);

	EXPECT_EQ(asid1, t.invalidate(SD_TLB_INVAL_ASID, 1));
	EXPECT_EQ(1u, t.seq());
	EXPECT_EQ(other, t.valid_entries());
	for (uint64_t v = 0; v < g.l1 + 2; v++) {
		EXPECT_FALSE(t.anywhere(v, 1)) << v;
		EXPECT_EQ(nullptr, sd_tlb_walk_cache_lookup(&t.t, v << 9, 1));
	}
	// ASID 2 keeps its walk-cache entry (every fill above was in region 0).
	EXPECT_NE(nullptr, sd_tlb_walk_cache_lookup(&t.t, 0, 2));
	unsigned wc_left = t.valid_wc();
	EXPECT_GT(wc_left, 0u);
	for (auto &w : t.t.wc) {
		uint64_t tag = w.tag.load(std::memory_order_relaxed);
		if (tag) {
			EXPECT_EQ(2u, sd_tlb_tag_asid(tag));
		}
	}
	// An ASID with nothing cached: nothing removed, still one sequence step.
	EXPECT_EQ(0u, t.invalidate(SD_TLB_INVAL_ASID, 9));
	EXPECT_EQ(other, t.valid_entries());
	EXPECT_EQ(2u, t.seq());
}

// Range invalidation against a model: fill a window of pages of two ASIDs,
// invalidate [vpn, vpn + nr) of one, and check that exactly the entries the
// range covers are gone (and counted), and that every other entry, in every
// slot, is bit for bit what it was.
void check_range(Geometry g, uint64_t start, uint64_t nr, bool leaf_only)
{
	SCOPED_TRACE(::testing::Message() << "range [" << start << ", +" << nr << ") leaf_only "
					  << leaf_only);
	Tlb t(g);
	const uint16_t asid = 4, other = 5;
	// Fill from a bit before to a bit after, in both ASIDs, with walk-cache
	// entries for every 2 MiB region touched.
	uint64_t lo = start > 40 ? start - 40 : 0, hi = start + nr + 40;
	// The other ASID and the pages around the range first, the range last,
	// so that even the tiny TLB holds part of the range.
	for (uint64_t v = lo; v < hi; v++)
		if (v % 3 == 0) {
			ASSERT_TRUE(t.fill(v, other, pte_for(v, other), 2, fake_leaf(v >> 9)));
		}
	for (uint64_t v = lo; v < hi; v++)
		if (v < start || v >= start + nr) {
			ASSERT_TRUE(t.fill(v, asid, pte_for(v, asid), 1, fake_leaf(v >> 9)));
		}
	for (uint64_t v = start; v < start + nr; v++)
		ASSERT_TRUE(t.fill(v, asid, pte_for(v, asid), 1, fake_leaf(v >> 9)));

	std::vector<uint64_t> l1(g.l1), l2(t.l2_size());
	unsigned expect_removed = 0;
	auto covered = [&](uint64_t tag) {
		return tag && sd_tlb_tag_asid(tag) == asid && sd_tlb_tag_vpn(tag) >= start &&
		       sd_tlb_tag_vpn(tag) < start + nr;
	};
	for (unsigned i = 0; i < g.l1; i++) {
		l1[i] = t.l1_tag(i);
		expect_removed += covered(l1[i]);
	}
	for (size_t i = 0; i < l2.size(); i++) {
		l2[i] = t.l2_tag(i);
		expect_removed += covered(l2[i]);
	}
	std::vector<uint64_t> wc(SD_TLB_WC_ENTRIES);
	for (unsigned i = 0; i < SD_TLB_WC_ENTRIES; i++)
		wc[i] = t.t.wc[i].tag.load(std::memory_order_relaxed);
	ASSERT_GT(expect_removed, 0u) << "test setup: nothing of the range is cached";

	uint64_t seq0 = t.seq();
	EXPECT_EQ(expect_removed, t.invalidate(SD_TLB_INVAL_RANGE, asid, start, nr, leaf_only));
	EXPECT_EQ(seq0 + 1, t.seq());

	for (unsigned i = 0; i < g.l1; i++)
		EXPECT_EQ(covered(l1[i]) ? 0 : l1[i], t.l1_tag(i)) << "L1 slot " << i;
	for (size_t i = 0; i < l2.size(); i++)
		EXPECT_EQ(covered(l2[i]) ? 0 : l2[i], t.l2_tag(i)) << "L2 entry " << i;
	sd_tlb_hit hit;
	for (uint64_t v = start; v < start + nr; v++)
		EXPECT_FALSE(t.lookup(v, asid, &hit)) << "vpn " << v;

	// Walk cache: leaf-only keeps it all; otherwise the ASID's entries for
	// the regions the range meets go, and nothing else.
	uint64_t first_r = start >> 9, last_r = (start + nr - 1) >> 9;
	unsigned wc_expect_gone = 0;
	for (unsigned i = 0; i < SD_TLB_WC_ENTRIES; i++) {
		uint64_t tag = wc[i];
		bool gone = !leaf_only && tag && sd_tlb_tag_asid(tag) == asid &&
			    sd_tlb_tag_vpn(tag) >= first_r && sd_tlb_tag_vpn(tag) <= last_r;
		wc_expect_gone += gone;
		EXPECT_EQ(gone ? 0 : tag, t.t.wc[i].tag.load(std::memory_order_relaxed))
			<< "walk-cache slot " << i;
	}
	if (!leaf_only) {
		EXPECT_GT(wc_expect_gone, 0u) << "test setup: no walk-cache entry in range";
	}
	for (uint64_t r = first_r; r <= last_r; r++) {
		void *leaf = sd_tlb_walk_cache_lookup(&t.t, r << 9, asid);
		EXPECT_EQ(leaf_only ? fake_leaf(r) : nullptr, leaf) << "region " << r;
	}
}

TEST_P(TlbGeom, InvalidateRangeSizesAndBoundaries)
{
	// Up to 128 pages take the per-page path, 129 and more the scan.
	const uint64_t sizes[] = {1, 2, 15, 16, 17, 33, 127, 128, 129, 200};
	// Starts in the middle of a set range, at the last set (the range wraps
	// to set 0 and to L1 slot 0), at the last page of a 2 MiB region (the
	// range crosses into the next walk-cache region), and at vpn 0.
	const uint64_t starts[] = {0, 100, (uint64_t)g.sets - 1, (uint64_t)g.sets * 3 - 2,
				   511, 1024 - 3, (UINT64_C(1) << 30) + 510};
	for (bool leaf_only : {true, false})
		for (uint64_t s : starts)
			for (uint64_t nr : sizes)
				check_range(g, s, nr, leaf_only);
}

TEST_P(TlbGeom, RandomInvalidationsAgainstModel)
{
	std::mt19937_64 rng(sdtest::seed());
	Tlb t(g);
	uint64_t seq = 0;
	for (int step = 0; step < 300; step++) {
		// A random working set.
		for (int i = 0; i < 40; i++) {
			uint64_t v = rng() % 4096;
			uint16_t a = (uint16_t)(rng() % 3 + 1);
			ASSERT_TRUE(t.fill(v, a, pte_for(v, a), a, fake_leaf(v >> 9)));
		}
		sd_tlb_inval req{};
		req.kind = (sd_tlb_inval_kind)(rng() % 3);
		req.asid = (uint16_t)(rng() % 3 + 1);
		req.vpn = rng() % 4096;
		req.nr = 1 + rng() % 40;
		req.leaf_only = rng() & 1;
		auto covered = [&](uint64_t tag, unsigned shift) {
			if (!tag)
				return false;
			if (req.kind == SD_TLB_INVAL_ALL)
				return true;
			if (sd_tlb_tag_asid(tag) != req.asid)
				return false;
			if (req.kind == SD_TLB_INVAL_ASID)
				return true;
			uint64_t v = sd_tlb_tag_vpn(tag);
			return v >= (req.vpn >> shift) && v <= ((req.vpn + req.nr - 1) >> shift);
		};
		std::vector<uint64_t> l1(g.l1), l2(t.l2_size()), wc(SD_TLB_WC_ENTRIES);
		unsigned expect = 0;
		for (unsigned i = 0; i < g.l1; i++)
			expect += covered(l1[i] = t.l1_tag(i), 0);
		for (size_t i = 0; i < l2.size(); i++)
			expect += covered(l2[i] = t.l2_tag(i), 0);
		for (unsigned i = 0; i < SD_TLB_WC_ENTRIES; i++)
			wc[i] = t.t.wc[i].tag.load(std::memory_order_relaxed);

		ASSERT_EQ(expect, sd_tlb_invalidate(&t.t, &req))
			<< "step " << step << " kind " << req.kind << " asid " << req.asid
			<< " vpn " << req.vpn << " nr " << req.nr;
		ASSERT_EQ(++seq, t.seq());
		for (unsigned i = 0; i < g.l1; i++)
			ASSERT_EQ(covered(l1[i], 0) ? 0 : l1[i], t.l1_tag(i)) << "step " << step;
		for (size_t i = 0; i < l2.size(); i++)
			ASSERT_EQ(covered(l2[i], 0) ? 0 : l2[i], t.l2_tag(i)) << "step " << step;
		bool keep_wc = req.kind == SD_TLB_INVAL_RANGE && req.leaf_only;
		for (unsigned i = 0; i < SD_TLB_WC_ENTRIES; i++)
			ASSERT_EQ(!keep_wc && covered(wc[i], 9) ? 0 : wc[i],
				  t.t.wc[i].tag.load(std::memory_order_relaxed))
				<< "step " << step << " wc " << i;
	}
}

TEST_P(TlbGeom, SequenceCountsEveryInvalidationOnce)
{
	Tlb t(g);
	sd_tlb_hit hit;
	EXPECT_EQ(0u, t.seq());
	t.fill(1, 1, pte_for(1, 1));
	t.lookup(1, 1, &hit);
	t.lookup(2, 1, &hit);
	sd_tlb_drop(&t.t, 1, 1);
	EXPECT_EQ(0u, t.seq()) << "fill, lookup and drop are not invalidations";
	t.invalidate(SD_TLB_INVAL_RANGE, 1, 0, 1);
	EXPECT_EQ(1u, t.seq());
	t.invalidate(SD_TLB_INVAL_RANGE, 1, 0, 100);   // scan path
	EXPECT_EQ(2u, t.seq());
	t.invalidate(SD_TLB_INVAL_RANGE, 1, 0, 16, true);
	EXPECT_EQ(3u, t.seq());
	t.invalidate(SD_TLB_INVAL_ASID, 1);
	EXPECT_EQ(4u, t.seq());
	t.invalidate(SD_TLB_INVAL_ALL);
	EXPECT_EQ(5u, t.seq());
	EXPECT_EQ(5u, t.t.seq.load(std::memory_order_relaxed));
}

TEST_P(TlbGeom, DropRemovesOnlyThatPageFromBothLevels)
{
	Tlb t(g);
	const uint64_t a = 500, b = a + g.l1;     // b shares a's L1 slot
	ASSERT_TRUE(t.fill(a, 1, pte_for(a, 1), 0, fake_leaf(a >> 9)));
	ASSERT_TRUE(t.fill(b, 1, pte_for(b, 1)));
	ASSERT_TRUE(t.fill(a + 1, 2, pte_for(a + 1, 2)));
	ASSERT_TRUE(t.fill(a + 2, 1, pte_for(a + 2, 1)));
	sd_tlb_hit hit;
	ASSERT_TRUE(t.lookup(a, 1, &hit));         // promoted back into L1
	ASSERT_TRUE(t.in_l1(a, 1));
	if (g.ways >= 4 && g.sets > g.l1) {
		// A second copy in another way (a refill after a permission fault).
		ASSERT_TRUE(t.fill(a, 1, pte_for(a, 1)));
		ASSERT_EQ(2u, t.in_l2(a, 1));
	}

	sd_tlb_drop(&t.t, a, 1);
	EXPECT_FALSE(t.anywhere(a, 1)) << "every copy of the page must go";
	EXPECT_FALSE(t.lookup(a, 1, &hit));
	EXPECT_TRUE(t.lookup(b, 1, &hit));
	EXPECT_TRUE(t.lookup(a + 1, 2, &hit));
	EXPECT_TRUE(t.lookup(a + 2, 1, &hit));
	EXPECT_EQ(fake_leaf(a >> 9), sd_tlb_walk_cache_lookup(&t.t, a, 1)) << "drop is leaf-only";
	EXPECT_EQ(0u, t.seq());
	// Dropping a page that is not cached changes nothing.
	unsigned before = t.valid_entries();
	sd_tlb_drop(&t.t, a + 3, 1);
	sd_tlb_drop(&t.t, b, 2);
	EXPECT_EQ(before, t.valid_entries());
}

TEST_P(TlbGeom, WalkCacheByRegionAndAsid)
{
	Tlb t(g);
	const uint64_t region = 37;
	ASSERT_TRUE(t.fill(region << 9 | 5, 1, pte_for(region << 9 | 5, 1), 0, fake_leaf(region)));
	// Any page of the 2 MiB region finds the leaf; other regions and ASIDs do not.
	EXPECT_EQ(fake_leaf(region), sd_tlb_walk_cache_lookup(&t.t, region << 9, 1));
	EXPECT_EQ(fake_leaf(region), sd_tlb_walk_cache_lookup(&t.t, region << 9 | 511, 1));
	EXPECT_EQ(nullptr, sd_tlb_walk_cache_lookup(&t.t, (region + 1) << 9, 1));
	EXPECT_EQ(nullptr, sd_tlb_walk_cache_lookup(&t.t, (region - 1) << 9 | 511, 1));
	EXPECT_EQ(nullptr, sd_tlb_walk_cache_lookup(&t.t, region << 9, 2));
	// Same slot, other region: overwritten in place.
	uint64_t alias = region + SD_TLB_WC_ENTRIES;
	ASSERT_TRUE(t.fill(alias << 9, 1, pte_for(alias << 9, 1), 0, fake_leaf(alias)));
	EXPECT_EQ(fake_leaf(alias), sd_tlb_walk_cache_lookup(&t.t, alias << 9, 1));
	EXPECT_EQ(nullptr, sd_tlb_walk_cache_lookup(&t.t, region << 9, 1));
	// A fill without a leaf leaves the walk cache alone.
	ASSERT_TRUE(t.fill(alias << 9 | 7, 1, pte_for(alias << 9 | 7, 1)));
	EXPECT_EQ(fake_leaf(alias), sd_tlb_walk_cache_lookup(&t.t, alias << 9, 1));
}

// One-thread version of the fill guard: an invalidation between the start
// of a walk and its commit makes the commit fail and leave nothing behind.
TEST_P(TlbGeom, CommitAfterInvalidationInsertsNothing)
{
	Tlb t(g);
	const uint64_t vpn = 4242;
	uint64_t snap = sd_tlb_fill_begin(&t.t);
	// The invalidation need not cover the page: the guard is per TLB.
	t.invalidate(SD_TLB_INVAL_RANGE, 1, vpn + 1000, 1);
	EXPECT_FALSE(sd_tlb_fill_commit(&t.t, snap, vpn, 1, pte_for(vpn, 1), 0, fake_leaf(vpn >> 9)));
	EXPECT_EQ(0u, t.valid_entries());
	EXPECT_EQ(nullptr, sd_tlb_walk_cache_lookup(&t.t, vpn, 1));
	// With a fresh snapshot it goes in.
	EXPECT_TRUE(t.fill(vpn, 1, pte_for(vpn, 1), 0, fake_leaf(vpn >> 9)));
	EXPECT_EQ(2u, t.valid_entries());
}

INSTANTIATE_TEST_SUITE_P(Geometries, TlbGeom,
			 ::testing::Values(Geometry{64, 256, 8}, Geometry{4, 4, 2}),
			 [](const ::testing::TestParamInfo<Geometry> &i) {
				 std::ostringstream os;
				 os << i.param;
				 return os.str();
			 });

} // namespace
