// SPDX-License-Identifier: MIT
// Every documented error: the exact negative errno, a non-empty sd_strerror(),
// an sd_last_error() that names the problem, and nothing half-changed.
#include "common.hpp"

#include <shootdown/task.h>
#include <shootdown/file.h>

extern "C" {
#include "mm/pgtable.h"
}

#include <atomic>
#include <cctype>
#include <cmath>
#include <climits>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <csignal>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using sdtest::Attached;
using sdtest::Machine;

// The (function, code) pairs the tests of this file drove, each a public
// call made to fail with a code its header documents: DocumentedCodes
// (below) compares them with the headers once every test has run.
std::set<std::pair<std::string, int>> &driven_pairs()
{
	static std::set<std::pair<std::string, int>> pairs;
	return pairs;
}

// Record that @call (text starting with the public function's name, or a
// case name such as "sd_mm_create(NULL out)") was made to return @want;
// returns @got for the caller's EXPECT.
int driven(int want, const char *call, int got)
{
	std::cmatch m;
	if (std::regex_search(call, m, std::regex("^\\s*(sd_\\w+)")))
		driven_pairs().insert({m[1].str(), want});
	return got;
}

// Leave a known, unrelated message in sd_last_error() so a call that fails
// without recording its own detail is caught.
constexpr const char *kPrimer = "sd_cpu_attach: NULL argument";

void prime_last_error()
{
	ASSERT_EQ(-EINVAL, driven(-EINVAL, "sd_cpu_attach", sd_cpu_attach(nullptr, 0, nullptr)));
	ASSERT_STREQ(kPrimer, sd_last_error());
}

bool icontains(const std::string &hay, const std::string &needle)
{
	auto lower = [](std::string s) {
		for (auto &ch : s)
			ch = (char)std::tolower((unsigned char)ch);
		return s;
	};
	return lower(hay).find(lower(needle)) != std::string::npos;
}

// The common checks of one failing call. @keywords: the detail must contain
// at least one of them (case-insensitive).
#define check_error(call, want, ...) check_error_in(#call, (call), want, __VA_ARGS__)
void check_error_in(const char *call, int got, int want,
		    std::initializer_list<const char *> keywords)
{
	driven(want, call, got);
	EXPECT_EQ(want, got) << "got " << got << " (" << sd_strerror(got) << "): " << sd_last_error();
	const char *s = sd_strerror(got);
	ASSERT_NE(nullptr, s);
	EXPECT_GT(std::strlen(s), 0u);
	EXPECT_STRNE(sd_strerror(-4000), s) << "sd_strerror has no text for " << got;
	std::string detail = sd_last_error();
	EXPECT_NE(std::string(kPrimer), detail)
		<< "sd_last_error() was not updated by the failing call (library bug)";
	bool named = false;
	for (const char *k : keywords)
		named |= icontains(detail, k);
	std::string kws;
	for (const char *k : keywords)
		kws += std::string(" '") + k + "'";
	EXPECT_TRUE(named) << "sd_last_error() = \"" << detail << "\" names none of" << kws;
}

// Create must fail with @want, leave *out alone and name the problem.
void expect_create_fails(const sd_machine_config &cfg, int want,
			 std::initializer_list<const char *> keywords)
{
	sd_machine *sentinel = reinterpret_cast<sd_machine *>(uintptr_t(0xdeadbeef));
	sd_machine *m = sentinel;
	prime_last_error();
	int err = sd_machine_create(&cfg, &m);
	check_error_in("sd_machine_create", err, want, keywords);
	EXPECT_EQ(sentinel, m) << "*out written by a failing sd_machine_create";
	if (err == 0 && m != sentinel)
		sd_machine_destroy(m);
}

sd_machine_config cfg_cpus(unsigned n)
{
	sd_machine_config c = SD_MACHINE_CONFIG_INIT;
	c.nr_cpus = n;
	c.oracle = SD_ORACLE_CHECKED;
	return c;
}

// setenv for one scope, restoring the previous value.
struct EnvGuard {
	std::string name;
	bool had = false;
	std::string old;
	EnvGuard(const char *n, const char *v) : name(n)
	{
		const char *o = std::getenv(n);
		if (o) {
			had = true;
			old = o;
		}
		setenv(n, v, 1);
	}
	~EnvGuard()
	{
		if (had)
			setenv(name.c_str(), old.c_str(), 1);
		else
			unsetenv(name.c_str());
	}
};


// ---- machine configuration ----

TEST(Errors, ZeroCpus)
{
	// 0 is an error; "one per PU" is SD_NR_CPUS_ALL_PUS.
	expect_create_fails(cfg_cpus(0), -EINVAL, {"nr_cpus"});
}

TEST(Errors, TooManyCpus)
{
	expect_create_fails(cfg_cpus(4097), -EINVAL, {"nr_cpus", "4096"});
	expect_create_fails(cfg_cpus(~0u - 1), -EINVAL, {"nr_cpus", "4096"});
}

TEST(Errors, ConfigSizeZero)
{
	sd_machine_config c = cfg_cpus(2);
	c.size = 0;
	expect_create_fails(c, -EINVAL, {"size"});
}

TEST(Errors, ConfigSizeTooBig)
{
	// A config from a "newer" caller: the library must refuse it without
	// reading the unknown tail.
	std::vector<unsigned char> buf(sizeof(sd_machine_config) + 64, 0);
	sd_machine_config c = cfg_cpus(2);
	c.size = buf.size();
	std::memcpy(buf.data(), &c, sizeof(c));
	sd_machine_config big;
	std::memcpy(&big, buf.data(), sizeof(big));
	expect_create_fails(big, -EINVAL, {"size"});
}

TEST(Errors, TlbSetsNotPow2)
{
	sd_machine_config c = cfg_cpus(2);
	c.tlb_sets = 100;
	expect_create_fails(c, -EINVAL, {"tlb_sets"});
}

TEST(Errors, TlbWaysNotPow2)
{
	sd_machine_config c = cfg_cpus(2);
	c.tlb_ways = 3;
	expect_create_fails(c, -EINVAL, {"tlb_ways"});
}

TEST(Errors, TlbL1NotPow2)
{
	sd_machine_config c = cfg_cpus(2);
	c.tlb_l1_entries = 48;
	expect_create_fails(c, -EINVAL, {"tlb_l1_entries"});
}

TEST(Errors, IpiSignalSigint)
{
	sd_machine_config c = cfg_cpus(2);
	c.ipi_signal = SIGINT;
	expect_create_fails(c, -EINVAL, {"ipi_signal"});
}

TEST(Errors, IpiSignal1000)
{
	sd_machine_config c = cfg_cpus(2);
	c.ipi_signal = 1000;
	expect_create_fails(c, -EINVAL, {"ipi_signal"});
}

TEST(Errors, IpiSignalDefaultAndUsr1AreFine)
{
	for (int sig : {0, (int)SIGUSR1, (int)SIGUSR2}) {
		sd_machine_config c = cfg_cpus(2);
		c.ipi_signal = sig;
		sd_machine *m = nullptr;
		ASSERT_EQ(0, sd_machine_create(&c, &m)) << "sig " << sig << ": " << sd_last_error();
		struct sd_machine_info info;
		ASSERT_EQ(0, sd_machine_info(m, &info));
		EXPECT_EQ(sig ? sig : SIGRTMIN + 4, info.ipi_signal);
		EXPECT_EQ(0, sd_machine_destroy(m));
	}
}

TEST(Errors, AsidBits3)
{
	sd_machine_config c = cfg_cpus(2);
	c.asid_bits = 3;
	expect_create_fails(c, -EINVAL, {"asid_bits"});
}

TEST(Errors, AsidBits17)
{
	sd_machine_config c = cfg_cpus(2);
	c.asid_bits = 17;
	expect_create_fails(c, -EINVAL, {"asid_bits"});
}

TEST(Errors, AsidBits4TooFewFor16Cpus)
{
	sd_machine_config c = cfg_cpus(16);
	c.asid_bits = 4;
	expect_create_fails(c, -EINVAL, {"asid"});
	// ...while 4 bits are enough for 2 CPUs.
	sd_machine_config ok = cfg_cpus(2);
	ok.asid_bits = 4;
	sd_machine *m = nullptr;
	ASSERT_EQ(0, sd_machine_create(&ok, &m)) << sd_last_error();
	EXPECT_EQ(0, sd_machine_destroy(m));
}

TEST(Errors, UnknownStrategy)
{
	sd_machine_config c = cfg_cpus(2);
	c.strategy = "bogus";
	expect_create_fails(c, -ENOENT, {"bogus"});
}

TEST(Errors, UnknownStrategyOption)
{
	sd_machine_config c = cfg_cpus(2);
	c.strategy = "broadcast:frobnicate=1";
	expect_create_fails(c, -ENOENT, {"frobnicate"});
}

TEST(Errors, X86StrategyOptions)
{
	sd_machine_config c = cfg_cpus(2);
	// Bad values name the option and the strategy; nothing is left behind
	// (the machine is not created, so the next create starts clean).
	const char *bad[][2] = {
		{"ipi:cpumask=sometimes", "cpumask"}, {"ipi:ceiling=x", "ceiling"},
		{"ipi:trim_ms=0", "trim_ms"},         {"ipi:lru=both", "lru"},
		{"gbcast:pool=0", "pool"},            {"gbcast:pool=70000", "pool"},
		{"gbcast:sample=0", "sample"},        {"gbcast:threshold_growth=2", "threshold_growth"},
		{"gbcast:count_max=0", "count_max"},  {"gbcast:lru=both", "lru"},
	};
	for (auto &b : bad) {
		SCOPED_TRACE(b[0]);
		c.strategy = b[0];
		expect_create_fails(c, -EINVAL, {b[1]});
	}
	// gbcast's options are not ipi's.
	c.strategy = "ipi:pool=4";
	expect_create_fails(c, -ENOENT, {"pool", "ipi"});
	// A spec sd_machine_info() could not report whole is refused.
	c.strategy = "gbcast:pool=4,threshold=0,sample=1,threshold_growth=1,count_max=2,cpumask=lazy";
	expect_create_fails(c, -EINVAL, {"longer than 63"});
	// Every good option.
	for (const char *good : { "ipi:cpumask=eager,ceiling=4,trim_ms=5",
				  "gbcast:pool=4,threshold=0,sample=1,threshold_growth=1",
				  "gbcast:count_max=2,cpumask=lazy" }) {
		c.strategy = good;
		sd_machine *m = nullptr;
		ASSERT_EQ(0, sd_machine_create(&c, &m)) << good << ": " << sd_last_error();
		EXPECT_EQ(0, sd_machine_destroy(m));
	}
}

TEST(Errors, UnknownOptionOfTestStrategy)
{
	sd_machine_config c = cfg_cpus(2);
	c.strategy = "none:frobnicate=1";
	expect_create_fails(c, -ENOENT, {"frobnicate"});
}

TEST(Errors, MalformedStrategyOption)
{
	sd_machine_config c = cfg_cpus(2);
	c.strategy = "broadcast:max_tlbi_ops";
	expect_create_fails(c, -EINVAL, {"max_tlbi_ops"});
}

TEST(Errors, BadStrategyOptionValue)
{
	sd_machine_config c = cfg_cpus(2);
	c.strategy = "broadcast:max_tlbi_ops=abc";
	expect_create_fails(c, -EINVAL, {"max_tlbi_ops", "abc"});
	c.strategy = "broadcast:max_tlbi_ops=0";
	expect_create_fails(c, -EINVAL, {"max_tlbi_ops"});
	c.strategy = "broadcast:max_tlbi_ops=-5";
	expect_create_fails(c, -EINVAL, {"max_tlbi_ops"});
	// A good value is accepted and reported back.
	c.strategy = "broadcast:max_tlbi_ops=8";
	sd_machine *m = nullptr;
	ASSERT_EQ(0, sd_machine_create(&c, &m)) << sd_last_error();
	struct sd_machine_info info;
	ASSERT_EQ(0, sd_machine_info(m, &info));
	EXPECT_STREQ("broadcast:max_tlbi_ops=8", info.strategy);
	EXPECT_EQ(0, sd_machine_destroy(m));
}

// Every option that takes one of a few words: a bad word is -EINVAL with
// the accepted ones listed in the message (and what each stands for), and
// every listed word is accepted.
TEST(Errors, ChoiceOptionsListWhatTheyAccept)
{
	struct Choice {
		const char *strategy, *key, *want;
		std::vector<const char *> values;
	};
	const Choice choices[] = {
		{"ipi", "cpumask", "want eager or lazy", {"eager", "lazy"}},
		{"ipi", "order", "want concurrent (5.13) or serial (before)", {"concurrent", "serial"}},
		{"ipi", "ack", "want late or early", {"late", "early"}},
		{"ipi", "lines", "want consolidated (EuroSys 2020) or split (the kernel's layout)",
		 {"consolidated", "split"}},
		{"rar", "pti", "want 0 or 1", {"0", "1"}},
		{"rar", "self", "want pcid, local or rar", {"pcid", "local", "rar"}},
		{"rar", "self_flush", "want 0 or 1", {"0", "1"}},
		{"rar", "trim", "want v4 or v2", {"v4", "v2"}},
		{"riscv", "rfence", "want auto, sbi or ipi", {"auto", "sbi", "ipi"}},
		{"riscv", "svinval", "want 0 or 1", {"0", "1"}},
		{"riscv", "asid", "want 0 or 1", {"0", "1"}},
		{"riscv", "batch", "want 1 (Linux 6.8's batched reclaim) or 0 (a flush a page)",
		 {"0", "1"}},
		{"broadcast", "select", "want always, active_cpu, tlb_mode or ipi",
		 {"always", "active_cpu", "tlb_mode", "ipi"}},
		{"broadcast", "batch", "want 1 (Linux 6.5's batched reclaim) or 0 (a flush a page)",
		 {"0", "1"}},
		{"broadcast", "wp_reuse", "want local (Linux 6.19) or tlbi (before)", {"local", "tlbi"}},
	};
	for (const Choice &ch : choices) {
		sd_machine_config c = cfg_cpus(2);
		std::string bad = std::string(ch.strategy) + ":" + ch.key + "=maybe";
		c.strategy = bad.c_str();
		expect_create_fails(c, -EINVAL, {ch.key});
		const std::string detail = sd_last_error();
		for (const char *part : {ch.key, "maybe", ch.strategy, ch.want})
			EXPECT_NE(std::string::npos, detail.find(part))
				<< bad << ": \"" << detail << "\" lacks \"" << part << "\"";
		for (const char *v : ch.values) {
			std::string good = std::string(ch.strategy) + ":" + ch.key + "=" + v;
			c.strategy = good.c_str();
			sd_machine *m = nullptr;
			EXPECT_EQ(0, sd_machine_create(&c, &m)) << good << ": " << sd_last_error();
			if (m) {
				EXPECT_EQ(0, sd_machine_destroy(m));
			}
		}
	}
}

TEST(Errors, BadSyntheticTopology)
{
	EnvGuard env("SD_TOPOLOGY", "pack:2 frob:lots");
	expect_create_fails(cfg_cpus(2), -EINVAL, {"SD_TOPOLOGY", "synthetic", "topology"});
}

TEST(Errors, PlaceListEmpty)
{
	sd_machine_config c = cfg_cpus(2);
	c.placement = SD_PLACE_LIST;
	c.pu_list = nullptr;
	c.pu_list_len = 0;
	expect_create_fails(c, -EINVAL, {"pu_list"});
	unsigned one[1] = {0};
	c.pu_list = one;
	c.pu_list_len = 0;
	expect_create_fails(c, -EINVAL, {"pu_list"});
}

