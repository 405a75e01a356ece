/* SPDX-License-Identifier: MIT */
/*
 * A machine's shootdown mechanisms (<shootdown/model.h>, enum
 * sd_mechanism): what its strategy needs, what its profile's machine has,
 * and what a run used, read from the counters the event funnel keeps.
 */
#include <errno.h>
#include <stdio.h>

#include <shootdown/model.h>
#include <shootdown/stats.h>

#include "../core/error.h"
#include "../hw/machine_state.h"
#include "../mm/flush_ops.h"

const char *sd_mechanism_name(unsigned mechanism)
{
	switch (mechanism) {
	case SD_MECH_IPI:
		return "ipi";
	case SD_MECH_TLBI_BROADCAST:
		return "tlbi_broadcast";
	case SD_MECH_INVLPGB:
		return "invlpgb";
	case SD_MECH_RAR:
		return "rar";
	case SD_MECH_SBI:
		return "sbi";
	}
	sd_fail(-EINVAL, "sd_mechanism_name: 0x%x is not one enum sd_mechanism bit", mechanism);
	return NULL;
}

/* The counter that counts a mechanism's uses: an IPI sent, a broadcast
 * TLBI issued, an INVLPGB issued. */
static enum sd_stat use_counter(unsigned mechanism)
{
	switch (mechanism) {
	case SD_MECH_TLBI_BROADCAST:
		return SD_STAT_TLBI_OP;
	case SD_MECH_INVLPGB:
		return SD_STAT_INVLPGB;
	case SD_MECH_RAR:
		return SD_STAT_RAR_SENT;
	case SD_MECH_SBI:
		return SD_STAT_SBI_ECALL;
	default:
		return SD_STAT_IPI_SENT;
	}
}

static unsigned used_mechanisms(const struct sd_machine *m)
{
	struct sd_stats st = SD_STATS_INIT;
	unsigned used = 0;

	if (sd_stats_snapshot(m, &st))
		return 0;
	for (unsigned bit = 1; bit & SD_MECH_ALL; bit <<= 1)
		if (st.counter[use_counter(bit)])
			used |= bit;
	return used;
}

static void write_note(const struct sd_machine *m, struct sd_mechanism_info *info)
{
	size_t at = 0, len = sizeof(info->note);
	unsigned unused = info->primary & ~info->used;

	for (unsigned bit = 1; bit & SD_MECH_ALL && at < len; bit <<= 1)
		if (info->missing & bit)
			at += snprintf(info->note + at, len - at, "%s%s: not in profile '%s', "
				       "charged at its costs there (SD_MACHINE_ANY_MECHANISM)",
				       at ? "; " : "", sd_mechanism_name(bit), m->model.name);
	for (unsigned bit = 1; bit & SD_MECH_ALL && at < len; bit <<= 1)
		if (unused & bit)
			at += snprintf(info->note + at, len - at, "%s%s never used%s%s",
				       at ? "; " : "", sd_mechanism_name(bit),
				       m->ops->unused_why ? ": " : "",
				       m->ops->unused_why ? m->ops->unused_why : "");
}

int sd_machine_mechanisms(const struct sd_machine *m, struct sd_mechanism_info *info)
{
	if (!m || !info)
		return sd_fail(-EINVAL, "sd_machine_mechanisms: NULL argument");
	if (info->size != sizeof(*info))
		return sd_fail(-EINVAL, "sd_machine_mechanisms: size %zu is not sizeof(struct "
			       "sd_mechanism_info) (%zu): start from SD_MECHANISM_INFO_INIT",
			       info->size, sizeof(*info));
	info->needed = m->mechanisms_needed;
	info->primary = m->mechanisms_primary;
	info->in_profile = m->model.on ? m->model.mechanisms : SD_MECH_ALL;
	info->missing = m->mechanisms_missing;
	info->used = used_mechanisms(m);
	info->note[0] = '\0';
	write_note(m, info);
	return 0;
}
