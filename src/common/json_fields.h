// JsonFields: reading the fields of one JSON object into a struct -- the
// stats codecs (EngineStats, StoreStats, FuseStats, ClusterStats), a
// dataset's status, a held FUSE connection's state -- with one error per
// object that names the object and the field.
//
//   JsonFields in(j, "engine stats");
//   in.Get("reads", s.reads);
//   in.Get("origin_latency_buckets", s.origin_latency_buckets);
//   RETURN_IF_ERROR(in.status());
//
// A missing field leaves its value as it was (the struct's default): a stats
// file written by an older version lacks newer counters; Require() refuses it. A field of another
// type -- a string for a count, a negative or fractional count, an array of
// the wrong length -- is InvalidArgument; after the first error Get() does
// nothing.
//
// Thread safety: a value used by one thread; `j` must outlive it.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "granary/status.h"

namespace granary {

// One uint64_t counter of a stats struct S and its JSON name. A codec lists
// its counters once in a table of these; both directions read the table.
template <typename S>
struct JsonCounter {
  const char* name;
  uint64_t S::*member;
};

// Writes every counter of `table` from `s` into the object `j`.
template <typename S, size_t N>
void PutCounters(nlohmann::json& j, const S& s, const std::array<JsonCounter<S>, N>& table) {
  for (const JsonCounter<S>& c : table) j[c.name] = s.*c.member;
}

class JsonFields {
 public:
  // `what` names the object in errors ("engine stats"). A `j` that is not an
  // object is an error at once.
  JsonFields(const nlohmann::json& j, std::string what) : j_(j), what_(std::move(what)) {
    if (!j_.is_object()) status_ = InvalidArgument(what_ + ": not a JSON object");
  }

  // Reads field `name` into `out` if present and not null. T: bool, an
  // integer type, double, std::string, std::vector<uint64_t>,
  // std::vector<std::string>, std::array<uint64_t, N>,
  // std::map<std::string, uint64_t>.
  template <typename T>
  void Get(const char* name, T& out) {
    if (!status_.ok()) return;
    auto it = j_.find(name);
    if (it == j_.end() || it->is_null()) return;
    if (!Read(*it, out)) {
      status_ = InvalidArgument(what_ + ": field '" + name + "' has the wrong type or length");
    }
  }

  // As Get, for a field every writer has always written: a missing one is
  // InvalidArgument ("field 'name' is missing").
  template <typename T>
  void Require(const char* name, T& out) {
    if (status_.ok() && !j_.contains(name)) {
      status_ = InvalidArgument(what_ + ": field '" + name + "' is missing");
    }
    Get(name, out);
  }

  // Reads every counter of `table` into `s` (PutCounters' inverse).
  template <typename S, size_t N>
  void GetCounters(S& s, const std::array<JsonCounter<S>, N>& table) {
    for (const JsonCounter<S>& c : table) Get(c.name, s.*c.member);
  }

  // Field `name` when present (an object is checked by its own JsonFields),
  // else null.
  const nlohmann::json* Find(const char* name) const {
    if (!status_.ok()) return nullptr;
    auto it = j_.find(name);
    return it == j_.end() ? nullptr : &*it;
  }

  // Records an error found by the caller (e.g. a bad enum name); the first
  // error wins.
  void Fail(const std::string& message) {
    if (status_.ok()) status_ = InvalidArgument(what_ + ": " + message);
  }

  const Status& status() const { return status_; }

 private:
  template <typename T>
  static bool Read(const nlohmann::json& v, T& out) {
    if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) return false;
      out = v.get<bool>();
    } else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) {
      if (v.is_number_unsigned()) {
        const uint64_t u = v.get<uint64_t>();
        if (u > std::numeric_limits<T>::max()) return false;
        out = static_cast<T>(u);
      } else if (v.is_number_integer()) {
        const int64_t i = v.get<int64_t>();
        if (i < 0 || static_cast<uint64_t>(i) > std::numeric_limits<T>::max()) return false;
        out = static_cast<T>(i);
      } else {
        return false;
      }
    } else if constexpr (std::is_integral_v<T>) {
      if (!v.is_number_integer()) return false;
      const int64_t i = v.get<int64_t>();
      if (i < std::numeric_limits<T>::min() || i > std::numeric_limits<T>::max()) return false;
      out = static_cast<T>(i);
    } else if constexpr (std::is_same_v<T, double>) {
      if (!v.is_number()) return false;
      out = v.get<double>();
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (!v.is_string()) return false;
      out = v.get<std::string>();
    } else if constexpr (std::is_same_v<T, std::vector<uint64_t>> ||
                         std::is_same_v<T, std::vector<std::string>>) {
      if (!v.is_array()) return false;
      T items(v.size());
      for (size_t i = 0; i < v.size(); ++i) {
        if (!Read(v[i], items[i])) return false;
      }
      out = std::move(items);
    } else if constexpr (std::is_same_v<T, std::map<std::string, uint64_t>>) {
      if (!v.is_object()) return false;
      std::map<std::string, uint64_t> items;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!Read(it.value(), items[it.key()])) return false;
      }
      out = std::move(items);
    } else {
      // std::array<uint64_t, N>: exactly N items (bucket counts of fixed bounds).
      if (!v.is_array() || v.size() != std::size(out)) return false;
      T items{};
      for (size_t i = 0; i < items.size(); ++i) {
        if (!Read(v[i], items[i])) return false;
      }
      out = items;
    }
    return true;
  }

  const nlohmann::json& j_;
  std::string what_;
  Status status_;
};

}  // namespace granary
