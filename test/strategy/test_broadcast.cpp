// SPDX-License-Identifier: MIT
// The `broadcast` strategy (lib/strategy/broadcast.c): arm64 TLBI ...IS.
//
// What it promises: a flush invalidates the mm's ASID in every CPU's TLB,
// whether or not the mm runs there (entries are ASID-tagged and outlive a
// switch away), and returns only when all of it is done; a range is issued
// as the arm64 encoding says (__flush_tlb_range_op(): range ops by scale
// and num, one page op for an odd page, or per page below MAX_TLBI_OPS when
// range ops are off); bad options are refused before anything is built.
#include "common.hpp"
#include "internal.hpp"
#include "hw/profile.hpp"

#include <cstring>
#include <vector>

extern "C" {
#include "arch/tlbi_range.h"
#include "hw/machine_state.h"
}

namespace {

using sdtest::Attached;
using sdtest::config;
using sdtest::counter;
using sdtest::Cpus;
using sdtest::Machine;

constexpr uint64_t kPage = 4096;
constexpr uint64_t kBase = 0x40000000;

// The TLBI counters of CPU @cpu, before and after one call.
struct Tlbi {
	uint64_t ops, asid_ops, page_ops, range_ops, remote;
};

Tlbi tlbi(sd_machine *m, unsigned cpu)
{
	Tlbi t{};
	t.ops = counter(m, cpu, SD_STAT_TLBI_OP);
	t.asid_ops = counter(m, cpu, SD_STAT_TLBI_ASID_OP);
	t.page_ops = counter(m, cpu, SD_STAT_TLBI_PAGE_OP);
	for (int s = SD_STAT_TLBI_RANGE_S0; s <= SD_STAT_TLBI_RANGE_S3; s++)
		t.range_ops += counter(m, cpu, static_cast<sd_stat>(s));
	t.remote = counter(m, cpu, SD_STAT_REMOTE_INVAL);
	return t;
}

Tlbi operator-(const Tlbi &a, const Tlbi &b)
{
	return { a.ops - b.ops, a.asid_ops - b.asid_ops, a.page_ops - b.page_ops,
		 a.range_ops - b.range_ops, a.remote - b.remote };
}

// CPU 1 caches a page of M, then switches to N: M's entry stays in its TLB
// under M's ASID. CPU 0, which never ran M, write-protects the page: the
// broadcast must reach CPU 1's TLB all the same.
TEST(Broadcast, FlushReachesEveryTlbEvenWhereTheMmDoesNotRun)
{
	Machine mc(config(4));
	ASSERT_NE(nullptr, mc.m);
	Attached a(mc.m, 0);
	sd_mm *m = nullptr, *n = nullptr;
	ASSERT_EQ(0, sd_mm_create(mc.m, &m));
	ASSERT_EQ(0, sd_mm_create(mc.m, &n));
	ASSERT_EQ(0, sd_mmap(a.c, m, kBase, kPage, SD_PROT_READ | SD_PROT_WRITE));
	uint16_t asid_m = 0;
	{
		Cpus cpus(mc.m, 2);
		cpus.run(1, [&](sd_cpu *c) {
			uint64_t pfn;
			ASSERT_EQ(0, sd_switch_mm(c, m));
			ASSERT_EQ(0, sd_access(c, kBase, SD_WRITE, &pfn));
			asid_m = c->asid;
			ASSERT_EQ(0, sd_switch_mm(c, n));
		});
		sd_cpu *c1 = mc.m->cpus[1];
		ASSERT_TRUE(sdtest::tlb_holds(&c1->tlb, kBase / kPage, asid_m))
			<< "CPU 1 should still cache M's page after switching away";

		Tlbi before = tlbi(mc.m, 0);
		ASSERT_EQ(0, sd_mprotect(a.c, m, kBase, kPage, SD_PROT_READ));
		Tlbi d = tlbi(mc.m, 0) - before;

		EXPECT_FALSE(sdtest::tlb_holds(&c1->tlb, kBase / kPage, asid_m))
			<< "the broadcast missed a CPU that does not run M";
		EXPECT_EQ(1u, d.ops) << "one page: one TLBI";
		EXPECT_EQ(1u, d.page_ops);
		EXPECT_EQ(3u, d.remote) << "every other CPU's TLB, running M or not";

		cpus.run(1, [&](sd_cpu *c) {
			uint64_t pfn;
			ASSERT_EQ(0, sd_switch_mm(c, m));
			EXPECT_EQ(-EACCES, sd_access(c, kBase, SD_WRITE, &pfn))
				<< "CPU 1 wrote through a stale writable entry";
			ASSERT_EQ(0, sd_switch_mm(c, nullptr));
		});
	}
	EXPECT_EQ(0u, sd_oracle_violations(mc.m));
	EXPECT_EQ(0, sd_mm_destroy(m));
	EXPECT_EQ(0, sd_mm_destroy(n));
}

// One flush of @pages pages of a running mm on a machine made from @c: its
// TLBI counts.
Tlbi one_flush_on(const sd_machine_config &c, uint64_t pages)
{
	Machine mc(c);
	Tlbi d{};
	if (!mc.m)
		return d;
	Attached a(mc.m, 0);
	sd_mm *m = nullptr;
	EXPECT_EQ(0, sd_mm_create(mc.m, &m));
	EXPECT_EQ(0, sd_switch_mm(a.c, m));             // M gets an ASID
	EXPECT_EQ(0, sd_mmap(a.c, m, kBase, pages * kPage, SD_PROT_READ | SD_PROT_WRITE));
	// Present pages: a change of pages never touched has nothing to flush.
	for (uint64_t p = 0; p < pages; p++) {
		uint64_t pfn;
		EXPECT_EQ(0, sd_access(a.c, kBase + p * kPage, SD_WRITE, &pfn));
	}
	Tlbi before = tlbi(mc.m, 0);
	EXPECT_EQ(0, sd_mprotect(a.c, m, kBase, pages * kPage, SD_PROT_READ));
	d = tlbi(mc.m, 0) - before;
	EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	EXPECT_EQ(0, sd_mm_destroy(m));
	return d;
}

// The same under @spec, unmodelled.
Tlbi one_flush(const char *spec, uint64_t pages)
{
	return one_flush_on(config(2, spec), pages);
}

class BroadcastRange : public ::testing::TestWithParam<uint64_t> {};

// With range ops (the default, descending scales): (P & 1) page ops plus one
// range op per non-zero base-32 digit of P >> 1; no whole-ASID flush.
TEST_P(BroadcastRange, RangeOpsFollowTheArm64Encoding)
{
	uint64_t pages = GetParam();
	Tlbi d = one_flush("broadcast", pages);
	EXPECT_EQ(sd_tlbi_range_expected_ops(pages), d.ops) << pages << " pages";
	EXPECT_EQ(pages & 1, d.page_ops);
	EXPECT_EQ(d.ops - d.page_ops, d.range_ops);
	EXPECT_EQ(0u, d.asid_ops);
	EXPECT_EQ(d.ops, d.remote) << "2 CPUs: every op reaches the other TLB once";
}

// Without range ops: one op per page below MAX_TLBI_OPS (512), else one
// whole-ASID flush.
TEST_P(BroadcastRange, WithoutRangeOpsPerPageThenTheWholeAsid)
{
	uint64_t pages = GetParam();
	Tlbi d = one_flush("broadcast:range=none", pages);
	if (pages < 512) {
		EXPECT_EQ(pages, d.ops);
		EXPECT_EQ(pages, d.page_ops);
		EXPECT_EQ(0u, d.asid_ops);
	} else {
		EXPECT_EQ(1u, d.ops);
		EXPECT_EQ(1u, d.asid_ops);
	}
	EXPECT_EQ(0u, d.range_ops);
}

INSTANTIATE_TEST_SUITE_P(Pages, BroadcastRange,
			 ::testing::Values(1, 2, 3, 31, 32, 33, 64, 65, 511, 512, 513, 1000, 4097));

// A profile's CPU features change the kernel's flushes: no FEAT_TLBIRANGE
// means the pre-range loop (a TLBI a page up to MAX_TLBI_OPS, then the
// ASID), and asking for range ops there is refused unless a what-if; KPTI
// issues every user TLBI twice (__tlbi_user()).
sd_machine_config on_profile(const sdtest::Profile &p, const char *spec)
{
	sd_machine_config c = config(2, spec);
	c.profile = p.path.c_str();
	c.model_topology = "pack:1 core:2 pu:1";
	return c;
}

TEST(BroadcastFeatures, WithoutRangeTlbiTheKernelLoopsAPageAtATime)
{
	sdtest::Profile p("pack:1 core:2 pu:1", {}, "", "", sdtest::kAllMechanisms,
			  sdtest::features_text(false, false));
	for (const char *spec : {"broadcast", "local"}) {
		Tlbi d = one_flush_on(on_profile(p, spec), 33);
		EXPECT_EQ(33u, d.page_ops) << spec;
		EXPECT_EQ(0u, d.range_ops) << spec;
		d = one_flush_on(on_profile(p, spec), 512);
		EXPECT_EQ(0u, d.page_ops + d.range_ops) << spec << ": MAX_TLBI_OPS pages, the ASID";
		if (!std::strcmp(spec, "broadcast")) {
			EXPECT_EQ(1u, d.asid_ops);
		}
	}
	for (const char *spec : {"broadcast:range=descending", "local:range=ascending"}) {
		sd_machine_config c = on_profile(p, spec);
		sd_machine *m = nullptr;
		EXPECT_EQ(-EOPNOTSUPP, sd_machine_create(&c, &m)) << spec;
		EXPECT_EQ(nullptr, m);
		EXPECT_NE(nullptr, std::strstr(sd_last_error(), "range")) << sd_last_error();
		c.flags |= SD_MACHINE_ANY_MECHANISM;
		Tlbi d = one_flush_on(c, 33);
		EXPECT_GT(d.range_ops, 0u) << spec << ": the what-if runs range ops";
	}
}

TEST(BroadcastFeatures, KptiIssuesEveryUserTlbiTwice)
{
	sdtest::Profile plain("pack:1 core:2 pu:1", {}, "", "", sdtest::kAllMechanisms,
			      sdtest::features_text(true, false));
	sdtest::Profile kpti("pack:1 core:2 pu:1", {}, "", "", sdtest::kAllMechanisms,
			     sdtest::features_text(true, true));
	for (uint64_t pages : {1, 33}) {
		Tlbi once = one_flush_on(on_profile(plain, "broadcast"), pages);
		Tlbi twice = one_flush_on(on_profile(kpti, "broadcast"), pages);
		EXPECT_EQ(2 * once.ops, twice.ops) << pages << " pages: messages";
		EXPECT_EQ(2 * once.remote, twice.remote) << pages << " pages: targets' work";
		EXPECT_EQ(once.page_ops, twice.page_ops) << "the same ops, each sent twice";
	}
}

// ARM64_WORKAROUND_REPEAT_TLBI: every TLBI is followed by "dsb ish; tlbi"
// again (__TLBI_0()'s ALTERNATIVE); a profile that leaves the feature out
// has none.
TEST(BroadcastFeatures, RepeatTlbiIssuesEveryTlbiAgainAfterADsb)
{
	sdtest::Profile plain("pack:1 core:2 pu:1", {}, "", "", sdtest::kAllMechanisms,
			      sdtest::features_text(true, false));
	sdtest::Profile repeat("pack:1 core:2 pu:1", {{"dsb", 100}}, "", "", sdtest::kAllMechanisms,
			       sdtest::features_text(true, false) +
				       ", \"repeat_tlbi\": {\"present\": true, \"source\": \"test\"}");
	for (uint64_t pages : {1, 33}) {
		Tlbi once = one_flush_on(on_profile(plain, "broadcast"), pages);
		Tlbi twice = one_flush_on(on_profile(repeat, "broadcast"), pages);
		EXPECT_EQ(2 * once.ops, twice.ops) << pages << " pages: messages";
		EXPECT_EQ(2 * once.remote, twice.remote) << pages << " pages: targets' work";
	}
}

TEST(Broadcast, BadOptionsAreRefusedAndNothingIsCreated)
{
	const struct {
		const char *spec;
		int err;
	} cases[] = {
		{ "broadcast:range=sideways", -EINVAL },
		{ "broadcast:max_tlbi_ops=0", -EINVAL },
		{ "broadcast:lpa2=2", -EINVAL },
		{ "broadcast:range=", -EINVAL },
		{ "broadcast:cpumask=lazy", -ENOENT },   // an ipi option
		{ "broadcast:range=none,range=none", -EINVAL },
	};
	for (const auto &c : cases) {
		sd_machine_config cfg = config(2, c.spec);
		sd_machine *m = reinterpret_cast<sd_machine *>(0x1);
		EXPECT_EQ(c.err, sd_machine_create(&cfg, &m)) << c.spec;
		EXPECT_EQ(reinterpret_cast<sd_machine *>(0x1), m) << c.spec << ": out was written";
		EXPECT_NE(std::string(""), sd_last_error()) << c.spec;
	}
}

} // namespace
