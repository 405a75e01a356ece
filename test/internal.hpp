// SPDX-License-Identifier: MIT
// Helpers that look inside the library (internal headers), for the tests
// that must see a TLB's contents rather than infer them from counters.
#pragma once

#include <atomic>
#include <cstdint>

extern "C" {
#include "hw/tlb.h"
}

namespace sdtest {

// Whether @tlb holds an entry for (@vpn, @tag) in L1 or L2. Read-only, from
// another thread while the owner is idle.
inline bool tlb_holds(const sd_tlb *tlb, uint64_t vpn, uint16_t tag)
{
	uint64_t want = sd_tlb_tag(vpn, tag);
	for (uint64_t i = 0; i <= tlb->l1_mask; i++)
		if (tlb->l1[i].tag.load(std::memory_order_relaxed) == want)
			return true;
	for (uint64_t i = 0; i < ((tlb->set_mask + 1) << tlb->ways_shift); i++)
		if (tlb->l2[i].tag.load(std::memory_order_relaxed) == want)
			return true;
	return false;
}

} // namespace sdtest
