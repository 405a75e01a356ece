/* SPDX-License-Identifier: MIT */
#ifndef SD_HW_EVENT_H
#define SD_HW_EVENT_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_HW
#error "hw/event.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <time.h>

#include "../core/spinlock.h"
#include "cpu.h"
#include "model.h"

/*
 * The event funnel: every hardware event of an emulated CPU goes through
 * sd_event(), and only there is a counter, the flush-latency histogram or
 * the trace ring written (test/layers/check-layers refuses a counter write
 * anywhere else). One place to hang a cost model on later: each call says
 * which CPU, which event, and an argument (pages, targets, a duration).
 *
 * X(event, counter it bumps or NONE, how the trace shows it, what the
 * counter adds: ONE, or ARG for the event's argument, what it costs in
 * modelled time). Each event is described here alone: profile.c fills
 * the cost table from this column, sd_model_charge() and model.c charge
 * by it. Trace kinds:
 *   UNTRACED  counted only: the per-access events (hits, misses, walks),
 *             whose trace check would sit on the hit path;
 *   INSTANT   a point on the CPU's track;
 *   BEGIN/END a slice on the CPU's track (they nest, as the code does).
 * Costs (a parameter of time/params.h, P):
 *   FREE      nothing;
 *   ONCE(P)   P, inline (a table entry added to the clock);
 *   SCAN(P)   P and the scan of the whole TLB a whole-ASID or whole-TLB
 *             invalidation makes where the profile says it scans
 *             (tlb_scan_entry per entry: the emulator's is a scan of every
 *             entry, lib/hw/tlb.c, so it grows with the TLB a machine is
 *             given), inline;
 *   EACH(P)   P per unit of the argument (levels, PTEs, frames, tables,
 *             pages), out of line;
 *   OUT       a rule of its own in model.c, sd_model_event(): a shared
 *             resource, a wait, or a sum of parameters.
 * Counter names are the kernel's vm events where one exists (include/
 * shootdown/stats.h); flush reasons are the tlb_flush tracepoint's.
 */
