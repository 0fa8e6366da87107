// FuseConnectionState <-> JSON (see fuse_connection_state.h).
#include "fuse/fuse_connection_state.h"

#include <nlohmann/json.hpp>

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

namespace {

template <typename T>
Status Take(const nlohmann::json& j, const char* name, T& out) {
  auto it = j.find(name);
  if (it == j.end()) return InvalidArgument(std::string("fuse connection state: no ") + name);
  try {
    out = it->get<T>();
  } catch (const nlohmann::json::exception&) {
    return InvalidArgument(std::string("fuse connection state: bad ") + name);
  }
  return Status::Ok();
}

}  // namespace

Result<FuseConnectionState> FuseConnectionStateFromJson(std::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgument("fuse connection state: not a JSON object");
  int version = 0;
  RETURN_IF_ERROR(Take(j, "version", version));
  if (version != kFuseConnectionStateVersion) {
    return InvalidArgument("fuse connection state: version " + std::to_string(version) +
                           " is not " + std::to_string(kFuseConnectionStateVersion));
  }
  FuseConnectionState st;
  FuseSessionInfo& s = st.session;
  std::string transport, read_mode;
  RETURN_IF_ERROR(Take(j, "kernel_major", s.kernel_major));
  RETURN_IF_ERROR(Take(j, "kernel_minor", s.kernel_minor));
  RETURN_IF_ERROR(Take(j, "kernel_flags", s.kernel_flags));
  RETURN_IF_ERROR(Take(j, "granted_flags", s.granted_flags));
  RETURN_IF_ERROR(Take(j, "max_pages", s.max_pages));
  RETURN_IF_ERROR(Take(j, "max_readahead", s.max_readahead));
  RETURN_IF_ERROR(Take(j, "passthrough", s.passthrough));
  RETURN_IF_ERROR(Take(j, "transport", transport));
  RETURN_IF_ERROR(Take(j, "threads", s.threads));
  RETURN_IF_ERROR(Take(j, "passthrough_note", s.passthrough_note));
  RETURN_IF_ERROR(Take(j, "read_mode", read_mode));
  RETURN_IF_ERROR(Take(j, "dev", st.dev));
  RETURN_IF_ERROR(Take(j, "device_fds", st.device_fds));
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
