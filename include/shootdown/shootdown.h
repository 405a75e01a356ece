/* SPDX-License-Identifier: MIT */
/**
 * @file shootdown.h
 * @brief libshootdown: the kernel's TLB shootdown algorithms over real threads.
 *
 * Include this one header for the whole API.
 */
#ifndef SHOOTDOWN_SHOOTDOWN_H
#define SHOOTDOWN_SHOOTDOWN_H

#include "export.h"
#include "version.h"
#include "error.h"
#include "machine.h"
#include "cpu.h"
#include "mm.h"
#include "tlbbatch.h"
#include "file.h"
#include "strategy.h"
#include "trap.h"
#include "stats.h"
#include "oracle.h"
#include "model.h"
#include "task.h"
#include "shared.h"
#include "events.h"
#include "handshake.h"
#include "rseq.h"

#endif
