// DirectFiles: how an attached client (src/api/client.cc) opens complete
// small cache files the way the daemon would hand them out, without asking
// it (docs/api.md, "Reads without the daemon"). It resolves the path in the
// daemon's snapshot file, mapped read-only here, and opens the object's cache
// file by the store's layout, trusting it only under the store's rule
// (Store::FileLayout): a small object, the right size, changed since the
// store opened. Anything else is left to the daemon.
//
// Thread safety: immutable once made; every method may be called from many
// threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "api/cache_files.h"
#include "meta/snapshot.h"

namespace granary {

class DirectFiles {
 public:
  // From hello's "direct" object; null when it is absent or the snapshot
  // cannot be mapped here (another user's files, a removed file).
  static std::unique_ptr<DirectFiles> FromHello(const nlohmann::json& j);
  DirectFiles(const DirectFiles&) = delete;
  DirectFiles& operator=(const DirectFiles&) = delete;
  ~DirectFiles();  // closes the fan-out directories

  uint64_t version() const { return snap_->version(); }
  // The entry of `rel` in this snapshot (null when it has none).
  std::optional<EntryView> Find(const std::string& rel) const;
  // The open cache file of `rel` and its inode, or a null file.
  FilePtr Open(const std::string& rel, uint64_t* ino) const;

 private:
  DirectFiles() = default;
  std::unique_ptr<Snapshot> snap_;
  std::string dataset_;
  uint64_t block_size_ = 0;
  std::vector<std::string> tiers_;
  int64_t trusted_since_ns_ = 0;
  std::vector<int> subdirs_;  // O_PATH descriptors: tier t, fan-out s at t * 256 + s
};

}  // namespace granary
