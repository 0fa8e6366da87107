// ReplaceFileContents: the one way Granary replaces a small file (state,
// metadata, pid and journal files) so that a reader or a crash sees either the
// old contents or the new, never a part: the text goes to PATH.tmp, is
// fsynced when it must survive a power loss, and is renamed over PATH.
//
// Thread safety: no shared state; two writers of one path must not overlap
// (they share PATH.tmp).
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "granary/status.h"

namespace granary {

struct ReplaceFileOptions {
  // fsync PATH.tmp before the rename: the new contents survive a power loss
  // once this returns (the rename itself is as durable as the directory).
  bool durable = false;
  // Permission bits of a newly created PATH.tmp (the umask applies).
  mode_t mode = 0644;
};

// Replaces the contents of `path` with `text`. An error names the file and
// leaves `path` as it was (PATH.tmp removed).
Status ReplaceFileContents(const std::string& path, std::string_view text,
                           ReplaceFileOptions options = {});

}  // namespace granary
