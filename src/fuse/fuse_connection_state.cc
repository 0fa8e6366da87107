// FuseConnectionState <-> JSON (see fuse_connection_state.h).
#include "fuse/fuse_connection_state.h"

#include <nlohmann/json.hpp>

#include "common/json_fields.h"

namespace granary {

std::string FuseConnectionStateToJson(const FuseConnectionState& st) {
  const FuseSessionInfo& s = st.session;
  nlohmann::json j = {
      {"version", kFuseConnectionStateVersion},
      {"kernel_major", s.kernel_major},
      {"kernel_minor", s.kernel_minor},
      {"kernel_flags", s.kernel_flags},
      {"granted_flags", s.granted_flags},
      {"max_pages", s.max_pages},
      {"max_readahead", s.max_readahead},
      {"passthrough", s.passthrough},
      {"transport", FuseTransportName(s.transport)},
      {"threads", s.threads},
      {"passthrough_note", s.passthrough_note},
      {"read_mode", FuseReadModeName(st.read_mode)},
      {"dev", st.dev},
      {"device_fds", st.device_fds},
  };
  return j.dump();
}

Result<FuseConnectionState> FuseConnectionStateFromJson(std::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgument("fuse connection state: not a JSON object");
  JsonFields in(j, "fuse connection state");
  int version = 0;
  in.Require("version", version);
  RETURN_IF_ERROR(in.status());
  if (version != kFuseConnectionStateVersion) {
    return InvalidArgument("fuse connection state: version " + std::to_string(version) +
                           " is not " + std::to_string(kFuseConnectionStateVersion));
  }
  FuseConnectionState st;
  FuseSessionInfo& s = st.session;
  std::string transport, read_mode;
  in.Require("kernel_major", s.kernel_major);
  in.Require("kernel_minor", s.kernel_minor);
  in.Require("kernel_flags", s.kernel_flags);
  in.Require("granted_flags", s.granted_flags);
  in.Require("max_pages", s.max_pages);
  in.Require("max_readahead", s.max_readahead);
  in.Require("passthrough", s.passthrough);
  in.Require("transport", transport);
  in.Require("threads", s.threads);
  in.Require("passthrough_note", s.passthrough_note);
  in.Require("read_mode", read_mode);
  in.Require("dev", st.dev);
  in.Require("device_fds", st.device_fds);
  RETURN_IF_ERROR(in.status());
  Result<FuseTransport> t = ParseFuseTransport(transport);
  if (!t.ok() || *t == FuseTransport::kAuto) {
    return InvalidArgument("fuse connection state: bad transport '" + transport + "'");
  }
  s.transport = *t;
  Result<FuseReadMode> m = ParseFuseReadMode(read_mode);
  if (!m.ok()) return InvalidArgument("fuse connection state: bad read_mode '" + read_mode + "'");
  st.read_mode = *m;
  if (s.kernel_major != 7 || s.max_pages == 0 || st.device_fds == 0 || st.device_fds > 1024) {
    return InvalidArgument("fuse connection state: implausible values (protocol " +
                           std::to_string(s.kernel_major) + "." + std::to_string(s.kernel_minor) +
                           ", " + std::to_string(st.device_fds) + " fds)");
  }
  return st;
}

}  // namespace granary
