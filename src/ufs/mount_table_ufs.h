// MountTableUfs: several sources shown as one tree, each under its own path
// (Fluid's Dataset with several mounts: s3://a/train under /train and
// pvc://nfs/val under /val). Keys are "<mount path>/<key inside the mount>";
// a mount with the empty path is the whole tree (it must then be the only one).
//
//   mount {path "imagenet", ufs s3://bucket, prefix "data/imagenet/"}
//   key "imagenet/train/n01/x.jpg"  ->  s3://bucket key "data/imagenet/train/n01/x.jpg"
//
// Listing walks the mounts in path order; a prefix above several mounts
// lists them all (with a delimiter, each mount's first path component is a
// common prefix). Continuation tokens are "<mount index>:<child token>".
// SetMounts() swaps the table (Fluid rewrote runtime.json); a listing in
// progress then continues over the new table, which only a `sync` relies on,
// and it lists from the start.
//
// Thread safety: every method may be called from any thread; mu_ guards the
// table pointer only, calls into the mounts run unlocked.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "ufs/ufs.h"

namespace granary {

struct UfsMount {
  // Where the mount appears: "imagenet", "data/val" ("" = the whole tree).
  // No leading or trailing slash.
  std::string path;
  std::shared_ptr<UnderStorage> ufs;
  // The key prefix inside `ufs` the mount shows: "" or ending in '/'.
  std::string prefix;
};

class MountTableUfs final : public UnderStorage {
 public:
  // `root` names the whole tree in messages ("fluid://default/imagenet").
  // InvalidArgument (from Make) when two mounts overlap or one has no ufs.
  static Result<std::unique_ptr<MountTableUfs>> Make(std::string root,
                                                     std::vector<UfsMount> mounts);

  // Replaces the table; same checks as Make. Reads already running finish
  // against the mount they started on.
  Status SetMounts(std::vector<UfsMount> mounts);
  std::vector<UfsMount> mounts() const;

  std::string Root() const override { return root_; }
  void Abort() override;                    // aborts every mounted connector
  bool BoundsRequestTime() const override;  // every mounted connector does

 protected:
  Result<ListPage> ListImpl(const ListRequest& request) override;
  Result<ObjectInfo> StatImpl(std::string_view key) override;
  Result<ObjectInfo> WriteImpl(std::string_view key, int fd, uint64_t size,
                               const WriteOptions& options) override;
  Status DeleteImpl(std::string_view key) override;
  Result<std::unique_ptr<StreamingUpload>> StartUploadImpl(std::string_view key, int fd,
                                                           const WriteOptions& options) override;
  Status AbortUploadImpl(std::string_view key, std::string_view upload_id) override;
  Result<size_t> ReadImpl(std::string_view key, uint64_t offset, std::span<char> out,
                          std::string_view if_match, std::optional<uint64_t>* xxh3) override;

 private:
  using Table = std::vector<UfsMount>;  // sorted by path
  explicit MountTableUfs(std::string root) : root_(std::move(root)) {}
  static Result<std::shared_ptr<const Table>> Check(std::vector<UfsMount> mounts);
  std::shared_ptr<const Table> table() const;
  // The mount holding `key` and the key inside it; null when none does.
  const UfsMount* Route(const Table& t, std::string_view key, std::string* inner) const;

  const std::string root_;
  mutable Mutex mu_;  // guards table_ (the pointer; tables are immutable)
  std::shared_ptr<const Table> table_ GUARDED_BY(mu_);
};

}  // namespace granary
