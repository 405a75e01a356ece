/* SPDX-License-Identifier: MIT */
/* Words that only ThreadSanitizer builds use (see compiler.h and rcu.h). */
#include "compiler.h"

#ifdef SD_TSAN
static SD_ATOMIC(unsigned long) sd_tsan_fence_word;
char sd_rcu_tsan_token;

void sd_tsan_smp_mb(void)
{
	atomic_fetch_add_explicit(&sd_tsan_fence_word, 0, memory_order_seq_cst);
}
#endif
