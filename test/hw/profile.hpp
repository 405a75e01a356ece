// SPDX-License-Identifier: MIT
// A machine profile written for one test: every cost 0 unless named, so
// the clocks a test reads can only come from the charges it chose.
#pragma once

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <unistd.h>

#include <gtest/gtest.h>

#include "common.hpp"

extern "C" {
#include "time/params.h"
}

namespace sdtest {

inline const char *const kParams[] = {
#define KEY(id, key, what) key,
	SD_MODEL_PARAM_LIST(KEY)
#undef KEY
};
inline const char *const kDistParams[] = {
#define KEY(id, key, what) key,
	SD_MODEL_DIST_PARAM_LIST(KEY)
#undef KEY
};
inline const char *const kDists[] = SD_MODEL_DIST_KEYS;

// The "mechanisms" of a test profile by default: all of them, so that every
// strategy runs on it.
inline const std::string kAllMechanisms =
	"\"ipi\": \"test\", \"tlbi_broadcast\": \"test\", \"invlpgb\": \"test\"";

// The text inside a test profile's "features": range TLBIs and KPTI as
// given (the default: the emulator's own, range TLBIs and no KPTI).
inline std::string features_text(bool range_tlbi, bool kpti)
{
	return std::string("\"range_tlbi\": {\"present\": ") + (range_tlbi ? "true" : "false") +
	       ", \"source\": \"test\"}, \"kpti\": {\"present\": " + (kpti ? "true" : "false") +
	       ", \"source\": \"test\"}";
}

// A profile: every cost 0 unless @costs names it ("line_transfer.llc" for
// a distance class). @drop leaves one key out ("mechanisms" too); @extra
// adds raw JSON text inside "costs"; @mechanisms is the text inside
// "mechanisms"; @features the text inside "features".
struct Profile {
	std::string path;
	Profile(const std::string &topology, const std::map<std::string, double> &costs,
		const std::string &drop = "", const std::string &extra = "",
		const std::string &mechanisms = kAllMechanisms,
		const std::string &features = features_text(true, false))
	{
		char tmpl[] = "/tmp/sd-test-profile-XXXXXX";
		int fd = mkstemp(tmpl);
		EXPECT_GE(fd, 0);
		close(fd);
		path = std::string(tmpl) + ".json";
		std::rename(tmpl, path.c_str());
		std::ofstream f(path);
		f << "{\"format\": \"shootdown-profile-1\", \"name\": \"test\",\n"
		  << " \"topology\": {\"synthetic\": \"" << topology << "\", \"source\": \"test\"},\n";
		if (drop != "mechanisms")
			f << " \"mechanisms\": {" << mechanisms << "},\n";
		if (drop != "features")
			f << " \"features\": {" << features << "},\n";
		f << " \"costs\": {\n";
		bool first = true;
		auto sep = [&]() { f << (first ? "  " : ", \n  "); first = false; };
		for (const char *k : kParams) {
			if (drop == k)
				continue;
			auto it = costs.find(k);
			sep();
			f << "\"" << k << "\": {\"ns\": " << (it == costs.end() ? 0.0 : it->second)
			  << ", \"source\": \"test\"}";
		}
		for (const char *k : kDistParams) {
			if (drop == k)
				continue;
			sep();
			f << "\"" << k << "\": {";
			for (unsigned d = 0; d < 4; d++) {
				auto it = costs.find(std::string(k) + "." + kDists[d]);
				f << (d ? ", " : "") << "\"" << kDists[d] << "\": {\"ns\": "
				  << (it == costs.end() ? 0.0 : it->second) << ", \"source\": \"test\"}";
			}
			f << "}";
		}
		if (!extra.empty()) {
			sep();
			f << extra;
		}
		f << "}}\n";
	}
	~Profile() { std::remove(path.c_str()); }
};


// A machine of @cpus on profile @p, in strict modelled time (one CPU at a
// time, lowest clock first), @window_ns set for the tests that show strict
// mode does not use it.
inline sd_machine_config strict_config(unsigned cpus, const char *strategy, const Profile &p,
				       uint64_t window_ns = 0)
{
	sd_machine_config c = config(cpus, strategy);
	c.profile = p.path.c_str();
	c.model_window_ns = window_ns;
	c.flags |= SD_MACHINE_MODEL_STRICT;
	return c;
}

}  // namespace sdtest
