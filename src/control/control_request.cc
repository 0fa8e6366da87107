// Control-socket request parsing (see control_request.h).
#include "control/control_request.h"

#include <algorithm>
#include <fstream>
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
  out.progress = req.value("progress", false);
}

}  // namespace

bool IsControlOp(std::string_view op) {
  return op == "status" || op == "cluster_status" || op == "cancel" || op == "sync" ||
         op == "drain" || op == "load";
}

Result<ControlRequest> ParseControlRequest(std::string_view line) {
  return ControlRequestFromJson(json::parse(line, nullptr, /*allow_exceptions=*/false));
}

Result<ControlRequest> ControlRequestFromJson(const json& req) {
  if (req.is_discarded() || !req.is_object()) {
    return InvalidArgument("malformed request: not a JSON object");
  }
  // "v" is optional: the API's clients send it in their hello only.
  auto v = req.find("v");
  if (v != req.end() && (!v->is_number_integer() || v->get<int64_t>() != kControlProtocolVersion)) {
    // A nested value is named by its type: dumping it recurses once per level.
    std::string shown = v->is_structured() ? std::string(v->type_name()) : v->dump();
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

Status ReadLoadListFile(const std::string& list_file, LoadRequest& request) {
  std::ifstream in(list_file);
  if (!in) return InvalidArgument("cannot read list file " + list_file);
  for (std::string line; std::getline(in, line);) request.list_lines.push_back(std::move(line));
  if (request.list_lines.empty()) return InvalidArgument("list file " + list_file + " is empty");
  return Status::Ok();
}

}  // namespace granary
