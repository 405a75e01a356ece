// SPDX-License-Identifier: MIT
// The radix page table (lib/mm/pgtable.h): allocation and lockless walks at
// the level boundaries, unlinking of emptied tables (exactly the empty ones
// in the range, never a non-empty sibling), teardown, and the deferred free
// that keeps an unlinked table alive for a walker until it passes a
// quiescent state (invariant 4 of docs/invariants.md).
#include "common.hpp"

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include <urcu-qsbr.h>

extern "C" {
#include "mm/pgtable.h"
}

namespace {

struct Tree {
	sd_pt *pgd = sd_pt_alloc();
	~Tree()
	{
		if (pgd)
			sd_pt_free_tree(pgd, [](uint64_t, void *) {}, nullptr);
	}
};

uint64_t ld(const std::atomic<uint64_t> &x) { return x.load(std::memory_order_acquire); }
void st(std::atomic<uint64_t> &x, uint64_t v) { x.store(v, std::memory_order_release); }

sd_pt *child(sd_pt *pt, uint64_t vpn, unsigned level)
{
	return reinterpret_cast<sd_pt *>((uintptr_t)ld(pt->e[sd_pt_index(vpn, level)]));
}

// Every table below @pt (not counting it), by level, through the test's own walk.
void collect(sd_pt *pt, unsigned level, std::set<sd_pt *> &out)
{
	if (level == 0)
		return;
	for (unsigned i = 0; i < SD_PT_ENTRIES; i++) {
		uint64_t v = ld(pt->e[i]);
		if (!v)
			continue;
		sd_pt *c = reinterpret_cast<sd_pt *>((uintptr_t)v);
		out.insert(c);
		collect(c, level - 1, out);
	}
}

std::set<sd_pt *> tables(sd_pt *pgd)
{
	std::set<sd_pt *> s;
	collect(pgd, SD_PT_LEVELS - 1, s);
	return s;
}

// Every table below @pt with the vpn span it covers and whether it is empty.
struct Span {
	uint64_t first, pages;
	bool empty;
};

void collect_spans(sd_pt *pt, unsigned level, uint64_t first, std::vector<Span> &out)
{
	for (unsigned i = 0; i < SD_PT_ENTRIES; i++) {
		uint64_t v = ld(pt->e[i]);
		if (!v || level == 0)
			continue;
		sd_pt *c = reinterpret_cast<sd_pt *>((uintptr_t)v);
		uint64_t cfirst = first + ((uint64_t)i << (SD_PT_SHIFT * level));
		bool empty = true;
		for (unsigned j = 0; j < SD_PT_ENTRIES && empty; j++)
			empty = !ld(c->e[j]);
		out.push_back({cfirst, UINT64_C(1) << (SD_PT_SHIFT * level), empty});
		collect_spans(c, level - 1, cfirst, out);
	}
}

// The tables a walk of @vpn passes through below the pgd: {pud, pmd, leaf}.
std::vector<sd_pt *> path(sd_pt *pgd, uint64_t vpn)
{
	std::vector<sd_pt *> p;
	sd_pt *pt = pgd;
	for (unsigned level = SD_PT_LEVELS - 1; level > 0 && pt; level--) {
		pt = child(pt, vpn, level);
		p.push_back(pt);
	}
	return p;
}

void set_pte(sd_pt *pgd, uint64_t vpn, uint64_t pte)
{
	sd_pt *leaf = sd_pt_walk_leaf(pgd, vpn);
	ASSERT_NE(nullptr, leaf) << "vpn " << vpn;
	st(leaf->e[vpn & (SD_PT_ENTRIES - 1)], pte);
}

uint64_t pte_of(uint64_t vpn)
{
	return sd_pte_make((vpn & 0xffff) + 1, SD_PTE_VMA | SD_PTE_PRESENT | SD_PTE_READ,
			   (uint32_t)(vpn >> 16) + 1);
}

void free_list(sd_pt_freelist &fl)
{
	for (size_t i = 0; i < fl.n; i++)
		sd_pt_free(fl.tables[i]);
	free(fl.tables);
	fl = sd_pt_freelist{};
}

const uint64_t kVpnMax = (UINT64_C(1) << 36) - 1;

TEST(Pgtable, IndexSplitsVpnNineBitsPerLevel)
{
	const uint64_t vpn = UINT64_C(0x123456789);  // 36 bits
	EXPECT_EQ(0x189u, sd_pt_index(vpn, 0));
	EXPECT_EQ(0x0b3u, sd_pt_index(vpn, 1));
	EXPECT_EQ(0x0d1u, sd_pt_index(vpn, 2));
	EXPECT_EQ(0x024u, sd_pt_index(vpn, 3));
	EXPECT_EQ(511u, sd_pt_index(kVpnMax, 3));
	EXPECT_EQ(sizeof(((sd_pt *)nullptr)->e), 4096u) << "a table's entries fill a page";
}

TEST(Pgtable, AllocIsZeroed)
{
	sd_pt *pt = sd_pt_alloc();
	ASSERT_NE(nullptr, pt);
	EXPECT_EQ(0u, (uintptr_t)pt % SD_CACHELINE) << "tables are cache-line aligned";
	EXPECT_EQ(0u, offsetof(sd_pt, ptl) % SD_CACHELINE) << "the split lock has a line of its own";
	for (unsigned i = 0; i < SD_PT_ENTRIES; i++)
		ASSERT_EQ(0u, ld(pt->e[i])) << i;
	sd_pt_free(pt);
}

// Level boundaries, in an order where each one needs a known number of new
// tables: vpn 0 builds pud+pmd+leaf; 511 shares that leaf; 512 a new leaf in
// the same pmd; 2^18-1 the last leaf of that pmd; 2^18 a new pmd; 2^27 a new
// pud; 2^36-1 the last slot of the pgd.
TEST(Pgtable, LeafAllocAndWalkAtLevelBoundaries)
{
	Tree t;
	ASSERT_NE(nullptr, t.pgd);
	struct Case {
		uint64_t vpn;
		size_t new_tables;
	} cases[] = {
		{0, 3},
		{511, 0},
		{512, 1},
		{(UINT64_C(1) << 18) - 1, 1},
		{UINT64_C(1) << 18, 2},
		{UINT64_C(1) << 27, 3},
		{kVpnMax, 3},
		{(UINT64_C(1) << 27) - 1, 2},
	};
	std::map<uint64_t, sd_pt *> leaf_of;
	size_t count = 0;
	for (const Case &c : cases) {
		SCOPED_TRACE(::testing::Message() << "vpn " << c.vpn);
		if (c.new_tables) {
			EXPECT_EQ(nullptr, sd_pt_walk_leaf(t.pgd, c.vpn));
		}
		sd_pt *leaf = sd_pt_leaf_alloc(t.pgd, c.vpn);
		ASSERT_NE(nullptr, leaf);
		count += c.new_tables;
		EXPECT_EQ(count, tables(t.pgd).size());
		EXPECT_EQ(leaf, sd_pt_walk_leaf(t.pgd, c.vpn));
		EXPECT_EQ(leaf, path(t.pgd, c.vpn).back()) << "walk disagrees with the index split";
		// Idempotent.
		EXPECT_EQ(leaf, sd_pt_leaf_alloc(t.pgd, c.vpn));
		EXPECT_EQ(count, tables(t.pgd).size());
		// The whole 2 MiB region shares the leaf.
		EXPECT_EQ(leaf, sd_pt_walk_leaf(t.pgd, c.vpn & ~UINT64_C(511)));
		EXPECT_EQ(leaf, sd_pt_walk_leaf(t.pgd, c.vpn | 511));
		leaf_of[c.vpn >> 9] = leaf;
	}
	// Distinct regions, distinct leaves; 0 and 511 share one.
	std::set<sd_pt *> leaves;
	for (auto &kv : leaf_of)
		leaves.insert(kv.second);
	EXPECT_EQ(leaf_of.size(), leaves.size());
	EXPECT_EQ(sd_pt_walk_leaf(t.pgd, 0), sd_pt_walk_leaf(t.pgd, 511));
	EXPECT_NE(sd_pt_walk_leaf(t.pgd, 511), sd_pt_walk_leaf(t.pgd, 512));
	// 2^18-1 and 2^18 are in different pmds; 2^27-1 and 2^27 in different puds.
	EXPECT_EQ(path(t.pgd, 0)[1], path(t.pgd, (UINT64_C(1) << 18) - 1)[1]);
	EXPECT_NE(path(t.pgd, (UINT64_C(1) << 18) - 1)[1], path(t.pgd, UINT64_C(1) << 18)[1]);
	EXPECT_EQ(path(t.pgd, 0)[0], path(t.pgd, (UINT64_C(1) << 27) - 1)[0]);
	EXPECT_NE(path(t.pgd, (UINT64_C(1) << 27) - 1)[0], path(t.pgd, UINT64_C(1) << 27)[0]);
	// Unbuilt neighbours still miss.
	EXPECT_EQ(nullptr, sd_pt_walk_leaf(t.pgd, 1024));
	EXPECT_EQ(nullptr, sd_pt_walk_leaf(t.pgd, kVpnMax - 512));
	EXPECT_EQ(nullptr, sd_pt_walk_leaf(t.pgd, (UINT64_C(1) << 27) + (UINT64_C(1) << 18)));

	// A PTE written through one walk is read through another.
	set_pte(t.pgd, kVpnMax, pte_of(kVpnMax));
	EXPECT_EQ(pte_of(kVpnMax), ld(sd_pt_walk_leaf(t.pgd, kVpnMax)->e[511]));
	EXPECT_EQ(0u, ld(sd_pt_walk_leaf(t.pgd, kVpnMax)->e[510]));
}

// A tree with pages in four places:
//   A: vpn 0..3        leaf LA, pmd M0, pud P0
//   B: vpn 512         leaf LB, pmd M0, pud P0   (sibling leaf of LA)
//   C: vpn 2^18 + 7    leaf LC, pmd M1, pud P0   (sibling pmd of M0)
//   D: vpn 2^27 + 9    leaf LD, pmd M2, pud P1   (sibling pud of P0)
struct Scene : Tree {
	const uint64_t C = (UINT64_C(1) << 18) + 7, D = (UINT64_C(1) << 27) + 9;
	sd_pt *LA, *LB, *LC, *LD, *M0, *M1, *M2, *P0, *P1;
	Scene()
	{
		for (uint64_t v : {UINT64_C(0), UINT64_C(1), UINT64_C(2), UINT64_C(3), UINT64_C(512), C, D}) {
			EXPECT_NE(nullptr, sd_pt_leaf_alloc(pgd, v));
			set_pte(pgd, v, pte_of(v));
		}
		LA = path(pgd, 0)[2];
		LB = path(pgd, 512)[2];
		LC = path(pgd, C)[2];
		LD = path(pgd, D)[2];
		M0 = path(pgd, 0)[1];
		M1 = path(pgd, C)[1];
		M2 = path(pgd, D)[1];
		P0 = path(pgd, 0)[0];
		P1 = path(pgd, D)[0];
		EXPECT_EQ(9u, tables(pgd).size());
	}
	std::set<sd_pt *> unlink(uint64_t vpn, uint64_t nr)
	{
		sd_pt_freelist fl{};
		EXPECT_EQ(0, sd_pt_unlink_empty(pgd, vpn, nr, &fl));
		std::set<sd_pt *> got(fl.tables, fl.tables + fl.n);
		EXPECT_EQ(fl.n, got.size()) << "a table listed twice would be freed twice";
		free_list(fl);
		return got;
	}
};

TEST(Pgtable, UnlinkEmptyFreesExactlyTheEmptyTables)
{
	Scene s;
	// Nothing is empty yet: nothing unlinked, over any range.
	EXPECT_TRUE(s.unlink(0, 1).empty());
	EXPECT_TRUE(s.unlink(0, UINT64_C(1) << 36).empty());
	EXPECT_EQ(9u, tables(s.pgd).size());

	// B emptied: only its leaf goes; its sibling LA and parent M0 stay.
	set_pte(s.pgd, 512, 0);
	EXPECT_EQ((std::set<sd_pt *>{s.LB}), s.unlink(512, 1));
	EXPECT_EQ(nullptr, sd_pt_walk_leaf(s.pgd, 512));
	EXPECT_EQ(s.LA, sd_pt_walk_leaf(s.pgd, 0));
	EXPECT_EQ(s.LC, sd_pt_walk_leaf(s.pgd, s.C));
	EXPECT_EQ(8u, tables(s.pgd).size());

	// Part of A emptied: LA still holds vpn 3, so nothing goes.
	for (uint64_t v = 0; v < 3; v++)
		set_pte(s.pgd, v, 0);
	EXPECT_TRUE(s.unlink(0, 3).empty());
	EXPECT_EQ(s.LA, sd_pt_walk_leaf(s.pgd, 3));
	EXPECT_EQ(pte_of(3), ld(s.LA->e[3]));

	// C emptied: its leaf and its pmd M1 go, P0 (which holds M0) stays.
	set_pte(s.pgd, s.C, 0);
	EXPECT_EQ((std::set<sd_pt *>{s.LC, s.M1}), s.unlink(s.C, 1));
	EXPECT_EQ(nullptr, sd_pt_walk_leaf(s.pgd, s.C));
	EXPECT_EQ(s.P0, path(s.pgd, 0)[0]);
	EXPECT_EQ(s.LA, sd_pt_walk_leaf(s.pgd, 3));
	EXPECT_EQ(6u, tables(s.pgd).size());

	// D emptied: leaf, pmd and pud go; the pgd is never listed.
	set_pte(s.pgd, s.D, 0);
	EXPECT_EQ((std::set<sd_pt *>{s.LD, s.M2, s.P1}), s.unlink(s.D, 1));
	EXPECT_EQ(0u, ld(s.pgd->e[1]));
	EXPECT_EQ(3u, tables(s.pgd).size());

	// The last page of A: its whole path goes.
	set_pte(s.pgd, 3, 0);
	EXPECT_EQ((std::set<sd_pt *>{s.LA, s.M0, s.P0}), s.unlink(0, 512));
	EXPECT_TRUE(tables(s.pgd).empty());
	for (unsigned i = 0; i < SD_PT_ENTRIES; i++)
		ASSERT_EQ(0u, ld(s.pgd->e[i]));
}

TEST(Pgtable, UnlinkEmptyLeavesEmptyTablesOutsideTheRange)
{
	Scene s;
	// Empty both B and C, but unlink only B's range: C's tables stay, still
	// walkable (an empty leaf is harmless; a freed one is not).
	set_pte(s.pgd, 512, 0);
	set_pte(s.pgd, s.C, 0);
	EXPECT_EQ((std::set<sd_pt *>{s.LB}), s.unlink(512, 512));
	EXPECT_EQ(s.LC, sd_pt_walk_leaf(s.pgd, s.C));
	// A range that ends just before C's region and one that starts just
	// after it do not reach it either.
	EXPECT_TRUE(s.unlink(s.C - 7 - 512, 512).empty());
	EXPECT_TRUE(s.unlink(s.C - 7 + 512, 512).empty());
	EXPECT_EQ(s.LC, sd_pt_walk_leaf(s.pgd, s.C));
	// One that covers only C's last page reaches it.
	EXPECT_EQ((std::set<sd_pt *>{s.LC, s.M1}), s.unlink(s.C - 7 + 511, 1));
}

TEST(Pgtable, UnlinkEmptyAcrossBoundaries)
{
	Tree t;
	// Pages on both sides of every level boundary, all emptied again.
	const uint64_t edges[] = {511, 512, (UINT64_C(1) << 18) - 1, UINT64_C(1) << 18,
				  (UINT64_C(1) << 27) - 1, UINT64_C(1) << 27};
	for (uint64_t v : edges) {
		ASSERT_NE(nullptr, sd_pt_leaf_alloc(t.pgd, v));
		set_pte(t.pgd, v, pte_of(v));
	}
	// A keeper far away, so the pgd is never empty of children.
	ASSERT_NE(nullptr, sd_pt_leaf_alloc(t.pgd, kVpnMax));
	set_pte(t.pgd, kVpnMax, pte_of(kVpnMax));
	std::set<sd_pt *> before = tables(t.pgd);
	std::vector<sd_pt *> keeper_path = path(t.pgd, kVpnMax);
	std::set<sd_pt *> keeper(keeper_path.begin(), keeper_path.end());
	for (uint64_t v : edges)
		set_pte(t.pgd, v, 0);

	// [511, 513) crosses a leaf boundary: both leaves go, their pmd (which
	// still holds the leaves of 2^18-1) stays.
	sd_pt_freelist fl{};
	sd_pt *l511 = sd_pt_walk_leaf(t.pgd, 511), *l512 = sd_pt_walk_leaf(t.pgd, 512);
	ASSERT_EQ(0, sd_pt_unlink_empty(t.pgd, 511, 2, &fl));
	EXPECT_EQ((std::set<sd_pt *>{l511, l512}), std::set<sd_pt *>(fl.tables, fl.tables + fl.n));
	free_list(fl);
	EXPECT_NE(nullptr, sd_pt_walk_leaf(t.pgd, (UINT64_C(1) << 18) - 1));

	// [2^18 - 1, 2^27 + 1) crosses pmd and pud boundaries: everything left
	// of the edges goes, the keeper does not.
	ASSERT_EQ(0, sd_pt_unlink_empty(t.pgd, (UINT64_C(1) << 18) - 1,
					(UINT64_C(1) << 27) + 2 - (UINT64_C(1) << 18), &fl));
	std::set<sd_pt *> got(fl.tables, fl.tables + fl.n);
	EXPECT_EQ(fl.n, got.size());
	free_list(fl);
	std::set<sd_pt *> left = tables(t.pgd);
	EXPECT_EQ(keeper, left);
	// What went is exactly what was there minus the keeper and the two leaves.
	std::set<sd_pt *> expect;
	for (sd_pt *p : before)
		if (!keeper.count(p) && p != l511 && p != l512)
			expect.insert(p);
	EXPECT_EQ(expect, got);
	EXPECT_EQ(pte_of(kVpnMax), ld(sd_pt_walk_leaf(t.pgd, kVpnMax)->e[511]));
}

TEST(Pgtable, RandomUnlinkKeepsEveryLivePte)
{
	std::mt19937_64 rng(sdtest::seed());
	Tree t;
	std::map<uint64_t, uint64_t> live;   // vpn -> pte
	// Clustered addresses so tables are shared and emptied in all shapes.
	auto pick = [&] {
		uint64_t hi = rng() % 4;     // which of 4 puds
		uint64_t mid = rng() % 3;    // pmd
		uint64_t leaf = rng() % 4;   // leaf
		return hi << 27 | mid << 18 | leaf << 9 | (rng() % 512);
	};
	for (int round = 0; round < 200; round++) {
		for (int i = 0; i < 20; i++) {
			uint64_t v = pick();
			ASSERT_NE(nullptr, sd_pt_leaf_alloc(t.pgd, v));
			set_pte(t.pgd, v, pte_of(v));
			live[v] = pte_of(v);
		}
		uint64_t start = pick(), nr = 1 + rng() % (UINT64_C(1) << (rng() % 20));
		if (start + nr > kVpnMax)
			nr = kVpnMax - start;
		for (auto it = live.lower_bound(start); it != live.end() && it->first < start + nr;) {
			set_pte(t.pgd, it->first, 0);
			it = live.erase(it);
		}
		std::set<sd_pt *> before = tables(t.pgd);
		sd_pt_freelist fl{};
		ASSERT_EQ(0, sd_pt_unlink_empty(t.pgd, start, nr, &fl));
		std::set<sd_pt *> freed(fl.tables, fl.tables + fl.n);
		ASSERT_EQ(fl.n, freed.size());
		std::set<sd_pt *> after = tables(t.pgd);
		// Freed tables were in the tree and are no longer reachable.
		for (sd_pt *p : freed) {
			ASSERT_TRUE(before.count(p));
			ASSERT_FALSE(after.count(p));
		}
		ASSERT_EQ(before.size(), after.size() + freed.size());
		// Every live page is still mapped with its PTE.
		for (auto &kv : live) {
			sd_pt *leaf = sd_pt_walk_leaf(t.pgd, kv.first);
			ASSERT_NE(nullptr, leaf) << "round " << round << " lost vpn " << kv.first;
			ASSERT_EQ(kv.second, ld(leaf->e[kv.first & 511]));
		}
		// No empty table is left whose span meets the range.
		std::vector<Span> spans;
		collect_spans(t.pgd, SD_PT_LEVELS - 1, 0, spans);
		for (const Span &sp : spans) {
			bool meets = sp.first < start + nr && start < sp.first + sp.pages;
			ASSERT_FALSE(meets && sp.empty)
				<< "round " << round << ": empty table over [" << sp.first << ", +"
				<< sp.pages << ") left linked after unlinking [" << start << ", +" << nr << ")";
		}
		free_list(fl);
	}
	// Empty everything: one unlink over the whole space leaves only the pgd.
	for (auto &kv : live)
		set_pte(t.pgd, kv.first, 0);
	sd_pt_freelist fl{};
	size_t n = tables(t.pgd).size();
	ASSERT_EQ(0, sd_pt_unlink_empty(t.pgd, 0, kVpnMax + 1, &fl));
	EXPECT_EQ(n, fl.n);
	EXPECT_TRUE(tables(t.pgd).empty());
	free_list(fl);
}

TEST(Pgtable, FreeTreeCallsLeafFnOncePerNonZeroPte)
{
	sd_pt *pgd = sd_pt_alloc();
	ASSERT_NE(nullptr, pgd);
	std::multiset<uint64_t> want;
	const uint64_t vpns[] = {0, 1, 511, 512, 777, (UINT64_C(1) << 18) - 1, UINT64_C(1) << 18,
				 UINT64_C(1) << 27, kVpnMax};
	for (uint64_t v : vpns) {
		ASSERT_NE(nullptr, sd_pt_leaf_alloc(pgd, v));
		set_pte(pgd, v, pte_of(v));
		want.insert(pte_of(v));
	}
	// Two pages with the same PTE value are two calls.
	ASSERT_NE(nullptr, sd_pt_leaf_alloc(pgd, 5));
	set_pte(pgd, 5, pte_of(0));
	want.insert(pte_of(0));
	// A VMA-only (not present) PTE is non-zero: reported too.
	uint64_t vma_only = sd_pte_make(0, SD_PTE_VMA | SD_PTE_READ, 3);
	set_pte(pgd, 6, vma_only);
	want.insert(vma_only);
	// Empty tables in the tree: freed, nothing reported.
	ASSERT_NE(nullptr, sd_pt_leaf_alloc(pgd, UINT64_C(5) << 27));
	ASSERT_NE(nullptr, sd_pt_leaf_alloc(pgd, 3 << 9));

	std::multiset<uint64_t> got;
	sd_pt_free_tree(pgd, [](uint64_t pte, void *arg) {
		static_cast<std::multiset<uint64_t> *>(arg)->insert(pte);
	}, &got);
	EXPECT_EQ(want, got);
	// (Under ASan, LeakSanitizer checks that every table was freed.)
}

// sd_pt_free_deferred keeps an unlinked table alive while a registered
// reader that may hold it has not passed a quiescent state, then frees it.
TEST(Pgtable, FreeDeferredWaitsForReaders)
{
	Tree t;
	const uint64_t vpn = (UINT64_C(3) << 27) | 5;
	ASSERT_NE(nullptr, sd_pt_leaf_alloc(t.pgd, vpn));
	set_pte(t.pgd, vpn, pte_of(vpn));

	std::atomic<int> stage{0};
	std::atomic<int> reader_bad{0};
	std::thread reader([&] {
		urcu_qsbr_register_thread();   // online: a read-side section until a QS
		sd_pt *leaf = sd_pt_walk_leaf(t.pgd, vpn);
		if (!leaf || ld(leaf->e[vpn & 511]) != pte_of(vpn))
			reader_bad++;
		stage = 1;
		while (stage.load() != 2)
			std::this_thread::sleep_for(std::chrono::milliseconds(1));
		// The writer unlinked and queued the leaf a while ago. It must still
		// be ours: all zero (a freed 4 KiB chunk gets allocator metadata in
		// its first words; ASan reports the read as a use after free).
		for (unsigned i = 0; i < SD_PT_ENTRIES; i++)
			if (ld(leaf->e[i]) != 0)
				reader_bad++;
		urcu_qsbr_quiescent_state();
		urcu_qsbr_unregister_thread();
	});
	while (stage.load() != 1)
		std::this_thread::yield();

	urcu_qsbr_register_thread();
	set_pte(t.pgd, vpn, 0);
	sd_pt_freelist fl{};
	ASSERT_EQ(0, sd_pt_unlink_empty(t.pgd, vpn, 1, &fl));
	ASSERT_EQ(3u, fl.n);   // leaf, pmd, pud
	EXPECT_EQ(nullptr, sd_pt_walk_leaf(t.pgd, vpn));
	std::set<sd_pt *> queued(fl.tables, fl.tables + fl.n);
	sd_pt_free_deferred(&fl);
	urcu_qsbr_thread_offline();
	// Give the call_rcu worker every chance to free too early.
	std::this_thread::sleep_for(std::chrono::milliseconds(100));
	// Tables freed already would be handed out again by the allocator,
	// which reuses a chunk just freed.
	std::vector<sd_pt *> fresh;
	for (int i = 0; i < 16; i++) {
		sd_pt *p = sd_pt_alloc();
		ASSERT_NE(nullptr, p);
		EXPECT_FALSE(queued.count(p)) << "table " << p << " freed while a reader holds it";
		for (unsigned j = 0; j < SD_PT_ENTRIES; j++)
			st(p->e[j], ~UINT64_C(0));
		fresh.push_back(p);
	}
	stage = 2;
	reader.join();
	EXPECT_EQ(0, reader_bad.load());
	for (sd_pt *p : fresh)
		sd_pt_free(p);
	// Wait for the callbacks (rcu_barrier must run offline), so that
	// LeakSanitizer sees the tables freed.
	urcu_qsbr_barrier();
	urcu_qsbr_unregister_thread();

	// An empty list: nothing to free, the array (if any) is released.
	urcu_qsbr_register_thread();
	sd_pt_freelist empty{};
	sd_pt_free_deferred(&empty);
	urcu_qsbr_unregister_thread();
}

} // namespace
