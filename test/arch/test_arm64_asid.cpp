// SPDX-License-Identifier: MIT
// The arm64 generational ASID allocator (lib/arch/arm64_asid.h) against a
// model of what arch/arm64/mm/context.c guarantees: within a generation a
// number belongs to one mm; a rollover comes only when the numbers run out;
// after a rollover every CPU flushes its TLB exactly once, on its next
// switch, before it uses a number of the new generation; the mm a CPU runs
// keeps its number across the rollover; a switch to an mm of the current
// generation takes the lock-free fast path. Then the same invariants over
// logs of four threads switching at once.
#include "common.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <vector>

extern "C" {
#include "arch/arm64_asid.h"
}

namespace {

uint64_t ld(const std::atomic<uint64_t> &x) { return x.load(std::memory_order_relaxed); }

struct Allocator {
	sd_arm64_asid a;
	int err;
	Allocator(unsigned bits, unsigned cpus) { err = sd_arm64_asid_init(&a, bits, cpus); }
	~Allocator()
	{
		if (!err)
			sd_arm64_asid_fini(&a);
	}
	Allocator(const Allocator &) = delete;
	Allocator &operator=(const Allocator &) = delete;
	uint64_t generation() const { return ld(a.generation); }
	uint64_t gen_of(uint64_t id) const { return id & ~(a.nr - 1); }
};

TEST(Arm64Asid, InitNeedsMoreAsidsThanCpusPlusTwo)
{
	struct {
		unsigned bits, cpus;
		int want;
	} cases[] = {
		{4, 1, 0},  {4, 4, 0},       {4, 13, 0}, {4, 14, -EINVAL}, {4, 100, -EINVAL},
		{3, 5, 0},  {3, 6, -EINVAL}, {5, 29, 0}, {5, 30, -EINVAL}, {16, 4096, 0},
		{2, 1, 0},  {2, 2, -EINVAL},
	};
	for (auto &c : cases) {
		Allocator al(c.bits, c.cpus);
		EXPECT_EQ(c.want, al.err) << "bits " << c.bits << " cpus " << c.cpus;
		if (!al.err) {
			EXPECT_EQ(UINT64_C(1) << c.bits, al.a.nr);
			EXPECT_EQ(c.cpus, al.a.nr_cpus);
			EXPECT_EQ(al.a.nr, al.generation()) << "the first generation is 1 << bits";
		}
	}
}

// What the allocator must do, step by step, in one thread.
struct Model {
	Allocator &al;
	const unsigned cpus;
	const uint64_t nr;
	std::atomic<uint64_t> *ctx;
	uint64_t gen;
	std::map<uint16_t, int> owner;        // current generation: number -> mm
	std::map<int, uint16_t> reserved_of;  // mm running somewhere at the last rollover
	std::vector<int> cur_mm;              // per CPU, -1 before its first switch
	std::vector<uint16_t> cur_num;
	std::vector<bool> zeroed;             // its active id was zeroed by a rollover
	std::vector<bool> pending;            // it owes a local flush
	std::vector<std::map<uint16_t, int>> tlb;   // numbers installed since its last flush
	unsigned rollovers = 0, fast = 0, allocs = 0, flushes = 0, kept_reserved = 0;

	Model(Allocator &a, unsigned ncpus, std::atomic<uint64_t> *ctxs)
		: al(a), cpus(ncpus), nr(a.a.nr), ctx(ctxs), gen(a.generation()),
		  cur_mm(ncpus, -1), cur_num(ncpus, 0), zeroed(ncpus, true), pending(ncpus, false),
		  tlb(ncpus)
	{
	}

