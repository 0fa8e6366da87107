#include "common/mountinfo.h"

#include <fstream>
#include <sstream>

namespace granary {

std::string UnescapeMountinfo(std::string_view f) {
  auto octal = [](char c) { return c >= '0' && c <= '7'; };
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] == '\\' && i + 3 < f.size() && octal(f[i + 1]) && octal(f[i + 2]) && octal(f[i + 3])) {
      out += static_cast<char>((f[i + 1] - '0') * 64 + (f[i + 2] - '0') * 8 + (f[i + 3] - '0'));
      i += 3;
    } else {
      out += f[i];
    }
  }
  return out;
}

std::vector<MountEntry> ParseMountinfo(std::string_view text) {
  std::vector<MountEntry> out;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    std::vector<std::string_view> fields;
    for (std::string_view rest = line; !rest.empty();) {
      const size_t sp = rest.find(' ');
      if (sp != 0) fields.push_back(rest.substr(0, sp));
      if (sp == std::string_view::npos) break;
      rest.remove_prefix(sp + 1);
    }
    // The optional fields end at "-"; fstype and source follow it.
    size_t dash = 6;
    while (dash < fields.size() && fields[dash] != "-") ++dash;
    if (fields.size() < 5 || dash + 1 >= fields.size()) continue;
    out.push_back(MountEntry{
        .mountpoint = UnescapeMountinfo(fields[4]),
        .fstype = std::string(fields[dash + 1]),
        .source = dash + 2 < fields.size() ? UnescapeMountinfo(fields[dash + 2]) : std::string()});
  }
  return out;
}

std::vector<MountEntry> ReadMountinfo() {
  std::ifstream in("/proc/self/mountinfo");
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseMountinfo(ss.str());
}

}  // namespace granary
