// SPDX-License-Identifier: MIT
// The program's own events (events.h, lib/hw/user_event.c): names that
// refuse to shadow the library's, counts in sd_stats under those names (the
// snapshot, one CPU, the print, the JSON), slices that must nest, and the
// trace: marks, slices and an arrow from one CPU to another, checked by
// shootdown-trace-check as the library's own are.
#include "common.hpp"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace {

using sdtest::Attached;
using sdtest::Machine;

// Registered before any test runs: the table is the process's and never
// shrinks, so the test that fills it must not starve the others.
const int kPolls = sd_user_event_register("polls");
const int kAcks = sd_user_event_register("acks");
const int kWait = sd_user_event_register("handshake_wait");

std::string slurp(const std::string &p)
{
	std::ifstream in(p);
	std::stringstream ss;
	ss << in.rdbuf();
	return ss.str();
}

size_t count_of(const std::string &text, const std::string &what)
{
	size_t n = 0;
	for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
		n++;
	return n;
}

TEST(UserEvent, NamesAreTheProgramsAndNeverALibraryCounters)
{
	ASSERT_GE(kPolls, (int)SD_STAT_USER_0);
	ASSERT_GE(kAcks, (int)SD_STAT_USER_0);
	EXPECT_NE(kPolls, kAcks);
	EXPECT_EQ(kPolls, sd_user_event_register("polls")) << "the same name, the same counter";
	EXPECT_STREQ("polls", sd_stat_name((sd_stat)kPolls));
	EXPECT_STREQ("acks", sd_stat_name((sd_stat)kAcks));
	const char *bad[] = {nullptr, "", "Polls", "with space", "flushes", "ipis_sent",
			     "nr_cpus", "flush_ns_mean", "user_3", "user_15",
			     "a_name_of_thirty_two_characters_"};
	for (const char *name : bad)
		EXPECT_EQ(-EINVAL, sd_user_event_register(name)) << (name ? name : "NULL");
	EXPECT_EQ(0, sd_user_event_register("user_x") < 0) << "user_ and not digits is a name";
	EXPECT_EQ(0, sd_user_event_register("a_name_of_thirty_one_characters") < 0);
}

TEST(UserEvent, CountsLandInTheSnapshotThePrintAndTheJson)
{
	Machine mach(sdtest::config(2));
	ASSERT_NE(nullptr, mach.m);
	EXPECT_EQ(-EPERM, sd_user_event(nullptr, kPolls, 1));
	std::thread([&] {
		Attached a(mach.m, 1);
		EXPECT_EQ(0, sd_user_event(a.c, kPolls, 3));
		EXPECT_EQ(0, sd_user_event(a.c, kAcks, 1));
	}).join();
	{
		Attached a(mach.m, 0);
		EXPECT_EQ(0, sd_user_event(a.c, kPolls, 5));
		EXPECT_EQ(-EINVAL, sd_user_event(a.c, SD_STAT_FLUSH, 1)) << "a library counter";
		EXPECT_EQ(-EINVAL, sd_user_event(a.c, -1, 1));
		EXPECT_EQ(-EINVAL, sd_user_event(a.c, SD_STAT_NR, 1));
		EXPECT_NE(nullptr, strstr(sd_last_error(), "not a registered event"));
	}
	sd_stats all = SD_STATS_INIT, one = SD_STATS_INIT;
	ASSERT_EQ(0, sd_stats_snapshot(mach.m, &all));
	ASSERT_EQ(0, sd_stats_cpu(mach.m, 1, &one));
	EXPECT_EQ(8u, all.counter[kPolls]);
	EXPECT_EQ(1u, all.counter[kAcks]);
	EXPECT_EQ(3u, one.counter[kPolls]);
	EXPECT_EQ(0u, all.counter[SD_STAT_FLUSH]) << "nothing else counted";

	char *buf = nullptr;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	sd_stats_print(&all, f);
	sd_stats_json(&all, f);
	fclose(f);
	std::string text(buf, len);
	free(buf);
	EXPECT_NE(std::string::npos, text.find("polls                            8\n")) << text;
	EXPECT_NE(std::string::npos, text.find("\"polls\": 8")) << text;
	EXPECT_NE(std::string::npos, text.find("\"acks\": 1")) << text;
}

