// SPDX-License-Identifier: MIT
// The machine: topology, placement, oversubscription, sd_machine_run, pinning,
// attach/detach from the test thread, per-CPU size and the printed summary.
#include "common.hpp"

#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

using sdtest::Attached;
using sdtest::Machine;

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

// If the environment already forces a topology, the real-machine tests
// would test that instead: leave them out.
bool real_topology()
{
	return std::getenv("SD_TOPOLOGY") == nullptr;
}

sd_machine_config cfg_cpus(unsigned n)
{
	sd_machine_config c = SD_MACHINE_CONFIG_INIT;
	c.nr_cpus = n;
	c.oracle = SD_ORACLE_CHECKED;
	return c;
}

struct sd_machine_info info_of(sd_machine *m)
{
	struct sd_machine_info info;
	std::memset(&info, 0xa5, sizeof(info));
	EXPECT_EQ(0, sd_machine_info(m, &info));
	return info;
}

std::set<int> thread_affinity()
{
	cpu_set_t set;
	CPU_ZERO(&set);
	EXPECT_EQ(0, sched_getaffinity(0, sizeof(set), &set));
	std::set<int> out;
	for (int i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, &set))
			out.insert(i);
	return out;
}

std::string print_info(sd_machine *m)
{
	char *buf = nullptr;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	EXPECT_NE(nullptr, f);
	if (!f)
		return "";
	sd_machine_print_info(m, f);
	fclose(f);
	std::string s(buf, len);
	free(buf);
	return s;
}


TEST(Machine, ConfigInitMatchesInitialiser)
{
	sd_machine_config a = SD_MACHINE_CONFIG_INIT;
	sd_machine_config b;
	std::memset(&b, 0x5a, sizeof(b));
	sd_machine_config_init(&b);
	EXPECT_EQ(sizeof(sd_machine_config), b.size);
	EXPECT_EQ(a.size, b.size);
	EXPECT_EQ(a.nr_cpus, b.nr_cpus);
	EXPECT_EQ(a.placement, b.placement);
	EXPECT_EQ(a.pu_list, b.pu_list);
	EXPECT_EQ(a.flags, b.flags);
	EXPECT_EQ(a.strategy, b.strategy);
	EXPECT_EQ(a.tlb_sets, b.tlb_sets);
	EXPECT_EQ(a.ipi_signal, b.ipi_signal);
	EXPECT_EQ(a.asid_bits, b.asid_bits);
	EXPECT_EQ(a.oracle, b.oracle);
	EXPECT_EQ(a.nr_frames, b.nr_frames);
}

TEST(Machine, DefaultIsOneCpuPerPu)
{
	if (!real_topology())
		GTEST_SKIP() << "SD_TOPOLOGY set in the environment";
	sd_machine *m = nullptr;
	ASSERT_EQ(0, sd_machine_create(nullptr, &m)) << sd_last_error();
	struct sd_machine_info info = info_of(m);
	// hwloc counts the PUs this process may use; so does the affinity mask
	// the test process started with.
	unsigned allowed = (unsigned)thread_affinity().size();
	EXPECT_EQ(allowed, info.nr_pus);
	EXPECT_EQ(info.nr_pus, info.nr_cpus);
	EXPECT_EQ(info.nr_cpus, sd_machine_nr_cpus(m));
	EXPECT_EQ(0, info.oversubscribed);
	EXPECT_EQ(0, info.synthetic);
	EXPECT_GE(info.nr_cores, 1u);
	EXPECT_LE(info.nr_cores, info.nr_pus);
	EXPECT_GE(info.nr_packages, 1u);
	EXPECT_LE(info.nr_packages, info.nr_cores);
	EXPECT_GE(info.nr_numa_nodes, 1u);
	// Defaults filled in.
	EXPECT_EQ(256u, info.tlb_sets);
	EXPECT_EQ(8u, info.tlb_ways);
	EXPECT_EQ(64u, info.tlb_l1_entries);
	EXPECT_EQ(16u, info.asid_bits);
	EXPECT_EQ(SIGRTMIN + 4, info.ipi_signal);
	EXPECT_EQ(SD_PLACE_COMPACT, info.placement);
	EXPECT_STREQ("broadcast", info.strategy);
	EXPECT_NE(std::string::npos, std::string(info.topology).find("PU")) << info.topology;
	EXPECT_EQ(1, info.all_pinned) << "nothing attached yet, nothing unpinned";
	EXPECT_STREQ("", info.pin_note);
	EXPECT_EQ(0, sd_machine_destroy(m));

	// The explicit "all PUs" value is the same thing.
	sd_machine_config c = cfg_cpus(SD_NR_CPUS_ALL_PUS);
	Machine mach(c);
	ASSERT_NE(nullptr, mach.m);
	EXPECT_EQ(info.nr_pus, sd_machine_nr_cpus(mach.m));
}