	// Switch @cpu to @mm and check everything. Returns false at the first failure.
	bool step(unsigned cpu, int mm)
	{
		const uint64_t id = ld(ctx[mm]);
		const bool current = id && al.gen_of(id) == gen;
		const bool expect_fast = current && !zeroed[cpu];
		const uint16_t old_num = (uint16_t)(id & (nr - 1));
		const bool old_num_free = id && !owner.count(old_num);
		sd_arm64_switch out;
		std::memset(&out, 0xff, sizeof(out));
		sd_arm64_asid_switch(&al.a, cpu, &ctx[mm], &out, nullptr);
		const uint64_t id2 = ld(ctx[mm]);
		const uint16_t num = (uint16_t)(id2 & (nr - 1));
		SCOPED_TRACE(::testing::Message() << "cpu " << cpu << " -> mm " << mm << " (id "
						  << id << " -> " << id2 << ")");

		EXPECT_EQ(num, out.asid) << "the number loaded is not the mm's context id";
		EXPECT_NE(0u, num) << "ASID 0 is reserved";
		EXPECT_EQ(al.generation(), al.gen_of(id2)) << "switched to a stale generation";
		EXPECT_TRUE(!out.rolled_over || out.allocated);

		if (out.rolled_over) {
			rollovers++;
			// Only when the generation is full: every number has an owner.
			EXPECT_EQ(nr - 1, owner.size()) << "rollover with numbers left";
			EXPECT_EQ(gen + nr, al.gen_of(id2));
			gen += nr;
			owner.clear();
			reserved_of.clear();
			for (unsigned c = 0; c < cpus; c++) {
				if (cur_mm[c] < 0)
					continue;
				auto it = owner.find(cur_num[c]);
				EXPECT_TRUE(it == owner.end() || it->second == cur_mm[c])
					<< "two CPUs ran different mms under number " << cur_num[c];
				owner[cur_num[c]] = cur_mm[c];
				reserved_of[cur_mm[c]] = cur_num[c];
				zeroed[c] = true;
			}
			for (unsigned c = 0; c < cpus; c++) {
				zeroed[c] = true;
				pending[c] = true;
			}
		} else {
			EXPECT_EQ(gen, al.gen_of(id2)) << "generation moved without a rollover";
		}

		if (expect_fast) {
			fast++;
			EXPECT_FALSE(out.allocated) << "fast path expected";
			EXPECT_FALSE(out.flush_local_all) << "fast path expected";
		}
		if (current) {
			EXPECT_FALSE(out.allocated) << "mm already has a number of this generation";
			EXPECT_EQ(id, id2);
		} else {
			EXPECT_TRUE(out.allocated) << "mm of an old generation used without new_context";
		}

		// Exactly one local flush per CPU per rollover, on its next switch.
		EXPECT_EQ((bool)pending[cpu], out.flush_local_all);
		pending[cpu] = false;
		if (out.flush_local_all) {
			flushes++;
			tlb[cpu].clear();
		}

		if (out.allocated) {
			allocs++;
			auto it = owner.find(num);
			if (it != owner.end()) {
				EXPECT_EQ(mm, it->second) << "number " << num << " already belongs to mm "
							  << it->second << " in this generation";
			}
			owner[num] = mm;
			auto r = reserved_of.find(mm);
			if (r != reserved_of.end()) {
				kept_reserved++;
				EXPECT_EQ(r->second, num)
					<< "mm ran on a CPU at the rollover but lost its number";
			}
			// An mm whose old number is still free keeps it (no new number burnt).
			if (old_num_free && !out.rolled_over) {
				EXPECT_EQ(old_num, num) << "old number was free but a new one was taken";
			}
		} else {
			EXPECT_TRUE(owner.count(num) && owner[num] == mm);
		}

		// Invariant 3 on this CPU: an entry installed under this number since
		// the last flush must be this mm's.
		auto t = tlb[cpu].find(num);
		if (t != tlb[cpu].end()) {
			EXPECT_EQ(mm, t->second) << "CPU " << cpu << " would serve mm " << t->second
						 << "'s entries to mm " << mm << " under number " << num;
		}
		tlb[cpu][num] = mm;

		// No two CPUs run different mms under one number.
		for (unsigned c = 0; c < cpus; c++) {
			if (c != cpu && cur_mm[c] >= 0 && cur_mm[c] != mm) {
				EXPECT_NE(cur_num[c], num)
					<< "CPU " << c << " runs mm " << cur_mm[c] << " under the same number";
			}
		}
		cur_mm[cpu] = mm;
		cur_num[cpu] = num;
		zeroed[cpu] = false;
		return !::testing::Test::HasFailure();
	}

};

TEST(Arm64Asid, FirstGenerationThenRollover)
{
	const unsigned bits = 4, cpus = 4;
	Allocator al(bits, cpus);
	ASSERT_EQ(0, al.err);
	const uint64_t nr = al.a.nr, gen1 = al.generation();
	std::atomic<uint64_t> ctx[40]{};
	Model m(al, cpus, ctx);

	// 15 mms on CPU 0: 15 distinct non-zero numbers, no rollover, no flush.
	for (int i = 0; i < (int)nr - 1; i++)
		ASSERT_TRUE(m.step(0, i));
	EXPECT_EQ(nr - 1, m.owner.size());
	EXPECT_EQ(0u, m.rollovers);
	// Switching among them anywhere: fast path after each CPU's first switch.
	for (int i = 0; i < (int)nr - 1; i++)
		ASSERT_TRUE(m.step((unsigned)i % cpus, i));
	EXPECT_EQ(gen1, al.generation());
	EXPECT_EQ(0u, m.flushes);
	EXPECT_GE(m.fast, nr - 1 - cpus);

	// The 16th mm: numbers are gone, a new generation starts.
	ASSERT_TRUE(m.step(0, (int)nr - 1));
	EXPECT_EQ(1u, m.rollovers);
	EXPECT_EQ(gen1 + nr, al.generation());
	EXPECT_EQ(1u, m.flushes);
	// Every other CPU flushes on its next switch, once.
	for (unsigned c = 1; c < cpus; c++) {
		ASSERT_TRUE(m.step(c, (int)(nr - 1)));   // an mm of the current generation
		EXPECT_EQ(1u + c, m.flushes);
		ASSERT_TRUE(m.step(c, (int)(nr - 1)));
		EXPECT_EQ(1u + c, m.flushes) << "second flush for one rollover";
	}
}

// CPU c runs mm c; CPU 0 burns through the numbers until the rollover. Each
// running mm must get its own number back in the new generation, from any CPU.
TEST(Arm64Asid, RunningMmsKeepTheirNumbersAcrossRollover)
{
	const unsigned bits = 4, cpus = 4;
	Allocator al(bits, cpus);
	ASSERT_EQ(0, al.err);
	std::atomic<uint64_t> ctx[40]{};
	Model m(al, cpus, ctx);
	for (unsigned c = 0; c < cpus; c++)
		ASSERT_TRUE(m.step(c, (int)c));
	std::vector<uint64_t> before(cpus);
	for (unsigned c = 0; c < cpus; c++)
		before[c] = ld(ctx[c]) & (al.a.nr - 1);
	int next = cpus;
	while (m.rollovers == 0)
		ASSERT_TRUE(m.step(0, next++));
	// CPU 0 ran mm next-2 at the rollover, so that one is reserved too.
	const int cpu0_mm = next - 2;
	const uint16_t cpu0_num = m.reserved_of.at(cpu0_mm);

	// mm 1..3 come back on other CPUs than their own (update_reserved must
	// find the copy in any CPU's slot) with the same numbers, new generation.
	for (unsigned c = 1; c < cpus; c++) {
		unsigned on = (c % (cpus - 1)) + 1;   // 2, 3, 1
		ASSERT_TRUE(m.step(on, (int)c));
		EXPECT_EQ(before[c], ld(ctx[c]) & (al.a.nr - 1)) << "mm " << c;
		EXPECT_EQ(al.generation(), al.gen_of(ld(ctx[c])));
	}
	ASSERT_TRUE(m.step(2, cpu0_mm));
	EXPECT_EQ(cpu0_num, ld(ctx[cpu0_mm]) & (al.a.nr - 1));
	EXPECT_EQ(cpus - 1 + 1, m.kept_reserved);
	// mm 0 was not running anywhere (CPU 0 had moved on): no promise for it,
	// but it must not take a reserved number.
	ASSERT_TRUE(m.step(1, 0));
}

// A CPU that sits through two rollovers without switching still holds its
// number: the second rollover must reserve it from the saved copy.
TEST(Arm64Asid, IdleCpuSurvivesTwoRollovers)
{
	const unsigned bits = 4, cpus = 4;
	Allocator al(bits, cpus);
	ASSERT_EQ(0, al.err);
	std::atomic<uint64_t> ctx[64]{};
	Model m(al, cpus, ctx);
	ASSERT_TRUE(m.step(3, 0));   // CPU 3 runs mm 0 and then stays put
	const uint64_t num0 = ld(ctx[0]) & (al.a.nr - 1);
	int next = 1;
	for (; m.rollovers < 3; next++)
		ASSERT_TRUE(m.step(next % 3, next % 60 + 1));
	// After three rollovers mm 0's number has never been handed to anyone
	// else (Model checks that at every step); now it comes back with it.
	ASSERT_TRUE(m.step(1, 0));
	EXPECT_EQ(num0, ld(ctx[0]) & (al.a.nr - 1));
	EXPECT_TRUE(m.step(3, 0));
}

// Two CPUs run one mm at a rollover, so both save its id. When the mm
// moves to the new generation every saved copy must follow
// (check_update_reserved_asid() rewrites all of them); a copy left behind
// no longer matches at the next rollover, and the mm, still running on the
// idle CPU under its number, would get a different one.
TEST(Arm64Asid, EverySavedCopyFollowsTheMm)
{
	const unsigned bits = 4, cpus = 4;
	Allocator al(bits, cpus);
	ASSERT_EQ(0, al.err);
	std::atomic<uint64_t> ctx[64]{};
	Model m(al, cpus, ctx);
	const int X = 0, Y = 1;
	ASSERT_TRUE(m.step(1, X));
	ASSERT_TRUE(m.step(2, X));   // CPU 2 runs X from now on and never switches
	const uint64_t num = ld(ctx[X]) & (al.a.nr - 1);
	int next = 10;
	while (m.rollovers < 1)
		ASSERT_TRUE(m.step(0, next++));
	ASSERT_TRUE(m.step(1, X));   // X to the new generation, from CPU 1
	EXPECT_EQ(num, ld(ctx[X]) & (al.a.nr - 1));
	ASSERT_TRUE(m.step(1, Y));   // CPU 1 moves on; only CPU 2's copy remains
	while (m.rollovers < 2)
		ASSERT_TRUE(m.step(0, next++));
	ASSERT_TRUE(m.step(3, X));   // the Model checks X kept its number
	EXPECT_EQ(num, ld(ctx[X]) & (al.a.nr - 1));
}

TEST(Arm64Asid, RandomSwitchesAgainstModel)
{
	std::mt19937_64 rng(sdtest::seed());
	for (unsigned bits : {4u, 5u}) {
		const unsigned cpus = 4;
		Allocator al(bits, cpus);
		ASSERT_EQ(0, al.err);
		std::atomic<uint64_t> ctx[40]{};
		Model m(al, cpus, ctx);
		// Skewed: a few hot mms (fast path) and many cold ones (rollovers).
		for (int i = 0; i < 20000; i++) {
			unsigned cpu = (unsigned)(rng() % cpus);
			int mm = (rng() % 4) ? (int)(rng() % 6) : (int)(rng() % 40);
			ASSERT_TRUE(m.step(cpu, mm)) << "bits " << bits << " step " << i;
		}
		EXPECT_GT(m.rollovers, 10u) << "test too gentle to reach rollovers";
		EXPECT_GT(m.fast, 1000u);
		EXPECT_GT(m.kept_reserved, 0u);
		EXPECT_EQ(al.a.nr * (1 + m.rollovers), al.generation());
	}
}

// Four threads, each its own CPU, switching among 40 mms at once (a
// fast path that installs its id with a plain store instead of the CAS
// against flush_context()'s exchange is caught here about two runs in
// three, by the per-CPU check). Each
// thread checks invariant 3 on its own CPU as it goes (a model TLB of the
// numbers installed since its last flush); afterwards all logs together must
// show one mm per (generation, number).
TEST(Arm64Asid, ConcurrentSwitchesNeverShareANumber)
{
	const unsigned bits = 4, cpus = 4, mms = 40;
	// Up to this many switches per thread, within about a second.
	const int switches = 200000;
	Allocator al(bits, cpus);
	ASSERT_EQ(0, al.err);
	std::atomic<uint64_t> ctx[mms]{};
	const uint64_t nr = al.a.nr;

	struct Rec {
		int mm;
		uint16_t asid;
		bool flush, allocated, rolled;
		uint64_t ctx_after, active_after;
	};
	std::vector<std::vector<Rec>> logs(cpus);
	std::vector<long> local_bad(cpus, 0);
	std::atomic<int> go{0};
	const uint64_t seed = sdtest::seed();

	auto body = [&](unsigned cpu) {
		std::mt19937_64 rng(seed + cpu);
		std::map<uint16_t, int> tlb;
		logs[cpu].reserve(switches);
		while (!go.load())
			std::this_thread::yield();
		auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1000);
		for (int i = 0; i < switches; i++) {
			if ((i & 1023) == 0 && std::chrono::steady_clock::now() > deadline)
				break;
			int mm = (rng() % 3) ? (int)(rng() % 8) : (int)(rng() % mms);
			sd_arm64_switch out;
			sd_arm64_asid_switch(&al.a, cpu, &ctx[mm], &out, nullptr);
			Rec r{mm, out.asid, out.flush_local_all, out.allocated, out.rolled_over,
			      ld(ctx[mm]), ld(al.a.percpu[cpu].active)};
			if (out.flush_local_all)
				tlb.clear();
			auto t = tlb.find(out.asid);
			if (out.asid == 0 || (t != tlb.end() && t->second != mm))
				local_bad[cpu]++;
			tlb[out.asid] = mm;
			logs[cpu].push_back(r);
			if ((i & 255) == 0)
				std::this_thread::yield();   // mix the interleavings
		}
	};
	std::vector<std::thread> th;
	for (unsigned c = 0; c < cpus; c++)
		th.emplace_back(body, c);
	go = 1;
	for (auto &t : th)
		t.join();

