/* SPDX-License-Identifier: MIT */
/*
 * The trace's reader: a machine's per-CPU rings (hw/trace.h, written by
 * the event funnel) turned into a Chrome trace-event JSON file, the JSON
 * Object Format that Perfetto's UI and chrome://tracing load. One process
 * per machine, one thread (track) per emulated CPU. A reader of what the
 * layers below recorded, so it sits in the top layer.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <shootdown/error.h>
#include <shootdown/events.h>
#include <shootdown/machine.h>

#include "../core/error.h"
#include "../hw/event.h"
#include "../hw/machine_state.h"
#include "../hw/trace.h"
#include "../hw/user_event.h"
#include "report.h"

/* Flow ends sit this far inside the slice they bind to: timestamps are
 * microseconds with three decimals, which a viewer reads as a double and
 * may round by a nanosecond. */
#define SD_TRACE_FLOW_NUDGE_NS 20

/* Ack flows get their own ids: a flow's id names both of its ends. */
#define SD_TRACE_ACK_FLOW (UINT64_C(1) << 48)

/* ---- the reader: rings to JSON ---- */

struct trace_cpu {
	const struct sd_trace_rec *rec;
	uint64_t nr;                   /* records in the snapshot */
	uint64_t dropped;
};

struct flush_mark {
	uint64_t ts_ns;
	int delta;                     /* +1 a flush began, -1 one ended */
};

struct trace_out {
	const struct sd_machine *m;
	FILE *f;
	struct trace_cpu *cpus;
	uint64_t *handled;             /* flow ids whose handler ran, sorted */
	size_t nr_handled;
	uint64_t *acked;               /* flow ids whose sender saw the ack, sorted */
	size_t nr_acked;
	uint64_t *user_in;             /* arrows (not the IPI's) that were ended, sorted, once */
	bool *user_in_drawn;           /* ...whose end is written: one end an arrow */
	size_t nr_user_in;
	struct flush_mark *flushes;
	size_t nr_flushes;
	uint64_t end_ns;               /* the write's time: open slices end here */
	bool first;
};

static const char *const event_names[SD_EV_NR] = {
#define SD_EVENT_NAME(ev, stat, trace, add, cost) #ev,
	SD_EVENT_LIST(SD_EVENT_NAME)
#undef SD_EVENT_NAME
};

static const char *const flush_reasons[SD_FLUSH_REASON_NR] = {
	[SD_FLUSH_ON_TASK_SWITCH] = "TLB_FLUSH_ON_TASK_SWITCH",
	[SD_FLUSH_REMOTE_SHOOTDOWN] = "TLB_REMOTE_SHOOTDOWN",
	[SD_FLUSH_LOCAL_SHOOTDOWN] = "TLB_LOCAL_SHOOTDOWN",
	[SD_FLUSH_LOCAL_MM_SHOOTDOWN] = "TLB_LOCAL_MM_SHOOTDOWN",
	[SD_FLUSH_REMOTE_SEND_IPI] = "TLB_REMOTE_SEND_IPI",
	[SD_FLUSH_BATCH] = "batch",
};

static const char *const lock_names[SD_LOCK_KIND_NR] = {
	[SD_LOCK_DVM] = "dvm", [SD_LOCK_LRU] = "lru", [SD_LOCK_GLOBAL_ASID] = "global_asid",
	[SD_LOCK_MM] = "mmap_lock", [SD_LOCK_TRAP] = "trap", [SD_LOCK_ASID] = "asid",
	[SD_LOCK_MM_READ] = "mmap_lock_read", [SD_LOCK_MM_VMA] = "vma_lock",
	[SD_LOCK_PTL] = "ptl", [SD_LOCK_RQ] = "rq", [SD_LOCK_VMA_WRITE] = "vma_lock_write",
	[SD_LOCK_USER] = "user_lock",
};

static const char *reason_name(uint64_t r)
{
	return r < SD_FLUSH_REASON_NR ? flush_reasons[r] : "unknown";
}

static const char *lock_name(uint64_t k)
{
	return k < SD_LOCK_KIND_NR ? lock_names[k] : "unknown";
}

/* The tlb_flush tracepoint's reason for the instants that have one: the
 * flush an IPI ran (flush_tlb_func()), one done at switch-in, the send. */