TEST(Machine, OracleModeFromConfig)
{
	sd_machine_config c = cfg_cpus(1);
	c.oracle = SD_ORACLE_OFF;
	Machine off(c);
	ASSERT_NE(nullptr, off.m);
	EXPECT_EQ(0, sd_oracle_checked(off.m));
	EXPECT_EQ(SD_ORACLE_OFF, info_of(off.m).oracle);
	c.oracle = SD_ORACLE_CHECKED;
	Machine on(c);
	ASSERT_NE(nullptr, on.m);
	EXPECT_EQ(1, sd_oracle_checked(on.m));
	EXPECT_EQ(SD_ORACLE_CHECKED, info_of(on.m).oracle);
}

TEST(Machine, OracleModeFromEnvironment)
{
	sd_machine_config c = cfg_cpus(1);
	c.oracle = SD_ORACLE_DEFAULT;
	{
		EnvGuard e("SD_ORACLE", "1");
		Machine m(c);
		ASSERT_NE(nullptr, m.m);
		EXPECT_EQ(1, sd_oracle_checked(m.m));
	}
	{
		EnvGuard e("SD_ORACLE", "0");
		Machine m(c);
		ASSERT_NE(nullptr, m.m);
		EXPECT_EQ(0, sd_oracle_checked(m.m));
	}
}

TEST(Machine, SyntheticTopology)
{
	EnvGuard env("SD_TOPOLOGY", "pack:2 core:8 pu:2");
	sd_machine *m = nullptr;
	ASSERT_EQ(0, sd_machine_create(nullptr, &m)) << sd_last_error();
	struct sd_machine_info info = info_of(m);
	EXPECT_EQ(32u, info.nr_pus);
	EXPECT_EQ(32u, info.nr_cpus);
	EXPECT_EQ(2u, info.nr_packages);
	EXPECT_EQ(16u, info.nr_cores);
	EXPECT_EQ(1, info.synthetic);
	EXPECT_EQ(0, info.oversubscribed);
	EXPECT_NE(std::string::npos, std::string(info.topology).find("synthetic")) << info.topology;
	EXPECT_EQ(0, sd_machine_destroy(m));
}

TEST(Machine, CompactPlacementFillsACoreFirst)
{
	EnvGuard env("SD_TOPOLOGY", "pack:2 core:8 pu:2");
	Machine mach(cfg_cpus(32));
	ASSERT_NE(nullptr, mach.m);
	EXPECT_EQ(SD_PLACE_COMPACT, info_of(mach.m).placement);
	sd_cpu_info c0, c1, c2, c16;
	ASSERT_EQ(0, sd_machine_cpu_info(mach.m, 0, &c0));
	ASSERT_EQ(0, sd_machine_cpu_info(mach.m, 1, &c1));
	ASSERT_EQ(0, sd_machine_cpu_info(mach.m, 2, &c2));
	ASSERT_EQ(0, sd_machine_cpu_info(mach.m, 16, &c16));
	EXPECT_EQ(0u, c0.cpu);
	EXPECT_EQ(1u, c1.cpu);
	EXPECT_NE(c0.pu_os_index, c1.pu_os_index);
	EXPECT_EQ(c0.core, c1.core) << "compact: CPUs 0 and 1 are the two PUs of one core";
	EXPECT_EQ(c0.package, c1.package);
	EXPECT_NE(c0.core, c2.core);
	EXPECT_EQ(c0.package, c2.package);
	EXPECT_NE(c0.package, c16.package) << "CPU 16 is on the second package";
	EXPECT_EQ(-1, c0.pinned) << "never attached";
	EXPECT_EQ(0, c0.attached);
	// Every PU is used exactly once.
	std::set<int> pus;
	for (unsigned i = 0; i < 32; i++) {
		sd_cpu_info ci;
		ASSERT_EQ(0, sd_machine_cpu_info(mach.m, i, &ci));
		pus.insert(ci.pu_os_index);
		EXPECT_GE(ci.core, 0);
		EXPECT_GE(ci.package, 0);
	}
	EXPECT_EQ(32u, pus.size());
}