	for (unsigned c = 0; c < cpus; c++)
		EXPECT_EQ(0, local_bad[c]) << "CPU " << c << " would have served another mm's "
					      "entries (no flush between two owners of a number)";

	std::map<std::pair<uint64_t, uint16_t>, int> owner;
	long conflicts = 0, unstable = 0;
	unsigned rolled = 0;
	auto claim = [&](uint64_t id, int mm) {
		auto key = std::make_pair(id & ~(nr - 1), (uint16_t)(id & (nr - 1)));
		auto it = owner.emplace(key, mm).first;
		if (it->second != mm && conflicts++ < 5)
			ADD_FAILURE() << "generation " << (key.first / nr) << " number " << key.second
				      << " used by mm " << it->second << " and mm " << mm;
	};
	for (unsigned c = 0; c < cpus; c++) {
		std::vector<unsigned> flushes_seen;
		for (const Rec &r : logs[c]) {
			rolled += r.rolled;
			// The number a CPU runs an mm under stays the mm's number even if
			// another CPU moved the mm to a newer generation meanwhile.
			if ((uint16_t)(r.ctx_after & (nr - 1)) != r.asid)
				unstable++;
			claim(r.ctx_after, r.mm);
			if (r.active_after) {
				if ((uint16_t)(r.active_after & (nr - 1)) != r.asid)
					unstable++;
				claim(r.active_after, r.mm);
			}
		}
	}
	EXPECT_EQ(0, conflicts);
	EXPECT_EQ(0, unstable);
	EXPECT_EQ(nr * (1 + rolled), al.generation()) << "rollovers reported != generations";
	EXPECT_GT(rolled, 20u) << "too few rollovers to mean anything";
	// Per CPU: flushes are at most one per rollover.
	for (unsigned c = 0; c < cpus; c++) {
		unsigned f = 0;
		for (const Rec &r : logs[c])
			f += r.flush;
		EXPECT_LE(f, rolled) << "CPU " << c;
		EXPECT_GT(f, 0u) << "CPU " << c << " never flushed after " << rolled << " rollovers";
	}
}

} // namespace
