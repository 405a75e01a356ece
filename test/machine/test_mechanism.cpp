// SPDX-License-Identifier: MIT
// A profile names the shootdown mechanisms its machine has; a strategy that
// needs one it lacks is refused at creation (or run as a what-if only when
// asked, and then every report can say so), and a run that never used its
// strategy's mechanism says so (gbcast with no global ASID given).
#include "common.hpp"
#include "hw/profile.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

namespace {

using sdtest::Attached;
using sdtest::Cpus;
using sdtest::Machine;
using sdtest::Profile;

constexpr uint64_t kBase = 0x10000000;
constexpr unsigned RW = SD_PROT_READ | SD_PROT_WRITE;

const std::string kIpiOnly = "\"ipi\": \"test: x86\"";
const std::string kTlbiOnly = "\"ipi\": \"test: arm64\", \"tlbi_broadcast\": \"test\"";

sd_machine_config modelled(const Profile &p, const char *strategy, unsigned cpus = 2)
{
	sd_machine_config c = SD_MACHINE_CONFIG_INIT;

	c.nr_cpus = cpus;
	c.strategy = strategy;
	c.profile = p.path.c_str();
	c.model_topology = "pack:1 core:4 pu:1";
	return c;
}

bool contains(const char *hay, const std::string &needle)
{
	return std::strstr(hay, needle.c_str()) != nullptr;
}

// Create fails with -EOPNOTSUPP, leaves *out alone, names what is missing.
void expect_refused(const sd_machine_config &c, const std::string &missing)
{
	sd_machine *m = nullptr;

	EXPECT_EQ(-EOPNOTSUPP, sd_machine_create(&c, &m)) << c.strategy;
	EXPECT_EQ(nullptr, m);
	EXPECT_TRUE(contains(sd_last_error(), missing)) << sd_last_error();
	EXPECT_TRUE(contains(sd_last_error(), "SD_MACHINE_ANY_MECHANISM")) << sd_last_error();
	if (m)
		sd_machine_destroy(m);
}

sd_mechanism_info mechanisms(sd_machine *m)
{
	sd_mechanism_info info = SD_MECHANISM_INFO_INIT;

	EXPECT_EQ(0, sd_machine_mechanisms(m, &info)) << sd_last_error();
	return info;
}

TEST(Mechanism, StrategiesNeedingWhatTheProfileLacksAreRefused)
{
	Profile x86("pack:1 core:4 pu:1", {}, "", "", kIpiOnly);
	Profile arm("pack:1 core:4 pu:1", {}, "", "", kTlbiOnly);

	expect_refused(modelled(x86, "broadcast"), "tlbi_broadcast");
	expect_refused(modelled(x86, "local"), "tlbi_broadcast");
	expect_refused(modelled(x86, "gbcast"), "invlpgb");
	expect_refused(modelled(arm, "gbcast"), "invlpgb");
	for (auto [p, strategy] : {std::pair{&x86, "ipi"}, {&arm, "broadcast"}, {&arm, "local"},
				   {&arm, "ipi"}}) {
		sd_machine_config c = modelled(*p, strategy);
		Machine m(c);
		ASSERT_NE(nullptr, m.m) << strategy;
		sd_mechanism_info info = mechanisms(m.m);
		EXPECT_EQ(0u, info.missing) << strategy;
	}
}

TEST(Mechanism, ThePatchProfilesRefuseTheOtherArchitecture)
{
	sd_machine_config c = SD_MACHINE_CONFIG_INIT;

	c.nr_cpus = 2;
	c.profile = "milan-36";
	c.strategy = "broadcast";
	expect_refused(c, "tlbi_broadcast");
	c.profile = "ampere-emag-32";
	c.strategy = "gbcast";
	expect_refused(c, "invlpgb");
	c.profile = "thunderx2-64-vm";
	expect_refused(c, "invlpgb");
}

TEST(Mechanism, TheOverrideRunsItAndSaysWhatIsMissing)
{
	Profile x86("pack:1 core:4 pu:1", {}, "", "", kIpiOnly);
	sd_machine_config c = modelled(x86, "broadcast");

	c.flags = SD_MACHINE_ANY_MECHANISM;
	{
		Machine m(c);
		ASSERT_NE(nullptr, m.m);
		sd_mechanism_info info = mechanisms(m.m);
		EXPECT_EQ((unsigned)SD_MECH_TLBI_BROADCAST, info.missing);
		EXPECT_EQ((unsigned)SD_MECH_IPI, info.in_profile);
		EXPECT_EQ((unsigned)SD_MECH_TLBI_BROADCAST, info.needed);
		EXPECT_TRUE(contains(info.note, "tlbi_broadcast: not in profile")) << info.note;
	}
	c.flags = 0;
	setenv("SD_MODEL_ANY_MECHANISM", "1", 1);
	{
		Machine m(c);
		EXPECT_NE(nullptr, m.m);
		if (m.m) {
			EXPECT_EQ((unsigned)SD_MECH_TLBI_BROADCAST, mechanisms(m.m).missing);
		}
	}
	unsetenv("SD_MODEL_ANY_MECHANISM");
	expect_refused(c, "tlbi_broadcast");
}

TEST(Mechanism, ProfileMustNameItsMechanismsWithSources)
{
	struct Case {
		const char *drop;
		std::string mechanisms;
		const char *says;
	} cases[] = {
		{"mechanisms", "", "no \"mechanisms\""},
		{"", "\"ipi\": \"x\", \"tlbi\": \"x\"", "unknown mechanism 'tlbi'"},
		{"", "\"ipi\": \"\"", "needs its source"},
		{"", "\"ipi\": 1", "needs its source"},
	};
	for (const Case &k : cases) {
		Profile p("pack:1 core:4 pu:1", {}, k.drop, "", k.mechanisms);
		sd_machine_config c = modelled(p, "ipi");
		sd_machine *m = nullptr;
		EXPECT_EQ(-EINVAL, sd_machine_create(&c, &m)) << k.says;
		EXPECT_TRUE(contains(sd_last_error(), k.says)) << sd_last_error();
		if (m)
			sd_machine_destroy(m);
	}
	// No mechanism at all is a valid profile: only `none` runs on it.
	Profile bare("pack:1 core:4 pu:1", {}, "", "", "");
	sd_machine_config c = modelled(bare, "ipi");
	expect_refused(c, "ipi");
}

// A user strategy declares what its flush() uses, or is stopped at its
// first broadcast.
struct UserBroadcast {
	static void flush(sd_cpu *cpu, sd_mm *mm, uint64_t va, uint64_t len, unsigned, void *arg)
	{
		*static_cast<int *>(arg) = sd_tlb_invalidate_broadcast(cpu, mm, va, len);
	}
};

TEST(Mechanism, UserStrategiesAreCheckedByDeclarationOrAtUse)
{
	Profile x86("pack:1 core:4 pu:1", {}, "", "", kIpiOnly);
	int flush_err = 1;
	sd_strategy s = SD_STRATEGY_INIT;

	s.name = "mech_declared";
	s.flush = UserBroadcast::flush;
	s.arg = &flush_err;
	s.mechanisms = SD_MECH_TLBI_BROADCAST;
	ASSERT_EQ(0, sd_strategy_register(&s));
	expect_refused(modelled(x86, "mech_declared"), "tlbi_broadcast");
	ASSERT_EQ(0, sd_strategy_unregister("mech_declared"));

	s.mechanisms = 1u << 7;
	EXPECT_EQ(-EINVAL, sd_strategy_register(&s));

	s.name = "mech_silent";
	s.mechanisms = 0;
	ASSERT_EQ(0, sd_strategy_register(&s));
	{
		sd_machine_config c = modelled(x86, "mech_silent", 1);
		Machine m(c);
		ASSERT_NE(nullptr, m.m);
		Attached a(m.m, 0);
		sd_mm *mm = nullptr;
		ASSERT_EQ(0, sd_mm_create(m.m, &mm));
		ASSERT_EQ(0, sd_switch_mm(a.c, mm));
		ASSERT_EQ(0, sd_mmap(a.c, mm, kBase, SD_PAGE_SIZE, RW));
		ASSERT_EQ(0, sd_access(a.c, kBase, SD_WRITE, nullptr));
		ASSERT_EQ(0, sd_mprotect(a.c, mm, kBase, SD_PAGE_SIZE, SD_PROT_READ));
		EXPECT_EQ(-EOPNOTSUPP, flush_err) << "the broadcast ran on a profile without it";
		EXPECT_TRUE(contains(sd_last_error(), "tlbi_broadcast")) << sd_last_error();
		ASSERT_EQ(0, sd_switch_mm(a.c, nullptr));
		ASSERT_EQ(0, sd_mm_destroy(mm));
	}
	ASSERT_EQ(0, sd_strategy_unregister("mech_silent"));
}

// Flushes of an mm that runs on every CPU: @n CPUs, @flushes mprotects
// from CPU 0.
void flush_shared_mm(sd_machine *m, unsigned n, int flushes)
{
	Attached a(m, 0);
	Cpus cpus(m, n);
	sd_mm *mm = nullptr;

	ASSERT_EQ(0, sd_mm_create(m, &mm));
	ASSERT_EQ(0, sd_switch_mm(a.c, mm));
	ASSERT_EQ(0, sd_mmap(a.c, mm, kBase, SD_PAGE_SIZE, RW));
	for (unsigned id = 1; id < n; id++)
		cpus.run(id, [mm](sd_cpu *c) {
			sd_switch_mm(c, mm);
			sd_access(c, kBase, SD_READ, nullptr);
		});
	for (int i = 0; i < flushes; i++)
		ASSERT_EQ(0, sd_mprotect(a.c, mm, kBase, SD_PAGE_SIZE, i % 2 ? RW : (unsigned)SD_PROT_READ));
	for (unsigned id = 1; id < n; id++)
		cpus.run(id, [](sd_cpu *c) { sd_switch_mm(c, nullptr); });
	ASSERT_EQ(0, sd_switch_mm(a.c, nullptr));
	ASSERT_EQ(0, sd_mm_destroy(mm));
}

TEST(Mechanism, GbcastWithoutAGlobalAsidSaysItNeverUsedInvlpgb)
{
	sd_machine_config c = SD_MACHINE_CONFIG_INIT;
	c.nr_cpus = 4;
	c.strategy = "gbcast";          // sample=32: 8 flushes are never sampled
	{
		Machine m(c);
		ASSERT_NE(nullptr, m.m);
		flush_shared_mm(m.m, 4, 8);
		sd_mechanism_info info = mechanisms(m.m);
		EXPECT_EQ((unsigned)SD_MECH_INVLPGB, info.primary);
		EXPECT_EQ((unsigned)SD_MECH_ALL, info.in_profile) << "unmodelled: all emulated";
		EXPECT_FALSE(info.used & SD_MECH_INVLPGB);
		EXPECT_TRUE(info.used & SD_MECH_IPI);
		EXPECT_TRUE(contains(info.note, "invlpgb never used")) << info.note;
		EXPECT_TRUE(contains(info.note, "global ASID")) << info.note;
	}
	c.strategy = "gbcast:threshold=0,sample=1";
	{
		Machine m(c);
		ASSERT_NE(nullptr, m.m);
		flush_shared_mm(m.m, 4, 8);
		sd_mechanism_info info = mechanisms(m.m);
		EXPECT_TRUE(info.used & SD_MECH_INVLPGB);
		EXPECT_STREQ("", info.note);
	}
}

TEST(Mechanism, BroadcastThatFlushedSaysNothing)
{
	sd_machine_config c = SD_MACHINE_CONFIG_INIT;
	c.nr_cpus = 2;
	c.strategy = "broadcast";
	Machine m(c);
	ASSERT_NE(nullptr, m.m);
	EXPECT_TRUE(contains(mechanisms(m.m).note, "tlbi_broadcast never used"))
		<< "before any flush";
	flush_shared_mm(m.m, 2, 2);
	sd_mechanism_info info = mechanisms(m.m);
	EXPECT_TRUE(info.used & SD_MECH_TLBI_BROADCAST);
	EXPECT_STREQ("", info.note);
}

TEST(Mechanism, NamesAndArguments)
{
	EXPECT_STREQ("ipi", sd_mechanism_name(SD_MECH_IPI));
	EXPECT_STREQ("tlbi_broadcast", sd_mechanism_name(SD_MECH_TLBI_BROADCAST));
	EXPECT_STREQ("invlpgb", sd_mechanism_name(SD_MECH_INVLPGB));
	EXPECT_STREQ("rar", sd_mechanism_name(SD_MECH_RAR));
	EXPECT_STREQ("sbi", sd_mechanism_name(SD_MECH_SBI));
	for (unsigned bad : {0u, 3u, 32u, ~0u}) {
		EXPECT_EQ(nullptr, sd_mechanism_name(bad));
		EXPECT_TRUE(contains(sd_last_error(), "sd_mechanism_name")) << sd_last_error();
	}
	sd_machine_config c = SD_MACHINE_CONFIG_INIT;
	c.nr_cpus = 1;
	Machine m(c);
	ASSERT_NE(nullptr, m.m);
	sd_mechanism_info info = SD_MECHANISM_INFO_INIT;
	EXPECT_EQ(-EINVAL, sd_machine_mechanisms(nullptr, &info));
	EXPECT_EQ(-EINVAL, sd_machine_mechanisms(m.m, nullptr));
	info.size = 4;
	EXPECT_EQ(-EINVAL, sd_machine_mechanisms(m.m, &info));
}

} // namespace