TEST(Machine, ScatterPlacementSpreadsOverPackages)
{
	EnvGuard env("SD_TOPOLOGY", "pack:2 core:8 pu:2");
	sd_machine_config c = cfg_cpus(32);
	c.placement = SD_PLACE_SCATTER;
	Machine mach(c);
	ASSERT_NE(nullptr, mach.m);
	EXPECT_EQ(SD_PLACE_SCATTER, info_of(mach.m).placement);
	sd_cpu_info c0, c1, c2;
	ASSERT_EQ(0, sd_machine_cpu_info(mach.m, 0, &c0));
	ASSERT_EQ(0, sd_machine_cpu_info(mach.m, 1, &c1));
	ASSERT_EQ(0, sd_machine_cpu_info(mach.m, 2, &c2));
	EXPECT_NE(c0.package, c1.package) << "scatter: CPUs 0 and 1 on different packages";
	EXPECT_NE(c0.core, c2.core) << "scatter: CPUs 0 and 2 on different cores";
	// The first 16 CPUs get 16 distinct cores.
	std::set<int> cores, pus;
	for (unsigned i = 0; i < 32; i++) {
		sd_cpu_info ci;
		ASSERT_EQ(0, sd_machine_cpu_info(mach.m, i, &ci));
		if (i < 16)
			cores.insert(ci.core);
		pus.insert(ci.pu_os_index);
	}
	EXPECT_EQ(16u, cores.size());
	EXPECT_EQ(32u, pus.size());
}

TEST(Machine, ListPlacementCycles)
{
	EnvGuard env("SD_TOPOLOGY", "pack:2 core:8 pu:2");
	const unsigned list[3] = {3, 17, 30};
	sd_machine_config c = cfg_cpus(8);
	c.placement = SD_PLACE_LIST;
	c.pu_list = list;
	c.pu_list_len = 3;
	Machine mach(c);
	ASSERT_NE(nullptr, mach.m);
	EXPECT_EQ(SD_PLACE_LIST, info_of(mach.m).placement);
	for (unsigned i = 0; i < 8; i++) {
		sd_cpu_info ci;
		ASSERT_EQ(0, sd_machine_cpu_info(mach.m, i, &ci));
		EXPECT_EQ((int)list[i % 3], ci.pu_os_index) << "cpu " << i;
	}
}

TEST(Machine, ListPlacementOnTheRealMachine)
{
	if (!real_topology())
		GTEST_SKIP() << "SD_TOPOLOGY set in the environment";
	std::set<int> aff = thread_affinity();
	ASSERT_FALSE(aff.empty());
	const unsigned last = (unsigned)*aff.rbegin();
	const unsigned list[1] = {last};
	sd_machine_config c = cfg_cpus(3);
	c.placement = SD_PLACE_LIST;
	c.pu_list = list;
	c.pu_list_len = 1;
	Machine mach(c);
	ASSERT_NE(nullptr, mach.m);
	std::atomic<int> wrong{0};
	struct Arg {
		unsigned pu;
		std::atomic<int> *wrong;
	} arg{last, &wrong};
	ASSERT_EQ(0, sd_machine_run(
			     mach.m,
			     [](sd_cpu *, void *p) {
				     auto *a = static_cast<Arg *>(p);
				     // Pinned: the kernel says we run on that PU only.
				     if (sched_getcpu() != (int)a->pu)
					     a->wrong->fetch_add(1);
			     },
			     &arg));
	EXPECT_EQ(0, wrong.load()) << "a CPU ran off its listed PU";
}

