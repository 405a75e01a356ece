// SPDX-License-Identifier: MIT
//
// A runtime's handshakes (handshake.h, issue 27): every CPU runs one mm;
// CPU 0 asks for one handshake an iteration, the others are mutators that
// do some work (1 us of modelled compute on average, IPIs taken at its
// end) and then poll (sd_handshake_poll()), until CPU 0 is
// done. No runtime's source gives the work between two safepoint polls; it
// is this comparison's setting, the same for every row, and a poll-word
// handshake's time is dominated by it (the slowest target's next poll).
//
//   handshake/{membarrier,signal,poll,mprotect}/<strategy>/cpus:N
//
// Counters:
//   handshake_ns   the requester's time from the request to the last
//                  acknowledgement (modelled ns under a profile)
//   reached        the share of targets the check found reached (1: all)
//   refusals       signals refused a handshake (signal only)
//   model_ns       modelled ns per handshake (run_batches())
#include "common.hpp"

#include <shootdown/handshake.h>

namespace sdbench {
namespace {

constexpr uint64_t kWorkNs = 1000;      // a mutator's work between two polls
constexpr uint64_t kBatch = 20;         // handshakes a run

// The kinds compared, by enum sd_handshake_kind. membarrier_rseq is left
// out: its IPIs and system call cost what membarrier's do, and what it adds
// (the aborted sections' work done again) is the program's.
const char *const kKinds[] = { "membarrier", "signal", "poll", "mprotect" };
constexpr unsigned kNrKinds = sizeof(kKinds) / sizeof(kKinds[0]);

struct HandshakeArg : RunArg {
	sd_handshake *h = nullptr;
	unsigned nr_cpus = 0;
	std::atomic<uint64_t> arrived{0};       // mutators at their start, all runs
	std::atomic<uint64_t> epoch{0};         // runs the requester finished
	uint64_t runs = 0;                      // the requester's own count
	uint64_t ns = 0, targets = 0, reached = 0, refusals = 0;
};

void nothing(sd_cpu *, void *) {}

void requester(sd_cpu *c, HandshakeArg *r)
{
	sd_handshake_result res;
	int err = 0;

	r->runs++;
	while (r->arrived.load() < r->runs * (r->nr_cpus - 1))
		sd_cpu_poll(c);
	/* One untimed handshake first: the first maps mprotect's helper page
	 * and fetches every poll word's line for the first time, which no
	 * later one does (a run's length would otherwise move its mean). */
	if (r->runs == 1)
		err = sd_handshake_run(r->h, c, nothing, nullptr, &res);
	for (uint64_t i = 0; !err && i < r->count; i++) {
		err = sd_handshake_run(r->h, c, nothing, nullptr, &res);
		r->ns += res.ns;
		r->targets += res.targets;
		r->reached += res.targets - res.unreached;
		r->refusals += res.refusals;
	}
	note_error(r, err);
	r->epoch.fetch_add(1);
	sd_cpu_poll_wake(c);
}

// A mutator's work between two polls: kWorkNs on average, uniform over
// [kWorkNs / 2, 3 kWorkNs / 2) from a generator seeded by the CPU's id, so
// that the polls do not beat in phase with the requests (with a fixed
// unit, a poll handshake's mean moved 20% between 20 and 100 of them) and
// a strict run stays the same run after run.
uint64_t next_work(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return kWorkNs / 2 + *x % kWorkNs;
}

void mutator(sd_cpu *c, HandshakeArg *r)
{
	const uint64_t epoch = r->epoch.load();
	uint64_t rng = 0x9e3779b97f4a7c15ull * (sd_cpu_id(c) + 1) + epoch;
	int err = 0;

	r->arrived.fetch_add(1);
	sd_cpu_poll_wake(c);
	while (!err && r->epoch.load() == epoch) {
		err = sd_cpu_work(c, next_work(&rng));
		/* IPIs arrive at the work's end (a sync point of strict mode).
		 * No sd_cpu_poll(): it is a wait, which would park a mutator
		 * until something woke it, and move its clock to that moment. */
		if (!err)
			err = sd_handshake_poll(r->h, c) < 0 ? -EINVAL : 0;
	}
	note_error(r, err);
}

void handshake_body(sd_cpu *c, void *p)
{
	auto *r = static_cast<HandshakeArg *>(p);
	int err = sd_switch_mm(c, r->rm->mm(0));

	if (!err && sd_cpu_id(c) == 0)
		requester(c, r);
	else if (!err)
		mutator(c, r);
	note_error(r, err);
	sd_switch_mm(c, nullptr);
}

void BM_handshake(State &st, unsigned kind, const char *strategy, unsigned cpus)
{
	RunMachine rm(cpus, SD_ORACLE_OFF, 1, 1, spec_of(strategy));
	HandshakeArg arg;
	sd_handshake_config hc = SD_HANDSHAKE_CONFIG_INIT;
	sd_stats d = SD_STATS_INIT;

	if (!rm.ok(st))
		return;
	hc.kind = kind;
	if (int err = sd_handshake_create(rm.mm(0), &hc, &arg.h)) {
		st.SkipWithError((std::string("sd_handshake_create: ") + sd_strerror(err)).c_str());
		return;
	}
	arg.nr_cpus = cpus;
	if (run_batches(st, rm, handshake_body, kBatch, "handshake run", &d, &arg)) {
		const double n = (double)(arg.targets ? arg.targets : 1);
		const double runs = (double)st.iterations();

		st.counters["handshake_ns"] = runs ? (double)arg.ns / runs : 0;
		st.counters["reached"] = arg.targets ? (double)arg.reached / n : 1;
		st.counters["refusals"] = runs ? (double)arg.refusals / runs : 0;
		st.counters["targets"] = runs ? (double)arg.targets / runs : 0;
		report_machine(st, rm.m());
	}
	sd_handshake_destroy(arg.h);
}

void register_handshake(Set set)
{
	// x86's strategies and arm64's: the mprotect trick's verdict is the
	// strategy's; the other kinds send their own IPIs under any.
	static const char *const strategies[] = { "ipi", "gbcast", "broadcast" };
	static const std::vector<unsigned> all_cpus = { 2, 8, 32, 64 };

	// Neither in the comparison run nor among the patches: no patch
	// measured handshakes. scripts/handshakes runs it on each profile.
	if (set != Set::all)
		return;
	static_assert(kNrKinds == SD_HANDSHAKE_MPROTECT + 1, "kKinds follows the enum");
	for (unsigned k = 0; k < kNrKinds; k++)
		for (const char *s : strategies)
			for (unsigned n : all_cpus)
				reg("handshake/" + std::string(kKinds[k]) + "/" + s + "/cpus:" +
					    std::to_string(n),
				    [k, s, n](State &st) { BM_handshake(st, k, s, n); });
}

} // namespace

SD_BENCH_FAMILY(handshake, 130, register_handshake);

} // namespace sdbench