static unsigned instant_reason(uint32_t ev)
{
	switch (ev) {
	case SD_EV_REMOTE_INVAL_RECV:
		return SD_FLUSH_REMOTE_SHOOTDOWN;
	case SD_EV_SWITCH_FLUSH:
	case SD_EV_STALE_SWITCH_FLUSH:
		return SD_FLUSH_ON_TASK_SWITCH;
	case SD_EV_IPI_SENT:
		return SD_FLUSH_REMOTE_SEND_IPI;
	default:
		return SD_FLUSH_REASON_NR;
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int cmp_mark(const void *a, const void *b)
{
	const struct flush_mark *x = a, *y = b;

	if (x->ts_ns != y->ts_ns)
		return x->ts_ns < y->ts_ns ? -1 : 1;
	return x->delta - y->delta;    /* an end before a begin at a tie */
}

/* Sorted @ids without repeats; their new count. */
static size_t unique(uint64_t *ids, size_t n)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		if (!k || ids[k - 1] != ids[i])
			ids[k++] = ids[i];
	return k;
}

static bool has_id(const uint64_t *ids, size_t n, uint64_t id)
{
	return id && bsearch(&id, ids, n, sizeof(*ids), cmp_u64);
}

/* Whether the record that flow id @id names is in the snapshot, of @ev. */
static bool flow_source_is(const struct trace_out *o, uint64_t id, uint32_t ev)
{
	uint64_t cpu = (id >> 32) - 1, slot = (id & 0xffffffffu) - 1;

	return id && cpu < o->m->nr_cpus && slot < o->cpus[cpu].nr &&
	       o->cpus[cpu].rec[slot].ev == ev;
}

/* Whether the IPI_SENT record that @id names is in the snapshot. */
static bool sender_has(const struct trace_out *o, uint64_t id)
{
	return flow_source_is(o, id, SD_EV_IPI_SENT);
}

/* The program's own event's name (events.h): its registered name. */
static const char *user_event_name(uint64_t index, char *buf, size_t len)
{
	const char *name = index < SD_USER_EVENTS_MAX ? sd_user_event_name((unsigned)index) : NULL;

	if (name)
		return name;
	snprintf(buf, len, "user_%llu", (unsigned long long)index);
	return buf;
}

static bool user_instant(uint32_t ev)
{
	return ev == SD_EV_USER_MARK || ev == SD_EV_USER_FLOW_OUT || ev == SD_EV_USER_FLOW_IN;
}

/* Arrows other than the IPI's: from a start (its own slot's flow id in
 * aux) to the ends that name it in aux. */
static bool arrow_start(uint32_t ev)
{
	return ev == SD_EV_USER_FLOW_OUT || ev == SD_EV_HANDSHAKE_REQUEST;
}

static bool arrow_end(uint32_t ev)
{
	return ev == SD_EV_USER_FLOW_IN || ev == SD_EV_HANDSHAKE_ACK ||
	       ev == SD_EV_HANDSHAKE_ON_BEHALF;
}

/* Microseconds since the machine's creation, as the format wants. */
static double ts_us(const struct trace_out *o, uint64_t ns)
{
	return ns > o->m->trace.t0_ns ? (double)(ns - o->m->trace.t0_ns) / 1000.0 : 0.0;
}

/*
 * The track ids. Viewers hide thread id 0 (the idle task) and call the
 * thread whose id equals its process's "main thread", so CPU n is thread
 * n + 1 and the machine is process SD_TRACE_PID_BASE + its number, above
 * every CPU's thread id. The names say "CPU n" and the machine's number.
 */
#define SD_TRACE_PID_BASE 10000u

static unsigned trace_pid(const struct trace_out *o)
{
	return SD_TRACE_PID_BASE + o->m->trace.serial;
}

/* Open one event object: the fields every event has. @cpu is the track. */
static void ev_head(struct trace_out *o, const char *ph, const char *name, const char *cat,
		    unsigned cpu, uint64_t ns)
{
	fprintf(o->f, "%s\n{\"ph\":\"%s\",\"name\":\"%s\",\"cat\":\"%s\",\"pid\":%u,\"tid\":%u,"
		"\"ts\":%.3f", o->first ? "" : ",", ph, name, cat, trace_pid(o), cpu + 1,
		ts_us(o, ns));
	o->first = false;
}

static void flow_in(struct trace_out *o, const char *ph, const char *name, const char *cat,
		    unsigned tid, uint64_t ns, uint64_t id)
{
	ev_head(o, ph, name, cat, tid, ns);
	fprintf(o->f, ",\"id\":%llu,\"bp\":\"e\"}", (unsigned long long)id);
}

static void flow(struct trace_out *o, const char *ph, const char *name, unsigned tid,
		 uint64_t ns, uint64_t id)
{
	ev_head(o, ph, name, "ipi", tid, ns);
	fprintf(o->f, ",\"id\":%llu,\"bp\":\"e\"}", (unsigned long long)id);
}

static void write_begin(struct trace_out *o, unsigned cpu, const struct sd_trace_rec *r)
{
	switch (r->ev) {
	case SD_EV_FLUSH_BEGIN:
		ev_head(o, "B", "flush", "flush", cpu, r->ts_ns);
		fprintf(o->f, ",\"args\":{\"reason\":\"%s\",\"vpn\":\"0x%llx\",\"pages\":%llu}}",
			reason_name(r->aux & 0xff), (unsigned long long)r->arg,
			(unsigned long long)(r->aux >> 8));
		break;
	case SD_EV_IPI_RUN_BEGIN:
		ev_head(o, "B", "IPI handler", "ipi", cpu, r->ts_ns);
		fprintf(o->f, ",\"args\":{\"from_cpu\":%lld}}",
			r->arg ? (long long)(r->arg >> 32) - 1 : -1LL);
		/* The arrow from the send ends here; the one to the ack
		 * starts here, both bound to this slice: just inside it, so
		 * a viewer that sorts by time never meets them before the
		 * slice has begun. */
		if (sender_has(o, r->arg))
			flow(o, "f", "ipi", cpu, r->ts_ns + SD_TRACE_FLOW_NUDGE_NS, r->arg);
		if (sender_has(o, r->arg) && has_id(o->acked, o->nr_acked, r->arg))
			flow(o, "s", "ack", cpu, r->ts_ns + SD_TRACE_FLOW_NUDGE_NS,
			     r->arg + SD_TRACE_ACK_FLOW);
		break;
	case SD_EV_SWITCH_BEGIN:
		ev_head(o, "B", "switch_mm", "switch", cpu, r->ts_ns);
		fprintf(o->f, ",\"args\":{\"next_mm\":%llu}}", (unsigned long long)r->arg);
		break;
	case SD_EV_TRAP_BEGIN:
		ev_head(o, "B", "trap", "trap", cpu, r->ts_ns);
		fprintf(o->f, ",\"args\":{\"insn\":\"0x%08llx\"}}", (unsigned long long)r->arg);
		break;
	case SD_EV_HANDSHAKE_BEGIN:
		ev_head(o, "B", "handshake", "handshake", cpu, r->ts_ns);
		fprintf(o->f, ",\"args\":{\"kind\":%llu}}", (unsigned long long)r->arg);
		break;
	case SD_EV_USER_BEGIN: {
		char buf[32];

		ev_head(o, "B", user_event_name(r->arg, buf, sizeof(buf)), "user", cpu, r->ts_ns);
		fputc('}', o->f);
		break;
	}
	default:        /* SD_EV_LOCK_WAIT_BEGIN */
		ev_head(o, "B", "lock wait", "lock", cpu, r->ts_ns);
		fprintf(o->f, ",\"args\":{\"lock\":\"%s\"}}", lock_name(r->arg));
		break;
	}
}

static void write_end(struct trace_out *o, unsigned cpu, const struct sd_trace_rec *r)
{
	ev_head(o, "E", "", "", cpu, r->ts_ns);
	if (r->ev == SD_EV_FLUSH_END)
		fprintf(o->f, ",\"args\":{\"ns\":%llu}}", (unsigned long long)r->arg);
	else
		fputc('}', o->f);
}

/* An arrow's name and category: a program's, after its start's event; a
 * handshake's, "handshake". */
static const char *arrow_name(const struct sd_trace_rec *start, char *buf, size_t len,
			      const char **cat)
{
	if (start->ev == SD_EV_HANDSHAKE_REQUEST) {
		*cat = "handshake";
		return "handshake";
	}
	*cat = "user";
	return user_event_name(start->arg, buf, len);
}

/* The arrow ends at record @r (at its time, bound to the instant just
 * written, as the IPI's are in write_instant()). */
static void write_arrow_ends(struct trace_out *o, unsigned cpu, const struct sd_trace_rec *r)
{
	uint64_t id = r->aux;          /* a start: its own flow id; an end: the start's */
	const char *cat = "user";
	char buf[32];

	if (arrow_start(r->ev) && has_id(o->user_in, o->nr_user_in, id)) {
		const char *name = arrow_name(r, buf, sizeof(buf), &cat);

		flow_in(o, "s", name, cat, cpu, r->ts_ns, id);
	}
	if (arrow_end(r->ev) && (flow_source_is(o, id, SD_EV_USER_FLOW_OUT) ||
				 flow_source_is(o, id, SD_EV_HANDSHAKE_REQUEST))) {
		uint64_t *at = bsearch(&id, o->user_in, o->nr_user_in, sizeof(id), cmp_u64);
		bool *drawn = at ? &o->user_in_drawn[at - o->user_in] : NULL;
		const struct sd_trace_rec *src = &o->cpus[(id >> 32) - 1].rec[(id & 0xffffffffu) - 1];

		/* A token ended twice: the arrow goes to the first end written.
		 * Both ends carry the start's name: one arrow, one name. */
		if (drawn && !*drawn) {
			const char *name = arrow_name(src, buf, sizeof(buf), &cat);

			*drawn = true;
			flow_in(o, "f", name, cat, cpu, r->ts_ns, id);
		}
	}
}

/* The program's own instants: its name and its count. */
static void write_user_instant(struct trace_out *o, unsigned cpu, const struct sd_trace_rec *r)
{
	char buf[32];

	ev_head(o, "i", user_event_name(r->arg, buf, sizeof(buf)), "user", cpu, r->ts_ns);
	if (r->ev == SD_EV_USER_MARK)
		fprintf(o->f, ",\"s\":\"t\",\"args\":{\"n\":%llu}}", (unsigned long long)r->aux);
	else
		fputs(",\"s\":\"t\"}", o->f);
}

static void write_instant(struct trace_out *o, unsigned cpu, const struct sd_trace_rec *r,
			  uint64_t *fills)
{
	char name[32];
	size_t i;

	if (user_instant(r->ev)) {
		write_user_instant(o, cpu, r);
		write_arrow_ends(o, cpu, r);
		return;
	}

	for (i = 0; event_names[r->ev][i] && i + 1 < sizeof(name); i++) {
		char ch = event_names[r->ev][i];

		name[i] = ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
	}
	name[i] = 0;
	ev_head(o, "i", name, "event", cpu, r->ts_ns);
	fprintf(o->f, ",\"s\":\"t\",\"args\":{\"arg\":%llu,\"aux\":%llu",
		(unsigned long long)r->arg, (unsigned long long)r->aux);
	if (instant_reason(r->ev) < SD_FLUSH_REASON_NR)
		fprintf(o->f, ",\"reason\":\"%s\"", reason_name(instant_reason(r->ev)));
	fputs("}}", o->f);
	/* The sender's ends follow their instant at its time: a viewer
	 * binds them to the newest slice on the track, which is that
	 * instant (ipi_sent, ipi_acked), inside the flush. */
	if (r->ev == SD_EV_IPI_SENT && has_id(o->handled, o->nr_handled, r->aux))
		flow(o, "s", "ipi", cpu, r->ts_ns, r->aux);
	write_arrow_ends(o, cpu, r);
	if (r->ev == SD_EV_IPI_ACKED && sender_has(o, r->arg) &&
	    has_id(o->handled, o->nr_handled, r->arg))
		flow(o, "f", "ack", cpu, r->ts_ns, r->arg + SD_TRACE_ACK_FLOW);
	if (r->ev == SD_EV_TLB_FILL) {
		ev_head(o, "C", "TLB fills", "tlb", cpu, r->ts_ns);
		fprintf(o->f, ",\"args\":{\"CPU %u\":%llu}}", cpu, (unsigned long long)++*fills);
	}
}

/* One CPU's track: slices kept balanced with a stack, so a slice the run
 * left open is closed at the write's time, marked "unfinished". */
static void write_cpu(struct trace_out *o, unsigned cpu)
{
	const struct trace_cpu *tc = &o->cpus[cpu];
	unsigned depth = 0;
	uint64_t fills = 0;

	ev_head(o, "M", "thread_name", "", cpu, o->m->trace.t0_ns);
	fprintf(o->f, ",\"args\":{\"name\":\"CPU %u\"}}", cpu);
	ev_head(o, "M", "thread_sort_index", "", cpu, o->m->trace.t0_ns);
	fprintf(o->f, ",\"args\":{\"sort_index\":%u}}", cpu);
	for (uint64_t i = 0; i < tc->nr; i++) {
		const struct sd_trace_rec *r = &tc->rec[i];

		if (r->ev >= SD_EV_NR)
			continue;
		switch (sd_event_desc[r->ev].trace) {
		case SD_EVT_BEGIN:
			write_begin(o, cpu, r);
			depth++;
			break;
		case SD_EVT_END:
			if (!depth)     /* cannot happen: the ring keeps the first */
				break;
			write_end(o, cpu, r);
			depth--;
			break;
		default:
			write_instant(o, cpu, r, &fills);
			break;
		}
	}
	while (depth--) {
		ev_head(o, "E", "", "", cpu, o->end_ns);
		fprintf(o->f, ",\"args\":{\"unfinished\":true}}");
	}
}

/* The machine-wide counter track: flushes in flight over time. */
static void write_flushes_in_flight(struct trace_out *o)
{
	long in_flight = 0;

	qsort(o->flushes, o->nr_flushes, sizeof(*o->flushes), cmp_mark);
	for (size_t i = 0; i < o->nr_flushes; i++) {
		in_flight += o->flushes[i].delta;
		ev_head(o, "C", "flushes in flight", "flush", 0, o->flushes[i].ts_ns);
		fprintf(o->f, ",\"args\":{\"flushes\":%ld}}", in_flight);
	}
}

static void write_metadata(struct trace_out *o)
{
	uint64_t dropped = 0;

	ev_head(o, "M", "process_name", "", 0, o->m->trace.t0_ns);
	fprintf(o->f, ",\"args\":{\"name\":\"libshootdown machine %u (%s%s%s)\"}}",
		o->m->trace.serial, o->m->strategy_spec, o->m->model.on ? ", modelled on " : "",
		o->m->model.on ? o->m->model.name : "");
	fprintf(o->f, "\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{"
		"\"library\":\"libshootdown\",\"strategy\":\"%s\",\"nr_cpus\":%u,"
		"\"clock\":\"%s\",\"profile\":\"%s\","
		"\"records_per_cpu\":%u,\"ring_policy\":\"keep first\",\"cpus\":[",
		o->m->strategy_spec, o->m->nr_cpus,
		o->m->model.on ? "modelled" : "real", o->m->model.on ? o->m->model.name : "",
		o->m->trace.per_cpu);
	for (unsigned i = 0; i < o->m->nr_cpus; i++) {
		fprintf(o->f, "%s{\"cpu\":%u,\"records\":%llu,\"dropped\":%llu}", i ? "," : "", i,
			(unsigned long long)o->cpus[i].nr, (unsigned long long)o->cpus[i].dropped);
		dropped += o->cpus[i].dropped;
	}
	fprintf(o->f, "],\"dropped\":%llu}\n}\n", (unsigned long long)dropped);
}

/* What every CPU has published, and the indexes the flows are drawn from. */
static int trace_snapshot(struct trace_out *o)
{
	const struct sd_machine *m = o->m;
	size_t total = 0, nh = 0, na = 0, nu = 0, nf = 0;

	for (unsigned i = 0; i < m->nr_cpus; i++) {
		struct sd_trace_ring *r = m->cpus[i]->trace;

		/* Pairs with the release in trace_put(). */
		o->cpus[i].nr = atomic_load_explicit(&r->published, memory_order_acquire);
		o->cpus[i].rec = r->rec;
		o->cpus[i].dropped = atomic_load_explicit(
			&m->cpus[i]->stats.counter[SD_STAT_TRACE_DROPPED], memory_order_relaxed);
		total += o->cpus[i].nr;
	}
	o->handled = malloc((total + 1) * sizeof(*o->handled));
	o->acked = malloc((total + 1) * sizeof(*o->acked));
	o->user_in = malloc((total + 1) * sizeof(*o->user_in));
	o->user_in_drawn = calloc(total + 1, sizeof(*o->user_in_drawn));
	/* Every record at most once, plus a close for each open flush. */
	o->flushes = malloc((2 * total + 1) * sizeof(*o->flushes));
	if (!o->handled || !o->acked || !o->user_in || !o->user_in_drawn || !o->flushes)
		return -ENOMEM;
	for (unsigned i = 0; i < m->nr_cpus; i++) {
		long open = 0;

		for (uint64_t j = 0; j < o->cpus[i].nr; j++) {
			const struct sd_trace_rec *r = &o->cpus[i].rec[j];

			if (r->ev == SD_EV_IPI_RUN_BEGIN && r->arg)
				o->handled[nh++] = r->arg;
			else if (r->ev == SD_EV_IPI_ACKED && r->arg)
				o->acked[na++] = r->arg;
			else if (arrow_end(r->ev) && r->aux)
				o->user_in[nu++] = r->aux;
			else if (r->ev == SD_EV_FLUSH_BEGIN || (r->ev == SD_EV_FLUSH_END && open > 0)) {
				open += r->ev == SD_EV_FLUSH_BEGIN ? 1 : -1;
				o->flushes[nf++] = (struct flush_mark){
					r->ts_ns, r->ev == SD_EV_FLUSH_BEGIN ? 1 : -1 };
			}
		}
		/* Flushes still open end, for the counter too, at the write. */
		while (open-- > 0)
			o->flushes[nf++] = (struct flush_mark){ o->end_ns, -1 };
	}
	qsort(o->handled, nh, sizeof(*o->handled), cmp_u64);
	qsort(o->acked, na, sizeof(*o->acked), cmp_u64);
	qsort(o->user_in, nu, sizeof(*o->user_in), cmp_u64);
	o->nr_user_in = unique(o->user_in, nu);
	o->nr_handled = nh;
	o->nr_acked = na;
	o->nr_flushes = nf;
	return 0;
}

static void trace_out_free(struct trace_out *o)
{
	free(o->cpus);
	free(o->handled);
	free(o->acked);
	free(o->user_in);
	free(o->user_in_drawn);
	free(o->flushes);
}

/* The whole file to @f; -errno of the first failed write (ferror). */
static int trace_emit(struct trace_out *o)
{
	fprintf(o->f, "{\"traceEvents\":[");
	o->first = true;
	for (unsigned i = 0; i < o->m->nr_cpus; i++)
		write_cpu(o, i);
	write_flushes_in_flight(o);
	write_metadata(o);
	if (fflush(o->f) || ferror(o->f))
		return errno ? -errno : -EIO;
	return 0;
}

/* Where a modelled timeline ends: the latest clock any CPU published. */
static uint64_t model_end_ns(const struct sd_machine *m)
{
	uint64_t end = 0;

	for (unsigned i = 0; i < m->nr_cpus; i++) {
		uint64_t v = atomic_load_explicit(&m->cpus[i]->model_pub.clock_ps,
						  memory_order_relaxed) / PS_PER_NS;
		end = v > end ? v : end;
	}
	return end;
}

int sd_trace_write_file(struct sd_machine *m, const char *path)
{
	struct trace_out o = { .m = m };
	char *tmp = NULL;
	int err;

	o.end_ns = m->model.on ? model_end_ns(m) : sd_now_ns();
	o.cpus = calloc(m->nr_cpus, sizeof(*o.cpus));
	if (!o.cpus || trace_snapshot(&o)) {
		trace_out_free(&o);
		return sd_fail(-ENOMEM, "sd_machine_trace_write: no memory for the trace's index");
	}
	/* A temporary name in the same directory, renamed over @path once
	 * whole: a reader never finds half a trace at @path. Created new
	 * (O_EXCL, O_NOFOLLOW): never through a link planted there. */
	tmp = sd_trace_tmp_name(path);
	if (!tmp) {
		trace_out_free(&o);
		return sd_fail(-ENOMEM, "sd_machine_trace_write: no memory");
	}
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	o.f = fd < 0 ? NULL : fdopen(fd, "w");
	if (!o.f) {
		err = -errno;
		if (fd >= 0)
			close(fd);
		sd_fail(err, "sd_machine_trace_write: cannot create %s: %s", tmp, strerror(-err));
		goto out;
	}
	errno = 0;
	err = trace_emit(&o);
	if (fclose(o.f) && !err)
		err = -errno;
	if (err) {
		sd_fail(err, "sd_machine_trace_write: writing %s failed: %s (what was written "
			"is kept there)", tmp, strerror(-err));
		goto out;
	}
	/* What is at @path may be replaced only if it is a regular file
	 * (never a device, a FIFO or a link's target): checked here, not
	 * only at creation, as it may have changed during the run. The
	 * trace is written first, so a refusal keeps it. */
	err = sd_trace_path_check(path, false);
	if (err) {
		char why[256];

		/* Copied: sd_fail() writes the buffer it would read. */
		snprintf(why, sizeof(why), "%s", sd_last_error());
		sd_fail(err, "sd_machine_trace_write: %s (the trace is kept at %s)", why, tmp);
		goto out;
	}
	if (rename(tmp, path)) {
		err = -errno;
		sd_fail(err, "sd_machine_trace_write: cannot rename %s to %s: %s (the trace is "
			"kept at %s)", tmp, path, strerror(-err), tmp);
	}
out:
	free(tmp);
	trace_out_free(&o);
	return err;
}