TEST(Machine, Oversubscription)
{
	if (!real_topology())
		GTEST_SKIP() << "SD_TOPOLOGY set in the environment";
	sd_machine *m = nullptr;
	ASSERT_EQ(0, sd_machine_create(nullptr, &m));
	const unsigned pus = info_of(m).nr_pus;
	ASSERT_EQ(0, sd_machine_destroy(m));

	Machine exact(cfg_cpus(pus));
	ASSERT_NE(nullptr, exact.m);
	struct sd_machine_info i1 = info_of(exact.m);
	EXPECT_EQ(0, i1.oversubscribed);
	std::string p1 = print_info(exact.m);
	EXPECT_EQ(std::string::npos, p1.find("oversubscribed")) << p1;

	Machine over(cfg_cpus(pus + 1));
	ASSERT_NE(nullptr, over.m);
	struct sd_machine_info i2 = info_of(over.m);
	EXPECT_EQ(pus + 1, i2.nr_cpus);
	EXPECT_EQ(1, i2.oversubscribed);
	std::string p2 = print_info(over.m);
	EXPECT_NE(std::string::npos, p2.find("oversubscribed")) << p2;
	// Compact wraps around: the extra CPU shares PU of CPU 0.
	sd_cpu_info a, b;
	ASSERT_EQ(0, sd_machine_cpu_info(over.m, 0, &a));
	ASSERT_EQ(0, sd_machine_cpu_info(over.m, pus, &b));
	EXPECT_EQ(a.pu_os_index, b.pu_os_index);
}

TEST(Machine, PrintInfoListsEveryCpu)
{
	Machine mach(cfg_cpus(3));
	ASSERT_NE(nullptr, mach.m);
	std::string s = print_info(mach.m);
	EXPECT_NE(std::string::npos, s.find("broadcast")) << s;
	for (int i = 0; i < 3; i++)
		EXPECT_NE(std::string::npos, s.find("cpu " + std::to_string(i))) << s;
	EXPECT_NE(std::string::npos, s.find("not yet attached")) << s;
}

struct RunLog {
	std::mutex lock;
	std::vector<unsigned> ids;
	std::vector<long> tids;
	std::vector<int> on_cpu;       // sched_getcpu() inside fn
	std::vector<int> single_pu;    // the affinity mask is exactly one PU
	std::atomic<int> bad_self{0};
};

void record_run(sd_cpu *c, void *p)
{
	auto *log = static_cast<RunLog *>(p);
	if (sd_cpu_self() != c || sd_cpu_id(c) >= sd_machine_nr_cpus(sd_cpu_machine(c)))
		log->bad_self.fetch_add(1);
	cpu_set_t set;
	CPU_ZERO(&set);
	sched_getaffinity(0, sizeof(set), &set);
	int one = CPU_COUNT(&set) == 1 ? 1 : 0;
	std::lock_guard<std::mutex> g(log->lock);
	log->ids.push_back(sd_cpu_id(c));
	log->tids.push_back((long)syscall(SYS_gettid));
	log->on_cpu.push_back(sched_getcpu());
	log->single_pu.push_back(one);
}

TEST(Machine, RunOncePerCpuPinned)
{
	if (!real_topology())
		GTEST_SKIP() << "SD_TOPOLOGY set in the environment";
	Machine mach(cfg_cpus(SD_NR_CPUS_ALL_PUS));
	ASSERT_NE(nullptr, mach.m);
	const unsigned n = sd_machine_nr_cpus(mach.m);
	RunLog log;
	ASSERT_EQ(0, sd_machine_run(mach.m, record_run, &log)) << sd_last_error();
	EXPECT_EQ(0, log.bad_self.load());
	ASSERT_EQ(n, log.ids.size());
	EXPECT_EQ(n, std::set<unsigned>(log.ids.begin(), log.ids.end()).size()) << "ids not distinct";
	EXPECT_EQ(n, std::set<long>(log.tids.begin(), log.tids.end()).size()) << "threads shared";
	for (size_t k = 0; k < log.ids.size(); k++) {
		sd_cpu_info ci;
		ASSERT_EQ(0, sd_machine_cpu_info(mach.m, log.ids[k], &ci));
		// Root on a real machine: binding works.
		EXPECT_EQ(1, ci.pinned) << "cpu " << log.ids[k];
		EXPECT_EQ(0, ci.attached) << "still attached after sd_machine_run returned";
		EXPECT_EQ(1, log.single_pu[k]) << "cpu " << log.ids[k] << " not bound to one PU";
		EXPECT_EQ(ci.pu_os_index, log.on_cpu[k]) << "cpu " << log.ids[k];
	}
	struct sd_machine_info info = info_of(mach.m);
	EXPECT_EQ(1, info.all_pinned);
	EXPECT_STREQ("", info.pin_note);
	// A second run works too (every CPU was detached).
	RunLog again;
	ASSERT_EQ(0, sd_machine_run(mach.m, record_run, &again));
	EXPECT_EQ(n, again.ids.size());
}

