// SPDX-License-Identifier: MIT
// The trace (hw/trace.c): an ipi workload traced and written, then checked
// by tools/trace-check/shootdown-trace-check (it parses, slices balance, every IPI arrow has
// both ends, one track per CPU); the dropped count when the ring is tiny;
// slices left open at the write; the configuration and its errors.
#include "common.hpp"

#include <atomic>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

extern "C" {
#include "core/ordering.h"
#include "hw/event.h"
#include "hw/trace.h"
}

namespace {

using sdtest::Attached;
using sdtest::Machine;

constexpr uint64_t P = SD_PAGE_SIZE;
constexpr unsigned RW = SD_PROT_READ | SD_PROT_WRITE;

std::string tmp_path(const std::string &name)
{
	const char *dir = std::getenv("TMPDIR");
	return std::string(dir && *dir ? dir : "/tmp") + "/sd_trace_" + std::to_string(getpid()) +
	       "_" + name + ".json";
}

bool exists(const std::string &p)
{
	struct stat st;
	return stat(p.c_str(), &st) == 0;
}

// Run shootdown-trace-check (its path and python3 come from meson); its output goes
// to the test log. Returns its exit status.
int check_trace(const std::string &file, const std::string &args)
{
	const char *py = std::getenv("SD_PYTHON");
	const char *script = std::getenv("SD_CHECK_TRACE");
	if (!py || !script) {
		ADD_FAILURE() << "SD_PYTHON / SD_CHECK_TRACE not set: run through meson test";
		return -1;
	}
	std::string cmd = std::string(py) + " " + script + " " + file + " " + args;
	int st = std::system(cmd.c_str());
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string slurp(const std::string &p)
{
	std::ifstream in(p);
	std::stringstream ss;
	ss << in.rdbuf();
	return ss.str();
}

// CPU @cpu's records and drops as the file's metadata gives them.
void file_counts(const std::string &text, unsigned cpu, uint64_t *records, uint64_t *dropped)
{
	std::string key = "{\"cpu\":" + std::to_string(cpu) + ",\"records\":";
	size_t at = text.find(key);
	ASSERT_NE(std::string::npos, at) << key;
	unsigned long long r = 0, d = 0;
	ASSERT_EQ(2, std::sscanf(text.c_str() + at + key.size(), "%llu,\"dropped\":%llu", &r, &d));
	*records = r;
	*dropped = d;
}

sd_machine_config traced(unsigned cpus, const char *strategy, const std::string &path,
			 unsigned per_cpu = 0)
{
	sd_machine_config c = sdtest::config(cpus, strategy);
	c.trace_path = path.c_str();
	c.trace_events_per_cpu = per_cpu;
	return c;
}

// Every CPU maps, touches and unmaps its own pages of one shared mm, so
// each munmap shoots the others down with IPIs.
struct Shared {
	sd_mm *mm = nullptr;
	int rounds = 0;
};

void ipi_body(sd_cpu *c, void *arg)
{
	auto *s = static_cast<Shared *>(arg);
	uint64_t base = 0x10000000 + (uint64_t)sd_cpu_id(c) * 0x100000;

	ASSERT_EQ(0, sd_switch_mm(c, s->mm)) << sd_last_error();
	for (int i = 0; i < s->rounds; i++) {
		ASSERT_EQ(0, sd_mmap(c, s->mm, base, 4 * P, RW)) << sd_last_error();
		for (uint64_t p = 0; p < 4; p++)
			ASSERT_EQ(0, sd_access(c, base + p * P, SD_WRITE, nullptr));
		ASSERT_EQ(0, sd_munmap(c, s->mm, base, 4 * P)) << sd_last_error();
	}
}

void run_ipi(sd_machine *m, int rounds)
{
	Shared s;
	s.rounds = rounds;
	ASSERT_EQ(0, sd_mm_create(m, &s.mm));
	sdtest::Watchdog wd("the traced ipi workload (sd_machine_run)", 60);
	ASSERT_EQ(0, sd_machine_run(m, ipi_body, &s)) << sd_last_error();
	ASSERT_EQ(0, sd_mm_destroy(s.mm)) << sd_last_error();
}

TEST(Trace, IpiWorkloadWritesACheckedTimeline)
{
	std::string at_exit = tmp_path("exit"), now = tmp_path("now");
	unlink(at_exit.c_str());
	{
		Machine mc(traced(3, "ipi", at_exit));
		ASSERT_NE(nullptr, mc.m);
		run_ipi(mc.m, 20);
		ASSERT_EQ(0, sd_machine_trace_write(mc.m, now.c_str())) << sd_last_error();
		EXPECT_EQ(0, check_trace(now, "--cpus 3 --flows --dropped 0"));
		sd_stats st = SD_STATS_INIT;
		ASSERT_EQ(0, sd_stats_snapshot(mc.m, &st));
		EXPECT_GT(st.counter[SD_STAT_IPI_SENT], 0u) << "the workload sent no IPIs";
		EXPECT_EQ(0u, st.counter[SD_STAT_TRACE_DROPPED]);
		EXPECT_FALSE(exists(at_exit)) << "written before destroy";
	}
	// sd_machine_destroy() wrote the same run to the configured path.
	ASSERT_TRUE(exists(at_exit));
	EXPECT_EQ(0, check_trace(at_exit, "--cpus 3 --flows --dropped 0"));
	unlink(at_exit.c_str());
	unlink(now.c_str());
}

// A record interrupted between its claim and its fill by another record on
// the same thread (the CPU's own IPI handler, as a signal): forced at the
// order point, both records must be there, in claim order, and published.
std::atomic<sd_cpu *> nest_cpu{ nullptr };
std::atomic<bool> nest_fired{ false };

void nest_hook(enum sd_order_point point, unsigned cpu)
{
	sd_cpu *c = nest_cpu.load();
	if (point != SD_ORDER_TRACE_CLAIMED || !c || cpu != sd_cpu_id(c) || nest_fired.exchange(true))
		return;
	sd_event(c, SD_EV_IPI_DEFERRED, 77, 0);   /* what the handler would record */
}

TEST(Trace, RecordInterruptedByItsOwnHandler)
{
	std::string path = tmp_path("nest");
	Machine mc(traced(1, "broadcast", path));
	Attached a(mc.m, 0);
	sd_trace_ring *r = a.c->trace;
	ASSERT_NE(nullptr, r);
	uint64_t before = r->published.load();
	nest_cpu = a.c;
	nest_fired = false;
	sd_order_set_hook(nest_hook);
	sd_event(a.c, SD_EV_PAGE_FAULT, 55, 0);
	sd_order_set_hook(nullptr);
	nest_cpu = nullptr;
	ASSERT_TRUE(nest_fired.load());
	ASSERT_EQ(before + 2, r->published.load()) << "a record was lost or not published";
	EXPECT_EQ((uint32_t)SD_EV_PAGE_FAULT, r->rec[before].ev);
	EXPECT_EQ(55u, r->rec[before].arg);
	EXPECT_EQ((uint32_t)SD_EV_IPI_DEFERRED, r->rec[before + 1].ev) << "the nested record was overwritten";
	EXPECT_EQ(77u, r->rec[before + 1].arg);
}

// The file may be written while the CPUs record (a written slot never
// changes; the count is published with release): each snapshot checks out.
TEST(Trace, WriteWhileCpusRun)
{
	std::string path = tmp_path("live");
	Machine mc(traced(2, "ipi", path));
	Shared s;
	s.rounds = 300;
	ASSERT_EQ(0, sd_mm_create(mc.m, &s.mm));
	std::atomic<bool> done{ false };
	std::thread runner([&] {
		EXPECT_EQ(0, sd_machine_run(mc.m, ipi_body, &s)) << sd_last_error();
		done = true;
	});
	sdtest::Watchdog wd("the ipi workload while its trace is written", 60);
	int writes = 0;
	while (!done && writes < 20) {
		ASSERT_EQ(0, sd_machine_trace_write(mc.m, path.c_str())) << sd_last_error();
		EXPECT_EQ(0, check_trace(path, "--cpus 2")) << "snapshot " << writes;
		writes++;
	}
	runner.join();
	EXPECT_EQ(0, sd_mm_destroy(s.mm));
	unlink(path.c_str());
}

// One CPU, no IPIs: the same records every run, so a tiny ring must keep
// exactly its size and count the rest, in the file and in the counter.
void one_cpu_body(sd_cpu *c, void *arg)
{
	auto *s = static_cast<Shared *>(arg);
	ASSERT_EQ(0, sd_switch_mm(c, s->mm));
	for (int i = 0; i < s->rounds; i++) {
		ASSERT_EQ(0, sd_mmap(c, s->mm, 0x10000000, 2 * P, RW));
		ASSERT_EQ(0, sd_access(c, 0x10000000, SD_WRITE, nullptr));
		ASSERT_EQ(0, sd_access(c, 0x10000000 + P, SD_READ, nullptr));
		ASSERT_EQ(0, sd_munmap(c, s->mm, 0x10000000, 2 * P));
	}
	ASSERT_EQ(0, sd_switch_mm(c, nullptr));
}

uint64_t one_cpu_run(unsigned per_cpu, uint64_t *dropped, uint64_t *stat_dropped)
{
	std::string path = tmp_path("ring" + std::to_string(per_cpu));
	uint64_t records = 0;
	Machine mc(traced(1, "ipi", path, per_cpu));
	Shared s;
	s.rounds = 10;
	EXPECT_EQ(0, sd_mm_create(mc.m, &s.mm));
	EXPECT_EQ(0, sd_machine_run(mc.m, one_cpu_body, &s)) << sd_last_error();
	EXPECT_EQ(0, sd_mm_destroy(s.mm));
	EXPECT_EQ(0, sd_machine_trace_write(mc.m, path.c_str())) << sd_last_error();
	std::string text = slurp(path);
	file_counts(text, 0, &records, dropped);
	sd_stats st = SD_STATS_INIT;
	EXPECT_EQ(0, sd_stats_cpu(mc.m, 0, &st));
	*stat_dropped = st.counter[SD_STAT_TRACE_DROPPED];
	EXPECT_EQ(0, check_trace(path, "--cpus 1 --dropped " + std::to_string(*dropped)));
	unlink(path.c_str());
	return records;
}

TEST(Trace, TinyRingKeepsTheFirstAndCountsTheRest)
{
	uint64_t dropped, stat_dropped;
	uint64_t all = one_cpu_run(0, &dropped, &stat_dropped);
	ASSERT_EQ(0u, dropped);
	ASSERT_GT(all, 40u) << "the workload traced too little to test drops";
	uint64_t kept = one_cpu_run(16, &dropped, &stat_dropped);
	EXPECT_EQ(16u, kept);
	EXPECT_EQ(all - 16, dropped) << "every record past the ring is counted, exactly";
	EXPECT_EQ(dropped, stat_dropped) << "the counter and the file agree";
}

// A slice still open when the file is written (here the trap whose hook
// writes it) is closed at the write's time and marked.
int write_from_hook(sd_cpu *c, uint32_t, void *arg)
{
	auto *path = static_cast<std::string *>(arg);
	return sd_machine_trace_write(sd_cpu_machine(c), path->c_str());
}

TEST(Trace, OpenSliceIsClosedAndMarked)
{
	std::string path = tmp_path("open");
	Machine mc(traced(1, "broadcast", path));
	sd_trap_hook *h = nullptr;
	ASSERT_EQ(0, sd_trap_register(mc.m, 0xffff0000u, 0xf7f00000u, write_from_hook, &path, &h));
	{
		Attached a(mc.m, 0);
		ASSERT_EQ(0, sd_trap(a.c, 0xf7f00001u)) << sd_last_error();
	}
	EXPECT_EQ(0, check_trace(path, "--cpus 1 --unfinished"));
	EXPECT_EQ(0, sd_trap_unregister(mc.m, h));
	unlink(path.c_str());
}

void write_in_ipi(sd_cpu *c, void *arg)
{
	*static_cast<int *>(arg) = sd_machine_trace_write(sd_cpu_machine(c), "/tmp/never.json");
}

// A trace path that cannot be written is refused by sd_machine_create(),
// not found out after the run; and what is at the path is replaced only if
// it is a regular file: never a FIFO (not opened either: no hang), a
// device (as root, SD_TRACE=/dev/null once replaced the system's), a
// directory or a symbolic link's target.
TEST(Trace, PathRefusedAtCreate)
{
	std::string dir = tmp_path("paths");
	ASSERT_EQ(0, mkdir(dir.c_str(), 0700));
	struct Case {
		std::string path;
		int err;
		const char *says;
	};
	std::vector<Case> cases = {
		{dir + "/no-such-dir/t.json", -ENOENT, "cannot create"},
		{dir, -EISDIR, "directory"},
	};
	std::string fifo = dir + "/fifo";
	ASSERT_EQ(0, mkfifo(fifo.c_str(), 0600));
	cases.push_back({fifo, -EINVAL, "a FIFO"});
	std::string target = dir + "/target.json", link = dir + "/link.json";
	{
		std::ofstream(target) << "keep me";
	}
	ASSERT_EQ(0, symlink(target.c_str(), link.c_str()));
	cases.push_back({link, -EINVAL, "a symbolic link"});
	std::string dev = dir + "/full";
	const bool root = geteuid() == 0 && mknod(dev.c_str(), S_IFCHR | 0600, makedev(1, 7)) == 0;
	if (root)
		cases.push_back({dev, -EINVAL, "a character device"});
	unsetenv("SD_TRACE");
	for (const Case &c : cases) {
		sd_machine *m = nullptr;
		sd_machine_config cfg = traced(1, "broadcast", c.path);
		EXPECT_EQ(c.err, sd_machine_create(&cfg, &m)) << c.path;
		EXPECT_EQ(nullptr, m);
		EXPECT_NE(nullptr, std::strstr(sd_last_error(), c.says)) << sd_last_error();
		// The same through the environment.
		setenv("SD_TRACE", c.path.c_str(), 1);
		sd_machine_config env = sdtest::config(1);
		EXPECT_EQ(c.err, sd_machine_create(&env, &m)) << "SD_TRACE=" << c.path;
		unsetenv("SD_TRACE");
	}
	struct stat st;
	ASSERT_EQ(0, lstat(fifo.c_str(), &st));
	EXPECT_TRUE(S_ISFIFO(st.st_mode));
	std::ifstream in(target);
	std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
	EXPECT_EQ("keep me", kept);
	if (root) {
		ASSERT_EQ(0, lstat(dev.c_str(), &st));
		EXPECT_TRUE(S_ISCHR(st.st_mode));
		unlink(dev.c_str());
	}
	unlink(link.c_str());
	unlink(target.c_str());
	unlink(fifo.c_str());
	EXPECT_EQ(0, rmdir(dir.c_str())) << "nothing else left in " << dir;
}

// A write that still fails at the end (the path turned into a directory
// during the run): sd_machine_destroy() returns the error, and the trace
// is kept under the temporary name that sd_last_error() gives.
TEST(Trace, DestroyReportsAFailedWriteAndKeepsTheTrace)
{
	std::string path = tmp_path("late");
	unsetenv("SD_TRACE");
	sd_machine *m = nullptr;
	sd_machine_config cfg = traced(1, "broadcast", path);
	ASSERT_EQ(0, sd_machine_create(&cfg, &m)) << sd_last_error();
	ASSERT_EQ(0, mkdir(path.c_str(), 0700));
	EXPECT_EQ(-EISDIR, sd_machine_destroy(m));
	std::string tmp = path + "." + std::to_string(getpid()) + ".tmp";
	EXPECT_NE(nullptr, std::strstr(sd_last_error(), tmp.c_str())) << sd_last_error();
	EXPECT_TRUE(exists(tmp));
	EXPECT_EQ(0, check_trace(tmp, "--cpus 1"));
	unlink(tmp.c_str());
	rmdir(path.c_str());
}

TEST(Trace, Errors)
{
	std::string path = tmp_path("errors");
	EXPECT_EQ(-EINVAL, sd_machine_trace_write(nullptr, path.c_str()));
	{
		Machine off(sdtest::config(1));
		unsetenv("SD_TRACE");
		EXPECT_EQ(-ENODATA, sd_machine_trace_write(off.m, path.c_str()));
		EXPECT_NE(nullptr, std::strstr(sd_last_error(), "not tracing"));
	}
	sd_machine *m = nullptr;
	const std::string empty;        /* outlives the config that points at it */
	sd_machine_config bad = traced(1, "broadcast", empty);
	EXPECT_EQ(-EINVAL, sd_machine_create(&bad, &m));
	bad = traced(1, "broadcast", path, 1u << 30);
	EXPECT_EQ(-EINVAL, sd_machine_create(&bad, &m));
	EXPECT_NE(nullptr, std::strstr(sd_last_error(), "trace_events_per_cpu"));

	Machine mc(traced(2, "broadcast", path));
	EXPECT_EQ(-EINVAL, sd_machine_trace_write(mc.m, nullptr));
	EXPECT_EQ(-EINVAL, sd_machine_trace_write(mc.m, ""));
	// A directory that does not exist: the open's errno, and nothing left.
	EXPECT_EQ(-ENOENT, sd_machine_trace_write(mc.m, "/nonexistent-sd-dir/t.json"));
	EXPECT_NE(nullptr, std::strstr(sd_last_error(), "/nonexistent-sd-dir/t.json"));
	// A link planted at the temporary name is not followed (the file is
	// created new): -EEXIST, nothing written through it, nothing at the
	// path. (It once was, which is how a full disk was tested: /dev/full.)
	if (exists("/dev/full")) {
		std::string dir = tmp_path("full_dir");
		ASSERT_EQ(0, mkdir(dir.c_str(), 0700));
		std::string target = dir + "/t.json";
		std::string tmp = target + "." + std::to_string(getpid()) + ".tmp";
		ASSERT_EQ(0, symlink("/dev/full", tmp.c_str()));
		int err = sd_machine_trace_write(mc.m, target.c_str());
		EXPECT_EQ(-EEXIST, err) << sd_last_error();
		EXPECT_FALSE(exists(target));
		unlink(tmp.c_str());
		rmdir(dir.c_str());
	}
	// From an IPI handler (interrupts off): refused, not a file written there.
	{
		Attached a0(mc.m, 0);
		int got = 1;
		std::thread t([&] {
			Attached a1(mc.m, 1);
			EXPECT_EQ(0, sd_smp_call_single(a1.c, 0, write_in_ipi, &got));
		});
		sdtest::Watchdog wd("CPU 0 answering CPU 1's IPI", 30);
		while (__atomic_load_n(&got, __ATOMIC_ACQUIRE) == 1)
			sd_cpu_quiescent(a0.c);         /* IPIs run when interrupts are on */
		t.join();
		EXPECT_EQ(-EDEADLK, got);
	}
}

// SD_TRACE traces a program that sets no path; a configured path wins.
TEST(Trace, EnvironmentAndPrecedence)
{
	std::string env = tmp_path("env"), cfg = tmp_path("cfg");
	unlink(env.c_str());
	unlink(cfg.c_str());
	setenv("SD_TRACE", env.c_str(), 1);
	{
		Machine mc(sdtest::config(1));
		ASSERT_NE(nullptr, mc.m);
	}
	EXPECT_TRUE(exists(env)) << "SD_TRACE was not honoured";
	unlink(env.c_str());
	{
		Machine mc(traced(1, "broadcast", cfg));
	}
	EXPECT_TRUE(exists(cfg));
	EXPECT_FALSE(exists(env)) << "SD_TRACE won over trace_path";
	unsetenv("SD_TRACE");
	unlink(cfg.c_str());
}

}  // namespace
