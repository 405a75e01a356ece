// SPDX-License-Identifier: MIT
// Modelled time's shared resources alone (lib/time/resource.c): no
// machine, no thread, no clock. Each use is given its modelled time, and
// every answer is one computed by hand in the comment above it.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

extern "C" {
#include "time/resource.h"
}

namespace {

constexpr uint32_t kNone = SD_MODEL_NONE;

// SD_MODEL_LOCK_INIT and SD_MODEL_RWSEM_INIT, which are C designators.
sd_model_lock lock_init()
{
	sd_model_lock l{};
	l.last_cpu = kNone;
	return l;
}

void rwsem_init(sd_model_rwsem *rw)
{
	rw->count_owner = kNone;
	rw->writers = lock_init();
	rw->readers = lock_init();
}

// ---- a line's transfers and an rwsem count's RMWs: a short history ----

struct LineHist {
	sd_model_hist h{};
	sd_model_busy busy[SD_MODEL_LINE_SLOTS]{};
	uint64_t reserve(uint64_t t, uint64_t occ)
	{
		return sd_model_hist_reserve(&h, busy, SD_MODEL_LINE_SLOTS, t, occ);
	}
};

// In modelled order it is a FIFO: 100 +20 -> [100,120); 110 waits to 120.
// A use at 0 reaching it after both (a CPU that was parked while a batch
// of handlers ran ahead) goes in the gap before them: [0,20), not at 140
// as a "free at" time would put it.
TEST(LineHistory, AnEarlierUseTakesTheGapBeforeLaterOnes)
{
	LineHist l;
	EXPECT_EQ(100u, l.reserve(100, 20));
	EXPECT_EQ(120u, l.reserve(110, 20));
	EXPECT_EQ(0u, l.reserve(0, 20));
	EXPECT_EQ(85u, l.reserve(85, 10)) << "[85,95) ends before [100,120)";
	EXPECT_EQ(140u, l.reserve(95, 10)) << "[95,100) is too short, [120,140) taken";
	EXPECT_EQ(150u, l.h.last_end_ps);
}

// N uses of occupancy T all wanting time 0 end at N T: at most 1/T a
// modelled second, however many ask, and whatever the history forgets.
TEST(LineHistory, Saturates)
{
	LineHist l;
	for (uint64_t i = 0; i < 1000; i++)
		EXPECT_EQ(i * 30, l.reserve(0, 30));
	EXPECT_EQ(30000u, l.h.last_end_ps);
	EXPECT_EQ((unsigned)SD_MODEL_LINE_SLOTS, l.h.n);
}

// ---- the interconnect's queue with history ----

// [100,150) first; one at 0 fits before it: [0,50); one of 20 at 40
// overlaps [0,50) and fits before 100: [50,70); one of 40 at 60 fits in
// no gap before 150. A lookup of 0 length records nothing.
TEST(Queue, FirstGapAtOrAfter)
{
	sd_model_queue q{};
	EXPECT_EQ(100u, sd_model_queue_reserve(&q, 100, 50));
	EXPECT_EQ(0u, sd_model_queue_reserve(&q, 0, 50));
	EXPECT_EQ(50u, sd_model_queue_reserve(&q, 40, 20));
	EXPECT_EQ(150u, sd_model_queue_reserve(&q, 60, 40));
	EXPECT_EQ(4u, q.hist.n);
	EXPECT_EQ(75u, sd_model_queue_reserve(&q, 75, 0));
	EXPECT_EQ(4u, q.hist.n);
	EXPECT_EQ(190u, q.hist.last_end_ps);
	for (unsigned i = 1; i < q.hist.n; i++)
		EXPECT_LE(q.busy[i - 1].start_ps, q.busy[i].start_ps) << "kept by start";
}

// 64 uses back to back, [10 i, 10 i + 10): the history is full. The next
// forgets [0,10) (the floor rises to 10), and a use of 5 at 0 then queues
// behind all that is remembered: at 640, not in the forgotten gap.
TEST(Queue, ForgottenHistoryIsAFloor)
{
	sd_model_queue q{};
	for (uint64_t i = 0; i < SD_MODEL_QUEUE_SLOTS; i++)
		ASSERT_EQ(10 * i, sd_model_queue_reserve(&q, 10 * i, 10));
	EXPECT_EQ(640u, sd_model_queue_reserve(&q, 0, 5));
	EXPECT_EQ(10u, q.hist.floor_ps);
	EXPECT_EQ((unsigned)SD_MODEL_QUEUE_SLOTS, q.hist.n);
}

// ---- a lock's history of holds ----

// Holds [0,100) by CPU 1 and [200,300) by CPU 2. 50 ps wanted at 50:
// after the first, before the second: 100, last held by 1. 100 wanted at
// 120: the gap [100,200) is too short: 300, last held by 2. The hold
// time follows 3:1: 100/4 = 25, then (75 + 100)/4 = 43.
TEST(Lock, FirstGapAndWhoHeldItLast)
{
	sd_model_lock l = lock_init();
	sd_model_lock_record(&l, 0, 100, 1);
	EXPECT_EQ(25u, l.hold_ps);
	sd_model_lock_record(&l, 200, 300, 2);
	EXPECT_EQ(43u, l.hold_ps);
	uint32_t prev = kNone;
	EXPECT_EQ(100u, sd_model_lock_gap(&l, 50, 50, &prev));
	EXPECT_EQ(1u, prev);
	prev = kNone;
	EXPECT_EQ(300u, sd_model_lock_gap(&l, 120, 100, &prev));
	EXPECT_EQ(2u, prev);
	prev = kNone;
	EXPECT_EQ(1000u, sd_model_lock_gap(&l, 1000, 50, &prev));
	EXPECT_EQ(2u, prev) << "the last hold before the gap";
}

// A hold recorded late in real time but early in modelled time goes in
// its place; the ninth forgets the earliest, which no longer delays.
TEST(Lock, SortedByStartAndForgetsTheEarliest)
{
	sd_model_lock l = lock_init();
	for (uint64_t i = 1; i <= SD_MODEL_LOCK_SLOTS; i++)
		sd_model_lock_record(&l, 100 * i, 100 * i + 10, (uint32_t)i);
	sd_model_lock_record(&l, 50, 60, 9);
	ASSERT_EQ((uint32_t)SD_MODEL_LOCK_SLOTS, l.n);
	EXPECT_EQ(50u, l.busy[0].start_ps) << "the earliest, [100,110), was forgotten";
	for (unsigned i = 1; i < l.n; i++)
		EXPECT_LT(l.busy[i - 1].start_ps, l.busy[i].start_ps);
	uint32_t prev = kNone;
	EXPECT_EQ(100u, sd_model_lock_gap(&l, 100, 10, &prev)) << "the forgotten hold";
	EXPECT_EQ(9u, prev);
}

// ---- a machine-wide lock's calendar ----

// 8 buckets of 100 ps. A hold of 250 from 0 fills [0,100) and [100,200)
// and half of [200,300): the next acquirer at 0 starts at 250, after
// CPU 3's hold.
TEST(Calendar, HoldsPourIntoTheNextBuckets)
{
	sd_model_calendar cal{};
	ASSERT_EQ(0, sd_model_cal_init(&cal, 8, 100));
	sd_model_cal_record(&cal, 0, 250, 3);
	uint32_t prev = kNone;
	EXPECT_EQ(250u, sd_model_cal_gap(&cal, 0, &prev));
	EXPECT_EQ(3u, prev);
	prev = kNone;
	EXPECT_EQ(300u, sd_model_cal_gap(&cal, 300, &prev));
	EXPECT_EQ(kNone, prev) << "nobody held it in [300,400)";
	sd_model_cal_fini(&cal);
	sd_model_cal_fini(&cal);  // twice is harmless
}

// A saturated lock serialises exactly: 20 holds of 30 ps, all wanted at
// 0, start at 0, 30, 60, ... 570 (within the 8 x 100 ps the calendar
// covers).
TEST(Calendar, SaturatedLockSerialises)
{
	sd_model_calendar cal{};
	ASSERT_EQ(0, sd_model_cal_init(&cal, 8, 100));
	for (uint64_t i = 0; i < 20; i++) {
		uint32_t prev = kNone;
		uint64_t start = sd_model_cal_gap(&cal, 0, &prev);
		EXPECT_EQ(30 * i, start) << "hold " << i;
		sd_model_cal_record(&cal, start, 30, (uint32_t)i % 4);
	}
	sd_model_cal_fini(&cal);
}

// Times older than the ring covers find nothing: the acquirer goes at once
// (its bucket now holds a newer time). 8 x 100 ps: a hold at 900 takes
// over the bucket of [100,200).
TEST(Calendar, OlderThanItCoversGoesAtOnce)
{
	sd_model_calendar cal{};
	ASSERT_EQ(0, sd_model_cal_init(&cal, 8, 100));
	sd_model_cal_record(&cal, 100, 100, 1);
	sd_model_cal_record(&cal, 900, 100, 2);
	uint32_t prev = kNone;
	EXPECT_EQ(150u, sd_model_cal_gap(&cal, 150, &prev));
	EXPECT_EQ(kNone, prev);
	sd_model_cal_fini(&cal);
}

// ---- the mmap_lock, a reader-writer semaphore ----

// Writers held [100,200) (CPU 1), readers [250,300) (CPU 2; their hold
// time 50/4 = 12). A writer wanting 50 at 150 waits for the writer's end
// (200) and fits before the readers (250): 200. One wanting 50 at 220
// does not fit before 250: after the readers, 300. A reader at 150 needs
// only the writers' gap: 200; one at 260 shares with the readers: 260.
TEST(Rwsem, WritersWaitForBothReadersForWriters)
{
	sd_model_rwsem rw{};
	rwsem_init(&rw);
	sd_model_lock_record(&rw.writers, 100, 200, 1);
	sd_model_lock_record(&rw.readers, 250, 300, 2);
	EXPECT_EQ(200u, sd_model_rwsem_write_gap(&rw, 150, 50));
	EXPECT_EQ(300u, sd_model_rwsem_write_gap(&rw, 220, 50));
	EXPECT_EQ(200u, sd_model_rwsem_read_gap(&rw, 150));
	EXPECT_EQ(260u, sd_model_rwsem_read_gap(&rw, 260));
}

// A writer's search alternates between the histories until both agree:
// writers [0,100), [150,250); readers [100,160). 50 at 0: after the
// first writer (100), into the readers (160), into the second writer
// (250), free in both: 250.
TEST(Rwsem, WriterSearchAlternates)
{
	sd_model_rwsem rw{};
	rwsem_init(&rw);
	sd_model_lock_record(&rw.writers, 0, 100, 1);
	sd_model_lock_record(&rw.writers, 150, 250, 1);
	sd_model_lock_record(&rw.readers, 100, 160, 2);
	EXPECT_EQ(250u, sd_model_rwsem_write_gap(&rw, 0, 50));
}

// ---- a hot line's coherence state ----

// CPU 0 writes a fresh line (nobody to fetch from); CPU 1 reads it (a
// fetch from 0), then again (a hit); CPU 0 reads its own write (a hit)
// and writes it while CPU 1 holds a copy (an invalidation); CPU 2
// writes it (a fetch from 0), and CPU 2 again (a hit: nobody read it).
TEST(Line, HitFetchInvalidate)
{
	sd_model_line line;
	sd_model_line_init(&line);
	uint32_t from = kNone;
	EXPECT_EQ(SD_LINE_HIT, sd_model_line_access(&line, 0, true, &from));
	EXPECT_EQ(SD_LINE_FETCH, sd_model_line_access(&line, 1, false, &from));
	EXPECT_EQ(0u, from);
	EXPECT_EQ(SD_LINE_HIT, sd_model_line_access(&line, 1, false, &from));
	EXPECT_EQ(SD_LINE_HIT, sd_model_line_access(&line, 0, false, &from));
	EXPECT_EQ(SD_LINE_INVALIDATE, sd_model_line_access(&line, 0, true, &from));
	from = kNone;
	EXPECT_EQ(SD_LINE_FETCH, sd_model_line_access(&line, 2, true, &from));
	EXPECT_EQ(0u, from);
	EXPECT_EQ(SD_LINE_HIT, sd_model_line_access(&line, 2, true, &from));
}

}  // namespace