TEST(Machine, RunOversubscribed)
{
	Machine mach(cfg_cpus(16));
	ASSERT_NE(nullptr, mach.m);
	RunLog log;
	ASSERT_EQ(0, sd_machine_run(mach.m, record_run, &log));
	EXPECT_EQ(0, log.bad_self.load());
	ASSERT_EQ(16u, log.ids.size());
	EXPECT_EQ(16u, std::set<unsigned>(log.ids.begin(), log.ids.end()).size());
	EXPECT_EQ(16u, std::set<long>(log.tids.begin(), log.tids.end()).size());
}

TEST(Machine, RunUnpinnedUnderSyntheticTopology)
{
	EnvGuard env("SD_TOPOLOGY", "pack:2 core:8 pu:2");
	Machine mach(cfg_cpus(4));
	ASSERT_NE(nullptr, mach.m);
	if (!sdtest::fresh_cpus_clean(mach.m))
		return;
	RunLog log;
	ASSERT_EQ(0, sd_machine_run(mach.m, record_run, &log)) << sd_last_error();
	ASSERT_EQ(4u, log.ids.size());
	EXPECT_EQ(4u, std::set<unsigned>(log.ids.begin(), log.ids.end()).size());
	for (unsigned i = 0; i < 4; i++) {
		sd_cpu_info ci;
		ASSERT_EQ(0, sd_machine_cpu_info(mach.m, i, &ci));
		EXPECT_EQ(0, ci.pinned) << "cpu " << i;
	}
	struct sd_machine_info info = info_of(mach.m);
	EXPECT_EQ(0, info.all_pinned);
	EXPECT_NE(std::string::npos, std::string(info.pin_note).find("synthetic")) << info.pin_note;
	std::string s = print_info(mach.m);
	EXPECT_NE(std::string::npos, s.find("unpinned")) << s;
}

TEST(Machine, RunRefusesWhenACpuIsAttached)
{
	Machine mach(cfg_cpus(2));
	ASSERT_NE(nullptr, mach.m);
	std::atomic<int> ran{0};
	auto body = [](sd_cpu *, void *p) { static_cast<std::atomic<int> *>(p)->fetch_add(1); };
	{
		// The caller is itself a CPU.
		Attached a(mach.m, 0);
		ASSERT_NE(nullptr, a.c);
		EXPECT_EQ(-EBUSY, sd_machine_run(mach.m, body, &ran));
	}
	{
		// Another thread holds CPU 1.
		std::atomic<bool> up{false}, stop{false};
		std::thread t([&] {
			Attached b(mach.m, 1);
			up = true;
			while (!stop)
				std::this_thread::yield();
		});
		while (!up)
			std::this_thread::yield();
		EXPECT_EQ(-EBUSY, sd_machine_run(mach.m, body, &ran));
		stop = true;
		t.join();
	}
	EXPECT_EQ(0, ran.load());
	EXPECT_EQ(0, sd_machine_run(mach.m, body, &ran));
	EXPECT_EQ(2, ran.load());
}

TEST(Machine, AttachFromTestThreadThenDetachRestores)
{
	if (!real_topology())
		GTEST_SKIP() << "SD_TOPOLOGY set in the environment";
	Machine mach(cfg_cpus(SD_NR_CPUS_ALL_PUS));
	ASSERT_NE(nullptr, mach.m);
	const unsigned n = sd_machine_nr_cpus(mach.m);
	const unsigned id = n - 1;
	sd_cpu_info ci;
	ASSERT_EQ(0, sd_machine_cpu_info(mach.m, id, &ci));
	std::set<int> before = thread_affinity();
	ASSERT_EQ(nullptr, sd_cpu_self());

	sd_cpu *c = nullptr;
	ASSERT_EQ(0, sd_cpu_attach(mach.m, id, &c)) << sd_last_error();
	EXPECT_EQ(c, sd_cpu_self());
	EXPECT_EQ(id, sd_cpu_id(c));
	EXPECT_EQ(mach.m, sd_cpu_machine(c));
	EXPECT_EQ(nullptr, sd_cpu_current_mm(c)) << "a CPU starts with no address space";
	EXPECT_EQ(0, sd_irqs_disabled(c)) << "a CPU starts with interrupts on";
	std::set<int> during = thread_affinity();
	EXPECT_EQ(std::set<int>{ci.pu_os_index}, during) << "not bound to its PU";
	EXPECT_EQ(ci.pu_os_index, sched_getcpu());
	ASSERT_EQ(0, sd_machine_cpu_info(mach.m, id, &ci));
	EXPECT_EQ(1, ci.attached);
	EXPECT_EQ(1, ci.pinned);

	ASSERT_EQ(0, sd_cpu_detach(c));
	EXPECT_EQ(nullptr, sd_cpu_self());
	EXPECT_EQ(before, thread_affinity()) << "detach did not restore the thread's binding";
	ASSERT_EQ(0, sd_machine_cpu_info(mach.m, id, &ci));
	EXPECT_EQ(0, ci.attached);
	// It can attach again, as another CPU.
	ASSERT_EQ(0, sd_cpu_attach(mach.m, 0, &c));
	EXPECT_EQ(0u, sd_cpu_id(c));
	ASSERT_EQ(0, sd_cpu_detach(c));
	EXPECT_EQ(before, thread_affinity());
}

