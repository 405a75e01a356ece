// SPDX-License-Identifier: MIT
// Handshakes among the threads of an mm (handshake.h, lib/runtime/): each
// kind reaches every CPU running the mm and no other, its function runs on
// the target (or for it, in a safe state), the mprotect trick reaches the
// running CPUs under `ipi` and nobody under the IPI-free strategies, and
// the check catches each kind's planted bug. More CPUs than PUs throughout.
#include "common.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "hw/profile.hpp"

extern "C" {
#include "core/ordering.h"
#include "runtime/handshake.h"
}

namespace {

using sdtest::Machine;

constexpr uint64_t P = SD_PAGE_SIZE;
constexpr unsigned kCpus = 6;           // 0 asks; 1-4 run the mm; 5 runs another

struct Scene {
	sd_machine *m = nullptr;
	sd_mm *mm = nullptr, *other = nullptr;
	sd_handshake *h = nullptr;
	sd_handshake_result res{};
	std::atomic<unsigned> ran_on[kCpus]{};
	std::atomic<unsigned> ran_by[kCpus]{};
	std::atomic<int> done{0}, ready{0};
	int safe_cpu = -1;              // runs the mm from a safe state
	bool targets_poll = true;       // false: they only take IPIs (a Go loop without calls)
	std::atomic<unsigned> refused_on[kCpus]{};  // set by refuse_until_polled()
	std::atomic<unsigned> signalled[kCpus]{};   // counted by refuse_first()
	int lazy_cpu = -1;              // went idle lazily on the mm
	int leave_cpu = -1;             // leaves the mm during the first request, polls never
	std::atomic<int> requesting{0}, leaver_signalled{0};
	int run_err = 0;
	unsigned rounds = 1;
	unsigned left_total = 0;
};

void count_fn(sd_cpu *target, void *arg)
{
	auto *s = static_cast<Scene *>(arg);
	s->ran_on[sd_cpu_id(target)].fetch_add(1);
	s->ran_by[sd_cpu_id(sd_cpu_self())].fetch_add(1);
}

void scene_body(sd_cpu *c, void *arg)
{
	auto *s = static_cast<Scene *>(arg);
	const unsigned id = sd_cpu_id(c);
	EXPECT_EQ(0, sd_switch_mm(c, id == kCpus - 1 ? s->other : s->mm));
	if (id == (unsigned)s->lazy_cpu) {
		EXPECT_EQ(0, sd_cpu_idle(c));
	}
	if (id == (unsigned)s->safe_cpu) {
		EXPECT_EQ(0, sd_handshake_set_safe(s->h, c, 1));
	}
	s->ready.fetch_add(1);
	EXPECT_EQ(0, sd_cpu_poll_wake(c));
	if (id == 0) {
		while (s->ready.load() < (int)kCpus)
			EXPECT_EQ(0, sd_cpu_poll(c));
		s->requesting.store(1);
		for (unsigned r = 0; r < s->rounds && !s->run_err; r++) {
			s->run_err = sd_handshake_run(s->h, c, count_fn, s, &s->res);
			s->left_total += s->res.left;
		}
		s->done.store(1);
		EXPECT_EQ(0, sd_cpu_poll_wake(c));
	} else {
		if (id == (unsigned)s->leave_cpu) {
			// Picked first, then gone: it leaves once signalled (its
			// safe point says so), or 50 ms into the first request.
			while (!s->leaver_signalled.load() && !s->requesting.load())
				EXPECT_EQ(0, sd_cpu_poll(c));
			if (!s->leaver_signalled.load())
				std::this_thread::sleep_for(std::chrono::milliseconds(50));
			EXPECT_EQ(0, sd_switch_mm(c, nullptr));
		}
		while (!s->done.load()) {
			if (id != (unsigned)s->safe_cpu && id != (unsigned)s->lazy_cpu &&
			    id != (unsigned)s->leave_cpu &&
			    (s->targets_poll || s->refused_on[id].load())) {
				EXPECT_GE(sd_handshake_poll(s->h, c), 0);
			}
			EXPECT_EQ(0, sd_cpu_poll(c));
		}
		if (id == (unsigned)s->safe_cpu) {
			EXPECT_GE(sd_handshake_set_safe(s->h, c, 0), 0);
		}
	}
	EXPECT_EQ(0, sd_switch_mm(c, nullptr));
}

// One handshake (or @rounds) on a fresh machine; the scene for the checks.
void run_scene(Scene &s, const sd_machine_config &cfg, sd_handshake_config hc)
{
	Machine mach(cfg);
	ASSERT_NE(nullptr, mach.m);
	s.m = mach.m;
	ASSERT_EQ(0, sd_mm_create(mach.m, &s.mm));
	ASSERT_EQ(0, sd_mm_create(mach.m, &s.other));
	ASSERT_EQ(0, sd_handshake_create(s.mm, &hc, &s.h)) << sd_last_error();
	sdtest::Watchdog w("handshake scene: a CPU stuck", 120);
	EXPECT_EQ(0, sd_machine_run(mach.m, scene_body, &s)) << sd_last_error();
	EXPECT_EQ(0, s.run_err) << sd_last_error();
	EXPECT_EQ(0, sd_handshake_destroy(s.h));
	EXPECT_EQ(0, sd_mm_destroy(s.mm));
	EXPECT_EQ(0, sd_mm_destroy(s.other));
}

sd_handshake_config kind(unsigned k)
{
	sd_handshake_config hc = SD_HANDSHAKE_CONFIG_INIT;
	hc.kind = k;
	return hc;
}

// Every kind that runs a function: CPUs 1-4 ran it, once each, on their
// own threads; CPU 5 (another mm) and the requester did not.
void expect_ran_on_targets(const Scene &s, unsigned rounds)
{
	EXPECT_EQ(4u, s.res.targets);
	EXPECT_EQ(4u, s.res.ran);
	EXPECT_EQ(0u, s.res.unreached);
	EXPECT_EQ(-1, s.res.first_unreached);
	EXPECT_EQ(0u, s.ran_on[0].load());
	EXPECT_EQ(0u, s.ran_on[kCpus - 1].load());
	for (unsigned t = 1; t < kCpus - 1; t++) {
		EXPECT_EQ(rounds, s.ran_on[t].load()) << "CPU " << t;
		EXPECT_EQ(rounds, s.ran_by[t].load()) << "CPU " << t << " ran it itself";
	}
}

class EveryKind : public ::testing::TestWithParam<unsigned> {};

TEST_P(EveryKind, ReachesTheCpusRunningTheMmAndNoOther)
{
	Scene s;
	s.rounds = 20;
	run_scene(s, sdtest::config(kCpus, "ipi"), kind(GetParam()));
	expect_ran_on_targets(s, s.rounds);
}

INSTANTIATE_TEST_SUITE_P(Handshake, EveryKind,
			 ::testing::Values(SD_HANDSHAKE_MEMBARRIER, SD_HANDSHAKE_SIGNAL,
					   SD_HANDSHAKE_POLL, SD_HANDSHAKE_MEMBARRIER_RSEQ));

TEST(Handshake, MembarrierSkipsALazyCpu)
{
	Scene s;
	s.lazy_cpu = 4;
	run_scene(s, sdtest::config(kCpus, "ipi"), kind(SD_HANDSHAKE_MEMBARRIER));
	EXPECT_EQ(3u, s.res.targets) << "a lazy CPU runs no thread of the mm";
	EXPECT_EQ(0u, s.ran_on[4].load());
	EXPECT_EQ(0u, s.res.unreached);
}

// HotSpot's threads in native code: the requester runs it for them.
TEST(Handshake, PollHandlesASafeTargetOnItsBehalf)
{
	Scene s;
	s.safe_cpu = 2;
	s.rounds = 5;
	run_scene(s, sdtest::config(kCpus, "ipi"), kind(SD_HANDSHAKE_POLL));
	EXPECT_EQ(4u, s.res.targets);
	EXPECT_EQ(3u, s.res.ran);
	EXPECT_EQ(1u, s.res.on_behalf);
	EXPECT_EQ(0u, s.res.unreached);
	EXPECT_EQ(s.rounds, s.ran_on[2].load());
	EXPECT_EQ(0u, s.ran_by[2].load()) << "not on its own thread";
	EXPECT_EQ(s.rounds, s.ran_by[0].load()) << "on the requester's";
}

// A runtime thread that exits (switches away from the mm) while a poll or
// signal handshake waits for it owes nothing: the handshake ends, and says
// so, instead of waiting for a poll that never comes.
class LeavingTarget : public ::testing::TestWithParam<unsigned> {};

TEST_P(LeavingTarget, OwesNothingAndIsCountedAsLeft)
{
	Scene s;
	s.leave_cpu = 2;
	s.rounds = 5;
	sd_handshake_config hc = kind(GetParam());
	if (GetParam() == SD_HANDSHAKE_SIGNAL) {
		hc.safe_point = [](sd_cpu *t, void *arg) {
			if (sd_cpu_id(t) != 2)
				return 1;
			static_cast<Scene *>(arg)->leaver_signalled.store(1);
			return 0;
		};
		hc.safe_point_arg = &s;
	}
	run_scene(s, sdtest::config(kCpus, "ipi"), hc);
	EXPECT_EQ(0u, s.res.unreached);
	EXPECT_EQ(0u, s.ran_on[2].load());
	EXPECT_EQ(1u, s.left_total) << "picked in the first handshake, gone during it";
	EXPECT_EQ(3u, s.res.targets) << "not a target once gone";
}

INSTANTIATE_TEST_SUITE_P(Handshake, LeavingTarget,
			 ::testing::Values(SD_HANDSHAKE_POLL, SD_HANDSHAKE_SIGNAL));

// Go's refusals: half the signals refused at random; every target still
// ran the function, by a later signal or at its poll.
TEST(Handshake, SignalRefusalsAreResentUntilAcknowledged)
{
	Scene s;
	s.rounds = 20;
	sd_handshake_config hc = kind(SD_HANDSHAKE_SIGNAL);
	hc.refuse_per_million = 500000;
	hc.seed = 7;
	s.targets_poll = false;         // only a later signal reaches them
	run_scene(s, sdtest::config(kCpus, "ipi"), hc);
	EXPECT_GE(s.res.resends, 1u);
	expect_ran_on_targets(s, s.rounds);
	EXPECT_GE(s.res.refusals, 1u) << "the last round's, at least";
}

// A target never at a safe point when signalled: it is reached at its
// poll, which it makes only once it refused (so the refusal is certain).
int refuse_until_polled(sd_cpu *t, void *arg)
{
	static_cast<Scene *>(arg)->refused_on[sd_cpu_id(t)].store(1);
	return 0;
}

// Refuses each target's first signal and takes the next: only a resend
// reaches it (the targets do not poll).
int refuse_first(sd_cpu *t, void *arg)
{
	return static_cast<Scene *>(arg)->signalled[sd_cpu_id(t)].fetch_add(1) > 0;
}

TEST(Handshake, SignalNeverSafeIsReachedAtThePoll)
{
	Scene s;
	sd_handshake_config hc = kind(SD_HANDSHAKE_SIGNAL);
	hc.safe_point = refuse_until_polled;
	hc.safe_point_arg = &s;
	s.targets_poll = false;
	run_scene(s, sdtest::config(kCpus, "ipi"), hc);
	expect_ran_on_targets(s, 1);
	EXPECT_GE(s.res.refusals, 4u) << "each target refused its first signal";
}

// The mprotect trick: under `ipi` the flush IPIs reach every CPU running
// the mm; under the IPI-free strategies nobody, and the check says so.
struct MprotectCase {
	const char *strategy, *name;
	unsigned reached;
};

class MprotectTrick : public ::testing::TestWithParam<MprotectCase> {};

TEST_P(MprotectTrick, ReachesWhomTheStrategyInterrupts)
{
	Scene s;
	// gbcast flushes by IPI until the mm has its global ASID (given at
	// the first flush with sample=1) and every CPU moved over to it (a
	// transition IPI at the next): the third handshake is INVLPGB's.
	s.rounds = 3;
	run_scene(s, sdtest::config(kCpus, GetParam().strategy), kind(SD_HANDSHAKE_MPROTECT));
	EXPECT_EQ(4u, s.res.targets);
	EXPECT_EQ(0u, s.res.ran) << "no function runs on the targets";
	EXPECT_EQ(GetParam().reached, s.res.barriers);
	EXPECT_EQ(4u - GetParam().reached, s.res.unreached);
	if (GetParam().reached < 4) {
		EXPECT_GE(s.res.first_unreached, 1);
	}
}

INSTANTIATE_TEST_SUITE_P(Handshake, MprotectTrick,
			 ::testing::Values(MprotectCase{"ipi", "ipi", 4},
					   MprotectCase{"broadcast", "broadcast", 0},
					   MprotectCase{"local", "local", 0},
					   MprotectCase{"gbcast:sample=1", "gbcast", 0}),
			 [](const ::testing::TestParamInfo<MprotectCase> &i) {
				 return std::string(i.param.name);
			 });

// The planted bugs: each kind made to skip its work is caught by the
// check, not by the kind itself.
struct Planted {
	unsigned kind, bug;
	const char *name;
};

class PlantedBug : public ::testing::TestWithParam<Planted> {};

TEST_P(PlantedBug, TheCheckCatchesIt)
{
	Scene s;
	sd_handshake_config hc = kind(GetParam().kind);
	if (GetParam().kind == SD_HANDSHAKE_SIGNAL) {
		hc.safe_point = refuse_first;
		hc.safe_point_arg = &s;
		s.targets_poll = false;
	}
	atomic_store(&sd_hs_test_break, GetParam().bug);
	run_scene(s, sdtest::config(kCpus, "ipi"), hc);
	atomic_store(&sd_hs_test_break, 0u);
	EXPECT_GE(s.res.unreached, 1u) << GetParam().name;
	EXPECT_GE(s.res.first_unreached, 1);
}

INSTANTIATE_TEST_SUITE_P(
	Handshake, PlantedBug,
	::testing::Values(Planted{SD_HANDSHAKE_MEMBARRIER, SD_HS_BREAK_SKIP_LAST, "skip_last"},
			  Planted{SD_HANDSHAKE_POLL, SD_HS_BREAK_NO_WAIT, "no_wait"},
			  Planted{SD_HANDSHAKE_SIGNAL, SD_HS_BREAK_REFUSAL_ACKS, "refusal_acks"}),
	[](const ::testing::TestParamInfo<Planted> &i) { return std::string(i.param.name); });

// A signal's handler and the target's own poll both reach one SIGNAL
// request: the poll finds it armed and is held (interrupts on) until the
// signal's handler has run the function; the poll then must not run it
// again. The poll finds a request armed only if it comes before the
// signal's handler: requests are made until one does (an ASan run in CI
// once had the handler first, and the test asserted a race it never saw).
std::atomic<int> g_poll_held{0};
std::atomic<unsigned> g_runs{0};

void hold_the_poll(enum sd_order_point p, unsigned cpu)
{
	int armed = 0;

	if (p != SD_ORDER_HS_POLLED || cpu != 1 || !g_poll_held.compare_exchange_strong(armed, 1))
		return;
	for (int i = 0; i < 20000 && !g_runs.load(); i++)
		std::this_thread::sleep_for(std::chrono::microseconds(100));
}

TEST(Handshake, ASignalAndAPollRunOneRequestOnce)
{
	Machine mach(sdtest::config(2, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	sd_mm *mm = nullptr;
	ASSERT_EQ(0, sd_mm_create(mach.m, &mm));
	sd_handshake_config hc = kind(SD_HANDSHAKE_SIGNAL);
	sd_handshake *h = nullptr;
	ASSERT_EQ(0, sd_handshake_create(mm, &hc, &h));
	g_poll_held = 2;        /* disarmed until a request is out */
	g_runs = 0;
	sd_order_set_hook(hold_the_poll);
	std::atomic<int> ready{0}, done{0};
	std::atomic<int> held_poll{-1};
	std::thread target([&] {
		sdtest::Attached t(mach.m, 1);
		ASSERT_EQ(0, sd_switch_mm(t.c, mm));
		ready = 1;
		while (!done.load()) {
			int rc = sd_handshake_poll(h, t.c);
			if (g_poll_held.load() == 1) {
				held_poll = rc;
				g_poll_held = 2;
			}
			EXPECT_EQ(0, sd_cpu_poll(t.c));
		}
		EXPECT_EQ(0, sd_switch_mm(t.c, nullptr));
	});
	bool exercised = false;
	{
		sdtest::Attached a(mach.m, 0);
		while (!ready.load())
			std::this_thread::yield();
		/* The race needs the poll to find the request armed before the
		 * signal's handler runs it: another request until it does. */
		for (int attempt = 0; attempt < 200 && !exercised; attempt++) {
			g_runs = 0;
			held_poll = -1;
			g_poll_held = 0;
			sd_handshake_result res{};
			EXPECT_EQ(0, sd_handshake_run(h, a.c, [](sd_cpu *, void *) { g_runs.fetch_add(1); },
						      nullptr, &res));
			EXPECT_EQ(0u, res.unreached);
			while (g_poll_held.load() == 1)
				std::this_thread::yield();
			exercised = g_poll_held.exchange(2) == 2;
			EXPECT_EQ(1u, g_runs.load()) << "the function ran twice for one request";
			if (exercised) {
				EXPECT_EQ(0, held_poll.load()) << "the held poll found it done";
			}
		}
		done = 1;
	}
	target.join();
	sd_order_set_hook(nullptr);
	EXPECT_TRUE(exercised) << "no poll ever found a request armed before its signal";
	EXPECT_EQ(0, sd_handshake_destroy(h));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

// The trace: a handshake slice on the requester and one arrow from each
// request to its target's acknowledgement, which shootdown-trace-check
// accepts.
TEST(Handshake, TheTraceDrawsAnArrowToEachAck)
{
	const std::string path = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
				 "/sd_handshake_" + std::to_string(getpid()) + ".json";
	Scene s;
	s.safe_cpu = 3;
	sd_machine_config cfg = sdtest::config(kCpus, "ipi");
	cfg.trace_path = path.c_str();
	run_scene(s, cfg, kind(SD_HANDSHAKE_POLL));
	std::ifstream in(path);
	const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
	size_t slices = 0, starts = 0, ends = 0;
	for (size_t at = 0; (at = text.find("\"name\":\"handshake\",\"cat\":\"handshake\"", at)) !=
			    std::string::npos; at++) {
		const std::string ph = text.substr(text.rfind("\"ph\":\"", at) + 6, 1);
		slices += ph == "B";
		starts += ph == "s";
		ends += ph == "f";
	}
	EXPECT_EQ(1u, slices);
	EXPECT_EQ(4u, starts) << "one arrow a target";
	EXPECT_EQ(4u, ends) << "three acknowledgements and one on behalf";
	const char *py = std::getenv("SD_PYTHON");
	const char *script = std::getenv("SD_CHECK_TRACE");
	ASSERT_TRUE(py && script) << "run through meson test";
	const int st = std::system((std::string(py) + " " + script + " " + path + " --cpus " +
				    std::to_string(kCpus)).c_str());
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "shootdown-trace-check on " << path;
	unlink(path.c_str());
}

// Modelled time: a poll-word handshake lasts until its slowest target
// polls. CPU 3 computes 50 us before each poll; the others poll at once.
struct SlowRun {
	sd_handshake *h = nullptr;
	sd_mm *mm = nullptr;
	std::atomic<int> done{0}, ready{0};
	sd_handshake_result res{};
};

TEST(HandshakeModel, APolledWaitLastsUntilTheSlowestTargetPolls)
{
	sdtest::Profile p("pack:1 core:4 pu:1", {{"line_transfer.llc", 40}});
	Machine mach(sdtest::strict_config(4, "ipi", p));
	ASSERT_NE(nullptr, mach.m);
	SlowRun r;
	ASSERT_EQ(0, sd_mm_create(mach.m, &r.mm));
	sd_handshake_config hc = kind(SD_HANDSHAKE_POLL);
	ASSERT_EQ(0, sd_handshake_create(r.mm, &hc, &r.h));
	sdtest::Watchdog w("HandshakeModel: a CPU stuck", 60);
	ASSERT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *arg) {
		auto *r = static_cast<SlowRun *>(arg);
		EXPECT_EQ(0, sd_switch_mm(c, r->mm));
		r->ready.fetch_add(1);
		EXPECT_EQ(0, sd_cpu_poll_wake(c));     // strict: a poller waits for a wake
		if (sd_cpu_id(c) == 0) {
			while (r->ready.load() < 4)
				EXPECT_EQ(0, sd_cpu_poll(c));
			EXPECT_EQ(0, sd_handshake_run(r->h, c, [](sd_cpu *, void *) {}, nullptr,
						      &r->res));
			r->done.store(1);
			EXPECT_EQ(0, sd_cpu_poll_wake(c));
		} else {
			while (!r->done.load()) {
				if (sd_cpu_id(c) == 3) {
					EXPECT_EQ(0, sd_cpu_work(c, 50000));
				}
				EXPECT_GE(sd_handshake_poll(r->h, c), 0);
				EXPECT_EQ(0, sd_cpu_poll(c));
			}
		}
		EXPECT_EQ(0, sd_switch_mm(c, nullptr));
	}, &r));
	EXPECT_EQ(3u, r.res.ran);
	EXPECT_GE(r.res.ns, 50000u) << "the wait is the slowest target's, not free";
	EXPECT_LT(r.res.ns, 101000u) << "one of its polls, not two";
	EXPECT_EQ(0, sd_handshake_destroy(r.h));
	EXPECT_EQ(0, sd_mm_destroy(r.mm));
}

}  // namespace