TEST(Errors, PlaceListNoSuchPu)
{
	unsigned list[2] = {0, 9999};
	sd_machine_config c = cfg_cpus(2);
	c.placement = SD_PLACE_LIST;
	c.pu_list = list;
	c.pu_list_len = 2;
	expect_create_fails(c, -EINVAL, {"9999", "pu_list"});
}

TEST(Errors, UnknownPlacementAndOracleMode)
{
	sd_machine_config c = cfg_cpus(2);
	c.placement = static_cast<sd_placement>(7);
	expect_create_fails(c, -EINVAL, {"placement"});
	sd_machine_config d = cfg_cpus(2);
	d.oracle = static_cast<sd_oracle_mode>(9);
	expect_create_fails(d, -EINVAL, {"oracle"});
}

TEST(Errors, TooManyFrames)
{
	sd_machine_config c = cfg_cpus(2);
	c.nr_frames = (UINT64_C(1) << 24) + 1;
	expect_create_fails(c, -EINVAL, {"nr_frames"});
}

TEST(Errors, NullArguments)
{
	prime_last_error();
	check_error(sd_machine_create(nullptr, nullptr), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_machine_destroy(nullptr), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_mm_create(nullptr, nullptr), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_mm_destroy(nullptr), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_stats_snapshot(nullptr, nullptr), -EINVAL, {"NULL"});
}

// ---- address-space calls ----

constexpr uint64_t P = SD_PAGE_SIZE;

// A machine with the test thread attached as CPU 0, an mm loaded, and a
// canary page mapped RW and populated.
class MmErrors : public ::testing::Test {
protected:
	static constexpr uint64_t kCanary = 0x10000;
	static constexpr uint64_t kFree = 0x200000;
	sd_machine *m = nullptr;
	sd_cpu *c = nullptr;
	sd_mm *mm = nullptr;
	uint64_t canary_pfn = 0;

	void SetUp() override
	{
		sd_machine_config cfg = cfg_cpus(2);
		ASSERT_EQ(0, sd_machine_create(&cfg, &m)) << sd_last_error();
		ASSERT_EQ(0, sd_cpu_attach(m, 0, &c)) << sd_last_error();
		ASSERT_EQ(0, sd_mm_create(m, &mm));
		ASSERT_EQ(0, sd_switch_mm(c, mm));
		ASSERT_EQ(0, sd_mmap(c, mm, kCanary, P, SD_PROT_READ | SD_PROT_WRITE));
		ASSERT_EQ(0, sd_access(c, kCanary, SD_WRITE, &canary_pfn));
		ASSERT_NE(0u, canary_pfn);
	}

	void TearDown() override
	{
		if (c) {
			EXPECT_EQ(0, sd_switch_mm(c, nullptr));
			if (mm) {
				EXPECT_EQ(0, sd_mm_destroy(mm)) << sd_last_error();
			}
			EXPECT_EQ(0, sd_cpu_detach(c)) << sd_last_error();
		}
		if (m) {
			EXPECT_EQ(0, sd_machine_destroy(m)) << sd_last_error();
		}
	}

	// The canary is still mapped RW with the same frame, and nothing new
	// appeared around it or at kFree.
	void expect_untouched()
	{
		uint64_t pfn = 0;
		EXPECT_EQ(0, sd_access(c, kCanary, SD_READ, &pfn));
		EXPECT_EQ(canary_pfn, pfn) << "canary lost its frame";
		EXPECT_EQ(0, sd_access(c, kCanary, SD_WRITE, &pfn)) << "canary lost its write permission";
		EXPECT_EQ(-EFAULT, driven(-EFAULT, "sd_access", sd_access(c, kCanary + P, SD_READ, nullptr)));
		EXPECT_EQ(-EFAULT, driven(-EFAULT, "sd_access", sd_access(c, kCanary - P, SD_READ, nullptr)));
		EXPECT_EQ(-EFAULT, driven(-EFAULT, "sd_access", sd_access(c, kFree, SD_READ, nullptr)));
	}

	// Run the same bad range through all four range calls.
	void expect_range_rejected(uint64_t va, uint64_t len, std::initializer_list<const char *> kw)
	{
		SCOPED_TRACE(::testing::Message() << std::hex << "va 0x" << va << " len 0x" << len);
		prime_last_error();
		check_error(sd_mmap(c, mm, va, len, SD_PROT_READ), -EINVAL, kw);
		prime_last_error();
		check_error(sd_munmap(c, mm, va, len), -EINVAL, kw);
		prime_last_error();
		check_error(sd_mprotect(c, mm, va, len, SD_PROT_READ), -EINVAL, kw);
		prime_last_error();
		check_error(sd_madvise_dontneed(c, mm, va, len), -EINVAL, kw);
		expect_untouched();
	}
};

TEST_F(MmErrors, LengthZero)
{
	expect_range_rejected(kCanary, 0, {"length", "len"});
	expect_range_rejected(kFree, 0, {"length", "len"});
}

TEST_F(MmErrors, UnalignedVa)
{
	expect_range_rejected(kCanary + 1, P, {"align"});
	expect_range_rejected(kFree + 8, 4 * P, {"align"});
}

TEST_F(MmErrors, UnalignedLen)
{
	expect_range_rejected(kCanary, P + 1, {"align"});
	expect_range_rejected(kFree, 100, {"align"});
}

TEST_F(MmErrors, RangeOverflows64Bits)
{
	// Starts at the canary and wraps around 2^64 to below it.
	expect_range_rejected(kCanary, UINT64_C(0) - P, {"48", "overflow", "VA space"});
	expect_range_rejected(UINT64_C(0) - P, 2 * P, {"48", "overflow", "VA space"});
}

TEST_F(MmErrors, RangeLeaves48Bits)
{
	expect_range_rejected(SD_VA_END - P, 2 * P, {"48", "VA space"});
	expect_range_rejected(SD_VA_END, P, {"48", "VA space"});
	// Starts at the canary and covers it.
	expect_range_rejected(kCanary, SD_VA_END, {"48", "VA space"});
	// The last page itself is fine.
	EXPECT_EQ(0, sd_mmap(c, mm, SD_VA_END - P, P, SD_PROT_READ)) << sd_last_error();
	EXPECT_EQ(0, sd_access(c, SD_VA_END - P, SD_READ, nullptr));
	EXPECT_EQ(0, sd_munmap(c, mm, SD_VA_END - P, P));
}

TEST_F(MmErrors, UnknownProtBits)
{
	for (unsigned prot : {4u, 0x80u, 0x80000000u}) {
		prime_last_error();
		check_error(sd_mmap(c, mm, kFree, P, prot), -EINVAL, {"prot"});
		prime_last_error();
		check_error(sd_mprotect(c, mm, kCanary, P, prot | SD_PROT_READ), -EINVAL, {"prot"});
	}
	expect_untouched();
}

TEST_F(MmErrors, MmapOverExistingMapping)
{
	const uint64_t a = 0x300000;
	ASSERT_EQ(0, sd_mmap(c, mm, a, 2 * P, SD_PROT_READ));
	// The conflict is at the start of the range: the tail must stay unmapped.
	prime_last_error();
	check_error(sd_mmap(c, mm, a + P, 3 * P, SD_PROT_READ | SD_PROT_WRITE), -EEXIST,
		    {"already mapped", "exist"});
	// The conflict is at the end: the head must stay unmapped.
	prime_last_error();
	check_error(sd_mmap(c, mm, a - 2 * P, 3 * P, SD_PROT_READ | SD_PROT_WRITE), -EEXIST,
		    {"already mapped", "exist"});
	for (uint64_t va : {a - 2 * P, a - P, a + 2 * P, a + 3 * P})
		EXPECT_EQ(-EFAULT, driven(-EFAULT, "sd_access", sd_access(c, va, SD_READ, nullptr))) << std::hex << va;
	// The existing pages kept their protection (read-only).
	EXPECT_EQ(0, sd_access(c, a, SD_READ, nullptr));
	EXPECT_EQ(0, sd_access(c, a + P, SD_READ, nullptr));
	EXPECT_EQ(-EACCES, driven(-EACCES, "sd_access", sd_access(c, a + P, SD_WRITE, nullptr)));
	// And the free parts can be mapped now.
	EXPECT_EQ(0, sd_mmap(c, mm, a + 2 * P, 2 * P, SD_PROT_READ));
	EXPECT_EQ(0, sd_mmap(c, mm, a - 2 * P, 2 * P, SD_PROT_READ));
	expect_untouched();
}

TEST_F(MmErrors, MprotectOverHole)
{
	const uint64_t b = 0x400000;
	uint64_t pfn = 0, pfn2 = 0;
	ASSERT_EQ(0, sd_mmap(c, mm, b, P, SD_PROT_READ | SD_PROT_WRITE));
	ASSERT_EQ(0, sd_access(c, b, SD_WRITE, &pfn));
	prime_last_error();
	check_error(sd_mprotect(c, mm, b, 2 * P, SD_PROT_READ), -ENOMEM, {"not mapped"});
	prime_last_error();
	check_error(sd_mprotect(c, mm, b - P, 2 * P, SD_PROT_NONE), -ENOMEM, {"not mapped"});
	// A hole in another page-table leaf (2 MiB further on).
	prime_last_error();
	check_error(sd_mprotect(c, mm, b, 0x200000 + P, SD_PROT_READ), -ENOMEM, {"not mapped"});
	// The mapped page kept RW and its frame; the holes stay holes.
	EXPECT_EQ(0, sd_access(c, b, SD_WRITE, &pfn2));
	EXPECT_EQ(pfn, pfn2);
	EXPECT_EQ(-EFAULT, driven(-EFAULT, "sd_access", sd_access(c, b + P, SD_READ, nullptr)));
	EXPECT_EQ(-EFAULT, driven(-EFAULT, "sd_access", sd_access(c, b - P, SD_READ, nullptr)));
	expect_untouched();
}

TEST_F(MmErrors, MunmapAndMadviseOverHolesAreFine)
{
	// munmap(2) semantics: holes in the range are allowed.
	EXPECT_EQ(0, sd_munmap(c, mm, 0x500000, 16 * P));
	EXPECT_EQ(0, sd_madvise_dontneed(c, mm, 0x500000, 16 * P));
	expect_untouched();
}

TEST_F(MmErrors, AccessUnmapped)
{
	prime_last_error();
	check_error(sd_access(c, kFree, SD_READ, nullptr), -EFAULT, {"not mapped", "unmapped"});
	prime_last_error();
	check_error(sd_access(c, SD_VA_END - 1, SD_WRITE, nullptr), -EFAULT,
		    {"not mapped", "unmapped"});
}

// sd_mm_fork(): bad arguments leave the parent as it was (its canary page
// still writable in place, no child made).
TEST_F(MmErrors, ForkArguments)
{
	sd_mm *child = reinterpret_cast<sd_mm *>(0x1);
	prime_last_error();
	check_error(sd_mm_fork(c, nullptr, &child), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_mm_fork(c, mm, nullptr), -EINVAL, {"NULL"});
	sd_irq_disable(c);
	prime_last_error();
	check_error(sd_mm_fork(c, mm, &child), -EINVAL, {"interrupts"});
	EXPECT_EQ(0, sd_irq_enable(c));
	sd_machine *other = nullptr;
	sd_machine_config cfg = cfg_cpus(1);
	ASSERT_EQ(0, sd_machine_create(&cfg, &other));
	sd_mm *foreign = nullptr;
	ASSERT_EQ(0, sd_mm_create(other, &foreign));
	prime_last_error();
	check_error(sd_mm_fork(c, foreign, &child), -EINVAL, {"another machine"});
	EXPECT_EQ(0, sd_mm_destroy(foreign));
	EXPECT_EQ(0, sd_machine_destroy(other));
	std::thread t([&] {
		prime_last_error();
		check_error(sd_mm_fork(c, mm, &child), -EPERM, {"attached"});
	});
	t.join();
	EXPECT_EQ(reinterpret_cast<sd_mm *>(0x1), child) << "a failed fork wrote *child";
	uint64_t pfn = 0;
	EXPECT_EQ(0, sd_access(c, kCanary, SD_WRITE, &pfn));
	EXPECT_EQ(canary_pfn, pfn) << "a failed fork left the parent's page copy-on-write";
	sd_stats st = SD_STATS_INIT;
	ASSERT_EQ(0, sd_stats_snapshot(m, &st));
	EXPECT_EQ(0u, st.counter[SD_STAT_WP_FAULT]);
}

TEST_F(MmErrors, AccessWriteToReadOnly)
{
	ASSERT_EQ(0, sd_mmap(c, mm, kFree, P, SD_PROT_READ));
	uint64_t pfn = 1;
	EXPECT_EQ(0, sd_access(c, kFree, SD_READ, &pfn));
	EXPECT_EQ(0u, pfn) << "a read of a page never written maps the zero page";
	prime_last_error();
	// The zero page is write-protected, but the mapping forbids the write
	// first: -EACCES, not a copy-on-write break.
	check_error(sd_access(c, kFree, SD_WRITE, nullptr), -EACCES,
		    {"forbid", "prot", "read-only", "permission", "denied"});
	EXPECT_EQ(0, sd_munmap(c, mm, kFree, P));
}

TEST_F(MmErrors, AccessProtNone)
{
	ASSERT_EQ(0, sd_mmap(c, mm, kFree, P, SD_PROT_NONE));
	prime_last_error();
	check_error(sd_access(c, kFree, SD_READ, nullptr), -EACCES,
		    {"forbid", "prot", "permission", "denied"});
	prime_last_error();
	check_error(sd_access(c, kFree, SD_WRITE, nullptr), -EACCES,
		    {"forbid", "prot", "permission", "denied"});
	// A PROT_NONE mapping is still a mapping: mmap over it is refused.
	EXPECT_EQ(-EEXIST, driven(-EEXIST, "sd_mmap", sd_mmap(c, mm, kFree, P, SD_PROT_READ)));
	EXPECT_EQ(0, sd_munmap(c, mm, kFree, P));
}

TEST_F(MmErrors, AccessOutsideVaSpace)
{
	for (uint64_t va : {SD_VA_END, SD_VA_END + kCanary, ~UINT64_C(0)}) {
		prime_last_error();
		check_error(sd_access(c, va, SD_READ, nullptr), -EFAULT,
			    {"48", "outside", "VA space", "not mapped"});
	}
	// Not aliased onto the canary (va & (2^48 - 1) == kCanary).
	expect_untouched();
}

TEST_F(MmErrors, AccessNoMmLoaded)
{
	ASSERT_EQ(0, sd_switch_mm(c, nullptr));
	EXPECT_EQ(nullptr, sd_cpu_current_mm(c));
	prime_last_error();
	check_error(sd_access(c, kCanary, SD_READ, nullptr), -ESRCH,
		    {"no address space", "no mm", "not loaded", "loaded"});
	ASSERT_EQ(0, sd_switch_mm(c, mm));
	expect_untouched();
}

TEST_F(MmErrors, AccessIdleCpu)
{
	ASSERT_EQ(0, sd_cpu_idle(c));
	EXPECT_EQ(mm, sd_cpu_current_mm(c)) << "idle keeps the mm loaded (lazily)";
	prime_last_error();
	check_error(sd_access(c, kCanary, SD_READ, nullptr), -ESRCH, {"idle", "lazy", "loaded"});
	ASSERT_EQ(0, sd_switch_mm(c, mm));
	expect_untouched();
}

