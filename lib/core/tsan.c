/* SPDX-License-Identifier: MIT */
/* Words that only ThreadSanitizer builds use (see compiler.h and rcu.h). */
#include "compiler.h"

#ifdef SD_TSAN
_Atomic unsigned long sd_tsan_fence_word;
char sd_rcu_tsan_token;
#endif