TEST(Machine, BytesPerCpuAtDefaultGeometry)
{
	Machine mach(cfg_cpus(2));
	ASSERT_NE(nullptr, mach.m);
	struct sd_machine_info info = info_of(mach.m);
	EXPECT_LE(info.bytes_per_cpu, (size_t)96 * 1024);
	// The TLB is included: at least 64 + 2048 entries of a 64-bit tag and
	// a 64-bit payload.
	EXPECT_GE(info.bytes_per_cpu, (size_t)(64 + 256 * 8) * 16);
	EXPECT_EQ(0u, info.bytes_per_cpu % 64) << "per-CPU areas are cache-line multiples";

	// A bigger TLB costs more.
	sd_machine_config c = cfg_cpus(2);
	c.tlb_sets = 1024;
	Machine big(c);
	ASSERT_NE(nullptr, big.m);
	struct sd_machine_info bi = info_of(big.m);
	EXPECT_EQ(1024u, bi.tlb_sets);
	EXPECT_GE(bi.bytes_per_cpu, info.bytes_per_cpu + (size_t)768 * 8 * 16);
}

TEST(Machine, InfoArgumentChecks)
{
	Machine mach(cfg_cpus(2));
	ASSERT_NE(nullptr, mach.m);
	EXPECT_EQ(-EINVAL, sd_machine_info(mach.m, nullptr));
	EXPECT_EQ(-EINVAL, sd_machine_info(nullptr, nullptr));
	EXPECT_EQ(-EINVAL, sd_machine_cpu_info(mach.m, 0, nullptr));
}

TEST(Machine, FreshCpuStateIsZeroOnADirtyHeap)
{
	// Under SD_TOPOLOGY the per-CPU areas cannot be bound to a node and
	// come from the heap: they must still start zeroed (counters, frame
	// cache, interrupt state), whatever the heap held before.
	EnvGuard env("SD_TOPOLOGY", "pack:1 core:4 pu:1");
	size_t area = 0;
	{
		Machine probe(cfg_cpus(1));
		ASSERT_NE(nullptr, probe.m);
		area = info_of(probe.m).bytes_per_cpu;
	}
	ASSERT_GT(area, 0u);
	std::vector<void *> junk;
	for (int i = 0; i < 64; i++) {
		void *p = nullptr;
		ASSERT_EQ(0, posix_memalign(&p, 4096, area));
		std::memset(p, 0xa5, area);
		junk.push_back(p);
	}
	for (void *p : junk)
		free(p);

	sd_machine *m = nullptr;
	ASSERT_EQ(0, sd_machine_create(nullptr, &m)) << sd_last_error();
	bool clean = sdtest::fresh_cpus_clean(m);
	for (unsigned c = 0; c < sd_machine_nr_cpus(m); c++) {
		sd_stats st = SD_STATS_INIT;
		ASSERT_EQ(0, sd_stats_cpu(m, c, &st));
		for (unsigned i = 0; i < SD_STAT_HIST_BUCKETS; i++)
			EXPECT_EQ(0u, st.flush_ns_hist[i]) << "cpu " << c;
	}
	// Detaching drains the CPU's frame cache: only safe if it started empty.
	if (clean) {
		sd_cpu *c = nullptr;
		ASSERT_EQ(0, sd_cpu_attach(m, 0, &c));
		EXPECT_EQ(0, sd_irqs_disabled(c));
		EXPECT_EQ(0, sd_cpu_detach(c));
	}
	EXPECT_EQ(0, sd_machine_destroy(m));
}

} // namespace
