// SPDX-License-Identifier: MIT
// Statistics: counter names, counters that must add up, per-CPU vs machine
// snapshots, deltas, the JSON and text output, and the latency quantiles.
#include "common.hpp"

#include <atomic>
#include <chrono>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

using sdtest::Attached;
using sdtest::Machine;

constexpr uint64_t P = SD_PAGE_SIZE;
constexpr unsigned RW = SD_PROT_READ | SD_PROT_WRITE;

bool snake_case(const std::string &s)
{
	if (s.empty() || !std::islower((unsigned char)s[0]) || s.back() == '_')
		return false;
	for (size_t i = 0; i < s.size(); i++) {
		char ch = s[i];
		if (ch == '_') {
			if (s[i - 1] == '_')
				return false;
		} else if (!std::islower((unsigned char)ch) && !std::isdigit((unsigned char)ch)) {
			return false;
		}
	}
	return true;
}

TEST(Stats, NamesAreUniqueSnakeCase)
{
	std::set<std::string> names;
	for (unsigned i = 0; i < SD_STAT_NR; i++) {
		const char *n = sd_stat_name(static_cast<sd_stat>(i));
		ASSERT_NE(nullptr, n) << "stat " << i;
		EXPECT_TRUE(snake_case(n)) << "'" << n << "'";
		EXPECT_TRUE(names.insert(n).second) << "duplicate name '" << n << "'";
	}
	EXPECT_EQ(nullptr, sd_stat_name(SD_STAT_NR));
	EXPECT_EQ(nullptr, sd_stat_name(static_cast<sd_stat>(-1)));
	// The names other tools grep for.
	for (const char *n : {"tlb_hits", "tlb_misses", "flushes", "ipis_sent", "violations",
			      "remote_invalidations", "asid_rollovers", "context_switches"})
		EXPECT_EQ(1u, names.count(n)) << n;
}

std::string to_string(void (*print)(const sd_stats *, FILE *), const sd_stats &s)
{
	char *buf = nullptr;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	EXPECT_NE(nullptr, f);
	if (!f)
		return "";
	print(&s, f);
	fclose(f);
	std::string out(buf, len);
	free(buf);
	return out;
}

// ---- a tiny JSON reader: one object of numbers and arrays of numbers ----

struct Json {
	std::map<std::string, uint64_t> num;
	std::map<std::string, std::vector<uint64_t>> arr;
	std::vector<std::string> keys;  // in order, duplicates kept
};

class JsonParser {
public:
	explicit JsonParser(const std::string &s) : s_(s) {}
	bool parse(Json &out, std::string &err)
	{
		ws();
		if (!eat('{'))
			return fail(err, "expected '{'");
		ws();
		if (eat('}'))
			return end(err);
		for (;;) {
			ws();
			std::string key;
			if (!string(key))
				return fail(err, "expected a key");
			ws();
			if (!eat(':'))
				return fail(err, "expected ':'");
			ws();
			out.keys.push_back(key);
			if (peek() == '[') {
				eat('[');
				std::vector<uint64_t> v;
				ws();
				if (!eat(']')) {
					for (;;) {
						ws();
						uint64_t x;
						if (!number(x))
							return fail(err, "expected a number in array");
						v.push_back(x);
						ws();
						if (eat(']'))
							break;
						if (!eat(','))
							return fail(err, "expected ',' or ']'");
					}
				}
				out.arr[key] = v;
			} else {
				uint64_t x;
				if (!number(x))
					return fail(err, "expected a number for '" + key + "'");
				out.num[key] = x;
			}
			ws();
			if (eat('}'))
				return end(err);
			if (!eat(','))
				return fail(err, "expected ',' or '}'");
		}
	}

private:
	const std::string &s_;
	size_t i_ = 0;
	char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
	bool eat(char ch)
	{
		if (peek() != ch)
			return false;
		i_++;
		return true;
	}
	void ws()
	{
		while (std::isspace((unsigned char)peek()))
			i_++;
	}
	bool string(std::string &out)
	{
		if (!eat('"'))
			return false;
		while (i_ < s_.size() && s_[i_] != '"') {
			if (s_[i_] == '\\')
				return false;  // not needed here
			out += s_[i_++];
		}
		return eat('"');
	}
	bool number(uint64_t &out)
	{
		size_t start = i_;
		out = 0;
		while (std::isdigit((unsigned char)peek()))
			out = out * 10 + (uint64_t)(s_[i_++] - '0');
		return i_ > start;
	}
	bool end(std::string &err)
	{
		ws();
		return i_ == s_.size() ? true : fail(err, "trailing characters");
	}
	bool fail(std::string &err, const std::string &what)
	{
		err = what + " at offset " + std::to_string(i_);
		return false;
	}
};