TEST_F(MmErrors, MmDestroyWhileLoaded)
{
	prime_last_error();
	check_error(sd_mm_destroy(mm), -EBUSY, {"loaded"});
	expect_untouched();
	// Lazily loaded does not count (test_lifecycle), but the destroyer
	// must be able to wait for lazy CPUs: not with interrupts off.
	ASSERT_EQ(0, sd_cpu_idle(c));
	sd_irq_disable(c);
	prime_last_error();
	check_error(sd_mm_destroy(mm), -EDEADLK, {"interrupts are off"});
	EXPECT_EQ(0, sd_irq_enable(c));
	ASSERT_EQ(0, sd_switch_mm(c, mm));
	expect_untouched();
}

TEST_F(MmErrors, SwitchToMmOfAnotherMachine)
{
	sd_machine_config cfg = cfg_cpus(1);
	sd_machine *m2 = nullptr;
	sd_mm *other = nullptr;
	ASSERT_EQ(0, sd_machine_create(&cfg, &m2)) << sd_last_error();
	ASSERT_EQ(0, sd_mm_create(m2, &other));
	prime_last_error();
	check_error(sd_switch_mm(c, other), -EINVAL, {"another machine"});
	EXPECT_EQ(mm, sd_cpu_current_mm(c));
	prime_last_error();
	check_error(sd_mmap(c, other, kFree, P, SD_PROT_READ), -EINVAL, {"another machine"});
	EXPECT_EQ(0, sd_mm_destroy(other));
	EXPECT_EQ(0, sd_machine_destroy(m2));
	expect_untouched();
}

TEST_F(MmErrors, CallsFromAThreadThatIsNotTheCpu)
{
	// Another thread uses the handle of CPU 0, which the test thread holds.
	std::thread t([&] {
		EXPECT_EQ(nullptr, sd_cpu_self());
		prime_last_error();
		check_error(sd_mmap(c, mm, kFree, P, SD_PROT_READ), -EPERM, {"not attached"});
		prime_last_error();
		check_error(sd_munmap(c, mm, kCanary, P), -EPERM, {"not attached"});
		prime_last_error();
		check_error(sd_mprotect(c, mm, kCanary, P, SD_PROT_READ), -EPERM, {"not attached"});
		prime_last_error();
		check_error(sd_madvise_dontneed(c, mm, kCanary, P), -EPERM, {"not attached"});
		prime_last_error();
		check_error(sd_access(c, kCanary, SD_READ, nullptr), -EPERM, {"not attached"});
		prime_last_error();
		check_error(sd_switch_mm(c, nullptr), -EPERM, {"not attached"});
		prime_last_error();
		check_error(sd_cpu_idle(c), -EPERM, {"not attached"});
		prime_last_error();
		check_error(sd_cpu_detach(c), -EPERM, {"not attached"});
		prime_last_error();
		check_error(sd_smp_call_single(c, 1, [](sd_cpu *, void *) {}, nullptr), -EPERM,
			    {"not attached"});
	});
	t.join();
	// Nothing happened to CPU 0 or its mm.
	EXPECT_EQ(c, sd_cpu_self());
	EXPECT_EQ(mm, sd_cpu_current_mm(c));
	sd_cpu_info ci;
	ASSERT_EQ(0, sd_machine_cpu_info(m, 0, &ci));
	EXPECT_EQ(1, ci.attached);
	expect_untouched();
}

TEST_F(MmErrors, RangeCallsWithInterruptsOff)
{
	sd_irq_disable(c);
	int e1 = sd_mmap(c, mm, kFree, P, SD_PROT_READ);
	int e2 = sd_munmap(c, mm, kCanary, P);
	sd_irq_enable(c);
	EXPECT_LT(e1, 0);
	EXPECT_LT(e2, 0);
	expect_untouched();
}

// ---- CPUs and machines ----

TEST(Errors, AttachSameThreadTwice)
{
	Machine mach(cfg_cpus(2));
	ASSERT_NE(nullptr, mach.m);
	Attached a(mach.m, 0);
	ASSERT_NE(nullptr, a.c);
	sd_cpu *c2 = nullptr;
	prime_last_error();
	check_error(sd_cpu_attach(mach.m, 1, &c2), -EBUSY, {"already"});
	EXPECT_EQ(nullptr, c2);
	prime_last_error();
	check_error(sd_cpu_attach(mach.m, 0, &c2), -EBUSY, {"already"});
	EXPECT_EQ(a.c, sd_cpu_self());
	sd_cpu_info ci;
	ASSERT_EQ(0, sd_machine_cpu_info(mach.m, 1, &ci));
	EXPECT_EQ(0, ci.attached) << "CPU 1 half-attached by a failing call";
	EXPECT_EQ(-1, ci.pinned);

	// Attached to one machine, the thread cannot become a CPU of another.
	Machine other(cfg_cpus(1));
	ASSERT_NE(nullptr, other.m);
	prime_last_error();
	check_error(sd_cpu_attach(other.m, 0, &c2), -EBUSY, {"already"});
	ASSERT_EQ(0, sd_machine_cpu_info(other.m, 0, &ci));
	EXPECT_EQ(0, ci.attached);
}

TEST(Errors, AttachCpuTakenByAnotherThread)
{
	Machine mach(cfg_cpus(2));
	ASSERT_NE(nullptr, mach.m);
	Attached a(mach.m, 0);
	ASSERT_NE(nullptr, a.c);
	std::thread t([&] {
		sd_cpu *c = nullptr;
		prime_last_error();
		check_error(sd_cpu_attach(mach.m, 0, &c), -EBUSY, {"already"});
		EXPECT_EQ(nullptr, c);
		EXPECT_EQ(nullptr, sd_cpu_self());
		// CPU 1 is free: this thread can take it.
		ASSERT_EQ(0, sd_cpu_attach(mach.m, 1, &c)) << sd_last_error();
		EXPECT_EQ(0, sd_cpu_detach(c));
	});
	t.join();
	EXPECT_EQ(a.c, sd_cpu_self());
}

TEST(Errors, AttachCpuOutOfRange)
{
	Machine mach(cfg_cpus(2));
	ASSERT_NE(nullptr, mach.m);
	sd_cpu *c = nullptr;
	for (unsigned id : {2u, 4096u, ~0u}) {
		prime_last_error();
		check_error(sd_cpu_attach(mach.m, id, &c), -EINVAL, {"out of range"});
		EXPECT_EQ(nullptr, c);
		EXPECT_EQ(nullptr, sd_cpu_self());
	}
	sd_cpu_info ci;
	prime_last_error();
	check_error(sd_machine_cpu_info(mach.m, 2, &ci), -EINVAL, {"out of range"});
	sd_stats st = SD_STATS_INIT;
	prime_last_error();
	check_error(sd_stats_cpu(mach.m, 2, &st), -EINVAL, {"out of range"});
}

TEST(Errors, DetachWithInterruptsOff)
{
	Machine mach(cfg_cpus(2));
	ASSERT_NE(nullptr, mach.m);
	sd_cpu *c = nullptr;
	ASSERT_EQ(0, sd_cpu_attach(mach.m, 0, &c));
	sd_irq_disable(c);
	prime_last_error();
	check_error(sd_cpu_detach(c), -EBUSY, {"interrupts"});
	EXPECT_EQ(c, sd_cpu_self());
	sd_irq_enable(c);
	EXPECT_EQ(0, sd_cpu_detach(c));
	EXPECT_EQ(nullptr, sd_cpu_self());
}

TEST(Errors, DestroyMachineWithAttachedCpu)
{
	sd_machine_config cfg = cfg_cpus(2);
	sd_machine *m = nullptr;
	ASSERT_EQ(0, sd_machine_create(&cfg, &m));
	sd_cpu *c = nullptr;
	ASSERT_EQ(0, sd_cpu_attach(m, 1, &c));
	// From a thread that is not a CPU.
	std::thread t([&] {
		prime_last_error();
		check_error(sd_machine_destroy(m), -EBUSY, {"attached"});
	});
	t.join();
	// The machine still works.
	sd_mm *mm = nullptr;
	uint64_t pfn = 0;
	ASSERT_EQ(0, sd_mm_create(m, &mm));
	ASSERT_EQ(0, sd_switch_mm(c, mm));
	ASSERT_EQ(0, sd_mmap(c, mm, 0x1000, P, SD_PROT_READ | SD_PROT_WRITE));
	EXPECT_EQ(0, sd_access(c, 0x1000, SD_WRITE, &pfn));
	EXPECT_NE(0u, pfn);
	EXPECT_EQ(0, sd_mprotect(c, mm, 0x1000, P, SD_PROT_READ));
	EXPECT_EQ(-EACCES, driven(-EACCES, "sd_access", sd_access(c, 0x1000, SD_WRITE, nullptr)));
	ASSERT_EQ(0, sd_switch_mm(c, nullptr));
	ASSERT_EQ(0, sd_mm_destroy(mm));
	ASSERT_EQ(0, sd_cpu_detach(c));
	EXPECT_EQ(0, sd_machine_destroy(m)) << sd_last_error();
}

TEST(Errors, DestroyMachineWithLiveMm)
{
	sd_machine_config cfg = cfg_cpus(2);
	sd_machine *m = nullptr;
	sd_mm *mm = nullptr;
	ASSERT_EQ(0, sd_machine_create(&cfg, &m));
	ASSERT_EQ(0, sd_mm_create(m, &mm));
	prime_last_error();
	check_error(sd_machine_destroy(m), -EBUSY, {"address space"});
	// Still usable.
	{
		Attached a(m, 0);
		ASSERT_NE(nullptr, a.c);
		ASSERT_EQ(0, sd_switch_mm(a.c, mm));
		EXPECT_EQ(0, sd_mmap(a.c, mm, 0, P, SD_PROT_READ));
		EXPECT_EQ(0, sd_access(a.c, 0, SD_READ, nullptr));
		ASSERT_EQ(0, sd_switch_mm(a.c, nullptr));
	}
	ASSERT_EQ(0, sd_mm_destroy(mm));
	EXPECT_EQ(0, sd_machine_destroy(m)) << sd_last_error();
}

void nop_ipi(sd_cpu *, void *arg)
{
	static_cast<std::atomic<int> *>(arg)->fetch_add(1);
}

TEST(Errors, IpiCallBadTargets)
{
	Machine mach(cfg_cpus(3));
	ASSERT_NE(nullptr, mach.m);
	Attached a(mach.m, 0);
	ASSERT_NE(nullptr, a.c);
	std::atomic<int> ran{0};
	prime_last_error();
	check_error(sd_smp_call_single(a.c, 0, nop_ipi, &ran), -EINVAL, {"target"});
	prime_last_error();
	check_error(sd_smp_call_single(a.c, 3, nop_ipi, &ran), -EINVAL, {"target"});
	prime_last_error();
	check_error(sd_smp_call_single(a.c, ~0u, nop_ipi, &ran), -EINVAL, {"target"});
	// CPU 1 exists but has no thread.
	prime_last_error();
	check_error(sd_smp_call_single(a.c, 1, nop_ipi, &ran), -EINVAL, {"no thread"});
	prime_last_error();
	check_error(sd_smp_call_single(a.c, 1, nullptr, nullptr), -EINVAL, {"NULL"});
	EXPECT_EQ(0, ran.load());
}

TEST(Errors, IpiCallWithInterruptsOff)
{
	Machine mach(cfg_cpus(2));
	ASSERT_NE(nullptr, mach.m);
	Attached a(mach.m, 0);
	ASSERT_NE(nullptr, a.c);
	std::atomic<int> ran{0};
	std::atomic<bool> attached{false}, stop{false};
	std::thread t([&] {
		Attached b(mach.m, 1);
		attached = true;
		while (!stop)
			std::this_thread::yield();
	});
	while (!attached)
		std::this_thread::yield();
	sd_irq_disable(a.c);
	prime_last_error();
	int err = sd_smp_call_single(a.c, 1, nop_ipi, &ran);
	sd_irq_enable(a.c);
	check_error_in("sd_smp_call_single", err, -EDEADLK, {"interrupts"});
	EXPECT_EQ(0, ran.load()) << "a refused IPI was delivered anyway";
	// With interrupts on it goes through.
	EXPECT_EQ(0, sd_smp_call_single(a.c, 1, nop_ipi, &ran));
	EXPECT_EQ(1, ran.load());
	stop = true;
	t.join();
}

TEST(Errors, StrictPinningOnSyntheticTopology)
{
	EnvGuard env("SD_TOPOLOGY", "pack:2 core:8 pu:2");
	sd_machine_config cfg = cfg_cpus(2);
	cfg.flags = SD_MACHINE_STRICT_PIN;
	sd_machine *m = nullptr;
	ASSERT_EQ(0, sd_machine_create(&cfg, &m)) << sd_last_error();
	sd_cpu *c = nullptr;
	prime_last_error();
	check_error(sd_cpu_attach(m, 0, &c), -ENOSYS, {"synthetic", "bind", "pin"});
	EXPECT_EQ(nullptr, c);
	EXPECT_EQ(nullptr, sd_cpu_self());
	sd_cpu_info ci;
	ASSERT_EQ(0, sd_machine_cpu_info(m, 0, &ci));
	EXPECT_EQ(0, ci.attached);
	EXPECT_EQ(-1, ci.pinned);

	// sd_machine_run fails the same way and never runs the body.
	std::atomic<int> ran{0};
	int err = sd_machine_run(
		m, [](sd_cpu *, void *arg) { static_cast<std::atomic<int> *>(arg)->fetch_add(1); },
		&ran);
	EXPECT_EQ(-ENOSYS, err);
	EXPECT_EQ(0, ran.load());
	EXPECT_EQ(0, sd_machine_destroy(m)) << "a failed strict attach left the machine busy: "
					    << sd_last_error();
}

TEST(Errors, LenientPinningOnSyntheticTopologyRunsUnpinned)
{
	EnvGuard env("SD_TOPOLOGY", "pack:2 core:8 pu:2");
	Machine mach(cfg_cpus(2));
	ASSERT_NE(nullptr, mach.m);
	if (!sdtest::fresh_cpus_clean(mach.m))
		return;
	Attached a(mach.m, 0);
	ASSERT_NE(nullptr, a.c);
	sd_cpu_info ci;
	ASSERT_EQ(0, sd_machine_cpu_info(mach.m, 0, &ci));
	EXPECT_EQ(0, ci.pinned);
	EXPECT_EQ(1, ci.attached);
}

TEST(Errors, OracleViolationIndexOutOfRange)
{
	Machine mach(cfg_cpus(2));
	ASSERT_NE(nullptr, mach.m);
	sd_violation v;
	prime_last_error();
	check_error(sd_oracle_violation(mach.m, 0, &v), -ENOENT, {"not recorded", "violation"});
	prime_last_error();
	check_error(sd_oracle_violation(mach.m, 0, nullptr), -EINVAL, {"NULL"});
}

TEST(Errors, StrerrorCoversEveryCode)
{
	std::vector<std::string> seen;
	for (int e : {EINVAL, ENOENT, ENOMEM, EPERM, EBUSY, EEXIST, EFAULT, EACCES, ESRCH, ENOSYS,
		      EAGAIN, EDEADLK}) {
		const char *s = sd_strerror(-e);
		ASSERT_NE(nullptr, s);
		EXPECT_GT(std::strlen(s), 0u);
		for (const auto &o : seen)
			EXPECT_NE(o, s) << "two codes share a description";
		seen.emplace_back(s);
	}
	EXPECT_NE(nullptr, sd_strerror(0));
	EXPECT_NE(nullptr, sd_strerror(-9999));
	EXPECT_NE(nullptr, sd_strerror(12345));
}

