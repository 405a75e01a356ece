// SPDX-License-Identifier: MIT
// Placement inside the PUs the user allowed: the creating thread's affinity
// mask (what taskset sets) bounds every placement, a listed PU outside it is
// refused, and a creator that one of our CPUs pinned still counts with the
// mask its user gave it.
#include "common.hpp"

#include <sched.h>

#include <cstring>
#include <string>
#include <thread>

namespace {

using sdtest::Machine;

// The calling thread's affinity, narrowed for the test's scope.
class ScopedAffinity {
public:
	explicit ScopedAffinity(int pu)
	{
		cpu_set_t set;

		ok_ = !sched_getaffinity(0, sizeof(saved_), &saved_);
		CPU_ZERO(&set);
		CPU_SET(pu, &set);
		ok_ = ok_ && !sched_setaffinity(0, sizeof(set), &set);
	}
	~ScopedAffinity()
	{
		sched_setaffinity(0, sizeof(saved_), &saved_);
	}
	bool ok() const { return ok_; }

private:
	cpu_set_t saved_;
	bool ok_ = false;
};

// The highest PU this thread may use now (-1 if none can be read), and how
// many it may use.
int last_allowed_pu(int *count)
{
	cpu_set_t set;
	int last = -1;

	*count = 0;
	if (sched_getaffinity(0, sizeof(set), &set))
		return -1;
	for (int i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, &set)) {
			last = i;
			++*count;
		}
	return last;
}

sd_machine_config config(unsigned cpus, sd_placement placement)
{
	sd_machine_config c = SD_MACHINE_CONFIG_INIT;

	c.nr_cpus = cpus;
	c.placement = placement;
	c.strategy = "broadcast";
	return c;
}

// Skips unless this thread may use two PUs or more; else the last of them.
#define NEED_TWO_PUS(pu)                                                            \
	do {                                                                        \
		int n_;                                                             \
		(pu) = last_allowed_pu(&n_);                                        \
		if (n_ < 2 || std::getenv("SD_TOPOLOGY"))                           \
			GTEST_SKIP() << "needs two real PUs the thread may use";    \
	} while (0)

TEST(Affinity, EveryPlacementStaysInsideTheThreadsMask)
{
	int pu;
	NEED_TWO_PUS(pu);
	ScopedAffinity only(pu);
	ASSERT_TRUE(only.ok());

	for (sd_placement p : { SD_PLACE_COMPACT, SD_PLACE_SCATTER }) {
		sd_machine_config c = config(4, p);
		Machine m(c);
		ASSERT_NE(nullptr, m.m);
		struct sd_machine_info info;
		struct sd_machine_pus pus = SD_MACHINE_PUS_INIT;
		ASSERT_EQ(0, sd_machine_info(m.m, &info));
		ASSERT_EQ(0, sd_machine_pus(m.m, &pus));
		EXPECT_EQ(1u, info.nr_pus);
		EXPECT_EQ(1u, pus.nr_allowed_pus);
		EXPECT_GE(pus.nr_host_pus, 2u);
		EXPECT_EQ(std::to_string(pu), pus.allowed);
		EXPECT_EQ(std::to_string(pu), pus.used);
		EXPECT_TRUE(info.oversubscribed);
		for (unsigned cpu = 0; cpu < 4; cpu++) {
			sd_cpu_info ci;
			ASSERT_EQ(0, sd_machine_cpu_info(m.m, cpu, &ci));
			EXPECT_EQ(pu, ci.pu_os_index) << "placement " << p << ", cpu " << cpu;
		}
	}
}

TEST(Affinity, AllPusMeansTheAllowedOnes)
{
	int pu;
	NEED_TWO_PUS(pu);
	ScopedAffinity only(pu);
	ASSERT_TRUE(only.ok());
	sd_machine_config c = config(SD_NR_CPUS_ALL_PUS, SD_PLACE_COMPACT);
	Machine m(c);

	ASSERT_NE(nullptr, m.m);
	struct sd_machine_info info;
	ASSERT_EQ(0, sd_machine_info(m.m, &info));
	EXPECT_EQ(1u, info.nr_cpus);
}

