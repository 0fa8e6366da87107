#include "common/units.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>

namespace granary {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Splits "1.5TiB" into 1.5 and "tib". Returns false when no number leads.
bool SplitNumber(std::string_view text, double* number, std::string* unit) {
  size_t i = 0;
  bool digits = false;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    digits |= std::isdigit(static_cast<unsigned char>(text[i])) != 0;
    ++i;
  }
  if (!digits) return false;
  std::string num(text.substr(0, i));
  if (std::count(num.begin(), num.end(), '.') > 1) return false;
  *number = std::stod(num);
  *unit = Lower(Trim(text.substr(i)));
  return true;
}

}  // namespace

Result<uint64_t> ParseSize(std::string_view text) {
  std::string_view t = Trim(text);
  double number = 0;
  std::string unit;
  auto bad = [&] {
    return InvalidArgument("size '" + std::string(text) +
                           "': expected a number with an optional unit such as 500G, 1.5TiB, "
                           "200MiB (a plain integer is bytes)");
  };
  if (!SplitNumber(t, &number, &unit)) return bad();
  if (!unit.empty() && unit.back() == 'b') unit.pop_back();
  if (!unit.empty() && unit.back() == 'i') unit.pop_back();
  double mult = 1;
  if (unit.empty()) {
    mult = 1;
  } else if (unit.size() == 1) {
    switch (unit[0]) {
      case 'k': mult = 1024.0; break;
      case 'm': mult = 1024.0 * 1024; break;
      case 'g': mult = 1024.0 * 1024 * 1024; break;
      case 't': mult = 1024.0 * 1024 * 1024 * 1024; break;
      case 'p': mult = 1024.0 * 1024 * 1024 * 1024 * 1024; break;
      default: return bad();
    }
  } else {
    return bad();
  }
  double bytes = number * mult;
  if (bytes >= 1.8e19) return bad();
  if (unit.empty() && number != std::floor(number)) return bad();
  return static_cast<uint64_t>(std::llround(bytes));
}

namespace {

// `bytes` in the largest binary unit below it, with `decimals` digits and
// `gap` between the number and the unit; whole bytes without decimals.
std::string SizeIn(uint64_t bytes, int decimals, const char* gap) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[48];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%llu%sB", static_cast<unsigned long long>(bytes), gap);
  } else {
    std::snprintf(buf, sizeof buf, "%.*f%s%s", decimals, v, gap, kUnits[u]);
  }
  return buf;
}

}  // namespace

std::string FormatSize(uint64_t bytes) { return SizeIn(bytes, 1, " "); }

std::string FluidSize(uint64_t bytes) { return SizeIn(bytes, 2, ""); }

std::string FormatPercent(double ratio) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", ratio * 100.0);
  return buf;
}

Result<std::chrono::nanoseconds> ParseDuration(std::string_view text) {
  std::string_view t = Trim(text);
  double number = 0;
  std::string unit;
  auto bad = [&] {
    return InvalidArgument("duration '" + std::string(text) +
                           "': expected a number with a unit such as 10ms, 500us, 2s, 1m, 2h "
                           "(a plain number is seconds)");
  };
  if (!SplitNumber(t, &number, &unit)) return bad();
  double ns_per = 0;
  if (unit.empty() || unit == "s" || unit == "sec")
    ns_per = 1e9;
  else if (unit == "ms")
    ns_per = 1e6;
  else if (unit == "us" || unit == "µs")
    ns_per = 1e3;
  else if (unit == "ns")
    ns_per = 1;
  else if (unit == "m" || unit == "min")
    ns_per = 60e9;
  else if (unit == "h")
    ns_per = 3600e9;
  else
    return bad();
  return std::chrono::nanoseconds(static_cast<int64_t>(std::llround(number * ns_per)));
}

std::string FormatDuration(std::chrono::nanoseconds d) {
  double ns = static_cast<double>(d.count());
  char buf[32];
  if (ns < 1e3)
    std::snprintf(buf, sizeof buf, "%.0fns", ns);
  else if (ns < 1e6)
    std::snprintf(buf, sizeof buf, "%.1fus", ns / 1e3);
  else if (ns < 1e9)
    std::snprintf(buf, sizeof buf, "%.1fms", ns / 1e6);
  else if (ns < 60e9)
    std::snprintf(buf, sizeof buf, "%.1fs", ns / 1e9);
  else {
    long long s = static_cast<long long>(ns / 1e9);
    std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  }
  return buf;
}

std::vector<std::string> SplitList(std::string_view text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view item = text.substr(start, end - start);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (!item.empty()) out.emplace_back(item);
    start = end + 1;
  }
  return out;
}

}  // namespace granary