TEST(Errors, LastErrorIsPerThread)
{
	prime_last_error();
	std::thread t([] {
		EXPECT_STREQ("", sd_last_error()) << "a fresh thread inherited another's error";
		sd_machine_config c = cfg_cpus(2);
		c.strategy = "bogus";
		sd_machine *m = nullptr;
		EXPECT_EQ(-ENOENT, driven(-ENOENT, "sd_machine_create", sd_machine_create(&c, &m)));
	});
	t.join();
	EXPECT_STREQ(kPrimer, sd_last_error());
}

// A profile whose bases go round (it inherits itself): -ELOOP, and nothing
// created. The guide's "What if: a profile that inherits".
TEST(Errors, ProfileThatInheritsItselfIsALoop)
{
	char tmpl[] = "/tmp/sd-test-loop-XXXXXX";
	ASSERT_NE(nullptr, mkdtemp(tmpl));
	const std::string path = std::string(tmpl) + "/loop.json";
	{
		std::ofstream f(path);
		f << "{\"format\": \"shootdown-profile-1\", \"name\": \"loop\", "
		     "\"inherits\": \"loop\", \"costs\": {}}";
	}
	sd_machine_config c = cfg_cpus(2);
	c.profile = path.c_str();
	sd_machine *m = nullptr;
	EXPECT_EQ(-ELOOP, driven(-ELOOP, "sd_machine_create", sd_machine_create(&c, &m)));
	EXPECT_EQ(nullptr, m);
	EXPECT_NE(nullptr, std::strstr(sd_last_error(), "inherits more than"));
	std::remove(path.c_str());
	rmdir(tmpl);
}

TEST(Errors, TooManyDistinctIpiSignals)
{
	// The library keeps one handler per distinct signal (8 slots); a
	// ninth distinct signal must fail cleanly and a freed slot be reusable.
	std::vector<int> sigs = {SIGUSR1, SIGUSR2};
	for (int i = 0; sigs.size() < 9 && SIGRTMIN + i <= SIGRTMAX; i++)
		sigs.push_back(SIGRTMIN + i);
	ASSERT_EQ(9u, sigs.size());
	std::vector<sd_machine *> ms;
	for (size_t i = 0; i < 8; i++) {
		sd_machine_config c = cfg_cpus(1);
		c.ipi_signal = sigs[i];
		sd_machine *m = nullptr;
		ASSERT_EQ(0, sd_machine_create(&c, &m)) << i << ": " << sd_last_error();
		ms.push_back(m);
	}
	sd_machine_config c = cfg_cpus(1);
	c.ipi_signal = sigs[8];
	sd_machine *sentinel = reinterpret_cast<sd_machine *>(uintptr_t(0xdeadbeef));
	sd_machine *m = sentinel;
	prime_last_error();
	int err = sd_machine_create(&c, &m);
	EXPECT_LT(err, 0);
	EXPECT_EQ(sentinel, m);
	EXPECT_STRNE(kPrimer, sd_last_error());
	EXPECT_TRUE(icontains(sd_last_error(), "signal")) << sd_last_error();
	ASSERT_EQ(0, sd_machine_destroy(ms.back()));
	ms.pop_back();
	m = nullptr;
	EXPECT_EQ(0, sd_machine_create(&c, &m)) << sd_last_error();
	if (m)
		ms.push_back(m);
	for (auto *x : ms)
		EXPECT_EQ(0, sd_machine_destroy(x));
}


// ---- bad input on every public call ----

// The range calls read nothing from a NULL cpu before refusing it.
TEST_F(MmErrors, NullCpuOnEveryRangeCall)
{
	prime_last_error();
	check_error(sd_mmap(nullptr, mm, kFree, P, SD_PROT_READ), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_munmap(nullptr, mm, kCanary, P), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_mprotect(nullptr, mm, kCanary, P, SD_PROT_READ), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_madvise_dontneed(nullptr, mm, kCanary, P), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_access(nullptr, kCanary, SD_READ, nullptr), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_switch_mm(nullptr, mm), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_cpu_idle(nullptr), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_cpu_detach(nullptr), -EPERM, {"attached"});
	expect_untouched();
}

TEST_F(MmErrors, NullMmOnEveryRangeCall)
{
	prime_last_error();
	check_error(sd_mmap(c, nullptr, kFree, P, SD_PROT_READ), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_munmap(c, nullptr, kCanary, P), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_mprotect(c, nullptr, kCanary, P, SD_PROT_READ), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_madvise_dontneed(c, nullptr, kCanary, P), -EINVAL, {"NULL"});
	expect_untouched();
}

// error.h's rule for getters: a neutral value and a detail, never a crash.
TEST(Errors, NullGettersReturnTheDocumentedNeutralValue)
{
	struct Case {
		const char *what;
		std::function<bool()> neutral;
	};
	sd_stats st = SD_STATS_INIT;
	const Case cases[] = {
		{"sd_cpu_id", [] { return sd_cpu_id(nullptr) == 0; }},
		{"sd_cpu_machine", [] { return sd_cpu_machine(nullptr) == nullptr; }},
		{"sd_irqs_disabled", [] { return sd_irqs_disabled(nullptr) == 0; }},
		{"sd_mm_id", [] { return sd_mm_id(nullptr) == 0; }},
		{"sd_cpu_current_mm", [] { return sd_cpu_current_mm(nullptr) == nullptr; }},
		{"sd_machine_nr_cpus", [] { return sd_machine_nr_cpus(nullptr) == 0; }},
		{"sd_mm_cpumask_next", [] { return sd_mm_cpumask_next(nullptr, 0) == UINT_MAX; }},
		{"sd_stats_flush_ns_quantile",
		 [] { return sd_stats_flush_ns_quantile(nullptr, 0.5) == 0; }},
		{"sd_stat_name", [] { return sd_stat_name(static_cast<sd_stat>(SD_STAT_NR)) == nullptr; }},
		{"sd_stats_print", [&] { sd_stats_print(nullptr, stderr); sd_stats_print(&st, nullptr); return true; }},
		{"sd_stats_json", [&] { sd_stats_json(nullptr, stderr); sd_stats_json(&st, nullptr); return true; }},
		{"sd_stats_delta", [&] { sd_stats_delta(nullptr, &st, &st); sd_stats_delta(&st, &st, nullptr); return true; }},
		{"sd_machine_print_info", [] { sd_machine_print_info(nullptr, stderr); return true; }},
		{"sd_machine_config_init", [] { sd_machine_config_init(nullptr); return true; }},
		{"sd_oracle_checked", [] { return sd_oracle_checked(nullptr) == 0; }},
		{"sd_oracle_violations", [] { return sd_oracle_violations(nullptr) == 0; }},
		{"sd_cpu_reg", [] { return sd_cpu_reg(nullptr, 0) == 0; }},
		{"sd_trap_id_reg", [] { return sd_trap_id_reg(nullptr, 6, 0) == 0; }},
		{"sd_irq_disable", [] { sd_irq_disable(nullptr); return true; }},
		{"sd_irq_enable", [] { sd_irq_enable(nullptr); return true; }},
		{"sd_cpu_quiescent", [] { sd_cpu_quiescent(nullptr); return true; }},
	};
	for (const auto &k : cases) {
		SCOPED_TRACE(k.what);
		prime_last_error();
		EXPECT_TRUE(k.neutral()) << k.what << "(NULL) did not return its neutral value";
		EXPECT_STRNE(kPrimer, sd_last_error()) << k.what << "(NULL) recorded no detail";
	}
	// A machine's print with a NULL file, too.
	Machine mach(cfg_cpus(2));
	ASSERT_NE(nullptr, mach.m);
	prime_last_error();
	sd_machine_print_info(mach.m, nullptr);
	EXPECT_STRNE(kPrimer, sd_last_error());
}

// A loop over the mask with a NULL mm ends (it never did: next() said 0).
TEST(Errors, CpumaskLoopOverNullMmEnds)
{
	unsigned visited = 0;
	for (unsigned c = sd_mm_cpumask_next(nullptr, 0); c < 4096 && visited < 10;
	     c = sd_mm_cpumask_next(nullptr, c + 1))
		visited++;
	EXPECT_EQ(0u, visited);
}

// Wrong-thread and unbalanced interrupt calls leave the owner's state alone.
TEST(Errors, IrqCallsFromTheWrongThreadOrUnbalanced)
{
	Machine mach(cfg_cpus(2));
	ASSERT_NE(nullptr, mach.m);
	Attached a(mach.m, 0);
	ASSERT_NE(nullptr, a.c);
	prime_last_error();
	sd_irq_enable(a.c);     // already on
	EXPECT_STRNE(kPrimer, sd_last_error());
	EXPECT_EQ(0, sd_irqs_disabled(a.c)) << "an unbalanced enable wrapped the depth";
	std::thread t([&] {
		prime_last_error();
		sd_irq_disable(a.c);
		EXPECT_STRNE(kPrimer, sd_last_error());
		prime_last_error();
		sd_cpu_quiescent(a.c);
		EXPECT_STRNE(kPrimer, sd_last_error());
	});
	t.join();
	EXPECT_EQ(0, sd_irqs_disabled(a.c)) << "another thread turned this CPU's interrupts off";
	sd_irq_disable(a.c);
	EXPECT_EQ(1, sd_irqs_disabled(a.c));
	sd_irq_enable(a.c);
	EXPECT_EQ(0, sd_irqs_disabled(a.c));
}

// An attached CPU may create another machine, but not with interrupts off:
// -EDEADLK, and nothing is built.
TEST(Errors, MachineCreateWithInterruptsOffIsRefused)
{
	Machine mach(cfg_cpus(2));
	ASSERT_NE(nullptr, mach.m);
	Attached a(mach.m, 0);
	sd_machine *other = nullptr;
	sd_machine_config c = cfg_cpus(2);
	sd_irq_disable(a.c);
	EXPECT_EQ(-EDEADLK, driven(-EDEADLK, "sd_machine_create", sd_machine_create(&c, &other)));
	EXPECT_EQ(nullptr, other);
	EXPECT_NE(nullptr, std::strstr(sd_last_error(), "interrupts are off on CPU 0"))
		<< sd_last_error();
	EXPECT_EQ(0, sd_irq_enable(a.c));
	ASSERT_EQ(0, sd_machine_create(&c, &other)) << sd_last_error();
	EXPECT_EQ(0, sd_machine_destroy(other));
}

TEST(Errors, UnknownMachineFlags)
{
	for (unsigned flags : {1u << 5, 1u << 31, ~0u}) {
		sd_machine_config c = cfg_cpus(2);
		c.flags = flags;
		expect_create_fails(c, -EINVAL, {"flags"});
	}
}

TEST(Errors, StrictModelledTimeNeedsAProfile)
{
	sd_machine_config c = cfg_cpus(2);
	c.flags = SD_MACHINE_MODEL_STRICT;
	expect_create_fails(c, -EINVAL, {"SD_MACHINE_MODEL_STRICT", "profile"});
	c.flags = SD_MACHINE_MODEL_LAX;
	expect_create_fails(c, -EINVAL, {"SD_MACHINE_MODEL_LAX", "profile"});
}

// Strict and lax at once is a contradiction, by flags or by environment:
// refused before any profile is read, never settled by a silent choice.
TEST(Errors, StrictAndLaxModelledTimeAtOnce)
{
	sd_machine_config c = cfg_cpus(2);
	c.profile = "no-such-profile";
	c.flags = SD_MACHINE_MODEL_STRICT | SD_MACHINE_MODEL_LAX;
	expect_create_fails(c, -EINVAL, {"one mode or the other"});
	c.flags = 0;
	EnvGuard strict("SD_MODEL_STRICT", "1"), lax("SD_MODEL_LAX", "1");
	expect_create_fails(c, -EINVAL, {"SD_MODEL_STRICT", "SD_MODEL_LAX"});
}

TEST(Errors, StrategyOptionsWithBlanksOrRepeatedKeys)
{
	sd_machine_config c = cfg_cpus(2);
	for (const char *bad : {"ipi:ceiling= 5", "ipi: ceiling=5", "ipi:ceiling =5",
				"ipi:ceiling=5 ", "ipi:ceiling=\t5", "broadcast:max_tlbi_ops=8, max_tlbi_ops=9"}) {
		SCOPED_TRACE(bad);
		c.strategy = bad;
		expect_create_fails(c, -EINVAL, {"blank", "malformed"});
	}
	for (const char *bad : {"broadcast:max_tlbi_ops=8,max_tlbi_ops=9", "ipi:ceiling=4,cpumask=lazy,ceiling=4"}) {
		SCOPED_TRACE(bad);
		c.strategy = bad;
		expect_create_fails(c, -EINVAL, {"twice"});
	}
}

void blocks_flush(sd_cpu *cpu, sd_mm *mm, uint64_t va, uint64_t len, unsigned, void *)
{
	(void)sd_tlb_invalidate_broadcast(cpu, mm, va, len);
}

TEST(Errors, SuccessfulUnregisterLeavesLastErrorAlone)
{
	sd_strategy s = SD_STRATEGY_INIT;
	s.name = "errors_unreg";
	s.flush = blocks_flush;
	ASSERT_EQ(0, sd_strategy_register(&s)) << sd_last_error();
	prime_last_error();
	EXPECT_EQ(0, sd_strategy_unregister("errors_unreg"));
	EXPECT_STREQ(kPrimer, sd_last_error()) << "a successful call wrote sd_last_error()";
	prime_last_error();
	check_error(sd_strategy_unregister("errors_unreg"), -ENOENT, {"errors_unreg"});
}

// sd_mmap that runs out of memory for page tables leaves none behind: after
// the failure, mapping one page of the same fresh region must allocate all
// its tables again (pud, pmd, leaf). Before the fix the tables built before
// the failure stayed linked and the second mmap allocated fewer.
TEST_F(MmErrors, MmapOutOfMemoryLeavesNoTables)
{
	const uint64_t region = UINT64_C(0x7f0000000000); // fresh: no table under it yet
	const uint64_t len = 8 * 0x200000;                 // 8 leaf tables
	struct HookGuard {
		~HookGuard() { atomic_store(&sd_pt_alloc_fail_after, -1L); }
	} guard;

	for (long budget : {0L, 1L, 2L, 5L, 9L}) {
		SCOPED_TRACE(budget);
		atomic_store(&sd_pt_alloc_fail_after, budget);
		prime_last_error();
		check_error(sd_mmap(c, mm, region, len, SD_PROT_READ | SD_PROT_WRITE), -ENOMEM,
			    {"page table"});
		atomic_store(&sd_pt_alloc_fail_after, 1000L);
		ASSERT_EQ(0, sd_mmap(c, mm, region, P, SD_PROT_READ)) << sd_last_error();
		EXPECT_EQ(3, 1000L - atomic_load(&sd_pt_alloc_fail_after))
			<< "tables of the failed sd_mmap were left behind";
		atomic_store(&sd_pt_alloc_fail_after, -1L);
		EXPECT_EQ(-EFAULT, driven(-EFAULT, "sd_access", sd_access(c, region + P, SD_READ, nullptr)));
		EXPECT_EQ(-EFAULT, driven(-EFAULT, "sd_access", sd_access(c, region + len - P, SD_READ, nullptr)));
		ASSERT_EQ(0, sd_munmap(c, mm, region, P));
	}
	// With memory, the whole range maps.
	ASSERT_EQ(0, sd_mmap(c, mm, region, len, SD_PROT_READ)) << sd_last_error();
	EXPECT_EQ(0, sd_access(c, region + len - P, SD_READ, nullptr));
	ASSERT_EQ(0, sd_munmap(c, mm, region, len));
	expect_untouched();
}