// ---- a workload whose counts the test knows ----

struct Expect {
	uint64_t accesses = 0;     // calls that reached the TLB lookup
	uint64_t failed = 0;       // ...of them -EFAULT or -EACCES
	uint64_t first_touch = 0;  // distinct pages populated
	uint64_t zero_page = 0;    // ...of them by a read: the zero page mapped
	uint64_t wp = 0;           // writes to a zero-page PTE: copy-on-write breaks
	uint64_t switches = 0;
	uint64_t flushes = 0;      // changes of populated pages, and wp breaks
};

class StatsWorkload : public ::testing::Test {
protected:
	static constexpr unsigned kCpus = 3;
	static constexpr uint64_t kBase = 0x50000000;
	static constexpr unsigned kPages = 48;
	sd_machine *m = nullptr;
	sd_mm *mm = nullptr;
	Expect e;

	void SetUp() override
	{
		sd_machine_config c = sdtest::config(kCpus, "broadcast");
		ASSERT_EQ(0, sd_machine_create(&c, &m)) << sd_last_error();
		ASSERT_EQ(0, sd_mm_create(m, &mm));
	}
	void TearDown() override
	{
		if (mm) {
			EXPECT_EQ(0, sd_mm_destroy(mm));
		}
		if (m) {
			EXPECT_EQ(0, sd_machine_destroy(m));
		}
	}

	// On CPU 0 (the test thread): pages [0, 32) RW, [32, 40) RO, [40, 48)
	// unmapped; random reads and writes; then mprotect/madvise of touched
	// pages. Every access is known to reach the lookup.
	void run(unsigned n_access, uint64_t seed)
	{
		Attached a(m, 0);
		ASSERT_NE(nullptr, a.c);
		ASSERT_EQ(0, sd_switch_mm(a.c, mm));
		e.switches++;
		ASSERT_EQ(0, sd_mmap(a.c, mm, kBase, 32 * P, RW));
		ASSERT_EQ(0, sd_mmap(a.c, mm, kBase + 32 * P, 8 * P, SD_PROT_READ));
		std::mt19937_64 rng(seed);
		// A page first read maps the zero page; the first write to it
		// then breaks copy-on-write (a fault and a one-page flush).
		std::set<unsigned> touched, zero;
		for (unsigned i = 0; i < n_access; i++) {
			unsigned page = (unsigned)(rng() % kPages);
			bool write = rng() % 3 == 0;
			int err = sd_access(a.c, kBase + page * P, write ? SD_WRITE : SD_READ, nullptr);
			bool ok = page < 32 || (page < 40 && !write);
			ASSERT_EQ(ok ? 0 : (page < 40 ? -EACCES : -EFAULT), err) << page;
			e.accesses++;
			if (!ok) {
				e.failed++;
			} else if (touched.insert(page).second) {
				e.first_touch++;
				if (!write) {
					zero.insert(page);
					e.zero_page++;
				}
			} else if (write && zero.erase(page)) {
				e.wp++;
				e.flushes++;
			}
		}
		// Populated pages changed: each call is one flush.
		ASSERT_EQ(0, sd_mprotect(a.c, mm, kBase, 32 * P, SD_PROT_READ));
		ASSERT_EQ(0, sd_mprotect(a.c, mm, kBase, 32 * P, RW));
		ASSERT_EQ(0, sd_madvise_dontneed(a.c, mm, kBase, 4 * P));
		ASSERT_EQ(0, sd_munmap(a.c, mm, kBase, kPages * P));
		e.flushes += 4;
		ASSERT_EQ(0, sd_switch_mm(a.c, nullptr));
		e.switches++;
		// Detach switches to no address space once more: counted too.
		e.switches++;
	}
};