#define SD_EVENT_LIST(X)                                                                                 \
	X(TLB_L1_HIT,         TLB_L1_HIT,         UNTRACED, ONE, ONCE(TLB_L1_HIT))                       \
	X(TLB_L2_HIT,         TLB_L2_HIT,         UNTRACED, ONE, ONCE(TLB_L2_HIT))                       \
	X(TLB_MISS,           TLB_MISS,           UNTRACED, ONE, ONCE(TLB_MISS))                         \
	X(PAGE_WALK,          PAGE_WALK,          UNTRACED, ONE, EACH(WALK_LEVEL)) /* arg levels read */ \
	X(WALK_CACHE_HIT,     WALK_CACHE_HIT,     UNTRACED, ONE, FREE)                                   \
	X(TLB_FILL,           TLB_FILL,           INSTANT,  ONE, ONCE(TLB_FILL)) /* arg vpn */           \
	X(TLB_FILL_RACED,     TLB_FILL_RACED,     INSTANT,  ONE, ONCE(TLB_FILL)) /* arg vpn */           \
	X(PAGE_FAULT,         PAGE_FAULT,         INSTANT,  ONE, ONCE(PAGE_FAULT_ENTRY)) /* arg vpn */   \
	/* a read fault that mapped the shared zero page (no frame) */                                   \
	X(ZERO_PAGE_FAULT,    ZERO_PAGE_FAULT,    INSTANT,  ONE, FREE) /* arg vpn */                     \
	/* a fault on a PTE that already allows the access: a stale, less permissive TLB entry */       \
	X(SPURIOUS_FAULT,     SPURIOUS_FAULT,     INSTANT,  ONE, ONCE(PAGE_FAULT_ENTRY)) /* arg vpn */   \
	/* a write-protect fault: a copy-on-write break of a read-only PTE */                            \
	X(WP_FAULT,           WP_FAULT,           INSTANT,  ONE, FREE) /* arg vpn */                     \
	/* a new anonymous page: page_alloc + memcg_charge + page_zero (arg 1) or page_copy (arg 0) */   \
	X(ANON_PAGE,          NONE,               UNTRACED, ONE, OUT)                                    \
	X(VIOLATION,          VIOLATION,          INSTANT,  ONE, FREE) /* arg vpn */                     \
	/* arg vpn, aux sd_flush_aux(reason, pages) */                                                   \
	X(FLUSH_BEGIN,        NONE,               BEGIN,    ONE, FREE)                                   \
	/* arg ns (the histogram's sample), aux reason */                                                \
	X(FLUSH_END,          FLUSH,              END,      ONE, FREE)                                   \
	/* sd_flush_tlb_range(): a flush counted, not timed (no clock reads) */                          \
	X(FLUSH_UNTIMED,      FLUSH,              INSTANT,  ONE, FREE) /* arg vpn */                     \
	/* folios added to or removed from the LRU under its lock (mm/lru.c) */                          \
	X(LRU_LOCKED_OPS,     LRU_LOCK_PAGES,     INSTANT,  ARG, OUT) /* arg folios */                   \
	X(LOCAL_FLUSH_ALL,    LOCAL_FLUSH_ALL,    INSTANT,  ONE, SCAN(LOCAL_FLUSH_ALL))                  \
	X(LOCAL_FLUSH_ASID,   LOCAL_FLUSH_ASID,   INSTANT,  ONE, SCAN(LOCAL_FLUSH_ASID))                 \
	X(LOCAL_FLUSH_ONE,    LOCAL_FLUSH_ONE,    INSTANT,  ONE, ONCE(LOCAL_FLUSH_PAGE)) /* arg vpn */   \
	X(LOCAL_FLUSH_RANGE,  LOCAL_FLUSH_RANGE,  INSTANT,  ONE, OUT) /* arg vpn, aux pages */           \
	X(REMOTE_FLUSH,       REMOTE_FLUSH,       INSTANT,  ONE, FREE)                                   \
	X(REMOTE_INVAL,       REMOTE_INVAL,       UNTRACED, ARG, FREE) /* arg target TLBs */             \
	X(REMOTE_INVAL_RECV,  REMOTE_INVAL_RECV,  INSTANT,  ONE, FREE)                                   \
	/* arg targets, aux pages (0: a whole ASID or the whole TLB) */                                  \
	X(TLBI_OP,            TLBI_OP,            INSTANT,  ONE, OUT)                                    \
	X(TLBI_ASID_OP,       TLBI_ASID_OP,       UNTRACED, ONE, FREE)                                   \
	X(TLBI_PAGE_OP,       TLBI_PAGE_OP,       UNTRACED, ONE, FREE)                                   \
	X(TLBI_RANGE_S0,      TLBI_RANGE_S0,      UNTRACED, ONE, FREE)                                   \
	X(TLBI_RANGE_S1,      TLBI_RANGE_S1,      UNTRACED, ONE, FREE)                                   \
	X(TLBI_RANGE_S2,      TLBI_RANGE_S2,      UNTRACED, ONE, FREE)                                   \
	X(TLBI_RANGE_S3,      TLBI_RANGE_S3,      UNTRACED, ONE, FREE)                                   \
	X(LOCAL_ONLY_FLUSH,   LOCAL_ONLY_FLUSH,   INSTANT,  ONE, FREE)                                   \
	X(FLUSH_SKIPPED,      FLUSH_SKIPPED,      INSTANT,  ONE, FREE)                                   \
	X(STALE_SWITCH_FLUSH, STALE_SWITCH_FLUSH, INSTANT,  ONE, FREE)                                   \
	/* arg target CPU, aux flow id (sd_event_ipi_sent()) */                                          \
	X(IPI_SENT,           IPI_SENT,           INSTANT,  ONE, FREE)                                   \
	X(IPI_RUN_BEGIN,      NONE,               BEGIN,    ONE, FREE) /* arg flow id */                 \
	X(IPI_RUN_END,        IPI_RECV,           END,      ONE, FREE) /* arg flow id */                 \
	X(IPI_DEFERRED,       IPI_DEFERRED,       INSTANT,  ONE, FREE)                                   \
	X(IPI_ACKED,          NONE,               INSTANT,  ONE, FREE) /* arg flow id, aux target */     \
	X(IPI_UNNEEDED,       IPI_UNNEEDED,       INSTANT,  ONE, FREE)                                   \
	X(IPI_RESENT,         IPI_RESENT,         INSTANT,  ONE, FREE) /* arg target */                  \
	X(IPI_STUCK,          IPI_STUCK,          INSTANT,  ONE, FREE) /* arg target */                  \
	X(IPI_TARGET_GONE,    IPI_TARGET_GONE,    INSTANT,  ONE, FREE) /* arg target */                  \
	X(CPUMASK_WRITE,      CPUMASK_WRITE,      UNTRACED, ONE, FREE)                                   \
	X(FLUSH_FULL,         FLUSH_FULL,         INSTANT,  ONE, SCAN(LOCAL_FLUSH_ASID))                 \
	X(FLUSH_PARTIAL,      FLUSH_PARTIAL,      INSTANT,  ONE, EACH(LOCAL_FLUSH_PAGE)) /* arg pages */ \
	X(FLUSH_GEN_SKIP,     FLUSH_GEN_SKIP,     INSTANT,  ONE, FREE)                                   \
	X(LAZY_SKIP,          LAZY_SKIP,          UNTRACED, ONE, FREE)                                   \
	X(CPUMASK_TRIM,       CPUMASK_TRIM,       UNTRACED, ONE, FREE)                                   \
	X(SWITCH_FLUSH,       SWITCH_FLUSH,       INSTANT,  ONE, FREE)                                   \
	X(INVLPGB,            INVLPGB,            INSTANT,  ONE, OUT) /* arg vpn, aux pages, 0: all */   \
	X(TLBSYNC,            TLBSYNC,            INSTANT,  ONE, OUT) /* arg ops synced */               \
	X(GLOBAL_ASID_ALLOC,  GLOBAL_ASID_ALLOC,  INSTANT,  ONE, FREE)                                   \
	X(GLOBAL_ASID_FREE,   GLOBAL_ASID_FREE,   INSTANT,  ONE, FREE)                                   \
	X(GLOBAL_ASID_RESET,  GLOBAL_ASID_RESET,  INSTANT,  ONE, FREE)                                   \
	X(TRANSITION_IPI,     TRANSITION_IPI,     INSTANT,  ONE, FREE)                                   \
	X(FALLBACK_IPI_FLUSH, FALLBACK_IPI_FLUSH, INSTANT,  ONE, FREE)                                   \
	X(ASID_ALLOC,         ASID_ALLOC,         INSTANT,  ONE, FREE)                                   \
	X(ASID_ROLLOVER,      ASID_ROLLOVER,      INSTANT,  ONE, FREE)                                   \
	X(SWITCH_BEGIN,       NONE,               BEGIN,    ONE, ONCE(CONTEXT_SWITCH)) /* arg next mm */ \
	X(SWITCH_END,         CTX_SWITCH,         END,      ONE, FREE)                                   \
	X(LAZY_ENTER,         NONE,               INSTANT,  ONE, FREE)                                   \
	X(LAZY_LEAVE,         NONE,               INSTANT,  ONE, FREE)                                   \
	X(TRAP_BEGIN,         TRAP,               BEGIN,    ONE, ONCE(TRAP_ENTRY)) /* arg insn */        \
	X(TRAP_END,           NONE,               END,      ONE, ONCE(TRAP_EXIT))                        \
	X(TRAP_UNDEF,         TRAP_UNDEF,         INSTANT,  ONE, FREE) /* arg insn */                    \
	X(LOCK_WAIT_BEGIN,    LOCK_WAIT,          BEGIN,    ONE, FREE) /* arg enum sd_lock_kind */       \
	X(LOCK_WAIT_END,      NONE,               END,      ONE, FREE)                                   \
	X(LOCK_STUCK,         LOCK_STUCK,         INSTANT,  ONE, FREE) /* arg the holder (shared.h) */   \
	/* The program's own events (events.h): arg the event's index, counted */                       \
	/* by sd_event_user() in the counter the index names */                                          \
	X(USER_MARK,          NONE,               INSTANT,  ONE, FREE) /* aux the count */               \
	X(USER_BEGIN,         NONE,               BEGIN,    ONE, FREE)                                   \
	X(USER_END,           NONE,               END,      ONE, FREE)                                   \
	X(USER_FLOW_OUT,      NONE,               INSTANT,  ONE, FREE) /* its slot names the arrow */    \
	X(USER_FLOW_IN,       NONE,               INSTANT,  ONE, FREE) /* aux the arrow (flow id) */     \
	/* A runtime's handshake (handshake.h): arg the target CPU or kind */                            \
	X(HANDSHAKE_BEGIN,    NONE,               BEGIN,    ONE, FREE) /* arg enum sd_handshake_kind */  \
	X(HANDSHAKE_END,      HANDSHAKE,          END,      ONE, FREE)                                   \
	X(HANDSHAKE_REQUEST,  NONE,               INSTANT,  ONE, FREE) /* its slot names the arrow */    \
	X(HANDSHAKE_ACK,      HANDSHAKE_ACK,      INSTANT,  ONE, FREE) /* aux the arrow (flow id) */     \
	X(HANDSHAKE_ON_BEHALF, HANDSHAKE_ON_BEHALF, INSTANT, ONE, FREE) /* aux the arrow (flow id) */    \
	X(HANDSHAKE_REFUSED,  HANDSHAKE_REFUSED,  INSTANT,  ONE, FREE)                                   \
	X(HANDSHAKE_RESENT,   HANDSHAKE_RESENT,   INSTANT,  ONE, FREE)                                   \
	X(HANDSHAKE_UNREACHED, HANDSHAKE_UNREACHED, INSTANT, ONE, FREE)                                  \
	/* Restartable sequences (rseq.h): arg the section's number on the CPU */                        \
	X(RSEQ_COMMIT,        RSEQ_COMMIT,        UNTRACED, ONE, FREE)                                   \
	X(RSEQ_ABORT,         RSEQ_ABORT,         INSTANT,  ONE, FREE)                                   \
	/* Intel RAR (arch/rar.c): arg the payload slot */                                               \
	X(RAR_PAYLOAD,        RAR_PAYLOAD,        INSTANT,  ONE, FREE)                                   \
	X(RAR_RUN_BEGIN,      NONE,               BEGIN,    ONE, FREE) /* arg flow id */                 \
	X(RAR_RUN_END,        NONE,               END,      ONE, FREE) /* arg flow id */                 \
	X(RAR_DONE,           RAR_DONE,           UNTRACED, ONE, ONCE(RAR_SERVICE))                      \
	X(RAR_SLOT_WAIT,      RAR_SLOT_WAIT,      INSTANT,  ONE, FREE)                                   \
	X(RAR_NEW_CPU_FLUSH,  RAR_NEW_CPU_FLUSH,  INSTANT,  ONE, FREE)                                   \
	X(RAR_IRQS_OFF,       RAR_IRQS_OFF,       INSTANT,  ONE, FREE)                                   \
	/* RISC-V SBI remote fences (arch/sbi.c): arg the targets (ECALL) */                            \
	X(SBI_ECALL,          SBI_ECALL,          INSTANT,  ONE, ONCE(SBI_ECALL))                        \
	X(SBI_RUN_BEGIN,      NONE,               BEGIN,    ONE, FREE) /* arg flow id */                 \
	X(SBI_RUN_END,        NONE,               END,      ONE, FREE) /* arg flow id */                 \
	X(SBI_IRQS_OFF,       SBI_IRQS_OFF,       INSTANT,  ONE, FREE)                                   \
	X(SBI_RANGE_WIDENED,  SBI_RANGE_WIDENED,  INSTANT,  ONE, FREE)                                   \
	/* A file read fault's neighbours (mm/access.c): arg pages; their PTEs are PTE_UPDATEs */        \
	X(FAULT_AROUND,       FAULT_AROUND,       UNTRACED, ARG, FREE)                                   \
	/* The scheduler (lib/sched): arg the task id */                                                 \
	X(TASK_SWITCH,        TASK_SWITCH,        INSTANT,  ONE, ONCE(SCHED_SWITCH))                     \
	X(TASK_WAKEUP,        TASK_WAKEUP,        INSTANT,  ONE, ONCE(SCHED_WAKEUP))                     \
	X(WAKEUP_IPI,         WAKEUP_IPI,         INSTANT,  ONE, FREE) /* arg target CPU */              \
	X(TASK_MIGRATE,       TASK_MIGRATE,       INSTANT,  ONE, ONCE(SCHED_MIGRATE))                    \
	X(TASK_FORK,          TASK_FORK,          INSTANT,  ONE, ONCE(TASK_FORK))                        \
	X(TASK_EXEC,          TASK_EXEC,          INSTANT,  ONE, FREE)                                   \
	X(TASK_EXIT,          TASK_EXIT,          INSTANT,  ONE, FREE)                                   \
	/* VMAs as objects (mm/vma.c): arg the page where one was split or merged */                     \
	X(VMA_SPLIT,          VMA_SPLIT,          INSTANT,  ONE, ONCE(VMA_SPLIT))                        \
	X(VMA_MERGE,          VMA_MERGE,          INSTANT,  ONE, ONCE(VMA_MERGE))                        \
	/* Events that exist for modelled time (model.h): counted nowhere. */                            \
	X(DSB,                DSB,                UNTRACED, ONE, OUT) /* the flush's barrier */          \
	X(SYSCALL_ENTER,      NONE,               UNTRACED, ONE, ONCE(SYSCALL_ENTRY))                    \
	X(SYSCALL_EXIT,       NONE,               UNTRACED, ONE, ONCE(SYSCALL_EXIT))                     \
	X(VMA_CHANGE,         NONE,               UNTRACED, ONE, ONCE(VMA_CHANGE)) /* mmap_lock held */  \
	X(MADVISE_ZAP,        NONE,               UNTRACED, ONE, ONCE(MADVISE_ZAP)) /* mmap_lock held */ \
	X(FILE_FAULT,         NONE,               UNTRACED, ONE, ONCE(FILE_FAULT)) /* arg vpn */         \
	X(PTE_UPDATE,         NONE,               UNTRACED, ONE, EACH(PTE_UPDATE)) /* arg PTEs */        \
	X(PAGE_FREE,          NONE,               UNTRACED, ONE, EACH(PAGE_FREE)) /* arg frames */       \
	/* arg enum sd_lock_kind, aux the struct sd_model_lock (0: the kind's) */                        \
	X(LOCK_ACQUIRE,       NONE,               UNTRACED, ONE, OUT)                                    \
	X(LOCK_RELEASE,       NONE,               UNTRACED, ONE, OUT)                                    \
	X(LOCK_DOWNGRADE,     NONE,               UNTRACED, ONE, OUT) /* SD_LOCK_MM to MM_READ */        \
	X(LINE_READ,          NONE,               UNTRACED, ONE, OUT) /* aux struct sd_model_line */     \
	X(LINE_WRITE,         NONE,               UNTRACED, ONE, OUT) /* aux struct sd_model_line */     \
	X(WORK,               NONE,               UNTRACED, ONE, OUT) /* arg ns: sd_cpu_work() */        \
	X(MM_CREATE,          NONE,               UNTRACED, ONE, ONCE(MM_CREATE)) /* sd_mm_create() */   \
	X(MM_DESTROY,         NONE,               UNTRACED, ONE, ONCE(MM_DESTROY)) /* its fixed part */  \
	X(PT_ALLOC,           NONE,               UNTRACED, ONE, EACH(PT_ALLOC)) /* arg tables */        \
	X(PT_FREE,            NONE,               UNTRACED, ONE, EACH(PT_FREE)) /* arg tables */