// Every negative errno the library's sources return, found by grep, has a
// specific sd_strerror() text: a new code cannot slip in without one.
TEST(Errors, EveryReturnedCodeHasAFittingMessage)
{
	const std::map<std::string, int> known = {
		{"EINVAL", EINVAL}, {"ENOENT", ENOENT},   {"ENOMEM", ENOMEM},     {"EPERM", EPERM},
		{"EBUSY", EBUSY},   {"EEXIST", EEXIST},   {"EFAULT", EFAULT},     {"EACCES", EACCES},
		{"ESRCH", ESRCH},   {"ENOSYS", ENOSYS},   {"EAGAIN", EAGAIN},     {"EDEADLK", EDEADLK},
		{"ENOSPC", ENOSPC}, {"EILSEQ", EILSEQ},   {"EOPNOTSUPP", EOPNOTSUPP},
		{"EIO", EIO},
		{"ENAMETOOLONG", ENAMETOOLONG}, {"EISDIR", EISDIR}, {"ENODATA", ENODATA},
		{"ENOTDIR", ENOTDIR}, {"EROFS", EROFS}, {"ELOOP", ELOOP},
		{"EXDEV", EXDEV}, {"EOVERFLOW", EOVERFLOW},
	};
	namespace fs = std::filesystem;
	std::set<std::string> found;
	for (const auto &e : fs::recursive_directory_iterator(fs::path(SD_SOURCE_ROOT) / "lib")) {
		if (!e.is_regular_file() || (e.path().extension() != ".c" && e.path().extension() != ".h"))
			continue;
		std::ifstream in(e.path());
		std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
		// "-E" then capitals, then not a word character: a negative errno.
		for (size_t at = text.find("-E"); at != std::string::npos; at = text.find("-E", at + 2)) {
			size_t end = at + 2;
			while (end < text.size() && std::isupper((unsigned char)text[end]))
				end++;
			bool word_end = end == text.size() ||
					!(std::isalnum((unsigned char)text[end]) || text[end] == '_');
			if (end > at + 2 && word_end)
				found.insert(text.substr(at + 1, end - at - 1));
		}
	}
	ASSERT_GE(found.size(), 10u) << "the grep of " SD_SOURCE_ROOT "/lib found too little";
	std::set<std::string> texts;
	for (const auto &name : found) {
		auto k = known.find(name);
		ASSERT_NE(known.end(), k) << "lib/ returns -" << name
					  << ": give it an sd_strerror() text and add it here";
		const char *s = sd_strerror(-k->second);
		EXPECT_STRNE(sd_strerror(-4000), s) << "-" << name << " has the default text";
		EXPECT_TRUE(texts.insert(s).second) << "-" << name << " shares its text";
	}
	// The texts fit every use: -ENOMEM is also mprotect over a hole,
	// -EEXIST also a taken strategy name, -EINVAL also interrupts off.
	EXPECT_TRUE(icontains(sd_strerror(-ENOMEM), "mapped"));
	EXPECT_TRUE(icontains(sd_strerror(-EEXIST), "strategy"));
	EXPECT_TRUE(icontains(sd_strerror(-EEXIST), "mapped"));
	EXPECT_TRUE(icontains(sd_strerror(-EINVAL), "interrupts"));
	EXPECT_TRUE(icontains(sd_strerror(-EBUSY), "interrupts"));
	EXPECT_TRUE(icontains(sd_strerror(-EPERM), "bind"));
}


// The whole int-returning surface with NULL objects: -EINVAL for a NULL
// object, -EPERM for a NULL CPU that the caller must be attached as, and a
// detail each time; never a crash.
TEST(Errors, EveryIntCallRefusesNullObjects)
{
	Machine mach(cfg_cpus(2));
	ASSERT_NE(nullptr, mach.m);
	Attached a(mach.m, 0);
	ASSERT_NE(nullptr, a.c);
	sd_mm *mm = nullptr;
	ASSERT_EQ(0, sd_mm_create(mach.m, &mm));
	sd_tlbbatch *b = nullptr;
	ASSERT_EQ(0, sd_tlbbatch_create(mach.m, &b));
	sd_trap_hook *hook = nullptr;
	sd_stats st = SD_STATS_INIT;
	sd_violation v;
	sd_cpu_info ci;
	struct sd_machine_info mi;
	struct Case {
		const char *what;
		int want;
		std::function<int()> call;
	};
	const Case cases[] = {
		{"sd_smp_call_single(NULL from)", -EPERM, [&] { return sd_smp_call_single(nullptr, 1, nop_ipi, nullptr); }},
		{"sd_mm_create(NULL out)", -EINVAL, [&] { return sd_mm_create(mach.m, nullptr); }},
		{"sd_machine_info(NULL)", -EINVAL, [&] { return sd_machine_info(nullptr, &mi); }},
		{"sd_machine_info(NULL info)", -EINVAL, [&] { return sd_machine_info(mach.m, nullptr); }},
		{"sd_machine_cpu_info(NULL)", -EINVAL, [&] { return sd_machine_cpu_info(nullptr, 0, &ci); }},
		{"sd_machine_cpu_info(NULL info)", -EINVAL, [&] { return sd_machine_cpu_info(mach.m, 0, nullptr); }},
		{"sd_machine_run(NULL m)", -EINVAL, [&] { return sd_machine_run(nullptr, [](sd_cpu *, void *) {}, nullptr); }},
		{"sd_stats_cpu(NULL)", -EINVAL, [&] { return sd_stats_cpu(nullptr, 0, &st); }},
		{"sd_stats_snapshot(NULL out)", -EINVAL, [&] { return sd_stats_snapshot(mach.m, nullptr); }},
		{"sd_oracle_violation(NULL m)", -EINVAL, [&] { return sd_oracle_violation(nullptr, 0, &v); }},
		{"sd_strategy_register(NULL)", -EINVAL, [&] { return sd_strategy_register(nullptr); }},
		{"sd_strategy_unregister(NULL)", -EINVAL, [&] { return sd_strategy_unregister(nullptr); }},
		{"sd_tlb_invalidate_local(NULL cpu)", -EINVAL, [&] { return sd_tlb_invalidate_local(nullptr, mm, 0, 0); }},
		{"sd_tlb_invalidate_broadcast(NULL mm)", -EINVAL, [&] { return sd_tlb_invalidate_broadcast(a.c, nullptr, 0, 0); }},
		{"sd_mm_cpumask_test(NULL)", -EINVAL, [&] { return sd_mm_cpumask_test(nullptr, 0); }},
		{"sd_mm_cpumask_set(NULL)", -EINVAL, [&] { return sd_mm_cpumask_set(nullptr, 0); }},
		{"sd_mm_cpumask_clear(NULL)", -EINVAL, [&] { return sd_mm_cpumask_clear(nullptr, 0); }},
		{"sd_mm_active_cpus(NULL)", -EINVAL, [&] { return sd_mm_active_cpus(nullptr); }},
		{"sd_tlbbatch_create(NULL m)", -EINVAL, [&] { sd_tlbbatch *x; return sd_tlbbatch_create(nullptr, &x); }},
		{"sd_tlbbatch_create(NULL out)", -EINVAL, [&] { return sd_tlbbatch_create(mach.m, nullptr); }},
		{"sd_tlbbatch_add(NULL cpu)", -EPERM, [&] { return sd_tlbbatch_add(nullptr, b, mm); }},
		{"sd_tlbbatch_add(NULL batch)", -EINVAL, [&] { return sd_tlbbatch_add(a.c, nullptr, mm); }},
		{"sd_tlbbatch_add(NULL mm)", -EINVAL, [&] { return sd_tlbbatch_add(a.c, b, nullptr); }},
		{"sd_tlbbatch_flush(NULL cpu)", -EPERM, [&] { return sd_tlbbatch_flush(nullptr, b); }},
		{"sd_tlbbatch_flush(NULL batch)", -EINVAL, [&] { return sd_tlbbatch_flush(a.c, nullptr); }},
		{"sd_reclaim(NULL cpu)", -EPERM, [&] { return sd_reclaim(nullptr, b, mm, 0, P); }},
		{"sd_reclaim(NULL batch)", -EINVAL, [&] { return sd_reclaim(a.c, nullptr, mm, 0, P); }},
		{"sd_trap_register(NULL m)", -EINVAL, [&] { return sd_trap_register(nullptr, 0, 0, [](sd_cpu *, uint32_t, void *) { return 0; }, nullptr, &hook); }},
		{"sd_trap_register(NULL fn)", -EINVAL, [&] { return sd_trap_register(mach.m, 0, 0, nullptr, nullptr, &hook); }},
		{"sd_trap_unregister(NULL hook)", -EINVAL, [&] { return sd_trap_unregister(mach.m, nullptr); }},
		{"sd_trap(NULL cpu)", -EPERM, [&] { return sd_trap(nullptr, SD_ID_AA64ISAR0_EL1(0)); }},
		{"sd_cpu_set_reg(NULL)", -EINVAL, [&] { return sd_cpu_set_reg(nullptr, 0, 1); }},
	};
	for (const auto &k : cases) {
		SCOPED_TRACE(k.what);
		prime_last_error();
		check_error_in(k.what, k.call(), k.want,
			       {"NULL", "attached", "range", "argument", "thread"});
	}
	EXPECT_EQ(0, sd_tlbbatch_destroy(nullptr));
	EXPECT_EQ(0, sd_tlbbatch_destroy(b));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}


// Files and shared mappings (file.h): every refusal leaves nothing mapped
// and no reference taken, so the file closes and the machine goes after.
TEST_F(MmErrors, FileCallsRefuseBadArgumentsAndLeaveNothing)
{
	sd_file *f = nullptr, *x = nullptr;
	prime_last_error();
	check_error(sd_file_create(nullptr, 4 * P, &x), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_file_create(m, 4 * P, nullptr), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_file_create(m, 0, &x), -EINVAL, {"length"});
	prime_last_error();
	check_error(sd_file_create(m, P + 1, &x), -EINVAL, {"aligned"});
	prime_last_error();
	check_error(sd_file_create(m, UINT64_C(1) << 62, &x), -EINVAL, {"large"});
	prime_last_error();
	check_error(sd_file_close(nullptr), -EINVAL, {"NULL"});
	ASSERT_EQ(0, sd_file_create(m, 4 * P, &f)) << sd_last_error();
	EXPECT_EQ(0u, sd_file_cached_pages(f));
	EXPECT_EQ(0u, sd_file_cached_pages(nullptr));

	prime_last_error();
	check_error(sd_file_evict(c, nullptr, 0, P), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_file_evict(c, f, 100, P), -EINVAL, {"aligned"});
	prime_last_error();
	check_error(sd_file_evict(c, f, 0, P + 1), -EINVAL, {"aligned"});
	prime_last_error();
	check_error(sd_file_evict(c, f, 3 * P, 2 * P), -EINVAL, {"end"});
	prime_last_error();
	check_error(sd_file_evict(c, f, UINT64_C(1) << 60, P), -EINVAL, {"end"});
	prime_last_error();
	check_error(sd_file_evict(nullptr, f, 0, P), -EPERM, {"attached"});
	EXPECT_EQ(0, sd_file_evict(c, f, 0, 4 * P)) << "an empty cache has nothing to evict";
	const unsigned rw = SD_PROT_READ | SD_PROT_WRITE;
	prime_last_error();
	check_error(sd_mmap_file(c, mm, kFree, P, rw, 2, f, 0), -EINVAL, {"flags"});
	prime_last_error();
	check_error(sd_mmap_file(c, mm, kFree, P, rw, SD_MAP_PRIVATE, nullptr, 0), -EINVAL, {"file"});
	prime_last_error();
	check_error(sd_mmap_file(c, mm, kFree, P, rw, SD_MAP_SHARED, f, 100), -EINVAL, {"aligned"});
	prime_last_error();
	check_error(sd_mmap_file(c, mm, kFree, P, rw, SD_MAP_SHARED, nullptr, P), -EINVAL, {"anonymous"});
	prime_last_error();
	check_error(sd_mmap_file(c, mm, kFree, 2 * P, rw, SD_MAP_SHARED, f, 3 * P), -EINVAL, {"end"});
	prime_last_error();
	check_error(sd_mmap_file(c, mm, kFree, P, rw, SD_MAP_SHARED, f, UINT64_C(1) << 60), -EINVAL, {"end"});
	prime_last_error();
	check_error(sd_mmap_file(c, mm, kFree, P, 8, SD_MAP_SHARED, f, 0), -EINVAL, {"prot"});
	prime_last_error();
	check_error(sd_mmap_file(c, nullptr, kFree, P, rw, SD_MAP_SHARED, f, 0), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_mmap_file(nullptr, mm, kFree, P, rw, SD_MAP_SHARED, f, 0), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_mmap_file(c, mm, kCanary, P, rw, SD_MAP_SHARED, f, 0), -EEXIST, {"mapped"});
	prime_last_error();
	check_error(sd_mmap_file(c, mm, kCanary, P, rw, SD_MAP_SHARED, nullptr, 0), -EEXIST, {"mapped"});
	{
		// A file of another machine.
		Machine other(cfg_cpus(1));
		ASSERT_NE(nullptr, other.m);
		sd_file *g = nullptr;
		ASSERT_EQ(0, sd_file_create(other.m, P, &g));
		prime_last_error();
		check_error(sd_mmap_file(c, mm, kFree, P, rw, SD_MAP_SHARED, g, 0), -EINVAL, {"machine"});
		prime_last_error();
		check_error(sd_file_evict(c, g, 0, P), -EINVAL, {"machine"});
		// An open file keeps its machine: -EBUSY, then it goes.
		prime_last_error();
		check_error(sd_machine_destroy(other.m), -EBUSY, {"file"});
		EXPECT_EQ(0, sd_file_close(g));
	}
	{
		struct HookGuard {
			~HookGuard() { atomic_store(&sd_pt_alloc_fail_after, -1L); }
		} guard;
		// No page table for the range: nothing mapped, no reference kept.
		atomic_store(&sd_pt_alloc_fail_after, 0L);
		prime_last_error();
		check_error(sd_mmap_file(c, mm, UINT64_C(1) << 40, P, rw, SD_MAP_SHARED, f, 0), -ENOMEM,
			    {"page tables", "memory"});
		prime_last_error();
		check_error(sd_mmap_file(c, mm, UINT64_C(1) << 40, P, rw, SD_MAP_SHARED, nullptr, 0),
			    -ENOMEM, {"page tables", "memory"});
	}
	expect_untouched();
	EXPECT_EQ(0u, sd_file_cached_pages(f));
	EXPECT_EQ(0, sd_file_close(f));
}


// Bad values of plain arguments: an unknown access kind, a quantile outside
// [0, 1], and a range whose page tables alone exceed the machine's memory,
// refused before a single table is allocated.
TEST_F(MmErrors, UnknownKindQuantileAndHugeRange)
{
	prime_last_error();
	check_error(sd_access(c, kCanary, static_cast<sd_access_kind>(2), nullptr), -EINVAL, {"kind"});
	prime_last_error();
	check_error(sd_access(c, kCanary, static_cast<sd_access_kind>(-1), nullptr), -EINVAL, {"kind"});
	sd_stats st = SD_STATS_INIT;
	st.flush_ns_hist[3] = 1;
	for (double q : {-0.5, 1.5, std::nan("")}) {
		prime_last_error();
		EXPECT_EQ(0u, sd_stats_flush_ns_quantile(&st, q)) << q;
		EXPECT_STRNE(kPrimer, sd_last_error()) << q;
	}
	EXPECT_EQ(16u, sd_stats_flush_ns_quantile(&st, 1.0));

	struct HookGuard {
		~HookGuard() { atomic_store(&sd_pt_alloc_fail_after, -1L); }
	} guard;
	// 2^46 bytes: 2^25 leaf tables, far above the 2^20 frames of the machine.
	atomic_store(&sd_pt_alloc_fail_after, 1000L);
	prime_last_error();
	check_error(sd_mmap(c, mm, UINT64_C(1) << 46, UINT64_C(1) << 46, SD_PROT_READ), -ENOMEM,
		    {"page tables"});
	EXPECT_EQ(1000L, atomic_load(&sd_pt_alloc_fail_after))
		<< "tables were allocated for a range that could never be mapped";
	expect_untouched();
}