TEST_F(StatsWorkload, CountersAddUp)
{
	run(5000, sdtest::seed());
	sd_stats s = SD_STATS_INIT;
	ASSERT_EQ(0, sd_stats_snapshot(m, &s));
	const uint64_t *k = s.counter;
	EXPECT_EQ(kCpus, s.nr_cpus);
	EXPECT_EQ(e.accesses, k[SD_STAT_TLB_HIT] + k[SD_STAT_TLB_MISS]);
	EXPECT_LE(k[SD_STAT_TLB_L1_HIT], k[SD_STAT_TLB_HIT]);
	EXPECT_EQ(k[SD_STAT_TLB_HIT], k[SD_STAT_TLB_L1_HIT] + k[SD_STAT_TLB_L2_HIT]);
	EXPECT_GT(k[SD_STAT_TLB_HIT], 0u);
	EXPECT_EQ(e.first_touch + e.wp, k[SD_STAT_PAGE_FAULT]);
	EXPECT_EQ(e.zero_page, k[SD_STAT_ZERO_PAGE_FAULT]);
	EXPECT_EQ(e.wp, k[SD_STAT_WP_FAULT]);
	EXPECT_GT(e.wp, 0u) << "the workload broke no copy-on-write";
	EXPECT_GE(k[SD_STAT_PAGE_WALK], k[SD_STAT_TLB_MISS]);
	EXPECT_LE(k[SD_STAT_WALK_CACHE_HIT], k[SD_STAT_PAGE_WALK]);
	// Every successful miss ends in exactly one fill (kept or dropped).
	EXPECT_EQ(k[SD_STAT_TLB_MISS] - e.failed, k[SD_STAT_TLB_FILL] + k[SD_STAT_TLB_FILL_RACED]);
	EXPECT_EQ(e.switches, k[SD_STAT_CTX_SWITCH]);
	EXPECT_EQ(e.flushes, k[SD_STAT_FLUSH]);
	// broadcast: every flush reaches the other CPUs; each message touches
	// every TLB.
	EXPECT_EQ(k[SD_STAT_FLUSH], k[SD_STAT_REMOTE_FLUSH]);
	EXPECT_GE(k[SD_STAT_TLBI_OP], k[SD_STAT_FLUSH]);
	EXPECT_LE(k[SD_STAT_TLBI_ASID_OP], k[SD_STAT_TLBI_OP]);
	EXPECT_EQ(k[SD_STAT_TLBI_OP] * (kCpus - 1), k[SD_STAT_REMOTE_INVAL]);
	EXPECT_GE(k[SD_STAT_TLB_INVALS], k[SD_STAT_TLBI_OP] * kCpus);
	EXPECT_EQ(0u, k[SD_STAT_IPI_SENT]);
	EXPECT_EQ(0u, k[SD_STAT_VIOLATION]);
	EXPECT_GE(k[SD_STAT_ASID_ALLOC], 1u);
	// The histogram holds one sample per flush.
	uint64_t samples = 0;
	for (auto h : s.flush_ns_hist)
		samples += h;
	EXPECT_EQ(k[SD_STAT_FLUSH], samples);
	EXPECT_GT(s.flush_ns_total, 0u);
}

TEST_F(StatsWorkload, SnapshotIsTheSumOfCpus)
{
	run(2000, sdtest::seed() + 1);
	sd_stats all = SD_STATS_INIT, sum = SD_STATS_INIT;
	ASSERT_EQ(0, sd_stats_snapshot(m, &all));
	for (unsigned c = 0; c < kCpus; c++) {
		sd_stats one = SD_STATS_INIT;
		std::memset(&one, 0xff, sizeof(one));
		one.size = sizeof(one);         // poisoned, but a known size
		ASSERT_EQ(0, sd_stats_cpu(m, c, &one));
		EXPECT_EQ(1u, one.nr_cpus);
		for (unsigned i = 0; i < SD_STAT_NR; i++)
			sum.counter[i] += one.counter[i];
		for (unsigned i = 0; i < SD_STAT_HIST_BUCKETS; i++)
			sum.flush_ns_hist[i] += one.flush_ns_hist[i];
		sum.flush_ns_total += one.flush_ns_total;
		if (c > 0) {
			// CPUs 1 and 2 never ran: only the broadcasts reached them.
			EXPECT_EQ(0u, one.counter[SD_STAT_TLB_HIT]);
			EXPECT_EQ(0u, one.counter[SD_STAT_FLUSH]);
			EXPECT_GT(one.counter[SD_STAT_TLB_INVALS], 0u);
		}
	}
	for (unsigned i = 0; i < SD_STAT_NR; i++)
		EXPECT_EQ(all.counter[i], sum.counter[i]) << sd_stat_name(static_cast<sd_stat>(i));
	for (unsigned i = 0; i < SD_STAT_HIST_BUCKETS; i++)
		EXPECT_EQ(all.flush_ns_hist[i], sum.flush_ns_hist[i]) << i;
	EXPECT_EQ(all.flush_ns_total, sum.flush_ns_total);
}

