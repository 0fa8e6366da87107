// Control-socket request parsing (see control_request.h).
#include "control/control_request.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace granary {
namespace {

using nlohmann::json;

// The "threads" field, clamped to -1..kMaxLoadThreads+1. Wider than int first
// (and a float clamped as a float) so a huge number is refused, not wrapped.
int LoadThreads(const json& req) {
  constexpr int64_t kLo = -1, kHi = int64_t{kMaxLoadThreads} + 1;
  auto it = req.find("threads");
  if (it != req.end() && it->is_number_float()) {
    return static_cast<int>(std::clamp<double>(it->get<double>(), kLo, kHi));
  }
  const int64_t threads = req.value("threads", int64_t{kDefaultOriginConcurrency});
  return static_cast<int>(std::clamp<int64_t>(threads, kLo, kHi));
}

// The fields of a load; throws json::exception on a field of the wrong type.
void ParseLoadFields(const json& req, ControlRequest& out) {
  LoadRequest& r = out.load;
  r.path = req.value("path", std::string());
  r.threads = LoadThreads(req);
  r.check_only = req.value("check", false);
  if (auto it = req.find("list"); it != req.end())
    r.list_lines = it->get<std::vector<std::string>>();
  out.list_file = req.value("list_file", std::string());
  out.background = req.value("background", false);
}

}  // namespace

Result<ControlRequest> ParseControlRequest(std::string_view line) {
  json req = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded() || !req.is_object()) {
    return InvalidArgument("malformed request: not a JSON object");
  }
  auto v = req.find("v");
  if (v == req.end() || !v->is_number_integer() || v->get<int64_t>() != kControlProtocolVersion) {
    // A nested value is named by its type: dumping it recurses once per level.
    std::string shown = v == req.end()       ? std::string("(none)")
                        : v->is_structured() ? std::string(v->type_name())
                                             : v->dump();
    return InvalidArgument("unsupported protocol version " + shown +
                           "; this daemon speaks version 1");
  }
  auto op_field = req.find("op");
  if (op_field == req.end() || !op_field->is_string()) {
    return InvalidArgument("malformed request: \"op\" must be a string");
  }
  const std::string& op = op_field->get_ref<const std::string&>();
  ControlRequest out;
  if (op == "status") {
    out.op = ControlOp::kStatus;
  } else if (op == "cluster_status") {
    out.op = ControlOp::kClusterStatus;
  } else if (op == "cancel") {
    out.op = ControlOp::kCancel;
  } else if (op == "sync") {
    out.op = ControlOp::kSync;
  } else if (op == "drain") {
    out.op = ControlOp::kDrain;
  } else if (op == "load") {
    out.op = ControlOp::kLoad;
    try {
      ParseLoadFields(req, out);
    } catch (const json::exception& e) {
      return InvalidArgument(std::string("bad request fields: ") + e.what());
    }
  } else {
    return InvalidArgument("unknown op '" + op +
                           "' (expected status, cluster_status, load, cancel, sync or drain)");
  }
  return out;
}

}  // namespace granary