// ---- the documented codes no test above reaches ----

int nop_trap(sd_cpu *, uint32_t, void *)
{
	return 0;
}

// A user strategy that only counts: for the registry's own errors.
void counting_flush(sd_cpu *, sd_mm *, uint64_t, uint64_t, unsigned, void *)
{
}

TEST(Errors, CpuCallsOfAnAttachedCpu)
{
	Machine mach(cfg_cpus(2));
	ASSERT_NE(nullptr, mach.m);
	Attached a(mach.m, 0);
	sd_cpu *c = a.c;
	ASSERT_NE(nullptr, c);
	sd_mm *mm = nullptr;
	ASSERT_EQ(0, sd_mm_create(mach.m, &mm));
	ASSERT_EQ(0, sd_switch_mm(c, mm));

	prime_last_error();
	check_error(sd_cpu_poll(nullptr), -EPERM, {"attached"});
	sd_irq_disable(c);
	prime_last_error();
	check_error(sd_cpu_poll(c), -EDEADLK, {"interrupts"});
	prime_last_error();
	check_error(sd_trap(c, SD_ID_AA64ISAR0_EL1(0)), -EINVAL, {"interrupts"});
	ASSERT_EQ(0, sd_irq_enable(c));
	ASSERT_EQ(0, sd_mmap(c, mm, 0x70000000, P, SD_PROT_READ | SD_PROT_WRITE));
	sd_irq_disable(c);
	prime_last_error();
	check_error(sd_access(c, 0x70000000, SD_READ, nullptr), -EDEADLK, {"interrupts"});
	EXPECT_EQ(0, sd_irq_enable(c));
	EXPECT_EQ(0, sd_access(c, 0x70000000, SD_READ, nullptr)) << "with them on it is taken";
	sd_irq_disable(c);
	EXPECT_EQ(0, sd_access(c, 0x70000000, SD_READ, nullptr)) << "a hit needs no fault";
	// The read mapped the zero page: a write must break it, a fault too.
	prime_last_error();
	check_error(sd_access(c, 0x70000000, SD_WRITE, nullptr), -EDEADLK, {"interrupts"});
	EXPECT_EQ(0, sd_irq_enable(c));
	EXPECT_EQ(0, sd_access(c, 0x70000000, SD_WRITE, nullptr)) << "with them on it is taken";
	prime_last_error();
	check_error(sd_irq_enable(c), -EINVAL, {"on", "enable"});
	prime_last_error();
	check_error(sd_irq_enable(nullptr), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_cpu_poll_wake(nullptr), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_cpu_work(nullptr, 1), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_tlb_probe(nullptr, 0, nullptr), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_flush_tlb_range(nullptr, mm, 0, P), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_flush_tlb_range(c, mm, 1, P), -EINVAL, {"align"});
	prime_last_error();
	check_error(sd_trap(c, 0xffffffffu), -EILSEQ, {"hook", "undefined"});

	// The user-strategy building blocks, on a built-in strategy's machine;
	// and from a thread that is not the CPU it names.
	prime_last_error();
	check_error(sd_tlb_invalidate_local(c, mm, 0, 0), -EOPNOTSUPP, {"user strategy"});
	prime_last_error();
	check_error(sd_tlb_invalidate_broadcast(c, mm, 0, 0), -EOPNOTSUPP, {"user strategy"});
	prime_last_error();
	check_error(sd_mm_active_cpus(mm), -EOPNOTSUPP, {"user strategy"});
	prime_last_error();
	check_error(sd_mm_cpumask_set(mm, 0), -EOPNOTSUPP, {"user strategy"});
	prime_last_error();
	check_error(sd_mm_cpumask_test(mm, 0), -EOPNOTSUPP, {"user strategy"});
	prime_last_error();
	check_error(sd_mm_cpumask_clear(mm, 0), -EOPNOTSUPP, {"user strategy"});
	std::thread([&] {
		prime_last_error();
		check_error(sd_tlb_invalidate_local(c, mm, 0, 0), -EPERM, {"thread", "attached"});
		prime_last_error();
		check_error(sd_tlb_invalidate_broadcast(c, mm, 0, 0), -EPERM,
			    {"thread", "attached"});
	}).join();

	// A hook gone once is not there to remove again; a batch that owes a
	// flush is not freed.
	sd_trap_hook *hook = nullptr;
	ASSERT_EQ(0, sd_trap_register(mach.m, 0xffffffffu, 0x12345678u, nop_trap, nullptr, &hook));
	ASSERT_EQ(0, sd_trap_unregister(mach.m, hook));
	sd_trap_hook *other = nullptr;
	ASSERT_EQ(0, sd_trap_register(mach.m, 0xffffffffu, 0x12345679u, nop_trap, nullptr, &other));
	Machine second(cfg_cpus(1));
	ASSERT_NE(nullptr, second.m);
	prime_last_error();
	check_error(sd_trap_unregister(second.m, other), -ENOENT, {"registered"});
	ASSERT_EQ(0, sd_trap_unregister(mach.m, other));
	sd_tlbbatch *b = nullptr;
	ASSERT_EQ(0, sd_tlbbatch_create(mach.m, &b));
	ASSERT_EQ(0, sd_tlbbatch_add(c, b, mm));
	prime_last_error();
	check_error(sd_tlbbatch_destroy(b), -EBUSY, {"owes", "flush"});
	ASSERT_EQ(0, sd_tlbbatch_flush(c, b));
	EXPECT_EQ(0, sd_tlbbatch_destroy(b));

	// The machine's own runner, while a CPU is attached.
	prime_last_error();
	check_error(sd_machine_run(mach.m, [](sd_cpu *, void *) {}, nullptr), -EBUSY,
		    {"attached", "itself a CPU"});
	ASSERT_EQ(0, sd_switch_mm(c, nullptr));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

TEST(Errors, InfoCallsRefuseNull)
{
	Machine mach(cfg_cpus(1));
	ASSERT_NE(nullptr, mach.m);
	sd_mechanism_info mi = SD_MECHANISM_INFO_INIT;
	sd_model_info info = SD_MODEL_INFO_INIT;
	struct sd_machine_pus pus = SD_MACHINE_PUS_INIT;
	prime_last_error();
	check_error(sd_machine_mechanisms(nullptr, &mi), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_machine_model_info(nullptr, &info), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_machine_pus(nullptr, &pus), -EINVAL, {"NULL"});
	char path[16];
	prime_last_error();
	check_error(sd_profile_locate("a b", path, sizeof(path)), -EINVAL, {"name", "character"});
	prime_last_error();
	check_error(sd_profile_locate("no-such-profile-anywhere", path, sizeof(path)), -ENOENT,
		    {"looked", "found", "no"});
	prime_last_error();
	check_error(sd_profile_locate("milan-36", path, 4), -ENAMETOOLONG, {"fit", "long"});
}

TEST(Errors, ModelledCallsAndMechanisms)
{
	sd_machine_config c = cfg_cpus(1);
	c.profile = SD_SOURCE_ROOT "/test/hw/profile-fixture.json";
	Machine mach(c);
	ASSERT_NE(nullptr, mach.m);
	ASSERT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *cpu, void *) {
		prime_last_error();
		check_error(sd_cpu_work(cpu, UINT64_MAX), -EINVAL, {"2^63"});
	}, nullptr));
	sd_machine_config x86 = cfg_cpus(2);
	x86.profile = "milan-36";
	x86.strategy = "broadcast";
	expect_create_fails(x86, -EOPNOTSUPP, {"tlbi_broadcast"});
}

TEST(Errors, TraceWriteRefusals)
{
	std::string dir = std::filesystem::temp_directory_path() /
			  ("sd-errors-trace-" + std::to_string(getpid()));
	std::filesystem::create_directories(dir);
	const std::string path = dir + "/t.json";
	{
		Machine plain(cfg_cpus(1));
		ASSERT_NE(nullptr, plain.m);
		prime_last_error();
		check_error(sd_machine_trace_write(plain.m, path.c_str()), -ENODATA, {"not tracing"});
	}
	sd_machine_config c = cfg_cpus(1);
	c.trace_path = path.c_str();
	{
		Machine m(c);
		ASSERT_NE(nullptr, m.m);
		prime_last_error();
		check_error(sd_machine_trace_write(m.m, nullptr), -EINVAL, {"NULL"});
		// The refusal keeps the trace at the directory's temporary name
		// (sd_machine_trace_write() never loses one): removed before and
		// after, or a later run that gets this pid finds it there.
		const std::string kept = dir + "." + std::to_string(getpid()) + ".tmp";
		std::filesystem::remove(kept);
		prime_last_error();
		check_error(sd_machine_trace_write(m.m, dir.c_str()), -EISDIR, {"directory"});
		EXPECT_TRUE(std::filesystem::exists(kept)) << "the refused trace was not kept";
		std::filesystem::remove(kept);
		const std::string tmp = path + "." + std::to_string(getpid()) + ".tmp";
		std::ofstream(tmp) << "someone else's";
		prime_last_error();
		check_error(sd_machine_trace_write(m.m, path.c_str()), -EEXIST, {"exists", "tmp"});
		std::filesystem::remove(tmp);
		Attached a(m.m, 0);
		sd_irq_disable(a.c);
		prime_last_error();
		check_error(sd_machine_trace_write(m.m, path.c_str()), -EDEADLK, {"interrupts"});
		EXPECT_EQ(0, sd_irq_enable(a.c));
	}
	std::filesystem::remove_all(dir);
}

TEST(Errors, MachineRunAndCreateRefusals)
{
	// A body that returns with interrupts off.
	{
		Machine mach(cfg_cpus(1));
		ASSERT_NE(nullptr, mach.m);
		prime_last_error();
		check_error(sd_machine_run(mach.m, [](sd_cpu *cpu, void *) { sd_irq_disable(cpu); },
					   nullptr), -EDEADLK, {"interrupts"});
	}
	// Strict pinning on a synthetic topology, whose PUs do not exist.
	{
		EnvGuard topo("SD_TOPOLOGY", "pack:1 core:2 pu:1");
		sd_machine_config c = cfg_cpus(2);
		c.flags = SD_MACHINE_STRICT_PIN;
		Machine mach(c);
		ASSERT_NE(nullptr, mach.m);
		prime_last_error();
		check_error(sd_machine_run(mach.m, [](sd_cpu *, void *) {}, nullptr), -ENOSYS,
			    {"synthetic", "pinned"});
	}
	// The program's own handler on the IPI signal, not taken over.
	const int sig = SIGRTMIN + 9;
	struct sigaction sa = {}, old;
	sa.sa_handler = [](int) {};
	sigemptyset(&sa.sa_mask);
	ASSERT_EQ(0, sigaction(sig, &sa, &old));
	sd_machine_config c = cfg_cpus(1);
	c.ipi_signal = sig;
	expect_create_fails(c, -EBUSY, {"handler", "SD_MACHINE_TAKE_SIGNAL"});
	sigaction(sig, &old, nullptr);
}

TEST(Errors, StrategyRegistryRefusals)
{
	sd_strategy s = SD_STRATEGY_INIT;
	s.flush = counting_flush;
	s.name = "broadcast";
	prime_last_error();
	check_error(sd_strategy_register(&s), -EEXIST, {"built-in"});
	std::vector<std::string> names;
	for (int i = 0; i < SD_STRATEGY_MAX_USER; i++) {
		names.push_back("errors_fill_" + std::to_string(i));
		s.name = names.back().c_str();
		if (sd_strategy_register(&s)) {
			names.pop_back();   // a slot another test holds: fewer to fill
			break;
		}
	}
	s.name = "errors_one_too_many";
	prime_last_error();
	check_error(sd_strategy_register(&s), -ENOSPC, {"already"});
	for (const auto &n : names)
		EXPECT_EQ(0, sd_strategy_unregister(n.c_str()));
	s.name = "errors_in_use";
	ASSERT_EQ(0, sd_strategy_register(&s));
	{
		sd_machine_config c = cfg_cpus(1);
		c.strategy = "errors_in_use";
		Machine mach(c);
		ASSERT_NE(nullptr, mach.m);
		prime_last_error();
		check_error(sd_strategy_unregister("errors_in_use"), -EBUSY, {"use"});
	}
	EXPECT_EQ(0, sd_strategy_unregister("errors_in_use"));
}

// ---- tasks (task.h) ----

struct TaskErrorCase {
	sd_machine *m = nullptr;
	sd_mm *mm = nullptr;
	sd_waitq *q = nullptr;
	sd_task *quick = nullptr;          // a task that returns at once
	std::atomic<bool> waiter_in{false};
	std::atomic<bool> destroy_checked{false};
	std::atomic<bool> done{false};
};

bool flag_set(void *arg)
{
	return static_cast<std::atomic<bool> *>(arg)->load();
}

void task_returns(sd_task *, void *) {}

// Waits on the case's queue until the driver has seen sd_waitq_destroy()
// refuse it. The condition is looked at under the queue's lock, and a
// false one queues the waiter in the same hold: once waiter_in is seen,
// the waiter is on the queue.
bool waiter_cond(void *arg)
{
	auto *k = static_cast<TaskErrorCase *>(arg);
	k->waiter_in = true;
	return k->destroy_checked.load();
}

void task_waits(sd_task *self, void *arg)
{
	auto *k = static_cast<TaskErrorCase *>(arg);
	EXPECT_EQ(0, sd_task_wait(self, k->q, waiter_cond, k)) << sd_last_error();
}