enum sd_event {
#define SD_EVENT_ENUM(ev, stat, trace, add, cost) SD_EV_##ev,
	SD_EVENT_LIST(SD_EVENT_ENUM)
#undef SD_EVENT_ENUM
	SD_EV_NR
};

enum sd_event_trace { SD_EVT_UNTRACED, SD_EVT_INSTANT, SD_EVT_BEGIN, SD_EVT_END };

#define SD_STAT_NONE SD_STAT_NR

/* The cost column's kinds; the inline ones first. */
enum sd_event_cost { SD_COST_FREE, SD_COST_ONCE, SD_COST_SCAN, SD_COST_EACH, SD_COST_OUT };

struct sd_event_desc {
	uint16_t stat;          /* enum sd_stat, or SD_STAT_NONE */
	uint8_t trace;          /* enum sd_event_trace */
	uint8_t add_arg;        /* the counter adds @arg, not 1 */
	uint8_t cost;           /* enum sd_event_cost */
	uint8_t param;          /* enum sd_model_param of ONCE, SCAN, EACH */
};

/* In SD_EVENT_LIST order (positional: C++ includes this too). Static
 * and const, so that for a constant event (every call but a few)
 * the compiler folds the lookup away: the hit path's sd_event() is the
 * counter bump it replaced, and no trace check at all (UNTRACED). */
