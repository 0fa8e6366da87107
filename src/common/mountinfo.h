// The mount table of this process's mount namespace (/proc/self/mountinfo),
// parsed once for everyone who asks "is this a mount point, and of what?".
//
// Each line: "id parent major:minor root mountpoint options [optional...] -
// fstype source superoptions"; paths are octal-escaped ("\040" = space).
//
// Thread safety: free functions without shared state.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace granary {

struct MountEntry {
  std::string mountpoint;  // unescaped
  std::string fstype;      // "ext4", "fuse.granary", ...
  std::string source;      // unescaped
};

// The entries of mountinfo `text`, in its order (a later entry on the same
// mount point is mounted on top of an earlier one). Malformed lines are skipped.
std::vector<MountEntry> ParseMountinfo(std::string_view text);

// ParseMountinfo of /proc/self/mountinfo; empty when it cannot be read.
std::vector<MountEntry> ReadMountinfo();

// Undoes mountinfo's octal escapes ("\040" = space, "\134" = backslash).
std::string UnescapeMountinfo(std::string_view field);

}  // namespace granary
