/* SPDX-License-Identifier: MIT */
/* The per-thread mirror of liburcu's online state (see rcu.h). */
#include "rcu.h"

_Thread_local bool sd_rcu_is_online __attribute__((tls_model("initial-exec")));