static const struct sd_event_desc sd_event_desc[SD_EV_NR] = {
#define SD_EVENT_DESC(ev, stat, tr, add, cost) \
	{ SD_STAT_##stat, SD_EVT_##tr, SD_EVENT_ADD_##add, SD_EVENT_##cost },
#define SD_EVENT_ADD_ONE 0
#define SD_EVENT_ADD_ARG 1
#define SD_EVENT_FREE SD_COST_FREE, 0
#define SD_EVENT_ONCE(p) SD_COST_ONCE, SD_MP_##p
#define SD_EVENT_SCAN(p) SD_COST_SCAN, SD_MP_##p
#define SD_EVENT_EACH(p) SD_COST_EACH, SD_MP_##p
#define SD_EVENT_OUT SD_COST_OUT, 0
	SD_EVENT_LIST(SD_EVENT_DESC)
#undef SD_EVENT_OUT
#undef SD_EVENT_EACH
#undef SD_EVENT_SCAN
#undef SD_EVENT_ONCE
#undef SD_EVENT_FREE
#undef SD_EVENT_ADD_ARG
#undef SD_EVENT_ADD_ONE
#undef SD_EVENT_DESC
};

/* Why a flush ran: the kernel's tlb_flush tracepoint reasons
 * (enum tlb_flush_reason), plus the batch of try_to_unmap_flush(). */
enum sd_flush_reason {
	SD_FLUSH_ON_TASK_SWITCH,        /* TLB_FLUSH_ON_TASK_SWITCH */
	SD_FLUSH_REMOTE_SHOOTDOWN,      /* TLB_REMOTE_SHOOTDOWN */
	SD_FLUSH_LOCAL_SHOOTDOWN,       /* TLB_LOCAL_SHOOTDOWN: a range */
	SD_FLUSH_LOCAL_MM_SHOOTDOWN,    /* TLB_LOCAL_MM_SHOOTDOWN: a whole mm */
	SD_FLUSH_REMOTE_SEND_IPI,       /* TLB_REMOTE_SEND_IPI */
	SD_FLUSH_BATCH,                 /* arch_tlbbatch_flush() */
	SD_FLUSH_REASON_NR
};

/* The locks whose waits are events (LOCK_WAIT_BEGIN's argument) and that
 * modelled time serialises (LOCK_ACQUIRE). */
enum sd_lock_kind {
	SD_LOCK_DVM,            /* broadcast: the interconnect's TLBI serialisation */
	SD_LOCK_LRU,            /* lru=global: the lruvec lock of release_pages() */
	SD_LOCK_GLOBAL_ASID,    /* gbcast: global_asid_lock */
	SD_LOCK_MM,             /* an mm's mmap_lock, held for write (aux its rwsem) */
	SD_LOCK_TRAP,           /* trap dispatch, locked: the hook-list lock */
	SD_LOCK_ASID,           /* arm64: cpu_asid_lock of the ASID allocator */
	SD_LOCK_MM_READ,        /* an mm's mmap_lock, held for read (aux its rwsem) */
	SD_LOCK_MM_VMA,         /* a VMA's lock for read: a fault (aux its model), or
				 * a reclaim's rmap walk (aux the mm's) */
	SD_LOCK_PTL,            /* a leaf page table's split lock (aux its model) */
	SD_LOCK_RQ,             /* a CPU's run-queue lock (lib/sched; aux its model) */
	SD_LOCK_VMA_WRITE,      /* a VMA's lock for write (vma_start_write(); aux its model) */
	SD_LOCK_USER,           /* the program's own sd_lock (shared.h; aux its model) */
	SD_LOCK_KIND_NR
};

/* FLUSH_BEGIN's aux: the reason and the pages (0: the whole mm). */
static inline uint64_t sd_flush_aux(enum sd_flush_reason reason, uint64_t pages)
{
	return (uint64_t)reason | pages << 8;
}

/* The trace's write side (hw/trace.c): out of line, reached only when the
 * CPU has a ring. */
void sd_trace_record(struct sd_cpu *c, enum sd_event ev, uint64_t arg, uint64_t aux);
uint64_t sd_trace_record_flow(struct sd_cpu *c, enum sd_event ev, uint64_t arg);
void sd_event_flush_latency(struct sd_cpu *c, uint64_t ns);

/* Host time: an unmodelled machine's flush latency and trace clock. */
static inline uint64_t sd_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * A flush's start and its duration, FLUSH_END's argument (the histogram's
 * sample): taken on the flushing CPU's own clock, as the kernel's tlb_flush
 * tracepoints time a flush on the initiator. A modelled CPU reads its
 * modelled clock, no clock_gettime(): what the flush would take on the
 * profile's machine, whatever the host did meanwhile. The clock may jump
 * inside the flush (an ack waited for, a lock, an IPI handled, strict
 * mode's grant of the machine back); the difference keeps all of it, as
 * the kernel's would, and a lax window wait, in host time, adds none. Only
 * the owner writes clock_ps, and it never goes back, so the difference is
 * exact and never negative. Taken in ps and converted once, so two
 * durations of 1.6 ns do not become 1 and 2.
 */
static inline uint64_t sd_event_flush_start(const struct sd_cpu *c)
{
	if (unlikely(c->model.ev_ps != NULL))
		return c->model.clock_ps;
	return sd_now_ns();
}

static inline uint64_t sd_event_flush_ns(const struct sd_cpu *c, uint64_t start)
{
	if (unlikely(c->model.ev_ps != NULL))
		return (c->model.clock_ps - start) / PS_PER_NS;
	return sd_now_ns() - start;
}

static inline void sd_event_count(struct sd_cpu *c, enum sd_stat id, uint64_t n)
{
	sd_counter_add(&c->stats.counter[id], n);
}

/* Modelled time's side of the funnel (hw/model.c): out of line. */
void sd_model_event(struct sd_cpu *c, enum sd_event ev, uint64_t arg, uint64_t aux);
uint64_t sd_model_ipi_posted(struct sd_cpu *from, struct sd_cpu *t);
void sd_model_ipi_run(struct sd_cpu *c, uint64_t sent_ps);
uint64_t sd_model_rar_posted(struct sd_cpu *from, struct sd_cpu *t);
void sd_model_rar_run(struct sd_cpu *c, uint64_t sent_ps);
uint64_t sd_model_sbi_posted(struct sd_cpu *from, struct sd_cpu *t);
void sd_model_sbi_run(struct sd_cpu *c, uint64_t sent_ps);
void sd_model_ipi_acked(struct sd_cpu *from, struct sd_cpu *t, uint64_t acked_ps);
void sd_model_irq_exit(struct sd_cpu *c);

/* Events whose modelled cost is a fixed charge (FREE, ONCE, SCAN: a
 * table entry, ev_ps); the others are charged out of line. For a constant
 * @ev (every call but a few) the static table folds to one branch. */
static inline bool sd_model_fixed(enum sd_event ev)
{
	return sd_event_desc[ev].cost <= SD_COST_SCAN;
}

/* Charge @ev to @c's modelled clock; at a synchronisation point, publish
 * the clock and keep within the window (time/sync.c). */
static inline void sd_model_charge(struct sd_cpu *c, enum sd_event ev, uint64_t arg, uint64_t aux)
{
	if (!sd_model_fixed(ev))
		sd_model_event(c, ev, arg, aux);
	else
		c->model.clock_ps += c->model.ev_ps[ev];
	if (unlikely(c->model.clock_ps >= c->model.sync_at_ps))
		sd_cpu_model_sync(c);
}

/*
 * The funnel. @c is the CPU the event happened on, and its owner thread is
 * the caller (the counters, the ring and the modelled clock are written by
 * it alone, so no shared atomics). With tracing off a traced event costs
 * one predictable branch on c->trace, which shares the owner-private line
 * with irq_depth; with no profile, every event costs one more on
 * c->model.ev_ps, on the same line.
 */
static inline void sd_event(struct sd_cpu *c, enum sd_event ev, uint64_t arg, uint64_t aux)
{
	const struct sd_event_desc *d = &sd_event_desc[ev];

	if (d->stat != SD_STAT_NONE)
		sd_event_count(c, (enum sd_stat)d->stat, d->add_arg ? arg : 1);
	if (ev == SD_EV_FLUSH_END)
		sd_event_flush_latency(c, arg);
	if (d->trace != SD_EVT_UNTRACED && unlikely(c->trace != NULL))
		sd_trace_record(c, ev, arg, aux);
	if (unlikely(c->model.ev_ps != NULL))
		sd_model_charge(c, ev, arg, aux);
}

/*
 * An IPI leaves @c for @target: counted, and traced with a flow id that
 * the request carries to the handler (IPI_RUN_BEGIN) and back to the ack
 * (IPI_ACKED), so the timeline can draw the arrows. 0: not traced.
 */
static inline uint64_t sd_event_ipi_sent(struct sd_cpu *c, struct sd_cpu *target,
					 uint64_t *model_sent_ps)
{
	sd_event_count(c, SD_STAT_IPI_SENT, 1);
	if (unlikely(c->model.ev_ps != NULL))
		*model_sent_ps = sd_model_ipi_posted(c, target);
	if (unlikely(c->trace != NULL))
		return sd_trace_record_flow(c, SD_EV_IPI_SENT, target->id);
	return 0;
}

/* @c runs a request sent at modelled time @sent_ps (0: by a plain thread,
 * or unmodelled): the handler starts at the later of its arrival and @c's
 * own clock. Returns when the ack is written, in modelled time. */
static inline void sd_event_ipi_run_begin(struct sd_cpu *c, uint64_t flow, uint64_t sent_ps)
{
	if (unlikely(c->model.ev_ps != NULL))
		sd_model_ipi_run(c, sent_ps);
	sd_event(c, SD_EV_IPI_RUN_BEGIN, flow, 0);
}

static inline uint64_t sd_event_ipi_run_end(struct sd_cpu *c, uint64_t flow)
{
	sd_event(c, SD_EV_IPI_RUN_END, flow, 0);
	return c->model.clock_ps;
}

/* A RAR signal leaves @c for @target (arch/rar.c): counted, traced as an
 * arrow like an IPI, charged rar_send. */
static inline uint64_t sd_event_rar_sent(struct sd_cpu *c, struct sd_cpu *target,
					 uint64_t *model_sent_ps)
{
	sd_event_count(c, SD_STAT_RAR_SENT, 1);
	if (unlikely(c->model.ev_ps != NULL))
		*model_sent_ps = sd_model_rar_posted(c, target);
	if (unlikely(c->trace != NULL))
		return sd_trace_record_flow(c, SD_EV_IPI_SENT, target->id);
	return 0;
}

/* @c's microcode takes a RAR request sent at @sent_ps: no interrupt entry,
 * whatever the interrupt flag says. */
static inline void sd_event_rar_run_begin(struct sd_cpu *c, uint64_t flow, uint64_t sent_ps)
{
	if (unlikely(c->model.ev_ps != NULL))
		sd_model_rar_run(c, sent_ps);
	sd_event(c, SD_EV_RAR_RUN_BEGIN, flow, 0);
}

static inline uint64_t sd_event_rar_run_end(struct sd_cpu *c, uint64_t flow)
{
	sd_event(c, SD_EV_RAR_RUN_END, flow, 0);
	return c->model.clock_ps;
}

/* A remote fence leaves @c's firmware for @target (arch/sbi.c): the
 * request queued in the target's TLB FIFO and its machine-level software
 * interrupt raised, charged sbi_send_target; traced as an arrow like an IPI. */
static inline uint64_t sd_event_sbi_sent(struct sd_cpu *c, struct sd_cpu *target,
					 uint64_t *model_sent_ps)
{
	sd_event_count(c, SD_STAT_SBI_SENT, 1);
	if (unlikely(c->model.ev_ps != NULL))
		*model_sent_ps = sd_model_sbi_posted(c, target);
	if (unlikely(c->trace != NULL))
		return sd_trace_record_flow(c, SD_EV_IPI_SENT, target->id);
	return 0;
}

/* @c traps into M-mode for a fence sent at @sent_ps: no S-mode interrupt
 * entry, whatever its interrupt flag says; charged sbi_service. */
static inline void sd_event_sbi_run_begin(struct sd_cpu *c, uint64_t flow, uint64_t sent_ps)
{
	if (unlikely(c->model.ev_ps != NULL))
		sd_model_sbi_run(c, sent_ps);
	sd_event(c, SD_EV_SBI_RUN_BEGIN, flow, 0);
}

static inline uint64_t sd_event_sbi_run_end(struct sd_cpu *c, uint64_t flow)
{
	sd_event(c, SD_EV_SBI_RUN_END, flow, 0);
	return c->model.clock_ps;
}

/* The end of a batch of requests run in one interrupt. */
static inline void sd_event_irq_exit(struct sd_cpu *c)
{
	if (unlikely(c->model.ev_ps != NULL))
		sd_model_irq_exit(c);
}

/* @c saw @t's ack of a request, written at modelled time @acked_ps. */
static inline void sd_event_ipi_acked(struct sd_cpu *c, struct sd_cpu *t, uint64_t flow,
				      uint64_t acked_ps)
{
	/* The clock first: in a modelled trace the ack is seen at the end of
	 * the wait, after the handler that wrote it. */
	if (unlikely(c->model.ev_ps != NULL))
		sd_model_ipi_acked(c, t, acked_ps);
	if (flow)
		sd_event(c, SD_EV_IPI_ACKED, flow, t->id);
}

/* An event whose record starts a trace arrow (HANDSHAKE_REQUEST): counted
 * as any, and its flow id returned (0: not traced). Free in modelled time. */
static inline uint64_t sd_event_flow_out(struct sd_cpu *c, enum sd_event ev, uint64_t arg)
{
	const struct sd_event_desc *d = &sd_event_desc[ev];

	if (d->stat != SD_STAT_NONE)
		sd_event_count(c, (enum sd_stat)d->stat, d->add_arg ? arg : 1);
	return unlikely(c->trace != NULL) ? sd_trace_record_flow(c, ev, arg) : 0;
}

/*
 * The program's own event @index (0..SD_USER_EVENTS_MAX - 1, events.h) on
 * @c: @n added to its counter, then @ev's record (USER_*) if @c traces.
 * Free in modelled time. Returns USER_FLOW_OUT's flow id (0: not traced).
 */
static inline uint64_t sd_event_user(struct sd_cpu *c, enum sd_event ev, unsigned index,
				     uint64_t n, uint64_t aux)
{
	if (n)
		sd_event_count(c, (enum sd_stat)(SD_STAT_USER_0 + index), n);
	if (likely(c->trace == NULL))
		return 0;
	if (ev == SD_EV_USER_FLOW_OUT)
		return sd_trace_record_flow(c, ev, index);
	sd_trace_record(c, ev, index, aux);
	return 0;
}

/* A spinlock acquisition whose wait, if any, is an event: the uncontended
 * case is the plain trylock it always was. */
static inline void sd_event_spin_lock(struct sd_cpu *c, struct sd_spinlock *l,
				      enum sd_lock_kind kind)
{
	if (unlikely(!sd_spin_trylock(l))) {
		sd_event(c, SD_EV_LOCK_WAIT_BEGIN, kind, 0);
		sd_spin_lock_slow(l);
		sd_event(c, SD_EV_LOCK_WAIT_END, kind, 0);
	}
	sd_event(c, SD_EV_LOCK_ACQUIRE, kind, 0);
}

/* A real lock was dropped after its LOCK_RELEASE event: a sync point of
 * modelled time that fell inside it is taken now (sd_model_resync()),
 * after the real unlock, never before, or a CPU would wait at the window
 * for one that waits for its lock. */
static inline void sd_event_unlocked(struct sd_cpu *c)
{
	sd_model_resync(c);
}

/* Its partner: the release is an event before the unlock, so the model's
 * lock state is written while the real lock still orders it. */
static inline void sd_event_spin_unlock(struct sd_cpu *c, struct sd_spinlock *l,
					enum sd_lock_kind kind)
{
	sd_event(c, SD_EV_LOCK_RELEASE, kind, 0);
	sd_spin_unlock(l);
	sd_event_unlocked(c);
}

/* The CPU leaves the running set of modelled time (@state SD_MODEL_IDLE:
 * sd_cpu_idle()) or comes back to it (SD_MODEL_RUNNING: a switch), at its
 * own clock (model.c, sd_model_set_run()). */
static inline void sd_event_run_state(struct sd_cpu *c, int state)
{
	if (unlikely(c->model.ev_ps != NULL))
		sd_clock_set_run(&c->model, state);
}

/* A hot line read or written (mm_cpumask, tlb_gen, IPI queue heads). */
static inline void sd_event_line(struct sd_cpu *c, struct sd_model_line *line, bool write)
{
	if (unlikely(c->model.ev_ps != NULL))
		sd_model_charge(c, write ? SD_EV_LINE_WRITE : SD_EV_LINE_READ, 0,
				(uint64_t)(uintptr_t)line);
}

#endif
