/* SPDX-License-Identifier: MIT */
#ifndef SD_HW_USER_EVENT_H
#define SD_HW_USER_EVENT_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_HW
#error "hw/user_event.h is in a higher layer than the file including it (core/layer.h)"
#endif

/*
 * The program's own events (include/shootdown/events.h): the process-wide
 * names of SD_STAT_USER_0 + index. For the readers above (stats, the
 * trace): the name registered for @index, or NULL if none is.
 */
const char *sd_user_event_name(unsigned index);

#endif
