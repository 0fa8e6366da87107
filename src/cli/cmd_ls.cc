// `granary ls URI [-r] [-l]`: lists objects like `aws s3 ls`.
//
// A URI naming an object lists that object; otherwise it names a directory
// (a trailing slash is implied): without -r its files and sub-directories
// ("sub/") are shown relative to it, with -r every object below it is shown by
// full key (an absolute path for file://). -l adds mtime (ISO-8601, UTC) and
// size in bytes. Output streams page by page, in key order.
#include <cstdio>
#include <iostream>

#include "cli/commands.h"

namespace granary::cli {
namespace {

struct LsFlags {
  std::string uri;
  bool recursive = false;
  bool long_format = false;
};

// Prints listing lines, counting them.
class LsPrinter {
 public:
  LsPrinter(const Uri& uri, const LsFlags& flags, std::string base)
      : uri_(uri), flags_(flags), base_(std::move(base)) {}

  void Object(const ObjectInfo& o) {
    std::string name = flags_.recursive ? DisplayKey(uri_, o.key) : o.key.substr(base_.size());
    if (flags_.long_format) {
      std::printf("%-20s %12llu %s\n", FormatIsoTime(o.mtime_ns).c_str(),
                  static_cast<unsigned long long>(o.size), name.c_str());
    } else {
      std::printf("%s\n", name.c_str());
    }
    ++lines_;
  }

  void Prefix(const std::string& prefix) {
    std::string name = prefix.substr(base_.size());
    if (flags_.long_format) {
      std::printf("%-20s %12s %s\n", "", "PRE", name.c_str());
    } else {
      std::printf("%s\n", name.c_str());
    }
    ++lines_;
  }

  int lines() const { return lines_; }

 private:
  const Uri& uri_;
  const LsFlags& flags_;
  std::string base_;  // key prefix stripped from names when not recursive
  int lines_ = 0;
};

// Streams every page of the listing of `prefix`.
Status ListPrefix(UnderStorage& ufs, const std::string& prefix, bool recursive, LsPrinter& out) {
  ListRequest req{.prefix = prefix, .delimiter = recursive ? "" : "/"};
  do {
    ASSIGN_OR_RETURN(ListPage page, ufs.List(req));
    for (const auto& p : page.common_prefixes) out.Prefix(p);
    for (const auto& o : page.objects) out.Object(o);
    req.continuation_token = page.next_token;
  } while (!req.continuation_token.empty());
  return Status::Ok();
}

// True when `dir` ("a/b/", with its slash) is a common prefix in the listing of
// its parent: the directory exists even though nothing is below it.
Result<bool> DirectoryExists(UnderStorage& ufs, const std::string& dir) {
  ListRequest req{.prefix = dir.substr(0, dir.size() - 1), .delimiter = "/"};
  do {
    ASSIGN_OR_RETURN(ListPage page, ufs.List(req));
    for (const auto& p : page.common_prefixes) {
      if (p == dir) return true;
    }
    bool passed = (!page.objects.empty() && page.objects.back().key > dir) ||
                  (!page.common_prefixes.empty() && page.common_prefixes.back() > dir);
    if (passed) return false;
    req.continuation_token = page.next_token;
  } while (!req.continuation_token.empty());
  return false;
}

Status RunLs(const Location& loc, const LsFlags& flags) {
  UnderStorage& ufs = *loc.ufs;
  const std::string& key = loc.uri.key;
  if (key.empty() || key.ends_with('/')) {
    LsPrinter out(loc.uri, flags, key);
    return ListPrefix(ufs, key, flags.recursive, out);
  }
  // Either an object or a directory.
  auto info = ufs.Stat(key);
  if (info.ok()) {
    size_t slash = key.rfind('/');
    LsPrinter out(loc.uri, flags, slash == std::string::npos ? "" : key.substr(0, slash + 1));
    out.Object(*info);
    return Status::Ok();
  }
  if (info.status().code() != Code::kNotFound) return info.status();
  std::string dir = key + "/";
  LsPrinter out(loc.uri, flags, dir);
  RETURN_IF_ERROR(ListPrefix(ufs, dir, flags.recursive, out));
  if (out.lines() > 0) return Status::Ok();
  ASSIGN_OR_RETURN(bool exists, DirectoryExists(ufs, dir));
  if (!exists) return NotFound("no such object or prefix");
  return Status::Ok();
}

}  // namespace

void RegisterLsCommand(CLI::App& app, CliContext& ctx) {
  auto flags = std::make_shared<LsFlags>();
  CLI::App* cmd = app.add_subcommand("ls", "List objects under a URI (s3://, file://, a path)");
  cmd->add_option("URI", flags->uri, "s3://bucket/prefix, file:///path or a path")->required();
  cmd->add_flag("-r,--recursive", flags->recursive, "List every object below, by full key");
  cmd->add_flag("-l,--long", flags->long_format, "Show mtime (ISO-8601, UTC) and size in bytes");
  cmd->callback([&ctx, flags] {
    ctx.action = [&ctx, flags] {
      auto loc = OpenLocation(flags->uri, ctx.flags);
      if (!loc.ok()) return ReportError(flags->uri, loc.status());
      Status s = RunLs(*loc, *flags);
      std::fflush(stdout);
      if (!s.ok()) return ReportError(flags->uri, s);
      return kExitOk;
    };
  });
}

}  // namespace granary::cli