TEST_F(StatsWorkload, Delta)
{
	sd_stats before = SD_STATS_INIT, after = SD_STATS_INIT, d = SD_STATS_INIT;
	ASSERT_EQ(0, sd_stats_snapshot(m, &before));
	run(1000, sdtest::seed() + 2);
	ASSERT_EQ(0, sd_stats_snapshot(m, &after));
	std::memset(&d, 0xee, sizeof(d));
	d.size = sizeof(d);
	sd_stats_delta(&after, &before, &d);
	EXPECT_EQ(kCpus, d.nr_cpus);
	for (unsigned i = 0; i < SD_STAT_NR; i++)
		EXPECT_EQ(after.counter[i] - before.counter[i], d.counter[i]);
	for (unsigned i = 0; i < SD_STAT_HIST_BUCKETS; i++)
		EXPECT_EQ(after.flush_ns_hist[i] - before.flush_ns_hist[i], d.flush_ns_hist[i]);
	EXPECT_EQ(after.flush_ns_total - before.flush_ns_total, d.flush_ns_total);
	EXPECT_EQ(e.accesses, d.counter[SD_STAT_TLB_HIT] + d.counter[SD_STAT_TLB_MISS]);

	// A second run: the delta holds only the second run's events.
	sd_stats third = SD_STATS_INIT, d2 = SD_STATS_INIT;
	Expect first = e;
	run(700, sdtest::seed() + 3);
	ASSERT_EQ(0, sd_stats_snapshot(m, &third));
	sd_stats_delta(&third, &after, &d2);
	EXPECT_EQ(e.accesses - first.accesses,
		  d2.counter[SD_STAT_TLB_HIT] + d2.counter[SD_STAT_TLB_MISS]);
	EXPECT_EQ(e.switches - first.switches, d2.counter[SD_STAT_CTX_SWITCH]);
	EXPECT_EQ(e.flushes - first.flushes, d2.counter[SD_STAT_FLUSH]);
	// Delta of a snapshot with itself is all zero.
	sd_stats z = SD_STATS_INIT;
	sd_stats_delta(&third, &third, &z);
	for (unsigned i = 0; i < SD_STAT_NR; i++)
		EXPECT_EQ(0u, z.counter[i]);
}

TEST_F(StatsWorkload, JsonHasEveryCounter)
{
	run(1000, sdtest::seed() + 4);
	sd_stats s = SD_STATS_INIT;
	ASSERT_EQ(0, sd_stats_snapshot(m, &s));
	std::string text = to_string(sd_stats_json, s);
	Json j;
	std::string err;
	ASSERT_TRUE(JsonParser(text).parse(j, err)) << err << "\n" << text;
	std::set<std::string> uniq(j.keys.begin(), j.keys.end());
	EXPECT_EQ(uniq.size(), j.keys.size()) << "duplicate keys in " << text;
	for (unsigned i = 0; i < SD_STAT_NR; i++) {
		const char *n = sd_stat_name(static_cast<sd_stat>(i));
		ASSERT_EQ(1u, j.num.count(n)) << "missing \"" << n << "\" in " << text;
		EXPECT_EQ(s.counter[i], j.num[n]) << n;
	}
	ASSERT_EQ(1u, j.num.count("nr_cpus"));
	EXPECT_EQ(kCpus, j.num["nr_cpus"]);
	ASSERT_EQ(1u, j.num.count("flush_ns_total"));
	EXPECT_EQ(s.flush_ns_total, j.num["flush_ns_total"]);
	ASSERT_EQ(1u, j.arr.count("flush_ns_hist"));
	ASSERT_EQ((size_t)SD_STAT_HIST_BUCKETS, j.arr["flush_ns_hist"].size());
	for (unsigned i = 0; i < SD_STAT_HIST_BUCKETS; i++)
		EXPECT_EQ(s.flush_ns_hist[i], j.arr["flush_ns_hist"][i]);
}

