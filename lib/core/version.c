/* SPDX-License-Identifier: MIT */
#include <shootdown/version.h>

unsigned sd_api_version(void)
{
	return SD_API_VERSION;
}