TEST(UserEvent, SlicesNestAndCloseInnermostFirst)
{
	Machine mach(sdtest::config(1));
	ASSERT_NE(nullptr, mach.m);
	Attached a(mach.m, 0);
	EXPECT_EQ(-EINVAL, sd_user_event_end(a.c, kWait)) << "none open";
	ASSERT_EQ(0, sd_user_event_begin(a.c, kWait));
	ASSERT_EQ(0, sd_user_event_begin(a.c, kPolls));
	EXPECT_EQ(-EINVAL, sd_user_event_end(a.c, kWait)) << "not the innermost";
	EXPECT_NE(nullptr, strstr(sd_last_error(), "another event's"));
	EXPECT_EQ(0, sd_user_event_end(a.c, kPolls));
	EXPECT_EQ(0, sd_user_event_end(a.c, kWait));
	for (int i = 0; i < 8; i++)
		ASSERT_EQ(0, sd_user_event_begin(a.c, kPolls));
	EXPECT_EQ(-EOVERFLOW, sd_user_event_begin(a.c, kPolls));
	for (int i = 0; i < 8; i++)
		ASSERT_EQ(0, sd_user_event_end(a.c, kPolls));
	sd_stats s = SD_STATS_INIT;
	ASSERT_EQ(0, sd_stats_snapshot(mach.m, &s));
	EXPECT_EQ(9u, s.counter[kPolls]) << "a begin counts once, an end and a refusal not";
	EXPECT_EQ(1u, s.counter[kWait]);
}

// CPU 0 opens a slice, starts an arrow and hands its token to CPU 1, which
// ends it (twice: one arrow all the same) inside an IPI CPU 0 sends.
TEST(UserEvent, TheTraceDrawsMarksSlicesAndArrows)
{
	std::string path = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
			   "/sd_user_event_" + std::to_string(getpid()) + ".json";
	sd_machine_config cfg = sdtest::config(2, "ipi");
	cfg.trace_path = path.c_str();
	Machine mach(cfg);
	ASSERT_NE(nullptr, mach.m);
	struct Run {
		std::atomic<uint64_t> token{0};
		std::atomic<int> done{0};
	} r;
	ASSERT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *arg) {
		auto *r = static_cast<Run *>(arg);
		if (sd_cpu_id(c) == 0) {
			EXPECT_EQ(0, sd_user_event_begin(c, kWait));
			uint64_t token = sd_user_flow_start(c, kPolls);
			EXPECT_NE(0u, token) << "tracing: a token";
			r->token.store(token);
			EXPECT_EQ(0, sd_smp_call_single(c, 1, [](sd_cpu *t, void *a) {
				auto *r = static_cast<Run *>(a);
				EXPECT_EQ(0, sd_user_flow_end(t, kAcks, r->token.load()));
				EXPECT_EQ(0, sd_user_flow_end(t, kAcks, r->token.load()));
				EXPECT_EQ(0, sd_user_event(t, kPolls, 7));
			}, r));
			EXPECT_EQ(0, sd_user_event_end(c, kWait));
			r->done.store(1);
		} else {
			while (!r->done.load())
				EXPECT_EQ(0, sd_cpu_poll(c));
		}
	}, &r));
	ASSERT_EQ(0, sd_machine_trace_write(mach.m, path.c_str())) << sd_last_error();
	const std::string text = slurp(path);
	EXPECT_EQ(1u, count_of(text, "\"ph\":\"B\",\"name\":\"handshake_wait\",\"cat\":\"user\""));
	EXPECT_EQ(1u, count_of(text, "\"ph\":\"s\",\"name\":\"polls\",\"cat\":\"user\""));
	EXPECT_EQ(1u, count_of(text, "\"ph\":\"f\",\"name\":\"polls\",\"cat\":\"user\""))
		<< "one arrow, named after its start, however often its token was ended";
	EXPECT_EQ(1u, count_of(text, "\"args\":{\"n\":7}"));
	EXPECT_EQ(2u, count_of(text, "\"ph\":\"i\",\"name\":\"acks\""));

	const char *py = std::getenv("SD_PYTHON");
	const char *script = std::getenv("SD_CHECK_TRACE");
	ASSERT_TRUE(py && script) << "run through meson test";
	int st = std::system((std::string(py) + " " + script + " " + path + " --cpus 2").c_str());
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "shootdown-trace-check on " << path;
	unlink(path.c_str());
}

TEST(UserEvent, WithoutATraceAFlowCountsAndHasNoToken)
{
	Machine mach(sdtest::config(1));
	ASSERT_NE(nullptr, mach.m);
	Attached a(mach.m, 0);
	EXPECT_EQ(0u, sd_user_flow_start(a.c, kPolls));
	EXPECT_EQ(0, sd_user_flow_end(a.c, kAcks, 0));
	EXPECT_EQ(0u, sd_user_flow_start(nullptr, kPolls));
	EXPECT_EQ(-EPERM, sd_user_flow_end(nullptr, kAcks, 0));
	sd_stats s = SD_STATS_INIT;
	ASSERT_EQ(0, sd_stats_snapshot(mach.m, &s));
	EXPECT_EQ(1u, s.counter[kPolls]);
	EXPECT_EQ(1u, s.counter[kAcks]);
}

// Last in the file: it fills the process's table.
TEST(UserEvent, ZTheTableHoldsSixteenNames)
{
	int last = 0;
	for (int i = 0; i < SD_USER_EVENTS_MAX + 1 && last >= 0; i++)
		last = sd_user_event_register(("filler_" + std::to_string(i)).c_str());
	EXPECT_EQ(-ENOSPC, last);
	EXPECT_EQ(kPolls, sd_user_event_register("polls")) << "a full table still finds a name";
}

}  // namespace