// Every error a task's calls document, driven from a task.
void task_driver(sd_task *self, void *arg)
{
	auto *k = static_cast<TaskErrorCase *>(arg);
	sd_cpu *c = sd_task_cpu(self);
	sd_task_config cfg = SD_TASK_CONFIG_INIT;
	cfg.mm = k->mm;

	// Another thread is not this task.
	std::thread t([&] {
		prime_last_error();
		check_error(sd_task_yield(self), -EPERM, {"thread"});
		prime_last_error();
		check_error(sd_task_preempt_point(self), -EPERM, {"thread"});
		prime_last_error();
		check_error(sd_task_wait(self, k->q, flag_set, &k->done), -EPERM, {"thread"});
		prime_last_error();
		check_error(sd_task_wake(self, k->q, 1), -EPERM, {"thread"});
		prime_last_error();
		check_error(sd_task_sleep(self, 1), -EPERM, {"thread"});
		prime_last_error();
		check_error(sd_task_set_affinity(self, self, "0"), -EPERM, {"thread"});
		prime_last_error();
		check_error(sd_task_fork(self, task_returns, nullptr, nullptr), -EPERM, {"thread"});
		prime_last_error();
		check_error(sd_task_exec(self), -EPERM, {"thread"});
		EXPECT_EQ(nullptr, sd_task_cpu(self));
	});
	t.join();

	// Bad arguments.
	prime_last_error();
	check_error(sd_task_wait(self, nullptr, flag_set, &k->done), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_task_wait(self, k->q, nullptr, nullptr), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_task_wake(self, nullptr, 1), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_task_sleep(self, 1001ull * 1000000000ull), -EINVAL, {"1000 s"});
	prime_last_error();
	check_error(sd_task_set_affinity(self, nullptr, "0"), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_task_set_affinity(self, self, "zero"), -EINVAL, {"CPU list"});
	prime_last_error();
	check_error(sd_task_set_affinity(self, self, "7"), -EINVAL, {"no CPU"});
	prime_last_error();
	check_error(sd_task_fork(self, nullptr, nullptr, nullptr), -EINVAL, {"NULL"});
	sd_machine *other = nullptr;
	sd_machine_config ocfg = cfg_cpus(1);
	ASSERT_EQ(0, sd_machine_create(&ocfg, &other));
	sd_waitq *foreign = nullptr;
	ASSERT_EQ(0, sd_waitq_create(other, "foreign", &foreign));
	prime_last_error();
	check_error(sd_task_wait(self, foreign, flag_set, &k->done), -EINVAL, {"another machine"});
	prime_last_error();
	check_error(sd_task_wake(self, foreign, 1), -EINVAL, {"another machine"});
	EXPECT_EQ(0, sd_waitq_destroy(foreign));
	EXPECT_EQ(0, sd_machine_destroy(other));
	// A task may create tasks of its own machine only; a CPU list that
	// does not hold the CPU asked for is refused.
	cfg.cpu = 1;
	cfg.affinity = "0";
	prime_last_error();
	check_error(sd_task_create(k->m, &cfg, task_returns, nullptr, nullptr), -EINVAL,
		    {"not in the affinity"});
	cfg.cpu = SD_TASK_ANY_CPU;
	cfg.affinity = nullptr;

	// Interrupts off: every call that would switch refuses.
	sd_irq_disable(c);
	prime_last_error();
	check_error(sd_task_yield(self), -EDEADLK, {"interrupts"});
	prime_last_error();
	check_error(sd_task_preempt_point(self), -EDEADLK, {"interrupts"});
	prime_last_error();
	check_error(sd_task_wait(self, k->q, flag_set, &k->done), -EDEADLK, {"interrupts"});
	prime_last_error();
	check_error(sd_task_sleep(self, 1), -EDEADLK, {"interrupts"});
	prime_last_error();
	check_error(sd_task_set_affinity(self, self, "0"), -EDEADLK, {"interrupts"});
	prime_last_error();
	check_error(sd_task_fork(self, task_returns, nullptr, nullptr), -EINVAL, {"interrupts"});
	prime_last_error();
	check_error(sd_task_exec(self), -EINVAL, {"interrupts"});
	prime_last_error();
	check_error(sd_task_create(k->m, &cfg, task_returns, nullptr, nullptr), -EDEADLK,
		    {"interrupts"});
	EXPECT_EQ(0, sd_irq_enable(c));

	// A returned task cannot be moved.
	ASSERT_EQ(0, sd_task_create(k->m, &cfg, task_returns, nullptr, &k->quick));
	ASSERT_EQ(0, sd_task_set_affinity(self, self, "0"));
	while (sd_task_set_affinity(self, k->quick, "0") == 0)
		ASSERT_EQ(0, sd_task_yield(self));
	prime_last_error();
	check_error(sd_task_set_affinity(self, k->quick, "0"), -ESRCH, {"returned"});

	// A wait queue with a waiter is not destroyed.
	ASSERT_EQ(0, sd_task_create(k->m, &cfg, task_waits, k, nullptr));
	while (!k->waiter_in)
		ASSERT_EQ(0, sd_task_yield(self));
	prime_last_error();
	check_error(sd_waitq_destroy(k->q), -EBUSY, {"wait"});
	k->destroy_checked = true;
	EXPECT_EQ(1, sd_task_wake(self, k->q, 0));

	// Alone at last, a wait nobody can end is refused.
	k->done = false;
	while (sd_task_wake(self, k->q, 0) > 0 || !k->quick)
		ASSERT_EQ(0, sd_task_yield(self));
	for (int i = 0; i < 100; i++)
		ASSERT_EQ(0, sd_task_yield(self));
	prime_last_error();
	check_error(sd_task_wait(self, k->q, flag_set, &k->done), -EDEADLK, {"wait"});
	k->done = true;
}

void body_with_interrupts_off(sd_task *self, void *)
{
	sd_irq_disable(sd_task_cpu(self));
}

TEST(TaskErrors, EveryCallRefusesWhatItDocuments)
{
	TaskErrorCase k;
	sd_machine_config cfg = cfg_cpus(2);
	ASSERT_EQ(0, sd_machine_create(&cfg, &k.m));
	ASSERT_EQ(0, sd_mm_create(k.m, &k.mm));
	prime_last_error();
	check_error(sd_waitq_create(nullptr, "q", &k.q), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_waitq_destroy(nullptr), -EINVAL, {"NULL"});
	ASSERT_EQ(0, sd_waitq_create(k.m, "errors", &k.q));

	// Creation's own checks.
	sd_task_config tc = SD_TASK_CONFIG_INIT;
	sd_task *sentinel = reinterpret_cast<sd_task *>(0x1), *out = sentinel;
	prime_last_error();
	check_error(sd_task_create(nullptr, &tc, task_returns, nullptr, &out), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_task_create(k.m, &tc, task_returns, nullptr, &out), -EINVAL, {"NULL mm"});
	tc.mm = k.mm;
	tc.size = 8;
	prime_last_error();
	check_error(sd_task_create(k.m, &tc, task_returns, nullptr, &out), -EINVAL, {"size"});
	tc.size = sizeof(tc);
	tc.cpu = 2;
	prime_last_error();
	check_error(sd_task_create(k.m, &tc, task_returns, nullptr, &out), -EINVAL, {"range"});
	tc.cpu = SD_TASK_ANY_CPU;
	tc.affinity = "0-1,x";
	prime_last_error();
	check_error(sd_task_create(k.m, &tc, task_returns, nullptr, &out), -EINVAL, {"CPU list"});
	tc.affinity = "5-9";
	prime_last_error();
	check_error(sd_task_create(k.m, &tc, task_returns, nullptr, &out), -EINVAL, {"no CPU"});
	tc.affinity = nullptr;
	EXPECT_EQ(sentinel, out) << "a failed create wrote *out";
	{
		Attached a(k.m, 0);
		prime_last_error();
		check_error(sd_task_create(k.m, &tc, task_returns, nullptr, &out), -EINVAL,
			    {"CPU"});
	}
	prime_last_error();
	check_error(sd_sched_run(nullptr), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_sched_run(k.m), -EINVAL, {"no task"});

	ASSERT_EQ(0, sd_task_create(k.m, &tc, task_driver, &k, nullptr));
	{
		Attached a(k.m, 1);
		prime_last_error();
		check_error(sd_sched_run(k.m), -EBUSY, {"CPU"});
	}
	{
		// The task created above is still there after the refusals.
		sdtest::Watchdog w("task errors", 120);
		EXPECT_EQ(0, sd_sched_run(k.m)) << sd_last_error();
	}
	EXPECT_TRUE(k.done.load());

	// A body that returns with interrupts off is reported, and its CPU
	// is usable again.
	ASSERT_EQ(0, sd_task_create(k.m, &tc, body_with_interrupts_off, nullptr, nullptr));
	prime_last_error();
	check_error(sd_sched_run(k.m), -EDEADLK, {"interrupts"});
	ASSERT_EQ(0, sd_task_create(k.m, &tc, task_returns, nullptr, nullptr));
	EXPECT_EQ(0, sd_sched_run(k.m)) << sd_last_error();

	EXPECT_EQ(0, sd_waitq_destroy(k.q));
	EXPECT_EQ(0, sd_mm_destroy(k.mm));
	EXPECT_EQ(0, sd_machine_destroy(k.m));
}

// ---- shared.h: the program's own lock and line ----

TEST(SharedErrors, EveryCallRefusesWhatItDocuments)
{
	Machine mach(cfg_cpus(2)), other(cfg_cpus(1));
	ASSERT_NE(nullptr, mach.m);
	ASSERT_NE(nullptr, other.m);
	sd_lock *sentinel = reinterpret_cast<sd_lock *>(0x1), *l = sentinel, *foreign = nullptr;
	sd_line *line = nullptr, *foreign_line = nullptr;

	prime_last_error();
	check_error(sd_lock_create(nullptr, "l", &l), -EINVAL, {"NULL"});
	EXPECT_EQ(sentinel, l) << "a failed create wrote *out";
	prime_last_error();
	check_error(sd_lock_create(mach.m, "l", nullptr), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_line_create(nullptr, &line), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_lock_destroy(nullptr), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_line_destroy(nullptr), -EINVAL, {"NULL"});
	prime_last_error();
	check_error(sd_lock_holder(nullptr), -EINVAL, {"NULL"});
	ASSERT_EQ(0, sd_lock_create(mach.m, "mine", &l));
	ASSERT_EQ(0, sd_lock_create(other.m, "theirs", &foreign));
	ASSERT_EQ(0, sd_line_create(mach.m, &line));
	ASSERT_EQ(0, sd_line_create(other.m, &foreign_line));
	prime_last_error();
	check_error(sd_lock_acquire(nullptr, l), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_lock_release(nullptr, l), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_line_access(nullptr, line, 1), -EPERM, {"attached"});
	{
		Attached a(mach.m, 0);
		ASSERT_NE(nullptr, a.c);
		prime_last_error();
		check_error(sd_lock_acquire(a.c, nullptr), -EINVAL, {"NULL"});
		prime_last_error();
		check_error(sd_lock_acquire(a.c, foreign), -EINVAL, {"another machine"});
		prime_last_error();
		check_error(sd_lock_release(a.c, nullptr), -EINVAL, {"NULL"});
		prime_last_error();
		check_error(sd_lock_release(a.c, l), -EPERM, {"not held"});
		prime_last_error();
		check_error(sd_line_access(a.c, nullptr, 0), -EINVAL, {"NULL"});
		prime_last_error();
		check_error(sd_line_access(a.c, foreign_line, 0), -EINVAL, {"another machine"});
		ASSERT_EQ(0, sd_lock_acquire(a.c, l));
		prime_last_error();
		check_error(sd_lock_acquire(a.c, l), -EDEADLK, {"already holds"});
		prime_last_error();
		check_error(sd_lock_destroy(l), -EBUSY, {"holds"});
		EXPECT_EQ(0, sd_lock_holder(l)) << "a refused call changed the holder";
		EXPECT_EQ(0, sd_lock_release(a.c, l));
	}
	EXPECT_EQ(0, sd_lock_destroy(l));
	EXPECT_EQ(0, sd_lock_destroy(foreign));
	EXPECT_EQ(0, sd_line_destroy(line));
	EXPECT_EQ(0, sd_line_destroy(foreign_line));
}

// The program's own IPIs (cpu.h) and events (events.h).
TEST(SmpAndEventErrors, EveryCallRefusesWhatItDocuments)
{
	Machine mach(cfg_cpus(3));
	ASSERT_NE(nullptr, mach.m);
	sd_smp_call call{};
	const unsigned one[] = {1}, twice[] = {1, 1};
	auto nothing = [](sd_cpu *, void *) {};

	prime_last_error();
	check_error(sd_smp_call_async(nullptr, 1, nothing, nullptr, &call), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_smp_call_async_wait(nullptr, &call), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_smp_call_many(nullptr, one, 1, nothing, nullptr, 0), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_user_event(nullptr, SD_STAT_USER_0, 1), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_user_event_begin(nullptr, SD_STAT_USER_0), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_user_event_end(nullptr, SD_STAT_USER_0), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_user_flow_end(nullptr, SD_STAT_USER_0, 0), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_user_event_register("flushes"), -EINVAL, {"not a name"});
	const int id = sd_user_event_register("errors_test_event");
	ASSERT_GE(id, (int)SD_STAT_USER_0);

	{
		sdtest::PollingCpu target(mach.m, 1);
		Attached a(mach.m, 0);
		ASSERT_NE(nullptr, a.c);
		prime_last_error();
		check_error(sd_smp_call_async(a.c, 0, nothing, nullptr, &call), -EINVAL, {"target"});
		prime_last_error();
		check_error(sd_smp_call_async_wait(a.c, &call), -EINVAL, {"not posted"});
		prime_last_error();
		check_error(sd_smp_call_many(a.c, twice, 2, nothing, nullptr, 0), -EINVAL, {"twice"});
		ASSERT_EQ(0, sd_smp_call_async(a.c, 1, nothing, nullptr, &call));
		prime_last_error();
		check_error(sd_smp_call_async(a.c, 1, nothing, nullptr, &call), -EBUSY, {"posted"});
		std::thread([&] {
			Attached b(mach.m, 2);
			prime_last_error();
			check_error(sd_smp_call_async_wait(b.c, &call), -EXDEV, {"posted it"});
		}).join();
		sd_irq_disable(a.c);
		prime_last_error();
		check_error(sd_smp_call_async_wait(a.c, &call), -EDEADLK, {"interrupts"});
		prime_last_error();
		check_error(sd_smp_call_many(a.c, one, 1, nothing, nullptr, 0), -EDEADLK,
			    {"interrupts"});
		EXPECT_EQ(0, sd_irq_enable(a.c));
		EXPECT_EQ(0, sd_smp_call_async_wait(a.c, &call));

		prime_last_error();
		check_error(sd_user_event(a.c, SD_STAT_FLUSH, 1), -EINVAL, {"registered"});
		prime_last_error();
		check_error(sd_user_event_begin(a.c, -1), -EINVAL, {"registered"});
		prime_last_error();
		check_error(sd_user_flow_end(a.c, SD_STAT_NR, 0), -EINVAL, {"registered"});
		prime_last_error();
		check_error(sd_user_event_end(a.c, id), -EINVAL, {"innermost"});
		for (int i = 0; i < 8; i++)
			ASSERT_EQ(0, sd_user_event_begin(a.c, id));
		prime_last_error();
		check_error(sd_user_event_begin(a.c, id), -EOVERFLOW, {"open"});
		for (int i = 0; i < 8; i++)
			ASSERT_EQ(0, sd_user_event_end(a.c, id));
	}
	// The table is the process's: fill it last (nothing after this test
	// in this binary registers a name).
	int last = 0;
	for (int i = 0; i <= SD_USER_EVENTS_MAX && last >= 0; i++)
		last = sd_user_event_register(("errors_filler_" + std::to_string(i)).c_str());
	prime_last_error();
	check_error(sd_user_event_register("one_too_many"), -ENOSPC, {"taken"});
}

