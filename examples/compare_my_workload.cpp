// SPDX-License-Identifier: MIT
//
// compare_my_workload: your workload under every built-in strategy, in C++.
//
// Replace my_workload() with the access pattern you care about. It runs on
// every emulated CPU (each a thread of ours, pinned to a PU); here each CPU
// alternates between its private pages and a shared region it write-protects
// now and then, so flushes reach CPUs that really cache the pages. The
// program runs it under each strategy at each CPU count and prints time per
// operation, flushes and what each flush cost, with the oracle checking.
//
//     c++ -std=c++17 compare_my_workload.cpp $(pkg-config --cflags --libs shootdown)
//     ./compare_my_workload [--cpus 1,2,4] [--ops N]
#include <shootdown/shootdown.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr uint64_t kShared = 0x30000000ull;     // pages every CPU touches
constexpr uint64_t kPrivate = 0x40000000ull;    // 16 pages per CPU from here
constexpr unsigned kSharedPages = 16;
constexpr unsigned kPrivatePages = 16;

struct Workload {
	sd_mm *mm = nullptr;
	unsigned long ops = 20000;
};

// ---- your workload: runs on every CPU ----
int my_workload(sd_cpu *cpu, const Workload &w)
{
	const unsigned id = sd_cpu_id(cpu);
	const uint64_t mine = kPrivate + uint64_t(id) * kPrivatePages * SD_PAGE_SIZE;
	int err = sd_switch_mm(cpu, w.mm);

	for (unsigned long i = 0; !err && i < w.ops; i++) {
		const uint64_t shared = kShared + (i % kSharedPages) * SD_PAGE_SIZE;
		err = sd_access(cpu, mine + (i % kPrivatePages) * SD_PAGE_SIZE, SD_WRITE, nullptr);
		if (!err)
			err = sd_access(cpu, shared, SD_READ, nullptr);
		if (!err && i % 100 == 99)      // a flush of a page all CPUs cache
			err = sd_mprotect(cpu, w.mm, shared, SD_PAGE_SIZE,
					  (i / 100) % 2 ? SD_PROT_READ | SD_PROT_WRITE : SD_PROT_READ);
	}
	int serr = sd_switch_mm(cpu, nullptr);
	return err ? err : serr;
}

// ---- the harness ----

[[noreturn]] void fail(const std::string &what, int err)
{
	throw std::runtime_error(what + ": " + sd_strerror(err) + " (" + sd_last_error() + ")");
}

struct MachineDeleter {
	void operator()(sd_machine *m) const { sd_machine_destroy(m); }
};
using MachinePtr = std::unique_ptr<sd_machine, MachineDeleter>;

struct Row {
	double ns_per_op;
	sd_stats stats = SD_STATS_INIT;
	uint64_t violations;
	bool oversubscribed;
};

Row run(const char *strategy, unsigned cpus, unsigned long ops)
{
	sd_machine_config cfg = SD_MACHINE_CONFIG_INIT;
	cfg.nr_cpus = cpus;
	cfg.strategy = strategy;
	cfg.oracle = SD_ORACLE_CHECKED;
	sd_machine *raw = nullptr;
	if (int err = sd_machine_create(&cfg, &raw))
		fail(std::string("sd_machine_create ") + strategy, err);
	MachinePtr m(raw);

	Workload w;
	w.ops = ops;
	sd_cpu *cpu = nullptr;
	if (int err = sd_cpu_attach(m.get(), 0, &cpu))
		fail("sd_cpu_attach", err);
	int err = sd_mm_create(m.get(), &w.mm);
	if (!err)
		err = sd_mmap(cpu, w.mm, kShared, kSharedPages * SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE);
	if (!err)
		err = sd_mmap(cpu, w.mm, kPrivate, uint64_t(cpus) * kPrivatePages * SD_PAGE_SIZE,
			      SD_PROT_READ | SD_PROT_WRITE);
	sd_cpu_detach(cpu);
	if (err)
		fail("setup", err);

	struct Arg {
		const Workload *w;
		int err = 0;
	} arg{ &w };
	auto t0 = std::chrono::steady_clock::now();
	err = sd_machine_run(m.get(), [](sd_cpu *c, void *p) {
		auto *a = static_cast<Arg *>(p);
		if (int e = my_workload(c, *a->w))
			__atomic_store_n(&a->err, e, __ATOMIC_RELAXED);
	}, &arg);
	auto t1 = std::chrono::steady_clock::now();
	if (err || arg.err)
		fail(std::string("run under ") + strategy, err ? err : arg.err);

	Row r{};
	r.ns_per_op = std::chrono::duration<double, std::nano>(t1 - t0).count() / double(ops);
	sd_stats_snapshot(m.get(), &r.stats);
	r.violations = sd_oracle_violations(m.get());
	struct sd_machine_info info;
	sd_machine_info(m.get(), &info);
	r.oversubscribed = info.oversubscribed;
	sd_mm_destroy(w.mm);
	return r;
}

std::vector<unsigned> parse_cpus(const char *s)
{
	std::vector<unsigned> v;
	std::stringstream in(s);
	for (std::string tok; std::getline(in, tok, ',');)
		v.push_back(unsigned(std::stoul(tok)));
	return v;
}

} // namespace

int main(int argc, char **argv)
{
	std::vector<unsigned> cpus = { 1, 2, 4 };
	unsigned long ops = 20000;
	try {
		for (int i = 1; i < argc; i++) {
			if (!std::strcmp(argv[i], "--cpus") && i + 1 < argc)
				cpus = parse_cpus(argv[++i]);
			else if (!std::strcmp(argv[i], "--ops") && i + 1 < argc)
				ops = std::stoul(argv[++i]);
			else
				throw std::invalid_argument(argv[i]);
		}
	} catch (const std::exception &) {
		std::fprintf(stderr, "usage: %s [--cpus N,N,...] [--ops N]\n", argv[0]);
		return 2;
	}
	std::printf("%-10s %6s %12s %9s %12s %11s %11s\n", "strategy", "cpus", "ns/op/cpu", "flushes",
		    "remote inv.", "ipis", "violations");
	try {
		for (const char *s : { "broadcast", "local", "ipi", "gbcast" }) {
			for (unsigned n : cpus) {
				Row r = run(s, n, ops);
				std::printf("%-10s %5u%s %12.1f %9llu %12llu %11llu %11llu\n", s, n,
					    r.oversubscribed ? "*" : " ", r.ns_per_op,
					    (unsigned long long)r.stats.counter[SD_STAT_FLUSH],
					    (unsigned long long)r.stats.counter[SD_STAT_REMOTE_INVAL],
					    (unsigned long long)r.stats.counter[SD_STAT_IPI_SENT],
					    (unsigned long long)r.violations);
			}
		}
	} catch (const std::exception &e) {
		std::fprintf(stderr, "compare_my_workload: %s\n", e.what());
		return 1;
	}
	std::printf("(* more CPUs than PUs: oversubscribed)\n");
	return 0;
}
