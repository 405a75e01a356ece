/* SPDX-License-Identifier: MIT */
#ifndef SD_MM_TLBBATCH_H
#define SD_MM_TLBBATCH_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_MM
#error "mm/tlbbatch.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <shootdown/tlbbatch.h>

#include "../core/cpumask.h"

struct sd_mm;

/* A range whose oracle floors rise once the batch is flushed. */
struct sd_tlbbatch_page {
	struct sd_mm *mm;
	uint64_t vpn;
	uint64_t nr;
	uint32_t version;
};

struct sd_tlbbatch {
	struct sd_machine *m;
	/* arch_tlbbatch: the union of the noted mms' cpumasks (`ipi`). */
	struct sd_cpumask cpus;
	/* The noted mms, each once; each holds one mm->batch_pending count. */
	struct sd_mm **mms;
	size_t nr_mms, cap_mms;
	/* Reclaimed frames, freed after the flush. */
	uint64_t *frames;
	size_t nr_frames, cap_frames;
	/* Checked mode: floors to raise after the flush. */
	struct sd_tlbbatch_page *pages;
	size_t nr_pages, cap_pages;
};

/* Make room so that noting one more mm cannot fail: 0 or -ENOMEM. */
int sd_tlbbatch_reserve(struct sd_tlbbatch *b);
/* Note @mm in @b (once), and its page @vpn (SD_BATCH_NO_VPN: none named)
 * with the strategy's batch_add. Caller checked the arguments; the mm's
 * locks may be held. */
int sd_tlbbatch_note(struct sd_cpu *cpu, struct sd_tlbbatch *b, struct sd_mm *mm, uint64_t vpn);
/* Hold @pfn until the flush; on -ENOMEM the frame is leaked, never freed early. */
int sd_tlbbatch_hold_frame(struct sd_tlbbatch *b, uint64_t pfn);
/* Raise @mm's floors over [@vpn, @vpn + @nr) to @version after the flush
 * (checked mode; sd_oracle_floor_raise_known()). */
int sd_tlbbatch_hold_floor(struct sd_tlbbatch *b, struct sd_mm *mm, uint64_t vpn, uint64_t nr,
			   uint32_t version);

#endif
