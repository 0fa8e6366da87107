#include "reader/file_list.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace granary::bench {

namespace fs = std::filesystem;

Result<std::vector<std::string>> ListTree(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return NotFound(dir + ": not a directory");
  std::vector<std::string> files;
  auto it =
      fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) files.push_back(it->path().string());
  }
  if (ec) return IoError(dir + ": cannot walk: " + ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

Result<std::vector<std::string>> ReadListFile(const std::string& list_path, std::string root) {
  std::ifstream in(list_path);
  if (!in) return NotFound(list_path + ": cannot open list file");
  if (root.empty()) root = fs::path(list_path).parent_path().string();
  if (root.empty()) root = ".";
  std::vector<std::string> files;
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    std::istringstream fields(line);
    std::string path;
    if (!(fields >> path)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank line
      return InvalidArgument(list_path + ":" + std::to_string(n) + ": no path in '" + line + "'");
    }
    files.push_back(path.front() == '/' ? path : root + "/" + path);
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace granary::bench