TEST_F(StatsWorkload, PrintShowsNonZeroCounters)
{
	run(500, sdtest::seed() + 5);
	sd_stats s = SD_STATS_INIT;
	ASSERT_EQ(0, sd_stats_snapshot(m, &s));
	std::string text = to_string(sd_stats_print, s);
	for (unsigned i = 0; i < SD_STAT_NR; i++) {
		std::string n = sd_stat_name(static_cast<sd_stat>(i));
		// Names are matched as whole words at the start of a line.
		bool shown = text.find("\n" + n + " ") != std::string::npos ||
			     text.rfind(n + " ", 0) == 0;
		EXPECT_EQ(s.counter[i] != 0, shown) << n << " = " << s.counter[i] << "\n" << text;
	}
	EXPECT_NE(std::string::npos, text.find("flush_ns_mean")) << text;
}

TEST_F(StatsWorkload, QuantilesAreMonotone)
{
	run(300, sdtest::seed() + 6);
	sd_stats s = SD_STATS_INIT;
	ASSERT_EQ(0, sd_stats_snapshot(m, &s));
	ASSERT_GT(s.counter[SD_STAT_FLUSH], 0u);
	uint64_t prev = 0;
	for (int i = 0; i <= 100; i++) {
		uint64_t q = sd_stats_flush_ns_quantile(&s, i / 100.0);
		EXPECT_GE(q, prev) << "q = " << i / 100.0;
		EXPECT_GT(q, 0u);
		prev = q;
	}
	// The top quantile bounds every sample, so the mean too.
	EXPECT_GE(sd_stats_flush_ns_quantile(&s, 1.0), s.flush_ns_total / s.counter[SD_STAT_FLUSH]);
}

TEST(StatsQuantile, SyntheticHistograms)
{
	sd_stats s = SD_STATS_INIT;
	EXPECT_EQ(0u, sd_stats_flush_ns_quantile(&s, 0.0));
	EXPECT_EQ(0u, sd_stats_flush_ns_quantile(&s, 0.5));
	EXPECT_EQ(0u, sd_stats_flush_ns_quantile(&s, 1.0));

	// All samples in bucket 3 = [8, 16): every quantile is 16.
	s.flush_ns_hist[3] = 10;
	for (double q : {0.01, 0.5, 0.99, 1.0})
		EXPECT_EQ(16u, sd_stats_flush_ns_quantile(&s, q)) << "q = " << q;

	// One sample in [4, 8) and one in [1024, 2048).
	s = SD_STATS_INIT;
	s.flush_ns_hist[2] = 1;
	s.flush_ns_hist[10] = 1;
	EXPECT_EQ(8u, sd_stats_flush_ns_quantile(&s, 0.5));
	EXPECT_EQ(2048u, sd_stats_flush_ns_quantile(&s, 0.51));
	EXPECT_EQ(2048u, sd_stats_flush_ns_quantile(&s, 1.0));

	// 90 fast, 10 slow: p50 fast, p95 slow.
	s = SD_STATS_INIT;
	s.flush_ns_hist[8] = 90;
	s.flush_ns_hist[20] = 10;
	EXPECT_EQ(512u, sd_stats_flush_ns_quantile(&s, 0.5));
	EXPECT_EQ(512u, sd_stats_flush_ns_quantile(&s, 0.9));
	EXPECT_EQ(UINT64_C(2) << 20, sd_stats_flush_ns_quantile(&s, 0.95));

	// The last bucket.
	s = SD_STATS_INIT;
	s.flush_ns_hist[SD_STAT_HIST_BUCKETS - 1] = 1;
	EXPECT_EQ(UINT64_C(2) << (SD_STAT_HIST_BUCKETS - 1), sd_stats_flush_ns_quantile(&s, 1.0));
}

TEST(StatsQuantile, ZeroQuantileIsTheSmallestSample)
{
	// q = 0 is the minimum: the upper bound of the first non-empty bucket,
	// not of bucket 0.
	sd_stats s = SD_STATS_INIT;
	s.flush_ns_hist[10] = 5;
	s.flush_ns_hist[12] = 5;
	EXPECT_EQ(2048u, sd_stats_flush_ns_quantile(&s, 0.0))
		<< "library bug: q = 0 answers bucket 0 even when it is empty";
}

