/* SPDX-License-Identifier: MIT */
/* A hot line written by the calling CPU, for test_sequencer.cpp: C, since
 * the funnel (hw/event.h) is C11 atomics that C++ does not include. */
#include <shootdown/model.h>

#include "hw/event.h"
#include "line_hammer.h"

struct sd_model_line *sd_test_line_new(void)
{
	static struct sd_model_line lines[4];
	static unsigned next;
	struct sd_model_line *l = &lines[next++ % 4];

	sd_model_line_init(l);
	return l;
}

void sd_test_line_write(struct sd_cpu *c, struct sd_model_line *l)
{
	sd_event_line(c, l, true);
}
