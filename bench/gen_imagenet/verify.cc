#include "gen_imagenet/verify.h"

#include <turbojpeg.h>
#include <xxhash.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <unordered_set>

namespace granary::bench {
namespace {

namespace fs = std::filesystem;
constexpr size_t kMaxProblems = 20;

void Problem(VerifyReport& r, std::string line) {
  if (r.problems.size() < kMaxProblems) r.problems.push_back(std::move(line));
}

struct ListEntry {
  std::string path;
  std::string wnid;
  uint32_t label = 0;
};

// Parses train_list.txt into entries; malformed lines become problems.
Result<std::vector<ListEntry>> ReadList(const std::string& list_path, VerifyReport& report) {
  std::ifstream in(list_path);
  if (!in) return NotFound(list_path + ": cannot open");
  std::vector<ListEntry> entries;
  std::string line;
  for (uint64_t n = 1; std::getline(in, line); ++n) {
    std::istringstream fields(line);
    ListEntry e;
    long long label = -1;
    std::string extra;
    if (!(fields >> e.path >> label) || (fields >> extra) || label < 0) {
      Problem(report, list_path + ":" + std::to_string(n) + ": want '<path> <label>': " + line);
      continue;
    }
    fs::path p(e.path);
    auto it = p.begin();
    if (std::distance(p.begin(), p.end()) != 3 || *it != "train" || p.extension() != ".JPEG") {
      Problem(report, list_path + ":" + std::to_string(n) + ": want train/<wnid>/<name>.JPEG");
      continue;
    }
    e.wnid = (++it)->string();
    e.label = static_cast<uint32_t>(label);
    entries.push_back(std::move(e));
  }
  return entries;
}

// Labels must be the rank of the folder name among all folders.
void CheckLabels(const std::vector<ListEntry>& entries, VerifyReport& report) {
  std::map<std::string, std::set<uint32_t>> labels_of;
  for (const auto& e : entries) labels_of[e.wnid].insert(e.label);
  report.classes = labels_of.size();
  uint32_t rank = 0;
  for (const auto& [wnid, labels] : labels_of) {
    if (labels.size() != 1 || *labels.begin() != rank) {
      Problem(report, "class " + wnid + ": label(s) " + std::to_string(*labels.begin()) +
                          (labels.size() > 1 ? " and others" : "") + ", want " +
                          std::to_string(rank));
    }
    ++rank;
  }
}

bool Decodes(tjhandle h, const std::string& bytes, std::string* why) {
  int w = 0, h_px = 0, subsamp = 0, colorspace = 0;
  auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  if (tjDecompressHeader3(h, data, bytes.size(), &w, &h_px, &subsamp, &colorspace) != 0) {
    *why = tjGetErrorStr2(h);
    return false;
  }
  std::vector<unsigned char> rgb(static_cast<size_t>(w) * h_px * 3);
  if (tjDecompress2(h, data, bytes.size(), rgb.data(), w, 0, h_px, TJPF_RGB, 0) != 0) {
    *why = tjGetErrorStr2(h);
    return false;
  }
  return true;
}

}  // namespace

Result<VerifyReport> VerifyDataset(const std::string& root, uint64_t decode_every) {
  VerifyReport report;
  ASSIGN_OR_RETURN(auto entries, ReadList(root + "/train_list.txt", report));
  CheckLabels(entries, report);

  std::error_code ec;
  std::set<std::string> on_disk;
  for (auto it = fs::recursive_directory_iterator(root + "/train", ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file()) on_disk.insert(fs::relative(it->path(), root).string());
  }
  if (ec) return IoError(root + "/train: cannot walk: " + ec.message());

  tjhandle h = tjInitDecompress();
  if (h == nullptr) return Internal("tjInitDecompress failed");
  std::unordered_set<uint64_t> hashes;
  std::vector<uint64_t> sizes;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    if (on_disk.erase(e.path) == 0) {
      Problem(report, e.path + ": listed but missing (or listed twice)");
      continue;
    }
    std::ifstream in(root + "/" + e.path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    sizes.push_back(bytes.size());
    if (!hashes.insert(XXH3_64bits(bytes.data(), bytes.size())).second) ++report.duplicates;
    if (decode_every > 0 && i % decode_every == 0) {
      std::string why;
      if (Decodes(h, bytes, &why)) {
        ++report.decoded;
      } else {
        Problem(report, e.path + ": does not decode: " + why);
      }
    }
  }
  tjDestroy(h);
  for (const auto& extra : on_disk) Problem(report, extra + ": on disk but not in train_list.txt");
  if (report.duplicates > 0) {
    Problem(report, std::to_string(report.duplicates) + " files duplicate another file's bytes");
  }
  report.sizes = Summarize(std::move(sizes));
  return report;
}

}  // namespace granary::bench