TEST(Affinity, AttachedCpuRunsOnAnAllowedPu)
{
	int pu;
	NEED_TWO_PUS(pu);
	ScopedAffinity only(pu);
	ASSERT_TRUE(only.ok());
	sd_machine_config c = config(2, SD_PLACE_COMPACT);
	c.flags = SD_MACHINE_STRICT_PIN;
	Machine m(c);
	ASSERT_NE(nullptr, m.m);

	for (unsigned cpu = 0; cpu < 2; cpu++) {
		int where = -1;
		std::thread t([&] {
			sd_cpu *self = nullptr;
			if (sd_cpu_attach(m.m, cpu, &self))
				return;
			where = sched_getcpu();
			sd_cpu_detach(self);
		});
		t.join();
		EXPECT_EQ(pu, where) << "cpu " << cpu;
	}
}

TEST(Affinity, ListedPuOutsideTheMaskIsRefusedWithTheAllowedSet)
{
	int pu;
	NEED_TWO_PUS(pu);
	ScopedAffinity only(pu);
	ASSERT_TRUE(only.ok());
	unsigned other = pu == 0 ? 1 : 0;
	sd_machine_config c = config(1, SD_PLACE_LIST);
	c.pu_list = &other;
	c.pu_list_len = 1;
	sd_machine *m = nullptr;

	EXPECT_EQ(-EINVAL, sd_machine_create(&c, &m));
	EXPECT_EQ(nullptr, m);
	EXPECT_NE(nullptr, std::strstr(sd_last_error(), "may use")) << sd_last_error();
	EXPECT_NE(nullptr, std::strstr(sd_last_error(), std::to_string(pu).c_str()));
}

// A thread attached as a CPU of one machine is pinned to that CPU's PU; a
// machine it creates then must still see the PUs its user allowed it, not
// the one we put it on.
TEST(Affinity, PinnedCreatorKeepsItsUsersMask)
{
	int pu;
	NEED_TWO_PUS(pu);
	(void)pu;
	int allowed;
	last_allowed_pu(&allowed);
	sd_machine_config c1 = config(1, SD_PLACE_COMPACT);
	c1.flags = SD_MACHINE_STRICT_PIN;
	Machine first(c1);
	ASSERT_NE(nullptr, first.m);
	sd_cpu *self = nullptr;
	ASSERT_EQ(0, sd_cpu_attach(first.m, 0, &self)) << sd_last_error();

	sd_machine_config c2 = config(2, SD_PLACE_COMPACT);
	Machine second(c2);
	ASSERT_NE(nullptr, second.m);
	struct sd_machine_info info;
	ASSERT_EQ(0, sd_machine_info(second.m, &info));
	struct sd_machine_pus pus = SD_MACHINE_PUS_INIT;
	ASSERT_EQ(0, sd_machine_pus(second.m, &pus));
	EXPECT_EQ((unsigned)allowed, info.nr_pus) << "allowed " << pus.allowed;
	EXPECT_FALSE(info.oversubscribed);
	sd_cpu_detach(self);
}

TEST(Affinity, PusInfoChecksItsArguments)
{
	sd_machine_config c = config(1, SD_PLACE_COMPACT);
	Machine m(c);
	ASSERT_NE(nullptr, m.m);
	struct sd_machine_pus pus = SD_MACHINE_PUS_INIT;

	EXPECT_EQ(-EINVAL, sd_machine_pus(nullptr, &pus));
	EXPECT_EQ(-EINVAL, sd_machine_pus(m.m, nullptr));
	pus.size = 8;
	EXPECT_EQ(-EINVAL, sd_machine_pus(m.m, &pus));
	pus.size = sizeof(pus);
	ASSERT_EQ(0, sd_machine_pus(m.m, &pus));
	EXPECT_GE(pus.nr_allowed_pus, 1u);
}

TEST(Affinity, PrintedInfoSaysWhichPusAndWhy)
{
	sd_machine_config c = config(1, SD_PLACE_COMPACT);
	Machine m(c);
	ASSERT_NE(nullptr, m.m);
	char buf[4096] = "";
	FILE *f = fmemopen(buf, sizeof(buf) - 1, "w");
	ASSERT_NE(nullptr, f);
	sd_machine_print_info(m.m, f);
	fclose(f);
	if (std::getenv("SD_TOPOLOGY"))
		GTEST_SKIP() << "a synthetic topology has no PUs to name";
	EXPECT_NE(nullptr, std::strstr(buf, "affinity mask")) << buf;
}

} // namespace