// Handshakes (handshake.h).
TEST(HandshakeErrors, EveryCallRefusesWhatItDocuments)
{
	Machine mach(cfg_cpus(2)), other(cfg_cpus(1));
	ASSERT_NE(nullptr, mach.m);
	ASSERT_NE(nullptr, other.m);
	sd_mm *mm = nullptr, *foreign_mm = nullptr;
	ASSERT_EQ(0, sd_mm_create(mach.m, &mm));
	ASSERT_EQ(0, sd_mm_create(other.m, &foreign_mm));
	sd_handshake_config hc = SD_HANDSHAKE_CONFIG_INIT;
	sd_handshake *sentinel = reinterpret_cast<sd_handshake *>(0x1), *h = sentinel;
	sd_handshake *poll_h = nullptr, *mprotect_h = nullptr, *foreign = nullptr;
	sd_handshake_result res{};
	auto nothing = [](sd_cpu *, void *) {};

	prime_last_error();
	check_error(sd_handshake_create(nullptr, &hc, &h), -EINVAL, {"NULL"});
	EXPECT_EQ(sentinel, h) << "a failed create wrote *out";
	hc.size = 8;
	prime_last_error();
	check_error(sd_handshake_create(mm, &hc, &h), -EINVAL, {"size"});
	hc = SD_HANDSHAKE_CONFIG_INIT;
	hc.kind = SD_HANDSHAKE_KIND_NR;
	prime_last_error();
	check_error(sd_handshake_create(mm, &hc, &h), -EINVAL, {"kind"});
	hc = SD_HANDSHAKE_CONFIG_INIT;
	hc.refuse_per_million = 1000001;
	prime_last_error();
	check_error(sd_handshake_create(mm, &hc, &h), -EINVAL, {"million"});
	hc = SD_HANDSHAKE_CONFIG_INIT;
	hc.helper_va = 0x1001;
	prime_last_error();
	check_error(sd_handshake_create(mm, &hc, &h), -EINVAL, {"aligned"});
	hc = SD_HANDSHAKE_CONFIG_INIT;
	hc.flags = 2;
	prime_last_error();
	check_error(sd_handshake_create(mm, &hc, &h), -EINVAL, {"unknown flags"});
	hc.flags = SD_HANDSHAKE_FLAG_CPU;
	hc.kind = SD_HANDSHAKE_POLL;
	prime_last_error();
	check_error(sd_handshake_create(mm, &hc, &h), -EINVAL, {"membarrier flag"});
	hc.kind = SD_HANDSHAKE_MEMBARRIER_RSEQ;
	hc.cpu_id = 2;
	prime_last_error();
	check_error(sd_handshake_create(mm, &hc, &h), -EINVAL, {"cpu_id 2 out of range"});
	EXPECT_EQ(sentinel, h) << "a failed create wrote *out";
	hc = SD_HANDSHAKE_CONFIG_INIT;
	ASSERT_EQ(0, sd_handshake_create(mm, &hc, &h));
	hc.kind = SD_HANDSHAKE_POLL;
	ASSERT_EQ(0, sd_handshake_create(mm, &hc, &poll_h));
	hc.kind = SD_HANDSHAKE_MPROTECT;
	ASSERT_EQ(0, sd_handshake_create(mm, &hc, &mprotect_h));
	ASSERT_EQ(0, sd_handshake_create(foreign_mm, &hc, &foreign));
	prime_last_error();
	check_error(sd_handshake_destroy(nullptr), -EINVAL, {"NULL"});

	prime_last_error();
	check_error(sd_handshake_run(h, nullptr, nothing, nullptr, &res), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_handshake_poll(h, nullptr), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_handshake_set_safe(h, nullptr, 1), -EPERM, {"attached"});
	{
		Attached a(mach.m, 0);
		ASSERT_NE(nullptr, a.c);
		prime_last_error();
		check_error(sd_handshake_run(nullptr, a.c, nothing, nullptr, &res), -EINVAL,
			    {"NULL"});
		prime_last_error();
		check_error(sd_handshake_run(h, a.c, nothing, nullptr, nullptr), -EINVAL, {"NULL"});
		prime_last_error();
		check_error(sd_handshake_run(foreign, a.c, nothing, nullptr, &res), -EINVAL,
			    {"another machine"});
		prime_last_error();
		check_error(sd_handshake_run(mprotect_h, a.c, nullptr, nullptr, &res), -EINVAL,
			    {"must run its mm"});
		prime_last_error();
		check_error(sd_handshake_poll(nullptr, a.c), -EINVAL, {"NULL"});
		prime_last_error();
		check_error(sd_handshake_poll(foreign, a.c), -EINVAL, {"another machine"});
		prime_last_error();
		check_error(sd_handshake_set_safe(h, a.c, 0), -EINVAL, {"not in a safe state"});
		ASSERT_EQ(0, sd_handshake_set_safe(h, a.c, 1));
		prime_last_error();
		check_error(sd_handshake_set_safe(h, a.c, 1), -EINVAL, {"already"});
		sd_irq_disable(a.c);
		prime_last_error();
		check_error(sd_handshake_set_safe(h, a.c, 0), -EDEADLK, {"interrupts"});
		prime_last_error();
		check_error(sd_handshake_run(h, a.c, nothing, nullptr, &res), -EDEADLK,
			    {"interrupts"});
		EXPECT_EQ(0, sd_irq_enable(a.c));
		EXPECT_EQ(0, sd_handshake_set_safe(h, a.c, 0));

		// Destroyed while a handshake runs on it: from the target's
		// poll, inside the request.
		ASSERT_EQ(0, sd_switch_mm(a.c, mm));
		struct Busy {
			sd_handshake *h;
			int destroy = 0;
			char why[128] = "";
		} busy{poll_h};
		std::atomic<int> done{0}, ready{0};
		std::thread target([&] {
			Attached t(mach.m, 1);
			ASSERT_EQ(0, sd_switch_mm(t.c, mm));
			ready.store(1);
			while (!done.load())
				EXPECT_GE(sd_handshake_poll(poll_h, t.c), 0);
			EXPECT_EQ(0, sd_switch_mm(t.c, nullptr));
		});
		while (!ready.load())
			std::this_thread::yield();
		EXPECT_EQ(0, sd_handshake_run(poll_h, a.c, [](sd_cpu *, void *arg) {
			auto *b = static_cast<Busy *>(arg);
			prime_last_error();
			b->destroy = driven(-EBUSY, "sd_handshake_destroy", sd_handshake_destroy(b->h));
			snprintf(b->why, sizeof(b->why), "%s", sd_last_error());
		}, &busy, &res));
		done.store(1);
		target.join();
		EXPECT_EQ(-EBUSY, busy.destroy);
		EXPECT_NE(nullptr, strstr(busy.why, "is running on it")) << busy.why;
		EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	}
	EXPECT_EQ(0, sd_handshake_destroy(h));
	EXPECT_EQ(0, sd_handshake_destroy(poll_h));
	EXPECT_EQ(0, sd_handshake_destroy(mprotect_h));
	EXPECT_EQ(0, sd_handshake_destroy(foreign));
	EXPECT_EQ(0, sd_mm_destroy(mm));
	EXPECT_EQ(0, sd_mm_destroy(foreign_mm));
}

// Restartable sequences (rseq.h).
TEST(RseqErrors, EveryCallRefusesWhatItDocuments)
{
	Machine mach(cfg_cpus(2));
	ASSERT_NE(nullptr, mach.m);
	sd_mm *mm = nullptr;
	ASSERT_EQ(0, sd_mm_create(mach.m, &mm));
	sd_handshake_config hc = SD_HANDSHAKE_CONFIG_INIT;
	hc.kind = SD_HANDSHAKE_MEMBARRIER_RSEQ;
	sd_handshake *h = nullptr;
	ASSERT_EQ(0, sd_handshake_create(mm, &hc, &h));
	alignas(8) uint64_t words[2] = {0, 0};

	prime_last_error();
	check_error(sd_rseq_begin(nullptr), -EPERM, {"attached"});
	prime_last_error();
	check_error(sd_rseq_end(nullptr, words, 1), -EPERM, {"attached"});
	std::atomic<int> in_section{0}, fenced{0};
	std::thread target([&] {
		Attached t(mach.m, 1);
		ASSERT_NE(nullptr, t.c);
		ASSERT_EQ(0, sd_switch_mm(t.c, mm));
		prime_last_error();
		check_error(sd_rseq_end(t.c, words, 1), -EINVAL, {"no section"});
		ASSERT_EQ(1, sd_rseq_begin(t.c));
		prime_last_error();
		check_error(sd_rseq_end(t.c, reinterpret_cast<uint64_t *>(
				reinterpret_cast<char *>(words) + 4), 1), -EINVAL, {"aligned"});
		in_section.store(1);
		while (!fenced.load())
			EXPECT_EQ(0, sd_cpu_poll(t.c));
		// Aborted by the fence: nothing stored, and the section is over.
		prime_last_error();
		check_error(sd_rseq_end(t.c, words, 1), -EAGAIN, {"aborted"});
		EXPECT_EQ(0u, words[0]);
		prime_last_error();
		check_error(sd_rseq_end(t.c, words, 1), -EINVAL, {"no section"});
		EXPECT_EQ(0, sd_switch_mm(t.c, nullptr));
	});
	{
		Attached a(mach.m, 0);
		ASSERT_NE(nullptr, a.c);
		while (!in_section.load())
			std::this_thread::yield();
		sd_handshake_result res{};
		EXPECT_EQ(0, sd_handshake_run(h, a.c, nullptr, nullptr, &res));
		EXPECT_EQ(1u, res.aborted);
	}
	fenced.store(1);
	target.join();
	EXPECT_EQ(0, sd_handshake_destroy(h));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

// ---- every documented code, driven ----

// Documented codes no unit test here can force, each with why. Anything
// else a header documents must be driven above, and every code driven must
// be documented: the header and the call agree both ways.
const std::map<std::pair<std::string, int>, const char *> kNotForced = {
	{{"sd_cpu_attach", -EAGAIN}, "the process out of threads"},
	{{"sd_cpu_attach", -EPERM}, "the OS refusing a binding it supports (a cgroup)"},
	{{"sd_machine_run", -EAGAIN}, "pthread_create failing"},
	{{"sd_machine_run", -EPERM}, "the OS refusing a binding it supports (a cgroup)"},
	{{"sd_machine_create", -ENOMEM}, "malloc failing"},
	{{"sd_mm_create", -ENOMEM}, "malloc failing"},
	{{"sd_mm_fork", -ENOMEM}, "malloc failing (the child's tables or the share counts)"},
	{{"sd_tlbbatch_create", -ENOMEM}, "malloc failing"},
	{{"sd_file_create", -ENOMEM}, "malloc failing"},
	{{"sd_trap_register", -ENOMEM}, "malloc failing"},
	{{"sd_tlbbatch_add", -ENOMEM}, "realloc failing"},
	{{"sd_reclaim", -ENOMEM}, "realloc failing"},
	{{"sd_mm_destroy", -ENOMEM}, "malloc failing"},
	{{"sd_munmap", -ENOMEM}, "malloc failing (a VMA split's spare)"},
	{{"sd_access", -ENOMEM}, "driven in test_mm.cpp, which runs a machine out of frames"},
	{{"sd_smp_call_single", -ESRCH}, "driven in test_smp.cpp: a raw thread exit while "
					  "attached, in a death test"},
	{{"sd_task_create", -EAGAIN}, "pthread_create failing"},
	{{"sd_task_create", -ENOMEM}, "malloc failing"},
	{{"sd_task_fork", -EAGAIN}, "pthread_create failing"},
	{{"sd_task_fork", -ENOMEM}, "malloc failing"},
	{{"sd_task_exec", -ENOMEM}, "malloc failing"},
	{{"sd_waitq_create", -ENOMEM}, "malloc failing"},
	{{"sd_lock_create", -ENOMEM}, "malloc failing"},
	{{"sd_line_create", -ENOMEM}, "malloc failing"},
	{{"sd_smp_call_many", -ENOMEM}, "calloc failing (its per-CPU request array)"},
	{{"sd_handshake_create", -ENOMEM}, "malloc failing"},
	{{"sd_handshake_run", -ENOMEM}, "calloc failing (membarrier's multicast request array)"},
	{{"sd_smp_call_async_wait", -ESRCH}, "the endpoint's wait, as sd_smp_call_single()'s "
					      "-ESRCH: a raw thread exit, in test_smp.cpp"},
};

// Each SD_EXPORT function of include/shootdown/ and the -E codes its own
// doc comment (the one right above it) names.
std::map<std::string, std::set<int>> documented_codes()
{
	static const std::map<std::string, int> code = {
		{"EINVAL", EINVAL}, {"ENOENT", ENOENT}, {"ENOMEM", ENOMEM}, {"EPERM", EPERM},
		{"EBUSY", EBUSY}, {"EEXIST", EEXIST}, {"EFAULT", EFAULT}, {"EACCES", EACCES},
		{"ESRCH", ESRCH}, {"ENOSYS", ENOSYS}, {"EAGAIN", EAGAIN}, {"EDEADLK", EDEADLK},
		{"EOPNOTSUPP", EOPNOTSUPP}, {"ENOSPC", ENOSPC}, {"EILSEQ", EILSEQ},
		{"EISDIR", EISDIR}, {"ENODATA", ENODATA}, {"ENOTDIR", ENOTDIR}, {"EROFS", EROFS},
		{"ELOOP", ELOOP}, {"ENAMETOOLONG", ENAMETOOLONG}, {"EXDEV", EXDEV},
		{"EOVERFLOW", EOVERFLOW},
	};
	std::map<std::string, std::string> doc_of;
	const std::regex decl("/\\*\\*((?:[^*]|\\*(?!/))*)\\*/\\s*SD_EXPORT[^;(]*?\\b(sd_\\w+)\\s*\\(");
	const std::regex err("-(E[A-Z]+)");
	for (const auto &f : std::filesystem::directory_iterator(
		     std::string(SD_SOURCE_ROOT) + "/include/shootdown")) {
		std::ifstream in(f.path());
		std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
		for (std::sregex_iterator it(text.begin(), text.end(), decl), end; it != end; ++it)
			doc_of[(*it)[2].str()] = (*it)[1].str();
	}
	// "errors as sd_mmap() except -EEXIST": the named call's codes too,
	// less the excepted ones, which are no code of this call.
	const std::regex as("(?:errors as|See) (sd_\\w+)\\(\\)"), except("except -(E[A-Z]+)");
	std::function<std::set<int>(const std::string &, int)> codes_of =
		[&](const std::string &fn, int depth) {
			std::set<int> codes, excepted;
			const std::string &doc = doc_of[fn];
			for (std::sregex_iterator e(doc.begin(), doc.end(), except), ee; e != ee; ++e)
				excepted.insert(-code.at((*e)[1].str()));
			for (std::sregex_iterator e(doc.begin(), doc.end(), err), ee; e != ee; ++e) {
				auto c = code.find((*e)[1].str());
				if (c != code.end())
					codes.insert(-c->second);
				else
					ADD_FAILURE() << fn << ": its header names -" << (*e)[1]
						      << ", which this test does not know";
			}
			for (std::sregex_iterator a(doc.begin(), doc.end(), as), ae; a != ae; ++a)
				if (depth < 4 && (*a)[1].str() != fn)
					for (int c : codes_of((*a)[1].str(), depth + 1))
						codes.insert(c);
			for (int c : excepted)
				codes.erase(c);
			return codes;
		};
	std::map<std::string, std::set<int>> out;
	for (const auto &[fn, doc] : doc_of)
		out[fn] = codes_of(fn, 0);
	return out;
}

// Checked after every test of the binary ran (a filtered run drives only
// part of them, so it checks nothing).
class DocumentedCodes : public ::testing::Environment {
	void TearDown() override
	{
		if (::testing::GTEST_FLAG(filter) != "*")
			return;
		const auto docs = documented_codes();
		EXPECT_GT(docs.size(), 60u) << "the headers' functions were not found";
		for (const auto &[fn, codes] : docs)
			for (int c : codes)
				if (!driven_pairs().count({fn, c}) && !kNotForced.count({fn, c}))
					ADD_FAILURE() << fn << "() documents " << c << " (" << sd_strerror(c)
						      << "): no test in test_errors.cpp drives it";
		for (const auto &[fn, c] : driven_pairs()) {
			auto d = docs.find(fn);
			if (d == docs.end() || !d->second.count(c))
				ADD_FAILURE() << fn << "() was made to return " << c << " ("
					      << sd_strerror(c) << "), which its header does not document";
		}
	}
};

[[maybe_unused]] ::testing::Environment *const documented_codes_env =
	::testing::AddGlobalTestEnvironment(new DocumentedCodes);

} // namespace