TEST(Stats, SnapshotsWhileCpusRunAreMonotone)
{
	// Snapshots taken concurrently with two busy CPUs: each counter only
	// grows from one snapshot to the next (and TSan sees no race).
	Machine mach(sdtest::config(2, "broadcast"));
	ASSERT_NE(nullptr, mach.m);
	sd_mm *mm = nullptr;
	ASSERT_EQ(0, sd_mm_create(mach.m, &mm));
	std::atomic<bool> stop{false};
	std::atomic<int> errs{0};
	std::vector<std::thread> cpus;
	for (unsigned id = 0; id < 2; id++)
		cpus.emplace_back([&, id] {
			Attached a(mach.m, id);
			if (!a.c) {
				errs++;
				return;
			}
			uint64_t base = 0x100000000ull * (id + 1);
			if (sd_switch_mm(a.c, mm) || sd_mmap(a.c, mm, base, 16 * P, RW))
				errs++;
			unsigned i = 0;
			while (!stop.load(std::memory_order_relaxed)) {
				if (sd_access(a.c, base + (i % 16) * P, SD_WRITE, nullptr))
					errs++;
				if (++i % 256 == 0 &&
				    sd_mprotect(a.c, mm, base, 16 * P, RW))
					errs++;
			}
			if (sd_switch_mm(a.c, nullptr))
				errs++;
		});
	sd_stats prev = SD_STATS_INIT;
	ASSERT_EQ(0, sd_stats_snapshot(mach.m, &prev));
	for (int n = 0; n < 200; n++) {
		sd_stats cur = SD_STATS_INIT;
		ASSERT_EQ(0, sd_stats_snapshot(mach.m, &cur));
		for (unsigned i = 0; i < SD_STAT_NR; i++)
			EXPECT_GE(cur.counter[i], prev.counter[i]) << sd_stat_name(static_cast<sd_stat>(i));
		prev = cur;
		std::this_thread::sleep_for(std::chrono::microseconds(200));
	}
	stop = true;
	for (auto &t : cpus)
		t.join();
	EXPECT_EQ(0, errs.load());
	EXPECT_GT(prev.counter[SD_STAT_TLB_HIT], 0u);
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

// ---- struct sd_stats carries its size (an old caller's, smaller struct) ----

constexpr unsigned char kPoison = 0xa5;

// A struct sd_stats as a caller compiled against a release that knew only
// the first @nr counters: SD_STATS_SIZE(nr) bytes, in a poisoned buffer with
// room past the end so that a write beyond @size is seen, not undefined.
struct OldStats {
	alignas(sd_stats) unsigned char bytes[sizeof(sd_stats) + 64];

	explicit OldStats(size_t size)
	{
		std::memset(bytes, kPoison, sizeof(bytes));
		std::memcpy(bytes, &size, sizeof(size));
	}
	sd_stats *s() { return reinterpret_cast<sd_stats *>(bytes); }
	// Offset of the first byte past @from that is not poison, or -1.
	long written_past(size_t from) const
	{
		for (size_t i = from; i < sizeof(bytes); i++)
			if (bytes[i] != kPoison)
				return (long)i;
		return -1;
	}
};

TEST_F(StatsWorkload, OldSmallerSizeGetsOnlyItsPrefix)
{
	run(1000, sdtest::seed() + 7);
	sd_stats full = SD_STATS_INIT;
	ASSERT_EQ(0, sd_stats_snapshot(m, &full));     // the machine is quiet now
	ASSERT_GT(full.counter[SD_STAT_FLUSH], 0u);

	// Every whole-counter prefix: from the histogram alone to one short.
	for (unsigned nr : {0u, 1u, (unsigned)SD_STAT_FLUSH + 1, (unsigned)SD_STAT_NR - 1}) {
		size_t size = SD_STATS_SIZE(nr);
		OldStats old(size);
		ASSERT_EQ(0, sd_stats_snapshot(m, old.s())) << nr << ": " << sd_last_error();
		EXPECT_EQ(-1, old.written_past(size)) << "snapshot wrote past size " << size;
		EXPECT_EQ(size, old.s()->size) << "the caller's size is kept";
		EXPECT_EQ(kCpus, old.s()->nr_cpus);
		EXPECT_EQ(full.flush_ns_total, old.s()->flush_ns_total);
		for (unsigned i = 0; i < SD_STAT_HIST_BUCKETS; i++)
			EXPECT_EQ(full.flush_ns_hist[i], old.s()->flush_ns_hist[i]) << i;
		for (unsigned i = 0; i < nr; i++)
			EXPECT_EQ(full.counter[i], old.s()->counter[i]) << sd_stat_name((sd_stat)i);

		OldStats one(size);
		ASSERT_EQ(0, sd_stats_cpu(m, 0, one.s())) << sd_last_error();
		EXPECT_EQ(-1, one.written_past(size)) << "sd_stats_cpu wrote past size " << size;
		EXPECT_EQ(1u, one.s()->nr_cpus);

		// Delta of a full and an old snapshot into an old struct: the
		// prefix only, counters the old one lacks count as 0.
		OldStats d(size);
		sd_stats_delta(&full, old.s(), d.s());
		EXPECT_EQ(-1, d.written_past(size)) << "sd_stats_delta wrote past size " << size;
		EXPECT_EQ(size, d.s()->size);
		for (unsigned i = 0; i < nr; i++)
			EXPECT_EQ(0u, d.s()->counter[i]) << sd_stat_name((sd_stat)i);
		sd_stats wide = SD_STATS_INIT;
		sd_stats_delta(&full, old.s(), &wide);
		for (unsigned i = nr; i < SD_STAT_NR; i++)
			EXPECT_EQ(full.counter[i], wide.counter[i]) << sd_stat_name((sd_stat)i);

		// The printers show the counters the struct holds, no more.
		std::string json = to_string(sd_stats_json, *old.s());
		EXPECT_EQ(nr > SD_STAT_FLUSH, json.find("\"flushes\"") != std::string::npos) << json;
		EXPECT_EQ(std::string::npos, json.find(sd_stat_name((sd_stat)(SD_STAT_NR - 1)))) << json;
	}
}

TEST_F(StatsWorkload, UnknownSizeIsEinvalAndWritesNothing)
{
	run(200, sdtest::seed() + 8);
	sd_stats good = SD_STATS_INIT;
	ASSERT_EQ(0, sd_stats_snapshot(m, &good));
	const size_t bad_sizes[] = {
		0,                                      // never set: not SD_STATS_INIT
		SD_STATS_SIZE(0) - 1,                   // not even the fixed part
		SD_STATS_SIZE(3) + 4,                   // half a counter
		sizeof(sd_stats) + sizeof(uint64_t),    // a newer release's
	};
	for (size_t size : bad_sizes) {
		OldStats out(size);
		sd_stat_name(SD_STAT_NR);       // a different last error first
		EXPECT_EQ(-EINVAL, sd_stats_snapshot(m, out.s())) << size;
		EXPECT_NE(nullptr, std::strstr(sd_last_error(), "size")) << sd_last_error();
		sd_stat_name(SD_STAT_NR);
		EXPECT_EQ(-EINVAL, sd_stats_cpu(m, 1, out.s())) << size;
		EXPECT_NE(nullptr, std::strstr(sd_last_error(), "SD_STATS_INIT")) << sd_last_error();
		EXPECT_EQ(-1, out.written_past(sizeof(size))) << "a rejected call wrote, size " << size;

		sd_stats_delta(&good, &good, out.s());
		EXPECT_EQ(-1, out.written_past(sizeof(size))) << "delta wrote, size " << size;
		EXPECT_NE(nullptr, std::strstr(sd_last_error(), "sd_stats_delta")) << sd_last_error();
		sd_stats d = SD_STATS_INIT;
		d.counter[0] = 12345;
		sd_stats_delta(out.s(), &good, &d);
		EXPECT_EQ(12345u, d.counter[0]) << "delta from a bad-sized struct did something";

		EXPECT_EQ(0u, sd_stats_flush_ns_quantile(out.s(), 0.5));
		EXPECT_NE(nullptr, std::strstr(sd_last_error(), "size")) << sd_last_error();
		EXPECT_EQ("", to_string(sd_stats_print, *out.s()));
		EXPECT_EQ("", to_string(sd_stats_json, *out.s()));
		EXPECT_NE(nullptr, std::strstr(sd_last_error(), "sd_stats_json")) << sd_last_error();
	}
}

} // namespace
