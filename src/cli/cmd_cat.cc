// `granary cat URI...`: writes objects to stdout, byte-exact, one after another.
//
// Each object is read in chunks of --chunk-size (default 8 MiB); the next
// chunk is fetched while the current one is written, so a remote object
// streams at close to the origin's single-stream rate with bounded memory.
// An object that shrinks while being read is an error (the output would be
// silently truncated otherwise).
#include <unistd.h>

#include <cerrno>
#include <future>
#include <vector>

#include "cli/commands.h"
#include "common/units.h"

namespace granary::cli {
namespace {

struct CatFlags {
  std::vector<std::string> uris;
  std::string chunk_size = "8MiB";
};

Status WriteAll(std::span<const char> data) {
  while (!data.empty()) {
    ssize_t n = ::write(STDOUT_FILENO, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("stdout", errno);
    }
    data = data.subspan(static_cast<size_t>(n));
  }
  return Status::Ok();
}

Status CatOne(const Location& loc, uint64_t chunk) {
  UnderStorage& ufs = *loc.ufs;
  const std::string& key = loc.uri.key;
  ASSIGN_OR_RETURN(ObjectInfo info, ufs.Stat(key));
  std::vector<char> bufs[2] = {std::vector<char>(std::min(chunk, info.size)),
                               std::vector<char>(std::min(chunk, info.size))};
  auto fetch = [&](int which, uint64_t offset) {
    size_t len = static_cast<size_t>(std::min<uint64_t>(chunk, info.size - offset));
    return std::async(std::launch::async, [&ufs, &key, &bufs, which, offset, len] {
      return ufs.Read(key, offset, std::span<char>(bufs[which].data(), len));
    });
  };
  uint64_t offset = 0;
  int cur = 0;
  std::future<Result<size_t>> pending;
  if (info.size > 0) pending = fetch(cur, 0);
  while (offset < info.size) {
    Result<size_t> got = pending.get();
    if (!got.ok()) return got.status();
    size_t want = static_cast<size_t>(std::min<uint64_t>(chunk, info.size - offset));
    if (*got < want) {
      return IoError("object changed while reading: ended at byte " +
                     std::to_string(offset + *got) + " of " + std::to_string(info.size));
    }
    uint64_t next = offset + *got;
    if (next < info.size) pending = fetch(1 - cur, next);
    Status w = WriteAll(std::span<const char>(bufs[cur].data(), *got));
    if (!w.ok()) {
      if (pending.valid()) pending.wait();  // the fetch borrows bufs; let it finish
      return w;
    }
    offset = next;
    cur = 1 - cur;
  }
  return Status::Ok();
}

int RunCat(const CatFlags& flags, const GlobalFlags& globals) {
  auto chunk = ParseSize(flags.chunk_size);
  if (!chunk.ok() || *chunk == 0) {
    return ReportError("--chunk-size", chunk.ok() ? InvalidArgument("must be > 0") : chunk.status());
  }
  for (const std::string& text : flags.uris) {
    auto loc = OpenLocation(text, globals);
    if (!loc.ok()) return ReportError(text, loc.status());
    if (Status s = CatOne(*loc, *chunk); !s.ok()) return ReportError(text, s);
  }
  return kExitOk;
}

}  // namespace

void RegisterCatCommand(CLI::App& app, CliContext& ctx) {
  auto flags = std::make_shared<CatFlags>();
  CLI::App* cmd = app.add_subcommand("cat", "Write objects to stdout, byte-exact");
  cmd->add_option("URI", flags->uris, "s3://bucket/key, http(s)://host/path, file:///path or a path")
      ->required();
  cmd->add_option("--chunk-size", flags->chunk_size, "Bytes per read request (e.g. 8MiB)")
      ->capture_default_str();
  cmd->callback([&ctx, flags] {
    ctx.action = [&ctx, flags] { return RunCat(*flags, ctx.flags); };
  });
}

}  // namespace granary::cli
