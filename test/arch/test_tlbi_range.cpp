// SPDX-License-Identifier: MIT
// The arm64 range-TLBI splitter (lib/arch/tlbi_range.h), exhaustively: every
// flush size from 1 to 2^21 + 1 pages in both scale orders, checked against
// the encoding's rules and the op-count formula, plus the seed-003 alignment
// property and the LPA2 mode.
#include "common.hpp"

#include <algorithm>
#include <vector>

extern "C" {
#include "arch/tlbi_range.h"
}

namespace {

constexpr uint64_t kMax = SD_MAX_TLBI_RANGE_PAGES; // 2^21

struct Recorder {
	std::vector<sd_tlbi_op> ops;
	static void emit(const sd_tlbi_op *op, void *arg)
	{
		static_cast<Recorder *>(arg)->ops.push_back(*op);
	}
};

std::vector<sd_tlbi_op> split(sd_tlbi_range_order order, uint64_t vpn, uint64_t pages,
			      bool lpa2 = false)
{
	sd_tlbi_split_cfg cfg = { order, lpa2, 512 };
	Recorder r;
	uint64_t n = sd_tlbi_split(&cfg, vpn, pages, Recorder::emit, &r);
	EXPECT_EQ(n, r.ops.size());
	return r.ops;
}

// Ops must tile [vpn, vpn + pages) exactly, in order, with valid encodings.
// Returns an empty string or the first problem found.
std::string check_ops(const std::vector<sd_tlbi_op> &ops, uint64_t vpn, uint64_t pages)
{
	uint64_t next = vpn;
	for (const sd_tlbi_op &op : ops) {
		if (op.kind == SD_TLBI_OP_ASID)
			return "unexpected ASID op";
		if (op.vpn != next)
			return "gap or overlap at op starting " + std::to_string(op.vpn);
		if (op.kind == SD_TLBI_OP_PAGE) {
			if (op.pages != 1)
				return "page op covering " + std::to_string(op.pages);
		} else {
			if (op.scale < 0 || op.scale > SD_TLBI_RANGE_MAX_SCALE)
				return "scale " + std::to_string(op.scale) + " out of 0..3";
			if (op.num < 0 || op.num > SD_TLBI_RANGE_MAX_NUM)
				return "num " + std::to_string(op.num) + " out of 0..31";
			if (op.pages != sd_tlbi_range_pages(op.num, op.scale))
				return "pages do not match (num+1)*2^(5*scale+1)";
		}
		next += op.pages;
	}
	if (next != vpn + pages)
		return "covered " + std::to_string(next - vpn) + " of " + std::to_string(pages);
	return "";
}

bool range_ops_aligned(const std::vector<sd_tlbi_op> &ops)
{
	for (const sd_tlbi_op &op : ops)
		if (op.kind == SD_TLBI_OP_RANGE && (op.vpn % SD_LPA2_ALIGN_PAGES))
			return false;
	return true;
}

class Exhaustive : public ::testing::TestWithParam<sd_tlbi_range_order> {};

TEST_P(Exhaustive, EveryPageCountUpToTheLimit)
{
	if (sdtest::under_tsan)
		GTEST_SKIP() << "single-threaded arithmetic, 14 s under TSan: the plain and ASan "
				"builds check every count";
	const sd_tlbi_range_order order = GetParam();
	const uint64_t vpn = 0x100000; // 64 KiB aligned
	// Ascending keeps the old ">= MAX" bound, descending the fixed "> MAX".
	const uint64_t first_asid = order == SD_TLBI_RANGE_DESCENDING ? kMax + 1 : kMax;
	uint64_t misaligned = 0;
	Recorder r;
	sd_tlbi_split_cfg cfg = { order, false, 512 };

	for (uint64_t p = 1; p <= kMax + 1; p++) {
		r.ops.clear();
		sd_tlbi_split(&cfg, vpn, p, Recorder::emit, &r);
		if (r.ops.size() == 1 && r.ops[0].kind == SD_TLBI_OP_ASID) {
			ASSERT_GE(p, first_asid) << "whole-ASID flush for only " << p << " pages";
			continue;
		}
		// Any split must be a valid encoding, whatever the size.
		std::string problem = check_ops(r.ops, vpn, p);
		ASSERT_EQ("", problem) << "order " << sd_tlbi_range_order_name(order) << " pages "
				       << p;
		ASSERT_LT(p, first_asid) << "split instead of a whole-ASID flush";
		ASSERT_EQ(sd_tlbi_range_expected_ops(p), r.ops.size()) << "pages " << p;
		if (!range_ops_aligned(r.ops))
			misaligned++;
	}
	if (order == SD_TLBI_RANGE_DESCENDING) {
		EXPECT_EQ(0u, misaligned) << "descending must keep every range op 64 KiB aligned";
	} else {
		// The old order misaligns whenever an odd page or a scale-0 chunk
		// comes before a larger chunk: most sizes.
		EXPECT_GT(misaligned, kMax / 2);
	}
}

INSTANTIATE_TEST_SUITE_P(Orders, Exhaustive,
			 ::testing::Values(SD_TLBI_RANGE_ASCENDING, SD_TLBI_RANGE_DESCENDING),
			 [](const auto &info) {
				 return std::string(sd_tlbi_range_order_name(info.param));
			 });

TEST(TlbiRange, FormulaMatchesWorkedExamples)
{
	// the arm64 range encoding (__flush_tlb_range_op())
	const std::pair<uint64_t, unsigned> table[] = {
		{ 1, 1 }, { 2, 1 }, { 3, 2 }, { 17, 2 }, { 33, 2 }, { 64, 1 }, { 100, 2 },
		{ 511, 3 }, { 512, 1 }, { 1000, 2 }, { 4097, 2 }, { 65535, 4 },
		{ 2097151, 5 }, { 2097152, 1 },
	};
	for (auto [p, ops] : table)
		EXPECT_EQ(ops, sd_tlbi_range_expected_ops(p)) << p;
}

TEST(TlbiRange, WorkedExampleSequences)
{
	auto d = split(SD_TLBI_RANGE_DESCENDING, 0, 100);
	ASSERT_EQ(2u, d.size());
	EXPECT_EQ(1, d[0].scale); // R(s1,n0)@0 = 64
	EXPECT_EQ(0, d[0].num);
	EXPECT_EQ(0, d[1].scale); // R(s0,n17)@64 = 36
	EXPECT_EQ(17, d[1].num);
	EXPECT_EQ(64u, d[1].vpn);

	auto a = split(SD_TLBI_RANGE_ASCENDING, 0, 100);
	ASSERT_EQ(2u, a.size());
	EXPECT_EQ(0, a[0].scale); // R(s0,n17)@0 = 36 first
	EXPECT_EQ(36u, a[1].vpn); // then R(s1,n0)@36: not 64 KiB aligned
	EXPECT_FALSE(range_ops_aligned(a));

	auto d3 = split(SD_TLBI_RANGE_DESCENDING, 0, 3);
	ASSERT_EQ(2u, d3.size());
	EXPECT_EQ(SD_TLBI_OP_RANGE, d3[0].kind);
	EXPECT_EQ(SD_TLBI_OP_PAGE, d3[1].kind); // single page last
	auto a3 = split(SD_TLBI_RANGE_ASCENDING, 0, 3);
	EXPECT_EQ(SD_TLBI_OP_PAGE, a3[0].kind); // odd page first
}

TEST(TlbiRange, LimitIsOneOpAndBeyondIsAsidFlush)
{
	auto d = split(SD_TLBI_RANGE_DESCENDING, 0, kMax);
	ASSERT_EQ(1u, d.size());
	EXPECT_EQ(SD_TLBI_OP_RANGE, d[0].kind);
	EXPECT_EQ(3, d[0].scale);
	EXPECT_EQ(31, d[0].num);

	auto a = split(SD_TLBI_RANGE_ASCENDING, 0, kMax);
	ASSERT_EQ(1u, a.size());
	EXPECT_EQ(SD_TLBI_OP_ASID, a[0].kind); // the old ">=" bound

	for (auto order : { SD_TLBI_RANGE_ASCENDING, SD_TLBI_RANGE_DESCENDING }) {
		for (uint64_t p : { kMax + 1, kMax + 2, kMax * 4 }) {
			auto ops = split(order, 0, p);
			ASSERT_EQ(1u, ops.size());
			EXPECT_EQ(SD_TLBI_OP_ASID, ops[0].kind) << p;
		}
	}
}

TEST(TlbiRange, NoRangeOpsMeansPagesThenAsidAtMaxTlbiOps)
{
	for (uint64_t p : { 1, 2, 33, 511 }) {
		auto ops = split(SD_TLBI_RANGE_NONE, 7, p);
		ASSERT_EQ(p, ops.size());
		EXPECT_EQ("", check_ops(ops, 7, p));
	}
	for (uint64_t p : { 512, 513, 100000 }) {
		auto ops = split(SD_TLBI_RANGE_NONE, 7, p);
		ASSERT_EQ(1u, ops.size());
		EXPECT_EQ(SD_TLBI_OP_ASID, ops[0].kind);
	}
}

TEST(TlbiRange, Lpa2AlignsEveryRangeOpFromAnyStart)
{
	for (uint64_t start = 0; start < 32; start++) {
		for (uint64_t p = 1; p <= 5000; p++) {
			auto ops = split(SD_TLBI_RANGE_DESCENDING, start, p, true);
			ASSERT_EQ("", check_ops(ops, start, p)) << start << " " << p;
			ASSERT_TRUE(range_ops_aligned(ops)) << "start " << start << " pages " << p;
			// Single pages up to the first 64 KiB boundary (at most 15),
			// then the ordinary split of what is left.
			uint64_t gap = (SD_LPA2_ALIGN_PAGES - start % SD_LPA2_ALIGN_PAGES) %
				       SD_LPA2_ALIGN_PAGES;
			uint64_t k = std::min(p, gap);
			ASSERT_EQ(k + (p > k ? sd_tlbi_range_expected_ops(p - k) : 0), ops.size())
				<< "start " << start << " pages " << p;
		}
	}
	// Without LPA2 a misaligned start gives misaligned range ops.
	EXPECT_FALSE(range_ops_aligned(split(SD_TLBI_RANGE_DESCENDING, 1, 64)));
}

TEST(TlbiRange, ParseNames)
{
	sd_tlbi_range_order o;
	EXPECT_EQ(0, sd_tlbi_range_order_parse("descending", &o));
	EXPECT_EQ(SD_TLBI_RANGE_DESCENDING, o);
	EXPECT_EQ(0, sd_tlbi_range_order_parse("ascending", &o));
	EXPECT_EQ(0, sd_tlbi_range_order_parse("none", &o));
	EXPECT_EQ(-EINVAL, sd_tlbi_range_order_parse("sideways", &o));
}

} // namespace
